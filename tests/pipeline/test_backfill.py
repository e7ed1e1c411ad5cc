"""Airflow 3's own backfill (``airflow backfill create``) and a publish conflict's rerun, with
the real scheduler, no mocks.

The demo's two nights of snapshots are served from a moto S3 server on 127.0.0.1;
Airflow runs as in ``make ui`` (demo.servers): SQLite metadata DB in a
temporary AIRFLOW_HOME, ``dag-processor``, ``api-server`` (127.0.0.1, a free port)
and ``scheduler`` as subprocesses in their own sessions, LocalExecutor with
parallelism 2, local Spark. Then, with the CLI:

1. ``airflow backfill create`` over both nights, with the backfill's defaults: it
   starts both runs at once (its own ``max_active_runs``, 10, not the DAG's 1).
   Every run succeeds, each read its own night's snapshot, and the warehouse holds
   exactly the records kafkalog decodes from the snapshot files, once each; the
   same for batches and markers. The runs took the warehouse in turn.
2. The same backfill again: both nights already ran, so Airflow creates no run;
   the warehouse is unchanged.
3. A backfill of the last night with ``--reprocess-behavior completed``: Airflow clears
   that completed run and runs it again (same run id); records, batches and markers are
   unchanged.

Then a publish conflict, made with the REST API, and left to the scheduler: night A's
publish is stopped before it runs, night B publishes some of the same offsets, A's
publish is cleared and refused, and the DAG reruns night A by itself, once; no offset
of either night is lost or duplicated.

Each run's publish announced each table asset once, its event's ``partition_key`` the run's
night; step 3's rerun announced its night, and only it, again (issue 46's "rerunning n1 emits
n1 only"; ``test_gate_partitions`` has the rest of the per-night assets).

The scheduler creates no run of its own (``[scheduler] use_job_schedule = False``):
the runs checked are the backfills' and the test's, whatever today's date is.
Airflow's state is read from its SQLite DB (read-only).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

# Airflow's settings for the tests, before anything imports airflow
from tests import airflow_env  # noqa: E402,F401

from demo import data as demo_data, servers, sink as demo_sink  # noqa: E402
from kafkalog_pipeline.settings import NIGHTLY_DAG_ID as DAG_ID  # noqa: E402
from kafkalog_pipeline.assets import TABLE_ASSETS  # noqa: E402

# expected_records: the distinct (partition, offset) per topic of CRC-valid records, decoded
# from the snapshot files with kafkalog; warehouse_rows / record_keys read the published tables
from tests.pipeline.demo_nights import demo_segments, expected_records, record_keys, warehouse_rows  # noqa: E402
from tests.pipeline.scheduler import (CONFLICT_NIGHTS, FINAL, LOCK_ATTEMPTS, RUN_TIMEOUT, T0, Airflow,  # noqa: E402,F401
                                      partition_events, run_notes, running_airflow, task_states,
                                      write_conflict_nights)

pytestmark = [pytest.mark.pipeline, pytest.mark.slow]

NIGHTS = demo_data.NIGHTS
#: how often the test looks at the metadata DB while it waits for a run (a read-only query:
#: at 5 s a run's end was seen 2.5 s late on average, seven waits a module)
POLL_SECONDS = 1


def backfill_args(nights=NIGHTS) -> list[str]:
    """``airflow backfill create`` over ``nights`` (a bare --to-date is midnight; the last
    night's run has logical date <night>T03:00Z)."""
    return ["backfill", "create", "--dag-id", DAG_ID,
            "--from-date", nights[0], "--to-date", f"{nights[-1]}T23:59:59"]


@pytest.fixture(scope="module")
def airflow(tmp_path_factory, demo_nights):
    out = tmp_path_factory.mktemp("backfill")
    demo_nights(out / "snapshots")  # demo_data.write_nights's (tests/pipeline/conftest.py)
    demo_sink.write(out, out / "snapshots")  # the demo's sink: servers.airflow_env names it
    with running_airflow(out, {
        # two task slots (servers.airflow_env's, as `make ui` runs): a run's decode chunks run
        # side by side, and the other night's plan waits for the warehouse while they do
        "AIRFLOW__CORE__PARALLELISM": "2",
        "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": "2",
        # two chunks a night, one per slot (the demo plans three, which made a third
        # spark-submit run after the first two: ~40 s more per DAG run, three runs here)
        "KAFKALOG_MAX_CHUNKS": "2",
        # no scheduled run for "today": only the backfills' runs exist
        "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False",
    }) as af:
        yield af


# ------------------------------------------------------------------ helpers
def expected_keys(root: Path, dates) -> dict[str, set]:
    """Distinct keys of records, CRC-valid batches and markers in the snapshot files."""
    import kafkalog

    out = {"records": {(t, p, o) for t, keys in expected_records(root, dates).items()
                       for p, o in keys},
           "batches": set(), "markers": set()}
    for date in dates:
        for log, topic, partition in demo_segments(root / date):
            tables = kafkalog.decode(log)
            for row in tables.batches.select(["base_offset", "crc_valid"]).to_pylist():
                if row["crc_valid"]:
                    out["batches"].add((topic, int(partition), row["base_offset"]))
            for offset in tables.markers.column("offset").to_pylist():
                out["markers"].add((topic, int(partition), offset))
    return out


def warehouse_keys(warehouse: Path) -> dict[str, list]:
    """Keys of every published row (a list: duplicates stay visible)."""
    batches = warehouse_rows(warehouse, "batches", ["partition", "base_offset", "crc_valid"])
    return {
        "records": record_keys(warehouse),
        "batches": [(r["topic"], r["partition"], r["base_offset"]) for r in batches
                    if r["crc_valid"]],
        "markers": [(r["topic"], r["partition"], r["offset"])
                    for r in warehouse_rows(warehouse, "markers", ["partition", "offset"])],
    }


def assert_warehouse_exact(warehouse: Path, want: dict[str, set]) -> dict[str, int]:
    got = warehouse_keys(warehouse)
    for name, keys in got.items():
        dups = len(keys) - len(set(keys))
        assert dups == 0, f"{dups} duplicate {name} rows in the warehouse"
        assert set(keys) == want[name], (
            f"{name}: missing {sorted(want[name] - set(keys))[:10]}, "
            f"unexpected {sorted(set(keys) - want[name])[:10]}")
    return {name: len(keys) for name, keys in got.items()}


def create_backfill(af: Airflow, *extra: str, nights=NIGHTS, runs=None) -> int:
    """``airflow backfill create`` over ``nights``, after a dry run that lists ``runs``' nights
    (default: all of ``nights``); its id."""
    runs = nights if runs is None else runs
    dry = af.cli(*backfill_args(nights), *extra, "--dry-run")
    listed = re.findall(r"(\d{4}-\d\d-\d\d) 03:00:00\+00:00", dry.split("Runs to be attempted")[-1])
    assert listed == list(runs), dry[-2000:]
    before = af.query("SELECT coalesce(max(id), 0) FROM backfill")[0][0]
    for attempt in range(1, LOCK_ATTEMPTS + 1):
        out = af.cli(*backfill_args(nights), *extra, check=False, returncode=True)
        if out[0] == 0:
            break
        # SQLite refuses a write from a transaction whose snapshot another process's write
        # made stale (the scheduler's, here) at once, whatever the busy timeout; Airflow
        # then removes the half-made backfill, so the command can be run again
        assert "database is locked" in out[1] and attempt < LOCK_ATTEMPTS, out[1][-3000:]
        left = [i for (i,) in af.query("SELECT id FROM backfill WHERE dag_id = ? AND id > ? AND "
                                       "completed_at IS NULL", DAG_ID, before)]
        if left:
            # Airflow's removal of the half-made backfill (models/backfill.py
            # _cleanup_partial_backfill) is best-effort: under SQLite it can meet the lock too
            # and leave it active, refusing every create after it. Finish it as that would.
            remove_partial_backfills(af, left)
        active = af.query("SELECT count(*) FROM backfill WHERE dag_id = ? AND completed_at IS NULL",
                          DAG_ID)[0][0]
        assert active == 0, f"a failed backfill create left {active} active backfill(s)"
        print(f"airflow backfill create: database is locked (attempt {attempt}); again")
    (backfill_id,) = af.query("SELECT max(id) FROM backfill")[0]
    assert backfill_id > before
    return backfill_id


def remove_partial_backfills(af: Airflow, ids: list[int]) -> None:
    """Delete backfills ``ids`` with their dag runs, as Airflow's cleanup of a backfill whose
    create met a lock does."""
    import sqlite3
    from contextlib import closing

    with closing(sqlite3.connect(Path(af.env["AIRFLOW_HOME"]) / "airflow.db", timeout=60)) as db:
        db.execute("PRAGMA foreign_keys = ON")  # as Airflow's engine: a run's rows go with it
        with db:
            for i in ids:
                db.execute("DELETE FROM backfill_dag_run WHERE backfill_id = ?", (i,))
                db.execute("DELETE FROM dag_run WHERE backfill_id = ?", (i,))
                db.execute("DELETE FROM backfill WHERE id = ?", (i,))
    print(f"airflow backfill create: removed the half-made backfill(s) {ids}")


def wait_for_backfill(af: Airflow, backfill_id: int, timeout: float = RUN_TIMEOUT) -> list[dict]:
    """Wait until the scheduler marks the backfill complete; its runs, in logical-date order."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        runs = [dict(zip(("logical_date", "exception", "run_id", "state", "start", "end"), row))
                for row in af.query(
                    "SELECT b.logical_date, b.exception_reason, r.run_id, r.state, r.start_date,"
                    " r.end_date FROM backfill_dag_run b LEFT JOIN dag_run r ON r.id = b.dag_run_id"
                    " WHERE b.backfill_id = ? ORDER BY b.logical_date", backfill_id)]
        (completed,) = af.query("SELECT completed_at FROM backfill WHERE id = ?", backfill_id)[0]
        if completed and all(r["state"] in FINAL for r in runs if r["run_id"]):
            return runs
        dead = [p.args[1] for p in af.procs if p.poll() is not None]
        assert not dead, f"Airflow {dead} exited during backfill {backfill_id}"
        assert time.monotonic() < deadline, \
            f"backfill {backfill_id} not done after {timeout} s: {runs}"
        time.sleep(POLL_SECONDS)


def critical_sections(af: Airflow, run_ids) -> list[tuple]:
    """(plan end, publish end, run id) of each run: when it held the warehouse."""
    spans = []
    for run_id in run_ids:
        ends = dict(af.query("SELECT task_id, end_date FROM task_instance WHERE dag_id = ? AND "
                             "run_id = ? AND task_id IN ('plan', 'publish')", DAG_ID, run_id))
        spans.append((ends["plan"], ends["publish"], run_id))
    return sorted(spans)


def check_in_turn(af: Airflow, runs: list[dict]) -> None:
    """The runs held the warehouse (plan done .. publish done) one after the other."""
    spans = critical_sections(af, [r["run_id"] for r in runs])
    for (_, end, first), (start, _, second) in zip(spans, spans[1:]):
        assert end <= start, f"{first} and {second} were between plan and publish at once"


def check_runs(af: Airflow, runs: list[dict], nights=NIGHTS) -> None:
    """Each of ``nights`` ran and succeeded, from its own snapshot date, and published."""
    assert [r["logical_date"][:10] for r in runs] == list(nights), runs
    assert all(r["exception"] is None and r["run_id"] for r in runs), runs
    assert [r["state"] for r in runs] == ["success"] * len(nights), runs
    assert [r["run_id"] for r in runs] == [f"backfill__{n}T03:00:00+00:00" for n in nights]
    # snapshot date = the run's logical date: its ledger names only that night's segments
    ledger = warehouse_rows(af.warehouse, "ledger", ["run_id", "segment"])
    for r, night in zip(runs, nights):
        dates = {re.search(r"/(\d{4}-\d\d-\d\d)/", x["segment"]).group(1)
                 for x in ledger if x["run_id"] == r["run_id"]}
        assert dates == {night}, (r["run_id"], dates)
    from spark_jobs.warehouse import Warehouse, branch_name
    from spark_jobs.warehouse.history import published_snapshot

    ledger_table = Warehouse(str(af.warehouse)).table("ledger")
    for r in runs:
        assert published_snapshot(ledger_table, r["run_id"]) is not None
        assert branch_name(r["run_id"]) not in ledger_table.refs()


# ------------------------------------------------------------------ the test
@pytest.mark.timeout(3 * RUN_TIMEOUT)
def test_backfills_over_the_demo_nights_never_duplicate(airflow):
    af = airflow
    try:
        want = expected_keys(af.out / "snapshots", NIGHTS)
        # the scheduler starts no run of a paused DAG, backfill runs included
        af.cli("dags", "unpause", DAG_ID)

        # 1. both nights, the backfill's defaults: both runs start at once
        first = create_backfill(af)
        runs = wait_for_backfill(af, first)
        print("backfill 1:", json.dumps(runs, indent=1))
        check_runs(af, runs)
        counts = assert_warehouse_exact(af.warehouse, want)
        assert counts["records"] > 0 and counts["batches"] > 0 and counts["markers"] > 0
        check_in_turn(af, runs)
        keys = {name: sorted(k) for name, k in warehouse_keys(af.warehouse).items()}
        # each run's note has the audit's verdict (written by the scheduler's listener);
        # night 2 warns of payments-1's planted hole (test_dags_e2e): among its warnings (the
        # note's line names the first six of a dozen), and in its dq_results rows
        notes = run_notes(af, [r["run_id"] for r in runs])
        assert all(n and n.startswith("DQ: ") for n in notes.values()), notes
        assert " warned: " in notes[runs[-1]["run_id"]], notes
        gaps = [r["status"] for r in warehouse_rows(af.warehouse, "dq_results")
                if (r["run_id"], r["check"], r["topic"], r["partition"])
                == (runs[-1]["run_id"], "offset_gaps", "payments", 1)]
        assert gaps == ["warn"], gaps
        # and each night's one finding of the demo's sink (demo.sink: offset 2 held twice)
        sinks = "Sinks: demo-shipments warn: delivered 4, missing 0, duplicates 1, leaks 0, lag 0"
        assert all(sinks in n.split("\n\n") for n in notes.values()), notes
        # each run's publish announced each table for its own night (partition_key), once
        announced = sorted((r["run_id"], n) for r, n in zip(runs, NIGHTS))
        for asset in TABLE_ASSETS.values():
            assert sorted(partition_events(af, asset.name)) == announced, asset

        # 2. the same dates again with the defaults: nights that ran are left alone
        again = wait_for_backfill(af, create_backfill(af, runs=()))
        assert [(r["exception"], r["run_id"]) for r in again] == [("already exists", None)] * 2
        assert assert_warehouse_exact(af.warehouse, want) == counts

        # 3. the last night again, completed runs included: Airflow clears and reruns it (one
        #    night: a rerun of the first as well only repeated this at the cost of a DAG run)
        last = NIGHTS[-1:]
        second = create_backfill(af, "--reprocess-behavior", "completed", nights=last)
        rerun = wait_for_backfill(af, second)
        print("backfill 3:", json.dumps(rerun, indent=1))
        check_runs(af, rerun, nights=last)
        assert [r["run_id"] for r in rerun] == [runs[-1]["run_id"]]
        assert rerun[0]["start"] > runs[-1]["end"], "the run was not rerun"
        assert assert_warehouse_exact(af.warehouse, want) == counts
        assert {name: sorted(k) for name, k in warehouse_keys(af.warehouse).items()} == keys
        # the rerun announced its night, and only it, again (partition_key)
        for asset in TABLE_ASSETS.values():
            events = partition_events(af, asset.name)
            assert (sorted(events[:-1]), events[-1:]) == (
                announced, [(runs[-1]["run_id"], NIGHTS[-1])]), (asset, events)
    except BaseException:
        af.dump_logs()
        raise


# ------------------------------------------------------------------ a publish conflict, rerun
def wait_for_run(af: Airflow, run_id: str, timeout: float = RUN_TIMEOUT) -> str:
    """Wait until run ``run_id`` exists and has ended; its state."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        rows = af.query("SELECT state FROM dag_run WHERE dag_id = ? AND run_id = ?", DAG_ID, run_id)
        if rows and rows[0][0] in FINAL:
            return rows[0][0]
        dead = [p.args[1] for p in af.procs if p.poll() is not None]
        assert not dead, f"Airflow {dead} exited while {run_id} ran"
        assert time.monotonic() < deadline, f"run {run_id} not done after {timeout} s: {rows}"
        time.sleep(POLL_SECONDS)


def last_try_log(af: Airflow, run_id: str, task_id: str) -> list[dict]:
    folder = (Path(af.env["AIRFLOW_HOME"]) / "logs" / f"dag_id={DAG_ID}" / f"run_id={run_id}"
              / f"task_id={task_id}")
    tries = sorted(folder.glob("attempt=*.log"), key=lambda f: int(f.stem.split("=")[1]))
    return [json.loads(line) for line in tries[-1].read_text().splitlines() if line.strip()]


@pytest.mark.timeout(3 * RUN_TIMEOUT)
def test_a_publish_refused_for_a_conflict_is_rerun_by_the_dag(airflow):
    """Night A is decoded and audited but its publish does not run (marked failed, as a
    crash or a person stopping the run leaves it); night B, which copied some of A's
    segments again, runs and publishes them; then A's publish is cleared and runs: it is
    refused (B published the same offsets first). With no one doing anything more, the DAG
    reruns night A on a fresh branch, once, and every offset of both nights is in
    kafka.records exactly once."""
    from urllib.parse import quote

    import boto3
    from tests.spark_jobs.faults import lost_and_duplicated, published, truth

    from kafkalog_pipeline.tasks import RERUN_TASK, rerun_id

    af = airflow
    try:
        root = af.out / "conflict-snapshots"
        write_conflict_nights(root)
        conn = json.loads(af.env["AIRFLOW_CONN_AWS_DEFAULT"])
        demo_data.upload(root, servers.BUCKET, servers.PREFIX, boto3.client(
            "s3", endpoint_url=conn["extra"]["endpoint_url"], region_name="us-east-1",
            aws_access_key_id=conn["login"], aws_secret_access_key=conn["password"]))
        af.cli("dags", "unpause", DAG_ID)
        runs = f"/api/v2/dags/{DAG_ID}/dagRuns"

        def trigger(night: str) -> str:
            # these nights hold the topic rerun alone: the demo's nights before them in this
            # warehouse held 19 partitions, whose absence would (rightly) fail the night
            # (missing_partition's max_share); the rerun carries the run's params, topics too
            return af.api("POST", runs, {"logical_date": f"{night}T03:00:00Z",
                                         "conf": {"topics": "rerun"}})["dag_run_id"]

        # night A: its publish is stopped before it can run
        run_a = trigger(CONFLICT_NIGHTS[0])
        af.api("PATCH", f"{runs}/{quote(run_a, safe='')}/taskInstances/publish",
               {"new_state": "failed"})
        assert wait_for_run(af, run_a) == "failed"
        assert task_states(af, run_a)["check_quality"] == "success"
        # night B publishes, A's offsets of rerun-0 among them
        run_b = trigger(CONFLICT_NIGHTS[1])
        assert wait_for_run(af, run_b) == "success"
        # A's publish runs after all (cleared with what follows it), and meets B's offsets
        af.api("POST", f"/api/v2/dags/{DAG_ID}/clearTaskInstances", {
            "dag_run_id": run_a, "task_ids": ["publish"], "include_downstream": True,
            "only_failed": False, "dry_run": False})
        rerun = rerun_id(run_a)
        assert wait_for_run(af, run_a) == "failed"
        # A triggered its rerun before it ended (nobody else does): it runs after A
        if af.query("SELECT 1 FROM dag_run WHERE run_id = ?", rerun):
            assert wait_for_run(af, rerun) == "success"

        # every offset of both nights exactly once, against the segments' own truth
        want = truth(root / CONFLICT_NIGHTS[0], root / CONFLICT_NIGHTS[1])
        got = published(af.warehouse)
        got = type(got)({k: n for k, n in got.items() if k[0] == "rerun"})
        assert want and lost_and_duplicated(want, got) == (0, 0), (sorted(want), got)
        # A: publish refused at once, saying what comes next; the rerun triggered
        states = task_states(af, run_a)
        assert (states["publish"], states[RERUN_TASK]) == ("failed", "success"), states
        failure = [line for line in last_try_log(af, run_a, "publish")
                   if line.get("event") == "Task failed with exception"]
        assert failure and (f"publish refused: run(s) {run_b} published offsets of the same "
                            f"topic-partitions") in json.dumps(failure), failure
        assert f"reruns the night on a fresh branch as run {rerun}" in json.dumps(failure)
        # the rerun: triggered by the DAG, over night A, and not rerun again itself
        ((run_type, conf),) = af.query("SELECT run_type, conf FROM dag_run WHERE run_id = ?",
                                       rerun)
        conf = json.loads(conf) if isinstance(conf, str) else conf
        assert run_type == "operator_triggered", run_type
        assert (conf["date_from"], conf["date_to"], conf["rerun_of"]) == (
            CONFLICT_NIGHTS[0], CONFLICT_NIGHTS[0], run_a), conf
        assert task_states(af, rerun)[RERUN_TASK] == "skipped"
        assert [r for (r,) in af.query("SELECT run_id FROM dag_run WHERE run_id LIKE 'rerun__%'")
                ] == [rerun]
        # and the notes say so, beside each run's state
        notes = run_notes(af, [run_a, rerun])
        assert notes[run_a].startswith("DQ: ") and (
            f"Not published: run(s) {run_b} published the same offsets first; rerun as {rerun}"
            in notes[run_a]), notes
        assert notes[rerun].startswith("DQ: ") and notes[rerun].endswith(
            f"Rerun of {run_a}, whose publish met a conflict"), notes
    except BaseException:
        af.dump_logs()
        raise
