"""The decode job on the same partitions as 1, 2 and 3 copies (brokers' replicas).

Writes (once; reused afterwards) ``--partitions`` partitions of topic ``events``, one
segment of ``--size-mib / --partitions`` MiB each (bench_memory.py's generator, half
uncompressed, half lz4), into bench/out/replicas-snapshot/base. A snapshot of N copies
is N broker folders holding hard links to those files (the bytes of real replicas are
the same; the job sees N distinct objects). In one run, on one local[CORES] session
(started, and one Python job run, before the clock):

* the job (``spark_jobs.decode.main``, list, plan, frame, decode, Parquet, publish)
  into a fresh warehouse on 1 copy once uncounted (the first job of a session imports
  the job's modules in the driver and the Python workers), then on 1, 2, 3, 3, 2 and 1
  copies: each N twice, in an order that cancels a drift of the machine's speed, and
  the ratios are means over means (a task's CPU time for the same bytes moves by up to
  50% between runs on this VM);
* the records tables compared: every (partition, offset) once, and the same rows for
  every N.

Target (issue 18): 3 copies <= 1.3x the time of 1 copy, identical tables.

    .venv/bin/python bench/bench_replicas.py [--size-mib 512] [--partitions 4] [--cores 2] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
TOPIC = "events"
TARGET = 1.3
#: the runs' copies, in order: each N twice, mirrored
ORDER = (1, 2, 3, 3, 2, 1)


def ensure_base(out: Path, size_mib: int, partitions: int) -> tuple[Path, dict]:
    """One copy of the partitions (reused while its parameters hold)."""
    import bench_memory

    want = {"partitions": partitions, "size_mib": size_mib, "generator": bench_memory.GENERATOR}
    return bench_memory.ensure_partitions(out / "replicas-snapshot" / "base", want, TOPIC,
                                          partitions, (size_mib << 20) // partitions)


def copies(base: Path, n: int) -> Path:
    """A snapshot of ``n`` broker folders, each holding hard links to ``base``'s segments."""
    root = base.parent / f"copies-{n}"
    shutil.rmtree(root, ignore_errors=True)
    for b in range(1, n + 1):
        for log in base.glob(f"{TOPIC}-*/*.log"):
            target = root / f"broker-{b}" / log.parent.name / log.name
            target.parent.mkdir(parents=True, exist_ok=True)
            os.link(log, target)
    return root


def run_job(spark, snapshot: Path, wh: Path) -> dict:
    from spark_jobs import decode

    shutil.rmtree(wh, ignore_errors=True)
    t0 = time.perf_counter()
    summary = decode.main(["--input", str(snapshot), "--output", str(wh), "--run-id", "bench"],
                          spark=spark)
    return {"seconds": time.perf_counter() - t0, "summary": summary}


def table_digest(wh: Path):
    """The records table's (partition, offset) sorted, and how many rows: equal for every N."""
    import pyarrow.compute as pc

    from spark_jobs import tables

    t = tables.read_arrow(str(wh), "records", columns=("partition", "offset", "value"))
    order = pc.sort_indices(t, [("partition", "ascending"), ("offset", "ascending")])
    t = t.take(order)
    return t


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size-mib", type=int, default=512)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--cores", type=int, default=2)
    p.add_argument("--out", type=Path, default=HERE / "out")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    from bench_job import _warm_up
    from spark_jobs.session import build_session

    base, meta = ensure_base(args.out, args.size_mib, args.partitions)
    snaps = {n: copies(base, n) for n in (1, 2, 3)}
    spark = build_session("bench-replicas", master=f"local[{args.cores}]",
                          conf={"spark.sql.shuffle.partitions": str(args.cores)})
    runs = []
    try:
        _warm_up(spark, args.cores)
        warm = run_job(spark, snaps[1], args.out / "replicas-warehouse-warm")["seconds"]
        reference = None
        for i, n in enumerate(ORDER):
            # a warehouse per run (the embedded catalog of a removed one stays open)
            wh = args.out / f"replicas-warehouse-{i}"
            r = run_job(spark, snaps[n], wh)
            digest = table_digest(wh)
            if reference is None:
                reference = digest
            same = digest.equals(reference)
            offsets = list(zip(digest.column("partition").to_pylist(),
                               digest.column("offset").to_pylist()))
            runs.append({"copies": n, "seconds": round(r["seconds"], 2),
                         "records": r["summary"]["records"], "rows": digest.num_rows,
                         "duplicated": len(offsets) - len(set(offsets)),
                         "identical_table": same,
                         "pending_partitions": r["summary"]["pending_partitions"],
                         "phases": r["summary"]["timings"]})
    finally:
        spark.stop()
    mean = {n: sum(r["seconds"] for r in runs if r["copies"] == n) / ORDER.count(n)
            for n in set(ORDER)}
    result = {
        "snapshot_mb_per_copy": round(meta["bytes"] / 1e6, 1), "records": meta["records"],
        "partitions": args.partitions, "cores": args.cores,
        "not_counted": {"first_job_1_copy_s": round(warm, 2)}, "runs": runs,
        "mean_s": {n: round(s, 2) for n, s in sorted(mean.items())},
        "ratio_2_copies": round(mean[2] / mean[1], 3),
        "ratio_3_copies": round(mean[3] / mean[1], 3),
        "target": f"3 copies <= {TARGET}x 1 copy, identical tables",
    }
    result["met"] = result["ratio_3_copies"] <= TARGET and all(
        r["identical_table"] and r["rows"] == meta["records"] and r["duplicated"] == 0
        for r in runs)
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if result["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
