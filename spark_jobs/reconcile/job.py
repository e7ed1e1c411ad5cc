"""``python -m spark_jobs.reconcile --warehouse W --sinks FILE [--night YYYY-MM-DD]``:
reconcile every configured sink against the warehouse's log (docs/sinks.md).

For each sink (:mod:`.config`): its table is opened through pyiceberg (:mod:`.sink_read`),
the log of its topics read from the warehouse — as of ``--night`` where given: the rows of
the segments the nights up to it listed (the ledger), the consumer groups' commits those
segments of ``__consumer_offsets`` held — and compared (:mod:`.compare`, :mod:`.upsert`).
The results are ``dq_results`` rows of check ``sink_reconcile``, one per sink x
topic-partition (``details.sink`` names the sink), under a run id of the command's own.

Exit status: 0 when no result failed, :data:`EXIT_FAILED` (65) when one did, 2 on a usage
or configuration error (an unknown profile, a missing column, an unreadable catalog: one
line naming it).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import sys

from spark_jobs import layout, storage, tables
from spark_jobs.audit import results
from spark_jobs.audit.policy import RANK, Policy, PolicyError
from spark_jobs.schemas import NIGHT
from spark_jobs.warehouse import CatalogError, Warehouse, add_catalog_args

from . import config as sink_config
from . import summary
from .classes import CHECK, MISSING
from .compare import POSITION_COLUMNS, compaction_ranges, reconcile
from .sink_read import open_table, read_sink
from .upsert import LATEST_COLUMNS, reconcile_upsert

EXIT_FAILED = 65
PROG = "reconcile"


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m spark_jobs.reconcile",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--warehouse", required=True, help="warehouse root W (local path or s3://...)")
    p.add_argument("--sinks", required=True, help="the sinks file (docs/sinks.md; "
                                                 "expectations/sinks.example.yaml is an example)")
    p.add_argument("--night", type=_night, help="reconcile as of this night (YYYY-MM-DD; "
                   "default: everything the warehouse holds)")
    p.add_argument("--run-id", help="the run id of the rows written (default: "
                   "reconcile-<night or now>-<UTC time>)")
    p.add_argument("--policy", help="severity policy YAML (default: expectations/policy.yaml)")
    add_catalog_args(p)
    p.add_argument("--master", help="Spark master (default: spark-submit's, else local[*])")
    return p.parse_args(argv)


def _night(text: str) -> str:
    try:
        return dt.date.fromisoformat(text).isoformat()
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"{text!r} is not a night YYYY-MM-DD") from err


# ------------------------------------------------------------------ the log side
@dataclasses.dataclass
class Log:
    """The warehouse's frames as of the night: records, batches, markers, findings,
    consumer_offsets (None where the warehouse has no such table)."""

    records: object
    batches: object
    markers: object
    findings: object
    consumer_offsets: object | None
    night: str | None
    wh: Warehouse

    _topics: list | None = None
    _compacted: object | None = None

    def topics(self) -> list[str]:
        """The topics the log holds (once)."""
        if self._topics is None:
            self._topics = [r.topic for r in self.batches.select("topic").distinct().collect()]
        return self._topics

    def compacted(self):
        """:func:`.compare.compaction_ranges` of the whole log, computed once."""
        if self._compacted is None:
            self._compacted = compaction_ranges(self.records, self.batches, self.markers,
                                                self.findings).localCheckpoint()
        return self._compacted


def read_log(spark, wh: Warehouse, night: str | None, snapshots: dict | None = None) -> Log:
    """The log as of ``night`` (None: all of it); ``snapshots``: table name -> the snapshot
    id to read it at (the nightly audit's: the run's branch, :mod:`spark_jobs.audit.inputs`;
    None: each table's ``main``)."""
    at = snapshots or {}
    names = wh.table_names()

    def read(name):
        return tables.read_table(spark, wh, name, snapshot=at.get(name))

    frames = {n: read(n) for n in ("records", "batches", "markers", "findings")}
    offsets = read("consumer_offsets") if "consumer_offsets" in names else None
    if night is not None:
        ledger = read("ledger")
        segs = ledger.where(ledger[NIGHT] <= night).select("segment").distinct()
        frames = {n: f.join(segs, "segment", "left_semi").cache() for n, f in frames.items()}
        if offsets is not None:
            offsets = offsets.join(segs, "segment", "left_semi")
    return Log(**frames, consumer_offsets=offsets, night=night, wh=wh)


def positions(spark, log: Log, group: str | None, topics: list[str]):
    """(topic, partition, committed_offset) of ``group`` as of the night: its latest commit
    per partition (by record time, then offset of ``__consumer_offsets``), a tombstone
    deleting it, as the audit's ``consumer_lag`` ranks them."""
    if group is None or log.consumer_offsets is None:
        return spark.createDataFrame([], POSITION_COLUMNS)
    return spark.sql("""
        SELECT topic, partition, committed_offset FROM (
          SELECT *, ROW_NUMBER() OVER (PARTITION BY `group`, topic, partition
                                       ORDER BY timestamp DESC, source_offset DESC) AS _n
          FROM {o} WHERE `group` = :g AND topic IS NOT NULL)
        WHERE _n = 1 AND NOT tombstone AND committed_offset IS NOT NULL""",
                     o=log.consumer_offsets, args={"g": group}).where(
        _in("topic", topics))


def _in(column: str, values):
    from pyspark.sql import functions as F

    return F.col(column).isin(list(values)) if values else F.lit(False)


def latest_frame(spark, log: Log, topics: list[str]):
    """The ``latest__<topic>`` tables of ``topics`` as of the night (its tag; else
    ``main``), as :data:`.upsert.LATEST_COLUMNS`."""
    from pyspark.sql import functions as F

    out = spark.createDataFrame([], LATEST_COLUMNS)
    names = log.wh.table_names()
    for topic in topics:
        name = layout.latest_table_name(topic)
        if name not in names:
            continue
        table = log.wh.load(name)
        ref = layout.night_tag(log.night) if log.night else None
        paths = tables.table_paths(log.wh, name, ref=ref if ref in table.refs() else None)
        if not paths:
            continue
        df = spark.read.parquet(*paths).select(
            F.lit(topic).alias("topic"), F.col("partition").cast("int"), "key", "value",
            F.col("offset").cast("bigint"))
        out = out.unionByName(df)
    return out


# ------------------------------------------------------------------ results
def graded(obs, places: dict, sink: sink_config.Sink, policy: Policy, run_id: str,
           night: str | None, checked_at, extras_of) -> list[results.DqResult]:
    """One graded result per place of ``places`` ((topic, partition) -> observed)."""
    # one pass: each class' first items, each carrying its class' aggregates
    first = obs.sparkSession.sql("""
        SELECT * EXCEPT (_n) FROM (
          SELECT *, ROW_NUMBER() OVER w AS _n, COUNT(*) OVER c AS _items,
                 SUM(offsets) OVER c AS _offsets, MAX(value) OVER c AS _max
          FROM {o}
          WINDOW w AS (PARTITION BY topic, partition, class ORDER BY first_offset),
                 c AS (PARTITION BY topic, partition, class))
        WHERE _n <= :n""", o=obs, args={"n": results.MAX_ITEMS}).collect()
    classes: dict = {}
    items: dict = {}
    for it in first:
        place, status = (it.topic, it.partition), sink.grade(policy, it.topic, it["class"])
        d = it.asDict()
        agg = {"check": CHECK, "class": d["class"], "status": status, "severity": status,
               "items": d.pop("_items"), "offsets": d.pop("_offsets"), "max_value": d.pop("_max")}
        if agg not in classes.setdefault(place, []):
            classes[place].append(agg)
        items.setdefault(place, []).append({**d, "status": status})
        places.setdefault(place, 0)
    out = []
    for (topic, partition), observed in sorted(places.items(), key=lambda kv: (kv[0][0], kv[0][1] if kv[0][1] is not None else -1)):
        its = sorted(items.get((topic, partition), []),
                     key=lambda i: (-RANK[i["status"]], i["class"], i["first_offset"] or 0))
        r = results.graded_result(run_id, CHECK, topic, partition, observed,
                                  classes.get((topic, partition), []), its[:results.MAX_ITEMS],
                                  policy, checked_at, night)
        d = dataclasses.replace(r.details, extras={**r.details.extras,
                                                   **extras_of(topic, partition, r.details)})
        out.append(r._replace(details=d))
    return out


def reconcile_sink(spark, log: Log, sink: sink_config.Sink, table, policy: Policy, run_id: str,
                   checked_at) -> list[results.DqResult]:
    """The results of one sink."""
    topics = sorted(t for t in log.topics() if sink.carries(t))
    rows = read_sink(spark, sink, table, topics)
    rows = rows.where(_in("topic", topics)).localCheckpoint()  # read once, joined thrice
    records = log.records.where(_in("topic", topics))
    base = {"sink": sink.name, "table": sink.table, "profile": sink.profile, "mode": sink.mode,
            "position": sink.columns.position_note}
    if sink.mode == "upsert":
        latest = latest_frame(spark, log, topics)
        obs = reconcile_upsert(rows, latest, records, sink=sink.name)
        places = {(r.topic, r.partition): r.n for r in spark.sql(
            "SELECT topic, partition, COUNT(*) AS n FROM {l} GROUP BY topic, partition",
            l=latest).collect()}
        return graded(obs, places, sink, policy, run_id, log.night, checked_at,
                      lambda t, p, d: dict(base))
    batches = log.batches.where(_in("topic", topics))
    compacted = log.compacted().where(_in("topic", topics))
    pos = positions(spark, log, sink.columns.group, topics)
    obs, counts = reconcile(rows, records, batches, compacted, pos, sink=sink.name,
                            compare=sink.compare)
    windows = {(c.topic, c.partition): c for c in counts.collect()}

    def extras(topic, partition, details):
        c = windows.get((topic, partition))
        missing = details.classes.get(MISSING)
        if c is None:
            return dict(base)
        position = base["position"]
        if sink.columns.group and c.committed_offset is None:
            position = (f"consumer group {sink.columns.group} has no commit of this partition: "
                        "the window ends at the sink's highest offset")
        return {**base, "position": position, "committed_offset": c.committed_offset,
                "window": {"first_offset": c.lo, "last_offset": c.hi},
                "log_start": c.log_start, "log_end": c.log_end,
                "deliverable": c.deliverable,
                "delivered": c.deliverable - ((missing.offsets or 0) if missing else 0)}

    places = {k: c.deliverable for k, c in windows.items()}
    return graded(obs, places, sink, policy, run_id, log.night, checked_at, extras)


def summary_line(sink: sink_config.Sink, rows: list[results.DqResult]) -> str:
    """One line of a sink: delivered, missing, duplicates, leaks, lag and its status
    (:func:`.summary.line`), its partitions and where its position came from."""
    t = summary.totals((r.status, r.details) for r in rows).get(sink.name)
    if t is None:  # no partition of its topics in the log or the sink
        t = summary.empty(sink.mode)
    where = t.get("position") or sink.columns.position_note
    return f"{summary.line(sink.name, t)} ({t['partitions']} partition(s); position: {where})"


def reconcile_sinks(spark, wh: Warehouse, sinks: list[sink_config.Sink], *, policy: Policy,
                    run_id: str, night: str | None, snapshots: dict | None = None, out=None,
                    prefix: str = "") -> list[results.DqResult]:
    """The results of ``sinks`` against the log of ``wh`` as of ``night`` (``snapshots``:
    :func:`read_log`'s), a line per sink printed (:func:`summary_line`, after ``prefix``);
    nothing written. The command's :func:`run` and the nightly audit's family
    (:func:`spark_jobs.audit.families.load_sinks`) both call it."""
    out = out or sys.stdout
    opened = [(s, open_table(s)) for s in sinks]  # every configuration error before any work
    checked_at = dt.datetime.now(dt.timezone.utc)
    log = read_log(spark, wh, night, snapshots)
    every = []
    for sink, table in opened:
        rows = reconcile_sink(spark, log, sink, table, policy, run_id, checked_at)
        print(prefix + summary_line(sink, rows), file=out, flush=True)
        every += rows
    return every


@dataclasses.dataclass(frozen=True)
class Sinks:
    """The configured sinks, as the nightly audit is handed them (``check_quality --sinks``):
    :meth:`reconcile` is :func:`reconcile_sinks` of them (the audit's sinks family calls it;
    handed in, not imported, so that the audit's registry never imports this module)."""

    sinks: tuple[sink_config.Sink, ...]

    def __bool__(self) -> bool:
        return bool(self.sinks)

    def reconcile(self, spark, wh: Warehouse, **kwargs) -> list[results.DqResult]:
        return reconcile_sinks(spark, wh, list(self.sinks), **kwargs)


def run(spark, wh: Warehouse, sinks: list[sink_config.Sink], *, policy: Policy, run_id: str,
        night: str | None, out=None) -> list[results.DqResult]:
    """Reconcile ``sinks``, write their rows under ``run_id``, print a line per sink."""
    every = reconcile_sinks(spark, wh, sinks, policy=policy, run_id=run_id, night=night, out=out)
    results.write(wh, run_id, [r.to_row() for r in every])
    return every


def main(argv=None, spark=None) -> int:
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as done:
        return 2 if done.code else 0
    try:
        policy = Policy.load(args.policy)
        sinks = sink_config.load(args.sinks)
    except (OSError, PolicyError, sink_config.SinkConfigError) as err:
        print(f"{PROG}: {err}", file=sys.stderr)
        return 2
    config = storage.S3Config.from_env(None) if storage.is_s3(args.warehouse) else None
    run_id = args.run_id or "reconcile-{}-{}".format(
        args.night or "now", dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S"))
    try:
        wh = Warehouse(args.warehouse, args.catalog, args.namespace, config)
        if spark is None:
            from spark_jobs.session import build_session

            spark = build_session(PROG, master=args.master)
        rows = run(spark, wh, sinks, policy=policy, run_id=run_id, night=args.night)
    except sink_config.SinkConfigError as err:
        print(f"{PROG}: {err}", file=sys.stderr)
        return 2
    except (LookupError, storage.StorageError, CatalogError) as err:
        print(f"{PROG}: {' '.join(str(err).split())}", file=sys.stderr)
        return 2
    print(f"{PROG}: run {run_id}: {len(rows)} result(s) written", file=sys.stdout)
    return EXIT_FAILED if any(r.status == "fail" for r in rows) else 0
