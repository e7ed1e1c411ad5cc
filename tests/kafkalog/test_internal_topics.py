"""Kafka's internal topics decoded with its message specs, and a partition directory's
state files: the real corpus, writer-made files for what the corpus lacks, hand-packed
golden bytes (independent of the spec-driven writer), and every fault as an error."""

from __future__ import annotations

import base64
import json
import random
import re
import struct
from collections import Counter
from importlib import resources
from pathlib import Path

import pytest

import kafkalog
from kafkalog.model import STATE_FINDING_KINDS
from kafkalog.internal import MessageError, decode, decoder_for_path, spec, spec_names
from kafkalog.internal.schema import spec_files
from kafkalog.internal.json_form import read_json
from kafkalog.internal.schema import _strip_comments, json_name, parse_spec
from kafkalog.internal.topics import key_types
from kafkalog.state_files import (
    read_leader_epoch_checkpoint,
    read_partition_metadata,
    read_producer_snapshot,
    read_state_file,
)
from kafkalog.internal.share_group_state import read_share_group_state
from kafkalog.internal.topics import decode_kraft_control
from kafkalog.writer import (
    SegmentWriter,
    encode_producer_snapshot,
    internal_record,
    leader_epoch_checkpoint_text,
    partition_metadata_text,
)

from tests.segments import CORPUS_DIR as CORPUS, CORPUS_FILES as FILES, flip_bit
from tests.share_group_state import (SHARE_RECORDS, SHARE_TOPIC_ID, SHARE_TOPIC_ID_TEXT, share_key,
                                    share_segment)
from tests.tiered_encoder import uvarint

INTERNAL = [p for p in FILES if decoder_for_path(str(p))]
#: The two CodeCrafters fixtures are KRaft metadata logs outside a __cluster_metadata folder.
CODECRAFTERS = [p for p in FILES if p.parent.name in ("jamestjw+kafka-gleam",
                                                      "thanhliemtu+codecrafters-kafka-go")]
METADATA_LOG = CORPUS / "Niloufar1171+LDI-POC" / "__cluster_metadata-0" / "00000000000000000000.log"


def _data_records(path):
    for b in kafkalog.iter_batches(path):
        if not b.is_control:
            yield from b.records


def test_the_corpus_has_its_internal_topics():
    names = sorted(p.parent.name for p in INTERNAL)
    assert len(names) == 10 and names.count("__cluster_metadata-0") == 1, names
    assert len(CODECRAFTERS) == 2


@pytest.mark.parametrize("path", INTERNAL + CODECRAFTERS,
                         ids=[str(p.relative_to(CORPUS)) for p in INTERNAL + CODECRAFTERS])
def test_every_corpus_record_decodes_exactly(path):
    decoder = decoder_for_path(str(path)) or "cluster-metadata"
    n = 0
    for r in _data_records(path):
        out = decode(decoder, r.key, r.value, expand=True)  # raises on leftover bytes
        n += 1
        if decoder == "offsets":
            assert set(out) == {"key", "value"}
            assert isinstance(out["key"]["type"], int)
            assert (out["value"] is None) == (r.value is None)
        else:
            assert set(out) == {"type", "version", "data"} and out["type"].endswith("_RECORD")
    assert n > 0


def test_cluster_metadata_record_types_of_the_corpus():
    seen = Counter()
    for r in _data_records(METADATA_LOG):
        out = decode("cluster-metadata", r.key, r.value)
        seen[(out["type"], out["version"])] += 1
    assert sum(seen.values()) == 4928  # 4,929 records, one of them a LEADER_CHANGE control record
    assert seen == Counter({
        ("NO_OP_RECORD", 0): 4801, ("PARTITION_RECORD", 1): 54, ("PARTITION_CHANGE_RECORD", 1): 54,
        ("TOPIC_RECORD", 0): 5, ("CONFIG_RECORD", 0): 3, ("REGISTER_BROKER_RECORD", 3): 2,
        ("BROKER_REGISTRATION_CHANGE_RECORD", 0): 2, ("BROKER_REGISTRATION_CHANGE_RECORD", 1): 1,
        ("BEGIN_TRANSACTION_RECORD", 0): 1, ("END_TRANSACTION_RECORD", 0): 1,
        ("FEATURE_LEVEL_RECORD", 0): 1, ("PRODUCER_IDS_RECORD", 0): 1,
        ("REGISTER_CONTROLLER_RECORD", 0): 1, ("ZK_MIGRATION_STATE_RECORD", 0): 1,
    })
    topics = [decode("cluster-metadata", r.key, r.value) for r in _data_records(METADATA_LOG)]
    first_partition = next(t for t in topics if t["type"] == "PARTITION_RECORD")
    assert first_partition == {"type": "PARTITION_RECORD", "version": 1, "data": {
        "partitionId": 0, "topicId": "gSnfpEbtQfSDpxM2lhEn9A", "replicas": [1], "isr": [1],
        "removingReplicas": [], "addingReplicas": [], "leader": 1, "leaderEpoch": 0,
        "partitionEpoch": 0, "directories": ["XHhkr4tkSsD900pOQ8pPfg"]}}
    assert {"type": "TOPIC_RECORD", "version": 0,
            "data": {"name": "__consumer_offsets", "topicId": "gSnfpEbtQfSDpxM2lhEn9A"}} in topics


def test_consumer_offsets_of_the_corpus():
    path = CORPUS / "KAIPASUBHASH+kafka-logs" / "__consumer_offsets-2" / "00000000000000000000.log"
    out = [decode("offsets", r.key, r.value) for r in _data_records(path)]
    assert out[1] == {  # value version 1: expireTimestamp, no leaderEpoch
        "key": {"type": 1, "data": {"group": "console-consumer-23934", "topic": "TestTopic",
                                    "partition": 0}},
        "value": {"version": 1, "data": {"offset": 0, "metadata": "",
                                         "commitTimestamp": 1639563468980,
                                         "expireTimestamp": 1640168268980}}}
    path = CORPUS / "VolodymyrZee+kafka" / "__consumer_offsets-17" / "00000000000000000000.log"
    records = list(_data_records(path))
    out = [decode("offsets", r.key, r.value, expand=True) for r in records]
    assert out[2] == {"key": {"type": 2, "data": {"group": "console-consumer-48266"}},
                      "value": None}  # a tombstone
    member = out[0]["value"]["data"]["members"][0]
    assert out[0]["value"]["version"] == 3 and out[0]["value"]["data"]["protocol"] == "range"
    assert member["subscription"] == {"version": 1, "data": {
        "topics": ["first_topic"], "userData": None, "ownedPartitions": []}}
    assert member["assignment"] == {"version": 1, "data": {
        "assignedPartitions": [{"topic": "first_topic", "partitions": [0, 1, 2]}],
        "userData": None}}
    plain = decode("offsets", records[0].key, records[0].value)["value"]["data"]["members"][0]
    assert plain["subscription"] == "AAEAAAABAAtmaXJzdF90b3BpY/////8AAAAA"  # base64 unless asked


def test_every_shipped_spec_parses():
    names = spec_names()
    # Kafka 4.3.0 (specs/README.md): 44 group, 4 share and 2 transaction coordinator, 26
    # metadata, 5 storage (4 remote log metadata, producer snapshot), 6 clients (2 consumer
    # protocol, 4 KRaft control records), 1 quorum state = 88; trunk's
    # UnregisterControllerRecord; 4.0.2's record type 9 (key and value) = 91 names
    assert len(names) == 91
    assert sum(p.startswith("4.3.0/") for ps in spec_files().values() for p in ps) == 88
    for name in names:
        s = spec(name)
        # one file is not named after its message
        assert s.name == {"ZkMigrationRecord": "ZkMigrationStateRecord"}.get(name, name)
        assert not s.valid.empty


def test_both_layouts_of_coordinator_key_specs():
    # up to Kafka 4.0 a key spec's validVersions are its record types (1eb7644349cb's
    # OffsetCommitKey: "0-1"); in 4.3.0 the type is the apiKey of a "coordinator-key" spec
    # read as version 0, type 0 being LegacyOffsetCommitKey
    old = key_types([parse_spec("""{"type": "data", "name": "OffsetCommitKey",
        "validVersions": "0-1", "flexibleVersions": "none",
        "fields": [{"name": "group", "type": "string", "versions": "0-1"},
                   {"name": "topic", "type": "string", "versions": "0-1"},
                   {"name": "partition", "type": "int32", "versions": "0-1"}]}"""),
        spec("ShareGroupPartitionMetadataKey")])  # 4.0.2's type 9, in the old form
    assert {t: (s.name, v) for t, (s, v) in old.items()} == {
        0: ("OffsetCommitKey", 0), 1: ("OffsetCommitKey", 1),
        9: ("ShareGroupPartitionMetadataKey", 9)}
    new = key_types([spec("LegacyOffsetCommitKey"), spec("OffsetCommitKey"),
                     spec("GroupMetadataKey")])
    assert {t: (s.name, v) for t, (s, v) in new.items()} == {
        0: ("LegacyOffsetCommitKey", 0), 1: ("OffsetCommitKey", 0), 2: ("GroupMetadataKey", 0)}
    key = struct.pack(">h", 1) + b"g" + struct.pack(">h", 1) + b"t" + struct.pack(">i", 3)
    for spec_, version in (old[1], new[1]):
        assert spec_.read_exactly(key, version) == {"group": "g", "topic": "t", "partition": 3}


def test_kafka_4_metadata_records():
    assert decode("cluster-metadata", None, uvarint(1) + uvarint(28) + uvarint(0) + uvarint(4) + b"pay"
                  + b"\x00") == {"type": "CLEAR_ELR_RECORD", "version": 0,
                                 "data": {"topicName": "pay"}}
    assert decode("cluster-metadata", None, uvarint(1) + uvarint(29) + uvarint(0) + struct.pack(">i", 3)
                  + b"\x00")["data"] == {"controllerId": 3}


def _raw_tags(fields: list, struct_name: str, out: set) -> None:
    """(struct, tag as written, field) of every tagged field in a spec's raw JSON."""
    for f in fields:
        if "tag" in f:
            out.add((struct_name, f["tag"], json_name(f["name"])))
        if "fields" in f:
            _raw_tags(f["fields"], f["type"].removeprefix("[]"), out)


def _parsed_tags(s, out: set, seen: set) -> None:
    if s.name in seen:
        return
    seen.add(s.name)
    for tag, f in s.tags.items():
        out.add((s.name, tag, f.name))
    for f in s.fields:
        if f.struct is not None:
            _parsed_tags(f.struct, out, seen)


def test_every_shipped_specs_tagged_fields_are_known_by_number():
    # Kafka's generator reads "tag": "0" as the number 0 (RegisterBrokerRecord's LogDirs,
    # BrokerRegistrationChangeRecord's "2"): a tag kept as a string was never matched on
    # the wire, and the field was skipped as an unknown tag
    folder = resources.files("kafkalog.internal").joinpath("specs")
    written = 0
    for name in spec_names():
        doc = json.loads(_strip_comments(folder.joinpath(spec_files()[name][0]).read_text()))
        raw: set = set()
        _raw_tags(doc["fields"], doc["name"], raw)
        for common in doc.get("commonStructs", ()):
            _raw_tags(common["fields"], common["name"], raw)
        parsed: set = set()
        _parsed_tags(spec(name).struct, parsed, set())
        assert {(s, int(t), f) for s, t, f in raw} == parsed, name
        written += sum(isinstance(t, str) for _, t, _ in raw)
    # up to 1eb7644349cb RegisterBrokerRecord and BrokerRegistrationChangeRecord wrote
    # "tag": "0" / "2"; 4.3.0 writes numbers, and a string tag still reads as its number
    assert written == 0
    s = parse_spec("""{"name": "X", "validVersions": "0", "flexibleVersions": "0+", "fields": [
        {"name": "A", "type": "int8", "versions": "0+", "taggedVersions": "0+", "tag": "2"}]}""")
    assert s.read_exactly(b"\x01\x02\x01\x07", 0) == {"a": 7}


def test_register_broker_record_v3_keeps_its_log_dirs():
    # tests/data/broker-dirs' copy of the Niloufar1171 metadata log: REGISTER_BROKER_RECORD v3
    # at offsets 6 and 8 (batch positions 384 and 626). Its last 20 bytes:
    #   01                                tagged fields: 1
    #   00 11                             tag 0 (LogDirs), 17 bytes
    #   02                                compact array of 1 uuid
    #   5c 78 64 af 8b 64 4a c0 fd d3 4a 4e 43 ca 4f 7e
    # = "XHhkr4tkSsD900pOQ8pPfg" in Kafka's base64, the directory.id of that broker's
    # meta.properties (and the PARTITION_RECORDs' directories)
    path = (Path(__file__).parents[1] / "data" / "broker-dirs" / "Niloufar1171+LDI-POC"
            / "__cluster_metadata-0" / "00000000000000000000.log")
    found = {r.offset: r.value for r in _data_records(path) if r.value[:3] == b"\x01\x00\x03"}
    assert sorted(found) == [6, 8]
    for offset, value in found.items():
        assert value[-20:].hex() == "01001102" "5c7864af8b644ac0fdd34a4e43ca4f7e"
        out = decode("cluster-metadata", None, value)
        assert (out["type"], out["version"]) == ("REGISTER_BROKER_RECORD", 3)
        assert out["data"]["logDirs"] == ["XHhkr4tkSsD900pOQ8pPfg"]
        assert out["data"]["brokerEpoch"] == {6: 6, 8: 8}[offset]
        assert list(out["data"]) == [  # spec order, the tagged field after inControlledShutdown
            "brokerId", "isMigratingZkBroker", "incarnationId", "brokerEpoch", "endPoints",
            "features", "rack", "fenced", "inControlledShutdown", "logDirs"]


# -- writer-made records for what the corpus lacks ------------------------------------------

TRANSACTIONS = [
    {"key": {"type": 0, "data": {"transactionalId": "payments-tx"}},
     "value": {"version": 0, "data": {
         "producerId": 1000, "producerEpoch": 0, "transactionTimeoutMs": 60000,
         "transactionStatus": 1, "transactionPartitions": [{"topic": "payments",
                                                            "partitionIds": [0, 1]}],
         "transactionLastUpdateTimestampMs": 1700000000100,
         "transactionStartTimestampMs": 1700000000000}}},
    {"key": {"type": 0, "data": {"transactionalId": "payments-tx"}},
     "value": {"version": 1, "data": {  # flexible, with tagged fields
         "producerId": 1000, "previousProducerId": 999, "nextProducerId": 1001,
         "producerEpoch": 1, "transactionTimeoutMs": 60000, "transactionStatus": 4,
         "transactionPartitions": None, "transactionLastUpdateTimestampMs": 1700000000200,
         "transactionStartTimestampMs": -1, "clientTransactionVersion": 2}}},
    {"key": {"type": 0, "data": {"transactionalId": "gone"}}, "value": None},
]

GROUP_RECORDS = [
    {"key": {"type": 1, "data": {"group": "g", "topic": "first_topic", "partition": 0}},
     "value": {"version": 4, "data": {"offset": 17, "leaderEpoch": 0, "metadata": "",
                                      "commitTimestamp": 1587577981556}}},
    {"key": {"type": 2, "data": {"group": "g"}},
     "value": {"version": 4, "data": {
         "protocolType": "consumer", "generation": 3, "protocol": "range", "leader": "m1",
         "currentStateTimestamp": 1700000000000, "members": [{
             "memberId": "m1", "groupInstanceId": "i1", "clientId": "c", "clientHost": "/h",
             "rebalanceTimeout": 300000, "sessionTimeout": 45000,
             "subscription": "", "assignment": ""}]}}},
    {"key": {"type": 3, "data": {"groupId": "cg"}},
     "value": {"version": 0, "data": {"epoch": 5}}},
    {"key": {"type": 5, "data": {"groupId": "cg", "memberId": "m1"}},
     "value": {"version": 0, "data": {
         "instanceId": None, "rackId": "r1", "clientId": "c", "clientHost": "/h",
         "subscribedTopicNames": ["orders"], "subscribedTopicRegex": None,
         "rebalanceTimeoutMs": 300000, "serverAssignor": "uniform",
         "classicMemberMetadata": {"sessionTimeoutMs": 45000, "supportedProtocols": [
             {"name": "range", "metadata": base64.b64encode(b"\x00\x01").decode()}]}}}},
    {"key": {"type": 7, "data": {"groupId": "cg", "memberId": "m1"}},
     "value": {"version": 0, "data": {"topicPartitions": [
         {"topicId": "gSnfpEbtQfSDpxM2lhEn9A", "partitions": [0, 2]}]}}},
    {"key": {"type": 8, "data": {"groupId": "cg", "memberId": "m1"}}, "value": None},
    {"key": {"type": 11, "data": {"groupId": "sg"}},  # 4.1's layout: MetadataHash
     "value": {"version": 0, "data": {"epoch": 2, "metadataHash": -5}}},
]


def _segment(tmp_path, folder: str, decoder: str, decoded: list[dict]):
    d = tmp_path / folder
    d.mkdir()
    with SegmentWriter(d, 0) as w:
        for x in decoded:
            w.append([internal_record(decoder, x, timestamp=1700000000000)])
    return d / "00000000000000000000.log"


@pytest.mark.parametrize("folder, decoder, decoded", [
    ("__transaction_state-3", "transaction-log", TRANSACTIONS),
    ("__consumer_offsets-0", "offsets", GROUP_RECORDS),
])
def test_writer_made_records_decode_to_what_was_written(tmp_path, folder, decoder, decoded):
    path = _segment(tmp_path, folder, decoder, decoded)
    assert decoder_for_path(str(path)) == decoder
    assert [decode(decoder, r.key, r.value) for r in _data_records(path)] == decoded


def test_tagged_fields_at_their_defaults_are_not_written_or_shown():
    x = {"key": {"type": 0, "data": {"transactionalId": "t"}},
         "value": {"version": 1, "data": {
             "producerId": 1, "previousProducerId": -1, "producerEpoch": 0,
             "transactionTimeoutMs": 1, "transactionStatus": 0, "transactionPartitions": [],
             "transactionLastUpdateTimestampMs": 0, "transactionStartTimestampMs": 0}}}
    r = internal_record("transaction-log", x)
    assert r.value.endswith(b"\x00")  # an empty tagged-field section
    got = decode("transaction-log", r.key, r.value)["value"]["data"]
    assert "previousProducerId" not in got and "clientTransactionVersion" not in got


# -- golden bytes, packed by hand from Kafka's wire grammar ----------------------------------


def _txn_value_v1(tagged: bytes) -> bytes:
    """TransactionLogValue v1: version, producerId, producerEpoch, timeout, status, a compact
    array of one (compact string topic, compact int32 array) struct with its own empty tag
    section, two timestamps, then the message's tagged fields."""
    return (struct.pack(">hqhib", 1, 42, 3, 60000, 2)
            + uvarint(2) + uvarint(2) + b"t" + uvarint(3) + struct.pack(">ii", 0, 1) + b"\x00"
            + struct.pack(">qq", 1700000000001, 1700000000000) + tagged)


TXN_KEY = struct.pack(">hh", 0, 2) + b"tx"  # version 0, int16-length string "tx"


def test_golden_transaction_log_value_with_tagged_fields():
    tagged = (uvarint(3) + uvarint(0) + uvarint(8) + struct.pack(">q", 41)        # previousProducerId
              + uvarint(2) + uvarint(2) + struct.pack(">h", 2)                  # clientTransactionVersion
              + uvarint(7) + uvarint(3) + b"xyz")                               # a tag Kafka added later
    out = decode("transaction-log", TXN_KEY, _txn_value_v1(tagged))
    assert out == {"key": {"type": 0, "data": {"transactionalId": "tx"}},
                   "value": {"version": 1, "data": {
                       "producerId": 42, "previousProducerId": 41, "producerEpoch": 3,
                       "transactionTimeoutMs": 60000, "transactionStatus": 2,
                       "transactionPartitions": [{"topic": "t", "partitionIds": [0, 1]}],
                       "transactionLastUpdateTimestampMs": 1700000000001,
                       "transactionStartTimestampMs": 1700000000000,
                       "clientTransactionVersion": 2}}}


def test_golden_metadata_record_with_tagged_and_nullable_fields():
    topic_id = bytes(range(16))
    value = (uvarint(1) + uvarint(3) + uvarint(2)  # frame 1, PartitionRecord (api key 3), version 2
             + struct.pack(">i", 7) + topic_id
             + uvarint(2) + struct.pack(">i", 1) + uvarint(3) + struct.pack(">ii", 1, 2)  # replicas, isr
             + uvarint(1) + uvarint(1)  # no removing / adding replicas
             + struct.pack(">iii", 1, 4, 9)  # leader, leaderEpoch, partitionEpoch
             + uvarint(2) + bytes(16)  # directories: one zero uuid
             + uvarint(2) + uvarint(0) + uvarint(1) + b"\x01"  # tag 0 leaderRecoveryState = 1
             + uvarint(1) + uvarint(1) + b"\x00")  # tag 1 eligibleLeaderReplicas: null
    out = decode("cluster-metadata", None, value)
    assert out == {"type": "PARTITION_RECORD", "version": 2, "data": {
        "partitionId": 7, "topicId": base64.urlsafe_b64encode(topic_id).decode().rstrip("="),
        "replicas": [1], "isr": [1, 2], "removingReplicas": [], "addingReplicas": [],
        "leader": 1, "leaderRecoveryState": 1, "leaderEpoch": 4, "partitionEpoch": 9,
        "directories": ["AAAAAAAAAAAAAAAAAAAAAA"]}}
    assert len(out["data"]["topicId"]) == 22


@pytest.mark.parametrize("decoder, key, value, words", [
    ("transaction-log", TXN_KEY, _txn_value_v1(uvarint(1) + uvarint(0) + uvarint(4) + b"\0\0\0\0"),
     "previousProducerId: needs 8 bytes at byte 49, only 4 left"),  # an int64 in 4 bytes
    ("transaction-log", TXN_KEY, _txn_value_v1(uvarint(1) + uvarint(2) + uvarint(4) + b"\0\0\0\0"),
     "tagged field 2 declares 4 bytes but its value uses 2"),
    ("transaction-log", TXN_KEY, _txn_value_v1(b"\x00") + b"\x00", "1 bytes left over"),
    ("transaction-log", TXN_KEY, _txn_value_v1(b"\x00")[:-9], "read past the end"),
    ("transaction-log", TXN_KEY, struct.pack(">h", 2) + b"\0" * 40, "unknown version 2"),
    ("transaction-log", TXN_KEY + b"!", None, "1 bytes left over"),
    ("offsets", struct.pack(">h", 99) + b"\0\0", None, "unknown record type 99"),
    ("offsets", b"\x00", None, "too short"),
    ("offsets", None, b"\x00\x01", "without a key"),
    ("offsets", struct.pack(">hh", 2, 2) + b"\xff\xfe", None, "not UTF-8"),
    ("cluster-metadata", None, uvarint(1) + uvarint(250) + uvarint(0), "unknown api key 250"),
    ("cluster-metadata", None, uvarint(0) + uvarint(3) + uvarint(0), "frame version 0"),
    ("cluster-metadata", None, None, "null value"),
    ("cluster-metadata", None, uvarint(1) + uvarint(2) + uvarint(0) + uvarint(9) + b"abc", "read past the end"),
])
def test_records_that_do_not_decode_say_why(decoder, key, value, words):
    with pytest.raises(MessageError, match=words):
        decode(decoder, key, value)


def test_damaged_records_only_ever_raise_message_error():
    rng = random.Random(19)
    samples = [(("offsets",) + (r.key, r.value)) for r in list(_data_records(
        CORPUS / "VolodymyrZee+kafka" / "__consumer_offsets-17" / "00000000000000000000.log"))[:2]]
    samples += [("cluster-metadata", None, r.value) for r in list(_data_records(METADATA_LOG))[:12]]
    samples += [("transaction-log", TXN_KEY, _txn_value_v1(b"\x00"))]
    outcomes = Counter()
    for decoder, key, value in samples:
        for damaged in ([value[:i] for i in range(len(value))]
                        + [flip_bit(value, rng) for _ in range(40)]):
            try:
                decode(decoder, key, damaged, expand=True)
                outcomes["decoded"] += 1
            except MessageError:
                outcomes["error"] += 1
    assert outcomes["error"] > 500 and outcomes["decoded"] > 0, outcomes


# -- __share_group_state (KIP-932): the records of tests/share_group_state.py -------------------


def test_share_group_state_records_decode_by_their_folder(tmp_path):
    assert base64.urlsafe_b64encode(SHARE_TOPIC_ID).decode().rstrip("=") == SHARE_TOPIC_ID_TEXT
    path = share_segment(tmp_path, SHARE_RECORDS)
    assert decoder_for_path(str(path)) == "share-group-state"
    assert [decode("share-group-state", r.key, r.value) for r in _data_records(path)] == [
        d for _, _, d in SHARE_RECORDS]
    # the spec-driven writer makes the same bytes as the hand encoder
    assert [(w.key, w.value) for w in (internal_record("share-group-state", d)
                                       for _, _, d in SHARE_RECORDS)] == [
        (k, v) for k, v, _ in SHARE_RECORDS]


def test_share_group_state_rows(tmp_path):
    path = share_segment(tmp_path, SHARE_RECORDS)
    state = read_share_group_state(str(path))
    assert state.findings == () and state.header == {"batch_count": 3, "record_count": 3}
    key = {"group_id": "sg", "topic_id": SHARE_TOPIC_ID_TEXT, "partition": 3}
    assert state.rows == (
        {"offset": 0, "timestamp": 1700000001000, **key, "record": "snapshot",
         "tombstone": False, "snapshot_epoch": 1, "state_epoch": 2, "leader_epoch": 5,
         "start_offset": 100, "delivery_complete_count": 5, "create_timestamp": 1700000000000,
         "write_timestamp": 1700000000500, "state_batches": [
             {"first_offset": 100, "last_offset": 104, "delivery_state": 2,
              "delivery_state_name": "ACKNOWLEDGED", "delivery_count": 1},
             {"first_offset": 105, "last_offset": 109, "delivery_state": 0,
              "delivery_state_name": "AVAILABLE", "delivery_count": 3}]},
        {"offset": 1, "timestamp": 1700000001000, **key, "record": "update",
         "tombstone": False, "snapshot_epoch": 1, "state_epoch": None, "leader_epoch": 5,
         "start_offset": None, "delivery_complete_count": None, "create_timestamp": None,
         "write_timestamp": None, "state_batches": [
             {"first_offset": 110, "last_offset": 110, "delivery_state": 4,
              "delivery_state_name": "ARCHIVED", "delivery_count": 5}]},
        {"offset": 2, "timestamp": 1700000001000, **key, "record": "snapshot",
         "tombstone": True, "snapshot_epoch": None, "state_epoch": None, "leader_epoch": None,
         "start_offset": None, "delivery_complete_count": None, "create_timestamp": None,
         "write_timestamp": None, "state_batches": None})


def test_share_group_state_records_that_do_not_decode(tmp_path):
    good_key, good_value, _ = SHARE_RECORDS[0]
    bad = [(share_key(2, "sg", 3), None, None),             # no record type 2
           (good_key, good_value[:-3], None),                 # cut inside the tagged int32
           (good_key, struct.pack(">h", 1) + good_value[2:], None)]  # value version 1
    path = share_segment(tmp_path, [SHARE_RECORDS[1], *bad])
    state = read_share_group_state(str(path))
    assert [r["offset"] for r in state.rows] == [0]
    assert [(f.kind, f.base_offset) for f in state.findings] == [
        ("internal_record_error", 1), ("internal_record_error", 2), ("internal_record_error", 3)]
    messages = [f.message for f in state.findings]
    assert "share group state key: unknown record type 2 (known: 0, 1)" in messages[0]
    assert "read past the end" in messages[1]
    assert "ShareSnapshotValue: unknown version 1" in messages[2]


def test_decoders_follow_renamed_partition_folders(tmp_path):
    unique = "0c4f9a3e5b7d41e2a8c6f0b1d2e3f405"
    for folder, decoder in [(f"__consumer_offsets-3.{unique}-future", "offsets"),
                            (f"__share_group_state-7.{unique}-delete", "share-group-state"),
                            (f"__transaction_state-0.{unique}-stray", "transaction-log"),
                            ("__consumer_offsets-3.notahexid-future", None),
                            ("orders-0", None)]:
        assert decoder_for_path(f"/x/{folder}/00000000000000000000.log") == decoder, folder


def test_kraft_control_records_decode_with_their_specs():
    # ControlRecordUtils reads each value as version 0 of its spec (flexible: tagged
    # fields at the end of every struct)
    header = struct.pack(">hq", 0, 1740134033990) + uvarint(0)
    assert decode_kraft_control(3, header) == {"type": "SNAPSHOT_HEADER", "version": 0, "data": {
        "version": 0, "lastContainedLogTimestamp": 1740134033990}}
    assert decode_kraft_control(4, struct.pack(">h", 0) + uvarint(0))["data"] == {"version": 0}
    assert decode_kraft_control(5, struct.pack(">hh", 0, 1) + uvarint(0))["data"] == {
        "version": 0, "kRaftVersion": 1}
    voter = (struct.pack(">i", 1) + SHARE_TOPIC_ID                    # voterId, directory id
             + uvarint(2) + uvarint(11) + b"CONTROLLER" + uvarint(10) + b"localhost"  # one endpoint
             + struct.pack(">H", 9093) + uvarint(0)
             + struct.pack(">hh", 0, 1) + uvarint(0)                      # kraft.version 0-1
             + uvarint(0))
    assert decode_kraft_control(6, struct.pack(">h", 0) + uvarint(2) + voter + uvarint(0)) == {
        "type": "KRAFT_VOTERS", "version": 0, "data": {"version": 0, "voters": [{
            "voterId": 1, "voterDirectoryId": SHARE_TOPIC_ID_TEXT,
            "endpoints": [{"name": "CONTROLLER", "host": "localhost", "port": 9093}],
            "kRaftVersionFeature": {"minSupportedVersion": 0, "maxSupportedVersion": 1}}]}}
    with pytest.raises(MessageError, match="1 bytes left over"):
        decode_kraft_control(3, header + b"\x00")
    with pytest.raises(MessageError, match="null value"):
        decode_kraft_control(4, None)
    with pytest.raises(ValueError, match="control type 2 has no value spec"):
        decode_kraft_control(2, b"")


def test_messages_in_kafkas_json_form():
    qs = spec("QuorumStateData")
    v0 = {"clusterId": "", "leaderId": 1, "leaderEpoch": 2, "votedId": -1, "appliedOffset": 0,
          "currentVoters": [{"voterId": 1}], "data_version": 0}
    assert read_json(qs, v0, 0) == {"clusterId": "", "leaderId": 1, "leaderEpoch": 2,
                                   "votedId": -1, "appliedOffset": 0,
                                   "currentVoters": [{"voterId": 1}]}
    v1 = {"leaderId": 1, "leaderEpoch": 1, "votedId": -1,
          "votedDirectoryId": "AAAAAAAAAAAAAAAAAAAAAA", "data_version": 1}
    assert read_json(qs, v1, 1) == {"leaderId": 1, "leaderEpoch": 1, "votedId": -1,
                                   "votedDirectoryId": "AAAAAAAAAAAAAAAAAAAAAA"}
    assert read_json(qs, {**v0, "currentVoters": None}, 0)["currentVoters"] is None  # nullable
    for doc, version, words in [
            ({**v0, "leaderEpoch": "2"}, 0, "leaderEpoch: expected an integer, got a string"),
            ({**v0, "leaderId": 2 ** 31}, 0, "2147483648 does not fit in int32"),
            ({**v0, "leaderId": True}, 0, "expected an integer, got a boolean"),
            ({k: v for k, v in v0.items() if k != "appliedOffset"}, 0,
             "no 'appliedOffset', which is mandatory in version 0"),
            ({**v0, "currentVoters": [{"voterId": None}]}, 0, "currentVoters[0].voterId: null"),
            ({**v1, "votedDirectoryId": "xyz"}, 1, "votedDirectoryId: not a Kafka UUID"),
            ({**v1, "votedId": None}, 1, "votedId: null, but the field is not nullable"),
            ([], 0, "expected a JSON object, got an array"),
            (v0, 2, "unknown version 2")]:
        with pytest.raises(MessageError, match=re.escape(words)):
            read_json(qs, doc, version)


def test_spec_language_versions_and_comments():
    s = parse_spec("""// a comment with "quotes" and // more
    { "type": "data", "name": "X", "validVersions": "0-3", "flexibleVersions": "2+",
      "fields": [ // trailing comment
        { "name": "A", "type": "string", "versions": "1-2", "about": "http://not/a/comment" },
        { "name": "B", "type": "bytes", "versions": "0+", "flexibleVersions": "none" } ] }""")
    assert s.read_exactly(b"\x00\x00\x00\x01z", 0) == {"b": "eg=="}
    assert s.read_exactly(b"\x00\x01q\x00\x00\x00\x00", 1) == {"a": "q", "b": ""}
    assert s.read_exactly(b"\x02q\x00\x00\x00\x00\x00", 2) == {"a": "q", "b": ""}  # compact A
    assert s.read_exactly(b"\x00\x00\x00\x00\x00", 3) == {"b": ""}


# -- state files -------------------------------------------------------------------------------

PRODUCERS = [
    {"producer_id": 1000, "producer_epoch": 0, "last_sequence": 9, "last_offset": 120,
     "offset_delta": 4, "timestamp": 1700000000000, "coordinator_epoch": -1,
     "current_txn_first_offset": -1},
    {"producer_id": 1001, "producer_epoch": 3, "last_sequence": 1, "last_offset": 130,
     "offset_delta": 3, "timestamp": 1700000000500, "coordinator_epoch": 7,
     "current_txn_first_offset": 128},  # a transaction in progress; the sequence wrapped
]


def test_producer_snapshot(tmp_path):
    path = tmp_path / "00000000000000000131.snapshot"
    path.write_bytes(encode_producer_snapshot(PRODUCERS))
    s = read_producer_snapshot(str(path))
    assert s.findings == () and s.size == 6 + 4 + 2 * 46
    assert s.header == {"version": 1, "crc": s.header["computed_crc"],
                        "computed_crc": s.header["computed_crc"], "crc_valid": True,
                        "snapshot_offset": 131, "entry_count": 2}
    assert [r["first_sequence"] for r in s.rows] == [5, 0x7FFFFFFF - 1]
    assert [{k: v for k, v in r.items() if k != "first_sequence"} for r in s.rows] == PRODUCERS
    assert read_state_file(str(path)) == s
    empty = read_producer_snapshot(encode_producer_snapshot([]))
    assert empty.rows == () and empty.findings == () and empty.header["snapshot_offset"] is None


def test_corrupt_producer_snapshots():
    good = encode_producer_snapshot(PRODUCERS)
    bad_crc = read_producer_snapshot(encode_producer_snapshot(PRODUCERS, crc=0xDEADBEEF))
    assert [f.kind for f in bad_crc.findings] == ["state_crc_mismatch"]
    assert "stored crc 0xdeadbeef, computed" in bad_crc.findings[0].message
    assert len(bad_crc.rows) == 2 and bad_crc.header["crc_valid"] is False  # still read

    flipped = bytearray(good)
    flipped[20] ^= 0x01  # inside the first entry: the CRC catches it
    assert [f.kind for f in read_producer_snapshot(bytes(flipped)).findings] == [
        "state_crc_mismatch"]

    short = read_producer_snapshot(good[:-5])  # a partial last entry
    assert {f.kind for f in short.findings} == {"state_crc_mismatch", "state_file_corrupt"}
    assert any("read past the end" in f.message for f in short.findings) and short.rows == ()

    for data, words in [(good[:4], "shorter than its version and CRC"),
                        (struct.pack(">h", 2) + good[2:], "version 2"),
                        (good + b"\x00", "1 bytes left over")]:
        s = read_producer_snapshot(data)
        assert any(f.kind == "state_file_corrupt" and words in f.message for f in s.findings), \
            (words, s.findings)


def test_leader_epoch_checkpoint(tmp_path):
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_text(leader_epoch_checkpoint_text([(0, 0), (2, 57), (5, 57)]))
    s = read_leader_epoch_checkpoint(str(path))
    assert s.findings == () and s.header == {"version": 0, "entry_count": 3}
    assert s.rows == ({"epoch": 0, "start_offset": 0}, {"epoch": 2, "start_offset": 57},
                      {"epoch": 5, "start_offset": 57})
    # Kafka creates the file empty, and its reader takes a file that ends before the
    # entry count as no entries: not corrupt (KAIPASUBHASH's 49 empty ones are real)
    for data, header in [(b"", {"version": None, "entry_count": None}),
                         (b"0\n", {"version": 0, "entry_count": None}),
                         (b"0\r\n0\r\n", {"version": 0, "entry_count": 0})]:
        s = read_leader_epoch_checkpoint(data)
        assert (s.header, s.rows, s.findings) == (header, (), ()), data
    for text, words in [("0\n3\n0 0\n1 5\n", "declares 3 entries, holds 2"),
                        ("0\n1\n0 x\n", "line 3: '0 x' is not 'epoch start_offset'"),
                        ("0\n1\n0 0 0\n", "is not 'epoch start_offset'"),
                        ("0\n1\n 0 0\n", "line 3: ' 0 0' is not"),  # Java's split: "", "0", "0"
                        ("0\n1\n0 0\n\n", "line 4: '' is not"),  # a blank line is no entry
                        ("0\n1\n2147483648 0\n", "is not 'epoch"),  # an int32 epoch
                        ("1\n0\n", "version 1; Kafka reads only version 0"),
                        ("0 \n0\n", "line 1: version '0 ' is not a number"),
                        ("0\nx\n", "line 2: entry count 'x' is not a number"),
                        ("0\n-1\n", "entry count -1 is negative"),
                        ("0\n2\n3 10\n2 20\n", "line 4: epoch 2 from offset 20 after epoch 3"),
                        ("0\n2\n3 10\n4 9\n", "start offsets must not decrease")]:
        s = read_leader_epoch_checkpoint(text.encode())
        assert any(f.kind == "state_file_corrupt" and words in f.message for f in s.findings), \
            (text, s.findings)
    s = read_leader_epoch_checkpoint(b"0\n1\n0 \xff\n")
    assert [(f.position, f.end) for f in s.findings] == [(4, 8)]
    assert "line 3: not UTF-8 (invalid start byte at byte 6)" in s.findings[0].message


def test_partition_metadata(tmp_path):
    path = tmp_path / "partition.metadata"
    path.write_text(partition_metadata_text("gSnfpEbtQfSDpxM2lhEn9A"))
    s = read_partition_metadata(str(path))
    assert s.findings == () and s.header == {"version": 0, "topic_id": "gSnfpEbtQfSDpxM2lhEn9A"}
    for text, words in [("version: 0\ntopic_id: abc\n", "not a Kafka UUID"),
                        # 26 characters, 4 of them outside base64: a lenient decoder drops them
                        ("version: 0\ntopic_id: !!!!AAAAAAAAAAAAAAAAAAAAAA\n", "not a Kafka UUID"),
                        ("version: 1\ntopic_id: gSnfpEbtQfSDpxM2lhEn9A\n", "version '1'"),
                        ("version: 0\n", "no topic_id line"),
                        ("topic_id: x\n", "expected 'version: …'")]:
        s = read_partition_metadata(text.encode())
        assert [f.kind for f in s.findings] == ["state_file_corrupt"], text
        assert words in s.findings[0].message, (text, s.findings)


def test_damaged_state_files_are_findings_never_exceptions():
    rng = random.Random(19)
    samples = [
        (read_producer_snapshot, encode_producer_snapshot(PRODUCERS)),
        (read_leader_epoch_checkpoint, leader_epoch_checkpoint_text([(0, 0), (4, 90)]).encode()),
        (read_partition_metadata, partition_metadata_text("gSnfpEbtQfSDpxM2lhEn9A").encode()),
    ]
    for read, good in samples:
        damaged = [good[:i] for i in range(len(good))] + [flip_bit(good, rng) for _ in range(60)]
        damaged += [bytes(rng.randrange(256) for _ in range(rng.randrange(80))) for _ in range(60)]
        found = 0
        for data in damaged:
            s = read(data)  # anything but a StateFile (or an exception) fails the test
            assert s.size == len(data) and all(f.kind in STATE_FINDING_KINDS for f in s.findings)
            found += bool(s.findings)
        assert found >= len(damaged) - 25, (read.__name__, found, len(damaged))
