"""A read-process-write application in the demo's nights (issue 45 item 4), written with
:mod:`kafkalog.writer`.

The application ``receipts-app`` (transactional.id :data:`TXN_ID`, producer id
:data:`PRODUCER_ID`, consumer group :data:`GROUP`) reads ``purchases-0``, writes a receipt
per purchase to ``receipts-0`` and commits its input offsets in the same transaction, as
``KafkaProducer.sendOffsetsToTransaction`` does: the offset commits are transactional
batches of the producer in ``__consumer_offsets-1`` (the group's partition), ended by the
same COMMIT markers as its output. ``__transaction_state-1`` is its coordinator's log
(``Ongoing`` then ``CompleteCommit``; the restart's ``InitProducerId`` bumps the epoch).

* night 1: ``purchases-0`` holds offsets 0..19; T1 (epoch 0) processes 0..9 (commits 10),
  T2 (epoch 0) 10..19 (commits 20).
* night 2 (the segments grow: night 1's bytes are a prefix): ``purchases-0`` gains 20..29;
  the application restarts (epoch 1) and T3 processes 20..24 (commits 25). Two planted
  faults follow, both the audit's:

  - **the zombie write** (``zombie_write``, ``fenced_write``): the old instance, still at
    epoch 0, writes one more batch to ``receipts-0`` after epoch 1 was in use — a write
    fencing should have refused (its batch is ended by T4's marker);
  - **the double-consumed range** (``double_consumption``): T4 (epoch 1) processes 20..24
    again and commits 25 again: purchases 20..24 were claimed by two committed
    transactions (T3's and T4's); its place is ``__consumer_offsets-1``, at T4's commit.

  T5 (epoch 1) then processes 25..29 (commits 30).

Both faults fail by the product's policy (expectations/policy.yaml); the demo's nights run
with :func:`write_policy`'s file, the product's policy with two topic overrides grading them
warn, so night 2 still publishes and its report names both (as warnings).
"""

from __future__ import annotations

import json
from pathlib import Path

from kafkalog.state_writer import internal_record
from kafkalog.writer import SegmentWriter, WriteRecord

INPUT, OUTPUT = "purchases", "receipts"
TXN_ID, PRODUCER_ID, GROUP = "receipts-app-tx", 9000, "receipts-app"
#: the group's and the transactional id's partitions of the internal topics
OFFSETS_PARTITION = TXN_STATE_PARTITION = 1
#: each transaction per night: (label, epoch, first input offset, end: the offset it commits);
#: the zombie writes receipts of 25..26 and commits nothing
TRANSACTIONS = (
    (("T1", 0, 0, 10), ("T2", 0, 10, 20)),
    (("T3", 1, 20, 25), ("zombie", 0, 25, 27), ("T4", 1, 20, 25), ("T5", 1, 25, 30)),
)
#: the input's offsets at each night's copy
INPUT_END = (20, 30)
ONGOING, COMPLETE_COMMIT, EMPTY = 1, 4, 0


def _purchase(i: int, ts: int) -> WriteRecord:
    return WriteRecord(f"buyer-{i % 6}".encode(),
                       json.dumps({"purchase": i, "cents": 250 * (i % 5 + 1)}).encode(),
                       timestamp=ts)


def _receipt(i: int, ts: int) -> WriteRecord:
    return WriteRecord(f"buyer-{i % 6}".encode(),
                       json.dumps({"receipt_for": i, "tax_cents": 20 * (i % 5 + 1)}).encode(),
                       timestamp=ts)


def _txn_state(w: SegmentWriter, epoch: int, status: int, start: int, at: int) -> None:
    parts = [] if status == EMPTY else [{"topic": OUTPUT, "partitionIds": [0]},
                                        {"topic": "__consumer_offsets",
                                         "partitionIds": [OFFSETS_PARTITION]}]
    w.append([internal_record("transaction-log", {
        "key": {"type": 0, "data": {"transactionalId": TXN_ID}},
        "value": {"version": 0, "data": {
            "producerId": PRODUCER_ID, "producerEpoch": epoch, "transactionTimeoutMs": 60000,
            "transactionStatus": status, "transactionPartitions": parts,
            "transactionLastUpdateTimestampMs": at,
            "transactionStartTimestampMs": start}}}, timestamp=at)])


def write(night_dir: Path, night: int, t0: int, hour: int) -> None:
    """The application's four partitions of snapshot ``night`` (0 or 1) under ``night_dir``."""
    base = lambda n: t0 + n * 24 * hour + 5 * hour  # noqa: E731  (each night's first write)
    with SegmentWriter(night_dir / f"{INPUT}-0", 0, index_interval_bytes=512) as w:
        for n in range(night + 1):
            first = 0 if n == 0 else INPUT_END[n - 1]
            for lo in range(first, INPUT_END[n], 10):
                w.append([_purchase(i, base(n) + i * 1000) for i in range(lo, lo + 10)])
    with SegmentWriter(night_dir / f"{OUTPUT}-0", 0, index_interval_bytes=512) as out, \
            SegmentWriter(night_dir / f"__consumer_offsets-{OFFSETS_PARTITION}", 0) as offsets, \
            SegmentWriter(night_dir / f"__transaction_state-{TXN_STATE_PARTITION}", 0) as state:
        sequences: dict = {}  # (partition, epoch) -> the next sequence

        def batch(w, records, epoch, where):
            seq = sequences.get((where, epoch), 0)
            sequences[(where, epoch)] = seq + len(records)
            w.append(records, producer_id=PRODUCER_ID, producer_epoch=epoch, base_sequence=seq,
                     transactional=True)

        for n in range(night + 1):
            at = base(n) + 60_000  # the application runs a minute behind the input
            if n == 1:  # the restart: InitProducerId gives epoch 1
                _txn_state(state, 1, EMPTY, at, at)
                at += 1000
            for label, epoch, lo, end in TRANSACTIONS[n]:
                start = at
                if label != "zombie":
                    _txn_state(state, epoch, ONGOING, start, start)
                count = end - lo
                batch(out, [_receipt(lo + k, at + k) for k in range(count)], epoch, OUTPUT)
                at += count + 10
                if label == "zombie":  # no offset commit, no marker of its own
                    continue
                batch(offsets, [internal_record("offsets", {
                    "key": {"type": 1, "data": {"group": GROUP, "topic": INPUT, "partition": 0}},
                    "value": {"version": 3, "data": {"offset": end, "leaderEpoch": 0,
                                                     "metadata": "", "commitTimestamp": at}}},
                    timestamp=at)], epoch, "offsets")
                at += 10
                for w in (out, offsets):
                    w.append_marker(producer_id=PRODUCER_ID, producer_epoch=epoch, commit=True,
                                    coordinator_epoch=0, timestamp=at)
                _txn_state(state, epoch, COMPLETE_COMMIT, start, at)
                at += 1000


def write_policy(path: Path) -> Path:
    """The demo's policy file: expectations/policy.yaml with the two planted faults graded
    warn (``receipts``' ``fenced_write``, ``__consumer_offsets``' ``double_consumption``),
    so the demo's night 2 publishes; everything else the product's. Returns ``path``."""
    from importlib import resources

    import yaml

    doc = yaml.safe_load(resources.files("expectations").joinpath("policy.yaml")
                         .read_text("utf-8"))
    topics = doc.setdefault("topics", {})
    topics.setdefault(OUTPUT, {}).setdefault("checks", {})["zombie_write"] = {
        "classes": {"fenced_write": "warn"}}
    topics.setdefault("__consumer_offsets", {}).setdefault("checks", {})[
        "double_consumption"] = {"severity": "warn"}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("# the demo's policy (demo/exactly_once.py): the product's, with its two "
                    "planted exactly-once faults graded warn\n" + yaml.safe_dump(doc, sort_keys=False))
    return path


__all__ = ["GROUP", "INPUT", "OUTPUT", "PRODUCER_ID", "TRANSACTIONS", "TXN_ID", "write",
           "write_policy"]
