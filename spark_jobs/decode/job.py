"""The decode job as a page of named steps: begin the run → list → plan → frame replicas →
run the tasks → dedupe → derive → write the driver's tables → commit → publish.

:func:`run` takes parsed arguments (:func:`spark_jobs.decode.cli.parse_args`) and returns the
summary it prints as one JSON line. It raises; only the command-line entry
(``spark_jobs/decode_segments.py``) turns an error into an exit status.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from dataclasses import dataclass, field, replace

import pyarrow as pa

import kafkalog
from kafkalog.schemas import RegistryError
from spark_jobs import layout, schemas, storage, tables
from spark_jobs import publish as publishing
from spark_jobs.decode import replicas, tier, transactions, values
from spark_jobs.decode.deduplication import resolve_pending
from spark_jobs.decode.executor import run_tasks
from spark_jobs.decode.planning import (Segment, Task, discover, first_ingested, ingested,
                                        ledger_ranges, plan, read_index_positions)
from spark_jobs.decode.results import TaskResult, ledger_table, task_files
from spark_jobs.decode.writing import Context, make_context, write_driver_table
from spark_jobs.derive import (internal, keyed_tables, keyed_tasks, log_dirs, producer_txns, remote,
                               streams_groups, typed)
from spark_jobs.derive.step import Output, Submission, merge
from spark_jobs.findings import REPLICA_DIVERGENCE, TIER_DIVERGENCE, Finding
from spark_jobs.findings import table as findings_table
from spark_jobs.warehouse import Warehouse, branch_name


@dataclass
class Run:
    """The run as it begins: its warehouse, what ``main`` held then, its context."""

    args: object  # the parsed command line
    s3: storage.S3Config | None
    wh: Warehouse
    bases: dict  # table -> the snapshot of main the run began from (more as tables are made)
    ledger: pa.Table  # the ledger as main held it
    ctx: Context
    started: float
    timings: dict = field(default_factory=dict)
    #: the offsets ``main`` holds, by partition (:func:`~spark_jobs.decode.planning.ledger_ranges`)
    published: dict = field(default_factory=dict)


@dataclass
class Listing:
    """What the input holds: segments, names the job cannot place, the partitions' state
    files (:mod:`spark_jobs.derive.internal`), the Schema Registry for its values and the
    log directories' own files (:mod:`spark_jobs.derive.log_dirs`)."""

    segments: list[Segment]
    unparsable: list[str]
    state_uris: list[str]
    registry: object
    #: the tier's findings: live remote segments that could not be opened (decode.tier)
    tier_findings: list = field(default_factory=list)
    log_dir_files: list[dict] = field(default_factory=list)  # {"uri", "night"} each


@dataclass
class Decoded:
    """The tasks run and their output: their results, data files by table, the partitions
    that went through the dedupe, and the replicas' findings."""

    tasks: list[Task]
    results: list[TaskResult]
    files: dict[str, list[str]]
    pending: set = field(default_factory=set)
    reconciled: set = field(default_factory=set)  # replicated partitions
    replica_findings: pa.Table | None = None
    divergences: int = 0  # record-level (the dedupe's); the replicas' are counted after


@dataclass
class Derived:
    """The derived tables' files and rows: internal topics and state files, typed values."""

    internal_files: dict[str, list[str]]
    internal_rows: dict[str, int]
    typed_files: dict[str, list[str]]
    typed_rows: dict[str, int]


def run(args, spark=None) -> dict:
    """The job: a page of its steps; returns (and prints) the summary."""
    own_session = spark is None
    if own_session:  # the driver plans (no Spark in it) while its Spark session starts
        from concurrent.futures import ThreadPoolExecutor

        from spark_jobs.session import build_session

        with ThreadPoolExecutor(1, thread_name_prefix="decode-plan") as pool:
            planned = pool.submit(prepare, args)
            spark = build_session("kafkalog-decode-segments", master=args.master)
            try:
                job, listing, tasks = planned.result()
            except BaseException:
                if args.master is not None:
                    spark.stop()
                raise
    else:
        job, listing, tasks = prepare(args)
    job.timings["plan"] = time.time() - job.started
    try:
        decoded = frame_replicas(spark, job, listing, tasks)
        run_decode_tasks(spark, job, decoded)
        dedupe(spark, job, decoded)
        derived = derive(spark, job, listing, decoded)
        counts = write_driver_tables(job, listing, decoded, derived)
        commit(job, listing, decoded, derived)
        resolved = resolve_transactions(job)
        committed = resolved.pop("committed", None)
        after = derive_after_commit(spark, job, listing, decoded, derived)
        refreshed = refresh_keyed(spark, job, listing, decoded, committed)  # on the executors
    finally:
        if own_session and args.master is not None:
            spark.stop()
    out = summary(job, listing, decoded, derived, counts)
    out["txn_resolved"] = resolved
    out.update({name: n for name, n in after.items() if n})
    if refreshed:
        out["keyed"] = refreshed
    if not args.no_publish:
        t1 = time.time()
        publishing.publish_run(job.wh, args.run_id)
        job.timings["publish"] = time.time() - t1
        out["published"] = True
    out["seconds"] = round(time.time() - job.started, 3)
    out["timings"] = {k: round(v, 3) for k, v in job.timings.items()}
    print(json.dumps(out, sort_keys=True))
    return out


def prepare(args) -> tuple[Run, Listing, list[Task]]:
    """The driver's steps before Spark: begin the run, list its input, plan its tasks."""
    job = begin(args)
    listing = list_input(job)
    return job, listing, plan_tasks(job, listing)


def begin(args) -> Run:
    """Open the warehouse and begin the run: what ``main`` held when the run began is
    what it deduplicates against (a whole run starts its branch again; a chunk joins the
    branch its run's plan made)."""
    started = time.time()
    needs_s3 = any(storage.is_s3(u) for u in (args.input, args.output, args.tiered_storage or "")) \
        or args.s3_endpoint
    s3 = storage.S3Config.from_env(args.s3_endpoint) if needs_s3 else None
    try:  # the key ring from the environment (never the command line): read before anything
        tier_access = tier.access_from_env(args.tiered_storage) if args.tiered_storage else None
    except kafkalog.KafkaLogError as err:
        raise SystemExit(f"decode_segments: {layout.TIERED_STORAGE_FLAG}: {err}") from err
    wh = Warehouse(args.output, args.catalog, args.namespace, s3)
    bases = wh.begin_run(args.run_id, reset=args.chunk_id is None)
    ledger = tables.read_arrow(wh, "ledger", snapshot=bases["ledger"])
    ctx = make_context(wh, args.run_id, uuid.uuid4().hex[:8], chunk_id=args.chunk_id,
                       max_raw=args.max_raw_bytes, read_ahead=max(0, args.read_ahead),
                       ingested_at=first_ingested(ledger, args.run_id), tier=tier_access)
    return Run(args, s3, wh, bases, ledger, ctx, started)


def list_input(job: Run) -> Listing:
    """List the input's segments (and state files) and load the run's Schema Registry
    into the context; a bad manifest or registry ends the job."""
    args = job.args
    state_uris: list[str] = []
    log_dir_files: list[dict] = []
    try:
        segments, unparsable = discover(args.input, job.s3, state_files=state_uris,
                                        night=args.night, log_dir_files=log_dir_files)
    except layout.ManifestError as err:
        raise SystemExit(f"decode_segments: {err}") from err
    try:
        registry = values.registry_for_run(args.schema_registry, segments, job.s3,
                                           auth=values.auth_from_env())
    except RegistryError as err:
        raise SystemExit(f"decode_segments: --schema-registry: {err}") from err
    job.ctx = replace(job.ctx, registry=registry)
    for uri in unparsable:
        print(f"decode_segments: {uri} is not {layout.GRAMMAR}: not decoded "
              "(an unparsable_name finding)", file=sys.stderr)
    tier_findings = []
    if job.ctx.tier is not None:  # the live remote segments, from the input's own metadata
        t1 = time.time()
        remote, tier_findings = tier.discover(
            job.ctx.tier, [s for s in segments if s.topic == layout.REMOTE_LOG_METADATA_TOPIC],
            job.s3, night=args.night)
        segments = segments + remote
        job.timings["tier_list"] = time.time() - t1
    return Listing(segments, unparsable, state_uris, registry, tier_findings,
                   log_dir_files)


def plan_tasks(job: Run, listing: Listing) -> list[Task]:
    """The run's tasks: the ledger's coverage, big segments split at their ``.index``."""
    args = job.args
    coverage = ingested(job.ledger, args.run_id, reprocess=args.reprocess)
    job.published = published = ledger_ranges(job.ledger, args.run_id)
    to_split = [s for s in listing.segments
                if s.index_uri and s.size > args.split_bytes and s.key not in coverage]
    index_positions = read_index_positions(
        [s.index_uri for s in to_split], job.s3,
        pins={s.index_uri: s.index_pin(s.index_uri) for s in to_split})
    index_positions.update(tier.split_positions(  # a remote segment's, from its .indexes
        [s for s in listing.segments if s.remote and s.size > args.split_bytes
         and s.key not in coverage], job.ctx.tier, job.s3))
    return plan(listing.segments, coverage, published, index_positions, args.split_bytes)


def frame_replicas(spark, job: Run, listing: Listing, tasks: list[Task]) -> Decoded:
    """Copies of one partition under several brokers' folders: framed, each batch decoded
    once (:mod:`~spark_jobs.decode.replicas`); the tasks planned again for them."""
    t1 = time.time()
    decoded = Decoded(tasks, [], {})
    groups = replicas.replicated(listing.segments)
    if groups:
        framed = replicas.frame_all(spark, [s for g in groups.values() for s in g], job.s3,
                                    job.ctx.tier)
        decoded.tasks, decoded.replica_findings, decoded.reconciled = replicas.replan(
            tasks, groups, framed, job.published, job.args.run_id, job.args.split_bytes)
    job.timings["frame"] = time.time() - t1
    return decoded


def run_decode_tasks(spark, job: Run, decoded: Decoded) -> None:
    """Run the tasks on the executors: their results, data files and pending partitions."""
    t1 = time.time()
    results = decoded.results = run_tasks(spark, decoded.tasks, job.ctx, job.args.split_bytes)
    job.timings["decode"] = time.time() - t1
    # the tasks' own wall time (the rest of "decode" is Spark's: scheduling, workers)
    job.timings["tasks_sum"] = sum(r.seconds for r in results)
    job.timings["task_max"] = max((r.seconds for r in results), default=0.0)
    job.timings["tasks_cpu_sum"] = sum(r.cpu_seconds for r in results)
    decoded.files = task_files(results)
    # the partitions whose output went to the scratch. A pending partition whose tasks
    # wrote nothing (its segments all unchanged: a backfill of what is published) has
    # nothing to deduplicate, and a Spark dedupe of nothing costs seconds
    decoded.pending = {(r.ledger["topic"], r.ledger["partition"]) for r in results
                       if r.is_pending and any(r.files.values())}


def dedupe(spark, job: Run, decoded: Decoded) -> None:
    """Deduplicate the pending partitions' output against what ``main`` held."""
    t1 = time.time()
    if decoded.pending:
        decoded.divergences, deduped = resolve_pending(
            spark, job.ctx, job.wh, job.bases, decoded.results, job.args.chunk_id, job.ledger,
            reported=decoded.reconciled)
        for name, fs in deduped.items():
            decoded.files[name].extend(fs)
    job.timings["deduplicate"] = time.time() - t1


#: the derive steps of the internal tables (each ``derive(Submission)``), by the timing
#: they count under; the typed tables' step (:func:`typed.derive`) runs after them
INTERNAL_STEPS = ((internal.derive, "internal"), (log_dirs.derive, "internal"),
                  (remote.derive, "remote"))
#: the derive steps that read the run's branch as committed (each ``derive(Submission)``,
#: ``sub.files`` the submission's own data files): after the commit and the transactions'
#: resolution (:func:`derive_after_commit`), by their table and the timing they count under
AFTER_COMMIT_STEPS = ((producer_txns.derive, producer_txns.TABLE, "eos"),
                      (streams_groups.derive, streams_groups.TABLE, "streams"))


def derive(spark, job: Run, listing: Listing, decoded: Decoded) -> Derived:
    """The derived tables from the deduplicated records: internal topics, state files, the
    log directories' own files and ``remote_segments`` (nothing at all where there are
    none), typed values (nothing where no topic's values have a schema)."""
    sub = Submission(spark, job.ctx, job.wh, job.args.run_id, job.args.night,
                     decoded.files["records"], listing.segments, listing.state_uris,
                     listing.log_dir_files, listing.registry, job.bases, job.ledger)
    internal_out: Output = ({}, {})
    for step, timing in INTERNAL_STEPS:
        t1 = time.time()
        out = step(sub)
        if out[1]:  # the step's time, where it made rows
            job.timings[timing] = job.timings.get(timing, 0.0) + time.time() - t1
        merge(internal_out, out)
    t1 = time.time()
    typed_files, typed_rows = typed.derive(sub)
    if typed_rows or typed_files:
        job.timings["typed"] = time.time() - t1
    return Derived(*internal_out, typed_files, typed_rows)


def write_driver_tables(job: Run, listing: Listing, decoded: Decoded,
                        derived: Derived) -> dict[str, int]:
    """The driver's own rows: the replicas' and the listing's findings, the ledger; and
    every derived finding file under ``findings``. Returns the run's row counts."""
    ctx, files = job.ctx, decoded.files
    damaged_copies = 0  # the replicas' findings: divergences, and damaged copies not decoded
    found = decoded.replica_findings
    if found is not None and found.num_rows:
        kinds = found.column("kind").to_pylist()
        decoded.divergences += kinds.count(REPLICA_DIVERGENCE) + kinds.count(TIER_DIVERGENCE)
        damaged_copies = kinds.count(replicas.DAMAGED_COPY)
        files["findings"].extend(write_driver_table(ctx, "findings", found, "replicas"))
    if listing.tier_findings:
        files["findings"].extend(write_driver_table(ctx, "findings", findings_table(
            [replace(f, run_id=job.args.run_id) for f in listing.tier_findings]), "tier"))
    if listing.unparsable:
        files["findings"].extend(write_driver_table(ctx, "findings", unparsable_findings(
            listing.unparsable, job.args.run_id), "names"))
    ledger_out = ledger_table(decoded.results)
    if ledger_out.num_rows:
        files["ledger"].extend(write_driver_table(ctx, "ledger", ledger_out, "ledger"))
    rows = [r.ledger for r in decoded.results]
    counts = {"records": sum(r["records"] for r in rows),
              "batches": sum(r["batches"] for r in rows),
              "findings": sum(r["findings"] for r in rows) + decoded.divergences
              + damaged_copies + len(listing.unparsable) + len(listing.tier_findings)
              + derived.internal_rows.pop("findings", 0) + derived.typed_rows.pop("findings", 0)}
    files["findings"].extend(derived.internal_files.pop("findings", []))
    files["findings"].extend(derived.typed_files.pop("findings", []))
    return counts


def commit(job: Run, listing: Listing, decoded: Decoded, derived: Derived) -> None:
    """Commit every file to the run's branch: the derived tables (made where this run
    wrote their first rows), the typed tables, the decode tables."""
    t1 = time.time()
    wh, args, bases = job.wh, job.args, job.bases
    later = {table for _, table, _ in AFTER_COMMIT_STEPS}  # committed by derive_after_commit
    for name in schemas.DERIVED_TABLES:
        if name in later:
            continue
        if name in derived.internal_files and name not in bases:  # first rows: made just now
            bases[name] = wh.begin_table(name, args.run_id)
        if name in bases:
            wh.commit_files(name, args.run_id, derived.internal_files.get(name, []),
                            chunk_id=args.chunk_id)
    made = wh.typed_tables() if listing.registry is not None else ()  # with those made now
    for name in sorted({n for n in (*derived.typed_files, *bases, *made)
                        if layout.typed_topic(n) is not None}):
        if name not in bases:  # made (or first written) by this run
            bases[name] = wh.begin_table(name, args.run_id)
        wh.commit_files(name, args.run_id, derived.typed_files.get(name, []),
                        chunk_id=args.chunk_id)
    for name in schemas.DECODE_TABLES:
        wh.commit_files(name, args.run_id, decoded.files[name], chunk_id=args.chunk_id,
                        summary={"kafkalog.segments": len(listing.segments),
                                 "kafkalog.tasks": len(decoded.tasks)})
    job.timings["commit"] = time.time() - t1


def resolve_transactions(job: Run) -> dict:
    """The open transactional rows that the markers on the run's branch now decide,
    rewritten on the branch (:func:`~spark_jobs.decode.transactions.resolve_open`):
    ``{"rows": n, "files": k}``."""
    t1 = time.time()
    out = transactions.resolve_open(job.wh, job.args.run_id, job.ctx, job.args.chunk_id)
    job.timings["transactions"] = time.time() - t1
    return out


def derive_after_commit(spark, job: Run, listing: Listing, decoded: Decoded,
                        derived: Derived) -> dict[str, int]:
    """The tables derived from the run's branch as committed (:data:`AFTER_COMMIT_STEPS`:
    ``producer_transactions``, ``streams_groups``), each step's files committed to the
    branch (the table made where this run wrote its first rows). Returns ``{table: rows}``."""
    args = job.args
    files = {n: list(fs) for n, fs in (*decoded.files.items(), *derived.internal_files.items())}
    sub = Submission(spark, job.ctx, job.wh, args.run_id, args.night, decoded.files["records"],
                     listing.segments, listing.state_uris, listing.log_dir_files,
                     listing.registry, job.bases, job.ledger, files=files,
                     chunk_id=args.chunk_id)
    out: dict[str, int] = {}
    for step, table, timing in AFTER_COMMIT_STEPS:
        t1 = time.time()
        written, rows = step(sub)
        if table in written and table not in job.bases and written[table]:  # first rows
            job.bases[table] = job.wh.begin_table(table, args.run_id)
        if table in job.bases:
            job.wh.commit_files(table, args.run_id, written.get(table, []),
                                chunk_id=args.chunk_id, summary={"kafkalog.step": table})
        out[table] = rows.get(table, 0)
        if out[table]:
            job.timings[timing] = time.time() - t1
    return out


def refresh_keyed(spark, job: Run, listing: Listing, decoded: Decoded, committed) -> dict:
    """The per-key state tables (latest per key, Debezium's source tables) of the topics
    this submission wrote, refreshed on the run's branch after its commit and transaction
    resolution, each partition folded on the executors (:mod:`spark_jobs.derive.keyed`,
    :mod:`spark_jobs.derive.keyed_tasks`); their findings committed too. Returns
    ``{table: keys changed}``."""
    t1 = time.time()
    partitions: dict[str, set[int]] = {}
    for r in decoded.results:
        if r.ledger["records"]:
            partitions.setdefault(r.ledger["topic"], set()).add(r.ledger["partition"])
    if committed is not None:
        for t, p in zip(committed.column("topic").to_pylist(),
                        committed.column("partition").to_pylist()):
            partitions.setdefault(t, set()).add(p)
    plans = keyed_tables.plan(job.wh, job.args, job.bases, partitions, decoded.files)
    if not plans:
        return {}
    night = layout.run_night((s.night for s in listing.segments), job.args.night)
    out, found = {}, []
    for k in plans:
        done = keyed_tasks.refresh(spark, job.wh, k, job.args.run_id, night,
                                   partitions[k.topic], committed, job.published,
                                   job.ctx.ingest_dt)
        out[k.name] = done["keys"]
        found += done["findings"]
    if found:
        files = write_driver_table(job.ctx, "findings", findings_table(
            [replace(f, run_id=job.args.run_id) for f in found]), "keyed")
        job.wh.add_files("findings", job.args.run_id, files, summary={"kafkalog.step": "keyed"})
    job.timings["keyed"] = time.time() - t1
    return out


def summary(job: Run, listing: Listing, decoded: Decoded, derived: Derived,
            counts: dict[str, int]) -> dict:
    """The summary the job prints (before publishing: ``published`` False, no timings)."""
    args, rows = job.args, [r.ledger for r in decoded.results]
    out = {
        "run_id": args.run_id, "chunk_id": args.chunk_id, "segments": len(listing.segments),
        "tasks": len(decoded.tasks), "bytes": sum(t.end - t.start for t in decoded.tasks),
        "schemas": values.describe(listing.registry),
        **counts, "divergences": decoded.divergences, "unparsable": len(listing.unparsable),
        "actions": {a: sum(1 for r in rows if r["action"] == a)
                    for a in sorted({r["action"] for r in rows})},
        "pending_partitions": len(decoded.pending),
        "replicated_partitions": len(decoded.reconciled),
        "branch": branch_name(args.run_id),
        "catalog": args.catalog, "published": False, "seconds": None,
    }
    if derived.internal_rows:
        out["internal"] = dict(sorted(derived.internal_rows.items()))
    if derived.typed_rows:
        out["typed"] = dict(sorted(derived.typed_rows.items()))
    return out


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


__all__ = ["AFTER_COMMIT_STEPS", "Decoded", "Derived", "INTERNAL_STEPS", "Listing", "Run", "begin",
           "commit", "dedupe", "derive", "derive_after_commit", "frame_replicas", "list_input",
           "plan_tasks", "refresh_keyed", "resolve_transactions", "run", "run_decode_tasks",
           "summary", "unparsable_findings", "write_driver_tables"]
