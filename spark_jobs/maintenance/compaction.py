"""Step 1, compaction: ``main``'s small files rewritten, a group at a time, into one file each.

The groups are :func:`.grouping.plan_compaction`'s. A group with at least ``min_files``
small files is rewritten with pyarrow into one file (several where they exceed the
target size) named with the same submission prefix, with the decode job's own writer
options, and the replacement is committed to ``main`` in one overwrite snapshot (summary
``kafkalog.stage=maintenance``) that deletes the group's files and adds the new one; up to
``groups_per_commit`` groups share a snapshot (each group is all or nothing), so a year of
nightly runs does not become a thousand snapshots. Because the new file keeps the prefix,
a rerun of the run (or of the chunk) still removes exactly the rows it wrote.

The commit is a compare-and-swap on ``main``: where ``main`` moved meanwhile, a group is
committed again only if every one of its files is still live, else it is skipped and its
new file deleted; rows are never lost nor doubled. A commit that fails in any other way
(its outcome unknown) leaves the new files in place: orphan removal takes them if they are
unreferenced. A group whose offsets could meet what an open run branch staged is left
alone (:mod:`.branches`).
"""

from __future__ import annotations

import logging
import os
import posixpath
import tempfile
import uuid
from dataclasses import dataclass

from spark_jobs import storage, tables
from spark_jobs.parquet import parquet_options, write_schema
from spark_jobs.maintenance.branches import meeting_branch, staged_ranges
from spark_jobs.maintenance.errors import MaintenanceError
from spark_jobs.maintenance.grouping import (DEFAULT_MIN_FILES, DEFAULT_TARGET_FILE_MB, Group,
                                             partition_values, plan_compaction)
from spark_jobs.maintenance.naming import (COMPACTED_FILES, COMPACTED_TAG, data_folder,
                                           snapshot_summary, submission_branch)
from spark_jobs.warehouse import (FILES, MAIN, CommitFailed, CommitRefused, Warehouse, commits,
                                  history, snapshots)

log = logging.getLogger(__name__)

#: rewritten groups committed together, in one snapshot (each group all or nothing)
DEFAULT_GROUPS_PER_COMMIT = 100
#: a rewritten file's row order: Kafka partition, then offset (as the job writes them)
SORT_COLUMNS = {"records": ("partition", "offset"), "batches": ("partition", "base_offset"),
                "markers": ("partition", "offset"), "findings": ("partition", "position")}


def compact_table(wh: Warehouse, name: str, *, min_files: int = DEFAULT_MIN_FILES,
                  target_bytes: int = DEFAULT_TARGET_FILE_MB << 20, dry_run: bool = False,
                  groups_per_commit: int = DEFAULT_GROUPS_PER_COMMIT,
                  attempts: int = commits.COMMIT_ATTEMPTS) -> dict:
    """Compact table ``name``'s small files on ``main`` (the module's docstring):
    ``groups_per_commit`` rewritten groups per snapshot. Returns the step's counts and
    the groups it skipped, with why."""
    out = {"files_before": 0, "files_after": 0, "groups_compacted": 0, "files_compacted": 0,
           "files_written": 0, "rows_compacted": 0, "groups_skipped": 0, "skipped": []}
    table = wh.load(name)
    if table is None or table.current_snapshot() is None:
        return out
    live = history.live_files(table, table.current_snapshot().snapshot_id)
    out["files_before"] = out["files_after"] = len(live)
    groups = plan_compaction(name, live, min_files=min_files, target_bytes=target_bytes,
                             kafka_partition_id=_kafka_partition_id(table, name))
    staged = staged_ranges(table, name)
    with _Batches(wh, table, name, out, groups_per_commit, attempts) as batches:
        for group in groups:
            branch = _staged_branch_met(table, group, staged)
            if branch is not None:
                _skip(out, group, f"offsets staged on open branch {branch}")
            elif dry_run:
                _count_compacted(out, group)
                out["files_after"] -= len(group.files) - 1
            else:
                batches.add(group)
    if not dry_run:
        table = wh.load(name)
        out["files_after"] = len(history.live_files(table, table.current_snapshot().snapshot_id))
    return out


def _kafka_partition_id(table, name: str) -> int | None:
    """The field id of the Kafka ``partition`` column where the table's files are found
    by offset (compaction keeps its files apart by it), else None."""
    if name not in history.OFFSET_COLUMNS:
        return None
    return table.schema().find_field("partition").field_id


def _staged_branch_met(table, group: Group, staged) -> str | None:
    """The open branch whose staged offsets the group's rewritten file could meet."""
    if not staged:
        return None
    ranges = history.offset_ranges(table, group.table, group.files)
    span = (ranges[0][0], min(r[1] for r in ranges), max(r[2] for r in ranges),
            min(r[3] for r in ranges), max(r[4] for r in ranges))
    return meeting_branch(span, staged, own=submission_branch(group.prefix))


def _skip(out: dict, group: Group, why: str) -> None:
    out["groups_skipped"] += 1
    out["skipped"].append({"prefix": group.prefix, "partition": list(group.partition[1]),
                           "files": len(group.files), "why": why})


def _count_compacted(out: dict, group: Group) -> None:
    out["groups_compacted"] += 1
    out["files_compacted"] += len(group.files)
    out["files_written"] += 1
    out["rows_compacted"] += group.rows


# ------------------------------------------------------------------ rewriting a group


def rewrite(group: Group, data_root: str, config: storage.S3Config | None = None) -> str:
    """Write the rows of ``group``'s files as one Parquet file into ``data_root`` (the
    table's data folder, beside the first source file), with the decode job's writer
    options; rows sorted by Kafka partition and offset. Returns the new file's URI."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = pa.concat_tables([tables.read_file(p, group.table, config) for p in group.paths])
    sort = SORT_COLUMNS.get(group.table)
    if sort:
        rows = rows.sort_by([(c, "ascending") for c in sort])
    target = write_schema(group.table)
    rows = rows.cast(target)
    key = _compacted_key(group, data_root)
    fd, local = tempfile.mkstemp(prefix="kafkalog-compact-", suffix=".parquet")
    os.close(fd)
    try:
        pq.write_table(rows, local, **parquet_options(target))
        storage.open_store(data_root, config).put_file(key, local)
    finally:
        if os.path.exists(local):
            os.remove(local)
    return storage.join(data_root, key)


def _compacted_key(group: Group, data_root: str) -> str:
    """The new file's key under ``data_root``: the first source file's folder,
    ``<submission prefix>m-<12 hex>.parquet``."""
    first = group.paths[0]
    root = data_root.rstrip("/") + "/"
    folder = posixpath.dirname(first[len(root):]) if first.startswith(root) else ""
    return posixpath.join(folder, f"{group.prefix}{COMPACTED_TAG}{uuid.uuid4().hex[:12]}.parquet")


@dataclass
class Rewritten:
    """A group's new file: its URI and its pyiceberg DataFile."""

    group: Group
    uri: str
    data_file: object


def _rewrite_checked(table, group: Group, data_root: str, config) -> Rewritten:
    """:func:`rewrite` the group and make its DataFile; a file whose rows or partition
    are not the group's is deleted and refused (as is one whose DataFile fails)."""
    uri = rewrite(group, data_root, config)
    try:
        [new] = snapshots.data_files(table, [uri])
        if new.record_count != group.rows or partition_values(new) != group.partition[1]:
            raise MaintenanceError(
                f"{group.table}: rewriting {len(group.files)} files of {group.prefix}* gave "
                f"{new.record_count} rows in partition {partition_values(new)}, not "
                f"{group.rows} in {group.partition[1]}: nothing of it committed")
    except BaseException:
        storage.delete_objects([uri], config)
        raise
    return Rewritten(group, uri, new)


# ------------------------------------------------------------------ committing groups


class _Batches:
    """Rewritten groups waiting for their commit, ``groups_per_commit`` to a snapshot
    (:func:`_commit_batch`). Left by an error, the new files not yet committed go."""

    def __init__(self, wh: Warehouse, table, name: str, out: dict, groups_per_commit: int,
                 attempts: int):
        self.wh, self.table, self.name, self.out = wh, table, name, out
        self.size, self.attempts = groups_per_commit, attempts
        self.data_root = data_folder(table)
        self.pending: list[Rewritten] = []

    def add(self, group: Group) -> None:
        self.pending.append(_rewrite_checked(self.table, group, self.data_root, self.wh.s3))
        if len(self.pending) >= self.size:
            self.flush()

    def flush(self) -> None:
        done, self.pending = self.pending, []
        if done:
            _commit_batch(self.wh, self.name, done, self.out, self.attempts)

    def __enter__(self) -> _Batches:
        return self

    def __exit__(self, kind, error, tb) -> None:
        if kind is None:
            self.flush()
        elif self.pending:  # an error before their commit: their new files go
            storage.delete_objects([r.uri for r in self.pending], self.wh.s3)


def _commit_batch(wh: Warehouse, name: str, batch: list[Rewritten], out: dict,
                  attempts: int) -> None:
    """Commit the rewritten groups of ``batch`` to ``main`` in one snapshot. Each try
    starts from ``main`` as it is: a group some of whose files are no longer live there
    (a rerun replaced them: its rows win) or that now meets an open branch's staged
    offsets is dropped, its new file deleted; the others replace exactly their files."""
    pending = list(batch)

    def step(attempt: int) -> None:
        nonlocal pending
        table = wh.load(name)
        live = {f.file_path: f for f in
                history.live_files(table, table.current_snapshot().snapshot_id)}
        pending = _still_committable(wh, table, name, pending, live, out)
        if not pending:
            return
        try:
            _commit_groups(table, pending, live)  # refused where main moved: checked again
        except CommitFailed as err:
            if err.outcome != commits.NOT_COMMITTED:
                pending = []  # they may be on main now: they stay (orphans after the grace)
            raise
        except CommitRefused:
            raise
        except BaseException:
            pending = []  # a process killed in the commit: what it wrote stays
            raise
        for r in pending:
            _count_compacted(out, r.group)
        pending = []

    def exhausted() -> None:
        for r in pending:
            _skip(out, r.group, f"main kept moving: not committed after {attempts} tries")

    try:
        commits.retry(f"{name}: compacting", step, attempts=attempts, exhausted=exhausted)
    finally:
        if pending:  # not committed (known not, or out of tries): the new files go
            storage.delete_objects([r.uri for r in pending], wh.s3)


def _still_committable(wh: Warehouse, table, name: str, pending: list[Rewritten], live: dict,
                       out: dict) -> list[Rewritten]:
    """The groups of ``pending`` still to commit on ``main`` as ``table`` has it (``live``:
    its files by path); the others are skipped and their new files deleted."""
    staged = staged_ranges(table, name)
    keep = []
    for r in pending:
        branch = _staged_branch_met(table, r.group, staged)
        if not all(p in live for p in r.group.paths):
            _skip(out, r.group, "main changed under the group")
        elif branch is not None:
            _skip(out, r.group, f"offsets staged on open branch {branch}")
        else:
            keep.append(r)
            continue
        storage.delete_objects([r.uri], wh.s3)
    return keep


def _commit_groups(table, pending: list[Rewritten], live: dict) -> None:
    """One snapshot on ``main`` replacing each group's files (as ``live`` has them) by
    its new one (:func:`commit_replacement`), through the warehouse's one commit
    mechanism (:func:`spark_jobs.warehouse.commits.send`: refused, or failed with its
    outcome read back by its commit token)."""
    old = [live[p] for r in pending for p in r.group.paths]
    summary = {**snapshot_summary("compaction", sum(r.group.rows for r in pending),
                                  **{FILES: str(len(pending)), COMPACTED_FILES: str(len(old))}),
               **commits.new_token()}
    commits.send(table, lambda: commit_replacement(table, old, [r.data_file for r in pending],
                                                   summary),
                 landed=commits.token_landed(summary))


def commit_replacement(table, old, new, summary: dict) -> None:
    """One overwrite snapshot on ``main``: DataFiles ``old`` out, ``new`` in. A
    compare-and-swap on ``main``'s head as ``table`` has it (pyiceberg's refusal where it
    moved, or where one of ``old`` is not live there: :func:`spark_jobs.warehouse.commits.is_refusal`)."""
    with snapshots.adding_snapshot(), table.transaction() as tx:
        with tx.update_snapshot(snapshot_properties=summary, branch=MAIN).overwrite() as ow:
            for f in old:
                ow.delete_data_file(f)
            for f in new:
                ow.append_data_file(f)
