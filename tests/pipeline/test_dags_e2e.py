"""``dag.test()`` of the nightly DAG end to end: moto S3 on 127.0.0.1, local Spark, SQLite.

Two nights of snapshots (demo.data) are uploaded to the moto
server; the DAG runs for each night, then as a manual run over both dates with
``reprocess`` (a new run id: deduplicated). A rerun of a night (same run id) is
tests/pipeline/test_backfill.py's step 3, through the scheduler.
Expected record counts come from decoding the snapshot files here with
``kafkalog.decode`` and taking the distinct (topic, partition, offset) of records
whose batch CRC is valid; the warehouse is read with pyarrow.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from pathlib import Path

import pytest

# Airflow reads its configuration at import: airflow_env sets it first.
from tests.airflow_env import DAG_ID, DAGS  # noqa: E402

from spark_jobs.warehouse import Warehouse, branch_name  # noqa: E402
from spark_jobs.warehouse.history import published_snapshot  # noqa: E402
from spark_jobs.layout import TABLE_NAMES  # noqa: E402
from spark_jobs.audit import registry  # noqa: E402

from tests.pipeline.demo_nights import (expected_records, record_keys,  # noqa: E402
                                        upload_crc_night, warehouse_rows)

pytestmark = [pytest.mark.pipeline, pytest.mark.slow]

NIGHTS = ("2026-11-20", "2026-11-21")
#: the exactly-once checks (spark_jobs/audit/eos.py, issue 45)
EOS_CHECKS = tuple(c.name for c in registry.EOS_CHECKS)


# ------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def pipeline(pipeline, tmp_path_factory):
    """The demo's snapshots in a fresh bucket and a fresh warehouse (tests/pipeline/conftest.py),
    and the demo's Kafka->lake sink (demo.sink), which each night's audit reconciles: the DAG
    param sinks' default (read at parse time: before the ``dag`` fixture)."""
    from demo import sink as demo_sink

    sinks_file = demo_sink.write(tmp_path_factory.mktemp("sink"), pipeline["root"])
    old = os.environ.get("KAFKALOG_SINKS")
    os.environ["KAFKALOG_SINKS"] = str(sinks_file)
    yield pipeline
    if old is None:
        os.environ.pop("KAFKALOG_SINKS", None)
    else:
        os.environ["KAFKALOG_SINKS"] = old


@pytest.fixture(scope="module")
def dag(pipeline):
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {}
    return bag.dags[DAG_ID]


#: every param, as the trigger form sends them: dag.test() in one process otherwise carries
#: one run's conf over into the next run's params
DEFAULT_CONF = {"date_from": None, "date_to": None, "topics": "*", "reprocess": False}


def run(dag, date=None, conf=None):
    """One dag.test() run, as `make demo` runs it (task logs where the UI reads them, real
    start time: demo.nights.dag_test_like_a_worker); (run_id, state, {task: state})."""
    from demo.nights import dag_test_like_a_worker

    conf = {**DEFAULT_CONF, **(conf or {})}
    with dag_test_like_a_worker(dag):
        if date is not None:
            logical = dt.datetime.fromisoformat(date).replace(hour=3, tzinfo=dt.timezone.utc)
            dr = dag.test(logical_date=logical, run_after=logical, run_conf=conf)
        else:  # a manual run without a logical date (Airflow 3), e.g. from the trigger form
            dr = dag.test(logical_date=None,
                          run_after=dt.datetime(2026, 11, 22, 9, tzinfo=dt.timezone.utc),
                          run_conf=conf)
    states = {}
    for ti in dr.get_task_instances():
        states.setdefault(ti.task_id, []).append(str(ti.state).rsplit(".", 1)[-1].lower())
    return dr.run_id, str(dr.state).rsplit(".", 1)[-1].lower(), states


@pytest.fixture(scope="module")
def api(airflow_db):
    """The api-server's app in this process (no server started): ``api(path)`` GETs it as
    an admin (the simple auth manager's token)."""
    from fastapi.testclient import TestClient

    from airflow.api_fastapi.app import create_app
    from airflow.configuration import conf

    conf.set("core", "simple_auth_manager_all_admins", "True")
    client = TestClient(create_app())
    token = client.get("/auth/token").json()["access_token"]

    def get(path: str):
        resp = client.get(path, headers={"Authorization": f"Bearer {token}",
                                          "Accept": "application/json"})
        assert resp.status_code == 200, (path, resp.status_code, resp.text[:2000])
        return resp.json()

    return get


def task_log(api, run_id: str, task_id: str, try_number: int = 1) -> list[dict]:
    """The task try's log as the UI gets it (REST API, structured lines)."""
    from urllib.parse import quote

    body = api(f"/api/v2/dags/{DAG_ID}/dagRuns/{quote(run_id, safe='')}/taskInstances/"
               f"{task_id}/logs/{try_number}")
    lines = [line for line in body["content"] if isinstance(line, dict)]
    assert not any("Log file not found" in str(line.get("event")) for line in lines), lines
    return lines


def events(lines: list[dict], level: str | None = None) -> list[str]:
    return [str(line.get("event")) for line in lines
            if level is None or line.get("level") == level]


def task_instance(run_id: str, task_id: str):
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        ti = session.query(TaskInstance).filter_by(dag_id=DAG_ID, run_id=run_id,
                                                   task_id=task_id).one()
        session.expunge(ti)
        return ti


# ------------------------------------------------------------------ the test
def test_two_nights_and_manual_reprocess(dag, pipeline, api):
    from spark_jobs.storage import run_token

    wh, root = pipeline["warehouse"], pipeline["root"]

    # night 1
    run_id, state, tasks = run(dag, NIGHTS[0])
    assert state == "success", tasks
    assert len(tasks["decode_chunk"]) == 2 and set(tasks["decode_chunk"]) == {"success"}
    assert tasks["check_quality"] == ["success"] and tasks["publish"] == ["success"]
    want = expected_records(root, NIGHTS[:1])
    keys = record_keys(wh)
    assert len(keys) == len(set(keys))
    assert {t: {(p, o) for tt, p, o in keys if tt == t} for t in {k[0] for k in keys}} == want
    token1 = run_token(run_id)
    published = Warehouse(str(wh)).table("ledger")
    assert published_snapshot(published, run_id) is not None
    assert branch_name(run_id) not in published.refs()  # publish dropped the branch
    assert (wh / "data_docs" / token1 / "index.html").exists()
    # night 1's one finding beyond the log's own: the demo sink's duplicate (demo.sink)
    assert xcom(run_id, "check_quality")["warned"].get("sink_reconcile") == [
        "shipments-0 (sink demo-shipments)"]
    # every table's asset has the run's event; the internal topics' and the typed tables
    # through the alias, each one the publish moved (night 1 brings rows for all of them:
    # Avro, JSON Schema and Protobuf values)
    typed = {"values__clicks", "values__shipments", "values__shop_dot_orders"}
    # the derived tables this snapshot has rows for: issue 19's, and remote_segments (the
    # demo's __remote_log_metadata-0; no tier is read here); night 1 has no log directory
    # files and no share groups: their tables get no event; payments' transactional
    # producers give producer_transactions rows (issue 45)
    DERIVED_TABLES = ("consumer_offsets", "group_metadata", "transactions", "cluster_metadata",
                      "producer_state", "leader_epochs", "remote_segments",
                      "producer_transactions")
    assert set(Warehouse(str(wh)).typed_tables()) == typed
    # the per-key state tables (issue 35): customers and orders show the cleaner's work
    # (orders-1's compacted batch), dbserver1.inventory.customers holds Debezium envelopes
    keyed = {"latest__customers", "latest__orders", "cdc__dbserver1_dot_inventory_dot_customers"}
    assert set(Warehouse(str(wh)).keyed_tables()) == keyed
    assert asset_names(run_id) == {f"kafkalog.{n}" for n in
                                   {*TABLE_NAMES, *DERIVED_TABLES, *typed, *keyed}}

    # night 2: rolled segments seen on night 1 are not decoded again, new bytes are
    run_id2, state, tasks = run(dag, NIGHTS[1])
    assert state == "success", tasks
    want = expected_records(root, NIGHTS)
    keys = record_keys(wh)
    assert len(keys) == len(set(keys)), "duplicate records after night 2"
    assert {t: {(p, o) for tt, p, o in keys if tt == t} for t in {k[0] for k in keys}} == want
    ledger2 = [r for r in warehouse_rows(wh, "ledger") if r["run_id"] == run_id2]
    assert ledger2, "night 2 decoded nothing"
    # the job saw every listed segment (the audit grades gaps against all of them) and
    # decoded none seen on night 1 again: it wrote an `unchanged` row for each
    assert {(r["topic"], r["segment_base_offset"], r["action"]) for r in ledger2
            if r["topic"] in ("legacy", "payments") and r["segment_base_offset"] == 0} == {
        ("legacy", 0, "unchanged"), ("payments", 0, "unchanged")}
    # so payments-1's planted hole (15..24, after the unchanged segment 0) is a missing segment
    gaps = [r for r in warehouse_rows(wh, "dq_results") if (r["run_id"], r["check"], r["topic"],
            r["partition"]) == (run_id2, "offset_gaps", "payments", 1)]
    assert [(r["status"], json.loads(r["details"])["classes"]) for r in gaps] == [
        ("warn", {"missing_segment": {"status": "warn", "items": 1, "offsets": 10}})]
    # the audit's verdict is check_quality's return value and in the table assets' events
    verdict = xcom(run_id2, "check_quality")
    assert verdict["fail"] == 0 and verdict["warn"] > 0 and verdict["pass"] > 0, verdict
    assert verdict["warned"]["offset_gaps"] == ["payments-1"], verdict
    # the second broker's folder (demo.data.BROKER_2): producer 7000's transaction in
    # transfers-0, open ten minutes with no marker, past the 60 s default timeout
    assert verdict["warned"]["hanging_transaction"] == ["transfers-0"], verdict
    # the read-process-write application's two planted faults (demo.exactly_once), warn by
    # the demo's policy, and no other exactly-once finding (night 1 has none)
    assert {c: v for c, v in verdict["warned"].items() if c in EOS_CHECKS} == {
        "zombie_write": ["receipts-0"], "double_consumption": ["__consumer_offsets-1"]}, verdict
    assert not {c for c in xcom(run_id, "check_quality")["warned"] if c in EOS_CHECKS}
    # the demo's sink (demo.sink, the DAG param sinks): its planted duplicate, one warning
    # of the night (the sink grades it warn), its totals in the verdict and the note
    assert verdict["warned"]["sink_reconcile"] == ["shipments-0 (sink demo-shipments)"], verdict
    assert verdict["sinks"] == {"demo-shipments": {
        "status": "warn", "mode": "append", "partitions": 1, "delivered": 4, "missing": 0,
        "duplicates": 1, "leaks": 0, "lag": 0}}, verdict
    sink_rows = [r for r in warehouse_rows(wh, "dq_results")
                 if (r["run_id"], r["check"]) == (run_id2, "sink_reconcile")]
    assert [(r["topic"], r["partition"], r["status"], json.loads(r["details"])["classes"],
             json.loads(r["details"])["sink"]) for r in sink_rows] == [
        ("shipments", 0, "warn", {"duplicate": {"status": "warn", "items": 1, "offsets": 1}},
         "demo-shipments")]
    assert asset_extra(run_id2)["verdict"] == verdict
    # and the run's note, beside its state in Airflow's views (kafkalog_pipeline.notes)
    note = run_note(api, run_id2)
    # its first paragraph the verdict's line (which names the first six of a dozen warnings:
    # Airflow keeps 1000 characters of a note; the verdict above names every one)
    from kafkalog_pipeline.notes import verdict_line

    assert note.startswith(f"DQ: {verdict['warn']} warned: "), note
    assert note.split("\n\n")[0] == verdict_line(verdict), note
    assert verdict["warned"]["offset_gaps"] == ["payments-1"], verdict
    assert ("Sinks: demo-shipments warn: delivered 4, missing 0, duplicates 1, leaks 0, lag 0"
            in note.split("\n\n")), note
    # night 2 brings new offset commits, state files, orders and clicks, broker-2's own
    # files (broker_state, partition_checkpoints) and the tier's state as of the night, but
    # no group or cluster metadata records and no new shipments: no event for those
    # (producer 8200's late COMMIT in customers-0 rebuilds its producer_transactions; the
    # read-process-write application's coordinator logs night 2's transactions)
    assert asset_names(run_id2) == {f"kafkalog.{n}" for n in
                                    {*TABLE_NAMES, *DERIVED_TABLES, *typed, *keyed,
                                     "broker_state", "partition_checkpoints"}} - {
        "kafkalog.group_metadata", "kafkalog.cluster_metadata", "kafkalog.values__shipments"}
    counts = {name: len(warehouse_rows(wh, name)) for name in ("records", "batches", "markers")}

    # (the same night again, same run id, is test_backfill's step 3: Airflow clears and
    # reruns it, and the warehouse is compared key by key)

    # a manual run over both dates, reprocessing everything: a new run id, still no duplicates
    manual, state, tasks = run(dag, None, {"date_from": NIGHTS[0], "date_to": NIGHTS[1],
                                           "topics": "*", "reprocess": True})
    assert state == "success", tasks
    assert manual not in (run_id, run_id2)
    keys = record_keys(wh)
    assert len(keys) == len(set(keys)) == counts["records"]
    assert {name: len(warehouse_rows(wh, name)) for name in counts} == counts

    # a manual run for one topic without reprocess: everything is already ingested: clean skip
    _, state, tasks = run(dag, None, {"date_from": NIGHTS[1], "topics": "orders"})
    assert state == "success" and tasks["plan"] == ["skipped"], tasks
    assert tasks["publish"] == ["skipped"]


def test_a_night_without_a_snapshot_fails_the_run_and_says_so(dag, pipeline, api):
    """Nothing was copied on 2026-11-25: the run decodes, audits and publishes nothing, and
    is no green success (issue 42): its plan fails at once (no retry: nothing will appear by
    retrying), the night is a result (a snapshot_missing row, warn by the policy; the plan's
    verdict XCom), the run's note says "no snapshot" and what to do when the copy arrives,
    and its Data quality tab opens the run's report."""
    import sys

    sys.path.insert(0, str(DAGS.parent / "plugins"))  # as Airflow puts its plugins folder
    from kafkalog_quality.dag_runs import run_states
    from kafkalog_quality.links import report_url

    began = dt.datetime.now(dt.timezone.utc)
    run_id, state, tasks = run(dag, "2026-11-25")  # nothing was copied that night
    assert state == "failed", tasks
    assert tasks["plan"] == ["failed"] and tasks["check_quality"] == ["upstream_failed"]
    assert tasks["publish"] == ["upstream_failed"]
    assert task_instance(run_id, "plan").try_number == 1  # AirflowFailException: no retry
    # the run's real start and end (dag.test() alone starts it at its logical date)
    body = api(f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}")
    start, end = (dt.datetime.fromisoformat(body[k]) for k in ("start_date", "end_date"))
    assert began <= start <= end <= dt.datetime.now(dt.timezone.utc), body
    # the plan task's log, read by the api-server, says why and what to do
    reason = "no snapshot for 2026-11-25: no segment under "
    log = task_log(api, run_id, "plan")
    assert any(reason in e for e in events(log, "warning")), events(log)
    failure = [line for line in log if line.get("event") == "Task failed with exception"]
    assert failure and f"AirflowFailException: {reason}" in str(failure), failure
    assert "snapshot_missing recorded as a warning" in str(failure)
    assert "When the copy arrives, clear this run" in str(failure)
    verdict = {"fail": 0, "warn": 1, "pass": 0, "failed": {},
               "warned": {"snapshot_missing": ["2026-11-25"]}}
    assert xcom(run_id, "plan", "verdict") == verdict
    note = run_note(api, run_id)
    assert note.startswith("DQ: no snapshot for 2026-11-25 — no segment under s3://"), note
    assert "(snapshot_missing warned); nothing read, nothing published. When the copy " \
        "arrives, clear this run" in note
    exists, states, _, _ = run_states(DAG_ID, run_id)
    assert exists and states["plan"] == "failed"
    # the Data quality tab opens the run's report: the night has a result
    from urllib.parse import quote

    from fastapi.testclient import TestClient

    from kafkalog_quality.links import create_view_app

    page = TestClient(create_view_app(authenticate=False)).get(
        f"/{DAG_ID}/{quote(run_id, safe='')}", follow_redirects=False)
    assert page.status_code == 307, page.text
    assert page.headers["location"] == report_url(run_id)


def run_note(api, run_id: str) -> str | None:
    """The run's note as Airflow's REST API gives it to the UI."""
    from urllib.parse import quote

    return api(f"/api/v2/dags/{DAG_ID}/dagRuns/{quote(run_id, safe='')}")["note"]


def xcom(run_id: str, task_id: str, key: str = "return_value"):
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        row = session.scalars(XComModel.get_many(run_id=run_id, dag_ids=DAG_ID, task_ids=task_id,
                                                 key=key, limit=1)).first()
        return None if row is None else XComModel.deserialize_value(row)


def asset_extra(run_id: str) -> dict:
    """The ``extra`` of the records asset's event of run ``run_id``."""
    from airflow.models.asset import AssetEvent
    from airflow.utils.session import create_session

    with create_session() as session:
        extras = [e.extra for e in session.query(AssetEvent).all()
                  if (e.extra or {}).get("run_id") == run_id]
    assert extras, f"no asset event of {run_id}"
    return extras[-1]


def asset_names(run_id: str) -> set[str]:
    """The assets that have an event of run ``run_id``."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        return {name for name, extra in session.query(AssetModel.name, AssetEvent.extra)
                .join(AssetModel, AssetModel.id == AssetEvent.asset_id)
                if (extra or {}).get("run_id") == run_id}


def plan_error(date: str) -> str:
    """The plan task's code path outside Airflow's runner: the exception it raises."""
    from airflow.sdk.exceptions import AirflowFailException

    from kafkalog_pipeline import tasks

    logical = dt.datetime.fromisoformat(date).replace(hour=3, tzinfo=dt.timezone.utc)
    with pytest.raises(AirflowFailException) as err:
        tasks.plan_from_context({"params": dict(DEFAULT_CONF), "run_id": "probe",
                                 "data_interval_start": logical, "ti": None})
    return str(err.value)


def test_missing_bucket_fails_the_plan_task_without_retries(dag, pipeline, monkeypatch):
    monkeypatch.setenv("KAFKALOG_SNAPSHOT_BUCKET", "this-bucket-does-not-exist")
    run_id, state, tasks = run(dag, "2026-11-26")
    assert state == "failed"
    assert tasks["plan"] == ["failed"]
    assert tasks["publish"] == ["upstream_failed"]
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        ti = session.query(TaskInstance).filter_by(dag_id=DAG_ID, run_id=run_id,
                                                   task_id="plan").one()
        assert ti.try_number == 1  # AirflowFailException: no retry for a missing bucket
    assert plan_error("2026-11-26") == (
        "cannot list s3://this-bucket-does-not-exist/nightly/2026-11-26/: "
        "the bucket does not exist (NoSuchBucket)")


def test_failed_audit_holds_publish_back(dag, pipeline, tmp_path, api):
    """A CRC mismatch fails the audit (expectations/policy.yaml): the run is not published.

    The task fails once, no retry, with one line naming the check; FAIL lines at ERROR."""
    upload_crc_night(tmp_path, pipeline, "2026-11-27", "audit", 1_795_132_800_000)

    run_id, state, tasks = run(dag, "2026-11-27")
    assert state == "failed"
    assert tasks["decode_chunk"] == ["success"]
    assert tasks["check_quality"] == ["failed"]
    assert tasks["publish"] == ["upstream_failed"]
    assert task_instance(run_id, "check_quality").try_number == 1  # a verdict is not retried
    log = task_log(api, run_id, "check_quality")
    assert any(e.startswith("FAIL crc audit-0: ") for e in events(log, "error")), events(log)
    assert not any(e.startswith("FAIL ") for e in events(log, "info"))
    failure = [line for line in log if line.get("event") == "Task failed with exception"]
    assert failure and "AirflowFailException: audit failed: crc (audit-0)" in str(failure), failure
    assert "Cannot execute" not in json.dumps(log)  # no spark-submit command and traceback
    # Airflow's task runner logs an AirflowFailException with its traceback (log.exception):
    # below the one line, only its own frames and the one line of ours that raises it, no
    # provider frame and no chained exception
    trace = failure[0].get("exception") or json.dumps(failure[0].get("error_detail"))
    assert "spark_submit" not in trace and "During handling" not in trace, trace
    assert "direct cause" not in trace, trace
    assert re.findall(r"/(kafkalog_pipeline|spark_jobs|providers)/", trace) == [
        "kafkalog_pipeline"], trace
    # Spark's driver logs at WARN: of its INFO lines only the SparkContext's first three
    # (before it applies the level) precede the job's own lines, which stay
    spark_info = [e for e in events(log) if re.match(r"\d\d/\d\d/\d\d [\d:]{8} INFO ", e)]
    assert len(spark_info) <= 3 and all(" INFO SparkContext: " in e for e in spark_info), \
        spark_info
    assert any(e.startswith("check_quality: ") for e in events(log, "info")), events(log)
    # the note says it where Airflow shows the run's state
    note = run_note(api, run_id)
    verdict_line = note.split("\n\n")[0]  # the demo's sink's paragraph follows
    assert verdict_line.startswith("DQ: failed: crc audit-0"), note
    assert verdict_line.endswith(" — not published"), note
    # the task after publish ran (publish could not: one_failed) and found nothing to rerun;
    # the run is still failed (that task is a teardown: left out of the run's state)
    assert tasks["rerun_on_conflict"] == ["skipped"]
    rerun_log = task_log(api, run_id, "rerun_on_conflict")
    assert not events(rerun_log, "error"), rerun_log  # e.g. no "XCom not found" of a link
    assert any("publish did not meet a conflict" in str(line.get("reason"))
               for line in rerun_log), rerun_log
    verdict = xcom(run_id, "check_quality")
    assert verdict["failed"]["crc"] == ["audit-0"], verdict
    assert verdict["fail"] == sum(len(parts) for parts in verdict["failed"].values()), verdict
    wh = pipeline["warehouse"]
    records = Warehouse(str(wh)).table("records")
    assert published_snapshot(records, run_id) is None
    assert not any(r["run_id"] == run_id for r in warehouse_rows(wh, "records", ["run_id"]))
    # what it decoded waits on its branch, and the audit's results are there for the report
    assert branch_name(run_id) in records.refs()
    assert any(r["run_id"] == run_id for r in warehouse_rows(wh, "dq_results", ["run_id"]))


@pytest.fixture
def authenticating_s3():
    """A second moto server that checks credentials (INITIAL_NO_AUTH_ACTION_COUNT=0)."""
    import signal
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    moto = Path(sys.executable).parent / "moto_server"
    proc = subprocess.Popen([str(moto), "-H", "127.0.0.1", "-p", str(port)],
                            env={**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "0"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(url + "/moto-api/", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)


def test_bad_credentials_fail_the_plan_task_clearly(dag, pipeline, authenticating_s3,
                                                    monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", json.dumps(
        {"conn_type": "aws", "login": "AKIAWRONGWRONGWRONG", "password": "wrong-secret",
         "extra": {"endpoint_url": authenticating_s3, "region_name": "us-east-1"}}))
    run_id, state, tasks = run(dag, "2026-11-20")
    assert state == "failed" and tasks["plan"] == ["failed"], tasks
    assert tasks["decode_chunk"] == ["upstream_failed"]
    message = plan_error("2026-11-20")
    assert message.startswith(f"cannot list s3://{pipeline['bucket']}/nightly/2026-11-20/: "
                              "access refused (InvalidAccessKeyId")
    assert "check the credentials of the aws_default connection" in message
