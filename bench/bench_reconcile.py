"""Sink reconciliation against a plain Spark baseline, on the same data in the same run.

Writes an N-row sink table in Apache Iceberg's Kafka Connect shape (flat
``_kafka_metadata_*`` columns, KafkaMetadataTransform's default; apache/iceberg
kafka-connect-transforms KafkaMetadataTransform.java at fe86930d) with pyiceberg, one file
per ~1M rows, and a log of the same N offsets (one partition per 1M offsets; one planted
missing offset and one duplicate per partition), then times, best of --repeat:

* reconcile: :func:`spark_jobs.reconcile.sink_read.read_sink` (pyiceberg planning, the
  planned files read on the executors: here by Spark's Parquet reader, as the table's schema
  history allows) + :func:`spark_jobs.reconcile.compare.reconcile` (windows, classes,
  deliverable ranks, islands), its observations and counts collected;
* baseline: the same files read by Spark's own Parquet reader, a left anti join of the log
  against the sink on (topic, partition, offset) and a duplicate count, collected.

Prints both times and the ratio (compare ratios, not absolute numbers: the machine is shared).

    .venv/bin/python bench/bench_reconcile.py [--rows N] [--repeat 2]
    .venv/bin/python bench/bench_reconcile.py --full      # the issue's 20M rows

``--full`` is ``--rows 20000000`` with a driver of ``--driver-memory`` (default 6g: the log's
20M offsets are kept on the executors of a local session) and one repetition.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import pyarrow as pa

PER_PARTITION = 1_000_000
#: the issue's size (issue 44, "Done when")
FULL_ROWS = 20_000_000


def write_sink(root: Path, rows: int):
    from pyiceberg.catalog.sql import SqlCatalog

    props = {"uri": f"sqlite:///{root}/bench.db", "warehouse": f"file://{root}/lake"}
    (root / "lake").mkdir(parents=True)
    cat = SqlCatalog("bench", **props)
    cat.create_namespace("lake")
    table = None
    for start in range(0, rows, PER_PARTITION):
        n = min(PER_PARTITION, rows - start)
        p = start // PER_PARTITION
        offsets = pa.array(range(n), pa.int64())
        # plant: offset 10 missing, offset 20 twice
        import pyarrow.compute as pc

        keep = pc.not_equal(offsets, 10)
        offsets = pa.concat_arrays([offsets.filter(keep), pa.array([20], pa.int64())])
        m = len(offsets)
        data = pa.table({
            "id": pa.array(range(m), pa.int64()),
            "_kafka_metadata_topic": pa.repeat(pa.scalar("orders", pa.string()), m),
            "_kafka_metadata_partition": pa.repeat(pa.scalar(p, pa.int32()), m),
            "_kafka_metadata_offset": offsets,
            "_kafka_metadata_timestamp": offsets})
        if table is None:
            table = cat.create_table("lake.orders", schema=data.schema)
        table.append(data)
    return {"name": "bench", "type": "sql", **props}, table


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=2_000_000)
    p.add_argument("--full", action="store_true", help="the issue's size: 20M rows, once")
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--master", default="local[2]")
    p.add_argument("--driver-memory", default=None,
                   help="spark.driver.memory (default: Spark's; 6g with --full)")
    args = p.parse_args(argv)
    if args.full:
        args.rows, args.repeat = FULL_ROWS, 1
        args.driver_memory = args.driver_memory or "6g"

    from spark_jobs.reconcile import config, sink_read
    from spark_jobs.reconcile.compare import POSITION_COLUMNS, reconcile
    from spark_jobs.session import build_session

    conf = {"spark.sql.shuffle.partitions": "8"}
    if args.driver_memory:
        conf["spark.driver.memory"] = args.driver_memory
    spark = build_session("bench_reconcile", master=args.master, conf=conf)
    with tempfile.TemporaryDirectory() as tmp:
        catalog, table = write_sink(Path(tmp), args.rows)
        sink = config.parse({"sinks": [{"name": "bench", "catalog": catalog,
                                        "table": "lake.orders",
                                        "profile": "iceberg-kafka-connect",
                                        "topics": ["orders"]}]})[0]
        parts = (args.rows + PER_PARTITION - 1) // PER_PARTITION
        records = spark.sql(f"""
            SELECT 'orders' AS topic, CAST(p AS int) AS partition, o AS offset,
                   CAST(NULL AS binary) AS key, CAST(NULL AS binary) AS value,
                   CAST(NULL AS string) AS txn_state
            FROM (SELECT id DIV {PER_PARTITION} AS p, id % {PER_PARTITION} AS o
                  FROM range({args.rows}))""").localCheckpoint()
        batches = spark.sql(f"""SELECT 'orders' AS topic, CAST(id AS int) AS partition,
                                       0L AS base_offset,
                                       LEAST({PER_PARTITION}, {args.rows} - id * {PER_PARTITION}) - 1 AS last_offset
                                FROM range({parts})""")
        compacted = spark.createDataFrame([], "topic string, partition int, lo bigint, hi bigint")
        positions = spark.createDataFrame([], POSITION_COLUMNS)
        paths = sink_read.planned_files(sink, table, ["orders"])

        def ours():
            rows = sink_read.read_sink(spark, sink, table, ["orders"]).localCheckpoint()
            obs, counts = reconcile(rows, records, batches, compacted, positions, sink="bench")
            return obs.collect(), counts.collect()

        def baseline():
            s = spark.read.parquet(*paths).selectExpr(
                "_kafka_metadata_topic AS topic", "_kafka_metadata_partition AS partition",
                "_kafka_metadata_offset AS offset")
            missing = records.join(s, ["topic", "partition", "offset"], "left_anti").count()
            dups = s.groupBy("topic", "partition", "offset").count().where("count > 1").count()
            return missing, dups

        times = {}
        for name, fn in (("baseline", baseline), ("reconcile", ours)):
            best = None
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                out = fn()
                dt_ = time.perf_counter() - t0
                best = dt_ if best is None else min(best, dt_)
            times[name] = best
            if name == "baseline":
                assert out == (parts, parts), out
            else:
                classes = sorted({(o["class"]) for o in out[0]})
                assert {"missing", "duplicate"} <= set(classes), classes
        print(json.dumps({"rows": args.rows, "files": len(paths), "seconds": times,
                          "ratio": round(times["reconcile"] / times["baseline"], 2)}))
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
