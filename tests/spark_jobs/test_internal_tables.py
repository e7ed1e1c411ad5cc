"""Kafka's internal topics and the partitions' state files as tables (issue 19 parts 3-5):
the decode job's derived tables, the audit's consumer_lag and its four checks.

One snapshot written with kafkalog.writer (tests/spark_jobs/internal_snapshot.py) holds
what the real corpus lacks: two data
partitions with idempotent producers and leader epochs, their ``.snapshot``,
``leader-epoch-checkpoint`` and ``partition.metadata``, a ``__consumer_offsets`` partition
with commits that lag, run past the log end, fall before the log start, are deleted or name
a partition outside the snapshot, and a ``__transaction_state`` partition. The expected rows
are written down here from what the test wrote, not read back from the job. One job run, its
audit, then a rerun of the same run id from a manifest (the state files listed in it).
The real corpus's ``__consumer_offsets`` are checked in test_quality.test_real_corpus_passes.
"""

from __future__ import annotations

import datetime as dt
import json

import pytest

from kafkalog.writer import encode_producer_snapshot
from spark_jobs import layout, tables
from spark_jobs.warehouse import Warehouse, branch_name

from tests.runs import decode
from tests.snapshots import T0, upload
from tests.spark_jobs.internal_snapshot import COMMITS, TOPIC_ID, TRANSACTIONS, write_snapshot

pytestmark = pytest.mark.pipeline


def _ms(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc)


def expected_lag(run_id):
    """consumer_lag as the test's own data says: the newest commit per group x partition
    (none where it is a tombstone) against the logs above (orders-0: 0..4, orders-1: 10..13)."""
    logs = {("orders", 0): (0, 5), ("orders", 1): (10, 14)}
    latest = {}
    for i, (g, t, p, o) in enumerate(COMMITS):
        latest[(g, t, p)] = (o, i)
    out = []
    for (g, t, p), (o, i) in latest.items():
        if o is None:
            continue
        start, end = logs.get((t, p), (None, None))
        status = ("not_in_snapshot" if start is None else "beyond_log_end" if o > end
                  else "before_log_start" if o < start else "ok")
        out.append({"run_id": run_id, "group": g, "topic": t, "partition": p,
                    "committed_offset": o, "commit_timestamp": _ms(T0 + 1000 * (i + 1)),
                    "log_start_offset": start, "log_end_offset": end,
                    "lag": None if end is None else end - o, "status": status,
                    "source_run_id": run_id, "source_offset": i + 1})
    return sorted(out, key=lambda r: (r["group"], r["topic"], r["partition"]))


def table_rows(w, name, cols, ref=None):
    """Table ``name``'s ``cols`` as sorted tuples (None sorts by its repr)."""
    return sorted((tuple(r[c] for c in cols) for r in tables.read_arrow(w, name, ref=ref)
                   .to_pylist()), key=repr)


def test_internal_tables_lag_and_checks(spark, tmp_path, capsys):
    from spark_jobs import check_quality
    from spark_jobs.audit import registry
    from spark_jobs import decode as job

    snap = tmp_path / "snap"
    snap.mkdir()
    state = write_snapshot(snap)
    W = str(tmp_path / "w")
    run = "night-1"
    out = decode(spark, snap, W, run, "--no-publish")
    assert out["internal"] == {"consumer_offsets": 7, "group_metadata": 1, "transactions": 2,
                               "producer_state": 2, "leader_epochs": 3}
    assert check_quality.main(["--warehouse", W, "--run-id", run, "--no-docs"], spark=spark) == 0
    assert "consumer_lag" in capsys.readouterr().out

    def check_tables(ref):
        def rows(name, cols):
            return table_rows(W, name, cols, ref)

        assert rows("consumer_offsets", ("group", "topic", "partition", "committed_offset",
                                             "tombstone", "source_offset", "run_id")) == sorted(
            ((g, t, p, o, o is None, i + 1, run) for i, (g, t, p, o) in enumerate(COMMITS)),
            key=repr)
        assert rows("group_metadata", ("group", "record", "generation", "members",
                                           "source_offset")) == [("lagging", "GroupMetadata", 3, 0, 0)]
        assert rows("transactions", ("transactional_id", "state", "producer_id",
                                         "source_offset")) == sorted(
            ((tid, state, 77, i) for i, (tid, _, state) in enumerate(TRANSACTIONS)), key=repr)
        assert rows("producer_state", ("topic", "partition", "snapshot_offset", "producer_id",
                                           "producer_epoch", "last_sequence", "topic_id")) == [
            ("orders", 0, 5, 77, 2, 4, TOPIC_ID), ("orders", 1, 14, 88, 1, 3, None)]
        assert rows("leader_epochs", ("topic", "partition", "epoch", "start_offset")) == [
            ("orders", 0, 0, 0), ("orders", 0, 1, 3), ("orders", 1, 3, 10)]
        lag = sorted(tables.read_arrow(W, "consumer_lag").to_pylist(),
                     key=lambda r: (r["group"], r["topic"], r["partition"]))
        assert lag == expected_lag(run)

    check_tables(branch_name(run))  # staged: the audit read them there
    dq = {(r["check"], r["topic"], r["partition"]): r for r in tables.read_arrow(W, "dq_results")
          .to_pylist() if r["check"] in registry.INTERNAL_CHECKS}
    assert {k: (r["status"], r["observed"], r["failed"]) for k, r in dq.items()} == {
        ("committed_offset_beyond_log_end", "orders", 0): ("warn", 2, 1),
        ("committed_offset_before_log_start", "orders", 0): ("pass", 2, 0),
        ("committed_offset_beyond_log_end", "orders", 1): ("pass", 1, 0),
        ("committed_offset_before_log_start", "orders", 1): ("warn", 1, 1),
        ("producer_snapshot", "orders", 0): ("pass", 1, 0),
        ("producer_snapshot", "orders", 1): ("warn", 1, 1),
        ("leader_epoch_checkpoint", "orders", 0): ("pass", 2, 0),
        ("leader_epoch_checkpoint", "orders", 1): ("warn", 1, 1),
    }  # and none for __consumer_offsets-0 / __transaction_state-0: nothing of theirs applies
    first = lambda k: json.loads(dq[k]["details"])["items"][0]["message"]
    assert first(("committed_offset_beyond_log_end", "orders", 0)).startswith(
        "group ahead committed offset 9 of orders-0, 4 past its log end 5")
    assert "retention removed 6 offsets" in first(("committed_offset_before_log_start", "orders", 1))
    assert "producer 88 has epoch 1" in first(("producer_snapshot", "orders", 1))
    assert "says epoch 3 from offset 10" in first(("leader_epoch_checkpoint", "orders", 1))

    # the same run again, from a manifest that lists the state files: nothing twice
    manifest = tmp_path / "chunk.json"
    logs = sorted(str(p) for p in snap.rglob("*.log"))
    manifest.write_bytes(layout.manifest(logs, state_files=[str(p) for p in state]))
    again = decode(spark, manifest, W, run)
    assert again["internal"] == out["internal"] and again["published"]
    check_tables(None)  # published: main

    # maintenance covers these tables too: the rerun's replaced files are expired and
    # deleted as orphans, and every row stays
    from spark_jobs import maintenance

    done = maintenance.maintain(Warehouse(W), names=layout.INTERNAL_TABLES,
                                older_than_days=0, retain_last=1, orphan_grace_hours=0)
    # the tables this run has rows for (no __cluster_metadata, log directory files or tier here)
    assert set(done["tables"]) == {"consumer_offsets", "group_metadata", "transactions",
                                   "producer_state", "leader_epochs", "consumer_lag"}
    assert done["orphans_deleted"] > 0
    check_tables(None)


def test_state_files_that_cannot_be_read_are_findings_and_the_others_are_kept(tmp_path):
    """state_tables on the driver: a state file listed and then gone, and one that is not
    what its name says, are each a ``state_file_corrupt`` finding naming the file; every
    other file's rows are kept, in the damaged file's own folder too."""
    from spark_jobs.derive import internal

    state = write_snapshot(tmp_path)
    d0, d1 = tmp_path / "orders-0", tmp_path / "orders-1"
    gone = d1 / "00000000000000000014.snapshot"
    gone.unlink()  # listed, then removed before it was read
    later = d1 / "00000000000000000016.snapshot"  # read after it, in the same folder
    later.write_bytes(encode_producer_snapshot([{
        "producer_id": 88, "producer_epoch": 0, "last_sequence": 3, "last_offset": 13,
        "offset_delta": 3, "timestamp": T0, "coordinator_epoch": -1,
        "current_txn_first_offset": -1}]))
    state = [*state, later]
    (d0 / "leader-epoch-checkpoint").write_text("0\n2\n0 0\n")  # declares 2 entries, holds 1
    whole = internal.state_tables([str(p) for p in state], None, "r1")

    findings = {(f["partition"], f["segment"], f["kind"]): f["message"]
                for f in whole["findings"].to_pylist()}
    assert set(findings) == {(1, str(gone), "state_file_corrupt"),
                             (0, str(d0 / "leader-epoch-checkpoint"), "state_file_corrupt")}
    assert findings[(1, str(gone), "state_file_corrupt")].startswith(f"{gone}: cannot be read:")
    assert "declares 2 entries, holds 1" in \
        findings[(0, str(d0 / "leader-epoch-checkpoint"), "state_file_corrupt")]
    assert {f["run_id"] for f in whole["findings"].to_pylist()} == {"r1"}
    # what could be read is all there: the producer snapshots of orders-0 (with the topic
    # id of its partition.metadata) and orders-1's later one, orders-1's checkpoint, and of
    # the damaged checkpoint the entry it holds
    assert sorted((r["partition"], r["producer_id"], r["snapshot_offset"], r["topic_id"])
                  for r in whole["producer_state"].to_pylist()) == [(0, 77, 5, TOPIC_ID),
                                                                    (1, 88, 16, None)]
    epochs = sorted((r["partition"], r["epoch"], r["start_offset"], r["file"])
                    for r in whole["leader_epochs"].to_pylist())
    assert (1, 3, 10, str(d1 / "leader-epoch-checkpoint")) in epochs
    assert [e for e in epochs if e[0] == 0] == [(0, 0, 0, str(d0 / "leader-epoch-checkpoint"))]


def test_state_files_under_an_s3_prefix(tmp_path, s3_endpoint, s3_bucket):
    """The same state files on the local S3 server: listed beside the segments under the
    prefix, read over S3 into the rows a local folder gives; one removed after the listing
    is a finding naming its s3:// URI."""
    import boto3

    from spark_jobs import storage
    from spark_jobs.derive import internal
    from spark_jobs.decode import discover

    local = write_snapshot(tmp_path)
    client = boto3.client("s3", endpoint_url=s3_endpoint)
    upload(tmp_path, s3_bucket, "snap/b1", client)
    config = storage.S3Config.from_env(s3_endpoint)
    listed: list[str] = []
    segments, _ = discover(f"s3://{s3_bucket}/snap", config, state_files=listed)
    uri = {str(p): f"s3://{s3_bucket}/snap/b1/{p.relative_to(tmp_path)}" for p in local}
    assert sorted(listed) == sorted(uri.values())
    assert {s.topic for s in segments} == {"orders", "__consumer_offsets", "__transaction_state"}

    def rows(found, rename=lambda f: f):
        return {n: sorted((json.dumps({**r, "file": rename(r.get("file"))}, default=str)
                           for r in t.to_pylist()), key=str)
                for n, t in found.items() if n != "findings"}

    assert rows(internal.state_tables(listed, config, "r1")) == \
        rows(internal.state_tables([str(p) for p in local], None, "r1"),
             rename=lambda f: uri.get(f, f))

    gone = uri[str(tmp_path / "orders-1" / "leader-epoch-checkpoint")]
    client.delete_object(Bucket=s3_bucket, Key=gone.split("/", 3)[3])
    after = internal.state_tables(listed, config, "r1")
    assert [(f["segment"], f["kind"]) for f in after["findings"].to_pylist()] == \
        [(gone, "state_file_corrupt")]
    assert gone not in {r["file"] for r in after["leader_epochs"].to_pylist()}
    assert len(after["leader_epochs"]) == 2  # orders-0's two entries stay


def test_internal_topics_without_a_table_stay_records():
    """kafkalog decodes __remote_log_metadata, which has no table of this module (the tier's
    remote_segments is issue 34's): its records files are not the derived tables' input,
    and its rows give no derived row (before, the job's derive step raised KeyError on such
    a run). __share_group_state has its table since issue 36."""
    import pyarrow as pa

    from spark_jobs import schemas
    from spark_jobs.derive import internal

    files = [f"/w/records/data/topic={t}/dt=2026-11-20/x.parquet"
             for t in ("__remote_log_metadata", "__share_group_state", "__consumer_offsets")]
    assert internal.internal_files(files) == {"__share_group_state": files[1:2],
                                              "__consumer_offsets": files[2:]}
    row = {name: None for name in schemas.RECORDS.names}
    row.update(topic="__remote_log_metadata", partition=0, offset=0, key=None,
               value=b"\x00\x00", segment="s", segment_base_offset=0, run_id="r")
    assert internal.rows_of_file(pa.Table.from_pylist([row], schema=schemas.RECORDS)) \
        == ({}, [])
