"""Reading a sink's table into Spark: pyiceberg plans the scan (the sink's partition and
column statistics prune its files), Spark's executors read the planned files one by one
(never the whole table on the driver), each row reduced to the Kafka place the profile
names (:class:`.config.Columns`).

The frame (:data:`SINK_COLUMNS`): ``topic``, ``partition``, ``offset``, ``key`` and
``value`` as bytes (null where the sink keeps none; a string column is its UTF-8 bytes),
``upsert_key`` (the ``key:`` column of an upsert sink, as bytes).

Columns are found by name in the data files (as the anchors write them); a file with delete
files is refused (a merge-on-read upsert sink: :class:`.config.SinkConfigError`, named).

Two readers, one frame: where it is safe (:func:`spark_schema`: local files, and every column
read kept its name, field id and type through the table's schema history), Spark's own Parquet
reader reads the planned files (:func:`read_by_spark`); otherwise each executor reads its files
through pyiceberg's FileIO and pyarrow (:func:`read_by_fileio`, the catalog's properties: S3,
whatever it configures).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from urllib.parse import urlparse

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
    """The sink's rows as a DataFrame of :data:`SINK_COLUMNS`, its planned files read on
    the executors: by Spark's Parquet reader where :func:`spark_schema` says it is safe,
    else through pyiceberg's FileIO, one task per few files."""
    paths = planned_files(sink, table, topics)
    if not paths:
        return spark.createDataFrame([], SINK_COLUMNS)
    schema = spark_schema(sink, table, paths)
    if schema is not None:
        return read_by_spark(spark, sink, paths, schema)
    return read_by_fileio(spark, sink, table, paths)


#: a column name every writer keeps as it is in a Parquet file (pyiceberg, for one, rewrites
#: names that are not valid Avro names: ``sanitize_column_names``)
_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
#: the table property of a name mapping (files without field ids: add_files, migrated tables)
_NAME_MAPPING = "schema.name-mapping.default"
_SCHEMES = ("", "file")


def spark_schema(sink: Sink, table, paths: list[str]):
    """The Spark schema (a StructType of the columns read, structs pruned to the fields read)
    Spark's Parquet reader reads ``paths`` of ``table`` with, by name, the same as pyiceberg
    would by field id; None where that is not certain: a file not on the local file system
    (the catalog's FileIO properties are not Spark's), a table with a name mapping, a column
    whose field id, full name or type is not the same in every schema of the table's
    history (renamed, dropped and added again, promoted), a name a writer may rewrite, a type
    other than string, binary, int, long."""
    from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructField, StructType
    from pyiceberg.types import BinaryType as IBinary, IntegerType as IInt, LongType as ILong, \
        StringType as IString

    leaf = {IString: StringType, IBinary: BinaryType, IInt: IntegerType, ILong: LongType}
    if any(urlparse(p).scheme not in _SCHEMES for p in paths) or _NAME_MAPPING in table.properties:
        return None
    current, history = table.schema(), list(table.schemas().values())
    tree: dict = {}
    for path in sorted(set(sink.used_paths().values())):
        if not all(_PLAIN_NAME.match(part) for part in path.split(".")):
            return None
        try:
            field = current.find_field(path)
        except ValueError:
            return None
        kind = leaf.get(type(field.field_type))
        if kind is None:
            return None
        for schema in history:
            if schema.find_column_name(field.field_id) not in (None, path):
                return None
            try:
                same = schema.find_field(path)
            except ValueError:
                continue
            if same.field_id != field.field_id or same.field_type != field.field_type:
                return None
        node = tree
        *parents, name = path.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[name] = kind()

    def struct(node: dict):
        return StructType([StructField(k, struct(v) if isinstance(v, dict) else v)
                           for k, v in node.items()])

    return struct(tree)


def _quoted(path: str) -> str:
    return ".".join(f"`{part}`" for part in path.split("."))


def _bytes_expr(path: str | None, schema) -> str:
    """A column path as bytes in Spark SQL (as :func:`_as_bytes`: a string's UTF-8 bytes,
    a number's decimal digits)."""
    if path is None:
        return "CAST(NULL AS binary)"
    node = schema
    for part in path.split("."):
        node = node[part].dataType
    if node.typeName() == "binary":
        return _quoted(path)
    if node.typeName() == "string":
        return f"CAST({_quoted(path)} AS binary)"
    return f"CAST(CAST({_quoted(path)} AS string) AS binary)"


def read_by_spark(spark, sink: Sink, paths: list[str], schema):
    """``paths`` read by Spark's Parquet reader with ``schema`` (:func:`spark_schema`), each
    row reduced to :data:`SINK_COLUMNS` as :func:`normalize` reduces it. No partition
    discovery: the sink's own directory names are not columns."""
    c, used = sink.columns, sink.used_paths()
    topic = (f"CAST({_quoted(c.topic)} AS string)" if c.topic is not None
             else "CAST(:topic AS string)")
    frame = spark.read.schema(schema).option("recursiveFileLookup", "true").parquet(*paths)
    exprs = [f"{topic} AS topic", f"CAST({_quoted(c.partition)} AS int) AS partition",
             f"CAST({_quoted(c.offset)} AS bigint) AS offset",
             f"{_bytes_expr(c.key if 'key' in used else None, schema)} AS key",
             f"{_bytes_expr(c.value if 'value' in used else None, schema)} AS value",
             f"{_bytes_expr(sink.key if sink.mode == 'upsert' else None, schema)} AS upsert_key"]
    return spark.sql(f"SELECT {', '.join(exprs)} FROM {{f}}", f=frame,
                     args={"topic": c.topic_value or ""})


def read_by_fileio(spark, sink: Sink, table, paths: list[str]):
    """``paths`` read on the executors through the table's FileIO (pyiceberg, the catalog's
    properties), :func:`normalize` per file, one task per few files."""
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
