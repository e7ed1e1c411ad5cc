"""``dq_results``: one row per run × check × topic-partition (docs/tables.md).

The observations of :mod:`.checks` are aggregated in Spark (per class and
status, plus the first :data:`MAX_ITEMS` items of each check and partition,
worst first), so that only bounded data reaches the driver.
"""

from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa

from .. import schemas
from ..iceberg import AUDITED
from .checks import CHECKS, OPTIONAL_CHECKS
from .policy import RANK, Policy, worst

MAX_ITEMS = 20


def plural(n: int, word: str) -> str:
    """``1 item``, ``1,204 items``."""
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def checked(n: int, unit: str | None) -> str:
    """``1,204 batches checked``, ``1 batch checked``: a result's ``observed`` count in its
    unit (:data:`CHECKS`' plural nouns: batches, records, segments)."""
    unit = unit or ""
    if n == 1 and unit.endswith("s"):
        unit = unit[:-2] if unit.endswith(("ches", "shes", "sses", "xes")) else unit[:-1]
    return f"{n:,} {unit} checked" if unit else f"{n:,} checked"


def partition_units(tables: dict):
    """(topic, partition) -> {"batches": n, "records": n, "segments": n} over the run's tables."""
    b, r, f, l = (tables[n] for n in ("batches", "records", "findings", "ledger"))
    spark = b.sparkSession
    rows = spark.sql("""
        WITH p AS (SELECT topic, partition FROM {b} UNION SELECT topic, partition FROM {r}
                   UNION SELECT topic, partition FROM {f} UNION SELECT topic, partition FROM {l}),
        bc AS (SELECT topic, partition, COUNT(*) AS n FROM {b} GROUP BY topic, partition),
        rc AS (SELECT topic, partition, COUNT(*) AS n FROM {r} GROUP BY topic, partition),
        sc AS (SELECT topic, partition, COUNT(DISTINCT segment) AS n FROM (
                 SELECT topic, partition, segment FROM {b} UNION SELECT topic, partition, segment FROM {l}
                 UNION SELECT topic, partition, segment FROM {f}) GROUP BY topic, partition)
        SELECT p.topic, p.partition, COALESCE(bc.n, 0) AS batches, COALESCE(rc.n, 0) AS records,
               COALESCE(sc.n, 0) AS segments
        FROM p LEFT JOIN bc USING (topic, partition) LEFT JOIN rc USING (topic, partition)
        LEFT JOIN sc USING (topic, partition)""", b=b, r=r, f=f, l=l).collect()
    return {(x.topic, x.partition): {"batches": x.batches, "records": x.records, "segments": x.segments}
            for x in rows if x.topic is not None and x.partition is not None}


def summarize(observations):
    """(per-class aggregates, first items) of ``observations``, collected."""
    spark = observations.sparkSession
    classes = spark.sql("""
        SELECT check, topic, partition, class, status, severity, COUNT(*) AS items,
               SUM(offsets) AS offsets, MAX(value) AS max_value
        FROM {o} GROUP BY check, topic, partition, class, status, severity""", o=observations).collect()
    items = spark.sql("""
        SELECT * EXCEPT (_n) FROM (
          SELECT *, ROW_NUMBER() OVER (
                      PARTITION BY check, topic, partition
                      ORDER BY CASE status WHEN 'fail' THEN 0 WHEN 'warn' THEN 1 ELSE 2 END,
                               first_offset, class) AS _n
          FROM {o}) WHERE _n <= :n""", o=observations, args={"n": MAX_ITEMS}).collect()
    return classes, items


def build_rows(run_id: str, units: dict, classes, items, policy: Policy,
               checked_at: dt.datetime | None = None) -> list[dict]:
    checked_at = checked_at or dt.datetime.now(dt.timezone.utc)
    by_key: dict = {}
    for c in classes:
        by_key.setdefault((c.check, c.topic, c.partition), []).append(c)
    items_by_key: dict = {}
    for it in items:
        items_by_key.setdefault((it.check, it.topic, it.partition), []).append(it)
    rows = []
    for (topic, partition), unit in sorted(units.items()):
        for check, unit_name in CHECKS.items():
            if check in OPTIONAL_CHECKS and not unit.get(unit_name):
                continue  # a check of internal topics / state files the partition has none of
            key = (check, topic, partition)
            cls = by_key.get(key, [])
            bad = [c for c in cls if c.status != "pass"]
            status = worst(c.status for c in cls)
            severity = worst(c.severity for c in bad) if bad else policy.headline(topic, check)
            details = {
                "unit": unit_name,
                "classes": {c["class"]: {"status": c.status, "items": c.items, "offsets": c.offsets}
                            for c in sorted(cls, key=lambda c: (-RANK[c.status], c["class"]))},
                "items": [
                    {"class": it["class"], "status": it.status, "first_offset": it.first_offset,
                     "last_offset": it.last_offset, "offsets": it.offsets, "value": it.value,
                     "segment": it.segment, "position": it.position, "message": it.message}
                    for it in items_by_key.get(key, [])],
                "more_items": max(0, sum(c.items for c in cls) - MAX_ITEMS),
            }
            if check in ("create_time", "log_append_time"):
                steps = [c.max_value for c in cls if c.max_value is not None]
                details["max_step_back_ms"] = max(steps) if steps else None
                details["regressions"] = sum(c.items for c in cls)
            if check == "create_time":
                details["tolerance_ms"] = policy.tolerance_ms(topic)
            if check == "offset_gaps" and policy.compacted(topic):
                details["compacted_topic"] = True
            rows.append({
                "run_id": run_id, "check": check, "topic": topic, "partition": partition,
                "status": status, "severity": severity, "observed": unit.get(unit_name, 0),
                "failed": sum(c.items for c in bad),
                "details": json.dumps(details, sort_keys=False, default=str),
                "checked_at": checked_at,
            })
    return rows


def to_table(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=schemas.DQ_RESULTS)


def write(wh, run_id: str, rows: list[dict], audited: dict | None = None) -> None:
    """Replace run ``run_id``'s rows of the ``dq_results`` table of ``wh`` (an
    :class:`spark_jobs.iceberg.Warehouse`) in one snapshot; its summary names the
    snapshots the audit read (``kafkalog.audited``)."""
    summary = {AUDITED: json.dumps(audited, sort_keys=True)} if audited else {}
    wh.replace_run_rows("dq_results", run_id, to_table(rows), summary)


VERDICT_COLUMNS = ("check string, topic string, partition int, class string, status string, "
                   "severity string, items bigint, offsets bigint, max_value bigint, example string")


def verdicts(spark, classes, items):
    """One row per check × topic-partition × class × status (counts and one
    example message): the small table the great-expectations suites validate."""
    example = {}
    for it in items:
        example.setdefault((it.check, it.topic, it.partition, it["class"], it.status), it.message)
    rows = [(c.check, c.topic, c.partition, c["class"], c.status, c.severity, c.items, c.offsets,
             c.max_value, example.get((c.check, c.topic, c.partition, c["class"], c.status)))
            for c in classes]
    return spark.createDataFrame(rows, VERDICT_COLUMNS)
