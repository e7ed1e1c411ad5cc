"""The frame Kafka's AbstractApiMessageSerde puts around a record value.

``__cluster_metadata`` (MetadataRecordSerde) and ``__remote_log_metadata``
(RemoteLogMetadataSerde) frame their values alike, each with api keys of its own::

    value = unsigned varint frame version (1), unsigned varint api key (the spec's
            "apiKey"), unsigned varint record version, then the record (flexible from v0)

:mod:`.topics` reads the first with it, :mod:`.remote_log` the second.
"""

from __future__ import annotations

from .schema import MessageError, MessageSpec, read_uvarint, snake_name

#: KRaft's frame version (MetadataRecordSerde.DEFAULT_FRAME_VERSION).
METADATA_FRAME_VERSION = 1


def record_type_name(spec_name: str) -> str:
    """``PartitionRecord`` -> ``PARTITION_RECORD`` (Kafka's MetadataRecordType names)."""
    return snake_name(spec_name).upper()


def decode_framed(value: bytes | None, records: dict[int, MessageSpec], what: str) -> dict:
    """A value framed as Kafka's AbstractApiMessageSerde frames it (frame version, api key,
    record version, record), read with ``records`` (api key -> spec)."""
    if value is None:
        raise MessageError(f"{what} with a null value", 0)
    frame, pos = read_uvarint(value, 0, len(value), "frame version")
    if frame != METADATA_FRAME_VERSION:
        raise MessageError(f"{what}: frame version {frame}, expected "
                           f"{METADATA_FRAME_VERSION}", 0)
    api_key, pos = read_uvarint(value, pos, len(value), "api key")
    version, pos = read_uvarint(value, pos, len(value), "record version")
    record_spec = records.get(api_key)
    if record_spec is None:
        raise MessageError(f"{what}: unknown api key {api_key}", 0)
    return {"type": record_type_name(record_spec.name), "version": version,
            "data": record_spec.read_exactly(value, version, pos)}
