"""Reading a sink's table into Spark: pyiceberg plans the scan (the sink's partition and
column statistics prune its files), Spark's executors read the planned files one by one
(never the whole table on the driver), each row reduced to the Kafka place the profile
names (:class:`.config.Columns`).

The frame (:data:`SINK_COLUMNS`): ``topic``, ``partition``, ``offset``, ``key`` and
``value`` as bytes (null where the sink keeps none; a string column is its UTF-8 bytes),
``upsert_key`` (the ``key:`` column of an upsert sink, as bytes).

Columns are found by name in the data files (as the anchors write them); a file with delete
files is refused (a merge-on-read upsert sink: :class:`.config.SinkConfigError`, named).
"""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa
import pyarrow.compute as pc

from .config import Sink, SinkConfigError, check_columns

SINK_COLUMNS = ("topic string, partition int, offset bigint, key binary, value binary, "
                "upsert_key binary")
SINK_SCHEMA = pa.schema([("topic", pa.string()), ("partition", pa.int32()),
                         ("offset", pa.int64()), ("key", pa.binary()), ("value", pa.binary()),
                         ("upsert_key", pa.binary())])


def open_table(sink: Sink):
    """The sink's pyiceberg table, its columns checked against the profile; a catalog that
    does not load, or a table it lacks: :class:`SinkConfigError`."""
    from pyiceberg.catalog import load_catalog

    try:
        if isinstance(sink.catalog, Mapping):
            props = {str(k): str(v) for k, v in sink.catalog.items()}
            catalog = load_catalog(props.pop("name", sink.name), **props)
        else:
            catalog = load_catalog(sink.catalog)
    except Exception as err:  # pyiceberg raises many kinds here: one line, named
        raise SinkConfigError(f"sink {sink.name}: catalog {_catalog_name(sink)} does not load: "
                              f"{_one_line(err)}") from err
    try:
        table = catalog.load_table(sink.table)
    except Exception as err:
        raise SinkConfigError(f"sink {sink.name}: catalog {_catalog_name(sink)} has no readable "
                              f"table {sink.table}: {_one_line(err)}") from err
    check_columns(sink, set(table.schema().column_names))
    return table


def _catalog_name(sink: Sink) -> str:
    return sink.catalog if isinstance(sink.catalog, str) else "(inline)"


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__


def planned_files(sink: Sink, table, topics: list[str]) -> list[str]:
    """The data files of the table's current snapshot that may hold rows of ``topics``
    (pruned by the topic column's statistics where the profile has one)."""
    from pyiceberg.expressions import AlwaysTrue, In

    if table.current_snapshot() is None:
        return []
    where = AlwaysTrue()
    if sink.columns.topic is not None and topics:
        where = In(sink.columns.topic, tuple(topics))
    paths = []
    for task in table.scan(row_filter=where).plan_files():
        if task.delete_files:
            raise SinkConfigError(f"sink {sink.name}: table {sink.table} has delete files "
                                  "(merge-on-read), which this reconciliation does not apply yet")
        paths.append(task.file.file_path)
    return paths


def _field(table: pa.Table, path: str):
    top, *rest = path.split(".")
    col = table.column(top)
    for name in rest:
        col = pc.struct_field(col, name)
    return col


def _as_bytes(col, n: int):
    if col is None:
        return pa.nulls(n, pa.binary())
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        return pc.cast(col, pa.binary())
    if pa.types.is_binary(col.type) or pa.types.is_large_binary(col.type):
        return pc.cast(col, pa.binary())
    return pc.cast(pc.cast(col, pa.string()), pa.binary())


def normalize(table: pa.Table, sink: Sink) -> pa.Table:
    """One data file's rows as :data:`SINK_SCHEMA` (pure: the tests call it directly)."""
    c, n, used = sink.columns, table.num_rows, sink.used_paths()
    topic = (pa.array([c.topic_value] * n, pa.string()) if c.topic is None
             else pc.cast(_field(table, c.topic), pa.string()))
    upsert = _as_bytes(_field(table, sink.key), n) if sink.mode == "upsert" else pa.nulls(n, pa.binary())
    return pa.Table.from_arrays([
        topic, pc.cast(_field(table, c.partition), pa.int32()),
        pc.cast(_field(table, c.offset), pa.int64()),
        _as_bytes(_field(table, c.key) if "key" in used else None, n),
        _as_bytes(_field(table, c.value) if "value" in used else None, n), upsert],
        schema=SINK_SCHEMA)


def read_sink(spark, sink: Sink, table, topics: list[str]):
    """The sink's rows as a DataFrame of :data:`SINK_COLUMNS`, its files read on the
    executors, one task per few files."""
    paths = planned_files(sink, table, topics)
    if not paths:
        return spark.createDataFrame([], SINK_COLUMNS)
    props = dict(table.io.properties)
    tops = sorted({p.split(".")[0] for p in sink.used_paths().values()})

    def fetch(batches):
        import pyarrow.parquet as pq
        from pyiceberg.io import load_file_io

        for b in batches:
            for path in b.column("path").to_pylist():
                io = load_file_io(props, location=path)
                with io.new_input(path).open() as f:
                    data = pq.read_table(f, columns=tops)
                yield from normalize(data, sink).to_batches()

    files = spark.createDataFrame([(p,) for p in paths], "path string")
    return files.repartition(min(len(paths), spark.sparkContext.defaultParallelism * 2)) \
        .mapInArrow(fetch, SINK_COLUMNS)
