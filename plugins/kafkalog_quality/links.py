"""The "Data quality report" button on the quality task of the pipeline's DAG runs."""

from __future__ import annotations

from urllib.parse import quote

from airflow.sdk import BaseOperatorLink

from spark_jobs.storage import run_token

from .app import DAG_IDS, URL_PREFIX

#: the task that runs ``check_quality.py --run-id {{ run_id }}`` in each of ``DAG_IDS``
QUALITY_TASK_ID = "check_quality"


def report_url(run_id: str) -> str:
    """Where the report of the run ``run_id`` is served (``[api] base_url`` prefixed when set)."""
    from airflow.configuration import conf

    base = (conf.get("api", "base_url", fallback="") or "").rstrip("/")
    return f"{base}{URL_PREFIX}/runs/{quote(run_token(run_id))}"


class DataQualityReportLink(BaseOperatorLink):
    """Links a ``check_quality`` task instance to the data-quality page of its DAG run.

    A global link (every operator has it), so it answers only for ``QUALITY_TASK_ID`` in
    ``DAG_IDS`` and returns "" elsewhere (the UI shows no target for an empty link).
    """

    name = "Data quality report"

    def get_link(self, operator, *, ti_key) -> str:
        if getattr(operator, "task_id", None) != QUALITY_TASK_ID:
            return ""
        dag_id = getattr(operator, "dag_id", None) or getattr(ti_key, "dag_id", None)
        if dag_id not in DAG_IDS:
            return ""
        return report_url(ti_key.run_id)
