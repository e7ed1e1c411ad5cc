"""The derived tables' executor step: record files in, derived tables' data files out.

The internal tables (:mod:`spark_jobs.derive.internal`) and the typed tables
(:mod:`spark_jobs.derive.typed`) read the run's deduplicated ``records`` files on the
executors, a few files a task, and write their tables' files there; only file names and
row counts reach the driver (:data:`FILE_ROWS`).
"""

from __future__ import annotations

import pyarrow as pa

#: what a task of :func:`map_files` yields: a data file it wrote (``rows`` null) or a
#: table's row count (``file`` null)
FILE_ROWS = pa.schema([("table", pa.string()), ("file", pa.string()), ("rows", pa.int64())])


def map_files(spark, paths: list[str], task) -> tuple[dict, dict]:
    """Run ``task`` (a mapInArrow function over batches of a ``path`` column, yielding
    :data:`FILE_ROWS`) over ``paths`` on the executors, a few paths a task; ``({table:
    [data files]}, {table: rows})``. The derived and the typed tables are written so."""
    from pyspark.sql.pandas.types import from_arrow_schema

    df = spark.createDataFrame([(p,) for p in paths], "path string")
    out = df.repartition(min(len(paths), spark.sparkContext.defaultParallelism * 2)) \
        .mapInArrow(task, from_arrow_schema(FILE_ROWS)).collect()
    files: dict[str, list[str]] = {}
    counts: dict[str, int] = {}
    for r in out:
        if r.file is not None:
            files.setdefault(r.table, []).append(r.file)
        if r.rows is not None:
            counts[r.table] = counts.get(r.table, 0) + r.rows
    return files, counts


__all__ = ["FILE_ROWS", "map_files"]
