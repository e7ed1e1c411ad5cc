"""The demo's machine: a local S3 server, the environment of every Airflow process, the
Airflow components of ``make ui``, and the lock on the output folder.

No credentials here are real: the moto server accepts any key, and the demo's
connections are the environment variables ``AIRFLOW_CONN_*`` of the children.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from kafkalog_pipeline.settings import NIGHTLY_DAG_ID

from . import data, exactly_once, sink, tiered

BUCKET = "kafka-snapshots"
PREFIX = "snapshots"
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
        # SQLite: wait for a lock up to a minute, not pysqlite's 5 s (demo/sqlite_settings.py)
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS": "demo.sqlite_settings.CONNECT_ARGS",
        "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
        **local_connections(endpoint, DEMO_KEY),
        **tiered.settings_env(out),  # the tier's key ring (demo.tiered)
        # the pipeline's settings (Variables would win over these)
        "KAFKALOG_WAREHOUSE": str(out / "warehouse"),
        # the Iceberg catalog `kafkalog` (SQLite under the warehouse): out/.pyiceberg.yaml
        "PYICEBERG_HOME": str(out),
        "KAFKALOG_SNAPSHOT_BUCKET": BUCKET,
        "KAFKALOG_SNAPSHOT_PREFIX": PREFIX,
        "KAFKALOG_CHUNK_BYTES": "4096",  # small on purpose: the demo plans several chunks
        "KAFKALOG_MAX_CHUNKS": "3",
        "KAFKALOG_RETRY_DELAY_SECONDS": "5",
        # the product's policy with the planted exactly-once faults graded warn (demo.exactly_once)
        "KAFKALOG_POLICY": str(exactly_once.write_policy(out / "policy.yaml")),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(REPO),
    })
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        env.pop(k, None)
    if tiered.has_key_ring(out):
        # the DAG's tiered_storage default: the demo's tier, for a run triggered in `make ui`
        # as for the demo's own runs (only where the demo wrote its tier and key ring: a run
        # over snapshots without them, as the pipeline tests make, reads no tier)
        env["KAFKALOG_TIERED_STORAGE"] = tiered.tier_uri(BUCKET)
    sinks = sink.sinks_file(out)
    if sinks is not None:
        # the DAG's sinks default: the demo's sink (demo.sink), only where the demo wrote it
        # (a run over snapshots without it, as most pipeline tests make, reconciles none)
        env["KAFKALOG_SINKS"] = str(sinks)
    if api_port is not None:
        env["AIRFLOW__API__PORT"] = str(api_port)
        env["AIRFLOW__API__HOST"] = "127.0.0.1"
        env["AIRFLOW__API__BASE_URL"] = f"http://127.0.0.1:{api_port}"
        env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] = f"http://127.0.0.1:{api_port}/execution/"
    return env


def start_s3(snapshots: Path, out: Path | None = None):
    """A moto server on 127.0.0.1 holding the snapshots (and ``out``'s tiered-storage tier,
    :mod:`demo.tiered`); returns (server, endpoint URL)."""
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
    n = data.upload(snapshots, BUCKET, PREFIX, client)
    print(f"S3 endpoint {endpoint}: {n} objects in s3://{BUCKET}/{PREFIX}/")
    if out is not None:
        n = tiered.upload(out, BUCKET, client)
        print(f"  and {n} tiered-storage objects in {tiered.tier_uri(BUCKET)}")
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


def unpause(env, log_dir: Path, dag_id: str = NIGHTLY_DAG_ID) -> None:
    """``airflow dags unpause``: Airflow 3.3's trigger form shows a pre-checked "Unpause" box
    for a paused DAG (``TriggerDAGForm``: ``useState(true)``, no setting changes it), and a
    paused DAG's triggered runs do not start; unpaused, the form has no such box."""
    with open(log_dir / "airflow-dags-unpause.log", "w") as log:
        rc = airflow(env, "dags", "unpause", dag_id, stdout=log, stderr=subprocess.STDOUT).returncode
    if rc:
        raise DemoError(f"airflow dags unpause {dag_id} failed: see {log_dir / 'airflow-dags-unpause.log'}")


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


def wait_for_dag(env, procs, dag_id: str = NIGHTLY_DAG_ID, timeout: float = 180) -> None:
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


class Lock:
    """``out/.demo.lock`` as its holder writes it: ``make demo (pid N)``, then a line
    ``group G: WHAT`` per process group it started and has not stopped yet (a night's
    ``dag.test()`` with its Spark jobs), so that the next holder can stop what a holder
    killed outright (SIGKILL: no clean-up ran) left behind."""

    def __init__(self, f, what: str):
        self.f, self.what, self.groups = f, what, {}

    def _write(self) -> None:
        self.f.seek(0)
        self.f.truncate()
        self.f.write(f"{self.what} (pid {os.getpid()})\n"
                     + "".join(f"group {g}: {w}\n" for g, w in self.groups.items()))
        self.f.flush()

    def started(self, pgid: int, what: str) -> None:
        self.groups[pgid] = what
        self._write()

    def stopped(self, pgid: int) -> None:
        self.groups.pop(pgid, None)
        self._write()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_group(pgid: int, timeout: float = 30, leader: subprocess.Popen | None = None) -> bool:
    """SIGTERM process group ``pgid``, SIGKILL what is left after ``timeout``; whether
    there was anything to stop. ``leader``: the group's leader where it is our child (reaped
    as it exits, so that its zombie does not count as running)."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if leader is not None:
            leader.poll()
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
    return True


#: a group line of a lock file, and the pid in its first line
_GROUP_LINE = re.compile(r"^group (\d+): (.*)$")
_HOLDER_PID = re.compile(r"\(pid (\d+)\)")


def _group_is_ours(pgid: int, what: str) -> bool:
    """Whether process ``pgid`` still runs what the lock says (not a pid reused since)."""
    try:
        cmdline = Path(f"/proc/{pgid}/cmdline").read_bytes().replace(b"\0", b" ").decode(
            errors="replace")
    except OSError:
        return alive(pgid)  # no /proc: trust the lock
    return what in cmdline


def take_over(text: str, out: Path) -> list[str]:
    """What a new holder says of the lock ``text`` it took (its holder is gone: the kernel
    dropped its lock), having stopped the process groups it left running."""
    lines = text.strip().splitlines()
    if not lines:
        return []
    said = []
    m = _HOLDER_PID.search(lines[0])
    if m and not alive(int(m.group(1))):
        said.append(f"{out}: {lines[0]} stopped without cleaning up (no such process): "
                    "taking its lock over")
    for line in lines[1:]:
        g = _GROUP_LINE.match(line)
        if g and _group_is_ours(int(g.group(1)), g.group(2)) and stop_group(int(g.group(1))):
            said.append(f"{out}: stopped what it left running: group {g.group(1)} "
                        f"({g.group(2)})")
    return said


@contextlib.contextmanager
def exclusive(out: Path, what: str):
    """Hold ``out/.demo.lock`` for ``what`` (`make demo`, `make ui`): both write the
    same Airflow database, snapshots and warehouse, so a second one over the same
    directory stops at once with who holds it. The kernel drops the lock when its
    holder exits, however it exits; Airflow's processes do not inherit it. Yields the
    :class:`Lock`; a holder that was killed outright is taken over, the process groups
    it recorded stopped (:func:`take_over`); on exit the file is left empty."""
    out.mkdir(parents=True, exist_ok=True)
    f = open(out / ".demo.lock", "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        holder = (f.read().strip().splitlines() or ["another process"])[0]
        f.close()
        raise DemoError(f"{out} is in use by {holder}: stop it first (Ctrl-C where it runs), "
                         f"then start {what} again") from None
    try:
        f.seek(0)
        for line in take_over(f.read(), out):
            print(line, file=sys.stderr)
        lock = Lock(f, what)
        lock._write()
        yield lock
    finally:
        with contextlib.suppress(OSError, ValueError):
            f.seek(0)
            f.truncate()  # nobody holds it: no pid named
        f.close()


def password_file(home: Path) -> tuple[Path, str]:
    """The simple auth manager's password file, with a generated admin password."""
    path = home / "simple_auth_manager_passwords.json.generated"
    try:
        password = json.loads(path.read_text())["admin"]
    except (OSError, ValueError, KeyError):
        password = secrets.token_urlsafe(12)
        path.write_text(json.dumps({"admin": password}))
    return path, password

