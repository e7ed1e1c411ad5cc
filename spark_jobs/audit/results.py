"""``dq_results``: one row per run × check × topic-partition (docs/tables.md).

The observations of :func:`.checks.run_checks` are aggregated in Spark (per class and
status, plus the first :data:`MAX_ITEMS` items of each check and partition,
worst first), so that only bounded data reaches the driver.
"""

from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa

from .. import schemas
from ..warehouse import AUDITED
from ..schemas import NIGHT
from .registry import (DECODER_FINDINGS, OPTIONAL_CHECKS, SNAPSHOT_MISSING, SNAPSHOT_MISSING_CLASS,
                       UNITS)
from .units import BATCHES, ONLY, RECORDS, SEGMENTS
from .policy import RANK, Policy, worst

MAX_ITEMS = 20

#: how a result about no topic-partition (findings of objects outside any partition folder)
#: is named
UNPLACED = "(outside any partition)"


def place(row) -> str:
    """What a dq_results row is about, in words: ``orders-0``; a topic (``clicks``: every
    partition of it gone); the night of a ``snapshot_missing`` row; :data:`UNPLACED`."""
    if row["topic"] is not None:
        return row["topic"] if row["partition"] is None else f"{row['topic']}-{row['partition']}"
    if row["check"] == SNAPSHOT_MISSING:
        return row.get(NIGHT) or "?"
    return UNPLACED


def verdict(rows) -> dict:
    """The run's verdict, small enough for XCom and an asset event's ``extra``: results
    (check x topic-partition) per outcome, and per check that failed or warned its
    topic-partitions: ``{"fail": 1, "warn": 3, "pass": 40, "failed": {"crc": ["orders-0"]},
    "warned": {...}}``."""
    out: dict = {"fail": 0, "warn": 0, "pass": 0, "failed": {}, "warned": {}}
    for r in sorted(rows, key=lambda r: (r["check"], place(r))):
        status = r["status"] if r["status"] in ("fail", "warn") else "pass"
        out[status] += 1
        if status != "pass":
            out["failed" if status == "fail" else "warned"].setdefault(r["check"], []).append(
                place(r))
    return out


def plural(n: int, word: str) -> str:
    """``1 item``, ``1,204 items``."""
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def checked(n: int, unit: str | None) -> str:
    """``1,204 batches checked``, ``1 batch checked``: a result's ``observed`` count in its
    unit (:data:`.registry.UNITS`' plural nouns: batches, records, segments)."""
    unit = unit or ""
    if n == 1 and unit.endswith("s"):
        unit = unit[:-2] if unit.endswith(("ches", "shes", "sses", "xes")) else unit[:-1]
    return f"{n:,} {unit} checked" if unit else f"{n:,} checked"


def partition_units(tables: dict):
    """(topic, partition) -> {"batches": n, "records": n, "segments": n} over the run's tables;
    findings that belong to no topic-partition are the place (None, None), graded by
    ``decoder_findings`` alone."""
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
        FROM p LEFT JOIN bc ON bc.topic <=> p.topic AND bc.partition <=> p.partition
        LEFT JOIN rc ON rc.topic <=> p.topic AND rc.partition <=> p.partition
        LEFT JOIN sc ON sc.topic <=> p.topic AND sc.partition <=> p.partition""",
                     b=b, r=r, f=f, l=l).collect()
    out = {}
    for x in rows:
        if x.topic is not None and x.partition is not None:
            out[(x.topic, x.partition)] = {BATCHES: x.batches, RECORDS: x.records,
                                           SEGMENTS: x.segments}
        elif x.topic is None:  # findings outside any partition (a .log of no partition folder)
            out[(None, None)] = {SEGMENTS: x.segments, ONLY: {DECODER_FINDINGS}}
    return out


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


def _place_key(key: tuple):
    """Sort key of a (topic, partition) place, either of which may be None."""
    topic, partition = key
    return (topic is None, topic or "", partition is None, partition or 0)


def build_rows(run_id: str, units: dict, classes, items, policy: Policy,
               checked_at: dt.datetime | None = None, night: str | None = None) -> list[dict]:
    """One dq_results row per place of ``units`` ((topic, partition) -> ``{unit: n}``, where
    topic or partition may be None, and :data:`ONLY` restricts the checks) and check, from
    the observations' per-class aggregates ``classes`` and first ``items``
    (:func:`summarize`); ``night``: the night the run was audited as of."""
    checked_at = checked_at or dt.datetime.now(dt.timezone.utc)
    by_key: dict = {}
    for c in classes:
        by_key.setdefault((c["check"], c["topic"], c["partition"]), []).append(c)
    items_by_key: dict = {}
    for it in items:
        items_by_key.setdefault((it["check"], it["topic"], it["partition"]), []).append(it)
    rows = []
    for (topic, partition), unit in sorted(units.items(), key=lambda kv: _place_key(kv[0])):
        for check, unit_name in UNITS.items():
            if unit.get(ONLY) is not None:
                if check not in unit[ONLY]:
                    continue
            elif check in OPTIONAL_CHECKS and not unit.get(unit_name):
                continue  # a check of internal topics / state files the partition has none of
            key = (check, topic, partition)
            rows.append(result_row(run_id, check, topic, partition, unit.get(unit_name, 0),
                                   by_key.get(key, []), items_by_key.get(key, []), policy,
                                   checked_at, night))
    return rows


def result_row(run_id: str, check: str, topic, partition, observed: int, cls, items,
               policy: Policy, checked_at: dt.datetime, night: str | None) -> dict:
    """The dq_results row of one check at one place: ``cls`` its per-class aggregates
    (check, class, status, severity, items, offsets, max_value), ``items`` its first
    observations (:data:`.observations.OBSERVATION_NAMES` plus status)."""
    unit_name = UNITS[check]
    bad = [c for c in cls if c["status"] != "pass"]
    status = worst(c["status"] for c in cls)
    severity = worst(c["severity"] for c in bad) if bad else policy.headline(topic, check)
    details = {
        "unit": unit_name,
        "classes": {c["class"]: {"status": c["status"], "items": c["items"], "offsets": c["offsets"]}
                    for c in sorted(cls, key=lambda c: (-RANK[c["status"]], c["class"]))},
        "items": [
            {"class": it["class"], "status": it["status"], "first_offset": it["first_offset"],
             "last_offset": it["last_offset"], "offsets": it["offsets"], "value": it["value"],
             "segment": it["segment"], "position": it["position"], "message": it["message"]}
            for it in items],
        "more_items": max(0, sum(c["items"] for c in cls) - MAX_ITEMS),
    }
    if check in ("create_time", "log_append_time"):
        steps = [c["max_value"] for c in cls if c["max_value"] is not None]
        details["max_step_back_ms"] = max(steps) if steps else None
        details["regressions"] = sum(c["items"] for c in cls)
    if check == "create_time":
        details["tolerance_ms"] = policy.tolerance_ms(topic)
    if check == "offset_gaps" and policy.compacted(topic):
        details["compacted_topic"] = True
    return {
        "run_id": run_id, "check": check, "topic": topic, "partition": partition,
        "status": status, "severity": severity, "observed": observed,
        "failed": sum(c["items"] for c in bad),
        "details": json.dumps(details, sort_keys=False, default=str),
        "checked_at": checked_at, NIGHT: night,
    }


def missing_night_rows(run_id: str, missing: dict[str, str], policy: Policy,
                       checked_at: dt.datetime | None = None) -> list[dict]:
    """The ``snapshot_missing`` rows of run ``run_id``: one per night of ``missing`` (night
    -> where its snapshot should be: the prefix listed), topic and partition null, graded by
    the policy (``snapshot_missing``, warn by default)."""
    checked_at = checked_at or dt.datetime.now(dt.timezone.utc)
    status = policy.severity(None, SNAPSHOT_MISSING, SNAPSHOT_MISSING_CLASS)
    rows = []
    for night, where in sorted(missing.items()):
        cls = {"check": SNAPSHOT_MISSING, "class": SNAPSHOT_MISSING_CLASS, "status": status,
               "severity": status, "items": 1, "offsets": None, "max_value": None}
        item = {"class": SNAPSHOT_MISSING_CLASS, "status": status, "first_offset": None,
                "last_offset": None, "offsets": None, "value": None, "segment": where,
                "position": None,
                "message": f"no snapshot for {night}: no segment under {where}"}
        rows.append(result_row(run_id, SNAPSHOT_MISSING, None, None, 1, [cls], [item], policy,
                               checked_at, night))
    return rows


def to_table(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=schemas.DQ_RESULTS)


def write(wh, run_id: str, rows: list[dict], audited: dict | None = None) -> None:
    """Replace run ``run_id``'s rows of the ``dq_results`` table of ``wh`` (an
    :class:`spark_jobs.warehouse.Warehouse`) in one snapshot, but for its ``snapshot_missing``
    rows (the plan's: :func:`write_missing_nights`); the snapshot's summary names the
    snapshots the audit read (``kafkalog.audited``)."""
    from pyiceberg.expressions import And, EqualTo, NotEqualTo

    summary = {AUDITED: json.dumps(audited, sort_keys=True)} if audited else {}
    wh.replace_run_rows("dq_results", run_id, to_table(rows), summary,
                        where=And(EqualTo("run_id", run_id), NotEqualTo("check", SNAPSHOT_MISSING)))


def write_missing_nights(wh, run_id: str, missing: dict[str, str], found, policy: Policy
                         ) -> list[dict]:
    """Record which nights of run ``run_id`` have no snapshot (``missing``: night -> the
    prefix listed): its ``snapshot_missing`` rows replaced by these, in one snapshot that
    also drops every run's ``snapshot_missing`` rows of the nights ``found`` (a late
    snapshot, once run, replaces the result). Returns the rows written."""
    from pyiceberg.expressions import And, EqualTo, In, Or

    rows = missing_night_rows(run_id, missing, policy)
    where = And(EqualTo("run_id", run_id), EqualTo("check", SNAPSHOT_MISSING))
    if found:
        where = Or(where, And(EqualTo("check", SNAPSHOT_MISSING), In(NIGHT, sorted(found))))
    wh.replace_run_rows("dq_results", run_id, to_table(rows), where=where)
    return rows


def missing_nights_to_replace(wh, run_id: str, found) -> bool:
    """Whether ``dq_results`` holds a ``snapshot_missing`` row that run ``run_id``'s
    :func:`write_missing_nights` would replace: the run's own, or one of a night ``found``."""
    from pyiceberg.expressions import EqualTo

    from ..tables import read_arrow

    rows = read_arrow(wh, "dq_results", row_filter=EqualTo("check", SNAPSHOT_MISSING),
                      columns=("run_id", NIGHT)).to_pylist()
    return any(r["run_id"] == run_id or r[NIGHT] in set(found) for r in rows)


def run_missing_nights(wh, run_id: str) -> list[dict]:
    """Run ``run_id``'s ``snapshot_missing`` rows as its plan wrote them (the audit's verdict
    counts them)."""
    from pyiceberg.expressions import And, EqualTo

    from ..tables import read_arrow

    return read_arrow(wh, "dq_results", row_filter=And(EqualTo("run_id", run_id),
                                                       EqualTo("check", SNAPSHOT_MISSING))).to_pylist()


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
