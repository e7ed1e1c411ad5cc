"""Reads are pinned to the object the listing saw: a segment or index file cut short,
rewritten or replaced between listing and reading is a ``fetch_error`` finding and a
``failed`` ledger row, never ``decoded`` with what happened to come back; the next
night reads it again. Counted against the snapshot's truth (lost and duplicated
(topic, partition, offset) keys), on the local S3 server and on local files."""

from __future__ import annotations

import os

import boto3
import pytest

from spark_jobs.decode import job
from spark_jobs import storage, tables

from tests.runs import decode
from tests.snapshots import numbered, upload
from tests.spark_jobs.faults import lost_and_duplicated, published, truth

pytestmark = pytest.mark.pipeline


# ------------------------------------------------------------ the storage layer
def test_s3_read_pinned_refuses_a_replaced_or_short_object(s3_bucket, s3_endpoint):
    s3 = boto3.client("s3", endpoint_url=s3_endpoint)
    s3.put_object(Bucket=s3_bucket, Key="a/b.log", Body=b"x" * 100)
    store = storage.open_store(f"s3://{s3_bucket}/a")
    pin = storage.Pin.of(store.stat("b.log"))
    assert store.read_pinned("b.log", pin, 10, 20) == b"x" * 10
    assert store.read_pinned("b.log", pin) == b"x" * 100
    s3.put_object(Bucket=s3_bucket, Key="a/b.log", Body=b"x" * 40)  # cut short: a new ETag
    with pytest.raises(storage.ChangedObject, match="replaced"):
        store.read_pinned("b.log", pin, 10, 20)
    # without an ETag, the total size in the response still gives it away
    with pytest.raises(storage.ChangedObject, match="40 bytes, 100 when listed"):
        store.read_pinned("b.log", pin._replace(etag=None), 0, 20)
    with pytest.raises(storage.ChangedObject):
        store.read_pinned("b.log", pin._replace(etag=None), 50, 60)
    assert isinstance(storage.ChangedObject("x"), storage.StorageError)


def test_local_read_pinned_checks_size_and_mtime(tmp_path):
    f = tmp_path / "00000000000000000000.log"
    f.write_bytes(b"y" * 64)
    store = storage.LocalStore(str(tmp_path))
    pin = storage.Pin.of(store.stat(f.name))
    assert store.read_pinned(f.name, pin, 0, 8) == b"y" * 8
    os.utime(f, ns=(f.stat().st_atime_ns, f.stat().st_mtime_ns + 5_000_000_000))
    with pytest.raises(storage.ChangedObject, match="modified"):
        store.read_pinned(f.name, pin, 0, 8)
    f.write_bytes(b"y" * 10)
    with pytest.raises(storage.ChangedObject, match="10 bytes, 64 when listed"):
        store.verify(f.name, pin)
    # a pin without an mtime (a manifest that gives only the size) checks the size
    assert store.read_pinned(f.name, storage.Pin(10), 2, 4) == b"yy"


def _after_listing(monkeypatch, action):
    """Run ``action()`` once, right after the job listed its input."""
    real = job.discover

    def discover(*args, **kwargs):
        found = real(*args, **kwargs)
        action()
        return found
    monkeypatch.setattr(job, "discover", discover)
    return lambda: monkeypatch.setattr(job, "discover", real)


def _ledger(wh) -> list[dict]:
    return tables.read_arrow(str(wh), "ledger").to_pylist()


def _findings(wh, kind: str) -> list[dict]:
    return [f for f in tables.read_arrow(str(wh), "findings").to_pylist() if f["kind"] == kind]


def test_an_s3_object_cut_short_after_listing_fails_and_the_next_night_takes_it(
        spark, tmp_path, s3_bucket, s3_endpoint, monkeypatch):
    src = numbered(tmp_path / "snap", partitions=(0, 1), batches=4)
    want = truth(src)
    s3 = boto3.client("s3", endpoint_url=s3_endpoint)
    objects = {key: f.read_bytes() for key, f in upload(src, s3_bucket, "night-1", s3).items()}
    victim = "night-1/orders-1/00000000000000000000.log"
    restore = _after_listing(monkeypatch, lambda: s3.put_object(
        Bucket=s3_bucket, Key=victim, Body=objects[victim][:len(objects[victim]) // 3]))
    wh = tmp_path / "wh"
    decode(spark, f"s3://{s3_bucket}/night-1", wh, "night-1")
    restore()
    rows = {(r["topic"], r["partition"]): r for r in _ledger(wh)}
    assert rows[("orders", 1)]["action"] == "failed"
    assert rows[("orders", 0)]["action"] == "decoded"
    [finding] = _findings(wh, "fetch_error")
    assert finding["partition"] == 1 and victim in finding["message"]
    lost, dup = lost_and_duplicated(want, published(wh))
    assert (lost, dup) == (20, 0)  # partition 1 is missing, not half-present

    s3.put_object(Bucket=s3_bucket, Key=victim, Body=objects[victim])  # restored
    decode(spark, f"s3://{s3_bucket}/night-1", wh, "night-2")
    assert lost_and_duplicated(want, published(wh)) == (0, 0)
    night2 = {(r["topic"], r["partition"]): r["action"] for r in _ledger(wh)
              if r["run_id"] == "night-2"}
    assert night2 == {("orders", 0): "unchanged", ("orders", 1): "decoded"}


def test_a_local_segment_rewritten_after_listing_fails_and_the_next_night_takes_it(
        spark, tmp_path, monkeypatch):
    src = numbered(tmp_path / "snap", partitions=(0, 1), batches=4)
    want = truth(src)
    victim = src / "orders-0" / "00000000000000000000.log"
    whole = victim.read_bytes()
    # the same size, other bytes (a broker's cleaner rewrote it in place): only the mtime
    # tells (a file cut short is refused by the decoder's own range check as well)
    half = len(whole) // 2
    restore = _after_listing(monkeypatch, lambda: victim.write_bytes(
        whole[:half] + bytes(len(whole) - half)))
    wh = tmp_path / "wh"
    decode(spark, src, wh, "night-1")
    restore()
    actions = {r["partition"]: r["action"] for r in _ledger(wh)}
    assert actions == {0: "failed", 1: "decoded"}
    assert [f["partition"] for f in _findings(wh, "fetch_error")] == [0]
    assert lost_and_duplicated(want, published(wh)) == (20, 0)
    victim.write_bytes(whole)
    decode(spark, src, wh, "night-2")
    assert lost_and_duplicated(want, published(wh)) == (0, 0)


def test_an_index_file_changed_after_listing_fails_the_task(spark, tmp_path, monkeypatch):
    src = numbered(tmp_path / "snap", partitions=(0,), batches=4)
    want = truth(src)
    index = src / "orders-0" / "00000000000000000000.index"
    assert index.exists()
    whole = index.read_bytes()
    restore = _after_listing(monkeypatch, lambda: index.write_bytes(whole + whole[-8:]))
    wh = tmp_path / "wh"
    decode(spark, src, wh, "night-1")
    restore()
    assert [r["action"] for r in _ledger(wh)] == ["failed"]
    [finding] = _findings(wh, "fetch_error")
    assert "00000000000000000000.index" in finding["message"]
    index.write_bytes(whole)
    decode(spark, src, wh, "night-2")
    assert lost_and_duplicated(want, published(wh)) == (0, 0)


def test_the_planner_reads_an_index_against_its_listing(tmp_path):
    """The plan splits big segments at the ``.index``'s batch positions: an index
    changed since it was listed is not trusted (the segment is one task), the
    listed one is."""
    from spark_jobs.decode import planning

    src = numbered(tmp_path / "snap", partitions=(0,), batches=200)  # past the index interval
    index = src / "orders-0" / "00000000000000000000.index"
    store = storage.LocalStore(str(index.parent))
    pin = storage.Pin.of(store.stat(index.name))
    listed = planning.read_index_positions([str(index)], None, pins={str(index): pin})
    assert listed[str(index)] and listed == planning.read_index_positions([str(index)], None)
    index.write_bytes(index.read_bytes() + index.read_bytes()[-8:])
    assert planning.read_index_positions([str(index)], None, pins={str(index): pin}) == {
        str(index): []}
    assert planning.read_index_positions([str(index)], None)[str(index)]  # unpinned: read


def test_a_packed_spark_task_reads_its_next_tasks_ahead_once_each(
        tmp_path, s3_bucket, s3_endpoint, monkeypatch):
    """executor.run_group (one Spark task's group of small tasks): the next tasks'
    segments and index files are read on threads while a task decodes, each object
    once, with the pin checks of a read in the task itself. The rows and files are
    those of the tasks run one by one, and an object replaced after the listing still
    fails its own task only."""
    import threading
    from dataclasses import replace

    import pyarrow.parquet as pq

    from spark_jobs.decode import discover, executor, plan, writing

    src = numbered(tmp_path / "snap", partitions=range(8), batches=4)
    s3 = boto3.client("s3", endpoint_url=s3_endpoint)
    objects = {key: f.read_bytes() for key, f in upload(src, s3_bucket, "n1", s3).items()}
    cfg = storage.S3Config.from_env(s3_endpoint)
    segments, _ = discover(f"s3://{s3_bucket}/n1", cfg)
    tasks = plan(segments, {}, {}, {}, 1 << 20)
    assert len(tasks) == 8 and all(executor._ReadAhead.eligible(t) for t in tasks)
    assert all(t.segment.index_uri and t.segment.timeindex_uri for t in tasks)

    reads, real = [], storage.S3Store.read_pinned

    def read_pinned(self, key, pin, start=0, end=None):
        reads.append((key, start, end, threading.current_thread() is threading.main_thread()))
        return real(self, key, pin, start, end)
    monkeypatch.setattr(storage.S3Store, "read_pinned", read_pinned)

    def context(name):
        out = tmp_path / name
        return writing.Context(run_id="r1", prefix="r1~x", s3=cfg,
                               roots={n: str(out / n) for n in writing.schemas.DECODE_TABLES},
                               scratch={n: str(out / "scratch" / n)
                                        for n in writing.schemas.DECODE_TABLES},
                               ingested_at="2026-11-26T00:00:00+00:00")

    def records(name):
        return sorted(tuple(r[c] for c in ("partition", "offset", "value"))
                      for f in (tmp_path / name / "records").rglob("*.parquet")
                      for r in pq.read_table(f).to_pylist())

    def summary(rows):
        keep = ("segment", "action", "records", "batches", "findings", "first_offset",
                "last_offset", "end_position")
        return sorted(tuple(r.ledger[k] for k in keep) for r in rows)

    one_by_one = [executor.run_task(t, context("alone")) for t in tasks]
    alone_reads, reads[:] = list(reads), []
    grouped = list(executor.run_group(tasks, context("group")))
    assert summary(grouped) == summary(one_by_one)
    assert {r.ledger["action"] for r in grouped} == {"decoded"}
    assert records("group") == records("alone") and len(records("group")) == 8 * 20
    # each object (segment, .index, .timeindex) read once, the reads the tasks make alone,
    # and every one on the read-ahead's threads
    assert sorted(k[:3] for k in reads) == sorted(k[:3] for k in alone_reads)
    assert len(set(k[:3] for k in reads)) == len(reads) == 8 * 3
    assert all(on_main for *_, on_main in alone_reads)
    assert not any(on_main for *_, on_main in reads)
    reads[:] = []  # --read-ahead 0: each task reads its own objects when it runs
    off = list(executor.run_group(tasks, replace(context("off"), read_ahead=0)))
    assert summary(off) == summary(one_by_one) and records("off") == records("alone")
    assert reads == alone_reads

    # the last task's segment cut short after the listing: that task fails, the others not
    victim = tasks[-1].segment.uri.split("/", 3)[3]
    s3.put_object(Bucket=s3_bucket, Key=victim, Body=objects[victim][:len(objects[victim]) // 3])
    rows = {r.ledger["segment"]: r.ledger for r in executor.run_group(tasks, context("changed"))}
    assert (rows[tasks[-1].segment.uri]["action"], rows[tasks[-1].segment.uri]["findings"]) == ("failed", 1)
    assert {rows[t.segment.uri]["action"] for t in tasks[:-1]} == {"decoded"}
    [finding] = [r for f in (tmp_path / "changed" / "findings").rglob("*.parquet")
                 for r in pq.read_table(f).to_pylist()]
    assert finding["kind"] == "fetch_error" and "no longer the listed object" in finding["message"]
