"""What the nightly DAG's Python tasks do: plan a run, publish it, rerun it after a conflict.

Each function takes plain values (the DAG passes them from the task context) and
returns small, JSON-able summaries: XCom carries paths and counts, never data.

Idempotency: a run is keyed by its ``run_id``. Planning makes the run's
Iceberg branches again (``run_<run_token>``, from ``main``, without the run's
earlier rows), so a rerun of the whole run starts from nothing; each decode
chunk replaces what it committed to the branch before, and publish makes the
audited branch ``main`` (docs/tables.md).

One run at a time per warehouse, as scheduling: deduplication compares a run's
records with ``main`` as the run began, so of two runs between plan and publish
at once with overlapping offsets, the second to publish is refused (publish
fails naming the other run; nothing is duplicated) and the DAG reruns it once
(:func:`rerun_request`).
``max_active_runs=1`` does not keep runs apart:
Airflow 3 counts backfill runs apart (each backfill has its own
``max_active_runs``, 10 by default) and scheduled or manual runs do not wait
for them. So ``plan`` (one at a time across runs: ``max_active_tis_per_dag=1``)
first waits, rescheduling itself, while another running run of the DAG holds
the warehouse, i.e. has planned and not yet finished publishing
(:func:`runs_holding_warehouse`).
"""

from __future__ import annotations

import json
import re
import logging

from spark_jobs import layout, storage

from . import schema_registry, settings, snapshots
from .schema_registry import registry_args as schema_registry_args

log = logging.getLogger(__name__)

#: what spark-submit runs: kafkalog_pipeline/spark_entry.py, then the job's module
DECODE_JOB = "spark_jobs.decode_segments"
QUALITY_JOB = "spark_jobs.check_quality"


def manifest_key(token: str, chunk_id: int) -> str:
    return layout.chunk_manifest_key(token, chunk_id)


def to_decode(wh, run_id: str, segments, *, reprocess: bool = False) -> dict:
    """Per listed segment (a :class:`snapshots.Segment`): the bytes run ``run_id``'s decode
    will read of it, and whether it is the very object an earlier run ingested.

    The decode job's own rule (:func:`spark_jobs.decode.planning.ingested` over the
    published ledger of warehouse ``wh``, a :class:`spark_jobs.warehouse.Warehouse`, and
    :func:`~spark_jobs.decode.planning.resume_from`), so the plan weighs each segment as
    the job will treat it: 0 bytes for one ingested whole with the same size and ETag
    (the job only checks it and writes an ``unchanged`` ledger row), the part past the
    ingested prefix for one that grew, all of it otherwise. Returns
    ``{segment: (bytes, unchanged)}``.
    """
    from spark_jobs.decode.planning import ingested, resume_from
    from spark_jobs.tables import read_arrow

    coverage = {} if reprocess else ingested(read_arrow(wh, "ledger"), run_id)
    out = {}
    for s in segments:
        resume = resume_from(coverage.get((s.topic, s.partition, s.base_offset)), s.size, s.etag)
        out[s] = (s.size, False) if resume is None else (s.size - resume[0], resume[1])
    return out


def open_warehouse(warehouse: str, access: storage.S3Config | None = None, *,
                   catalog: str | None = None, namespace: str | None = None):
    """The warehouse's tables in ``catalog`` and ``namespace`` (default: the settings)."""
    from spark_jobs.warehouse import Warehouse

    access = access or settings.s3_access()
    config = access.resolved() if storage.is_s3(warehouse) else None
    return Warehouse(warehouse, catalog or settings.get("catalog"),
                     namespace or settings.get("namespace"), config)


def plan_run(*, run_id: str, dates: list[str], topics=None, reprocess: bool = False,
             warehouse: str | None = None, bucket: str | None = None,
             prefix: str | None = None, template: str | None = None,
             access: storage.S3Config | None = None,
             schema_registry: str | None = None, tiered_storage: str | None = None,
             latest_topics: str | None = None, cdc_topics: str | None = None) -> dict:
    """List the snapshot(s), plan chunks, write one manifest per chunk.

    Every listed segment goes to the decode job, so that its ledger (and the audit,
    which grades offset gaps against every segment the run listed) knows the whole
    snapshot. Unless ``reprocess``, a segment an earlier published run ingested
    whole, same size and ETag, costs the job one 21-byte read and an ``unchanged``
    ledger row, and weighs nothing in the chunk plan (:func:`to_decode`: chunks are
    balanced by the bytes the job will decode); if every listed segment is such a
    one there is nothing to decode and no chunk. With ``reprocess`` every listed
    segment is decoded again (the decode job still drops rows already published,
    so nothing is duplicated).

    Values are decoded with the live registry at ``schema_registry`` (a URL), else with
    the snapshot's own ``_schemas`` segments (:mod:`kafkalog_pipeline.schema_registry`).

    With ``tiered_storage`` (``s3://bucket/prefix``) the job also reads the tier's live remote
    segments, as the snapshot's ``__remote_log_metadata`` segments name them: those are
    listed whatever ``topics`` says, and the run is one chunk (a chunk replays the whole
    metadata and reads every live remote segment; docs/tiered.md).

    ``latest_topics`` / ``cdc_topics``: regular expressions naming topics that get a
    latest-per-key / a Debezium source table besides those found by evidence (docs/tables.md);
    a bad one is a ``ValueError`` before anything is listed.

    Returns ``{"warehouse", "run_id", "dates", "prefixes", "chunks": [summary...],
    "segments", "already_ingested", "bytes", "ignored", "schemas", "decode_args": [[argv...], ...]}``
    (``segments``: listed; ``already_ingested``: of them, unchanged since an earlier
    run; ``bytes``: to decode); ``decode_args`` is empty when there is nothing to decode.
    Raises :class:`settings.SettingError` / :class:`snapshots.PermanentS3Error`
    for what no retry fixes, :class:`snapshots.TransientS3Error` otherwise.
    """
    warehouse = warehouse or settings.get("warehouse", required=True)
    bucket = bucket or settings.get("snapshot_bucket", required=True)
    prefix = prefix if prefix is not None else settings.get("snapshot_prefix")
    template = template or settings.get("snapshot_template")
    access = access or settings.s3_access()
    for flag, pattern in ((layout.LATEST_TOPICS_FLAG, latest_topics),
                          (layout.CDC_TOPICS_FLAG, cdc_topics)):
        try:
            re.compile(pattern or "")
        except re.error as err:
            raise ValueError(f"{flag.lstrip('-').replace('-', '_')}: not a regular "
                             f"expression: {err}") from err
    target = settings.get_int("chunk_bytes")
    max_chunks = 1 if tiered_storage else settings.get_int("max_chunks")
    if tiered_storage and not layout.topic_matcher(topics)(layout.REMOTE_LOG_METADATA_TOPIC):
        topics = [*_patterns(topics), layout.REMOTE_LOG_METADATA_TOPIC]

    prefixes = {d: snapshots.snapshot_prefix(template, prefix or "", d) for d in dates}
    log.info("run %s: snapshot dates %s under s3://%s (%r), topics %r, reprocess=%s",
             run_id, dates, bucket, access, topics, reprocess)
    unparsable: list[str] = []
    state_files: list[tuple[str, int, str]] = []  # read by the chunk of their partition
    log_dir_files: list[tuple[str, str]] = []  # read by one chunk of their log directory
    logs: dict[str, int] = {}  # .log objects per night: a night with none has no snapshot
    segments, ignored = snapshots.list_segments(bucket, prefixes, access, topics=topics,
                                                unparsable=unparsable, state_files=state_files,
                                                log_dir_files=log_dir_files, logs=logs)
    for uri in unparsable:
        log.warning("%s is not %s: an unparsable_name finding", uri, layout.GRAMMAR)

    token = storage.run_token(run_id)
    store = storage.open_store(warehouse, access.resolved()
                               if storage.is_s3(warehouse) else None)
    wh = open_warehouse(warehouse, access)
    missing = record_missing_nights(wh, run_id, {d: f"s3://{bucket}/{p}" for d, p in prefixes.items()},
                                    logs)
    work = to_decode(wh, run_id, segments, reprocess=reprocess)
    unchanged = sum(1 for _, same in work.values() if same)
    chunks = [] if unchanged == len(segments) else snapshots.plan_chunks(
        segments, target_bytes=target, max_chunks=max_chunks, to_decode=lambda s: work[s][0],
        state_files=state_files, log_dir_files=log_dir_files)
    if unparsable:  # the job records each as a finding, which the audit grades
        if not chunks:
            chunks = [snapshots.Chunk(chunk_id=0)]
        chunks[0].unplaced.extend(unparsable)
    # a rerun of the whole run starts clean: its branches are made again from main
    # (without the run's published rows), and no manifest of an earlier attempt survives
    wh.begin_run(run_id, reset=True)
    store.delete_prefix(layout.run_folder(layout.STAGING, token) + "/")
    decode_args = []
    registry_args, registry_source = schema_registry_args(
        url=schema_registry, segments=segments, store=store, token=token, bucket=bucket,
        prefixes=prefixes, access=access, topics=topics) if chunks else ([], None)
    for chunk in chunks:
        key = manifest_key(token, chunk.chunk_id)
        store.write(key, chunk.manifest())
        spec = layout.ChunkSpec(
            input=store.uri(key), output=warehouse, run_id=run_id, chunk_id=chunk.chunk_id,
            catalog=wh.catalog_name, namespace=wh.namespace, reprocess=bool(reprocess),
            s3_endpoint=access.endpoint_url, more=tuple(registry_args),
            tiered_storage=tiered_storage or None, latest_topics=latest_topics or None,
            cdc_topics=cdc_topics or None)
        decode_args.append([DECODE_JOB, *spec.argv()])
        log.info("chunk %d: %d segments, %d bytes, partitions %s", chunk.chunk_id,
                 len(chunk.segments), chunk.bytes, ", ".join(chunk.summary()["partitions"]))
    return {
        "warehouse": warehouse,
        "catalog": wh.catalog_name,
        "namespace": wh.namespace,
        "run_id": run_id,
        "dates": dates,
        "prefixes": [f"s3://{bucket}/{p}" for p in prefixes.values()],
        "chunks": [c.summary() for c in chunks],
        "segments": len(segments),
        "already_ingested": unchanged,
        "bytes": sum(c.bytes for c in chunks),
        "ignored": ignored,
        "unparsable": unparsable,
        # nights without a snapshot and their verdict (the snapshot_missing results)
        "missing_nights": [r["night"] for r in missing],
        "verdict": missing_verdict(missing),
        "schemas": registry_source,
        "decode_args": decode_args,
    }


def _patterns(topics) -> list[str]:
    """The ``topics`` param's patterns as a list (None or '': every topic)."""
    if topics is None or isinstance(topics, str):
        return [p.strip() for p in (topics or "*").split(",") if p.strip()]
    return [str(p) for p in topics]


def missing_verdict(rows: list[dict]) -> dict | None:
    """The verdict (:func:`spark_jobs.audit.results.verdict`) of ``snapshot_missing`` rows,
    None where there are none."""
    from spark_jobs.audit import results

    return results.verdict(rows) if rows else None


def record_missing_nights(wh, run_id: str, where: dict[str, str], logs: dict[str, int]
                          ) -> list[dict]:
    """The ``snapshot_missing`` results of run ``run_id``: one per night of ``where`` (night
    -> the prefix listed) whose listing held no ``.log`` object (``logs``: night -> n),
    written to ``dq_results`` at once (the run may decode nothing), replacing the run's
    earlier ones; a night that has a snapshot now drops every run's ``snapshot_missing``
    result of it (a late snapshot replaces the result). Returns the rows (none: nothing is
    written where nothing is missing and nothing replaced)."""
    from spark_jobs.audit import results
    from spark_jobs.audit.policy import Policy

    missing = {night: uri for night, uri in where.items() if not logs.get(night)}
    found = sorted(night for night in where if logs.get(night))
    if not missing and not results.missing_nights_to_replace(wh, run_id, found):
        return []
    rows = results.write_missing_nights(wh, run_id, missing, found,
                                        Policy.load(settings.get("policy")))
    for row in rows:
        log.warning("run %s: %s (snapshot_missing: %s)", run_id,
                    json.loads(row["details"])["items"][0]["message"], row["status"])
    return rows


def publish_run(*, warehouse: str, run_id: str, access: storage.S3Config | None = None,
                catalog: str | None = None, namespace: str | None = None):
    """Publish run ``run_id``'s audited branch in ``warehouse`` (after the audit passed):
    exactly the branch heads the audit read."""
    from spark_jobs import publish

    return publish.publish_run(open_warehouse(warehouse, access, catalog=catalog,
                                              namespace=namespace), run_id, audited=True)


# ------------------------------------------------------------ Airflow glue
def _airflow_errors():
    from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

    return AirflowFailException, AirflowSkipException


#: a run holds the warehouse from its plan's success until its publish task is done
PLAN_TASK, PUBLISH_TASK = "plan", "publish"
#: the audit task (the UI plugin links this task id to the run's report)
QUALITY_TASK = "check_quality"
#: the human gate between the audit and publish (``kafkalog_pipeline.gate``), and its XCom:
#: ``{"decision": "auto" | "approved" | "rejected" | "never", "by": who answered}`` (also
#: pushed by ``rerun_on_conflict`` when the policy has a person approve a conflict's rerun)
GATE_TASK, GATE_KEY = "publish_gate", "gate"
#: the plan's XComs naming where the run writes (the decode chunks carry them in their argv;
#: the audit's argv pulls them, :func:`quality_args`)
WHERE_KEYS = WAREHOUSE_KEY, CATALOG_KEY, NAMESPACE_KEY = "warehouse", "catalog", "namespace"
#: the plan's XCom summing up what it planned (its summary without the decode arguments)
PLAN_KEY = "plan"
#: a mapped decode task's name: ``chunk <K>``, read from its argv
DECODE_MAP_INDEX_TEMPLATE = layout.ChunkSpec.map_index_template()


def quality_args() -> list[str]:
    """The audit task's spark-submit arguments (templated): the run's warehouse, catalog and
    namespace as the plan pushed them, the run id, and the run's topics (a partition the run
    left out is not missing)."""
    def plan(key: str) -> str:
        return f"{{{{ ti.xcom_pull(task_ids='{PLAN_TASK}', key='{key}') }}}}"

    return [QUALITY_JOB, "--warehouse", plan(WAREHOUSE_KEY), "--run-id", "{{ run_id }}",
            "--catalog", plan(CATALOG_KEY), "--namespace", plan(NAMESPACE_KEY),
            "--topics", "{{ params.topics }}"]


#: task states (Airflow's, as text): a task in one of these has finished ...
FINISHED = {"success", "failed", "upstream_failed", "skipped", "removed"}
#: ... in one of these it has not (None, "none": no state yet)
UNFINISHED = {None, "none", "scheduled", "queued", "running", "up_for_retry",
              "up_for_reschedule", "deferred", "restarting", "awaiting_input"}
#: a mapped task's instances summed up as one state: the first of these any of them has
WORST_FIRST = ("failed", "upstream_failed", "up_for_retry", "up_for_reschedule", "running",
               "queued", "scheduled", "deferred", "success", "skipped", "removed")


def _state(value) -> str | None:
    return None if value is None else str(getattr(value, "value", value))


def summed_states(pairs) -> dict[str, str]:
    """``{task_id: state}`` of ``(task_id, state)`` pairs, a mapped task's worst first."""
    out: dict[str, str] = {}
    rank = {s: i for i, s in enumerate(WORST_FIRST)}
    for task_id, state in pairs:
        state = str(getattr(state, "value", state)) if state is not None else "none"
        if task_id not in out or rank.get(state, len(rank)) < rank.get(out[task_id], len(rank)):
            out[task_id] = state
    return out


def runs_holding_warehouse(task_states: dict, run_id: str) -> list[str]:
    """The runs other than ``run_id`` that planned and have not finished publishing.

    ``task_states`` is ``{run_id: {task_id: state}}`` of the plan and publish tasks
    (Airflow's ``get_task_states``). A run whose plan was skipped (nothing to decode)
    or failed holds nothing; a failed audit or decode ends with publish
    ``upstream_failed``, which releases the warehouse too.
    """
    return sorted(other for other, states in task_states.items()
                  if other != run_id
                  and _state(states.get(PLAN_TASK)) == "success"
                  and _state(states.get(PUBLISH_TASK)) not in FINISHED)


def wait_for_warehouse(context) -> None:
    """Reschedule this ``plan`` while another *running* run of the DAG holds the warehouse.

    Plans run one at a time (``max_active_tis_per_dag=1``), so no two runs can pass
    this check together. A run cleared or killed before publishing is ``queued`` or
    finished, not running: it does not block the others (and plans again when it runs).
    Outside a running task (no ``ti``, e.g. the plan's code called directly) there is
    nothing to wait for.
    """
    import datetime as dt

    from airflow.sdk.exceptions import AirflowRescheduleException

    ti = context.get("ti")
    if ti is None:
        return
    run_id = context["run_id"]
    holders = runs_holding_warehouse(
        ti.get_task_states(dag_id=ti.dag_id, task_ids=[PLAN_TASK, PUBLISH_TASK]), run_id)
    busy = [r for r in holders
            if _state(ti.get_dagrun_state(dag_id=ti.dag_id, run_id=r)) == "running"]
    if busy:
        wait = int(settings.parse_time_setting("wait_seconds"))
        log.info("run %s waits for the warehouse: run %s has planned and not published yet; "
                 "trying again in %d s", run_id, ", ".join(busy), wait)
        raise AirflowRescheduleException(
            reschedule_date=dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=wait))


def plan_from_context(context) -> list[list[str]]:
    """The ``plan`` task: resolve the run's dates from its context, plan, push a summary.

    First waits for the warehouse (:func:`wait_for_warehouse`). Returns one
    spark-submit argument list per chunk (what the decode task maps
    over). Permanent problems (settings, a missing bucket, refused credentials,
    a bad date range) fail the task without retries; so does a run none of whose nights
    has a snapshot (its ``snapshot_missing`` results recorded first: such a run is not a
    success, and clearing it once the copy is there reads the night), unless the policy
    grades ``snapshot_missing`` ``pass``: then, as where nothing changed, the rest of the
    run is skipped.
    """
    fail, skip = _airflow_errors()
    wait_for_warehouse(context)
    params = context.get("params") or {}
    dag_run = context.get("dag_run")
    try:
        dates = snapshots.snapshot_dates(
            params.get("date_from"), params.get("date_to"),
            interval_start=context.get("data_interval_start"),
            logical_date=context.get("logical_date"),
            run_after=getattr(dag_run, "run_after", None))
        conn_id = params.get(schema_registry.PARAM)
        url = schema_registry.connection_url(schema_registry.get_connection(conn_id)) \
            if conn_id else None
        summary = plan_run(run_id=context["run_id"], dates=dates,
                           topics=params.get("topics"), reprocess=bool(params.get("reprocess")),
                           schema_registry=url,
                           tiered_storage=params.get(settings.TIER_PARAM) or None,
                           latest_topics=params.get(settings.LATEST_PARAM) or None,
                           cdc_topics=params.get(settings.CDC_PARAM) or None)
    except (settings.SettingError, snapshots.PermanentS3Error, ValueError) as err:
        raise fail(str(err)) from err
    ti = context["ti"]
    for key in WHERE_KEYS:
        ti.xcom_push(key=key, value=summary[key])
    ti.xcom_push(key=PLAN_KEY, value={k: v for k, v in summary.items() if k != "decode_args"})
    if not summary["decode_args"]:
        verdict = summary["verdict"]
        if verdict is not None and len(summary["missing_nights"]) == len(dates):
            # no snapshot at all: the snapshot_missing results are the run's verdict, and
            # the run is not a success (unless the policy accepts a night without one)
            ti.xcom_push(key=VERDICT_KEY, value=verdict)
            ti.xcom_push(key=NO_SNAPSHOT_KEY, value={"nights": summary["missing_nights"],
                                                     "where": summary["prefixes"]})
            why = (f"no snapshot for {', '.join(summary['missing_nights'])}: no segment under "
                   f"{', '.join(summary['prefixes'])}")
            if verdict["fail"] or verdict["warn"]:
                graded = "failed" if verdict["fail"] else "a warning"
                raise fail(f"{why}; snapshot_missing recorded as {graded} in dq_results "
                           f"(expectations/policy.yaml). {LATE_COPY}")
            raise skip(f"{why}; snapshot_missing recorded as passed in dq_results (the "
                       "policy accepts a night without a snapshot)")
        raise skip(f"nothing to decode for {', '.join(dates)}: {summary['segments']} "
                   f"segments under {', '.join(summary['prefixes'])}, "
                   f"{summary['already_ingested']} of them already ingested unchanged "
                   f"({summary['ignored']} other objects)")
    log.info("planned %d chunks, %d segments (%d already ingested unchanged), %d bytes to "
             "decode", len(summary["chunks"]), summary["segments"],
             summary["already_ingested"], summary["bytes"])
    return summary["decode_args"]


#: XCom key of a skipped plan's reason (the UI plugin says it where a report would be)
SKIP_REASON_KEY = "skip_reason"
#: XCom key of a task that crashed: its cause, one line (``spark_jobs.crash``), which the
#: run's note and its Data quality tab show
CAUSE_KEY = "cause"
#: XCom key of the plan of a run none of whose nights has a snapshot: ``{"nights": [...],
#: "where": [the prefixes listed]}`` (the run's note says it)
NO_SNAPSHOT_KEY = "no_snapshot"
#: what to do when a night's copy arrives after its run (dags/README.md, "A night without a
#: snapshot")
LATE_COPY = ("When the copy arrives, clear this run (or run it again with "
             "--reprocess-behavior failed in a backfill): its plan reads the night then")
#: XCom key of the plan's verdict for a run whose nights all had no snapshot (the same shape
#: as check_quality's return value, which is the verdict of every other run)
VERDICT_KEY = "verdict"


def plan_task(context) -> list[list[str]]:
    """The ``plan`` task: :func:`plan_from_context`; a night it skips is logged with why
    (INFO, before the skip) and its reason is pushed to XCom (``SKIP_REASON_KEY``); a plan
    that fails says its cause first (:func:`say_crash`)."""
    _, skip = _airflow_errors()
    try:
        return plan_from_context(context)
    except skip as err:
        reason = str(err)
        log.info("skipping the run: %s", reason)
        ti = context.get("ti")
        if ti is not None:
            ti.xcom_push(key=SKIP_REASON_KEY, value=reason)
        raise
    except Exception as err:
        say_crash(context, PLAN_TASK, err)
        raise


def say_crash(context, task_id: str, err: BaseException) -> None:
    """A task that stops on ``err``: its cause, one line (``spark_jobs.crash.cause_of``), at
    ERROR before Airflow's traceback and pushed to XCom (``CAUSE_KEY``) for the run's note and
    its Data quality tab. A reschedule (``plan`` waiting for the warehouse) is no crash."""
    from airflow.sdk.exceptions import AirflowRescheduleException

    from spark_jobs.crash import cause_of

    if isinstance(err, AirflowRescheduleException):
        return
    cause = cause_of(err)
    log.error("%s stopped: %s", task_id, cause)
    ti = context.get("ti")
    if ti is not None:
        ti.xcom_push(key=CAUSE_KEY, value=cause)


# ------------------------------------------------------------ publish, and its rerun
#: the mapped decode task (the run's note names it when it failed before the audit)
DECODE_TASK = "decode_chunk"
#: the task after ``publish`` that reruns a run whose publish met a conflict
RERUN_TASK = "rerun_on_conflict"
#: the DAG run conf's entry of OpenLineage's parent run, which TriggerDagRunOperator adds
#: (apache-airflow-providers-standard: utils/openlineage.py) and a run's params then carry
OPENLINEAGE_CONF = "openlineage"
#: XCom key of ``publish``: the conflict it met (``conflict_summary``), read by RERUN_TASK
CONFLICT_KEY = "conflict"
#: the param a rerun carries: the run id it reruns (a rerun is never rerun again)
RERUN_OF = "rerun_of"


def rerun_id(run_id: str) -> str:
    """The run id of ``run_id``'s rerun after a publish conflict: one rerun per run (a
    second trigger finds it exists)."""
    return f"rerun__{run_id}"


def conflict_summary(err) -> dict:
    """What a :class:`spark_jobs.warehouse.ConflictError` says, for XCom and the run's note."""
    return {"table": err.table, "runs": list(err.runs), "files": err.files}


def conflict_line(conflict: dict, run_id: str, rerun_of: str | None) -> str:
    """``publish``'s one-line failure for a conflict, saying what happens next."""
    said = (f"publish refused: run(s) {', '.join(conflict['runs'])} published offsets of the "
            f"same topic-partitions to main after this run planned ({conflict['table']}: "
            f"{conflict['files']} files); main is unchanged")
    if rerun_of:
        return (f"{said}. Not rerun again: this run is already the rerun of {rerun_of}; "
                "clear it to run it again (it deduplicates against the new main)")
    return (f"{said}. Task {RERUN_TASK} reruns the night on a fresh branch as run "
            f"{rerun_id(run_id)}, which deduplicates against the new main")


def rerun_request(context) -> tuple[str, dict]:
    """The ``rerun_on_conflict`` task's decision: ``(run id, conf)`` of the rerun of this
    run's nights, or :class:`AirflowSkipException` saying why there is none.

    Only a publish refused for a conflict (``publish`` pushed ``CONFLICT_KEY``) is rerun,
    and only once: a rerun (param ``rerun_of`` set) is not rerun again. The rerun reads
    the same nights (``date_from``/``date_to`` = the dates this run planned) with this
    run's other params; it has no logical date and starts once this run has ended
    (``max_active_runs=1``), without anyone waiting for it.
    """
    _, skip = _airflow_errors()
    ti, run_id = context["ti"], context["run_id"]
    params = dict(context.get("params") or {})
    conflict = ti.xcom_pull(task_ids=PUBLISH_TASK, key=CONFLICT_KEY)
    if not conflict:
        raise skip("nothing to rerun: publish did not meet a conflict (it failed otherwise, "
                   "or did not run)")
    if params.get(RERUN_OF):  # publish's failure said so too
        raise skip(f"not rerun again: this run is already the rerun of {params[RERUN_OF]}")
    dates = (ti.xcom_pull(task_ids=PLAN_TASK, key=PLAN_KEY) or {}).get("dates") or []
    if not dates:
        raise RuntimeError("no dates in the plan's XCom: cannot tell which nights to rerun")
    params.pop(OPENLINEAGE_CONF, None)  # this run's parent, not the rerun's (the operator's)
    conf = {**params, "date_from": dates[0], "date_to": dates[-1], RERUN_OF: run_id}
    nights = dates[0] if dates[0] == dates[-1] else f"{dates[0]}..{dates[-1]}"
    log.info("publish of run %s was refused: run(s) %s published offsets of the same "
             "topic-partitions first; rerunning %s on a fresh branch as run %s", run_id,
             ", ".join(conflict["runs"]), nights, rerun_id(run_id))
    return rerun_id(run_id), conf


def published_nights(plan: dict) -> list[str]:
    """The nights (``YYYY-MM-DD``) a run publishes: those it planned (``plan``: the plan's
    :data:`PLAN_KEY` XCom) that had a snapshot; a table asset's events carry them as their
    ``partition_key``, one event per night."""
    missing = set(plan.get("missing_nights") or [])
    return [layout.night(d) for d in plan.get("dates") or [] if d not in missing]


def announce_tables(outlet_events, assets, nights: list[str], extra: dict) -> None:
    """Each of ``assets``' events: ``extra``, and one event per night of ``nights``, its
    ``partition_key`` the night (Airflow's partitioned assets, AIP-76: a DAG scheduled with
    ``PartitionedAssetTimetable`` runs once per night; none: one event without a key)."""
    for asset in assets:
        outlet_events[asset].extra = dict(extra)
        if nights:
            outlet_events[asset].add_partitions(list(nights))


def publish_from_context(context, assets, derived=None) -> dict:
    """The ``publish`` task: publish the audited run, annotate the table assets' events
    (one per night the run published, its ``partition_key`` the night: :func:`published_nights`);
    ``derived`` (``(alias, asset_of)``): an event through the alias for each table the
    publish moved that ``asset_of(table)`` gives an asset for (derived and typed tables,
    kafkalog_pipeline.assets.derived_asset); those carry no partition key (Airflow gives an
    alias's events the run's own partition key, ``TaskInstance.register_asset_changes_in_db``,
    and a nightly run has none).

    A conflict (another run published the same offsets first) fails the task at once,
    its summary pushed under ``CONFLICT_KEY`` for the ``rerun_on_conflict`` task."""
    ti = context["ti"]
    warehouse = ti.xcom_pull(task_ids=PLAN_TASK, key=WAREHOUSE_KEY)
    plan = ti.xcom_pull(task_ids=PLAN_TASK, key=PLAN_KEY) or {}
    run_id = context["run_id"]
    from spark_jobs.warehouse import ConflictError, NotAudited, NothingStaged

    fail, _ = _airflow_errors()
    try:
        result = publish_run(warehouse=warehouse, run_id=run_id,
                             catalog=ti.xcom_pull(task_ids=PLAN_TASK, key=CATALOG_KEY),
                             namespace=ti.xcom_pull(task_ids=PLAN_TASK, key=NAMESPACE_KEY))
    except ConflictError as err:
        conflict = conflict_summary(err)
        ti.xcom_push(key=CONFLICT_KEY, value=conflict)
        raise fail(conflict_line(conflict, run_id, (context.get("params") or {}).get(RERUN_OF))
                   ) from None
    except (NothingStaged, NotAudited) as err:
        raise fail(str(err)) from None  # no retry changes it: the run must be run again
    extra = {"warehouse": warehouse, "run_id": run_id, "dates": plan.get("dates", []),
             # the audit's verdict (counts per outcome, checks that failed or warned)
             "verdict": ti.xcom_pull(task_ids=QUALITY_TASK)}
    outlet_events = context.get("outlet_events")
    if outlet_events is not None:
        announce_tables(outlet_events, assets, published_nights(plan), extra)
        if derived is not None:
            alias, asset_of = derived
            moved = (result.get("tables") or {}) if isinstance(result, dict) else {}
            for name, action in sorted(moved.items()):
                asset = asset_of(name)
                if asset is not None and action != "nothing":
                    outlet_events[alias].add(asset, extra=dict(extra))
    return {**extra, "published": result if isinstance(result, (dict, list, str, int)) else None}
