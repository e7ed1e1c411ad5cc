"""The nightly DAG: import and parse time, policy, planning, and ``dag.test()`` end to end.

Real pieces only: a temporary Airflow home with a SQLite metadata DB, the moto S3
server of conftest (127.0.0.1), sample snapshots written with kafkalog.writer
(demo.data), local Spark through spark-submit (``local[2]``).
Expected counts are computed here from the snapshot files with the decoder
itself (``kafkalog.decode``), never typed in.
"""

from __future__ import annotations

import datetime as dt
import os
import random
import re
import sys
from pathlib import Path

import pytest

# Airflow reads its configuration at import: airflow_env sets it first.
from tests.airflow_env import DAG_ID, DAGS, parse_against_peer  # noqa: E402
from tests.pipeline.dag_runs import DONE, PASSED, FakeTI, finish_run  # noqa: E402

from kafkalog_pipeline import snapshots  # noqa: E402  (no Airflow import)

pytestmark = pytest.mark.pipeline


# ------------------------------------------------------------------ import, parse, policy
def test_dagbag_imports_without_errors_and_about_as_fast_as_a_one_task_spark_dag():
    """Parse in a fresh interpreter (Airflow already imported, as in the dag-processor),
    against the least DAG that submits a Spark job, measured in turn (airflow_env.PEER_DAG):
    the DAG files' own cost at most as much again. A bound in seconds moved with the
    machine's load (1.2-2.4 s for an unchanged file at load 11-26) and with the providers
    installed (the Spark provider imports OpenLineage's listener where that is installed)."""
    result = parse_against_peer(DAGS)
    assert result["errors"] == {}
    assert DAG_ID in result["dags"] and "kafka_warehouse_maintenance" in result["dags"]
    assert result["seconds"] <= 2 * result["peer_seconds"], result
    heavy = set(result["packages"]) & {"pyspark", "great_expectations", "boto3", "moto"}
    assert not heavy, "the DAG files must not import Spark, GX, boto3 at parse time"


@pytest.fixture(scope="module")
def dag():
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {}
    return bag.dags[DAG_ID]


class PlanTaskInstance:
    """What plan's code asks of its ti: XComs pushed into ``pushed``; no other run holds the
    warehouse."""

    dag_id = DAG_ID

    def __init__(self, pushed: dict):
        self.pushed = pushed

    def xcom_push(self, key, value):
        self.pushed[key] = value

    def get_task_states(self, **kw):
        return {}


def test_policy_owner_retries_tags(dag):
    assert "kafkalog" in dag.tags and len(dag.tags) >= 2
    assert dag.max_active_runs == 1
    assert dag.catchup is False
    for task in dag.tasks:
        assert task.owner not in ("", "airflow"), task.task_id
        assert task.retries >= 1, task.task_id
        assert task.retry_exponential_backoff, task.task_id
        assert task.execution_timeout is not None, task.task_id
    # the S3 listing and the Spark submissions retry more than once
    assert dag.get_task("plan").retries >= 2
    assert dag.get_task("decode_chunk").retries >= 2


def test_wiring_write_audit_publish(dag):
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    from kafkalog_pipeline.assets import DERIVED_ALIAS, TABLE_ASSETS

    plan, decode = dag.get_task("plan"), dag.get_task("decode_chunk")
    check, publish = dag.get_task("check_quality"), dag.get_task("publish")
    assert decode.upstream_task_ids == {"plan"}
    assert check.upstream_task_ids == {"decode_chunk"}
    gate = dag.get_task("publish_gate")
    assert gate.upstream_task_ids == {"check_quality"}
    assert publish.upstream_task_ids == {"publish_gate"}
    assert publish.trigger_rule == "all_success"  # no audit pass, no publish
    # decode is mapped over the plan's output, spark-submit on spark_default
    assert decode.operator_class.__mro__.__contains__(SparkSubmitOperator)
    assert set(decode.expand_input.value) == {"application_args"}
    assert decode.partial_kwargs["application"].endswith("kafkalog_pipeline/spark_entry.py")
    assert isinstance(check, SparkSubmitOperator) and check._conn_id == "spark_default"
    assert check.application.endswith("kafkalog_pipeline/spark_entry.py")
    assert check.application_args[0] == "spark_jobs.check_quality"
    assert check.application_args[1:] == [
        "--warehouse", "{{ ti.xcom_pull(task_ids='plan', key='warehouse') }}",
        "--run-id", "{{ run_id }}",
        "--catalog", "{{ ti.xcom_pull(task_ids='plan', key='catalog') }}",
        "--namespace", "{{ ti.xcom_pull(task_ids='plan', key='namespace') }}",
        "--topics", "{{ params.topics }}"]  # a partition the run left out is not missing
    assert {a.name for a in publish.outlets} == {a.name for a in TABLE_ASSETS.values()} | {
        DERIVED_ALIAS.name}
    assert set(dag.params.keys()) == {"date_from", "date_to", "topics", "reprocess",
                                      "schema_registry_conn_id", "rerun_of", "tiered_storage",
                                      "latest_topics", "cdc_topics", "sinks"}
    assert plan.retries >= 1
    # after publish, the rerun after a conflict: a teardown (out of the run's state), run only
    # when publish failed or could not, triggering this very DAG
    from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator

    from kafkalog_pipeline.tasks import RERUN_TASK

    rerun = dag.get_task(RERUN_TASK)
    assert isinstance(rerun, TriggerDagRunOperator) and rerun.trigger_dag_id == DAG_ID
    assert rerun.upstream_task_ids == {"publish"} and rerun.downstream_task_ids == set()
    assert rerun.is_teardown and rerun.trigger_rule == "one_failed"
    assert rerun.wait_for_completion is False and rerun.skip_when_already_exists is True
    assert "Apache Iceberg tables" in dag.doc_md and "Parquet" not in dag.doc_md


def test_runs_take_the_warehouse_in_turn(dag, monkeypatch):
    """Backfill runs escape max_active_runs=1: plans run one at a time and wait for holders.

    The real scheduler case is tests/pipeline/test_backfill.py; here the rule itself.
    """
    from airflow.sdk.exceptions import AirflowRescheduleException
    from airflow.utils.state import TaskInstanceState as S

    from kafkalog_pipeline.tasks import runs_holding_warehouse, wait_for_warehouse

    assert dag.get_task("plan").max_active_tis_per_dag == 1
    states = {
        "me": {"plan": S.RUNNING},
        "planned": {"plan": S.SUCCESS, "publish": None},
        "publishing": {"plan": "success", "publish": "running"},
        "publish retrying": {"plan": "success", "publish": "up_for_retry"},
        "published": {"plan": "success", "publish": S.SUCCESS},
        "audit failed": {"plan": "success", "publish": "upstream_failed"},
        "nothing to do": {"plan": "skipped", "publish": "skipped"},
        "plan waiting": {"plan": "up_for_reschedule", "publish": None},
        "plan failed": {"plan": "failed", "publish": "upstream_failed"},
        "cleared": {"plan": None, "publish": None},
    }
    assert runs_holding_warehouse(states, "me") == ["planned", "publish retrying", "publishing"]
    # a rerun of the run that holds it does not wait for itself
    assert runs_holding_warehouse({"me": {"plan": "success", "publish": None}}, "me") == []

    class TI:  # what wait_for_warehouse asks Airflow (RuntimeTaskInstance's API)
        dag_id = DAG_ID

        def __init__(self, run_states):
            self.run_states = run_states

        def get_task_states(self, dag_id, task_ids):
            assert (dag_id, task_ids) == (DAG_ID, ["plan", "publish"])
            return states

        def get_dagrun_state(self, dag_id, run_id):
            return self.run_states[run_id]

    wait_for_warehouse({"ti": None, "run_id": "probe"})  # outside Airflow: nothing to wait for
    monkeypatch.setenv("KAFKALOG_WAIT_SECONDS", "7")
    holders = ("planned", "publish retrying", "publishing")
    # holders no longer running (cleared: queued; killed: failed) do not block
    wait_for_warehouse({"ti": TI({r: "queued" for r in holders}), "run_id": "me"})
    wait_for_warehouse({"ti": TI({r: "failed" for r in holders}), "run_id": "me"})
    with pytest.raises(AirflowRescheduleException) as wait:
        wait_for_warehouse({"ti": TI({**{r: "failed" for r in holders}, "publishing": "running"}),
                            "run_id": "me"})
    left = wait.value.reschedule_date - dt.datetime.now(dt.timezone.utc)
    assert dt.timedelta(seconds=5) < left <= dt.timedelta(seconds=7)


# ------------------------------------------------------------------ rerun after a conflict
CONFLICT = {"table": "records", "runs": ["manual__2026-11-21T03:00:00+00:00"], "files": 2}
PARAMS = {"date_from": None, "date_to": None, "topics": "orders*", "reprocess": False,
          "schema_registry_conn_id": None, "rerun_of": None}


def test_a_conflict_is_rerun_once_on_the_same_nights():
    from airflow.sdk.exceptions import AirflowSkipException, DagRunTriggerException

    from kafkalog_pipeline.operators import RerunOnConflictOperator
    from kafkalog_pipeline.tasks import conflict_line, rerun_request

    run_id = "scheduled__2026-11-20T03:00:00+00:00"
    plan = ("plan", "plan")
    ti = FakeTI({("publish", "conflict"): CONFLICT, plan: {"dates": ["2026-11-20"]}})
    context = {"ti": ti, "run_id": run_id, "params": dict(PARAMS)}
    # the same nights, the run's other params, and whose rerun it is
    assert rerun_request(context) == (f"rerun__{run_id}", {
        **PARAMS, "date_from": "2026-11-20", "date_to": "2026-11-20", "rerun_of": run_id})
    # what the task raises: Airflow's task runner triggers the run and does not wait for it
    with pytest.raises(DagRunTriggerException) as trigger:
        RerunOnConflictOperator(task_id="rerun_on_conflict", trigger_dag_id=DAG_ID).execute(context)
    drte = trigger.value
    assert (drte.trigger_dag_id, drte.dag_run_id, drte.logical_date) == (
        DAG_ID, f"rerun__{run_id}", None)
    assert drte.conf["rerun_of"] == run_id and drte.conf["topics"] == "orders*"
    assert drte.note == f"Rerun of {run_id}, whose publish met a conflict"
    assert drte.skip_when_already_exists and not drte.wait_for_completion
    # a range run is rerun over its range
    ti.xcoms[plan] = {"dates": ["2026-11-19", "2026-11-20", "2026-11-21"]}
    conf = rerun_request(context)[1]
    assert (conf["date_from"], conf["date_to"]) == ("2026-11-19", "2026-11-21")
    # never a rerun of a rerun
    with pytest.raises(AirflowSkipException, match=re.escape(f"already the rerun of {run_id}")):
        rerun_request({**context, "params": {**PARAMS, "rerun_of": run_id}})
    # nothing to rerun without a conflict (publish failed otherwise, or the audit failed)
    with pytest.raises(AirflowSkipException, match="publish did not meet a conflict"):
        rerun_request({**context, "ti": FakeTI({plan: {"dates": ["2026-11-20"]}})})
    # publish's one line says what comes next
    assert conflict_line(CONFLICT, run_id, None) == (
        "publish refused: run(s) manual__2026-11-21T03:00:00+00:00 published offsets of the "
        "same topic-partitions to main after this run planned (records: 2 files); main is "
        f"unchanged. Task rerun_on_conflict reruns the night on a fresh branch as run "
        f"rerun__{run_id}, which deduplicates against the new main")
    assert "Not rerun again: this run is already the rerun of X" in conflict_line(
        CONFLICT, "rerun__X", "X")


# ------------------------------------------------------------------ a run's state and note
def test_verdict_paragraphs():
    from kafkalog_pipeline.notes import merge, verdict_line

    assert verdict_line({"fail": 0, "warn": 0, "pass": 9, "failed": {}, "warned": {}}) == \
        "DQ: passed"
    warned = {"offset_gaps": ["payments-1"], "segment_changed": [f"t-{i}" for i in range(7)]}
    assert verdict_line({"fail": 0, "warn": 8, "pass": 1, "failed": {}, "warned": warned}) == (
        "DQ: 8 warned: offset_gaps payments-1, segment_changed t-0, segment_changed t-1, "
        "segment_changed t-2, segment_changed t-3, segment_changed t-4, … +2 more")
    assert verdict_line({"fail": 1, "warn": 8, "pass": 1, "failed": {"crc": ["orders-0"]},
                         "warned": warned}) == "DQ: failed: crc orders-0 — not published"
    # a person's paragraphs stay, after ours; ours are replaced; at most Airflow's 1000 chars
    assert merge("DQ: passed\n\nchecked by Ana", "DQ: 1 warned: crc a-0") == \
        "DQ: 1 warned: crc a-0\n\nchecked by Ana"
    assert merge("DQ: passed", None) is None
    assert len(merge("x" * 2000, "DQ: passed")) == 1000


def test_the_note_says_each_sinks_totals():
    """An audit that reconciled sinks: the note's Sinks paragraph, each sink's totals as the
    verdict (spark_jobs.audit.results.verdict) sums them from its sink_reconcile rows."""
    import dataclasses
    import datetime as dt

    from kafkalog_pipeline.notes import merge, run_note, sinks_line
    from spark_jobs.audit.policy import Policy
    from spark_jobs.audit.results import graded_result, verdict

    policy = Policy.load()

    def row(sink, partition, delivered, found):
        cls = [{"check": "sink_reconcile", "class": c, "status": s, "severity": s, "items": 1,
                "offsets": n, "max_value": None} for c, s, n in found]
        r = graded_result("r", "sink_reconcile", "orders", partition, delivered, cls, [], policy,
                          dt.datetime.now(dt.timezone.utc), "2026-11-21")
        extras = {"sink": sink, "mode": "append", "delivered": delivered}
        return r._replace(details=dataclasses.replace(r.details, extras=extras)).to_row()

    rows = [row("lake", 0, 9, [("duplicate", "warn", 1), ("not_yet_delivered", "pass", 3)]),
            row("lake", 1, 4, [("missing", "fail", 2)]), row("dr", 0, 7, [])]
    v = verdict(rows)
    assert v["failed"] == {"sink_reconcile": ["orders-1 (sink lake)"]}
    assert sinks_line(v) == ("Sinks: dr pass: delivered 7, missing 0, duplicates 0, leaks 0, "
                             "lag 0; lake fail: delivered 13, missing 2, duplicates 1, leaks 0, "
                             "lag 3")
    note = run_note(run_id="r", states={"publish": "upstream_failed"}, finished=True, verdict=v)
    assert note.split("\n\n") == ["DQ: failed: sink_reconcile orders-1 (sink lake) — not published",
                                   sinks_line(v)]
    assert merge(note + "\n\nseen by Ana", note) == note + "\n\nseen by Ana"  # ours replaced
    assert sinks_line(verdict(rows[:0])) is None and "sinks" not in verdict(rows[:0])


WARNED = {"fail": 0, "warn": 1, "pass": 4, "failed": {}, "warned": {"offset_gaps": ["payments-1"]}}
NO_SNAPSHOT_WARNED = {"fail": 0, "warn": 1, "pass": 0, "failed": {},
                      "warned": {"snapshot_missing": ["2026-11-25"]}}
NO_SNAPSHOT = {"nights": ["2026-11-25"], "where": ["s3://b/snapshots/2026-11-25/"]}


@pytest.mark.parametrize("case", [
    # audit passed, published: success; the rerun task never runs
    ("published", {**DONE, "publish_gate": "success", "publish": "success"}, {("check_quality", "return_value"): PASSED},
     {}, "success", "DQ: passed"),
    ("warned", {**DONE, "publish_gate": "success", "publish": "success"}, {("check_quality", "return_value"): {
        "fail": 0, "warn": 1, "pass": 4, "failed": {}, "warned": {"offset_gaps": ["payments-1"]}}},
     {}, "success", "DQ: 1 warned: offset_gaps payments-1"),
    # the audit failed: publish upstream_failed, the rerun task ran and skipped itself (it
    # is the last task); the run is still failed
    ("audit failed", {**DONE, "check_quality": "failed", "rerun_on_conflict": "skipped"},
     {("check_quality", "return_value"): {"fail": 1, "warn": 0, "pass": 4,
                                          "failed": {"crc": ["orders-0"]}, "warned": {}}},
     {}, "failed", "DQ: failed: crc orders-0 — not published"),
    # publish refused for a conflict, the rerun triggered: this run published nothing, failed
    ("conflict", {**DONE, "publish_gate": "success", "publish": "failed", "rerun_on_conflict": "success"},
     {("check_quality", "return_value"): PASSED, ("publish", "conflict"): CONFLICT},
     {}, "failed", "DQ: passed\n\nNot published: run(s) manual__2026-11-21T03:00:00+00:00 "
     "published the same offsets first; rerun as rerun__conflict"),
    # the rerun, refused again: not rerun again
    ("rerun refused", {**DONE, "publish_gate": "success", "publish": "failed", "rerun_on_conflict": "skipped"},
     {("check_quality", "return_value"): PASSED, ("publish", "conflict"): CONFLICT},
     {"rerun_of": "n1"}, "failed",
     "DQ: passed\n\nNot published: run(s) manual__2026-11-21T03:00:00+00:00 published the "
     "same offsets first; not rerun again: clear this run to run it again\n\n"
     "Rerun of n1, whose publish met a conflict"),
    # the rerun, published
    ("rerun published", {**DONE, "publish_gate": "success", "publish": "success"},
     {("check_quality", "return_value"): PASSED}, {"rerun_of": "n1"}, "success",
     "DQ: passed\n\nRerun of n1, whose publish met a conflict"),
    # the human gate (publish_warned: approve): approved, published; rejected, publish is
    # skipped (main unchanged) and the run ends a success that says so; never: the gate failed
    ("warned approved", {**DONE, "publish_gate": "success", "publish": "success"}, {
        ("check_quality", "return_value"): WARNED,
        ("publish_gate", "gate"): {"decision": "approved", "by": "ana"}}, {}, "success",
     "DQ: 1 warned: offset_gaps payments-1\n\n"
     "Approved by ana in Required actions (publish_warned: approve)"),
    ("warned rejected", {**DONE, "publish_gate": "success", "publish": "skipped"}, {
        ("check_quality", "return_value"): WARNED,
        ("publish_gate", "gate"): {"decision": "rejected", "by": "ana"}}, {}, "success",
     "DQ: 1 warned: offset_gaps payments-1\n\nNot published: rejected by ana in Required "
     "actions (publish_warned: approve); main unchanged, the run's branch kept"),
    ("warned never", {**DONE, "publish_gate": "failed", "rerun_on_conflict": "skipped"}, {
        ("check_quality", "return_value"): WARNED,
        ("publish_gate", "gate"): {"decision": "never", "by": None}}, {}, "failed",
     "DQ: 1 warned: offset_gaps payments-1\n\nNot published: the policy publishes no "
     "warned night (publish_warned: never); main unchanged"),
    # approve, and nobody answered before the response timeout: the gate failed
    ("warned unanswered", {**DONE, "publish_gate": "failed", "rerun_on_conflict": "skipped"}, {
        ("check_quality", "return_value"): WARNED,
        ("publish_gate", "gate"): {"decision": "unanswered", "by": None}}, {}, "failed",
     "DQ: 1 warned: offset_gaps payments-1\n\nNot published: nobody answered in Required "
     "actions in time (publish_warned: approve); main unchanged, the run's branch kept"),
    # publish_conflict: approve, and a person rejected the rerun
    ("conflict rerun rejected", {**DONE, "publish_gate": "success", "publish": "failed", "rerun_on_conflict": "skipped"},
     {("check_quality", "return_value"): PASSED, ("publish", "conflict"): CONFLICT,
      ("rerun_on_conflict", "gate"): {"decision": "rejected", "by": "bo"}}, {}, "failed",
     "DQ: passed\n\nNot published: run(s) manual__2026-11-21T03:00:00+00:00 published the "
     "same offsets first; its rerun was rejected by bo in Required actions "
     "(publish_conflict: approve): not rerun"),
    # nothing to decode: a clean skip, and why
    ("skipped", {"plan": "skipped"}, {("plan", "skip_reason"): "nothing to decode for x"},
     {}, "success", "DQ: not audited: nothing to decode for x"),
    # a night without a snapshot (issue 42): the plan failed (snapshot_missing warned by the
    # policy), the run is failed, not a green success; its note says so and what to do
    ("no snapshot", {"plan": "failed", "rerun_on_conflict": "skipped"}, {("plan", "verdict"): NO_SNAPSHOT_WARNED,
                                         ("plan", "no_snapshot"): NO_SNAPSHOT},
     {}, "failed", "DQ: no snapshot for 2026-11-25 — no segment under "
     "s3://b/snapshots/2026-11-25/ (snapshot_missing warned); nothing read, nothing "
     "published. When the copy arrives, clear this run (or run it again with "
     "--reprocess-behavior failed in a backfill): its plan reads the night then"),
    # ... and where the policy accepts it (snapshot_missing: pass) the plan skipped
    ("no snapshot accepted", {"plan": "skipped"}, {
        ("plan", "verdict"): {"fail": 0, "warn": 0, "pass": 1, "failed": {}, "warned": {}},
        ("plan", "no_snapshot"): NO_SNAPSHOT}, {}, "success",
     "DQ: no snapshot for 2026-11-25 — no segment under s3://b/snapshots/2026-11-25/ "
     "(snapshot_missing accepted by the policy); nothing read, nothing published"),
    ("decode failed", {"plan": "success", "decode_chunk": "failed",
                       "rerun_on_conflict": "skipped"},
     {}, {}, "failed", "DQ: not audited: decode_chunk failed — not published"),
    # a crash: the one line its operator pushed (spark_jobs.crash), in the note
    ("decode crashed", {"plan": "success", "decode_chunk": "failed",
                        "rerun_on_conflict": "skipped"},
     {("decode_chunk", "cause"): "StorageError: s3://b/k: could not connect to the endpoint"},
     {}, "failed", "DQ: not audited: decode_chunk failed: StorageError: s3://b/k: could not "
     "connect to the endpoint — not published"),
    ("audit crashed", {**DONE, "check_quality": "failed", "rerun_on_conflict": "skipped"},
     {("check_quality", "cause"): "KeyError: 'night'"}, {}, "failed",
     "DQ: not audited: check_quality failed: KeyError: 'night' — not published"),
], ids=lambda c: c[0] if isinstance(c, tuple) else None)
def test_the_run_state_is_publishs_and_the_note_says_the_verdict(nightly_in_db, case):
    """With the real metadata DB and Airflow's own run-state rule (leaves; teardowns left
    out): a run not published ends failed whatever the rerun task did; the note is written
    by the listener the plugin registers, in the session of the state change."""
    name, states, xcoms, conf, state, note = case
    run_id = name.replace(" ", "_").replace("'", "")
    assert finish_run(nightly_in_db, run_id, states, xcoms, conf=conf) == (state, note)


def test_a_persons_note_is_kept(nightly_in_db):
    got = finish_run(nightly_in_db, "noted", {**DONE, "publish_gate": "success", "publish": "success"},
                     {("check_quality", "return_value"): PASSED}, note="Checked by Ana")
    assert got == ("success", "DQ: passed\n\nChecked by Ana")
    # what `make demo` prints of it, read from the metadata DB's own tables
    from demo.nights import run_note

    assert run_note({"AIRFLOW_HOME": os.environ["AIRFLOW_HOME"]}, "noted") == got[1]


def test_a_run_that_runs_again_keeps_only_what_stays_true(nightly_in_db):
    """Cleared, a run starts again (the scheduler calls on_dag_run_running): its last
    verdict goes until the new one is known; its "Rerun of" and a person's words stay."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    from kafkalog_pipeline import notes

    finish_run(nightly_in_db, "again", {**DONE, "publish_gate": "success", "publish": "success"},
               {("check_quality", "return_value"): PASSED}, conf={"rerun_of": "n1"},
               note="Checked by Ana")
    with create_session() as session:
        dr = session.query(DagRun).filter_by(dag_id=DAG_ID, run_id="again").one()
        assert dr.note == "DQ: passed\n\nRerun of n1, whose publish met a conflict\n\n" \
            "Checked by Ana"
        notes.on_dag_run_running(dag_run=dr, msg="started")
    with create_session() as session:
        dr = session.query(DagRun).filter_by(dag_id=DAG_ID, run_id="again").one()
        assert dr.note == "Rerun of n1, whose publish met a conflict\n\nChecked by Ana"


# ------------------------------------------------------------------ planning (pure)
def _segments(rng: random.Random, n_tp: int) -> list[snapshots.Segment]:
    out = []
    for t in range(n_tp):
        topic, partition = f"t{t % 3}", t
        for base in range(rng.randrange(1, 4)):
            out.append(snapshots.Segment(topic, partition, "2026-11-20", base * 100,
                                         f"s3://b/p/t{t % 3}-{t}/{base * 100:020d}.log",
                                         rng.randrange(1, 10_000), None))
    return out


# ------------------------------------------------------------------ what the UI shows
def test_trigger_form_says_which_nights_a_run_reads(dag):
    """Empty params: the logical date's night (each backfill run its own); set: the range."""
    date_from = dag.params.get_param("date_from")
    assert "logical date" in date_from.description and "backfill" in date_from.description
    assert "instead" in date_from.schema["title"]
    assert "inclusive" in dag.params.get_param("date_to").schema["title"]
    assert "Which night a run reads" in dag.doc_md
    # the range in a collapsed section of its own (Airflow's forms: `section`), apart from
    # the Backfill dialog's own date range, which the default section sits beside
    sections = {name: dag.params.get_param(name).schema.get("section") for name in dag.params}
    assert sections["date_from"] == sections["date_to"] and "not for a backfill" in sections["date_to"]
    assert {n for n, s in sections.items() if s} == {"date_from", "date_to"}


def test_the_tier_params_default_is_the_setting(dag, monkeypatch, tmp_path):
    """tiered_storage defaults to KAFKALOG_TIERED_STORAGE (read at parse time; unset: no
    tier), which the demo sets to its tier: a run triggered in `make ui` reads the tier as the
    demo's own runs do."""
    from airflow.dag_processing.dagbag import DagBag

    from demo import servers, tiered
    from kafkalog_pipeline.settings import TIER_PARAM

    assert "KAFKALOG_TIERED_STORAGE" not in os.environ
    assert dag.params[TIER_PARAM] is None
    uri = tiered.tier_uri(servers.BUCKET)
    monkeypatch.setenv("KAFKALOG_TIERED_STORAGE", uri)
    bag = DagBag(dag_folder=str(DAGS / "kafka_segments_nightly.py"))
    assert bag.dags[DAG_ID].params[TIER_PARAM] == uri
    env = servers.airflow_env(tmp_path / "demo-output", "http://127.0.0.1:1")
    assert env["KAFKALOG_TIERED_STORAGE"] == uri


def test_the_sinks_param_reaches_the_audit(dag, monkeypatch):
    """sinks defaults to KAFKALOG_SINKS (parse time; unset: none, the audit's own default
    file); set, the audit's spark-submit gets --sinks FILE (and the tier's flag beside it),
    each once, however often the operator runs."""
    from airflow.dag_processing.dagbag import DagBag

    from kafkalog_pipeline import settings

    assert dag.params[settings.SINKS_PARAM] is None
    assert settings.audit_args({}) == [] == settings.audit_args({"sinks": None, "tiered_storage": ""})
    assert settings.audit_args({"sinks": "/etc/sinks.yaml", "tiered_storage": "s3://t/p"}) == [
        ["--tiered-storage", "s3://t/p"], ["--sinks", "/etc/sinks.yaml"]]
    from spark_jobs.check_quality import parse_args

    assert parse_args(["--warehouse", "w", "--run-id", "r", "--sinks", "/etc/sinks.yaml"]).sinks \
        == "/etc/sinks.yaml"
    monkeypatch.setenv("KAFKALOG_SINKS", "/etc/sinks.yaml")
    bag = DagBag(dag_folder=str(DAGS / "kafka_segments_nightly.py"))
    assert bag.dags[DAG_ID].params[settings.SINKS_PARAM] == "/etc/sinks.yaml"


def test_audit_output_levels_verdict_and_one_line_failure(caplog):
    """spark-submit's output of the audit: FAIL lines at ERROR, WARN at WARNING, Spark's own
    lines left to the provider (INFO), the verdict line kept, not logged."""
    import json
    import logging

    from kafkalog_pipeline.operators import JobOutput, failed_checks_line
    from spark_jobs.check_quality import VERDICT_PREFIX

    verdict = {"fail": 2, "warn": 1, "pass": 5, "failed": {"crc": ["a-0", "a-1"]},
               "warned": {"offset_gaps": ["b-0"]}}
    out = JobOutput(logging.getLogger("audit-output"), VERDICT_PREFIX)
    lines = ["26/11/25 22:48:20 WARN NativeCodeLoader: Unable to load\n",
             "FAIL crc a-0: 1 item, 3 batches checked; first: ...\n",
             "WARN offset_gaps b-0: 1 item, 1 batch checked; first: ...\n",
             f"{VERDICT_PREFIX}{json.dumps(verdict)}\n",
             f"{VERDICT_PREFIX}not json\n"]
    with caplog.at_level(logging.INFO, logger="audit-output"):
        rest = list(out.lines(iter(lines)))
    assert rest == [lines[0], lines[4]]  # Spark's own line, and a "verdict" that is none
    assert [(r.levelname, r.getMessage()[:8]) for r in caplog.records] == [
        ("ERROR", "FAIL crc"), ("WARNING", "WARN off")]
    assert out.verdict == verdict
    assert failed_checks_line(verdict) == (
        "audit failed: crc (a-0, a-1) failed; 1 warned, 5 passed; the run is not published")
    assert "no verdict" in failed_checks_line(None)


def test_a_crash_says_its_cause_first_in_one_line(caplog, capsys):
    """A job that raises prints its cause, one line, before the traceback (spark_entry and the
    jobs' scripts run it through spark_jobs.crash); the operator's reader logs that line at
    ERROR and keeps it as the crash's cause; without one, the last exception line stands in."""
    import io
    import logging
    import traceback

    from kafkalog_pipeline.operators import JobOutput
    from spark_jobs import crash
    from spark_jobs.storage import StorageError

    def job(argv):
        try:
            raise ConnectionRefusedError(111, "Connection refused")
        except OSError as err:  # as storage translates a boto error, ``from err``
            raise StorageError("s3://warehouse/catalog.db: could not connect to the endpoint "
                               "URL: 'http://127.0.0.1:9/'\n(more detail)") from err

    out = io.StringIO()
    assert crash.run(job, [], out) == 1
    printed = out.getvalue().splitlines()
    cause = "StorageError: s3://warehouse/catalog.db: could not connect to the endpoint URL: " \
            "'http://127.0.0.1:9/'"
    assert printed[0] == crash.CAUSE_PREFIX + cause
    assert printed[1] == "Traceback (most recent call last):" and len(printed) > 8
    assert crash.run(lambda argv: 65, []) == 65 and crash.run(lambda argv: {"x": 1}, []) == 0
    assert len(crash.cause_of(ValueError("x" * 5000))) == crash.MAX_CAUSE
    assert crash.cause_of(KeyError()) == "KeyError"

    spark_lines = ["26/11/25 22:48:20 INFO SparkContext: Running Spark version 4.2.0\n",
                   *[line + "\n" for line in printed]]
    reader = JobOutput(logging.getLogger("crash-output"))
    with caplog.at_level(logging.INFO, logger="crash-output"):
        rest = list(reader.lines(iter(spark_lines)))
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("ERROR", crash.CAUSE_PREFIX + cause)]
    assert rest == [spark_lines[0], *spark_lines[2:]]  # the traceback stays at INFO, after it
    assert reader.crash_cause(1) == cause
    # a crash before our code ran (no cause line): its last exception line
    bare = JobOutput(logging.getLogger("crash-output"))
    tb = "".join(traceback.format_exception(ModuleNotFoundError("No module named 'pyarrow'")))
    list(bare.lines(iter(["Traceback (most recent call last):\n", "  File \"x.py\", line 1\n",
                          *tb.splitlines(True),
                          "26/11/25 22:48:21 INFO ShutdownHookManager: Shutdown hook called\n"])))
    assert bare.crash_cause(1) == "ModuleNotFoundError: No module named 'pyarrow'"
    assert JobOutput(logging.getLogger("x")).crash_cause(137) == \
        "spark-submit exited with status 137 (no cause in its output)"
    # spark_entry: the module's main through crash.run
    from kafkalog_pipeline import spark_entry

    with pytest.raises(ModuleNotFoundError):
        spark_entry.main(["spark_jobs.no_such_job"])
    assert capsys.readouterr().err.startswith(
        crash.CAUSE_PREFIX + "spark_jobs.no_such_job: ModuleNotFoundError: No module named")


def test_data_quality_tab_says_why_a_run_has_no_report():
    sys.path.insert(0, str(DAGS.parent / "plugins"))  # as Airflow puts its plugins folder
    from kafkalog_quality.dag_runs import no_report_reason

    skipped = {"plan": "skipped", "decode_chunk": "skipped", "check_quality": "skipped"}
    assert no_report_reason(skipped, "nothing to decode for 2026-11-25: 0 segments") == \
        "no report: night skipped because nothing to decode for 2026-11-25: 0 segments"
    assert no_report_reason({"plan": "failed", "check_quality": "upstream_failed"}, None) == \
        "no report: the audit did not run, because plan failed"
    assert no_report_reason({"plan": "success", "decode_chunk": "failed",
                             "check_quality": None}, None) == \
        "no report: the audit did not run, because decode_chunk failed"
    assert no_report_reason({"plan": "success", "decode_chunk": "running",
                             "check_quality": None}, None).startswith("no report yet")
    assert no_report_reason({}, None, run_exists=False) == "no report: Airflow has no such DAG run"
    assert no_report_reason({"plan": "success", "decode_chunk": "failed", "check_quality": None},
                            None, cause="StorageError: s3://b/: unreachable") == \
        "no report: the audit did not run, because decode_chunk failed: StorageError: s3://b/: unreachable"
    assert no_report_reason({"plan": "success", "decode_chunk": "success",
                             "check_quality": "failed"}, None, cause="KeyError: 'x'") == \
        "no report: the audit crashed: KeyError: 'x'"
    # the tab's page for a DAG the audit does not cover (no warehouse or metadata read)
    from fastapi.testclient import TestClient

    from kafkalog_quality.links import create_view_app

    page = TestClient(create_view_app(authenticate=False)).get("/some_other_dag/manual__x")
    assert page.status_code == 404 and "no report: DAG some_other_dag is not audited" in page.text


@pytest.mark.parametrize("seed", range(20))
def test_plan_chunks_keeps_partitions_together_and_balances(seed):
    rng = random.Random(seed)
    segs = _segments(rng, rng.randrange(1, 30))
    target, max_chunks = rng.randrange(1_000, 40_000), rng.randrange(1, 8)
    chunks = snapshots.plan_chunks(segs, target_bytes=target, max_chunks=max_chunks)
    # every segment exactly once
    planned = [s for c in chunks for s in c.segments]
    assert sorted(planned) == sorted(segs)
    # a topic-partition lives in exactly one chunk
    owner = {}
    for c in chunks:
        for s in c.segments:
            assert owner.setdefault((s.topic, s.partition), c.chunk_id) == c.chunk_id
    sizes = {}
    for s in segs:
        sizes[(s.topic, s.partition)] = sizes.get((s.topic, s.partition), 0) + s.size
    total = sum(sizes.values())
    n = min(max_chunks, len(sizes), -(-total // target))
    assert len(chunks) == max(1, n)
    assert [c.chunk_id for c in chunks] == list(range(len(chunks)))
    assert all(c.bytes == sum(s.size for s in c.segments) for c in chunks)
    # greedy largest-first bound: no chunk exceeds the mean by more than one partition
    assert max(c.bytes for c in chunks) <= total / len(chunks) + max(sizes.values())
    # the same input gives the same plan
    again = snapshots.plan_chunks(list(reversed(segs)), target_bytes=target, max_chunks=max_chunks)
    assert [c.summary() for c in again] == [c.summary() for c in chunks]


def test_snapshot_dates_and_prefix():
    d = dt.datetime(2026, 11, 20, 3, tzinfo=dt.timezone.utc)
    assert snapshots.snapshot_dates(interval_start=d) == ["2026-11-20"]
    assert snapshots.snapshot_dates(logical_date=None, run_after=d) == ["2026-11-20"]
    assert snapshots.snapshot_dates("2026-11-19", "2026-11-21", interval_start=d) == [
        "2026-11-19", "2026-11-20", "2026-11-21"]
    assert snapshots.snapshot_dates(None, "2026-11-19") == ["2026-11-19"]
    with pytest.raises(ValueError, match="before it starts"):
        snapshots.snapshot_dates("2026-11-21", "2026-11-19")
    assert snapshots.snapshot_prefix("{prefix}/{snapshot_date}/", "/snaps/", "2026-11-20") \
        == "snaps/2026-11-20/"
    assert snapshots.snapshot_prefix("{prefix}/y={yyyy}/m={mm}/d={dd}", "s", "2026-01-02") \
        == "s/y=2026/m=01/d=02/"
    with pytest.raises(ValueError, match="does not use the snapshot date"):
        snapshots.snapshot_prefix("{prefix}/latest/", "s", "2026-11-20")
    with pytest.raises(ValueError, match="cannot be filled"):
        snapshots.snapshot_prefix("{prefix}/{day}/", "s", "2026-11-20")
    keep = snapshots.topic_matcher("orders*, legacy")
    assert [t for t in ("orders", "orders-eu", "legacy", "payments") if keep(t)] == [
        "orders", "orders-eu", "legacy"]


# ------------------------------------------------------------------ S3 listing (moto)
def _expected_segments(root: Path, date: str) -> list[tuple]:
    from tests.pipeline.demo_nights import demo_segments

    out = []
    for log, topic, partition in demo_segments(root / date):
        out.append((topic, partition, int(log.stem), log.stat().st_size))
    return sorted(out)



@pytest.fixture(scope="module")
def snapshot_root(tmp_path_factory, demo_nights):
    root = tmp_path_factory.mktemp("snapshots")
    demo_nights(root)  # demo.data.write_nights's (tests/pipeline/conftest.py)
    return root


def _client(endpoint):
    import boto3

    return boto3.client("s3", endpoint_url=endpoint)


def test_list_segments_with_paginator(s3_endpoint, s3_bucket, snapshot_root):
    from demo import data as demo_data
    from spark_jobs import storage

    demo_data.upload(snapshot_root, s3_bucket, "snaps", _client(s3_endpoint))
    access = storage.S3Config(endpoint_url=s3_endpoint)
    # a page size of 3 makes the paginator fetch many pages
    client = _client(s3_endpoint)
    real = client.get_paginator

    class SmallPages:
        def __init__(self, name):
            self.inner = real(name)

        def paginate(self, **kw):
            return self.inner.paginate(**kw, PaginationConfig={"PageSize": 3})

    client.get_paginator = SmallPages
    for date in demo_data.NIGHTS:
        segs, ignored = snapshots.list_segments(
            s3_bucket, {date: f"snaps/{date}/"}, access, client=client)
        assert sorted((s.topic, s.partition, s.base_offset, s.size) for s in segs) \
            == _expected_segments(snapshot_root, date)
        n_files = sum(1 for p in (snapshot_root / date).rglob("*") if p.is_file())
        assert ignored == n_files - len(segs)  # index files, _SUCCESS, README.txt
        assert all(s.uri.startswith(f"s3://{s3_bucket}/snaps/{date}/") for s in segs)
    only = snapshots.list_segments(s3_bucket, {"2026-11-21": "snaps/2026-11-21/"}, access,
                                   topics="pay*")[0]
    assert {s.topic for s in only} == {"payments"}


def test_missing_bucket_is_permanent_and_clear(s3_endpoint):
    from spark_jobs import storage

    access = storage.S3Config(endpoint_url=s3_endpoint)
    with pytest.raises(snapshots.PermanentS3Error, match="bucket does not exist"):
        snapshots.list_segments("no-such-bucket-here", {"d": "p/2026-11-20/"}, access)


def test_unreachable_endpoint_is_transient():
    from spark_jobs import storage

    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    access = storage.S3Config(endpoint_url=f"http://127.0.0.1:{port}", region="us-east-1",
                               access_key="x", secret_key="y")
    with pytest.raises(snapshots.TransientS3Error, match="cannot list"):
        snapshots.list_segments("b", {"d": "p/2026-11-20/"}, access)


def test_a_plan_that_cannot_reach_s3_says_its_cause_first(monkeypatch, tmp_path):
    """S3 unreachable at plan time: the plan's cause, one line at ERROR before Airflow's
    traceback, pushed to XCom for the run's note and its Data quality tab."""
    import logging
    import socket

    from kafkalog_pipeline import tasks

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing answers there
    for name, value in {"KAFKALOG_WAREHOUSE": str(tmp_path / "w"), "KAFKALOG_SNAPSHOT_BUCKET": "b",
                        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "x",
                        "AWS_SECRET_ACCESS_KEY": "y", "AWS_DEFAULT_REGION": "us-east-1",
                        "AWS_MAX_ATTEMPTS": "1"}.items():
        monkeypatch.setenv(name, value)
    pushed = {}
    night = dt.datetime(2026, 11, 22, 3, tzinfo=dt.timezone.utc)
    context = {"ti": PlanTaskInstance(pushed), "run_id": "scheduled__2026-11-22T03:00:00+00:00",
               "params": {}, "logical_date": night, "data_interval_start": night}
    said = []

    class Lines(logging.Handler):
        def emit(self, record):
            said.append((record.levelname, record.getMessage()))

    handler = Lines()
    tasks.log.addHandler(handler)
    try:
        with pytest.raises(Exception) as raised:
            tasks.plan_task(context)
    finally:
        tasks.log.removeHandler(handler)
    cause = pushed[tasks.CAUSE_KEY]
    assert cause.startswith(type(raised.value).__name__ + ": ") and "\n" not in cause
    assert f"127.0.0.1:{port}" in cause and "cannot list" in cause, cause
    assert ("ERROR", f"plan stopped: {cause}") in said


# ------------------------------------------------------------------ S3 access (connection or environment)
def test_a_connections_keys_are_explicit_handed_to_spark_and_never_shown(monkeypatch):
    import json

    from kafkalog_pipeline import settings

    monkeypatch.setenv("AIRFLOW_CONN_KAFKALOG_TEST_S3", json.dumps(
        {"conn_type": "aws", "login": "AKIATESTKEYID", "password": "secret-of-the-test",
         "extra": {"endpoint_url": "http://s3.test:9000", "region_name": "eu-west-1",
                   "aws_session_token": "token-of-the-test"}}))
    access = settings.s3_access("kafkalog_test_s3")
    assert (access.explicit, access.source) == (True, "connection kafkalog_test_s3")
    assert access.child_env() == {
        "AWS_ENDPOINT_URL": "http://s3.test:9000", "AWS_DEFAULT_REGION": "eu-west-1",
        "AWS_ACCESS_KEY_ID": "AKIATESTKEYID", "AWS_SECRET_ACCESS_KEY": "secret-of-the-test",
        "AWS_SESSION_TOKEN": "token-of-the-test"}
    env = settings.spark_env(access)
    assert env["AWS_ACCESS_KEY_ID"] == "AKIATESTKEYID" and "PYSPARK_PYTHON" in env
    assert access.resolved() == access  # keys and region given: nothing to resolve
    for shown in (repr(access), str(access), repr(access.resolved())):
        assert "AKIATESTKEYID" not in shown and "secret-of-the-test" not in shown
        assert "token-of-the-test" not in shown
    assert repr(access) == ("S3Config(endpoint_url='http://s3.test:9000', region='eu-west-1', "
                            "explicit_keys=True, source='connection kafkalog_test_s3')")


def test_the_environments_keys_stay_in_the_environment(monkeypatch):
    """Without a connection (or without keys in it) the keys come from boto's chain when the
    pipeline itself reaches S3, and spark-submit resolves its own: it is handed none."""
    import json

    from kafkalog_pipeline import settings

    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://s3.env:9000")
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-central-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAENVKEYID")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret-of-the-env")
    monkeypatch.setenv("AIRFLOW_CONN_KAFKALOG_KEYLESS_S3", json.dumps(
        {"conn_type": "aws", "extra": {"region_name": "ap-south-1"}}))
    for conn_id, source, region in (("kafkalog_no_such_conn", "environment", "eu-central-1"),
                                    ("kafkalog_keyless_s3", "connection kafkalog_keyless_s3",
                                     "ap-south-1")):
        access = settings.s3_access(conn_id)
        assert (access.explicit, access.source, access.access_key) == (False, source, None)
        assert access.child_env() == {"AWS_ENDPOINT_URL": "http://s3.env:9000",
                                      "AWS_DEFAULT_REGION": region}
        resolved = access.resolved()
        assert (resolved.endpoint_url, resolved.region, resolved.access_key,
                resolved.secret_key) == ("http://s3.env:9000", region, "AKIAENVKEYID",
                                         "secret-of-the-env")
        assert (resolved.explicit, resolved.source) == (False, source)
        assert "AWS_ACCESS_KEY_ID" not in resolved.child_env()
        assert "AKIAENVKEYID" not in repr(resolved) and "secret-of-the-env" not in repr(resolved)


def test_explicit_keys_need_an_access_key():
    from spark_jobs import storage

    with pytest.raises(ValueError, match="need an access key"):
        storage.S3Config(endpoint_url="http://s3.test:9000", explicit=True)


# ------------------------------------------------------------------ plan_run (moto, no Spark)
def _ingest_here(warehouse: Path, run_id: str, input_uri: str, s3) -> None:
    """Decode ``input_uri`` in this process (the job's plan and tasks, no Spark) and
    publish it, ledger included, as the decode job does."""
    from spark_jobs import decode as job
    from spark_jobs.warehouse import Warehouse
    from spark_jobs.decode.writing import write_driver_table

    wh = Warehouse(str(warehouse), s3=s3)
    wh.begin_run(run_id, reset=True)
    ctx = job.make_context(wh, run_id, "t", ingested_at=dt.datetime.now(dt.timezone.utc).isoformat())
    segments, _ = job.discover(input_uri, s3)
    rows = [job.run_task(t, ctx) for t in job.plan(segments, {}, {}, {})]
    files = job.task_files(rows)
    files["ledger"] += write_driver_table(ctx, "ledger", job.ledger_table(rows), "ledger")
    for name, uris in files.items():
        wh.commit_files(name, run_id, uris)
    wh.publish(run_id)


def test_plan_run_lists_every_segment_and_weighs_only_bytes_to_decode(
        s3_endpoint, s3_bucket, snapshot_root, tmp_path, monkeypatch):
    """Night 2 after night 1 was ingested: every listed segment goes to the decode job
    (its `unchanged` ledger rows let the audit grade gaps against the whole snapshot:
    payments-1's segment 0 before the planted hole), while chunks count only the bytes
    the job will decode; a night where nothing changed plans no chunk (a clean skip)."""
    import math

    from demo import data as demo_data
    from kafkalog_pipeline import tasks
    from spark_jobs import layout, storage

    demo_data.upload(snapshot_root, s3_bucket, "snaps", _client(s3_endpoint))
    access = storage.S3Config(endpoint_url=s3_endpoint)
    W = tmp_path / "w"
    night1, night2 = demo_data.NIGHTS
    _ingest_here(W, "night-1", f"s3://{s3_bucket}/snaps/{night1}/", access.resolved())
    target, max_chunks = 3000, 4
    monkeypatch.setenv("KAFKALOG_CHUNK_BYTES", str(target))
    monkeypatch.setenv("KAFKALOG_MAX_CHUNKS", str(max_chunks))

    def plan(run_id, date, **kw):
        return tasks.plan_run(run_id=run_id, dates=[date], warehouse=str(W), bucket=s3_bucket,
                              prefix="snaps", access=access, **kw)

    def sizes(date):
        return {log.relative_to(snapshot_root / date).as_posix(): log.stat().st_size
                for log in (snapshot_root / date).rglob("*.log")}  # broker-2/ is deeper

    def planned(summary):
        """{segment path under the night: chunk id} of the plan's manifests."""
        out = {}
        for args in summary["decode_args"]:
            uri = args[args.index("--input") + 1]
            store, key = storage.open_object(uri, access.resolved())
            for entry in layout.read_manifest(store.read(key), uri):
                path = entry["uri"].split(f"/{date}/", 1)[1]
                assert out.setdefault(path, int(args[args.index("--chunk-id") + 1])) is not None
        return out

    # expected from the files: a segment of night 1 copied again weighs nothing, one
    # that grew weighs its new bytes (night 1 ends on a whole batch), a new one all of it
    old, new = sizes(night1), sizes(night2)
    work = {p: 0 if old.get(p) == n else n - old.get(p, 0) for p, n in new.items()}
    date = night2
    summary = plan("night-2", night2)
    assert sorted(planned(summary)) == sorted(new)  # every listed segment, once
    # the partitions' state files ride in the manifest of their partition's chunk
    state = {}
    for args in summary["decode_args"]:
        uri = args[args.index("--input") + 1]
        store, key = storage.open_object(uri, access.resolved())
        for f in layout.read_manifest_state_files(store.read(key), uri):
            state[f.split(f"/{date}/", 1)[1]] = int(args[args.index("--chunk-id") + 1])
    chunks = planned(summary)

    def chunk_of_folder(folder):  # a partition stays in one chunk
        found = {c for p, c in chunks.items() if p.startswith(folder + "/")}
        assert len(found) == 1, (folder, found)
        return found.pop()

    assert state == {**{f"payments-0/{name}": chunks["payments-0/00000000000000000015.log"]
                        for name in ("00000000000000000015.snapshot", "leader-epoch-checkpoint",
                                     "partition.metadata")},
                     # broker-2's hanging producer (demo.data) and the tiered topic's local tail
                     "broker-2/transfers-0/00000000000000000005.snapshot":
                         chunk_of_folder("broker-2/transfers-0"),
                     "events-0/leader-epoch-checkpoint": chunk_of_folder("events-0")}
    assert planned(summary)["payments-1/00000000000000000000.log"] is not None
    assert summary["segments"] == len(new)
    assert summary["already_ingested"] == sum(old.get(p) == n for p, n in new.items()) > 0
    assert summary["bytes"] == sum(work.values()) > 0
    busy = {p.split("/")[0] for p, n in work.items() if n}
    assert len(summary["chunks"]) == max(1, min(max_chunks, len(busy),
                                                math.ceil(summary["bytes"] / target)))
    chunk_of = planned(summary)
    for chunk in summary["chunks"]:
        assert chunk["bytes"] == sum(work[p] for p, c in chunk_of.items() if c == chunk["chunk_id"])
    # reprocess: every byte again
    assert plan("night-2-again", night2, reprocess=True)["bytes"] == sum(new.values())
    # night 1 again under another run id: nothing changed, nothing to decode, no chunk
    date = night1
    again = plan("night-1-again", night1)
    assert (again["decode_args"], again["chunks"], again["bytes"]) == ([], [], 0)
    assert again["segments"] == again["already_ingested"] == len(old)


def test_a_night_without_a_snapshot_is_a_result_and_a_stray_log_is_decoded(
        s3_endpoint, s3_bucket, tmp_path, monkeypatch):
    """A scheduled night whose prefix holds no .log: the plan writes a snapshot_missing row
    (warn by the policy), pushes it as the run's verdict and what it did not find, and
    fails, saying why and what to do when the copy arrives (issue 42: such a run is no green
    success); where the policy accepts such a night it skips instead. A night holding only a
    .log outside any partition folder is not missing: the plan gives it to the decode job
    (which records an unparsable_name finding the audit grades)."""
    from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException
    from pyiceberg.expressions import EqualTo

    from kafkalog_pipeline import tasks
    from spark_jobs import layout, storage, tables

    client = _client(s3_endpoint)
    client.put_object(Bucket=s3_bucket, Key="snaps/2026-11-22/README.txt", Body=b"not a segment")
    stray = f"snaps/2026-11-23/misc/{0:020d}.log"
    client.put_object(Bucket=s3_bucket, Key=stray, Body=b"\0" * 61)
    W = tmp_path / "w"
    for name, value in {"KAFKALOG_WAREHOUSE": str(W), "KAFKALOG_SNAPSHOT_BUCKET": s3_bucket,
                        "KAFKALOG_SNAPSHOT_PREFIX": "snaps"}.items():
        monkeypatch.setenv(name, value)
    pushed = {}
    night = dt.datetime(2026, 11, 22, 3, tzinfo=dt.timezone.utc)
    run_id = "scheduled__2026-11-22T03:00:00+00:00"
    context = {"ti": PlanTaskInstance(pushed), "run_id": run_id, "params": {}, "logical_date": night,
               "data_interval_start": night}
    with pytest.raises(AirflowFailException, match="no snapshot for 2026-11-22") as failed:
        tasks.plan_task(context)
    assert "snapshot_missing recorded as a warning" in str(failed.value)
    assert "When the copy arrives, clear this run" in str(failed.value)
    assert pushed[tasks.VERDICT_KEY] == {"fail": 0, "warn": 1, "pass": 0, "failed": {},
                                         "warned": {"snapshot_missing": ["2026-11-22"]}}
    assert pushed[tasks.NO_SNAPSHOT_KEY] == {"nights": ["2026-11-22"],
                                             "where": [f"s3://{s3_bucket}/snaps/2026-11-22/"]}
    assert tasks.SKIP_REASON_KEY not in pushed
    [row] = tables.read_arrow(str(W), "dq_results", row_filter=EqualTo("run_id", run_id)).to_pylist()
    assert (row["check"], row["topic"], row["partition"], row["night"], row["status"]) == (
        "snapshot_missing", None, None, "2026-11-22", "warn")
    # a policy that accepts a night without a snapshot: the plan skips, saying so
    from spark_jobs.audit.policy import Policy

    default, load = Policy.load(), Policy.__dict__["load"]
    accepting = Policy({"checks": {**default.checks, "snapshot_missing": {"severity": "pass"}}})
    monkeypatch.setattr(Policy, "load", classmethod(lambda cls, path=None: accepting))
    pushed.clear()
    with pytest.raises(AirflowSkipException, match="the policy accepts a night without"):
        tasks.plan_task({**context, "run_id": "accepting"})
    assert pushed[tasks.VERDICT_KEY]["pass"] == 1 and tasks.NO_SNAPSHOT_KEY in pushed
    monkeypatch.setattr(Policy, "load", load)

    summary = tasks.plan_run(run_id="n23", dates=["2026-11-23"], warehouse=str(W),
                             bucket=s3_bucket, prefix="snaps")
    assert summary["missing_nights"] == [] and summary["verdict"] is None
    [args] = summary["decode_args"]
    uri = args[args.index("--input") + 1]
    store, key = storage.open_object(uri, None if not storage.is_s3(uri) else
                                     tasks.settings.s3_access().resolved())
    assert [e["uri"] for e in layout.read_manifest(store.read(key), uri)] == [
        f"s3://{s3_bucket}/{stray}"]


def test_a_chunk_spec_renders_the_decode_jobs_arguments_and_names_its_task():
    """The planner's decode arguments are ChunkSpec's, which the decode job parses back; the
    mapped task is named ``chunk K`` from them, by the flag (the DAG indexes no argv)."""
    from jinja2.sandbox import SandboxedEnvironment

    from spark_jobs.decode.cli import parse_args
    from spark_jobs.layout import ChunkSpec

    spec = ChunkSpec(input="s3://b/_staging/t/_manifests/chunk-3.json", output="s3://w/h",
                     run_id="manual__2026-11-25", chunk_id=3, catalog="c", namespace="n",
                     reprocess=True, s3_endpoint="http://127.0.0.1:9",
                     more=("--schema-registry", "s3://b/_schemas.json"))
    args = parse_args(spec.argv())
    assert (args.input, args.output, args.run_id, args.chunk_id, args.no_publish, args.catalog,
            args.namespace, args.reprocess, args.s3_endpoint, args.schema_registry) == (
        spec.input, spec.output, spec.run_id, "3", True, "c", "n", True, spec.s3_endpoint,
        "s3://b/_schemas.json")
    assert "--reprocess" not in ChunkSpec(**{**vars(spec), "reprocess": False}).argv()
    keyed = parse_args(ChunkSpec(**{**vars(spec), "latest_topics": r"shop\..*",
                                    "cdc_topics": "dbserver1[.].*"}).argv())
    assert (keyed.latest_topics, keyed.cdc_topics) == (r"shop\..*", "dbserver1[.].*")
    assert (args.latest_topics, args.cdc_topics) == (None, None)
    with pytest.raises(SystemExit):  # a bad regular expression is a usage error
        parse_args([*spec.argv(), "--latest-topics", "("])

    class Task:
        application_args = ["spark_jobs.decode_segments", *spec.argv()]

    assert SandboxedEnvironment().from_string(ChunkSpec.map_index_template()).render(
        task=Task()) == "chunk 3"


def test_the_audit_is_told_the_policy_setting(monkeypatch, tmp_path):
    """The ``policy`` setting (kafkalog_policy / KAFKALOG_POLICY) reaches the audit as
    ``--policy`` (the demo's: demo.exactly_once.write_policy); unset, the audit's argv is the
    DAG's and the product's expectations/policy.yaml grades."""
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    from demo import exactly_once
    from kafkalog_pipeline import tasks
    from kafkalog_pipeline.operators import KafkalogSparkSubmitOperator
    from spark_jobs.audit.policy import Policy

    seen = []

    def submit(self, context):
        seen.append(list(self.application_args))
        self.job_output = type("Output", (), {"verdict": None})()
    monkeypatch.setattr(SparkSubmitOperator, "execute", submit)
    monkeypatch.delenv("KAFKALOG_POLICY", raising=False)
    KafkalogSparkSubmitOperator(task_id="q", application="x.py",
                                application_args=tasks.quality_args()).execute({"params": {}})
    path = exactly_once.write_policy(tmp_path / "policy.yaml")
    monkeypatch.setenv("KAFKALOG_POLICY", str(path))
    KafkalogSparkSubmitOperator(task_id="q2", application="x.py",
                                application_args=tasks.quality_args()).execute({"params": {}})
    assert seen == [tasks.quality_args(), [*tasks.quality_args(), "--policy", str(path)]]
    demo = Policy.load(str(path))
    monkeypatch.delenv("KAFKALOG_POLICY")  # Policy.load() reads the setting's file otherwise
    product = Policy.load()
    assert demo.severity("receipts", "zombie_write", "fenced_write") == "warn"
    assert demo.severity("__consumer_offsets", "double_consumption", "double_consumption") == "warn"
    assert product.severity("receipts", "zombie_write", "fenced_write") == "fail"
    assert product.severity("__consumer_offsets", "double_consumption",
                            "double_consumption") == "fail"
    assert demo.for_topic("__consumer_offsets")["compacted"]  # the product's override kept
    assert demo.for_topic("orders") == product.for_topic("orders")
