"""Airflow as `make ui` runs it (demo.servers: dag-processor, api-server, scheduler as
subprocesses over a SQLite metadata DB), started over a folder of snapshots
(``running_airflow``), driven by its CLI and REST API (``Airflow``), and what the scheduler
tests read of it; the conflict nights (a topic of their own). Used by test_backfill and
test_gate_partitions."""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from demo import servers
from kafkalog_pipeline.settings import NIGHTLY_DAG_ID as DAG_ID
from tests.spark_settings import SUBMIT_CONF


RUN_TIMEOUT = 25 * 60  # per backfill: two runs one after the other, on a busy 2-core machine
FINAL = ("success", "failed")
LOCK_ATTEMPTS = 3  # airflow backfill create, on "database is locked" (see create_backfill)


@dataclass
class Airflow:
    out: Path
    env: dict
    procs: list
    logs: Path

    @property
    def warehouse(self) -> Path:
        return Path(self.env["KAFKALOG_WAREHOUSE"])

    def cli(self, *args: str, check: bool = True, returncode: bool = False):
        """The command's output; with ``returncode``, (exit code, output)."""
        proc = servers.airflow(self.env, *args, capture_output=True, text=True, timeout=300)
        if check and proc.returncode:
            raise AssertionError(f"airflow {' '.join(args)} exited {proc.returncode}:\n"
                                 f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        out = proc.stdout + proc.stderr
        return (proc.returncode, out) if returncode else out

    def query(self, sql: str, *args) -> list[tuple]:
        return servers.metadata_query(self.env, sql, *args)

    def api(self, method: str, path: str, body: dict | None = None) -> dict:
        """Airflow's REST API (the api-server on 127.0.0.1), as ``admin``; the JSON answer."""
        import time
        import urllib.error
        import urllib.request

        base = self.env["AIRFLOW__API__BASE_URL"]
        if not getattr(self, "_token", None):
            _, password = servers.password_file(Path(self.env["AIRFLOW_HOME"]))
            req = urllib.request.Request(f"{base}/auth/token", method="POST",
                                         data=json.dumps({"username": "admin",
                                                          "password": password}).encode(),
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=60) as resp:
                self._token = json.loads(resp.read())["access_token"]
        for attempt in range(1, LOCK_ATTEMPTS + 1):
            req = urllib.request.Request(
                f"{base}{path}", method=method,
                data=None if body is None else json.dumps(body).encode(),
                headers={"Authorization": f"Bearer {self._token}",
                         "Content-Type": "application/json", "Accept": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=120) as resp:
                    return json.loads(resp.read() or b"null")
            except urllib.error.HTTPError as err:
                text = err.read().decode(errors="replace")
                # SQLite refuses a stale transaction's write at once (see create_backfill)
                if "database is locked" in text and attempt < LOCK_ATTEMPTS:
                    time.sleep(2)
                    continue
                raise AssertionError(f"{method} {path}: {err.code} {text[:3000]}") from None

    def dump_logs(self, lines: int = 60) -> None:
        """Print the tail of each component's log and of every task log not in success."""
        for log in sorted(self.logs.glob("airflow-*.log")):
            print(f"\n===== {log.name} (last {lines} lines)")
            print("\n".join(log.read_text(errors="replace").splitlines()[-lines:]))
        rows = self.query("SELECT run_id, task_id, map_index, state FROM task_instance "
                          "WHERE dag_id = ? AND (state IS NULL OR state != 'success')", DAG_ID)
        home = Path(self.env["AIRFLOW_HOME"]) / "logs" / f"dag_id={DAG_ID}"
        for run_id, task_id, map_index, state in rows:
            print(f"\n===== task {run_id} {task_id}[{map_index}]: {state}")
            folder = home / f"run_id={run_id}" / f"task_id={task_id}"
            if map_index >= 0:
                folder = folder / f"map_index={map_index}"
            for log in sorted(folder.glob("attempt=*.log"))[-1:]:
                print("\n".join(log.read_text(errors="replace").splitlines()[-lines:]))


@contextlib.contextmanager
def running_airflow(out: Path, settings: dict[str, str], dag_ids=(DAG_ID,)):
    """The ``Airflow`` of ``out``: ``out/snapshots`` served by a moto S3 server on 127.0.0.1,
    the metadata DB migrated, then the dag-processor, the api-server (127.0.0.1, a free port)
    and, once ``dag_ids`` are serialized and the API answers (task workers report to its
    execution API), the scheduler, with the demo's environment (``servers.airflow_env``)
    updated with the scheduler tests' settings and ``settings``. On an error while it runs,
    the components' and failed tasks' logs are printed; all is stopped at the end."""
    logs = out / "pipeline-logs"
    logs.mkdir(exist_ok=True)
    server, endpoint = servers.start_s3(out / "snapshots")
    port = servers.free_port()
    env = servers.airflow_env(out, endpoint, api_port=port)
    env.update({
        "KAFKALOG_WAIT_SECONDS": "5",  # a waiting plan looks again every 5 s
        # a task's supervisor notices that its process exited at its next heartbeat, every
        # 5 s by default: each task (a plan's wait included) held its slot ~5 s after it ended
        "AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL": "2",
        "KAFKALOG_SPARK_CONF": SUBMIT_CONF,  # JVMs that start fast (spark_settings)
        **settings,
    })
    procs = []
    af = Airflow(out, env, procs, logs)
    try:
        servers.migrate(env, logs)
        # the dag-processor first: the scheduler starts once the DAG is in the DB
        procs.append(servers.start_component(env, logs, "dag-processor"))
        procs.append(servers.start_component(env, logs, *servers.api_server_args(port)))
        for dag_id in dag_ids:
            servers.wait_for_dag(env, procs, dag_id=dag_id)
        servers.wait_for_api(port, procs)
        procs.append(servers.start_component(env, logs, "scheduler"))
        yield af
    except BaseException:
        af.dump_logs()
        raise
    finally:
        servers.stop_components(procs)
        server.stop()


def partition_events(af: Airflow, asset: str = "kafkalog.records") -> list[tuple[str, str]]:
    """(source run id, partition_key) of the asset's events, in order."""
    return af.query("SELECT e.source_run_id, e.partition_key FROM asset_event e JOIN asset a "
                    "ON a.id = e.asset_id WHERE a.name = ? ORDER BY e.id", asset)


def executor_events(af: Airflow, run_id: str, task_id: str, try_number: int) -> int:
    """How many times the scheduler has taken the executor's report of a worker of the task's
    try (its ``Received executor event`` lines): a worker that parked the task in
    ``awaiting_input`` has exited then, as far as the scheduler knows."""
    key = (f"TaskInstanceKey(dag_id='{DAG_ID}', task_id='{task_id}', run_id='{run_id}', "
           f"try_number={try_number}, map_index=-1)")
    text = (af.logs / "airflow-scheduler.log").read_text(errors="replace")
    return len(re.findall(r"Received executor event with state \w+ for task instance "
                          + re.escape(key), text))


def run_notes(af: Airflow, run_ids) -> dict[str, str | None]:
    """The runs' notes, as the scheduler's listener wrote them (kafkalog_pipeline.notes)."""
    rows = dict(af.query("SELECT r.run_id, n.content FROM dag_run r LEFT JOIN dag_run_note n "
                         "ON n.dag_run_id = r.id WHERE r.dag_id = ?", DAG_ID))
    return {r: rows.get(r) for r in run_ids}


def task_states(af: Airflow, run_id: str) -> dict[str, str]:
    return dict(af.query("SELECT task_id, state FROM task_instance WHERE dag_id = ? AND "
                         "run_id = ? AND map_index < 1", DAG_ID, run_id))


#: two nights of a topic of their own: night A holds rerun-0's first segment and rerun-1;
#: night B the same rerun-0 segment copied again, the next one, and no rerun-1 (retention)
CONFLICT_NIGHTS = ("2026-11-22", "2026-11-23")
T0 = 1_795_305_600_000  # 2026-11-22T00:00Z


def write_conflict_nights(root: Path) -> None:
    import shutil

    from kafkalog.writer import SegmentWriter, WriteRecord

    night_a, night_b = (root / n for n in CONFLICT_NIGHTS)

    def segment(folder: Path, first: int, count: int) -> Path:
        with SegmentWriter(folder, first) as w:
            for i in range(first, first + count, 5):
                w.append([WriteRecord(b"k", f"v{i + k}".encode(), timestamp=T0 + i + k)
                          for k in range(5)], codec="lz4")
            return Path(w.path)

    first = segment(night_a / "rerun-0", 0, 10)
    segment(night_a / "rerun-1", 0, 5)
    (night_b / "rerun-0").mkdir(parents=True)
    for f in first.parent.glob(first.stem + ".*"):  # the very same objects, index files too
        shutil.copy(f, night_b / "rerun-0" / f.name)
    segment(night_b / "rerun-0", 10, 10)
