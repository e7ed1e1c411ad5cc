"""Keys and values decoded with Schema Registry schemas (Avro, JSON Schema, Protobuf).

The registry is rebuilt from the snapshot's own ``_schemas`` topic, a folder of schema
files or a live registry (:func:`open_source`); :func:`decode_fields` gives, for one
record, the eight fields ``kafkalog dump --schemas`` prints and the tables will hold::

    >>> from kafkalog.schemas import open_source, decode_fields
    >>> registry = open_source("snapshot/_schemas-0")
    >>> decode_fields(registry, record.key, record.value, record.headers)
    {'key_schema_id': None, 'value_schema_id': 3, 'key_format': None, 'value_format': 'AVRO',
     'key_decoded': None, 'value_decoded': {'id': 7, ...}, 'key_error': None, 'value_error': None}

A key or value that is not in the wire format (plain text, empty, null) gets nulls in all
four of its fields: that is not an error. The errors are ``"unknown_schema_id"`` (the
registry has no such id or GUID) and ``"malformed"`` (the bytes do not read with the
schema, or the schema does not compile); :func:`decode_one` also says why, and what a JSON
document breaks of its schema (validation is reported, not required: the document decodes).
"""

from __future__ import annotations

import os
from typing import NamedTuple, Sequence

from .decoders import decoder_for
from .live import LiveRegistry
from .registry import (
    AVRO, FORMATS, JSON, PROTOBUF, Reference, Registry, RegistryError, Schema,
    from_folder, from_schemas_topic, is_schemas_source,
)
from .wire import (
    KEY_SCHEMA_HEADER, VALUE_SCHEMA_HEADER, WireFormatError, read_message_indexes, schema_ref,
)

__all__ = [
    "AVRO", "JSON", "PROTOBUF", "FORMATS", "FIELDS", "UNKNOWN_SCHEMA_ID", "MALFORMED",
    "Decoded", "Reference", "Registry", "RegistryError", "Schema", "WireFormatError",
    "KEY_SCHEMA_HEADER", "VALUE_SCHEMA_HEADER",
    "decode_fields", "decode_one", "fields_of", "from_folder", "from_schemas_topic", "open_source",
    "wire_header",
]

#: The fields :func:`decode_fields` returns, in this order.
FIELDS = ("key_schema_id", "value_schema_id", "key_format", "value_format",
          "key_decoded", "value_decoded", "key_error", "value_error")
UNKNOWN_SCHEMA_ID, MALFORMED = "unknown_schema_id", "malformed"


def open_source(source: str) -> Registry:
    """``--schemas SOURCE``: a ``_schemas`` segment or folder, a registry URL, or a schema folder.

    (Here, above both kinds of registry: ``live.LiveRegistry`` is a ``registry.Registry``
    that fetches what it lacks, so ``live`` imports ``registry`` and not the reverse.)"""
    if source.startswith(("http://", "https://")):
        return LiveRegistry(source)
    if not os.path.exists(source):
        raise RegistryError(f"{source}: no such file or folder")
    return from_schemas_topic(source) if is_schemas_source(source) else from_folder(source)


class Decoded(NamedTuple):
    """One key or value: its schema id and format, the decoded data, the error and why;
    ``violations``: what a JSON document breaks of its schema (it still decodes)."""

    schema_id: int | None = None
    format: str | None = None
    decoded: object = None
    error: str | None = None
    reason: str | None = None
    violations: tuple[str, ...] = ()


_NOT_WIRE = Decoded()


def _header(headers, name: str):
    found = None
    for h in headers or ():
        if h[0] == name:
            found = h[1]  # the last one wins, as a consumer reading headers.lastHeader()
    return found


def decode_one(registry: Registry, data: bytes | None, header: bytes | None = None) -> Decoded:
    """Decode a key or value (``header``: its ``__key_schema_id``/``__value_schema_id`` value)."""
    if data is None:
        return _NOT_WIRE
    try:
        ref = schema_ref(data, header)
    except WireFormatError as err:
        return Decoded(error=MALFORMED, reason=str(err))
    if ref is None:
        return _NOT_WIRE
    schema = registry.by_id(ref.schema_id) if ref.guid is None else registry.by_guid(ref.guid)
    if schema is None:
        what = f"schema id {ref.schema_id}" if ref.guid is None else f"schema GUID {ref.guid}"
        return Decoded(ref.schema_id, error=UNKNOWN_SCHEMA_ID, reason=f"{what} is not registered")
    try:
        decode = decoder_for(registry, schema)
        if ref.guid is None:
            value = decode(ref.payload)
        else:  # header form: indexes in the header, the whole value is the payload
            indexes = None
            if schema.schema_type == PROTOBUF:
                indexes, _ = read_message_indexes(ref.payload)
            value = decode(memoryview(data), indexes)
    except (WireFormatError, RegistryError) as err:
        return Decoded(schema.id, schema.schema_type, error=MALFORMED, reason=str(err))
    check = getattr(decode, "violations", None)
    return Decoded(schema.id, schema.schema_type, value,
                   violations=tuple(check(value)) if check is not None else ())


def decode_fields(registry: Registry, key: bytes | None, value: bytes | None,
                  headers: Sequence | None = ()) -> dict:
    """The eight :data:`FIELDS` of one record (``headers``: ``(name, bytes)`` pairs)."""
    return fields_of(decode_one(registry, key, _header(headers, KEY_SCHEMA_HEADER)),
                     decode_one(registry, value, _header(headers, VALUE_SCHEMA_HEADER)))


def wire_header(headers, name: str) -> bytes | None:
    """The value of the last header called ``name`` (``__key_schema_id``/``__value_schema_id``)."""
    return _header(headers, name)


def fields_of(key: Decoded, value: Decoded) -> dict:
    """The eight :data:`FIELDS` from a decoded key and value."""
    return {"key_schema_id": key.schema_id, "value_schema_id": value.schema_id,
            "key_format": key.format, "value_format": value.format,
            "key_decoded": key.decoded, "value_decoded": value.decoded,
            "key_error": key.error, "value_error": value.error}
