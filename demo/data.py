"""Sample snapshots for two nights, written with :mod:`kafkalog.writer`.

``write_nights(root)`` leaves ``root/<YYYY-MM-DD>/<topic>-<partition>/...`` for
:data:`NIGHTS`, as the nightly copy of a broker's log directory would:

* ``orders-0``: a rolled segment (v2 in every codec, an idempotent producer)
  and the *growing* active segment (preallocated indexes) holding a committed
  transaction; on the second night the active segment has grown (night 1's
  bytes are a prefix of night 2's).
* ``orders-1``: transactions that commit and abort with their markers,
  LogAppendTime, a compacted batch (offset gaps); a new segment rolls on night 2,
  compacted, its head removed by the cleaner (offset gaps graded ``compaction``).
* ``legacy-0``: a partition upgraded across versions: magic 0 (gzip, lz4),
  magic 1 (snappy, LogAppendTime) and v2 in one segment (mixed magic).
* ``payments-0`` / ``payments-1``: transactional producers (two commits, one abort);
  beside ``payments-0`` its state files: the producer-state ``.snapshot`` Kafka wrote when the
  segment rolled, a ``leader-epoch-checkpoint`` and ``partition.metadata`` (all agreeing with
  the log).
* ``customers-0`` (issue 35 item 2): a compacted topic, JSON values keyed ``cust-N``.
  Segment 0 as the log cleaner left it before night 1 (the same bytes both nights): batches
  0..3 and 6..8 keep their base and last offsets but hold 2 records each (2, 3; 6, 8), the
  batch that held 4..5 is gone (an offset gap graded ``compaction``), and 9..11 (cust-4's
  tombstone, cust-5, cust-6) carries the delete horizon (attributes bit 6). The active
  segment (from 12) grows: night 1 writes 12..14, producer 8100's transaction 15..16 and its
  ABORT at 17 (cust-1 ``platinum`` and cust-10 never show), producer 8200's transaction
  18..19 (cust-2 ``gold``, cust-8) left open, and 20 (cust-0 ``gold``); night 2 appends 8200's
  COMMIT at 21 and 22..25 (cust-0 back to ``silver``, cust-3's tombstone, cust-9, cust-5).
* ``dbserver1.inventory.customers-0`` (issue 35 item 3): Debezium's PostgreSQL change events
  with the JsonConverter's schema wrapper (:mod:`demo.cdc`): night 1 the snapshot reads of
  rows 1001..1003, night 2 an update of 1001, an insert of 1004, a delete of 1002 and its
  tombstone.
* ``__consumer_offsets-0``: the group coordinator's log: group ``billing`` (membership and
  offset commits, caught up on ``payments-0``), group ``reports`` lagging on ``orders-1``, and
  group ``replayer``, whose committed offset of ``payments-1`` is past that partition's log end
  (the audit's ``committed_offset_beyond_log_end`` warns); night 2 appends newer commits.
* ``__transaction_state-0``: the transaction coordinator's log for ``payments-0``'s
  transactional producer (each transaction ``Ongoing``, then ``CompleteCommit`` or
  ``CompleteAbort``).
* ``__cluster_metadata-0``: the KRaft controller's log naming the topic ``payments`` (its id is
  ``payments-0``'s ``partition.metadata``) and its two partitions.

Injected faults, all on night 2, of the kinds a nightly copy really shows and
that the severity policy (expectations/policy.yaml) warns about rather than
fails on: the copy of ``orders-0``'s active segment caught a batch half
written (``truncated_tail`` in the newest segment, and its ``.index`` and
``.timeindex``, copied after the log, name that batch: ``index_mismatch``); ``payments-1``'s copy
misses a segment between two others (an offset gap at a segment boundary:
``missing_segment``); a ``payments-0`` producer sent a header key that is not
UTF-8 (``invalid_header_key``).
* ``_schemas-0``, ``shop.orders-0`` (Avro), ``clicks-0`` (JSON Schema), ``shipments-0``
  (Protobuf): values in Schema Registry's wire format and the registry's own topic
  (:mod:`demo.schemas`; on night 2, one click whose schema id no
  registry holds: ``schema_decode`` warns).
* ``events-0`` and ``__remote_log_metadata-0``: a topic in tiered storage, its local tail
  and the metadata of its remote segments (:mod:`demo.tiered`: the tier itself, compressed
  and encrypted, one planted orphan copy: ``tier_copy_orphans`` warns).
* ``purchases-0``, ``receipts-0``, ``__consumer_offsets-1``, ``__transaction_state-1``: a
  read-process-write application committing its input offsets in its transactions
  (:mod:`demo.exactly_once`); on night 2 a zombie write and a double-consumed input range,
  which the product's policy fails and the demo's (``exactly_once.write_policy``) warns of.
* a ``_SUCCESS`` marker and a ``README.txt`` beside the partitions (not segments:
  the planner ignores them).
* night 2 also holds a second broker's log directory, ``broker-2/`` (issue 36), as a broker
  that crashed leaves it: ``meta.properties`` and the four offset checkpoints but no
  ``.kafka_cleanshutdown``; ``ledger-0`` ends in a torn batch past its recovery point (5)
  — expected after an unclean shutdown, Kafka's recovery cuts it off — and holds offsets 8..9
  past its high watermark (8: written, never replicated: ``beyond_high_watermark``);
  ``transfers-0``'s producer 7000 has had a transaction open for ten minutes with no marker,
  longer than the 60 s timeout (``hanging_transaction``, pinning the last stable offset at 0);
  ``audit-log-0.<id>-delete`` is a deleted topic's folder whose data is still there. The
  audit reads the log directory's files once the decode job fills ``broker_state`` and
  ``partition_checkpoints`` from them; the hanging transaction and the torn tail (as a live
  tail until then) show already.

Everything is deterministic (fixed timestamps, fixed content), so a second run
writes the same bytes and the warehouse counts stay the same.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from kafkalog.demo import write_legacy
from kafkalog.state_writer import meta_properties_text, offset_checkpoint_text
from kafkalog.writer import (SegmentWriter, WriteRecord, encode_producer_snapshot,
                             encode_v2_batch, internal_record, leader_epoch_checkpoint_text,
                             partition_metadata_text)

from . import cdc, exactly_once, schemas, tiered

NIGHTS = ("2026-11-20", "2026-11-21")
T0 = 1_795_132_800_000  # 2026-11-20T00:00:00Z
HOUR = 3_600_000


def _order(i: int, night: int) -> WriteRecord:
    value = json.dumps({"order": i, "sku": f"sku-{i % 7}", "qty": i % 3 + 1}).encode()
    return WriteRecord(f"customer-{i % 5}".encode(), value, headers=(("source", b"web"),),
                       timestamp=T0 + night * 24 * HOUR + i * 1000)


def _payment(i: int, ts: int) -> WriteRecord:
    return WriteRecord(f"acct-{i % 4}".encode(),
                       json.dumps({"payment": i, "cents": 100 * (i % 9 + 1)}).encode(),
                       timestamp=ts)


# ------------------------------------------------------------------ orders-0
def _orders0_rolled(directory: Path) -> int:
    with SegmentWriter(directory, 0, index_interval_bytes=256) as w:
        i = 0
        for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
            w.append([_order(i + k, 0) for k in range(6)], codec=codec)
            i += 6
        w.append([_order(i + k, 0) for k in range(4)], producer_id=1000, producer_epoch=0,
                 base_sequence=0, codec="zstd")
        return w.next_offset


def _orders0_active(directory: Path, base: int, night: int) -> None:
    """The active segment: night 0 writes the first part, night 1 the same bytes and more."""
    with SegmentWriter(directory, base, index_interval_bytes=256,
                       preallocate_bytes=1024) as w:
        i = base
        for n in range(night + 1):
            # producer 1000's sequences count its own records (4 in the rolled segment, then
            # 5 a night), not the partition's offsets, which other producers' batches share
            w.append([_order(i + k, n) for k in range(5)], codec="lz4", producer_id=1000,
                     producer_epoch=0, base_sequence=4 + 5 * n)
            i += 5
            w.append([_order(i + k, n) for k in range(3)], codec="gzip", producer_id=3000 + n,
                     producer_epoch=1, base_sequence=0, transactional=True)
            i += 3
            w.append_marker(producer_id=3000 + n, producer_epoch=1, commit=True,
                            coordinator_epoch=2, timestamp=T0 + n * 24 * HOUR + i * 1000)
            i += 1
        if night >= 1:
            torn_at = w.position
            w.append([_order(i + k, night) for k in range(4)], codec="zstd")
            path = Path(w.path)
    if night >= 1:
        # the copy caught the broker writing: the newest batch is only half there
        data = path.read_bytes()
        path.write_bytes(data[: torn_at + (len(data) - torn_at) // 2])


# ------------------------------------------------------------------ orders-1
def _orders1(directory: Path, night: int) -> None:
    with SegmentWriter(directory, 0, index_interval_bytes=512) as w:
        i = 0
        for commit in (True, False):
            w.append([_order(i + k, 0) for k in range(4)], codec="snappy", producer_id=2000,
                     producer_epoch=3, base_sequence=4 * (not commit), transactional=True)
            i += 4
            w.append_marker(producer_id=2000, producer_epoch=3, commit=commit,
                            coordinator_epoch=7, timestamp=T0 + i * 1000)
            i += 1
        w.append([_order(i + k, 0) for k in range(3)], timestamp_type="LogAppendTime",
                 log_append_time=T0 + HOUR)
        i += 3
        # what compaction leaves: deltas 0, 4, 9 of a batch that spanned 10 offsets
        w.append([WriteRecord(b"customer-1", b"latest", offset_delta=0, timestamp=T0),
                  WriteRecord(b"customer-2", None, offset_delta=4, timestamp=T0),  # tombstone
                  WriteRecord(b"customer-3", b"", offset_delta=9, timestamp=T0)],
                 codec="zstd")
        rolled_at = w.next_offset
    if night >= 1:
        # the new segment as the cleaner left it: its head (3 offsets) removed, the file still
        # named by its base offset, and its first batch compacted (deltas 7 and 8 removed)
        with SegmentWriter(directory, rolled_at, index_interval_bytes=512) as w:
            w.skip_to(rolled_at + 3)
            w.append([_order(rolled_at + k, 1)._replace(offset_delta=k if k < 7 else 9)
                      for k in range(8)], codec="zstd")
            w.append([_order(rolled_at + 8 + k, 1) for k in range(8)], codec="snappy")


# ------------------------------------------------------------------ legacy-0
def _legacy(directory: Path) -> None:
    write_legacy(directory, t0=T0)  # the kafkalog demo's mixed-magic segment, on this demo's dates


# ------------------------------------------------------------------ payments
def _payments(directory: Path, partition: int, night: int) -> None:
    with SegmentWriter(directory, 0, index_interval_bytes=256) as w:
        i = 0
        for txn in range(3):
            pid = 5000 + partition
            w.append([_payment(i + k, T0 + 2 * HOUR + i * 1000) for k in range(4)],
                     codec="zstd", producer_id=pid, producer_epoch=0,
                     base_sequence=i - txn, transactional=True)
            i += 4
            w.append_marker(producer_id=pid, producer_epoch=0, commit=txn != 1,
                            coordinator_epoch=1, timestamp=T0 + 2 * HOUR + i * 1000)
            i += 1
        rolled_at = w.next_offset
    if night < 1:
        return
    ts = T0 + 26 * HOUR
    if partition == 0:
        # a producer sent a header key that is not UTF-8 (kept, flagged: invalid_header_key)
        with SegmentWriter(directory, rolled_at, index_interval_bytes=256) as w:
            w.append([_payment(rolled_at + k, ts) for k in range(5)], codec="gzip")
            w.append([_payment(rolled_at + 5 + k, ts)._replace(headers=((b"\xfftrace", b"1"),))
                      for k in range(3)], codec="lz4")
        return
    # partition 1: the copy missed a segment between two others (offsets 15..24)
    for base, codec in ((rolled_at, "gzip"), (rolled_at + 10, "lz4")):
        with SegmentWriter(directory, base, index_interval_bytes=256) as w:
            w.append([_payment(base + k, ts) for k in range(10)], codec=codec)
    for name in os.listdir(directory):
        if name.startswith(f"{rolled_at:020d}."):
            os.remove(directory / name)


# ------------------------------------------------------------------ customers-0 (compacted)
#: delete.retention.ms (Kafka's default, a day): the cleaner stamps a batch holding a tombstone
#: it keeps with the time it may drop it, cleaning time plus this
DELETE_RETENTION_MS = 24 * HOUR
CUSTOMERS_CLEANED_AT = T0 + HOUR
#: the producers of customers-0's transactions: one aborted (night 1), one whose COMMIT
#: lands on night 2
ABORTED_PRODUCER, LATE_COMMIT_PRODUCER = 8100, 8200


def _customer(key: str, tier: str | None, at: int, offset_delta: int | None = None) -> WriteRecord:
    value = None if tier is None else json.dumps({"customer": key, "tier": tier}).encode()
    return WriteRecord(key.encode(), value, timestamp=at, offset_delta=offset_delta)


def _customers_cleaned(directory: Path) -> int:
    """Segment 0 as the log cleaner rewrote it before night 1. Before cleaning it held
    0..11 in four batches: 0..3 (cust-0..3), 4..5 (cust-4 gold, cust-5 bronze), 6..8 (cust-0,
    cust-5, cust-1) and 9..11 (cust-4's tombstone, cust-5, cust-6). The cleaner kept the last
    record of each key: a batch keeps its base and last offset with fewer records (0..3 holds
    2, 6..8 holds 2), batch 4..5 is gone (an offset gap), and 9..11, holding the tombstone it
    keeps until the delete horizon, is stamped with that horizon (attributes bit 6)."""
    at = lambda offset: T0 + offset * 60_000  # noqa: E731  (when each was produced)
    with SegmentWriter(directory, 0, index_interval_bytes=256) as w:
        w.append([_customer("cust-2", "silver", at(2), 2),
                  _customer("cust-3", "bronze", at(3), 3)], last_offset_delta=3)
        w.skip_to(6)
        w.append([_customer("cust-0", "silver", at(6), 0),
                  _customer("cust-1", "silver", at(8), 2)], codec="lz4", last_offset_delta=2)
        w.append([_customer("cust-4", None, at(9)), _customer("cust-5", "gold", at(10)),
                  _customer("cust-6", "gold", at(11))], codec="lz4",
                 delete_horizon_ms=CUSTOMERS_CLEANED_AT + DELETE_RETENTION_MS)
        return w.next_offset


def _customers_active(directory: Path, base: int, night: int) -> None:
    """The active segment (not cleaned yet), night 2's bytes night 1's and more: an aborted
    transaction (producer 8100), a transaction open at night 1's copy (producer 8200) whose
    COMMIT is night 2's first entry, plain writes around them, and on night 2 a tombstone."""
    with SegmentWriter(directory, base, index_interval_bytes=256,
                       preallocate_bytes=1024) as w:
        at = lambda n, offset: T0 + n * 24 * HOUR + 2 * HOUR + offset * 60_000  # noqa: E731
        o = w.next_offset
        w.append([_customer(k, t, at(0, o + i)) for i, (k, t) in enumerate(
            (("cust-1", "gold"), ("cust-3", "silver"), ("cust-7", "bronze")))])
        o = w.next_offset
        w.append([_customer("cust-1", "platinum", at(0, o)), _customer("cust-10", "gold", at(0, o + 1))],
                 producer_id=ABORTED_PRODUCER, producer_epoch=0, base_sequence=0,
                 transactional=True)
        w.append_marker(producer_id=ABORTED_PRODUCER, producer_epoch=0, commit=False,
                        coordinator_epoch=1, timestamp=at(0, w.next_offset))
        o = w.next_offset
        w.append([_customer("cust-2", "gold", at(0, o)), _customer("cust-8", "silver", at(0, o + 1))],
                 producer_id=LATE_COMMIT_PRODUCER, producer_epoch=0, base_sequence=0,
                 transactional=True)
        w.append([_customer("cust-0", "gold", at(0, w.next_offset))])
        if night < 1:
            return
        # the COMMIT came a minute after night 1's copy: within the transaction timeout
        # (the broker aborts a transaction older than transaction.max.timeout.ms)
        w.append_marker(producer_id=LATE_COMMIT_PRODUCER, producer_epoch=0, commit=True,
                        coordinator_epoch=1, timestamp=at(0, w.next_offset))
        o = w.next_offset
        w.append([_customer(k, t, at(1, o + i)) for i, (k, t) in enumerate(
            (("cust-0", "silver"), ("cust-3", None), ("cust-9", "bronze"), ("cust-5", "platinum")))])


def _customers(directory: Path, night: int) -> None:
    _customers_active(directory, _customers_cleaned(directory), night)


# ------------------------------------------------------------------ internal topics
#: the topic id partition.metadata names (22-character URL-safe base64, as Kafka prints it)
PAYMENTS_TOPIC_ID = "cGF5bWVudHMtdG9waWMtaQ"
#: (group, topic, partition, committed offset) per night, in commit order
COMMITS = (
    (("billing", "payments", 0, 10), ("reports", "orders", 1, 5),
     ("replayer", "payments", 1, 40), ("billing", "payments", 0, 15)),
    (("reports", "orders", 1, 9), ("billing", "payments", 0, 23)),
)


def _payments0_state(directory: Path) -> None:
    """What the broker keeps beside payments-0: the producer-state snapshot written when the
    first segment rolled at offset 15 (producer 5000's last batch: offsets 10..13, sequences
    8..11, epoch 0), every batch in leader epoch 0, and the topic's id."""
    (directory / f"{15:020d}.snapshot").write_bytes(encode_producer_snapshot([{
        "producer_id": 5000, "producer_epoch": 0, "last_sequence": 11, "last_offset": 13,
        "offset_delta": 3, "timestamp": T0 + 2 * HOUR + 13 * 1000, "coordinator_epoch": 1,
        "current_txn_first_offset": -1}]))
    (directory / "leader-epoch-checkpoint").write_text(leader_epoch_checkpoint_text([(0, 0)]))
    (directory / "partition.metadata").write_text(partition_metadata_text(PAYMENTS_TOPIC_ID))


def _consumer_offsets(directory: Path, night: int) -> None:
    """Night 2's log is night 1's bytes and more (a growing segment)."""
    with SegmentWriter(directory, 0) as w:
        ts = T0 + 3 * HOUR
        w.append([internal_record("offsets", {
            "key": {"type": 2, "data": {"group": "billing"}},
            "value": {"version": 3, "data": {
                "protocolType": "consumer", "generation": 1, "protocol": "range",
                "leader": "billing-1", "currentStateTimestamp": ts, "members": [{
                    "memberId": "billing-1", "clientId": "billing", "clientHost": "/10.0.0.7",
                    "rebalanceTimeout": 300000, "sessionTimeout": 45000,
                    "subscription": "", "assignment": ""}]}}}, timestamp=ts)])
        for n in range(night + 1):
            for k, (group, topic, partition, offset) in enumerate(COMMITS[n]):
                at = ts + n * 24 * HOUR + (k + 1) * 1000
                w.append([internal_record("offsets", {
                    "key": {"type": 1, "data": {"group": group, "topic": topic,
                                                "partition": partition}},
                    "value": {"version": 3, "data": {"offset": offset, "leaderEpoch": 0,
                                                     "metadata": "", "commitTimestamp": at}}},
                    timestamp=at)])


def _transaction_state(directory: Path, night: int) -> None:
    """payments-0's transactions (producer 5000), as its coordinator logged them."""
    with SegmentWriter(directory, 0) as w:
        for txn in range(3):
            start = T0 + 2 * HOUR + 5 * txn * 1000
            for status, at in ((1, start), (4 if txn != 1 else 5, start + 4000)):
                w.append([internal_record("transaction-log", {
                    "key": {"type": 0, "data": {"transactionalId": "payments-0-tx"}},
                    "value": {"version": 0, "data": {
                        "producerId": 5000, "producerEpoch": 0, "transactionTimeoutMs": 60000,
                        "transactionStatus": status,
                        "transactionPartitions": [{"topic": "payments", "partitionIds": [0]}],
                        "transactionLastUpdateTimestampMs": at,
                        "transactionStartTimestampMs": start}}}, timestamp=at)])


def _cluster_metadata(directory: Path) -> None:
    with SegmentWriter(directory, 0) as w:
        w.append([internal_record("cluster-metadata", r, timestamp=T0) for r in (
            {"type": "TOPIC_RECORD", "version": 0,
             "data": {"name": "payments", "topicId": PAYMENTS_TOPIC_ID}},
            *({"type": "PARTITION_RECORD", "version": 0,
               "data": {"partitionId": p, "topicId": PAYMENTS_TOPIC_ID, "replicas": [1],
                        "isr": [1], "leader": 1, "leaderEpoch": 0, "partitionEpoch": 0}}
              for p in (0, 1)))])


# ------------------------------------------------------------------ broker-2 (night 2)
#: the second broker's log directory, under the night's folder
BROKER_2 = "broker-2"
#: its meta.properties (Kafka UUIDs: 22 characters of URL-safe base64)
CLUSTER_ID, BROKER_2_DIRECTORY_ID = "a2Fma2Fsb2ctZGVtby0wMQ", "YnJva2VyLTItbG9nZGlyMQ"
#: the folder Kafka renamed when the topic ``audit-log`` was deleted (LocalLog.logDeleteDirName)
DELETED_FOLDER = "audit-log-0.61756469742d6c6f672d64656c657465-delete"
#: (topic, partition): (recovery point, high watermark); ledger-0's tail (10..) lies past both
BROKER_2_CHECKPOINTS = {("ledger", 0): (5, 8), ("transfers", 0): (5, 5)}
HANGING_PRODUCER = 7000


def _broker2(directory: Path) -> None:
    """Night 2's ``broker-2/`` (the module docstring)."""
    ts = T0 + 26 * HOUR
    with SegmentWriter(directory / "ledger-0", 0) as w:
        w.append([_payment(k, ts + k) for k in range(5)], codec="zstd")          # 0..4
        w.append([_payment(k, ts + 1000 + k) for k in range(5, 10)], codec="zstd")  # 5..9
        # the broker died writing offsets 10..13: half a batch on disk
        batch = encode_v2_batch(w.next_offset, [_payment(k, ts + 2000) for k in range(10, 14)])
        w.append_raw(batch[: len(batch) // 2])
    with SegmentWriter(directory / "transfers-0", 0) as w:
        w.append([_payment(k, ts + k) for k in range(3)], producer_id=HANGING_PRODUCER,
                 producer_epoch=0, base_sequence=0, transactional=True)          # 0..2, open
        w.append([_payment(k, ts + 10 * 60_000 + k) for k in range(3, 5)])      # 3..4
    (directory / "transfers-0" / f"{5:020d}.snapshot").write_bytes(encode_producer_snapshot([{
        "producer_id": HANGING_PRODUCER, "producer_epoch": 0, "last_sequence": 2,
        "last_offset": 2, "offset_delta": 2, "timestamp": ts + 2, "coordinator_epoch": 0,
        "current_txn_first_offset": 0}]))
    with SegmentWriter(directory / DELETED_FOLDER, 0) as w:
        w.append([WriteRecord(b"audit", b"event-%d" % k, timestamp=T0 + 25 * HOUR + k)
                  for k in range(3)])
    (directory / "meta.properties").write_text(meta_properties_text(
        CLUSTER_ID, 2, directory_id=BROKER_2_DIRECTORY_ID))
    points = sorted(BROKER_2_CHECKPOINTS.items())
    (directory / "recovery-point-offset-checkpoint").write_text(
        offset_checkpoint_text([(t, p, rp) for (t, p), (rp, _) in points]))
    (directory / "replication-offset-checkpoint").write_text(
        offset_checkpoint_text([(t, p, hw) for (t, p), (_, hw) in points]))
    (directory / "log-start-offset-checkpoint").write_text(offset_checkpoint_text([]))
    (directory / "cleaner-offset-checkpoint").write_bytes(b"")  # Kafka creates it empty


def write_night(root: Path, night: int) -> Path:
    """Write snapshot ``night`` (0 or 1) under ``root/<date>/``; return that directory."""
    out = root / NIGHTS[night]
    if out.exists():
        shutil.rmtree(out)
    base = _orders0_rolled(out / "orders-0")
    _orders0_active(out / "orders-0", base, night)
    _orders1(out / "orders-1", night)
    _legacy(out / "legacy-0")
    _payments(out / "payments-0", 0, night)
    _payments(out / "payments-1", 1, night)
    _payments0_state(out / "payments-0")
    _consumer_offsets(out / "__consumer_offsets-0", night)
    _transaction_state(out / "__transaction_state-0", night)
    _cluster_metadata(out / "__cluster_metadata-0")
    _customers(out / "customers-0", night)
    cdc.write(out, night, T0, HOUR)
    exactly_once.write(out, night, T0, HOUR)
    schemas.write(out, night, T0, HOUR)
    if night >= 1:
        _broker2(out / BROKER_2)
    tiered.write_local(out, night)
    (out / "_SUCCESS").write_bytes(b"")
    (out / "README.txt").write_text("nightly copy of the broker log directories\n")
    return out


def write_nights(root) -> list[Path]:
    root = Path(root)
    return [write_night(root, n) for n in range(len(NIGHTS))]


def upload(root, bucket: str, prefix: str, client) -> int:
    """Upload ``root/<date>/...`` to ``s3://bucket/prefix/<date>/...``; return the object count."""
    root = Path(root)
    try:
        client.create_bucket(Bucket=bucket)
    except client.exceptions.BucketAlreadyOwnedByYou:
        pass
    n = 0
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        key = f"{prefix.strip('/')}/{path.relative_to(root).as_posix()}".lstrip("/")
        client.upload_file(str(path), bucket, key)
        n += 1
    return n
