"""``KafkalogSparkSubmitOperator``: spark-submit with this pipeline's environment.

A :class:`SparkSubmitOperator` (connection ``spark_default``) that, when it
runs, adds to the child's environment what our jobs need: this venv's python
for driver and workers, the venv's ``bin`` on ``PATH`` (``spark-submit``), and
S3 access resolved from the ``aws_default`` connection or the environment.

The credentials are resolved inside the running task, so they never appear in
the DAG file, in XCom or in the rendered template fields.

For the audit (``spark_jobs.check_quality``) it also reads the job's own lines
from spark-submit's output: ``FAIL ...`` lines go to the task log at ERROR,
``WARN ...`` at WARNING, and the verdict line becomes the task's return value
(XCom ``return_value``: results per outcome and the checks that failed or
warned). An audit that ran and failed a check (exit status
``check_quality.EXIT_CHECKS_FAILED``) fails the task at once with one line
naming the failed checks (``AirflowFailException``: no retry, no traceback);
any other non-zero exit is a crash and fails as usual, so it is retried.

A crash of either job puts its cause first: the job prints it as one line
(``spark_jobs.crash.CAUSE_PREFIX``) before its traceback; that line is logged at
ERROR, pushed to XCom (``tasks.CAUSE_KEY``: the run's note and its Data quality tab
show it) and is the task's failure message (not "Cannot execute: spark-submit ...").
Where the job printed none (the JVM died, Python failed before our code ran), the
last exception line of its output stands in, else the exit status.

``Lineage (OpenLineage, kafkalog_pipeline/lineage.py, docs/lineage.md): where the OpenLineage
provider is configured, each submission gets this try's parent run and the transport as
``spark.openlineage.*`` properties, and the operator gives the provider's listener its inputs
and outputs (``get_openlineage_facets_on_start/complete/failure``): the decode reads the run's
snapshot prefixes and tier and writes the run's Iceberg tables; the audit reads those tables
(with its results as ``dataQualityAssertions`` and row counts as ``dataQualityMetrics``) and
writes ``dq_results``.

``RerunOnConflictOperator``: a :class:`TriggerDagRunOperator` that triggers this DAG's
rerun of a run whose publish was refused for a conflict (see its docstring).
"""

from __future__ import annotations

import json
import re

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk import BaseOperatorLink

from . import lineage, settings
from ._airflow import (AdjustedHook, await_answer, dag_run_url, filter_submit_log,
                       submit_returncode)
from .tasks import CAUSE_KEY, QUALITY_JOB

#: the last line of a Python traceback (``botocore.exceptions.EndpointConnectionError: ...``)
#: or a Java exception's (``py4j.protocol.Py4JJavaError: ...``)
EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit)\b(?::.*)?$")


class JobOutput:
    """Reads a job's own lines out of spark-submit's output (:meth:`lines`): ``FAIL ...``
    and ``WARN ...`` are logged to ``log`` at ERROR and WARNING (Spark's own lines stay
    with the provider, at INFO), and the verdict line (``verdict_prefix`` + JSON), if
    any, is kept in :attr:`verdict` instead of being logged raw. A crash's cause line
    (``spark_jobs.crash``) is logged at ERROR and kept in :attr:`cause`; the last
    exception line seen, in :attr:`last_exception` (:meth:`crash_cause` picks)."""

    def __init__(self, log, verdict_prefix: str | None = None):
        from spark_jobs.crash import CAUSE_PREFIX

        self.log = log
        self.verdict_prefix = verdict_prefix
        self.cause_prefix = CAUSE_PREFIX
        self.verdict: dict | None = None
        self.cause: str | None = None
        self.last_exception: str | None = None

    def crash_cause(self, returncode: int | None) -> str:
        """Why the job stopped, one line: its cause line, else its last exception line,
        else its exit status."""
        from spark_jobs.crash import short

        if self.cause:
            return self.cause
        if self.last_exception:
            return short(self.last_exception)
        return f"spark-submit exited with status {returncode} (no cause in its output)"

    def lines(self, itr):
        """Handle the job's lines; yield the others, for the provider's own handling."""
        for raw in itr:
            line = raw.strip()
            if line.startswith(self.cause_prefix):
                self.cause = self.cause or line[len(self.cause_prefix):].strip()
                self.log.error(line)
                continue
            if EXCEPTION_LINE.match(line):
                self.last_exception = line
            if self.verdict_prefix and line.startswith(self.verdict_prefix):
                try:
                    self.verdict = json.loads(line[len(self.verdict_prefix):])
                    continue
                except ValueError:
                    pass  # not ours after all: logged as it is
            if line.startswith("FAIL "):
                self.log.error(line)
            elif line.startswith("WARN "):
                self.log.warning(line)
            else:
                yield raw


def failed_checks_line(verdict: dict | None) -> str:
    """One line for a failed audit: ``audit failed: crc (orders-0, orders-1), offset_gaps
    (gap-0) failed; 2 warned, 40 passed; the run is not published``."""
    if not verdict:
        return "audit failed (no verdict line in its output); the run is not published"
    failed = ", ".join(f"{check} ({', '.join(parts)})"
                       for check, parts in sorted(verdict.get("failed", {}).items()))
    return (f"audit failed: {failed} failed; {verdict.get('warn', 0)} warned, "
            f"{verdict.get('pass', 0)} passed; the run is not published")


class KafkalogSparkSubmitOperator(AdjustedHook, SparkSubmitOperator):
    ui_color = "#e8f1fa"

    def __init__(self, *, aws_conn_id: str = settings.AWS_CONN_ID, **kwargs) -> None:
        kwargs.setdefault("conn_id", settings.SPARK_CONN_ID)
        kwargs.setdefault("conf", settings.spark_conf())
        # the OpenLineage properties are added in execute (lineage.spark_properties), from the
        # configuration as the task runs and anew for each try: the provider's own flags take
        # their default from the configuration once, when its module is imported
        kwargs.setdefault("openlineage_inject_parent_job_info", False)
        kwargs.setdefault("openlineage_inject_transport_info", False)
        super().__init__(**kwargs)
        self.aws_conn_id = aws_conn_id

    def _is_audit(self) -> bool:
        return bool(self.application_args) and self.application_args[0] == QUALITY_JOB

    def adjust_hook(self, hook: SparkSubmitHook) -> SparkSubmitHook:
        """The provider's hook, its output read through :class:`JobOutput` first."""
        prefix = None
        if self._is_audit():
            from spark_jobs.check_quality import VERDICT_PREFIX as prefix
        self.job_output = JobOutput(hook.log, prefix)
        filter_submit_log(hook, self.job_output.lines)
        return hook

    def execute(self, context):
        access = settings.s3_access(self.aws_conn_id)
        self.env_vars = {**settings.spark_env(access), **(self.env_vars or {})}
        tier = (context.get("params") or {}).get(settings.TIER_PARAM)
        self.env_vars.update(settings.tier_env(tier))  # the key ring's folder, if any
        if self._is_audit():
            # the audit is told the tier too (the decode's argv has it from the plan), the
            # sinks file to reconcile and the policy to grade by
            for flag, value in settings.audit_args(context.get("params")):
                if flag not in self.application_args:
                    self.application_args = [*self.application_args, flag, value]
        if not self._is_audit():  # a live registry's basic auth, never on the command line
            from .schema_registry import PARAM, auth_env

            self.env_vars.update(auth_env((context.get("params") or {}).get(PARAM)))
        # this try's parent run and the transport, for the Spark run's own lineage events
        self.conf = lineage.spark_properties(self.conf, context)
        self.forget_hook()  # built from the environment above
        from airflow.sdk.exceptions import AirflowException, AirflowFailException

        try:
            result = super().execute(context)
        except AirflowException:
            code = submit_returncode(self.submitted_hook)
            if self._is_audit():
                from spark_jobs.check_quality import EXIT_CHECKS_FAILED

                if code == EXIT_CHECKS_FAILED:
                    verdict = self.job_output.verdict
                    if verdict is not None:
                        context["ti"].xcom_push(key="return_value", value=verdict)
                    raise AirflowFailException(failed_checks_line(verdict)) from None
            output = getattr(self, "job_output", None)
            if output is None:  # spark-submit never started: the provider's error says why
                raise
            cause = output.crash_cause(code)
            context["ti"].xcom_push(key=CAUSE_KEY, value=cause)
            # a crash: retried; its cause is the message, without the provider's chain
            raise AirflowException(f"{self.task_id} crashed: {cause}") from None
        if not self._is_audit():
            return result
        verdict = self.job_output.verdict
        if verdict is not None:
            warned = ", ".join(f"{c} ({', '.join(p)})" for c, p in sorted(verdict["warned"].items()))
            self.log.info("verdict: %d failed, %d warned, %d passed%s", verdict["fail"],
                          verdict["warn"], verdict["pass"], f"; warned: {warned}" if warned else "")
        return verdict

    # ---- OpenLineage: the provider's listener asks for these (DefaultExtractor)
    def _tier(self) -> str | None:
        from spark_jobs.layout import TIERED_STORAGE_FLAG

        args = [str(a) for a in self.application_args or []]
        return args[args.index(TIERED_STORAGE_FLAG) + 1] \
            if TIERED_STORAGE_FLAG in args[:-1] else None

    def _lineage(self, ti, *, done: bool):
        from spark_jobs.layout import AUDIT_DERIVED_TABLES
        from spark_jobs.warehouse import branch_name

        from .tasks import PLAN_KEY, PLAN_TASK

        wh = lineage.run_warehouse(ti, settings.s3_access(self.aws_conn_id))
        if wh is None:
            return lineage.task_lineage()
        branch = branch_name(ti.run_id)
        run_tables = lineage.run_tables(wh, ti.run_id)
        if not self._is_audit():
            tier = self._tier()
            if tier is None:  # the audit's argv has it; a chunk's has it from the plan
                tier = ((ti.get_template_context().get("params") or {})
                        .get(settings.TIER_PARAM))
            return lineage.task_lineage(
                lineage.source_datasets(ti.xcom_pull(task_ids=PLAN_TASK, key=PLAN_KEY), tier),
                lineage.table_datasets(wh, run_tables, "output", ref=branch))
        quality = {}
        if done:
            from spark_jobs.audit.results import read_results

            quality = lineage.quality_facets(wh, read_results(wh, run_id=ti.run_id), ti.run_id)
        return lineage.task_lineage(
            lineage.table_datasets(wh, run_tables, "input", ref=branch, io_facets=quality),
            lineage.table_datasets(wh, ["dq_results", *AUDIT_DERIVED_TABLES], "output"))

    def get_openlineage_facets_on_start(self):
        from airflow.sdk import get_current_context

        return self._lineage(get_current_context()["ti"], done=False)

    def get_openlineage_facets_on_complete(self, task_instance):
        return self._lineage(task_instance, done=True)

    def get_openlineage_facets_on_failure(self, task_instance):
        return self._lineage(task_instance, done=True)


class RerunLink(BaseOperatorLink):
    """The task's link to the rerun it triggered (or found triggered). Taken from the
    operator's own ``trigger_run_id``, set when it triggers: Airflow's "Triggered DAG" link
    looks the run id up in XCom, and a task that skipped has none (the lookup logs an
    ERROR "XCom not found" in the task's log)."""

    name = "Rerun"

    def get_link(self, operator, *, ti_key) -> str:
        run_id = getattr(operator, "trigger_run_id", None)
        if not run_id:
            return ""
        return dag_run_url(operator.trigger_dag_id, run_id)


class RerunOnConflictOperator(TriggerDagRunOperator):
    """Triggers the rerun of this run's nights when its publish was refused because another
    run published overlapping offsets first; otherwise the task is skipped, saying why.

    What to rerun, and whether: :func:`kafkalog_pipeline.tasks.rerun_request` (only a
    conflict, never a rerun's, so at most one rerun per run: its run id is derived from
    this run's and a second trigger finds it exists, ``skip_when_already_exists``). The
    rerun is a new run of the same DAG, no logical date, conf ``{date_from, date_to,
    rerun_of}`` plus this run's other params, and a note naming this run. Airflow's task
    runner triggers it (``DagRunTriggerException`` -> the Execution API); this task does
    not wait for it (with ``max_active_runs=1`` the rerun starts only once this run has
    ended). The task's "Rerun" link leads to the rerun.

    Where OpenLineage is enabled, Airflow's operator adds this task's run to the rerun's conf
    (``openlineage``: parent and root run), so the rerun's lineage events name the task that
    triggered it as their parent (:func:`kafkalog_pipeline.tasks.rerun_request` leaves out the
    ``openlineage`` entry this run's own params may carry, which would otherwise stand in).
    """

    ui_color = "#fdf0e2"
    operator_extra_links = (RerunLink(),)

    def __init__(self, *, trigger_dag_id: str, **kwargs) -> None:
        """``trigger_dag_id``: the id of the DAG the task is in (a literal: the task's
        "Triggered DAG" link reads it unrendered)."""
        super().__init__(trigger_dag_id=trigger_dag_id, logical_date=None,
                         skip_when_already_exists=True, **kwargs)

    def execute(self, context):
        from .gate import APPROVE, REJECT, conflict_question, gated_conflict
        from .tasks import CONFLICT_KEY, PLAN_KEY, PLAN_TASK, PUBLISH_TASK

        self.prepare_rerun(context)  # or skipped, saying why
        if not gated_conflict():
            return super().execute(context)
        # publish_conflict: approve (expectations/policy.yaml): a person decides first
        ti = context["ti"]
        subject, body = conflict_question(
            run_id=context["run_id"], conflict=ti.xcom_pull(task_ids=PUBLISH_TASK,
                                                            key=CONFLICT_KEY) or {},
            dates=(ti.xcom_pull(task_ids=PLAN_TASK, key=PLAN_KEY) or {}).get("dates") or [],
            report=dag_run_url(ti.dag_id, context["run_id"]))
        self.log.info("publish met a conflict; waiting in Required actions for a person to "
                      "approve or reject the rerun (publish_conflict: approve)")
        await_answer(context, options=[APPROVE, REJECT], subject=subject, body=body,
                     method_name="execute_answered")

    def execute_answered(self, context, event):
        """Resumed with a person's answer (``publish_conflict: approve``): rerun, or skip."""
        from airflow.sdk.exceptions import AirflowSkipException

        from .gate import APPROVED, answered
        from .tasks import GATE_KEY

        decision, by = answered(event)
        context["ti"].xcom_push(key=GATE_KEY, value={"decision": decision, "by": by})
        if decision != APPROVED:
            who = f"rejected by {by or '?'}" if by or decision != "unanswered" else \
                "not answered in time"
            raise AirflowSkipException(f"rerun {who}: the night stays unpublished, main "
                                       "unchanged")
        self.prepare_rerun(context)
        return super().execute(context)

    def prepare_rerun(self, context) -> None:
        from .notes import provenance_line
        from .tasks import rerun_request

        self.trigger_run_id, self.conf = rerun_request(context)  # or skipped, saying why
        self.note = provenance_line(context["run_id"])
