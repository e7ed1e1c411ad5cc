"""Encode one log entry as a broker writes it: v2 record batches (every codec, idempotent
and transactional producers, control markers, compaction gaps, empty batches, delete
horizons) and v0/v1 messages (plain and compressed wrappers); :mod:`kafkalog.writer` lays
them out as segments.

Wire grammars and CRC coverage are documented where they are read:
``default_records`` (v2: CRC-32C from ``attributes`` to the end) and
``legacy_records`` (v0/v1: CRC-32 from ``magic`` to the end). Codec quirks
(xerial snappy framing, the magic-0 lz4 header checksum) live in ``codecs``;
this module only calls :func:`kafkalog.codecs.compress`.

Choices a broker would make for us, fixed here so output is reproducible:

* A record without a timestamp gets :data:`DEFAULT_TIMESTAMP`; a batch with no
  records gets :data:`~kafkalog.model.NO_TIMESTAMP` (-1) as base and max
  timestamp unless told otherwise.
* Record offsets are ``base + offset_delta``; an unset ``offset_delta`` is the
  record's index in the batch. Explicit deltas (strictly increasing) write
  what log compaction leaves: gaps inside a batch, and a ``lastOffsetDelta``
  beyond the last surviving record.
"""

from __future__ import annotations

import struct
import zlib
from typing import Iterable, NamedTuple, Sequence

from crc32c import crc32c

from . import codecs
from . import default_records as v2
from . import legacy_records as legacy
from .errors import UnknownCodecError
from .model import CODEC_NAMES, CREATE_TIME, LOG_APPEND_TIME, NO_TIMESTAMP

#: Timestamp given to records written without one (2023-11-14T22:13:20Z).
DEFAULT_TIMESTAMP = 1_700_000_000_000

#: Control record types of transaction markers (key: int16 version, int16 type).
ABORT, COMMIT = 0, 1
_CONTROL_KEY = struct.Struct(">hh")
_MARKER_VALUE = struct.Struct(">hi")

OFFSET_AND_SIZE = struct.Struct(">qi")
_CRC = struct.Struct(">I")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")
_MAGIC_AND_ATTRIBUTES = struct.Struct(">bb")
INT32_MAX = 0x7FFFFFFF


class WriteRecord(NamedTuple):
    """One record to write.

    ``headers`` keys are ``str`` (written UTF-8) or ``bytes`` (written as they
    are, e.g. to produce a header key that is not UTF-8). ``timestamp`` None
    means :data:`DEFAULT_TIMESTAMP`; ``offset_delta`` None means the record's
    index in its batch. v0/v1 ignore ``headers``; v0 ignores ``timestamp``.
    """

    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    timestamp: int | None = None
    offset_delta: int | None = None


# ------------------------------------------------------------------ helpers
def codec_id_of(codec, magic: int) -> int:
    """A codec name (``"gzip"``) or id (``1``) -> id, checked against ``magic``."""
    codec_id = codecs.CODEC_IDS.get(codec) if isinstance(codec, str) else codec
    if codec_id not in CODEC_NAMES or codec_id not in codecs.CODECS_BY_MAGIC[magic]:
        raise UnknownCodecError(f"codec {codec!r} does not exist for magic {magic}")
    return codec_id


def offset_deltas(records: Sequence[WriteRecord]) -> list[int]:
    """Offset deltas of ``records``; explicit ones must strictly increase."""
    out = []
    prev = -1
    for i, r in enumerate(records):
        delta = i if r.offset_delta is None else r.offset_delta
        if delta <= prev or delta > INT32_MAX:
            raise ValueError(
                f"record {i}: offset delta {delta} does not follow {prev} "
                "(deltas must increase strictly, 0 .. 2**31-1)"
            )
        out.append(delta)
        prev = delta
    return out


def _timestamp(record: WriteRecord) -> int:
    return DEFAULT_TIMESTAMP if record.timestamp is None else record.timestamp


def _check_timestamp_type(timestamp_type: str, log_append_time: int | None) -> bool:
    """Whether ``timestamp_type`` is LogAppendTime (then ``log_append_time`` is required)."""
    if timestamp_type == LOG_APPEND_TIME:
        if log_append_time is None:
            raise ValueError("timestamp_type LogAppendTime needs log_append_time")
        return True
    if timestamp_type != CREATE_TIME:
        raise ValueError(
            f"timestamp_type must be {CREATE_TIME!r} or {LOG_APPEND_TIME!r}, not {timestamp_type!r}"
        )
    return False


# ----------------------------------------------------------------------- v2
def _v2_bytes(out: bytearray, data: bytes | None) -> None:
    """A nullable varint-length byte string (key, value, header value)."""
    if data is None:
        out += v2.encode_varint(-1)
    else:
        out += v2.encode_varint(len(data))
        out += data


def encode_v2_record(record: WriteRecord, offset_delta: int, timestamp_delta: int) -> bytes:
    """One v2 record, its length varint included (attributes are always 0)."""
    body = bytearray(b"\x00")  # record attributes: unused
    body += v2.encode_varint(timestamp_delta)
    body += v2.encode_varint(offset_delta)
    _v2_bytes(body, record.key)
    _v2_bytes(body, record.value)
    body += v2.encode_varint(len(record.headers))
    for h_key, h_value in record.headers:
        raw_key = h_key if isinstance(h_key, (bytes, bytearray)) else h_key.encode("utf-8")
        body += v2.encode_varint(len(raw_key))
        body += raw_key
        _v2_bytes(body, h_value)
    return v2.encode_varint(len(body)) + bytes(body)


def encode_v2_batch(
    base_offset: int,
    records: Iterable[WriteRecord],
    *,
    codec="none",
    timestamp_type: str = CREATE_TIME,
    log_append_time: int | None = None,
    base_timestamp: int | None = None,
    max_timestamp: int | None = None,
    partition_leader_epoch: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    control: bool = False,
    delete_horizon_ms: int | None = None,
    last_offset_delta: int | None = None,
) -> bytes:
    """One magic-2 record batch (61-byte header + records), CRC-32C filled in.

    ``baseTimestamp`` is the first record's timestamp, or ``delete_horizon_ms``
    when given (attributes bit 6; record timestamp deltas are then relative to
    the horizon, as Kafka's cleaner writes them). ``maxTimestamp`` is the
    largest record timestamp, or ``log_append_time`` for LogAppendTime.
    ``base_timestamp``/``max_timestamp`` override both (to write odd batches).
    A batch without records needs ``last_offset_delta``; its timestamps
    default to -1. ``codec`` is a name (``"none"``, ``"gzip"``, ``"snappy"``,
    ``"lz4"``, ``"zstd"``) or a codec id.
    """
    records = list(records)
    codec_id = codec_id_of(codec, 2)
    log_append = _check_timestamp_type(timestamp_type, log_append_time)
    if delete_horizon_ms is not None and base_timestamp is not None:
        raise ValueError("give delete_horizon_ms or base_timestamp, not both")
    deltas = offset_deltas(records)
    timestamps = [_timestamp(r) for r in records]
    if last_offset_delta is None:
        if not records:
            raise ValueError("a batch without records needs last_offset_delta")
        last_offset_delta = deltas[-1]
    elif records and last_offset_delta < deltas[-1]:
        raise ValueError(
            f"last_offset_delta {last_offset_delta} is below the last record's delta {deltas[-1]}"
        )
    if base_timestamp is None:
        if delete_horizon_ms is not None:
            base_timestamp = delete_horizon_ms
        else:
            base_timestamp = timestamps[0] if records else NO_TIMESTAMP
    if max_timestamp is None:
        if log_append:
            max_timestamp = log_append_time
        else:
            max_timestamp = max(timestamps) if records else NO_TIMESTAMP

    payload = b"".join(
        encode_v2_record(r, d, ts - base_timestamp)
        for r, d, ts in zip(records, deltas, timestamps)
    )
    if codec_id != codecs.NONE:
        payload = codecs.compress(codec_id, payload, 2)

    attributes = codec_id
    if log_append:
        attributes |= v2.TIMESTAMP_TYPE_MASK
    if transactional:
        attributes |= v2.TRANSACTIONAL_FLAG_MASK
    if control:
        attributes |= v2.CONTROL_FLAG_MASK
    if delete_horizon_ms is not None:
        attributes |= v2.DELETE_HORIZON_FLAG_MASK

    buf = bytearray(v2.HEADER.size + len(payload))
    try:
        v2.HEADER.pack_into(
            buf, 0,
            base_offset,
            len(buf) - v2.LOG_OVERHEAD,
            partition_leader_epoch,
            2,
            0,  # crc, filled in below
            attributes,
            last_offset_delta,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            len(records),
        )
    except struct.error as err:
        raise ValueError(f"batch header field out of range: {err}") from err
    buf[v2.RECORDS_OFFSET :] = payload
    _CRC.pack_into(buf, v2.CRC_OFFSET, crc32c(memoryview(buf)[v2.ATTRIBUTES_OFFSET :]))
    return bytes(buf)


def encode_control_batch(
    offset: int,
    *,
    commit: bool,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int = 0,
    timestamp: int,
    partition_leader_epoch: int = 0,
) -> bytes:
    """A COMMIT or ABORT transaction marker: a control batch of one record.

    key = int16 version 0, int16 type (0 ABORT, 1 COMMIT);
    value = int16 version 0, int32 coordinator epoch; baseSequence -1, as the
    broker's transaction coordinator writes it.
    """
    record = WriteRecord(
        key=_CONTROL_KEY.pack(0, COMMIT if commit else ABORT),
        value=_MARKER_VALUE.pack(0, coordinator_epoch),
        timestamp=timestamp,
    )
    return encode_v2_batch(
        offset,
        [record],
        partition_leader_epoch=partition_leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=-1,
        transactional=True,
        control=True,
    )


# ------------------------------------------------------------------- v0/v1
def _legacy_bytes(data: bytes | None) -> bytes:
    if data is None:
        return INT32.pack(-1)
    return INT32.pack(len(data)) + data


def encode_legacy_message(
    offset: int,
    key: bytes | None,
    value: bytes | None,
    *,
    magic: int,
    attributes: int = 0,
    timestamp: int | None = None,
) -> bytes:
    """One v0/v1 message with its ``offset``/``size`` prefix and CRC-32."""
    body = _MAGIC_AND_ATTRIBUTES.pack(magic, attributes)
    if magic == 1:
        body += INT64.pack(NO_TIMESTAMP if timestamp is None else timestamp)
    body += _legacy_bytes(key) + _legacy_bytes(value)
    crc = _CRC.pack(zlib.crc32(body))
    return OFFSET_AND_SIZE.pack(offset, len(crc) + len(body)) + crc + body


def encode_legacy_entry(
    offset: int,
    records: Iterable[WriteRecord],
    *,
    magic: int,
    codec="none",
    timestamp_type: str = CREATE_TIME,
    log_append_time: int | None = None,
) -> bytes:
    """One top-level v0/v1 log entry.

    Uncompressed: exactly one record, one message at ``offset`` (plus its
    ``offset_delta`` if set). Compressed: a wrapper message whose value is the
    compressed inner message set; ``offset`` is the first inner offset, the
    wrapper's offset is the last inner absolute offset; inner offsets are
    absolute for magic 0 and relative (the offset deltas) for magic 1. For
    magic 1 the wrapper's timestamp is the largest inner timestamp
    (CreateTime), or ``log_append_time`` with attributes bit 3 set
    (LogAppendTime; inner messages keep their own timestamps, as a broker
    stamping in place leaves them). Inner messages carry their own CRC-32.
    """
    if magic not in (0, 1):
        raise ValueError(f"legacy entries have magic 0 or 1, not {magic}")
    records = list(records)
    codec_id = codec_id_of(codec, magic)
    log_append = _check_timestamp_type(timestamp_type, log_append_time)
    if log_append and magic == 0:
        raise ValueError("magic 0 has no timestamps: LogAppendTime needs magic 1")
    if not records:
        raise ValueError("a legacy entry holds at least one message")
    deltas = offset_deltas(records)
    type_bit = legacy.TIMESTAMP_TYPE_MASK if log_append else 0
    if codec_id == codecs.NONE:
        if len(records) != 1:
            raise ValueError(
                f"an uncompressed v{magic} entry is one message, not {len(records)}"
            )
        r = records[0]
        ts = log_append_time if log_append else _timestamp(r)
        return encode_legacy_message(
            offset + deltas[0], r.key, r.value, magic=magic, attributes=type_bit, timestamp=ts
        )
    inner = b"".join(
        encode_legacy_message(
            offset + d if magic == 0 else d, r.key, r.value, magic=magic, timestamp=_timestamp(r)
        )
        for r, d in zip(records, deltas)
    )
    wrapper_ts = log_append_time if log_append else max(_timestamp(r) for r in records)
    return encode_legacy_message(
        offset + deltas[-1],
        None,
        codecs.compress(codec_id, inner, magic),
        magic=magic,
        attributes=codec_id | type_bit,
        timestamp=wrapper_ts,
    )
