"""The decode job's cost against the length of the warehouse's history (issue 18 part 4).

``--nights`` nights (default 100; issue 18 asks about 300, ``--nights 300 --probe 10 100
300``, which takes over an hour here while nothing maintains the tables) of ``--partitions`` partitions (default 4) of topic
``events``. Each night every partition gets one new segment of ``--records`` records
(default 2,000, small JSON values in batches of 100, every second one lz4), its
timestamps on that night's day. A night's snapshot is a broker's log directory with
a week's retention: the partitions' last ``--retention`` segments (default 7), hard
links into one pool of segment files. Every night runs ``spark_jobs.decode.main``
into one warehouse (its embedded SQLite catalog), in one SparkSession
(``local[CORES]``), with no maintenance in between: each night decodes its new
segments, skips the week's older ones by the ledger, and publishes.

At each ``--probe`` night (default 10, 50, 100) two **backfills** run after the
night, each of the snapshot of three nights before, under a new run id. (Before the first, night 4 is
backfilled once, unreported: the session's first Spark dedupe compiles its plans.) The plain
one finds every segment in the ledger as it is and decodes nothing. The other
(``--reprocess``) decodes its week of segments again: every offset in it is already
published, so its partitions go through the Spark dedupe, which reads only the
files whose statistics overlap them. That backfill's ``deduplicate`` seconds are
the figure to hold flat while history grows;
the nights' ``plan``, ``commit`` and ``publish`` show what the catalog and the
ledger cost as they grow (reported at each probe: the mean of the five nights before it).

    .venv/bin/python bench/bench_history.py [--nights 100] [--probe 10 50 100] [--partitions 4] [--json FILE]
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
sys.path.insert(0, str(HERE.parent))

TOPIC = "events"
DAY_MS = 86_400_000
T0_MS = 1_764_547_200_000  # 2025-12-01T00:00:00Z


def write_night(pool: Path, night: int, partitions: int, records: int) -> None:
    """Night ``night``'s segment of every partition, into ``pool/<topic>-<p>/``."""
    from kafkalog.writer import SegmentWriter, WriteRecord

    for p in range(partitions):
        base = night * records
        folder = pool / f"{TOPIC}-{p}"
        if (folder / f"{base:020d}.log").exists():
            continue
        with SegmentWriter(folder, base) as w:
            for b in range(0, records, 100):
                rows = [WriteRecord(f"k{(base + b + i) % 97}".encode(),
                                    json.dumps({"n": base + b + i, "p": p}).encode(),
                                    timestamp=T0_MS + night * DAY_MS + (b + i) * 1000)
                        for i in range(min(100, records - b))]
                w.append(rows, codec="lz4" if (b // 100) % 2 else "none")


def snapshot(pool: Path, out: Path, night: int, partitions: int, records: int,
             retention: int) -> Path:
    """The log directory as night ``night`` saw it: each partition's last ``retention``
    segments (hard links into the pool, index files included)."""
    shutil.rmtree(out, ignore_errors=True)
    for p in range(partitions):
        (out / f"{TOPIC}-{p}").mkdir(parents=True)
        for n in range(max(1, night - retention + 1), night + 1):
            for f in (pool / f"{TOPIC}-{p}").glob(f"{n * records:020d}.*"):
                os.link(f, out / f"{TOPIC}-{p}" / f.name)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nights", type=int, default=100)
    p.add_argument("--probe", type=int, nargs="+", default=[10, 50, 100])
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--records", type=int, default=2000)
    p.add_argument("--retention", type=int, default=7)
    p.add_argument("--cores", type=int, default=2)
    p.add_argument("--out", type=Path, default=HERE / "out" / "history")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    from spark_jobs import decode
    from spark_jobs.session import build_session

    probes = sorted(n for n in set(args.probe) if 5 <= n <= args.nights)
    shutil.rmtree(args.out, ignore_errors=True)
    pool, wh = args.out / "pool", args.out / "warehouse"
    spark = build_session("bench-history", master=f"local[{args.cores}]",
                          conf={"spark.sql.shuffle.partitions": str(args.cores)})

    def run(src: Path, run_id: str, *extra: str) -> dict:
        t0 = time.perf_counter()
        summary = decode.main(["--input", str(src), "--output", str(wh), "--run-id", run_id,
                               *extra], spark=spark)
        return {"seconds": time.perf_counter() - t0, **summary}

    nights, out = [], {"probes": []}
    try:
        for night in range(1, args.nights + 1):
            write_night(pool, night, args.partitions, args.records)
            snap = snapshot(pool, args.out / "snapshot", night, args.partitions, args.records,
                            args.retention)
            s = run(snap, f"night-{night:04d}")
            assert s["records"] == args.partitions * args.records, s
            assert s["actions"].get("decoded") == args.partitions, s["actions"]
            nights.append({"night": night, "seconds": s["seconds"], **s["timings"]})
            if night == 4 and probes:
                # the session's first dedupe compiles Spark's plans (~30 s here): before the clocks
                warm = snapshot(pool, args.out / "backfill", 3, args.partitions, args.records,
                                args.retention)
                out["warm_up_s"] = round(run(warm, "warm-up", "--reprocess")["seconds"], 3)
            if night in probes:
                back = snapshot(pool, args.out / "backfill", night - 3, args.partitions,
                                args.records, args.retention)
                plain = run(back, f"backfill-at-{night:04d}")
                assert plain["records"] == 0 and plain["pending_partitions"] == 0, plain
                b = run(back, f"reprocess-at-{night:04d}", "--reprocess")
                assert b["pending_partitions"] == args.partitions and b["divergences"] == 0, b
                recent = nights[-5:]
                out["probes"].append({
                    "night": night,
                    "plain_backfill": {"seconds": round(plain["seconds"], 3),
                                       "actions": plain["actions"]},
                    "backfill": {"seconds": round(b["seconds"], 3), "records": b["records"],
                                 **{k: round(v, 3) for k, v in b["timings"].items()}},
                    "nights_before": {k: round(sum(n[k] for n in recent) / len(recent), 3)
                                      for k in ("seconds", "plan", "decode", "commit", "publish")},
                })
                print(json.dumps(out["probes"][-1]), flush=True)
    finally:
        spark.stop()
    out.update(nights=args.nights, partitions=args.partitions, records_per_night=args.records,
               retention=args.retention, cores=args.cores, load_after=os.getloadavg())
    first, last = out["probes"][0], out["probes"][-1]
    # how the backfill's dedupe and a night's phases grow from the first probe to the last
    out["growth_first_to_last_probe"] = {
        "backfill_deduplicate": round(last["backfill"]["deduplicate"]
                                      / max(first["backfill"]["deduplicate"], 1e-9), 2),
        **{f"night_{k}": round(last["nights_before"][k] / max(first["nights_before"][k], 1e-9), 2)
           for k in ("seconds", "plan", "commit", "publish")}}
    print(json.dumps(out, indent=2))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
