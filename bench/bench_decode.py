"""Decode throughput: kafkalog's pure-Python decoder next to kafka-python, one run, one core.

(The compiled fast path, aiokafka and the floor are in bench_fast.py.)

Writes the segments it measures with kafka-python's own batch builder (so the
input does not come from our writer), then times, best of --repeat runs:

* kafka-python: MemoryRecords -> every batch's validate_crc() and every record's
  offset/timestamp/key/value/headers (what any consumer touches);
* kafkalog iter_batches: Batch and Record objects, CRC verified;
* kafkalog records_table: the Arrow table, CRC verified.

Figures are printed as records/s, MB/s and the ratio to kafka-python measured in
the same run (this machine is noisy; compare ratios, not absolute numbers).

    .venv/bin/python bench/bench_decode.py [--records 200000] [--codec none lz4 ...]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import time
from pathlib import Path

os.environ.setdefault("KAFKALOG_PURE_PYTHON", "1")  # this benchmark is about the pure-Python decoder

from kafka.record import MemoryRecords
from kafka.record.default_records import DefaultRecordBatchBuilder

import kafkalog
from clients import consume

CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def make_segment(path: Path, n_records: int, codec: str, per_batch: int = 200) -> int:
    """~180-byte JSON values with one header each, like the issue's reference file."""
    rnd = random.Random(42)
    out = bytearray()
    offset = 0
    ts = 1_763_600_000_000
    while offset < n_records:
        count = min(per_batch, n_records - offset)
        b = DefaultRecordBatchBuilder(magic=2, compression_type=CODEC_IDS[codec],
                                      is_transactional=False, producer_id=-1,
                                      producer_epoch=-1, base_sequence=-1, batch_size=1 << 30)
        for i in range(count):
            value = json.dumps({"id": offset + i, "user": f"user-{rnd.randrange(10**6):06d}",
                                "event": rnd.choice(["click", "view", "buy", "scroll"]),
                                "amount": round(rnd.random() * 1000, 2),
                                "ts": ts + i, "pad": "x" * rnd.randrange(40, 70)}).encode()
            b.append(i, timestamp=ts + i, key=f"k{rnd.randrange(1000)}".encode(), value=value,
                     headers=[("trace", os.urandom(8))])
        buf = b.build()
        buf[0:8] = offset.to_bytes(8, "big")  # base offset is outside the CRC
        out += buf
        offset += count
        ts += count
    path.write_bytes(out)
    return n_records


def kafka_python(data: bytes) -> int:
    return consume(MemoryRecords, "kafka-python", data)


def kafkalog_batches(path: Path) -> int:
    n = 0
    for b in kafkalog.iter_batches(path):
        if b.crc_valid is not True:
            raise SystemExit("kafkalog: CRC mismatch in the benchmark file")
        n += len(b.records)
    return n


def kafkalog_table(path: Path) -> int:
    return kafkalog.records_table(path).num_rows


def best_of(fn, arg, repeat: int) -> tuple[float, int]:
    best = float("inf")
    count = 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        count = fn(arg)
        best = min(best, time.perf_counter() - t0)
    return best, count


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--codec", nargs="+", default=["none", "lz4"], choices=sorted(CODEC_IDS))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "out")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"# {platform.python_implementation()} {platform.python_version()}, "
          f"{platform.machine()}, {os.cpu_count()} cores; best of {args.repeat}, one core")
    print(f"{'codec':6} {'decoder':28} {'records/s':>12} {'MB/s':>8} {'vs kafka-python':>16}")
    for codec in args.codec:
        path = args.out / f"bench-{codec}-{args.records}.log"
        if not path.exists():
            make_segment(path, args.records, codec)
        data = path.read_bytes()
        mb = len(data) / 1e6
        base_t, base_n = best_of(kafka_python, data, args.repeat)
        rows = [("kafka-python 3 (pure Python)", base_t, base_n)]
        for name, fn in (("kafkalog iter_batches", kafkalog_batches),
                         ("kafkalog records_table", kafkalog_table)):
            t, n = best_of(fn, path, args.repeat)
            if n != base_n:
                raise SystemExit(f"{name} decoded {n} records, kafka-python {base_n}")
            rows.append((name, t, n))
        for name, t, n in rows:
            print(f"{codec:6} {name:28} {n / t:12,.0f} {mb / t:8.1f} {base_t / t:15.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
