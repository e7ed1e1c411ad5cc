"""Reading a table's history, read-only: the snapshots a branch descends from, their
``kafkalog.*`` summaries, the data files a snapshot holds and the offsets they span,
and the publish-time overlap check (:func:`check_overlap`) built on them.

Nothing here commits; every function takes a pyiceberg ``Table`` as loaded.
"""

from __future__ import annotations

from spark_jobs.warehouse.errors import CatalogError, ConflictError
from spark_jobs.warehouse.naming import PUBLISHED_FROM, ROWS, RUN_ID, STAGE, is_run_file

#: how to find a file's offset range, for the publish-time overlap check
OFFSET_COLUMNS = {"records": ("offset", "offset"), "markers": ("offset", "offset"),
                  "batches": ("base_offset", "last_offset")}


def ancestry(table, snapshot_id: int | None) -> list[int]:
    """Snapshot ids from ``snapshot_id`` back to the first (as far as history is kept)."""
    out = []
    while snapshot_id is not None:
        out.append(snapshot_id)
        snap = table.metadata.snapshot_by_id(snapshot_id)
        snapshot_id = snap.parent_snapshot_id if snap is not None else None
    return out


def fork_point(table, branch: str) -> int:
    """The newest ``main`` snapshot the branch descends from."""
    main = set(ancestry(table, table.current_snapshot().snapshot_id))
    for sid in ancestry(table, table.refs()[branch].snapshot_id):
        if sid in main:
            return sid
    raise CatalogError(f"{table.name()}: branch {branch} shares no snapshot with main "
                       "(were its snapshots expired?)")


def snapshot_summary(table, snapshot_id: int) -> dict[str, str]:
    snap = table.metadata.snapshot_by_id(snapshot_id)
    if snap is None or snap.summary is None:
        return {}
    return {k: v for k, v in snap.summary.additional_properties.items() if k.startswith("kafkalog.")}


def is_published(table, head: int) -> bool:
    """Whether branch head ``head`` is on ``main``: an ancestor, or re-applied."""
    for sid in ancestry(table, table.current_snapshot().snapshot_id):
        if sid == head or snapshot_summary(table, sid).get(PUBLISHED_FROM) == str(head):
            return True
    return False


def published_snapshot(table, run_id: str) -> int | None:
    """The newest ``main`` snapshot committed for run ``run_id`` (None: not published)."""
    for sid in ancestry(table, table.current_snapshot().snapshot_id):
        if snapshot_summary(table, sid).get(RUN_ID) == run_id:
            return sid
    return None


def main_history(table) -> list[dict]:
    """``main``'s snapshots, oldest first: id, time (ms), run id, stage, rows."""
    out = []
    for sid in reversed(ancestry(table, table.current_snapshot().snapshot_id)):
        snap = table.metadata.snapshot_by_id(sid)
        s = snapshot_summary(table, sid)
        out.append({"snapshot_id": sid, "timestamp_ms": snap.timestamp_ms,
                    "run_id": s.get(RUN_ID), "stage": s.get(STAGE), "rows": s.get(ROWS)})
    return out


def data_manifests(table, snapshot_id: int | None) -> list:
    """The manifests of a snapshot (None: none). Raises where it has delete files: this
    pipeline never writes them, and plain-Parquet readers would ignore them."""
    if snapshot_id is None:
        return []
    from pyiceberg.manifest import ManifestContent

    manifests = table.metadata.snapshot_by_id(snapshot_id).manifests(table.io)
    if any(m.content != ManifestContent.DATA for m in manifests):
        raise CatalogError(f"{table.name()}: snapshot {snapshot_id} has delete files, "
                           "which this pipeline never writes and cannot read")
    return manifests


def live_files(table, snapshot_id: int | None) -> list:
    """The data files of a snapshot (None: none; :func:`data_manifests`)."""
    from pyiceberg.manifest import ManifestEntryStatus

    out = []
    for manifest in data_manifests(table, snapshot_id):
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            if entry.status != ManifestEntryStatus.DELETED:
                out.append(entry.data_file)
    return out


def offset_ranges(table, name: str, files) -> list[tuple[str, int, int, int, int]]:
    """``(topic, partition lo, partition hi, offset lo, offset hi)`` of each file, from
    its partition value and column statistics (a file without them spans everything)."""
    from pyiceberg.conversions import from_bytes

    lo_col, hi_col = OFFSET_COLUMNS[name]
    schema = table.schema()
    fields = {c: schema.find_field(c) for c in ("partition", lo_col, hi_col)}
    topic_pos = [f.name for f in table.spec().fields].index("topic")
    inf = 2 ** 63

    def bound(f, col, which, default):
        raw = (f.lower_bounds if which == "lo" else f.upper_bounds).get(fields[col].field_id)
        return default if raw is None else from_bytes(fields[col].field_type, raw)

    return [(f.partition[topic_pos], bound(f, "partition", "lo", -inf), bound(f, "partition", "hi", inf),
             bound(f, lo_col, "lo", -inf), bound(f, hi_col, "hi", inf)) for f in files]


def check_overlap(table, name: str, run_id: str, fork: int, main: int, head: int) -> None:
    """Raise :class:`ConflictError` where a snapshot committed to ``main`` after ``fork``
    (by another run) added rows at offsets this run's branch adds to the same
    topic-partitions: this run deduplicated against ``fork`` and did not see them."""
    if name not in OFFSET_COLUMNS:
        return
    base = {f.file_path for f in live_files(table, fork)}
    theirs = [f for f in live_files(table, main) if f.file_path not in base
              and not is_run_file(f.file_path, run_id)]
    if not theirs:
        return
    mine = offset_ranges(table, name, [f for f in live_files(table, head)
                                       if is_run_file(f.file_path, run_id) and f.file_path not in base])
    clash = []
    for f, (t, plo, phi, olo, ohi) in zip(theirs, offset_ranges(table, name, theirs)):
        for (t2, plo2, phi2, olo2, ohi2) in mine:
            if t == t2 and plo <= phi2 and plo2 <= phi and olo <= ohi2 and olo2 <= ohi:
                clash.append(f)
                break
    if clash:
        others = set()
        adders = _adding_runs(table, main, fork)
        for f in clash:
            others.add(adders.get(f.file_path, "?"))
        raise ConflictError(
            f"{name}: run(s) {', '.join(sorted(others))} published offsets of the same "
            f"topic-partitions to main after run {run_id!r} read it ({len(clash)} files, e.g. "
            f"{clash[0].file_path}); this run's output may duplicate them. Run {run_id!r} "
            "again (it deduplicates against the new main), or discard it",
            table=name, runs=sorted(others), files=len(clash))


def _adding_runs(table, main: int, fork: int) -> dict[str, str]:
    """File path -> run id of the ``main`` snapshot (after ``fork``) that added it."""
    from pyiceberg.manifest import ManifestEntryStatus

    out = {}
    for sid in ancestry(table, main):
        if sid == fork:
            break
        run = snapshot_summary(table, sid).get(RUN_ID, f"snapshot {sid}")
        snap = table.metadata.snapshot_by_id(sid)
        for manifest in snap.manifests(table.io):
            if manifest.added_snapshot_id != sid:
                continue
            for entry in manifest.fetch_manifest_entry(table.io):
                if entry.status == ManifestEntryStatus.ADDED:
                    out.setdefault(entry.data_file.file_path, run)
    return out
