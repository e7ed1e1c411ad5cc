"""``__remote_log_metadata``: Kafka's own record of which segments are in the tier (KIP-405).

Kafka's TopicBasedRemoteLogMetadataManager writes one record per event, key null, the value
framed by RemoteLogMetadataSerde exactly as ``__cluster_metadata``'s values are (unsigned
varints frame version 1, api key, record version, then the record; flexible from v0), with
specs of its own (``specs/``, apache/kafka ``storage/src/main/resources/message/``):

    0 RemoteLogSegmentMetadataRecord          a segment's copy started: segment id, topic id,
                                              topic and partition, offsets, leader epochs,
                                              size, state COPY_SEGMENT_STARTED
    1 RemoteLogSegmentMetadataUpdateRecord    a later state of it: COPY_SEGMENT_FINISHED
                                              (with the plugin's custom metadata),
                                              DELETE_SEGMENT_STARTED, DELETE_SEGMENT_FINISHED
    2 RemotePartitionDeleteMetadataRecord     a partition's remote data deleted: MARKED,
                                              STARTED, FINISHED
    3 RemoteLogSegmentMetadataSnapshotRecord  a broker's local snapshot of the above (its
                                              files, not the topic; decoded all the same)

Every record of one topic partition goes to the same metadata partition, so one metadata
partition read in offset order replays each segment's events in order. States are Kafka's
``RemoteLogSegmentState`` and ``RemotePartitionDeleteState`` ids.

**Custom metadata** is bytes the plugin returns when it has copied a segment; Kafka stores them
unread. Aiven's plugin (SegmentCustomMetadataSerde) writes a struct made only of Kafka tagged
fields (unsigned varint count, then per field unsigned varint tag, unsigned varint size, the
value), tags in increasing order::

    0 remote_size    VARLONG (zigzag)   bytes uploaded: .log + .indexes + .rsm-manifest
    1 object_prefix  COMPACT_STRING     the key prefix when the segment was uploaded
    2 object_key     COMPACT_STRING     the segment's main path (kafkalog.tiered.layout)

Other plugins write other bytes (mgoblin/minio-rsm: one byte of flags); those stay bytes.

:func:`decode_remote_log_metadata` is the ``remote-log-metadata`` decoder of ``kafkalog dump``;
:func:`read_events`, :func:`segment_rows` and :func:`live_segments` give a future
``remote_segments`` table its rows and the live segment set.
"""

from __future__ import annotations

import base64
from functools import cache
from typing import NamedTuple

from ..default_records import read_varint
from ..log_reader import scan
from ..model import Batch, Finding
from .schema import MessageError, MessageSpec, read_uvarint, spec
from .framing import decode_framed

#: RemoteLogSegmentState ids
SEGMENT_STATES = {0: "COPY_SEGMENT_STARTED", 1: "COPY_SEGMENT_FINISHED",
                  2: "DELETE_SEGMENT_STARTED", 3: "DELETE_SEGMENT_FINISHED"}
#: RemotePartitionDeleteState ids
PARTITION_DELETE_STATES = {0: "DELETE_PARTITION_MARKED", 1: "DELETE_PARTITION_STARTED",
                           2: "DELETE_PARTITION_FINISHED"}
#: RemoteLogSegmentState.isValidTransition (a state may also repeat itself)
TRANSITIONS = {None: {"COPY_SEGMENT_STARTED"},
               "COPY_SEGMENT_STARTED": {"COPY_SEGMENT_FINISHED", "DELETE_SEGMENT_STARTED"},
               "COPY_SEGMENT_FINISHED": {"DELETE_SEGMENT_STARTED"},
               "DELETE_SEGMENT_STARTED": {"DELETE_SEGMENT_FINISHED"},
               "DELETE_SEGMENT_FINISHED": set()}
LIVE = "COPY_SEGMENT_FINISHED"

SEGMENT_METADATA = "REMOTE_LOG_SEGMENT_METADATA_RECORD"
SEGMENT_UPDATE = "REMOTE_LOG_SEGMENT_METADATA_UPDATE_RECORD"
PARTITION_DELETE = "REMOTE_PARTITION_DELETE_METADATA_RECORD"

#: Aiven's custom metadata fields, by tag (SegmentCustomMetadataField)
CUSTOM_FIELDS = {0: "remote_size", 1: "object_prefix", 2: "object_key"}


#: The specs of ``__remote_log_metadata``'s records: their api keys are their own, not
#: ``__cluster_metadata``'s (:func:`.topics.metadata_records` leaves them out).
REMOTE_LOG_SPECS = ("RemoteLogSegmentMetadataRecord", "RemoteLogSegmentMetadataUpdateRecord",
                    "RemotePartitionDeleteMetadataRecord",
                    "RemoteLogSegmentMetadataSnapshotRecord")


@cache
def remote_log_records() -> dict[int, MessageSpec]:
    """api key -> spec of ``__remote_log_metadata``'s records."""
    return {spec(name).api_key: spec(name) for name in REMOTE_LOG_SPECS}


def decode_custom_metadata(raw: bytes) -> dict | None:
    """Aiven's custom metadata as ``{"remote_size", "object_prefix", "object_key"}`` (the
    fields it holds; unknown tags are skipped, as Kafka's reader keeps them unread), or None
    when ``raw`` is not exactly such a struct (another plugin's bytes)."""
    if not raw:
        return None
    try:
        count, pos = read_uvarint(raw, 0, len(raw), "tagged field count")
        out: dict = {}
        last = -1
        for _ in range(count):
            tag, pos = read_uvarint(raw, pos, len(raw), "tag")
            size, pos = read_uvarint(raw, pos, len(raw), "size")
            end = pos + size
            if tag <= last or end > len(raw):
                return None
            last = tag
            if tag == 0:
                value, used = read_varint(raw, pos)
            elif tag in CUSTOM_FIELDS:
                n, used = read_uvarint(raw, pos, end, "string length")
                if n == 0:  # a null string: the plugin writes none
                    return None
                value = bytes(raw[used:used + n - 1]).decode("utf-8")
                used += n - 1
            else:
                pos = end
                continue
            if used != end:
                return None
            out[CUSTOM_FIELDS[tag]] = value
            pos = end
        return out if pos == len(raw) else None
    except (MessageError, IndexError, UnicodeDecodeError, ValueError):
        return None


def decode_remote_log_metadata(key: bytes | None, value: bytes | None) -> dict:
    """One ``__remote_log_metadata`` record: ``{"type", "version", "data"}`` as for
    ``__cluster_metadata``; a record that carries custom metadata also gets
    ``"customMetadata"``: Aiven's fields decoded, or None if they are another plugin's."""
    out = decode_framed(value, remote_log_records(), "remote log metadata record")
    raw = out["data"].get("customMetadata")
    if raw is not None:
        out["customMetadata"] = decode_custom_metadata(base64.b64decode(raw))
    return out


class MetadataEvent(NamedTuple):
    """A decoded ``__remote_log_metadata`` record and where it is."""

    metadata_partition: int | None  # the __remote_log_metadata partition, if known
    offset: int
    timestamp: int | None
    type: str
    version: int
    data: dict  # the spec's fields (JSON names)
    custom_metadata: dict | None


def read_events(source, *, metadata_partition: int | None = None,
                findings: list | None = None) -> list[MetadataEvent]:
    """The data records of a ``__remote_log_metadata`` segment (any kafkalog source), in
    offset order. The segment's own findings and records that do not decode
    (``internal_record_error``) are appended to ``findings`` when given."""
    events = []
    for item in scan(source):
        if not isinstance(item, Batch):
            if findings is not None:
                findings.append(item)
            continue
        if item.is_control:
            continue
        for r in item.records:
            try:
                d = decode_remote_log_metadata(r.key, r.value)
            except MessageError as err:
                if findings is not None:
                    findings.append(Finding(MessageError.kind, item.position, item.end,
                                            f"offset {r.offset}: {err}", r.offset, r.offset))
                continue
            events.append(MetadataEvent(metadata_partition, r.offset, r.timestamp, d["type"],
                                        d["version"], d["data"], d.get("customMetadata")))
    return events


def _state(names: dict, value: int) -> str:
    return names.get(value, f"UNKNOWN({value})")


def _new_row(segment_id: str, tip: dict) -> dict:
    return {
        "segment_id": segment_id, "topic_id": tip["id"], "topic": tip["name"],
        "partition": tip["partition"], "start_offset": None, "end_offset": None,
        "max_timestamp_ms": None, "broker_id": None, "segment_size_in_bytes": None,
        "segment_leader_epochs": [], "state": None, "state_history": [],
        "custom_metadata": None, "remote_size": None, "object_prefix": None,
        "object_key": None, "partition_delete_state": None, "problems": [],
    }


def _set_custom(row: dict, e: MetadataEvent) -> None:
    raw = e.data.get("customMetadata")
    if raw is None:
        return
    row["custom_metadata"] = raw
    fields = e.custom_metadata or {}
    for name in CUSTOM_FIELDS.values():
        row[name] = fields.get(name)


def segment_rows(events) -> list[dict]:
    """One plain row per segment id, from ``events`` in the order they were written (a
    pure function): the segment's identity, offsets, leader epochs, size and custom
    metadata; ``state`` (its last), ``state_history`` (every event: state, event time,
    broker, where in ``__remote_log_metadata``), ``partition_delete_state`` (the last
    partition-delete state of its topic partition, if any) and ``problems`` (events Kafka's
    RemoteLogMetadataCache refuses, and which change nothing here either: a state that is
    no transition from the one before, an update of a segment whose metadata record was not
    seen). Rows are in order of first appearance."""
    rows: dict = {}
    deletes: dict = {}
    for e in events:
        d = e.data
        where = {"event_timestamp_ms": d.get("eventTimestampMs"), "broker_id": d.get("brokerId"),
                 "metadata_partition": e.metadata_partition, "metadata_offset": e.offset}
        if e.type == PARTITION_DELETE:
            tip = d["topicIdPartition"]
            deletes[(tip["id"], tip["partition"])] = _state(
                PARTITION_DELETE_STATES, d["remotePartitionDeleteState"])
            continue
        if e.type not in (SEGMENT_METADATA, SEGMENT_UPDATE):
            continue  # snapshot records name no topic partition
        rid = d["remoteLogSegmentId"]
        row = rows.get(rid["id"])
        if row is None:
            row = rows[rid["id"]] = _new_row(rid["id"], rid["topicIdPartition"])
            if e.type == SEGMENT_UPDATE:  # Kafka's cache refuses it: nothing to update
                row["problems"].append(f"offset {e.offset}: an update of a segment whose "
                                       "metadata record was not seen")
                continue
        state = _state(SEGMENT_STATES, d["remoteLogSegmentState"])
        before = row["state"]
        if state != before and state not in TRANSITIONS.get(before, set()):
            row["problems"].append(f"offset {e.offset}: {state} after {before}, not a "
                                   "transition Kafka makes (refused)")
            continue
        if e.type == SEGMENT_METADATA:
            row.update(start_offset=d["startOffset"], end_offset=d["endOffset"],
                       max_timestamp_ms=d["maxTimestampMs"], broker_id=d["brokerId"],
                       segment_size_in_bytes=d["segmentSizeInBytes"],
                       segment_leader_epochs=[{"leader_epoch": x["leaderEpoch"],
                                               "start_offset": x["offset"]}
                                              for x in d["segmentLeaderEpochs"]])
        row["state"] = state
        row["state_history"].append({"state": state, **where})
        _set_custom(row, e)
    for row in rows.values():
        row["partition_delete_state"] = deletes.get((row["topic_id"], row["partition"]))
    return list(rows.values())


def live_segments(events) -> list[dict]:
    """The segments a reader of the tier may use after ``events`` (a pure function): those
    whose last state is COPY_SEGMENT_FINISHED, less any whose topic partition has been
    marked for deletion. A segment being deleted (DELETE_SEGMENT_STARTED) is not live."""
    return [r for r in segment_rows(events)
            if r["state"] == LIVE and r["partition_delete_state"] is None]
