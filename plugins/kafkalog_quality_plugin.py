"""Airflow plugin: the "Data quality" view of kafkalog's warehouse (see plugins/README.md)."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from kafkalog_quality.app import URL_PREFIX, create_app
from kafkalog_quality.links import DataQualityReportLink

#: the embedded page's route in the UI shell: /plugin/data-quality
URL_ROUTE = "data-quality"


class KafkalogQualityPlugin(AirflowPlugin):
    name = "kafkalog_quality"
    fastapi_apps = [{"app": create_app(), "url_prefix": URL_PREFIX, "name": "kafkalog data quality"}]
    external_views = [{
        "name": "Data quality",
        # relative: the UI resolves it against its <base href>, so a base_url path prefix works
        "href": URL_PREFIX.lstrip("/") + "/",
        "destination": "nav",
        "url_route": URL_ROUTE,
    }]
    global_operator_extra_links = [DataQualityReportLink()]
