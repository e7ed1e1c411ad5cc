"""Peak memory of streaming a >= 1 GiB segment through kafkalog.iter_record_batches.

Writes (once; reused afterwards) a segment of at least ``--size-gib`` GiB into
bench/out/, streaming: a few dozen distinct v2 batches are encoded with
``kafkalog.writer.encode_v2_batch`` (three quarters of the bytes ~180-byte JSON
records in 16 KiB batches, a quarter ~4 KiB records), then written over and
over with the base offset patched into bytes 0..8 (outside the CRC, so every
batch still verifies and offsets keep increasing). A sidecar ``.json`` holds the
record count; it is written last, so a half-written segment is never reused.

Then, for each path (compiled, and pure Python via ``KAFKALOG_PURE_PYTHON=1``),
a child Python process decodes the file with ``kafkalog.iter_record_batches(path)``
(CRC verified), sums the rows, and reports its peak RSS
(``resource.getrusage(RUSAGE_SELF).ru_maxrss``, KiB on Linux) and its time.
The parent also samples the child's /proc/PID/status every 10 ms to split the
resident memory into anonymous (heap) and file-backed (e.g. memory-mapped
segment pages) parts; the verdict uses ru_maxrss only.

    .venv/bin/python bench/bench_memory.py [--size-gib 1] [--codec none|lz4]
        [--path compiled pure] [--limit-mib 512] [--json FILE]

Exit status: 0 every child stayed below the limit and decoded every record;
1 otherwise (peak RSS >= limit, wrong row count, child failed).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

PURE_ENV = "KAFKALOG_PURE_PYTHON"
GENERATOR = "v1"  # bump when the segment contents change (part of the file name)
BASE_TS = 1_763_600_000_000
CHUNK = 8 << 20  # bytes buffered before each write


# ------------------------------------------------------------------ segment
def _templates(codec: str) -> list[tuple[bytes, int]]:
    """Distinct (batch bytes with base offset 0, offsets it spans)."""
    from kafkalog.writer import WriteRecord, encode_v2_batch

    rnd = random.Random(7)
    out = []

    def batch(records):
        data = encode_v2_batch(0, records, codec=codec)
        out.append((data, len(records)))

    for b in range(48):  # small records, ~16 KiB of them per batch
        records, size, i = [], 0, 0
        while size < 16384 - 200:
            ts = BASE_TS + b * 100 + i
            value = json.dumps({"id": i, "user": f"user-{rnd.randrange(10**6):06d}",
                                "event": rnd.choice(["click", "view", "buy", "scroll"]),
                                "amount": round(rnd.random() * 1000, 2), "ts": ts,
                                "pad": "x" * rnd.randrange(40, 70)}).encode()
            records.append(WriteRecord(f"k{rnd.randrange(1000)}".encode(), value,
                                       headers=(("trace", rnd.randbytes(8)),), timestamp=ts))
            size += len(value) + 20
            i += 1
        batch(records)
    for b in range(16):  # ~4 KiB records, 4 per batch
        records = []
        for i in range(4):
            ts = BASE_TS + b * 100 + i
            value = json.dumps({"id": i, "ts": ts, "items": [
                {"sku": f"SKU-{rnd.randrange(10**6):06d}", "qty": rnd.randrange(1, 20),
                 "price": round(rnd.random() * 500, 2)} for _ in range(rnd.randrange(60, 75))
            ]}).encode()
            records.append(WriteRecord(f"k{rnd.randrange(1000)}".encode(), value,
                                       headers=(("trace", rnd.randbytes(8)),), timestamp=ts))
        batch(records)
    return out


def write_segment(path: Path, target_bytes: int, codec: str) -> dict:
    """Stream ``target_bytes`` (or a little more) of batches into ``path``."""
    templates = _templates(codec)
    small = [t for t in templates[:48]]
    large = [t for t in templates[48:]]
    # three quarters of the bytes small-record batches, a quarter large-record ones
    small_bytes = sum(len(d) for d, _ in small)
    large_bytes = sum(len(d) for d, _ in large)
    cycle = small * max(1, round(3 * large_bytes / small_bytes)) + large
    tmp = path.with_suffix(".tmp")
    written = offset = batches = 0
    buf = bytearray()
    with open(tmp, "wb") as f:
        while written < target_bytes:
            for data, n in cycle:
                start = len(buf)
                buf += data
                buf[start:start + 8] = offset.to_bytes(8, "big")  # outside the CRC
                offset += n
                batches += 1
                written += len(data)
                if len(buf) >= CHUNK:
                    f.write(buf)
                    buf.clear()
                if written >= target_bytes:
                    break
        f.write(buf)
    tmp.replace(path)
    meta = {"bytes": written, "records": offset, "batches": batches, "codec": codec,
            "generator": GENERATOR}
    path.with_suffix(".json").write_text(json.dumps(meta) + "\n")
    return meta


def ensure_partitions(root: Path, want: dict, topic: str, partitions: int, per_bytes: int,
                      after_log=None) -> tuple[Path, dict]:
    """``root/<topic>-<p>/00000000000000000000.log`` for each partition, ``per_bytes`` each
    (even partitions uncompressed, odd ones lz4), reused while ``root/meta.json`` holds
    ``want``; ``after_log(log)`` adds what a bench needs beside each segment. Its meta:
    ``want`` with the records and bytes written."""
    meta_path = root / "meta.json"
    if meta_path.exists():
        meta = json.loads(meta_path.read_text())
        if {k: meta.get(k) for k in want} == want:
            return root, meta
    shutil.rmtree(root, ignore_errors=True)
    records = size = 0
    for p in range(partitions):
        d = root / f"{topic}-{p}"
        d.mkdir(parents=True)
        log = d / "00000000000000000000.log"
        m = write_segment(log, per_bytes, "none" if p % 2 == 0 else "lz4")
        log.with_suffix(".json").unlink()
        records += m["records"]
        size += m["bytes"]
        if after_log is not None:
            after_log(log)
    meta = dict(want, records=records, bytes=size)
    meta_path.write_text(json.dumps(meta) + "\n")
    return root, meta


def ensure_segment(out: Path, size_gib: float, codec: str) -> tuple[Path, dict, str]:
    target = int(size_gib * (1 << 30))
    path = out / f"memory-{GENERATOR}-{codec}-{target >> 20}MiB.log"
    meta_path = path.with_suffix(".json")
    if path.exists() and meta_path.exists():
        meta = json.loads(meta_path.read_text())
        if meta.get("bytes") == path.stat().st_size:
            return path, meta, "reused"
    t0 = time.perf_counter()
    meta = write_segment(path, target, codec)
    return path, meta, f"written in {time.perf_counter() - t0:.1f} s"


# -------------------------------------------------------------------- child
def child(path: str) -> int:
    """Decode ``path`` in this process; print one JSON line with the figures."""
    import pyarrow.compute as pc

    import kafkalog

    rss_after_import = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    rows = batches = 0
    crc_ok = True
    max_batch_bytes = 0
    t0 = time.perf_counter()
    for rb in kafkalog.iter_record_batches(path):
        rows += rb.num_rows
        batches += 1
        max_batch_bytes = max(max_batch_bytes, rb.nbytes)
        if rb.num_rows and not pc.all(rb.column("crc_valid")).as_py():
            crc_ok = False
        del rb
    seconds = time.perf_counter() - t0
    print(json.dumps({
        "rows": rows, "record_batches": batches, "max_record_batch_bytes": max_batch_bytes,
        "crc_ok": crc_ok, "seconds": seconds,
        "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        "maxrss_after_import_kib": rss_after_import,
        "accelerated": getattr(kafkalog, "ACCELERATED", None),
        "pure_env": os.environ.get(PURE_ENV),
    }))
    return 0


def _status_kib(pid: int) -> dict[str, int]:
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("VmRSS", "RssAnon", "RssFile", "RssShmem"):
                    out[key] = int(rest.split()[0])
    except (OSError, ValueError, IndexError):
        pass
    return out


def run_child(path: Path, pure: bool, timeout: float) -> dict:
    env = dict(os.environ)
    if pure:
        env[PURE_ENV] = "1"
    else:
        env.pop(PURE_ENV, None)
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child", str(path)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peaks: dict[str, int] = {}
    done = threading.Event()

    def sample():
        while not done.is_set():
            for key, kib in _status_kib(proc.pid).items():
                peaks[key] = max(peaks.get(key, 0), kib)
            done.wait(0.01)

    sampler = threading.Thread(target=sample, daemon=True)
    t0 = time.perf_counter()
    sampler.start()
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
        done.set()
        return {"error": f"timed out after {timeout:.0f} s", "stderr": stderr[-2000:]}
    finally:
        done.set()
        sampler.join()
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        return {"error": f"child exited {proc.returncode}", "stderr": stderr[-4000:]}
    result = json.loads(stdout.strip().splitlines()[-1])
    result["wall_seconds"] = wall
    result["sampled_peak_kib"] = peaks
    return result


# --------------------------------------------------------------------- main
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-gib", type=float, default=1.0, help="segment size (at least 1)")
    ap.add_argument("--codec", choices=("none", "lz4"), default="none")
    ap.add_argument("--path", nargs="+", choices=("compiled", "pure"),
                    default=["compiled", "pure"])
    ap.add_argument("--limit-mib", type=float, default=512.0)
    ap.add_argument("--timeout", type=float, default=1800.0, help="per child, seconds")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "out")
    ap.add_argument("--json", type=Path, metavar="FILE", help="also write the results here")
    ap.add_argument("--child", metavar="SEGMENT", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child(args.child)
    if args.size_gib < 1:
        ap.error("--size-gib must be at least 1")

    args.out.mkdir(parents=True, exist_ok=True)
    path, meta, how = ensure_segment(args.out, args.size_gib, args.codec)
    limit_kib = args.limit_mib * 1024
    print(f"# {platform.python_implementation()} {platform.python_version()}, "
          f"{platform.machine()}, {os.cpu_count()} cpus")
    print(f"# segment {path}: {meta['bytes']:,} bytes ({meta['bytes'] / (1 << 30):.2f} GiB), "
          f"codec {meta['codec']}, {meta['records']:,} records in {meta['batches']:,} batches "
          f"({how})")
    print(f"# child: kafkalog.iter_record_batches(path) (CRC verified), rows summed; "
          f"limit: peak RSS (ru_maxrss) < {args.limit_mib:.0f} MiB")
    print(f"{'path':9} {'rows':>12} {'seconds':>8} {'records/s':>11} {'MB/s':>7} "
          f"{'peak RSS':>10} {'after import':>13} {'sampled anon':>13} {'sampled file':>13}  "
          "verdict")
    failures = []
    results = {}
    for name in args.path:
        r = run_child(path, pure=(name == "pure"), timeout=args.timeout)
        results[name] = r
        if "error" in r:
            print(f"{name:9} FAILED: {r['error']}\n{r['stderr']}")
            failures.append(f"{name}: {r['error']}")
            continue
        mib = r["maxrss_kib"] / 1024
        peaks = r["sampled_peak_kib"]
        problems = []
        if r["maxrss_kib"] >= limit_kib:
            problems.append(f"peak RSS {mib:.1f} MiB >= {args.limit_mib:.0f} MiB "
                            f"(over by {mib - args.limit_mib:.1f} MiB)")
        if r["rows"] != meta["records"]:
            problems.append(f"{r['rows']:,} rows, the segment holds {meta['records']:,}")
        if not r["crc_ok"]:
            problems.append("crc_valid false in some rows")
        verdict = "FAIL: " + "; ".join(problems) if problems else \
            f"ok (< {args.limit_mib:.0f} MiB)"
        print(f"{name:9} {r['rows']:12,} {r['seconds']:8.1f} {r['rows'] / r['seconds']:11,.0f} "
              f"{meta['bytes'] / 1e6 / r['seconds']:7.1f} {mib:7.1f} MiB "
              f"{r['maxrss_after_import_kib'] / 1024:9.1f} MiB "
              f"{peaks.get('RssAnon', 0) / 1024:9.1f} MiB {peaks.get('RssFile', 0) / 1024:9.1f} MiB"
              f"  {verdict}")
        if problems:
            failures.append(f"{name}: " + "; ".join(problems))
        r["verdict"] = verdict
    print("(peak RSS = the child's ru_maxrss; after import = ru_maxrss before decoding; "
          "sampled anon/file = highest RssAnon/RssFile seen in /proc/PID/status every 10 ms)")
    accel = {n: r.get("accelerated") for n, r in results.items() if "error" not in r}
    if accel and not any(accel.values()):
        print(f"# note: kafkalog.ACCELERATED in the children: {accel}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"segment": str(path), "meta": meta,
                                         "limit_mib": args.limit_mib, "results": results,
                                         "failures": failures}, indent=2) + "\n")
        print(f"# results written to {args.json}")
    if failures:
        print("FAILED: " + " | ".join(failures), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
