"""Who is told (kafkalog_pipeline.alerts): a failed or warned night's mail, a missed deadline's.

Real pieces: an SMTP server on 127.0.0.1 (aiosmtpd, started and stopped here by its
controller), the SMTP provider's ``SmtpNotifier`` (the default notifier) sending through an
``smtp_default`` connection, the metadata DB and the nightly DAG as the dag-processor writes
it, Airflow's own run-state rule and callback requests (``DagRun.update_state`` as the
scheduler calls it, the dag-processor's execution of the request), a real ``dag.test()`` of a
night without a snapshot (the plan fails: moto S3, no Spark), the deadline Airflow made with
that run, the scheduler's handling of its miss and the triggerer's ``CallbackTrigger``.
"""

from __future__ import annotations

import datetime as dt
import email
import email.policy
import json
import os
import socket
import sys
from pathlib import Path

import pytest

from tests.airflow_env import DAG_ID, DAGS  # noqa: E402  (Airflow's settings first)
from tests.pipeline.dag_runs import DONE, PASSED, finish_run  # noqa: E402

pytestmark = pytest.mark.pipeline

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "plugins"))

WARNED = {"fail": 0, "warn": 1, "pass": 4, "failed": {}, "warned": {"offset_gaps": ["payments-1"]}}
FAILED = {"fail": 1, "warn": 0, "pass": 4, "failed": {"crc": ["orders-0"]}, "warned": {}}


class Inbox:
    """aiosmtpd's handler: every message it accepts, parsed."""

    def __init__(self):
        self.messages = []

    async def handle_DATA(self, server, session, envelope):
        self.messages.append(email.message_from_bytes(envelope.content,
                                                      policy=email.policy.default))
        return "250 OK"

    def take(self) -> list[tuple[str, str]]:
        """(subject, text of the body) of each message received, then forgets them."""
        out = [(m["Subject"], m.get_body(("html", "plain")).get_content()) for m in self.messages]
        self.messages.clear()
        return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def smtp(monkeypatch):
    """An SMTP server on 127.0.0.1 and the settings that send the notifications to it."""
    from aiosmtpd.controller import Controller

    inbox, port = Inbox(), free_port()
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    monkeypatch.setenv("AIRFLOW_CONN_SMTP_DEFAULT", json.dumps({
        "conn_type": "smtp", "host": "127.0.0.1", "port": port,
        "extra": {"from_email": "kafkalog@example.test", "disable_tls": True,
                  "disable_ssl": True, "timeout": 10, "retry_limit": 1}}))
    monkeypatch.setenv("KAFKALOG_NOTIFY_TO", "oncall@example.test")
    for name in ("KAFKALOG_NOTIFIER", "KAFKALOG_NOTIFY_ON", "KAFKALOG_NOTIFIER_KWARGS"):
        monkeypatch.delenv(name, raising=False)
    yield inbox
    controller.stop()


def run_callbacks(requests: list) -> None:
    """What the dag-processor does with the scheduler's callback requests: each, read back from
    its JSON (as it travels through the metadata DB), run against the DAG file parsed anew."""
    from airflow.callbacks.callback_requests import DagCallbackRequest
    from airflow.dag_processing.dagbag import DagBag
    from airflow.dag_processing.processor import _execute_dag_callbacks  # the processor's step
    import structlog

    bag = DagBag(dag_folder=str(DAGS))
    for request in requests:
        _execute_dag_callbacks(bag, DagCallbackRequest.model_validate_json(
            request.model_dump_json()), structlog.get_logger())


def report_link(run_id: str) -> str:
    from kafkalog_quality.links import report_url

    return report_url(run_id)


@pytest.mark.parametrize("case", [
    ("warned night", {**DONE, "publish_gate": "success", "publish": "success"}, WARNED, "success",
     "DQ: 1 warned: offset_gaps payments-1", "warned"),
    ("failed night", {**DONE, "check_quality": "failed", "rerun_on_conflict": "skipped"},
     FAILED, "failed", "DQ: failed: crc orders-0 — not published", "failed"),
], ids=lambda c: c[0] if isinstance(c, tuple) else None)
def test_a_failed_and_a_warned_night_each_send_one_mail(nightly_in_db, smtp, monkeypatch, case):
    """The scheduler's callback request of the run, run as the dag-processor does: exactly
    one mail, with the run's verdict line (its note's) and its report link."""
    name, states, verdict, state, line, word = case
    run_id = name.replace(" ", "_")
    requests = []
    got = finish_run(nightly_in_db, run_id, states,
                     {("check_quality", "return_value"): verdict}, callbacks=requests)
    assert got == (state, line)
    assert len(requests) == 1 and requests[0].is_failure_callback == (state == "failed")
    run_callbacks(requests)
    [(subject, body)] = smtp.take()
    # a manual run without a logical date: the night of its run_after (now)
    today = dt.datetime.now(dt.timezone.utc).date()
    assert subject == f"kafkalog: night {today} {word} ({DAG_ID})"
    assert line in body and report_link(run_id) in body and f"Run {run_id}" in body
    # told only for the grades asked: the same run's request again, warn only
    monkeypatch.setenv("KAFKALOG_NOTIFY_ON", "warn")
    run_callbacks(requests)
    assert len(smtp.take()) == (1 if word == "warned" else 0)


def test_a_passed_night_tells_nobody(nightly_in_db, smtp):
    requests = []
    assert finish_run(nightly_in_db, "passed_night", {**DONE, "publish_gate": "success", "publish": "success"},
                      {("check_quality", "return_value"): PASSED}, callbacks=requests) == (
        "success", "DQ: passed")
    run_callbacks(requests)
    assert smtp.take() == []


from airflow.sdk.bases.notifier import BaseNotifier  # noqa: E402


class FileNotifier(BaseNotifier):
    """A notifier of this test, by dotted name (``test_alerts.FileNotifier``): appends its
    rendered ``text`` to ``path``; synchronous only, as many notifiers are."""

    template_fields = ("text",)

    def __init__(self, *, path: str, text: str):
        super().__init__()
        self.path, self.text = path, text

    def notify(self, context):
        with open(self.path, "a") as out:
            out.write(self.text + "\n")


def test_any_notifier_class_by_name(nightly_in_db, tmp_path, monkeypatch):
    """The setting names the class, its kwargs template our words: a warned night's run
    callback and a missed deadline (a sync-only notifier, run off the triggerer's loop)."""
    import asyncio

    from kafkalog_pipeline import alerts

    said = tmp_path / "said.txt"
    monkeypatch.setenv("KAFKALOG_NOTIFIER", "tests.pipeline.test_alerts.FileNotifier")
    monkeypatch.setenv("KAFKALOG_NOTIFIER_KWARGS", json.dumps(
        {"path": str(said), "text": "{{ kafkalog_subject }} | {{ kafkalog_message }}"}))
    requests = []
    finish_run(nightly_in_db, "warned_by_file", {**DONE, "publish_gate": "success", "publish": "success"},
               {("check_quality", "return_value"): WARNED}, callbacks=requests)
    run_callbacks(requests)
    text = said.read_text()
    assert text.count(" warned (") == 1 and "| DQ: 1 warned: offset_gaps payments-1\n" in text
    assert report_link("warned_by_file") in text
    context = {"dag_run": {"dag_id": DAG_ID, "dag_run_id": "late_run", "state": "running",
                           "logical_date": "2026-11-21T03:00:00Z"},
               "deadline": {"deadline_time": "2026-11-21T09:00:00Z"}}
    subject = asyncio.run(alerts.night_not_published(6.0, context=context))
    assert subject == f"kafkalog: night 2026-11-21 not published by 2026-11-21 09:00 UTC ({DAG_ID})"
    assert said.read_text()[len(text):].startswith(subject + " | Night 2026-11-21 was not")


def test_notifier_settings_are_checked(monkeypatch):
    from kafkalog_pipeline import alerts, settings

    monkeypatch.setenv("KAFKALOG_NOTIFY_ON", "fail,late")
    with pytest.raises(settings.SettingError, match=r"unknown grade\(s\) \['late'\]"):
        alerts.notify_on()
    monkeypatch.setenv("KAFKALOG_NOTIFIER", "json.JSONDecoder")
    with pytest.raises(settings.SettingError, match="not an Airflow notifier class"):
        alerts.build_notifier()
    monkeypatch.setenv("KAFKALOG_NOTIFIER", alerts.SMTP_NOTIFIER)
    monkeypatch.delenv("KAFKALOG_NOTIFY_TO", raising=False)
    with pytest.raises(alerts.NoRecipients, match="kafkalog_notify_to"):
        alerts.build_notifier()
    # any notifier class by name, its arguments from the setting over ours
    monkeypatch.setenv("KAFKALOG_NOTIFY_TO", "a@example.test, b@example.test")
    monkeypatch.setenv("KAFKALOG_NOTIFIER_KWARGS", '{"cc": "c@example.test"}')
    built = alerts.build_notifier()
    assert (built.to, built.cc, built.subject) == (["a@example.test", "b@example.test"],
                                                   "c@example.test", "{{ kafkalog_subject }}")


def test_a_past_deadline_fires_its_callback(nightly_in_db, smtp, s3_endpoint, s3_bucket,
                                            tmp_path, monkeypatch):
    """``dag.test()`` of a night whose deadline (6 h after its logical date) has passed, and
    whose snapshot never arrived: the plan fails (one mail: a failed night). Airflow made the
    run's deadline with the run; the scheduler's step finds it missed and queues its
    callback, which the triggerer's CallbackTrigger runs: one mail, "not published". A
    queued run that never starts has its deadline too (made with the run)."""
    from sqlalchemy import select

    from airflow.dag_processing.dagbag import DagBag
    from airflow.models import Deadline
    from airflow.models.dagrun import DagRun
    from airflow.models.trigger import Trigger
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState
    from airflow.utils.types import DagRunTriggeredByType, DagRunType

    from demo import servers

    for key, value in {"KAFKALOG_WAREHOUSE": str(tmp_path / "w"),
                       "KAFKALOG_SNAPSHOT_BUCKET": s3_bucket, "KAFKALOG_SNAPSHOT_PREFIX": "none",
                       **servers.local_connections(s3_endpoint, "testing")}.items():
        monkeypatch.setenv(key, value)
    now = dt.datetime.now(dt.timezone.utc).replace(minute=0, second=0, microsecond=0)
    logical = now - dt.timedelta(hours=7)
    dag = DagBag(dag_folder=str(DAGS)).dags[DAG_ID]
    [alert] = dag.deadline
    assert alert.interval == dt.timedelta(hours=6)
    dr = dag.test(logical_date=logical, run_after=logical)
    assert str(dr.state).endswith("failed")
    night = logical.date().isoformat()
    [(subject, body)] = smtp.take()  # the failed night
    assert subject == f"kafkalog: night {night} failed ({DAG_ID})"
    assert f"DQ: no snapshot for {night}" in body and report_link(dr.run_id) in body

    # a scheduled run created now, queued behind another and never started: its deadline
    # exists already (DAGRUN_LOGICAL_DATE deadlines are made with the run)
    queued_night = logical - dt.timedelta(days=1)
    with create_session() as session:
        queued = nightly_in_db.create_dagrun(
            run_id=f"scheduled__{queued_night.isoformat()}", logical_date=queued_night,
            data_interval=(queued_night, queued_night), run_after=queued_night,
            run_type=DagRunType.SCHEDULED, state=DagRunState.QUEUED,
            triggered_by=DagRunTriggeredByType.TIMETABLE, session=session)
        queued_id = queued.id
    with create_session() as session:
        deadlines = {d.dagrun_id: d.deadline_time for d in session.scalars(select(Deadline))}
        run_pk = session.scalars(select(DagRun.id).where(DagRun.run_id == dr.run_id)).one()
    assert deadlines == {run_pk: logical + dt.timedelta(hours=6),
                         queued_id: queued_night + dt.timedelta(hours=6)}

    # the scheduler's loop step for deadlines (SchedulerJobRunner._run_scheduler_loop):
    # missed, unhandled ones are handed to their callbacks
    with create_session() as session:
        missed = session.scalars(select(Deadline).where(Deadline.deadline_time < now)
                                 .where(~Deadline.missed)).all()
        assert {d.dagrun_id for d in missed} == {run_pk, queued_id}
        for deadline in missed:
            deadline.handle_miss(session)
        triggers = {d.dagrun_id: (d.callback.trigger.classpath, d.callback.trigger.kwargs)
                    for d in missed}
    # the triggerer: each queued callback's trigger, run to its last event
    import asyncio

    import importlib

    async def run_trigger(classpath, kwargs):
        module, _, name = classpath.rpartition(".")
        trigger = getattr(importlib.import_module(module), name)(**kwargs)
        return [event.payload async for event in trigger.run()]

    for run, (classpath, kwargs) in sorted(triggers.items()):
        events = asyncio.run(run_trigger(classpath, kwargs))
        assert events[-1]["state"] == "success", events
    mails = dict(smtp.take())
    assert set(mails) == {
        f"kafkalog: night {night} not published by "
        f"{(logical + dt.timedelta(hours=6)):%Y-%m-%d %H:%M} UTC ({DAG_ID})",
        f"kafkalog: night {queued_night.date()} not published by "
        f"{(queued_night + dt.timedelta(hours=6)):%Y-%m-%d %H:%M} UTC ({DAG_ID})"}
    late = mails[next(s for s in mails if night in s)]
    assert "6 h after its snapshot should have landed" in late and "is failed" in late
    assert report_link(dr.run_id) in late
    assert "is queued" in mails[next(s for s in mails if str(queued_night.date()) in s)]
