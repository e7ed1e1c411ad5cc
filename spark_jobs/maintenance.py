"""Warehouse maintenance: compact small files and manifests, expire old snapshots, delete
orphan files.

    python -m spark_jobs.maintenance --warehouse W [--catalog NAME] [--namespace NS]
        [--older-than-days 7] [--retain-last 10] [--orphan-grace-hours 72]
        [--min-files 4] [--target-file-mb 128] [--groups-per-commit 100]
        [--min-manifests 2] [--table NAME ...] [--clean-metadata] [--dry-run]

Four steps per table, in this order (each one's output is what the next one frees):

1. **Compaction.** ``main``'s files are grouped by table partition value and by
   *submission*: the file-name prefix a rerun removes (``<run token>~``, or
   ``<run token>~c<chunk>~`` for a chunk of a DAG run, see
   :func:`submission_prefix`); in the tables whose files the dedupe and the publish
   check find by offset (records, batches, markers), also by Kafka partition (the
   file's ``partition`` range): a file merging several Kafka partitions would span
   all their offsets, and every later night's dedupe of any of them would read it
   (pruning is per column: partition 0-3 and offsets 10-4,000,000 meets partition 0
   at offset 3,000,000), so the dedupe would read all of history again.
   A group with at least ``--min-files`` small files is
   rewritten with pyarrow into one file (several where they exceed
   ``--target-file-mb``) named with the same prefix, with the decode job's own writer
   options, and the replacement is committed to ``main`` in one overwrite snapshot
   (summary ``kafkalog.stage=maintenance``) that deletes the group's files and adds
   the new one; up to ``--groups-per-commit`` groups share a snapshot (each group is
   all or nothing), so a year of nightly runs does not become a thousand snapshots.
   Because the new file keeps the prefix, a rerun of the run (or of the chunk) still
   removes exactly the rows it wrote. The commit is a compare-and-swap on ``main``:
   where ``main`` moved meanwhile, a group is committed again only if every one of
   its files is still live, else it is skipped and its new file deleted; rows are
   never lost nor doubled. A commit that fails in any other way (its outcome unknown)
   leaves the new files in place: orphan removal takes them if they are unreferenced.
   A group whose offsets could meet what an open run branch staged is left alone:
   that run's publish would take the rewritten file for another run's output over
   the same offsets (:func:`spark_jobs.warehouse.history.check_overlap`).
2. **Manifests.** Every nightly commit adds a manifest to ``main``, and planning a
   scan opens every manifest it cannot prune by its partition summary. Where ``main``
   has at least ``--min-manifests`` data manifests, they are clustered by the day their
   runs ingested (the ``ingest_dt`` partition of records, batches and markers): one
   manifest per day of the newest week, per ISO week of the five before, per month
   back to 400 days, per year before that (:func:`ingest_period`; split further past
   the table's ``commit.manifest.target-size-bytes``, Iceberg's default 8 MiB). A
   manifest that already holds exactly one period is kept as it is; files of no known
   day (tables without ``ingest_dt``, files from before it existed) share one. So the
   dedupe's scan, bounded to the days of the runs it can overlap, opens a manifest or
   two however long the history, and a full scan ~25 a year. One snapshot that
   changes no data file (an ``append`` of nothing: pyiceberg 0.12 has no
   rewrite-manifests operation; :func:`_cluster` is what its fast append writes).
   Entries keep their snapshot ids and sequence numbers; a compare-and-swap on
   ``main``, tried again when ``main`` moved.
3. **Snapshot expiry** (pyiceberg's ``expire_snapshots``): snapshots older than
   ``--older-than-days``, except the last ``--retain-last`` of ``main``, every
   branch and tag head, and what an open run branch still needs: its own snapshots,
   its fork point and ``main`` from its head down to that fork point (publish checks
   that the fork point is an ancestor of ``main``, and compares against its files).
4. **Orphan files.** Files under a table's ``data/`` folder that no snapshot of any
   ref (nor any other snapshot still in the metadata) references, and older than
   ``--orphan-grace-hours``: output of crashed runs, and files only expired
   snapshots held. Younger ones are kept: a running job has written files it has
   not committed yet. ``W/_scratch/<token>/<attempt>/`` folders whose newest file is
   older than the grace go too. (``--clean-metadata`` also deletes unreferenced
   manifests, manifest lists and metadata files under ``metadata/``.)

Run it while no decode run is between plan and publish (the maintenance DAG waits
for the nightly DAG's runs). The result is a JSON summary.
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import json
import logging
import os
import posixpath
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field

from spark_jobs import layout, schemas, storage
from spark_jobs.warehouse import (FILES, MAIN, ROWS, STAGE, CatalogError, Warehouse,
                                  add_catalog_args, airflow_summary, history, snapshots)

log = logging.getLogger(__name__)

DEFAULT_OLDER_THAN_DAYS = 7.0
DEFAULT_RETAIN_LAST = 10
DEFAULT_ORPHAN_GRACE_HOURS = 72.0
DEFAULT_MIN_FILES = 4
DEFAULT_TARGET_FILE_MB = 128
#: rewritten groups committed together, in one snapshot (each group all or nothing)
DEFAULT_GROUPS_PER_COMMIT = 100
#: merge main's data manifests when there are at least this many
DEFAULT_MIN_MANIFESTS = 2
#: the prefix part of a compacted file's name, after the submission prefix
COMPACTED_TAG = "m-"
MAINTENANCE = "kafkalog.maintenance"  # snapshot summary: which step made the snapshot
COMPACTED_FILES = "kafkalog.compacted-files"
SCRATCH = "_scratch"


class MaintenanceError(RuntimeError):
    """Maintenance refused to go on (the message says why); nothing unsafe was done."""


# ------------------------------------------------------------------ compaction


def submission_prefix(path: str) -> str | None:
    """The file-name prefix that a rerun of the submission which wrote ``path`` removes:
    ``<token>~c<chunk>~`` for a chunk's file, ``<token>~`` otherwise; None for a file
    not named by a run (e.g. pyiceberg's own ``00000-0-<uuid>.parquet``).

    A run without chunks whose attempt id begins with ``c`` reads as a chunk here:
    harmless, since a rerun of the whole run removes every ``<token>~`` file, and a
    file named ``<prefix>m-...`` matches exactly the removal prefixes its sources match.
    """
    parts = posixpath.basename(path).split("~")
    if len(parts) < 2 or not parts[0]:
        return None
    if len(parts) >= 3 and parts[1].startswith("c") and len(parts[1]) > 1:
        return f"{parts[0]}~{parts[1]}~"
    return f"{parts[0]}~"


def _partition_values(data_file) -> tuple:
    p = data_file.partition
    return tuple(p[i] for i in range(len(p)))


def _partition_key(data_file) -> tuple:
    return (data_file.spec_id, _partition_values(data_file))


def _kafka_partitions(data_file, field_id: int | None) -> tuple:
    """The raw lower and upper bounds of the file's Kafka ``partition`` column (equal
    bytes, equal values); ``()`` where the table's files are not split by it."""
    if field_id is None:
        return ()
    return (data_file.lower_bounds.get(field_id), data_file.upper_bounds.get(field_id))


@dataclass
class Group:
    """Small files of one table, partition value, submission (and Kafka partition
    range, see :func:`plan_compaction`), to become one file."""

    table: str
    partition: tuple
    prefix: str
    files: list = field(default_factory=list)

    @property
    def rows(self) -> int:
        return sum(f.record_count for f in self.files)

    @property
    def bytes(self) -> int:
        return sum(f.file_size_in_bytes for f in self.files)

    @property
    def paths(self) -> list[str]:
        return [f.file_path for f in self.files]


def plan_compaction(name: str, files, *, min_files: int = DEFAULT_MIN_FILES,
                    target_bytes: int = DEFAULT_TARGET_FILE_MB << 20,
                    kafka_partition_id: int | None = None) -> list[Group]:
    """The groups to rewrite among data files ``files`` (pyiceberg DataFiles of table
    ``name``): per partition value, submission prefix and (``kafka_partition_id``: the
    field id of the ``partition`` column) Kafka partition range, files under
    ``target_bytes``, where there are at least ``min_files`` of them; packed, in name
    order, into bins of at most ``target_bytes`` (a bin of one file is left as it is)."""
    by_key: dict[tuple, list] = {}
    for f in files:
        prefix = submission_prefix(f.file_path)
        if prefix is None or f.file_size_in_bytes >= target_bytes:
            continue
        key = (_partition_key(f), prefix, _kafka_partitions(f, kafka_partition_id))
        by_key.setdefault(key, []).append(f)
    groups = []
    for (part, prefix, _), members in sorted(by_key.items(),
                                             key=lambda kv: (repr(kv[0][0]), kv[0][1],
                                                             repr(kv[0][2]))):
        if len(members) < max(2, min_files):
            continue
        members.sort(key=lambda f: f.file_path)
        current = Group(name, part, prefix)
        for f in members:
            if current.files and current.bytes + f.file_size_in_bytes > target_bytes:
                groups.append(current)
                current = Group(name, part, prefix)
            current.files.append(f)
        groups.append(current)
    return [g for g in groups if len(g.files) >= 2]


def _staged_ranges(table, name: str) -> list[tuple[str, tuple]]:
    """``(branch, range)`` of what each open run branch staged: its own files added
    since its fork point (what its publish compares with ``main``'s new files)."""
    if name not in history.OFFSET_COLUMNS:
        return []
    out = []
    for ref_name, ref in table.refs().items():
        if ref_name == MAIN or not _is_branch(ref):
            continue
        try:
            fork = history.fork_point(table, ref_name)
            base = {f.file_path for f in history.live_files(table, fork)}
        except CatalogError:
            base = set()
        staged = [f for f in history.live_files(table, ref.snapshot_id) if f.file_path not in base]
        out.extend((ref_name, r) for r in history.offset_ranges(table, name, staged))
    return out


def _group_range(table, group: Group) -> tuple:
    """The ``(topic, partition lo, hi, offset lo, hi)`` a group's rewritten file will span."""
    ranges = history.offset_ranges(table, group.table, group.files)
    return (ranges[0][0], min(r[1] for r in ranges), max(r[2] for r in ranges),
            min(r[3] for r in ranges), max(r[4] for r in ranges))


def _meets_staged(table, group: Group, staged) -> str | None:
    """The open branch whose staged offsets the group's rewritten file could meet."""
    if not staged:
        return None
    t, plo, phi, olo, ohi = _group_range(table, group)
    token = group.prefix.split("~", 1)[0]
    for branch, (t2, plo2, phi2, olo2, ohi2) in staged:
        if branch == "run_" + token:
            continue  # a run's own files never conflict with its publish
        if t == t2 and plo <= phi2 and plo2 <= phi and olo <= ohi2 and olo2 <= ohi:
            return branch
    return None


#: a rewritten file's row order: Kafka partition, then offset (as the job writes them)
SORT_COLUMNS = {"records": ("partition", "offset"), "batches": ("partition", "base_offset"),
                "markers": ("partition", "offset"), "findings": ("partition", "position")}


def rewrite(group: Group, data_root: str, config: storage.S3Config | None = None) -> str:
    """Write the rows of ``group``'s files as one Parquet file into ``data_root`` (the
    table's data folder, beside the first source file), with the decode job's writer
    options; rows sorted by Kafka partition and offset. Returns the new file's URI."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from spark_jobs import decode, tables

    parts = [tables.read_file(p, group.table, config) for p in group.paths]
    rows = pa.concat_tables(parts)
    sort = SORT_COLUMNS.get(group.table)
    if sort:
        rows = rows.sort_by([(c, "ascending") for c in sort])
    target = decode.write_schema(group.table)
    rows = rows.cast(target)
    first = group.paths[0]
    root = data_root.rstrip("/") + "/"
    folder = posixpath.dirname(first[len(root):]) if first.startswith(root) else ""
    key = posixpath.join(folder, f"{group.prefix}{COMPACTED_TAG}{uuid.uuid4().hex[:12]}.parquet")
    fd, local = tempfile.mkstemp(prefix="kafkalog-compact-", suffix=".parquet")
    os.close(fd)
    try:
        pq.write_table(rows, local, **decode.parquet_options(target))
        storage.open_store(data_root, config).put_file(key, local)
    finally:
        if os.path.exists(local):
            os.remove(local)
    return storage.join(data_root, key)


def _commit_replacement(table, old, new, summary: dict) -> None:
    """One overwrite snapshot on ``main``: DataFiles ``old`` out, ``new`` in. A
    compare-and-swap on ``main``'s head as ``table`` has it (CommitFailedException);
    ValidationException where one of ``old`` is not live there."""
    with snapshots.adding_snapshot(), table.transaction() as tx:
        with tx.update_snapshot(snapshot_properties=summary, branch=MAIN).overwrite() as ow:
            for f in old:
                ow.delete_data_file(f)
            for f in new:
                ow.append_data_file(f)


@dataclass
class _Rewritten:
    group: Group
    uri: str
    data_file: object


def _skip(out: dict, group: Group, why: str) -> None:
    out["groups_skipped"] += 1
    out["skipped"].append({"prefix": group.prefix, "partition": list(group.partition[1]),
                           "files": len(group.files), "why": why})


def _commit_batch(wh, name: str, batch: list[_Rewritten], out: dict, attempts: int) -> None:
    """Commit the rewritten groups of ``batch`` to ``main`` in one snapshot. Each try
    starts from ``main`` as it is: a group some of whose files are no longer live there
    (a rerun replaced them: its rows win) or that now meets an open branch's staged
    offsets is dropped, its new file deleted; the others replace exactly their files."""
    from pyiceberg.exceptions import CommitFailedException, ValidationException

    pending = list(batch)
    try:
        for attempt in range(attempts):
            table = wh.load(name)
            live = {f.file_path: f for f in
                    history.live_files(table, table.current_snapshot().snapshot_id)}
            staged = _staged_ranges(table, name)
            keep = []
            for r in pending:
                branch = _meets_staged(table, r.group, staged)
                if not all(p in live for p in r.group.paths):
                    _skip(out, r.group, "main changed under the group")
                elif branch is not None:
                    _skip(out, r.group, f"offsets staged on open branch {branch}")
                else:
                    keep.append(r)
                    continue
                storage.delete_objects([r.uri], wh.s3)
            pending = keep
            if not pending:
                return
            old = [live[p] for r in pending for p in r.group.paths]
            summary = {STAGE: "maintenance", MAINTENANCE: "compaction",
                       ROWS: str(sum(r.group.rows for r in pending)),
                       FILES: str(len(pending)), COMPACTED_FILES: str(len(old)),
                       **airflow_summary()}
            try:
                _commit_replacement(table, old, [r.data_file for r in pending], summary)
            except (CommitFailedException, ValidationException) as err:
                log.info("%s: main moved while compacting (%s); checking again", name, err)
                snapshots.backoff(attempt)
                continue
            except BaseException:
                # anything else (a REST catalog's CommitStateUnknownException, a lost
                # connection, a killed process) may have committed: the new files may be
                # on main now, and deleting them would lose their rows. They stay; if the
                # commit did not happen, orphan removal deletes them after the grace.
                pending = []
                raise
            for r in pending:
                out["groups_compacted"] += 1
                out["files_compacted"] += len(r.group.files)
                out["files_written"] += 1
                out["rows_compacted"] += r.group.rows
            pending = []
            return
        for r in pending:
            _skip(out, r.group, f"main kept moving: not committed after {attempts} tries")
    finally:
        if pending:  # not committed (an error, or out of tries): the new files go
            storage.delete_objects([r.uri for r in pending], wh.s3)


def compact_table(wh: Warehouse, name: str, *, min_files: int = DEFAULT_MIN_FILES,
                  target_bytes: int = DEFAULT_TARGET_FILE_MB << 20, dry_run: bool = False,
                  groups_per_commit: int = DEFAULT_GROUPS_PER_COMMIT,
                  attempts: int = snapshots.COMMIT_ATTEMPTS) -> dict:
    """Compact table ``name``'s small files on ``main`` (module docstring, step 1):
    ``groups_per_commit`` rewritten groups per snapshot."""
    out = {"files_before": 0, "files_after": 0, "groups_compacted": 0, "files_compacted": 0,
           "files_written": 0, "rows_compacted": 0, "groups_skipped": 0, "skipped": []}
    table = wh.load(name)
    if table is None or table.current_snapshot() is None:
        return out
    live = history.live_files(table, table.current_snapshot().snapshot_id)
    out["files_before"] = out["files_after"] = len(live)
    kafka_partition = table.schema().find_field("partition").field_id \
        if name in history.OFFSET_COLUMNS else None
    groups = plan_compaction(name, live, min_files=min_files, target_bytes=target_bytes,
                             kafka_partition_id=kafka_partition)
    staged = _staged_ranges(table, name)
    data_root = table.location().rstrip("/") + "/data"
    batch: list[_Rewritten] = []
    try:
        for group in groups:
            branch = _meets_staged(table, group, staged)
            if branch is not None:
                _skip(out, group, f"offsets staged on open branch {branch}")
                continue
            if dry_run:
                out["groups_compacted"] += 1
                out["files_compacted"] += len(group.files)
                out["files_written"] += 1
                out["rows_compacted"] += group.rows
                out["files_after"] -= len(group.files) - 1
                continue
            uri = rewrite(group, data_root, wh.s3)
            batch.append(_Rewritten(group, uri, None))
            [new] = snapshots.data_files(table, [uri])
            if new.record_count != group.rows or _partition_values(new) != group.partition[1]:
                raise MaintenanceError(
                    f"{name}: rewriting {len(group.files)} files of {group.prefix}* gave "
                    f"{new.record_count} rows in partition {_partition_values(new)}, not "
                    f"{group.rows} in {group.partition[1]}: nothing of it committed")
            batch[-1].data_file = new
            if len(batch) >= groups_per_commit:
                done, batch = batch, []
                _commit_batch(wh, name, done, out, attempts)
        done, batch = batch, []
        if done:
            _commit_batch(wh, name, done, out, attempts)
    finally:
        if batch:  # an error before its commit: its new files go
            storage.delete_objects([r.uri for r in batch], wh.s3)
    if not dry_run:
        table = wh.load(name)
        out["files_after"] = len(history.live_files(table, table.current_snapshot().snapshot_id))
    return out


# ------------------------------------------------------------------ manifests


def _data_manifests(table) -> list:
    from pyiceberg.manifest import ManifestContent

    return [m for m in table.current_snapshot().manifests(table.io)
            if m.content == ManifestContent.DATA]


def ingest_period(day: str | None, newest: dt.date) -> str | None:
    """The period of ingest days whose entries share a manifest after maintenance, for
    ``day`` (an ``ingest_dt`` value) when the table's newest is ``newest``: the day
    itself in the last week, its ISO week in the five before, then its month, then its
    year. None for a file of no known day (one group). A scan of recent nights (the
    dedupe's) opens a day's manifest or two; a full scan ~25 manifests a year."""
    if day is None:
        return None
    try:
        d = dt.date.fromisoformat(day)
    except ValueError:
        return None
    age = (newest - d).days
    if age < 7:
        return day
    if age < 42:
        year, week, _ = d.isocalendar()
        return f"{year}-W{week:02d}"
    return day[:7] if age < 400 else day[:4]


def _ingest_positions(table) -> dict[int, int]:
    """Per partition spec id: the position of the ``ingest_dt`` field in its partition
    tuples (specs without one are left out)."""
    out = {}
    for spec_id, spec in table.metadata.specs().items():
        for pos, f in enumerate(spec.fields):
            if table.schema().find_column_name(f.source_id) == schemas.INGEST_DT:
                out[spec_id] = pos
    return out


def _summary_days(manifest, pos: int | None) -> tuple[str | None, str | None, bool]:
    """``(lowest, highest, has_null)`` ingest day of a manifest's entries, from its
    partition summary in the manifest list (nothing is opened)."""
    if pos is None or not manifest.partitions:
        return None, None, True
    f = manifest.partitions[pos]
    lo = f.lower_bound.decode() if f.lower_bound is not None else None
    hi = f.upper_bound.decode() if f.upper_bound is not None else None
    return lo, hi, bool(f.contains_null)


@dataclass
class ManifestPlan:
    """How :func:`merge_manifests` clusters ``main``'s data manifests: per
    ``(spec id, period)`` key, ``keep`` has the one manifest that already holds exactly
    that period's entries, ``groups`` the manifests to merge into one; ``split`` are the
    manifests whose entries span periods (read entry by entry). ``newest`` is the
    table's newest ingest day, which the periods are counted back from."""

    keep: dict
    groups: dict
    split: list
    newest: dt.date

    @property
    def changes(self) -> bool:
        return bool(self.split or self.groups)


def plan_manifests(manifests, positions: dict[int, int]) -> ManifestPlan:
    """Cluster data ``manifests`` by :func:`ingest_period` of their entries, from the
    manifest list alone; ``positions`` from :func:`_ingest_positions`."""
    days = {m.manifest_path: _summary_days(m, positions.get(m.partition_spec_id))
            for m in manifests}
    highs = [hi for _, hi, _ in days.values() if hi is not None]
    newest = max(dt.date.fromisoformat(h) for h in highs) if highs else dt.date.today()
    by_key: dict[tuple, list] = {}
    split = []
    for m in manifests:
        lo, hi, has_null = days[m.manifest_path]
        period = ingest_period(lo, newest)
        if lo is None or (not has_null and period == ingest_period(hi, newest)):
            by_key.setdefault((m.partition_spec_id, None if lo is None else period), []).append(m)
        else:
            split.append(m)
    return ManifestPlan(keep={k: ms[0] for k, ms in by_key.items() if len(ms) == 1},
                        groups={k: ms for k, ms in by_key.items() if len(ms) > 1},
                        split=split, newest=newest)


def _cluster(manifests, entries, new_writer, *, positions: dict[int, int],
             target_bytes: int) -> list:
    """``main``'s manifests with its data manifests clustered by :func:`plan_manifests`:
    the ``rewrite`` of :func:`spark_jobs.warehouse.snapshots.rewrite_manifests` (an
    append of no file; ``entries(m)``: a manifest's live entries; ``new_writer(spec id)``:
    a manifest of the new snapshot). Entries keep their status, snapshot ids and sequence
    numbers; a manifest is split past ``target_bytes``."""
    from pyiceberg.manifest import ManifestContent

    data = [m for m in manifests if m.content == ManifestContent.DATA]
    other = [m for m in manifests if m.content != ManifestContent.DATA]
    plan = plan_manifests(data, positions)

    def key_of(m, entry) -> tuple:
        pos = positions.get(m.partition_spec_id)
        day = entry.data_file.partition[pos] if pos is not None else None
        return m.partition_spec_id, ingest_period(day, plan.newest)

    grouped: dict[tuple, list] = {}
    sizes: dict[tuple, float] = {}
    keep = dict(plan.keep)
    todo = [(m, True) for m in plan.split]
    todo += [(m, False) for ms in plan.groups.values() for m in ms]
    while todo:
        m, spans = todo.pop()
        per_entry = m.manifest_length / max(1, (m.added_files_count or 0)
                                            + (m.existing_files_count or 0))
        for entry in entries(m):
            key = key_of(m, entry)
            if spans and key in keep:  # a period's one manifest joins its rewrite
                todo.append((keep.pop(key), False))
            grouped.setdefault(key, []).append(entry)
            sizes[key] = sizes.get(key, 0.0) + per_entry
    written = []
    for key, group in sorted(grouped.items(), key=lambda kv: repr(kv[0])):
        group.sort(key=lambda e: e.data_file.file_path)
        step = -(-len(group) // max(1, -(-int(sizes[key]) // target_bytes)))
        for i in range(0, len(group), step):
            with new_writer(key[0]) as writer:
                for entry in group[i:i + step]:
                    writer.existing(entry)
            written.append(writer.to_manifest_file())
    return written + list(keep.values()) + other


def merge_manifests(wh: Warehouse, name: str, *, min_manifests: int = DEFAULT_MIN_MANIFESTS,
                    dry_run: bool = False, attempts: int = snapshots.COMMIT_ATTEMPTS) -> dict:
    """Cluster ``main``'s data manifests of table ``name`` by ingest period (module
    docstring, step 2)."""
    from pyiceberg.exceptions import CommitFailedException
    from pyiceberg.table import TableProperties as P

    out = {"manifests_before": 0, "manifests_after": 0}
    for attempt in range(attempts):
        table = wh.load(name)
        if table is None or table.current_snapshot() is None:
            return out
        before = _data_manifests(table)
        out["manifests_before"] = out["manifests_after"] = len(before)
        live = [m for m in before if m.has_added_files() or m.has_existing_files()]
        positions = _ingest_positions(table)
        changes = plan_manifests(live, positions).changes or len(live) < len(before)
        if len(before) < max(2, min_manifests) or not changes or dry_run:
            return out  # (a dry run says how many there are)
        target = int(table.properties.get(P.MANIFEST_TARGET_SIZE_BYTES,
                                          P.MANIFEST_TARGET_SIZE_BYTES_DEFAULT))
        summary = {STAGE: "maintenance", MAINTENANCE: "manifests",
                   ROWS: "0", **airflow_summary()}
        try:
            snapshots.rewrite_manifests(
                table, functools.partial(_cluster, positions=positions, target_bytes=target),
                summary=summary, branch=MAIN)
        except CommitFailedException as err:
            log.info("%s: main moved while clustering manifests (%s); again", name, err)
            snapshots.backoff(attempt)
            continue
        out["manifests_after"] = len(_data_manifests(wh.load(name)))
        return out
    raise CatalogError(f"{name}: could not merge manifests after {attempts} tries")


# ------------------------------------------------------------------ snapshot expiry


def _is_branch(ref) -> bool:
    return str(getattr(ref.snapshot_ref_type, "value", ref.snapshot_ref_type)) == "branch"


def protected_snapshots(table, retain_last: int) -> set[int]:
    """Snapshots expiry must keep: the last ``retain_last`` of ``main``, every ref's
    head, and for every other branch its own snapshots, its fork point and ``main``
    from its head down to that fork point (all of a branch's history where it shares
    none with ``main``)."""
    if retain_last < 1:
        raise ValueError(f"retain_last must be at least 1, not {retain_last}")
    main_line = history.ancestry(table, table.current_snapshot().snapshot_id)
    position = {sid: i for i, sid in enumerate(main_line)}
    keep = set(main_line[:retain_last])
    for ref_name, ref in table.refs().items():
        keep.add(ref.snapshot_id)
        if ref_name == MAIN or not _is_branch(ref):
            continue
        for sid in history.ancestry(table, ref.snapshot_id):
            keep.add(sid)
            if sid in position:  # the fork point: main down to it stays unbroken
                keep.update(main_line[:position[sid] + 1])
                break
    return keep


def expirable_snapshots(table, *, older_than_ms: int, retain_last: int) -> list[int]:
    """Snapshot ids older than ``older_than_ms`` that :func:`protected_snapshots` allows
    to expire, oldest first."""
    keep = protected_snapshots(table, retain_last)
    snaps = sorted(table.metadata.snapshots, key=lambda s: (s.timestamp_ms, s.snapshot_id))
    return [s.snapshot_id for s in snaps
            if s.timestamp_ms < older_than_ms and s.snapshot_id not in keep]


def expire_table(wh: Warehouse, name: str, *, older_than: dt.datetime,
                 retain_last: int = DEFAULT_RETAIN_LAST, dry_run: bool = False,
                 attempts: int = snapshots.COMMIT_ATTEMPTS) -> dict:
    """Expire table ``name``'s old snapshots (module docstring, step 2)."""
    from pyiceberg.exceptions import CommitFailedException

    out = {"snapshots_before": 0, "snapshots_after": 0, "expired_snapshots": 0}
    cutoff = int(older_than.timestamp() * 1000)
    for attempt in range(attempts):
        table = wh.load(name)
        if table is None or table.current_snapshot() is None:
            return out
        out["snapshots_before"] = out["snapshots_after"] = len(table.metadata.snapshots)
        ids = expirable_snapshots(table, older_than_ms=cutoff, retain_last=retain_last)
        if not ids or dry_run:
            out["expired_snapshots"] = len(ids)
            out["snapshots_after"] -= len(ids)
            return out
        try:
            table.maintenance.expire_snapshots().by_ids(ids).commit()
        except (CommitFailedException, ValueError) as err:  # ValueError: one went meanwhile
            log.info("%s: the table changed while expiring snapshots (%s); again", name, err)
            snapshots.backoff(attempt)
            continue
        out["expired_snapshots"] = len(ids)
        out["snapshots_after"] = len(wh.load(name).metadata.snapshots)
        return out
    raise CatalogError(f"{name}: could not expire snapshots after {attempts} tries")


# ------------------------------------------------------------------ orphan files


def normalize(uri: str) -> str:
    """One spelling per file: local paths without ``file:``, normalized; ``s3a://`` as ``s3://``."""
    if uri.startswith("file://"):
        uri = uri[len("file://"):]
    elif uri.startswith("file:"):
        uri = uri[len("file:"):]
    if "://" not in uri:
        return os.path.normpath(uri)
    scheme, rest = uri.split("://", 1)
    return ("s3" if scheme in ("s3a", "s3n") else scheme) + "://" + rest


def referenced_files(table) -> tuple[set[str], set[str]]:
    """``(data files, metadata files)`` (normalized) that any snapshot still in the
    table's metadata references, whatever ref it is on: the live (added or existing)
    entries of its manifests, which are its data files (a file a snapshot deleted is
    live in its parent, if that is kept); the manifest lists, manifests, metadata files
    and statistics files."""
    data, meta = set(), {normalize(table.metadata_location)}
    meta.update(normalize(e.metadata_file) for e in table.metadata.metadata_log)
    for stats in list(table.metadata.statistics) + list(table.metadata.partition_statistics):
        meta.add(normalize(stats.statistics_path))
    seen = set()
    for snap in table.metadata.snapshots:
        meta.add(normalize(snap.manifest_list))
        for manifest in snap.manifests(table.io):
            if manifest.manifest_path in seen:
                continue
            seen.add(manifest.manifest_path)
            meta.add(normalize(manifest.manifest_path))
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
                data.add(normalize(entry.data_file.file_path))
    return data, meta


def _store_and_uri(root: str, config):
    store = storage.open_store(root, config)
    return store, (lambda key: normalize(store.uri(key)))


def remove_orphans(wh: Warehouse, name: str, *, grace: dt.timedelta,
                   now: dt.datetime | None = None, dry_run: bool = False,
                   clean_metadata: bool = False) -> dict:
    """Delete table ``name``'s orphan files (module docstring, step 3)."""
    out = {"orphans_deleted": 0, "orphan_bytes": 0, "orphans_too_young": 0,
           "orphan_metadata_deleted": 0}
    table = wh.load(name)
    if table is None:
        return out
    now = now or dt.datetime.now(dt.timezone.utc)
    cutoff = now - grace
    data, meta = referenced_files(table)
    location = table.location().rstrip("/")
    data_root = location + "/data"
    store, uri_of = _store_and_uri(data_root, wh.s3)
    listed = list(store.list(""))
    under = normalize(data_root).rstrip("/") + "/"
    ours = {p for p in data if p.startswith(under)}
    found = {uri_of(o.key) for o in listed}
    if ours and not ours & found:
        raise MaintenanceError(
            f"{name}: none of the {len(ours)} data files the catalog references was found "
            f"under {data_root} (e.g. {sorted(ours)[0]}); the paths do not match how this "
            "tool lists them, so no file is deleted")
    doomed = []
    for o in listed:
        if uri_of(o.key) in data:
            continue
        if o.mtime >= cutoff:
            out["orphans_too_young"] += 1
            continue
        doomed.append(o)
    out["orphans_deleted"] = len(doomed)
    out["orphan_bytes"] = sum(o.size for o in doomed)
    if doomed and not dry_run:
        store.delete([o.key for o in doomed])
        _prune_empty_dirs(store)
    if clean_metadata:
        mstore, muri = _store_and_uri(location + "/metadata", wh.s3)
        gone = [o for o in mstore.list("")
                if (o.key.endswith(".avro") or ".metadata.json" in o.key)
                and muri(o.key) not in meta and o.mtime < cutoff]
        out["orphan_metadata_deleted"] = len(gone)
        if gone and not dry_run:
            mstore.delete([o.key for o in gone])
    return out


def _prune_empty_dirs(store) -> None:
    """Remove the empty folders a local store is left with (S3 has none)."""
    if not isinstance(store, storage.LocalStore):
        return
    for dirpath, _dirs, _files in sorted(os.walk(store.root), key=lambda w: -len(w[0])):
        if dirpath != store.root:
            try:
                os.rmdir(dirpath)
            except OSError:
                pass  # not empty (or gone)


def clean_scratch(wh: Warehouse, *, grace: dt.timedelta, now: dt.datetime | None = None,
                  dry_run: bool = False) -> dict:
    """Delete ``W/_scratch/<token>/<attempt>/`` folders whose newest file is older than
    ``grace`` (a crashed run's output still to be deduplicated)."""
    now = now or dt.datetime.now(dt.timezone.utc)
    store = storage.open_store(wh.root, wh.s3)
    folders: dict[str, list] = {}
    for o in store.list(SCRATCH + "/"):
        parts = o.key.split("/")
        folders.setdefault("/".join(parts[:3] if len(parts) > 3 else parts[:2]), []).append(o)
    old = {k: objs for k, objs in folders.items() if max(o.mtime for o in objs) < now - grace}
    out = {"scratch_folders_deleted": len(old),
           "scratch_files_deleted": sum(map(len, old.values())),
           "scratch_folders_kept": len(folders) - len(old)}
    if old and not dry_run:
        store.delete([o.key for objs in old.values() for o in objs])
        if isinstance(store, storage.LocalStore):
            scratch = storage.LocalStore(store.path(SCRATCH))
            if os.path.isdir(scratch.root):
                _prune_empty_dirs(scratch)
    return out


# ------------------------------------------------------------------ all of it


#: the per-table figures a summary also gives in total
TOTALS = ("expired_snapshots", "orphans_deleted", "orphan_bytes", "groups_compacted",
          "groups_skipped", "files_compacted", "files_before", "files_after",
          "manifests_before", "manifests_after")


def existing_tables(wh: Warehouse, names=None) -> list[str]:
    """The warehouse's tables among ``names`` (default: all, the internal topics' and the
    typed per-topic tables included) that exist (none is created)."""
    if names:
        return [n for n in names if wh.load(n) is not None]
    existing = wh.table_names()
    return [n for n in schemas.ALL_NAMES if n in existing] + list(wh.typed_tables(existing))


def maintain(wh: Warehouse, *, names=None,
             older_than_days: float = DEFAULT_OLDER_THAN_DAYS,
             retain_last: int = DEFAULT_RETAIN_LAST,
             orphan_grace_hours: float = DEFAULT_ORPHAN_GRACE_HOURS,
             min_files: int = DEFAULT_MIN_FILES, target_file_mb: int = DEFAULT_TARGET_FILE_MB,
             groups_per_commit: int = DEFAULT_GROUPS_PER_COMMIT,
             min_manifests: int = DEFAULT_MIN_MANIFESTS,
             dry_run: bool = False, clean_metadata: bool = False,
             now: dt.datetime | None = None) -> dict:
    """Compact files and manifests, expire, delete orphans on every table of ``wh`` (or
    ``names``), then the scratch space. Returns the JSON-able summary: totals and per
    table."""
    t0 = time.time()
    now = now or dt.datetime.now(dt.timezone.utc)
    grace = dt.timedelta(hours=orphan_grace_hours)
    out = {"warehouse": wh.root, "catalog": wh.catalog_name, "namespace": wh.namespace,
           "dry_run": dry_run, "tables": {}}
    for name in existing_tables(wh, names):
        t = time.time()
        res = compact_table(wh, name, min_files=min_files, target_bytes=target_file_mb << 20,
                            groups_per_commit=groups_per_commit, dry_run=dry_run)
        res.update(merge_manifests(wh, name, min_manifests=min_manifests, dry_run=dry_run))
        res.update(expire_table(wh, name, older_than=now - dt.timedelta(days=older_than_days),
                                retain_last=retain_last, dry_run=dry_run))
        res.update(remove_orphans(wh, name, grace=grace, now=now, dry_run=dry_run,
                                  clean_metadata=clean_metadata))
        res["seconds"] = round(time.time() - t, 3)
        out["tables"][name] = res
    out.update(clean_scratch(wh, grace=grace, now=now, dry_run=dry_run))
    for key in TOTALS:
        out[key] = sum(t[key] for t in out["tables"].values())
    out["seconds"] = round(time.time() - t0, 3)
    return out


def table_name(name: str) -> str:
    """``--table``'s type: a fixed table's name or a typed table's (layout.typed_table_name)."""
    if name in schemas.ALL_NAMES or layout.typed_topic(name) is not None:
        return name
    raise argparse.ArgumentTypeError(f"no table {name!r}: one of {', '.join(schemas.ALL_NAMES)} "
                                     "or values__<topic>")


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m spark_jobs.maintenance",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--warehouse", required=True, help="the warehouse root W (local path or s3://)")
    add_catalog_args(p)
    p.add_argument("--table", action="append", type=table_name, metavar="TABLE",
                   help="only this table: one of %s or a typed table values__<topic> "
                        "(repeatable; default: every table)" % ", ".join(schemas.ALL_NAMES))
    p.add_argument("--older-than-days", type=float, default=DEFAULT_OLDER_THAN_DAYS,
                   help="expire snapshots older than this (default %(default)s)")
    p.add_argument("--retain-last", type=int, default=DEFAULT_RETAIN_LAST,
                   help="always keep this many of main's last snapshots (default %(default)s)")
    p.add_argument("--orphan-grace-hours", type=float, default=DEFAULT_ORPHAN_GRACE_HOURS,
                   help="delete unreferenced files only when older than this (default "
                        "%(default)s): longer than any run takes")
    p.add_argument("--min-files", type=int, default=DEFAULT_MIN_FILES,
                   help="compact a partition value's files of one run when it has at least "
                        "this many small ones (default %(default)s)")
    p.add_argument("--target-file-mb", type=int, default=DEFAULT_TARGET_FILE_MB,
                   help="files from this size on are not small; a rewritten file stays "
                        "under it (default %(default)s)")
    p.add_argument("--groups-per-commit", type=int, default=DEFAULT_GROUPS_PER_COMMIT,
                   help="rewritten groups committed together in one snapshot (default "
                        "%(default)s)")
    p.add_argument("--min-manifests", type=int, default=DEFAULT_MIN_MANIFESTS,
                   help="merge main's manifests when it has at least this many small ones "
                        "(default %(default)s)")
    p.add_argument("--clean-metadata", action="store_true",
                   help="also delete unreferenced manifests, manifest lists and metadata "
                        "files under each table's metadata/ (older than the grace)")
    p.add_argument("--dry-run", action="store_true", help="say what would be done, do nothing")
    p.add_argument("--s3-endpoint", help="S3-compatible endpoint URL (default: AWS_ENDPOINT_URL)")
    args = p.parse_args(argv)
    if args.retain_last < 1:
        p.error("--retain-last must be at least 1")
    if args.min_files < 2 or args.min_manifests < 2:
        p.error("--min-files and --min-manifests must be at least 2")
    if args.groups_per_commit < 1 or args.target_file_mb < 1:
        p.error("--groups-per-commit and --target-file-mb must be positive")
    return args


def main(argv=None) -> dict:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    config = storage.S3Config.from_env(args.s3_endpoint) if storage.is_s3(args.warehouse) \
        or args.s3_endpoint else None
    wh = Warehouse(args.warehouse, args.catalog, args.namespace, config)
    try:
        summary = maintain(wh, names=args.table, older_than_days=args.older_than_days,
                           retain_last=args.retain_last,
                           orphan_grace_hours=args.orphan_grace_hours, min_files=args.min_files,
                           target_file_mb=args.target_file_mb,
                           groups_per_commit=args.groups_per_commit,
                           min_manifests=args.min_manifests, dry_run=args.dry_run,
                           clean_metadata=args.clean_metadata)
    except (MaintenanceError, CatalogError) as err:
        print(f"maintenance: {err}", file=sys.stderr)
        raise SystemExit(1) from err
    print(json.dumps(summary, sort_keys=True))
    return summary


if __name__ == "__main__":
    main()
