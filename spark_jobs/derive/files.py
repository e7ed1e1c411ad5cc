"""The derived tables' executor step: record files in, derived tables' data files out.

The internal tables (:mod:`spark_jobs.derive.internal`) and the typed tables
(:mod:`spark_jobs.derive.typed`) read the run's deduplicated ``records`` files on the
executors, a few files a task, and write their tables' files there; only file names and
row counts reach the driver (:data:`FILE_ROWS`). The per-key tables' folds
(:mod:`spark_jobs.derive.keyed_tasks`) run on the executors the same way
(:func:`on_executors`).
"""

from __future__ import annotations

import pyarrow as pa

#: what a task of :func:`map_files` yields: a data file it wrote (``rows`` null) or a
#: table's row count (``file`` null)
FILE_ROWS = pa.schema([("table", pa.string()), ("file", pa.string()), ("rows", pa.int64())])


def on_executors(spark, items: list, task, schema: pa.Schema) -> list[dict]:
    """``task`` (a function of an iterator of ``items``, yielding record batches of
    ``schema``) over ``items`` on the executors, in at most two slices a core; the rows of
    every batch, as dicts.

    An RDD's partitions, as the decode tasks (:func:`spark_jobs.decode.executor.run_tasks`):
    one Spark job, the items and the batches pickled. A DataFrame of the items through
    ``repartition`` and ``mapInArrow`` was two jobs and a shuffle: ~1.0-1.4 s a call
    against ~0.4 s as one RDD job, warm, on a 2-core machine; a demo night's decode made
    six."""
    if not items:
        return []
    sc = spark.sparkContext
    slices = min(len(items), sc.defaultParallelism * 2)
    batches = sc.parallelize(list(items), slices).mapPartitions(task).collect()
    return pa.Table.from_batches(batches, schema=schema).to_pylist()


def map_files(spark, paths: list[str], task) -> tuple[dict, dict]:
    """Run ``task`` (a function of an iterator of paths, yielding :data:`FILE_ROWS`
    batches) over ``paths`` on the executors, a few paths a task (:func:`on_executors`);
    ``({table: [data files]}, {table: rows})``. The derived and the typed tables are
    written so."""
    files: dict[str, list[str]] = {}
    counts: dict[str, int] = {}
    for r in on_executors(spark, paths, task, FILE_ROWS):
        if r["file"] is not None:
            files.setdefault(r["table"], []).append(r["file"])
        if r["rows"] is not None:
            counts[r["table"]] = counts.get(r["table"], 0) + r["rows"]
    return files, counts


__all__ = ["FILE_ROWS", "map_files", "on_executors"]
