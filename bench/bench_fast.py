"""Decode throughput of kafkalog's compiled path, next to its pure-Python path,
kafka-python, aiokafka's Cython reader and the floor, from one run on one core.

Segments (written once into bench/out/, reused afterwards; reproducible: fixed
seeds, fixed timestamps) are built with kafka-python's own batch builder, so the
input does not come from kafkalog's writer:

* shapes: "small" = 200,000 records with ~180-byte JSON values, a short key and
  one 8-byte header (like ``make bench``: ~36 MB of values); "large" = 20,000
  records with ~4 KiB JSON values (~82 MB), same key/header;
* codecs: none, gzip, lz4, zstd;
* batches: filled the way a producer fills them with ``batch.size`` = 16384
  (the Java producer's default): kafka-python's builder takes records until the
  next one would push the *uncompressed* records past ``--batch-bytes``; then
  the batch is compressed. (Java's producer compares an estimate of the
  *compressed* size, so its compressed batches hold more records than these.)

Decoders, each timed best of ``--repeat`` runs, interleaved round-robin so that
machine drift hits all of them alike, process pinned to one CPU:

(a) ``kafkalog.records_table(path)``: the compiled path, CRC verified;
(b) the same call with ``KAFKALOG_PURE_PYTHON=1`` set in ``os.environ`` around it;
(c) kafka-python: ``MemoryRecords`` -> each batch's ``validate_crc()`` and each
    record's offset/timestamp/key/value/headers;
(d) aiokafka: its Cython ``MemoryRecords`` (``aiokafka.record._crecords``), same
    work as (c);
(e) the floor, the least any decoder must do: walk the framing, CRC-32C
    (``crc32c.crc32c``) over each batch's CRC range (compared to the stored
    CRC), one copy of the records payload (``bytes(memoryview)``), and its
    decompression through the Python bindings of the same C libraries (zlib for
    gzip, ``lz4.frame``, a ``zstandard`` stream: ``decompressobj(read_across_frames)``;
    kafkalog's compiled path calls liblz4/libzstd directly, its pure path these bindings).

kafkalog reads the file (memory-mapped, page cache warm); (c), (d) and (e) get
the file's bytes already in memory (the time to read them is printed).
MB/s = on-disk bytes per second; raw MB/s = uncompressed record bytes per second
(the same amount for every codec). Ratios are times: compiled/aiokafka =
aiokafka time / compiled time (above 1: compiled is faster); compiled/floor =
floor time / compiled time (1.0 would be as fast as the floor); pure/kafka-python
= kafka-python time / pure time.

    .venv/bin/python bench/bench_fast.py [--quick] [--json FILE] [--repeat 5]
        [--shape small large] [--codec none gzip lz4 zstd] [--batch-bytes 16384]

Exits 1 if the decoders do not all decode the same number of records (or a
CRC fails), 2 on a usage error.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import struct
import sys
import time
import zlib
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path

import crc32c
import lz4.frame
import pyarrow.compute as pc
import zstandard
from kafka.record import MemoryRecords as KafkaPythonMemoryRecords
from kafka.record.default_records import DefaultRecordBatchBuilder

import kafkalog
from clients import consume

try:
    from aiokafka.record.memory_records import MemoryRecords as AioMemoryRecords
except ImportError:  # pragma: no cover - depends on the environment
    raise SystemExit(
        "aiokafka is not installed: .venv/bin/pip install -c requirements.lock "
        "-r bench/requirements.txt"
    )

PURE_ENV = "KAFKALOG_PURE_PYTHON"
CODEC_IDS = {"none": 0, "gzip": 1, "lz4": 3, "zstd": 4}
SHAPES = {"small": 200_000, "large": 20_000}
GENERATOR = "v1"  # bump when the segment contents change (part of the file name)
BASE_TS = 1_763_600_000_000

_SIZE = struct.Struct(">i")
_CRC = struct.Struct(">I")
_COUNT = struct.Struct(">i")
LOG_OVERHEAD = 12
CRC_AT, ATTRIBUTES_AT, COUNT_AT, RECORDS_AT = 17, 21, 57, 61


# ------------------------------------------------------------------ segments
def _words(rnd: random.Random, n: int = 400) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    return ["".join(rnd.choice(letters) for _ in range(rnd.randrange(3, 11))) for _ in range(n)]


def _small_value(rnd: random.Random, i: int, ts: int) -> bytes:
    """~180 bytes, as in bench_decode.py."""
    return json.dumps({"id": i, "user": f"user-{rnd.randrange(10**6):06d}",
                       "event": rnd.choice(["click", "view", "buy", "scroll"]),
                       "amount": round(rnd.random() * 1000, 2),
                       "ts": ts, "pad": "x" * rnd.randrange(40, 70)}).encode()


def _large_value(rnd: random.Random, i: int, ts: int, words: list[str]) -> bytes:
    """~4 KiB: an order-like JSON document with line items of random words."""
    target = rnd.randrange(3700, 4500)
    doc = {"id": i, "user": f"user-{rnd.randrange(10**6):06d}", "ts": ts,
           "currency": rnd.choice(["EUR", "USD", "GBP"]), "items": []}
    size = len(json.dumps(doc))
    while size < target:
        item = {"sku": f"SKU-{rnd.randrange(10**6):06d}", "qty": rnd.randrange(1, 20),
                "price": round(rnd.random() * 500, 2),
                "name": " ".join(rnd.choice(words) for _ in range(rnd.randrange(2, 7)))}
        doc["items"].append(item)
        size += len(json.dumps(item)) + 2
    return json.dumps(doc).encode()


def make_segment(path: Path, shape: str, n_records: int, codec: str, batch_bytes: int) -> None:
    """Write ``path`` batch by batch (to a temporary name, renamed at the end)."""
    rnd = random.Random(f"{shape}-{n_records}")  # same records for every codec
    words = _words(rnd)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        offset = 0
        builder = None
        pending = None  # a record the previous batch had no room for

        def flush():
            buf = builder.build()
            buf[0:8] = base.to_bytes(8, "big")  # base offset is outside the CRC
            f.write(buf)

        base = 0
        while offset < n_records or pending is not None:
            if pending is None:
                ts = BASE_TS + offset
                value = (_small_value(rnd, offset, ts) if shape == "small"
                         else _large_value(rnd, offset, ts, words))
                pending = (offset, ts, f"k{rnd.randrange(1000)}".encode(), value,
                           [("trace", rnd.randbytes(8))])
                offset += 1
            if builder is None:
                base = pending[0]
                builder = DefaultRecordBatchBuilder(
                    magic=2, compression_type=CODEC_IDS[codec], is_transactional=False,
                    producer_id=-1, producer_epoch=-1, base_sequence=-1, batch_size=batch_bytes)
            o, ts, key, value, headers = pending
            if builder.append(o - base, timestamp=ts, key=key, value=value,
                              headers=headers) is None:
                flush()
                builder = None
                continue  # retry the pending record in a new batch
            pending = None
        if builder is not None:
            flush()
    tmp.replace(path)


def segment_stats(data) -> tuple[int, int]:
    """(batches, records) from the batch headers."""
    mv = memoryview(data)
    pos = batches = records = 0
    while pos < len(mv):
        (size,) = _SIZE.unpack_from(mv, pos + 8)
        records += _COUNT.unpack_from(mv, pos + COUNT_AT)[0]
        batches += 1
        pos += LOG_OVERHEAD + size
    return batches, records


# ------------------------------------------------------------------ decoders
@contextmanager
def pure_python(on: bool):
    """Set (or clear) KAFKALOG_PURE_PYTHON around a call, restore it after."""
    old = os.environ.get(PURE_ENV)
    if on:
        os.environ[PURE_ENV] = "1"
    else:
        os.environ.pop(PURE_ENV, None)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(PURE_ENV, None)
        else:
            os.environ[PURE_ENV] = old


def _table_rows(table) -> int:
    if table.num_rows and not pc.all(table.column("crc_valid")).as_py():
        raise SystemExit("kafkalog: a batch failed its CRC in the benchmark file")
    return table.num_rows


def kafkalog_compiled(path: Path, data: bytes, codec: str):
    with pure_python(False):
        return kafkalog.records_table(path)


def kafkalog_pure(path: Path, data: bytes, codec: str):
    with pure_python(True):
        return kafkalog.records_table(path)


def kafka_python(path: Path, data: bytes, codec: str) -> int:
    return consume(KafkaPythonMemoryRecords, "kafka-python", data)


def aiokafka(path: Path, data: bytes, codec: str) -> int:
    return consume(AioMemoryRecords, "aiokafka", data)


def _floor_decompressor(codec: str):
    if codec == "gzip":
        return lambda payload: zlib.decompress(payload, 31)
    if codec == "lz4":
        return lz4.frame.decompress
    if codec == "zstd":
        dctx = zstandard.ZstdDecompressor()
        return lambda payload: dctx.decompressobj(read_across_frames=True).decompress(payload)
    return None


def floor(path: Path, data: bytes, codec: str) -> tuple[int, int]:
    """(records, raw payload bytes): CRC-32C + one payload copy + decompression."""
    decompress = _floor_decompressor(codec)
    mv = memoryview(data)
    end = len(mv)
    pos = n = raw = 0
    size_at, crc_at, count_at = _SIZE.unpack_from, _CRC.unpack_from, _COUNT.unpack_from
    crc = crc32c.crc32c
    while pos < end:
        stop = pos + LOG_OVERHEAD + size_at(mv, pos + 8)[0]
        if crc(mv[pos + ATTRIBUTES_AT:stop]) != crc_at(mv, pos + CRC_AT)[0]:
            raise SystemExit(f"floor: CRC mismatch at {pos} in the benchmark file")
        payload = bytes(mv[pos + RECORDS_AT:stop])
        if decompress is not None:
            payload = decompress(payload)
        raw += len(payload)
        n += count_at(mv, pos + COUNT_AT)[0]
        pos = stop
    return n, raw


# ------------------------------------------------------------------- running
def measure(decoders, path: Path, data: bytes, codec: str, repeat: int):
    """Best time and record count per decoder, runs interleaved round-robin."""
    best = {name: float("inf") for name, _ in decoders}
    counts: dict[str, set[int]] = {name: set() for name, _ in decoders}
    raw = 0
    for _ in range(repeat):
        for name, fn in decoders:
            gc.collect()
            t0 = time.perf_counter()
            result = fn(path, data, codec)
            t = time.perf_counter() - t0
            if isinstance(result, int):
                n = result
            elif isinstance(result, tuple):
                n, raw = result
            else:
                n = _table_rows(result)
            del result
            best[name] = min(best[name], t)
            counts[name].add(n)
    return best, counts, raw


def pin_to_one_cpu(cpu: int | None) -> int | None:
    if not hasattr(os, "sched_setaffinity"):
        return None
    allowed = sorted(os.sched_getaffinity(0))
    cpu = allowed[-1] if cpu is None else cpu
    os.sched_setaffinity(0, {cpu})
    return cpu


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "?"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="a tenth of the records and 2 runs: a smoke run")
    ap.add_argument("--repeat", type=int, help="runs per decoder, best kept (default 5, quick 2)")
    ap.add_argument("--shape", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--codec", nargs="+", default=list(CODEC_IDS), choices=list(CODEC_IDS))
    ap.add_argument("--small-records", type=int, default=SHAPES["small"])
    ap.add_argument("--large-records", type=int, default=SHAPES["large"])
    ap.add_argument("--batch-bytes", type=int, default=16384,
                    help="producer batch.size: uncompressed record bytes per batch (16384)")
    ap.add_argument("--cpu", type=int, help="CPU to pin to (default: the last one allowed)")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "out")
    ap.add_argument("--json", type=Path, metavar="FILE", help="also write the results here")
    args = ap.parse_args(argv)
    repeat = args.repeat or (2 if args.quick else 5)
    n_by_shape = {"small": args.small_records, "large": args.large_records}
    if args.quick:
        n_by_shape = {k: max(1, v // 10) for k, v in n_by_shape.items()}
    args.out.mkdir(parents=True, exist_ok=True)

    cpu = pin_to_one_cpu(args.cpu)
    # None: this kafkalog does not say (ACCELERATED not exported yet)
    accelerated = getattr(kafkalog, "ACCELERATED", None)
    aio_c = "_crecords" in type(AioMemoryRecords).__module__ or \
        "_crecords" in AioMemoryRecords.__module__
    env = {
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "machine": platform.machine(), "cpu_model": _cpu_model(), "cpus": os.cpu_count(),
        "pinned_cpu": cpu, "repeat": repeat, "batch_bytes": args.batch_bytes,
        "quick": args.quick, "kafkalog": getattr(kafkalog, "__version__", "?"),
        "kafkalog_accelerated": accelerated, "kafka-python": _version("kafka-python"),
        "aiokafka": _version("aiokafka"), "aiokafka_c_extension": aio_c,
        "crc32c": _version("crc32c"), "lz4": _version("lz4"),
        "zstandard": _version("zstandard"), "pyarrow": _version("pyarrow"),
    }
    print(f"# {env['python']}, {env['machine']}, {env['cpu_model']}, {env['cpus']} cpus; "
          f"pinned to cpu {cpu}; best of {repeat} runs, decoders interleaved")
    print(f"# kafkalog {env['kafkalog']} (ACCELERATED="
          f"{'not exported' if accelerated is None else accelerated}), kafka-python "
          f"{env['kafka-python']}, aiokafka {env['aiokafka']} "
          f"({'Cython reader' if aio_c else 'PURE PYTHON reader'}), crc32c {env['crc32c']}, "
          f"lz4 {env['lz4']}, zstandard {env['zstandard']}, pyarrow {env['pyarrow']}")
    print(f"# batches: kafka-python DefaultRecordBatchBuilder, batch.size {args.batch_bytes} "
          "bytes of uncompressed records; MB/s = on-disk bytes, raw MB/s = uncompressed "
          "record bytes")
    if accelerated is None:
        print("# note: kafkalog.ACCELERATED is not exported: whether (a) runs compiled code "
              "cannot be checked; compare (a) with (b)")
    elif not accelerated:
        print("# WARNING: kafkalog.ACCELERATED is false (compiled path not built): "
              "(a) measures the pure-Python path too")
    if os.environ.get(PURE_ENV):
        print(f"# note: {PURE_ENV} was set in the environment; it is cleared for (a)")
    aio_label = f"(d) aiokafka {env['aiokafka']}" + (" Cython" if aio_c else " pure!")
    labels = {
        "compiled": "(a) kafkalog records_table compiled",
        "pure": "(b) kafkalog records_table pure",
        "kafka-python": f"(c) kafka-python {env['kafka-python']}",
        "aiokafka": aio_label,
        "floor": "(e) floor: crc32c+copy+codec",
    }
    decoders = [("compiled", kafkalog_compiled), ("pure", kafkalog_pure),
                ("kafka-python", kafka_python), ("aiokafka", aiokafka), ("floor", floor)]

    results = []
    failures = []
    for shape in args.shape:
        for codec in args.codec:
            n_records = n_by_shape[shape]
            path = args.out / (f"fast-{GENERATOR}-{shape}-{codec}-{n_records}"
                               f"-b{args.batch_bytes}.log")
            if not path.exists():
                t0 = time.perf_counter()
                make_segment(path, shape, n_records, codec, args.batch_bytes)
                print(f"# wrote {path} in {time.perf_counter() - t0:.1f} s")
            t0 = time.perf_counter()
            data = path.read_bytes()
            read_ms = (time.perf_counter() - t0) * 1e3
            n_batches, n_header = segment_stats(data)
            best, counts, raw = measure(decoders, path, data, codec, repeat)
            disk_mb, raw_mb = len(data) / 1e6, raw / 1e6
            seg = f"{shape}/{codec}"
            print()
            print(f"== {seg}: {n_header:,} records in {n_batches:,} batches "
                  f"({n_header / n_batches:.1f} records/batch), {disk_mb:.1f} MB on disk, "
                  f"{raw_mb:.1f} MB of records; file read into memory for (c)-(e): "
                  f"{read_ms:.0f} ms")
            print(f"{'decoder':38} {'records/s':>12} {'MB/s':>8} {'raw MB/s':>9} {'best ms':>9}")
            row = {"segment": seg, "shape": shape, "codec": codec, "file": str(path),
                   "records": n_header, "batches": n_batches, "disk_bytes": len(data),
                   "raw_bytes": raw, "read_ms": read_ms, "decoders": {}}
            for name, _ in decoders:
                t = best[name]
                n = next(iter(counts[name])) if len(counts[name]) == 1 else -1
                print(f"{labels[name]:38} {n / t:12,.0f} {disk_mb / t:8.1f} "
                      f"{raw_mb / t:9.1f} {t * 1e3:9.1f}")
                row["decoders"][name] = {"label": labels[name], "seconds": t,
                                         "records": sorted(counts[name]),
                                         "records_per_s": n / t, "mb_per_s": disk_mb / t,
                                         "raw_mb_per_s": raw_mb / t}
            row["ratios"] = {
                "compiled_vs_aiokafka": best["aiokafka"] / best["compiled"],
                "compiled_vs_floor": best["floor"] / best["compiled"],
                "pure_vs_kafka_python": best["kafka-python"] / best["pure"],
            }
            seen = {name: sorted(c) for name, c in counts.items()}
            row["records_ok"] = all(c == [n_header] for c in seen.values())
            if not row["records_ok"]:
                msg = f"{seg}: decoders disagree on the record count ({n_header} in the " \
                      f"batch headers): {seen}"
                print(f"!! {msg}")
                failures.append(msg)
            results.append(row)
            del data

    print()
    print(f"{'segment':12} {'compiled/aiokafka':>18} {'compiled/floor':>15} "
          f"{'pure/kafka-python':>18}")
    for row in results:
        r = row["ratios"]
        print(f"{row['segment']:12} {r['compiled_vs_aiokafka']:17.2f}x "
              f"{r['compiled_vs_floor']:15.2f} {r['pure_vs_kafka_python']:17.2f}x")
    print("(times: aiokafka/compiled, floor/compiled (1.00 = as fast as the floor), "
          "kafka-python/pure)")
    if accelerated is False:
        print("# WARNING: compiled path not built; 'compiled' above is the pure-Python path")

    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"environment": env, "results": results,
                                         "failures": failures}, indent=2) + "\n")
        print(f"# results written to {args.json}")
    if failures:
        print("FAILED: " + "; ".join(failures), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
