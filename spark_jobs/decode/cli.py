"""The decode job's command line: plan, run the tasks, dedupe, commit, publish.

    spark-submit spark_jobs/decode_segments.py --input URI --output W --run-id ID [--no-publish]

:func:`main` raises; only the command-line entry (``spark_jobs/decode_segments.py``)
turns an error into an exit status.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from dataclasses import replace

import pyarrow as pa

from kafkalog.schemas import RegistryError
from spark_jobs import layout, schemas, storage, tables
from spark_jobs.derive import internal, typed
from spark_jobs.findings import REPLICA_DIVERGENCE, Finding
from spark_jobs.findings import table as findings_table
from spark_jobs import publish as publishing
from spark_jobs.decode import replicas, values
from spark_jobs.decode.deduplication import resolve_pending
from spark_jobs.decode.planning import (DEFAULT_SPLIT_BYTES, discover, first_ingested, ingested,
                                    ledger_ranges, plan, read_index_positions)
from spark_jobs.decode.executor import run_tasks
from spark_jobs.decode.writing import (DEFAULT_MAX_RAW, DEFAULT_READ_AHEAD, is_pending,
                                     ledger_table, make_context, task_files,
                                     write_driver_table)
from spark_jobs.warehouse import Warehouse, add_catalog_args, branch_name

def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="decode_segments.py",
        description="Decode Kafka segment snapshots into Iceberg tables (records, batches, "
                    "markers, findings, ledger); see docs/tables.md.")
    p.add_argument("--input", required=True,
                   help="a local directory or s3://bucket/prefix holding <topic>-<partition>/"
                        "<base offset>.log at any depth, or a JSON manifest of segment URIs")
    p.add_argument("--output", required=True,
                   help="the warehouse root W (local path or s3://): scratch space, and the "
                        "embedded catalog's home where no catalog is configured")
    p.add_argument("--run-id", required=True,
                   help="this run's id; rerunning an id replaces exactly that run's output")
    p.add_argument("--chunk-id", help="this submission is one chunk of the run (see docs/tables.md)")
    p.add_argument("--night", type=layout.night, metavar="YYYY-MM-DD",
                   help="the snapshot night the input holds, recorded in the ledger (a "
                        "manifest entry's own \"night\" wins); the audit reads a run as of "
                        "its night (default: none)")
    p.add_argument("--no-publish", action="store_true",
                   help="stop after committing to the run's branch (the DAG audits, then runs "
                        "spark_jobs.publish)")
    add_catalog_args(p)
    p.add_argument("--s3-endpoint", help="S3-compatible endpoint URL (default: AWS_ENDPOINT_URL)")
    p.add_argument("--reprocess", action="store_true",
                   help="decode every segment from byte 0 even where the ledger proves it "
                        "ingested; published offsets are deduplicated, changed ones give "
                        "divergence findings")
    p.add_argument("--split-bytes", type=int, default=DEFAULT_SPLIT_BYTES,
                   help="split segments with an .index into tasks of about this many bytes "
                        "(default %(default)s)")
    p.add_argument("--max-raw-bytes", type=int, default=DEFAULT_MAX_RAW,
                   help="keep at most this many raw bytes per finding (default %(default)s)")
    p.add_argument("--read-ahead", type=int, default=DEFAULT_READ_AHEAD, metavar="N",
                   help="where small segments on S3 share a Spark task, start reading the "
                        "next N tasks' objects while one decodes (default %(default)s; 0: off)")
    p.add_argument("--schema-registry", metavar="URL|DIR",
                   help="decode keys and values in Schema Registry's wire format with this "
                        "registry: a URL (basic auth from the environment, "
                        f"{values.AUTH_ENV[0]} / {values.AUTH_ENV[1]}), a segment manifest "
                        "(.json) or s3:// prefix holding _schemas segments, a local _schemas "
                        "folder or a schema folder (default: the input's own _schemas segments; none: "
                        "the value columns stay null; docs/schemas.md)")
    p.add_argument("--master", help="Spark master (default: spark-submit's, else local[*])")
    return p.parse_args(argv)


def main(argv=None, spark=None) -> dict:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    t0 = time.time()
    needs_s3 = any(storage.is_s3(u) for u in (args.input, args.output)) or args.s3_endpoint
    s3 = storage.S3Config.from_env(args.s3_endpoint) if needs_s3 else None
    wh = Warehouse(args.output, args.catalog, args.namespace, s3)
    # what main held when the run began is what it deduplicates against (a whole run
    # starts its branch again; a chunk joins the branch its run's plan made)
    bases = wh.begin_run(args.run_id, reset=args.chunk_id is None)
    ledger = tables.read_arrow(wh, "ledger", snapshot=bases["ledger"])
    ctx = make_context(wh, args.run_id, uuid.uuid4().hex[:8], chunk_id=args.chunk_id,
                       max_raw=args.max_raw_bytes, read_ahead=max(0, args.read_ahead),
                       ingested_at=first_ingested(ledger, args.run_id))

    state_uris: list[str] = []  # the partitions' state files (spark_jobs.derive.internal)
    try:
        segments, unparsable = discover(args.input, s3, state_files=state_uris, night=args.night)
    except layout.ManifestError as err:
        raise SystemExit(f"decode_segments: {err}") from err
    try:
        registry = values.registry_for_run(args.schema_registry, segments, s3,
                                           auth=values.auth_from_env())
    except RegistryError as err:
        raise SystemExit(f"decode_segments: --schema-registry: {err}") from err
    ctx = replace(ctx, registry=registry)
    for uri in unparsable:
        print(f"decode_segments: {uri} is not {layout.GRAMMAR}: not decoded "
              "(an unparsable_name finding)", file=sys.stderr)
    coverage = ingested(ledger, args.run_id, reprocess=args.reprocess)
    published = ledger_ranges(ledger, args.run_id)
    to_split = [s for s in segments
                if s.index_uri and s.size > args.split_bytes and s.key not in coverage]
    index_positions = read_index_positions(
        [s.index_uri for s in to_split], s3,
        pins={s.index_uri: s.index_pin(s.index_uri) for s in to_split})
    tasks = plan(segments, coverage, published, index_positions, args.split_bytes)

    own_session = spark is None
    if own_session:
        from spark_jobs.session import build_session

        spark = build_session("kafkalog-decode-segments", master=args.master)
    timings = {"plan": time.time() - t0}
    try:
        # copies of one partition under several brokers' folders: framed, each batch
        # decoded once (replicas.py)
        t1 = time.time()
        groups = replicas.replicated(segments)
        reconciled, replica_findings = set(), None
        if groups:
            framed = replicas.frame_all(spark, [s for g in groups.values() for s in g], s3)
            tasks, replica_findings, reconciled = replicas.replan(tasks, groups, framed,
                                                                  published, args.run_id,
                                                                  args.split_bytes)
        timings["frame"] = time.time() - t1
        t1 = time.time()
        rows = run_tasks(spark, tasks, ctx, args.split_bytes)
        timings["decode"] = time.time() - t1
        # the tasks' own wall time (the rest of "decode" is Spark's: scheduling, workers)
        timings["tasks_sum"] = sum(r.get("task_seconds", 0.0) for r in rows)
        timings["task_max"] = max((r.get("task_seconds", 0.0) for r in rows), default=0.0)
        timings["tasks_cpu_sum"] = sum(r.get("task_cpu_seconds", 0.0) for r in rows)
        files = task_files(rows)
        # the partitions whose output went to the scratch. A pending partition whose tasks
        # wrote nothing (its segments all unchanged: a backfill of what is published) has
        # nothing to deduplicate, and a Spark dedupe of nothing costs seconds
        pending = {(r["topic"], r["partition"]) for r in rows
                   if is_pending(r) and any((r.get("files") or {}).values())}
        t1 = time.time()
        divergences = 0
        if pending:
            divergences, deduped = resolve_pending(spark, ctx, wh, bases, rows, args.chunk_id,
                                                      ledger, reported=reconciled)
            for name, fs in deduped.items():
                files[name].extend(fs)
        timings["deduplicate"] = time.time() - t1
        # internal topics and state files -> their tables (nothing at all where there are none)
        t1 = time.time()
        derived, derived_rows = internal.derive(spark, ctx, wh, files["records"],
                                                state_uris, args.run_id)
        if derived_rows:
            timings["internal"] = time.time() - t1
        # values with an Avro schema -> a typed table per topic (nothing where none has one)
        t1 = time.time()
        typed_files, typed_rows = typed.derive(spark, ctx, wh, files["records"], registry)
        if typed_rows or typed_files:
            timings["typed"] = time.time() - t1
    finally:
        if own_session and args.master is not None:
            spark.stop()
    damaged_copies = 0  # the replicas' findings: divergences, and damaged copies not decoded
    if replica_findings is not None and replica_findings.num_rows:
        kinds = replica_findings.column("kind").to_pylist()
        divergences += kinds.count(REPLICA_DIVERGENCE)
        damaged_copies = kinds.count(replicas.DAMAGED_COPY)
        files["findings"].extend(write_driver_table(ctx, "findings", replica_findings,
                                                    "replicas"))
    if unparsable:
        files["findings"].extend(write_driver_table(ctx, "findings", unparsable_findings(
            unparsable, args.run_id), "names"))
    ledger_out = ledger_table(rows)
    if ledger_out.num_rows:
        files["ledger"].extend(write_driver_table(ctx, "ledger", ledger_out, "ledger"))
    t1 = time.time()
    counts = {"records": sum(r["records"] for r in rows), "batches": sum(r["batches"] for r in rows),
              "findings": sum(r["findings"] for r in rows) + divergences + damaged_copies
              + len(unparsable)
              + derived_rows.pop("findings", 0) + typed_rows.pop("findings", 0)}
    files["findings"].extend(derived.pop("findings", []))
    files["findings"].extend(typed_files.pop("findings", []))
    for name in schemas.DERIVED_TABLES:
        if name in derived and name not in bases:  # the table's first rows: made just now
            bases[name] = wh.begin_table(name, args.run_id)
        if name in bases:
            wh.commit_files(name, args.run_id, derived.get(name, []), chunk_id=args.chunk_id)
    made = wh.typed_tables() if registry is not None else ()  # with those made just now
    for name in sorted({n for n in (*typed_files, *bases, *made) if layout.typed_topic(n) is not None}):
        if name not in bases:  # made (or first written) by this run
            bases[name] = wh.begin_table(name, args.run_id)
        wh.commit_files(name, args.run_id, typed_files.get(name, []), chunk_id=args.chunk_id)
    for name in schemas.DECODE_TABLES:
        wh.commit_files(name, args.run_id, files[name], chunk_id=args.chunk_id,
                        summary={"kafkalog.segments": len(segments), "kafkalog.tasks": len(tasks)})
    timings["commit"] = time.time() - t1
    summary = {
        "run_id": args.run_id, "chunk_id": args.chunk_id, "segments": len(segments),
        "tasks": len(tasks), "bytes": sum(t.end - t.start for t in tasks),
        "schemas": values.describe(registry),
        **counts, "divergences": divergences, "unparsable": len(unparsable),
        "actions": {a: sum(1 for r in rows if r["action"] == a)
                    for a in sorted({r["action"] for r in rows})},
        "pending_partitions": len(pending), "replicated_partitions": len(reconciled),
        "branch": branch_name(args.run_id),
        "catalog": args.catalog, "published": False, "seconds": None,
    }
    if derived_rows:
        summary["internal"] = dict(sorted(derived_rows.items()))
    if typed_rows:
        summary["typed"] = dict(sorted(typed_rows.items()))
    if not args.no_publish:
        t1 = time.time()
        publishing.publish_run(wh, args.run_id)
        timings["publish"] = time.time() - t1
        summary["published"] = True
    summary["seconds"] = round(time.time() - t0, 3)
    summary["timings"] = {k: round(v, 3) for k, v in timings.items()}
    print(json.dumps(summary, sort_keys=True))
    return summary


def unparsable_findings(uris: list[str], run_id: str) -> pa.Table:
    """An ``unparsable_name`` finding per listed ``.log`` object the job cannot place."""
    rows = []
    for uri in uris:
        parent = uri.rstrip("/").rsplit("/", 2)[-2] if "/" in uri else ""
        topic, partition = layout.parse_partition_dir(parent) or (None, None)
        rows.append(Finding(
            kind="unparsable_name", position=0, end=0,
            message=f"{uri}: the name is not {layout.GRAMMAR}, so the object was not decoded",
            topic=topic, partition=partition, segment=uri, run_id=run_id))
    return findings_table(rows)
