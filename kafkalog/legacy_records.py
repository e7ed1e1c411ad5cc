"""Magic 0 and 1: Kafka's legacy messages (``LegacyRecord``), pure Python.

Wire grammar of one log entry (big-endian)::

    offset int64 | size int32 | crc uint32 | magic int8 | attributes int8 |
    [timestamp int64, magic 1 only] | keyLength int32 | key | valueLength int32 | value

CRC coverage: ``crc`` is CRC-32 (IEEE, zlib's) over the bytes from ``magic``
to the end of the message; offset and size are outside it (the broker assigns
offsets after the producer computed the CRC).

Attributes: bits 0-2 codec (0 none, 1 gzip, 2 snappy, 3 lz4; zstd does not
exist before magic 2), bit 3 timestamp type (magic 1: 1 = LogAppendTime).
Magic 0 has no timestamp.

Compression wraps a whole inner message set into the *value* of one wrapper
message. The wrapper's offset is the offset of the *last* inner message. Inner
offsets are absolute in magic 0 and relative (0..n-1) in magic 1, where
``absolute = wrapper offset - last inner relative + inner relative``. A
LogAppendTime wrapper overrides the inner timestamps. Inner messages carry
their own CRCs; a compressed inner message, or a compressed wrapper with a
null value, is corruption.
"""

from __future__ import annotations

import struct
import zlib

from . import codecs
from .errors import CorruptBatchError, CorruptDataError
from .model import CREATE_TIME, LOG_APPEND_TIME, Limits, Record

#: offset, size, crc, magic, attributes: the part both magics share.
HEADER = struct.Struct(">qiIbb")
TIMESTAMP = struct.Struct(">q")
LENGTH = struct.Struct(">i")

OFFSET_OFFSET = 0
SIZE_OFFSET = OFFSET_OFFSET + 8
CRC_OFFSET = SIZE_OFFSET + 4
MAGIC_OFFSET = CRC_OFFSET + 4
ATTRIBUTES_OFFSET = MAGIC_OFFSET + 1
TIMESTAMP_OFFSET = ATTRIBUTES_OFFSET + 1
KEY_LENGTH_OFFSET = {0: TIMESTAMP_OFFSET, 1: TIMESTAMP_OFFSET + TIMESTAMP.size}

LOG_OVERHEAD = CRC_OFFSET
#: Smallest legal ``size`` per magic: crc, magic, attributes, [timestamp], two lengths.
MIN_SIZE = {m: KEY_LENGTH_OFFSET[m] + 2 * LENGTH.size - LOG_OVERHEAD for m in (0, 1)}

CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08


def read_message(buf, pos: int, end: int, verify_crc: bool):
    """One message at ``pos`` (its offset field) whose entry ends at ``end``.

    Returns ``(offset, crc, computed_crc, magic, attributes, timestamp, key, value)``.
    ``timestamp`` is ``None`` for magic 0.
    """
    offset, size, crc, magic, attributes = HEADER.unpack_from(buf, pos)
    if magic not in MIN_SIZE:
        raise CorruptBatchError(f"magic {magic} at position {pos} is not a legacy message", pos)
    if size < MIN_SIZE[magic] or pos + LOG_OVERHEAD + size != end:
        raise CorruptBatchError(
            f"message at {pos}: size {size} does not fit (magic {magic}, "
            f"minimum {MIN_SIZE[magic]}, {end - pos - LOG_OVERHEAD} bytes available)",
            pos,
        )
    computed = zlib.crc32(buf[pos + MAGIC_OFFSET : end]) if verify_crc else None
    if magic == 1:
        (timestamp,) = TIMESTAMP.unpack_from(buf, pos + TIMESTAMP_OFFSET)
    else:
        timestamp = None
    p = pos + KEY_LENGTH_OFFSET[magic]
    key, p = _read_bytes(buf, p, end, "key")
    value, p = _read_bytes(buf, p, end, "value")
    if p != end:
        raise CorruptBatchError(
            f"message at {pos}: {end - p} bytes remain after its value", pos
        )
    return offset, crc, computed, magic, attributes, timestamp, key, value


def _read_bytes(buf, p: int, end: int, what: str):
    if p + 4 > end:
        raise CorruptBatchError(f"{what} length at {p} runs past the message end {end}", p)
    (n,) = LENGTH.unpack_from(buf, p)
    p += 4
    if n == -1:
        return None, p
    if n < 0 or p + n > end:
        raise CorruptBatchError(f"{what} length {n} at {p - 4} runs past the message end {end}", p - 4)
    return bytes(buf[p : p + n]), p + n


def decode_inner(
    data: bytes,
    wrapper_magic: int,
    wrapper_offset: int,
    wrapper_timestamp: int | None,
    log_append: bool,
    verify_crc: bool,
) -> tuple[list[Record], list[int]]:
    """Inner messages of a decompressed wrapper value.

    Returns the records with absolute offsets and resolved timestamps, and the
    offsets of inner messages whose CRC did not verify.
    """
    inner = []
    pos = 0
    end = len(data)
    while pos < end:
        if end - pos < LOG_OVERHEAD:
            raise CorruptBatchError(f"{end - pos} stray bytes after the last inner message")
        (size,) = LENGTH.unpack_from(data, pos + SIZE_OFFSET)
        entry_end = pos + LOG_OVERHEAD + size
        if size < 0 or entry_end > end:
            raise CorruptBatchError(
                f"inner message at {pos} declares size {size}, {end - pos - LOG_OVERHEAD} bytes left"
            )
        msg = read_message(data, pos, entry_end, verify_crc)
        if msg[3] != wrapper_magic:
            raise CorruptBatchError(
                f"inner message magic {msg[3]} inside a magic {wrapper_magic} wrapper"
            )
        if msg[4] & CODEC_MASK:
            raise CorruptBatchError("compressed message inside a compressed wrapper")
        inner.append(msg)
        pos = entry_end
    if not inner:
        raise CorruptBatchError("compressed wrapper holds no messages")
    if wrapper_magic == 0:
        shift = 0  # inner offsets are absolute
    else:
        shift = wrapper_offset - inner[-1][0]
    records = []
    bad_crc = []
    for offset, crc, computed, _, _, timestamp, key, value in inner:
        if not -(1 << 63) <= offset + shift < 1 << 63:
            raise CorruptBatchError(
                f"inner offset {offset} + wrapper shift {shift} is out of int64"
            )
        if computed is not None and computed != crc:
            bad_crc.append(offset + shift)
        if log_append:
            timestamp = wrapper_timestamp
        records.append(Record(offset + shift, timestamp, key, value))
    return records, bad_crc


def decode_entry(buf, pos: int, end: int, verify_crc: bool, limits: Limits):
    """A top-level v0/v1 entry -> ``(fields, records, bad_inner_crc_offsets, error)``.

    ``fields`` is a dict of the Batch's header fields. When the records cannot
    be decoded (decompression failure, malformed inner set), ``records`` is
    ``None`` and ``error`` holds the :class:`CorruptDataError`; the header is
    still reported, with ``base_offset`` None for a compressed wrapper (its
    own offset is its last inner offset; the first is not known).
    """
    offset, crc, computed, magic, attributes, timestamp, key, value = read_message(
        buf, pos, end, verify_crc
    )
    codec = attributes & CODEC_MASK
    log_append = magic == 1 and bool(attributes & TIMESTAMP_TYPE_MASK)
    compressed = codec != codecs.NONE
    fields = dict(
        size=end - pos,
        magic=magic,
        # a wrapper's own offset is its *last* inner offset; the first is
        # known only once its value is decompressed (unknown until then: None)
        base_offset=None if compressed else offset,
        last_offset=offset,
        crc=crc,
        computed_crc=computed,
        attributes=attributes,
        compression=codecs.codec_name(codec, magic),
        timestamp_type=None if magic == 0 else (LOG_APPEND_TIME if log_append else CREATE_TIME),
        first_timestamp=timestamp,
        max_timestamp=timestamp,
        record_count=1,
    )
    if not compressed:
        return fields, [Record(offset, timestamp, key, value)], [], None
    try:
        if value is None:
            raise CorruptBatchError(f"compressed wrapper at {pos} has a null value", pos)
        data = codecs.decompress(codec, value, magic, limits.max_decompressed_size)
        records, bad_crc = decode_inner(data, magic, offset, timestamp, log_append, verify_crc)
    except CorruptDataError as err:  # decompression, limits, malformed inner set
        err.position = pos
        return fields, None, [], err
    fields.update(
        base_offset=records[0].offset,
        last_offset=records[-1].offset,
        first_timestamp=records[0].timestamp,
        record_count=len(records),
    )
    return fields, records, bad_crc, None
