"""Where a DAG run or task instance of the pipeline points to its data-quality report.

- :class:`DataQualityReportLink`: the "Data quality report" button (an operator extra
  link) on the ``check_quality`` task instance: the report page of its run.
- :func:`create_view_app`: the page behind the "Data quality" tabs that the plugin adds
  to every DAG run and task instance (``external_views`` with destination ``dag_run`` /
  ``task_instance``, embedded in the Airflow shell). ``GET /{dag_id}/{run_id}`` redirects
  to the run's report page when ``dq_results`` holds the run (also a night the audit found
  no snapshot of: its ``snapshot_missing`` result, the ``plan`` task's reason beside it,
  :func:`skip_reason`); otherwise it says why there is none, from Airflow's metadata: the
  night was skipped (with the ``plan`` task's reason), the audit has not run yet, or did not
  run because a task before it failed, or the DAG is not one the audit covers. Never a
  report that does not exist.
"""

from __future__ import annotations

import logging
from urllib.parse import quote

from fastapi import Request  # at module level: route annotations are resolved from here

from airflow.sdk import BaseOperatorLink

from kafkalog_pipeline.tasks import PLAN_TASK, QUALITY_TASK
from spark_jobs.storage import run_token

from .app import DAG_IDS, URL_PREFIX

log = logging.getLogger(__name__)

#: the task that runs ``check_quality.py --run-id {{ run_id }}`` in each of ``DAG_IDS``
QUALITY_TASK_ID = QUALITY_TASK
#: where :func:`create_view_app` is mounted on the api-server
VIEW_PREFIX = "/kafkalog-quality-view"
#: the external views' target: the UI fills in the run (and task) it is shown for
VIEW_HREF = VIEW_PREFIX.lstrip("/") + "/{DAG_ID}/{RUN_ID}"


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


# ------------------------------------------------------------ no report: why
_UNFINISHED = {None, "none", "scheduled", "queued", "running", "up_for_retry",
               "up_for_reschedule", "deferred", "restarting", "awaiting_input"}


def no_report_reason(states: dict[str, str | None], skip_reason: str | None,
                     run_exists: bool = True) -> str:
    """Why a run of a pipeline DAG has no report, in one line: ``states`` is
    ``{task_id: state}`` of the run's task instances (mapped ones: the worst)."""
    if not run_exists:
        return "no report: Airflow has no such DAG run"
    plan = states.get(PLAN_TASK)
    if plan == "skipped":
        return "no report: night skipped because " + (
            skip_reason or "the plan task skipped it (no reason recorded)")
    audit = states.get(QUALITY_TASK_ID)
    if audit == "upstream_failed" or audit in _UNFINISHED and any(
            s in ("failed", "upstream_failed") for s in states.values()):
        broken = sorted(t for t, s in states.items() if s == "failed")
        return f"no report: the audit did not run, because {', '.join(broken) or 'an earlier task'} failed"
    if audit in _UNFINISHED:
        return f"no report yet: the audit ({QUALITY_TASK_ID}) has not finished (state {audit or 'none'})"
    if audit == "skipped":
        return "no report: the audit was skipped"
    return (f"no report: the audit ended {audit} without writing results "
            "(see the check_quality task's log)")


def _skip_reason(session, dag_ids, run_id: str) -> str | None:
    """The ``plan`` task's skip reason (XCom ``SKIP_REASON_KEY``) of run ``run_id``, if any."""
    from airflow.models.xcom import XComModel

    from kafkalog_pipeline.tasks import SKIP_REASON_KEY

    row = session.scalars(XComModel.get_many(run_id=run_id, dag_ids=dag_ids, task_ids=PLAN_TASK,
                                             key=SKIP_REASON_KEY, limit=1)).first()
    return XComModel.deserialize_value(row) if row is not None else None


def skip_reason(run_id: str) -> str | None:
    """Why Airflow's ``plan`` task skipped run ``run_id`` of one of ``DAG_IDS`` (e.g. a night
    without a snapshot, which the audit reports as ``snapshot_missing``): shown beside that
    run's report. None where it has none, or no metadata database answers (the report
    served outside Airflow)."""
    try:
        from airflow.utils.session import create_session

        with create_session() as session:
            return _skip_reason(session, list(DAG_IDS), run_id)
    except Exception as err:  # noqa: BLE001 - a secondary line of the page, never its failure
        log.info("no skip reason for %s from Airflow: %s", run_id, err)
        return None


def run_states(dag_id: str, run_id: str) -> tuple[bool, dict[str, str | None], str | None]:
    """From Airflow's metadata DB: whether the run exists, ``{task_id: state}`` of its task
    instances (a mapped task: its worst state) and the plan task's skip reason, if any."""
    from sqlalchemy import select

    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    worst_first = ("failed", "upstream_failed", "running", "queued", "scheduled", "up_for_retry",
                   "up_for_reschedule", "deferred", None, "skipped", "success")
    with create_session() as session:
        exists = session.scalar(select(DagRun.id).where(DagRun.dag_id == dag_id,
                                                        DagRun.run_id == run_id)) is not None
        seen: dict[str, list] = {}
        for task_id, state in session.execute(
                select(TaskInstance.task_id, TaskInstance.state).where(
                    TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id)):
            seen.setdefault(task_id, []).append(
                None if state is None else str(getattr(state, "value", state)))
        states = {task_id: min(found, key=lambda s: worst_first.index(s)
                               if s in worst_first else 0)
                  for task_id, found in seen.items()}
        reason = _skip_reason(session, dag_id, run_id)
    return exists, states, reason


def create_view_app(*, authenticate: bool = True):
    """The FastAPI app behind the "Data quality" tabs (mounted at ``VIEW_PREFIX``)."""
    from fastapi import Depends, FastAPI
    from fastapi.responses import HTMLResponse, RedirectResponse

    from . import app as report_app
    from . import data, pages

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
            found = data.Warehouse(data.warehouse_root()).run(run_token(run_id)) is not None
        except data.WarehouseNotConfigured as err:
            return HTMLResponse(pages.message_page("Data quality", str(err), base), status_code=503)
        if found:
            return RedirectResponse(report_url(run_id), status_code=307)
        exists, states, reason = run_states(dag_id, run_id)
        return HTMLResponse(pages.message_page(
            "Data quality", no_report_reason(states, reason, exists), base), status_code=404)

    return view
