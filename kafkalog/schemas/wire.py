"""Confluent's Schema Registry wire format: where a key's or value's schema is named.

Grammar (big-endian)::

    prefixed value  = magic:int8 (0) schema_id:uint32 [message_indexes] payload
    header value    = magic:int8 (1) guid:16 bytes    [message_indexes]   (payload: the whole value)
    message_indexes = count:zigzag-varint index:zigzag-varint{count}      (Protobuf only)

Newer clients may put the schema in a record header instead of the prefix:
``__key_schema_id`` / ``__value_schema_id`` hold magic 1 and the schema's GUID
(``confluent_kafka.schema_registry.header_schema_id_serializer``); the value then
holds the serialized payload alone. A header wins over the prefix, as in the client's
``dual_schema_id_deserializer``.

Message indexes say which message of a ``.proto`` file the payload is: the first
index picks a top-level message, each next one a nested message of it. A count
of 0 (the single byte ``0x00``) is the common case ``[0]``, the file's first message.
There is no checksum anywhere in this format.
"""

from __future__ import annotations

import struct
import uuid
from typing import NamedTuple

from ..default_records import read_varint
from ..errors import KafkaLogError

MAGIC_ID, MAGIC_GUID = 0, 1
PREFIX = struct.Struct(">bI")  # magic, schema id
GUID_LENGTH = 16
KEY_SCHEMA_HEADER, VALUE_SCHEMA_HEADER = "__key_schema_id", "__value_schema_id"
#: The client refuses longer index arrays; so do we (a corrupt count would allocate).
MAX_MESSAGE_INDEXES = 100_000


class WireFormatError(KafkaLogError, ValueError):
    """Bytes that start like the wire format but do not hold it (truncated, bad indexes)."""


class SchemaRef(NamedTuple):
    """Where a key's or value's schema is named: by id (prefix) or GUID (header)."""

    schema_id: int | None
    guid: str | None
    payload: memoryview  # the bytes after the schema reference (message indexes included)


def schema_ref(data: bytes | None, header: bytes | None = None) -> SchemaRef | None:
    """The schema reference of ``data`` (with its schema header value, if any);
    None when ``data`` is not in the wire format (plain text, empty, null) and no header names one.

    Raises :class:`WireFormatError` for a header that is not magic 1 + 16 bytes, or a
    value with magic 0 shorter than the 5-byte prefix.
    """
    if header is not None:
        if len(header) < 1 + GUID_LENGTH or header[0] != MAGIC_GUID:
            raise WireFormatError(
                f"schema id header of {len(header)} bytes, magic {header[0] if header else None}: "
                f"need magic {MAGIC_GUID} and a {GUID_LENGTH}-byte GUID")
        guid = str(uuid.UUID(bytes=bytes(header[1:1 + GUID_LENGTH])))
        # the header carries the Protobuf message indexes; the payload is the whole value
        return SchemaRef(None, guid, memoryview(header)[1 + GUID_LENGTH:])
    if not data or data[0] != MAGIC_ID:
        return None
    if len(data) < PREFIX.size:
        raise WireFormatError(f"magic byte 0 but {len(data)} bytes: the prefix needs {PREFIX.size}")
    return SchemaRef(PREFIX.unpack_from(data)[1], None, memoryview(data)[PREFIX.size:])


def read_message_indexes(buf, pos: int = 0) -> tuple[list[int], int]:
    """``(indexes, new_pos)``; a count of 0 means ``[0]``."""
    try:
        count, pos = read_varint(buf, pos, 5)
        if count < 0 or count > MAX_MESSAGE_INDEXES:
            raise WireFormatError(f"message index count {count} at byte {pos}")
        if count == 0:
            return [0], pos
        indexes = []
        for _ in range(count):
            i, pos = read_varint(buf, pos, 5)
            if i < 0:
                raise WireFormatError(f"negative message index {i}")
            indexes.append(i)
        return indexes, pos
    except IndexError as err:
        raise WireFormatError(f"message indexes cut short at byte {len(buf)}") from err
    except WireFormatError:
        raise
    except KafkaLogError as err:  # read_varint's width checks
        raise WireFormatError(f"message indexes: {err}") from err
