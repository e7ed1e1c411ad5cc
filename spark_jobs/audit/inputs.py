"""What the audit reads of a run: the snapshots, the run's tables as of them, and the frames
every check takes (:class:`RunFrames`).

The audit reads the heads of the run's branch ``run_<run token>`` — exactly what publish will
make current — or ``main`` where the run has no branch (already published).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from spark_jobs import schemas
from spark_jobs.warehouse import Warehouse, branch_name

from .policy import Policy

#: the run's tables every audit reads (records, batches, markers, findings, ledger)
TABLES = schemas.DECODE_TABLES


def audited_snapshots(wh: Warehouse, run_id: str) -> dict[str, tuple[str, int]]:
    """Per table: ``(where, snapshot id)`` the audit reads run ``run_id`` from: the head
    of its branch, or ``main`` where it has none (already published)."""
    out = {}
    for name in wh.run_tables():  # the decode tables and the derived ones the warehouse has
        head = wh.staged_snapshot(name, run_id)
        out[name] = (branch_name(run_id), head) if head is not None \
            else ("main", wh.table(name).current_snapshot().snapshot_id)
    return out


def materialize(df):
    """``df`` computed once and kept on the executors: every later query reads
    these rows, not ``df``'s plan (a table's files are read once, not once per check)."""
    return df.localCheckpoint()


def load_tables(spark, wh: Warehouse, run_id: str, snapshots: dict[str, tuple[str, int]]):
    """The run's five tables, as of ``snapshots`` (:func:`audited_snapshots`), each read once
    (:func:`materialize`)."""
    from spark_jobs.tables import read_table

    return {name: materialize(read_table(spark, wh, name, snapshot=snapshots[name][1],
                                         run_id=run_id))
            for name in TABLES}


@dataclass(frozen=True)
class RunFrames:
    """What the checks read of one audited run (each check's ``observe`` takes it).

    ``tables``: the run's :data:`TABLES`; ``topics``: every topic the run has rows of (and
    those of partitions it lacks); ``listed``: :func:`.context.listed_segments`; ``prior``:
    :func:`.context.prior_ends` (None: nothing known before the run); ``kinds``: the
    batches' kinds (:func:`.records.batch_kinds`, computed once for the record checks);
    ``internal``: the frames of :mod:`.internal_checks` where the run has them; ``absent``:
    :func:`.absence.missing_partitions` where the run names a night."""

    tables: Mapping[str, Any]
    policy: Policy
    run_id: str
    topics: tuple[str, ...]
    listed: Any
    kinds: Any
    prior: Any = None
    internal: Mapping[str, Any] = field(default_factory=dict)
    absent: Any = None

    @property
    def records(self):
        return self.tables["records"]

    @property
    def batches(self):
        return self.tables["batches"]

    @property
    def markers(self):
        return self.tables["markers"]

    @property
    def findings(self):
        return self.tables["findings"]

    @property
    def ledger(self):
        return self.tables["ledger"]

    @property
    def spark(self):
        return self.tables["batches"].sparkSession
