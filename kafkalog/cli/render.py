"""A batch and its records as ``dump`` prints them: JSON objects, or text lines like
``kafka-dump-log.sh``'s; the records of internal topics and in Schema Registry's wire format
decoded, with a finding where they do not."""

from __future__ import annotations

import base64

from .. import schemas as sr
from ..internal import MessageError, decode, expand_consumer_protocol
from ..model import Batch, Finding, increment_sequence
from .output import bool_text, compact, num_text


def _b64(value: bytes | None) -> str | None:
    return None if value is None else base64.b64encode(value).decode("ascii")


def batch_json(b: Batch, file: str) -> dict:
    return {
        "type": "batch",
        "file": file,
        "position": b.position,
        "size": b.size,
        "base_offset": b.base_offset,
        "last_offset": b.last_offset,
        "magic": b.magic,
        "compression": b.compression,
        "timestamp_type": b.timestamp_type,
        "first_timestamp": b.first_timestamp,
        "max_timestamp": b.max_timestamp,
        "partition_leader_epoch": b.partition_leader_epoch,
        "producer_id": b.producer_id,
        "producer_epoch": b.producer_epoch,
        "base_sequence": b.base_sequence,
        "last_sequence": b.last_sequence,
        "last_offset_delta": b.last_offset_delta,
        "record_count": b.record_count,
        "is_transactional": b.is_transactional,
        "is_control": b.is_control,
        "has_delete_horizon": b.has_delete_horizon,
        "delete_horizon_ms": b.delete_horizon_ms,
        "attributes": b.attributes,
        "crc": b.crc,
        "computed_crc": b.computed_crc,
        "crc_valid": b.crc_valid,
        "status": b.status,
    }


def record_json(b: Batch, r, file: str) -> dict:
    out = {
        "type": "record",
        "file": file,
        "offset": r.offset,
        "timestamp": r.timestamp,
        "timestamp_type": b.timestamp_type,
        "key": _b64(r.key),
        "value": _b64(r.value),
        "headers": [[h.key, _b64(h.value)] for h in r.headers],
    }
    if b.is_control:
        c = r.control
        out["control"] = {
            "type": c.type if c else "UNREADABLE",
            "type_id": c.type_id if c else None,
            "version": c.version if c else None,
            "coordinator_epoch": c.coordinator_epoch if c else None,
        }
    return out


def batch_text(b: Batch) -> str:
    ts_name = b.timestamp_type or "NoTimestampType"
    horizon = f"OptionalLong[{b.delete_horizon_ms}]" if b.has_delete_horizon else "OptionalLong.empty"
    parts = [
        f"baseOffset: {num_text(b.base_offset)} lastOffset: {b.last_offset} "
        f"count: {b.record_count}",
    ]
    if b.magic == 2:
        parts.append(
            f"baseSequence: {b.base_sequence} lastSequence: {b.last_sequence} "
            f"producerId: {b.producer_id} producerEpoch: {b.producer_epoch} "
            f"partitionLeaderEpoch: {b.partition_leader_epoch} "
            f"isTransactional: {bool_text(b.is_transactional)} "
            f"isControl: {bool_text(b.is_control)} "
            f"deleteHorizonMs: {horizon}"
        )
    parts.append(
        f"position: {b.position} {ts_name}: {b.max_timestamp if b.max_timestamp is not None else -1} "
        f"size: {b.size} magic: {b.magic} compresscodec: {b.compression} "
        f"crc: {b.crc} isvalid: {bool_text(b.crc_valid)}"
    )
    if not b.decoded:
        parts.append("records: undecodable")
    return " ".join(parts)


def _shown(value: bytes | None) -> str:
    if value is None:
        return "null"
    return value.decode("utf-8", "backslashreplace")


def record_text(b: Batch, r, print_data: bool, decoded: dict | None = None,
                fields: dict | None = None) -> str:
    ts_name = b.timestamp_type or "NoTimestampType"
    seq = "-1"
    if b.base_sequence is not None and b.base_sequence >= 0:
        seq = str(increment_sequence(b.base_sequence, r.offset - b.base_offset))
    line = (
        f"| offset: {r.offset} {ts_name}: {r.timestamp if r.timestamp is not None else -1} "
        f"keySize: {-1 if r.key is None else len(r.key)} "
        f"valueSize: {-1 if r.value is None else len(r.value)}"
    )
    if b.magic == 2:
        keys = ",".join(h.key for h in r.headers)
        line += f" sequence: {seq} headerKeys: [{keys}]"
    if b.is_control:
        c = r.control
        if c is None:
            line += " controlRecord: unreadable"
        elif c.coordinator_epoch is not None:
            line += f" endTxnMarker: {c.type} coordinatorEpoch: {c.coordinator_epoch}"
        else:
            line += f" controlType: {c.type}({c.type_id})"
    elif decoded is not None:  # as kafka-dump-log.sh prints its decoders' output
        if "key" in decoded:
            line += f" key: {compact(decoded['key'])} payload: {compact(decoded['value'])}"
        else:
            line += f" payload: {compact(decoded)}"
    elif print_data:
        line += f" key: {_shown(r.key)} payload: {_shown(r.value)}"
    if fields is not None:
        line += f" schemas: {compact(fields)}"
    return line


def decode_record(decoder: str, r, expand: bool) -> tuple[dict | None, str | None]:
    """``(decoded, why not)`` for one data record of an internal topic. A consumer-protocol
    expansion that fails keeps the record decoded, with its bytes as base64, and says why."""
    try:
        decoded = decode(decoder, r.key, r.value)
    except MessageError as err:
        return None, str(err)
    if expand:
        try:
            decoded = expand_consumer_protocol(decoded)
        except MessageError as err:
            return decoded, f"consumer protocol not expanded: {err}"
    return decoded, None


def internal_record_finding(b: Batch, r, why: str) -> Finding:
    """A record of ``b`` that does not decode with its internal topic's specs."""
    return Finding("internal_record_error", b.position, b.end, f"offset {r.offset}: {why}",
                   r.offset, r.offset)


def schema_decode_findings(b: Batch, r, registry) -> tuple[dict, list[Finding]]:
    """The eight fields of ``kafkalog.schemas.FIELDS`` for one record, and a
    ``key_decode_error``/``value_decode_error`` finding per side that did not decode
    (``*_schema_violation`` per JSON document that decoded but does not validate)."""
    found = []
    headers = r.headers
    key = sr.decode_one(registry, r.key, sr.wire_header(headers, sr.KEY_SCHEMA_HEADER))
    value = sr.decode_one(registry, r.value, sr.wire_header(headers, sr.VALUE_SCHEMA_HEADER))
    for side, d in (("key", key), ("value", value)):
        if d.error is not None:
            found.append(Finding(f"{side}_decode_error", b.position, b.end,
                                 f"offset {r.offset}: {side} {d.error}: {d.reason}", r.offset, r.offset))
        elif d.violations:
            found.append(Finding(f"{side}_schema_violation", b.position, b.end,
                                 f"offset {r.offset}: {side} (schema id {d.schema_id}) does not "
                                 f"validate: {'; '.join(d.violations)}", r.offset, r.offset))
    return sr.fields_of(key, value), found
