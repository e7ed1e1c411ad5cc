"""Reading the warehouse's Iceberg tables as Spark DataFrames or Arrow tables, and the
read-committed view.

``read_table(spark, warehouse, name)`` plans the files through the catalog
(pyiceberg: partition and column statistics prune them), and Spark reads them:
its own Parquet reader for local files, executors fetching each file with boto3
on ``s3://`` (no ``s3a://`` jars here). Every data file holds every column of
the table (partition columns included) and the pipeline never writes delete
files (checked: :func:`spark_jobs.warehouse.history.live_files`), so plain Parquet
readers see exactly the snapshot's rows.
"""

from __future__ import annotations


import pyarrow as pa

from . import schemas, storage
from .parquet import conform, read_parquet
from .warehouse import CatalogError, Warehouse, is_run_file


def warehouse_of(warehouse, config: storage.S3Config | None = None) -> Warehouse:
    """A :class:`~spark_jobs.warehouse.Warehouse` (a root path is opened with the default
    catalog)."""
    if isinstance(warehouse, Warehouse):
        return warehouse
    return Warehouse(warehouse, s3=config)


def table_paths(wh: Warehouse, name: str, *, snapshot: int | None = None,
                ref: str | None = None, row_filter=None, run_id: str | None = None,
                keep=None) -> list[str]:
    """The data files of table ``name`` at ``snapshot`` (or branch/tag ``ref``; default
    ``main``'s current) that may hold rows matching ``row_filter`` (a pyiceberg
    expression or string) and, with ``run_id``, that run's files only; ``keep(table,
    data_file)``: only the files it keeps."""
    table = wh.load(name)
    if table is None:
        return []
    if snapshot is None:
        if ref is not None:
            found = table.refs().get(ref)
            if found is None:
                raise LookupError(f"table {name} has no branch or tag {ref!r}")
            snapshot = found.snapshot_id
        else:
            snapshot = table.current_snapshot().snapshot_id
    scan = table.scan(snapshot_id=snapshot, **({"row_filter": row_filter} if row_filter is not None else {}))
    paths = []
    for task in scan.plan_files():
        if task.delete_files:
            raise CatalogError(f"{name}: snapshot {snapshot} has delete files, "
                               "which this pipeline never writes and cannot read")
        if (run_id is None or is_run_file(task.file.file_path, run_id)) and \
                (keep is None or keep(table, task.file)):
            paths.append(task.file.file_path)
    return paths


def read_file(path: str, name: str, config: storage.S3Config | None = None) -> pa.Table:
    """One data file of table ``name`` (any file the pipeline wrote), in the table's schema
    (a column an earlier version did not write reads as null, as Iceberg reads it)."""
    return conform(read_parquet(path, config), schemas.TABLES[name])


def read_files(spark, paths: list[str], name: str, config: storage.S3Config | None = None):
    """A DataFrame of data files of table ``name`` (local or ``s3://``)."""
    sschema = schemas.spark_schema(name)
    if not paths:
        return spark.createDataFrame([], sschema)
    if not any(storage.is_s3(p) for p in paths):
        return spark.read.schema(sschema).parquet(*paths).select(*sschema.names)
    arrow_schema = schemas.spark_arrow_schema(name)

    def fetch(batches):
        for b in batches:
            for path in b.column("path").to_pylist():
                yield from read_file(path, name, config).cast(arrow_schema).to_batches()

    df = spark.createDataFrame([(p,) for p in paths], "path string")
    return df.repartition(min(len(paths), spark.sparkContext.defaultParallelism * 2)) \
        .mapInArrow(fetch, sschema)


def read_table(spark, warehouse, name: str, *, snapshot: int | None = None, ref: str | None = None,
               row_filter=None, run_id: str | None = None,
               config: storage.S3Config | None = None, keep=None):
    """Table ``name`` of ``warehouse`` (a root, or a :class:`~spark_jobs.warehouse.Warehouse`)
    as a DataFrame: ``main``'s current snapshot, or ``snapshot`` / ``ref`` (time travel, a
    run's branch); ``row_filter`` prunes files (rows are not filtered by it);
    ``run_id`` keeps that run's rows only; ``keep``: as :func:`table_paths`' (sees each
    data file planned)."""
    wh = warehouse_of(warehouse, config)
    df = read_files(spark, table_paths(wh, name, snapshot=snapshot, ref=ref, row_filter=row_filter,
                                       run_id=run_id, keep=keep), name, wh.s3)
    return df.where(df.run_id == run_id) if run_id is not None else df


def read_arrow(warehouse, name: str, *, snapshot: int | None = None, ref: str | None = None,
               row_filter=None, columns: tuple[str, ...] | None = None,
               config: storage.S3Config | None = None, ref_may_be_missing: bool = False
               ) -> pa.Table:
    """Table ``name`` as an Arrow table through pyiceberg (no Spark), in the table's schema
    (``columns``: only those); rows are filtered by ``row_filter``. A table that does not
    exist reads empty; one without branch or tag ``ref`` raises LookupError, or, with
    ``ref_may_be_missing``, reads empty too."""
    wh = warehouse_of(warehouse, config)
    schema = schemas.TABLES[name]
    if columns is not None:
        schema = pa.schema([schema.field(c) for c in columns])
    table = wh.load(name)
    if table is None:
        return schema.empty_table()
    if snapshot is None and ref is not None:
        found = table.refs().get(ref)
        if found is None:
            if ref_may_be_missing:
                return schema.empty_table()
            raise LookupError(f"table {name} has no branch or tag {ref!r}")
        snapshot = found.snapshot_id
    # a table an earlier version made may lack a column this version adds (until a writer
    # evolves it): that column reads as null, as Iceberg reads it in older files
    have = {f.name for f in table.schema().fields}
    kwargs = {"selected_fields": tuple(n for n in schema.names if n in have)}
    if row_filter is not None:
        kwargs["row_filter"] = row_filter
    if snapshot is not None:
        kwargs["snapshot_id"] = snapshot
    return conform(table.scan(**kwargs).to_arrow(), schema)


def transaction_status(records, markers):
    """``records`` with ``txn_status``: committed | aborted | open (null if not transactional).

    The decode job writes it as ``records.txn_state`` (:mod:`spark_jobs.decode.transactions`);
    this reads that column, and resolves here only the transactional rows written before it
    existed (null there): a transactional record belongs to the first COMMIT/ABORT marker
    of its producer id in its partition at a higher offset whose epoch is not below the
    record's; no such marker yet means open.
    """
    from pyspark.sql import Window, functions as F

    state = F.col(schemas.TXN_STATE)
    txn = records.where("is_transactional")
    known = txn.where(state.isNotNull()).withColumn("txn_status", state)
    older = txn.where(state.isNull())
    m = markers.where(F.col("control_type").isin(*schemas.TXN_ENDS)).select(
        "topic", "partition", "producer_id", F.col("producer_epoch").alias("marker_epoch"),
        F.col("offset").alias("marker_offset"), F.col("control_type"))
    m = m.dropDuplicates(["topic", "partition", "marker_offset"])
    joined = older.alias("r").join(
        m.alias("m"),
        (F.col("r.topic") == F.col("m.topic")) & (F.col("r.partition") == F.col("m.partition"))
        & (F.col("r.producer_id") == F.col("m.producer_id"))
        & (F.col("m.marker_offset") > F.col("r.offset"))
        & (F.col("m.marker_epoch") >= F.col("r.producer_epoch")),
        "left")
    w = Window.partitionBy("r.topic", "r.partition", "r.offset").orderBy(F.col("m.marker_offset").asc_nulls_last())
    ends = F.lit(None).cast("string")
    for kind, outcome in schemas.TXN_ENDS.items():
        ends = F.when(F.col("m.control_type") == kind, outcome).otherwise(ends)
    first = (joined.withColumn("_rank", F.row_number().over(w)).where("_rank = 1")
             .select("r.*", F.coalesce(ends, F.lit(schemas.TXN_OPEN)).alias("txn_status")))
    plain = records.where("NOT is_transactional").withColumn("txn_status", F.lit(None).cast("string"))
    return plain.unionByName(known).unionByName(first)


def read_committed(records, markers):
    """Non-transactional records and committed transactional ones (Kafka's read_committed)."""
    from pyspark.sql import functions as F

    out = transaction_status(records, markers)
    return out.where(F.col("txn_status").isNull() | (F.col("txn_status") == "committed")) \
        .drop("txn_status")
