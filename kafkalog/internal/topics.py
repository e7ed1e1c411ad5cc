"""Records of Kafka's internal topics, decoded with the shipped message specs.

``__consumer_offsets``, ``__transaction_state`` and ``__share_group_state`` (the group,
transaction and share coordinators' logs; Kafka's ``CoordinatorRecordSerde``)::

    key   = int16 record type, then the key struct: the key spec whose apiKey is that type
            (Kafka 4.3.0: 0 LegacyOffsetCommitKey, 1 OffsetCommitKey, 2 GroupMetadataKey,
            3-8 the consumer-group records of KIP-848, 10-15 share groups, 16
            ConsumerGroupRegularExpressionKey, 17 and 19-23 streams groups (KIP-1071); 0
            TransactionLogKey; 0 ShareSnapshotKey, 1 ShareUpdateKey), read as version 0; or,
            in the layout of Kafka up to 4.0, whose validVersions hold that type (9
            ShareGroupPartitionMetadataKey, which 4.1 removed), read as that version
    value = int16 version, then the value struct of the spec named like the key with
            "Value" for "Key"; a null value is a tombstone (the key was deleted).
            ShareGroupMetadataValue and ShareGroupStatePartitionMetadataValue changed their
            v0 layout in 4.1: read with 4.3.0's first, with 4.0.2's only when the bytes do
            not fit it exactly (:func:`read_value`)

``__cluster_metadata`` (KRaft; Kafka's ``MetadataRecordSerde``), key null, the value
framed as :mod:`.framing` says (frame version, api key, record version, record).

KRaft's control records (snapshot header and footer, kraft.version, voters) carry a
message spec as their value, read as the version Kafka's ``ControlRecordUtils`` reads
(0): :func:`decode_kraft_control`.

``__remote_log_metadata`` (tiered storage; Kafka's ``RemoteLogMetadataSerde``) frames its
records the same way, with api keys of its own (0-3: :data:`.remote_log.REMOTE_LOG_SPECS`),
key null; :mod:`.remote_log` decodes them and the custom metadata inside.

Every decoder returns the JSON shape ``kafka-dump-log.sh`` prints (``{"key": {"type",
"data"}, "value": {"version", "data"} | None}`` and ``{"type": "PARTITION_RECORD",
"version", "data"}``) or raises :class:`MessageError` saying why not (unknown type or
version, bytes left over, a read past the end, a tagged field of the wrong size).
"""

from __future__ import annotations

import base64
import os
import struct
from functools import cache

from ..folders import parse_partition_folder
from ..model import CONTROL_TYPES
from .framing import decode_framed
from .remote_log import REMOTE_LOG_SPECS, decode_remote_log_metadata
from .schema import MessageError, MessageSpec, spec, spec_layouts, spec_names

_INT16 = struct.Struct(">h")

#: Names of the decoders, as ``kafkalog dump --decoder`` takes them.
OFFSETS = "offsets"
TRANSACTION_LOG = "transaction-log"
CLUSTER_METADATA = "cluster-metadata"
SHARE_GROUP_STATE = "share-group-state"
REMOTE_LOG_METADATA = "remote-log-metadata"
DECODERS = (OFFSETS, TRANSACTION_LOG, CLUSTER_METADATA, SHARE_GROUP_STATE, REMOTE_LOG_METADATA)

#: Internal topic -> decoder, for ``auto`` (the partition folder is ``<topic>-<partition>``).
TOPIC_DECODERS = {
    "__consumer_offsets": OFFSETS,
    "__transaction_state": TRANSACTION_LOG,
    "__cluster_metadata": CLUSTER_METADATA,
    "__share_group_state": SHARE_GROUP_STATE,
    "__remote_log_metadata": REMOTE_LOG_METADATA,
}

#: The spec-name prefixes of each coordinator's keys and values.
_COORDINATOR_SPECS = {
    OFFSETS: ("LegacyOffsetCommit", "OffsetCommit", "GroupMetadata", "ConsumerGroup",
              "ShareGroup", "StreamsGroup"),
    TRANSACTION_LOG: ("TransactionLog",),
    SHARE_GROUP_STATE: ("ShareSnapshot", "ShareUpdate"),
}
#: how messages name each coordinator's log
_COORDINATOR_WHAT = {OFFSETS: "offsets", TRANSACTION_LOG: "transaction log",
                     SHARE_GROUP_STATE: "share group state"}


def _int16(buf, what: str) -> tuple[int, int]:
    if len(buf) < _INT16.size:
        raise MessageError(f"{what}: {len(buf)} bytes, too short for its int16 "
                           "type/version (read past the end)", 0)
    return _INT16.unpack_from(buf, 0)[0], _INT16.size


@cache
def coordinator_keys(decoder: str) -> dict[int, tuple[MessageSpec, int]]:
    """Record type -> (key spec, the version to read it as), for the shipped specs."""
    prefixes = _COORDINATOR_SPECS[decoder]
    return key_types(spec(name) for name in spec_names()
                     if name.endswith("Key") and name.startswith(prefixes))


def key_types(key_specs) -> dict[int, tuple[MessageSpec, int]]:
    """Record type -> (key spec, key version), in either layout Kafka's specs have used:
    up to Kafka 4.0 a key spec's validVersions are the record types it is used for (and
    the key is read as that version); from 4.1 a ``coordinator-key`` spec carries the type
    as its ``apiKey`` and is read as version 0 (4.3.0: type 0 is LegacyOffsetCommitKey; a
    set with only OffsetCommitKey reads type 0 with it, as both hold the same fields)."""
    out: dict[int, tuple[MessageSpec, int]] = {}
    for s in key_specs:
        if s.api_key is None:
            for t in range(s.valid.low, s.valid.high + 1):
                out[t] = (s, t)
        else:
            out[s.api_key] = (s, s.valid.low)
            if s.name == "OffsetCommitKey":
                out.setdefault(0, (s, s.valid.low))
    return out


def decode_coordinator(decoder: str, key: bytes | None, value: bytes | None) -> dict:
    """A ``__consumer_offsets`` (``offsets``), ``__transaction_state`` (``transaction-log``)
    or ``__share_group_state`` (``share-group-state``) record."""
    what = _COORDINATOR_WHAT[decoder]
    if key is None:
        raise MessageError(f"{what} record without a key", 0)
    record_type, pos = _int16(key, f"{what} key")
    found = coordinator_keys(decoder).get(record_type)
    if found is None:
        known = sorted(coordinator_keys(decoder))
        raise MessageError(f"{what} key: unknown record type {record_type} (known: "
                           f"{', '.join(map(str, known))})", 0)
    key_spec, key_version = found
    out = {"key": {"type": record_type, "data": key_spec.read_exactly(key, key_version, pos)},
           "value": None}
    if value is not None:
        name = key_spec.name[:-3] + "Value"
        version, pos = _int16(value, name)
        out["value"] = {"version": version, "data": read_value(name, value, version, pos)}
    return out


def read_value(name: str, value: bytes, version: int, pos: int) -> dict:
    """The value spec ``name``'s struct of ``version`` in ``value[pos:]``, which it must fill
    exactly. Where Kafka changed the spec's layout without a version bump (two share group
    records in 4.1) the newest layout is tried first and an older one only when the bytes do
    not read as it; what Kafka 4.0 wrote never reads as 4.1's layout (docs/internal-topics.md
    says why), so a record is never read as the other layout's. The newest layout's error,
    naming the others', when none fits."""
    layouts = spec_layouts(name)
    if len(layouts) == 1:
        return layouts[0][1].read_exactly(value, version, pos)
    (release, newest), *older = layouts
    try:
        return newest.read_exactly(value, version, pos)
    except MessageError as err:
        tried = [f"{release}: {err}"]
        for release, layout in older:
            try:
                return layout.read_exactly(value, version, pos)
            except MessageError as other:
                tried.append(f"{release}: {other}")
        raise MessageError(f"{name} reads as none of its layouts ({'; '.join(tried)})",
                           err.position) from err


@cache
def metadata_records() -> dict[int, MessageSpec]:
    """api key -> spec, for every metadata record type shipped."""
    out = {}
    for name in spec_names():
        s = spec(name)
        if s.api_key is not None and name.endswith("Record") and name not in REMOTE_LOG_SPECS:
            out[s.api_key] = s
    return out


def decode_cluster_metadata(key: bytes | None, value: bytes | None) -> dict:
    """A ``__cluster_metadata`` data record."""
    return decode_framed(value, metadata_records(), "metadata record")


#: KRaft control record type -> the spec of its value (ControlRecordUtils)
KRAFT_CONTROL_SPECS = {3: "SnapshotHeaderRecord", 4: "SnapshotFooterRecord",
                       5: "KRaftVersionRecord", 6: "VotersRecord"}
#: the version Kafka reads them as (ControlRecordUtils' *_CURRENT_VERSION)
KRAFT_CONTROL_VERSION = 0


def decode_kraft_control(type_id: int, value: bytes | None) -> dict:
    """The value of a KRaft control record of type ``type_id`` (3-6):
    ``{"type": "SNAPSHOT_HEADER", "version": 0, "data": {...}}``; MessageError when it does
    not read, ValueError for a type whose value has no spec here."""
    name = KRAFT_CONTROL_SPECS.get(type_id)
    if name is None:
        raise ValueError(f"control type {type_id} has no value spec here (known: "
                         f"{', '.join(map(str, KRAFT_CONTROL_SPECS))})")
    if value is None:
        raise MessageError(f"{CONTROL_TYPES[type_id]} control record with a null value", 0)
    return {"type": CONTROL_TYPES[type_id], "version": KRAFT_CONTROL_VERSION,
            "data": spec(name).read_exactly(value, KRAFT_CONTROL_VERSION)}


# ---------------------------------------------------------------------------------------------
# The consumer protocol inside GroupMetadataValue (expanded on request)

_CONSUMER_PROTOCOL = {"subscription": "ConsumerProtocolSubscription",
                      "assignment": "ConsumerProtocolAssignment"}


def _consumer_protocol(name: str, text: str | None) -> dict | None:
    if text is None:
        return None
    raw = base64.b64decode(text)
    if not raw:
        return None  # Kafka stores an empty assignment before the sync
    version, pos = _int16(raw, name)
    s = spec(name)
    # Kafka's ConsumerProtocol reads a newer version with the newest format it knows and
    # ignores what follows; older versions must fit exactly.
    if version > s.valid.high:
        data, _ = s.read(raw, s.valid.high, pos)
    else:
        data = s.read_exactly(raw, version, pos)
    return {"version": version, "data": data}


def expand_consumer_protocol(decoded: dict) -> dict:
    """A GroupMetadataValue of a ``consumer`` group with each member's subscription and
    assignment bytes read as Kafka's consumer protocol (``{"version", "data"}``; null for
    no bytes): a new dict, ``decoded`` is left as it is. Other records come back unchanged.
    Raises :class:`MessageError` naming the member and field."""
    value = decoded.get("value")
    if (decoded.get("key", {}).get("type") != 2 or not value
            or value["data"].get("protocolType") != "consumer"):
        return decoded
    members = []
    for i, member in enumerate(value["data"].get("members") or ()):
        member = dict(member)
        for field, name in _CONSUMER_PROTOCOL.items():
            try:
                member[field] = _consumer_protocol(name, member.get(field))
            except MessageError as err:
                raise MessageError(f"members[{i}].{field}: {err}", err.position) from err
        members.append(member)
    data = {**value["data"], "members": members}
    return {**decoded, "value": {**value, "data": data}}


def decode(decoder: str, key: bytes | None, value: bytes | None, *,
           expand: bool = False) -> dict:
    """One data record of an internal topic, as JSON-ready dicts; :class:`MessageError`
    (with the reason) when it does not decode."""
    if decoder == CLUSTER_METADATA:
        return decode_cluster_metadata(key, value)
    if decoder == REMOTE_LOG_METADATA:
        return decode_remote_log_metadata(key, value)
    if decoder not in _COORDINATOR_SPECS:
        raise ValueError(f"unknown decoder {decoder!r} (known: {', '.join(DECODERS)})")
    out = decode_coordinator(decoder, key, value)
    return expand_consumer_protocol(out) if expand else out


def decoder_for_topic(topic: str) -> str | None:
    return TOPIC_DECODERS.get(topic)


def decoder_for_path(path: str) -> str | None:
    """The decoder for a segment in a partition folder named after an internal topic
    (``…/__consumer_offsets-12/0.log`` -> ``offsets``; a ``-future``, ``-delete`` or
    ``-stray`` folder of one too), else None."""
    folder = parse_partition_folder(os.path.basename(os.path.dirname(os.path.abspath(path))))
    return decoder_for_topic(folder.topic) if folder else None
