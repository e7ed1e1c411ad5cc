"""``python -m kafkalog.demo OUTDIR``: write a small broker log directory and read it back.

What it writes with :mod:`kafkalog.writer` (a copy of what a broker leaves):

* ``orders-0``: v2 batches in every codec, an idempotent producer, a committed
  and an aborted transaction with their markers, LogAppendTime, a compacted
  batch (offset gaps), and ``.index``/``.timeindex``/``.txnindex`` files;
* ``legacy-0``: a partition upgraded across versions: magic 0 (gzip, and lz4
  with the old broker's broken frame checksum), magic 1 (snappy,
  LogAppendTime), then v2 — one segment, mixed magic;
* ``damaged-0``: a copy of ``orders-0`` with a flipped byte and a torn,
  zero-padded tail, as a snapshot of a failing disk might look.

It then decodes every segment, prints a summary per segment (batches, records,
markers, findings) and the findings themselves, and verifies the indexes.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import kafkalog
from kafkalog.writer import SegmentWriter, WriteRecord

T0 = 1_763_683_200_000  # 2025-11-21T00:00:00Z


def _orders(i: int) -> WriteRecord:
    value = json.dumps({"order": i, "sku": f"sku-{i % 7}", "qty": i % 3 + 1}).encode()
    return WriteRecord(f"customer-{i % 5}".encode(), value,
                       headers=(("source", b"web"),), timestamp=T0 + i * 1000)


def write_orders(directory: Path) -> None:
    with SegmentWriter(directory, 0, index_interval_bytes=256) as w:
        i = 0
        for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
            w.append([_orders(i + k) for k in range(5)], codec=codec)
            i += 5
        # idempotent producer 1000, then a transaction that commits and one that aborts
        w.append([_orders(i + k) for k in range(3)], producer_id=1000, producer_epoch=0,
                 base_sequence=0)
        i += 3
        for commit in (True, False):
            w.append([_orders(i + k) for k in range(4)], codec="lz4", producer_id=2000,
                     producer_epoch=3, base_sequence=4 * (not commit), transactional=True)
            i += 4
            w.append_marker(producer_id=2000, producer_epoch=3, commit=commit,
                            coordinator_epoch=7, timestamp=T0 + i * 1000)
        # the broker stamps LogAppendTime on the whole batch
        w.append([_orders(i + k) for k in range(3)], timestamp_type="LogAppendTime",
                 log_append_time=T0 + 3_600_000)
        i += 3
        # what compaction leaves: deltas 0, 4, 9 survive of a batch that spanned 10 offsets
        w.append([WriteRecord(b"customer-1", b"latest", offset_delta=0, timestamp=T0),
                  WriteRecord(b"customer-2", None, offset_delta=4, timestamp=T0),  # tombstone
                  WriteRecord(b"customer-3", b"", offset_delta=9, timestamp=T0)],
                 codec="zstd")


def write_legacy(directory: Path, t0: int = T0) -> None:
    """One segment of a partition upgraded across versions: magic 0, then 1, then 2."""
    with SegmentWriter(directory, 0) as w:
        msgs = [WriteRecord(f"k{n}".encode(), f"v0 message {n}".encode()) for n in range(4)]
        w.append(msgs, magic=0, codec="gzip")
        w.append(msgs[:2], magic=0, codec="lz4")
        w.append([WriteRecord(b"k", b"plain v0 message")], magic=0)
        w.append([WriteRecord(f"k{n}".encode(), f"v1 message {n}".encode(), timestamp=t0 + n)
                  for n in range(3)], magic=1, codec="snappy")
        w.append([WriteRecord(b"k", b"v1, stamped by the broker", timestamp=t0)], magic=1,
                 codec="gzip", timestamp_type="LogAppendTime", log_append_time=t0 + 99)
        w.append([WriteRecord(b"k", f"after the upgrade {n}".encode(), timestamp=t0 + n)
                  for n in range(3)], codec="zstd")


def write_damaged(orders: Path, directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    data = bytearray((orders / "00000000000000000000.log").read_bytes())
    second = next(b for i, b in enumerate(kafkalog.iter_batches(bytes(data))) if i == 1)
    data[second.position + second.size - 3] ^= 0x40  # inside its compressed records
    torn = data[: len(data) - 20] + bytes(4096)  # last batch torn, preallocated zeros
    (directory / "00000000000000000000.log").write_bytes(bytes(torn))


def summarize(log: Path, out=sys.stdout) -> int:
    tables = kafkalog.decode(log)
    magics = sorted(set(tables.batches.column("magic").to_pylist()))
    codecs = sorted(set(tables.batches.column("compression").to_pylist()))
    print(f"{log}: {tables.batches.num_rows} batches (magic {magics}, {', '.join(codecs)}), "
          f"{tables.records.num_rows} records, {tables.markers.num_rows} markers, "
          f"{tables.findings.num_rows} findings", file=out)
    for f in tables.findings.to_pylist():
        print(f"    {f['kind']} at {f['position']}..{f['end']}: {f['message']}", file=out)
    for index, verify in (("index", kafkalog.verify_offset_index),
                          ("timeindex", kafkalog.verify_time_index)):
        path = log.with_suffix("." + index)
        if path.exists():
            reader = kafkalog.read_offset_index if index == "index" else kafkalog.read_time_index
            idx = reader(path)
            problems = verify(idx, log)
            print(f"    .{index}: {len(idx.entries)} entries, "
                  f"{'verified' if not problems else f'{len(problems)} mismatches'}", file=out)
    return tables.findings.num_rows


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    root = Path(argv[0] if argv else "demo-output")
    logs = root / "logs"
    if logs.exists():
        shutil.rmtree(logs)
    write_orders(logs / "orders-0")
    write_legacy(logs / "legacy-0")
    write_damaged(logs / "orders-0", logs / "damaged-0")
    print(f"Wrote a broker log directory to {logs}\n")
    for log in sorted(logs.rglob("*.log")):
        summarize(log)
    print("\nTry:")
    print(f"  .venv/bin/kafkalog dump --records --print-data {logs}/legacy-0/00000000000000000000.log")
    print(f"  .venv/bin/kafkalog dump --json --records {logs}/damaged-0/00000000000000000000.log")
    print(f"  .venv/bin/kafkalog index --verify {logs}/orders-0/00000000000000000000.index")
    return 0


if __name__ == "__main__":
    sys.exit(main())
