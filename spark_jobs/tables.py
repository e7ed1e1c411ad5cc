"""Reading the warehouse tables as Spark DataFrames, and the read-committed view.

``read_table(spark, root, name)`` works the same on a local root (Spark's own
Parquet reader) and on ``s3://`` (executors fetch each file with boto3: there
is no ``s3a://`` here). Partition columns come back as strings.
"""

from __future__ import annotations

import io
import posixpath

import pyarrow as pa
import pyarrow.parquet as pq

from . import schemas, storage


def table_files(store, name: str, run_token: str | None = None) -> list[str]:
    """Keys of ``name``'s Parquet files under ``store`` (optionally one run's only)."""
    keys = []
    for obj in store.list(name + "/"):
        base = posixpath.basename(obj.key)
        if not base.endswith(".parquet"):
            continue
        if run_token is not None and not base.startswith(run_token + "~") \
                and base != run_token + ".parquet":
            continue
        keys.append(obj.key)
    return keys


def _partition_values(key: str) -> dict[str, str]:
    out = {}
    for part in key.split("/")[1:-1]:
        k, sep, v = part.partition("=")
        if sep:
            out[k] = v
    return out


def read_file(store, key: str, name: str) -> pa.Table:
    """One file of table ``name`` with its partition columns, cast to the table's read schema."""
    data = store.read(key)
    table = pq.read_table(io.BytesIO(data))
    for col, value in _partition_values(key).items():
        if col not in table.column_names:
            table = table.append_column(col, pa.array([value] * table.num_rows, pa.string()))
    return table.select(schemas.read_schema(name).names).cast(schemas.read_schema(name))


def read_table(spark, root: str, name: str, *, run_id: str | None = None,
               config: storage.S3Config | None = None):
    """Table ``name`` under warehouse ``root`` as a DataFrame (empty if it has no files)."""
    store = storage.open_store(root, config)
    token = storage.run_token(run_id) if run_id is not None else None
    keys = table_files(store, name, token)
    sschema = schemas.spark_schema(name)
    if not keys:
        return spark.createDataFrame([], sschema)
    if not storage.is_s3(root):
        spark.conf.set("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
        base = store.path(name)
        df = (spark.read.option("basePath", base).schema(sschema)
              .parquet(*[store.path(k) for k in keys]))
        return df.select(*sschema.names)
    cfg = store.config
    arrow_schema = schemas.spark_arrow_schema(name)

    def fetch(batches):
        s = storage.open_store(root, cfg)
        for b in batches:
            for key in b.column("key").to_pylist():
                yield from read_file(s, key, name).cast(arrow_schema).to_batches()

    paths = spark.createDataFrame([(k,) for k in keys], "key string")
    return paths.repartition(min(len(keys), spark.sparkContext.defaultParallelism * 2)) \
        .mapInArrow(fetch, sschema)


def transaction_status(records, markers):
    """``records`` with ``txn_status``: committed | aborted | open (null if not transactional).

    A transactional record belongs to the first marker of its producer (id and
    epoch) in its partition at a higher offset; no such marker yet means open.
    """
    from pyspark.sql import Window, functions as F

    m = markers.where(F.col("control_type").isin("COMMIT", "ABORT")).select(
        "topic", "partition", "producer_id", "producer_epoch",
        F.col("offset").alias("marker_offset"), F.col("control_type"))
    m = m.dropDuplicates(["topic", "partition", "marker_offset"])
    txn = records.where("is_transactional")
    joined = txn.alias("r").join(
        m.alias("m"),
        (F.col("r.topic") == F.col("m.topic")) & (F.col("r.partition") == F.col("m.partition"))
        & (F.col("r.producer_id") == F.col("m.producer_id"))
        & (F.col("m.marker_offset") > F.col("r.offset")),
        "left")
    w = Window.partitionBy("r.topic", "r.partition", "r.offset").orderBy(F.col("m.marker_offset").asc_nulls_last())
    first = (joined.withColumn("_rank", F.row_number().over(w)).where("_rank = 1")
             .select("r.*", F.when(F.col("m.control_type") == "COMMIT", "committed")
                     .when(F.col("m.control_type") == "ABORT", "aborted")
                     .otherwise("open").alias("txn_status")))
    plain = records.where("NOT is_transactional").withColumn("txn_status", F.lit(None).cast("string"))
    return plain.unionByName(first)


def read_committed(records, markers):
    """Non-transactional records and committed transactional ones (Kafka's read_committed)."""
    from pyspark.sql import functions as F

    out = transaction_status(records, markers)
    return out.where(F.col("txn_status").isNull() | (F.col("txn_status") == "committed")) \
        .drop("txn_status")
