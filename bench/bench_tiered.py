"""Tiered storage: a remote segment (zstd + AES-GCM chunks, as Aiven's plugin stores it) decoded
from local files, next to the same segment decoded as a plain ``.log`` in the same run.

Issue 34 aims at <= 1.5x for the whole Spark job on tiered input; this measures only the
library's share: reading the chunks, AES-256-GCM, zstd and the checks (``RemoteSegment.read``)
on top of ``kafkalog.decode``. Writes, into ``bench/out/`` (reused on later runs):

* ``<size>.log``: uncompressed v2 batches of ~16 KiB (JSON-ish values, one header each) from a
  pool of distinct batches larger than a chunk, base offsets patched (outside the CRC);
* the plugin's three objects for it (``tests/tiered_encoder.py``, the encoder the tests check
  the reader against), chunk.size 4 MiB (the plugin's recommended size), a 2048-bit RSA key.

Timed, best of --repeat, interleaved, the compiled decoder (one core):

    chunks           RemoteSegment.read() alone: the library's own cost
    whole  plain     kafkalog.decode(path of the .log)               the peer
           tiered    kafkalog.decode(RemoteSegment.read())           every chunk read, undone, checked
    ranges plain     kafkalog.decode(path, byte_range=r) for ~64 MiB ranges r starting at a
                     batch (a Spark task's unit)                     the peer
           tiered    each range read into one reused buffer (RemoteSegment.read_into) and
                     decoded as a Slice, as a task would

    .venv/bin/python bench/bench_tiered.py [--size-mib 256] [--repeat 3] [--forms ...]
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import platform
import random
import sys
import tempfile
import time
from pathlib import Path

import kafkalog
from kafkalog.tiered import KeyRing, RemoteSegment
from kafkalog.writer import WriteRecord, encode_v2_batch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import tiered_encoder as enc  # noqa: E402  (the tests' encoder of the plugin's objects)

CHUNK = 4 * 1024 * 1024
BATCH_BYTES = 16 * 1024
POOL_BYTES = 2 * CHUNK  # distinct batches: no chunk repeats itself
RANGE = 64 * 1024 * 1024
FORMS = {"compressed+encrypted": dict(compression=True, key_id="bench"),
         "compressed": dict(compression=True), "encrypted": dict(key_id="bench"),
         "plain-chunks": dict()}


def make_log(path: Path, size: int) -> None:
    rnd = random.Random(34)
    pool = []
    offset = 0
    while sum(map(len, pool)) < POOL_BYTES:
        records = []
        used = 0
        while used < BATCH_BYTES:
            value = json.dumps({"id": rnd.randrange(10**9), "user": f"u{rnd.randrange(10**6)}",
                                "event": rnd.choice(["click", "view", "buy", "scroll"]),
                                "amount": round(rnd.random() * 1000, 2),
                                "pad": "x" * rnd.randrange(40, 90)}).encode()
            records.append(WriteRecord(f"k{rnd.randrange(1000)}".encode(), value,
                                       (("trace", rnd.randbytes(8)),),
                                       1_763_600_000_000 + len(records)))
            used += len(value) + 30
        pool.append(bytearray(encode_v2_batch(0, records)))
    with open(path, "wb") as f:
        written = 0
        i = 0
        while written < size:
            batch = pool[i % len(pool)]
            count = int.from_bytes(batch[23:27], "big") + 1  # lastOffsetDelta + 1
            batch[0:8] = offset.to_bytes(8, "big")
            f.write(batch)
            written += len(batch)
            offset += count
            i += 1


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def task_ranges(log_path: Path, size: int) -> list[tuple[int, int]]:
    """~RANGE-byte ranges that start at a batch, as a Spark task's byte range would."""
    positions = [b.position for b in kafkalog.iter_batches(log_path)]
    found = (bisect.bisect_left(positions, s) for s in range(0, size, RANGE))
    starts = sorted({positions[i] for i in found if i < len(positions)})
    return list(zip(starts, starts[1:] + [size]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mib", type=int, default=256, help="segment size (up to 1024)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--forms", nargs="+", default=["compressed+encrypted"], choices=list(FORMS))
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "out")
    args = ap.parse_args(argv)
    if not 1 <= args.size_mib <= 1024:
        ap.error("--size-mib: 1..1024 (the plugin keeps sizes in Java ints)")
    if not kafkalog.ACCELERATED:
        print("# note: the compiled decoder is not built; figures are the pure-Python path's")
    args.out.mkdir(parents=True, exist_ok=True)
    log_path = args.out / f"tiered-{args.size_mib}MiB.log"
    if not log_path.exists():
        make_log(log_path, args.size_mib * 1024 * 1024)
    log = log_path.read_bytes()
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.hazmat.primitives import serialization

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    print(f"# {platform.python_implementation()} {platform.python_version()}, "
          f"{platform.machine()}, {os.cpu_count()} cpus, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; kafkalog ACCELERATED="
          f"{kafkalog.ACCELERATED}; best of {args.repeat}, interleaved")
    print(f"# segment: {len(log):,} bytes, {kafkalog.decode(log_path).records.num_rows:,} "
          f"records in ~16 KiB uncompressed batches; chunk.size {CHUNK:,}")
    with tempfile.TemporaryDirectory(dir=args.out) as tmp:
        pem = Path(tmp) / "bench.pem"
        pem.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                          serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
        ring = KeyRing.from_pem_files([pem])
        ranges = task_ranges(log_path, len(log))
        print(f"{'form':22} {'stored MB':>9} {'chunks s':>8} | whole: {'plain s':>7} "
              f"{'tiered s':>8} {'ratio':>6} | ranges: {'plain s':>7} {'tiered s':>8} "
              f"{'ratio':>6}")
        for form in args.forms:
            opts = FORMS[form]
            up = enc.upload(log, chunk_size=CHUNK, public_key=key.public_key(),
                            topic="bench", **opts)
            folder = Path(tmp) / form
            up.write_to(folder)
            stored = len(up.objects[up.key("log")])
            del up.objects  # the encoder's copies: not part of what is measured
            seg = RemoteSegment.open(str(folder / up.key("rsm-manifest")), key_ring=ring)
            assert seg.read() == log, form
            buffer = bytearray()

            def plain_ranges():
                for s, e in ranges:
                    kafkalog.decode(log_path, byte_range=(s, e))

            def tiered_ranges():  # a task's loop: one buffer, refilled range after range
                for s, e in ranges:
                    kafkalog.decode(kafkalog.Slice(seg.read_into(buffer, s, e), s))

            runs = {"chunks": seg.read,
                    "plain": lambda: kafkalog.decode(log_path),
                    "tiered": lambda: kafkalog.decode(seg.read()),
                    "plain_ranges": plain_ranges, "tiered_ranges": tiered_ranges}
            t = {name: [] for name in runs}
            for _ in range(args.repeat):  # interleaved; the best of each below
                for name, fn in runs.items():
                    t[name].append(timed(fn))
            b = {k: min(v) for k, v in t.items()}
            print(f"{form:22} {stored / 1e6:9.1f} {b['chunks']:8.3f} |        {b['plain']:7.3f} "
                  f"{b['tiered']:8.3f} {b['tiered'] / b['plain']:5.2f}x |         "
                  f"{b['plain_ranges']:7.3f} {b['tiered_ranges']:8.3f} "
                  f"{b['tiered_ranges'] / b['plain_ranges']:5.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
