"""``__share_group_state`` records (KIP-932), encoded by hand from Kafka's specs.

ShareCoordinatorRecordSerde / CoordinatorRecordSerde: key = int16 record type (0 snapshot,
1 update) + ShareSnapshotKey/ShareUpdateKey (non-flexible: int16-length string, 16-byte
uuid, int32); value = int16 version 0 + the flexible value struct (compact array = uvarint
n + 1, every struct ending with its tagged fields). ``SHARE_RECORDS`` holds each record with
what decoding it gives; ``share_segment`` writes them as a partition's segment.
"""

from __future__ import annotations

import struct

from kafkalog.writer import SegmentWriter, WriteRecord

from tests.tiered_encoder import uvarint


SHARE_TOPIC_ID = bytes.fromhex("0c4f9a3e5b7d41e2a8c6f0b1d2e3f405")


SHARE_TOPIC_ID_TEXT = "DE-aPlt9QeKoxvCx0uP0BQ"  # Kafka's base64 of those 16 bytes


def share_key(record_type: int, group: str, partition: int) -> bytes:
    raw = group.encode()
    return (struct.pack(">hh", record_type, len(raw)) + raw + SHARE_TOPIC_ID
            + struct.pack(">i", partition))


def state_batches(batches) -> bytes:
    out = uvarint(len(batches) + 1)
    for first, last, state, count in batches:
        out += struct.pack(">qqbh", first, last, state, count) + uvarint(0)  # no tagged fields
    return out


def share_snapshot_value(snapshot_epoch, state_epoch, leader_epoch, start, created, written,
                          batches, delivery_complete=None) -> bytes:
    tagged = uvarint(0) if delivery_complete is None else \
        uvarint(1) + uvarint(0) + uvarint(4) + struct.pack(">i", delivery_complete)  # tag 0, 4 bytes
    return (struct.pack(">hiiiqqq", 0, snapshot_epoch, state_epoch, leader_epoch, start,
                        created, written) + state_batches(batches) + tagged)


def share_update_value(snapshot_epoch, leader_epoch, start, batches) -> bytes:
    return (struct.pack(">hiiq", 0, snapshot_epoch, leader_epoch, start)
            + state_batches(batches) + uvarint(0))


SHARE_RECORDS = [  # (key, value, what decode gives)
    (share_key(0, "sg", 3),
     share_snapshot_value(1, 2, 5, 100, 1700000000000, 1700000000500,
                           [(100, 104, 2, 1), (105, 109, 0, 3)], delivery_complete=5),
     {"key": {"type": 0, "data": {"groupId": "sg", "topicId": SHARE_TOPIC_ID_TEXT,
                                  "partition": 3}},
      "value": {"version": 0, "data": {
          "snapshotEpoch": 1, "stateEpoch": 2, "leaderEpoch": 5, "startOffset": 100,
          "deliveryCompleteCount": 5, "createTimestamp": 1700000000000,
          "writeTimestamp": 1700000000500, "stateBatches": [
              {"firstOffset": 100, "lastOffset": 104, "deliveryState": 2, "deliveryCount": 1},
              {"firstOffset": 105, "lastOffset": 109, "deliveryState": 0,
               "deliveryCount": 3}]}}}),
    (share_key(1, "sg", 3), share_update_value(1, 5, -1, [(110, 110, 4, 5)]),
     {"key": {"type": 1, "data": {"groupId": "sg", "topicId": SHARE_TOPIC_ID_TEXT,
                                  "partition": 3}},
      "value": {"version": 0, "data": {
          "snapshotEpoch": 1, "leaderEpoch": 5, "startOffset": -1, "stateBatches": [
              {"firstOffset": 110, "lastOffset": 110, "deliveryState": 4,
               "deliveryCount": 5}]}}}),
    (share_key(0, "sg", 3), None,
     {"key": {"type": 0, "data": {"groupId": "sg", "topicId": SHARE_TOPIC_ID_TEXT,
                                  "partition": 3}}, "value": None}),
]


def share_segment(tmp_path, records, folder="__share_group_state-7"):
    d = tmp_path / folder
    d.mkdir()
    with SegmentWriter(d, 0) as w:
        for key, value, _ in records:
            w.append([WriteRecord(key, value, timestamp=1700000001000)])
    return d / "00000000000000000000.log"
