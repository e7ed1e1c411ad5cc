"""The decode job (spark_jobs/decode_segments.py) on generated snapshots and the real corpus.

Expected rows come from decoding each segment file on its own with
``kafkalog.decode`` (itself checked against kafka-python in test_corpus and
test_interop); the job must reproduce them exactly through planning, splitting,
executors, deduplication and publish.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import kafkalog
from kafkalog.writer import SegmentWriter, WriteRecord
from spark_jobs import decode as job
from spark_jobs import decode_segments, layout, schemas, storage, tables
from spark_jobs.warehouse import DEFAULT_CATALOG, RUN_ID, CatalogError, Warehouse, branch_name
from spark_jobs.warehouse.catalog import CONFIG_FILE, catalog_properties
from spark_jobs.warehouse.history import snapshot_summary

from tests.snapshots import upload
from tests.runs import decode
from tests.spark_settings import FAST_START_JVM
from tests.segments import CORPUS_DIR as CORPUS

pytestmark = pytest.mark.pipeline

T0 = 1_763_683_200_000  # 2025-11-21T00:00:00Z
DAY = 86_400_000


def rec(i: int, topic: str = "orders", tag: str = "") -> WriteRecord:
    return WriteRecord(f"k{i % 7}".encode(), f"{topic} {i}{tag}".encode(),
                       headers=(("n", str(i).encode()),), timestamp=T0 + i * 3_600_000)


def write_partition(directory: Path, base: int, n_batches: int, *, per_batch: int = 5,
                    codecs=("none", "gzip", "snappy", "lz4", "zstd"), txn: bool = False,
                    topic: str = "orders", tag: str = "", index_interval: int = 512) -> Path:
    with SegmentWriter(directory, base, index_interval_bytes=index_interval) as w:
        for b in range(n_batches):
            i = w.next_offset
            w.append([rec(i + k, topic, tag) for k in range(per_batch)],
                     codec=codecs[b % len(codecs)])
        if txn:
            for commit in (True, False):
                i = w.next_offset
                w.append([rec(i + k, topic, tag) for k in range(3)], producer_id=77,
                         producer_epoch=1, base_sequence=0 if commit else 3, transactional=True)
                w.append_marker(producer_id=77, producer_epoch=1, commit=commit,
                                coordinator_epoch=2, timestamp=T0)
        return Path(w.path)


def snapshot(root: Path) -> Path:
    """A broker log dir: two topics, three partitions, every codec, a transaction, damage."""
    write_partition(root / "broker-1" / "orders-0", 0, 12, txn=True)
    write_partition(root / "broker-1" / "orders-1", 0, 7, topic="orders")
    write_partition(root / "broker-2" / "payments.v2-0", 0, 6, topic="payments.v2",
                    codecs=("zstd",))
    # damage payments: flip a byte inside the third batch, tear the tail
    log = root / "broker-2" / "payments.v2-0" / "00000000000000000000.log"
    data = bytearray(log.read_bytes())
    third = list(kafkalog.iter_batches(bytes(data)))[2]
    data[third.position + third.size - 2] ^= 0x11
    log.write_bytes(bytes(data[:-9]))
    return root


def expected_records(logs) -> set[tuple]:
    """(topic, partition, offset, key, value) of every CRC-valid data record."""
    out = set()
    for log in logs:
        topic, partition, _ = layout.parse_segment_key(str(log))
        r = kafkalog.decode(str(log)).records
        for row in r.to_pylist():
            if row["crc_valid"]:
                out.add((topic, partition, row["offset"], row["key"], row["value"]))
    return out


def read_local(wh: Path, name: str) -> pa.Table:
    """Table ``name`` of the embedded catalog under ``wh``, as ``main`` has it."""
    return tables.read_arrow(str(wh), name)


def got_records(wh: Path) -> list[tuple]:
    t = read_local(wh, "records")
    return [(r["topic"], r["partition"], r["offset"], r["key"], r["value"]) for r in t.to_pylist()]


def run_tasks_here(wh: Path, tasks, run_id: str = "r", **kwargs) -> list[job.TaskResult]:
    """Run ``tasks`` in this process (no Spark) into the embedded catalog under ``wh``,
    then commit and publish what they wrote, as the job does."""
    import datetime as dt

    w = Warehouse(str(wh))
    w.begin_run(run_id, reset=True)
    ctx = job.make_context(w, run_id, "t", ingested_at=dt.datetime.now(dt.timezone.utc).isoformat(),
                           **kwargs)
    rows = [job.run_task(t, ctx) for t in tasks]
    for name, files in job.task_files(rows).items():
        w.commit_files(name, run_id, files)
    w.publish(run_id)
    return rows


def test_snapshot_tables_hold_exactly_what_the_segments_hold(spark, tmp_path):
    src = snapshot(tmp_path / "snap")
    logs = sorted(src.rglob("*.log"))
    wh = tmp_path / "wh"
    summary = decode(spark, src, wh, "night-1")
    got = got_records(wh)
    assert len(got) == len(set(got))  # every record once
    assert set(got) == expected_records(logs)
    assert summary["records"] == len(got)

    batches = read_local(wh, "batches")
    want_batches = sum(kafkalog.decode(str(p)).batches.num_rows for p in logs)
    assert batches.num_rows == want_batches
    assert not all(batches.column("crc_valid").to_pylist())  # the flipped byte is there
    markers = read_local(wh, "markers").to_pylist()
    assert sorted(m["control_type"] for m in markers) == ["ABORT", "COMMIT"]
    assert {m["topic"] for m in markers} == {"orders"}

    findings = read_local(wh, "findings").to_pylist()
    want = sorted(f for p in logs for f in cli_findings(p))
    assert sorted((f["kind"], f["position"], f["message"]) for f in findings) == want
    # the torn tail took batches the .timeindex names: the job says so, as the CLI does
    assert any(f["kind"] == "index_mismatch" and ".timeindex: " in f["message"] for f in findings)
    crc = [f for f in findings if f["kind"] == "crc_mismatch"]
    assert crc and all(f["topic"] == "payments.v2" and f["partition"] == 0 for f in crc)
    # the damaged batch is kept losslessly: its exact bytes are in findings.raw
    data = (src / "broker-2" / "payments.v2-0" / "00000000000000000000.log").read_bytes()
    for f in crc:
        assert f["raw"] == data[f["position"]:f["end"]]
    assert any(f["kind"] == "truncated_tail" for f in findings)

    # lineage and partitioning
    r = read_local(wh, "records")
    assert set(r.column("run_id").to_pylist()) == {"night-1"}
    assert all(s.endswith("00000000000000000000.log") for s in set(r.column("segment").to_pylist()))
    days = {str(d) for d in r.column("dt").to_pylist()}
    assert "2025-11-21" in days and len(days) > 1  # records an hour apart span days
    ledger = read_local(wh, "ledger")
    assert ledger.num_rows == 3 and set(ledger.column("action").to_pylist()) == {"decoded"}
    w = Warehouse(str(wh))
    for name in ("records", "batches", "markers", "findings", "ledger"):
        t = w.table(name)
        assert snapshot_summary(t, t.current_snapshot().snapshot_id)[RUN_ID] \
            == "night-1"
        assert not [b for b in t.refs() if b != "main"]  # the run's branch is gone
        # every file reads back with its table's documented schema (tasks hand Parquet
        # dictionary arrays for repeated strings; the files hold plain string columns),
        # its partition columns inside, one value per file
        for path in tables.table_paths(w, name):
            f = path[len("file://"):]
            assert pq.read_schema(f) == schemas.TABLES[name], f
            for col in schemas.PARTITIONS[name]:
                assert len(set(pq.read_table(f, columns=[col]).column(col).to_pylist())) == 1
    assert not list((wh / "_scratch").rglob("*.parquet"))


def test_reruns_and_overlapping_snapshots_add_no_duplicates(spark, tmp_path):
    full = tmp_path / "full"
    write_partition(full / "orders-0", 0, 10, per_batch=4)
    seg = full / "orders-0" / "00000000000000000000.log"
    batches = list(kafkalog.iter_batches(str(seg)))
    # night 1: the active segment as it was mid-write: 6 batches and a torn seventh
    n1 = tmp_path / "n1" / "orders-0"
    n1.mkdir(parents=True)
    cut = batches[6].position + 30
    (n1 / seg.name).write_bytes(seg.read_bytes()[:cut])
    # night 2: the segment grew to 10 batches and rolled; a new segment started
    n2 = tmp_path / "n2"
    shutil.copytree(full, n2)
    write_partition(n2 / "orders-0", 40, 3, per_batch=4)
    wh = tmp_path / "wh"

    s1 = decode(spark, tmp_path / "n1", wh, "night-1")
    assert s1["actions"] == {"decoded": 1} and s1["records"] == 24
    s2 = decode(spark, n2, wh, "night-2")
    assert s2["actions"] == {"decoded": 1, "resumed": 1}
    assert s2["records"] == 16 + 12  # only the new bytes were decoded
    want = expected_records(sorted(n2.rglob("*.log")))
    assert sorted(got_records(wh)) == sorted(want)

    # night 2 again (same run id): replaces exactly its own output
    s2b = decode(spark, n2, wh, "night-2")
    assert s2b["records"] == s2["records"]
    assert sorted(got_records(wh)) == sorted(want)
    # night 1 again, after night 2 relied on it: still the same tables
    decode(spark, tmp_path / "n1", wh, "night-1")
    assert sorted(got_records(wh)) == sorted(want)
    # a third night with nothing new decodes nothing and adds nothing
    s3 = decode(spark, n2, wh, "night-3")
    assert s3["actions"] == {"unchanged": 2} and s3["records"] == 0
    # --reprocess decodes everything again, and adds nothing either
    s3r = decode(spark, n2, wh, "night-3", "--reprocess")
    assert s3r["actions"] == {"decoded": 2} and s3r["pending_partitions"] == 1
    assert s3r["divergences"] == 0
    assert sorted(got_records(wh)) == sorted(want)
    # a backfill of a snapshot whose segment is published as it is (the first segment
    # alone, as nights 2 and 3 saw it): its open tail meets night 2's later offsets, so the
    # partition may overlap, but nothing is decoded, so nothing goes through the dedupe
    first = tmp_path / "first" / "orders-0"
    first.mkdir(parents=True)
    shutil.copy2(seg, first / seg.name)
    s5 = decode(spark, tmp_path / "first", wh, "backfill-first-segment")
    assert s5["actions"] == {"unchanged": 1} and s5["records"] == 0
    assert s5["pending_partitions"] == 0 and s5["timings"]["deduplicate"] == 0.0
    assert sorted(got_records(wh)) == sorted(want)
    # a backfill of an old snapshot under a new run id: every offset is already there
    s4 = decode(spark, tmp_path / "n1", wh, "backfill-night-1")
    assert s4["pending_partitions"] == 1 and s4["divergences"] == 0
    assert sorted(got_records(wh)) == sorted(want)
    assert len(read_local(wh, "batches")) == len(kafkalog.decode(str(seg)).batches) + 3


def test_big_segments_split_at_index_positions_give_identical_tables(spark, tmp_path):
    src = tmp_path / "snap"
    write_partition(src / "orders-0", 0, 60, per_batch=20, index_interval=1024)
    seg = src / "orders-0" / "00000000000000000000.log"
    assert os.path.getsize(seg) > 20_000
    whole = tmp_path / "whole"
    decode(spark, src, whole, "r")
    split = tmp_path / "split"
    s = decode(spark, src, split, "r", "--split-bytes", "4096")
    assert s["tasks"] > 4
    assert sorted(got_records(split)) == sorted(got_records(whole))
    assert read_local(whole, "findings").num_rows == read_local(split, "findings").num_rows == 0
    # an .index whose positions do not fall on batch starts changes no table but findings
    index = seg.with_suffix(".index")
    entries = bytearray(index.read_bytes())
    for i in range(0, len(entries), 8):
        pos = int.from_bytes(entries[i + 4:i + 8], "big")
        entries[i + 4:i + 8] = (pos + 17 if pos else 0).to_bytes(4, "big")
    index.write_bytes(bytes(entries))
    skewed = tmp_path / "skewed"
    s = decode(spark, src, skewed, "r", "--split-bytes", "4096")
    assert s["tasks"] > 4
    assert sorted(got_records(skewed)) == sorted(got_records(whole))
    assert read_local(skewed, "batches").num_rows == 60
    assert_index_findings_as_the_cli_reports(skewed, seg, index)


def cli_findings(log: Path) -> list[tuple[str, int, str]]:
    """``(kind, position, message)`` of what ``kafkalog dump`` and ``kafkalog index
    --verify`` report for a segment and the .index/.timeindex/.txnindex beside it (the
    job's messages name the index file)."""
    out = [(f["kind"], f["position"], f["message"])
           for f in kafkalog.decode(str(log)).findings.to_pylist()]
    for suffix, read, verify in ((".index", kafkalog.read_offset_index, kafkalog.verify_offset_index),
                                 (".timeindex", kafkalog.read_time_index, kafkalog.verify_time_index),
                                 (".txnindex", kafkalog.read_txn_index, kafkalog.verify_txn_index)):
        index = log.with_suffix(suffix)
        if index.exists():
            out += [(f.kind, f.position, f"{index}: {f.message}")
                    for f in verify(read(str(index)), str(log))]
    return out


def assert_index_findings_as_the_cli_reports(wh, seg, index):
    """The warehouse's findings are exactly ``kafkalog index --verify``'s for the segment's
    .index (whatever tasks the job split it into): none lost, none twice."""
    expected = kafkalog.verify_offset_index(kafkalog.read_offset_index(str(index)), str(seg))
    assert expected, "the test's index should be wrong"
    got = read_local(wh, "findings").to_pylist()
    assert sorted((f["kind"], f["position"], f["end"], f["base_offset"], f["message"])
                  for f in got) == sorted(
        (f.kind, f.position, f.end, f.base_offset, f"{index}: {f.message}") for f in expected)


def test_index_entries_are_checked_and_findings_recorded_once(spark, tmp_path):
    """A broken .index (an entry at no batch start, one naming the next one's offset, an
    entry past the end of the log, a torn last entry) gives the CLI's findings, split or
    not."""
    src = tmp_path / "snap"
    write_partition(src / "orders-0", 0, 60, per_batch=20, index_interval=1024)
    seg = src / "orders-0" / "00000000000000000000.log"
    index = seg.with_suffix(".index")
    entries = bytearray(index.read_bytes())
    assert len(entries) >= 8 * 6
    entries[8 + 4:8 + 8] = (int.from_bytes(entries[12:16], "big") + 1).to_bytes(4, "big")
    # entry 3 names entry 4's offset: held at entry 4's position, past its own append
    entries[8 * 3:8 * 3 + 4] = entries[8 * 4:8 * 4 + 4]
    entries += (10_000).to_bytes(4, "big") + (os.path.getsize(seg) + 64).to_bytes(4, "big")
    index.write_bytes(bytes(entries) + b"\x00\x01\x02")
    assert {f.message.rsplit("(rule ", 1)[1] for f in kafkalog.verify_offset_index(
        kafkalog.read_offset_index(str(index)), str(seg)) if f.kind == "index_mismatch"} == {
            "position_at_batch_start)", "offset_in_append)", "offsets_increase)",
            "position_in_log)"}
    for name, extra in (("one-task", ()), ("split", ("--split-bytes", "4096"))):
        wh = tmp_path / name
        s = decode(spark, src, wh, "r", *extra)
        assert (s["tasks"] > 4) == (name == "split")
        assert_index_findings_as_the_cli_reports(wh, seg, index)
        kinds = {f["kind"] for f in read_local(wh, "findings").to_pylist()}
        assert kinds == {"index_mismatch", "index_partial_entry"}
        assert len(got_records(wh)) == 60 * 20


def test_time_index_entries_are_checked_and_findings_recorded_once(spark, tmp_path):
    """A broken .timeindex (a wrong timestamp, an offset that ends no batch, a
    timestamp below the one before, a torn last entry) gives the CLI's findings,
    split or not: each entry is checked by the task whose offsets it names."""
    src = tmp_path / "snap"
    seg = write_partition(src / "orders-0", 0, 60, per_batch=20, index_interval=1024)
    timeindex = seg.with_suffix(".timeindex")
    entries = bytearray(timeindex.read_bytes())
    assert len(entries) >= 12 * 12

    def patch(i, *, ts=None, rel=None):
        if ts is not None:
            entries[12 * i:12 * i + 8] = ts.to_bytes(8, "big")
        if rel is not None:
            entries[12 * i + 8:12 * i + 12] = rel.to_bytes(4, "big")

    patch(2, ts=int.from_bytes(entries[24:32], "big") + 5)  # not that batch's max timestamp
    # an offset inside entry 4's batch: below entry 4's, and not its own batch's timestamp
    # (one inside its own batch with that batch's max timestamp is how 2.x brokers write)
    patch(5, rel=int.from_bytes(entries[56:60], "big") - 3)
    patch(9, ts=1)  # below entry 8's (and not its batch's)
    last = len(entries) // 12 - 1
    patch(last, rel=10_000)  # an offset past the segment's
    timeindex.write_bytes(bytes(entries) + b"\x00\x01\x02")  # a torn entry at the end
    expected = kafkalog.verify_time_index(kafkalog.read_time_index(str(timeindex)), str(seg))
    assert {f.message.rsplit("(rule ", 1)[1] for f in expected if f.kind == "index_mismatch"} \
        == {"timestamp_is_batch_max)", "offsets_do_not_decrease)", "timestamps_do_not_decrease)",
            "offset_in_segment)"}
    assert_split_or_not_as_the_cli(spark, tmp_path, src, timeindex, expected, 4096, 60 * 20)


def assert_split_or_not_as_the_cli(spark, tmp_path, src, index, expected, split_bytes, records):
    """Run the job on ``src`` as one task and split in more than 4 (``split_bytes``): its
    findings are exactly ``expected`` (what ``kafkalog index --verify`` reports for
    ``index``, several of them, torn entry included) both times, and every record is in."""
    assert {f.kind for f in expected} == {"index_mismatch", "index_partial_entry"}
    assert len(expected) >= 5
    for name, extra in (("one-task", ()), ("split", ("--split-bytes", str(split_bytes)))):
        wh = tmp_path / name
        s = decode(spark, src, wh, "r", *extra)
        assert (s["tasks"] > 4) == (name == "split")
        got = read_local(wh, "findings").to_pylist()
        assert sorted((f["kind"], f["position"], f["end"], f["base_offset"], f["message"])
                      for f in got) == sorted(
            (f.kind, f.position, f.end, f.base_offset, f"{index}: {f.message}")
            for f in expected), name
        assert len(got_records(wh)) == records


def test_txn_index_entries_are_checked_and_findings_recorded_once(spark, tmp_path):
    """A broken .txnindex (an entry ending at a COMMIT, one at a data batch, one whose
    first offset is after its last, two out of order, a torn last entry) gives the
    CLI's findings, split or not: each entry is checked by the task holding the
    offset it ends at."""
    src = tmp_path / "snap"
    with SegmentWriter(src / "orders-0", 0, index_interval_bytes=512) as w:
        for t in range(12):
            i = w.next_offset
            w.append([rec(i + k, "orders", "") for k in range(20)])
            i = w.next_offset
            w.append([rec(i + k, "orders", "") for k in range(3)], producer_id=100 + t,
                     producer_epoch=0, base_sequence=0, transactional=True)
            w.append_marker(producer_id=100 + t, producer_epoch=0, commit=t % 3 == 0,
                            timestamp=T0)
    seg = Path(w.path)
    txn = seg.with_suffix(".txnindex")
    assert kafkalog.verify_txn_index(kafkalog.read_txn_index(str(txn)), str(seg)) == []
    entries = [list(e) for e in kafkalog.read_txn_index(str(txn)).entries]
    assert len(entries) == 8  # the aborts: transactions 1, 2, 4, 5, 7, 8, 10, 11
    commits = [r["offset"] for r in kafkalog.markers_table(str(seg)).to_pylist()
               if r["control_type"] == "COMMIT"]
    entries[1][3] = commits[1]  # ends at a COMMIT
    entries[3][3] -= 1  # ends at the transaction's data batch
    entries[5][2] = entries[5][3] + 1  # first offset after the last
    entries[6], entries[7] = entries[7], entries[6]  # out of order
    txn.write_bytes(b"".join(struct.pack(">hqqqq", *e) for e in entries) + b"\x00\x01")
    expected = kafkalog.verify_txn_index(kafkalog.read_txn_index(str(txn)), str(seg))
    assert_split_or_not_as_the_cli(spark, tmp_path, src, txn, expected, 1024, 12 * 23)


def test_damage_past_a_task_read_window_is_read_further_and_nothing_is_lost(tmp_path):
    """A split task reads ``slack`` bytes past its range to finish its last entry; when a
    finding runs past that window it reads further and decodes again, with a fresh set
    of files (a regression: the files of the retry had nowhere to go, and the task's
    records were lost behind a fetch_error)."""

    seg = write_partition(tmp_path / "snap" / "orders-0", 0, 40, per_batch=20,
                          index_interval=1024)
    data = bytearray(seg.read_bytes())
    mid = len(data) // 2
    data[mid:mid + 6000] = b"\x01" * 6000  # far more than the slack below
    seg.write_bytes(bytes(data))
    segs = job.discover(str(tmp_path / "snap"))[0]
    positions = {s.index_uri: job.index_positions(s.index_uri, None) for s in segs}
    tasks = job.plan(segs, {}, {}, positions, len(data) // 4)
    assert len(tasks) >= 3 and any(t.start < mid < t.end for t in tasks)
    # each task but the last reads only its share of the .index (and the entry before)
    assert [t.index_entries is None for t in sorted(tasks, key=lambda t: t.start)] == \
        [False] * (len(tasks) - 1) + [True]
    wh = tmp_path / "wh"
    rows = run_tasks_here(wh, tasks, slack=512)
    assert {r.ledger["action"] for r in rows} == {"decoded"}
    want = kafkalog.decode(str(seg))
    ok = want.records.filter(want.records.column("crc_valid"))
    assert sorted(got_records(wh)) == sorted(
        ("orders", 0, o, k, v) for o, k, v in zip(*(ok.column(c).to_pylist()
                                                    for c in ("offset", "key", "value"))))
    got = read_local(wh, "findings").to_pylist()
    # the .index and .timeindex were right for the bytes before the damage: their
    # entries into them name no batch now, as ``kafkalog index --verify`` says too
    index = kafkalog.verify_offset_index(
        kafkalog.read_offset_index(str(seg.with_suffix(".index"))), str(seg))
    assert index and {f.kind for f in index} == {"index_mismatch"}
    assert sorted((f["kind"], f["position"], f["message"]) for f in got) == \
        sorted(cli_findings(seg))
    assert any(f["kind"] == "skipped_bytes" for f in got)
    assert any(".timeindex: " in f["message"] for f in got)


def test_a_task_reads_on_to_the_next_tasks_first_batch_for_its_time_index_share(tmp_path):
    """A task checks the .timeindex entries up to the next task's first batch. Where
    damage right at the split point puts that batch past the task's read window, the
    task reads further, so no entry is checked twice or missed."""

    seg = write_partition(tmp_path / "snap" / "orders-0", 0, 40, per_batch=20,
                          index_interval=1024)
    data = bytearray(seg.read_bytes())
    segs = job.discover(str(tmp_path / "snap"))[0]
    positions = {s.index_uri: job.index_positions(s.index_uri, None) for s in segs}
    tasks = sorted(job.plan(segs, {}, {}, positions, len(data) // 4), key=lambda t: t.start)
    assert len(tasks) >= 3
    cut = tasks[2].start
    data[cut:cut + 3000] = b"\x01" * 3000  # garbage longer than the slack, at a split point
    seg.write_bytes(bytes(data))
    after = [b for b in kafkalog.iter_batches(str(seg)) if b.position > cut + 3000][3]
    timeindex = seg.with_suffix(".timeindex")
    entries = bytearray(timeindex.read_bytes())
    named = [int.from_bytes(entries[i + 8:i + 12], "big") for i in range(0, len(entries), 12)]
    i = next(i for i, rel in enumerate(named) if rel >= after.last_offset)
    entries[12 * i:12 * i + 8] = (int.from_bytes(entries[12 * i:12 * i + 8], "big") + 1).to_bytes(8, "big")
    timeindex.write_bytes(bytes(entries))
    # listed again: reads are pinned to what the listing saw (the same split points)
    segs = job.discover(str(tmp_path / "snap"))[0]
    again = sorted(job.plan(segs, {}, {}, positions, len(data) // 4), key=lambda t: t.start)
    assert [(t.start, t.end) for t in again] == [(t.start, t.end) for t in tasks]
    wh = tmp_path / "wh"
    run_tasks_here(wh, again, slack=512)
    got = read_local(wh, "findings").to_pylist()
    assert sorted((f["kind"], f["position"], f["message"]) for f in got) == \
        sorted(cli_findings(seg))
    assert sum(".timeindex: " in f["message"] for f in got) >= 1


def test_a_resume_finds_the_last_ingested_entry_by_its_stored_crc_whatever_its_magic(tmp_path):
    # before resuming, a task reads the fixed header at the last ingested batch's position
    # (kafkalog.read_batch_head): the same stored CRC there, v2 or v0/v1, is the same
    # prefix; another CRC, or bytes where no entry's header can be, are not
    from types import SimpleNamespace

    from tests.segments import batch_v2, message, record
    from spark_jobs.decode import executor

    v2_a, v1, v2_b = batch_v2([record(0), record(1)]), message(2, b"x", magic=1), \
        batch_v2([record(0)], base_offset=3)
    short_v2 = bytes(16) + b"\x02" + bytes(10)  # magic 2, 27 of a header's 61 bytes
    no_magic = bytes(16) + b"\x09" + bytes(60)
    log = tmp_path / "orders-0" / f"{0:020d}.log"
    log.parent.mkdir()

    def still_there(data: bytes, position: int, crc: int) -> bool:
        log.write_bytes(data)
        seg = job.Segment(uri=str(log), topic="orders", partition=0, base_offset=0,
                          size=len(data))
        task = job.Task(task=0, segment=seg, start=len(data), end=len(data),
                        mode="resume", verify_position=position, verify_crc=crc)
        return executor._prefix_still_there(task, SimpleNamespace(s3=None))

    data = v2_a + v1 + v2_b
    crc = {"v2_a": struct.unpack_from(">I", v2_a, 17)[0],  # after offset, length, epoch, magic
           "v1": struct.unpack_from(">I", v1, 12)[0],  # after offset, size
           "v2_b": struct.unpack_from(">I", v2_b, 17)[0]}
    assert still_there(data, 0, crc["v2_a"])
    assert still_there(data, len(v2_a), crc["v1"])
    assert still_there(data, len(v2_a) + len(v1), crc["v2_b"])
    assert not still_there(data, 0, crc["v2_b"])
    assert not still_there(data, len(v2_a), crc["v2_a"])
    assert not still_there(v2_a + short_v2, len(v2_a), 0)
    assert not still_there(v2_a + no_magic, len(v2_a), 0)


def test_a_resumed_segment_checks_the_time_index_entries_of_its_new_bytes_only(tmp_path):
    """An active segment that grew resumes after what an earlier run ingested: it checks
    the .timeindex entries naming offsets from its first new batch on (the earlier
    ones were the earlier run's), and none where there are no new bytes."""

    seg = write_partition(tmp_path / "snap" / "orders-0", 0, 12, per_batch=4, index_interval=256)
    batches = list(kafkalog.iter_batches(str(seg)))
    timeindex = seg.with_suffix(".timeindex")
    entries = bytearray(timeindex.read_bytes())
    named = [int.from_bytes(entries[i + 8:i + 12], "big") for i in range(0, len(entries), 12)]
    new_from = batches[6]
    for i in (0, len(named) - 1):  # one entry of the old bytes, one of the new, made wrong
        entries[12 * i:12 * i + 8] = (int.from_bytes(entries[12 * i:12 * i + 8], "big")
                                      + 1).to_bytes(8, "big")
    timeindex.write_bytes(bytes(entries))
    assert named[0] < new_from.base_offset <= named[-1]
    (s,) = job.discover(str(tmp_path / "snap"))[0]
    size = os.path.getsize(seg)
    before = batches[5]
    for start, want in ((new_from.position, [named[-1]]), (size, [])):
        task = job.Task(task=0, segment=job.Segment(uri=s.uri, topic="orders", partition=0,
                                                    base_offset=0, size=size,
                                                    timeindex_uri=s.timeindex_uri),
                        start=start, end=size, mode="resume",
                        verify_position=before.position, verify_crc=before.crc,
                        covered_end=start)
        wh = tmp_path / f"wh-{start}"
        (row,) = run_tasks_here(wh, [task])
        assert row.ledger["action"] == "resumed"
        found = [f for f in read_local(wh, "findings").to_pylist()
                 if ".timeindex: " in f["message"]]
        assert [f["base_offset"] for f in found] == want, start


def test_real_corpus(spark, tmp_path):
    src = tmp_path / "corpus"
    logs = sorted(CORPUS.rglob("*.log"))
    assert logs
    for i, log in enumerate(logs):
        dest = src / f"corpus.{log.parent.name.replace('+', '.')}-{i}"
        dest.mkdir(parents=True)
        shutil.copy(log, dest / log.name)
    wh = tmp_path / "wh"
    s = decode(spark, src, wh, "corpus")
    copied = sorted(src.rglob("*.log"))
    assert sorted(got_records(wh)) == sorted(expected_records(copied))
    assert s["segments"] == len(logs)
    want_markers = sum(kafkalog.decode(str(p)).markers.num_rows for p in copied)
    assert read_local(wh, "markers").num_rows == want_markers
    want_findings = sum(kafkalog.decode(str(p)).findings.num_rows for p in copied)
    assert read_local(wh, "findings").num_rows == want_findings


def test_planner_reads_indexes_concurrently_with_the_same_result(tmp_path, s3_bucket,
                                                                 s3_endpoint):
    # read_index_positions (16 threads, one S3 client) gives each .index the positions
    # _index_positions reads alone: for good files, an unreadable one, a missing one
    import boto3

    client = boto3.client("s3", endpoint_url=s3_endpoint)
    uris = []
    for i in range(40):
        body = b"".join(struct.pack(">ii", 10 * k + i, 4096 * k + i) for k in range(i * 7))
        if i == 5:
            body += b"\x01\x02\x03"  # torn: an incomplete last entry
        key = f"snap/t-{i}/{0:020d}.index"
        client.put_object(Bucket=s3_bucket, Key=key, Body=body)
        uris.append(f"s3://{s3_bucket}/{key}")
    uris.append(f"s3://{s3_bucket}/snap/missing/{0:020d}.index")
    s3 = storage.S3Config.from_env(s3_endpoint)
    alone = {u: job.index_positions(u, s3) for u in uris}
    assert job.read_index_positions(uris, s3) == alone
    assert alone[uris[3]] == [4096 * k + 3 for k in range(21)]
    assert alone[uris[-1]] == []


def test_s3_input_and_output_match_local(spark, tmp_path, s3_bucket, s3_endpoint, s3_catalog):
    import boto3

    src = snapshot(tmp_path / "snap")
    client = boto3.client("s3", endpoint_url=s3_endpoint)
    upload(src, s3_bucket, "snapshots/2026-11-20", client)
    local = tmp_path / "wh"
    decode(spark, src, local, "r1")
    wh = f"s3://{s3_bucket}/warehouse"
    s = decode(spark, f"s3://{s3_bucket}/snapshots/2026-11-20", wh, "r1", "--catalog", s3_catalog)
    assert s["published"]
    cfg = storage.S3Config.from_env()
    remote_wh = Warehouse(wh, s3_catalog, s3=cfg)
    assert all(p.startswith(f"s3://{s3_bucket}/iceberg/")
               for p in tables.table_paths(remote_wh, "records"))
    remote = tables.read_table(spark, remote_wh, "records")
    got = sorted((r.topic, r.partition, r.offset, bytes(r.key), bytes(r.value))
                 for r in remote.collect())
    assert got == sorted(got_records(local))
    f = tables.read_table(spark, remote_wh, "findings").collect()
    assert sorted((x.kind, x.position) for x in f) == sorted(
        (x["kind"], x["position"]) for x in read_local(local, "findings").to_pylist())
    # split into many tasks, each reading its ranged GET (and past its end, to the next
    # task's first entry): the same tables and findings as reading local files
    s = decode(spark, f"s3://{s3_bucket}/snapshots/2026-11-20", f"{wh}-split", "r1",
            "--split-bytes", "2048", "--catalog", s3_catalog, "--namespace", "split")
    assert s["tasks"] > 3
    local_split = tmp_path / "wh-split"
    decode(spark, src, local_split, "r1", "--split-bytes", "2048")
    split_wh = Warehouse(f"{wh}-split", s3_catalog, "split", s3=cfg)
    remote = tables.read_table(spark, split_wh, "records").collect()
    assert sorted((r.topic, r.partition, r.offset, bytes(r.key), bytes(r.value))
                  for r in remote) == sorted(got_records(local_split)) == got
    f = tables.read_table(spark, split_wh, "findings").collect()
    want = read_local(local_split, "findings").to_pylist()
    assert sorted((x.kind, x.position, x.message.rsplit("/", 1)[-1]) for x in f) == sorted(
        (x["kind"], x["position"], x["message"].rsplit("/", 1)[-1]) for x in want)
    assert sorted((x["kind"], x["position"]) for x in want) == sorted(
        (x["kind"], x["position"]) for x in read_local(local, "findings").to_pylist())
    # a manifest naming two of the segments, as one chunk of a run
    manifest = {"segments": [f"s3://{s3_bucket}/snapshots/2026-11-20/broker-1/orders-{p}/"
                             "00000000000000000000.log" for p in (0, 1)]}
    client.put_object(Bucket=s3_bucket, Key="m/chunk-0.json", Body=json.dumps(manifest).encode())
    wh2 = f"s3://{s3_bucket}/wh2"
    s = decode(spark, f"s3://{s3_bucket}/m/chunk-0.json", wh2, "r2", "--chunk-id", "0", "--no-publish",
            "--catalog", s3_catalog, "--namespace", "chunks")
    assert s["segments"] == 2 and not s["published"]
    w2 = Warehouse(wh2, s3_catalog, "chunks", s3=cfg)
    staged = tables.table_paths(w2, "records", ref=branch_name("r2"))
    assert staged and all(os.path.basename(k).startswith("r2~c0~") for k in staged)
    assert tables.table_paths(w2, "records") == []  # main: nothing before publish


def test_missing_object_is_a_finding_not_a_crash(spark, tmp_path):
    src = tmp_path / "snap"
    log = write_partition(src / "orders-0", 0, 2)
    manifest = tmp_path / "m.json"
    gone = str(src / "gone-0" / "00000000000000000000.log")
    manifest.write_text(json.dumps({"segments": [str(log), {"uri": gone, "size": 100}]}))
    wh = tmp_path / "wh"
    s = decode(spark, manifest, wh, "r")
    assert s["actions"] == {"decoded": 1, "failed": 1}
    f = read_local(wh, "findings").to_pylist()
    assert [x["kind"] for x in f] == ["fetch_error"] and "gone-0" in f[0]["message"]


def test_transaction_status_labels_committed_aborted_open(spark, tmp_path):
    src = tmp_path / "snap"
    with SegmentWriter(src / "t-0", 0) as w:
        w.append([rec(0)])  # plain
        for commit in (True, False):
            w.append([rec(1), rec(2)], producer_id=5, producer_epoch=0, transactional=True,
                     base_sequence=0 if commit else 2)
            w.append_marker(producer_id=5, producer_epoch=0, commit=commit, coordinator_epoch=1,
                            timestamp=T0)
        w.append([rec(3)], producer_id=5, producer_epoch=0, transactional=True, base_sequence=4)
    wh = tmp_path / "wh"
    decode(spark, src, wh, "r")
    records = tables.read_table(spark, str(wh), "records")
    markers = tables.read_table(spark, str(wh), "markers")
    status = {r.offset: r.txn_status for r in
              tables.transaction_status(records, markers).collect()}
    assert status == {0: None, 1: "committed", 2: "committed", 4: "aborted", 5: "aborted",
                      7: "open"}
    assert sorted(r.offset for r in tables.read_committed(records, markers).collect()) == [0, 1, 2]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(predicate, what: str, timeout: float = 90) -> None:
    import time

    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.slow
def test_same_tables_on_a_standalone_cluster(spark, tmp_path):
    """A real Spark standalone master and worker (from the pyspark package) on 127.0.0.1."""
    import signal
    import subprocess
    import sys
    import urllib.request

    bin_dir = Path(sys.executable).parent
    src = snapshot(tmp_path / "snap")
    local = tmp_path / "local"
    decode(spark, src, local, "r1", "--split-bytes", "2048")

    # the master's and worker's JVMs (SPARK_DAEMON_JAVA_OPTS), the driver's and the
    # executor's start fast, as every test JVM (spark_settings)
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
               SPARK_WORKER_DIR=str(tmp_path / "work"), SPARK_LOG_DIR=str(tmp_path / "logs"),
               SPARK_DAEMON_JAVA_OPTS=FAST_START_JVM)
    port, ui, wui = _free_port(), _free_port(), _free_port()
    master_url = f"spark://127.0.0.1:{port}"
    logs = open(tmp_path / "cluster.log", "wb")
    procs = [subprocess.Popen(
        [str(bin_dir / "spark-class"), "org.apache.spark.deploy.master.Master",
         "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui)],
        env=env, stdout=logs, stderr=subprocess.STDOUT, start_new_session=True)]
    try:
        def master_json():
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=2) as r:
                    return json.loads(r.read())
            except OSError:
                return None

        _wait_for(lambda: master_json() is not None, "the Spark master")
        procs.append(subprocess.Popen(
            [str(bin_dir / "spark-class"), "org.apache.spark.deploy.worker.Worker", master_url,
             "--host", "127.0.0.1", "--cores", "2", "--memory", "2g", "--webui-port", str(wui)],
            env=env, stdout=logs, stderr=subprocess.STDOUT, start_new_session=True))
        _wait_for(lambda: (master_json() or {}).get("aliveworkers", 0) >= 1, "a Spark worker")
        cluster = tmp_path / "cluster"
        job_file = Path(decode_segments.__file__)
        out = subprocess.run(
            [str(bin_dir / "spark-submit"), "--master", master_url,
             "--conf", "spark.executor.memory=1g", "--conf", "spark.ui.enabled=false",
             "--conf", f"spark.driver.extraJavaOptions={FAST_START_JVM}",
             "--conf", f"spark.executor.extraJavaOptions={FAST_START_JVM}",
             str(job_file), "--input", str(src), "--output", str(cluster), "--run-id", "r1",
             "--split-bytes", "2048"],
            env=env, capture_output=True, text=True, timeout=300)
        errors = [l for l in out.stderr.splitlines() if "ERROR" in l or "Error" in l or "rror:" in l]
        assert out.returncode == 0, "\n".join(errors[-30:]) + out.stdout[-2000:]
        summary = json.loads(out.stdout.strip().splitlines()[-1])
        assert summary["published"] and summary["tasks"] > 3
        apps = master_json()["completedapps"] + master_json()["activeapps"]
        assert any(a["name"] == "kafkalog-decode-segments" for a in apps)
    finally:
        for p in reversed(procs):
            os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            p.wait(timeout=30)
        logs.close()
    assert sorted(got_records(cluster)) == sorted(got_records(local))
    for name in ("batches", "markers", "findings"):
        a, b = read_local(cluster, name), read_local(local, name)
        key = ["topic", "partition", "position" if name != "markers" else "offset"]
        assert a.sort_by([(k, "ascending") for k in key]).drop_columns(["segment"]).equals(
            b.sort_by([(k, "ascending") for k in key]).drop_columns(["segment"])), name


def _seg(base=0, size=1000, uri=None, topic="t", partition=0, etag=None, index=None):
    uri = uri or f"/s/{topic}-{partition}/{base:020d}.log"
    return job.Segment(uri, topic, partition, base, size, etag, None, index)


def _ledger(rows):
    full = []
    for r in rows:
        row = {n: None for n in schemas.LEDGER.names}
        row.update(topic="t", partition=0, segment_base_offset=0, records=1, batches=1,
                   findings=0, action="decoded")
        row.update(r)
        full.append(row)
    return pa.Table.from_pylist(full, schema=schemas.LEDGER)


def test_plan_skips_resumes_splits_and_marks_overlaps():
    ledger = _ledger([
        dict(run_id="a", byte_start=0, byte_end=400, end_position=400, first_offset=0,
             last_offset=9, last_batch_position=300, last_batch_crc=7, object_size=1000,
             etag="e1"),
        dict(run_id="a", byte_start=400, byte_end=1000, end_position=900, first_offset=10,
             last_offset=19, last_batch_position=800, last_batch_crc=8, object_size=1000,
             etag="e1"),
    ])
    cov = job.coverage_from_ledger(ledger, ["a"])
    assert cov[("t", 0, 0)].end == 900 and cov[("t", 0, 0)].last_offset == 19
    published = job.ledger_ranges(ledger, "b")
    # same object: a verify-only task; grown: resume from 900; a new rolled segment: decode
    same = job.plan([_seg(size=1000, etag="e1")], cov, published, {})
    assert [(t.mode, t.same_object, t.covered_end, t.pending) for t in same] == \
        [("resume", True, 900, False)]
    grown = job.plan([_seg(size=5000, etag="e2"), _seg(base=40, size=10)], cov, published, {})
    assert sorted((t.segment.base_offset, t.mode, t.start, t.pending) for t in grown) == \
        [(0, "resume", 900, False), (40, "decode", 0, False)]
    # a rewritten (smaller) segment may repeat published offsets: pending
    shrunk = job.plan([_seg(size=500)], cov, published, {})
    assert [(t.mode, t.start, t.pending) for t in shrunk] == [("decode", 0, True)]
    # two replicas of one partition in one run: pending, even with an empty ledger
    twins = job.plan([_seg(uri="/b1/t-0/00000000000000000000.log"),
                      _seg(uri="/b2/t-0/00000000000000000000.log")], {}, {}, {})
    assert [t.pending for t in twins] == [True, True]
    # a big segment is split at index positions, starts flagged for boundary checks
    big = _seg(size=10_000, index="/s/t-0/00000000000000000000.index")
    tasks = job.plan([big], {}, {}, {big.index_uri: list(range(0, 10_000, 512))}, 3000)
    assert sorted((t.start, t.end, t.split) for t in tasks) == \
        [(0, 3072, False), (3072, 6144, True), (6144, 9216, True), (9216, 10_000, True)]


def test_small_tasks_share_spark_tasks_and_big_ones_stay_alone():
    from spark_jobs.decode.executor import TASK_COST_BYTES, pack

    mib = 1 << 20
    tasks = [job.Task(i, job.Segment(f"/s/t-{i}/0.log", "t", i, 0, n), 0, n)
             for i, n in enumerate([128 * mib] * 3 + [64 << 10] * 500)]
    groups = pack(tasks, 2, 128 * mib)
    assert sorted(i for g in groups for i in g) == list(range(len(tasks)))  # each task once
    assert sorted(g for g in groups if len(g) == 1)[:3] == [[0], [1], [2]]  # big: alone
    small = [sum(tasks[i].end + TASK_COST_BYTES for i in g) for g in groups if g[0] > 2]
    assert len(small) == len(groups) - 3 and max(small) - min(small) <= 2 * TASK_COST_BYTES
    # a few tasks: one Spark task each, as before
    assert sorted(map(sorted, pack(tasks[:3], 2, 128 * mib))) == [[0], [1], [2]]


def test_coverage_chains_resumed_rows_and_drops_broken_chains():
    base = dict(first_offset=0, last_offset=9, last_batch_crc=1, etag=None)
    ledger = _ledger([
        dict(base, run_id="a", byte_start=0, byte_end=500, end_position=480,
             last_batch_position=400, object_size=500),
        dict(base, run_id="b", byte_start=480, byte_end=900, end_position=900,
             last_batch_position=850, object_size=900, first_offset=10, last_offset=20,
             action="resumed"),
        dict(base, run_id="c", byte_start=0, byte_end=900, end_position=900,
             last_batch_position=850, object_size=900, action="unchanged"),
    ])
    cov = job.coverage_from_ledger(ledger, ["a", "b", "c"])[("t", 0, 0)]
    assert (cov.end, cov.last_batch_position, cov.last_offset) == (900, 850, 20)
    # without run a, b's resumed row proves nothing (it starts at 480)
    assert job.coverage_from_ledger(ledger, ["b", "c"]) == {}
    # a rerun of a trusts only what came before it: nothing
    assert job.coverage_from_ledger(ledger, []) == {}


def test_record_dates_cover_missing_and_absurd_timestamps():
    ts = pa.array([0, -1, None, 86_400_000 * 3, 2**62], pa.int64()).cast(pa.timestamp("ms", tz="UTC"))
    parts = dict(job.day_partitions(ts))
    assert sorted(parts) == ["1969-12-31", "1970-01-01", "1970-01-04", "none", "out_of_range"]
    assert parts["out_of_range"].to_pylist() == [False, False, False, False, True]


@pytest.mark.slow
def test_contract_command_from_a_bare_shell(tmp_path):
    """`.venv/bin/spark-submit spark_jobs/decode_segments.py ...` with no venv on PATH."""
    import subprocess
    import sys

    src = tmp_path / "snap"
    write_partition(src / "orders-0", 0, 3)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "SPARK_LOCAL_IP": "127.0.0.1"}
    out = subprocess.run(
        [str(Path(sys.executable).parent / "spark-submit"), str(Path(decode_segments.__file__)),
         "--input", str(src), "--output", str(tmp_path / "wh"), "--run-id", "r1"],
        env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1])["records"] == 15
    assert len(got_records(tmp_path / "wh")) == 15


def test_a_changed_catalog_file_is_read_again(tmp_path):
    """The warehouse's ``.pyiceberg.yaml`` is parsed once per version of the file (a job
    asks for its catalog dozens of times): a file changed since is read again."""
    root = str(tmp_path / "wh")
    props = catalog_properties(root)  # writes the embedded default down
    conf = tmp_path / "wh" / CONFIG_FILE
    assert catalog_properties(root) == props
    props["uri"] = "changed"  # a caller's copy: the next caller gets the file's values
    assert catalog_properties(root)["uri"] != "changed"
    conf.write_text(conf.read_text().replace(f"  {DEFAULT_CATALOG}:", "  other:"))
    with pytest.raises(CatalogError, match="defines no catalog named"):
        catalog_properties(root)
    assert catalog_properties(root, "other")["type"] == "sql"


def test_pyiceberg_reads_its_configuration_file_once_per_version(tmp_path, monkeypatch):
    """pyiceberg builds a ``Config`` per metadata read, each parsing ``.pyiceberg.yaml``
    again (``spark_jobs.warehouse._pyiceberg.cache_config_files``): parsed once per version of
    the file and per ``PYICEBERG_HOME``, and what each ``Config`` sees is the file as it is."""
    import pyiceberg.utils.config as config

    from spark_jobs.warehouse.catalog import write_config

    homes = [tmp_path / "a", tmp_path / "b"]
    for home, uri in zip(homes, ("sqlite:///one.db", "sqlite:///two.db")):
        write_config(str(home), "bench", {"type": "sql", "uri": uri})
    monkeypatch.setenv("PYICEBERG_HOME", str(homes[0]))
    catalog_properties(str(tmp_path / "wh"), "bench")  # the catalog's first load caches
    parses = []
    load = config.strictyaml.load
    monkeypatch.setattr(config.strictyaml, "load", lambda text: parses.append(1) or load(text))
    seen = [config.Config().get_catalog_config("bench")["uri"] for _ in range(3)]
    assert seen == ["sqlite:///one.db"] * 3 and not parses  # parsed by the first load
    write_config(str(homes[0]), "bench", {"type": "sql", "uri": "sqlite:///three.db"})
    assert config.Config().get_catalog_config("bench")["uri"] == "sqlite:///three.db"
    monkeypatch.setenv("PYICEBERG_HOME", str(homes[1]))
    assert config.Config().get_catalog_config("bench")["uri"] == "sqlite:///two.db"
    monkeypatch.setenv("PYICEBERG_CATALOG__BENCH__URI", "sqlite:///env.db")  # still read
    assert config.Config().get_catalog_config("bench")["uri"] == "sqlite:///env.db"
    monkeypatch.delenv("PYICEBERG_CATALOG__BENCH__URI")
    assert config.Config().get_catalog_config("bench")["uri"] == "sqlite:///two.db"
    assert len(parses) == 2  # three.db's and two.db's, once each
