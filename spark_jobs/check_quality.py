"""Audit one decode run: ``check_quality.py --warehouse W --run-id ID``.

Reads the run's staged tables (``W/_staging/<run_token>`` when it exists, else
the run's published rows in ``W``), runs the checks of
:mod:`spark_jobs.quality.checks` with the severity policy
(``expectations/policy.yaml`` unless ``--policy``), validates them with the
great-expectations suites of ``expectations/suites.py``, and writes

* ``W/dq_results/<run_token>.parquet`` — one row per check × topic-partition;
* ``W/data_docs/<run_token>/index.html`` — the run's Data Docs.

Exit status: 0 when no check failed (warnings allowed), 1 when one did (the
message lists them; publish must not run), 2 on usage or I/O errors.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from spark_jobs import storage
from spark_jobs.quality import checks as qc
from spark_jobs.quality import results
from spark_jobs.quality.policy import Policy, PolicyError

TABLES = ("records", "batches", "markers", "findings", "ledger")


def parse_args(argv):
    p = argparse.ArgumentParser(prog="check_quality", description=__doc__.split("\n\n")[0])
    p.add_argument("--warehouse", required=True, help="warehouse root W (local path or s3://bucket/prefix)")
    p.add_argument("--run-id", required=True, help="the run to audit (exact run_id)")
    p.add_argument("--staging", help="root of the run's staged tables "
                   "(default: W/_staging/<run_token> if it exists, else the run's rows in W)")
    p.add_argument("--policy", help="severity policy YAML (default: expectations/policy.yaml)")
    p.add_argument("--s3-endpoint", help="S3 endpoint URL (default: AWS_ENDPOINT_URL)")
    p.add_argument("--master", help="Spark master (default: spark-submit's, else local[*])")
    p.add_argument("--no-docs", action="store_true", help="skip great-expectations and Data Docs")
    return p.parse_args(argv)


def staging_root(store, warehouse: str, token: str, explicit: str | None) -> str | None:
    if explicit:
        return explicit
    prefix = f"_staging/{token}/"
    for _ in store.list(prefix):
        return storage.join(warehouse, prefix.rstrip("/"))
    return None


def load_tables(spark, warehouse: str, run_id: str, staged: str | None, config):
    """The run's five tables: from ``staged`` (every row there is the run's), else W."""
    from spark_jobs.tables import read_table

    out = {}
    for name in TABLES:
        if staged is not None:
            df = read_table(spark, staged, name, config=config)
        else:
            df = read_table(spark, warehouse, name, run_id=run_id, config=config)
        out[name] = df.where(df.run_id == run_id)
    return out


def audit(spark, warehouse: str, run_id: str, *, policy: Policy, staging: str | None = None,
          config=None, docs: bool = True, out=None):
    """Run the audit; return the dq_results rows (also written to ``warehouse``)."""
    out = out or sys.stdout
    from spark_jobs.tables import read_table

    store = storage.open_store(warehouse, config)
    token = storage.run_token(run_id)
    staged = staging_root(store, warehouse, token, staging)
    tables = load_tables(spark, warehouse, run_id, staged, config)
    published_ledger = read_table(spark, warehouse, "ledger", config=config)
    prior = qc.prior_ends(published_ledger, tables["ledger"], run_id)
    units = results.partition_units(tables)
    if not units:
        raise LookupError(f"run {run_id!r} has no rows in {staged or warehouse}")
    observations, _ = qc.run_checks(tables, policy, run_id, prior=prior)
    # computed once: everything below reads the materialized rows
    observations = observations.localCheckpoint()
    classes, items = results.summarize(observations)
    rows = results.build_rows(run_id, units, classes, items, policy)
    key = results.write(store, run_id, rows)
    print(f"check_quality: {len(rows)} results of run {run_id} "
          f"({'staged at ' + staged if staged else 'published'}) -> {store.uri(key)}", file=out)
    if docs:
        verdicts = results.verdicts(spark, classes, items)
        summary = publish_docs(store, verdicts, run_id, list(qc.CHECKS), out=out)
        gx_failed = {c for c, n in summary.items() if n.get("fail")}
        if gx_failed != {r["check"] for r in rows if r["status"] == "fail"}:
            raise RuntimeError(f"great-expectations disagrees with dq_results: {sorted(gx_failed)}")
    return rows


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
    """Print failing and warning results; 1 if any failed, else 0."""
    out = out or sys.stderr
    failed = [r for r in rows if r["status"] == "fail"]
    warned = [r for r in rows if r["status"] == "warn"]
    for label, group in (("FAIL", failed), ("WARN", warned)):
        for r in group:
            first = (json.loads(r["details"]).get("items") or [{}])[0].get("message", "")
            print(f"{label} {r['check']} {r['topic']}-{r['partition']}: {r['failed']} problem(s) "
                  f"in {r['observed']} checked; first: {first}", file=out)
    if failed:
        print(f"check_quality: {len(failed)} check(s) failed; the run must not be published", file=out)
        return 1
    print(f"check_quality: passed ({len(warned)} warning(s))", file=out)
    return 0


def main(argv=None, spark=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        policy = Policy.load(args.policy)
    except (OSError, PolicyError) as err:
        print(f"check_quality: policy: {err}", file=sys.stderr)
        return 2
    config = None
    if storage.is_s3(args.warehouse):
        config = storage.S3Config.from_env(args.s3_endpoint)
    if spark is None:
        from spark_jobs.session import build_session

        spark = build_session("check_quality", master=args.master)
    try:
        rows = audit(spark, args.warehouse, args.run_id, policy=policy, staging=args.staging,
                     config=config, docs=not args.no_docs)
    except (LookupError, storage.StorageError) as err:
        print(f"check_quality: {err}", file=sys.stderr)
        return 2
    return report(rows)


if __name__ == "__main__":
    # as a script (spark-submit spark_jobs/check_quality.py ...): run the importable module
    from spark_jobs import check_quality

    sys.exit(check_quality.main())
