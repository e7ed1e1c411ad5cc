"""A demo night's tasks against Spark's own floor, in one run (issue 43: aim night/floor <= 2).

Once (not timed), into ``--out`` (default ``bench/out/night/``): the demo's snapshots and its
tiered-storage tier (:mod:`demo.data`, :mod:`demo.tiered`, what ``make demo`` writes), served by
a moto S3 server on 127.0.0.1 (:func:`demo.servers.start_s3`, in this process), and the floor's
warehouse (``bench_audit.prepare``: the same demo nights decoded once into a local warehouse).

Then ``--rounds`` rounds. Each round runs the demo's first night into a fresh warehouse (local,
its catalog the embedded SQLite one, ``PYICEBERG_HOME``: as ``make demo`` has it), task by
task, each as the DAG runs it:

* ``plan``: ``kafkalog_pipeline.tasks.plan_run`` in a child Python process that first imports
  what an Airflow task process holds before the task starts (``airflow.sdk`` and the DAG file,
  untimed: the task runner parsed it); timed: the call, its lazy imports included;
* ``decode``: each of the plan's ``decode_args`` as a ``spark-submit`` of
  ``kafkalog_pipeline/spark_entry.py`` (the DAG's Spark properties and environment:
  ``kafkalog_pipeline.settings.spark_conf``/``spark_env``/``tier_env``);
* ``audit``: ``spark_jobs.check_quality`` with the DAG's arguments (``tasks.quality_args``
  rendered, the tier appended as the operator appends it);
* ``publish``: ``kafkalog_pipeline.tasks.publish_run`` in a child as ``plan``;

and, interleaved, one ``floor`` per spark-submit the night made (``bench_audit.py --floor``: a
session, a run's ``records`` read once, grouped by (topic, partition), collected), before the
submit in odd rounds, after it in even ones. Every spark-submit writes a Spark event log: its
jobs and stages are counted (``bench_audit.event_counts``). ``plan`` also reports the S3
requests it made (the moto server's request log, by method and kind).

After the decode submits, once per decode submit, the decode's own peer, the **write floor**
(:func:`write_floor`: the night's objects listed, read by the Python workers, written by Spark
as one Parquet table and appended to one Iceberg table in one commit).

Reported: seconds per task per round and their means; the night (plan + decode + audit +
publish), the floor (its mean times the night's spark-submits) and the ratio night/floor; the
decode against the write floor, and the night against its fairer peer (each decode submit's
write floor plus the audit's floor).
``PYTHONPATH`` chooses the code measured (as for bench_audit.py); the floor always runs this
checkout's code, so runs measuring two codes share one floor.

    .venv/bin/python bench/bench_night.py [--rounds 2] [--cores 2] [--out DIR] [--json FILE]
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

import bench_audit  # noqa: E402  (this folder: the floor, spark-submit, event logs)

#: night/floor at most this (issue 43)
TARGET = 2.0
#: the night measured: the demo's first (a fresh warehouse)
NIGHT = 0
#: the peers' spark-submits (run in the floors' environment: this checkout's code)
FLOORS = ("floor", "write-floor")
#: the task child's last line: its result, as JSON
RESULT_PREFIX = "BENCH-NIGHT "


# ------------------------------------------------------------------ the Python tasks (child)
def task_child(task: str, spec: dict) -> int:
    """Run the Python task ``task`` (plan or publish) as the DAG's task process would:
    what the task runner imported before the task (``airflow.sdk``, the DAG file) first,
    untimed; then the task's call, timed. Prints its result line."""
    import importlib.util

    sys.path.insert(0, spec["code"])  # the code measured, before this checkout's
    t0 = time.perf_counter()
    import airflow.sdk  # noqa: F401  (the task runner's)

    dag_file = Path(spec["code"]) / "dags" / "kafka_segments_nightly.py"
    module = importlib.util.module_from_spec(
        importlib.util.spec_from_file_location("bench_nightly_dag", dag_file))
    module.__spec__.loader.exec_module(module)
    preload = time.perf_counter() - t0

    from kafkalog_pipeline import tasks
    from spark_jobs.storage import S3Config

    access = S3Config(**spec["access"])
    t1 = time.perf_counter()
    if task == "plan":
        result = tasks.plan_run(run_id=spec["run_id"], dates=spec["dates"],
                                warehouse=spec["warehouse"], bucket=spec["bucket"],
                                prefix=spec["prefix"], access=access,
                                tiered_storage=spec["tier"])
    else:
        result = tasks.publish_run(warehouse=spec["warehouse"], run_id=spec["run_id"],
                                   access=access)
    seconds = time.perf_counter() - t1
    print(RESULT_PREFIX + json.dumps({"seconds": seconds, "preload_seconds": preload,
                                      "result": result}, default=str), flush=True)
    return 0


def write_floor(spec: dict) -> int:
    """The decode's own peer, run by spark-submit (``--write-floor SPEC``): a session; the
    night's snapshot objects listed once (one S3 listing, as the plan lists them), read by the
    Python workers (as the decode reads its segments) and written by Spark as one Parquet
    table of (key, bytes); those files appended to one new Iceberg table in one commit
    (pyiceberg's ``add_files``, a SQLite catalog of its own). What any decode of the night into
    an Iceberg table does at the least: no decoding, one table, one commit."""
    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog

    from spark_jobs.session import build_session
    from spark_jobs.storage import S3Config, open_store

    spark = build_session("bench-night-write-floor")
    access = S3Config(**spec["access"])
    root = f"s3://{spec['bucket']}/{spec['prefix']}/{spec['dates'][0]}"
    keys = [o.key for o in open_store(root, access).list()]

    def fetch(batches):
        store = open_store(root, access)
        for b in batches:
            names = b.column("key").to_pylist()
            yield pa.RecordBatch.from_pydict({"key": names,
                                              "bytes": [store.read(k) for k in names]})

    out = Path(spec["write_floor"])
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    spark.createDataFrame([(k,) for k in keys], "key string") \
        .repartition(spark.sparkContext.defaultParallelism) \
        .mapInArrow(fetch, "key string, bytes binary").write.parquet(str(out / "data"))
    catalog = SqlCatalog("floor", uri=f"sqlite:///{out}/catalog.db",
                         warehouse=(out / "tables").as_uri())
    catalog.create_namespace("bench")
    table = catalog.create_table("bench.objects", schema=pa.schema(
        [("key", pa.string()), ("bytes", pa.binary())]))
    table.add_files(sorted(str(f) for f in (out / "data").glob("*.parquet")))
    print(f"write floor: {len(keys)} objects, {table.scan().to_arrow().num_rows} rows")
    spark.stop()
    return 0


class Requests(logging.Handler):
    """The moto server's requests (werkzeug's access log), counted by method and kind."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.counts: collections.Counter = collections.Counter()

    def emit(self, record):
        try:
            line = record.getMessage().split('"')[1]  # GET /bucket?list-type=2&... HTTP/1.1
        except IndexError:
            return
        method, path = (line.split(" ") + ["", ""])[:2]
        kind = "list" if "list-type=" in path or path.rstrip("/").count("/") <= 1 else "object"
        self.counts[f"{method} {kind}"] += 1


def python_task(task: str, spec: dict, env: dict, requests: Requests) -> dict:
    """One Python task in its child; its seconds, wall seconds, S3 requests and result."""
    requests.counts.clear()
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, str(HERE / "bench_night.py"), "--task", task,
                           json.dumps(spec)], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    wall = time.perf_counter() - t0
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith(RESULT_PREFIX)]
    if done.returncode or not lines:
        sys.stderr.write(done.stdout[-4000:])
        raise SystemExit(f"{task} exited {done.returncode}")
    out = json.loads(lines[-1][len(RESULT_PREFIX):])
    out["wall_seconds"] = wall
    out["s3_requests"] = dict(sorted(requests.counts.items()))
    return out


def submit(cores: int, events: Path, args: list[str], env: dict) -> tuple[float, int, str]:
    """One spark-submit as ``bench_audit.submit`` runs it; also its output."""
    t0 = time.perf_counter()
    done = subprocess.run(bench_audit.submit_command(cores, events, args), env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seconds = time.perf_counter() - t0
    if done.returncode not in (0, 65):  # 65: the audit ran and a check failed (the demo's)
        sys.stderr.write(done.stdout[-4000:])
        raise SystemExit(f"spark-submit {' '.join(args[:2])} exited {done.returncode}")
    return seconds, done.returncode, done.stdout


def job_timings(output: str) -> dict:
    """The decode job's own ``timings`` (its summary line: seconds per step on the driver)."""
    for line in reversed(output.splitlines()):
        if line.startswith("{") and '"timings"' in line:
            try:
                return json.loads(line)["timings"]
            except ValueError:
                pass
    return {}


# ------------------------------------------------------------------ one night, one round
def fresh_warehouse(night: Path) -> Path:
    """An empty warehouse and its SQLite catalog's ``.pyiceberg.yaml`` under ``night``."""
    from demo.servers import catalog_config

    shutil.rmtree(night, ignore_errors=True)
    night.mkdir(parents=True)
    catalog_config(night)
    return night / "warehouse"


def run_round(i: int, args, endpoint: str, floor_cmd: list[str], requests: Requests) -> dict:
    from demo import data, servers, tiered
    from kafkalog_pipeline import settings, tasks
    from spark_jobs.storage import S3Config

    code = bench_audit.code_root()
    night = args.out / "night"
    warehouse = fresh_warehouse(night)
    access = S3Config(endpoint_url=endpoint, region="us-east-1", access_key=servers.DEMO_KEY,
                      secret_key=servers.DEMO_KEY, explicit=True, source="bench")
    tier = tiered.tier_uri(servers.BUCKET)
    run_id = f"manual__{data.NIGHTS[NIGHT]}T03:00:00+00:00"
    env = {**os.environ, **settings.spark_env(access), **tiered.settings_env(args.out),
           "PYICEBERG_HOME": str(night), "KAFKALOG_CHUNK_BYTES": "4096",
           "KAFKALOG_MAX_CHUNKS": "3", "AIRFLOW_HOME": str(args.out / "airflow")}
    env["PYTHONPATH"] = os.pathsep.join([str(code), *[p for p in env["PYTHONPATH"].split(
        os.pathsep) if p and p != str(code)]])
    # the floor's warehouse has its own embedded catalog: no PYICEBERG_HOME naming the night's;
    # and the floor runs this checkout's code whatever code is measured, so that two runs
    # measuring two codes divide by the same floor
    floor_env = {k: v for k, v in env.items() if k != "PYICEBERG_HOME"}
    floor_env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), *[p for p in env["PYTHONPATH"].split(os.pathsep) if p and p != str(code)]])
    spec = {"code": str(code), "run_id": run_id, "dates": [data.NIGHTS[NIGHT]],
            "warehouse": str(warehouse), "bucket": servers.BUCKET, "prefix": servers.PREFIX,
            "tier": tier, "access": {"endpoint_url": endpoint, "region": "us-east-1",
                                     "access_key": servers.DEMO_KEY,
                                     "secret_key": servers.DEMO_KEY, "explicit": True}}
    entry = str(code / "kafkalog_pipeline" / "spark_entry.py")
    tasks_out: dict = {}
    floors: list[dict] = []

    def one(what: str, cmd: list[str]) -> dict:
        """One spark-submit (the floors' in the floors' environment), its event log counted."""
        events = args.out / f"events-{what}"
        shutil.rmtree(events, ignore_errors=True)
        events.mkdir(parents=True)
        seconds, status, output = submit(args.cores, events, cmd,
                                         floor_env if what in FLOORS else env)
        counts = bench_audit.event_counts(events)
        shutil.rmtree(events, ignore_errors=True)
        return {"seconds": round(seconds, 2), "exit": status, **counts,
                **({"timings": job_timings(output)} if what == "decode" else {})}

    def spark(kind: str, argv: list[str]) -> dict:
        order = ("floor", kind) if i % 2 else (kind, "floor")
        got = {w: one(w, floor_cmd if w == "floor" else [entry, *argv]) for w in order}
        floors.append(got["floor"])
        return got[kind]

    plan = python_task("plan", spec, env, requests)
    summary = plan.pop("result")
    tasks_out["plan"] = {**{k: round(v, 2) if isinstance(v, float) else v
                            for k, v in plan.items()}, "chunks": len(summary["decode_args"])}
    tasks_out["decode"] = [spark("decode", a) for a in summary["decode_args"]]
    # the decode's own peer (write_floor), once per decode submit; not in the night's floor
    write_cmd = [str(HERE / "bench_night.py"), "--write-floor",
                 json.dumps({**spec, "write_floor": str(args.out / "write-floor")})]
    write_floors = [one("write-floor", write_cmd) for _ in summary["decode_args"]]
    quality = [a.replace("{{ run_id }}", run_id).replace("{{ params.topics }}", "*")
               for a in tasks.quality_args()]
    where = {tasks.WAREHOUSE_KEY: summary["warehouse"], tasks.CATALOG_KEY: summary["catalog"],
             tasks.NAMESPACE_KEY: summary["namespace"]}
    for key, value in where.items():
        quality = [value if f"key='{key}'" in a else a for a in quality]
    tasks_out["audit"] = spark("audit", [*quality, *settings.tier_args(tier)])
    audit_floor_s = floors[-1]["seconds"]  # the floor measured beside the audit
    publish = python_task("publish", spec, env, requests)
    publish.pop("result")
    tasks_out["publish"] = {k: round(v, 2) if isinstance(v, float) else v
                            for k, v in publish.items()}
    decode_s = sum(d["seconds"] for d in tasks_out["decode"])
    night_s = (tasks_out["plan"]["seconds"] + decode_s + tasks_out["audit"]["seconds"]
               + tasks_out["publish"]["seconds"])
    floor_s = sum(f["seconds"] for f in floors)
    write_s = sum(w["seconds"] for w in write_floors)
    return {"tasks": tasks_out, "floors": floors, "write_floors": write_floors,
            "night_s": round(night_s, 2), "floor_s": round(floor_s, 2),
            "ratio": round(night_s / floor_s, 2),
            "decode_vs_write_floor": round(decode_s / write_s, 2),
            # the night against its fairer peer: the decode submits against the write floor,
            # the audit against the read floor (plan and publish against nothing)
            "fair_ratio": round(night_s / (write_s + audit_floor_s), 2)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--out", type=Path, default=HERE / "out" / "night")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--task", nargs=2, metavar=("TASK", "SPEC"), help=argparse.SUPPRESS)
    ap.add_argument("--write-floor", metavar="SPEC", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.task:
        return task_child(args.task[0], json.loads(args.task[1]))
    if args.write_floor:
        return write_floor(json.loads(args.write_floor))
    from demo import data, servers, tiered

    args.out = args.out.resolve()
    code = bench_audit.code_root()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(code), *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]])}
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    floor_wh = bench_audit.prepare(args.out / "floor", args.cores, env)
    floor_cmd = [str(HERE / "bench_audit.py"), "--floor", str(floor_wh), bench_audit.RUN]
    snaps = args.out / "snapshots"
    if not (args.out / "READY").exists():
        shutil.rmtree(snaps, ignore_errors=True)
        data.write_nights(snaps)
        tiered.write_tier(args.out)
        (args.out / "READY").write_text("")
    requests = Requests()
    server, endpoint = servers.start_s3(snaps, args.out)  # its INFO logging is silenced
    werkzeug = logging.getLogger("werkzeug")
    werkzeug.setLevel(logging.INFO)
    werkzeug.propagate = False
    werkzeug.handlers[:] = [requests]  # counted, not printed
    rounds = []
    try:
        for i in range(args.rounds):
            rounds.append(run_round(i, args, endpoint, floor_cmd, requests))
            print(json.dumps(rounds[-1]), flush=True)
    finally:
        server.stop()

    def mean(values):
        values = list(values)
        return round(sum(values) / len(values), 2)

    per_task = {
        "plan": mean(r["tasks"]["plan"]["seconds"] for r in rounds),
        "decode": mean(sum(d["seconds"] for d in r["tasks"]["decode"]) for r in rounds),
        "audit": mean(r["tasks"]["audit"]["seconds"] for r in rounds),
        "publish": mean(r["tasks"]["publish"]["seconds"] for r in rounds),
    }
    floor_one = mean(f["seconds"] for r in rounds for f in r["floors"])
    submits = len(rounds[0]["floors"])
    out = {
        "code": str(code), "cores": args.cores, "rounds": args.rounds,
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "rounds_detail": rounds, "mean_s": per_task, "floor_one_s": floor_one,
        "spark_submits": submits,
        "per_task_vs_one_floor": {k: round(v / floor_one, 2) for k, v in per_task.items()},
        "ratio_night_vs_floor": mean(r["ratio"] for r in rounds),
        "write_floor_one_s": mean(w["seconds"] for r in rounds for w in r["write_floors"]),
        "ratio_decode_vs_write_floor": mean(r["decode_vs_write_floor"] for r in rounds),
        "ratio_night_vs_fair_floor": mean(r["fair_ratio"] for r in rounds),
    }
    print(json.dumps({k: v for k, v in out.items() if k != "rounds_detail"}, indent=1))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0 if out["ratio_night_vs_floor"] <= TARGET else 1


if __name__ == "__main__":
    raise SystemExit(main())
