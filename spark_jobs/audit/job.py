"""The audit of one decode run, as a page of named steps (``spark_jobs/check_quality.py``
parses the command line, calls :func:`audit` and reports its rows).

1. :func:`read_run` — the run's tables as of the snapshots the audit reads, each read once
   (:mod:`.inputs`), where each partition stood before it and what it listed
   (:mod:`.context`), and the rows later nights published first (:mod:`.as_of`);
2. each family of :data:`.registry.FAMILIES` loads what it reads beyond the run's tables, and
   :func:`places` finds every place the run gets results of, with what each check's
   ``observed`` counts there (:mod:`.families`: the partitions this snapshot lacks, the
   internal topics' and state files' counts, the log directories, the tier);
3. :func:`.checks.run_observations`: the checks over the run's tables in one Spark frame,
   materialized once, and those made on the driver; summarized and graded into results
   (:mod:`.rows`);
4. :func:`write_results` — ``dq_results`` (and ``consumer_lag``) replaced in one snapshot;
5. :func:`publish_docs` — the great-expectations suites validate the verdicts, the Data
   Docs go to ``W/data_docs/<run_token>/``; they must agree with ``dq_results``.

Every line printed starts with ``check_quality:``; every Spark job the audit starts is
described ``check_quality: <step or family>`` (:func:`.inputs.described`: the Spark UI's and
the event log's job description, ``bench/bench_audit.py`` counts them so). The audit runs in
its own Spark settings (:func:`audit`): adaptive execution off, the shuffle partitions sized to
the run's tables and a small run's queries evaluated by Spark without generated code and
without broadcast joins (:func:`.inputs.sized_settings`), the session's restored after.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

from spark_jobs import layout, storage
from spark_jobs.warehouse import Warehouse

from . import as_of, context, internal_checks, results, rows
from .checks import run_observations
from .families import ABSENT, NOT_INTERNAL, audited_topics
from .inputs import (ADAPTIVE, SIZED, audited_snapshots, described, load_tables, materialize,
                     sql_conf)
from .policy import Policy
from .registry import CHECKS, FAMILIES, OPTIONAL_CHECKS


@dataclass
class AuditedRun:
    """What :func:`read_run` reads of run ``run_id``: ``tables`` (:data:`.inputs.TABLES`, with
    rows later nights published first borrowed back; each read once and materialized), the
    ``snapshots`` they are as of, the ``published_ledger``, ``prior``
    (:func:`.context.prior_ends`) and ``listed`` (:func:`.context.listed_segments`), the
    ``summary`` of its tables (:func:`.rows.run_summary`: its places, topics, finding kinds and
    the ``night`` the run is audited as of, its last; None where its input named no night), and
    what the audit was asked: ``policy``, ``topic_filter`` (the run's topics), the
    ``tiered_storage`` to list, the ``sinks`` to reconcile (:class:`spark_jobs.reconcile.job.Sinks`; None: none),
    where to print (``out``). The families of :data:`.registry.FAMILIES` read it."""

    spark: Any
    wh: Warehouse
    run_id: str
    snapshots: dict[str, tuple[str, int]]
    tables: dict[str, Any]
    published_ledger: Any
    prior: Any
    listed: Any
    policy: Policy
    topic_filter: str | None = None
    tiered_storage: str | None = None
    summary: Any = None
    sinks: Any = None
    out: Any = None

    @property
    def ledger(self):
        return self.tables["ledger"]

    @property
    def night(self) -> str | None:
        return self.summary.night

    @property
    def where(self) -> str:
        """Where the audit read the run: its branch and/or ``main``."""
        return ", ".join(sorted({w for w, _ in self.snapshots.values()}))


def audit(spark, wh: Warehouse, run_id: str, *, policy: Policy, docs: bool = True,
          out=None, topics: str | None = None, tiered_storage: str | None = None,
          sinks=None, gx=None):
    """Run the audit; return the dq_results rows (also committed to ``dq_results``), with the
    run's ``snapshot_missing`` rows (its plan's: kept as they are, counted in the verdict).
    ``topics``: the run's topic filter (layout.topic_matcher; None: all); ``tiered_storage``:
    the tier to list for the tier audit (:mod:`.tier`; None: its metadata checks only);
    ``sinks``: the Kafka->lake sinks to reconcile (:class:`spark_jobs.reconcile.job.Sinks`;
    None or none configured: no ``sink_reconcile`` result, no work); ``gx``: where the
    suites validate (:class:`expectations.gx_process.GxProcess`, started before the session;
    None: in this process)."""
    # the audit's settings (:data:`.inputs.ADAPTIVE`), the session's again after it; those
    # sized to the run (:data:`.inputs.SIZED`) are set once its tables are planned
    # (:func:`.inputs.load_tables`)
    with sql_conf(spark, {ADAPTIVE: "false", **{k: spark.conf.get(k) for k in SIZED}}):
        return audit_run(spark, wh, run_id, policy=policy, docs=docs, out=out, topics=topics,
                         tiered_storage=tiered_storage, sinks=sinks, gx=gx)


def audit_run(spark, wh: Warehouse, run_id: str, *, policy: Policy, docs: bool = True,
              out=None, topics: str | None = None, tiered_storage: str | None = None,
              sinks=None, gx=None):
    """:func:`audit`'s steps, in the audit's Spark settings."""
    out = out or sys.stdout
    store = storage.open_store(wh.root, wh.s3)
    run = read_run(spark, wh, run_id, out, policy=policy, topic_filter=topics,
                   tiered_storage=tiered_storage)
    run.sinks, run.out = sinks, out
    loaded: dict = {}
    for family in FAMILIES:  # what each family reads beyond the run's tables
        with described(spark, f"load {family.name}"):
            loaded.update(family.load(run, loaded))
    internal = {k: v for k, v in loaded.items() if k not in NOT_INTERNAL}
    units = places(run, loaded)
    if not units:
        raise LookupError(f"run {run_id!r} has no rows in catalog {wh.catalog_name!r} "
                          f"({run.where})")
    with described(spark, "observations"):
        observations, on_driver = run_observations(
            run.tables, policy, run_id, topics=audited_topics(run, loaded),
            finding_kinds=run.summary.finding_kinds, prior=run.prior, listed=run.listed,
            internal=internal, absent=loaded.get(ABSENT))
        # computed once: everything below reads the materialized rows
        observations = observations.localCheckpoint()
    with described(spark, "summarize"):
        classes, items = rows.summarize(observations)
    local_classes, local_items = rows.summarize_rows(on_driver)
    classes, items = classes + local_classes, items + local_items
    whole = []
    for family in FAMILIES:  # the sinks': results of their own
        if family.results is not None:
            with described(spark, f"results of {family.name}"):
                whole += family.results(run, loaded)
    dq_rows = [r.to_row() for r in
               rows.build_results(run_id, units, classes, items, policy, night=run.night)
               + whole]
    whole_classes, whole_items = rows.result_classes(whole)  # for the suites, as the others'
    classes, items = classes + whole_classes, items + whole_items
    with described(spark, "write results"):
        missing_nights = write_results(wh, run, dq_rows, internal, out)
    if docs:
        with described(spark, "data docs"):
            check_docs(store, run_id, dq_rows, classes, items, out, gx)
    return dq_rows + missing_nights


def read_run(spark, wh: Warehouse, run_id: str, out, *, policy: Policy,
             topic_filter: str | None = None, tiered_storage: str | None = None) -> AuditedRun:
    """Step 1: run ``run_id`` as the audit reads it (see :class:`AuditedRun`): each table read
    once (:func:`.inputs.materialize`)."""
    from spark_jobs.tables import read_table

    snapshots = audited_snapshots(wh, run_id)
    with described(spark, "read the run's tables"):
        tables = load_tables(spark, wh, run_id, snapshots, sized=True)
        published_ledger = materialize(read_table(spark, wh, "ledger"))
    with described(spark, "read the run: prior ends and listed segments"):
        prior = materialize(context.prior_ends(published_ledger, tables["ledger"], run_id))
        listed = materialize(context.listed_segments(tables["ledger"], published_ledger, run_id))
    run = AuditedRun(spark, wh, run_id, snapshots, tables, published_ledger, prior, listed,
                     policy, topic_filter, tiered_storage)
    with described(spark, "read the run: rows later nights published first"):
        borrow_published_rows(spark, wh, run, out)
    with described(spark, "read the run: summary"):
        run.summary = rows.run_summary(run.tables)
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
        run.tables[name] = materialize(as_of.above(name, run.tables[name], borrowed).unionByName(
            as_of.borrow(name, head, run.tables[name], borrowed, run.ledger, run.run_id)))
    run.listed = materialize(run.listed.unionByName(as_of.context(run.ledger, borrowed)))
    print(f"check_quality: {len(borrowed)} partitions' new offsets of run {run.run_id} "
          "were published by later runs first: their rows are audited as this night's",
          file=out)


def places(run: AuditedRun, loaded: dict) -> dict:
    """Step 2: (topic, partition) -> ``{unit: n}`` of every place of the run
    (:func:`.rows.run_summary`), with what each family (:data:`.registry.FAMILIES`: the
    internal topics' and state files' counts, the log directories, the partitions the run
    lacks where it names a night, the tier) counts and adds there (:mod:`.families`)."""
    units = {tp: dict(counts) for tp, counts in run.summary.units.items()}
    for family in FAMILIES:
        with described(run.spark, f"places of {family.name}"):
            family.places(run, loaded, units, family.checks)
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


def check_docs(store, run_id: str, dq_rows: list[dict], classes, items, out, gx=None) -> None:
    """Step 5: the great-expectations suites over the verdicts, Data Docs published; a suite
    per check, the optional checks only where they applied (an empty suite would read as a
    pass of something never checked). Raises where the suites and ``dq_rows`` disagree."""
    verdicts = rows.verdicts(classes, items)
    present = {r["check"] for r in dq_rows}
    summary = publish_docs(store, verdicts, run_id,
                           [c for c in CHECKS if c not in OPTIONAL_CHECKS or c in present],
                           out=out, gx=gx)
    gx_failed = {c for c, n in summary.items() if n.get("fail")}
    if gx_failed != {r["check"] for r in dq_rows if r["status"] == "fail"}:
        raise RuntimeError(f"great-expectations disagrees with dq_results: {sorted(gx_failed)}")


def publish_docs(store, verdicts: list[tuple], run_id: str, checks, out=None, gx=None) -> dict:
    """Validate ``verdicts`` (:func:`.rows.verdicts`) with the GX suites (in ``gx``, a
    :class:`expectations.gx_process.GxProcess`, if given), build Data Docs in a temp folder,
    upload them to ``data_docs/<run_token>/`` (replacing a previous upload); return the suites'
    summary ``{check: {"fail": n, "warn": n}}``."""
    import shutil

    from expectations import suites

    prefix = layout.run_folder(layout.DATA_DOCS, storage.run_token(run_id))
    validate = gx.validate if gx is not None else suites.validate
    summary, docs_dir = validate(verdicts, rows.VERDICT_COLUMNS, run_id, checks)
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
