"""The decode job at scale: thousands of small partitions on S3, list + plan and total time.

A snapshot of ``--partitions`` partitions (default 200 and 2,000, one after the
other) of topic ``events``, each one small segment (``--segment-kib``, the
generator of bench_memory.py: ~180-byte JSON records in 16 KiB batches and ~4 KiB
records; even partitions uncompressed, odd lz4) with its ``.index``, is put on an
S3 server (a ``moto_server`` process on 127.0.0.1 this script starts and stops by
its pid, as bench_plan.py does, or ``--endpoint``). For each size, in one run and
one SparkSession (``local[CORES]``, started and warmed up before the clocks):

* ``list_plan_s``: what the job's driver does before any task — list the prefix
  (``decode.discover``), read the ``.index`` of the segments worth splitting (none:
  they are small) and plan the tasks (``decode.plan``);
* the job, ``spark_jobs.decode.main`` from S3 into a fresh local warehouse (its
  embedded SQLite catalog): total seconds and its own phases (``plan`` there also
  opens the catalog, creates the tables and the run's branch and reads the ledger).

Per-partition cost is reported for each size, and how it grows from the first
size to the last (1.0: linear). Issue 18's target: plan under 60 s at 2,000.
``--read-ahead 0 4`` runs the job once per value of its ``--read-ahead`` at each size
(``jobs``), in that order; the first is the one reported as ``job``.

    .venv/bin/python bench/bench_scale.py [--partitions 200 2000] [--segment-kib 64] [--cores 2]
        [--read-ahead N ...]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

import bench_job  # noqa: E402
import bench_memory  # noqa: E402
from bench_plan import _start_moto  # noqa: E402
from spark_jobs.decode.writing import DEFAULT_READ_AHEAD  # noqa: E402

TOPIC = "events"


def segment_files(out: Path, kib: int) -> dict[str, tuple[bytes, bytes, int]]:
    """One small segment per codec, with its ``.index``: codec -> (log, index, records)."""
    made = {}
    for codec in ("none", "lz4"):
        log = out / f"scale-{bench_memory.GENERATOR}-{codec}-{kib}KiB" / "00000000000000000000.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        meta = bench_memory.write_segment(log, kib << 10, codec)
        bench_job.write_offset_index(log)
        made[codec] = (log.read_bytes(), log.with_suffix(".index").read_bytes(), meta["records"])
    return made


def upload(s3, bucket: str, prefix: str, partitions: int, files: dict) -> dict:
    """``partitions`` partitions under ``s3://bucket/prefix/``, 16 uploads at a time."""
    client = s3.client()

    def put(p):
        log, index, records = files["none" if p % 2 == 0 else "lz4"]
        base = f"{prefix}/{TOPIC}-{p}/{0:020d}"
        client.put_object(Bucket=bucket, Key=f"{base}.log", Body=log)
        client.put_object(Bucket=bucket, Key=f"{base}.index", Body=index)
        return len(log), records

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        done = list(pool.map(put, range(partitions)))
    return {"bytes": sum(b for b, _ in done), "records": sum(r for _, r in done)}


def list_and_plan(uri: str, s3) -> dict:
    """The driver's work before the tasks, as ``decode.main`` does it on a first run."""
    from spark_jobs import decode

    t0 = time.perf_counter()
    segments, unparsable = decode.discover(uri, s3)
    listed = time.perf_counter() - t0
    to_split = [s for s in segments if s.index_uri and s.size > decode.DEFAULT_SPLIT_BYTES]
    positions = decode.read_index_positions(
        [s.index_uri for s in to_split], s3,
        pins={s.index_uri: s.index_pin(s.index_uri) for s in to_split})
    tasks = decode.plan(segments, {}, {}, positions)
    return {"list_s": round(listed, 3), "list_plan_s": round(time.perf_counter() - t0, 3),
            "segments": len(segments), "tasks": len(tasks), "unparsable": len(unparsable)}


def run_job(spark, uri: str, endpoint: str, wh: Path, read_ahead: int) -> dict:
    from spark_jobs import decode

    shutil.rmtree(wh, ignore_errors=True)
    t0 = time.perf_counter()
    summary = decode.main(["--input", uri, "--output", str(wh), "--run-id", "bench-scale",
                           "--s3-endpoint", endpoint, "--read-ahead", str(read_ahead)],
                          spark=spark)
    return {"read_ahead": read_ahead, "seconds": round(time.perf_counter() - t0, 2),
            "records": summary["records"],
            "tasks": summary["tasks"], "findings": summary["findings"],
            "phases": summary["timings"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", type=int, nargs="+", default=[200, 2000])
    ap.add_argument("--segment-kib", type=int, default=64)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--endpoint", help="an S3 endpoint to use instead of a local moto_server")
    ap.add_argument("--out", type=Path, default=HERE / "out")
    ap.add_argument("--read-ahead", type=int, nargs="+", default=[DEFAULT_READ_AHEAD],
                    help="run the job once per value of its --read-ahead, in this order, "
                         "at each size; the first is the one reported as the job "
                         "(default %(default)s)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    from spark_jobs import storage
    from spark_jobs.session import build_session

    files = segment_files(args.out, args.segment_kib)
    proc, endpoint = (None, args.endpoint) if args.endpoint else _start_moto()
    spark = None
    result = {"segment_kib": args.segment_kib, "cores": args.cores, "endpoint": endpoint,
              "load_before": os.getloadavg(), "sizes": []}
    try:
        s3 = storage.S3Config.from_env(endpoint)
        bucket = f"bench-scale-{os.getpid()}"
        s3.client().create_bucket(Bucket=bucket)
        t0 = time.perf_counter()
        spark = build_session("bench-scale", master=f"local[{args.cores}]",
                              conf={"spark.sql.shuffle.partitions": str(args.cores)})
        result["not_counted"] = {"session_start_s": round(time.perf_counter() - t0, 2),
                                 "first_python_job_s": round(bench_job._warm_up(spark, args.cores), 2)}
        for n in args.partitions:
            prefix = f"snap-{n}"
            t0 = time.perf_counter()
            made = upload(s3, bucket, prefix, n, files)
            uploaded = time.perf_counter() - t0
            uri = f"s3://{bucket}/{prefix}"
            planned = list_and_plan(uri, s3)
            jobs = []
            for read_ahead in args.read_ahead:
                wh = Path(tempfile.mkdtemp(prefix=f"bench-scale-{n}-", dir=args.out))
                try:
                    job = run_job(spark, uri, endpoint, wh, read_ahead)
                finally:
                    shutil.rmtree(wh, ignore_errors=True)
                if job["records"] != made["records"] or job["findings"]:
                    raise SystemExit(f"{n} partitions: {made['records']} records written, "
                                     f"job: {job}")
                jobs.append(job)
            job = jobs[0]
            size = {"partitions": n, "mb": round(made["bytes"] / 1e6, 1),
                    "records": made["records"], "upload_s": round(uploaded, 1),
                    **planned, "job": job, "jobs": jobs,
                    "per_partition_ms": {"list_plan": round(1e3 * planned["list_plan_s"] / n, 2),
                                         "job": round(1e3 * job["seconds"] / n, 2),
                                         **{k: round(1e3 * v / n, 2)
                                            for k, v in job["phases"].items()}}}
            result["sizes"].append(size)
            print(json.dumps(size), flush=True)
    finally:
        if spark is not None:
            spark.stop()
        if proc is not None:
            os.kill(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
    first, last = result["sizes"][0], result["sizes"][-1]
    scale = last["partitions"] / first["partitions"]
    result["growth_vs_linear"] = {  # (time at last size / time at first size) / (size ratio)
        "list_plan": round(last["list_plan_s"] / first["list_plan_s"] / scale, 2),
        "job": round(last["job"]["seconds"] / first["job"]["seconds"] / scale, 2)}
    result["plan_target"] = "list + plan < 60 s at the largest size"
    result["met"] = last["list_plan_s"] < 60 and last["job"]["phases"]["plan"] < 60
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if result["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
