"""Hand-built Kafka log bytes for the tests, independent of ``kafkalog``.

Everything here is written from Kafka's wire grammar (below)
with ``struct`` + ``crc32c`` + ``zlib`` (and the codec libraries for payloads),
so that a bug in kafkalog's own encoder or decoder cannot cancel itself out.
Nothing is imported from ``kafkalog``. kafka-python's builders, a second
independent encoder, are wrapped at the bottom.

    v2 batch:  baseOffset q | length i | leaderEpoch i | magic b | crc I |
               attributes h | lastOffsetDelta i | baseTimestamp q |
               maxTimestamp q | producerId q | producerEpoch h |
               baseSequence i | recordCount i | records
    v0/v1:     offset q | size i | crc I | magic b | attributes b |
               [timestamp q] | keyLength i | key | valueLength i | value

The real broker-written segments (``CORPUS``) are in the repository, under
``tests/data/real/``; where each comes from, and its sha256, is in the README.md there.
"""

from __future__ import annotations

import random
import struct
import zlib
from pathlib import Path

from crc32c import crc32c

#: the real broker-written segments (tests/data/real/README.md: where each comes from)
CORPUS_DIR = Path(__file__).resolve().parent / "data" / "real"
CORPUS = sorted(str(p) for p in CORPUS_DIR.rglob("*.log"))
#: the same files as paths, and their test ids (their paths under CORPUS_DIR)
CORPUS_FILES = [Path(p) for p in CORPUS]
CORPUS_IDS = [str(p.relative_to(CORPUS_DIR)) for p in CORPUS_FILES]

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4

_V2_HEAD = struct.Struct(">qiib")  # the part outside the CRC: offset, length, epoch, magic
_V2_CRC_PART = struct.Struct(">hiqqqhii")  # attributes .. recordCount (CRC-32C covered)
_OFFSET_SIZE = struct.Struct(">qi")

#: attribute bits of a v2 batch
LOG_APPEND_TIME = 0x08
TRANSACTIONAL = 0x10
CONTROL = 0x20
DELETE_HORIZON = 0x40


# ------------------------------------------------------------------ varints
def varint(value: int) -> bytes:
    """Zigzag + base-128, written from the spec (not kafkalog's encoder)."""
    z = 2 * value if value >= 0 else -2 * value - 1
    out = []
    while True:
        if z < 0x80:
            out.append(z)
            return bytes(out)
        out.append(0x80 | (z % 128))
        z //= 128


def _vbytes(b: bytes | None) -> bytes:
    return varint(-1) if b is None else varint(len(b)) + b


# --------------------------------------------------------------------- v2
def record(
    offset_delta: int = 0,
    timestamp_delta: int = 0,
    key: bytes | None = b"k",
    value: bytes | None = b"v",
    headers=(),
) -> bytes:
    """One v2 record, its length varint included. Header keys: str or bytes."""
    body = [b"\x00", varint(timestamp_delta), varint(offset_delta), _vbytes(key), _vbytes(value),
            varint(len(headers))]
    for hkey, hvalue in headers:
        hkey = hkey.encode() if isinstance(hkey, str) else hkey
        body.append(_vbytes(hkey))
        body.append(_vbytes(hvalue))
    body = b"".join(body)
    return varint(len(body)) + body


def control_record(type_id: int, offset_delta: int = 0, coordinator_epoch: int | None = 0,
                   version: int = 0, value: bytes | None = None) -> bytes:
    """A control record: key = int16 version, int16 type; markers' value = int16, int32."""
    if value is None and coordinator_epoch is not None:
        value = struct.pack(">hi", 0, coordinator_epoch)
    return record(offset_delta, 0, struct.pack(">hh", version, type_id), value)


def batch_v2(
    records=(),
    *,
    base_offset: int = 0,
    count: int | None = None,
    last_offset_delta: int | None = None,
    attributes: int = 0,
    base_timestamp: int = 1_700_000_000_000,
    max_timestamp: int | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    leader_epoch: int = 0,
    compress=None,
    payload: bytes | None = None,
    crc: int | None = None,
) -> bytes:
    """A v2 record batch. ``records`` are :func:`record` bytes; ``compress``
    (bytes -> bytes) compresses them (set the codec bits in ``attributes``);
    ``payload`` overrides the records part entirely; ``crc`` forces a CRC."""
    records = list(records)
    if count is None:
        count = len(records)
    if last_offset_delta is None:
        last_offset_delta = max(count - 1, 0)
    if max_timestamp is None:
        max_timestamp = base_timestamp
    if payload is None:
        payload = b"".join(records)
        if compress is not None:
            payload = compress(payload)
    covered = _V2_CRC_PART.pack(attributes, last_offset_delta, base_timestamp, max_timestamp,
                                producer_id, producer_epoch, base_sequence, count) + payload
    if crc is None:
        crc = crc32c(covered)
    length = 4 + 1 + 4 + len(covered)  # leader epoch, magic, crc, then the covered part
    return _V2_HEAD.pack(base_offset, length, leader_epoch, 2) + struct.pack(">I", crc) + covered


# ------------------------------------------------------------------ v0/v1
def _i32bytes(b: bytes | None) -> bytes:
    return struct.pack(">i", -1) if b is None else struct.pack(">i", len(b)) + b


def message(
    offset: int,
    value: bytes | None = b"v",
    key: bytes | None = None,
    *,
    magic: int = 1,
    attributes: int = 0,
    timestamp: int = 1_500_000_000_000,
    crc: int | None = None,
) -> bytes:
    """One v0/v1 message (a log entry), CRC-32 over magic..end."""
    body = struct.pack(">bb", magic, attributes)
    if magic == 1:
        body += struct.pack(">q", timestamp)
    body += _i32bytes(key) + _i32bytes(value)
    if crc is None:
        crc = zlib.crc32(body)
    return struct.pack(">qiI", offset, 4 + len(body), crc) + body


def wrapper(
    magic: int,
    codec: int,
    compress,
    inner: list[bytes],
    offset: int,
    *,
    timestamp: int = 1_500_000_000_000,
    log_append_time: bool = False,
) -> bytes:
    """A compressed v0/v1 wrapper message whose value is ``compress(inner set)``."""
    attributes = codec | (0x08 if log_append_time else 0)
    return message(offset, compress(b"".join(inner)), None, magic=magic,
                   attributes=attributes, timestamp=timestamp)


# ------------------------------------------------------------------ codecs
def gzip(data: bytes) -> bytes:
    c = zlib.compressobj(6, zlib.DEFLATED, 31)
    return c.compress(data) + c.flush()


def lz4(data: bytes) -> bytes:
    import lz4.frame

    return lz4.frame.compress(data, store_size=False)


def zstd(data: bytes) -> bytes:
    import zstandard

    return zstandard.ZstdCompressor(level=3).compress(data)


def zstd_unsized_frames(data: bytes, parts: int = 2) -> bytes:
    """Several concatenated zstd frames, none with a content size (streamed)."""
    import zstandard

    out = []
    step = max(1, -(-len(data) // parts))
    for i in range(0, len(data), step):
        c = zstandard.ZstdCompressor(level=3, write_content_size=False)
        obj = c.compressobj()
        out.append(obj.compress(data[i : i + step]) + obj.flush())
    return b"".join(out)


def snappy_raw(data: bytes) -> bytes:
    import snappy  # python-snappy: not the library kafkalog uses

    return snappy.compress(data)


def snappy_xerial(data: bytes, block: int = 32 * 1024, version_le: bool = False) -> bytes:
    """Xerial framing: 0x82 SNAPPY 0x00, int32 version, int32 compat, blocks."""
    fmt = "<ii" if version_le else ">ii"
    out = [b"\x82SNAPPY\x00", struct.pack(fmt, 1, 1)]
    for i in range(0, len(data), block):
        b = snappy_raw(data[i : i + block])
        out.append(struct.pack(">i", len(b)) + b)
    return b"".join(out)


COMPRESSORS = {GZIP: gzip, SNAPPY: snappy_xerial, LZ4: lz4, ZSTD: zstd}


def _xxh32_short(data: bytes, seed: int = 0) -> int:
    """XXH32 of fewer than 16 bytes (all an lz4 frame descriptor needs)."""
    p1, p3, p4, p5, p2 = 2654435761, 3266489917, 668265263, 374761393, 2246822519
    m = 0xFFFFFFFF
    rotl = lambda x, r: ((x << r) | (x >> (32 - r))) & m  # noqa: E731
    assert len(data) < 16
    h = (seed + p5 + len(data)) & m
    i = 0
    while i + 4 <= len(data):
        h = (rotl((h + int.from_bytes(data[i : i + 4], "little") * p3) & m, 17) * p4) & m
        i += 4
    for byte in data[i:]:
        h = (rotl((h + byte * p5) & m, 11) * p1) & m
    h ^= h >> 15
    h = (h * p2) & m
    h ^= h >> 13
    h = (h * p3) & m
    h ^= h >> 16
    return h


def lz4_frame_header_checksum(frame: bytes, *, kafka_v0_bug: bool) -> tuple[int, int]:
    """``(checksum byte, its index)``: right (over FLG..) or Kafka 0.8's (over the magic too)."""
    end = 6 + (8 if frame[4] & 0x08 else 0) + (4 if frame[4] & 0x01 else 0)
    start = 0 if kafka_v0_bug else 4
    return (_xxh32_short(frame[start:end]) >> 8) & 0xFF, end


def lz4_kafka_v0(data: bytes) -> bytes:
    """An lz4 frame with the header checksum Kafka 0.8-0.9 wrote (magic included)."""
    frame = lz4(data)
    right, at = lz4_frame_header_checksum(frame, kafka_v0_bug=False)
    assert frame[at] == right, "own xxh32 disagrees with the lz4 library"
    wrong, at = lz4_frame_header_checksum(frame, kafka_v0_bug=True)
    assert wrong != right
    return frame[:at] + bytes((wrong,)) + frame[at + 1 :]


# ------------------------------------------------------------ kafka-python
def kp_v2(codec: int, values, *, base_offset: int = 0, timestamp: int = 1_700_000_000_000,
          keys=None, producer=(-1, -1, -1), transactional: bool = False,
          leader_epoch: int = 0) -> bytes:
    """A v2 batch from kafka-python's DefaultRecordBatchBuilder (an independent encoder).

    The builder writes base offset 0 and leader epoch 0; both lie outside the
    CRC, so they are patched in here as a broker would.
    """
    from kafka.record.default_records import DefaultRecordBatchBuilder

    pid, epoch, seq = producer
    b = DefaultRecordBatchBuilder(2, codec, transactional, pid, epoch, seq, 1 << 30)
    for i, v in enumerate(values):
        key = None if keys is None else keys[i]
        assert b.append(i, timestamp + i, key, v, []) is not None
    out = bytearray(b.build())
    assert out[22] & 0x07 == codec, "kafka-python fell back to no compression: use compressible values"
    struct.pack_into(">q", out, 0, base_offset)
    struct.pack_into(">i", out, 12, leader_epoch)
    return bytes(out)


def kp_legacy(magic: int, codec: int, values, *, offset: int = 0,
              timestamp: int = 1_500_000_000_000) -> bytes:
    """v0/v1 from kafka-python's LegacyRecordBatchBuilder (an independent encoder).

    Uncompressed: one entry per value at offsets ``offset..``. Compressed: one
    wrapper whose inner offsets are 0..n-1 as the builder writes them; its own
    offset is patched (outside the CRC) to the last inner offset, as a broker
    assigns it: ``offset + n - 1``. In magic 1 inner offsets are relative, so
    any ``offset`` works; in magic 0 they are absolute, so ``offset`` must be 0.
    (The builder's magic-0 lz4 needs the xxhash package: not used here.)
    """
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    assert not (codec and magic == 0 and offset != 0)
    b = LegacyRecordBatchBuilder(magic, codec, 1 << 30)
    for i, v in enumerate(values):
        assert b.append(i if codec else offset + i, timestamp + i, None, v) is not None
    out = bytearray(b.build())
    if codec:
        struct.pack_into(">q", out, 0, offset + len(values) - 1)
    return bytes(out)


# ------------------------------------------------------------------ framing
def entries(data: bytes) -> list[tuple[int, int]]:
    """``(start, end)`` of each entry of a well-formed segment (own framing)."""
    out = []
    pos = 0
    while pos + 12 <= len(data):
        _, size = _OFFSET_SIZE.unpack_from(data, pos)
        end = pos + 12 + size
        assert end <= len(data)
        out.append((pos, end))
        pos = end
    assert pos == len(data)
    return out


def read_corpus(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def flip_bit(value: bytes, rng: random.Random) -> bytes:
    """``value`` with one bit flipped, at a place ``rng`` picks (a damaged copy)."""
    b = bytearray(value)
    b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
    return bytes(b)
