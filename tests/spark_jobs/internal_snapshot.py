"""The snapshot of tests/spark_jobs/test_internal_tables.py (issue 19 parts 3-5), written with
kafkalog.writer: two data partitions of ``orders`` with idempotent producers and leader
epochs, their ``.snapshot``, ``leader-epoch-checkpoint`` and ``partition.metadata``, a
``__consumer_offsets`` partition with the ``COMMITS`` (that lag, run past the log end, fall
before the log start, are deleted or name a partition outside the snapshot) and a
``__transaction_state`` partition with the ``TRANSACTIONS``. Also night 1 of
test_second_engine."""

from __future__ import annotations

from kafkalog.writer import (SegmentWriter, WriteRecord, encode_producer_snapshot,
                             internal_record, leader_epoch_checkpoint_text,
                             partition_metadata_text)
from spark_jobs import layout

from tests.snapshots import T0

TOPIC_ID = "gSnfpEbtQfSDpxM2lhEn9A"


#: (group, topic, partition, offset); None: a tombstone (the commit deleted). In this order
#: in __consumer_offsets-0, one record a second from T0.
COMMITS = [
    ("lagging", "orders", 0, 2),
    ("lagging", "orders", 0, 3),        # the latest: lag 5 - 3 = 2
    ("ahead", "orders", 0, 9),          # past the log end 5
    ("gone", "orders", 1, 4),           # before the log start 10
    ("lagging", "orders", 1, 12),
    ("lagging", "orders", 1, None),     # deleted: no lag row
    ("elsewhere", "payments", 0, 7),    # not in the snapshot
]


TRANSACTIONS = [("orders-tx", 1, "Ongoing"), ("orders-tx", 4, "CompleteCommit")]


def commit_record(group, topic, partition, offset, ts):
    key = {"type": 1, "data": {"group": group, "topic": topic, "partition": partition}}
    value = None if offset is None else {"version": 3, "data": {
        "offset": offset, "leaderEpoch": 0, "metadata": "", "commitTimestamp": ts}}
    return internal_record("offsets", {"key": key, "value": value}, timestamp=ts)


def write_snapshot(root):
    """The snapshot described above under ``root``; returns the state files' paths."""
    d0, d1 = root / "orders-0", root / "orders-1"
    for d in (d0, d1):
        d.mkdir()
    with SegmentWriter(d0, 0) as w:  # producer 77, epoch 2: offsets 0-2 (leader epoch 0), 3-4 (1)
        w.append([WriteRecord(b"k", b"v%d" % i, timestamp=T0 + i) for i in range(3)],
                 producer_id=77, producer_epoch=2, base_sequence=0, partition_leader_epoch=0)
        w.append([WriteRecord(b"k", b"v%d" % i, timestamp=T0 + i) for i in range(3, 5)],
                 producer_id=77, producer_epoch=2, base_sequence=3, partition_leader_epoch=1)
    with SegmentWriter(d1, 10) as w:  # producer 88, epoch 0: offsets 10-13, leader epoch 4
        w.append([WriteRecord(b"k", b"v%d" % i, timestamp=T0 + i) for i in range(4)],
                 producer_id=88, producer_epoch=0, base_sequence=0, partition_leader_epoch=4)

    def entry(pid, epoch, last_seq, last_offset, delta):
        return {"producer_id": pid, "producer_epoch": epoch, "last_sequence": last_seq,
                "last_offset": last_offset, "offset_delta": delta, "timestamp": T0,
                "coordinator_epoch": -1, "current_txn_first_offset": -1}

    (d0 / "00000000000000000005.snapshot").write_bytes(  # agrees with the log
        encode_producer_snapshot([entry(77, 2, 4, 4, 1)]))
    (d0 / "leader-epoch-checkpoint").write_text(leader_epoch_checkpoint_text([(0, 0), (1, 3)]))
    (d0 / "partition.metadata").write_text(partition_metadata_text(TOPIC_ID))
    (d1 / "00000000000000000014.snapshot").write_bytes(  # epoch 1: the log says 0
        encode_producer_snapshot([entry(88, 1, 3, 13, 3)]))
    (d1 / "leader-epoch-checkpoint").write_text(leader_epoch_checkpoint_text([(3, 10)]))
    (root / "__consumer_offsets-0").mkdir()
    with SegmentWriter(root / "__consumer_offsets-0", 0) as w:
        w.append([internal_record("offsets", {
            "key": {"type": 2, "data": {"group": "lagging"}},
            "value": {"version": 3, "data": {"protocolType": "consumer", "generation": 3,
                                             "protocol": "range", "leader": "m1",
                                             "currentStateTimestamp": T0, "members": []}}},
            timestamp=T0)])
        for i, c in enumerate(COMMITS):
            w.append([commit_record(*c, ts=T0 + 1000 * (i + 1))])
    (root / "__transaction_state-0").mkdir()
    with SegmentWriter(root / "__transaction_state-0", 0) as w:
        for i, (tid, status, _) in enumerate(TRANSACTIONS):
            w.append([internal_record("transaction-log", {
                "key": {"type": 0, "data": {"transactionalId": tid}},
                "value": {"version": 0, "data": {
                    "producerId": 77, "producerEpoch": 2, "transactionTimeoutMs": 60000,
                    "transactionStatus": status,
                    "transactionPartitions": [{"topic": "orders", "partitionIds": [0]}],
                    "transactionLastUpdateTimestampMs": T0 + i,
                    "transactionStartTimestampMs": T0}}}, timestamp=T0 + i)])
    return sorted(p for p in root.rglob("*") if layout.parse_state_key(str(p)))
