"""``python -m kafkalog_pipeline.demo run|ui|dagtest``: the pipeline end to end on one machine.

``run`` (what ``make demo`` calls):

1. writes sample snapshots for two nights with :mod:`kafkalog.writer`
   (:mod:`kafkalog_pipeline.demo_data`) under ``OUT/snapshots``;
2. serves them from a local S3 endpoint (a moto server on 127.0.0.1) in bucket
   ``kafka-snapshots``, prefix ``snapshots``;
3. runs the nightly DAG for both nights with embedded Airflow (SQLite metadata
   DB in ``OUT/airflow``) and local Spark (``local[2]``), each night as
   ``dag.test()`` in a child process whose output fills
   ``OUT/pipeline-logs/dag-test-DATE.log`` as it runs, while a line per task
   start and end (state, seconds) is printed from the metadata DB;
4. prints where the tables and the data-quality report are, with row counts, each
   night's checks that warned or failed (check, topic-partitions, causes), one
   query to copy, and whether the counts changed since the previous ``make demo``.

``ui`` (``make ui``) serves the same data: moto again (its state is in memory),
then Airflow's api-server, scheduler, dag-processor and triggerer on 127.0.0.1, each
in its own process group, stopped together on Ctrl-C. Log in as ``admin`` with the
password printed at start (kept in ``OUT/airflow/simple_auth_manager_passwords.json.generated``).

No credentials here are real: the moto server accepts any key, and the demo's
connections are the environment variables ``AIRFLOW_CONN_*`` of the children.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import fcntl
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from spark_jobs.layout import typed_topic
from spark_jobs.audit.results import place
from spark_jobs.schemas import ALL_NAMES, NAMES as TABLES

from . import demo_data, settings

BUCKET = "kafka-snapshots"
PREFIX = "snapshots"
DAG_ID = settings.NIGHTLY_DAG_ID
REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
#: access key and secret of the demo's S3 (the moto server accepts any): as long as Airflow's
#: ``[logging] min_length_masked_secret`` asks (5), or every task warns "Skipping masking for
#: a secret as it's too short" and leaves it unmasked
DEMO_KEY = "kafkalog-demo-key"


# ------------------------------------------------------------------ environment
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def local_connections(endpoint: str, key: str) -> dict[str, str]:
    """``spark_default`` (local Spark) and ``aws_default`` (the S3 server at ``endpoint``)
    as ``AIRFLOW_CONN_*`` variables; ``key`` is both access key and secret (moto accepts any)."""
    return {
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps(
            {"conn_type": "spark", "host": "local[2]", "extra": {"deploy-mode": "client"}}),
        "AIRFLOW_CONN_AWS_DEFAULT": json.dumps(
            {"conn_type": "aws", "login": key, "password": key,
             "extra": {"endpoint_url": endpoint, "region_name": "us-east-1"}}),
    }


def catalog_config(out: Path) -> Path:
    """``out/.pyiceberg.yaml``: the catalog ``kafkalog`` of the demo's warehouse (the
    embedded SQLite catalog under ``out/warehouse``), so that ``PYICEBERG_HOME=out``
    finds the tables from any shell."""
    from spark_jobs.warehouse.catalog import DEFAULT_CATALOG, embedded_config, write_config

    warehouse = out / "warehouse"
    return Path(write_config(str(out), DEFAULT_CATALOG, embedded_config(str(warehouse))))


def warehouse(out: Path):
    """The demo's tables (a :class:`spark_jobs.warehouse.Warehouse`)."""
    from spark_jobs.warehouse import Warehouse

    return Warehouse(str(out / "warehouse"))


def airflow_env(out: Path, endpoint: str, *, api_port: int | None = None) -> dict[str, str]:
    """The environment of every Airflow process of the demo (and its Spark jobs)."""
    home = out / "airflow"
    home.mkdir(parents=True, exist_ok=True)
    catalog_config(out)
    env = dict(os.environ)
    env.update({
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__PARALLELISM": "2",
        "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": "2",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        # SQLite: wait for a lock up to a minute, not pysqlite's 5 s (see the module)
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS": "kafkalog_pipeline.sqlite_settings.CONNECT_ARGS",
        "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
        **local_connections(endpoint, DEMO_KEY),
        # the pipeline's settings (Variables would win over these)
        "KAFKALOG_WAREHOUSE": str(out / "warehouse"),
        # the Iceberg catalog `kafkalog` (SQLite under the warehouse): out/.pyiceberg.yaml
        "PYICEBERG_HOME": str(out),
        "KAFKALOG_SNAPSHOT_BUCKET": BUCKET,
        "KAFKALOG_SNAPSHOT_PREFIX": PREFIX,
        "KAFKALOG_CHUNK_BYTES": "4096",  # small on purpose: the demo plans several chunks
        "KAFKALOG_MAX_CHUNKS": "3",
        "KAFKALOG_RETRY_DELAY_SECONDS": "5",
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(REPO),
    })
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        env.pop(k, None)
    if api_port is not None:
        env["AIRFLOW__API__PORT"] = str(api_port)
        env["AIRFLOW__API__HOST"] = "127.0.0.1"
        env["AIRFLOW__API__BASE_URL"] = f"http://127.0.0.1:{api_port}"
        env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] = f"http://127.0.0.1:{api_port}/execution/"
    return env


def start_s3(snapshots: Path):
    """A moto server on 127.0.0.1 holding the snapshots; returns (server, endpoint URL)."""
    import logging

    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per S3 request
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=free_port(), verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id=DEMO_KEY, aws_secret_access_key=DEMO_KEY)
    n = demo_data.upload(snapshots, BUCKET, PREFIX, client)
    print(f"S3 endpoint {endpoint}: {n} objects in s3://{BUCKET}/{PREFIX}/")
    return server, endpoint


class DemoError(RuntimeError):
    """The demo cannot go on; the message says why (``main`` prints it and exits 1)."""


def airflow(env, *args, **kwargs):
    return subprocess.run([str(BIN / "airflow"), *args], env=env, **kwargs)


def migrate(env, log_dir: Path) -> None:
    with open(log_dir / "airflow-db-migrate.log", "w") as log:
        rc = airflow(env, "db", "migrate", stdout=log, stderr=subprocess.STDOUT).returncode
    if rc:
        raise DemoError(f"airflow db migrate failed: see {log_dir / 'airflow-db-migrate.log'}")


# ------------------------------------------------------------------ Airflow components
def start_component(env, log_dir: Path, *args: str) -> subprocess.Popen:
    """``airflow ARGS`` (api-server, scheduler, dag-processor...) in its own session.

    Output is appended to ``log_dir/airflow-<ARGS[0]>.log``. Its own session makes it
    the leader of a process group: :func:`stop_components` stops it with everything it
    forked (LocalExecutor workers, gunicorn/uvicorn children).
    """
    with open(log_dir / f"airflow-{args[0]}.log", "a") as log:
        return subprocess.Popen([str(BIN / "airflow"), *args], env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)


def api_server_args(port: int) -> list[str]:
    return ["api-server", "--host", "127.0.0.1", "--port", str(port)]


def stop_components(procs, timeout: float = 20) -> None:
    """SIGTERM each component's process group; SIGKILL what is left after ``timeout``."""
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    for p in procs:
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
        try:  # children left behind by a component that exited
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def metadata_query(env, sql: str, *args) -> list[tuple]:
    """Read the demo's SQLite metadata DB (read-only; [] if it is not there yet)."""
    import sqlite3
    from contextlib import closing

    db = Path(env["AIRFLOW_HOME"]) / "airflow.db"
    if not db.exists():
        return []
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=60)) as conn:
        return conn.execute(sql, args).fetchall()


def _wait(what: str, ready, procs, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        dead = [p.args[1] for p in procs if p.poll() is not None]
        if dead:
            raise RuntimeError(f"Airflow {', '.join(dead)} exited before {what}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not after {timeout} s")
        time.sleep(1)


def wait_for_dag(env, procs, dag_id: str = DAG_ID, timeout: float = 180) -> None:
    """Wait until the dag-processor has serialized ``dag_id``; raise if a component exits."""
    import sqlite3

    def serialized():
        try:
            return bool(metadata_query(
                env, "SELECT 1 FROM serialized_dag WHERE dag_id = ?", dag_id))
        except sqlite3.OperationalError:  # not migrated yet, or locked for longer than the timeout
            return False

    _wait(f"{dag_id} was serialized", serialized, procs, timeout)


def wait_for_api(port: int, procs, timeout: float = 180) -> None:
    """Wait until the api-server on 127.0.0.1:``port`` answers its health check."""
    import urllib.request

    def healthy():
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v2/monitor/health",
                                        timeout=5) as resp:
                return resp.status == 200
        except OSError:
            return False

    _wait(f"the api-server answered on port {port}", healthy, procs, timeout)


# ------------------------------------------------------------------ reporting
def table_counts(out: Path) -> dict:
    """Row counts per table on ``main`` (and records per topic), read through the catalog."""
    import pyarrow.compute as pc

    from spark_jobs.tables import read_arrow

    wh = warehouse(out)
    counts: dict = {}
    # the six tables, and those of Kafka's internal topics and state files the runs made
    for name in (n for n in ALL_NAMES if n in TABLES or wh.load(n) is not None):
        counts[name] = read_arrow(wh, name, columns=("run_id",)).num_rows
    # the typed per-topic tables (docs/tables.md): their columns are the topics' own
    for name in wh.typed_tables():
        counts[name] = len(wh.table(name).scan(selected_fields=("run_id",)).to_arrow())
    topics = read_arrow(wh, "records", columns=("topic",)).column("topic")
    counts["records_by_topic"] = {r["values"]: r["counts"]
                                  for r in pc.value_counts(topics).to_pylist()} if len(topics) else {}
    counts["records_by_topic"] = dict(sorted(counts["records_by_topic"].items()))
    return counts


#: outcomes of a check, worst first (a row's ``status``; anything else sorts after them)
OUTCOMES = ("fail", "warn", "pass")


def _rank(status: str) -> int:
    return OUTCOMES.index(status) if status in OUTCOMES else len(OUTCOMES)


def _causes(details: str | None) -> str:
    """The classes a result's ``details`` graded not ``pass``, with their items:
    ``"missing_segment 1, index_mismatch 2"`` ("" where there are none or no JSON)."""
    try:
        classes = json.loads(details or "{}").get("classes") or {}
        return ", ".join(f"{name} {c.get('items', '?')}" for name, c in classes.items()
                         if isinstance(c, dict) and c.get("status") != "pass")
    except (ValueError, AttributeError):
        return ""


def problem_lines(rows: list[dict]) -> list[str]:
    """One line per check that did not pass, worst outcome first: the outcome, the check
    and its topic-partitions, each with its causes (``rows``: dq_results rows)."""
    problems: dict[tuple[str, str], list[dict]] = {}
    for row in rows:
        if row["status"] != "pass":
            problems.setdefault((row["status"], row["check"]), []).append(row)
    lines = []
    for status, check in sorted(problems, key=lambda k: (_rank(k[0]), k)):
        parts = []
        for row in sorted(problems[status, check], key=place):
            causes = _causes(row.get("details"))
            parts.append(place(row) + (f" ({causes})" if causes else ""))
        lines.append(f"{status} {check}: {', '.join(parts)}")
    return lines


def dq_summary(out: Path, run_id: str) -> dict:
    """Run ``run_id``'s data quality: its report's path (None if missing), the count of
    its results per status (worst first) and :func:`problem_lines`."""
    from pyiceberg.expressions import EqualTo

    from spark_jobs.storage import run_token
    from spark_jobs.tables import read_arrow

    html = out / "warehouse" / "data_docs" / run_token(run_id) / "index.html"
    rows = read_arrow(warehouse(out), "dq_results", row_filter=EqualTo("run_id", run_id),
                      columns=("check", "topic", "partition", "status", "details",
                               "night")).to_pylist()
    statuses: dict[str, int] = {}
    for row in sorted(rows, key=lambda r: _rank(r["status"])):
        statuses[row["status"]] = statuses.get(row["status"], 0) + 1
    return {"report": str(html) if html.exists() else None, "statuses": statuses,
            "problems": problem_lines(rows)}


def problems_query(out: Path, wh) -> str:
    """A shell command that prints the warn and fail rows of dq_results (every run's)."""
    return (f"PYICEBERG_HOME={out} {sys.executable} -c \"from pyiceberg.catalog import load_catalog; "
            f"t = load_catalog('{wh.catalog_name}').load_table('{wh.namespace}.dq_results'); "
            "print(t.scan(row_filter=\\\"status != 'pass'\\\", selected_fields=('run_id', 'check', "
            "'topic', 'partition', 'status', 'failed')).to_pandas().to_string())\"")


# ------------------------------------------------------------------ progress of a night
#: task instance states after which a try runs no more
ENDED = ("success", "failed", "skipped", "upstream_failed", "up_for_retry", "removed")


def db_time(when: dt.datetime) -> str:
    """``when`` as the metadata DB stores times (naive UTC text), comparable in SQL."""
    return when.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")


class Progress:
    """Prints a line when a task try of ``dag_id`` starts and when it ends (state and
    seconds), as :meth:`poll` finds them in the metadata DB: tries started since
    ``since`` only, so a previous run's task instances are not reported again."""

    def __init__(self, env, since: dt.datetime, dag_id: str = DAG_ID, file=None):
        self.env, self.since, self.dag_id = env, db_time(since), dag_id
        self.file = file
        self.t0 = time.monotonic()
        self.seen: dict[tuple, str] = {}  # (task_id, map_index, try_number) -> started | ended

    def poll(self) -> None:
        import sqlite3

        try:
            rows = metadata_query(
                self.env, "SELECT task_id, map_index, try_number, state, duration FROM task_instance "
                "WHERE dag_id = ? AND start_date >= ? ORDER BY coalesce(end_date, start_date)",
                self.dag_id, self.since)
        except sqlite3.OperationalError:  # not migrated yet, or locked past the timeout: next time
            return
        for task_id, map_index, try_number, state, duration in rows:
            key = (task_id, map_index, try_number)
            name = task_id + (f"[{map_index}]" if map_index >= 0 else "")
            tried = f" (try {try_number})" if try_number > 1 or state == "up_for_retry" else ""
            if state in ENDED and self.seen.get(key) != "ended":
                took = f" in {duration:.0f} s" if duration is not None else ""
                self._print(f"{name} {state}{took}{tried}")
                self.seen[key] = "ended"
            elif state == "running" and key not in self.seen:
                self._print(f"{name} started{tried}")
                self.seen[key] = "started"

    def _print(self, what: str) -> None:
        print(f"  {time.monotonic() - self.t0:5.0f} s  {what}", file=self.file or sys.stdout,
              flush=True)


# ------------------------------------------------------------------ dag test (child)
def fail_abandoned_runs(dag_id: str) -> None:
    """Mark failed the runs an interrupted demo left ``running`` or ``queued``.

    No scheduler ever finishes them (``dag.test()`` drives its own run only), and a
    run left between plan and publish would hold the warehouse: the next run's
    plan would wait for it forever (kafkalog_pipeline.tasks.wait_for_warehouse).
    Not for a metadata DB that a scheduler serves (``make ui``): stop that first.
    """
    from sqlalchemy import select

    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState

    with create_session() as session:
        for dr in session.scalars(select(DagRun).where(
                DagRun.dag_id == dag_id,
                DagRun.state.in_((DagRunState.RUNNING, DagRunState.QUEUED)))):
            print(f"run {dr.run_id} was left {dr.state} by an interrupted demo: marking it failed",
                  file=sys.stderr)
            dr.set_state(DagRunState.FAILED)


class TaskLogFiles:
    """Task logs where Airflow's log reader looks for them, for tasks run by ``dag.test()``.

    ``dag.test()`` runs each task inside its own process, with no supervisor
    (``run_task_in_process``), and logs to that process's output only; the UI then
    finds no file and says "Log file not found on worker". While active, a copy of every log event of a task try is
    written as the JSON line a worker's supervisor writes, to
    ``[logging] base_log_folder`` / ``log_filename_template`` rendered for that try
    (the path the api-server's ``FileTaskHandler`` reads). A try's file is started
    afresh the first time this process writes it (a rerun of the demo reuses run ids
    and try numbers) and appended to after (a rescheduled try comes back).
    """

    def __init__(self):
        self.file = None
        self.started: set[str] = set()

    # ---- where
    def open(self, ti) -> Path:
        from airflow.sdk.log import init_log_file
        from airflow.utils.helpers import log_filename_template_renderer

        path = init_log_file(log_filename_template_renderer()(ti=ti))
        self.close()
        self.file = open(path, "a" if str(path) in self.started else "w", encoding="utf-8")
        self.started.add(str(path))
        return path

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None

    # ---- what
    def write(self, event: dict) -> None:
        if self.file is None:
            return
        line = {"timestamp": event.get("timestamp"), "level": event.get("level", "info"),
                "event": str(event.get("event", "")), "logger": event.get("logger")}
        line.update({k: v for k, v in event.items()
                     if k not in line and not k.startswith("_") and k not in ("exc_info",
                                                                              "logger_name")})
        self.file.write(json.dumps(line, default=str) + "\n")
        self.file.flush()

    def processor(self, logger, method_name, event_dict):
        """structlog processor (before the renderer): structlog's own loggers."""
        import structlog

        event = dict(event_dict)
        if event.get("exc_info"):
            event = structlog.processors.format_exc_info(logger, method_name, event)
        self.write(event)
        return event_dict

    def handler(self):
        """A stdlib handler (root logger): the stdlib loggers of tasks and hooks."""
        import logging

        files = self

        class Handler(logging.Handler):
            def emit(self, record):
                event = {"timestamp": dt.datetime.fromtimestamp(record.created, dt.timezone.utc)
                         .isoformat().replace("+00:00", "Z"),
                         "level": record.levelname.lower(), "event": record.getMessage(),
                         "logger": record.name}
                if record.exc_info:
                    event["exception"] = logging.Formatter().formatException(record.exc_info)
                files.write(event)

        return Handler(level=logging.INFO)


@contextlib.contextmanager
def dag_test_like_a_worker():
    """``dag.test()`` leaving what a scheduled run leaves for the UI:

    * each task try's log in the file the api-server reads (:class:`TaskLogFiles`);
    * the run's real start time: ``dag.test()`` creates the run with
      ``start_date = logical date`` (apache/airflow#66127), so a run of a past night
      read "4d 05:00" for two minutes' work; here it is the time the run was created.
    """
    import logging

    import structlog

    from airflow.models import dagrun as dagrun_module
    from airflow.sdk.execution_time import supervisor

    files = TaskLogFiles()
    run_in_process, get_or_create = supervisor.run_task_in_process, dagrun_module.get_or_create_dagrun

    def run_task_in_process(ti, task, *args, **kwargs):
        files.open(ti)
        try:
            return run_in_process(ti, task, *args, **kwargs)
        finally:
            files.close()

    def get_or_create_dagrun(**kwargs):
        kwargs["start_date"] = dt.datetime.now(dt.timezone.utc)
        return get_or_create(**kwargs)

    processors = structlog.get_config()["processors"]
    processors.insert(len(processors) - 1, files.processor)  # before the renderer
    handler = files.handler()
    logging.getLogger().addHandler(handler)
    supervisor.run_task_in_process = run_task_in_process
    dagrun_module.get_or_create_dagrun = get_or_create_dagrun
    try:
        yield files
    finally:
        supervisor.run_task_in_process = run_in_process
        dagrun_module.get_or_create_dagrun = get_or_create
        logging.getLogger().removeHandler(handler)
        processors.remove(files.processor)
        files.close()


def dagtest(date: str) -> int:
    """Run the nightly DAG for snapshot ``date`` with ``dag.test()``; exit 0 iff it succeeded."""
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=os.environ["AIRFLOW__CORE__DAGS_FOLDER"])
    if bag.import_errors:
        print(f"DAG import errors: {bag.import_errors}", file=sys.stderr)
        return 2
    dag = bag.dags[DAG_ID]
    fail_abandoned_runs(DAG_ID)
    logical = dt.datetime.fromisoformat(date).replace(hour=3, tzinfo=dt.timezone.utc)
    # run_after = logical date: the run id is manual__<logical date>, the same on every
    # demo run, so a rerun replaces that run's output instead of adding a new run
    with dag_test_like_a_worker():
        dr = dag.test(logical_date=logical, run_after=logical)
    states = {ti.task_id + (f"[{ti.map_index}]" if ti.map_index >= 0 else ""): str(ti.state)
              for ti in dr.get_task_instances()}
    print(json.dumps({"run_id": dr.run_id, "state": str(dr.state), "tasks": states}), flush=True)
    return 0 if str(dr.state).endswith("success") else 1


def run_night(env, date: str, log_dir: Path, poll_seconds: float = 2) -> dict:
    """``dagtest date`` in a child whose output (unbuffered) fills
    ``log_dir/dag-test-DATE.log`` as it runs; meanwhile :class:`Progress` prints its tasks."""
    log_path = log_dir / f"dag-test-{date}.log"
    started = time.monotonic()
    progress = Progress(env, dt.datetime.now(dt.timezone.utc))
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "kafkalog_pipeline.demo", "dagtest", date],
                                env={**env, "PYTHONUNBUFFERED": "1"}, stdout=log,
                                stderr=subprocess.STDOUT)
    try:
        while True:
            try:
                proc.wait(timeout=poll_seconds)
            except subprocess.TimeoutExpired:
                progress.poll()
                continue
            progress.poll()
            break
    finally:
        if proc.poll() is None:  # interrupted: do not leave the night running behind us
            proc.terminate()
            proc.wait()
    with open(log_path, errors="replace") as log:
        last = [ln for ln in log if ln.startswith('{"run_id"')]
    result = json.loads(last[-1]) if last else {"state": "failed", "tasks": {}, "run_id": None}
    result["seconds"] = round(time.monotonic() - started, 1)
    result["log"] = str(log_path)
    result["ok"] = proc.returncode == 0
    return result


# ------------------------------------------------------------------ commands
@contextlib.contextmanager
def exclusive(out: Path, what: str):
    """Hold ``out/.demo.lock`` for ``what`` (`make demo`, `make ui`): both write the
    same Airflow database, snapshots and warehouse, so a second one over the same
    directory stops at once with who holds it. The kernel drops the lock when its
    holder exits, however it exits; Airflow's processes do not inherit it."""
    out.mkdir(parents=True, exist_ok=True)
    f = open(out / ".demo.lock", "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        holder = f.read().strip() or "another process"
        f.close()
        raise DemoError(f"{out} is in use by {holder}: stop it first (Ctrl-C where it runs), "
                         f"then start {what} again") from None
    try:
        f.seek(0)
        f.truncate()
        f.write(f"{what} (pid {os.getpid()})\n")
        f.flush()
        yield
    finally:
        f.close()


def cmd_run(out: Path) -> int:
    out = out.resolve()
    with exclusive(out, "make demo"):
        return _run(out)


def _run(out: Path) -> int:
    log_dir = out / "pipeline-logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    snapshots = out / "snapshots"
    for night in demo_data.write_nights(snapshots):
        print(f"Wrote snapshot {night}")
    server, endpoint = start_s3(snapshots)
    try:
        env = airflow_env(out, endpoint)
        migrate(env, log_dir)
        results = []
        for date in demo_data.NIGHTS:
            print(f"Running {DAG_ID} for snapshot {date} (log: {log_dir}/dag-test-{date}.log) ...",
                  flush=True)
            r = run_night(env, date, log_dir)
            results.append(r)
            print(f"  run {r['run_id']}: {run_verdict(r)}", flush=True)
            for line in (run_note(env, r["run_id"]) or "").split("\n\n"):
                if line:
                    print(f"  note: {line}", flush=True)
    finally:
        server.stop()
    return report(out, results)


def run_note(env, run_id: str | None) -> str | None:
    """Run ``run_id``'s note, as Airflow shows it beside the run's state: the audit's
    verdict (kafkalog_pipeline.notes)."""
    rows = metadata_query(env, "SELECT n.content FROM dag_run r JOIN dag_run_note n ON "
                          "n.dag_run_id = r.id WHERE r.dag_id = ? AND r.run_id = ?",
                          DAG_ID, run_id) if run_id else []
    return rows[0][0] if rows else None


def run_verdict(result: dict) -> str:
    """``success in 312.4 s, 6 tasks``, naming the tasks that did not succeed."""
    states: dict[str, list[str]] = {}
    for task, state in sorted(result["tasks"].items()):
        states.setdefault(state.rsplit(".", 1)[-1].lower(), []).append(task)
    text = f"{result['state'].rsplit('.', 1)[-1].lower()} in {result['seconds']} s, {len(result['tasks'])} tasks"
    return text + "".join(f"; {state}: {', '.join(tasks)}"
                          for state, tasks in states.items() if state != "success")


def report(out: Path, results: list[dict]) -> int:
    counts = table_counts(out)
    wh = warehouse(out)
    print(f"\nIceberg tables (catalog {wh.catalog_name!r}, namespace {wh.namespace!r}; "
          f"configuration {out / '.pyiceberg.yaml'}):")
    fixed = [n for n in ALL_NAMES if n in counts]
    typed = sorted(n for n in counts if typed_topic(n) is not None)
    width = max(map(len, fixed + typed))
    for name in fixed:
        print(f"  {wh.namespace}.{name:<{width}} {counts[name]:>6} rows")
    for name in typed:
        print(f"  {wh.namespace}.{name:<{width}} {counts[name]:>6} rows  "
              f"(typed: {typed_topic(name)}'s values)")
    print("  records by topic: " + ", ".join(f"{t}={n}" for t, n in counts["records_by_topic"].items()))
    from kafkalog_pipeline.demo_schemas import value_lines

    print("  values in Schema Registry's wire format (records.value_json; docs/schemas.md):")
    for line in value_lines(wh):
        print(f"    {line}")
    for r in results:
        if r.get("run_id"):
            dq = dq_summary(out, r["run_id"])
            counts_ = ", ".join(f"{n} {status}" for status, n in dq["statuses"].items())
            print(f"Data quality of {r['run_id']}: {counts_ or 'no results'}")
            for line in dq["problems"]:
                print(f"  {line}")
            print(f"  report:  {dq['report'] or '(missing)'}")
    print("Query the tables, e.g. the checks that warned or failed, every run's:\n"
          f"  {problems_query(out, wh)}")
    previous_path = out / "demo-counts.json"
    if previous_path.exists():
        previous = json.loads(previous_path.read_text())
        same = {k: previous.get(k) == counts[k] for k in ("records", "batches", "markers")}
        print("Compared with the previous demo run: "
              + ", ".join(f"{k} {'unchanged' if v else 'CHANGED'}" for k, v in same.items()))
    ok = all(r["ok"] for r in results)
    if ok:
        previous_path.write_text(json.dumps(counts, indent=1))
    print(f"Airflow home (SQLite metadata DB, task logs): {out / 'airflow'};  `make ui` to browse it")
    if not ok:
        print("A DAG run failed: see the logs above.", file=sys.stderr)
    return 0 if ok else 1


def password_file(home: Path) -> tuple[Path, str]:
    """The simple auth manager's password file, with a generated admin password."""
    path = home / "simple_auth_manager_passwords.json.generated"
    try:
        password = json.loads(path.read_text())["admin"]
    except (OSError, ValueError, KeyError):
        password = secrets.token_urlsafe(12)
        path.write_text(json.dumps({"admin": password}))
    return path, password


def cmd_ui(out: Path, port: int | None) -> int:
    out = out.resolve()
    with exclusive(out, "make ui"):
        return _ui(out, port)


def _ui(out: Path, port: int | None) -> int:
    snapshots = out / "snapshots"
    if not snapshots.is_dir():
        demo_data.write_nights(snapshots)
    log_dir = out / "pipeline-logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    server, endpoint = start_s3(snapshots)
    port = port or free_port()
    env = airflow_env(out, endpoint, api_port=port)
    home = Path(env["AIRFLOW_HOME"])
    pw_path, password = password_file(home)
    env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"] = str(pw_path)
    migrate(env, log_dir)

    def stop(signum, frame):  # SIGTERM / SIGHUP stop everything like Ctrl-C
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, stop)
    procs = []
    try:
        # the triggerer too: without one the home page shows a red "Triggerer" badge
        for component in (api_server_args(port), ["scheduler"], ["dag-processor"], ["triggerer"]):
            procs.append(start_component(env, log_dir, *component))
        print(f"\nAirflow UI: http://127.0.0.1:{port}/  user: admin  password: {password}")
        print(f"(password file {pw_path}; logs in {log_dir}; Ctrl-C stops everything)")
        while all(p.poll() is None for p in procs):
            time.sleep(2)
        print("an Airflow component exited: see its log in", log_dir, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        stop_components(procs)
        server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kafkalog_pipeline.demo")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="generate, serve and process two nights")
    run.add_argument("--out", default="demo-output")
    ui = sub.add_parser("ui", help="start Airflow on 127.0.0.1 over the demo's data")
    ui.add_argument("--out", default="demo-output")
    ui.add_argument("--port", type=int, default=None)
    test = sub.add_parser("dagtest", help=argparse.SUPPRESS)
    test.add_argument("date")
    args = parser.parse_args(argv)
    try:
        if args.command == "run":
            return cmd_run(Path(args.out))
        if args.command == "ui":
            return cmd_ui(Path(args.out), args.port)
        return dagtest(args.date)
    except DemoError as err:
        print(f"demo: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
