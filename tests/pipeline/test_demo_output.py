"""What ``make demo`` prints (demo.nights, demo.report): a line per task as a night runs, read
from the metadata DB; the summary's checks that warned or failed; its one query, run as printed.

No Airflow and no Spark: a SQLite file with the columns of Airflow's ``task_instance`` that
the progress reads, and a dq_results table (and two typed tables: one written by hand, the
Protobuf ``shipments`` one as the decode job makes it, without Spark) written through pyiceberg
in a temporary warehouse.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from demo import nights, report, servers
from spark_jobs import layout, schemas
from spark_jobs.warehouse import Warehouse

REPO = Path(__file__).resolve().parents[2]
NIGHT_1 = "manual__2026-11-20T03:00:00+00:00"
NIGHT_2 = "manual__2026-11-21T03:00:00+00:00"


def details(**classes) -> str:
    """A dq_results ``details`` value: class -> (status, items)."""
    return json.dumps({"unit": "segments", "items": [],
                       "classes": {name: {"status": s, "items": n} for name, (s, n) in classes.items()}})


def row(run_id, check, topic, partition, status, causes="{}") -> dict:
    return {"run_id": run_id, "check": check, "topic": topic, "partition": partition,
            "status": status, "severity": "warn", "observed": 10, "failed": 0 if status == "pass" else 1,
            "details": causes, "checked_at": dt.datetime(2026, 11, 21, 3, 5)}


def sink_details() -> str:
    """The details of the demo sink's result (demo.sink: offset 2 of shipments-0 held twice,
    graded warn by the demo's sinks file), keys as reconcile.job writes them."""
    return json.dumps({"unit": "sink records", "more_items": 0,
                       "classes": {"duplicate": {"status": "warn", "items": 1, "offsets": 1}},
                       "items": [{"class": "duplicate", "status": "warn", "first_offset": 2,
                                  "last_offset": 2, "offsets": 1, "value": 2,
                                  "message": "offsets 2..2 of shipments-0: held more than once"}],
                       "sink": "demo-shipments", "mode": "append", "deliverable": 4,
                       "delivered": 4, "position": "the sink's highest offset"})


RESULTS = [
    row(NIGHT_2, "offset_gaps", "payments", 1, "warn",
        details(missing_segment=("warn", 1), retention=("pass", 1))),
    row(NIGHT_2, "decoder_findings", "payments", 0, "warn", details(invalid_header_key=("warn", 1))),
    row(NIGHT_2, "decoder_findings", "orders", 0, "warn", details(index_mismatch=("warn", 2))),
    row(NIGHT_2, "crc", "orders", 1, "fail", details(crc_mismatch=("fail", 3))),
    row(NIGHT_2, "crc", "orders", 0, "pass"),
    row(NIGHT_2, "record_count", "legacy", 0, "pass", "not json"),
    row(NIGHT_1, "crc", "orders", 0, "pass"),
    # the tiered topic's checks (demo.tiered): its planted orphan copy
    row(NIGHT_2, "tier_missing_objects", "events", 0, "pass"),
    row(NIGHT_2, "tier_copy_orphans", "events", 0, "warn", details(orphan=("warn", 1))),
    # the demo's sink (demo.sink), reconciled each night: its planted duplicate
    row(NIGHT_1, "sink_reconcile", "shipments", 0, "warn", sink_details()),
    row(NIGHT_2, "sink_reconcile", "shipments", 0, "warn", sink_details()),
]


def test_problem_lines_name_each_check_that_did_not_pass_worst_first():
    lines = report.problem_lines([r for r in RESULTS if r["run_id"] == NIGHT_2])
    assert lines == [
        "fail crc: orders-1 (crc_mismatch 3)",
        "warn decoder_findings: orders-0 (index_mismatch 2), payments-0 (invalid_header_key 1)",
        "warn offset_gaps: payments-1 (missing_segment 1)",  # retention passed: not a cause
        "warn sink_reconcile: shipments-0 (sink demo-shipments) (duplicate 1)",
        "warn tier_copy_orphans: events-0 (orphan 1)",
    ]
    assert report.problem_lines([r for r in RESULTS if r["run_id"] == NIGHT_1]) == [
        "warn sink_reconcile: shipments-0 (sink demo-shipments) (duplicate 1)"]


def test_a_result_without_readable_details_is_named_without_causes():
    assert report.problem_lines([row(NIGHT_1, "crc", "orders", 0, "warn", "not json")]) == [
        "warn crc: orders-0"]


# ------------------------------------------------------------------ progress
def metadata_db(home: Path) -> sqlite3.Connection:
    home.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(home / "airflow.db")
    conn.execute("CREATE TABLE task_instance (dag_id TEXT, task_id TEXT, run_id TEXT, map_index INT, "
                 "try_number INT, state TEXT, start_date TEXT, end_date TEXT, duration REAL)")
    return conn


def test_progress_prints_each_try_once_as_it_starts_and_ends(tmp_path):
    home = tmp_path / "airflow"
    conn = metadata_db(home)
    since = dt.datetime(2026, 11, 25, 22, 0, tzinfo=dt.timezone.utc)
    at = lambda s: nights.db_time(since + dt.timedelta(seconds=s))  # noqa: E731
    ti = "INSERT INTO task_instance VALUES ('kafka_segments_nightly', ?, 'r', ?, ?, ?, ?, ?, ?)"
    # the previous demo run's instances (and another DAG's): not this night's
    conn.execute(ti, ("plan", -1, 1, "success", at(-900), at(-860), 40.0))
    conn.execute("INSERT INTO task_instance VALUES ('other', 'x', 'r', -1, 1, 'running', ?, NULL, NULL)",
                 (at(5),))
    conn.execute(ti, ("plan", -1, 1, "success", at(1), at(42), 41.2))
    conn.execute(ti, ("decode_chunk", 0, 1, "running", at(43), None, None))
    conn.commit()
    out = io.StringIO()
    progress = nights.Progress({"AIRFLOW_HOME": str(home)}, since, file=out)
    progress.poll()
    conn.execute("UPDATE task_instance SET state = 'up_for_retry', end_date = ?, duration = 7 "
                 "WHERE task_id = 'decode_chunk'", (at(50),))
    conn.execute(ti, ("decode_chunk", 1, 1, "running", at(44), None, None))
    conn.commit()
    progress.poll()
    conn.execute(ti, ("decode_chunk", 0, 2, "running", at(56), None, None))
    conn.commit()
    progress.poll()
    progress.poll()  # nothing new: nothing printed
    lines = [ln.split(" s  ", 1)[1] for ln in out.getvalue().splitlines()]
    assert lines == ["plan success in 41 s", "decode_chunk[0] started",
                     "decode_chunk[1] started", "decode_chunk[0] up_for_retry in 7 s (try 1)",
                     "decode_chunk[0] started (try 2)"]


def test_progress_before_the_metadata_db_exists_prints_nothing(tmp_path):
    out = io.StringIO()
    nights.Progress({"AIRFLOW_HOME": str(tmp_path / "none")}, dt.datetime.now(dt.timezone.utc),
                  file=out).poll()
    assert out.getvalue() == ""


# ------------------------------------------------------------------ the summary
@pytest.fixture(scope="module")
def demo_out(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo-output")
    servers.catalog_config(out)
    wh = Warehouse(str(out / "warehouse"))
    for run_id in (NIGHT_1, NIGHT_2):
        rows = [r for r in RESULTS if r["run_id"] == run_id]
        wh.replace_run_rows("dq_results", run_id, pa.Table.from_pylist(rows, schemas.DQ_RESULTS))
    # a typed table (shop.orders' Avro values) with one row
    typed = pa.schema([("run_id", pa.string()), ("id", pa.int64())])
    wh.typed_table(layout.typed_table_name("shop.orders"), typed).append(
        pa.Table.from_pylist([{"run_id": NIGHT_1, "id": 1}], typed))
    shipments_table(out / "snapshot", wh)
    keyed_table(wh)
    return out


#: a per-key state table's rows as of each night (its ``night-`` tags), in the fixture
KEYED_ROWS = {"2026-11-20": 3, "2026-11-21": 2}


def keyed_table(wh):
    """A latest__ table tagged per night as the decode job leaves one (spark_jobs.warehouse.tags):
    night 1's state (3 keys) and night 2's (2: one key deleted), each tag on its snapshot."""
    from spark_jobs.warehouse import tags

    schema = pa.schema([("partition", pa.int32()), ("key", pa.binary()), ("offset", pa.int64()),
                        ("night", pa.string()), ("run_id", pa.string())])
    table = wh.typed_table(layout.latest_table_name("customers"), schema)
    rows = [{"partition": 0, "key": b"cust-%d" % i, "offset": i, "night": "2026-11-20",
             "run_id": NIGHT_1} for i in range(KEYED_ROWS["2026-11-20"])]
    table.append(pa.Table.from_pylist(rows, schema))
    tags.tag_night(wh, [table.name()[-1]], "2026-11-20")
    wh.table(table.name()[-1]).overwrite(pa.Table.from_pylist(rows[:KEYED_ROWS["2026-11-21"]], schema))
    tags.tag_night(wh, [table.name()[-1]], "2026-11-21")


def shipments_table(snapshot: Path, wh):
    """values__shipments from the demo's own shipments partition (night 1): its values
    decoded as a decode task does, the table planned and the rows converted by typed_tables;
    the rows are the demo's shipments, ``weight_g`` 0 (absent from value_json) included."""
    import kafkalog
    from demo import schemas as demo_schemas
    from spark_jobs.derive import typed as typed_tables
    from spark_jobs.decode import values
    from spark_jobs.decode.planning import discover

    demo_schemas.write(snapshot, 0, 1_763_600_000_000, 3_600_000)
    registry = values.registry_for_run(None, discover(str(snapshot))[0])
    plan = typed_tables.plan_topics(wh, registry, ["shipments"])["shipments"]
    dec = values.ValueDecoder(registry, 1 << 20, "shipments")
    rows = []
    for name, batch in kafkalog.stream(str(snapshot / "shipments-0" / "00000000000000000000.log")):
        if name == "records":
            rows += pa.Table.from_batches([values.with_columns(batch, dec.columns(batch))]).to_pylist()
    records = pa.Table.from_pylist([{**r, "topic": "shipments", "partition": 0, "segment": "s",
                                     "segment_base_offset": 0, "run_id": NIGHT_1} for r in rows])
    typed, refused, found = typed_tables.rows_of(records, plan)
    assert refused == {} and found == [] and dec.take_findings() == []
    assert typed.select(["id", "carrier", "weight_g"]).to_pylist() == \
        [demo_schemas.shipment(i) for i in range(4)]
    assert demo_schemas.shipment(0)["weight_g"] == 0 and '"weight_g"' not in rows[0]["value_json"]
    wh.table(plan.table).append(typed)


def test_the_summary_names_each_nights_problems_and_one_query(demo_out, capsys):
    results = [{"run_id": r, "ok": True, "state": "success", "tasks": {}, "seconds": 1.0}
               for r in (NIGHT_1, NIGHT_2)]
    assert report.report(demo_out, results) == 0
    text = capsys.readouterr().out
    night_1 = text[text.index(f"Data quality of {NIGHT_1}"):text.index(f"Data quality of {NIGHT_2}")]
    assert night_1.splitlines()[:2] == [
        f"Data quality of {NIGHT_1}: 1 warn, 1 pass",
        "  warn sink_reconcile: shipments-0 (sink demo-shipments) (duplicate 1)"]
    assert "  report:  (missing)" in night_1
    sinks = "  sinks: demo-shipments warn: delivered 4, missing 0, duplicates 1, leaks 0, lag 0"
    assert sinks in night_1.splitlines()
    night_2 = text[text.index(f"Data quality of {NIGHT_2}"):].splitlines()
    assert night_2[:8] == [
        f"Data quality of {NIGHT_2}: 1 fail, 5 warn, 3 pass",
        "  fail crc: orders-1 (crc_mismatch 3)",
        "  warn decoder_findings: orders-0 (index_mismatch 2), payments-0 (invalid_header_key 1)",
        "  warn offset_gaps: payments-1 (missing_segment 1)",
        "  warn sink_reconcile: shipments-0 (sink demo-shipments) (duplicate 1)",
        "  warn tier_copy_orphans: events-0 (orphan 1)",
        "  tier checks: tier_copy_orphans warn (orphan 1), tier_missing_objects pass",
        sinks]
    assert "  tier checks: none ran" in night_1.splitlines()
    queries = [ln.strip() for ln in text.splitlines() if "PYICEBERG_HOME=" in ln]
    assert len(queries) == 1 and "{'" not in text  # one query; no Python dict of counts
    assert "  kafka.values__shop_dot_orders      1 rows  (typed: shop.orders's values)" \
        in text.splitlines()
    assert "  kafka.values__shipments            4 rows  (typed: shipments's values)" \
        in text.splitlines()  # the names in one column
    assert ("  kafka.latest__customers            2 rows  (latest: customers's latest record "
            "per key; as of night: 2026-11-20 3, 2026-11-21 2; keys: cust-0, cust-1)") \
        in text.splitlines()  # keys as text, not b'cust-0'
    assert "b'" not in text
    assert report.key_text(b"\xff\x00") == "0xff00" and report.key_text(None) == "null"
    assert report.key_text("kö".encode()) == "kö" and report.key_text(b"a\x01") == "0x6101"

    # the query, pasted into a shell from another directory, lists the problems of both runs
    proc = subprocess.run(["bash", "-c", queries[0]], capture_output=True, text=True, cwd="/",
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    listed = proc.stdout.splitlines()[1:]
    assert len(listed) == 7 and all(" pass " not in ln for ln in listed)
    assert sum("sink_reconcile" in ln and "shipments" in ln for ln in listed) == 2
    assert sum("offset_gaps" in ln and "payments" in ln for ln in listed) == 1


def test_the_demo_warehouse_reads_the_same_in_duckdb(demo_out):
    """The README's DuckDB recipe on a demo warehouse (issue 35 item 4): each table the
    catalog lists, read by DuckDB's own Iceberg reader (tests/duckdb_engine.py), has the rows
    pyiceberg reads, every column; ``make demo``'s full warehouse is not here (Airflow)."""
    from tests import duckdb_engine

    counts = duckdb_engine.compare_warehouse(Warehouse(str(demo_out / "warehouse")))
    assert counts == {"dq_results": len(RESULTS), "values__shipments": 4,
                      "values__shop_dot_orders": 1, "latest__customers": KEYED_ROWS["2026-11-21"]}


# ------------------------------------------------------------------ make demo / make ui
@pytest.mark.pipeline
def test_the_demo_secret_is_masked_in_task_logs():
    """A connection secret shorter than Airflow's masking minimum is left in the logs, and
    every task warned "Skipping masking for a secret as it's too short"."""
    from tests import airflow_env  # noqa: F401  (Airflow's settings, before airflow is imported)
    from airflow.configuration import conf

    secret = json.loads(servers.local_connections("http://x", servers.DEMO_KEY)[
        "AIRFLOW_CONN_AWS_DEFAULT"])["password"]
    assert len(secret) >= conf.getint("logging", "min_length_masked_secret")


@pytest.mark.pipeline
def test_demo_and_ui_do_not_run_over_one_directory_at_once(tmp_path):
    """`make demo` while `make ui` serves the same directory (or the other way round)
    stops at once, naming who holds it, and writes nothing; a holder that exited,
    however it exited, leaves no lock behind."""
    out = tmp_path / "demo-output"
    run = [sys.executable, "-m", "demo", "run", "--out", str(out)]
    with servers.exclusive(out, "make ui"):
        p = subprocess.run(run, capture_output=True, text=True, timeout=120, cwd=REPO)
        assert p.returncode == 1
        assert f"{out} is in use by make ui (pid {os.getpid()})" in p.stderr, p.stderr
        assert sorted(x.name for x in out.iterdir()) == [".demo.lock"]
    # a holder killed without cleaning up: its lock goes with it
    code = ("import os, sys, pathlib; from demo import servers\n"
            "with servers.exclusive(pathlib.Path(sys.argv[1]), 'make demo'):\n"
            "    os.kill(os.getpid(), 9)\n")
    p = subprocess.run([sys.executable, "-c", code, str(out)], timeout=120, cwd=REPO)
    assert p.returncode == -9
    with servers.exclusive(out, "make demo"):
        assert (out / ".demo.lock").read_text().strip() == f"make demo (pid {os.getpid()})"
    assert (out / ".demo.lock").read_text() == ""  # released: it names no one


def test_a_demo_killed_outright_is_taken_over_and_what_it_left_running_stopped(tmp_path, capsys):
    """A `make demo` killed with SIGKILL (no clean-up runs) leaves its night's process group
    (dag.test() and its Spark jobs) running and a lock naming a dead pid: the next holder says
    so, stops that group, and starts clean."""
    import signal
    import time

    out = tmp_path / "demo-output"
    night = ("import time, sys; time.sleep(120)  # demo dagtest 2026-11-20")
    code = ("import os, sys, pathlib, subprocess; from demo import servers\n"
            "with servers.exclusive(pathlib.Path(sys.argv[1]), 'make demo') as lock:\n"
            f"    p = subprocess.Popen([sys.executable, '-c', {night!r}], start_new_session=True, "
            "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
            "    lock.started(p.pid, 'demo dagtest 2026-11-20')\n"
            "    print(p.pid, flush=True)\n"
            "    os.kill(os.getpid(), 9)\n")
    p = subprocess.run([sys.executable, "-c", code, str(out)], timeout=120, cwd=REPO,
                       capture_output=True, text=True)
    assert p.returncode == -9
    left = int(p.stdout.split()[0])
    dead = int(servers._HOLDER_PID.search((out / ".demo.lock").read_text()).group(1))
    assert (out / ".demo.lock").read_text() == (f"make demo (pid {dead})\n"
                                               f"group {left}: demo dagtest 2026-11-20\n")
    os.killpg(left, 0)  # still running, in its own group
    with servers.exclusive(out, "make demo") as lock:
        said = capsys.readouterr().err
        assert f"make demo (pid {dead}) stopped without cleaning up" in said
        assert f"stopped what it left running: group {left} (demo dagtest 2026-11-20)" in said
        deadline = time.monotonic() + 10
        while servers.alive(left) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not servers.alive(left)
        # a group of its own, stopped by the holder: SIGTERM, then SIGKILL if it ignores it
        stubborn = subprocess.Popen([sys.executable, "-c", "import signal, time; "
                                     "signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                                     "time.sleep(120)"], start_new_session=True)
        time.sleep(0.5)
        lock.started(stubborn.pid, "demo dagtest x")
        assert servers.stop_group(stubborn.pid, timeout=1, leader=stubborn)
        assert stubborn.wait(timeout=10) == -signal.SIGKILL
        lock.stopped(stubborn.pid)
        assert (out / ".demo.lock").read_text() == f"make demo (pid {os.getpid()})\n"
    # a pid reused by another program since is left alone
    assert servers.take_over(f"make demo (pid {dead})\ngroup {os.getpid()}: demo dagtest y\n",
                             out) == [f"{out}: make demo (pid {dead}) stopped without cleaning "
                                      "up (no such process): taking its lock over"]


# ------------------------------------------------------------------ the tiered topic's data
def _batches(log: bytes) -> dict:
    """first offset -> (last offset, the batch's bytes), framed by hand (v2: baseOffset int64,
    batchLength int32, ..., lastOffsetDelta int32 at byte 23)."""
    import struct

    out, pos = {}, 0
    while pos + 12 <= len(log):
        base, length = struct.unpack_from(">qi", log, pos)
        (delta,) = struct.unpack_from(">i", log, pos + 23)
        out[base] = (base + delta, log[pos:pos + 12 + length])
        pos += 12 + length
    assert pos == len(log)
    return out


def test_the_demo_tier_holds_each_offset_once_beside_its_tail_and_one_orphan(tmp_path, demo_nights):
    """demo.tiered's nights and tier, replayed here: the copies whose last event is
    COPY_SEGMENT_FINISHED (a state machine of this test's) and the local tail cover the
    topic's offsets without a hole, overlapping only where the bytes agree; exactly one copy
    (the orphan) only started, its objects in the tier; every object reads back with the key
    ring (``kafkalog tiered cat``, the README's command) and names a key the ring holds."""
    from demo import data, tiered
    from kafkalog.internal.remote_log import read_events

    demo_nights(tmp_path / "snapshots")  # data.write_nights's (tests/pipeline/conftest.py)
    assert tiered.write_tier(tmp_path) == 3 * len(tiered.SEGMENTS)
    night = tmp_path / "snapshots" / data.NIGHTS[-1]
    last_state: dict = {}
    for e in read_events(str(night / "__remote_log_metadata-0" / f"{0:020d}.log")):
        seg = e.data["remoteLogSegmentId"]
        assert seg["topicIdPartition"] == {"name": tiered.TOPIC, "id": tiered.TOPIC_ID,
                                           "partition": tiered.PARTITION}
        state = {0: "started", 1: "finished"}[e.data["remoteLogSegmentState"]]
        assert (last_state.get(seg["id"]), state) in ((None, "started"), ("started", "finished"))
        last_state[seg["id"]] = state
    orphans = [s for s, state in last_state.items() if state == "started"]
    assert orphans == [tiered.kafka_uuid(tiered.ORPHAN)]

    keys = sorted((tmp_path / tiered.KEYS_FOLDER).glob("*.pem"))
    assert [k.stem for k in keys] == list(tiered.KEY_IDS)
    covered: dict = {}  # offset -> the batch bytes that hold it
    manifests = sorted((tmp_path / tiered.TIER_FOLDER).rglob("*.rsm-manifest"))
    assert len(manifests) == len(last_state)
    for manifest in manifests:
        segment_id = manifest.name.split("-", 1)[1][:-len(".rsm-manifest")]
        assert json.loads(manifest.read_bytes())["encryption"]["dataKey"].split(":")[0] in \
            tiered.KEY_IDS
        out = tmp_path / f"{segment_id}.log"
        proc = subprocess.run([sys.executable, "-m", "kafkalog", "tiered", "cat",
                               *(a for k in keys for a in ("--private-key", str(k))),
                               str(manifest), "-o", str(out)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        if last_state[segment_id] != "finished":
            continue
        for base, (last, raw) in _batches(out.read_bytes()).items():
            for o in range(base, last + 1):
                assert o not in covered
                covered[o] = raw
    remote = set(covered)
    tail = night / f"{tiered.TOPIC}-{tiered.PARTITION}"
    for base, (last, raw) in _batches((tail / f"{tiered.LOCAL_START:020d}.log").read_bytes()).items():
        for o in range(base, last + 1):
            assert covered.setdefault(o, raw) == raw  # the overlap: the same batch
    assert sorted(covered) == list(range(tiered.local_end(len(data.NIGHTS) - 1) + 1))
    assert remote & set(range(tiered.LOCAL_START, len(covered))) == set(
        range(tiered.LOCAL_START, max(remote) + 1)) != set()  # the tail overlaps the tier
