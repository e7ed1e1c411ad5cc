"""Running the demo's nights: each night is the nightly DAG's ``dag.test()`` in a child
process (``python -m demo dagtest DATE``), its tasks' starts and ends printed as the
parent finds them in the metadata DB, each task try's log written where the UI reads it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from kafkalog_pipeline.settings import NIGHTLY_DAG_ID, TIER_PARAM

from . import tiered
from .servers import BUCKET, metadata_query


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

    def __init__(self, env, since: dt.datetime, dag_id: str = NIGHTLY_DAG_ID, file=None):
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
    from kafkalog_pipeline._airflow import fail_unfinished_runs

    for run_id, state in fail_unfinished_runs(dag_id):
        print(f"run {run_id} was left {state} by an interrupted demo: marking it failed",
              file=sys.stderr)


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
        from kafkalog_pipeline._airflow import task_log_path

        path = task_log_path(ti)
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
def dag_test_like_a_worker(dag=None):
    """``dag.test()`` (of ``dag``) leaving what a scheduled run leaves for the UI:

    * each task try's log in the file the api-server reads (:class:`TaskLogFiles`);
    * the run's real start time: ``dag.test()`` creates the run with
      ``start_date = logical date`` (apache/airflow#66127), so a run of a past night
      read "4d 05:00" for two minutes' work; here it is the time the run was created;
    * without the DAG's Deadline Alert (``_airflow.without_deadlines``: ``dag.test()`` of a
      run that succeeds fails on it in Airflow 3.3.2).
    """
    import logging

    import structlog

    from kafkalog_pipeline._airflow import dag_test_hooks, without_deadlines

    files = TaskLogFiles()
    processors = structlog.get_config()["processors"]
    processors.insert(len(processors) - 1, files.processor)  # before the renderer
    handler = files.handler()
    logging.getLogger().addHandler(handler)
    try:
        with dag_test_hooks(files.open, files.close), \
                (without_deadlines(dag) if dag is not None else contextlib.nullcontext()):
            yield files
    finally:
        logging.getLogger().removeHandler(handler)
        processors.remove(files.processor)
        files.close()


def dagtest(date: str) -> int:
    """Run the nightly DAG for snapshot ``date`` with ``dag.test()``; exit 0 iff it succeeded."""
    from kafkalog_pipeline._airflow import dag_bag

    bag = dag_bag(os.environ["AIRFLOW__CORE__DAGS_FOLDER"])
    if bag.import_errors:
        print(f"DAG import errors: {bag.import_errors}", file=sys.stderr)
        return 2
    dag = bag.dags[NIGHTLY_DAG_ID]
    fail_abandoned_runs(NIGHTLY_DAG_ID)
    logical = dt.datetime.fromisoformat(date).replace(hour=3, tzinfo=dt.timezone.utc)
    # run_after = logical date: the run id is manual__<logical date>, the same on every
    # demo run, so a rerun replaces that run's output instead of adding a new run; the
    # tiered topic's tier as the run's param (its key ring is a setting: demo.tiered)
    with dag_test_like_a_worker(dag):
        dr = dag.test(logical_date=logical, run_after=logical,
                      run_conf={TIER_PARAM: tiered.tier_uri(BUCKET)})
    states = {ti.task_id + (f"[{ti.map_index}]" if ti.map_index >= 0 else ""): str(ti.state)
              for ti in dr.get_task_instances()}
    print(json.dumps({"run_id": dr.run_id, "state": str(dr.state), "tasks": states}), flush=True)
    return 0 if str(dr.state).endswith("success") else 1


def run_night(env, date: str, log_dir: Path, poll_seconds: float = 2, lock=None) -> dict:
    """``dagtest date`` in a child whose output (unbuffered) fills
    ``log_dir/dag-test-DATE.log`` as it runs; meanwhile :class:`Progress` prints its tasks.

    The child leads a process group of its own (its Spark jobs are in it): interrupted, this
    stops the whole group (SIGTERM, then SIGKILL), so no Spark job is left running; ``lock``
    (:class:`demo.servers.Lock`) records the group while it runs, for the next demo to stop
    it where this process was killed outright."""
    from .servers import stop_group

    log_path = log_dir / f"dag-test-{date}.log"
    started = time.monotonic()
    progress = Progress(env, dt.datetime.now(dt.timezone.utc))
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "demo", "dagtest", date],
                                env={**env, "PYTHONUNBUFFERED": "1"}, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    if lock is not None:
        lock.started(proc.pid, f"demo dagtest {date}")
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
        # interrupted: do not leave the night, nor its Spark jobs, running behind us; done:
        # nothing of its group may outlive it either
        stopped = stop_group(proc.pid, leader=proc) if proc.poll() is None else False
        stop_group(proc.pid, timeout=5, leader=proc)
        proc.wait()
        if lock is not None:
            lock.stopped(proc.pid)
        if stopped:
            print(f"  stopped the night {date} and its Spark jobs (process group {proc.pid})",
                  flush=True)
    with open(log_path, errors="replace") as log:
        last = [ln for ln in log if ln.startswith('{"run_id"')]
    result = json.loads(last[-1]) if last else {"state": "failed", "tasks": {}, "run_id": None}
    result["seconds"] = round(time.monotonic() - started, 1)
    result["log"] = str(log_path)
    result["ok"] = proc.returncode == 0
    return result



def run_note(env, run_id: str | None) -> str | None:
    """Run ``run_id``'s note, as Airflow shows it beside the run's state: the audit's
    verdict (kafkalog_pipeline.notes)."""
    rows = metadata_query(env, "SELECT n.content FROM dag_run r JOIN dag_run_note n ON "
                          "n.dag_run_id = r.id WHERE r.dag_id = ? AND r.run_id = ?",
                          NIGHTLY_DAG_ID, run_id) if run_id else []
    return rows[0][0] if rows else None


def run_verdict(result: dict) -> str:
    """``success in 312.4 s, 6 tasks``, naming the tasks that did not succeed."""
    states: dict[str, list[str]] = {}
    for task, state in sorted(result["tasks"].items()):
        states.setdefault(state.rsplit(".", 1)[-1].lower(), []).append(task)
    text = f"{result['state'].rsplit('.', 1)[-1].lower()} in {result['seconds']} s, {len(result['tasks'])} tasks"
    return text + "".join(f"; {state}: {', '.join(tasks)}"
                          for state, tasks in states.items() if state != "success")

