"""Step 3, snapshot expiry (pyiceberg's ``expire_snapshots``): snapshots older than
``older_than``, except the last ``retain_last`` of ``main``, every branch and tag head,
and what an open run branch still needs: its own snapshots, its fork point and ``main``
from its head down to that fork point (publish checks that the fork point is an ancestor
of ``main``, and compares against its files). Time travel reaches only what is kept.
"""

from __future__ import annotations

import datetime as dt

from spark_jobs.maintenance.branches import open_branches
from spark_jobs.warehouse import CommitRefused, Warehouse, commits, history

DEFAULT_OLDER_THAN_DAYS = 7.0
DEFAULT_RETAIN_LAST = 10


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
    keep.update(ref.snapshot_id for ref in table.refs().values())
    for ref in open_branches(table).values():
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
                 attempts: int = commits.COMMIT_ATTEMPTS) -> dict:
    """Expire table ``name``'s old snapshots (the module's docstring). Returns how many
    snapshots there were, are, and went."""
    out = {"snapshots_before": 0, "snapshots_after": 0, "expired_snapshots": 0}
    cutoff = int(older_than.timestamp() * 1000)

    def step(attempt: int) -> dict:
        table = wh.load(name)
        if table is None or table.current_snapshot() is None:
            return out
        out["snapshots_before"] = out["snapshots_after"] = len(table.metadata.snapshots)
        ids = expirable_snapshots(table, older_than_ms=cutoff, retain_last=retain_last)
        if not ids or dry_run:
            out["expired_snapshots"] = len(ids)
            out["snapshots_after"] -= len(ids)
            return out

        def commit():
            try:
                table.maintenance.expire_snapshots().by_ids(ids).commit()
            except ValueError as err:  # one went meanwhile (or a lost race): plan again
                raise CommitRefused(f"{name}: the table changed while expiring: {err}") from err

        commits.send(table, commit, landed=lambda t: not any(
            t.metadata.snapshot_by_id(i) is not None for i in ids))
        out["expired_snapshots"] = len(ids)
        out["snapshots_after"] = len(wh.load(name).metadata.snapshots)
        return out

    return commits.retry(f"{name}: could not expire snapshots", step, attempts=attempts)
