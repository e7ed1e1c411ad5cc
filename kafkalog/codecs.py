"""Compression codecs, and every Kafka codec quirk, in one place.

Only the records (v2) or the wrapper value (v0/v1) are compressed, never a
header. ``DECOMPRESSORS`` maps the codec id of the attributes' low three bits
to a function ``(payload, magic, limit) -> bytes``; ``COMPRESSORS`` is its
writer-side twin. Every decompressor is bounded: it never produces more than
``limit`` bytes and raises :class:`LimitExceededError` past it, so a hostile
"zip bomb" batch cannot allocate gigabytes.

Quirks handled here and nowhere else:

* snappy: the Java client writes *xerial* framing (``0x82 SNAPPY 0x00``, int32
  version, int32 compat, then blocks of ``int32 length + raw snappy``); other
  clients write raw snappy. Both are accepted; version/compat are not
  validated (some writers store them little-endian).
* lz4: LZ4 frame format. Kafka's magic-0 writer computed the frame header
  checksum over the frame magic too; for magic 0 that byte is repaired before
  decoding (and written the broken way by the writer, as a broker did).
* zstd: several frames, and frames without a content size: read as a stream.
* gzip: several concatenated members are read, as Java's GZIPInputStream does.
"""

from __future__ import annotations

import functools
import importlib
import struct
import threading
import zlib
from typing import Callable

from .errors import (
    CodecUnavailableError,
    DecompressionError,
    LimitExceededError,
    UnknownCodecError,
)
from .model import CODEC_NAMES

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
CODEC_IDS = {name: codec_id for codec_id, name in CODEC_NAMES.items()}

_CHUNK = 1 << 20  # decompress in steps of at most this many output bytes


def _step(payload) -> int:
    """Output bytes to ask a decompressor for at a time.

    Every step allocates a buffer of this size, so it follows the payload
    (a typical batch inflates a few times over): a fixed megabyte per step
    would take fresh pages from the OS, and page faults, for every batch.
    """
    return min(_CHUNK, max(64 * 1024, 8 * len(payload)))



#: Codec ids each magic may use: zstd arrived with v2 (Kafka 2.1).
CODECS_BY_MAGIC = {
    0: (NONE, GZIP, SNAPPY, LZ4),
    1: (NONE, GZIP, SNAPPY, LZ4),
    2: (NONE, GZIP, SNAPPY, LZ4, ZSTD),
}


def codec_name(codec_id: int, magic: int = 2) -> str:
    """``"gzip"``, ...; ``"unknown(N)"`` for ids that do not exist for ``magic``."""
    if codec_id in CODECS_BY_MAGIC[magic]:
        return CODEC_NAMES[codec_id]
    return f"unknown({codec_id})"


@functools.cache
def require_module(module: str, package: str):
    """Import a codec library once (a failed import is retried next time); a missing one
    is a :class:`CodecUnavailableError` naming the package to install."""
    try:
        return importlib.import_module(module)
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise CodecUnavailableError(
            f"the {module!r} module is needed for this codec: pip install {package}"
        ) from err


def _too_big(limit: int) -> LimitExceededError:
    return LimitExceededError(f"decompressed payload exceeds the limit of {limit} bytes")


# --------------------------------------------------------------------- gzip
def _gunzip(payload, magic: int, limit: int) -> bytes:
    step = _step(payload)
    out: list[bytes] = []
    size = 0
    data = bytes(payload)
    try:
        while data:
            d = zlib.decompressobj(wbits=31)
            while not d.eof:
                chunk = d.decompress(data, min(step, limit - size + 1))
                data = d.unconsumed_tail
                if not chunk and not data:
                    break  # no input left and no progress: cut short
                size += len(chunk)
                out.append(chunk)
                if size > limit:
                    raise _too_big(limit)
            if not d.eof:
                raise DecompressionError("gzip stream ends before its end marker")
            data = d.unused_data
            if data and data[:2] != b"\x1f\x8b":
                break  # trailing garbage after the last member: ignored, as Java does
    except zlib.error as err:
        raise DecompressionError(f"gzip: {err}") from err
    return b"".join(out)


def _gzip(data: bytes, magic: int) -> bytes:
    import gzip

    return gzip.compress(data, compresslevel=6, mtime=0)


# ------------------------------------------------------------------- snappy
XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = 16  # magic (8) + version int32 + compat int32


def _raw_snappy_length(payload) -> int:
    """The uncompressed length a raw snappy block declares (leading varint)."""
    result = shift = 0
    for i in range(min(5, len(payload))):
        b = payload[i]
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result
        shift += 7
    raise DecompressionError("snappy: bad uncompressed-length preamble")


def _unsnappy_block(block, limit: int) -> bytes:
    snappy = require_module("cramjam", "cramjam").snappy
    if _raw_snappy_length(block) > limit:
        raise _too_big(limit)
    try:
        return bytes(snappy.decompress_raw(bytes(block)))
    except Exception as err:  # cramjam raises its own DecompressionError type
        raise DecompressionError(f"snappy: {err}") from err


def _unsnappy(payload, magic: int, limit: int) -> bytes:
    payload = memoryview(payload)
    if bytes(payload[:8]) != XERIAL_MAGIC:
        return _unsnappy_block(payload, limit)
    out: list[bytes] = []
    size = 0
    pos = _XERIAL_HEADER
    end = len(payload)
    while pos < end:
        if pos + 4 > end:
            raise DecompressionError("snappy: xerial block length cut short")
        (n,) = struct.unpack_from(">i", payload, pos)
        pos += 4
        if n < 0 or pos + n > end:
            raise DecompressionError(
                f"snappy: xerial block of {n} bytes at {pos - 4} runs past the payload ({end})"
            )
        block = _unsnappy_block(payload[pos : pos + n], limit - size)
        size += len(block)
        out.append(block)
        pos += n
    return b"".join(out)


def _snappy(data: bytes, magic: int) -> bytes:
    """Xerial framing, as the Java client writes it (32 KiB blocks)."""
    snappy = require_module("cramjam", "cramjam").snappy
    parts = [XERIAL_MAGIC, struct.pack(">ii", 1, 1)]
    for i in range(0, max(len(data), 1), 32 * 1024):
        block = bytes(snappy.compress_raw(data[i : i + 32 * 1024]))
        parts.append(struct.pack(">i", len(block)))
        parts.append(block)
    return b"".join(parts)


# ---------------------------------------------------------------------- lz4
_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32(data: bytes, seed: int = 0) -> int:
    """XXH32; used only on lz4 frame descriptors (a few bytes)."""
    n = len(data)
    pos = 0
    if n >= 16:
        v = [(seed + _P1 + _P2) & _M32, (seed + _P2) & _M32, seed, (seed - _P1) & _M32]
        while pos + 16 <= n:
            for i in range(4):
                (lane,) = struct.unpack_from("<I", data, pos)
                v[i] = (_rotl((v[i] + lane * _P2) & _M32, 13) * _P1) & _M32
                pos += 4
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _M32
    else:
        h = (seed + _P5) & _M32
    h = (h + n) & _M32
    while pos + 4 <= n:
        (lane,) = struct.unpack_from("<I", data, pos)
        h = (_rotl((h + lane * _P3) & _M32, 17) * _P4) & _M32
        pos += 4
    while pos < n:
        h = (_rotl((h + data[pos] * _P5) & _M32, 11) * _P1) & _M32
        pos += 1
    h ^= h >> 15
    h = (h * _P2) & _M32
    h ^= h >> 13
    h = (h * _P3) & _M32
    h ^= h >> 16
    return h


def _lz4_descriptor_end(frame: bytes) -> int:
    """Index of the header-checksum byte: after magic, FLG, BD and options."""
    flg = frame[4]
    return 6 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)


def fix_kafka_v0_lz4_header(frame: bytes) -> bytes:
    """Repair the header checksum byte a magic-0 Kafka writer got wrong.

    Kafka 0.8-0.9 hashed the frame magic together with the descriptor. A frame
    whose checksum is already right (e.g. written by librdkafka) is returned
    unchanged.
    """
    if len(frame) < 7 or frame[:4] != _LZ4_MAGIC:
        return frame
    hc_at = _lz4_descriptor_end(frame)
    if len(frame) <= hc_at:
        return frame
    right = (xxh32(frame[4:hc_at]) >> 8) & 0xFF
    if frame[hc_at] == right:
        return frame
    return frame[:hc_at] + bytes((right,)) + frame[hc_at + 1 :]


def break_kafka_v0_lz4_header(frame: bytes) -> bytes:
    """Write the header checksum as Kafka's magic-0 writer did (for the writer)."""
    hc_at = _lz4_descriptor_end(frame)
    wrong = (xxh32(frame[:hc_at]) >> 8) & 0xFF
    return frame[:hc_at] + bytes((wrong,)) + frame[hc_at + 1 :]


#: An LZ4 block inflates at most ~255 times (a match grows by 255 bytes per
#: length byte): payloads up to limit / 256 cannot inflate past the limit.
_LZ4_MAX_RATIO = 256


def _unlz4(payload, magic: int, limit: int) -> bytes:
    frame = require_module("lz4.frame", "lz4")
    if magic != 0 and len(payload) * _LZ4_MAX_RATIO + (1 << 16) <= limit:
        # one call (a batch holds one frame); anything else is left to the loop
        try:
            out, read = frame.decompress(payload, return_bytes_read=True)
        except RuntimeError:
            pass  # the loop below says what is wrong
        else:
            if read == len(payload):
                return out
    step = _step(payload)
    data = bytes(payload)
    if magic == 0:
        data = fix_kafka_v0_lz4_header(data)
    out: list[bytes] = []
    size = 0
    try:
        while data:
            d = frame.LZ4FrameDecompressor()
            chunk = d.decompress(data, max_length=min(step, limit - size + 1))
            while True:
                size += len(chunk)
                out.append(chunk)
                if size > limit:
                    raise _too_big(limit)
                if d.eof or d.needs_input:
                    break
                chunk = d.decompress(b"", max_length=min(step, limit - size + 1))
            if not d.eof:
                raise DecompressionError("lz4: frame ends before its end mark")
            data = d.unused_data
    except RuntimeError as err:  # lz4.frame reports corrupt frames as RuntimeError
        raise DecompressionError(f"lz4: {err}") from err
    return b"".join(out)


def _lz4(data: bytes, magic: int) -> bytes:
    frame = require_module("lz4.frame", "lz4")
    if magic == 0:
        # Old brokers did not accept the content-size field.
        out = frame.compress(data, store_size=False, block_linked=False)
        return break_kafka_v0_lz4_header(out)
    return frame.compress(data, store_size=False, block_linked=False)


# --------------------------------------------------------------------- zstd
def _unzstd(payload, magic: int, limit: int) -> bytes:
    step = _step(payload)
    zstandard = require_module("zstandard", "zstandard")
    data = bytes(payload)
    out: list[bytes] = []
    size = 0
    try:
        reader = zstd_decompressor().stream_reader(data, read_across_frames=True)
        with reader:
            while True:
                chunk = reader.read(min(step, limit - size + 1))
                if not chunk:
                    break
                size += len(chunk)
                out.append(chunk)
                if size > limit:
                    raise _too_big(limit)
    except zstandard.ZstdError as err:
        raise DecompressionError(f"zstd: {err}") from err
    return b"".join(out)


_local = threading.local()


def zstd_decompressor():
    """This thread's ZstdDecompressor: making one costs more than a small batch."""
    dctx = getattr(_local, "zstd", None)
    if dctx is None:
        dctx = _local.zstd = require_module("zstandard", "zstandard").ZstdDecompressor()
    return dctx


def _zstd(data: bytes, magic: int) -> bytes:
    zstandard = require_module("zstandard", "zstandard")
    return zstandard.ZstdCompressor(level=3).compress(data)


DECOMPRESSORS: dict[int, Callable[..., bytes]] = {
    GZIP: _gunzip,
    SNAPPY: _unsnappy,
    LZ4: _unlz4,
    ZSTD: _unzstd,
}

COMPRESSORS: dict[int, Callable[[bytes, int], bytes]] = {
    GZIP: _gzip,
    SNAPPY: _snappy,
    LZ4: _lz4,
    ZSTD: _zstd,
}



def decompress(codec_id: int, payload, magic: int, limit: int) -> bytes:
    """Decompress a batch payload; bounded by ``limit`` output bytes."""
    if codec_id not in CODECS_BY_MAGIC[magic] or codec_id == NONE:
        raise UnknownCodecError(f"codec id {codec_id} does not exist for magic {magic}")
    return DECOMPRESSORS[codec_id](payload, magic, limit)


def compress(codec_id: int, data: bytes, magic: int = 2) -> bytes:
    if codec_id not in CODECS_BY_MAGIC[magic] or codec_id == NONE:
        raise UnknownCodecError(f"codec id {codec_id} does not exist for magic {magic}")
    return COMPRESSORS[codec_id](data, magic)
