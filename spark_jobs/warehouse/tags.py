"""A per-key state table's state as of each night, as an Iceberg tag (issue 35;
:mod:`spark_jobs.derive.keyed`): ``night-YYYY-MM-DD`` (:func:`spark_jobs.layout.night_tag`)
on ``main``'s snapshot once a run of that night is published, so that "the table as of
night N" is a tag read in any engine (pyiceberg ``snapshot_by_name``, Spark ``VERSION AS
OF 'night-…'``).

A run's night is the latest night of its ledger rows. A rerun of a night moves the
night's tag to the new state (the same rows where the input is the same). A run of a
night *before* the table's latest tagged night (a backfill) leaves the tags as they are:
``main`` then holds later nights' changes too, which is not the state as of that night.
"""

from __future__ import annotations

from spark_jobs import layout, schemas


def run_night(wh, run_id: str) -> str | None:
    """The latest night of run ``run_id``'s rows in the published ledger (None: none)."""
    from pyiceberg.expressions import EqualTo

    ledger = wh.load("ledger")
    if ledger is None or ledger.current_snapshot() is None:
        return None
    rows = ledger.scan(row_filter=EqualTo("run_id", run_id),
                       selected_fields=(schemas.NIGHT,)).to_arrow()
    return layout.run_night(rows.column(schemas.NIGHT).to_pylist())


def tag_night(wh, names, night: str) -> dict[str, int]:
    """Tag each table of ``names`` ``night-<night>`` at its ``main`` (unless a later
    night's tag exists: see the module's text); ``{table: snapshot tagged}``."""
    from . import commits
    from .snapshots import commit_refs

    tag, out = layout.night_tag(night), {}
    for name in names:
        def step(attempt: int, name=name) -> int | None:
            table = wh.table(name)
            refs = table.refs()
            later = [r for r in refs if r.startswith(layout.NIGHT_TAG_PREFIX) and r > tag]
            head = table.current_snapshot().snapshot_id
            now = refs[tag].snapshot_id if tag in refs else None
            if later or now == head:
                return None
            commit_refs(table, {}, tags={tag: (now, head)})
            return head

        # out of tries: the table is left untagged, the publish goes on
        head = commits.retry(f"{name}: could not tag {tag}", step, exhausted=lambda: None)
        if head is not None:
            out[name] = head
    return out


def tag_run(wh, run_id: str, names) -> dict[str, int]:
    """Tag the per-key state tables among ``names`` with run ``run_id``'s night, once
    published (nothing where the run names no night)."""
    keyed = [n for n in names if layout.keyed_table(n) is not None]
    night = run_night(wh, run_id) if keyed else None
    return tag_night(wh, keyed, night) if night else {}


__all__ = ["run_night", "tag_night", "tag_run"]
