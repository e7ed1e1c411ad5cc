"""The latest-per-key refresh against the length of the warehouse's history (issue 35).

Topic ``accounts`` of ``--keys`` keys (default 20,000) over ``--partitions`` partitions
(default 2; key i lives in partition i mod P), run with ``--latest-topics accounts``.
Night 1's segment of a partition loads each of its keys once; every night (night 1 too)
then appends ``--updates`` records over all partitions (default 2,000), on keys drawn at
random, about 10% of them tombstones, in batches of 50. Every tenth batch is a
transaction its producer commits, every tenth (another) one a transaction it aborts, and
each night's last batch is a transaction whose COMMIT is the next night's first entry (a
late marker; the last night's stays open). Each partition rolls a new segment per night
(``kafkalog.writer.SegmentWriter``, one pool of segment files), and a night's snapshot
holds only its last ``--retention`` segments (default 3: hard links), as a
retention-limited copy of the log directory would, so each night decodes one new segment
per partition and finds the others in the ledger.

Every night runs ``spark_jobs.decode.main`` with ``--night`` and publish into one
warehouse (its embedded SQLite catalog) in one shared ``local[CORES]`` session, with no
maintenance in between; each night's summary ``timings`` go to
``bench/out/latest/nights.jsonl`` as it ends (``keyed``: the refresh of
``latest__accounts``; ``decode``: the tasks; ``seconds``: the whole job).

The report: the median refresh of nights 6..10 against the last five nights (**target:
within 1.5x**), the refresh over the night's decode at night 10 and at the last night,
the table's Iceberg metadata (its current ``metadata.json``, its manifests, its folder)
and its number of ``night-`` tags. At the end the table is checked against a replay of
what the bench wrote, a dict per partition written here (no spark_jobs code): every
(partition, key, offset, value) must be the same. ``--profile N`` runs night N under
cProfile (the driver, where the refresh runs) and writes the functions under the refresh
to ``profile-night-N.txt`` (the raw stats to ``.prof``); a profiled night is left out of
the medians. ``--maintain-every N`` runs ``spark_jobs.maintenance.maintain`` after every
N-th night (off by default: the figures are the job's with nothing maintaining the tables).

    .venv/bin/python bench/bench_latest.py [--nights 300] [--keys 20000] [--updates 2000]
        [--partitions 2] [--retention 3] [--profile N ...] [--maintain-every N] [--quick]
        [--json FILE]

``--quick`` is 12 nights of 2,000 keys (the bench's own check).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import shutil
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

TOPIC = "accounts"
DAY_MS = 86_400_000
T0 = dt.date(2025, 12, 1)
T0_MS = 1_764_547_200_000  # 2025-12-01T00:00:00Z
BATCH = 50
TOMBSTONE_SHARE = 0.1
#: the nights whose refresh is the baseline (the first five after the warm-up)
BASELINE = range(6, 11)


def night_of(n: int) -> str:
    return (T0 + dt.timedelta(days=n - 1)).isoformat()


class Partition:
    """One partition's log as the bench writes it, night by night, and what it wrote (for
    the replay): ``("rec", offset, key, value, pid)`` and ``("end", pid, commit)``."""

    def __init__(self, folder: Path, p: int, keys: list[str]):
        self.folder, self.p, self.keys = folder, p, keys
        self.next_offset = 0
        self.entries: list[tuple] = []
        self.open_pid: int | None = None  # a transaction whose marker is the next night's
        self.bases: list[int] = []  # the segments' base offsets, one a night

    def write_night(self, night: int, updates: int) -> None:
        from kafkalog.writer import SegmentWriter, WriteRecord

        rng = random.Random(f"{night}/{self.p}")
        ts = T0_MS + (night - 1) * DAY_MS
        with SegmentWriter(self.folder, self.next_offset) as w:
            if self.open_pid is not None:  # yesterday's last transaction: committed now
                w.append_marker(producer_id=self.open_pid, producer_epoch=0, commit=True,
                                coordinator_epoch=1, timestamp=ts)
                self.entries.append(("end", self.open_pid, True))
                self.open_pid = None
            pairs = [(k, f"init-{k}") for k in self.keys] if night == 1 else []
            for i in range(updates):
                k = rng.choice(self.keys)
                tomb = rng.random() < TOMBSTONE_SHARE
                pairs.append((k, None if tomb else json.dumps({"k": k, "night": night, "i": i})))
            chunks = [pairs[i:i + BATCH] for i in range(0, len(pairs), BATCH)]
            for b, chunk in enumerate(chunks):
                pid = None
                if b == len(chunks) - 1 or b % 10 in (3, 7):
                    pid = 10_000 * night + b  # the last: its COMMIT lands next night
                first = w.next_offset
                recs = [WriteRecord(k.encode(), None if v is None else v.encode(),
                                    timestamp=ts + (first + i) % DAY_MS)
                        for i, (k, v) in enumerate(chunk)]
                if pid is None:
                    w.append(recs, codec="lz4" if b % 2 else "none")
                else:
                    w.append(recs, producer_id=pid, producer_epoch=0, base_sequence=0,
                             transactional=True)
                self.entries += [("rec", first + i, k, v, pid) for i, (k, v) in enumerate(chunk)]
                if pid is not None and b == len(chunks) - 1:
                    self.open_pid = pid
                elif pid is not None:
                    commit = b % 10 == 3
                    w.append_marker(producer_id=pid, producer_epoch=0, commit=commit,
                                    coordinator_epoch=1, timestamp=ts)
                    self.entries.append(("end", pid, commit))
            self.next_offset = w.next_offset
        self.bases.append(w.base_offset)


def snapshot(parts: list[Partition], out: Path, retention: int) -> Path:
    """The log directory a retention-limited copy holds: each partition's last
    ``retention`` segments (hard links into the pool, index files included)."""
    shutil.rmtree(out, ignore_errors=True)
    for part in parts:
        folder = out / f"{TOPIC}-{part.p}"
        folder.mkdir(parents=True)
        for base in part.bases[-retention:]:
            for f in part.folder.glob(f"{base:020d}.*"):
                os.link(f, folder / f.name)
    return out


def replay(entries) -> dict:
    """``{key: (offset, value)}`` of one partition as of the end of ``entries``: records
    outside transactions are visible at once, a transaction's at its COMMIT (never after an
    ABORT, nor while open); per key the visible record at the highest offset, unless it is
    a tombstone."""
    visible, held = [], {}
    for e in entries:
        if e[0] == "rec":
            _, offset, key, value, pid = e
            (visible if pid is None else held.setdefault(pid, [])).append((offset, key, value))
        else:
            _, pid, commit = e
            if commit:
                visible += held.get(pid, [])
            held.pop(pid, None)
    state = {}
    for offset, key, value in sorted(visible):
        if value is None:
            state.pop(key, None)
        else:
            state[key] = (offset, value)
    return state


def table_state(wh: str, table: str) -> dict:
    """``{(partition, key): (offset, value)}`` of the table's ``main``."""
    from spark_jobs.warehouse import Warehouse

    rows = Warehouse(wh).load(table).scan(
        selected_fields=("partition", "key", "offset", "value")).to_arrow().to_pylist()
    out = {}
    for r in rows:
        k = (r["partition"], r["key"].decode())
        assert k not in out, f"a key twice: {k}"
        out[k] = (r["offset"], r["value"].decode())
    return out


def metadata_figures(wh: str, table: str) -> dict:
    """The table's Iceberg metadata: its current metadata.json, the current snapshot's
    manifest list and manifests, the folder's files, its snapshots, its night tags."""
    from spark_jobs import layout
    from spark_jobs.warehouse import Warehouse

    def size(uri: str) -> int:
        return os.path.getsize(uri.removeprefix("file://"))

    t = Warehouse(wh).load(table)
    current = t.current_snapshot()
    manifests = current.manifests(t.io)
    folder = Path(t.metadata_location.removeprefix("file://")).parent
    files = [f for f in folder.iterdir() if f.is_file()]
    return {"metadata_json_bytes": size(t.metadata_location),
            "manifest_list_bytes": size(current.manifest_list),
            "manifests": len(manifests),
            "manifests_bytes": sum(m.manifest_length for m in manifests),
            "metadata_folder_files": len(files),
            "metadata_folder_bytes": sum(f.stat().st_size for f in files),
            "snapshots": len(t.metadata.snapshots),
            "night_tags": sum(1 for r in t.refs() if r.startswith(layout.NIGHT_TAG_PREFIX)),
            "data_files": len(list(t.scan().plan_files()))}


def profile_night(run, out: Path, night: int) -> dict:
    """``run()`` under cProfile; the functions under the refresh into ``out``."""
    import cProfile
    import io
    import pstats

    prof = cProfile.Profile()
    s = prof.runcall(run)
    prof.dump_stats(out.with_suffix(".prof"))
    text = io.StringIO()
    stats = pstats.Stats(prof, stream=text).sort_stats("cumulative")
    # the refresh's own steps (keyed.py, keyed_tables.py) and what each calls
    stats.print_callees(r"keyed(_tables)?\.py|tags\.py")
    stats.print_stats(60)
    out.write_text(f"night {night}: timings {json.dumps(s['timings'])}\n\n" + text.getvalue())
    return s


def median(nights: list[dict], which, key: str) -> float | None:
    vals = [n[key] for n in nights if n["night"] in which and not n.get("profiled")]
    return round(statistics.median(vals), 3) if vals else None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nights", type=int, default=300)
    p.add_argument("--keys", type=int, default=20_000)
    p.add_argument("--updates", type=int, default=2_000)
    p.add_argument("--partitions", type=int, default=2)
    p.add_argument("--retention", type=int, default=3)
    p.add_argument("--cores", type=int, default=2)
    p.add_argument("--profile", type=int, nargs="*", default=[])
    p.add_argument("--maintain-every", type=int, default=0,
                   help="run spark_jobs.maintenance.maintain after every N-th night (ages 0, "
                        "the last 10 snapshots kept besides the tags, as bench_iceberg; "
                        "default 0: never, as bench_history)")
    p.add_argument("--quick", action="store_true", help="12 nights of 2,000 keys")
    p.add_argument("--out", type=Path, default=HERE / "out" / "latest")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    if args.quick:
        args.nights, args.keys = 12, 2_000
    if args.nights < 10:
        p.error("--nights: at least 10 (the baseline is nights 6..10)")
    from spark_jobs import decode, layout, maintenance
    from spark_jobs.session import build_session
    from spark_jobs.warehouse import Warehouse

    table = layout.latest_table_name(TOPIC)
    shutil.rmtree(args.out, ignore_errors=True)
    args.out.mkdir(parents=True)
    pool, wh = args.out / "pool", str(args.out / "warehouse")
    log = (args.out / "nights.jsonl").open("w")
    parts = [Partition(pool / f"{TOPIC}-{i}", i, [f"key-{k:06d}" for k in range(i, args.keys,
                                                                        args.partitions)])
             for i in range(args.partitions)]
    spark = build_session("bench-latest", master=f"local[{args.cores}]",
                          conf={"spark.sql.shuffle.partitions": str(args.cores)})
    nights = []
    try:
        for night in range(1, args.nights + 1):
            for part in parts:
                part.write_night(night, args.updates // args.partitions)
            snap = snapshot(parts, args.out / "snapshot", args.retention)

            def run() -> dict:
                return decode.main(["--input", str(snap), "--output", wh,
                                    "--run-id", f"night-{night:04d}", "--night", night_of(night),
                                    "--latest-topics", TOPIC], spark=spark)

            t0 = time.perf_counter()
            if night in args.profile:
                s = profile_night(run, args.out / f"profile-night-{night}.txt", night)
            else:
                s = run()
            wall = time.perf_counter() - t0
            assert s.get("published") and table in s.get("keyed", {}), s
            row = {"night": night, "wall": round(wall, 3), "seconds": s["seconds"],
                   "keys_changed": s["keyed"][table], "records": s["records"],
                   "actions": s["actions"], **s["timings"],
                   **({"profiled": True} if night in args.profile else {})}
            if args.maintain_every and night % args.maintain_every == 0:
                t1 = time.perf_counter()
                m = maintenance.maintain(Warehouse(wh), older_than_days=0, retain_last=10,
                                         orphan_grace_hours=0)
                row["maintenance"] = {"seconds": round(time.perf_counter() - t1, 3),
                                      **{k: m[k] for k in ("expired_snapshots", "files_compacted",
                                                           "manifests_before", "manifests_after")}}
            nights.append(row)
            log.write(json.dumps(row) + "\n")
            log.flush()
            print(json.dumps({k: row.get(k) for k in ("night", "seconds", "keyed", "decode",
                                                      "commit", "transactions", "publish",
                                                      "keys_changed")}), flush=True)
    finally:
        spark.stop()
        log.close()

    # the check: the table equals the replay of what was written
    want = {(part.p, k): v for part in parts for k, v in replay(part.entries).items()}
    got = table_state(wh, table)
    assert got == want, (f"{len(got)} rows, the replay has {len(want)}; "
                         f"{len(set(got.items()) ^ set(want.items()))} differ")
    late = range(args.nights - 4, args.nights + 1)
    by = {n["night"]: n for n in nights}
    base_keyed, late_keyed = median(nights, BASELINE, "keyed"), median(nights, late, "keyed")
    out = {
        "nights": args.nights, "keys": args.keys, "updates_per_night": args.updates,
        "partitions": args.partitions, "retention": args.retention, "cores": args.cores,
        "maintain_every": args.maintain_every,
        "rows": len(got), "rows_equal_replay": True,
        "keyed_median_s": {"nights_6_10": base_keyed,
                           f"nights_{late.start}_{late.stop - 1}": late_keyed},
        "keyed_growth": round(late_keyed / base_keyed, 2),
        "target": "keyed_growth <= 1.5", "met": late_keyed / base_keyed <= 1.5,
        "decode_median_s": {"nights_6_10": median(nights, BASELINE, "decode"),
                            f"nights_{late.start}_{late.stop - 1}": median(nights, late, "decode")},
        "seconds_median_s": {"nights_6_10": median(nights, BASELINE, "seconds"),
                             f"nights_{late.start}_{late.stop - 1}": median(nights, late,
                                                                            "seconds")},
        "keyed_over_decode": {f"night_{n}": round(by[n]["keyed"] / by[n]["decode"], 2)
                              for n in (10, args.nights)},
        "night_10": {k: by[10][k] for k in ("seconds", "keyed", "decode", "commit", "publish")},
        f"night_{args.nights}": {k: by[args.nights][k]
                                 for k in ("seconds", "keyed", "decode", "commit", "publish")},
        "metadata": metadata_figures(wh, table),
        "load_after": os.getloadavg(),
    }
    print(json.dumps(out, indent=2))
    (args.out / "result.json").write_text(json.dumps(out, indent=2) + "\n")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0 if out["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
