"""Throughput of the decode job per executor core, next to kafkalog.records_table alone.

Writes (once; reused afterwards) a snapshot of at least ``--size-mib`` MiB into
bench/out/job-snapshot: ``--partitions`` partitions of topic ``events``, each
one 128 MiB segment (the generator of bench_memory.py: ~180-byte JSON records
in 16 KiB batches and ~4 KiB records, half the partitions uncompressed and half
lz4) with an ``.index`` every 4 KiB, as a broker writes it.

Then, in one run:

* ``records_table``: the job's byte ranges decoded with ``kafkalog.records_table``
  in this process, one after the other (one core), before and after the job
  (the mean is used); and the same ranges over CORES processes at once
  (``records_table_parallel``), which meets the same memory bandwidth and
  neighbours as the job's CORES workers;
* the job: ``spark_jobs.decode.main`` on ``local[CORES]`` into a fresh
  warehouse (list, plan, decode, Parquet, publish), with ``--split-bytes`` of
  ``--split-mib``. The session is started, and one trivial Python job run,
  before the clock starts: both are fixed costs of a session (reported as
  ``not_counted``), not throughput.

Per-core throughput of the job is its MB/s and records/s divided by CORES; the
verdict compares it with records_table's single-core figure (target >= 0.5).

    .venv/bin/python bench/bench_job.py [--size-mib 512] [--cores 2] [--split-mib 128] [--json FILE]
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
SEGMENT_MIB = 128
#: bumped when the snapshot's .index changes (2: last offsets, as a broker writes them;
#: 1 held base offsets, which the job now reports as index_mismatch findings)
INDEX_FORMAT = 2


def ensure_snapshot(out: Path, size_mib: int, partitions: int) -> tuple[Path, dict]:
    import bench_memory

    import kafkalog

    per = max(SEGMENT_MIB, -(-size_mib // partitions))
    want = {"partitions": partitions, "segment_mib": per, "generator": bench_memory.GENERATOR,
            "index": INDEX_FORMAT}

    def index(log: Path) -> None:
        # an .index entry every 4 KiB of batches, as the broker's index.interval.bytes
        # does: the batch's last offset (relative) and its position
        entries, since = bytearray(), 0
        for b in kafkalog.iter_batches(str(log), verify_crc=False):
            if since >= 4096:
                entries += (b.last_offset).to_bytes(4, "big") + b.position.to_bytes(4, "big")
                since = 0
            since += b.size
        log.with_suffix(".index").write_bytes(bytes(entries))

    return bench_memory.ensure_partitions(out / "job-snapshot", want, "events", partitions,
                                          per << 20, after_log=index)


def _pieces(root: Path, split_mib: int) -> list[tuple[str, int, int]]:
    """The byte ranges the job's tasks get (its own planner, on the same .index files)."""
    from spark_jobs import decode

    segs, _ = decode.discover(str(root))
    positions = {s.index_uri: decode.index_positions(s.index_uri, None) for s in segs}
    tasks = decode.plan(segs, {}, {}, positions, split_mib << 20)
    return [(t.uri, t.start, t.end) for t in tasks]


def _decode_piece(piece) -> int:
    import kafkalog

    path, start, end = piece
    return kafkalog.records_table(path, byte_range=(start, end)).num_rows


def bench_records_table(root: Path, split_mib: int, processes: int) -> dict:
    """records_table over the job's byte ranges: in this process, or in one process per core."""
    import multiprocessing

    pieces = _pieces(root, split_mib)
    if processes == 1:
        # before the clock, as for the pool and the job's workers: the first call of a
        # process imports what pyarrow loads lazily (pandas, ~0.3 s) and grows the allocator
        _decode_piece(pieces[0])
        t0 = time.perf_counter()
        rows = sum(_decode_piece(p) for p in pieces)
        return {"seconds": time.perf_counter() - t0, "records": rows}
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        pool.map(_decode_piece, pieces[:processes])  # imports done before the clock
        t0 = time.perf_counter()
        rows = sum(pool.map(_decode_piece, pieces, chunksize=1))
        return {"seconds": time.perf_counter() - t0, "records": rows}


def _warm_up(spark, cores: int) -> float:
    """The first Python job of a session starts the worker daemon and loads Arrow: time it."""
    import pyarrow as pa

    def touch(batches):
        import kafkalog  # noqa: F401  (what the job's workers import)

        for b in batches:
            yield pa.RecordBatch.from_arrays([b.column(0)], names=["id"])

    t0 = time.perf_counter()
    spark.range(cores * 2, numPartitions=cores).mapInArrow(touch, "id long").collect()
    return time.perf_counter() - t0


def bench_job(root: Path, wh: Path, cores: int, split_mib: int) -> dict:
    from spark_jobs import decode
    from spark_jobs.session import build_session

    shutil.rmtree(wh, ignore_errors=True)
    t0 = time.perf_counter()
    spark = build_session("bench-job", master=f"local[{cores}]",
                          conf={"spark.sql.shuffle.partitions": str(cores)})
    startup = time.perf_counter() - t0
    try:
        warm = _warm_up(spark, cores)
        t0 = time.perf_counter()
        summary = decode.main(
            ["--input", str(root), "--output", str(wh), "--run-id", "bench",
             "--split-bytes", str(split_mib << 20)], spark=spark)
        seconds = time.perf_counter() - t0
    finally:
        spark.stop()
    return {"seconds": seconds, "records": summary["records"], "tasks": summary["tasks"],
            "findings": summary["findings"], "session_start_s": startup, "first_python_job_s": warm,
            "timings": summary["timings"]}


def main(argv=None) -> int:
    from spark_jobs.decode import DEFAULT_SPLIT_BYTES

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size-mib", type=int, default=512)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--cores", type=int, default=2)
    p.add_argument("--split-mib", type=int, default=DEFAULT_SPLIT_BYTES >> 20,
                   help="--split-bytes of the job, in MiB (default %(default)s: the job's own "
                        "default; smaller splits add tasks, and PySpark costs ~50-100 ms a "
                        "task on this machine)")
    p.add_argument("--out", type=Path, default=HERE / "out")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    import kafkalog

    root, meta = ensure_snapshot(args.out, args.size_mib, args.partitions)
    mb = meta["bytes"] / 1e6
    # the peers run before and after the job, and their mean is used: this machine is noisy
    seq = [bench_records_table(root, args.split_mib, 1)]
    par = [bench_records_table(root, args.split_mib, args.cores)]
    job = bench_job(root, args.out / "job-warehouse", args.cores, args.split_mib)
    seq.append(bench_records_table(root, args.split_mib, 1))
    par.append(bench_records_table(root, args.split_mib, args.cores))
    for r in seq + par:
        assert r["records"] == job["records"] == meta["records"], (r, job, meta)
    assert job["findings"] == 0, f"the generated snapshot should decode clean: {job}"
    base = {"seconds": sum(r["seconds"] for r in seq) / len(seq)}
    base_par = {"seconds": sum(r["seconds"] for r in par) / len(par)}
    result = {
        "snapshot_mb": round(mb, 1), "records": meta["records"], "cores": args.cores,
        "compiled": kafkalog.ACCELERATED,
        "records_table": {"seconds": round(base["seconds"], 2),
                          "mb_per_s": round(mb / base["seconds"], 1),
                          "records_per_s": round(meta["records"] / base["seconds"])},
        "job": {"seconds": round(job["seconds"], 2), "tasks": job["tasks"],
                "phases": job["timings"],
                "not_counted": {"session_start_s": round(job["session_start_s"], 2),
                                "first_python_job_s": round(job["first_python_job_s"], 2)},
                "mb_per_s_per_core": round(mb / job["seconds"] / args.cores, 1),
                "records_per_s_per_core": round(meta["records"] / job["seconds"] / args.cores)},
    }
    result["records_table_parallel"] = {
        "processes": args.cores, "seconds": round(base_par["seconds"], 2),
        "mb_per_s_per_core": round(mb / base_par["seconds"] / args.cores, 1),
        "records_per_s_per_core": round(meta["records"] / base_par["seconds"] / args.cores)}
    # job throughput per core / records_table throughput on one core
    result["ratio_per_core"] = round(base["seconds"] / (job["seconds"] * args.cores), 3)
    # the same, with the peer also running one process per core at the same time
    result["ratio_per_core_vs_parallel_peer"] = round(base_par["seconds"] / job["seconds"], 3)
    result["target"] = ">= 0.5"
    result["met"] = result["ratio_per_core"] >= 0.5
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if result["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
