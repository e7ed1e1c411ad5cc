"""Every Airflow private or internal API kafkalog uses, in one module.

Airflow's public interface for code like ours is the Task SDK (``airflow.sdk``), the
providers' operators and hooks, ``AirflowPlugin``, ``BaseOperatorLink`` and the listeners'
``hookimpl``; those are imported where they are used. What follows is not public: the
metadata database's ORM models and sessions, a provider hook's private methods, and the
functions ``dag.test()`` calls. Each is here with why we use it and what public API would
replace it, and the module refuses to import under an Airflow it was not read against
(:data:`SUPPORTED`, the minor version ``requirements.lock`` pins), so an upgrade fails here,
naming the version, instead of somewhere inside a task.

Imports of Airflow's modules are inside the functions: the DAG files import the pipeline at
parse time, and only what a task, a listener, the plugin or the demo runs needs them.
"""

from __future__ import annotations

import contextlib
import datetime as dt

import airflow

#: the Airflow minor version every internal below was read against (requirements.lock: 3.3.x)
SUPPORTED = (3, 3)


class UnsupportedAirflow(ImportError):
    """The installed Airflow is not the version this module's internals were read against."""


def check_version(version: str) -> None:
    """Raise :class:`UnsupportedAirflow` unless ``version`` is of the :data:`SUPPORTED` minor."""
    try:
        found = tuple(int(p) for p in version.split(".")[:2])
    except ValueError:
        found = None
    if found != SUPPORTED:
        want = ".".join(map(str, SUPPORTED))
        raise UnsupportedAirflow(
            f"kafkalog_pipeline needs Airflow {want}.x (requirements.lock), found Airflow "
            f"{version}: the Airflow internals in kafkalog_pipeline/_airflow.py were read "
            f"against {want}; check each of them against the new version, then update SUPPORTED")


check_version(airflow.__version__)


# ---- the metadata database ---------------------------------------------------------------
# The ORM models (DagRun, TaskInstance, XComModel, Variable) and sessions are Airflow's own
# internals; Airflow 3's public way to read them is its REST API (or the Task SDK inside a
# task). The plugin's pages and the listener run inside Airflow's api-server and scheduler,
# next to the database, where an HTTP round trip to the api-server (with credentials) would be
# the only public alternative.

def session():
    """A new metadata-database session, committed and closed on exit (``create_session``)."""
    from airflow.utils.session import create_session

    return create_session()


def thread_session():
    """The thread's scoped session (``airflow.settings.Session()``): what ``dag.test()``
    commits a run's state change in (see :func:`attached_dag_run`)."""
    from airflow import settings as airflow_settings

    return airflow_settings.Session()


def attached_dag_run(dag_run):
    """``(session, dag_run)``: the session a DAG run object belongs to and the run, re-read in
    the thread's session where it is detached. Under ``dag.test()`` the run object a listener
    gets is detached (each task run in process closes the thread's scoped session) and
    ``update_state`` merges it back into that session, which ``dag.test()`` then commits.
    Public replacement: none (a listener gets the ORM object itself)."""
    from sqlalchemy import inspect
    from sqlalchemy.orm import object_session

    from airflow.models.dagrun import DagRun

    found = object_session(dag_run)
    if found is not None:
        return found, dag_run
    found = thread_session()
    return found, found.get(DagRun, inspect(dag_run).identity[0])


def xcom_value(session, dag_ids, run_id: str, task_id: str, key: str):
    """The XCom ``key`` a task of run ``run_id`` pushed (deserialized), None if it pushed none.
    Public replacement: ``GET /api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/
    xcomEntries/{key}``."""
    from airflow.models.xcom import XComModel

    row = session.scalars(XComModel.get_many(run_id=run_id, dag_ids=dag_ids, task_ids=task_id,
                                             key=key, limit=1)).first()
    return None if row is None else XComModel.deserialize_value(row)


def stored_note(dag_id: str, run_id: str) -> str | None:
    """A run's note as the metadata DB holds it, read in the thread's session: under
    ``dag.test()`` the run callbacks run inside ``update_state``, where the state change and
    the listener's note are still pending in that session (and the callback's context has no
    note: ``DagRun.dag_run_data`` leaves it out). Public: ``GET /api/v2/dags/{dag_id}/dagRuns/
    {run_id}`` (its ``note``)."""
    from sqlalchemy import select

    from airflow.models.dagrun import DagRun

    run = thread_session().scalars(select(DagRun).where(DagRun.dag_id == dag_id,
                                                        DagRun.run_id == run_id)).first()
    return None if run is None else run.note


def run_exists(session, dag_id: str, run_id: str) -> bool:
    """Whether Airflow has the DAG run. Public: ``GET /api/v2/dags/{dag_id}/dagRuns/{run_id}``."""
    from sqlalchemy import select

    from airflow.models.dagrun import DagRun

    return session.scalar(select(DagRun.id).where(DagRun.dag_id == dag_id,
                                                  DagRun.run_id == run_id)) is not None


def task_states(session, dag_id: str, run_id: str) -> list[tuple[str, str | None]]:
    """``(task_id, state)`` of every task instance of the run, one per map index (states as
    text). Public: ``GET /api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances``."""
    from sqlalchemy import select

    from airflow.models.taskinstance import TaskInstance

    rows = session.execute(select(TaskInstance.task_id, TaskInstance.state).where(
        TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id))
    return [(task_id, None if state is None else str(getattr(state, "value", state)))
            for task_id, state in rows]


def run_attempts(session, dag_ids, run_ids) -> list[tuple[str, str, str, dt.datetime | None]]:
    """``(dag_id, run_id, state, began)`` of each of those runs: its state as text and when its
    latest attempt began, the later of ``queued_at`` and ``start_date`` (clearing a run sets
    ``queued_at`` to now and ``start_date`` anew, ``clear_task_instances``). Public:
    ``GET /api/v2/dags/{dag_id}/dagRuns`` (``queued_at``, ``start_date``, ``state``)."""
    from sqlalchemy import select

    from airflow.models.dagrun import DagRun

    rows = session.execute(select(DagRun.dag_id, DagRun.run_id, DagRun.state, DagRun.queued_at,
                                  DagRun.start_date).where(DagRun.dag_id.in_(list(dag_ids)),
                                                           DagRun.run_id.in_(list(run_ids))))
    out = []
    for dag_id, run_id, state, queued, started in rows:
        times = [t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)
                 for t in (queued, started) if t is not None]
        out.append((dag_id, run_id, str(getattr(state, "value", state)), max(times, default=None)))
    return out


def fail_unfinished_runs(dag_id: str) -> list[tuple[str, str]]:
    """Mark every running or queued run of ``dag_id`` failed; ``(run_id, state it had)`` each.
    Public: ``PATCH /api/v2/dags/{dag_id}/dagRuns/{run_id}`` with ``state: failed``."""
    from sqlalchemy import select

    from airflow.models.dagrun import DagRun
    from airflow.utils.state import DagRunState

    failed = []
    with session() as s:
        for dr in s.scalars(select(DagRun).where(
                DagRun.dag_id == dag_id,
                DagRun.state.in_((DagRunState.RUNNING, DagRunState.QUEUED)))):
            failed.append((dr.run_id, str(dr.state)))
            dr.set_state(DagRunState.FAILED)
    return failed


def variable(name: str) -> str | None:
    """Airflow Variable ``name`` (None where unset) outside a task: the plugin's pages run in
    the api-server, where the Task SDK's ``Variable.get`` has no supervisor to ask.
    Public: ``GET /api/v2/variables/{name}``."""
    from airflow.models.variable import Variable

    return Variable.get(name, default_var=None)


def api_base_url() -> str:
    """``[api] base_url`` without its trailing slash ("" where unset): the UI's address, which
    links the api-server serves start with. Public: ``airflow.sdk.conf`` is the same object."""
    from airflow.configuration import conf

    return (conf.get("api", "base_url", fallback="") or "").rstrip("/")


def dag_run_url(dag_id: str, run_id: str) -> str:
    """The UI's page of a DAG run (the link Airflow's own "Triggered DAG" link builds).
    Public replacement: none; the URL scheme is the UI's."""
    from airflow.utils.helpers import build_airflow_dagrun_url

    return build_airflow_dagrun_url(dag_id=dag_id, run_id=run_id)


# ---- the api-server's auth, for the plugin's routes ---------------------------------------
# A plugin's FastAPI app is mounted in the api-server but its routes get none of the core
# API's security dependencies. We resolve the caller as the core API does
# (``core_api.security.get_user``, internal) and ask the configured auth manager
# (``get_auth_manager``) whether they may read the pipeline's DAG runs. Public replacement:
# a security dependency exported for plugins (none in Airflow 3.3).

async def request_user(request, bearer):
    """The caller of ``request`` (``bearer``: its ``HTTPAuthorizationCredentials`` or None),
    as the api-server authenticates its own routes; raises its ``HTTPException`` (401/403)."""
    from airflow.api_fastapi.core_api.security import get_user

    return await get_user(request, None, bearer)


def login_url(next_url: str) -> str:
    """The auth manager's login page, coming back to ``next_url``."""
    from airflow.api_fastapi.app import get_auth_manager

    return get_auth_manager().get_url_login(next_url=next_url)


def may_read_runs(user, dag_ids) -> bool:
    """Whether ``user`` may see the website and read the runs of one of ``dag_ids``."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import (
        AccessView, DagAccessEntity, DagDetails)

    manager = get_auth_manager()
    return manager.is_authorized_view(access_view=AccessView.WEBSITE, user=user) and any(
        manager.is_authorized_dag(method="GET", access_entity=DagAccessEntity.RUN,
                                  details=DagDetails(id=dag_id), user=user)
        for dag_id in dag_ids)


# ---- the Spark provider's SparkSubmitHook -------------------------------------------------
# The hook reads spark-submit's output in ``_process_spark_submit_log`` and keeps the process
# in ``_submit_sp``; neither is public. We read the job's own output lines (the audit's
# verdict) and its exit status (checks failed vs crashed). Public replacement: an output
# callback or the return code on the hook (not in apache-airflow-providers-apache-spark yet).

class AdjustedHook:
    """A mixin before ``SparkSubmitOperator`` in a subclass's bases: the operator builds its
    hook in the private ``_get_hook`` and caches it in ``_hook``; a subclass adjusts the new
    hook in :meth:`adjust_hook`, has the next ``execute`` build a fresh one
    (:meth:`forget_hook`: the environment changed) and reads the one it ran
    (:attr:`submitted_hook`). Public replacement: a hook factory argument on the operator."""

    def _get_hook(self):
        return self.adjust_hook(super()._get_hook())

    def adjust_hook(self, hook):
        return hook

    def forget_hook(self) -> None:
        self._hook = None

    @property
    def submitted_hook(self):
        return self._hook


def filter_submit_log(hook, lines) -> None:
    """Make ``hook`` pass spark-submit's output through ``lines(iterable) -> iterable`` before
    its own log processing (which tracks the driver and the exit)."""
    provider = hook._process_spark_submit_log
    hook._process_spark_submit_log = lambda itr: provider(lines(itr))


def submit_returncode(hook) -> int | None:
    """The exit status of the spark-submit process ``hook`` ran (None if it started none)."""
    submitted = getattr(hook, "_submit_sp", None)  # the spark-submit Popen
    return None if submitted is None else submitted.returncode


# ---- dag.test() as the demo runs it -------------------------------------------------------
# ``dag.test()`` runs each task in process (``supervisor.run_task_in_process``) and creates the
# run with ``dagrun.get_or_create_dagrun``. The demo wraps both (a task log file per try, the
# run's real start time, apache/airflow#66127). Public replacement: a scheduler and a worker
# (``make ui``), or a ``dag.test()`` that writes task logs and takes a start date.

@contextlib.contextmanager
def without_deadlines(dag):
    """``dag`` without its Deadline Alerts while active, for ``dag.test()``.

    Why: on 3.3.2, ``dag.test()`` of a run that succeeds fails in ``DagRun.update_state``,
    which looks each of the DAG's deadlines up by id (``DeadlineAlertModel.get_by_id``) to
    prune them: under ``dag.test()`` those are the alerts' serialized forms, not ids
    (``StatementError: 'dict' object has no attribute 'hex'``, on ``[parameters: [{}]]``). A
    ``dag.test()`` run is driven to its end in process, which no deadline is for (the
    scheduler's deadlines are unaffected). Public replacement: none; drop this once
    ``dag.test()`` prunes deadlines as the scheduler does."""
    deadline = dag.deadline
    dag.deadline = None
    try:
        yield dag
    finally:
        dag.deadline = deadline


@contextlib.contextmanager
def dag_test_hooks(task_started, task_ended):
    """While active, ``dag.test()`` calls ``task_started(ti)`` before and ``task_ended()``
    after each task it runs in process, and starts its run now (not at the logical date)."""
    from airflow.models import dagrun as dagrun_module
    from airflow.sdk.execution_time import supervisor

    run_in_process, get_or_create = supervisor.run_task_in_process, dagrun_module.get_or_create_dagrun

    def run_task_in_process(ti, task, *args, **kwargs):
        task_started(ti)
        try:
            return run_in_process(ti, task, *args, **kwargs)
        finally:
            task_ended()

    def get_or_create_dagrun(**kwargs):
        kwargs["start_date"] = dt.datetime.now(dt.timezone.utc)
        return get_or_create(**kwargs)

    supervisor.run_task_in_process = run_task_in_process
    dagrun_module.get_or_create_dagrun = get_or_create_dagrun
    try:
        yield
    finally:
        supervisor.run_task_in_process = run_in_process
        dagrun_module.get_or_create_dagrun = get_or_create


def task_log_path(ti):
    """The file Airflow's log reader reads for task try ``ti`` (``[logging] base_log_folder``
    / ``log_filename_template``), created with its folders. Public replacement: none; a
    worker's supervisor writes it."""
    from airflow.sdk.log import init_log_file
    from airflow.utils.helpers import log_filename_template_renderer

    return init_log_file(log_filename_template_renderer()(ti=ti))


def dag_bag(folder: str):
    """The DAGs of ``folder`` parsed in this process (``DagBag``: ``.dags``, ``.import_errors``).
    Public replacement: ``airflow dags list-import-errors`` / the DAG processor."""
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=folder)


# ---- the OpenLineage provider's custom extractors ------------------------------------------
# A custom extractor (``[openlineage] extractors``) subclasses the provider's ``BaseExtractor``
# and must implement its abstract ``_execute_extraction`` (the START's lineage): the provider's
# documented way to give an operator it does not know datasets. Public replacement: none for
# TaskFlow tasks (an operator of our own would carry ``get_openlineage_facets_on_*`` instead).

def openlineage_extractor_base():
    """A ``BaseExtractor`` subclass whose START lineage is the subclass's ``extract_on_start()``
    (imported here, when the provider's listener loads the extractor, never at parse time)."""
    from airflow.providers.openlineage.extractors.base import BaseExtractor

    class StartExtractor(BaseExtractor):
        def _execute_extraction(self):
            return self.extract_on_start()

        def extract_on_start(self):
            raise NotImplementedError

    return StartExtractor


# ---- a person's answer in Required actions, from an operator that is no HITLOperator ---------
def await_answer(context, *, options: list[str], subject: str, body: str, method_name: str):
    """Ask the question in Airflow's Required actions and park the running task in
    ``awaiting_input`` until a person answers; Airflow then resumes the task in its operator's
    ``method_name(context, event)`` (``event``: the answer, as ``HITLOperator.execute_complete``
    gets it). Does not return.

    Why: ``rerun_on_conflict`` is a ``TriggerDagRunOperator`` (the rerun is triggered through
    the Execution API by raising ``DagRunTriggerException``), so it cannot also be the
    provider's ``HITLOperator``; these are the two steps ``HITLOperator.execute`` takes on 3.3
    (``airflow.sdk.execution_time.hitl.upsert_hitl_detail``, the task runner's own comms, and
    ``TaskAwaitingInput``). Public replacement: an ``HITLOperator`` upstream of the trigger
    task (a separate task, which the teardown wiring of the rerun makes awkward)."""
    from airflow.sdk.exceptions import TaskAwaitingInput
    from airflow.sdk.execution_time.hitl import upsert_hitl_detail

    upsert_hitl_detail(ti_id=context["task_instance"].id, options=options, subject=subject,
                       body=body, defaults=None, multiple=False, params={})
    raise TaskAwaitingInput(method_name=method_name, timeout=None)
