"""The checks of a broker log directory's own files (issue 36 item 3): beyond_high_watermark,
a torn tail after an unclean shutdown, log_start_moved, mixed_cluster, hanging_transaction.

One snapshot night of three log directories, its segments written with kafkalog.writer (and
one real partition folder of tests/data/broker-dirs), decoded by the real decode job; the
log directories' tables (broker_state, partition_checkpoints) are staged on the run's branch
here, row by row as the test's own reading of the files says (the decode job fills them once
the log-directory reader lands: spark_jobs/derive). Then the real audit, and every expected
value is written down from what the test planted:

``b1`` (no .kafka_cleanshutdown, cluster A)
    ``orders-0``: 0..9, then a torn batch; high watermark 8, recovery point 5 — offsets 8..9
    past the high watermark, the tail (offset 10) past the recovery point: ``unclean_shutdown``.
    ``orders-1``: offsets 4..6 in a segment based at 0; log-start-offset-checkpoint 4:
    ``log_start_moved`` (and high watermark 7 = its log end: nothing beyond).
    ``orders-3``: 0..2, then a torn batch; recovery point 100: the tail is below it, so it is
    the live tail it always was (``active_segment``).
    ``payments-0``: producer 500's transaction open from offset 0 (at T0) with no marker,
    timeout 60 s in __transaction_state; 501's from 2, closed by a COMMIT at 3; 502's open
    from 4 (T0+20 s), timeout 900 s; a last batch at T0+120 s: 500's is hanging (120 s), 502's
    open (100 s < 900 s; the default 60 s would call it hanging); last stable offset 0.
``b2`` (clean shutdown, cluster B): ``orders-2``: 0..2 and a torn batch: ``active_segment``.
``qk``: the real ``__consumer_offsets-12`` of qkrckstjq+spring-kafka, whose
    replication-offset-checkpoint (20) is newer than its segment (ends at 16):
    ``checkpoint_ahead``, no beyond_high_watermark. Its meta.properties: a third cluster.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kafkalog.writer import (SegmentWriter, WriteRecord, encode_producer_snapshot,
                             encode_v2_batch, internal_record)
from spark_jobs import schemas, storage, tables
from spark_jobs.warehouse import Warehouse, run_files_prefix

from tests.runs import decode

pytestmark = pytest.mark.pipeline

T0 = 1_763_683_200_000  # 2025-11-21T00:00:00Z
NIGHT = "2025-11-21"
RUN = "night-2025-11-21"
BROKER_DIRS = Path(__file__).resolve().parent.parent / "data" / "broker-dirs"
REAL = BROKER_DIRS / "qkrckstjq+spring-kafka"
#: TransactionState ids (Kafka's TransactionState.java): 1 Ongoing, 4 CompleteCommit
ONGOING, COMPLETE_COMMIT = 1, 4


def recs(n, ts):
    return [WriteRecord(b"k", b"v%d" % i, timestamp=ts + i) for i in range(n)]


def torn(w, ts):
    """A batch cut short: 30 of its bytes (its header is 61)."""
    w.append_raw(encode_v2_batch(w.next_offset, recs(2, ts))[:30])


def txn_state(tid, pid, timeout_ms, status, ts):
    return internal_record("transaction-log", {
        "key": {"type": 0, "data": {"transactionalId": tid}},
        "value": {"version": 0, "data": {
            "producerId": pid, "producerEpoch": 0, "transactionTimeoutMs": timeout_ms,
            "transactionStatus": status,
            "transactionPartitions": [{"topic": "payments", "partitionIds": [0]}],
            "transactionLastUpdateTimestampMs": ts, "transactionStartTimestampMs": ts}}},
        timestamp=ts)


def snapshot_entry(pid, last_seq, last_offset, delta, ts, txn_first):
    return {"producer_id": pid, "producer_epoch": 0, "last_sequence": last_seq,
            "last_offset": last_offset, "offset_delta": delta, "timestamp": ts,
            "coordinator_epoch": 0 if txn_first >= 0 else -1,
            "current_txn_first_offset": txn_first}


def write_snapshot(snap: Path) -> dict[str, Path]:
    """The three log directories above; returns them by name."""
    b1, b2, qk = snap / "b1", snap / "b2", snap / "qk"
    for d in (b1 / "orders-0", b1 / "orders-1", b1 / "orders-3", b1 / "payments-0",
              b1 / "__transaction_state-0", b2 / "orders-2"):
        d.mkdir(parents=True)
    with SegmentWriter(b1 / "orders-0", 0) as w:
        w.append(recs(5, T0))
        w.append(recs(5, T0 + 1000))
        torn(w, T0 + 2000)
    with SegmentWriter(b1 / "orders-1", 0) as w:
        w.skip_to(4)
        w.append(recs(3, T0))
    with SegmentWriter(b1 / "orders-3", 0) as w:
        w.append(recs(3, T0))
        torn(w, T0 + 1000)
    with SegmentWriter(b2 / "orders-2", 0) as w:
        w.append(recs(3, T0))
        torn(w, T0 + 1000)
    tx = dict(transactional=True, producer_epoch=0, base_sequence=0)
    with SegmentWriter(b1 / "payments-0", 0) as w:
        w.append(recs(2, T0), producer_id=500, **tx)                       # 0..1, open
        w.append(recs(1, T0 + 2000), producer_id=501, **tx)                # 2
        w.append_marker(producer_id=501, producer_epoch=0, commit=True, timestamp=T0 + 3000)
        w.append(recs(1, T0 + 20_000), producer_id=502, **tx)              # 4, open
        w.append(recs(1, T0 + 120_000))                                    # 5: the latest time
    pay = b1 / "payments-0"
    (pay / f"{3:020d}.snapshot").write_bytes(encode_producer_snapshot([
        snapshot_entry(500, 1, 1, 1, T0 + 1, 0), snapshot_entry(501, 0, 2, 0, T0 + 2000, 2)]))
    (pay / f"{6:020d}.snapshot").write_bytes(encode_producer_snapshot([
        snapshot_entry(500, 1, 1, 1, T0 + 1, 0), snapshot_entry(501, 0, 2, 0, T0 + 2000, -1),
        snapshot_entry(502, 0, 4, 0, T0 + 20_000, 4)]))
    with SegmentWriter(b1 / "__transaction_state-0", 0) as w:
        for i, (tid, pid, timeout, status) in enumerate([
                ("tx-a", 500, 60_000, ONGOING), ("tx-b", 501, 60_000, COMPLETE_COMMIT),
                ("tx-c", 502, 900_000, ONGOING)]):
            w.append([txn_state(tid, pid, timeout, status, T0 + i)])
    shutil.copytree(REAL / "__consumer_offsets-12", qk / "__consumer_offsets-12")
    return {"b1": b1, "b2": b2, "qk": qk}


def checkpoint_entries(path: Path) -> dict[tuple[str, int], int]:
    """An offset checkpoint file read here, independently of kafkalog: a version line, a
    count line, then ``topic partition offset`` lines."""
    lines = path.read_text().splitlines()
    assert lines[0] == "0" and int(lines[1]) == len(lines) - 2
    return {(t, int(p)): int(o) for t, p, o in (line.split() for line in lines[2:])}


def meta_cluster(path: Path) -> tuple[str | None, int]:
    """cluster.id (None: a ZooKeeper-mode file may lack it) and node.id (KRaft) or broker.id
    (ZooKeeper mode) of a meta.properties, read here as plain ``key=value`` lines."""
    props = dict(line.split("=", 1) for line in path.read_text().splitlines()
                 if line and not line.startswith("#"))
    return props.get("cluster.id"), int(props.get("node.id", props.get("broker.id")))


def dir_rows(dirs: dict[str, Path]) -> dict[str, list[dict]]:
    """broker_state and partition_checkpoints as the files planted above say."""
    cluster, node = meta_cluster(REAL / "meta.properties")
    assert (cluster, node) == ("5L6g3nShT-eMCtK--X86sw", 1)
    broker = [("b1", "A", 1, False), ("b2", "B", 2, True), ("qk", cluster, node,
                                                           (REAL / ".kafka_cleanshutdown").exists())]
    common = {"night": NIGHT, "run_id": RUN}
    state = [{"log_dir": str(dirs[d]), "cluster_id": c, "node_id": n, "directory_id": None,
              "meta_version": 1, "clean_shutdown": clean, "broker_epoch": None,
              "file": f"{dirs[d]}/meta.properties", **common} for d, c, n, clean in broker]
    planted = {  # (dir, topic, partition): (recovery point, high watermark, log start)
        ("b1", "orders", 0): (5, 8, None), ("b1", "orders", 1): (7, 7, 4),
        ("b1", "orders", 3): (100, 3, None), ("b2", "orders", 2): (0, 3, None)}
    hw = checkpoint_entries(REAL / "replication-offset-checkpoint")
    rp = checkpoint_entries(REAL / "recovery-point-offset-checkpoint")
    assert hw[("__consumer_offsets", 12)] == 20  # README: newer than the segment (ends at 16)
    planted[("qk", "__consumer_offsets", 12)] = (rp.get(("__consumer_offsets", 12)),
                                                 hw[("__consumer_offsets", 12)], None)
    points = []
    for (d, topic, partition), (recovery, high, start) in planted.items():
        name = lambda f, v: None if v is None else f"{dirs[d]}/{f}"
        points.append({"log_dir": str(dirs[d]), "topic": topic, "partition": partition,
                       "recovery_point": recovery,
                       "recovery_point_file": name("recovery-point-offset-checkpoint", recovery),
                       "high_watermark": high,
                       "high_watermark_file": name("replication-offset-checkpoint", high),
                       "log_start_offset": start,
                       "log_start_offset_file": name("log-start-offset-checkpoint", start),
                       "cleaner_offset": None, "cleaner_offset_file": None, **common})
    return {"broker_state": state, "partition_checkpoints": points}


def stage_rows(W: str, run_id: str, name: str, rows: list[dict]) -> None:
    """``rows`` of table ``name`` committed to run ``run_id``'s branch, as a derived table's
    files are (one Parquet file named as the run's)."""
    wh = Warehouse(W)
    wh.table(name)
    wh.begin_table(name, run_id)
    uri = f"{wh.data_root(name)}/{run_files_prefix(run_id)}dirs.parquet"
    store, key = storage.open_object(uri, wh.s3)
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows, schemas.TABLES[name]), buf)
    store.write(key, buf.getvalue())
    wh.commit_files(name, run_id, [uri])


@pytest.fixture(scope="module")
def audited(spark, tmp_path_factory):
    """The night decoded, its log directories' rows staged, audited: its dq_results rows."""
    from spark_jobs import check_quality
    from spark_jobs import decode as job

    tmp = tmp_path_factory.mktemp("dirchecks")
    dirs = write_snapshot(tmp / "snap")
    W = str(tmp / "w")
    decode(spark, tmp / "snap", W, RUN, "--no-publish", night=NIGHT)
    for name, rows in dir_rows(dirs).items():
        stage_rows(W, RUN, name, rows)
    code = check_quality.main(["--warehouse", W, "--run-id", RUN], spark=spark)  # Data Docs too
    rows = [r for r in tables.read_arrow(W, "dq_results").to_pylist() if r["run_id"] == RUN]
    return code, rows, dirs


def results(rows, check):
    return {(r["topic"], r["partition"]): (r["status"], r["observed"], r["failed"])
            for r in rows if r["check"] == check}


def items(rows, check, topic, partition):
    row, = [r for r in rows if r["check"] == check and r["topic"] == topic
            and r["partition"] == partition]
    return [(i["class"], i["first_offset"], i["last_offset"], i["offsets"])
            for i in json.loads(row["details"])["items"]], json.loads(row["details"])


def test_beyond_high_watermark(audited):
    code, rows, dirs = audited
    assert code == 65  # mixed_cluster fails the night
    assert results(rows, "beyond_high_watermark") == {
        ("orders", 0): ("warn", 1, 1), ("orders", 1): ("pass", 1, 0),
        ("orders", 2): ("pass", 1, 0), ("orders", 3): ("pass", 1, 0),
        ("__consumer_offsets", 12): ("pass", 1, 0)}  # payments-0: no checkpoint, no result
    found, details = items(rows, "beyond_high_watermark", "orders", 0)
    assert found == [("beyond_high_watermark", 8, 9, 2)]
    assert details["items"][0]["message"].startswith(
        f"offsets 8..9 of orders-0 in {dirs['b1']} are past the high watermark 8")
    # the real directory whose checkpoint is newer than its segment: no finding, only noted
    found, _ = items(rows, "beyond_high_watermark", "__consumer_offsets", 12)
    assert found == [("checkpoint_ahead", 17, 19, 3)]


def test_torn_tail_after_an_unclean_shutdown_is_expected(audited):
    _, rows, dirs = audited
    got = {k: v for k, v in results(rows, "truncated_tail").items() if v[0] != "pass" or v[1]}
    tails = {k: items(rows, "truncated_tail", *k)[0] for k in got}
    assert {k: (got[k], [c for c, *_ in tails[k]]) for k in got} == {
        ("orders", 0): (("pass", 1, 0), ["unclean_shutdown"]),     # unclean, past recovery point 5
        ("orders", 3): (("warn", 1, 1), ["active_segment"]),       # unclean, below recovery point 100
        ("orders", 2): (("warn", 1, 1), ["active_segment"]),       # clean shutdown
        ("orders", 1): (("pass", 1, 0), []), ("payments", 0): (("pass", 1, 0), []),
        ("__transaction_state", 0): (("pass", 1, 0), []),
        ("__consumer_offsets", 12): (("pass", 1, 0), [])}
    _, details = items(rows, "truncated_tail", "orders", 0)
    assert (f"expected: {dirs['b1']} has no .kafka_cleanshutdown and the tail (offset 10) lies "
            "past the recovery point 5") in details["items"][0]["message"]


def test_log_start_moved(audited):
    _, rows, _ = audited
    assert results(rows, "offset_gaps")[("orders", 1)] == ("pass", 1, 0)
    found, details = items(rows, "offset_gaps", "orders", 1)
    assert found == [("log_start_moved", 0, 3, 4)]
    assert "log-start-offset-checkpoint says the log starts at 4" in details["items"][0]["message"]


def test_mixed_cluster(audited):
    from spark_jobs.audit.results import place

    _, rows, dirs = audited
    assert results(rows, "mixed_cluster") == {(None, None): ("fail", 3, 3)}
    row, = [r for r in rows if r["check"] == "mixed_cluster"]
    assert place(row) == f"log directories of {NIGHT}"  # check_quality's FAIL line, the verdict
    messages = sorted(i["message"] for i in json.loads(row["details"])["items"])
    assert messages[0] == (f"log directory {dirs['b1']} (node 1) belongs to cluster.id A; the 3 "
                           f"log directories of night {NIGHT} belong to 3 clusters: "
                           "5L6g3nShT-eMCtK--X86sw, A, B")


def test_hanging_transaction(audited):
    _, rows, _ = audited
    assert results(rows, "hanging_transaction") == {("payments", 0): ("warn", 3, 1)}
    found, details = items(rows, "hanging_transaction", "payments", 0)
    assert sorted(found) == [("closed", 2, 3, 1), ("hanging", 0, 0, 1), ("open", 4, 4, 1)]
    assert {c: v["items"] for c, v in details["classes"].items()} == {
        "hanging": 1, "open": 1, "closed": 1}
    hanging, = [i for i in details["items"] if i["class"] == "hanging"]
    assert hanging["value"] == 120_000
    assert ("producer 500 (transactional id tx-a, epoch 0) has had a transaction open since "
            "offset 0 for 120000 ms at the snapshot (its latest batch time), longer than its "
            "transaction timeout 60000 ms") in hanging["message"]
    assert "pins the last stable offset of payments-0 at 0" in hanging["message"]


def test_mixed_cluster_passes_for_one_cluster_and_the_real_directories(spark):
    """Each real log directory alone is one cluster; two of them in one night are mixed."""
    from spark_jobs.audit.log_dir_checks import mixed_cluster_checks

    real = sorted(p for p in BROKER_DIRS.iterdir() if (p / "meta.properties").exists())
    assert len(real) == 7
    cols = "night string, log_dir string, cluster_id string, node_id int, file string"

    def frame(rows):
        return spark.createDataFrame(rows, cols)

    nights = [(f"2025-11-{20 + i:02d}", str(p), *meta_cluster(p / "meta.properties"),
               str(p / "meta.properties")) for i, p in enumerate(real)]
    assert mixed_cluster_checks(frame(nights)).count() == 0
    assert mixed_cluster_checks(frame([(NIGHT, "x/b1", "A", 1, "f"), (NIGHT, "x/b2", "A", 2, "f")])
                                ).count() == 0
    assert [r[2] for r in nights] == [  # KAIPASUBHASH's (ZooKeeper mode, version 0) has none
        "jhCzCarDSyqr9FkZhIbmYQ", "MkU3OEVBNTcwNTJENDM2Qk", None, "q1w2e3r4t5y6u7i8o9p0",
        "lRaQCIBoRh2xRKLuP9CAQg", "5L6g3nShT-eMCtK--X86sw", "0wHLXdrKStejkyBzi8qBEw"]
    one_night = [(NIGHT, *r[1:]) for r in nights[:2]]
    assert sorted(r.segment for r in mixed_cluster_checks(frame(one_night)).collect()) == \
        [str(real[0]), str(real[1])]
    # a directory without a cluster.id beside one with: nothing says they differ
    assert mixed_cluster_checks(frame([(NIGHT, *r[1:]) for r in nights[1:3]])).count() == 0



#: the night's dq_results rows as the audit wrote them at 17df622 (issue 43: the audit in one
#: pass writes the same rows): a row a line, ``checked_at`` null, the test's temporary folder
#: as ``<TMP>``; each row's items in the audit's order (worst status, then first offset,
#: class, segment, position, message). Set KAFKALOG_WRITE_GOLDEN=1 to write it again.
GOLDEN = Path(__file__).resolve().parent.parent / "data" / "audit-golden" / "log-dir-checks.jsonl"


def test_the_rows_are_the_golden_ones(audited, tmp_path_factory):
    """Every field of every dq_results row of the night, against the rows recorded before
    the audit was made one pass (issue 43): the checks, places, counts, details and items."""
    import os

    _, rows, _ = audited
    root = str(tmp_path_factory.getbasetemp()) + "/"
    got = sorted(json.dumps({**r, "checked_at": None}, sort_keys=True, default=str)
                 .replace(root, "<TMP>/") for r in rows)
    if os.environ.get("KAFKALOG_WRITE_GOLDEN"):
        GOLDEN.write_text("\n".join(got) + "\n")
    assert got == GOLDEN.read_text().splitlines()
