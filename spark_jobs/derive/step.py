"""What a derive step reads of one submission (:class:`Submission`), and what it hands back.

Every step of :mod:`spark_jobs.derive` (``internal``, ``log_dirs``, ``remote``, ``typed``,
``producer_txns``, ``streams_groups``) is
``derive(sub: Submission) -> ({table: [data file URIs]}, {table: rows})``, its findings under
``findings``; the decode job (:func:`spark_jobs.decode.job.derive`) makes one
:class:`Submission` after the dedupe and runs the steps over it (:func:`merge` adds one step's
output to another's). The steps that read the run's branch as committed
(``producer_txns``, ``streams_groups``) run over the same submission after the commit, with
``files`` set (:func:`spark_jobs.decode.job.derive_after_commit`), and the job commits what
they wrote.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: a step's output: ``({table: [data file URIs]}, {table: rows})``
Output = tuple[dict[str, list[str]], dict[str, int]]


@dataclass(frozen=True)
class Submission:
    """One submission of the decode job, as the derive steps see it."""

    spark: object  # the job's SparkSession
    ctx: object  # the run's writing context (spark_jobs.decode.writing.Context: roots, s3)
    wh: object  # the run's Warehouse
    run_id: str
    night: str | None  # the job's --night (a segment's own night wins where it has one)
    records: list[str]  # the run's deduplicated records data files
    segments: list = field(default_factory=list)  # the listing's segments (decode.planning)
    state_uris: list[str] = field(default_factory=list)  # the partitions' state files
    log_dir_files: list[dict] = field(default_factory=list)  # {"uri", "night"} each
    registry: object = None  # the run's Schema Registry (decode.values), None: none
    bases: dict = field(default_factory=dict)  # table -> the snapshot of main the run began from
    ledger: object = None  # the ledger as main held it (a pyarrow Table)
    #: every data file the submission wrote, by table (the decode tables' and the derived
    #: ones'): what the steps after the commit read (``decode.job.AFTER_COMMIT_STEPS``)
    files: dict = field(default_factory=dict)
    chunk_id: str | None = None  # the job's --chunk-id (None: a whole run)

    def read_branch(self, name: str, **kwargs):
        """Table ``name`` on the run's branch as committed so far, through pyiceberg
        (:func:`spark_jobs.tables.read_arrow`, ``kwargs`` its ``row_filter``/``columns``;
        empty where the warehouse has no table ``name``). A table made after this submission
        began (not in ``bases``) by another submission of the run that has not yet joined
        its branch (:meth:`~spark_jobs.warehouse.Warehouse.begin_table`, at that
        submission's commit) holds none of the run's rows: it reads empty, as it read a
        moment before the other submission made it. A table in ``bases`` has the branch."""
        from spark_jobs import tables
        from spark_jobs.warehouse import branch_name

        return tables.read_arrow(self.wh, name, ref=branch_name(self.run_id),
                                 ref_may_be_missing=name not in self.bases, **kwargs)


def merge(into: Output, more: Output) -> Output:
    """``more``'s files and row counts added to ``into``'s (in place; returned)."""
    files, rows = into
    for name, fs in more[0].items():
        files.setdefault(name, []).extend(fs)
    for name, n in more[1].items():
        rows[name] = rows.get(name, 0) + n
    return into


__all__ = ["Output", "Submission", "merge"]
