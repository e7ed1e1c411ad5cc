"""The chunk index of a remote segment: which stored bytes give back which original bytes.

The plugin cuts a segment's ``.log`` into chunks of ``originalChunkSize`` bytes (the last one
may be shorter), transforms each chunk on its own (zstd, then AES-GCM: :mod:`.reader`) and
stores the results back to back in the ``.log`` object. Chunk ``i`` holds the original bytes
``[i * originalChunkSize, min((i + 1) * originalChunkSize, originalFileSize))``; where it is
stored is what the manifest's ``chunkIndex`` says, in one of two forms (the plugin's
``FixedSizeChunkIndex`` and ``VariableSizeChunkIndex``)::

    {"type": "fixed", "originalChunkSize", "originalFileSize",
     "transformedChunkSize", "finalTransformedChunkSize"}
        every stored chunk but the last has the same size: the original size when nothing is
        done to it, plus 28 when it is only encrypted (12-byte IV before, 16-byte tag after)
    {"type": "variable", "originalChunkSize", "originalFileSize", "transformedChunks"}
        compressed chunks: each stored size is listed. ``transformedChunks`` is base64 of one
        zstd frame (content size set, at most 10 MiB) holding the plugin's
        ``ChunkSizesBinaryCodec`` encoding, big-endian:

            count int32 | base int32 | bytesPerValue int8 |
            (count - 1) values, bytesPerValue bytes each, the value minus base |
            last value int32
            count 0: only the count; count 1: the count and the last value

So any byte range of the original segment maps to a run of chunks, and only those are read.
The plugin keeps sizes in Java ints: a segment is smaller than 2 GiB.
"""

from __future__ import annotations

import base64
import binascii
import struct
from dataclasses import dataclass
from typing import NamedTuple

from ..codecs import require_module
from ..errors import ManifestError

FIXED = "fixed"
VARIABLE = "variable"

#: Largest encoded ``transformedChunks`` list the plugin writes or reads
#: (TransformedChunksDeserializer.MAX_DECOMPRESSED_SIZE).
MAX_ENCODED_SIZES = 10 * 1024 * 1024
INT32_MAX = (1 << 31) - 1

_COUNT = struct.Struct(">i")
_HEAD = struct.Struct(">iib")  # count, base, bytes per value (two or more values)
_LAST = struct.Struct(">i")


class Chunk(NamedTuple):
    """Chunk ``id``: original bytes ``[original_position, + original_size)`` are stored at
    ``[stored_position, + stored_size)`` of the ``.log`` object."""

    id: int
    original_position: int
    original_size: int
    stored_position: int
    stored_size: int


@dataclass(frozen=True, slots=True)
class ChunkIndex:
    kind: str  # FIXED or VARIABLE
    original_chunk_size: int
    original_file_size: int
    #: stored size of every chunk but the last (fixed), and of the last one
    fixed_size: int
    final_size: int
    #: variable: where each chunk starts in the object, and where the last one ends
    starts: tuple[int, ...] = ()

    @property
    def count(self) -> int:
        return -(-self.original_file_size // self.original_chunk_size)

    @property
    def stored_size(self) -> int:
        """The size the ``.log`` object must have."""
        n = self.count
        if n == 0:
            return 0
        if self.kind == VARIABLE:
            return self.starts[-1]
        return (n - 1) * self.fixed_size + self.final_size

    def chunk(self, i: int) -> Chunk:
        n = self.count
        if not 0 <= i < n:
            raise IndexError(f"chunk {i} of {n}")
        original = i * self.original_chunk_size
        original_size = min(self.original_chunk_size, self.original_file_size - original)
        if self.kind == VARIABLE:
            stored, stored_end = self.starts[i], self.starts[i + 1]
            return Chunk(i, original, original_size, stored, stored_end - stored)
        size = self.final_size if i == n - 1 else self.fixed_size
        return Chunk(i, original, original_size, i * self.fixed_size, size)

    def chunks_for_range(self, start: int, end: int) -> list[Chunk]:
        """The chunks holding original bytes ``[start, end)`` (none for an empty range)."""
        if not 0 <= start <= end <= self.original_file_size:
            raise ValueError(f"byte range {start}..{end} is outside the segment's "
                             f"{self.original_file_size} bytes")
        if start == end:
            return []
        size = self.original_chunk_size
        return [self.chunk(i) for i in range(start // size, (end - 1) // size + 1)]


def _int(obj: dict, name: str, where: str, low: int = 0) -> int:
    value = obj.get(name)
    if type(value) is not int or not low <= value <= INT32_MAX:
        raise ManifestError(f"{where}: chunkIndex.{name} is {value!r}, not an int32 "
                            f">= {low}")
    return value


def chunk_index_from_json(obj, where: str) -> ChunkIndex:
    """The manifest's ``chunkIndex`` object, checked: :class:`ManifestError` naming
    ``where`` (the manifest) and the field when it is not one the plugin writes."""
    if not isinstance(obj, dict):
        raise ManifestError(f"{where}: chunkIndex is {type(obj).__name__}, not an object")
    kind = obj.get("type")
    fields = {FIXED: {"type", "originalChunkSize", "originalFileSize", "transformedChunkSize",
                      "finalTransformedChunkSize"},
              VARIABLE: {"type", "originalChunkSize", "originalFileSize", "transformedChunks"}}
    if kind not in fields:
        raise ManifestError(f"{where}: chunkIndex.type is {kind!r}, not 'fixed' or 'variable'")
    if set(obj) != fields[kind]:
        missing, extra = fields[kind] - set(obj), set(obj) - fields[kind]
        raise ManifestError(f"{where}: a {kind} chunkIndex "
                            + (f"lacks {', '.join(sorted(missing))}" if missing else
                               f"has unknown fields {', '.join(sorted(extra))}"))
    chunk_size = _int(obj, "originalChunkSize", where, low=1)
    file_size = _int(obj, "originalFileSize", where)
    count = -(-file_size // chunk_size)
    if kind == FIXED:
        fixed = _int(obj, "transformedChunkSize", where)
        final = _int(obj, "finalTransformedChunkSize", where)
        return ChunkIndex(FIXED, chunk_size, file_size, fixed, final)
    sizes = decode_transformed_chunks(obj["transformedChunks"], where)
    if len(sizes) != count:
        raise ManifestError(f"{where}: chunkIndex.transformedChunks lists {len(sizes)} chunks; "
                            f"{file_size} bytes in chunks of {chunk_size} make {count}")
    starts = [0]
    for s in sizes:
        starts.append(starts[-1] + s)
    return ChunkIndex(VARIABLE, chunk_size, file_size, 0, sizes[-1] if sizes else 0,
                      tuple(starts))


def decode_transformed_chunks(text, where: str) -> list[int]:
    """``transformedChunks``: base64 -> one zstd frame -> ChunkSizesBinaryCodec."""
    what = f"{where}: chunkIndex.transformedChunks"
    if not isinstance(text, str):
        raise ManifestError(f"{what} is {type(text).__name__}, not a base64 string")
    try:
        compressed = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as err:
        raise ManifestError(f"{what} is not base64: {err}") from err
    zstandard = require_module("zstandard", "zstandard")
    try:
        size = zstandard.frame_content_size(compressed)
    except zstandard.ZstdError as err:
        raise ManifestError(f"{what} is not a zstd frame: {err}") from err
    if not 0 <= size <= MAX_ENCODED_SIZES:  # -1: the frame does not say (the plugin's does)
        raise ManifestError(f"{what}: zstd frame content size {size} (the plugin writes "
                            f"0..{MAX_ENCODED_SIZES} and says it)")
    try:
        encoded = zstandard.ZstdDecompressor().decompress(
            compressed, max_output_size=max(size, 1), allow_extra_data=False)
    except zstandard.ZstdError as err:
        raise ManifestError(f"{what}: zstd: {err}") from err
    if len(encoded) != size:
        raise ManifestError(f"{what}: the zstd frame gives {len(encoded)} of its {size} bytes")
    try:
        return decode_chunk_sizes(encoded)
    except ValueError as err:
        raise ManifestError(f"{what}: {err}") from err


def decode_chunk_sizes(data: bytes) -> list[int]:
    """The plugin's ChunkSizesBinaryCodec (layout above); ValueError says what is wrong."""
    n = len(data)
    if n < _COUNT.size:
        raise ValueError(f"{n} bytes, too few for the count")
    (count,) = _COUNT.unpack_from(data)
    if count < 0:
        raise ValueError(f"negative count {count}")
    if count == 0:
        used, values = _COUNT.size, []
    elif count == 1:
        used = _COUNT.size + _LAST.size
        if n < used:
            raise ValueError(f"one value declared, {n} bytes hold none")
        values = [_LAST.unpack_from(data, _COUNT.size)[0]]
    else:
        if n < _HEAD.size:
            raise ValueError(f"{count} values declared, {n} bytes hold no header")
        _, base, width = _HEAD.unpack_from(data)
        if not 0 <= width <= 4:
            raise ValueError(f"{width} bytes per value (0-4)")
        used = _HEAD.size + (count - 1) * width + _LAST.size
        if n < used:
            raise ValueError(f"{count} values of {width} bytes need {used} bytes, have {n}")
        pos = _HEAD.size
        values = []
        for _ in range(count - 1):
            values.append(base + int.from_bytes(data[pos:pos + width], "big"))
            pos += width
        values.append(_LAST.unpack_from(data, pos)[0])
    if used != n:
        raise ValueError(f"{n - used} bytes left over after {count} values")
    if any(not 0 <= v <= INT32_MAX for v in values):
        raise ValueError(f"a chunk size outside 0..{INT32_MAX}: {min(values)}..{max(values)}")
    return values


def encode_chunk_sizes(values: list[int]) -> bytes:
    """The twin of :func:`decode_chunk_sizes` (the same layout), for :mod:`.writer`."""
    if len(values) < 2:
        return _COUNT.pack(len(values)) + b"".join(_LAST.pack(v) for v in values)
    body = values[:-1]
    base = min(body)
    width = max((v - base).bit_length() + 7 >> 3 for v in body) or 1
    return (_HEAD.pack(len(values), base, width)
            + b"".join((v - base).to_bytes(width, "big") for v in body) + _LAST.pack(values[-1]))
