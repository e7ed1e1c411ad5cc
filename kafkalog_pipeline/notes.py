"""A nightly run's note: the audit's verdict beside the run's state in Airflow's own views.

Airflow shows a DAG run's note in the grid, the run's header and the runs list. When a run of
the nightly DAG ends, its note is set to a summary of what the audit said and what became of
the run, one paragraph each:

* ``DQ: passed`` / ``DQ: 6 warned: offset_gaps payments-1, …`` /
  ``DQ: failed: crc orders-0 — not published`` (``check_quality``'s verdict, its XCom return
  value; for a night the plan did not audit, the plan's ``verdict`` XCom in the same shape,
  else why there was no audit: ``DQ: not audited: decode_chunk failed: StorageError: … —
  not published``, the cause the crashed task pushed, one line, ``tasks.CAUSE_KEY``);
* ``DQ: no snapshot for 2026-11-25 — no segment under s3://…/2026-11-25/ …; when the copy
  arrives, clear this run …`` for a run none of whose nights had a snapshot (the plan's
  ``no_snapshot`` XCom; the plan failed, or skipped where the policy accepts it);
* ``Not published: run(s) R published the same offsets first; rerun as rerun__…`` when the
  audit passed and publish was refused for a conflict (or failed otherwise);
* ``Rerun of R, whose publish met a conflict`` on the rerun the DAG triggered;
* ``Not published: rejected by U in Required actions …`` / ``Approved by U in Required
  actions …`` for a warned night under ``publish_warned: approve``, ``Not published: the
  policy publishes no warned night …`` under ``never`` (``kafkalog_pipeline.gate``), and
  ``…; its rerun was rejected by U …`` after a conflict under ``publish_conflict: approve``.
* ``Sinks: orders-lake fail: delivered 25, missing 1, duplicates 1, leaks 1, lag 4; …`` after
  the verdict of an audit that reconciled sinks (the DAG param ``sinks``: the verdict's
  ``sinks``, :func:`spark_jobs.reconcile.summary.line` of each).

Lines a person wrote are kept, after ours. While a run runs again (cleared) its note keeps
only what is still true (the ``Rerun of`` line).

Who writes it: a task cannot (the Task SDK gives tasks no metadata-DB access, and the
Execution API has no call that sets the note of a running run: it takes a note only when a
run is triggered, ``TriggerDAGRunPayload.note``). So a listener does it, the way Airflow
itself sets a note, in the session that changes the run's state: ``DagRun.update_state``
calls ``on_dag_run_success`` / ``on_dag_run_failed`` (``notify_dagrun_state_changed``) in the
scheduler, and in the process of ``dag.test()`` (``make demo``); the scheduler calls
``on_dag_run_running`` when it starts a queued run. The plugin
``plugins/kafkalog_notes_plugin.py`` registers this module (``AirflowPlugin.listeners``).
"""

from __future__ import annotations

import logging

from airflow.listeners import hookimpl

from . import settings
from .tasks import (CAUSE_KEY, CONFLICT_KEY, DECODE_TASK, GATE_KEY, GATE_TASK, LATE_COPY,
                    NO_SNAPSHOT_KEY, PLAN_TASK, PUBLISH_TASK, QUALITY_TASK, RERUN_OF, RERUN_TASK,
                    SKIP_REASON_KEY, VERDICT_KEY, rerun_id, summed_states)

log = logging.getLogger(__name__)

#: the first words of every paragraph this module writes; a note's other paragraphs are kept
DQ, NOT_PUBLISHED, RERUN, APPROVED, SINKS = (
    "DQ: ", "Not published: ", "Rerun of ", "Approved by ", "Sinks: ")
OURS = (DQ, NOT_PUBLISHED, RERUN, APPROVED, SINKS)
#: how many "check topic-partition" items a verdict paragraph names before "… +N more"
MAX_ITEMS = 6
#: Airflow's limit on a note (``DagRunNote.content``, String(1000))
MAX_NOTE = 1000
#: the tasks before the audit, in order: the first that failed is why there is no verdict
BEFORE_AUDIT = (PLAN_TASK, DECODE_TASK)


# ------------------------------------------------------------------ what it says (pure)
def items(results: dict) -> str:
    """``offset_gaps payments-1, crc orders-0, … +3 more`` of ``{check: [tp, ...]}``."""
    pairs = [f"{check} {part}" for check in sorted(results) for part in results[check]]
    shown = ", ".join(pairs[:MAX_ITEMS])
    return shown + (f", … +{len(pairs) - MAX_ITEMS} more" if len(pairs) > MAX_ITEMS else "")


def failing(verdict: dict) -> bool:
    return bool(verdict.get("fail"))


def verdict_line(verdict: dict) -> str:
    """The verdict's paragraph: failed (and not published), warned, or passed."""
    if failing(verdict):
        return f"{DQ}failed: {items(verdict.get('failed') or {})} — not published"
    if verdict.get("warn"):
        return f"{DQ}{verdict['warn']} warned: {items(verdict.get('warned') or {})}"
    return f"{DQ}passed"


def sinks_line(verdict: dict) -> str | None:
    """``Sinks: orders-lake fail: delivered 25, missing 1, duplicates 1, leaks 1, lag 4; …``:
    each reconciled sink's totals (the verdict's ``sinks``); None without any."""
    from spark_jobs.reconcile.summary import brief

    sinks = verdict.get("sinks")
    if not isinstance(sinks, dict) or not sinks:
        return None
    said = [brief(name, t) for name, t in sorted(sinks.items()) if isinstance(t, dict)]
    return f"{SINKS}{'; '.join(said)}" if said else None


def no_snapshot_line(no_snapshot: dict, verdict: dict | None) -> str:
    """The paragraph of a run none of whose nights had a snapshot: which nights, where the
    plan looked, how the policy graded it and what to do when the copy arrives."""
    graded = ("failed" if verdict and failing(verdict) else
              "warned" if verdict and verdict.get("warn") else "accepted by the policy")
    line = (f"{DQ}no snapshot for {', '.join(no_snapshot.get('nights') or ['?'])} — no "
            f"segment under {', '.join(no_snapshot.get('where') or ['?'])} (snapshot_missing "
            f"{graded}); nothing read, nothing published")
    return line if graded == "accepted by the policy" else f"{line}. {LATE_COPY}"


def provenance_line(rerun_of: str) -> str:
    """The paragraph of a rerun (also its note when it is triggered)."""
    return f"{RERUN}{rerun_of}, whose publish met a conflict"


def gate_line(gate: dict | None, gate_state: str | None) -> str | None:
    """What the human gate (``kafkalog_pipeline.gate``) did with a warned night, where it did
    more than let it through."""
    decision, by = (gate or {}).get("decision"), (gate or {}).get("by") or "?"
    if decision == "rejected":
        return (f"{NOT_PUBLISHED}rejected by {by} in Required actions (publish_warned: "
                "approve); main unchanged, the run's branch kept")
    if decision == "unanswered":
        return (f"{NOT_PUBLISHED}nobody answered in Required actions in time (publish_warned: "
                "approve); main unchanged, the run's branch kept")
    if decision == "never" or (gate_state == "failed" and decision is None):
        return (f"{NOT_PUBLISHED}the policy publishes no warned night (publish_warned: "
                "never); main unchanged")
    if decision == "approved":
        return f"{APPROVED}{by} in Required actions (publish_warned: approve)"
    return None


def not_published_line(*, run_id: str, conflict: dict | None, rerun_state: str | None,
                       rerun_of: str | None, rerun_gate: dict | None = None) -> str:
    """Why a run whose audit passed was not published, and what became of it."""
    if not conflict:
        return f"{NOT_PUBLISHED}publish failed (see its log)"
    said = (f"{NOT_PUBLISHED}run(s) {', '.join(conflict.get('runs') or ['?'])} published the "
            "same offsets first")
    if (rerun_gate or {}).get("decision") == "rejected":
        return (f"{said}; its rerun was rejected by {rerun_gate.get('by') or '?'} in Required "
                "actions (publish_conflict: approve): not rerun")
    if (rerun_gate or {}).get("decision") == "unanswered":
        return (f"{said}; nobody answered whether to rerun it in time (publish_conflict: "
                "approve): not rerun")
    if rerun_of:
        return f"{said}; not rerun again: clear this run to run it again"
    if rerun_state == "success":
        return f"{said}; rerun as {rerun_id(run_id)}"
    if rerun_state == "skipped":  # the rerun existed already: triggered by an earlier try
        return f"{said}; rerun as {rerun_id(run_id)} (triggered before)"
    return f"{said}; its rerun was not triggered (see task {RERUN_TASK})"


def stopped_task(states: dict[str, str]) -> str | None:
    """The first task before or of the audit that failed (or could not run): why a run
    has no verdict of this attempt."""
    return next((t for t in (*BEFORE_AUDIT, QUALITY_TASK)
                 if states.get(t) in ("failed", "upstream_failed")), None)


def stopped_line(task: str, cause: str | None) -> str:
    """``DQ: not audited: decode_chunk failed: StorageError: … — not published``: the task
    that stopped the run, and its cause where it pushed one (``tasks.CAUSE_KEY``)."""
    return f"{DQ}not audited: {task} failed{': ' + cause if cause else ''} — not published"


def run_note(*, run_id: str, states: dict[str, str], finished: bool, verdict: dict | None = None,
             conflict: dict | None = None, skip_reason: str | None = None,
             rerun_of: str | None = None, cause: str | None = None,
             no_snapshot: dict | None = None, gate: dict | None = None,
             rerun_gate: dict | None = None) -> str | None:
    """The paragraphs this module writes on run ``run_id`` (None: none).

    ``states``: task id -> state (:data:`.tasks.WORST_FIRST` of a mapped task's); ``finished``:
    the run has ended (else only the ``Rerun of`` paragraph, which stays true while it
    runs); ``verdict``: the audit's (or the plan's); ``conflict``: what publish met
    (``tasks.conflict_summary``); ``skip_reason``: why the plan skipped the night;
    ``rerun_of``: the run this one reruns; ``cause``: why the task that stopped the run
    crashed (its one line); ``no_snapshot``: the plan found no snapshot of any of the run's
    nights (:data:`.tasks.NO_SNAPSHOT_KEY`); ``gate`` / ``rerun_gate``: what the publish gate /
    the conflict's rerun pushed (:data:`.tasks.GATE_KEY`).
    """
    lines = []
    if finished:
        if no_snapshot:
            lines.append(no_snapshot_line(no_snapshot, verdict))
        elif verdict is not None:
            lines.append(verdict_line(verdict))
            if (sinks := sinks_line(verdict)) is not None:
                lines.append(sinks)
            gated = gate_line(gate, states.get(GATE_TASK)) if not failing(verdict) else None
            if gated:
                lines.append(gated)
            if not failing(verdict) and states.get(PUBLISH_TASK) == "failed":
                lines.append(not_published_line(run_id=run_id, conflict=conflict,
                                                rerun_state=states.get(RERUN_TASK),
                                                rerun_of=rerun_of, rerun_gate=rerun_gate))
        elif states.get(PLAN_TASK) == "skipped":
            lines.append(f"{DQ}not audited: {skip_reason or 'the plan skipped the night'}")
        else:
            stopped = stopped_task(states)
            if stopped is not None:
                lines.append(stopped_line(stopped, cause))
    if rerun_of:
        lines.append(provenance_line(rerun_of))
    return "\n\n".join(lines) or None


def merge(existing: str | None, ours: str | None) -> str | None:
    """``ours`` first, then the paragraphs of ``existing`` that this module did not write."""
    theirs = [p for p in (existing or "").split("\n\n")
              if p.strip() and not p.lstrip().startswith(OURS)]
    text = "\n\n".join([*([ours] if ours else []), *theirs])
    if len(text) > MAX_NOTE:
        text = text[:MAX_NOTE - 1] + "…"
    return text or None


# ------------------------------------------------------------------ reading and writing the run
def gather(dag_run, session) -> dict:
    """What :func:`run_note` needs, read from the metadata DB in the caller's ``session``:
    the run's task states, and the XComs its tasks pushed (only of tasks that ran this
    time: a task cleared and then skipped keeps its earlier XComs)."""
    from ._airflow import xcom_value

    states = summed_states((ti.task_id, ti.state)
                           for ti in dag_run.get_task_instances(session=session))

    def xcom(task_id: str, key: str):
        return xcom_value(session, dag_run.dag_id, dag_run.run_id, task_id, key)

    verdict = xcom(QUALITY_TASK, "return_value") \
        if states.get(QUALITY_TASK) in ("success", "failed") else None
    planned = states.get(PLAN_TASK) in ("success", "skipped", "failed")
    if verdict is None and planned:
        verdict = xcom(PLAN_TASK, VERDICT_KEY)  # a night the plan did not audit
    stopped = stopped_task(states)
    cause = xcom(stopped, CAUSE_KEY) if stopped and states.get(stopped) == "failed" else None
    no_snapshot = xcom(PLAN_TASK, NO_SNAPSHOT_KEY) if planned else None
    return {
        "cause": cause if isinstance(cause, str) else None,
        "run_id": dag_run.run_id,
        "states": states,
        "verdict": verdict if isinstance(verdict, dict) else None,
        "conflict": xcom(PUBLISH_TASK, CONFLICT_KEY)
        if states.get(PUBLISH_TASK) == "failed" else None,
        "skip_reason": xcom(PLAN_TASK, SKIP_REASON_KEY)
        if states.get(PLAN_TASK) == "skipped" else None,
        "rerun_of": (dag_run.conf or {}).get(RERUN_OF),
        "no_snapshot": no_snapshot if isinstance(no_snapshot, dict) else None,
        "gate": xcom(GATE_TASK, GATE_KEY) if states.get(GATE_TASK) in ("success", "failed")
        else None,
        "rerun_gate": xcom(RERUN_TASK, GATE_KEY) if states.get(RERUN_TASK) == "skipped"
        else None,
    }


def set_note(dag_run, text: str | None) -> None:
    """Set the run's note as Airflow's API does (``patch_dag_run_note``), in the run's
    session: committed with the state change that called the listener."""
    if text == dag_run.note:
        return
    if text is None:
        dag_run.dag_run_note = None
    elif dag_run.dag_run_note is None:
        dag_run.note = text  # a DagRunNote without a user: written by the pipeline
    else:
        dag_run.dag_run_note.content = text


def annotate(dag_run, *, finished: bool) -> None:
    """Write run ``dag_run``'s note (a nightly run only); never raises."""
    if dag_run.dag_id != settings.NIGHTLY_DAG_ID:
        return
    try:
        from ._airflow import attached_dag_run

        # the run's session; under dag.test() the run's persistent copy in the session
        # dag.test() commits (the object it hands listeners is detached by then)
        session, dag_run = attached_dag_run(dag_run)
        # a run that starts (again) keeps only its "Rerun of": no need to read its tasks
        facts = gather(dag_run, session) if finished else {
            "run_id": dag_run.run_id, "states": {}, "rerun_of": (dag_run.conf or {}).get(RERUN_OF)}
        set_note(dag_run, merge(dag_run.note, run_note(**facts, finished=finished)))
    except Exception:  # a note is not worth a scheduler loop
        log.exception("could not write the note of run %s", dag_run.run_id)


# ------------------------------------------------------------------ Airflow's listener hooks
@hookimpl
def on_dag_run_running(dag_run, msg: str):
    annotate(dag_run, finished=False)


@hookimpl
def on_dag_run_success(dag_run, msg: str):
    annotate(dag_run, finished=True)


@hookimpl
def on_dag_run_failed(dag_run, msg: str):
    annotate(dag_run, finished=True)
