"""Who is told about a night: a notifier on a failed or warned night, a deadline on a night
not published in time (issue 46; dags/README.md "Notifications and deadlines").

- :class:`NightNotifier` is the nightly DAG's ``on_failure_callback`` and
  ``on_success_callback`` (Airflow runs them in the dag-processor, or in the process of
  ``dag.test()``). A failed run is a failed night; a successful run whose verdict warned is a
  warned night; a passed one is told nothing. Which grades notify: the setting ``notify_on``
  (``fail,warn`` by default; empty: none).
- :func:`publish_deadline` is the DAG's Deadline Alert: a run not finished successfully (that
  is, not published) ``KAFKALOG_PUBLISH_DEADLINE_HOURS`` (default 6) after its logical date,
  when its night's snapshot should have landed, calls :func:`night_not_published` in the
  triggerer. Airflow keeps a deadline per DAG run, made with the run
  (``DAGRUN_LOGICAL_DATE`` is a ``DeadlineReference.TYPES.DAGRUN_CREATED`` reference): a
  scheduled run that is created but never starts (queued behind another run, no worker)
  still has it, and a run created after its deadline (a backfill of an old night, the latest
  night after the scheduler was down) misses it at once. A night the scheduler never created
  a run for (``catchup=False`` skips nights missed while it was down) has no deadline at all:
  Airflow evaluates deadlines only for runs that exist.

What is said, whichever notifier: the verdict line (the run's note's ``DQ:`` paragraph, the
one :mod:`.notes` writes) and the link to the run's Data quality page (the plugin's
``report_url``). The notifier is any Airflow notifier class, by dotted name (the setting
``notifier``; default the SMTP provider's ``SmtpNotifier``), built with the keyword arguments
of the setting ``notifier_kwargs`` (a JSON object) over ours; its templated fields see
``kafkalog_subject``, ``kafkalog_message`` and ``kafkalog_report_url`` in their context (the
SMTP default: ``to`` = the setting ``notify_to``, the subject and an HTML body of them).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import re

from airflow.sdk import AsyncCallback, DeadlineAlert, DeadlineReference
from airflow.sdk.bases.notifier import BaseNotifier

from . import settings

log = logging.getLogger(__name__)

SMTP_NOTIFIER = "airflow.providers.smtp.notifications.smtp.SmtpNotifier"
#: the grades a night can be told for (the setting ``notify_on``: a comma-separated subset)
GRADES = ("fail", "warn")
#: a warned verdict line (notes.verdict_line: ``DQ: 3 warned: …``)
WARNED = re.compile(r"DQ: \d+ warned")
#: what the templated fields of the notifier see, beside Airflow's context
SUBJECT, MESSAGE, LINK = "kafkalog_subject", "kafkalog_message", "kafkalog_report_url"
SMTP_HTML = ("<p>{{ kafkalog_message | e }}</p>"
             '<p><a href="{{ kafkalog_report_url }}">Data quality report</a>: '
             "{{ kafkalog_report_url }}</p>")


# ------------------------------------------------------------------ what is said (pure)
def grade(verdict_line: str, *, failed: bool) -> str | None:
    """``fail`` for a failed run, ``warn`` for a successful one that warned, else None."""
    if failed:
        return "fail"
    return "warn" if WARNED.match(verdict_line) else None


def night_message(*, dag_id: str, run_id: str, night: str | None, verdict_line: str,
                  grade_: str, url: str) -> tuple[str, str]:
    """(subject, message) of a failed or warned night."""
    what = "failed" if grade_ == "fail" else "warned"
    subject = f"kafkalog: night {night or '?'} {what} ({dag_id})"
    return subject, f"{verdict_line}\nRun {run_id} of {dag_id}. Report: {url}"


def deadline_message(*, dag_id: str, run_id: str, night: str | None, state: str | None,
                     deadline: str, hours: float, url: str) -> tuple[str, str]:
    """(subject, message) of a night not published by its deadline."""
    subject = f"kafkalog: night {night or '?'} not published by {deadline} ({dag_id})"
    return subject, (f"Night {night or '?'} was not published by {deadline}, {hours:g} h after "
                     f"its snapshot should have landed: run {run_id} of {dag_id} is "
                     f"{state or 'not started'}. Report: {url}")


def first_verdict_paragraph(note: str | None) -> str | None:
    from .notes import DQ

    return next((p.strip() for p in (note or "").split("\n\n") if p.strip().startswith(DQ)),
                None)


# ------------------------------------------------------------------ settings
class NoRecipients(settings.SettingError):
    """The SMTP notifier (the default) has nobody to write to: notifications are off."""


def notify_on() -> set[str]:
    raw = settings.get("notify_on") or ""
    wanted = {g.strip() for g in raw.split(",") if g.strip()}
    unknown = wanted - set(GRADES)
    if unknown:
        raise settings.SettingError(f"kafkalog_notify_on/KAFKALOG_NOTIFY_ON: unknown grade(s) "
                                    f"{sorted(unknown)} (known: {', '.join(GRADES)})")
    return wanted


def notifier_kwargs(path: str) -> dict:
    """Our keyword arguments for notifier class ``path`` under the setting ``notifier_kwargs``."""
    raw = settings.get("notifier_kwargs") or "{}"
    try:
        theirs = json.loads(raw)
    except ValueError as err:
        raise settings.SettingError(f"kafkalog_notifier_kwargs is not JSON: {err}") from None
    if not isinstance(theirs, dict):
        raise settings.SettingError("kafkalog_notifier_kwargs must be a JSON object")
    ours = {}
    if path == SMTP_NOTIFIER:
        to = settings.get("notify_to")
        ours = {"subject": "{{ %s }}" % SUBJECT, "html_content": SMTP_HTML}
        if to:
            ours["to"] = [a.strip() for a in to.split(",") if a.strip()]
        elif "to" not in theirs:
            raise NoRecipients(
                "the SMTP notifier needs recipients: set the Airflow Variable "
                "kafkalog_notify_to or KAFKALOG_NOTIFY_TO (comma-separated addresses)")
    return {**ours, **theirs}


def build_notifier() -> BaseNotifier:
    path = settings.get("notifier") or SMTP_NOTIFIER
    cls = _import(path)
    return cls(**notifier_kwargs(path))


def _import(path: str):
    import importlib

    module, _, name = path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError) as err:
        raise settings.SettingError(f"kafkalog_notifier: cannot import {path!r}: {err}") from None
    if not (isinstance(cls, type) and issubclass(cls, BaseNotifier)):
        raise settings.SettingError(f"kafkalog_notifier: {path} is not an Airflow notifier class")
    return cls


def report_link(run_id: str) -> str:
    """The run's Data quality page (the plugin's address of it)."""
    from kafkalog_quality.links import report_url

    return report_url(run_id)


def _context(base: dict, subject: str, message: str, url: str) -> dict:
    return {**base, SUBJECT: subject, MESSAGE: message, LINK: url}


def _night(dag_run) -> str | None:
    """The night of a run: the UTC date of its logical date (else of its run_after)."""
    get = dag_run.get if isinstance(dag_run, dict) else (lambda k: getattr(dag_run, k, None))
    when = get("logical_date") or get("run_after")
    if isinstance(when, str):
        when = dt.datetime.fromisoformat(when.replace("Z", "+00:00"))
    return when.astimezone(dt.timezone.utc).date().isoformat() if when else None


def night_verdict(context) -> str:
    """The run's verdict line: its note's (the scheduler hands the run, note included, to the
    dag-processor), else made from the audit's or the plan's verdict XCom (``dag.test()``
    gives the callback no note), else why there is none."""
    from .notes import DQ, verdict_line
    from .tasks import PLAN_TASK, QUALITY_TASK, VERDICT_KEY

    line = first_verdict_paragraph(getattr(context.get("dag_run"), "note", None))
    if line:
        return line
    dag_run, run_id = context.get("dag_run"), context.get("run_id")
    dag_id = getattr(dag_run, "dag_id", None) or settings.NIGHTLY_DAG_ID
    try:  # where the metadata DB is at hand (dag.test()): the note as it stands
        from ._airflow import stored_note

        line = first_verdict_paragraph(stored_note(dag_id, run_id))
    except Exception as err:  # no metadata DB in this process
        log.debug("no stored note for %s (%s)", run_id, err)
    if line:
        return line
    ti = context.get("ti")
    try:  # the Task SDK's XCom reads, where this process has a supervisor (the dag-processor)
        verdict = ti.xcom_pull(task_ids=QUALITY_TASK) or ti.xcom_pull(task_ids=PLAN_TASK,
                                                                      key=VERDICT_KEY)
    except Exception as err:
        log.debug("no verdict XCom for %s (%s)", run_id, err)
        verdict = None
    if isinstance(verdict, dict):
        return verdict_line(verdict)
    return f"{DQ}not audited: the run ended {context.get('reason') or 'without a verdict'}"


class NightNotifier:
    """The nightly DAG's run callback: tells the configured notifier of a failed night
    (``failed=True``, the ``on_failure_callback``) or a warned one (the
    ``on_success_callback``, silent for a passed night). A plain callable, not a notifier
    itself: it only decides and words, the configured notifier sends."""

    def __init__(self, *, failed: bool):
        self.failed = failed

    def __repr__(self) -> str:
        return f"NightNotifier(failed={self.failed})"

    def __call__(self, context) -> None:
        line = night_verdict(context)
        graded = grade(line, failed=self.failed)
        if graded is None or graded not in notify_on():
            log.info("night not notified (%s; notify_on=%s)", line, sorted(notify_on()))
            return
        try:
            notifier = build_notifier()
        except NoRecipients as err:
            log.warning("night not notified: %s", err)
            return
        dag_run = context.get("dag_run")
        run_id = context.get("run_id") or getattr(dag_run, "run_id", "?")
        dag_id = getattr(context.get("dag"), "dag_id", None) or settings.NIGHTLY_DAG_ID
        url = report_link(run_id)
        subject, message = night_message(dag_id=dag_id, run_id=run_id, night=_night(dag_run),
                                         verdict_line=line, grade_=graded, url=url)
        # dag.test() hands run callbacks the serialized DAG, which has no template
        # environment: the notifier then renders with its default one
        base = {k: v for k, v in context.items()
                if k != "dag" or hasattr(v, "get_template_env")}
        notifier(_context(base, subject, message, url))
        log.info("notified %s: %s", type(notifier).__name__, subject)


# ------------------------------------------------------------------ the deadline
def deadline_hours() -> float:
    raw = settings.parse_time_setting("publish_deadline_hours")
    try:
        hours = float(raw)
    except ValueError:
        raise settings.SettingError(
            f"KAFKALOG_PUBLISH_DEADLINE_HOURS must be a number, not {raw!r}") from None
    if hours <= 0:
        raise settings.SettingError(f"KAFKALOG_PUBLISH_DEADLINE_HOURS must be positive, not {raw}")
    return hours


def publish_deadline() -> DeadlineAlert:
    """The nightly DAG's Deadline Alert: not published (the run not a success) by
    ``KAFKALOG_PUBLISH_DEADLINE_HOURS`` after the run's logical date (read at parse time)."""
    hours = deadline_hours()
    return DeadlineAlert(reference=DeadlineReference.DAGRUN_LOGICAL_DATE,
                         interval=dt.timedelta(hours=hours),
                         callback=AsyncCallback(night_not_published, kwargs={"hours": hours}),
                         name="night not published")


async def night_not_published(hours: float, context: dict | None = None) -> str:
    """The deadline's callback (run by the triggerer with the scheduler's context: the run as
    the REST API shows it, and the deadline): tells the configured notifier. Returns the
    subject (the callback's recorded result)."""
    context = context or {}
    dag_run = context.get("dag_run") or {}
    deadline = (context.get("deadline") or {}).get("deadline_time")
    if isinstance(deadline, str):
        deadline = dt.datetime.fromisoformat(deadline.replace("Z", "+00:00"))
    shown = deadline.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC") \
        if isinstance(deadline, dt.datetime) else "its deadline"
    run_id = dag_run.get("dag_run_id") or dag_run.get("run_id") or "?"
    try:
        notifier = build_notifier()
    except NoRecipients as err:
        log.warning("deadline of run %s missed, nobody notified: %s", run_id, err)
        return f"not notified: {err}"
    url = report_link(run_id)
    subject, message = deadline_message(
        dag_id=dag_run.get("dag_id") or settings.NIGHTLY_DAG_ID, run_id=run_id,
        night=_night(dag_run), state=dag_run.get("state"), deadline=shown, hours=hours, url=url)
    notifier.context = _context(context, subject, message, url)
    if type(notifier).async_notify is not BaseNotifier.async_notify:
        await notifier
    else:  # a notifier with only a synchronous notify: off the triggerer's event loop
        await asyncio.to_thread(notifier, notifier.context)
    log.info("deadline missed, notified %s: %s", type(notifier).__name__, subject)
    return subject
