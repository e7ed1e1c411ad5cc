"""The audit of a small run against Spark's own floor, in one run (issue 43: aim audit/floor <= 3).

Once (not timed), into ``--out`` (default ``bench/out/audit/``): the demo's two nights
(:mod:`demo.data`, ``make demo``'s snapshots, read from a local folder), each decoded by
``spark-submit spark_entry.py spark_jobs.decode`` into one local warehouse: night 1
published, night 2 staged (``--no-publish``): the run audited here (~10 topic-partitions,
a few hundred records, the internal topics, a second broker's log directory).

Then ``--rounds`` rounds, each running both, alternating which goes first
(audit, floor, floor, audit, ...), each its own ``spark-submit`` as the DAG runs it
(``local[--cores]``, the DAG's ``spark_conf``: ``kafkalog_pipeline.settings``):

* ``audit``: ``spark_entry.py spark_jobs.check_quality --warehouse W --run-id R`` with the
  Data Docs, as the DAG's ``check_quality`` task runs;
* ``floor``: this file with ``--floor W R``: a session, the run's ``records`` files at the
  head of its branch read once (``spark_jobs.tables.read_table``), grouped by
  (topic, partition), collected;
* ``floor_inputs`` (the fairer floor, :func:`floor_inputs`): a session, every table the audit
  reads at the snapshot it reads it (the run's branch heads) and the published ledger, each
  read once, grouped by (topic, partition), collected.

Reported per kind: wall seconds of each spark-submit (start to exit), their mean, and the
Spark jobs and stages each ran (its event log, ``spark.eventLog.enabled``:
``SparkListenerJobStart`` and ``SparkListenerStageCompleted`` events), and per job
description (``by_step``: the audit describes its jobs by step and family,
``spark_jobs.audit.inputs.described``) the jobs and their seconds; the ratios of the means
audit/floor and audit/floor_inputs. ``--keep-events`` keeps the event logs; ``--rows FILE``
appends each audit's dq_results rows, canonical, for ``bench/dq_diff.py compare`` (two codes'
rows). ``PYTHONPATH`` chooses the code measured (the first entry: run the same bench with
another checkout's code first to measure it).

    .venv/bin/python bench/bench_audit.py [--rounds 3] [--cores 2] [--out DIR] [--json FILE]
        [--rows FILE] [--keep-events]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
#: the run audited (the demo's second night) and the published one before it
RUN, BEFORE = "bench-night-2", "bench-night-1"
#: audit/floor at most this (issue 43)
TARGET = 3.0


def code_root() -> Path:
    """The checkout whose code runs: the first ``PYTHONPATH`` entry holding spark_jobs/,
    else this one."""
    for p in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        if p and (Path(p) / "spark_jobs").is_dir():
            return Path(p).resolve()
    return ROOT


def submit_command(cores: int, events: Path, args: list[str]) -> list[str]:
    """spark-submit of ``args`` with the DAG's Spark properties and an event log in ``events``."""
    from kafkalog_pipeline import settings

    conf = {**settings.spark_conf(), "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": events.as_uri(), "spark.eventLog.compress": "false",
            "spark.eventLog.rolling.enabled": "false"}
    cmd = [str(Path(sys.executable).parent / "spark-submit"), "--master", f"local[{cores}]"]
    for k, v in conf.items():
        cmd += ["--conf", f"{k}={v}"]
    return cmd + args


def submit(cores: int, events: Path, args: list[str], env: dict) -> tuple[float, int]:
    """Run one spark-submit; (wall seconds, exit status)."""
    t0 = time.perf_counter()
    done = subprocess.run(submit_command(cores, events, args), env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    seconds = time.perf_counter() - t0
    if done.returncode not in (0, 65):  # 65: the audit ran and a check failed (the demo's)
        sys.stderr.write(done.stdout[-4000:])
        raise SystemExit(f"spark-submit {' '.join(args[:2])} exited {done.returncode}")
    return seconds, done.returncode


def event_counts(events: Path) -> dict:
    """Jobs started and stages completed of the one application that wrote to ``events``, and
    ``by_step``: per job description (the audit names its steps and families:
    ``spark_jobs.audit.job``; else the job's call site) ``[jobs, seconds]``, the seconds from
    each job's submission to its end."""
    logs = [p for p in events.rglob("*") if p.is_file() and not p.name.startswith(".")
            and not p.name.startswith("appstatus")]
    jobs = stages = 0
    started: dict = {}  # job id -> (step, submission ms)
    by_step: dict = {}
    for log in logs:  # one file (rolling off); Spark may roll it into events_N_* files
        with open(log) as f:
            for line in f:
                if '"Event":"SparkListenerJobStart"' in line:
                    jobs += 1
                    event = json.loads(line)
                    props = event.get("Properties") or {}
                    step = props.get("spark.job.description") or props.get("callSite.short", "?")
                    started[event["Job ID"]] = (step, event.get("Submission Time"))
                elif '"Event":"SparkListenerJobEnd"' in line:
                    event = json.loads(line)
                    step, at = started.get(event["Job ID"], ("?", None))
                    tally = by_step.setdefault(step, [0, 0.0])
                    tally[0] += 1
                    if at is not None and event.get("Completion Time") is not None:
                        tally[1] = round(tally[1] + (event["Completion Time"] - at) / 1000, 3)
                elif '"Event":"SparkListenerStageCompleted"' in line:
                    stages += 1
    if not logs or not jobs:
        raise SystemExit(f"no Spark event log (or no job) in {events}")
    return {"jobs": jobs, "stages": stages, "by_step": by_step}


def prepare(out: Path, cores: int, env: dict) -> Path:
    """The warehouse holding the published night 1 and the staged night 2 (made once)."""
    sys.path.insert(0, str(ROOT))
    from demo import data

    wh = out / "warehouse"
    if (out / "READY").exists():
        return wh
    shutil.rmtree(out, ignore_errors=True)
    snaps = data.write_nights(out / "snapshots")
    entry = str(code_root() / "kafkalog_pipeline" / "spark_entry.py")
    for snap, run, extra in ((snaps[0], BEFORE, []), (snaps[1], RUN, ["--no-publish"])):
        events = out / f"events-{run}"
        events.mkdir(parents=True)
        submit(cores, events, [entry, "spark_jobs.decode", "--input", str(snap), "--output",
                               str(wh), "--run-id", run, *extra], env)
    (out / "READY").write_text("")
    return wh


def floor(warehouse: str, run_id: str) -> int:
    """The floor, run by spark-submit: the run's records read once and grouped."""
    from spark_jobs.session import build_session
    from spark_jobs.tables import read_table
    from spark_jobs.warehouse import Warehouse, branch_name

    spark = build_session("bench-audit-floor")
    wh = Warehouse(warehouse)
    records = read_table(spark, wh, "records", ref=branch_name(run_id), run_id=run_id)
    groups = records.groupBy("topic", "partition").count().collect()
    print(f"floor: {sum(r['count'] for r in groups)} records in {len(groups)} partitions")
    spark.stop()
    return 0


def floor_inputs(warehouse: str, run_id: str) -> int:
    """The fairer floor, run by spark-submit: a session; every table the audit reads, as of
    the snapshots it reads them at (``spark_jobs.audit.inputs.audited_snapshots``: the run's
    branch heads, the decode tables and the derived ones the warehouse has) and the published
    ``ledger``, each read once, grouped by (topic, partition) where it has them, collected."""
    from spark_jobs import schemas
    from spark_jobs.audit.inputs import audited_snapshots
    from spark_jobs.session import build_session
    from spark_jobs.tables import read_table
    from spark_jobs.warehouse import Warehouse

    spark = build_session("bench-audit-floor-inputs")
    wh = Warehouse(warehouse)
    reads = [(name, snapshot) for name, (_, snapshot) in audited_snapshots(wh, run_id).items()
             if name in schemas.TABLES]  # not the typed per-subject tables: no check reads them
    reads.append(("ledger", None))  # main's: what was published before the run
    total = 0
    for name, snapshot in reads:
        df = read_table(spark, wh, name, snapshot=snapshot)
        keys = [c for c in ("topic", "partition") if c in df.columns]
        total += sum(r["count"] for r in df.groupBy(*keys).count().collect())
    print(f"floor_inputs: {total} rows in {len(reads)} reads")
    spark.stop()
    return 0


def record_rows(path: Path, wh: Path, round_: int) -> None:
    """Append the run's dq_results rows as the audit just wrote them, canonical
    (:func:`dq_diff.canonical`), as a line of ``bench/dq_capture.py``'s format."""
    sys.path.insert(0, str(HERE))
    import dq_diff

    rows = dq_diff.canonical(dq_diff.read_rows(wh, RUN))
    with open(path, "a") as f:
        f.write(json.dumps({"test": "bench_audit", "call": round_, "run_id": RUN,
                            "rows": rows}, sort_keys=True) + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--out", type=Path, default=HERE / "out" / "audit")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--rows", type=Path,
                    help="append each audit's dq_results rows of the run, canonical "
                         "(bench/dq_diff.py compare FILE_A FILE_B: two codes' rows)")
    ap.add_argument("--keep-events", action="store_true",
                    help="keep each spark-submit's event log in --out (events-<kind>-<round>)")
    ap.add_argument("--floor", nargs=2, metavar=("WAREHOUSE", "RUN_ID"), help=argparse.SUPPRESS)
    ap.add_argument("--floor-inputs", nargs=2, metavar=("WAREHOUSE", "RUN_ID"),
                    help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.floor:
        return floor(*args.floor)
    if args.floor_inputs:
        return floor_inputs(*args.floor_inputs)
    code = code_root()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(code), *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]])}
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    wh = prepare(args.out, args.cores, env)
    entry = str(code / "kafkalog_pipeline" / "spark_entry.py")
    commands = {
        "audit": [entry, "spark_jobs.check_quality", "--warehouse", str(wh), "--run-id", RUN],
        "floor": [str(HERE / "bench_audit.py"), "--floor", str(wh), RUN],
        "floor_inputs": [str(HERE / "bench_audit.py"), "--floor-inputs", str(wh), RUN],
    }
    runs: dict = {k: [] for k in commands}
    for i in range(args.rounds):
        for kind in (("audit", "floor", "floor_inputs") if i % 2 == 0
                     else ("floor_inputs", "floor", "audit")):
            events = args.out / f"events-{kind}-{i}"
            shutil.rmtree(events, ignore_errors=True)
            events.mkdir()
            seconds, status = submit(args.cores, events, commands[kind], env)
            runs[kind].append({"seconds": round(seconds, 2), "exit": status,
                               **event_counts(events)})
            if kind == "audit" and args.rows:
                record_rows(args.rows, wh, i)
            if not args.keep_events:
                shutil.rmtree(events, ignore_errors=True)
    mean = {k: sum(r["seconds"] for r in v) / len(v) for k, v in runs.items()}
    out = {
        "code": str(code), "cores": args.cores, "rounds": args.rounds,
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "runs": runs, "mean_s": {k: round(v, 2) for k, v in mean.items()},
        "ratio_audit_vs_floor": round(mean["audit"] / mean["floor"], 2),
        "ratio_audit_vs_floor_inputs": round(mean["audit"] / mean["floor_inputs"], 2),
    }
    print(json.dumps(out, indent=1))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0 if out["ratio_audit_vs_floor"] <= TARGET else 1


if __name__ == "__main__":
    raise SystemExit(main())
