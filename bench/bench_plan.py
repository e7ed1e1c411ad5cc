"""Planner: reading the ``.index`` of every big segment, one at a time or 16 at a time.

The job's planner reads each split-worthy segment's ``.index`` on the driver to
find split positions (``decode.read_index_positions``). On S3 every
read is a round trip, so a snapshot of thousands of big segments waited on them
one after another. This writes ``--files`` ``.index`` objects to an S3 server
(a ``moto_server`` process on 127.0.0.1 it starts and stops, or ``--endpoint``)
and times both ways from one run, best of ``--repeat``, interleaved:

    .venv/bin/python bench/bench_plan.py [--files 200] [--entries 32768] [--endpoint URL]

A local server answers in about a millisecond; a real S3 endpoint takes tens of
milliseconds per request, so the gain there is larger than measured here.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from spark_jobs import decode, storage  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_moto() -> tuple[subprocess.Popen, str]:
    port = _free_port()
    proc = subprocess.Popen([str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1",
                             "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
            return proc, url
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit(f"moto_server did not start on {url}")


def index_bytes(entries: int) -> bytes:
    # relative offset, position: a batch every 4 KiB, as a broker indexes them
    return b"".join(struct.pack(">ii", 10 * i + 9, 4096 * i) for i in range(entries))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=200)
    ap.add_argument("--entries", type=int, default=32768, help="entries per .index (8 bytes each)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--endpoint", help="an S3 endpoint to use instead of a local moto_server")
    args = ap.parse_args(argv)
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    proc = None
    endpoint = args.endpoint
    if endpoint is None:
        proc, endpoint = _start_moto()
    try:
        s3 = storage.S3Config.from_env(endpoint)
        bucket = f"bench-plan-{os.getpid()}"
        s3.client().create_bucket(Bucket=bucket)
        body = index_bytes(args.entries)
        uris = []
        for i in range(args.files):
            key = f"snap/t-{i}/{0:020d}.index"
            s3.client().put_object(Bucket=bucket, Key=key, Body=body)
            uris.append(f"s3://{bucket}/{key}")
        print(f"# {args.files} .index objects of {args.entries:,} entries ({len(body):,} bytes) "
              f"on {endpoint}; best of {args.repeat}, interleaved")
        best = {"one at a time": float("inf"), "16 at a time": float("inf")}
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            one = {u: decode.index_positions(u, s3) for u in uris}
            best["one at a time"] = min(best["one at a time"], time.perf_counter() - t0)
            t0 = time.perf_counter()
            pooled = decode.read_index_positions(uris, s3)
            best["16 at a time"] = min(best["16 at a time"], time.perf_counter() - t0)
            if pooled != one or len(one[uris[0]]) != args.entries:
                raise SystemExit("the two ways read different positions")
        for name, t in best.items():
            print(f"{name:15s} {t:8.3f} s  {args.files / t:8.1f} files/s")
        print(f"speed-up: {best['one at a time'] / best['16 at a time']:.2f}x")
    finally:
        if proc is not None:
            os.kill(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
