"""The audit of one decode run, as a page of named steps (``spark_jobs/check_quality.py``
parses the command line, calls :func:`audit` and reports its rows).

1. :func:`read_run` — the run's tables as of the snapshots the audit reads
   (:mod:`.inputs`), where each partition stood before it and what it listed
   (:mod:`.context`), and the rows later nights published first (:mod:`.as_of`);
2. :func:`places` — every place the run gets results of, with what each check's
   ``observed`` counts there, including the partitions this snapshot lacks (:mod:`.absence`)
   and the internal topics' and state files' counts (:mod:`.internal_checks`);
3. :func:`.checks.run_checks`, summarized and graded into results (:mod:`.rows`);
4. :func:`write_results` — ``dq_results`` (and ``consumer_lag``) replaced in one snapshot;
5. :func:`publish_docs` — the great-expectations suites validate the verdicts, the Data
   Docs go to ``W/data_docs/<run_token>/``; they must agree with ``dq_results``.

Every line printed starts with ``check_quality:``.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

from spark_jobs import layout, storage
from spark_jobs.warehouse import Warehouse

from . import absence, as_of, context, internal_checks, log_dir_checks, results, rows, tier
from .checks import run_checks
from .inputs import audited_snapshots, load_tables
from .observations import dedup_batches
from .policy import Policy
from .registry import CHECKS, OPTIONAL_CHECKS, TIER_CHECK_NAMES, UNITS
from .units import ONLY, PARTITIONS


@dataclass
class AuditedRun:
    """What :func:`read_run` reads of run ``run_id``: ``tables`` (:data:`.inputs.TABLES`, with
    rows later nights published first borrowed back), the ``snapshots`` they are as of,
    the ``published_ledger``, the ``night`` the run is audited as of (its last; None where
    its input named no night), ``prior`` (:func:`.context.prior_ends`) and ``listed``
    (:func:`.context.listed_segments`)."""

    run_id: str
    snapshots: dict[str, tuple[str, int]]
    tables: dict[str, Any]
    published_ledger: Any
    night: str | None
    prior: Any
    listed: Any

    @property
    def ledger(self):
        return self.tables["ledger"]

    @property
    def where(self) -> str:
        """Where the audit read the run: its branch and/or ``main``."""
        return ", ".join(sorted({w for w, _ in self.snapshots.values()}))


def audit(spark, wh: Warehouse, run_id: str, *, policy: Policy, docs: bool = True,
          out=None, topics: str | None = None, tiered_storage: str | None = None):
    """Run the audit; return the dq_results rows (also committed to ``dq_results``), with the
    run's ``snapshot_missing`` rows (its plan's: kept as they are, counted in the verdict).
    ``topics``: the run's topic filter (layout.topic_matcher; None: all); ``tiered_storage``:
    the tier to list for the tier audit (:mod:`.tier`; None: its metadata checks only)."""
    out = out or sys.stdout
    store = storage.open_store(wh.root, wh.s3)
    run = read_run(spark, wh, run_id, out)
    internal = internal_checks.load(spark, wh, run_id, run.snapshots, run.ledger, run.listed,
                                    run.published_ledger)
    internal.update(log_dir_checks.load(spark, wh, run_id, run.snapshots, internal))
    internal.update(tier.load(spark, wh, run_id, run.snapshots, run.tables["findings"],
                              tiered_storage))
    absent = absent_partitions(spark, wh, run, policy, topics)
    units = places(run, internal, absent)
    if not units:
        raise LookupError(f"run {run_id!r} has no rows in catalog {wh.catalog_name!r} "
                          f"({run.where})")
    observations, _ = run_checks(run.tables, policy, run_id, prior=run.prior, listed=run.listed,
                                 internal=internal, absent=absent)
    # computed once: everything below reads the materialized rows
    observations = observations.localCheckpoint()
    classes, items = rows.summarize(observations)
    dq_rows = [r.to_row() for r in
               rows.build_results(run_id, units, classes, items, policy, night=run.night)]
    missing_nights = write_results(wh, run, dq_rows, internal, out)
    if docs:
        check_docs(spark, store, run_id, dq_rows, classes, items, out)
    return dq_rows + missing_nights


def read_run(spark, wh: Warehouse, run_id: str, out) -> AuditedRun:
    """Step 1: run ``run_id`` as the audit reads it (see :class:`AuditedRun`)."""
    from spark_jobs.tables import read_table

    snapshots = audited_snapshots(wh, run_id)
    tables = load_tables(spark, wh, run_id, snapshots)
    published_ledger = read_table(spark, wh, "ledger")
    night = tables["ledger"].agg({"night": "max"}).first()[0]
    prior = context.prior_ends(published_ledger, tables["ledger"], run_id)
    listed = context.listed_segments(tables["ledger"], published_ledger, run_id)
    run = AuditedRun(run_id, snapshots, tables, published_ledger, night, prior, listed)
    borrow_published_rows(spark, wh, run, out)
    return run


def borrow_published_rows(spark, wh: Warehouse, run: AuditedRun, out) -> None:
    """Where later nights published some of this night's new offsets first (a night audited
    after them), their rows come back into ``run``'s tables and listing (:mod:`.as_of`)."""
    from spark_jobs.tables import read_table

    borrowed = as_of.borrowed_ranges(as_of.new_ranges(run.ledger, run.listed, run.prior),
                                     run.published_ledger, run.run_id)
    if not borrowed:
        return
    only = as_of.row_filter(borrowed)
    for name in as_of.OFFSET_COLUMN:
        head = read_table(spark, wh, name, snapshot=run.snapshots[name][1], row_filter=only)
        run.tables[name] = as_of.above(name, run.tables[name], borrowed).unionByName(
            as_of.borrow(name, head, run.tables[name], borrowed, run.ledger, run.run_id))
    run.listed = run.listed.unionByName(as_of.context(run.ledger, borrowed))
    print(f"check_quality: {len(borrowed)} partitions' new offsets of run {run.run_id} "
          "were published by later runs first: their rows are audited as this night's",
          file=out)


def absent_partitions(spark, wh: Warehouse, run: AuditedRun, policy: Policy,
                      topics: str | None):
    """What earlier nights held and this one lacks (:func:`.absence.missing_partitions`,
    with the cluster metadata as audited for the evidence of deletions); None where the run
    names no night."""
    if run.night is None:
        return None
    return absence.missing_partitions(run.ledger, run.published_ledger, run.run_id,
                                      policy.lookback_nights(), layout.topic_matcher(topics),
                                      max_share=policy.missing_share(),
                                      metadata=absence.load_metadata(spark, wh, run.snapshots))


def places(run: AuditedRun, internal: dict, absent) -> dict:
    """Step 2: (topic, partition) -> ``{unit: n}`` of every place of the run
    (:func:`.rows.partition_units`), with the internal topics' and state files' counts; where
    the run names a night, every partition counts as one ``partitions`` and each partition it
    lacks is a place of ``missing_partition`` only; the night's log directories are the place
    (None, None) of ``mixed_cluster`` (:mod:`.log_dir_checks`)."""
    units = rows.partition_units(run.tables)
    for tp, counts in internal_checks.units(internal, dedup_batches(run.tables["batches"])).items():
        if tp in units:
            units[tp].update(counts)
    for tp, counts in log_dir_checks.units(internal).items():
        if tp == (None, None):  # the log directories: a place about no partition
            place = units.setdefault(tp, {ONLY: set()})
            place[ONLY] = set(place.get(ONLY) or ()) | {log_dir_checks.MIXED_CLUSTER}
            place.update(counts)
        elif tp in units:
            units[tp].update(counts)
    if absent is not None:
        for tp in units:
            if tp[0] is not None:
                units[tp][PARTITIONS] = 1
        for r in absent.select("topic", "partition").collect():
            units[(r.topic, r.partition)] = {PARTITIONS: 1, ONLY: {absence.MISSING_PARTITION}}
    for tp, counts in tier.units(internal).items():  # a tiered partition without a local tail:
        units.setdefault(tp, {ONLY: set()}).update(counts)  # the tier checks only
        if ONLY in units[tp]:
            units[tp][ONLY] |= {c for c in TIER_CHECK_NAMES if counts.get(UNITS[c])}
    return units


def write_results(wh: Warehouse, run: AuditedRun, dq_rows: list[dict], internal: dict,
                  out) -> list[dict]:
    """Step 4: replace the run's ``dq_results`` rows (the snapshot's summary names what the
    audit read) and its ``consumer_lag`` rows; return its ``snapshot_missing`` rows (the
    plan's, kept)."""
    results.write(wh, run.run_id, dq_rows, audited={n: s for n, (_, s) in run.snapshots.items()})
    missing_nights = results.run_missing_nights(wh, run.run_id)
    lag = internal_checks.write_lag(wh, run.run_id, internal)
    if lag is not None:
        print(f"check_quality: {lag} consumer_lag rows of run {run.run_id} -> "
              f"{wh.namespace}.consumer_lag", file=out)
    print(f"check_quality: {len(dq_rows)} results of run {run.run_id} (read from {run.where}) "
          f"-> {wh.namespace}.dq_results in catalog {wh.catalog_name!r}", file=out)
    return missing_nights


def check_docs(spark, store, run_id: str, dq_rows: list[dict], classes, items, out) -> None:
    """Step 5: the great-expectations suites over the verdicts, Data Docs published; a suite
    per check, the optional checks only where they applied (an empty suite would read as a
    pass of something never checked). Raises where the suites and ``dq_rows`` disagree."""
    verdicts = rows.verdicts(spark, classes, items)
    present = {r["check"] for r in dq_rows}
    summary = publish_docs(store, verdicts, run_id,
                           [c for c in CHECKS if c not in OPTIONAL_CHECKS or c in present],
                           out=out)
    gx_failed = {c for c, n in summary.items() if n.get("fail")}
    if gx_failed != {r["check"] for r in dq_rows if r["status"] == "fail"}:
        raise RuntimeError(f"great-expectations disagrees with dq_results: {sorted(gx_failed)}")


def publish_docs(store, verdicts, run_id: str, checks, out=None) -> dict:
    """Validate ``verdicts`` (:func:`.rows.verdicts`) with the GX suites, build Data Docs in a temp
    folder, upload them to ``data_docs/<run_token>/`` (replacing a previous upload); return the
    suites' summary ``{check: {"fail": n, "warn": n}}``."""
    import shutil

    from expectations import suites

    prefix = layout.run_folder(layout.DATA_DOCS, storage.run_token(run_id))
    summary, docs_dir = suites.validate(verdicts, run_id, checks)
    try:
        if not os.path.exists(os.path.join(docs_dir, "index.html")):
            raise RuntimeError(f"great-expectations wrote no index.html into {docs_dir}")
        store.delete_prefix(prefix + "/")
        for dirpath, _, filenames in os.walk(docs_dir):
            for name in filenames:
                full = os.path.join(dirpath, name)
                rel = os.path.relpath(full, docs_dir).replace(os.sep, "/")
                with open(full, "rb") as f:
                    store.write(f"{prefix}/{rel}", f.read())
    finally:
        shutil.rmtree(docs_dir, ignore_errors=True)
    failed = sorted(c for c, n in summary.items() if n.get("fail"))
    print(f"check_quality: great-expectations: {len(summary)} suites, failed: {', '.join(failed) or 'none'}; "
          f"Data Docs -> {store.uri(prefix + '/index.html')}", file=out or sys.stdout)
    return summary
