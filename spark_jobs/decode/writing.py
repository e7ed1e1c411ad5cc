"""Write: the decode job's context and its tables' rows as the executors (and the driver,
for its small tables) write them, with :mod:`spark_jobs.parquet`'s writer.

One file per task, table and partition value (``topic``, the run's ``ingest_dt`` for
the tables the dedupe reads, and ``dt`` for records), the partition columns inside
(:func:`lineage`, :func:`records_out`). Files are written locally and moved into the
table's data folder (or the run's scratch, for output to be deduplicated) when the task
ends; the driver commits them.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from kafkalog.folders import LIVE, parse_partition_folder
from spark_jobs import schemas, storage
from spark_jobs.decode.planning import Task
from spark_jobs.parquet import PartWriter, partition_path, write_schema
from spark_jobs.warehouse import run_files_prefix

DEFAULT_SLACK = 1024 * 1024
DEFAULT_MAX_RAW = 64 * 1024 * 1024

#: how many tasks ahead a Spark task of several small tasks starts reading their S3
#: objects (spark_jobs.decode.executor's read-ahead; 0: none)
DEFAULT_READ_AHEAD = 4


@dataclass(frozen=True)
class Context:
    """What every executor task needs (picklable)."""

    run_id: str
    prefix: str  # file-name prefix of this attempt: <run_token>[~c<chunk>]~<attempt>
    roots: dict  # table -> where its data files go (the Iceberg table's data folder)
    scratch: dict  # table -> where output to be deduplicated goes (the run's scratch)
    s3: storage.S3Config | None
    max_raw: int = DEFAULT_MAX_RAW
    slack: int = DEFAULT_SLACK
    ingested_at: str = ""
    read_ahead: int = DEFAULT_READ_AHEAD
    #: the run's Schema Registry (kafkalog.schemas; schemas as text, pickled with the
    #: context), or None: the records' value columns stay null (spark_jobs/decode/values.py)
    registry: object = None
    #: the tier remote segments are read from, with its key ring
    #: (:class:`spark_jobs.decode.tier.TierAccess`), or None
    tier: object = None

    @property
    def ingest_dt(self) -> str | None:
        """The run's :data:`schemas.INGEST_DT` partition value."""
        return schemas.ingest_day(self.ingested_at) if self.ingested_at else None


def make_context(wh, run_id: str, attempt: str, *, chunk_id: str | None = None,
                 **kwargs) -> Context:
    """The executors' context for one attempt of a submission of run ``run_id`` into
    warehouse ``wh`` (an :class:`~spark_jobs.warehouse.Warehouse`)."""
    scratch = f"{wh.scratch_root(run_id)}/{attempt}"
    return Context(run_id=run_id, prefix=run_files_prefix(run_id, chunk_id) + attempt,
                   roots={n: wh.data_root(n) for n in schemas.DECODE_TABLES},
                   scratch={n: f"{scratch}/{n}" for n in schemas.DECODE_TABLES},
                   s3=wh.s3, **kwargs)


def lineage(batch: pa.RecordBatch, table: str, task: Task, ctx: Context) -> pa.Table:
    """``batch`` (a kafkalog table's rows) with the warehouse table's lineage and
    partition columns (records: all but ``dt``, which :func:`records_out` adds)."""
    n = batch.num_rows
    cols = {name: batch.column(name) for name in batch.schema.names}
    cols["partition"] = pa.repeat(pa.scalar(task.segment.partition, pa.int32()), n)
    cols["segment"] = _constant(task.segment.uri, n)
    cols["segment_base_offset"] = pa.repeat(pa.scalar(task.segment.base_offset, pa.int64()), n)
    cols["run_id"] = _constant(ctx.run_id, n)
    cols["topic"] = _constant(task.segment.topic, n)
    cols[schemas.INGEST_DT] = _constant(ctx.ingest_dt, n)
    cols[schemas.FOLDER_STATE] = _constant(folder_state(task.segment.uri), n)
    target = write_schema(table)
    names = [name for name in target.names if name in cols]
    out = pa.table([cols[name] for name in names], names=names)
    want = pa.schema([target.field(name) for name in names])
    return out if out.schema == want else out.cast(want)


def folder_state(segment_uri: str) -> str | None:
    """The records' ``folder_state`` of a segment: null in a live partition folder, else
    ``delete``, ``future`` or ``stray`` (Kafka's renamed folders: kafkalog.folders)."""
    parsed = parse_partition_folder(segment_uri.rsplit("/", 2)[-2]) if "/" in segment_uri \
        else None
    return None if parsed is None or parsed.state == LIVE else parsed.state


def _constant(value, n: int) -> pa.DictionaryArray:
    """``n`` rows of one string (or null): a dictionary array, as Parquet stores it best."""
    zeros = pa.repeat(pa.scalar(0, pa.int32()), n)
    return pa.DictionaryArray.from_arrays(zeros, pa.array([value], pa.string()))


def day_partitions(ts: pa.ChunkedArray | pa.Array) -> list[tuple[str, pa.Array | None]]:
    """``[(dt, mask)]`` for the rows of ``ts``; mask None means every row."""
    ms = ts.cast(pa.int64())
    # floor division (integer division truncates towards zero; timestamps can be negative)
    days = pc.divide(pc.if_else(pc.less(ms, 0), pc.subtract(ms, 86_399_999), ms), 86_400_000)
    unique = pc.unique(days).to_pylist()
    if len(unique) == 1:
        d = unique[0]
        return [("none" if d is None else _day(d), None)]
    out = []
    for d in unique:
        mask = pc.is_null(days) if d is None else pc.fill_null(pc.equal(days, d), False)
        out.append(("none" if d is None else _day(d), mask))
    return out


def _day(days: int) -> str:
    """``YYYY-MM-DD`` of an epoch day; a producer's timestamp outside years 1-9999 gets
    ``out_of_range`` (its record keeps the raw value in ``timestamp``)."""
    try:
        return (dt.date(1970, 1, 1) + dt.timedelta(days=days)).isoformat()
    except OverflowError:
        return "out_of_range"


def records_out(writer: PartWriter, rows: pa.Table, topic: str) -> None:
    """Records rows (all columns but ``dt``) into one file per ``dt`` value."""
    for day, mask in day_partitions(rows.column("timestamp")):
        chunk = rows if mask is None else rows.filter(mask)
        writer.write("records", partition_path(topic, day),
                     chunk.append_column(write_schema("records").field("dt"),
                                         _constant(day, chunk.num_rows)))


def write_frame(df, table: str, ctx: Context, tag: str) -> list[str]:
    """Write a DataFrame of ``table`` rows (every column but, for records, ``dt``) into
    the table's data folder from the executors; returns the files' URIs."""
    from pyspark import TaskContext

    target = write_schema(table)
    names = [n for n in target.names if n != "dt"]

    def write(batches):
        part = f"{tag}{TaskContext.get().partitionId():05d}"
        writer = PartWriter(ctx, part, ctx.roots)
        for b in batches:
            if b.num_rows == 0:
                continue
            t = pa.Table.from_batches([b])
            for topic in pc.unique(t.column("topic")).to_pylist():
                rows = t.filter(pc.equal(t.column("topic"), topic)).select(names) \
                    .cast(pa.schema([target.field(n) for n in names]))
                if table == "records":
                    records_out(writer, rows, topic)
                else:
                    writer.write(table, partition_path(topic), rows)
        files = writer.commit().get(table, [])
        yield pa.RecordBatch.from_arrays([pa.array(files, pa.string())], names=["file"])

    cols = [c for c in df.columns if c != "dt"]
    return [r.file for r in df.select(*cols).repartition("topic", "partition")
            .mapInArrow(write, "file string").collect()]


def write_driver_table(ctx: Context, name: str, rows: pa.Table, part: str) -> list[str]:
    """A small table the driver itself writes (the ledger, findings of the listing)."""
    writer = PartWriter(ctx, part, ctx.roots)
    target = write_schema(name)
    rows = rows.select(target.names)
    if "topic" not in schemas.PARTITIONS[name]:
        writer.write(name, "", rows.cast(target))
    else:
        topics = rows.column("topic")
        for topic in pc.unique(topics).to_pylist():
            mask = pc.is_null(topics) if topic is None else pc.fill_null(pc.equal(topics, topic), False)
            writer.write(name, partition_path(topic), rows.filter(mask).cast(target))
    return writer.commit().get(name, [])
