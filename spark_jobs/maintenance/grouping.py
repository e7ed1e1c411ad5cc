"""Which of ``main``'s data files compaction rewrites together: the plan, pure (no I/O).

Files are grouped by table partition value and by *submission*: the file-name prefix a
rerun removes (:func:`.naming.submission_prefix`), so that the rewritten file, named with
the same prefix, is still removed by a rerun of exactly that run (or chunk). In the tables
whose files the dedupe and the publish check find by offset (records, batches, markers),
also by Kafka partition (the file's ``partition`` range): a file merging several Kafka
partitions would span all their offsets, and every later night's dedupe of any of them
would read it (pruning is per column: partition 0-3 and offsets 10-4,000,000 meets
partition 0 at offset 3,000,000), so the dedupe would read all of history again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from spark_jobs.maintenance.naming import submission_prefix

DEFAULT_MIN_FILES = 4
DEFAULT_TARGET_FILE_MB = 128


def partition_values(data_file) -> tuple:
    """A pyiceberg DataFile's partition value, as a tuple."""
    p = data_file.partition
    return tuple(p[i] for i in range(len(p)))


def _partition_key(data_file) -> tuple:
    return (data_file.spec_id, partition_values(data_file))


def _kafka_partitions(data_file, field_id: int | None) -> tuple:
    """The raw lower and upper bounds of the file's Kafka ``partition`` column (equal
    bytes, equal values); ``()`` where the table's files are not split by it."""
    if field_id is None:
        return ()
    return (data_file.lower_bounds.get(field_id), data_file.upper_bounds.get(field_id))


@dataclass
class Group:
    """Small files of one table, partition value, submission (and Kafka partition
    range, see :func:`plan_compaction`), to become one file. ``partition`` is
    ``(spec id, partition value)``."""

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
    groups = []
    for (part, prefix, _), members in _small_files_by_key(files, target_bytes,
                                                          kafka_partition_id):
        if len(members) >= max(2, min_files):
            groups.extend(_pack(Group(name, part, prefix), members, target_bytes))
    return [g for g in groups if len(g.files) >= 2]


def _small_files_by_key(files, target_bytes: int, kafka_partition_id: int | None) -> list:
    """``[((partition key, prefix, Kafka partition range), files)]`` of the files under
    ``target_bytes`` that a run named, in a stable order."""
    by_key: dict[tuple, list] = {}
    for f in files:
        prefix = submission_prefix(f.file_path)
        if prefix is None or f.file_size_in_bytes >= target_bytes:
            continue
        key = (_partition_key(f), prefix, _kafka_partitions(f, kafka_partition_id))
        by_key.setdefault(key, []).append(f)
    return sorted(by_key.items(), key=lambda kv: (repr(kv[0][0]), kv[0][1], repr(kv[0][2])))


def _pack(empty: Group, members: list, target_bytes: int) -> list[Group]:
    """``members`` in name order, in groups like ``empty`` of at most ``target_bytes``."""
    members = sorted(members, key=lambda f: f.file_path)
    current = Group(empty.table, empty.partition, empty.prefix)
    groups = []
    for f in members:
        if current.files and current.bytes + f.file_size_in_bytes > target_bytes:
            groups.append(current)
            current = Group(empty.table, empty.partition, empty.prefix)
        current.files.append(f)
    groups.append(current)
    return groups
