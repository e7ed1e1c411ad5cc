"""Step 2, manifests: ``main``'s data manifests clustered by the days their runs ingested.

Every nightly commit adds a manifest to ``main``, and planning a scan opens every manifest
it cannot prune by its partition summary. Where ``main`` has at least ``min_manifests``
data manifests, they are clustered by the day their runs ingested (the ``ingest_dt``
partition of records, batches and markers): one manifest per day of the newest week, per
ISO week of the five before, per month back to 400 days, per year before that
(:func:`ingest_period`; split further past the table's
``commit.manifest.target-size-bytes``, Iceberg's default 8 MiB). A manifest that already
holds exactly one period is kept as it is; files of no known day (tables without
``ingest_dt``, files from before it existed) share one. So the dedupe's scan, bounded to
the days of the runs it can overlap, opens a manifest or two however long the history,
and a full scan ~25 a year.

One snapshot that changes no data file (an ``append`` of nothing: pyiceberg 0.12 has no
rewrite-manifests operation; :func:`cluster` is what its fast append writes, through
:func:`spark_jobs.warehouse.snapshots.rewrite_manifests`). Entries keep their snapshot
ids and sequence numbers; a compare-and-swap on ``main``, tried again when ``main`` moved.
"""

from __future__ import annotations

import datetime as dt
import functools
from dataclasses import dataclass

from spark_jobs import schemas
from spark_jobs.maintenance.naming import snapshot_summary
from spark_jobs.warehouse import MAIN, Warehouse, commits, snapshots

#: merge main's data manifests when there are at least this many
DEFAULT_MIN_MANIFESTS = 2


def merge_manifests(wh: Warehouse, name: str, *, min_manifests: int = DEFAULT_MIN_MANIFESTS,
                    dry_run: bool = False, attempts: int = commits.COMMIT_ATTEMPTS) -> dict:
    """Cluster ``main``'s data manifests of table ``name`` by ingest period (the module's
    docstring). Returns how many there were and are."""
    out = {"manifests_before": 0, "manifests_after": 0}

    def step(attempt: int) -> dict:
        table = wh.load(name)
        if table is None or table.current_snapshot() is None:
            return out
        before = main_data_manifests(table)
        out["manifests_before"] = out["manifests_after"] = len(before)
        positions = _ingest_positions(table)
        if dry_run or not _worth_merging(before, positions, min_manifests):
            return out  # (a dry run says how many there are)
        _commit_clustered(table, positions)  # refused where main moved: planned again
        out["manifests_after"] = len(main_data_manifests(wh.load(name)))
        return out

    return commits.retry(f"{name}: could not merge manifests", step, attempts=attempts)


def main_data_manifests(table) -> list:
    """The data manifests of the table's current snapshot (``main``'s head); delete
    manifests, which this pipeline never writes, are left out, not refused."""
    from pyiceberg.manifest import ManifestContent

    return [m for m in table.current_snapshot().manifests(table.io)
            if m.content == ManifestContent.DATA]


def _worth_merging(manifests: list, positions: dict[int, int], min_manifests: int) -> bool:
    """Whether clustering data ``manifests`` changes anything: there are at least
    ``min_manifests``, and some hold no live file or do not match the plan already."""
    live = [m for m in manifests if m.has_added_files() or m.has_existing_files()]
    changes = plan_manifests(live, positions).changes or len(live) < len(manifests)
    return len(manifests) >= max(2, min_manifests) and changes


def _commit_clustered(table, positions: dict[int, int]) -> None:
    """One snapshot on ``main`` with its manifests :func:`cluster`-ed."""
    from pyiceberg.table import TableProperties as P

    target = int(table.properties.get(P.MANIFEST_TARGET_SIZE_BYTES,
                                      P.MANIFEST_TARGET_SIZE_BYTES_DEFAULT))
    snapshots.rewrite_manifests(
        table, functools.partial(cluster, positions=positions, target_bytes=target),
        summary=snapshot_summary("manifests", 0), branch=MAIN)


# ------------------------------------------------------------------ the periods


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


# ------------------------------------------------------------------ the plan


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


# ------------------------------------------------------------------ the rewrite


def cluster(manifests, entries, new_writer, *, positions: dict[int, int],
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
    keep = dict(plan.keep)
    grouped, sizes = _entries_by_period(plan, keep, entries, positions)
    return _write_clusters(grouped, sizes, new_writer, target_bytes) + list(keep.values()) + other


def _entries_by_period(plan: ManifestPlan, keep: dict, entries, positions: dict[int, int]):
    """``({(spec id, period): entries}, {key: estimated bytes})`` of the manifests the
    plan splits or merges. A split manifest with entries of a period whose one manifest
    ``keep`` holds takes that manifest out of ``keep`` and into the rewrite."""

    def key_of(m, entry) -> tuple:
        pos = positions.get(m.partition_spec_id)
        day = entry.data_file.partition[pos] if pos is not None else None
        return m.partition_spec_id, ingest_period(day, plan.newest)

    grouped: dict[tuple, list] = {}
    sizes: dict[tuple, float] = {}
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
    return grouped, sizes


def _write_clusters(grouped: dict, sizes: dict, new_writer, target_bytes: int) -> list:
    """A manifest per key of ``grouped`` (several where its ``sizes`` exceed
    ``target_bytes``), entries in file path order, each written as ``existing``."""
    written = []
    for key, group in sorted(grouped.items(), key=lambda kv: repr(kv[0])):
        group.sort(key=lambda e: e.data_file.file_path)
        step = -(-len(group) // max(1, -(-int(sizes[key]) // target_bytes)))
        for i in range(0, len(group), step):
            with new_writer(key[0]) as writer:
                for entry in group[i:i + step]:
                    writer.existing(entry)
            written.append(writer.to_manifest_file())
    return written
