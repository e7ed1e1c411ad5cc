"""records.txn_state against an independent replay (issue 35, item 1).

The segments are written with kafkalog's writer; the expected states come from a replay
written here: the v2 batch headers and the control records' keys read with ``struct``
(Kafka's wire grammar, as tests/segments.py writes it), and the transactions followed
forwards through the log as a broker's producer state follows them (a marker ends the
producer's open records whose epoch is not above its own). Nothing of the job's
resolution (spark_jobs.decode.transactions) is used to make the expectation.
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

from kafkalog.writer import SegmentWriter, WriteRecord
from spark_jobs import storage, tables
from spark_jobs.decode import transactions
from spark_jobs.publish import publish_run
from spark_jobs.warehouse import Warehouse

from tests.snapshots import upload
from tests.runs import decode

T0 = 1_763_683_200_000  # 2025-11-21T00:00:00Z
HEAD = struct.Struct(">qiibIhiqqqhii")  # v2 batch header, 61 bytes
TRANSACTIONAL, CONTROL = 0x10, 0x20
INDEX = 100  # .index every ~100 bytes: small tasks can split the segments there


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = z = 0
    while True:
        b = buf[pos]
        pos += 1
        z |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return (z >> 1) ^ -(z & 1), pos


def log_entries(path: Path):
    """(kind, ...) of each v2 batch of a .log file, read from the bytes:
    ("data", producer_id, epoch, transactional, [offsets]) or
    ("marker", producer_id, epoch, offset, type) (type 0 ABORT, 1 COMMIT)."""
    data = path.read_bytes()
    pos, out = 0, []
    while pos + HEAD.size <= len(data):
        (base, length, _leader, magic, _crc, attrs, last_delta, _t0, _t1, pid, epoch, _seq,
         count) = HEAD.unpack_from(data, pos)
        end = pos + 12 + length
        if magic != 2 or end > len(data):
            break  # a torn tail
        if attrs & CONTROL:
            p = pos + HEAD.size
            _, p = _varint(data, p)  # record length
            p += 1  # attributes
            _, p = _varint(data, p)  # timestamp delta
            delta, p = _varint(data, p)
            key_len, p = _varint(data, p)
            _version, kind = struct.unpack_from(">hh", data, p)
            out.append(("marker", pid, epoch, base + delta, kind))
        else:
            out.append(("data", pid, epoch, bool(attrs & TRANSACTIONAL),
                        [base + i for i in range(count)]))
        pos = end
    return out


def replay(root: Path) -> dict:
    """{(topic, partition, offset): state} of every data record under ``root``
    (``<topic>-<partition>/<base>.log``), followed forwards through each partition."""
    out = {}
    for part in sorted(p for p in root.iterdir() if p.is_dir()):
        topic, partition = part.name.rsplit("-", 1)
        seen, entries = set(), []
        for log in sorted(part.glob("*.log")):
            for e in log_entries(log):
                first = e[4][0] if e[0] == "data" else e[3]
                if first not in seen:  # overlapping copies: each offset once
                    seen.add(first)
                    entries.append((first, e))
        waiting: dict[int, list] = {}  # producer id -> [(epoch, offset)] not yet ended
        for _, e in sorted(entries, key=lambda x: x[0]):
            if e[0] == "data":
                _, pid, epoch, txn, offsets = e
                for o in offsets:
                    out[(topic, int(partition), o)] = "open" if txn else None
                    if txn:
                        waiting.setdefault(pid, []).append((epoch, o))
            else:
                _, pid, epoch, _, kind = e
                if kind not in (0, 1):
                    continue
                ended = [(ep, o) for ep, o in waiting.get(pid, []) if ep <= epoch]
                waiting[pid] = [(ep, o) for ep, o in waiting.get(pid, []) if ep > epoch]
                for _, o in ended:
                    out[(topic, int(partition), o)] = "committed" if kind == 1 else "aborted"
    return out


def rec(i: int) -> WriteRecord:
    return WriteRecord(f"k{i % 5}".encode(), f"pay {i}".encode(), timestamp=T0 + i * 60_000)


def txn(w: SegmentWriter, pid: int, epoch: int, n: int, seq: int = 0) -> None:
    i = w.next_offset
    w.append([rec(i + k) for k in range(n)], producer_id=pid, producer_epoch=epoch,
             base_sequence=seq, transactional=True)


def marker(w: SegmentWriter, pid: int, epoch: int, commit: bool) -> None:
    w.append_marker(producer_id=pid, producer_epoch=epoch, commit=commit, coordinator_epoch=1,
                    timestamp=T0)


def plain(w: SegmentWriter, n: int = 2) -> None:
    i = w.next_offset
    w.append([rec(i + k) for k in range(n)])


def write_nights(tmp: Path) -> tuple[Path, Path]:
    """Night 1 and night 2 of payments-0 and payments-1 (night 2 holds night 1 and more):

    payments-0, segment 0: a committed transaction (marker in the same segment), then
    producer 11's records, whose ABORT is in segment 1 (a later segment of night 1);
    segment 1 (active in night 1): producers 12 and 13 open at night 1's end, and 14 with
    a stale COMMIT of a lower epoch after it; night 2 adds 12's COMMIT, 13's ABORT, 14's
    ABORT with a bumped epoch (transaction version 2), and segment 2 with producer 15 open.
    payments-1: an aborted transaction interleaved with a committed one, one segment.
    """
    n2 = tmp / "n2"
    p0 = n2 / "payments-0"
    with SegmentWriter(p0, 0, index_interval_bytes=INDEX) as w:
        plain(w)
        txn(w, 10, 0, 3)
        plain(w, 1)
        marker(w, 10, 0, True)
        txn(w, 11, 2, 2)
        seg1 = w.next_offset
    with SegmentWriter(p0, seg1, index_interval_bytes=INDEX) as w:
        plain(w)
        marker(w, 11, 2, False)
        txn(w, 12, 0, 2)
        txn(w, 13, 0, 2)
        txn(w, 14, 1, 2)
        marker(w, 14, 0, True)  # stale: epoch 0 < 1 ends nothing of 14's epoch-1 records
        plain(w, 1)
        night1_cut = w.position
        marker(w, 12, 0, True)
        txn(w, 12, 0, 1, seq=2)
        marker(w, 12, 0, True)
        marker(w, 13, 0, False)
        marker(w, 14, 2, False)
        seg2 = w.next_offset
    with SegmentWriter(p0, seg2, index_interval_bytes=INDEX) as w:
        plain(w)
        txn(w, 10, 0, 2, seq=3)
        marker(w, 10, 0, True)
        txn(w, 15, 0, 2)
    with SegmentWriter(n2 / "payments-1", 0, index_interval_bytes=INDEX) as w:
        txn(w, 20, 0, 2)
        txn(w, 21, 0, 2)
        plain(w)
        marker(w, 21, 0, True)
        txn(w, 20, 0, 1, seq=2)
        marker(w, 20, 0, False)
    n1 = tmp / "n1"
    (n1 / "payments-0").mkdir(parents=True)
    shutil.copy2(p0 / "00000000000000000000.log", n1 / "payments-0")
    name = f"{seg1:020d}.log"
    (n1 / "payments-0" / name).write_bytes((p0 / name).read_bytes()[:night1_cut])
    shutil.copytree(n2 / "payments-1", n1 / "payments-1")
    return n1, n2


def states(wh: Path, snapshot: int | None = None) -> list[tuple]:
    t = tables.read_arrow(str(wh), "records", snapshot=snapshot,
                          columns=("topic", "partition", "offset", "txn_state"))
    return sorted(zip(*(t.column(c).to_pylist()
                        for c in ("topic", "partition", "offset", "txn_state"))))


def expected(root: Path) -> list[tuple]:
    return sorted((*k, v) for k, v in replay(root).items())


def main_snapshot(wh: Path) -> int:
    return tables.warehouse_of(str(wh)).load("records").current_snapshot().snapshot_id


def test_replay_sees_what_the_nights_hold(tmp_path):
    """The replay's own expectations on the nights written above (so that the test
    below compares against something that holds each case)."""
    n1, n2 = write_nights(tmp_path)
    one, two = replay(n1), replay(n2)
    assert sorted(set(one.values()) - {None}) == ["aborted", "committed", "open"]
    opened = {k for k, v in one.items() if v == "open"}
    assert {two[k] for k in opened} == {"committed", "aborted"}  # each ends in night 2
    assert "open" in two.values()  # producer 15
    assert len(one) < len(two)


def test_txn_state_equals_the_replay_over_nights_reruns_and_splits(spark, tmp_path):
    n1, n2 = write_nights(tmp_path)
    wh = tmp_path / "wh"
    want1, want2 = expected(n1), expected(n2)

    s1 = decode(spark, n1, wh, "night-1")
    assert states(wh) == want1
    # producer 11's records met their ABORT in a later segment (another task): resolved
    # after the tasks, on the branch, before publishing
    assert s1["txn_resolved"]["rows"] == 2
    night1 = main_snapshot(wh)

    s2 = decode(spark, n2, wh, "night-2")
    assert states(wh) == want2  # night 1's open rows decided by night 2's markers
    assert s2["txn_resolved"]["rows"] == 6 and s2["txn_resolved"]["files"] >= 1
    assert states(wh, night1) == want1  # night 1's published snapshot still says open

    # a rerun of night 2 and a rerun of night 1 after night 2: the same answer, no
    # offset twice
    decode(spark, n2, wh, "night-2")
    assert states(wh) == want2
    decode(spark, n1, wh, "night-1")
    assert states(wh) == want2
    # a backfill of night 2 under a new id, everything decoded again: nothing changes
    decode(spark, n2, wh, "backfill-2", "--reprocess")
    assert states(wh) == want2
    keys = [s[:3] for s in states(wh)]
    assert len(keys) == len(set(keys)) == len(want2)

    # one night in tasks of a few hundred bytes: markers in later tasks of a segment
    split = tmp_path / "wh-split"
    s = decode(spark, n2, split, "split", "--split-bytes", "300")
    assert s["tasks"] > 4 and s["txn_resolved"]["rows"] > 0
    assert states(split) == want2


def test_a_reapplied_publish_carries_the_rewrites(spark, tmp_path):
    """Night 2 published after another run moved main (a re-applied publish): its rewrites
    of night 1's files go to main with it, the files they replace leave it."""
    n1, n2 = write_nights(tmp_path)
    other = tmp_path / "other"
    with SegmentWriter(other / "refunds-0", 0) as w:
        plain(w, 3)
    wh = tmp_path / "wh"
    decode(spark, n1, wh, "night-1")
    s2 = decode(spark, n2, wh, "night-2", "--no-publish")
    assert s2["txn_resolved"]["rows"] == 6
    decode(spark, other, wh, "refunds")  # main moves on after night 2 forked from it
    out = publish_run(Warehouse(str(wh)), "night-2")
    assert out["tables"]["records"] == "re-applied"
    want = expected(n2) + expected(other)
    assert states(wh) == sorted(want)


def test_on_s3_in_chunks(spark, tmp_path, s3_bucket, s3_endpoint, s3_catalog):
    """The same nights on the S3 protocol (moto), night 2 in two chunks of one run (a
    partition stays in one chunk): night 1's open rows rewritten on S3, each chunk
    resolving its own partitions on the shared branch."""
    import boto3

    n1, n2 = write_nights(tmp_path)
    client = boto3.client("s3", endpoint_url=s3_endpoint)
    for night, root in (("n1", n1), ("n2", n2)):
        upload(root, s3_bucket, night, client)
    wh = f"s3://{s3_bucket}/warehouse"
    decode(spark, f"s3://{s3_bucket}/n1", wh, "night-1", "--catalog", s3_catalog)
    for chunk, part in enumerate(("payments-0", "payments-1")):
        segments = [f"s3://{s3_bucket}/n2/{part}/{p.name}" for p in sorted((n2 / part).glob("*.log"))]
        client.put_object(Bucket=s3_bucket, Key=f"m/chunk-{chunk}.json",
                          Body=json.dumps({"segments": segments}).encode())
        decode(spark, f"s3://{s3_bucket}/m/chunk-{chunk}.json", wh, "night-2", "--chunk-id", str(chunk),
            "--no-publish", "--catalog", s3_catalog)
    remote = Warehouse(wh, s3_catalog, s3=storage.S3Config.from_env())
    assert publish_run(remote, "night-2")["tables"]["records"] == "fast-forward"
    t = tables.read_arrow(remote, "records", columns=("topic", "partition", "offset", "txn_state"))
    got = sorted(zip(*(t.column(c).to_pylist() for c in ("topic", "partition", "offset", "txn_state"))))
    assert got == expected(n2)
    assert all(p.startswith(f"s3://{s3_bucket}/") for p in tables.table_paths(remote, "records"))


def test_read_committed_helpers_read_the_column(spark, tmp_path):
    """tables.transaction_status gives txn_state where written, and resolves rows
    written before the column existed (null) by the same rule."""
    n1, n2 = write_nights(tmp_path)
    wh = tmp_path / "wh"
    decode(spark, n2, wh, "r")
    records = tables.read_table(spark, str(wh), "records")
    markers = tables.read_table(spark, str(wh), "markers")
    want = {(t, p, o): s for t, p, o, s in expected(n2)}
    got = {(r.topic, r.partition, r.offset): r.txn_status
           for r in tables.transaction_status(records, markers).collect()}
    assert got == want
    from pyspark.sql import functions as F

    older = records.withColumn("txn_state", F.lit(None).cast("string"))
    got_old = {(r.topic, r.partition, r.offset): r.txn_status
               for r in tables.transaction_status(older, markers).collect()}
    assert got_old == want


def test_marker_index_rule():
    index = transactions.MarkerIndex()
    index.add([7, 7, 7, 8], [0, 1, 3, 0], [10, 20, 30, 5], ["COMMIT", "ABORT", "COMMIT", "ABORT"])
    assert index.state(7, 0, 3) == "committed"
    assert index.state(7, 1, 10) == "aborted"
    assert index.state(7, 2, 10) == "committed"  # the epoch-1 ABORT is stale for epoch 2
    assert index.state(7, 0, 30) is None
    assert index.state(8, 0, 5) is None  # a marker ends only records before it
    assert index.state(9, 0, 1) is None


def test_rewritten_file_names_keep_their_run():
    path = "s3://b/wh/data/records/topic=t/dt=d/abc~x1~t00001.parquet"
    once = transactions.rewritten_path(path, "ff0")
    assert once == "s3://b/wh/data/records/topic=t/dt=d/abc~x1~t00001~txnff0.parquet"
    assert transactions.rewritten_path(once, "aa1").endswith("t00001~txnaa1.parquet")


def _rows(offsets, pids, txn=True):
    import pyarrow as pa

    return pa.table({"offset": pa.array(offsets, pa.int64()),
                     "producer_id": pa.array(pids, pa.int64()),
                     "producer_epoch": pa.array([0] * len(offsets), pa.int16()),
                     "is_transactional": pa.array([txn] * len(offsets))})


def _markers(offsets, pids, kinds):
    import pyarrow as pa

    return pa.table({"offset": pa.array(offsets, pa.int64()),
                     "producer_id": pa.array(pids, pa.int64()),
                     "producer_epoch": pa.array([0] * len(offsets), pa.int16()),
                     "control_type": pa.array(kinds), "crc_valid": pa.array([True] * len(offsets))})


def _state(t):
    return dict(zip(t.column("offset").to_pylist(), t.column("txn_state").to_pylist()))


def test_in_task_holds_rows_until_their_marker_in_either_order():
    task = transactions.InTask()
    assert _state(task.take(_rows([0, 1], [1, 1], txn=False))) == {0: None, 1: None}
    assert task.take(_rows([2, 3], [5, 6])).num_rows == 0  # both wait
    assert _state(task.add_markers(_markers([4], [5], ["ABORT"]))) == {2: "aborted"}
    task.add_markers(_markers([9], [7], ["COMMIT"]))  # a marker before its records come
    assert _state(task.take(_rows([7, 8], [7, 6]))) == {7: "committed"}
    assert _state(task.leftovers()) == {3: "open", 8: "open"}
    assert task.leftovers() is None


def test_in_task_writes_rows_open_past_its_memory_bound():
    task = transactions.InTask(max_waiting_bytes=0)
    assert _state(task.take(_rows([2, 3], [5, 6]))) == {2: "open", 3: "open"}
    assert task.add_markers(_markers([4], [5], ["COMMIT"])) is None
