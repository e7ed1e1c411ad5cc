"""Results: what a decode task hands back to the driver (:class:`TaskResult`), and the
driver's views of them — the data files by table (:func:`task_files`), the ledger's rows
(:func:`ledger_table`).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

import pyarrow as pa

from spark_jobs import schemas


@dataclass(slots=True)
class TaskResult:
    """One task's outcome: its ledger row (:data:`spark_jobs.schemas.LEDGER`'s columns), the
    data files it wrote by table, whether they went to the run's scratch to be
    deduplicated (``pending``), and its wall and CPU time (the worker's, its writer thread
    and the reads ahead of the next tasks included: the job's timings, not ledger columns)."""

    ledger: dict
    files: dict[str, list[str]] = field(default_factory=dict)
    pending: bool = False
    seconds: float = 0.0
    cpu_seconds: float = 0.0

    @property
    def is_pending(self) -> bool:
        """Whether its output waits in the scratch, to be deduplicated (a failed task's
        finding never does)."""
        return self.pending and self.ledger["action"] != "failed"


def task_files(results: list[TaskResult], *, pending: bool = False) -> dict[str, list[str]]:
    """The data files of the tasks' ``results``: those in the scratch, to be deduplicated
    (``pending``, :attr:`TaskResult.is_pending`), or the others."""
    files: dict[str, list[str]] = {n: [] for n in schemas.DECODE_TABLES}
    for r in results:
        if r.is_pending == pending:
            for name, fs in r.files.items():
                files[name].extend(fs)
    return files


def ledger_table(results: list[TaskResult]) -> pa.Table:
    """The tasks' ledger rows as the ``ledger`` table's columns."""
    def ts(v):
        return dt.datetime.fromisoformat(v) if isinstance(v, str) else v
    clean = [{**{k: r.ledger.get(k) for k in schemas.LEDGER.names},
              "mtime": ts(r.ledger.get("mtime")), "ingested_at": ts(r.ledger.get("ingested_at"))}
             for r in results]
    return pa.Table.from_pylist(clean, schema=schemas.LEDGER)


__all__ = ["TaskResult", "ledger_table", "task_files"]
