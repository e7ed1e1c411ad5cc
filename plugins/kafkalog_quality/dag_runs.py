"""What Airflow knows of a pipeline run, for the report's pages: whether it exists, its task
states, the ``plan`` task's skip reason, and why a run has no report. Read from Airflow's
metadata database through :mod:`kafkalog_pipeline._airflow` (the app and the tabs run inside
the api-server).
"""

from __future__ import annotations

import logging

from kafkalog_pipeline._airflow import run_attempts, run_exists, session, task_states, xcom_value
from kafkalog_pipeline.notes import stopped_task
from kafkalog_pipeline.settings import NIGHTLY_DAG_ID
from kafkalog_pipeline.tasks import (CAUSE_KEY, PLAN_TASK, QUALITY_TASK, SKIP_REASON_KEY,
                                     UNFINISHED, summed_states)

from .model import FAILED, RUNNING, Attempt, superseded

log = logging.getLogger(__name__)

#: the DAGs whose quality task writes dq_results (see plugins/README.md)
DAG_IDS = (NIGHTLY_DAG_ID,)



def no_report_reason(states: dict[str, str | None], skip_reason: str | None,
                     run_exists: bool = True, cause: str | None = None) -> str:
    """Why a run of a pipeline DAG has no report, in one line: ``states`` is
    ``{task_id: state}`` of the run's task instances (mapped ones: the worst); ``cause``:
    the one line the failed task pushed (``tasks.CAUSE_KEY``)."""
    if not run_exists:
        return "no report: Airflow has no such DAG run"
    plan = states.get(PLAN_TASK)
    if plan == "skipped":
        return "no report: night skipped because " + (
            skip_reason or "the plan task skipped it (no reason recorded)")
    audit = states.get(QUALITY_TASK)
    if audit == "upstream_failed" or audit in UNFINISHED and any(
            s in ("failed", "upstream_failed") for s in states.values()):
        broken = sorted(t for t, s in states.items() if s == "failed")
        return (f"no report: the audit did not run, because {', '.join(broken) or 'an earlier task'}"
                f" failed{': ' + cause if cause else ''}")
    if audit in UNFINISHED:
        return f"no report yet: the audit ({QUALITY_TASK}) has not finished (state {audit or 'none'})"
    if audit == "skipped":
        return "no report: the audit was skipped"
    if audit == "failed" and cause:
        return f"no report: the audit crashed: {cause}"
    return (f"no report: the audit ended {audit} without writing results "
            "(see the check_quality task's log)")


def skip_reason(run_id: str) -> str | None:
    """Why Airflow's ``plan`` task skipped run ``run_id`` of one of ``DAG_IDS`` (e.g. a night
    without a snapshot, which the audit reports as ``snapshot_missing``): shown beside that
    run's report. None where it has none, or no metadata database answers (the report
    served outside Airflow)."""
    try:
        with session() as s:
            return xcom_value(s, list(DAG_IDS), run_id, PLAN_TASK, SKIP_REASON_KEY)
    except Exception as err:  # noqa: BLE001 - a secondary line of the page, never its failure
        log.info("no skip reason for %s from Airflow: %s", run_id, err)
        return None


def run_states(dag_id: str, run_id: str) -> tuple[bool, dict[str, str | None], str | None,
                                                  str | None]:
    """From Airflow's metadata DB: whether the run exists, ``{task_id: state}`` of its task
    instances (a mapped task: its worst, :func:`kafkalog_pipeline.tasks.summed_states`), the
    plan task's skip reason and the failed task's cause, if any."""
    with session() as s:
        exists = run_exists(s, dag_id, run_id)
        states = summed_states(task_states(s, dag_id, run_id))
        reason = xcom_value(s, dag_id, run_id, PLAN_TASK, SKIP_REASON_KEY)
        cause = _cause(s, dag_id, run_id, states)
    return exists, states, reason, cause


def _cause(s, dag_id: str, run_id: str, states: dict) -> str | None:
    """The cause the first failed task of the run pushed (before or of the audit), if any."""
    stopped = stopped_task(states)
    if stopped is None or states.get(stopped) != "failed":
        return None
    cause = xcom_value(s, dag_id, run_id, stopped, CAUSE_KEY)
    return cause if isinstance(cause, str) else None


def attempts(runs) -> dict[str, Attempt]:
    """``{token: Attempt}`` of the ``runs`` (:class:`.model.Run`) whose latest attempt in
    Airflow is newer than their results (:func:`.model.superseded`): a re-audit that runs
    or failed. Empty where no metadata database answers (the report served outside
    Airflow): then the results are all there is to show."""
    by_id = {r.run_id: r for r in runs}
    if not by_id:
        return {}
    out = {}
    try:
        with session() as s:
            for dag_id, run_id, state, began in run_attempts(s, DAG_IDS, list(by_id)):
                run = by_id.get(run_id)
                if run is None or state not in ("queued", RUNNING, FAILED):
                    continue
                states = summed_states(task_states(s, dag_id, run_id))
                if not superseded(run.checked_at, began, state, states.get(QUALITY_TASK)):
                    continue
                if state == FAILED:
                    task = stopped_task(states) or next(
                        (t for t, v in sorted(states.items()) if v == "failed"), None)
                    cause = _cause(s, dag_id, run_id, states)
                    out[run.token] = Attempt(FAILED, began, task, cause)
                else:
                    task = next((t for t, v in sorted(states.items()) if v == "running"), None)
                    out[run.token] = Attempt(RUNNING, began, task)
    except Exception as err:  # noqa: BLE001 - the results are shown as they are
        log.info("no attempts from Airflow for %d run(s): %s", len(by_id), err)
        return {}
    return out
