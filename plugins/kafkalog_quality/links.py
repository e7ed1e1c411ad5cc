"""Where a DAG run or task instance of the pipeline points to its data-quality report.

- :class:`DataQualityReportLink`: the "Data quality report" button (an operator extra
  link) on the ``check_quality`` task instance: the report page of its run.
- :func:`create_view_app`: the page behind the "Data quality" tabs that the plugin adds
  to every DAG run and task instance (``external_views`` with destination ``dag_run`` /
  ``task_instance``, embedded in the Airflow shell). ``GET /{dag_id}/{run_id}`` redirects
  to the run's report page when ``dq_results`` holds the run (also a night the audit found
  no snapshot of: its ``snapshot_missing`` result, the ``plan`` task's reason beside it,
  :func:`.dag_runs.skip_reason`); otherwise it says why there is none, from Airflow's metadata: the
  night was skipped (with the ``plan`` task's reason), the audit has not run yet, or did not
  run because a task before it failed, or the DAG is not one the audit covers. Never a
  report that does not exist.
"""

from __future__ import annotations

import logging
from urllib.parse import quote

from fastapi import Request  # at module level: route annotations are resolved from here

from airflow.sdk import BaseOperatorLink

from kafkalog_pipeline._airflow import api_base_url
from kafkalog_pipeline.tasks import QUALITY_TASK
from spark_jobs.storage import run_token

from .app import URL_PREFIX
from .dag_runs import DAG_IDS, no_report_reason, run_states

log = logging.getLogger(__name__)

#: the task that runs ``check_quality.py --run-id {{ run_id }}`` in each of ``DAG_IDS``
QUALITY_TASK_ID = QUALITY_TASK
#: where :func:`create_view_app` is mounted on the api-server
VIEW_PREFIX = "/kafkalog-quality-view"
#: the external views' target: the UI fills in the run (and task) it is shown for
VIEW_HREF = VIEW_PREFIX.lstrip("/") + "/{DAG_ID}/{RUN_ID}"


def report_url(run_id: str) -> str:
    """Where the report of the run ``run_id`` is served (``[api] base_url`` prefixed when set)."""
    return f"{api_base_url()}{URL_PREFIX}/runs/{quote(run_token(run_id))}"


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


def create_view_app(*, authenticate: bool = True):
    """The FastAPI app behind the "Data quality" tabs (mounted at ``VIEW_PREFIX``)."""
    from fastapi import Depends, FastAPI
    from fastapi.responses import HTMLResponse, RedirectResponse

    from . import app as report_app
    from . import pages, repository

    deps = [Depends(report_app.airflow_user)] if authenticate else []
    view = FastAPI(title="kafkalog data quality tabs", dependencies=deps, docs_url=None,
                   redoc_url=None, openapi_url=None)

    @view.exception_handler(report_app.LoginRequired)
    async def _login(request: Request, exc):
        return RedirectResponse(exc.login_url, status_code=307)

    @view.get("/{dag_id}/{run_id}", response_class=HTMLResponse)
    def run_tab(request: Request, dag_id: str, run_id: str):
        base = URL_PREFIX + "/"
        if dag_id not in DAG_IDS:
            return HTMLResponse(pages.message_page(
                "Data quality", f"no report: DAG {dag_id} is not audited by the kafkalog pipeline "
                f"(only {', '.join(DAG_IDS)})", base), status_code=404)
        try:
            wh = repository.Warehouse(repository.warehouse_root())
            found = wh.run(run_token(run_id)) is not None
        except repository.WarehouseNotConfigured as err:
            return HTMLResponse(pages.message_page("Data quality", str(err), base), status_code=503)
        if found:
            return RedirectResponse(report_url(run_id), status_code=307)
        exists, states, reason, cause = run_states(dag_id, run_id)
        return HTMLResponse(pages.message_page(
            "Data quality", no_report_reason(states, reason, exists, cause), base),
            status_code=404)

    return view
