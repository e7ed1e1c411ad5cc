"""Audit one decode run: ``check_quality.py --warehouse W --run-id ID``.

Reads the run's rows at the head of its branch (``run_<run token>``: exactly
what publish will make current), or on ``main`` once published, runs the
checks of :mod:`spark_jobs.audit` (:mod:`spark_jobs.audit.job`) with the severity policy
(``expectations/policy.yaml`` unless ``--policy``), validates them with the
great-expectations suites of ``expectations/suites.py``, and writes

* the Iceberg table ``dq_results`` — one row per check × topic-partition, the
  run's earlier results replaced in one snapshot on ``main`` (the audit's
  verdict is visible at once, for runs that will never be published too);
* ``W/data_docs/<run_token>/index.html`` — the run's Data Docs.

With sinks configured (``--sinks``, default ``expectations/sinks.yaml``), the audit also
reconciles each against the log as of the run's night: ``sink_reconcile`` rows, one per
sink x topic-partition (docs/sinks.md).

Exit status: 0 when no check failed (warnings allowed); ``EXIT_CHECKS_FAILED``
(65, sysexits' EX_DATAERR) when the audit ran and a check failed (the FAIL lines
list them; publish must not run, and running the audit again gives the same
verdict); 2 on usage or I/O errors (their cause first, one line:
:mod:`spark_jobs.crash`). Anything else (1 for an exception, the
JVM's own codes) is a crash, which a retry may fix. The last line printed is
the verdict, ``VERDICT_PREFIX`` + JSON (:func:`results.verdict`), which the Airflow
operator reads as the task's summary.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys

from spark_jobs import crash, storage
from spark_jobs.audit import registry, results
from spark_jobs.audit.job import audit
from spark_jobs.audit.policy import Policy, PolicyError
from spark_jobs.reconcile import config as sink_config
from spark_jobs.reconcile.job import Sinks
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
    p.add_argument("--tiered-storage", metavar="URI",
                   help="the tier of the run's tiered topics (s3://bucket/key-prefix as the "
                        "remote storage plugin's key.prefix, or a local copy of the bucket): "
                        "listed once for the tier audit's object checks (docs/tiered.md; "
                        "default: the tier's metadata checks only)")
    p.add_argument("--sinks", metavar="FILE",
                   help="the Kafka->lake sinks to reconcile against the log as of the run's "
                        "night (check sink_reconcile, docs/sinks.md; default: "
                        "expectations/sinks.yaml, which configures none)")
    p.add_argument("--no-docs", action="store_true", help="skip great-expectations and Data Docs")
    return p.parse_args(argv)


def report(rows, out=None) -> int:
    """Print failing and warning results, then the verdict line (:data:`VERDICT_PREFIX`);
    :data:`EXIT_CHECKS_FAILED` if any failed, else 0."""
    out = out or sys.stderr
    failed = [r for r in rows if r["status"] == "fail"]
    warned = [r for r in rows if r["status"] == "warn"]
    for label, group in (("FAIL", failed), ("WARN", warned)):
        for r in group:
            details = results.parse_details(r["details"]) or results.Details(unit=None)
            first = details.items[0].message if details.items else ""
            unit = details.unit or registry.UNITS.get(r["check"])
            print(f"{label} {r['check']} {results.place(r)}: "
                  f"{results.plural(r['failed'], 'item')}, "
                  f"{results.checked(r['observed'], unit)}; first: {first}", file=out)
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
        print(crash.cause_line(f"check_quality: policy: {err}"), file=sys.stderr, flush=True)
        return 2
    try:
        sinks = Sinks(tuple(sink_config.load(args.sinks)))
    except sink_config.SinkConfigError as err:
        print(crash.cause_line(f"check_quality: {err}"), file=sys.stderr, flush=True)
        return 2
    config = None
    if (storage.is_s3(args.warehouse) or args.s3_endpoint
            or storage.is_s3(args.tiered_storage or "")):
        config = storage.S3Config.from_env(args.s3_endpoint)
    wh = Warehouse(args.warehouse, args.catalog, args.namespace, config)
    with contextlib.ExitStack() as stack:
        gx = None
        if spark is None:  # a process of its own: great-expectations imports beside the session
            from spark_jobs.session import build_session

            if not args.no_docs:
                from expectations.gx_process import GxProcess

                gx = stack.enter_context(GxProcess())
            spark = build_session("check_quality", master=args.master)
        try:
            rows = audit(spark, wh, args.run_id, policy=policy, docs=not args.no_docs,
                         topics=args.topics, tiered_storage=args.tiered_storage, sinks=sinks,
                         gx=gx)
        except (LookupError, storage.StorageError, CatalogError,
                sink_config.SinkConfigError) as err:
            print(crash.cause_line(f"check_quality: {crash.cause_of(err)}"), file=sys.stderr,
                  flush=True)
            return 2
    return report(rows)


if __name__ == "__main__":
    # as a script (spark-submit spark_jobs/check_quality.py ...): run the importable module
    from spark_jobs import check_quality

    sys.exit(crash.run(check_quality.main))
