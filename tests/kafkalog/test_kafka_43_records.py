"""Every record of Apache Kafka 4.3.0's internal topics, encoded from the release's own specs
by an independent writer (tests/kafka_messages.py, the rules of Kafka's generated code), read
back exactly by kafkalog's decoders: every record type, every valid version, tagged fields set
and unset, nulls, empty and long values. The spec set is the one vendored in
kafkalog/internal/specs/4.3.0/ (apache/kafka a9ce3221537b8653448750697915607dc7936cf3, the
4.3.0 release; specs/README.md), checked against its SHA256SUMS."""

from __future__ import annotations

import hashlib
import re
import struct
import tomllib
from importlib import resources
from pathlib import Path, PurePosixPath

import pytest

from tests import kafka_messages as km
from kafkalog.internal import decode, spec
from kafkalog.internal.schema import spec_layouts
from kafkalog.internal.topics import coordinator_keys, metadata_records
from kafkalog.internal.remote_log import remote_log_records

SPECS = resources.files("kafkalog.internal").joinpath("specs")
RELEASE = "4.3.0"
COMMIT = "a9ce3221537b8653448750697915607dc7936cf3"
#: module folder of the release -> the decoder of the internal topic its records are in
COORDINATORS = {"group-coordinator": "offsets", "share-coordinator": "share-group-state",
                "transaction-coordinator": "transaction-log"}
FRAMED = {"metadata": "cluster-metadata", "storage": "remote-log-metadata"}


def _checksums() -> dict[str, str]:
    out = {}
    for line in SPECS.joinpath("SHA256SUMS").read_text().splitlines():
        digest, path = line.split(maxsplit=1)
        out[path] = digest
    return out


def _release() -> dict[str, dict]:
    """Path (``4.3.0/metadata/TopicRecord.json``) -> the spec's JSON, for the release."""
    return {p: km.load(SPECS.joinpath(p).read_text(encoding="utf-8"))
            for p in sorted(_checksums()) if p.startswith(RELEASE + "/")}


RELEASE_SPECS = _release()


def _module(path: str) -> str:
    return path.split("/")[1]


def _type_name(name: str) -> str:
    """Kafka's MetadataRecordType name: ``PartitionChangeRecord`` -> ``PARTITION_CHANGE_RECORD``."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).upper()


def _key_specs() -> dict[tuple[str, int], dict]:
    return {(_module(p), d["apiKey"]): d for p, d in RELEASE_SPECS.items()
            if d["type"] == "coordinator-key"}


KEYS = _key_specs()


def _record_versions() -> list[tuple[str, int]]:
    """(path, version) of every record value of the release: coordinator values, metadata
    and remote log metadata records."""
    return [(p, v) for p, d in RELEASE_SPECS.items()
            if d["type"] in ("coordinator-value", "metadata")
            or (_module(p) == "storage" and d["name"].startswith("Remote"))
            for v in km.versions(d["validVersions"])]


RECORD_VERSIONS = _record_versions()


# ------------------------------------------------------------------ the vendored release

def test_the_vendored_specs_match_their_checksums_and_provenance():
    sums = _checksums()
    on_disk = sorted(str(PurePosixPath(*p.relative_to(Path(str(SPECS))).parts))
                     for p in Path(str(SPECS)).rglob("*.json"))
    assert on_disk == sorted(sums)  # every file listed, none unlisted
    for path, digest in sums.items():
        assert hashlib.sha256(SPECS.joinpath(path).read_bytes()).hexdigest() == digest, path
    assert len(RELEASE_SPECS) == 88
    readme = SPECS.joinpath("README.md").read_text()
    assert f"`{RELEASE}/`: Apache Kafka 4.3.0, commit `{COMMIT}`" in readme
    for path, doc in RELEASE_SPECS.items():  # Kafka's licence header kept in every file
        text = SPECS.joinpath(path).read_text()
        assert text.startswith("// Licensed to the Apache Software Foundation"), path
    assert SPECS.joinpath("NOTICE").read_text().startswith("Apache Kafka\nCopyright")


def test_pyproject_ships_every_spec_file():
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    globs = pyproject["tool"]["setuptools"]["package-data"]["kafkalog.internal"]
    root = Path(str(SPECS)).parent
    files = [PurePosixPath(*p.relative_to(root).parts) for p in Path(str(SPECS)).rglob("*")
             if p.is_file()]
    assert len(files) == len(_checksums()) + 3  # README.md, NOTICE, SHA256SUMS
    for f in files:
        assert any(f.match(g) and len(f.parts) == len(PurePosixPath(g).parts) for g in globs), f


def test_the_release_has_75_record_versions_and_we_know_every_one():
    # 34 coordinator values (group 30, share 2, transaction 2), 37 metadata, 4 remote log
    assert len(RECORD_VERSIONS) == 75
    unknown = []
    for path, v in RECORD_VERSIONS:
        doc = RELEASE_SPECS[path]
        module = _module(path)
        if module in COORDINATORS:
            known = coordinator_keys(COORDINATORS[module]).get(doc["apiKey"])
            ours = known and spec(known[0].name[:-3] + "Value")
        else:
            ours = (metadata_records() if module == "metadata"
                    else remote_log_records()).get(doc["apiKey"])
        if not ours or ours.name != doc["name"] or v not in ours.valid:
            unknown.append(f"{doc['name']} v{v}")
    assert unknown == []


# ------------------------------------------------------------------ every record, every version

def _coordinator_record(path: str, v: int, kind: str):
    doc = RELEASE_SPECS[path]
    key_doc = KEYS[(_module(path), doc["apiKey"])]
    key_value = km.samples(key_doc, 0)["set" if kind == "defaults" else kind]
    value = km.samples(doc, v)[kind]
    key = struct.pack(">h", doc["apiKey"]) + km.encode(key_doc, 0, key_value)
    record_value = struct.pack(">h", v) + km.encode(doc, v, value)
    expected = {"key": {"type": doc["apiKey"], "data": km.shown(key_doc, 0, key_value)},
                "value": {"version": v, "data": km.shown(doc, v, value)}}
    return key, record_value, expected


@pytest.mark.parametrize("kind", km.KINDS)
@pytest.mark.parametrize("path, v", RECORD_VERSIONS,
                         ids=[f"{p.split('/')[-1][:-5]}-v{v}" for p, v in RECORD_VERSIONS])
def test_every_record_version_decodes_as_its_spec_says(path, v, kind):
    doc = RELEASE_SPECS[path]
    module = _module(path)
    if module in COORDINATORS:
        key, value, expected = _coordinator_record(path, v, kind)
        assert decode(COORDINATORS[module], key, value) == expected
        assert decode(COORDINATORS[module], key, None) == {**expected, "value": None}
        return
    sample = km.samples(doc, v)[kind]
    framed = (km.uvarint(1) + km.uvarint(doc["apiKey"]) + km.uvarint(v)
              + km.encode(doc, v, sample))
    out = decode(FRAMED[module], None, framed)
    out.pop("customMetadata", None)  # remote log: the plugin's bytes, read on their own
    assert out == {"type": _type_name(doc["name"]), "version": v,
                   "data": km.shown(doc, v, sample)}


OTHER_SPECS = [(p, v) for p, d in RELEASE_SPECS.items()
               if d["type"] not in ("coordinator-key", "coordinator-value", "metadata")
               and not (_module(p) == "storage" and d["name"].startswith("Remote"))
               for v in km.versions(d["validVersions"])]


@pytest.mark.parametrize("kind", km.KINDS)
@pytest.mark.parametrize("path, v", OTHER_SPECS,
                         ids=[f"{p.split('/')[-1][:-5]}-v{v}" for p, v in OTHER_SPECS])
def test_the_releases_other_messages_read_as_their_specs_say(path, v, kind):
    # consumer protocol (inside GroupMetadataValue), KRaft control records, quorum state,
    # producer snapshot: the message itself, as their readers take it
    doc = RELEASE_SPECS[path]
    sample = km.samples(doc, v)[kind]
    name = Path(path).stem
    assert spec(name).read_exactly(km.encode(doc, v, sample), v) == km.shown(doc, v, sample)


def test_every_coordinator_key_and_its_types():
    # the record types of specs/README.md, each a coordinator-key spec of the release
    assert sorted(t for (m, t) in KEYS if m == "group-coordinator") == [
        0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 12, 13, 14, 15, 16, 17, 19, 20, 21, 22, 23]
    assert sorted(t for (m, t) in KEYS if m == "share-coordinator") == [0, 1]
    assert sorted(t for (m, t) in KEYS if m == "transaction-coordinator") == [0]
    for (module, api_key), doc in KEYS.items():
        assert coordinator_keys(COORDINATORS[module])[api_key][0].name == doc["name"]
    # 4.0's record type 9, removed in 4.1, still decodes (specs/4.0.2/)
    assert coordinator_keys("offsets")[9][0].name == "ShareGroupPartitionMetadataKey"


# ------------------------------------------------------------------ KIP-848's member record

MEMBER_KEY = (struct.pack(">h", 5) + struct.pack(">h", 2) + b"cg"
              + struct.pack(">h", 2) + b"m1")  # ConsumerGroupMemberMetadataKey: groupId, memberId


def _member_value(tagged: bytes) -> bytes:
    """ConsumerGroupMemberMetadataValue v0 (flexible), packed by hand from the 4.3.0 spec:
    instanceId null, rackId "r", clientId "c", clientHost "/h", subscribedTopicNames ["t"],
    subscribedTopicRegex null, rebalanceTimeoutMs 300000, serverAssignor "uniform", then the
    tagged fields (ClassicMemberMetadata is tag 0)."""
    return (struct.pack(">h", 0) + b"\x00" + b"\x02r" + b"\x02c" + b"\x03/h"
            + b"\x02" + b"\x02t" + b"\x00" + struct.pack(">i", 300000) + b"\x08uniform"
            + tagged)


MEMBER = {"instanceId": None, "rackId": "r", "clientId": "c", "clientHost": "/h",
          "subscribedTopicNames": ["t"], "subscribedTopicRegex": None,
          "rebalanceTimeoutMs": 300000, "serverAssignor": "uniform"}


def test_kip_848_member_with_a_null_classic_member_metadata_decodes():
    # GroupCoordinatorRecordHelpers.newConsumerGroupMemberSubscriptionRecord (a9ce3221537b,
    # group-coordinator/src/main/java/.../GroupCoordinatorRecordHelpers.java:102) sets
    # ClassicMemberMetadata to null for every consumer-protocol member; its spec default is
    # JSON null, i.e. the empty struct, so the generated writer writes the null: tag 0, size 1,
    # writeUnsignedVarint(0). The generated reader: readUnsignedVarint() <= 0 is null.
    null_tag = b"\x01" + b"\x00" + b"\x01" + b"\x00"
    out = decode("offsets", MEMBER_KEY, _member_value(null_tag))
    assert out == {"key": {"type": 5, "data": {"groupId": "cg", "memberId": "m1"}},
                   "value": {"version": 0, "data": {**MEMBER, "classicMemberMetadata": None}}}
    # no tag at all: the default (an empty struct), which the JSON form leaves out
    assert decode("offsets", MEMBER_KEY, _member_value(b"\x00"))["value"]["data"] == MEMBER
    # a classic member (upgraded from the classic protocol): tag 0, size, varint 1, the struct
    classic = (b"\x01" + struct.pack(">i", 45000) + b"\x02" + b"\x06range" + b"\x03\x00\x01"
               + b"\x00" + b"\x00")
    body = classic[1:]
    tagged = b"\x01" + b"\x00" + bytes([len(body) + 1]) + b"\x01" + body
    assert decode("offsets", MEMBER_KEY, _member_value(tagged))["value"]["data"] == {
        **MEMBER, "classicMemberMetadata": {"sessionTimeoutMs": 45000, "supportedProtocols": [
            {"name": "range", "metadata": "AAE="}]}}


def test_kafkas_nullable_struct_message():
    # Kafka's own generator test spec and its assertions: apache/kafka a9ce3221537b,
    # clients/src/test/resources/common/message/NullableStructMessage.json and
    # clients/src/test/java/org/apache/kafka/common/message/NullableStructMessageTest.java
    # (vendored in tests/data/kafka-messages/). NullableStruct and NullableStruct3 default to
    # null, NullableStruct2 and NullableStruct4 (no default) to an empty struct.
    text = (Path(__file__).parents[1] / "data" / "kafka-messages"
            / "NullableStructMessage.json").read_text()
    from kafkalog.internal.schema import parse_spec
    ours, doc = parse_spec(text), km.load(text)
    empty = {"myString": "", "myInt": 0}
    # testDefaultValues: round trip at v2 keeps nullableStruct/3 null, 2/4 the empty struct
    default = km.encode(doc, 2, {})
    assert default == b"\xff" + b"\x01\x01" + bytes(4) + b"\x00" + b"\x00"
    assert ours.read_exactly(default, 2) == {"nullableStruct": None, "nullableStruct2": empty}
    # testNullForAllFields: every struct null; NullableStruct4's null is written, tag 1
    nulls = {"nullableStruct": None, "nullableStruct2": None, "nullableStruct3": None,
             "nullableStruct4": None}
    raw = km.encode(doc, 2, nulls)
    assert raw == b"\xff\xff" + b"\x01" + b"\x01\x01\x00"
    assert ours.read_exactly(raw, 2) == {"nullableStruct": None, "nullableStruct2": None,
                                         "nullableStruct4": None}
    # testTaggedStructSize (KAFKA-18199): a 127-byte struct4 makes its field 128 bytes
    # (the is-not-null flag), a two-byte varint
    struct4 = {"myString": "\x00" * 121, "myInt": 4}
    raw = km.encode(doc, 2, {"nullableStruct4": struct4})
    assert raw[-132:-127] == b"\x01" + b"\x01" + b"\x80\x01" + b"\x01"
    assert ours.read_exactly(raw, 2)["nullableStruct4"] == struct4
    # testRoundTrip
    full = {"nullableStruct": {"myString": "1", "myInt": 1},
            "nullableStruct2": {"myString": "2", "myInt": 2},
            "nullableStruct3": {"myString": "3", "myInt": 3},
            "nullableStruct4": {"myString": "4", "myInt": 4}}
    assert ours.read_exactly(km.encode(doc, 2, full), 2) == full
    assert ours.write(full, 2) == km.encode(doc, 2, full)
    assert ours.write(nulls, 2) == km.encode(doc, 2, nulls)
    # version 0 (not flexible): the positional struct's int8 marker
    assert ours.read_exactly(km.encode(doc, 0, {"nullableStruct": None}), 0) == {
        "nullableStruct": None, "nullableStruct2": empty}


# ------------------------------------------------------------------ the two 4.1 layouts

LAYOUT_CHANGES = ("ShareGroupMetadataValue", "ShareGroupStatePartitionMetadataValue")


def _layouts(name: str) -> dict[str, dict]:
    return {release: km.load(SPECS.joinpath(p).read_text())
            for release, p in ((p.split("/")[0], p) for p in sorted(_checksums())
                               if p.endswith(f"/{name}.json"))}


@pytest.mark.parametrize("kind", km.KINDS)
@pytest.mark.parametrize("name", LAYOUT_CHANGES)
def test_both_4_1_layouts_decode_each_as_its_own(name, kind):
    layouts = _layouts(name)
    assert sorted(layouts) == ["4.0.2", "4.3.0"]
    key_doc = KEYS[("group-coordinator", layouts["4.3.0"]["apiKey"])]
    key = (struct.pack(">h", key_doc["apiKey"])
           + km.encode(key_doc, 0, km.samples(key_doc, 0)["set"]))
    for release, doc in layouts.items():
        sample = km.samples(doc, 0)[kind]
        value = struct.pack(">h", 0) + km.encode(doc, 0, sample)
        assert decode("offsets", key, value)["value"] == {
            "version": 0, "data": km.shown(doc, 0, sample)}, release
        if release == "4.0.2":  # the old bytes never read as the new layout
            with pytest.raises(Exception, match="read past the end|not nullable|left over"):
                spec_layouts(name)[0][1].read_exactly(value, 0, 2)


def test_the_4_1_layouts_by_hand_and_bytes_that_fit_neither():
    key = struct.pack(">hh", 11, 2) + b"sg"
    old = struct.pack(">hi", 0, 7) + b"\x00"  # 4.0: Epoch, no tagged fields
    new = struct.pack(">hiq", 0, 7, -2) + b"\x00"  # 4.1+: Epoch, MetadataHash
    assert decode("offsets", key, old)["value"]["data"] == {"epoch": 7}
    assert decode("offsets", key, new)["value"]["data"] == {"epoch": 7, "metadataHash": -2}
    with pytest.raises(Exception, match=r"reads as none of its layouts \(4\.3\.0: .*; 4\.0\.2: "):
        decode("offsets", key, struct.pack(">hi", 0, 7) + b"\x00\x00")
    key = struct.pack(">hh", 15, 2) + b"sg"
    tpi = bytes(range(16)) + b"\x02t" + b"\x02" + struct.pack(">i", 0) + b"\x00"
    old = struct.pack(">h", 0) + b"\x02" + tpi + b"\x01" + b"\x00"  # initialized, deleting
    new = struct.pack(">h", 0) + b"\x01" + b"\x02" + tpi + b"\x01" + b"\x00"
    topic = {"topicId": km.kafka_uuid(bytes(range(16))), "topicName": "t", "partitions": [0]}
    assert decode("offsets", key, old)["value"]["data"] == {
        "initializedTopics": [topic], "deletingTopics": []}
    assert decode("offsets", key, new)["value"]["data"] == {
        "initializingTopics": [], "initializedTopics": [topic], "deletingTopics": []}


# ------------------------------------------------------------------ Kafka's own byte vectors

def _buffer(data: bytes, limit: int) -> bytes:
    """A Java ByteBuffer.allocate(n) (zero-filled) with ``data`` put at 0 and read to ``limit``."""
    return (data + bytes(limit))[:limit]


@pytest.mark.parametrize("value, words", [
    # MetadataRecordSerdeTest (apache/kafka a9ce3221537b, metadata/src/test/java/org/apache/
    # kafka/metadata/MetadataRecordSerdeTest.java): the bytes of each of its malformed frames
    (_buffer(b"\x0f", 1), "frame version 15"),                      # UnhandledFrameVersion
    (_buffer(b"\x80" * 6, 64), "frame version: unsigned varint longer than 5 bytes"),
    (_buffer(b"\x01" + b"\x80" * 6, 64), "api key: unsigned varint longer than 5 bytes"),
    (_buffer(b"\x01\x08" + b"\x80" * 5, 64), "record version: unsigned varint longer"),
    (_buffer(b"\x01\x08\xff\xff\xff\x7f\x80", 64), "unknown version 268435455"),  # too large
    (_buffer(b"\x01\xff\x7f\x00\x80", 64), "unknown api key 16383"),   # UnsupportedApiKey
    (_buffer(b"\x01\x00\x00\x80", 4), "RegisterBrokerRecord"),         # MalformedMessage
])
def test_kafkas_malformed_metadata_frames_are_refused(value, words):
    with pytest.raises(Exception, match=words) as err:
        decode("cluster-metadata", None, value)
    assert type(err.value).__name__ == "MessageError"
