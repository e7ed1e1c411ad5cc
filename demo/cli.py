"""``python -m demo run|ui``: the commands behind ``make demo`` and ``make ui``."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path

from kafkalog_pipeline.settings import NIGHTLY_DAG_ID

from . import data, sink, tiered
from .nights import dagtest, run_night, run_note, run_verdict
from .report import report
from .servers import (DemoError, airflow_env, api_server_args, exclusive, free_port, migrate,
                      password_file, start_component, start_s3, stop_components,
                      unpause, wait_for_api, wait_for_dag)


def _stop_on_signals() -> None:
    """SIGTERM / SIGHUP (a closed terminal, `kill`) stop everything like Ctrl-C: the
    clean-up in ``finally`` blocks runs (Python's default for SIGTERM runs none)."""
    def stop(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, stop)


def cmd_run(out: Path) -> int:
    out = out.resolve()
    _stop_on_signals()
    with exclusive(out, "make demo") as lock:
        try:
            return _run(out, lock)
        except KeyboardInterrupt:
            print("demo: interrupted; its processes are stopped and its lock released: the "
                  "next `make demo` starts clean", file=sys.stderr)
            return 130


def _run(out: Path, lock=None) -> int:
    log_dir = out / "pipeline-logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    snapshots = out / "snapshots"
    for night in data.write_nights(snapshots):
        print(f"Wrote snapshot {night}")
    print(f"Wrote {tiered.write_tier(out)} tiered-storage objects under {out / tiered.TIER_FOLDER}"
          f" (key ring {out / tiered.KEYS_FOLDER})")
    print(f"Wrote the demo's sink {sink.NAME} (table {sink.TABLE} of catalog {sink.CATALOG}; "
          f"{sink.write(out, snapshots)}): shipments-0, offset {sink.DUPLICATE} twice")
    server, endpoint = start_s3(snapshots, out)
    try:
        env = airflow_env(out, endpoint)
        migrate(env, log_dir)
        results = []
        for date in data.NIGHTS:
            print(f"Running {NIGHTLY_DAG_ID} for snapshot {date} (log: {log_dir}/dag-test-{date}.log) ...",
                  flush=True)
            r = run_night(env, date, log_dir, lock=lock)
            results.append(r)
            print(f"  run {r['run_id']}: {run_verdict(r)}", flush=True)
            for line in (run_note(env, r["run_id"]) or "").split("\n\n"):
                if line:
                    print(f"  note: {line}", flush=True)
    finally:
        server.stop()
    return report(out, results)


def cmd_ui(out: Path, port: int | None) -> int:
    out = out.resolve()
    with exclusive(out, "make ui"):
        return _ui(out, port)


def _ui(out: Path, port: int | None) -> int:
    snapshots = out / "snapshots"
    if not snapshots.is_dir():
        data.write_nights(snapshots)
    if not (out / tiered.TIER_FOLDER).is_dir():
        tiered.write_tier(out)
    if sink.sinks_file(out) is None:
        sink.write(out, snapshots)
    log_dir = out / "pipeline-logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    server, endpoint = start_s3(snapshots, out)
    port = port or free_port()
    env = airflow_env(out, endpoint, api_port=port)
    # the demo's nights are fixed: the scheduler makes no scheduled runs of its own (Airflow's
    # [scheduler] use_job_schedule); runs are the ones triggered (and backfills). Unpaused
    # below, the DAG's trigger form has no "Unpause" box, and unpausing starts no extra run.
    env["AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE"] = "False"
    home = Path(env["AIRFLOW_HOME"])
    pw_path, password = password_file(home)
    env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"] = str(pw_path)
    migrate(env, log_dir)

    _stop_on_signals()
    procs = []
    try:
        # the triggerer too: without one the home page shows a red "Triggerer" badge
        for component in (api_server_args(port), ["scheduler"], ["dag-processor"], ["triggerer"]):
            procs.append(start_component(env, log_dir, *component))
        print(f"Starting Airflow on 127.0.0.1:{port} (logs in {log_dir}); its address follows "
              "when it answers ...", flush=True)
        try:  # the address only once the api-server answers (it takes ~a minute to start)
            wait_for_api(port, procs, timeout=600)
            wait_for_dag(env, procs, timeout=600)
            unpause(env, log_dir)
        except (RuntimeError, TimeoutError, DemoError) as err:
            print(f"demo: {err}: see the logs in {log_dir}", file=sys.stderr)
            return 1
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
    parser = argparse.ArgumentParser(prog="python -m demo")
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

