"""Airflow plugin: the "Data quality" view of kafkalog's warehouse (see plugins/README.md)."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from kafkalog_quality.app import URL_PREFIX, create_app
from kafkalog_quality.links import VIEW_HREF, VIEW_PREFIX, DataQualityReportLink, create_view_app

#: the embedded page's route in the UI shell: /plugin/data-quality
URL_ROUTE = "data-quality"


class KafkalogQualityPlugin(AirflowPlugin):
    name = "kafkalog_quality"
    fastapi_apps = [
        {"app": create_app(), "url_prefix": URL_PREFIX, "name": "kafkalog data quality"},
        {"app": create_view_app(), "url_prefix": VIEW_PREFIX, "name": "kafkalog data quality tabs"},
    ]
    # hrefs are relative: the UI resolves them against its <base href>, so a base_url path
    # prefix works; the UI fills in {DAG_ID} and {RUN_ID} of the run or task instance shown
    external_views = [
        {"name": "Data quality", "href": URL_PREFIX.lstrip("/") + "/", "destination": "nav",
         "url_route": URL_ROUTE},
        # a "Data quality" tab on every DAG run and task instance, inside the Airflow shell:
        # that run's report, or why it has none (kafkalog_quality.links.create_view_app)
        {"name": "Data quality", "href": VIEW_HREF, "destination": "dag_run",
         "url_route": URL_ROUTE + "-run"},
        {"name": "Data quality", "href": VIEW_HREF, "destination": "task_instance",
         "url_route": URL_ROUTE + "-task"},
    ]
    global_operator_extra_links = [DataQualityReportLink()]
