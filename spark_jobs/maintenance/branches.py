"""The open run branches maintenance must leave alone: every branch but ``main`` is a run
between plan and publish (or one that crashed there). Expiry keeps what such a branch still
needs (:mod:`.expiry`); compaction leaves alone the files whose offsets could meet what
one staged (:mod:`.compaction`): that run's publish would take a rewritten file for
another run's output over the same offsets
(:func:`spark_jobs.warehouse.history.check_overlap`).
"""

from __future__ import annotations

from spark_jobs.warehouse import MAIN, CatalogError, history


def is_branch(ref) -> bool:
    """Whether a pyiceberg ``SnapshotRef`` is a branch (not a tag)."""
    return str(getattr(ref.snapshot_ref_type, "value", ref.snapshot_ref_type)) == "branch"


def open_branches(table) -> dict:
    """``{branch name: SnapshotRef}`` of the table's branches other than ``main``."""
    return {name: ref for name, ref in table.refs().items() if name != MAIN and is_branch(ref)}


def staged_ranges(table, name: str) -> list[tuple[str, tuple]]:
    """``(branch, range)`` of what each open run branch staged: its own files added
    since its fork point (what its publish compares with ``main``'s new files); ranges
    as :func:`spark_jobs.warehouse.history.offset_ranges` gives them. Empty for a table
    whose files the publish does not check by offset."""
    if name not in history.OFFSET_COLUMNS:
        return []
    out = []
    for ref_name, ref in open_branches(table).items():
        try:
            fork = history.fork_point(table, ref_name)
            base = {f.file_path for f in history.live_files(table, fork)}
        except CatalogError:
            base = set()
        staged = [f for f in history.live_files(table, ref.snapshot_id) if f.file_path not in base]
        out.extend((ref_name, r) for r in history.offset_ranges(table, name, staged))
    return out


def ranges_meet(a: tuple, b: tuple) -> bool:
    """Whether two ``(topic, partition lo, hi, offset lo, hi)`` ranges share an offset of
    a topic-partition."""
    t, plo, phi, olo, ohi = a
    t2, plo2, phi2, olo2, ohi2 = b
    return t == t2 and plo <= phi2 and plo2 <= phi and olo <= ohi2 and olo2 <= ohi


def meeting_branch(span: tuple, staged, own: str | None = None) -> str | None:
    """The first open branch of ``staged`` (:func:`staged_ranges`) whose staged offsets
    ``span`` could meet; branch ``own`` is left out (a run's own files never conflict
    with its publish)."""
    for branch, staged_range in staged:
        if branch != own and ranges_meet(span, staged_range):
            return branch
    return None
