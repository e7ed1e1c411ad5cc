"""The records of Kafka's internal topics and a partition folder's state files, written as a
broker writes them (the twins of :mod:`kafkalog.internal` and :mod:`kafkalog.state_files`)."""

from __future__ import annotations

import struct
from typing import Iterable

from crc32c import crc32c

from .encoding import DEFAULT_TIMESTAMP, INT32, WriteRecord

# Records are encoded with the shipped message specs (kafkalog.internal.schema); the state
# files are packed here by hand, independently of their readers.

_INT16 = struct.Struct(">h")


def internal_record(decoder: str, decoded: dict, *, timestamp: int | None = None) -> WriteRecord:
    """The record of an internal topic whose key and value decode to ``decoded``, in the
    shape :func:`kafkalog.internal.decode` returns: ``{"key": {"type", "data"}, "value":
    {"version", "data"} | None}`` for ``offsets``/``transaction-log``, ``{"type":
    "PARTITION_RECORD", "version", "data"}`` for ``cluster-metadata`` and likewise for
    ``remote-log-metadata`` (its ``customMetadata`` is the data's bytes). Fields left out take
    their spec defaults; tagged fields are written when they differ from them."""
    from .internal import remote_log, topics
    from .internal.framing import METADATA_FRAME_VERSION, record_type_name
    from .internal.schema import write_uvarint

    framed = {topics.CLUSTER_METADATA: topics.metadata_records,
              topics.REMOTE_LOG_METADATA: remote_log.remote_log_records}
    if decoder in framed:
        by_name = {record_type_name(s.name): s for s in framed[decoder]().values()}
        s = by_name[decoded["type"]]
        value = (write_uvarint(METADATA_FRAME_VERSION) + write_uvarint(s.api_key)
                 + write_uvarint(decoded["version"]) + s.write(decoded["data"], decoded["version"]))
        return WriteRecord(None, value, timestamp=timestamp)
    record_type = decoded["key"]["type"]
    key_spec, key_version = topics.coordinator_keys(decoder)[record_type]
    key = _INT16.pack(record_type) + key_spec.write(decoded["key"]["data"], key_version)
    value = None
    if decoded.get("value") is not None:
        version = decoded["value"]["version"]
        value_spec = topics.spec(key_spec.name[:-3] + "Value")
        value = _INT16.pack(version) + value_spec.write(decoded["value"]["data"], version)
    return WriteRecord(key, value, timestamp=timestamp)


#: ProducerStateManager's snapshot entry: producerId int64, epoch int16, lastSequence int32,
#: lastOffset int64, offsetDelta int32, timestamp int64, coordinatorEpoch int32,
#: currentTxnFirstOffset int64.
_PRODUCER_ENTRY = struct.Struct(">qhiqiqiq")
_SNAPSHOT_HEAD = struct.Struct(">hI")


def encode_producer_snapshot(entries: Iterable[dict], *, version: int = 1,
                             crc: int | None = None) -> bytes:
    """A producer-state ``.snapshot`` holding ``entries`` (dicts with the keys
    :func:`kafkalog.state_files.read_producer_snapshot` gives its rows; ``first_sequence``
    is not stored). ``crc`` overrides the computed CRC-32C (to write a corrupt one)."""
    body = bytearray(INT32.pack(0))
    n = 0
    for e in entries:
        body += _PRODUCER_ENTRY.pack(
            e["producer_id"], e["producer_epoch"], e["last_sequence"], e["last_offset"],
            e.get("offset_delta", 0), e.get("timestamp", DEFAULT_TIMESTAMP),
            e.get("coordinator_epoch", -1), e.get("current_txn_first_offset", -1))
        n += 1
    INT32.pack_into(body, 0, n)
    return _SNAPSHOT_HEAD.pack(version, crc32c(bytes(body)) if crc is None else crc) + bytes(body)


def leader_epoch_checkpoint_text(entries: Iterable[tuple[int, int]], *, version: int = 0) -> str:
    """A ``leader-epoch-checkpoint`` of ``(epoch, start_offset)`` pairs."""
    entries = list(entries)
    lines = [str(version), str(len(entries))] + [f"{e} {o}" for e, o in entries]
    return "\n".join(lines) + "\n"


def partition_metadata_text(topic_id: str, *, version: int = 0) -> str:
    """A ``partition.metadata`` naming ``topic_id`` (22-character URL-safe base64)."""
    return f"version: {version}\ntopic_id: {topic_id}\n"


def offset_checkpoint_text(entries: Iterable[tuple[str, int, int]], *, version: int = 0) -> str:
    """One of a log directory's offset checkpoints (``recovery-point-offset-checkpoint``,
    ``replication-offset-checkpoint``, ``log-start-offset-checkpoint``,
    ``cleaner-offset-checkpoint``) of ``(topic, partition, offset)`` entries: a version line,
    a count line, then ``topic partition offset`` lines (Kafka's CheckpointFile)."""
    entries = list(entries)
    lines = [str(version), str(len(entries))] + [f"{t} {p} {o}" for t, p, o in entries]
    return "\n".join(lines) + "\n"


def meta_properties_text(cluster_id: str, node_id: int, *, directory_id: str | None = None,
                         version: int = 1) -> str:
    """A log directory's ``meta.properties`` as a KRaft broker writes it (version 1:
    ``node.id``; version 0, ZooKeeper mode: ``broker.id``), with Java's comment and date
    line first."""
    lines = ["#", "#Thu Jan 01 00:00:00 UTC 1970", f"cluster.id={cluster_id}"]
    if directory_id is not None:
        lines.append(f"directory.id={directory_id}")
    lines += [f"{'node.id' if version >= 1 else 'broker.id'}={node_id}", f"version={version}"]
    return "\n".join(lines) + "\n"
