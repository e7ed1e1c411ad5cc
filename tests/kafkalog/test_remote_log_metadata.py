"""``__remote_log_metadata`` decoded with Kafka's specs: hand-packed golden records (packed
from the specs' field order and Kafka's flexible-version wire rules, not with the spec-driven
writer), Aiven's custom metadata as its SegmentCustomMetadataSerde writes it
(tests/tiered_encoder.py), ``kafkalog dump`` on a ``__remote_log_metadata-N`` segment, and the
rows and live segment set replayed from events."""

from __future__ import annotations

import base64
import json
import struct

import pytest

from kafkalog.cli import main
from kafkalog.internal import MessageError, decode, decoder_for_path, uuid_text
from kafkalog.internal.remote_log import (
    decode_custom_metadata,
    live_segments,
    read_events,
    segment_rows,
)
from kafkalog.internal.topics import metadata_records
from kafkalog.writer import SegmentWriter, WriteRecord, internal_record

from tests import tiered_encoder as enc
from tests.tiered_encoder import uvarint as uv  # the tests' own, not kafkalog's

TOPIC_ID = "lZ6vvmajTWKDBUTV6SQAtQ"  # Kafka's Uuid.toString of the 16 bytes below
TOPIC_ID_RAW = base64.urlsafe_b64decode(TOPIC_ID + "==")
SEGMENT_ID = "adh9f8BMS4anaUnD8KWfWg"
SEGMENT_ID_RAW = base64.urlsafe_b64decode(SEGMENT_ID + "==")
CUSTOM = enc.custom_metadata_bytes({0: 15872, 1: "tiered/",
                                    2: f"orders-{TOPIC_ID}/3/00000000000000000000-{SEGMENT_ID}"})


def compact_string(s: str) -> bytes:
    return uv(len(s.encode()) + 1) + s.encode()


def compact_bytes(b: bytes | None) -> bytes:
    return uv(0) if b is None else uv(len(b) + 1) + b


NO_TAGS = uv(0)
# TopicIdPartitionEntry: Name, Id, Partition, tagged fields
TOPIC_ID_PARTITION = compact_string("orders") + TOPIC_ID_RAW + struct.pack(">i", 3) + NO_TAGS
# RemoteLogSegmentIdEntry: TopicIdPartition, Id, tagged fields
SEGMENT_ID_ENTRY = TOPIC_ID_PARTITION + SEGMENT_ID_RAW + NO_TAGS


def frame(api_key: int, body: bytes) -> bytes:
    """RemoteLogMetadataSerde: frame version 1, api key, version 0, then the record."""
    return uv(1) + uv(api_key) + uv(0) + body


#: RemoteLogSegmentMetadataRecord v0: segment id, StartOffset 0, EndOffset 12, BrokerId 1,
#: MaxTimestampMs, EventTimestampMs, SegmentLeaderEpochs [(0, 0), (2, 7)], SegmentSizeInBytes
#: 13751, CustomMetadata null, state 0 (COPY_SEGMENT_STARTED), no tagged fields
SEGMENT_METADATA = frame(0, SEGMENT_ID_ENTRY + struct.pack(">qqiqq", 0, 12, 1, 1_700_000_000_000,
                                                           1_700_000_000_500)
                         + uv(3) + struct.pack(">iq", 0, 0) + NO_TAGS
                         + struct.pack(">iq", 2, 7) + NO_TAGS
                         + struct.pack(">i", 13751) + compact_bytes(None) + b"\x00" + NO_TAGS)
#: RemoteLogSegmentMetadataUpdateRecord v0: COPY_SEGMENT_FINISHED with Aiven's custom metadata
SEGMENT_UPDATE = frame(1, SEGMENT_ID_ENTRY + struct.pack(">iq", 1, 1_700_000_001_000)
                       + compact_bytes(CUSTOM) + b"\x01" + NO_TAGS)
#: RemotePartitionDeleteMetadataRecord v0: DELETE_PARTITION_MARKED by broker 2
PARTITION_DELETE = frame(2, TOPIC_ID_PARTITION + struct.pack(">iqb", 2, 1_700_000_002_000, 0)
                         + NO_TAGS)
#: RemoteLogSegmentMetadataSnapshotRecord v0, DELETE_SEGMENT_STARTED, one tagged field of
#: Kafka 4.0 (tag 0, TxnIndexEmpty = true) that these specs do not know: skipped, as Kafka does
SNAPSHOT = frame(3, SEGMENT_ID_RAW + struct.pack(">qqiqq", 0, 12, 1, 1_700_000_000_000,
                                                  1_700_000_003_000)
                 + uv(1) + struct.pack(">i", 13751) + compact_bytes(b"\x3f") + b"\x02"
                 + uv(1) + uv(0) + uv(1) + b"\x01")

SEGMENT_ID_JSON = {"topicIdPartition": {"name": "orders", "id": TOPIC_ID, "partition": 3},
                   "id": SEGMENT_ID}


def test_golden_records_decode_with_kafkas_specs():
    assert decode("remote-log-metadata", None, SEGMENT_METADATA) == {
        "type": "REMOTE_LOG_SEGMENT_METADATA_RECORD", "version": 0, "data": {
            "remoteLogSegmentId": SEGMENT_ID_JSON, "startOffset": 0, "endOffset": 12,
            "brokerId": 1, "maxTimestampMs": 1_700_000_000_000,
            "eventTimestampMs": 1_700_000_000_500,
            "segmentLeaderEpochs": [{"leaderEpoch": 0, "offset": 0},
                                    {"leaderEpoch": 2, "offset": 7}],
            "segmentSizeInBytes": 13751, "customMetadata": None, "remoteLogSegmentState": 0}}
    assert decode("remote-log-metadata", None, SEGMENT_UPDATE) == {
        "type": "REMOTE_LOG_SEGMENT_METADATA_UPDATE_RECORD", "version": 0, "data": {
            "remoteLogSegmentId": SEGMENT_ID_JSON, "brokerId": 1,
            "eventTimestampMs": 1_700_000_001_000,
            "customMetadata": base64.b64encode(CUSTOM).decode(), "remoteLogSegmentState": 1},
        "customMetadata": {"remote_size": 15872, "object_prefix": "tiered/",
                           "object_key": f"orders-{TOPIC_ID}/3/00000000000000000000-{SEGMENT_ID}"}}
    assert decode("remote-log-metadata", None, PARTITION_DELETE) == {
        "type": "REMOTE_PARTITION_DELETE_METADATA_RECORD", "version": 0, "data": {
            "topicIdPartition": {"name": "orders", "id": TOPIC_ID, "partition": 3},
            "brokerId": 2, "eventTimestampMs": 1_700_000_002_000,
            "remotePartitionDeleteState": 0}}
    snap = decode("remote-log-metadata", None, SNAPSHOT)
    assert snap["type"] == "REMOTE_LOG_SEGMENT_METADATA_SNAPSHOT_RECORD"
    assert snap["data"]["segmentId"] == SEGMENT_ID and snap["data"]["remoteLogSegmentState"] == 2
    assert snap["data"]["customMetadata"] == "Pw==" and snap["customMetadata"] is None  # not Aiven's


def test_what_does_not_decode_is_a_message_error():
    with pytest.raises(MessageError, match="unknown api key 7"):
        decode("remote-log-metadata", None, frame(7, b""))
    with pytest.raises(MessageError, match="frame version 0"):
        decode("remote-log-metadata", None, b"\x00" + SEGMENT_METADATA[1:])
    with pytest.raises(MessageError, match="bytes left over"):
        decode("remote-log-metadata", None, SEGMENT_METADATA + b"\x00")
    with pytest.raises(MessageError, match="read past the end"):
        decode("remote-log-metadata", None, SEGMENT_METADATA[:40])
    with pytest.raises(MessageError, match="null value"):
        decode("remote-log-metadata", None, None)


def test_the_cluster_metadata_decoder_keeps_its_own_api_keys():
    """Api keys 0-3 are RegisterBroker.., not __remote_log_metadata's, in __cluster_metadata."""
    assert [metadata_records()[k].name for k in range(4)] == [
        "RegisterBrokerRecord", "UnregisterBrokerRecord", "TopicRecord", "PartitionRecord"]
    assert decode("cluster-metadata", None, uv(1) + uv(2) + uv(0)
                  + compact_string("t") + TOPIC_ID_RAW + NO_TAGS)["type"] == "TOPIC_RECORD"


@pytest.mark.parametrize("raw, expected", [
    (enc.custom_metadata_bytes({0: 1}), {"remote_size": 1}),
    (enc.custom_metadata_bytes({0: 2**40, 2: "k"}), {"remote_size": 2**40, "object_key": "k"}),
    (enc.custom_metadata_bytes({1: "p/", 2: "k"}), {"object_prefix": "p/", "object_key": "k"}),
    (uv(1) + uv(9) + uv(2) + b"zz", {}),  # a tag of a newer plugin: skipped
    (b"\x3f", None),  # minio-rsm's flags byte
    (b"", None),
    (uv(2) + uv(1) + uv(2) + b"\x02p" + uv(1) + uv(2) + b"\x02p", None),  # tags not increasing
    (uv(1) + uv(1) + uv(3) + b"\x02pX", None),  # size says 3, the string uses 2
    (enc.custom_metadata_bytes({0: 1}) + b"\x00", None),  # bytes after the struct
    (uv(1) + uv(1) + uv(3) + b"\x03\xff\xfe", None),  # not UTF-8
], ids=["size", "size+key", "prefix+key", "unknown tag", "minio-rsm", "empty", "order",
        "size mismatch", "left over", "utf-8"])
def test_aiven_custom_metadata(raw, expected):
    assert decode_custom_metadata(raw) == expected


def _write_metadata_log(folder, values) -> str:
    w = SegmentWriter(folder)
    for i, v in enumerate(values):
        w.append([WriteRecord(None, v, timestamp=1_700_000_000_000 + i)])
    w.close()
    return w.path


def test_dump_decodes_a_remote_log_metadata_folder(tmp_path, capsys):
    assert decoder_for_path(str(tmp_path / "__remote_log_metadata-7" / "0.log")) == \
        "remote-log-metadata"
    path = _write_metadata_log(tmp_path / "__remote_log_metadata-7",
                               [SEGMENT_METADATA, SEGMENT_UPDATE, PARTITION_DELETE, b"\x01\x09\x00"])
    assert main(["dump", "--records", "--json", path]) == 1  # the last one is a finding
    objs = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    records = [o for o in objs if o["type"] == "record"]
    assert [r["decoded"] and r["decoded"]["type"] for r in records] == [
        "REMOTE_LOG_SEGMENT_METADATA_RECORD", "REMOTE_LOG_SEGMENT_METADATA_UPDATE_RECORD",
        "REMOTE_PARTITION_DELETE_METADATA_RECORD", None]
    assert records[1]["decoded"]["customMetadata"]["object_prefix"] == "tiered/"
    finding = [o for o in objs if o["type"] == "finding"]
    assert [(f["kind"], f["base_offset"]) for f in finding] == [("internal_record_error", 3)]
    assert "unknown api key 9" in finding[0]["message"]
    # text mode prints it as kafka-dump-log.sh prints metadata records: payload: {...}
    assert main(["dump", "--records", path]) == 1
    text = capsys.readouterr().out
    assert 'payload: {"type":"REMOTE_LOG_SEGMENT_METADATA_UPDATE_RECORD"' in text


# ------------------------------------------------------------------ rows and the live set

def _segment(sid: str, partition: int = 0, start: int = 0, custom: bytes | None = None) -> dict:
    return {"type": "REMOTE_LOG_SEGMENT_METADATA_RECORD", "version": 0, "data": {
        "remoteLogSegmentId": {"topicIdPartition": {"name": "orders", "id": TOPIC_ID,
                                                    "partition": partition}, "id": sid},
        "startOffset": start, "endOffset": start + 9, "brokerId": 1, "maxTimestampMs": 5,
        "eventTimestampMs": 10, "segmentLeaderEpochs": [{"leaderEpoch": 0, "offset": start}],
        "segmentSizeInBytes": 100, "customMetadata": None, "remoteLogSegmentState": 0}}


def _update(sid: str, state: int, partition: int = 0, custom: bytes | None = None,
            at: int = 20) -> dict:
    return {"type": "REMOTE_LOG_SEGMENT_METADATA_UPDATE_RECORD", "version": 0, "data": {
        "remoteLogSegmentId": {"topicIdPartition": {"name": "orders", "id": TOPIC_ID,
                                                    "partition": partition}, "id": sid},
        "brokerId": 2, "eventTimestampMs": at,
        "customMetadata": None if custom is None else base64.b64encode(custom).decode(),
        "remoteLogSegmentState": state}}


def _partition_delete(partition: int, state: int) -> dict:
    return {"type": "REMOTE_PARTITION_DELETE_METADATA_RECORD", "version": 0, "data": {
        "topicIdPartition": {"name": "orders", "id": TOPIC_ID, "partition": partition},
        "brokerId": 3, "eventTimestampMs": 30, "remotePartitionDeleteState": state}}


A, B, C, D, E, F = (uuid_text(bytes([i]) * 16) for i in range(1, 7))  # as Kafka prints UUIDs
HISTORY = [
    _segment(A), _segment(B, start=10), _segment(C, start=20),
    _update(A, 1, custom=CUSTOM),                     # A: copied
    _update(B, 1), _update(B, 2), _update(B, 3),      # B: copied, then deleted
    _segment(D, partition=1), _update(D, 1, partition=1),
    _partition_delete(1, 0),                          # D's partition marked for deletion
    _update(E, 1),                                    # E: an update of a segment never started
    _segment(F, start=30), _update(F, 2), _update(F, 1),  # F: FINISHED after DELETE_STARTED
    # (Kafka's cache refuses both: they change nothing)
    _update(A, 1, custom=CUSTOM, at=21),              # a repeated state is fine (retries)
]


@pytest.fixture(scope="module")
def events(tmp_path_factory):
    folder = tmp_path_factory.mktemp("rlm") / "__remote_log_metadata-0"
    path = _write_metadata_log(folder, [internal_record("remote-log-metadata", d).value
                                        for d in HISTORY])
    findings = []
    out = read_events(path, metadata_partition=0, findings=findings)
    assert findings == [] and len(out) == len(HISTORY)
    return out


def test_rows_of_a_remote_segments_table(events):
    rows = {r["segment_id"]: r for r in segment_rows(events)}
    assert list(rows) == [A, B, C, D, E, F]
    a = rows[A]
    assert {k: a[k] for k in ("topic", "topic_id", "partition", "start_offset", "end_offset",
                              "segment_size_in_bytes", "broker_id", "state")} == {
        "topic": "orders", "topic_id": TOPIC_ID, "partition": 0, "start_offset": 0,
        "end_offset": 9, "segment_size_in_bytes": 100, "broker_id": 1,
        "state": "COPY_SEGMENT_FINISHED"}
    assert a["segment_leader_epochs"] == [{"leader_epoch": 0, "start_offset": 0}]
    assert a["remote_size"] == 15872 and a["object_prefix"] == "tiered/"
    assert a["custom_metadata"] == base64.b64encode(CUSTOM).decode()
    assert [(h["state"], h["metadata_offset"], h["metadata_partition"]) for h in
            a["state_history"]] == [("COPY_SEGMENT_STARTED", 0, 0), ("COPY_SEGMENT_FINISHED", 3, 0),
                                    ("COPY_SEGMENT_FINISHED", 14, 0)]
    assert a["problems"] == []
    assert rows[B]["state"] == "DELETE_SEGMENT_FINISHED" and len(rows[B]["state_history"]) == 4
    assert rows[C]["state"] == "COPY_SEGMENT_STARTED"
    assert rows[D]["partition_delete_state"] == "DELETE_PARTITION_MARKED"
    assert rows[E]["start_offset"] is None and rows[E]["state"] is None
    assert rows[E]["problems"] == ["offset 10: an update of a segment whose metadata record "
                                   "was not seen"]
    assert rows[F]["state"] == "DELETE_SEGMENT_STARTED"
    assert rows[F]["problems"] == ["offset 13: COPY_SEGMENT_FINISHED after "
                                   "DELETE_SEGMENT_STARTED, not a transition Kafka makes (refused)"]
    json.dumps(list(rows.values()))  # plain rows: JSON (and Arrow) ready


def test_the_live_segment_set(events):
    assert [r["segment_id"] for r in live_segments(events)] == [A]
    # a pure function of the events: replaying a prefix gives the set at that point
    assert [r["segment_id"] for r in live_segments(events[:4])] == [A]
    assert [r["segment_id"] for r in live_segments(events[:5])] == [A, B]
    assert [r["segment_id"] for r in live_segments(events[:9])] == [A, D]
    assert [r["segment_id"] for r in live_segments(events[:10])] == [A]


def test_records_that_do_not_decode_are_findings(tmp_path):
    path = _write_metadata_log(tmp_path / "__remote_log_metadata-1",
                               [SEGMENT_METADATA, frame(5, b""), SEGMENT_UPDATE])
    findings = []
    events = read_events(path, metadata_partition=1, findings=findings)
    assert [e.type for e in events] == ["REMOTE_LOG_SEGMENT_METADATA_RECORD",
                                        "REMOTE_LOG_SEGMENT_METADATA_UPDATE_RECORD"]
    assert [(f.kind, f.base_offset) for f in findings] == [("internal_record_error", 1)]
    assert events[1].custom_metadata["remote_size"] == 15872
