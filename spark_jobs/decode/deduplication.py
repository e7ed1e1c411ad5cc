"""Dedupe: the pending output of a run against what ``main`` held when it began.

Only partitions the plan marked pending get here (their offsets can meet published
ones, or another copy in this run). Their rows wait in the run's scratch; they are
compared in Spark with just the files of the warehouse whose statistics can overlap
them (:func:`overlap_filter`: the catalog prunes the rest) and with the run's other
chunks; the first copy of each offset is kept, and a copy whose content differs
gives a ``divergence`` finding.
"""

from __future__ import annotations

from spark_jobs import schemas, storage, tables
from spark_jobs.decode.planning import overlap_days
from spark_jobs.findings import DIVERGENCE
from spark_jobs.decode.results import TaskResult, task_files
from spark_jobs.decode.writing import Context, write_frame
from spark_jobs.warehouse import branch_name, is_run_file

def dedupe(existing, staged, pending, keys: list[str], order: list[str], content: list[str] | None):
    """Rows of ``pending`` to keep, and (if ``content``) its copies that differ from the kept one.

    Per key the first row wins in this order: the warehouse (``existing``),
    this run's other staged rows (``staged``), then ``pending`` by ``order``.
    Returns ``(keep, diverging)``; ``diverging`` has the losing copies with
    ``_win_src`` (0 warehouse, 1 staged, 2 pending), ``_win_segment`` and
    ``_win_position`` of the kept row.
    """
    from pyspark.sql import Window, functions as F

    cols = pending.columns
    u = (existing.select(cols).withColumn("_src", F.lit(0))
         .unionByName(staged.select(cols).withColumn("_src", F.lit(1)))
         .unionByName(pending.select(cols).withColumn("_src", F.lit(2))))
    w = Window.partitionBy(*keys).orderBy("_src", *order)
    w_all = w.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    u = u.withColumn("_rank", F.row_number().over(w))
    keep = u.where("_src = 2 AND _rank = 1").select(cols)
    if content is None:
        return keep, None
    u = (u.withColumn("_h", F.xxhash64(*content))
         .withColumn("_win_h", F.first("_h").over(w_all))
         .withColumn("_win_src", F.first("_src").over(w_all))
         .withColumn("_win_segment", F.first("segment").over(w_all))
         .withColumn("_win_position", F.first(order[-1]).over(w_all)))
    diverging = u.where("_src = 2 AND _h != _win_h").select(*cols, "_win_src", "_win_segment",
                                                           "_win_position")
    return keep, diverging


def divergence_findings(diverging, run_id: str):
    """One ``divergence`` finding per losing copy of an offset (findings table's columns)."""
    from pyspark.sql import functions as F

    msg = F.format_string(
        "offset %d of %s-%d has two different contents: this copy (%s, batch at %d) differs "
        "from the one kept (%s, batch at %d)",
        F.col("offset"), F.col("topic"), F.col("partition"), F.col("segment"),
        F.col("batch_position"), F.col("_win_segment"), F.col("_win_position"))
    return diverging.select(
        "topic", "partition", F.lit(DIVERGENCE).alias("kind"),
        F.col("batch_position").alias("position"), F.col("batch_position").alias("end"),
        msg.alias("message"), F.col("offset").alias("base_offset"),
        F.col("offset").alias("last_offset"), F.lit(None).cast("long").alias("bytes"),
        F.lit(None).cast("binary").alias("raw"), "segment", "segment_base_offset",
        F.lit(run_id).alias("run_id"))


def overlap_filter(ranges: dict[tuple[str, int], tuple[int, int]], table: str,
                   days: list[str] | None = None):
    """A pyiceberg row filter for the rows of ``table`` that can meet the offset
    ``ranges`` per (topic, partition): the catalog prunes the other files by their
    partition values and column statistics, so a dedupe reads no more of a topic's
    history than can overlap. With ``days``
    (:func:`~spark_jobs.decode.planning.overlap_days`), only files of runs that
    ingested on those days (or of no known day) can match, and the catalog skips the
    manifests of other nights by their partition summaries without opening them: the
    plan costs what those nights cost, however long the history (docs/tables.md)."""
    from pyiceberg.expressions import (And, EqualTo, GreaterThanOrEqual, In, IsNull,
                                       LessThanOrEqual, Or)

    lo_col, hi_col = {"batches": ("last_offset", "base_offset")}.get(table, ("offset", "offset"))
    terms = [And(EqualTo("topic", t), EqualTo("partition", p), GreaterThanOrEqual(lo_col, lo),
                 LessThanOrEqual(hi_col, hi)) for (t, p), (lo, hi) in sorted(ranges.items())]
    out = terms[0]
    for term in terms[1:]:
        out = Or(out, term)
    if days is not None and schemas.INGEST_DT in schemas.PARTITIONS[table]:
        when = IsNull(schemas.INGEST_DT)
        out = And(Or(when, In(schemas.INGEST_DT, set(days))) if days else when, out)
    return out


def resolve_pending(spark, ctx: Context, wh, bases: dict[str, int], results: list[TaskResult],
                    chunk_id: str | None, ledger,
                    reported=frozenset()) -> tuple[int, dict[str, list[str]]]:
    """Deduplicate the pending output (in the run's scratch) against what ``main`` held
    at ``bases`` (whose ``ledger`` table says which runs wrote which offsets) and this
    run's other submissions; write the rows to keep into the tables' data folders.
    ``reported``: (topic, partition) whose copies in this run were compared batch by
    batch (:mod:`~spark_jobs.decode.replicas` recorded their divergences once): two of
    their pending copies that differ give no record-level finding again.
    Returns ``(divergences, {table: files})``."""
    from pyspark.sql import functions as F

    pend = [r for r in results if r.is_pending]
    ranges: dict[tuple, tuple[int, int]] = {}
    for r in (p.ledger for p in pend):
        if r["first_offset"] is None:
            continue
        key = (r["topic"], r["partition"])
        lo, hi = ranges.get(key, (r["first_offset"], r["last_offset"]))
        ranges[key] = (min(lo, r["first_offset"]), max(hi, r["last_offset"]))
    days = overlap_days(ledger, ctx.run_id, ranges)
    scratch = task_files(pend, pending=True)
    out: dict[str, list[str]] = {}
    branch = branch_name(ctx.run_id)

    def frames(name):
        pending = tables.read_files(spark, scratch.get(name, []), name, ctx.s3)
        if not ranges:
            empty = pending.limit(0)
            return empty, empty, pending
        tp = F.broadcast(spark.createDataFrame(sorted(ranges), "topic string, partition int"))
        existing = tables.read_table(spark, wh, name, snapshot=bases[name],
                                     row_filter=overlap_filter(ranges, name, days))
        existing = existing.where(F.col("run_id") != ctx.run_id)
        # this run's other submissions (chunks) already on its branch: of any day (a
        # chunk's day is when it began)
        others = [] if chunk_id is None else [
            p for p in tables.table_paths(wh, name, ref=branch, run_id=ctx.run_id,
                                          row_filter=overlap_filter(ranges, name))
            if not is_run_file(p, ctx.run_id, chunk_id)]
        staged = tables.read_files(spark, others, name, ctx.s3)
        return (existing.join(tp, ["topic", "partition"], "left_semi"),
                staged.join(tp, ["topic", "partition"], "left_semi"), pending)

    e, s, p = frames("records")
    keep, diverging = dedupe(e, s, p, ["topic", "partition", "offset"],
                             ["segment", "batch_position"],
                             ["timestamp", "key", "value", "headers"])
    if reported:
        known = spark.createDataFrame(sorted(reported), "topic string, partition int") \
            .withColumn("_reported", F.lit(True))
        diverging = (diverging.join(F.broadcast(known), ["topic", "partition"], "left")
                     .where("NOT (_win_src = 2 AND _reported <=> true)").drop("_reported"))
    diverging = diverging.cache()
    out["records"] = write_frame(keep, "records", ctx, "d")
    n_div = diverging.count()
    e, s, p = frames("batches")
    keep, _ = dedupe(e, s, p, ["topic", "partition", "base_offset", "last_offset", "crc"],
                     ["segment", "position"], None)
    out["batches"] = write_frame(keep, "batches", ctx, "d")
    e, s, p = frames("markers")
    keep, _ = dedupe(e, s, p, ["topic", "partition", "offset"], ["segment", "batch_position"], None)
    out["markers"] = write_frame(keep, "markers", ctx, "d")
    found = tables.read_files(spark, scratch.get("findings", []), "findings", ctx.s3)
    diverged = divergence_findings(diverging, ctx.run_id)
    out["findings"] = write_frame(found.select(*diverged.columns).unionByName(diverged),
                                  "findings", ctx, "d")
    diverging.unpersist()
    for files in scratch.values():
        storage.delete_objects(files, ctx.s3)
    return n_div, out
