"""Magic 2: Kafka's ``DefaultRecordBatch`` (Kafka >= 0.11), pure Python.

Wire grammar (big-endian; the 61-byte header is :data:`HEADER`)::

    baseOffset int64 | length int32 | partitionLeaderEpoch int32 | magic int8 |
    crc uint32 | attributes int16 | lastOffsetDelta int32 | baseTimestamp int64 |
    maxTimestamp int64 | producerId int64 | producerEpoch int16 |
    baseSequence int32 | recordCount int32 | records...

    record := length varint | attributes int8 | timestampDelta varlong |
              offsetDelta varint | keyLength varint | key | valueLength varint |
              value | headerCount varint | header*
    header := keyLength varint | key (utf-8) | valueLength varint | value

All varints are zigzag-encoded. A length of -1 is null, 0 is empty.

CRC coverage: ``crc`` is CRC-32C over the bytes from ``attributes`` to the end
of the batch. It leaves out baseOffset, length, partitionLeaderEpoch and magic
on purpose: the broker assigns the offset and the leader epoch *after* the
producer computed the CRC, so both must be rewritable without recomputing it.
The consequence for readers: damage to those four fields is not caught by the
CRC, only by offset and length checks.

Attributes: bits 0-2 codec, bit 3 timestamp type (1 = LogAppendTime), bit 4
transactional, bit 5 control, bit 6 delete horizon set (then baseTimestamp
holds the delete horizon, not a record time). Only the records are compressed.
"""

from __future__ import annotations

import struct

from .errors import CorruptBatchError
from .model import (
    CONTROL_TYPES,
    CREATE_TIME,
    LOG_APPEND_TIME,
    Control,
    Header,
    Record,
)

HEADER = struct.Struct(">qiibIhiqqqhii")

BASE_OFFSET_OFFSET = 0
LENGTH_OFFSET = BASE_OFFSET_OFFSET + 8
PARTITION_LEADER_EPOCH_OFFSET = LENGTH_OFFSET + 4
MAGIC_OFFSET = PARTITION_LEADER_EPOCH_OFFSET + 4
CRC_OFFSET = MAGIC_OFFSET + 1
CRC_LENGTH = 4
ATTRIBUTES_OFFSET = CRC_OFFSET + CRC_LENGTH
LAST_OFFSET_DELTA_OFFSET = ATTRIBUTES_OFFSET + 2
BASE_TIMESTAMP_OFFSET = LAST_OFFSET_DELTA_OFFSET + 4
MAX_TIMESTAMP_OFFSET = BASE_TIMESTAMP_OFFSET + 8
PRODUCER_ID_OFFSET = MAX_TIMESTAMP_OFFSET + 8
PRODUCER_EPOCH_OFFSET = PRODUCER_ID_OFFSET + 8
BASE_SEQUENCE_OFFSET = PRODUCER_EPOCH_OFFSET + 2
RECORDS_COUNT_OFFSET = BASE_SEQUENCE_OFFSET + 4
RECORDS_OFFSET = RECORDS_COUNT_OFFSET + 4

LOG_OVERHEAD = LENGTH_OFFSET + 4  # offset + length fields
#: Smallest legal value of the ``length`` field (a batch with no records).
MIN_LENGTH = RECORDS_OFFSET - LOG_OVERHEAD

COMPRESSION_CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG_MASK = 0x10
CONTROL_FLAG_MASK = 0x20
DELETE_HORIZON_FLAG_MASK = 0x40

#: The fewest bytes a record can take: length, attributes, timestampDelta,
#: offsetDelta, keyLength, valueLength, headerCount, one byte each.
MIN_RECORD_SIZE = 7

_tuple_new = tuple.__new__

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1


def read_varint(buf, pos: int, max_bytes: int = 10) -> tuple[int, int]:
    """Zigzag varint/varlong at ``pos`` -> ``(value, new_pos)``.

    ``max_bytes`` 5 reads a varint (int32), 10 a varlong (int64); a value
    beyond that width cannot come from Kafka and is corruption.
    """
    result = 0
    shift = 0
    start = pos
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            if result >> (32 if max_bytes <= 5 else 64):
                raise CorruptBatchError(
                    f"varint at {start} holds {result}, wider than {max_bytes} bytes allow"
                )
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if pos - start >= max_bytes:
            raise CorruptBatchError(f"varint longer than {max_bytes} bytes at {start}")


def encode_varint(value: int) -> bytes:
    """Zigzag-encode a signed 64-bit value (the writer's and the tests' twin)."""
    return encode_uvarint(((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)


def encode_uvarint(v: int) -> bytes:
    """An unsigned varint: 7 bits a byte, low bits first, high bit set on all but the last."""
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def read_records(
    data: bytes,
    count: int,
    base_offset: int,
    base_timestamp: int,
    log_append_time: int | None,
    bad_keys: list,
) -> list[Record]:
    """Parse ``count`` records filling ``data`` exactly.

    ``log_append_time`` is the batch maxTimestamp for LogAppendTime batches
    (every record takes it), else ``None``. Header keys that are not UTF-8 are
    kept backslash-escaped and their offsets appended to ``bad_keys``.
    Raises :class:`CorruptBatchError` (or ``IndexError``, translated by the
    caller) when the bytes do not hold exactly ``count`` well-formed records.
    """
    end = len(data)
    if count < 0 or count * MIN_RECORD_SIZE > end:
        raise CorruptBatchError(
            f"record count {count} cannot fit in {end} bytes of records"
        )
    # offsetDelta is an int32 and a timestampDelta of one or two bytes within
    # +-8192, so offsets and timestamps can only leave int64 near its ends:
    # check every record then; wider timestamp deltas are checked where read.
    near_edge = not (
        INT64_MIN + (1 << 31) <= base_offset <= INT64_MAX - (1 << 31)
        and INT64_MIN + 8192 <= base_timestamp <= INT64_MAX - 8192
    )
    ts_lo = INT64_MIN - base_timestamp
    ts_hi = INT64_MAX - base_timestamp
    out: list[Record] = []
    append = out.append
    pos = 0
    for _ in range(count):
        # length (varint); one-byte fast path on every small field
        b = data[pos]
        if b < 0x80:
            length = (b >> 1) ^ -(b & 1)
            pos += 1
        elif data[pos + 1] < 0x80:  # two-byte fast path: records of 64..8191 bytes
            b = (b & 0x7F) | (data[pos + 1] << 7)
            length = (b >> 1) ^ -(b & 1)
            pos += 2
        else:
            length, pos = read_varint(data, pos, 5)
        record_end = pos + length
        if length < MIN_RECORD_SIZE - 1 or record_end > end:
            raise CorruptBatchError(
                f"record length {length} at byte {pos} of the records "
                f"does not fit in the {end - pos} bytes left"
            )
        pos += 1  # record attributes: unused
        b = data[pos]
        if b < 0x80:
            ts_delta = (b >> 1) ^ -(b & 1)
            pos += 1
        elif data[pos + 1] < 0x80:
            b = (b & 0x7F) | (data[pos + 1] << 7)
            ts_delta = (b >> 1) ^ -(b & 1)
            pos += 2
        else:
            ts_delta, pos = read_varint(data, pos, 10)
            if not ts_lo <= ts_delta <= ts_hi:
                raise CorruptBatchError(
                    f"timestamp delta {ts_delta} takes base timestamp {base_timestamp} out of int64"
                )
        b = data[pos]
        if b < 0x80:
            offset_delta = (b >> 1) ^ -(b & 1)
            pos += 1
        elif data[pos + 1] < 0x80:
            b = (b & 0x7F) | (data[pos + 1] << 7)
            offset_delta = (b >> 1) ^ -(b & 1)
            pos += 2
        else:
            offset_delta, pos = read_varint(data, pos, 5)
        b = data[pos]
        if b < 0x80:
            n = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            n, pos = read_varint(data, pos, 5)
        if n < 0:
            if n != -1:
                raise CorruptBatchError(f"key length {n} in record at offset delta {offset_delta}")
            key = None
        else:
            key = data[pos : pos + n]
            pos += n
        b = data[pos]
        if b < 0x80:
            n = (b >> 1) ^ -(b & 1)
            pos += 1
        elif data[pos + 1] < 0x80:
            b = (b & 0x7F) | (data[pos + 1] << 7)
            n = (b >> 1) ^ -(b & 1)
            pos += 2
        else:
            n, pos = read_varint(data, pos, 5)
        if n < 0:
            if n != -1:
                raise CorruptBatchError(f"value length {n} in record at offset delta {offset_delta}")
            value = None
        else:
            value = data[pos : pos + n]
            pos += n
        b = data[pos]
        if b < 0x80:
            n = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            n, pos = read_varint(data, pos, 5)
        if n == 0:
            headers = ()
        else:
            if n < 0 or n * 2 > record_end - pos:
                raise CorruptBatchError(
                    f"header count {n} in record at offset delta {offset_delta} "
                    f"cannot fit in {record_end - pos} bytes"
                )
            hs = []
            for _ in range(n):
                b = data[pos]
                if b < 0x80:
                    hk_len = (b >> 1) ^ -(b & 1)
                    pos += 1
                else:
                    hk_len, pos = read_varint(data, pos, 5)
                if hk_len < 0:
                    raise CorruptBatchError(
                        f"header key length {hk_len} in record at offset delta {offset_delta}"
                    )
                raw = data[pos : pos + hk_len]
                pos += hk_len
                try:
                    hkey = raw.decode("utf-8")
                except UnicodeDecodeError:
                    hkey = raw.decode("utf-8", "backslashreplace")
                    bad_keys.append(base_offset + offset_delta)
                b = data[pos]
                if b < 0x80:
                    hv_len = (b >> 1) ^ -(b & 1)
                    pos += 1
                else:
                    hv_len, pos = read_varint(data, pos, 5)
                if hv_len < 0:
                    if hv_len != -1:
                        raise CorruptBatchError(
                            f"header value length {hv_len} in record at offset delta {offset_delta}"
                        )
                    hvalue = None
                else:
                    hvalue = data[pos : pos + hv_len]
                    pos += hv_len
                hs.append(_tuple_new(Header, (hkey, hvalue)))
            headers = tuple(hs)
        if pos != record_end:
            raise CorruptBatchError(
                f"record at offset delta {offset_delta} declares {length} bytes "
                f"but its fields use {pos - record_end + length}"
            )
        append(
            _tuple_new(
                Record,
                (
                    base_offset + offset_delta,
                    log_append_time if log_append_time is not None else base_timestamp + ts_delta,
                    key,
                    value,
                    headers,
                    None,
                ),
            )
        )
    if pos != end:
        raise CorruptBatchError(f"{end - pos} bytes remain after the last of {count} records")
    if near_edge:
        for r in out:
            if not (INT64_MIN <= r.offset <= INT64_MAX and INT64_MIN <= r.timestamp <= INT64_MAX):
                raise CorruptBatchError(
                    f"record offset {r.offset} or timestamp {r.timestamp} is out of int64"
                )
    return out


_CONTROL_KEY = struct.Struct(">hh")
_MARKER_VALUE = struct.Struct(">hi")


def read_record_columns(data, count: int, base_offset: int, base_timestamp: int,
                        log_append_time: int | None, sink) -> bool:
    """Append the ``count`` records filling ``data`` to ``sink`` (an
    ``arrow.RecordSink``): the columnar twin of :func:`read_records` for the
    Arrow tables, with no object per record and keys and values copied once.

    It takes the regular case only: where :func:`read_records` would raise or
    note something (a malformed record, offsets or timestamps near the ends of
    int64, a header key that is not UTF-8), it returns False, having added
    nothing, and the caller reads the batch with :func:`read_records`, which
    reports it.
    """
    end = len(data)
    if count < 0 or count * MIN_RECORD_SIZE > end or not (
        INT64_MIN + (1 << 31) <= base_offset <= INT64_MAX - (1 << 31)
        and INT64_MIN + 8192 <= base_timestamp <= INT64_MAX - 8192
    ):
        return False
    rows, headers = len(sink.offsets), len(sink.header_keys)
    try:
        if _record_columns(data, count, base_offset, base_timestamp, log_append_time, sink):
            return True
    except (CorruptBatchError, IndexError, ValueError):  # ValueError: a key not UTF-8
        pass
    sink.rollback(rows, headers)
    return False


def _record_columns(data, count, base_offset, base_timestamp, log_append_time, sink) -> bool:
    # the same steps as read_records (one-byte and two-byte varint fast paths),
    # writing columns; False (or an exception) where read_records must decide
    data = memoryview(data).cast("B")  # bytes or any buffer: indexing gives ints
    end = len(data)
    ts_lo = INT64_MIN - base_timestamp
    ts_hi = INT64_MAX - base_timestamp
    offsets, timestamps = sink.offsets, sink.timestamps
    # keys and values: written at [k, v] into writable memoryviews of k_cap and
    # v_cap bytes; the sizes reach the sink only when every record decoded
    keys, k, k_cap, key_ends, key_nulls = sink.keys, sink.keys_size, len(sink.keys), \
        sink.key_ends, sink.key_nulls
    values, v, v_cap, value_ends, value_nulls = sink.values, sink.values_size, \
        len(sink.values), sink.value_ends, sink.value_nulls
    header_counts, header_keys, header_values = \
        sink.header_counts, sink.header_keys, sink.header_values
    row = len(offsets)
    pos = 0
    for _ in range(count):
        b = data[pos]
        if b < 0x80:
            length = (b >> 1) ^ -(b & 1)
            pos += 1
        elif data[pos + 1] < 0x80:
            b = (b & 0x7F) | (data[pos + 1] << 7)
            length = (b >> 1) ^ -(b & 1)
            pos += 2
        else:
            length, pos = read_varint(data, pos, 5)
        record_end = pos + length
        if length < MIN_RECORD_SIZE - 1 or record_end > end:
            return False
        pos += 1  # record attributes: unused
        b = data[pos]
        if b < 0x80:
            ts_delta = (b >> 1) ^ -(b & 1)
            pos += 1
        elif data[pos + 1] < 0x80:
            b = (b & 0x7F) | (data[pos + 1] << 7)
            ts_delta = (b >> 1) ^ -(b & 1)
            pos += 2
        else:
            ts_delta, pos = read_varint(data, pos, 10)
            if not ts_lo <= ts_delta <= ts_hi:
                return False
        b = data[pos]
        if b < 0x80:
            offset_delta = (b >> 1) ^ -(b & 1)
            pos += 1
        elif data[pos + 1] < 0x80:
            b = (b & 0x7F) | (data[pos + 1] << 7)
            offset_delta = (b >> 1) ^ -(b & 1)
            pos += 2
        else:
            offset_delta, pos = read_varint(data, pos, 5)
        b = data[pos]
        if b < 0x80:
            n = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            n, pos = read_varint(data, pos, 5)
        if n < 0:
            if n != -1:
                return False
            key_nulls.append(row)
        elif n:
            if pos + n > end:
                return False
            if k + n > k_cap:
                keys = sink.grow("keys", k, k + n)
                k_cap = len(keys)
            keys[k:k + n] = data[pos:pos + n]
            k += n
            pos += n
        key_ends.append(k)
        b = data[pos]
        if b < 0x80:
            n = (b >> 1) ^ -(b & 1)
            pos += 1
        elif data[pos + 1] < 0x80:
            b = (b & 0x7F) | (data[pos + 1] << 7)
            n = (b >> 1) ^ -(b & 1)
            pos += 2
        else:
            n, pos = read_varint(data, pos, 5)
        if n < 0:
            if n != -1:
                return False
            value_nulls.append(row)
        elif n:
            if pos + n > end:
                return False
            if v + n > v_cap:
                values = sink.grow("values", v, v + n)
                v_cap = len(values)
            values[v:v + n] = data[pos:pos + n]
            v += n
            pos += n
        value_ends.append(v)
        b = data[pos]
        if b < 0x80:
            n = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            n, pos = read_varint(data, pos, 5)
        if n:
            if n < 0 or n * 2 > record_end - pos:
                return False
            for _ in range(n):
                b = data[pos]
                if b < 0x80:
                    hk_len = (b >> 1) ^ -(b & 1)
                    pos += 1
                else:
                    hk_len, pos = read_varint(data, pos, 5)
                if hk_len < 0 or pos + hk_len > end:
                    return False
                header_keys.append(str(data[pos:pos + hk_len], "utf-8"))  # strict: else False
                pos += hk_len
                b = data[pos]
                if b < 0x80:
                    hv_len = (b >> 1) ^ -(b & 1)
                    pos += 1
                else:
                    hv_len, pos = read_varint(data, pos, 5)
                if hv_len < 0:
                    if hv_len != -1:
                        return False
                    header_values.append(None)
                else:
                    if pos + hv_len > end:
                        return False
                    header_values.append(data[pos:pos + hv_len].tobytes())
                    pos += hv_len
        header_counts.append(n)
        if pos != record_end:
            return False
        offsets.append(base_offset + offset_delta)
        timestamps.append(log_append_time if log_append_time is not None
                          else base_timestamp + ts_delta)
        row += 1
    if pos != end:
        return False
    sink.keys_size, sink.values_size = k, v
    return True


def read_control(record: Record) -> Control:
    """Decode a control record's key (and a COMMIT/ABORT marker's value)."""
    key = record.key
    if key is None or len(key) < _CONTROL_KEY.size:
        raise CorruptBatchError(f"control record at offset {record.offset} has a key of {0 if key is None else len(key)} bytes")
    version, type_id = _CONTROL_KEY.unpack_from(key)
    coordinator_epoch = None
    if type_id in (0, 1):
        value = record.value
        if value is None or len(value) < _MARKER_VALUE.size:
            raise CorruptBatchError(
                f"{CONTROL_TYPES[type_id]} marker at offset {record.offset} has a value of "
                f"{0 if value is None else len(value)} bytes, needs {_MARKER_VALUE.size}"
            )
        _, coordinator_epoch = _MARKER_VALUE.unpack_from(value)
    return Control(type_id, CONTROL_TYPES.get(type_id, "UNKNOWN"), version, coordinator_epoch)


def timestamp_type(attributes: int) -> str:
    return LOG_APPEND_TIME if attributes & TIMESTAMP_TYPE_MASK else CREATE_TIME
