"""Warehouse maintenance (the package spark_jobs/maintenance/) and its weekly DAG.

A local warehouse with the embedded catalog; the data files are written here with
the decode job's own writer (``parquet.write_schema`` / ``parquet_options``),
named as the job names them (``<run token>~[c<chunk>~]<attempt>~<part>.parquet``),
and committed and published through :class:`spark_jobs.warehouse.Warehouse` as the job
does. Every record column is filled (nulls, nested headers and timestamps included),
so "the same rows" means the same full content, not only the same keys.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from pathlib import Path

import pytest

# Airflow reads its configuration at import: airflow_env sets it first.
from tests.airflow_env import DAGS, parse_against_peer  # noqa: E402

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from spark_jobs import maintenance, parquet, schemas, tables  # noqa: E402
from spark_jobs.maintenance import compaction, orphans  # noqa: E402
from spark_jobs.maintenance.manifests import main_data_manifests  # noqa: E402
from spark_jobs.warehouse import (Warehouse, branch_name, is_run_file,  # noqa: E402
                                  run_files_prefix, snapshots)
from spark_jobs.warehouse.history import (ancestry, fork_point, live_files,  # noqa: E402
                                          main_history)

pytestmark = pytest.mark.pipeline

DAG_ID = "kafka_warehouse_maintenance"
DAY = "2026-11-20"
FAR = 10_000  # days / hours: "never" for the steps a test does not look at
UTC = dt.timezone.utc


# ------------------------------------------------------------------ building a warehouse
def record_rows(run_id: str, topic: str, partition: int, offsets, day: str = DAY) -> pa.Table:
    """Records rows with every column of the table filled, derived from the offset
    (and the run: a rerun's rows differ from the first run's)."""
    offsets = list(offsets)
    n = len(offsets)
    t0 = dt.datetime.fromisoformat(day).replace(tzinfo=UTC)
    cols = {
        "partition": pa.array([partition] * n, pa.int32()),
        "offset": pa.array(offsets, pa.int64()),
        "timestamp": [t0 + dt.timedelta(seconds=o) for o in offsets],
        "timestamp_type": ["CreateTime" if o % 3 else "LogAppendTime" for o in offsets],
        "key": [None if o % 5 == 0 else f"k{o}".encode() for o in offsets],
        "value": [f"{run_id}/{topic}/{partition}/{o}".encode() for o in offsets],
        "headers": [[{"key": "h", "value": bytes([o % 256])}] if o % 2 else [] for o in offsets],
        "batch_position": [o * 100 for o in offsets],
        "batch_base_offset": [o - o % 10 for o in offsets],
        "batch_last_offset": [o - o % 10 + 9 for o in offsets],
        "magic": pa.array([2] * n, pa.int8()),
        "compression": ["lz4" if o % 2 else "none" for o in offsets],
        "producer_id": [o % 4 if o % 4 else -1 for o in offsets],
        "producer_epoch": pa.array([o % 3 for o in offsets], pa.int16()),
        "sequence": pa.array([o for o in offsets], pa.int32()),
        "partition_leader_epoch": pa.array([7] * n, pa.int32()),
        "is_transactional": [o % 7 == 0 for o in offsets],
        "segment": [f"s3://b/snap/{topic}-{partition}/{0:020d}.log"] * n,
        "segment_base_offset": [0] * n,
        "run_id": [run_id] * n,
        "topic": [topic] * n,
        "dt": [day] * n,
        schemas.INGEST_DT: [day] * n,
    }
    return pa.table({f.name: pa.array(cols[f.name], f.type) if f.name in cols
                     else pa.nulls(n, f.type) for f in schemas.RECORDS}, schema=schemas.RECORDS)


def write_file(wh: Warehouse, rows: pa.Table, name: str) -> str:
    """One data file of ``records`` as the job's PartWriter writes it; returns its URI."""
    topic, day = rows.column("topic")[0].as_py(), rows.column("dt")[0].as_py()
    uri = f"{wh.data_root('records')}/{parquet.partition_path(topic, day)}/{name}"
    path = Path(uri[len("file://"):])
    path.parent.mkdir(parents=True, exist_ok=True)
    target = parquet.write_schema("records")
    with pq.ParquetWriter(str(path), target, **parquet.parquet_options(target)) as w:
        w.write_table(rows.cast(target))
    return uri


def stage(wh, run_id: str, layout: dict, *, chunk_id: str | None = None, split: int = 1,
          attempt: str = "a1", day: str = DAY) -> list[str]:
    """Write and commit run ``run_id``'s records: ``layout`` = {(topic, partition):
    offsets}, each partition's offsets in ``split`` files; returns the files."""
    prefix = run_files_prefix(run_id, chunk_id) + attempt
    files = []
    for (topic, partition), offsets in sorted(layout.items()):
        offsets = list(offsets)
        step = -(-len(offsets) // split)
        for i in range(0, len(offsets), step):
            rows = record_rows(run_id, topic, partition, offsets[i:i + step], day)
            files.append(write_file(wh, rows, f"{prefix}~{topic}-{partition}-{i}.parquet"))
    wh.commit_files("records", run_id, files, chunk_id=chunk_id)
    return files


def publish_run(wh, run_id: str, layout: dict, **kwargs) -> list[str]:
    wh.begin_run(run_id, reset=True)
    files = stage(wh, run_id, layout, **kwargs)
    wh.publish(run_id)
    return files


def rows_of(wh) -> list[dict]:
    """``main``'s records, every column, sorted by (topic, partition, offset)."""
    t = tables.read_arrow(wh, "records")
    return t.sort_by([("topic", "ascending"), ("partition", "ascending"),
                      ("offset", "ascending")]).to_pylist()


def keys_of(rows) -> list[tuple]:
    return [(r["topic"], r["partition"], r["offset"]) for r in rows]


def expected(*runs) -> list[dict]:
    """The rows of ``(run_id, layout)`` pairs, as rows_of sorts them."""
    t = pa.concat_tables([record_rows(run, topic, p, offsets)
                          for run, layout in runs for (topic, p), offsets in layout.items()])
    return t.sort_by([("topic", "ascending"), ("partition", "ascending"),
                      ("offset", "ascending")]).to_pylist()


def live_paths(wh, name: str = "records") -> list[str]:
    t = wh.table(name)
    return [f.file_path for f in live_files(t, t.current_snapshot().snapshot_id)]


def compact(wh, **kwargs):
    kwargs.setdefault("min_files", 3)
    return maintenance.compact_table(wh, "records", **kwargs)


@pytest.fixture
def wh(tmp_path):
    return Warehouse(str(tmp_path / "wh"))


NIGHT = {("orders", 0): range(0, 40), ("orders", 1): range(0, 25), ("orders", 2): range(0, 30),
         ("pay", 0): range(0, 12), ("pay", 1): range(0, 9)}


def nights(k: int) -> list[tuple[str, dict]]:
    """``k`` nights over the same partitions, each with the next offsets."""
    return [(f"scheduled__2026-11-{20 + i}T03:00:00+00:00",
             {tp: range(r.start + 100 * i, r.stop + 100 * i) for tp, r in NIGHT.items()})
            for i in range(k)]


# ------------------------------------------------------------------ compaction
def test_compaction_keeps_every_row_and_reduces_the_files(wh):
    runs = nights(3)
    for run, layout in runs:
        publish_run(wh, run, layout, split=3)
    before = rows_of(wh)
    assert before == expected(*runs)
    files_before = live_paths(wh)
    assert len(files_before) == 3 * 5 * 3

    result = compact(wh)
    after = rows_of(wh)
    assert after == before  # every column of every row, nothing lost or doubled
    assert len(keys_of(after)) == len(set(keys_of(after)))
    files_after = live_paths(wh)
    # per run, topic, day and Kafka partition: its 3 files become 1
    assert result["groups_compacted"] == 3 * 5 and result["files_compacted"] == 45
    assert result["files_before"] == 45 and result["files_after"] == len(files_after) == 15
    # a rewritten file holds one Kafka partition: its offset range stays as narrow as
    # its sources' (the dedupe and the publish check prune files by it)
    for path in files_after:
        parts = pq.read_table(path[len("file://"):], columns=["partition"]).column(0)
        assert len(set(parts.to_pylist())) == 1, path
    folders = {os.path.dirname(p) for p in files_before}
    for path in files_after:  # named by the run, beside the files it replaced
        name = os.path.basename(path)
        assert name.split("~")[1].startswith(maintenance.COMPACTED_TAG), name
        assert any(is_run_file(path, run) for run, _ in runs)
        assert os.path.dirname(path) in folders
    # one overwrite snapshot on main (the groups share it), marked as maintenance
    t = wh.table("records")
    history = main_history(t)
    assert history[-2]["run_id"] == runs[-1][0] and history[-1]["stage"] == "maintenance"
    assert history[-1]["run_id"] is None and history[-1]["rows"] == str(len(before))
    summary = t.current_snapshot().summary
    assert summary.operation.value == "overwrite"
    assert (summary["deleted-data-files"], summary["added-data-files"]) == ("45", "15")
    # written as the job writes: LZ4, no Arrow schema, statistics only where the job keeps them
    meta = pq.ParquetFile(files_after[0][len("file://"):]).metadata
    source = pq.ParquetFile(files_before[0][len("file://"):]).metadata.row_group(0)
    assert b"ARROW:schema" not in (meta.metadata or {})
    rg = meta.row_group(0)
    for i in range(rg.num_columns):
        col = rg.column(i)
        assert col.compression == source.column(i).compression
        assert col.compression.startswith("LZ4")
        top = col.path_in_schema.split(".")[0]
        assert col.is_stats_set == (top in schemas.STATISTICS), col.path_in_schema
    # the rewritten rows are in Kafka order: partition, then offset
    one = pq.read_table(files_after[0][len("file://"):])
    order = list(zip(one.column("partition").to_pylist(), one.column("offset").to_pylist()))
    assert order == sorted(order)
    # compacting again finds nothing to do
    again = compact(wh)
    assert again["groups_compacted"] == 0 and live_paths(wh) == files_after


def test_chunks_are_compacted_apart_and_small_groups_left_alone(wh):
    run = "scheduled__2026-11-21T03:00:00+00:00"
    wh.begin_run(run, reset=True)
    # the same Kafka partition in both (a rerun of chunk 0 must not take chunk 1's rows)
    chunk0 = {("orders", 0): range(0, 40)}
    chunk1 = {("orders", 0): range(40, 60)}
    stage(wh, run, chunk0, chunk_id="0", split=4)  # 4 files
    stage(wh, run, chunk1, chunk_id="1", split=2)  # 2 files: under --min-files 3
    wh.publish(run)
    before = rows_of(wh)
    result = compact(wh)
    assert result["groups_compacted"] == 1 and result["files_compacted"] == 4
    names = sorted(os.path.basename(p) for p in live_paths(wh))
    token = run_files_prefix(run)
    assert sum(n.startswith(f"{token}c0~{maintenance.COMPACTED_TAG}") for n in names) == 1
    assert sum(n.startswith(f"{token}c1~a1~") for n in names) == 2
    assert rows_of(wh) == before


def test_a_rerun_of_a_compacted_run_still_replaces_exactly_its_rows(wh):
    (r1, l1), (r2, l2), (r3, l3) = nights(3)
    for run, layout in ((r1, l1), (r2, l2), (r3, l3)):
        publish_run(wh, run, layout, split=3)
    compact(wh)
    assert not [p for p in live_paths(wh) if "~a1~" in p]  # everything was rewritten
    # run 2 again, with fewer partitions: its compacted files go, run 1's and 3's stay
    l2b = {("orders", 0): l2[("orders", 0)], ("pay", 1): l2[("pay", 1)]}
    publish_run(wh, r2, l2b, attempt="b2")
    assert rows_of(wh) == expected((r1, l1), (r2, l2b), (r3, l3))

    # a chunked run: each chunk's rewritten file is selected by that chunk's prefix
    # only (what a chunk's commit replaces), and all of them by the run's
    run = "manual__2026-11-24"
    c0 = {("orders", 5): range(0, 30), ("orders", 6): range(0, 30)}
    c1 = {("pay", 5): range(0, 30), ("pay", 6): range(0, 30)}
    wh.begin_run(run, reset=True)
    stage(wh, run, c0, chunk_id="0", split=3)
    stage(wh, run, c1, chunk_id="1", split=3)
    wh.publish(run)
    assert compact(wh)["groups_compacted"] == 4
    mine = [p for p in live_paths(wh) if is_run_file(p, run)]
    assert len(mine) == 4
    for chunk, topic in (("0", "orders"), ("1", "pay")):
        picked = [p for p in mine if is_run_file(p, run, chunk)]
        assert len(picked) == 2 and all(f"/topic={topic}/" in p for p in picked)
    # the whole run again, with one chunk: both rewritten files go
    c1b = {("pay", 5): range(0, 10)}
    wh.begin_run(run, reset=True)
    stage(wh, run, c1b, chunk_id="1", attempt="b3")
    wh.publish(run)
    assert rows_of(wh) == expected((r1, l1), (r2, l2b), (r3, l3), (run, c1b))


def test_when_main_moves_under_a_group_it_is_retried_or_skipped_never_lost(wh, monkeypatch):
    (r1, _), (r2, _), (r3, _) = nights(3)
    l1 = {("orders", 0): range(0, 40), ("pay", 0): range(0, 12)}
    l2 = {("orders", 0): range(100, 140), ("pay", 0): range(100, 112)}
    publish_run(wh, r1, l1, split=3)
    publish_run(wh, r2, l2, split=3)
    l2b = {("orders", 0): range(200, 205)}
    l3 = {("orders", 7): range(0, 20)}
    real_rewrite, real_commit = compaction.rewrite, compaction.commit_replacement
    rewrites, commits = [], []

    def racing_rewrite(group, data_root, config=None):
        rewrites.append((group.partition[1][0], group.prefix))
        if len(rewrites) == 2:  # run 2 is rerun: its files leave main under the group
            publish_run(wh, r2, l2b, attempt="b2")
        return real_rewrite(group, data_root, config)

    def racing_commit(table, old, new, summary):
        commits.append(len(new))
        if len(commits) == 1:  # another run publishes between the check and the commit
            publish_run(wh, r3, l3)
        return real_commit(table, old, new, summary)

    monkeypatch.setattr(compaction, "rewrite", racing_rewrite)
    monkeypatch.setattr(compaction, "commit_replacement", racing_commit)
    result = compact(wh, groups_per_commit=2)
    p1, p2 = run_files_prefix(r1), run_files_prefix(r2)
    assert rewrites == [("orders", p1), ("orders", p2), ("pay", p1), ("pay", p2)]
    # batch 1: run 2's group dropped (the rerun won), run 1's lost the race, then went;
    # batch 2: the same
    assert commits == [1, 1, 1]
    assert result["groups_compacted"] == 2 and result["groups_skipped"] == 2
    assert {s["why"] for s in result["skipped"]} == {"main changed under the group"}
    assert rows_of(wh) == expected((r1, l1), (r2, l2b), (r3, l3))
    names = [os.path.basename(p) for p in live_paths(wh)]
    assert sorted(n for n in names if maintenance.COMPACTED_TAG in n.split("~")[1]) \
        == sorted(n for n in names if n.startswith(p1))
    # the dropped groups' rewritten files were deleted, not left behind
    data = Path(wh.data_root("records")[len("file://"):])
    assert not [p for p in data.rglob(f"{p2}{maintenance.COMPACTED_TAG}*")]


def test_a_failed_rewrite_commits_nothing_and_leaves_no_file(wh, monkeypatch):
    for run, layout in nights(2):
        publish_run(wh, run, layout, split=3)
    before, files = rows_of(wh), live_paths(wh)
    real, calls = compaction.rewrite, []

    def failing(group, data_root, config=None):
        calls.append(group)
        if len(calls) == 3:
            raise OSError("disk full")
        return real(group, data_root, config)

    monkeypatch.setattr(compaction, "rewrite", failing)
    with pytest.raises(OSError, match="disk full"):
        compact(wh)
    assert live_paths(wh) == files and rows_of(wh) == before
    data = Path(wh.data_root("records")[len("file://"):])
    assert not list(data.rglob(f"*~{maintenance.COMPACTED_TAG}*"))


@pytest.mark.parametrize("committed", [True, False])
def test_a_commit_of_unknown_outcome_keeps_the_new_files_unless_read_back_absent(
        wh, monkeypatch, committed):
    """A commit that fails with anything but a lost compare-and-swap may have reached
    the catalog (a REST catalog's 5xx): the table is read back and the commit looked for
    by its token. Landed, its new files must stay, or main would name files that are
    gone; known not landed, they are deleted at once (nothing is left for the orphan
    sweep). Either way compaction fails loudly, saying which."""
    from pyiceberg.exceptions import CommitStateUnknownException

    from spark_jobs.warehouse import CommitFailed

    for run, layout in nights(2):
        publish_run(wh, run, layout, split=3)
    before, files = rows_of(wh), live_paths(wh)
    real = compaction.commit_replacement

    def unknown(table, old, new, summary):
        if committed:
            real(table, old, new, summary)
        raise CommitStateUnknownException("504 from the catalog")

    monkeypatch.setattr(compaction, "commit_replacement", unknown)
    with pytest.raises(CommitFailed) as failed:
        compact(wh)
    assert isinstance(failed.value.__cause__, CommitStateUnknownException)
    assert failed.value.outcome == ("committed" if committed else "not committed")
    data = Path(wh.data_root("records")[len("file://"):])
    written = sorted(data.rglob(f"*~{maintenance.COMPACTED_TAG}*"))
    # 2 runs x 5 Kafka partitions: kept where landed, deleted where known not
    assert len(written) == (10 if committed else 0)
    assert rows_of(wh) == before  # every file main names is there
    assert (live_paths(wh) == files) is not committed
    monkeypatch.setattr(compaction, "commit_replacement", real)
    for p in data.rglob("*.parquet"):
        _age(p, 5)
    gone = maintenance.remove_orphans(wh, "records", grace=dt.timedelta(hours=1))
    assert gone["orphans_deleted"] == 0
    assert rows_of(wh) == before


def test_files_a_kept_snapshot_references_are_not_orphans(wh):
    """Compaction's replaced files are still the rows of the snapshots before it
    (time travel, an open branch's fork point) until those are expired."""
    for run, layout in nights(2):
        publish_run(wh, run, layout, split=3)
    before, old_files = rows_of(wh), live_paths(wh)
    old_snapshot = wh.table("records").current_snapshot().snapshot_id
    compact(wh)
    assert not set(old_files) & set(live_paths(wh))
    for p in Path(wh.data_root("records")[len("file://"):]).rglob("*.parquet"):
        _age(p, 5)
    out = maintenance.remove_orphans(wh, "records", grace=dt.timedelta(hours=1))
    assert out["orphans_deleted"] == 0
    assert all(Path(u[len("file://"):]).exists() for u in old_files)
    old = tables.read_arrow(wh, "records", snapshot=old_snapshot)
    assert old.sort_by([("topic", "ascending"), ("partition", "ascending"),
                        ("offset", "ascending")]).to_pylist() == before
    # once that snapshot is expired, they go
    maintenance.expire_table(wh, "records", older_than=dt.datetime.now(UTC), retain_last=1)
    out = maintenance.remove_orphans(wh, "records", grace=dt.timedelta(hours=1))
    assert out["orphans_deleted"] == len(old_files)
    assert rows_of(wh) == before


def test_groups_whose_offsets_an_open_branch_staged_are_left_alone(wh):
    """A merged file spans its sources' gaps too: where it would meet offsets that an
    open run staged, that run's publish would refuse it as another run's overlapping
    output, so the group waits for the next maintenance."""
    a = "night-a"
    gappy = [*range(0, 30), *range(60, 90), *range(120, 150)]  # files 0-29, 60-89, 120-149
    publish_run(wh, a, {("orders", 0): range(0, 90), ("orders", 1): gappy,
                        ("pay", 1): gappy}, split=3)
    b = "night-b"
    wh.begin_run(b, reset=True)
    stage(wh, b, {("orders", 1): range(30, 60), ("pay", 1): range(150, 160)})
    result = compact(wh)
    # (orders, 1): 0-149 merged would meet b's 30-59, which no source file does: left;
    # (orders, 0) and (pay, 1) cannot meet what b staged: compacted
    assert result["groups_compacted"] == 2 and result["groups_skipped"] == 1
    assert "open branch run_night-b" in result["skipped"][0]["why"]
    assert result["skipped"][0]["files"] == 3
    assert wh.publish(b)["records"] == "re-applied"  # no ConflictError
    assert keys_of(rows_of(wh)) == sorted(
        [("orders", 0, o) for o in range(90)]
        + [("orders", 1, o) for o in [*range(90), *range(120, 150)]]
        + [("pay", 1, o) for o in gappy + list(range(150, 160))])
    # with the branch gone, the next maintenance compacts the rest
    assert compact(wh)["groups_compacted"] == 1


def test_dry_run_changes_nothing(wh):
    for run, layout in nights(2):
        publish_run(wh, run, layout, split=3)
    orphan = Path(wh.data_root("records")[len("file://"):]) / "topic=pay" / "crashed~x~0.parquet"
    orphan.write_bytes(b"x")
    os.utime(orphan, (time.time() - 7200, time.time() - 7200))
    t = wh.table("records")
    snaps, files = len(t.metadata.snapshots), live_paths(wh)
    out = maintenance.maintain(wh, older_than_days=0, retain_last=1, orphan_grace_hours=1,
                               min_files=3, dry_run=True)
    assert out["groups_compacted"] == 10 and out["files_after"] == 10
    assert out["expired_snapshots"] > 0 and out["orphans_deleted"] == 1
    t = wh.table("records")
    assert len(t.metadata.snapshots) == snaps and live_paths(wh) == files and orphan.exists()


# ------------------------------------------------------------------ manifests
def data_manifests(wh, name: str = "records") -> list:
    t = wh.table(name)
    return main_data_manifests(t)


def test_manifests_are_merged_without_changing_a_row_or_what_reruns_replace(wh):
    """A manifest per nightly commit: planning opens them all. Merged, main holds the
    same files, entries keep the snapshot that added them, and everything a run does
    next (a rerun, an open branch's publish, a one-partition scan) works as before."""
    from pyiceberg.expressions import EqualTo

    runs = nights(4)
    for run, layout in runs[:3]:
        publish_run(wh, run, layout)
    late, late_layout = runs[3]
    wh.begin_run(late, reset=True)  # open across the merge: publishes by re-applying
    stage(wh, late, late_layout)
    t = wh.table("records")
    t.transaction().set_properties({"commit.manifest.min-count-to-merge": "50"}) \
        .commit_transaction()
    before, files = rows_of(wh), sorted(live_paths(wh))
    added_by = {e.data_file.file_path: e.snapshot_id for m in data_manifests(wh)
                for e in m.fetch_manifest_entry(t.io)}
    assert len(data_manifests(wh)) == 3

    out = maintenance.merge_manifests(wh, "records")
    assert out == {"manifests_before": 3, "manifests_after": 1}
    t = wh.table("records")
    assert rows_of(wh) == before and sorted(live_paths(wh)) == files
    (merged,) = data_manifests(wh)
    entries = merged.fetch_manifest_entry(t.io)
    assert {e.data_file.file_path: e.snapshot_id for e in entries} == added_by
    assert {e.status.name for e in entries} == {"EXISTING"}
    assert main_history(t)[-1]["stage"] == "maintenance"
    assert t.current_snapshot().summary["total-data-files"] == str(len(files))
    # the table's own settings are as they were, and none of the merge's are left
    assert t.properties["commit.manifest.min-count-to-merge"] == "50"
    assert "commit.manifest-merge.enabled" not in t.properties
    # one-partition scans still find their files
    pay = [f.file.file_path for f in t.scan(row_filter=EqualTo("topic", "pay")).plan_files()]
    assert sorted(pay) == sorted(p for p in files if "/topic=pay/" in p)
    # nothing to merge: no new snapshot
    snapshot = t.current_snapshot().snapshot_id
    assert maintenance.merge_manifests(wh, "records")["manifests_after"] == 1
    assert wh.table("records").current_snapshot().snapshot_id == snapshot
    # the open run publishes; a rerun of run 2 replaces exactly its rows
    assert wh.publish(late)["records"] == "re-applied"
    r2, l2 = runs[1]
    l2b = {("pay", 0): l2[("pay", 0)]}
    publish_run(wh, r2, l2b, attempt="b2")
    assert rows_of(wh) == expected(runs[0], (r2, l2b), runs[2], runs[3])


def pyiceberg_overwrite(table, ref, *, add, remove, summary):
    """What :func:`snapshots.commit_snapshot` does, through pyiceberg's own ``Transaction``
    (the job's path until 2026-11): the reference its snapshots are held to."""
    head = table.refs()[ref].snapshot_id if ref in table.refs() else None
    gone = [f for f in live_files(table, head) if remove(f.file_path)]
    if not gone and not add:
        return head
    with table.transaction() as tx:
        with tx.update_snapshot(snapshot_properties=summary, branch=ref).overwrite() as ow:
            for f in gone:
                ow.delete_data_file(f)
            for f in add:
                ow.append_data_file(f)
    return table.refs()[ref].snapshot_id


def test_commits_make_the_snapshots_pyiceberg_would(tmp_path, monkeypatch):
    """The job's commits write their manifests themselves (snapshots.commit_snapshot). The
    same nights, a rerun (which drops the run's files, then adds its new ones) and a
    chunk replaced, done once so and once through pyiceberg's own overwrite, give the
    same rows, the same files with the same entries (status and sequence numbers), and
    the same summary totals at every snapshot of main; appends are ``append``, commits
    that drop files ``overwrite``. A commit the catalog refuses leaves no file."""
    from pyiceberg.manifest import ManifestEntryStatus

    from spark_jobs.warehouse import CommitRefused

    def build(wh):
        (r1, l1), (r2, l2) = nights(2)
        publish_run(wh, r1, l1, split=2)
        publish_run(wh, r2, l2, chunk_id="0")
        wh.begin_run(r1, reset=True)  # a rerun of night 1: drops its files, adds new ones
        stage(wh, r1, {("pay", 0): l1[("pay", 0)]}, attempt="b1")
        stage(wh, r1, {("pay", 1): l1[("pay", 1)]}, attempt="c1")  # replaces b1's
        wh.publish(r1)
        return wh

    ours = build(Warehouse(str(tmp_path / "ours")))
    with monkeypatch.context() as m:
        m.setattr(snapshots, "commit_snapshot", pyiceberg_overwrite)
        theirs = build(Warehouse(str(tmp_path / "theirs")))
    assert rows_of(ours) == rows_of(theirs)

    def relative(wh, path):
        return path[len(wh.data_root("records")):]

    def described(wh):
        t = wh.table("records")
        history = []
        for sid in reversed(ancestry(t, t.current_snapshot().snapshot_id)):
            snap = t.metadata.snapshot_by_id(sid)
            totals = {k: v for k, v in snap.summary.additional_properties.items()
                      if not k.startswith(("kafkalog.", "airflow."))}
            entries = sorted((relative(wh, e.data_file.file_path), e.status.name,
                              e.sequence_number, e.file_sequence_number)
                             for m in snap.manifests(t.io)
                             for e in m.fetch_manifest_entry(t.io, discard_deleted=False)
                             if e.snapshot_id == sid or e.status != ManifestEntryStatus.DELETED)
            history.append((snap.sequence_number, totals, entries, snap.summary.operation.value))
        return history

    mine, reference = described(ours), described(theirs)
    assert [h[:3] for h in mine] == [h[:3] for h in reference]
    assert len(mine) >= 6
    for (_, totals, _, operation), (_, _, _, theirs_op) in zip(mine, reference):
        dropped = int(totals.get("deleted-data-files", 0))
        assert operation == ("overwrite" if dropped else "append"), (totals, theirs_op)
    assert {h[3] for h in mine} == {"append", "overwrite"}

    # refused: the branch moved since the table was loaded. Nothing new is left behind
    from pyiceberg.io.pyarrow import parquet_file_to_data_file

    run = "scheduled__2026-11-22T03:00:00+00:00"
    ours.begin_run(run, reset=True)
    stale = ours.table("records")
    stage(ours, run, {("pay", 0): range(500, 510)})  # moves the branch
    uri = write_file(ours, record_rows(run, "pay", 1, range(500, 510)),
                     f"{run_files_prefix(run)}b1~pay-1-0.parquet")
    added = [parquet_file_to_data_file(stale.io, stale.metadata, uri)]
    metadata = Path(stale.location()[len("file://"):]) / "metadata"
    before = sorted(metadata.iterdir())
    with pytest.raises(CommitRefused):
        snapshots.commit_snapshot(stale, branch_name(run), add=added,
                                remove=lambda p: False, summary={})
    assert sorted(metadata.iterdir()) == before


# ------------------------------------------------------------------ orphan files
def _age(path: Path, hours: float) -> None:
    when = time.time() - hours * 3600
    os.utime(path, (when, when))


def test_orphans_older_than_the_grace_go_younger_and_referenced_files_stay(wh):
    (r1, l1), (r2, l2) = nights(2)
    published = publish_run(wh, r1, l1)
    wh.begin_run(r2, reset=True)
    staged = stage(wh, r2, l2)  # committed to the open branch only
    data = Path(wh.data_root("records")[len("file://"):])
    old_orphan = data / "topic=orders" / f"dt={DAY}" / "crashed-run~a~0.parquet"
    young_orphan = data / "topic=orders" / f"dt={DAY}" / "running-run~a~0.parquet"
    tmp_left = data / "topic=pay" / f"dt={DAY}" / "x~a~1.parquet.tmp"
    for p in (old_orphan, young_orphan, tmp_left):
        p.write_bytes(b"not committed")
    for p in [old_orphan, tmp_left] + [Path(u[len("file://"):]) for u in published + staged]:
        _age(p, 5)
    scratch = Path(wh.root) / "_scratch"
    old_scratch = scratch / "crashed-run" / "a1b2" / "records" / "topic=t" / "f.parquet"
    young_scratch = scratch / "running-run" / "c3d4" / "records" / "f.parquet"
    for p in (old_scratch, young_scratch):
        p.parent.mkdir(parents=True)
        p.write_bytes(b"scratch")
    _age(old_scratch, 5)

    result = maintenance.remove_orphans(wh, "records", grace=dt.timedelta(hours=2))
    assert result["orphans_deleted"] == 2 and result["orphans_too_young"] == 1
    assert not old_orphan.exists() and not tmp_left.exists() and young_orphan.exists()
    for uri in published + staged:  # referenced by main or by the open branch
        assert Path(uri[len("file://"):]).exists(), uri
    scratched = maintenance.clean_scratch(wh, grace=dt.timedelta(hours=2))
    assert scratched["scratch_folders_deleted"] == 1 and scratched["scratch_folders_kept"] == 1
    assert not (scratch / "crashed-run").exists() and young_scratch.exists()
    # the open run still publishes, and main reads whole
    wh.publish(r2)
    assert rows_of(wh) == expected((r1, l1), (r2, l2))


def test_files_only_expired_snapshots_held_become_orphans(wh):
    (r1, l1), (r2, l2) = nights(2)
    first = publish_run(wh, r1, l1)
    publish_run(wh, r1, l2, attempt="b")  # a rerun replaces run 1's files
    publish_run(wh, r2, l1)  # (another run, so that main has a few snapshots)
    for uri in live_paths(wh) + first:
        _age(Path(uri[len("file://"):]), 5)
    out = maintenance.maintain(wh, names=["records"], older_than_days=0, retain_last=1,
                               orphan_grace_hours=1, min_files=FAR)
    assert out["expired_snapshots"] >= 3 and out["orphans_deleted"] == len(first)
    assert not any(Path(u[len("file://"):]).exists() for u in first)
    assert all(Path(u[len("file://"):]).exists() for u in live_paths(wh))
    assert rows_of(wh) == expected((r1, l2), (r2, l1))


def test_paths_that_do_not_match_refuse_to_delete(wh, monkeypatch):
    publish_run(wh, "r", {("orders", 0): range(10)})
    data = Path(wh.data_root("records")[len("file://"):])
    for p in data.rglob("*.parquet"):
        _age(p, 5)
    real = orphans.referenced_files

    def misspelled(table):  # e.g. a catalog that writes another spelling of the root
        files, meta = real(table)
        return {p.replace("/data/", "/data//x/") for p in files}, meta

    monkeypatch.setattr(orphans, "referenced_files", misspelled)
    with pytest.raises(maintenance.MaintenanceError, match="no file is deleted"):
        maintenance.remove_orphans(wh, "records", grace=dt.timedelta(hours=1))
    assert list(data.rglob("*.parquet"))


# ------------------------------------------------------------------ snapshot expiry
def test_expiry_keeps_the_last_n_and_what_an_open_branch_needs(wh):
    runs = nights(6)
    for run, layout in runs[:2]:
        publish_run(wh, run, layout)
    late, late_layout = "late-run", {("orders", 9): range(0, 50)}
    fork = wh.begin_run(late, reset=True)["records"]
    stage(wh, late, late_layout)
    for run, layout in runs[2:]:
        publish_run(wh, run, layout)
    t = wh.table("records")
    main_line = ancestry(t, t.current_snapshot().snapshot_id)
    assert fork in main_line and main_line.index(fork) == 4  # 4 runs published since
    branch = t.refs()[branch_name(late)].snapshot_id

    # pyiceberg's own rule would drop the fork point (only ref heads are protected)
    keep = maintenance.protected_snapshots(t, retain_last=2)
    assert set(main_line[:5]) <= keep and branch in keep
    assert not set(main_line[5:]) & keep
    result = maintenance.expire_table(wh, "records", older_than=dt.datetime.now(UTC),
                                      retain_last=2)
    assert result["expired_snapshots"] == len(main_line) - 5
    t = wh.table("records")
    assert ancestry(t, t.current_snapshot().snapshot_id) == main_line[:5]
    assert fork_point(t, branch_name(late)) == fork
    # the open run publishes (its fork point is an ancestor of main: re-applied)
    assert wh.publish(late)["records"] == "re-applied"
    assert rows_of(wh) == expected(*runs, (late, late_layout))

    # with no branch open, only the last N stay (and nothing newer than the cutoff goes)
    maintenance.expire_table(wh, "records", older_than=dt.datetime.now(UTC), retain_last=2)
    t = wh.table("records")
    assert len(ancestry(t, t.current_snapshot().snapshot_id)) == 2
    assert len(t.metadata.snapshots) == 2
    assert maintenance.expire_table(wh, "records", older_than=dt.datetime.now(UTC) -
                                    dt.timedelta(days=1), retain_last=1)["expired_snapshots"] == 0
    assert rows_of(wh) == expected(*runs, (late, late_layout))
    # and the next run still begins, stages and publishes
    publish_run(wh, "after", {("pay", 9): range(0, 5)})
    assert len(rows_of(wh)) == len(expected(*runs, (late, late_layout))) + 5


# ------------------------------------------------------------------ CLI
def test_cli_prints_a_json_summary(wh, capsys):
    for run, layout in nights(2):
        publish_run(wh, run, layout, split=3)
    before = rows_of(wh)
    out = maintenance.main(["--warehouse", wh.root, "--older-than-days", "0", "--retain-last", "3",
                            "--orphan-grace-hours", "0", "--min-files", "3"])
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed == out
    assert out["groups_compacted"] == 10 and out["files_before"] == 30 and out["files_after"] == 10
    assert out["expired_snapshots"] > 0
    # compaction's two: its new files, and the entries of those it deleted
    assert out["tables"]["records"]["manifests_before"] == 2
    assert out["tables"]["records"]["manifests_after"] == len(data_manifests(wh)) == 1
    assert set(out["tables"]) == set(schemas.NAMES) - {"dq_results"}  # none is created
    assert rows_of(wh) == before
    with pytest.raises(SystemExit):
        maintenance.main(["--warehouse", wh.root, "--retain-last", "0"])


def test_typed_tables_are_maintained_and_named_by_table(wh, capsys):
    # a typed per-topic table (issue 20) is one of "every table", and --table takes its name
    name = "values__shop_dot_orders"
    cols = pa.schema([("kafka_offset", pa.int64()), ("id", pa.string())])
    wh.typed_table(name, cols).append(pa.table({"kafka_offset": [1, 2], "id": ["a", "b"]},
                                               schema=cols))
    assert maintenance.existing_tables(wh) == [name]  # the fixed tables were never made
    out = maintenance.main(["--warehouse", wh.root, "--table", name, "--dry-run"])
    assert set(out["tables"]) == {name}
    with pytest.raises(SystemExit):
        maintenance.main(["--warehouse", wh.root, "--table", "values_nope"])
    assert "no table 'values_nope'" in capsys.readouterr().err


# ------------------------------------------------------------------ the weekly DAG
def test_dag_file_imports_without_errors_quickly_and_lightly():
    result = parse_against_peer(DAGS / "kafka_warehouse_maintenance.py")
    assert result["errors"] == {}
    assert result["dags"] == [DAG_ID]
    assert result["seconds"] <= 2 * result["peer_seconds"], result  # see test_dags' own
    heavy = set(result["packages"]) & {"pyspark", "great_expectations", "boto3", "moto",
                                       "pyiceberg", "pyarrow"}
    assert not heavy, "the DAG file must stay wiring only"


@pytest.fixture(scope="module")
def bag():
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {}
    return bag


@pytest.fixture(scope="module")
def dag(bag):
    return bag.dags[DAG_ID]


def test_dag_policy_and_wiring(dag, bag):
    nightly = bag.dags["kafka_segments_nightly"]
    assert "kafkalog" in dag.tags and len(dag.tags) >= 2
    assert dag.max_active_runs == 1 and dag.catchup is False
    assert dag.timetable.expression == "0 5 * * 0"  # weekly, after the nightly run
    for task in dag.tasks:
        assert task.owner == nightly.default_args["owner"], task.task_id
        assert task.retries >= 1, task.task_id
        assert task.retry_exponential_backoff, task.task_id
        assert task.execution_timeout is not None, task.task_id
    assert dag.get_task("tables").retries >= 2
    up = {t.task_id: t.upstream_task_ids for t in dag.tasks}
    assert up["compact"] == {"tables"}
    assert up["expire_snapshots"] == {"tables", "compact"}
    assert up["remove_orphans"] == {"tables", "expire_snapshots"}
    assert up["clean_scratch"] == {"remove_orphans"}
    assert up["report"] == {"compact", "expire_snapshots", "remove_orphans", "clean_scratch"}
    for mapped in ("compact", "expire_snapshots", "remove_orphans"):
        assert set(dag.get_task(mapped).op_kwargs_expand_input.value) == {"table"}
    assert set(dag.params.keys()) == set(__import__(
        "kafkalog_pipeline.maintenance", fromlist=["DEFAULTS"]).DEFAULTS)


def test_maintenance_waits_while_a_nightly_run_holds_the_warehouse(monkeypatch):
    from airflow.sdk.exceptions import AirflowRescheduleException

    from kafkalog_pipeline import maintenance as pipeline

    states = {"planned": {"plan": "success", "publish": None},
              "done": {"plan": "success", "publish": "success"}}

    class TI:
        def __init__(self, run_state):
            self.run_state = run_state

        def get_task_states(self, dag_id, task_ids):
            assert (dag_id, task_ids) == ("kafka_segments_nightly", ["plan", "publish"])
            return states

        def get_dagrun_state(self, dag_id, run_id):
            assert (dag_id, run_id) == ("kafka_segments_nightly", "planned")
            return self.run_state

    pipeline.wait_for_nightly({"ti": None})
    pipeline.wait_for_nightly({"ti": TI("failed")})
    monkeypatch.setenv("KAFKALOG_WAIT_SECONDS", "7")
    with pytest.raises(AirflowRescheduleException):
        pipeline.wait_for_nightly({"ti": TI("running")})
    with pytest.raises(Exception, match="out of range"):
        pipeline.options({"retain_last": 0})


@pytest.fixture(scope="module")
def airflow_db():
    from airflow.configuration import conf
    from airflow.utils import db

    conf.set("core", "dags_folder", str(DAGS))
    db.resetdb()
    yield


def test_dag_test_runs_maintenance_end_to_end(dag, airflow_db, tmp_path, monkeypatch):
    wh = Warehouse(str(tmp_path / "wh"))
    for run, layout in nights(2):
        publish_run(wh, run, layout, split=3)
    before = rows_of(wh)
    monkeypatch.setenv("KAFKALOG_WAREHOUSE", wh.root)
    dr = dag.test(run_conf={"older_than_days": 0, "retain_last": 2, "orphan_grace_hours": 0,
                            "min_files": 3})
    states = {ti.task_id + (f"[{ti.map_index}]" if ti.map_index >= 0 else ""): str(ti.state)
              for ti in dr.get_task_instances()}
    assert str(dr.state).endswith("success"), states
    assert sum(k.startswith("compact[") for k in states) == 5  # the tables the run made
    assert rows_of(wh) == before
    assert len(live_paths(wh)) == 10 and len(data_manifests(wh)) == 1
    t = wh.table("records")
    assert len(ancestry(t, t.current_snapshot().snapshot_id)) == 2
    # clean_metadata (on by default): what the 2 snapshots left do not name is gone
    _, meta = maintenance.referenced_files(t)
    listed = {maintenance.normalize(str(p)) for p in Path(t.location()[len("file://"):], "metadata")
              .iterdir()}
    assert listed == meta


def test_data_files_are_pyiceberg_s_and_every_schema_is_checked(tmp_path):
    """snapshots.data_files (the commits' DataFiles, the schema check made once per distinct
    file schema) gives each file exactly what pyiceberg's parquet_file_to_data_file
    gives; a file whose schema the table cannot take is refused as pyiceberg refuses
    it, wherever it comes in the list."""
    from pyiceberg.io.pyarrow import parquet_file_to_data_file

    wh = Warehouse(str(tmp_path / "w"))
    for run_id, layout in nights(2):
        publish_run(wh, run_id, layout, split=2)

    def described(f):
        return (f.file_path, f.file_size_in_bytes, f.record_count, tuple(f.partition),
                f.column_sizes, f.value_counts, f.null_value_counts, f.nan_value_counts,
                f.lower_bounds, f.upper_bounds, f.split_offsets, f.content,
                f.file_format, f.sort_order_id)

    table = wh.table("records")  # the table publish_run writes
    good = sorted(f.file_path for f in live_files(table, table.current_snapshot().snapshot_id))
    assert len(good) >= 4 and len({tuple(f.partition) for f in snapshots.data_files(table, good)}) >= 2
    assert [described(f) for f in snapshots.data_files(table, good)] == \
        [described(parquet_file_to_data_file(table.io, table.metadata, p)) for p in good]

    bad = str(tmp_path / "bad.parquet")
    pq.write_table(pq.read_table(good[0]).set_column(
        pq.read_schema(good[0]).get_field_index("offset"), "offset",
        pa.array(["x"] * pq.read_metadata(good[0]).num_rows)), bad)
    with pytest.raises(ValueError) as theirs:
        parquet_file_to_data_file(table.io, table.metadata, bad)
    for order in ([bad, *good], [*good, bad]):
        with pytest.raises(ValueError) as ours:
            snapshots.data_files(table, order)
        assert str(ours.value) == str(theirs.value)
