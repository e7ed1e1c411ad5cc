"""Iceberg overhead of the warehouse: commits per run, reads, dedupe with history, a year of runs.

A fresh local warehouse (``--out``/iceberg-warehouse) with the embedded SQLite
catalog, written through the real API (``spark_jobs.warehouse.Warehouse``): every
simulated night writes the decode job's five tables as the job writes them
(``parquet.write_schema`` / ``parquet_options``, one file per task and
partition value, named ``<run token>~<attempt>~<part>.parquet``): ``--topics`` x
``--partitions`` Kafka partitions with ``--records`` records each (a batch per 10
records, one transaction marker, one ledger row per partition, one finding a
night). Kafka partitions sit at different offsets (``10**7`` apart), as real ones
do. Each night is committed as a DAG run does: ``begin_run``, ``commit_files`` per
table, ``publish``; every ``--maintenance-every`` nights ``spark_jobs.maintenance``
runs as the weekly DAG would (compaction, expiry to the last ``--retain-last``
snapshots, orphan removal; simulated days pass in seconds, so age thresholds are 0).

Reported (ratios against a peer measured in the same run; no timed asserts):

a. commit overhead per run: begin_run + commit_files + publish of a night, against
   writing the same night's Parquet files;
b. read overhead: ``records`` through the catalog (``tables.read_arrow``: catalog
   load, planning, pyiceberg's Arrow read) against ``pyarrow.parquet`` reading the
   same files (best of 3, interleaved);
c. dedupe cost after 10 and after 300 prior nights: the part of the job's dedupe
   that grows with history, i.e. planning the files whose (topic, partition, offset)
   ranges can meet a new night's (``decode.overlap_filter`` bounded by
   ``decode.overlap_days``, the files ``tables.read_table`` would hand Spark) and
   reading them with pyarrow, for records, batches and markers; not the Spark job
   around it (a constant). Peer: the same plan without the day bound, which must
   pick the same files (checked);
d. the year: manifests of ``main``'s current snapshot, metadata size, data files, and
   plan time of a full scan and of a one-partition scan, at the end against night 1.

    .venv/bin/python bench/bench_iceberg.py [--nights 365] [--quick] [--no-maintenance]
        [--topics 2] [--partitions 4] [--records 500] [--json FILE]

``--quick``: 60 nights of 400 records (dedupe after 10 and 60 nights), ~3 minutes on 2
cores; the full run takes ~25. Figures and where the time goes: docs/bench_iceberg.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from spark_jobs import decode, maintenance, parquet, schemas, tables  # noqa: E402
from spark_jobs.warehouse import Warehouse, run_files_prefix  # noqa: E402

DAY0 = dt.date(2026, 1, 1)
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
PARTITION_SPACING = 10 ** 7  # Kafka partitions' offsets are far apart
DEDUPE_TABLES = ("records", "batches", "markers")


# ------------------------------------------------------------------ a night's files
class Night:
    """Night ``i`` of a warehouse of ``topics`` x ``partitions``, ``records`` each."""

    def __init__(self, i: int, topics: int, partitions: int, records: int):
        self.i, self.records = i, records
        self.day = (DAY0 + dt.timedelta(days=i)).isoformat()
        self.run_id = f"scheduled__{self.day}T03:00:00+00:00"
        self.tps = [(f"topic{t}", p) for t in range(topics) for p in range(partitions)]

    def first(self, tp) -> int:
        t, p = tp
        return (int(t[len("topic"):]) * 100 + p) * PARTITION_SPACING + self.i * self.records

    def segment(self, tp) -> str:
        return f"s3://snapshots/{self.day}/{tp[0]}-{tp[1]}/{self.first(tp):020d}.log"

    def tables(self) -> dict[str, list[tuple[str, pa.Table]]]:
        """``{table: [(folder, rows)]}``: one file per task (Kafka partition) and
        partition value, as the job's PartWriter writes them; findings and ledger
        from the driver, one file each."""
        out = {n: [] for n in schemas.DECODE_TABLES}
        ledger = []
        for tp in self.tps:
            lo = self.first(tp)
            offsets = list(range(lo, lo + self.records))
            out["records"].append((parquet.partition_path(tp[0], self.day),
                                   self._records(tp, offsets)))
            out["batches"].append((parquet.partition_path(tp[0]),
                                   self._batches(tp, offsets[::10])))
            out["markers"].append((parquet.partition_path(tp[0]),
                                   self._markers(tp, offsets[-1] + 1)))
            ledger.append(self._ledger_row(tp, offsets))
        t0, p0 = self.tps[0]
        out["findings"].append((parquet.partition_path(t0), fill("findings", 1, {
            "partition": [p0], "kind": ["index_mismatch"], "message": ["an index entry off"],
            "base_offset": [self.first(self.tps[0])], "segment": [self.segment(self.tps[0])],
            "run_id": [self.run_id], "topic": [t0]})))
        out["ledger"].append(("", pa.Table.from_pylist(ledger, schema=schemas.LEDGER)))
        return out

    def _common(self, tp, n):
        return {"partition": [tp[1]] * n, "segment": [self.segment(tp)] * n,
                "segment_base_offset": [self.first(tp)] * n, "run_id": [self.run_id] * n,
                "topic": [tp[0]] * n, schemas.INGEST_DT: [self.day] * n}

    def _records(self, tp, offsets):
        n = len(offsets)
        ts = T0 + dt.timedelta(days=self.i)
        return fill("records", n, {
            **self._common(tp, n), "dt": [self.day] * n, "offset": offsets,
            "timestamp": [ts + dt.timedelta(milliseconds=k) for k in range(n)],
            "timestamp_type": ["CreateTime"] * n, "compression": ["lz4"] * n,
            "key": [b"k%d" % (o % 1000) for o in offsets],
            "value": [os.urandom(24).hex().encode() + b"/%d" % o for o in offsets],
            "batch_base_offset": [o - (o - offsets[0]) % 10 for o in offsets],
            "batch_last_offset": [o - (o - offsets[0]) % 10 + 9 for o in offsets],
            "batch_position": [(o - offsets[0]) // 10 * 1200 for o in offsets]})

    def _batches(self, tp, bases):
        n = len(bases)
        ts = T0 + dt.timedelta(days=self.i)
        return fill("batches", n, {
            **self._common(tp, n), "base_offset": bases, "last_offset": [b + 9 for b in bases],
            "position": [k * 1200 for k in range(n)], "record_count": [10] * n,
            "status": ["ok"] * n, "compression": ["lz4"] * n, "timestamp_type": ["CreateTime"] * n,
            "first_timestamp": [ts] * n, "max_timestamp": [ts] * n, "crc_valid": [True] * n})

    def _markers(self, tp, offset):
        return fill("markers", 1, {**self._common(tp, 1), "offset": [offset],
                                   "control_type": ["COMMIT"], "crc_valid": [True]})

    def _ledger_row(self, tp, offsets):
        now = T0 + dt.timedelta(days=self.i, hours=3)
        return {"run_id": self.run_id, "segment": self.segment(tp), "topic": tp[0],
                "partition": tp[1], "segment_base_offset": offsets[0],
                "object_size": len(offsets) * 120, "etag": f"e{self.i}", "mtime": now,
                "byte_start": 0, "byte_end": len(offsets) * 120,
                "end_position": len(offsets) * 120, "first_offset": offsets[0],
                "last_offset": offsets[-1], "last_batch_position": 0, "last_batch_crc": 0,
                "records": len(offsets), "batches": len(offsets) // 10, "findings": 0,
                "action": "decoded", "ingested_at": now}

    def overlap(self) -> dict[tuple[str, int], tuple[int, int]]:
        """The offset ranges of this night's pending segments: each partition's last
        segment seen again, from the middle of the night before."""
        return {tp: (self.first(tp) - self.records // 2, self.first(tp) + self.records - 1)
                for tp in self.tps}


def fill(name: str, n: int, given: dict) -> pa.Table:
    """Rows of table ``name``: the ``given`` columns, the others filled by type."""
    cols = []
    for f in schemas.TABLES[name]:
        if f.name in given:
            cols.append(pa.array(given[f.name], f.type))
        elif pa.types.is_integer(f.type):
            cols.append(pa.array([k % 100 for k in range(n)], f.type))
        elif pa.types.is_timestamp(f.type):
            cols.append(pa.array([T0] * n, f.type))
        elif pa.types.is_boolean(f.type):
            cols.append(pa.array([False] * n, f.type))
        elif pa.types.is_list(f.type):
            cols.append(pa.array([[]] * n, f.type))
        else:  # strings and bytes
            cols.append(pa.nulls(n, f.type))
    return pa.Table.from_arrays(cols, schema=schemas.TABLES[name])


def write_night(roots: dict[str, str], night: Night, attempt: str) -> tuple[dict, float]:
    """Write the night's files into the tables' data folders as the job does; returns
    ``({table: [uri]}, seconds spent writing Parquet)``."""
    prefix = run_files_prefix(night.run_id) + attempt
    files, seconds = {}, 0.0
    for name, parts in night.tables().items():
        target = parquet.write_schema(name)
        options = parquet.parquet_options(target)
        uris = []
        for k, (folder, rows) in enumerate(parts):
            rows = rows.cast(target)
            uri = f"{roots[name]}/{folder}/{prefix}~{k}.parquet" if folder \
                else f"{roots[name]}/{prefix}~{k}.parquet"
            path = uri[len("file://"):]
            t0 = time.perf_counter()
            os.makedirs(os.path.dirname(path), exist_ok=True)
            pq.write_table(rows, path, **options)
            seconds += time.perf_counter() - t0
            uris.append(uri)
        files[name] = uris
    return files, seconds


def commit_night(wh: Warehouse, night: Night, files: dict) -> float:
    """begin_run + commit_files per table + publish, as a DAG run; returns seconds."""
    t0 = time.perf_counter()
    wh.begin_run(night.run_id, reset=True)
    for name in schemas.DECODE_TABLES:
        wh.commit_files(name, night.run_id, files[name])
    wh.publish(night.run_id)
    return time.perf_counter() - t0


# ------------------------------------------------------------------ measurements
def best(fn, repeat: int = 3):
    """``(best seconds, last result)`` of ``fn()`` over ``repeat`` calls."""
    seconds, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        seconds = min(seconds, time.perf_counter() - t0)
    return seconds, out


def _cold(fn):
    """``fn`` with pyiceberg's in-process manifest cache emptied first (a job is a
    fresh process: it reads every manifest list and manifest it plans with)."""
    from pyiceberg.manifest import clear_manifest_cache

    def run():
        clear_manifest_cache()
        return fn()
    return run


def plan_files(wh: Warehouse, name: str, row_filter=None) -> list[str]:
    table = wh.load(name)
    scan = table.scan(row_filter=row_filter) if row_filter is not None else table.scan()
    return [t.file.file_path for t in scan.plan_files()]


def local(uri: str) -> str:
    return uri[len("file://"):] if uri.startswith("file://") else uri


def read_plain(paths: list[str]) -> pa.Table:
    return pa.concat_tables([pq.read_table(local(p)) for p in paths]) if paths else None


def state(wh: Warehouse, night: Night) -> dict:
    """Manifests, files, snapshots, metadata size, plan times of the tables now."""
    from pyiceberg.expressions import And, EqualTo

    out = {}
    for name in schemas.DECODE_TABLES:
        table = wh.load(name)
        snap = table.current_snapshot()
        out[name] = {"manifests": len(snap.manifests(table.io)),
                     "data_files": int(snap.summary["total-data-files"]),
                     "rows": int(snap.summary["total-records"]),
                     "snapshots": len(table.metadata.snapshots),
                     "metadata_kb": round(
                         os.path.getsize(local(table.metadata_location)) / 1024, 1)}
    t0 = night.tps[0][0]
    one = {"records": And(EqualTo("topic", t0), EqualTo("dt", night.day)),
           "batches": EqualTo("topic", t0)}
    for name in ("records", "batches", "ledger"):
        out[name]["load_s"] = best(lambda: wh.load(name))[0]
        out[name]["plan_full_s"] = best(_cold(lambda: plan_files(wh, name)))[0]
        if name in one:
            s, picked = best(_cold(lambda: plan_files(wh, name, one[name])))
            out[name]["plan_one_partition_s"], out[name]["one_partition_files"] = s, len(picked)
    return out


def dedupe_cost(wh: Warehouse, night: Night) -> dict:
    """Plan and read what the dedupe of ``night`` (the next, not yet committed) reads:
    the job's own filter, bounded by the ingest days of the runs whose ledger rows meet
    the night's offsets (the ledger is read by the plan anyway; its read is not counted)."""
    ranges = night.overlap()
    ledger = tables.read_arrow(wh, "ledger")
    days = decode.overlap_days(ledger, night.run_id, ranges)
    out = {"plan_s": 0.0, "read_s": 0.0, "files": 0, "rows": 0, "days": days,
           "unbounded_plan_s": 0.0}
    for name in DEDUPE_TABLES:
        flt = decode.overlap_filter(ranges, name, days)
        snapshot = wh.load(name).current_snapshot().snapshot_id
        s, paths = best(_cold(lambda: tables.table_paths(wh, name, snapshot=snapshot,
                                                          row_filter=flt)))
        # the peer: the same offsets without the ingest-day bound; both must pick the same
        u, every = best(_cold(lambda: tables.table_paths(
            wh, name, snapshot=snapshot, row_filter=decode.overlap_filter(ranges, name))))
        if sorted(paths) != sorted(every):
            raise SystemExit(f"{name}: the ingest-day bound {days} left out "
                             f"{sorted(set(every) - set(paths))}")
        out["unbounded_plan_s"] += u
        r, rows = best(lambda: read_plain(paths))
        out["plan_s"] += s
        out["read_s"] += r
        out["files"] += len(paths)
        out["rows"] += rows.num_rows if rows is not None else 0
    out["total_s"] = out["plan_s"] + out["read_s"]
    return out


def read_overhead(wh: Warehouse) -> dict:
    """``records`` through the catalog vs plain pyarrow on the same files, interleaved."""
    paths = plan_files(wh, "records")
    catalog = plain = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        a = _cold(lambda: tables.read_arrow(wh, "records"))()
        catalog = min(catalog, time.perf_counter() - t0)
        t0 = time.perf_counter()
        b = read_plain(paths)
        plain = min(plain, time.perf_counter() - t0)
    if a.num_rows != b.num_rows:
        raise SystemExit(f"the catalog read {a.num_rows} rows, the files hold {b.num_rows}")
    return {"rows": a.num_rows, "files": len(paths), "catalog_s": catalog, "plain_s": plain,
            "ratio": catalog / plain}


# ------------------------------------------------------------------ the year
def simulate(args) -> dict:
    out_dir = args.out / "iceberg-warehouse"
    shutil.rmtree(out_dir, ignore_errors=True)
    wh = Warehouse(str(out_dir))
    roots = {n: wh.data_root(n) for n in schemas.DECODE_TABLES}
    dedupe_at = sorted({min(10, args.nights), min(300, args.nights)})
    nights, maint = [], []
    result = {"checkpoints": {}, "dedupe": {}, "read": {}}
    for i in range(args.nights):
        night = Night(i, args.topics, args.partitions, args.records)
        files, write_s = write_night(roots, night, f"a{i:04x}")
        commit_s = commit_night(wh, night, files)
        nights.append({"night": i + 1, "write_s": write_s, "commit_s": commit_s,
                       "files": sum(map(len, files.values()))})
        done = i + 1
        if args.maintenance_every and done % args.maintenance_every == 0:
            t0 = time.perf_counter()
            summary = maintenance.maintain(wh, older_than_days=0, retain_last=args.retain_last,
                                           orphan_grace_hours=0, min_files=args.min_files)
            maint.append({"night": done, "seconds": time.perf_counter() - t0,
                          **{k: summary[k] for k in ("groups_compacted", "files_compacted",
                                                     "expired_snapshots", "orphans_deleted")}})
        if done in (1, min(10, args.nights), args.nights):
            result["checkpoints"][done] = state(wh, night)
        if done in dedupe_at:
            result["dedupe"][done] = dedupe_cost(wh, Night(done, args.topics, args.partitions,
                                                           args.records))
        if done in (min(10, args.nights), args.nights):
            result["read"][done] = read_overhead(wh)
        if done % 25 == 0 or done == args.nights:
            last = nights[-1]
            print(f"# night {done:4d}: write {last['write_s'] * 1e3:6.1f} ms, "
                  f"commit {last['commit_s'] * 1e3:7.1f} ms", file=sys.stderr, flush=True)
    expected = args.nights * args.topics * args.partitions * args.records
    got = result["checkpoints"][args.nights]["records"]["rows"]
    counted = tables.read_arrow(wh, "records", columns=("topic", "partition", "offset"))
    keys = set(zip(*(counted.column(c).to_pylist() for c in ("topic", "partition", "offset"))))
    if not got == counted.num_rows == len(keys) == expected:
        raise SystemExit(f"records: {got} in the summary, {counted.num_rows} read, {len(keys)} "
                         f"distinct, {expected} written: rows were lost or doubled")
    result["nights"], result["maintenance"] = nights, maint
    return result


def _mean(xs) -> float:
    xs = list(xs)
    return sum(xs) / len(xs) if xs else float("nan")


def _rounded(figures: dict) -> dict:
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in figures.items()}


def report(args, r: dict) -> dict:
    n = args.nights
    nights = r["nights"]
    first, last = nights[:10], nights[-10:]
    lines = [f"# {n} nights, {args.topics} topics x {args.partitions} partitions x "
             f"{args.records} records a night ({nights[0]['files']} files a night); "
             + (f"maintenance every {args.maintenance_every} nights (retain last "
                f"{args.retain_last}, min files {args.min_files})" if args.maintenance_every
                else "no maintenance"),
             "", "a. commit overhead per run (begin_run + commit_files x5 + publish) "
             "vs writing the same Parquet files",
             f"{'nights':>12} {'write ms':>9} {'commit ms':>10} {'ratio':>7}"]
    summary = {"nights": n, "commit": {}, "read": {}, "dedupe": {}, "year": {}}
    for label, group in ((f"1-{len(first)}", first), (f"{n - len(last) + 1}-{n}", last),
                         ("all", nights)):
        w, c = _mean(x["write_s"] for x in group), _mean(x["commit_s"] for x in group)
        lines.append(f"{label:>12} {w * 1e3:9.1f} {c * 1e3:10.1f} {c / w:6.1f}x")
        summary["commit"][label] = {"write_ms": round(w * 1e3, 1), "commit_ms": round(c * 1e3, 1),
                                    "ratio": round(c / w, 2)}
    if r["maintenance"]:
        m = r["maintenance"]
        lines.append(f"maintenance: {len(m)} runs, mean {_mean(x['seconds'] for x in m):.2f} s, "
                     f"last {m[-1]['seconds']:.2f} s; {sum(x['files_compacted'] for x in m)} files "
                     f"compacted, {sum(x['expired_snapshots'] for x in m)} snapshots expired, "
                     f"{sum(x['orphans_deleted'] for x in m)} orphans deleted")
    lines += ["", "b. read overhead: records via the catalog (tables.read_arrow) vs "
              "pyarrow.parquet on the same files (best of 3)",
              f"{'after night':>12} {'rows':>9} {'files':>6} {'catalog s':>10} {'plain s':>8} "
              f"{'ratio':>7}"]
    for night, x in sorted(r["read"].items()):
        lines.append(f"{night:>12} {x['rows']:9d} {x['files']:6d} {x['catalog_s']:10.3f} "
                     f"{x['plain_s']:8.3f} {x['ratio']:6.2f}x")
        summary["read"][night] = _rounded(x)
    lines += ["", "c. dedupe cost: plan the files that can overlap a new night's offsets "
              "(overlap_filter, bounded by the overlapping runs' ingest days) and read them "
              "(pyarrow), records+batches+markers; the Spark job around it is not timed. "
              "Peer: the same plan without the ingest-day bound (same files picked)",
              f"{'prior nights':>12} {'days':>10} {'files':>6} {'rows':>7} {'plan ms':>8} "
              f"{'read ms':>8} {'total ms':>9} {'unbounded plan ms':>18}"]
    for night, x in sorted(r["dedupe"].items()):
        lines.append(f"{night:>12} {','.join(x['days'] or ['-']):>10} {x['files']:6d} {x['rows']:7d} "
                     f"{x['plan_s'] * 1e3:8.1f} {x['read_s'] * 1e3:8.1f} "
                     f"{x['total_s'] * 1e3:9.1f} {x['unbounded_plan_s'] * 1e3:18.1f}")
        summary["dedupe"][night] = _rounded(x)
    if len(r["dedupe"]) == 2:
        (a, x), (b, y) = sorted(r["dedupe"].items())
        ratio = y["total_s"] / x["total_s"]
        lines.append(f"ratio {b} vs {a} nights: {ratio:.2f}x (target: within 1.5x)")
        summary["dedupe"]["ratio"] = round(ratio, 2)
    lines += ["", "d. the year: main's current snapshot per table, and plan times "
              "(cold manifest cache, best of 3)",
              f"{'after':>6} {'table':>8} {'manifests':>9} {'files':>6} {'snaps':>6} "
              f"{'meta KB':>8} {'load ms':>8} {'full ms':>8} {'one-part ms':>11} {'files':>5}"]
    for night, tabs in sorted(r["checkpoints"].items()):
        for name, x in tabs.items():
            plan = (f"{x['load_s'] * 1e3:8.1f} {x['plan_full_s'] * 1e3:8.1f}"
                    if "plan_full_s" in x else f"{'':8} {'':8}")
            one = (f"{x['plan_one_partition_s'] * 1e3:11.1f} {x['one_partition_files']:5d}"
                   if "plan_one_partition_s" in x else "")
            lines.append(f"{night:>6} {name:>8} {x['manifests']:9d} {x['data_files']:6d} "
                         f"{x['snapshots']:6d} {x['metadata_kb']:8.1f} {plan} {one}".rstrip())
        summary["year"][night] = {name: _rounded(x) for name, x in tabs.items()}
    end, start = r["checkpoints"][n], r["checkpoints"][1]
    for name in ("records", "batches", "ledger"):
        ratios = [f"full scan {end[name]['plan_full_s'] / start[name]['plan_full_s']:.1f}x"]
        if "plan_one_partition_s" in end[name]:
            one = end[name]["plan_one_partition_s"] / start[name]["plan_one_partition_s"]
            ratios.append(f"one partition {one:.1f}x")
        lines.append(f"plan time, night {n} vs night 1, {name}: {', '.join(ratios)}")
    print("\n".join(lines))
    return summary


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nights", type=int, help="nights to simulate (default 365; --quick 60)")
    p.add_argument("--quick", action="store_true", help="60 nights of 400 records")
    p.add_argument("--topics", type=int, default=2)
    p.add_argument("--partitions", type=int, default=4, help="Kafka partitions per topic")
    p.add_argument("--records", type=int, help="records per partition a night (default 500)")
    p.add_argument("--maintenance-every", type=int, default=7,
                   help="run spark_jobs.maintenance every N nights (default %(default)s)")
    p.add_argument("--no-maintenance", dest="maintenance_every", action="store_const", const=0)
    p.add_argument("--retain-last", type=int, default=maintenance.DEFAULT_RETAIN_LAST)
    p.add_argument("--min-files", type=int, default=maintenance.DEFAULT_MIN_FILES)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    p.add_argument("--json", type=Path, help="also write the figures here")
    args = p.parse_args(argv)
    args.nights = args.nights or (60 if args.quick else 365)
    args.records = args.records or (400 if args.quick else 500)
    if args.nights < 1 or args.records < 20:
        p.error("--nights must be positive and --records at least 20")
    t0 = time.perf_counter()
    summary = report(args, simulate(args))
    print(f"# {time.perf_counter() - t0:.0f} s in all")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
