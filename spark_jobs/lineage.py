"""The Spark run's own OpenLineage events: START when a job's SparkSession is built, COMPLETE
or FAIL when its ``main`` returns (``kafkalog_pipeline/spark_entry.py``), each with a
``parent`` facet naming the Airflow task's run that submitted it (docs/lineage.md).

OpenLineage's Spark integration (the ``openlineage-spark`` jar, a JVM listener) is not in
reach of this project's machines (no Maven), so the driver emits the application's run itself
with the OpenLineage Python client, from the properties the integration reads and Airflow's
OpenLineage provider passes to spark-submit: ``spark.openlineage.parentRunId``,
``parentJobName``, ``parentJobNamespace``, ``rootParentRunId``, ``rootParentJobName``,
``rootParentJobNamespace``, ``namespace`` and ``transport.*`` (``type`` ``http`` with ``url``,
``endpoint``, ``timeoutInMillis``, ``auth.type=api_key``/``auth.apiKey``, ``compression``,
``headers.<name>``; ``file`` with ``location``; ``console``). With the jar on a cluster the
same properties drive it as well; this module then only adds the application-level events.

Nothing happens without ``spark.openlineage.transport.type`` (a session of the tests, a job
run by hand). A failure to emit is logged, never the job's failure.
"""

from __future__ import annotations

import datetime as dt
import logging
import re

log = logging.getLogger(__name__)

PREFIX = "spark.openlineage."
#: the producer URI of our events
PRODUCER = "https://github.com/kafkalog/kafkalog/spark_jobs/lineage.py"

_RUN: dict = {}  # the process' one Spark run: {"client", "run_id", "job", "facets", "conf"}


def properties(spark_conf) -> dict[str, str]:
    """The ``spark.openlineage.*`` properties of a SparkConf (or a dict), prefix removed."""
    items = spark_conf.getAll() if hasattr(spark_conf, "getAll") else dict(spark_conf).items()
    return {k[len(PREFIX):]: v for k, v in items if k.startswith(PREFIX)}


def transport_config(props: dict[str, str]) -> dict | None:
    """The Python client's transport configuration from the Spark integration's properties
    (None without a transport type)."""
    kind = props.get("transport.type")
    if not kind:
        return None
    if kind == "file":
        return {"type": "file", "log_file_path": props["transport.location"], "append": True}
    if kind == "console":
        return {"type": "console"}
    if kind == "http":
        out: dict = {"type": "http", "url": props["transport.url"]}
        if props.get("transport.endpoint"):
            out["endpoint"] = props["transport.endpoint"]
        if props.get("transport.timeoutInMillis"):
            out["timeout"] = int(props["transport.timeoutInMillis"]) / 1000
        if props.get("transport.compression"):
            out["compression"] = props["transport.compression"]
        if props.get("transport.auth.type") == "api_key":
            out["auth"] = {"type": "api_key", "apiKey": props.get("transport.auth.apiKey", "")}
        headers = {k[len("transport.headers."):]: v for k, v in props.items()
                   if k.startswith("transport.headers.")}
        if headers:
            out["custom_headers"] = headers
        return out
    raise ValueError(f"OpenLineage transport type {kind!r} is not supported by the jobs' "
                     "emitter (http, file, console)")


def job_name(app_name: str) -> str:
    """The application's job name as OpenLineage's Spark integration makes it from
    ``spark.app.name``: lower case, runs of other characters as ``_``."""
    return re.sub(r"[^a-z0-9]+", "_", app_name.lower()).strip("_")


def started(spark) -> None:
    """Emit the Spark run's START (once per process), where a transport is configured."""
    if _RUN:
        return
    try:
        conf = spark.sparkContext.getConf()
        props = properties(conf)
        transport = transport_config(props)
        if transport is None:
            return
        from openlineage.client import OpenLineageClient
        from openlineage.client.generated.parent_run import (Job, ParentRunFacet, Root,
                                                             RootJob, RootRun, Run)
        from openlineage.client.generated.processing_engine_run import ProcessingEngineRunFacet
        from openlineage.client.uuid import generate_new_uuid

        facets: dict = {"processing_engine": ProcessingEngineRunFacet(
            version=spark.version, name="spark")}
        if props.get("parentRunId"):
            root = None
            if props.get("rootParentRunId"):
                root = Root(run=RootRun(runId=props["rootParentRunId"]),
                            job=RootJob(namespace=props.get("rootParentJobNamespace")
                                        or props["parentJobNamespace"],
                                        name=props["rootParentJobName"]))
            facets["parent"] = ParentRunFacet(
                run=Run(runId=props["parentRunId"]),
                job=Job(namespace=props["parentJobNamespace"], name=props["parentJobName"]),
                root=root)
        namespace = props.get("namespace") or props.get("parentJobNamespace") or "default"
        _RUN.update(client=OpenLineageClient(config={"transport": transport}),
                    run_id=str(generate_new_uuid()), facets=facets,
                    job=(namespace, job_name(conf.get("spark.app.name", "spark"))))
        _emit("START")
    except Exception as err:  # noqa: BLE001 - lineage never fails the job
        log.warning("OpenLineage START of the Spark run not emitted: %s", err)
        _RUN.clear()


def finished(ok: bool, error: str | None = None) -> None:
    """Emit the Spark run's COMPLETE (``ok``) or FAIL (with ``error``), if it started."""
    if not _RUN:
        return
    try:
        if not ok and error:
            from openlineage.client.generated.error_message_run import ErrorMessageRunFacet

            _RUN["facets"]["errorMessage"] = ErrorMessageRunFacet(
                message=error, programmingLanguage="python")
        _emit("COMPLETE" if ok else "FAIL")
    except Exception as err:  # noqa: BLE001
        log.warning("OpenLineage end of the Spark run not emitted: %s", err)
    finally:
        _RUN.clear()


def _emit(state: str) -> None:
    from openlineage.client.event_v2 import Job, Run, RunEvent, RunState

    namespace, name = _RUN["job"]
    _RUN["client"].emit(RunEvent(
        eventType=RunState[state], eventTime=dt.datetime.now(dt.timezone.utc).isoformat(),
        run=Run(runId=_RUN["run_id"], facets=dict(_RUN["facets"])),
        job=Job(namespace=namespace, name=name), producer=PRODUCER))
