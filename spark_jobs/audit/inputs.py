"""What the audit reads of a run: the snapshots, the run's tables as of them, and the frames
every check takes (:class:`RunFrames`).

The audit reads the heads of the run's branch ``run_<run token>`` — exactly what publish will
make current — or ``main`` where the run has no branch (already published).
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from spark_jobs import schemas
from spark_jobs.session import INTERPRETED_SQL
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


def materialize(df, partitions: int | None = None):
    """``df`` computed once and kept on the executors: every later query reads
    these rows, not ``df``'s plan (a table's files are read once, not once per check); in at
    most ``partitions`` partitions (default: the audit's shuffle partitions,
    :func:`shuffle_partitions`), so that every later scan of a small table is one task, not
    one per file split."""
    most = partitions if partitions is not None else \
        int(df.sparkSession.conf.get(SHUFFLE_PARTITIONS, "200"))
    return df.coalesce(max(1, most)).localCheckpoint()


#: the prefix of the audit's Spark job descriptions (:func:`described`)
JOB_PREFIX = "check_quality: "


@contextmanager
def described(spark, what: str):
    """The Spark jobs started inside the block are described ``check_quality: <what>`` (the
    Spark UI's and the event log's job description: which step or family of the audit ran
    them, :mod:`.job`); the description before it is restored after."""
    sc = spark.sparkContext
    before = sc.getLocalProperty("spark.job.description")
    sc.setJobDescription(JOB_PREFIX + what)
    try:
        yield
    finally:
        sc.setJobDescription(before)


@contextmanager
def sql_conf(spark, settings: dict):
    """Spark SQL ``settings`` for the block only (the session's values restored after)."""
    before = {k: spark.conf.get(k, None) for k in settings}
    for k, v in settings.items():
        spark.conf.set(k, str(v))
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)


def load_tables(spark, wh: Warehouse, run_id: str, snapshots: dict[str, tuple[str, int]],
                sizes: dict | None = None, *, sized: bool = False):
    """The run's five tables, as of ``snapshots`` (:func:`audited_snapshots`), each read once
    (:func:`materialize`); ``sizes``: gets each table's bytes of Parquet read. ``sized``: once
    their files are planned (their sizes known) and before they are read, the session gets the
    audit's settings sized to them (:func:`sized_settings`; the audit restores the session's
    after it)."""
    from spark_jobs.tables import read_table

    sizes = {} if sizes is None else sizes

    def counted(name):
        def keep(table, data_file):
            sizes[name] = sizes.get(name, 0) + data_file.file_size_in_bytes
            return True
        return keep

    frames = {name: read_table(spark, wh, name, snapshot=snapshots[name][1], run_id=run_id,
                               keep=counted(name)) for name in TABLES}
    for key, value in (sized_settings(spark, sizes) if sized else {}).items():
        spark.conf.set(key, value)
    return {name: materialize(df, partitions_for(sizes.get(name, 0)))
            for name, df in frames.items()}


#: the audit's Spark settings (:func:`.job.audit`): adaptive execution off, so that a query
#: is one Spark job (and one job per broadcast) instead of one per stage, each re-planning the
#: whole query: the audit's queries are many small ones over tables read once
ADAPTIVE = "spark.sql.adaptive.enabled"
SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
#: the bytes of the run's Parquet files per shuffle partition of the audit's queries
BYTES_PER_PARTITION = 32 << 20


def partitions_for(size: int) -> int:
    """Partitions for ``size`` bytes of Parquet: one per :data:`BYTES_PER_PARTITION`, at least
    one."""
    return max(1, -(-size // BYTES_PER_PARTITION))


def shuffle_partitions(spark, sizes: dict) -> int:
    """The audit's shuffle partitions, sized to the run's tables (``sizes``: bytes of Parquet
    per table, :func:`load_tables`): :func:`partitions_for` their sum, at most the session's
    ``spark.sql.shuffle.partitions``."""
    most = int(spark.conf.get(SHUFFLE_PARTITIONS, "200"))
    return min(most, partitions_for(sum(sizes.values())))


#: a run of at most this many bytes of Parquet (its five tables) is a small run
#: (:data:`SMALL_RUN`): ~18 times the demo's night 2 (230 KB, a few hundred records)
SMALL_RUN_BYTES = 4 << 20
BROADCAST_THRESHOLD = "spark.sql.autoBroadcastJoinThreshold"
#: a small run's settings. Spark's interpreted evaluation
#: (:data:`spark_jobs.session.INTERPRETED_SQL`): generating and compiling Java code for the
#: audit's ~90 jobs of the demo's night was a third of its CPU time and ~760 compilations
#: (~20 s of compile time, Spark's ``CodegenMetrics``). No broadcast joins: each broadcast
#: was a Spark job of its own (the observations' query was 34 jobs; with every table one
#: partition, its joins' shuffles are stages of one job: 5). A larger run's queries keep
#: Spark's defaults.
SMALL_RUN = {**INTERPRETED_SQL, BROADCAST_THRESHOLD: "-1"}
#: the settings :func:`sized_settings` may set (``audit`` restores the session's after)
SIZED = (SHUFFLE_PARTITIONS, *SMALL_RUN)


def sized_settings(spark, sizes: dict) -> dict[str, str]:
    """The audit's settings sized to the run's tables (``sizes``: bytes of Parquet per table):
    its shuffle partitions (:func:`shuffle_partitions`) and, for a run of at most
    :data:`SMALL_RUN_BYTES`, :data:`SMALL_RUN`'s."""
    out = {SHUFFLE_PARTITIONS: str(shuffle_partitions(spark, sizes))}
    if sum(sizes.values()) <= SMALL_RUN_BYTES:
        out.update(SMALL_RUN)
    return out


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
