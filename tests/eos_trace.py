"""A read-process-write application's log, written from Kafka's specs (issue 45), over two nights.

Nothing here comes from ``kafkalog``: batches are tests/segments.py's (the v2 grammar of
apache/kafka ``DefaultRecordBatch``/``EndTransactionMarker``), the ``__consumer_offsets``
and ``__transaction_state`` records tests/kafka_messages.py's encoding of the vendored 4.3.0
specs (``OffsetCommitKey``/``OffsetCommitValue`` as ``GroupCoordinatorRecordSerde`` frames
them: int16 key version = the key's apiKey, int16 value version; ``TransactionLogKey``/
``TransactionLogValue`` likewise, ``TransactionState`` ids of
``transaction-coordinator/.../TransactionState.java``: Empty 0, Ongoing 1, PrepareCommit 2,
CompleteCommit 4).

The application (transactional.id ``app-1``, producer id 1000, group ``app``) reads ``in-0``
and ``in-1``, writes ``out-0`` and commits its input offsets in each transaction, as
``KafkaProducer.sendOffsetsToTransaction`` does (TxnOffsetCommit: the offset commits are
transactional batches of the producer in ``__consumer_offsets-0``, ended by the same
markers as its output). An idempotent producer (id 2000) writes ``events-0``.

* T1 (epoch 0): out 3 records, commits in-0 -> 5, in-1 -> 4; committed.
* T2 (epoch 0): out 2 records, commits in-0 -> 8; its ``__consumer_offsets`` marker is
  late: night 1 ends before it (T2 open in night 1, committed in night 2).
* the application restarts: ``__transaction_state`` has epoch 1 (InitProducerId).
* T3 (epoch 1): out 2, commits in-0 -> 10, in-1 -> 7; committed.
* with ``faults``: the fenced instance (epoch 0) writes one more batch to out-0 (the zombie
  write, ended by T5's marker); T5 (epoch 1) writes out 1 and commits in-1 -> 7 again: the
  input [4, 7) of in-1 processed by two committed transactions (T3's and T5's); and
  producer 2000 writes its batch of sequences 3..5 twice (offsets 3 and 6, both in night 2:
  the audit compares a night's own batches). Without
  ``faults``, T5 commits in-1 -> 9, and there is no zombie and no duplicate.

:attr:`Trace.txns` is the generator's own account of every transaction it wrote (which
batches, which markers, which commits): the replay the tests compare with.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from tests import kafka_messages as km
from tests import segments as seg

T0 = 1_763_683_200_000  # 2025-11-21T00:00:00Z
APP_PID, APP_TXN_ID, GROUP, IDEMPOTENT_PID = 1000, "app-1", "app", 2000
OFFSETS, TXN_STATE = "__consumer_offsets", "__transaction_state"
SPECS = resources.files("kafkalog.internal").joinpath("specs").joinpath("4.3.0")
TXN_ATTR = seg.TRANSACTIONAL
CONTROL_ATTR = seg.TRANSACTIONAL | seg.CONTROL
EMPTY, ONGOING, PREPARE_COMMIT, COMPLETE_COMMIT = 0, 1, 2, 4


def _spec(path: str) -> dict:
    return km.load(SPECS.joinpath(path).read_text())


def _message(doc: dict, v: int, **values) -> bytes:
    value = km.struct_default(doc["fields"], v)
    value.update(values)
    return km.encode(doc, v, value)


@dataclass
class Part:
    topic: str
    partition: int
    data: bytearray = field(default_factory=bytearray)
    next_offset: int = 0
    cut: int | None = None  # night 1 ends at this byte position (None: holds it all)

    def append(self, records: list[bytes], **kw) -> tuple[int, int]:
        base = self.next_offset
        self.data += seg.batch_v2(records, base_offset=base, **kw)
        self.next_offset += len(records)
        return base, self.next_offset - 1


@dataclass
class Txn:
    """One transaction as the generator wrote it."""

    label: str
    producer_id: int
    epoch: int
    start: int
    pieces: dict = field(default_factory=dict)  # (topic, partition) -> [first, last, marker]
    commits: list = field(default_factory=list)  # (topic, partition, committed offset)
    end: int | None = None


class Trace:
    def __init__(self, faults: bool):
        self.parts: dict[tuple[str, int], Part] = {}
        self.txns: list[Txn] = []
        self.faults = faults
        self._ok = (_spec("group-coordinator/OffsetCommitKey.json"),
                    _spec("group-coordinator/OffsetCommitValue.json"))
        self._tl = (_spec("transaction-coordinator/TransactionLogKey.json"),
                    _spec("transaction-coordinator/TransactionLogValue.json"))
        self.seq: dict = {}  # (pid, epoch, topic, partition) -> next sequence
        self.write()

    def part(self, topic: str, partition: int = 0) -> Part:
        return self.parts.setdefault((topic, partition), Part(topic, partition))

    # -------------------------------------------------------------- writers
    def plain(self, topic: str, partition: int, n: int, t: int) -> None:
        self.part(topic, partition).append(
            [seg.record(i, 0, b"k", b"in %d" % i) for i in range(n)], base_timestamp=t)

    def producer_batch(self, topic, partition, pid, epoch, n, t, *, transactional=True,
                       records=None, seq=None) -> tuple[int, int]:
        key = (pid, epoch, topic, partition)
        base_seq = self.seq.get(key, 0) if seq is None else seq
        self.seq[key] = max(self.seq.get(key, 0), base_seq + n)
        last = t  # the records' own timestamps: deltas 0 (given records), 0..n-1 (made here)
        if records is None:
            records, last = [seg.record(i, i, b"k", b"out %d" % i) for i in range(n)], t + n - 1
        return self.part(topic, partition).append(
            records, attributes=TXN_ATTR if transactional else 0, base_timestamp=t,
            max_timestamp=last, producer_id=pid, producer_epoch=epoch,
            base_sequence=base_seq)

    def offset_commit(self, group: str, topic: str, partition: int, offset: int, t: int) -> bytes:
        key_doc, value_doc = self._ok
        key = struct.pack(">h", key_doc["apiKey"]) + _message(
            key_doc, 0, group=group, topic=topic, partition=partition)
        value = struct.pack(">h", 3) + _message(value_doc, 3, offset=offset, leaderEpoch=0,
                                                metadata="", commitTimestamp=t)
        return key, value

    def txn_state(self, status: int, epoch: int, t: int, start: int, partitions=()) -> None:
        key_doc, value_doc = self._tl
        key = struct.pack(">h", 0) + _message(key_doc, 0, transactionalId=APP_TXN_ID)
        by_topic: dict = {}
        for topic, p in partitions:
            by_topic.setdefault(topic, []).append(p)
        value = struct.pack(">h", 1) + _message(
            value_doc, 1, producerId=APP_PID, producerEpoch=epoch, transactionTimeoutMs=60_000,
            transactionStatus=status,
            transactionPartitions=[{"topic": k, "partitionIds": v} for k, v in by_topic.items()],
            transactionLastUpdateTimestampMs=t, transactionStartTimestampMs=start,
            clientTransactionVersion=0)
        self.part(TXN_STATE).append([seg.record(0, 0, key, value)], base_timestamp=t)

    def marker(self, topic, partition, pid, epoch, t, commit=True) -> int:
        p = self.part(topic, partition)
        at = p.next_offset
        p.append([seg.control_record(1 if commit else 0, coordinator_epoch=0)],
                 attributes=CONTROL_ATTR, base_timestamp=t, producer_id=pid,
                 producer_epoch=epoch)
        return at

    def transaction(self, label, epoch, t, outputs: int, commits: list, *, late=False) -> Txn:
        """A read-process-write transaction of the application at time ``t``."""
        txn = Txn(label, APP_PID, epoch, t)
        partitions = [("out", 0), (OFFSETS, 0)]
        self.txn_state(ONGOING, epoch, t, t, partitions)
        first, last = self.producer_batch("out", 0, APP_PID, epoch, outputs, t)
        txn.pieces[("out", 0)] = [first, last, None]
        recs = [seg.record(i, 0, *self.offset_commit(GROUP, tp, p, o, t + 1))
                for i, (tp, p, o) in enumerate(commits)]
        first, last = self.producer_batch(OFFSETS, 0, APP_PID, epoch, len(recs), t + 1,
                                          records=recs)
        txn.pieces[(OFFSETS, 0)] = [first, last, None]
        txn.commits = list(commits)
        self.txn_state(PREPARE_COMMIT, epoch, t + 2, t, partitions)
        for topic, p in partitions:
            if late and topic == OFFSETS:
                self.part(OFFSETS).cut = len(self.part(OFFSETS).data)  # night 1 ends here
            txn.pieces[(topic, p)][2] = self.marker(topic, p, APP_PID, epoch, t + 2)
        txn.end = t + 2
        if late:
            self.part(TXN_STATE).cut = len(self.part(TXN_STATE).data)
        self.txn_state(COMPLETE_COMMIT, epoch, t + 2, t, partitions)
        self.txns.append(txn)
        return txn

    def write(self) -> None:
        s = 1000
        for p in (0, 1):
            self.plain("in", p, 12, T0)
        # the idempotent producer: 0..2, 3..5 (and, with faults, 3..5 again), 6..7
        self.producer_batch("events", 0, IDEMPOTENT_PID, 0, 3, T0 + 5 * s, transactional=False)
        self.part("events").cut = len(self.part("events").data)  # night 2 holds the rest
        self.producer_batch("events", 0, IDEMPOTENT_PID, 0, 3, T0 + 6 * s, transactional=False)
        if self.faults:
            self.producer_batch("events", 0, IDEMPOTENT_PID, 0, 3, T0 + 7 * s,
                                transactional=False, seq=3)
        self.producer_batch("events", 0, IDEMPOTENT_PID, 0, 2, T0 + 8 * s, transactional=False)
        self.txn_state(EMPTY, 0, T0 + 9 * s, -1)
        self.transaction("T1", 0, T0 + 10 * s, 3, [("in", 0, 5), ("in", 1, 4)])
        self.transaction("T2", 0, T0 + 20 * s, 2, [("in", 0, 8)], late=True)
        for key in (("out", 0), ("in", 0), ("in", 1)):  # night 1 holds all of these
            self.part(*key).cut = len(self.part(*key).data)
        self.txn_state(EMPTY, 1, T0 + 30 * s, -1)  # the application restarts: epoch 1
        self.transaction("T3", 1, T0 + 31 * s, 2, [("in", 0, 10), ("in", 1, 7)])
        if self.faults:  # the fenced instance writes once more (and T5's marker ends it)
            first, last = self.producer_batch("out", 0, APP_PID, 0, 2, T0 + 40 * s)
            zombie = Txn("zombie", APP_PID, 0, T0 + 40 * s)
            zombie.pieces[("out", 0)] = [first, last, None]
            self.txns.append(zombie)
        t5 = self.transaction("T5", 1, T0 + 41 * s, 1, [("in", 1, 7 if self.faults else 9)])
        if self.faults:
            zombie.pieces[("out", 0)][2] = t5.pieces[("out", 0)][2]
            zombie.end = t5.end

    # -------------------------------------------------------------- nights
    def night(self, folder: Path, n: int) -> Path:
        """Night ``n`` (1 or 2) as partition folders under ``folder``."""
        for (topic, partition), p in self.parts.items():
            d = folder / f"{topic}-{partition}"
            d.mkdir(parents=True, exist_ok=True)
            data = bytes(p.data) if n == 2 or p.cut is None else bytes(p.data[:p.cut])
            (d / "00000000000000000000.log").write_bytes(data)
        return folder

    def marker_in(self, topic: str, partition: int, offset: int, n: int) -> bool:
        """Whether night ``n`` holds the marker at ``offset``."""
        p = self.parts[(topic, partition)]
        if n == 2 or p.cut is None:
            return True
        pos = 0
        while pos < p.cut:
            base, length = struct.unpack_from(">qi", p.data, pos)
            if base == offset:
                return True
            pos += 12 + length
        return False
