"""``kafkalog dump --txn-stat``: transaction counts of partitions, offline (issue 45).

What tombentley/klog's ``segment txn-stat`` counts from ``kafka-dump-log`` text
(``TransactionalInfoCollector``, read at 0697fbeac55d): per partition, in offset order, a
producer's first transactional data batch opens its transaction; a COMMIT or ABORT marker
is counted and ends it (size: its data batches; duration: the marker's timestamp less the
first batch's); a marker that ends nothing is an *empty* transaction; what is still open
at the end is listed with its first batch. Read here from the segments themselves, and
with the rule of ``records.txn_state`` for which transaction a marker ends: the producer
id's open one whose epoch is not above the marker's (transaction version 2 writes
markers one epoch above the data, KIP-890); a marker of a lower epoch ends nothing and is
counted ``stale`` (a broker would have refused it: ``ProducerAppendInfo.checkProducerEpoch``,
KIP-1228).

A FILE is a ``.log`` segment, a partition folder (its ``.log`` segments, by base offset)
or a log directory (each partition folder in it).
"""

from __future__ import annotations

import os
from typing import TextIO

from ..errors import KafkaLogError
from ..folders import parse_partition_folder
from ..log_reader import scan
from ..model import Batch
from .output import EXIT_ERROR, EXIT_OK, emit, say_error

LOG = ".log"


def partitions(path: str) -> dict[str, list[str]]:
    """{partition name: its .log files in base-offset order} of ``path`` (a .log, a
    partition folder or a log directory)."""
    if os.path.isfile(path):
        return {os.path.basename(os.path.dirname(os.path.abspath(path))) or path: [path]}
    if not os.path.isdir(path):
        raise FileNotFoundError(f"{path}: no such file or directory")
    logs = sorted(n for n in os.listdir(path) if n.endswith(LOG))
    if logs:
        return {os.path.basename(os.path.abspath(path)): [os.path.join(path, n) for n in logs]}
    out = {}
    for name in sorted(os.listdir(path)):
        folder = os.path.join(path, name)
        if os.path.isdir(folder) and parse_partition_folder(name) is not None:
            out.update(partitions(folder))
    return out


class Counts:
    """One partition's transactions, followed batch by batch."""

    def __init__(self):
        self.open: dict[int, dict] = {}  # producer id -> its open transaction
        self.commits = self.aborts = self.stale = 0
        self.empty: list[dict] = []
        self.sizes: list[int] = []
        self.durations: list[int] = []

    def add(self, b: Batch) -> None:
        if not b.is_transactional or b.producer_id is None:
            return
        if not b.is_control:
            txn = self.open.get(b.producer_id)
            if txn is None:
                self.open[b.producer_id] = {
                    "producer_id": b.producer_id, "producer_epoch": b.producer_epoch,
                    "first_offset": b.base_offset, "first_timestamp": b.first_timestamp,
                    "batches": 1}
            else:
                txn["batches"] += 1
            return
        for r in b.records:
            if r.control is None or r.control.type not in ("COMMIT", "ABORT"):
                continue
            txn = self.open.get(b.producer_id)
            if txn is not None and txn["producer_epoch"] > b.producer_epoch:
                self.stale += 1
                continue
            if r.control.type == "COMMIT":
                self.commits += 1
            else:
                self.aborts += 1
            if txn is None:
                self.empty.append({"producer_id": b.producer_id,
                                   "producer_epoch": b.producer_epoch, "offset": r.offset,
                                   "type": r.control.type})
                continue
            del self.open[b.producer_id]
            self.sizes.append(txn["batches"])
            if txn["first_timestamp"] is not None and r.timestamp is not None:
                self.durations.append(r.timestamp - txn["first_timestamp"])

    def summary(self, name: str) -> dict:
        def stats(xs):
            return {"count": len(xs), "min": min(xs, default=None), "max": max(xs, default=None),
                    "avg": (sum(xs) / len(xs)) if xs else None}
        return {"partition": name, "commits": self.commits, "aborts": self.aborts,
                "empty": self.empty, "open": sorted(self.open.values(),
                                                    key=lambda t: t["first_offset"]),
                "stale_markers": self.stale, "batches_per_txn": stats(self.sizes),
                "duration_ms": stats(self.durations)}


def txn_stat(logs: list[str], verify_crc: bool = True) -> Counts:
    """The counts of one partition's segments (in order)."""
    counts = Counts()
    for path in logs:
        items = scan(path, verify_crc=verify_crc)
        try:
            for item in items:
                if isinstance(item, Batch):
                    counts.add(item)
        finally:
            items.close()
    return counts


def _text(s: dict) -> str:
    lines = [f"{s['partition']}: {s['commits']} committed, {s['aborts']} aborted, "
             f"{len(s['empty'])} empty, {len(s['open'])} open, "
             f"{s['stale_markers']} stale markers"]
    b, d = s["batches_per_txn"], s["duration_ms"]
    if b["count"]:
        lines.append(f"  batches per transaction: min {b['min']} avg {b['avg']:.1f} max {b['max']}; "
                     f"duration ms: min {d['min']} avg {d['avg']:.1f} max {d['max']}")
    for e in s["empty"]:
        lines.append(f"  empty: producer {e['producer_id']} epoch {e['producer_epoch']} "
                     f"{e['type']} at offset {e['offset']}")
    for t in s["open"]:
        lines.append(f"  open: producer {t['producer_id']} epoch {t['producer_epoch']} "
                     f"since offset {t['first_offset']} ({t['batches']} batches)")
    return "\n".join(lines)


def cmd_txn_stat(args, out: TextIO) -> int:
    """``kafkalog dump --txn-stat FILE...``: one summary per partition."""
    status = EXIT_OK
    for path in args.files:
        try:
            found = partitions(path)
            for name, logs in found.items():
                s = txn_stat(logs, verify_crc=not args.no_verify_crc).summary(name)
                emit(out, args.json, s, lambda: _text(s))
        except (KafkaLogError, OSError) as err:
            say_error(path, err)
            status = EXIT_ERROR
    return status


__all__ = ["Counts", "cmd_txn_stat", "partitions", "txn_stat"]
