"""The human gate before publish, by policy (``expectations/policy.yaml``, issue 46).

``publish_warned`` says what becomes of a night the audit graded ``warn``:

* ``auto`` (the default): published, as a passed night; the gate task succeeds at once.
* ``approve``: the gate task (:class:`PublishGateOperator`, Airflow's ``ApprovalOperator``)
  waits in Airflow's **Required actions** (the task's state ``awaiting_input``: Airflow 3.3
  parks it without a trigger; before 3.3 it was ``deferred``) with the verdict and the
  report's link. *Approve*: publish runs. *Reject*: publish is skipped, ``main`` is unchanged,
  and the run's note says who rejected it (``kafkalog_pipeline.notes``).
* ``never``: the gate fails (no retry), publish does not run, ``main`` is unchanged.

A night that passed, or failed (publish is ``upstream_failed`` then), never waits.

An answer given before Airflow 3.3.2's scheduler has taken the exit of the worker that parked
the gate (the first seconds after the question appeared) is lost by Airflow: it retries the
resumed gate as one killed externally, and the retry asks again (apache/airflow#67287; nothing
is published; dags/README.md, "The human gate before publish").

``publish_conflict`` says the same of a publish refused because another run published the
same offsets first: ``rerun`` (the default) reruns the night at once; ``approve`` makes
``rerun_on_conflict`` ask first (:class:`kafkalog_pipeline.operators.RerunOnConflictOperator`);
rejected, there is no rerun and the note says so.

What a decision was is pushed to XCom (:data:`.tasks.GATE_KEY`: ``{"decision", "by"}``) for
the run's note.
"""

from __future__ import annotations

import logging

from airflow.providers.standard.operators.hitl import ApprovalOperator

from . import settings
from .tasks import GATE_KEY, QUALITY_TASK

log = logging.getLogger(__name__)

#: what the gate does with a night: publish it, ask a person, or refuse it
PUBLISH, ASK, REFUSE = "publish", "ask", "refuse"
#: the decisions pushed under GATE_KEY (unanswered: the response timeout passed)
APPROVED, REJECTED, AUTO, NEVER, UNANSWERED = "approved", "rejected", "auto", "never", "unanswered"
#: the options of the conflict's question (an ApprovalOperator's, so the UI shows the same)
APPROVE, REJECT = ApprovalOperator.APPROVE, ApprovalOperator.REJECT


def decide(publish_warned: str, verdict: dict | None) -> str:
    """What the gate does with a night of ``verdict`` (check_quality's return value) under
    the policy's ``publish_warned``: :data:`PUBLISH`, :data:`ASK` or :data:`REFUSE`."""
    if not verdict or not verdict.get("warn") or verdict.get("fail"):
        return PUBLISH  # passed (a failed audit never reaches the gate)
    return {"auto": PUBLISH, "approve": ASK, "never": REFUSE}[publish_warned]


def warned_items(verdict: dict) -> list[str]:
    """``check (topic-partition, ...)`` per warned check."""
    return [f"{check} ({', '.join(parts)})" for check, parts in
            sorted((verdict.get("warned") or {}).items())]


def question(*, run_id: str, dates: list[str], verdict: dict, report: str) -> tuple[str, str]:
    """The subject and body (Markdown) of the question about a warned night."""
    nights = ", ".join(dates) or "?"
    subject = f"Publish the warned night {nights}?"
    lines = [f"The audit of run `{run_id}` (nights {nights}) **warned**: {verdict.get('warn', 0)} "
             f"warned, {verdict.get('pass', 0)} passed, no failed check "
             "(the policy has `publish_warned: approve`).", "",
             *(f"- {item}" for item in warned_items(verdict)), "",
             f"Report: {report} (the run's *Data quality* tab).", "",
             "**Approve** publishes the night (its branch becomes `main`); **Reject** leaves "
             "`main` unchanged, the run's branch stays for inspection, and the run's note "
             "says it was rejected."]
    return subject, "\n".join(lines)


def conflict_question(*, run_id: str, dates: list[str], conflict: dict, report: str
                      ) -> tuple[str, str]:
    """The subject and body of the question about a publish refused for a conflict."""
    nights = ", ".join(dates) or "?"
    subject = f"Rerun the night {nights}, whose publish met a conflict?"
    body = "\n".join([
        f"The publish of run `{run_id}` was refused: run(s) "
        f"{', '.join(conflict.get('runs') or ['?'])} published offsets of the same "
        f"topic-partitions to `main` first ({conflict.get('table')}: {conflict.get('files')} "
        "files); `main` is unchanged (the policy has `publish_conflict: approve`).",
        "", f"Run: {report}", "",
        "**Approve** reruns the night on a fresh branch (it deduplicates against the new "
        "`main`, is audited and published as any run); **Reject** leaves it unpublished."])
    return subject, body


def responder(event_or_payload: dict) -> str | None:
    """The name of who answered (a HITL response's ``responded_by_user``)."""
    user = event_or_payload.get("responded_by_user")
    if isinstance(user, dict):
        return user.get("name") or user.get("id")
    return None if user is None else str(user)


def answered(event: dict) -> tuple[str, str | None]:
    """``(decision, who)`` of a resumed HITL task's ``event``: :data:`APPROVED`,
    :data:`REJECTED`, or :data:`UNANSWERED` (the scheduler's timeout: an ``error`` event)."""
    if "error" in event:
        return UNANSWERED, None
    chosen = (event.get("chosen_options") or [None])[0]
    return (APPROVED if chosen == APPROVE else REJECTED), responder(event)


class PublishGateOperator(ApprovalOperator):
    """The task between ``check_quality`` and ``publish``: see the module's text. Its
    subject and body are the night's (set when it runs, from the audit's XCom)."""

    ui_color = "#fff4d6"

    def __init__(self, **kwargs) -> None:
        super().__init__(subject="Publish the warned night?", body=None, **kwargs)

    def execute(self, context):
        from spark_jobs.audit.policy import Policy
        from airflow.sdk.exceptions import AirflowFailException

        from ._airflow import dag_run_url
        from .tasks import PLAN_KEY, PLAN_TASK

        ti = context["ti"]
        verdict = ti.xcom_pull(task_ids=QUALITY_TASK)
        policy = Policy.load(settings.get("policy")).publish_warned
        what = decide(policy, verdict)
        if what == PUBLISH:
            log.info("no question: %s (publish_warned: %s)", "the audit warned" if verdict and
                     verdict.get("warn") else "the audit passed", policy)
            ti.xcom_push(key=GATE_KEY, value={"decision": AUTO, "by": None})
            return None
        items = "; ".join(warned_items(verdict))
        if what == REFUSE:
            ti.xcom_push(key=GATE_KEY, value={"decision": NEVER, "by": None})
            raise AirflowFailException(
                f"not published: the audit warned ({items}) and the policy publishes no warned "
                "night (the policy's publish_warned: never); main is unchanged")
        dates = (ti.xcom_pull(task_ids=PLAN_TASK, key=PLAN_KEY) or {}).get("dates") or []
        self.subject, self.body = question(run_id=context["run_id"], dates=dates,
                                           verdict=verdict,
                                           report=dag_run_url(ti.dag_id, context["run_id"]))
        log.info("the audit warned (%s): waiting in Required actions for a person to approve "
                 "or reject publishing (publish_warned: approve)", items)
        return super().execute(context)

    def execute_complete(self, context, event):
        decision, by = answered(event)
        context["ti"].xcom_push(key=GATE_KEY, value={"decision": decision, "by": by})
        log.info("%s%s: %s", decision, f" by {by}" if by else "",
                 "publishing" if decision == APPROVED else "not published, main unchanged")
        return super().execute_complete(context, event)


def gated_conflict() -> bool:
    """Whether the policy has a person approve the rerun after a conflict."""
    from spark_jobs.audit.policy import Policy

    return Policy.load(settings.get("policy")).publish_conflict == "approve"
