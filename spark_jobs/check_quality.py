"""Audit one decode run: ``check_quality.py --warehouse W --run-id ID``.

Reads the run's rows at the head of its branch (``run_<run token>``: exactly
what publish will make current), or on ``main`` once published, runs the
checks of :mod:`spark_jobs.audit.checks` with the severity policy
(``expectations/policy.yaml`` unless ``--policy``), validates them with the
great-expectations suites of ``expectations/suites.py``, and writes

* the Iceberg table ``dq_results`` — one row per check × topic-partition, the
  run's earlier results replaced in one snapshot on ``main`` (the audit's
  verdict is visible at once, for runs that will never be published too);
* ``W/data_docs/<run_token>/index.html`` — the run's Data Docs.

Exit status: 0 when no check failed (warnings allowed); ``EXIT_CHECKS_FAILED``
(65, sysexits' EX_DATAERR) when the audit ran and a check failed (the FAIL lines
list them; publish must not run, and running the audit again gives the same
verdict); 2 on usage or I/O errors. Anything else (1 for an exception, the
JVM's own codes) is a crash, which a retry may fix. The last line printed is
the verdict, ``VERDICT_PREFIX`` + JSON (:func:`results.verdict`), which the Airflow
operator reads as the task's summary.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from spark_jobs import layout, storage
from spark_jobs.audit import absence, as_of, context, internal_checks, registry, results
from spark_jobs.audit import checks as qc
from spark_jobs.audit.inputs import audited_snapshots, load_tables
from spark_jobs.audit.observations import dedup_batches
from spark_jobs.audit.policy import Policy, PolicyError
from spark_jobs.warehouse import CatalogError, Warehouse, add_catalog_args

#: exit status of an audit that ran and failed a check (not a crash: no retry changes it)
EXIT_CHECKS_FAILED = 65
#: the verdict line's prefix (kafkalog_pipeline.operators reads it from spark-submit's output)
VERDICT_PREFIX = "check_quality: verdict "


def parse_args(argv):
    p = argparse.ArgumentParser(prog="check_quality", description=__doc__.split("\n\n")[0])
    p.add_argument("--warehouse", required=True, help="warehouse root W (local path or s3://bucket/prefix)")
    p.add_argument("--run-id", required=True, help="the run to audit (exact run_id)")
    add_catalog_args(p)
    p.add_argument("--policy", help="severity policy YAML (default: expectations/policy.yaml)")
    p.add_argument("--s3-endpoint", help="S3 endpoint URL (default: AWS_ENDPOINT_URL)")
    p.add_argument("--master", help="Spark master (default: spark-submit's, else local[*])")
    p.add_argument("--topics", default="*",
                   help="the topics the run was asked to read, as comma-separated fnmatch "
                        "patterns (the DAG's `topics`; default all): a partition of another "
                        "topic is not missing")
    p.add_argument("--no-docs", action="store_true", help="skip great-expectations and Data Docs")
    return p.parse_args(argv)


def audit(spark, wh: Warehouse, run_id: str, *, policy: Policy, docs: bool = True,
          out=None, topics: str | None = None):
    """Run the audit; return the dq_results rows (also committed to ``dq_results``), with the
    run's ``snapshot_missing`` rows (its plan's: kept as they are, counted in the verdict).
    ``topics``: the run's topic filter (layout.topic_matcher; None: all)."""
    out = out or sys.stdout
    from spark_jobs.tables import read_table

    store = storage.open_store(wh.root, wh.s3)
    snapshots = audited_snapshots(wh, run_id)
    tables = load_tables(spark, wh, run_id, snapshots)
    published_ledger = read_table(spark, wh, "ledger")
    # the night the run is audited as of: its last (None where its input named no night)
    night = tables["ledger"].agg({"night": "max"}).first()[0]
    prior = context.prior_ends(published_ledger, tables["ledger"], run_id)
    listed = context.listed_segments(tables["ledger"], published_ledger, run_id)
    borrowed = as_of.borrowed_ranges(as_of.new_ranges(tables["ledger"], listed, prior),
                                     published_ledger, run_id)
    if borrowed:  # a night audited after later nights published some of its new offsets
        only = as_of.row_filter(borrowed)
        for name in as_of.OFFSET_COLUMN:
            head = read_table(spark, wh, name, snapshot=snapshots[name][1], row_filter=only)
            tables[name] = as_of.above(name, tables[name], borrowed).unionByName(
                as_of.borrow(name, head, tables[name], borrowed, tables["ledger"], run_id))
        listed = listed.unionByName(as_of.context(tables["ledger"], borrowed))
        print(f"check_quality: {len(borrowed)} partitions' new offsets of run {run_id} "
              "were published by later runs first: their rows are audited as this night's",
              file=out)
    units = results.partition_units(tables)
    internal = internal_checks.load(spark, wh, run_id, snapshots, tables["ledger"], listed,
                                    published_ledger)
    for tp, counts in internal_checks.units(internal, dedup_batches(tables["batches"])).items():
        if tp in units:
            units[tp].update(counts)
    absent = None
    if night is not None:  # what earlier nights held and this one lacks
        absent = absence.missing_partitions(tables["ledger"], published_ledger, run_id,
                                       policy.lookback_nights(), layout.topic_matcher(topics))
        for tp in units:
            if tp[0] is not None:
                units[tp]["partitions"] = 1
        for r in absent.select("topic", "partition").collect():
            units[(r.topic, r.partition)] = {"partitions": 1, results.ONLY: {"missing_partition"}}
    where = ", ".join(sorted({w for w, _ in snapshots.values()}))
    if not units:
        raise LookupError(f"run {run_id!r} has no rows in catalog {wh.catalog_name!r} ({where})")
    observations, _ = qc.run_checks(tables, policy, run_id, prior=prior, listed=listed,
                                    internal=internal, absent=absent)
    # computed once: everything below reads the materialized rows
    observations = observations.localCheckpoint()
    classes, items = results.summarize(observations)
    rows = results.build_rows(run_id, units, classes, items, policy, night=night)
    results.write(wh, run_id, rows, audited={n: s for n, (_, s) in snapshots.items()})
    missing_nights = results.run_missing_nights(wh, run_id)
    lag = internal_checks.write_lag(wh, run_id, internal)
    if lag is not None:
        print(f"check_quality: {lag} consumer_lag rows of run {run_id} -> "
              f"{wh.namespace}.consumer_lag", file=out)
    print(f"check_quality: {len(rows)} results of run {run_id} (read from {where}) -> "
          f"{wh.namespace}.dq_results in catalog {wh.catalog_name!r}", file=out)
    if docs:
        verdicts = results.verdicts(spark, classes, items)
        # a suite per check, the internal topics' checks only where they applied (an empty
        # suite would read as a pass of something never checked)
        present = {r["check"] for r in rows}
        summary = publish_docs(store, verdicts, run_id,
                               [c for c in registry.CHECKS if c not in registry.OPTIONAL_CHECKS or c in present],
                               out=out)
        gx_failed = {c for c, n in summary.items() if n.get("fail")}
        if gx_failed != {r["check"] for r in rows if r["status"] == "fail"}:
            raise RuntimeError(f"great-expectations disagrees with dq_results: {sorted(gx_failed)}")
    return rows + missing_nights


def publish_docs(store, verdicts, run_id: str, checks, out=None) -> str:
    """Validate ``verdicts`` (results.verdicts) with the GX suites, build Data Docs in a temp
    folder, upload them to ``data_docs/<run_token>/`` (replacing a previous upload); return the
    suites' summary ``{check: {"fail": n, "warn": n}}``."""
    import shutil

    from expectations import suites

    prefix = f"data_docs/{storage.run_token(run_id)}"
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


def report(rows, out=None) -> int:
    """Print failing and warning results, then the verdict line (:data:`VERDICT_PREFIX`);
    :data:`EXIT_CHECKS_FAILED` if any failed, else 0."""
    out = out or sys.stderr
    failed = [r for r in rows if r["status"] == "fail"]
    warned = [r for r in rows if r["status"] == "warn"]
    for label, group in (("FAIL", failed), ("WARN", warned)):
        for r in group:
            details = json.loads(r["details"])
            first = (details.get("items") or [{}])[0].get("message", "")
            print(f"{label} {r['check']} {results.place(r)}: "
                  f"{results.plural(r['failed'], 'item')}, "
                  f"{results.checked(r['observed'], details.get('unit') or registry.UNITS.get(r['check']))}; "
                  f"first: {first}", file=out)
    if failed:
        print(f"check_quality: {len(failed)} check(s) failed; the run must not be published", file=out)
    else:
        print(f"check_quality: passed ({len(warned)} warning(s))", file=out)
    print(VERDICT_PREFIX + json.dumps(results.verdict(rows), sort_keys=True), file=out, flush=True)
    return EXIT_CHECKS_FAILED if failed else 0


def main(argv=None, spark=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        policy = Policy.load(args.policy)
    except (OSError, PolicyError) as err:
        print(f"check_quality: policy: {err}", file=sys.stderr)
        return 2
    config = None
    if storage.is_s3(args.warehouse) or args.s3_endpoint:
        config = storage.S3Config.from_env(args.s3_endpoint)
    wh = Warehouse(args.warehouse, args.catalog, args.namespace, config)
    if spark is None:
        from spark_jobs.session import build_session

        spark = build_session("check_quality", master=args.master)
    try:
        rows = audit(spark, wh, args.run_id, policy=policy, docs=not args.no_docs,
                     topics=args.topics)
    except (LookupError, storage.StorageError, CatalogError) as err:
        print(f"check_quality: {err}", file=sys.stderr)
        return 2
    return report(rows)


if __name__ == "__main__":
    # as a script (spark-submit spark_jobs/check_quality.py ...): run the importable module
    from spark_jobs import check_quality

    sys.exit(check_quality.main())
