"""``__share_group_state`` (KIP-932, Kafka 4): the share coordinator's log, as rows.

A share group's consumers acquire, acknowledge and release records one by one; the share
coordinator keeps, per share-partition (a share group and one partition of a topic it
reads), which offsets are in which state, and logs it in ``__share_group_state``
(decoder ``share-group-state``, :mod:`.topics`)::

    key    int16 type, then groupId string, topicId uuid, partition int32 (non-flexible)
           type 0 ShareSnapshotKey, type 1 ShareUpdateKey
    value  int16 version 0, then (flexible)
           ShareSnapshotValue: snapshotEpoch int32, stateEpoch int32, leaderEpoch int32,
                               startOffset int64, createTimestamp int64, writeTimestamp
                               int64, stateBatches, tag 0 deliveryCompleteCount int32
                               (Kafka 4.2; default -1)
           ShareUpdateValue:   snapshotEpoch int32, leaderEpoch int32, startOffset int64
                               (-1: unchanged), stateBatches, tag 0 deliveryCompleteCount
           stateBatches: firstOffset int64, lastOffset int64, deliveryState int8,
                         deliveryCount int16 per batch of offsets in one state
    null   a tombstone: the share-partition's state was deleted

A snapshot is the whole state of its share-partition; an update is laid over the last
snapshot when the coordinator replays the log (``ShareCoordinatorShard.replay``: its
batches merged over the snapshot's, its start offset taken unless -1). The rows here are
one per record, as the log holds them; replaying them is the reader's choice.
"""

from __future__ import annotations

from ..log_reader import scan
from ..model import Finding
from ..state_files import StateFile, read_source
from .schema import MessageError
from .topics import SHARE_GROUP_STATE, decode

SHARE_GROUP_STATE_ROWS = "share_group_state"
#: record type -> the row's ``record`` (ShareSnapshotKey 0, ShareUpdateKey 1)
RECORD_KINDS = {0: "snapshot", 1: "update"}
#: deliveryState ids (Kafka's SharePartition.RecordState; the log holds 0, 2 and 4)
DELIVERY_STATES = {0: "AVAILABLE", 1: "ACQUIRED", 2: "ACKNOWLEDGED", 4: "ARCHIVED"}
#: Kafka's "none" for the optional numbers of a value (-1)
_NONE = -1


def _optional(value):
    return None if value is None or value == _NONE else value


def share_group_state_row(decoded: dict) -> dict:
    """The row of one decoded ``__share_group_state`` record (``decode("share-group-state",
    key, value)``): ``{group_id, topic_id, partition, record ("snapshot" or "update"),
    tombstone, snapshot_epoch, state_epoch, leader_epoch, start_offset,
    delivery_complete_count, create_timestamp, write_timestamp, state_batches}`` with
    ``state_batches`` a list of ``{first_offset, last_offset, delivery_state,
    delivery_state_name, delivery_count}``. Values a record type does not hold are null, as
    are Kafka's -1 for "none" (an update's start offset -1 means unchanged)."""
    key, value = decoded["key"], decoded["value"]
    data = value["data"] if value else {}
    batches = None if value is None else [
        {"first_offset": b["firstOffset"], "last_offset": b["lastOffset"],
         "delivery_state": b["deliveryState"],
         "delivery_state_name": DELIVERY_STATES.get(b["deliveryState"]),
         "delivery_count": b["deliveryCount"]}
        for b in data.get("stateBatches") or ()]
    return {
        "group_id": key["data"]["groupId"],
        "topic_id": key["data"]["topicId"],
        "partition": key["data"]["partition"],
        "record": RECORD_KINDS.get(key["type"], str(key["type"])),
        "tombstone": value is None,
        "snapshot_epoch": data.get("snapshotEpoch"),
        "state_epoch": data.get("stateEpoch"),
        "leader_epoch": data.get("leaderEpoch"),
        "start_offset": _optional(data.get("startOffset")),
        "delivery_complete_count": _optional(data.get("deliveryCompleteCount", _NONE)),
        "create_timestamp": _optional(data.get("createTimestamp")),
        "write_timestamp": _optional(data.get("writeTimestamp")),
        "state_batches": batches,
    }


def read_share_group_state(source) -> StateFile:
    """The rows of a ``__share_group_state`` segment (a path or its bytes): one per data
    record, :func:`share_group_state_row` with the record's ``offset`` and ``timestamp``
    first; header ``{batch_count, record_count}``. The batch decoder's findings are kept;
    a record that does not decode is an ``internal_record_error`` finding (and no row).
    Only a file that cannot be opened raises."""
    data = read_source(source)
    header = {"batch_count": 0, "record_count": 0}
    rows: list[dict] = []
    findings: list[Finding] = []
    for item in scan(data):
        if isinstance(item, Finding):
            findings.append(item)
            continue
        header["batch_count"] += 1
        if item.is_control:
            continue  # transaction markers of the coordinator's writes
        for r in item.records:
            header["record_count"] += 1
            try:
                row = share_group_state_row(decode(SHARE_GROUP_STATE, r.key, r.value))
            except MessageError as err:
                findings.append(Finding("internal_record_error", item.position, item.end,
                                        f"offset {r.offset}: {err}", r.offset, r.offset))
                continue
            rows.append({"offset": r.offset, "timestamp": r.timestamp, **row})
    return StateFile(SHARE_GROUP_STATE_ROWS, header, tuple(rows), tuple(findings), len(data))
