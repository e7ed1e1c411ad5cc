"""From a run's observations to its dq_results rows, in Spark until the data is small.

* :func:`partition_units` — the places of the run and what each check's ``observed`` counts
  there (``{unit: n}`` per (topic, partition), :mod:`.units`);
* :func:`summarize` — the observations aggregated per check, place, class and status, plus
  the first :data:`.results.MAX_ITEMS` items of each check and place, worst first: only
  bounded data reaches the driver;
* :func:`build_results` — one graded result (:func:`.results.graded_result`) per place and
  check that applies there (:data:`.registry.OPTIONAL_CHECKS`, :data:`.units.ONLY`);
* :func:`verdicts` — the small table the great-expectations suites validate.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from spark_jobs import layout

from .policy import Policy
from .registry import DECODER_FINDINGS, OPTIONAL_CHECKS, UNITS
from .results import MAX_ITEMS, DqResult, graded_result
from .units import BATCHES, ONLY, RECORDS, SEGMENTS


def partition_units(tables: dict):
    """(topic, partition) -> {"batches": n, "records": n, "segments": n} over the run's tables;
    findings that belong to no topic-partition are the place (None, None), graded by
    ``decoder_findings`` alone."""
    return run_summary(tables).units


@dataclass(frozen=True)
class RunSummary:
    """What one query tells of a run's tables: its places' ``units``
    (:func:`partition_units`), every ``topic`` they have rows of, the ``finding_kinds`` of its
    findings and its ``night`` (:func:`spark_jobs.layout.run_night` of its ledger's; None: none)."""

    units: dict
    topics: frozenset
    finding_kinds: frozenset
    night: str | None


def run_summary(tables: dict) -> RunSummary:
    """The :class:`RunSummary` of the run's tables (``records``, ``batches``, ``findings``,
    ``ledger``): one query."""
    b, r, f, l = (tables[n] for n in ("batches", "records", "findings", "ledger"))
    spark = b.sparkSession
    rows = spark.sql("""
        WITH p AS (SELECT topic, partition FROM {b} UNION SELECT topic, partition FROM {r}
                   UNION SELECT topic, partition FROM {f} UNION SELECT topic, partition FROM {l}),
        bc AS (SELECT topic, partition, COUNT(*) AS n FROM {b} GROUP BY topic, partition),
        rc AS (SELECT topic, partition, COUNT(*) AS n FROM {r} GROUP BY topic, partition),
        sc AS (SELECT topic, partition, COUNT(DISTINCT segment) AS n FROM (
                 SELECT topic, partition, segment FROM {b} UNION SELECT topic, partition, segment FROM {l}
                 UNION SELECT topic, partition, segment FROM {f}) GROUP BY topic, partition),
        fk AS (SELECT topic, partition, collect_set(kind) AS kinds FROM {f}
               GROUP BY topic, partition),
        n AS (SELECT collect_set(night) AS nights FROM {l})
        SELECT p.topic, p.partition, COALESCE(bc.n, 0) AS batches, COALESCE(rc.n, 0) AS records,
               COALESCE(sc.n, 0) AS segments, fk.kinds, n.nights
        FROM p CROSS JOIN n
        LEFT JOIN bc ON bc.topic <=> p.topic AND bc.partition <=> p.partition
        LEFT JOIN rc ON rc.topic <=> p.topic AND rc.partition <=> p.partition
        LEFT JOIN sc ON sc.topic <=> p.topic AND sc.partition <=> p.partition
        LEFT JOIN fk ON fk.topic <=> p.topic AND fk.partition <=> p.partition""",
                     b=b, r=r, f=f, l=l).collect()
    out = {}
    for x in rows:
        if x.topic is not None and x.partition is not None:
            out[(x.topic, x.partition)] = {BATCHES: x.batches, RECORDS: x.records,
                                           SEGMENTS: x.segments}
        elif x.topic is None:  # findings outside any partition (a .log of no partition folder)
            out[(None, None)] = {SEGMENTS: x.segments, ONLY: {DECODER_FINDINGS}}
    return RunSummary(out, frozenset(x.topic for x in rows if x.topic is not None),
                      frozenset(k for x in rows for k in (x.kinds or ())),
                      layout.run_night(rows[0].nights) if rows else None)


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
                               first_offset, class, segment, position, message) AS _n
          FROM {o}) WHERE _n <= :n""", o=observations, args={"n": MAX_ITEMS}).collect()
    return classes, sorted(items, key=item_order)


#: the status order of a place's first items (worst first), as :func:`summarize` sorts them
_ITEM_ORDER = {"fail": 0, "warn": 1}
#: then, ascending (nulls first, as Spark sorts): every column that tells two items apart
_ITEM_KEYS = ("first_offset", "class", "segment", "position", "message")
_CLASS_KEY = ("check", "topic", "partition", "class", "status", "severity")


def item_order(o) -> tuple:
    """The sort key of an observation among its place's items (:func:`summarize`'s order):
    worst status first, then :data:`_ITEM_KEYS` ascending, nulls first."""
    return (_ITEM_ORDER.get(o["status"], 2),
            *((o[k] is not None, o[k] if o[k] is not None else 0) for k in _ITEM_KEYS))


def summarize_rows(observations: list) -> tuple[list, list]:
    """:func:`summarize` of graded observations made on the driver (Rows with the observation
    columns, ``severity`` and ``status``): the same aggregates and first items, no Spark."""
    from pyspark.sql import Row

    groups: dict = {}
    by_place: dict = {}
    for o in observations:
        groups.setdefault(tuple(o[k] for k in _CLASS_KEY), []).append(o)
        by_place.setdefault((o["check"], o["topic"], o["partition"]), []).append(o)
    classes = []
    for key, group in groups.items():
        offsets = [o["offsets"] for o in group if o["offsets"] is not None]
        values = [o["value"] for o in group if o["value"] is not None]
        classes.append(Row(**dict(zip(_CLASS_KEY, key)), items=len(group),
                           offsets=sum(offsets) if offsets else None,
                           max_value=max(values) if values else None))

    items = [o for group in by_place.values() for o in sorted(group, key=item_order)[:MAX_ITEMS]]
    return classes, items


def place_key(key: tuple):
    """Sort key of a (topic, partition) place, either of which may be None."""
    topic, partition = key
    return (topic is None, topic or "", partition is None, partition or 0)


def build_results(run_id: str, units: dict, classes, items, policy: Policy,
                  checked_at: dt.datetime | None = None, night: str | None = None
                  ) -> list[DqResult]:
    """One dq_results row (typed: :class:`.results.DqResult`) per place of ``units`` ((topic, partition) -> ``{unit: n}``, where
    topic or partition may be None, and :data:`.units.ONLY` restricts the checks) and check, from
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
    for (topic, partition), unit in sorted(units.items(), key=lambda kv: place_key(kv[0])):
        for check, unit_name in UNITS.items():
            if unit.get(ONLY) is not None:
                if check not in unit[ONLY]:
                    continue
            elif check in OPTIONAL_CHECKS and not unit.get(unit_name):
                continue  # a check of internal topics / state files the partition has none of
            key = (check, topic, partition)
            rows.append(graded_result(run_id, check, topic, partition, unit.get(unit_name, 0),
                                      by_key.get(key, []), items_by_key.get(key, []), policy,
                                      checked_at, night))
    return rows


def result_classes(results: list[DqResult]) -> tuple[list, list]:
    """:func:`summarize`'s (per-class aggregates, items) of results made whole elsewhere
    (the sinks', :data:`.registry.FAMILIES`' ``results``), from their details: what
    :func:`verdicts` reads of them."""
    from pyspark.sql import Row

    classes, items = [], []
    for r in results:
        if r.details is None:
            continue
        for name, c in r.details.classes.items():
            classes.append(Row(check=r.check, topic=r.topic, partition=r.partition,
                               **{"class": name}, status=c.status, severity=c.status,
                               items=c.items, offsets=c.offsets, max_value=None))
        items += [Row(check=r.check, topic=r.topic, partition=r.partition,
                      **{"class": it.class_}, status=it.status, message=it.message)
                  for it in r.details.items]
    return classes, items


VERDICT_COLUMNS = ("check string, topic string, partition int, class string, status string, "
                   "severity string, items bigint, offsets bigint, max_value bigint, example string")


def verdicts(classes, items) -> list[tuple]:
    """One row per check × topic-partition × class × status (counts and one
    example message), of :data:`VERDICT_COLUMNS`: the small table the great-expectations
    suites validate (made here, on the driver, from the rows already summarized)."""
    example = {}
    for it in items:
        example.setdefault((it.check, it.topic, it.partition, it["class"], it.status), it.message)
    rows = [(c.check, c.topic, c.partition, c["class"], c.status, c.severity, c.items, c.offsets,
             c.max_value, example.get((c.check, c.topic, c.partition, c["class"], c.status)))
            for c in classes]
    return rows
