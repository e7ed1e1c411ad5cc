"""A remote segment read back through its manifest: any byte range of the original ``.log``
from only the chunks that hold it, and the index files from ``.indexes``.

Each stored chunk is undone the way the plugin's DefaultChunkManager does it, in the reverse
of the order it was made:

1. read the chunk's stored bytes (one ranged read; fewer bytes than the chunk index says is a
   *short chunk*);
2. if the manifest has ``encryption``: AES-GCM with the unwrapped data key (:mod:`.crypto`);
3. if ``compression``: one zstd frame whose content size is the chunk's original size;
4. the result must be exactly the chunk's original size.

Any failure is a :class:`~kafkalog.errors.ChunkError` naming the object, the chunk and its
positions, before any byte of that chunk is handed out. One chunk is in memory at a time.

What the layers can and cannot see: AES-GCM's tag catches any change to an encrypted chunk.
Without encryption there is no checksum at this level: zstd catches most damage to a
compressed chunk but not all (the plugin writes frames without zstd's checksum), and a plain
chunk is returned as stored. The record batches' own CRCs (``kafkalog.decode``) are then the
check, as for any segment.

A Spark task that decodes bytes ``[start, end)`` of a remote segment::

    seg = RemoteSegment.open(manifest_uri, key_ring=ring)      # or with the job's own store
    data = seg.read(start, end)                                # only the chunks needed
    tables = kafkalog.decode(kafkalog.Slice(data, start))      # positions stay absolute

(``read_into`` fills a buffer the task reuses from range to range instead.)
"""

from __future__ import annotations

import os
import threading
from typing import BinaryIO, Iterator

from ..codecs import require_module, zstd_decompressor
from ..errors import ChunkError, KeyRingError, ManifestError, SourceError
from .chunks import Chunk
from .crypto import ChunkCipher, KeyRing
from .layout import INDEXES, LOG, MANIFEST, sibling
from .manifest import INDEX_TYPES, SegmentManifest, parse_manifest
from .objects import ObjectStore, open_uri

#: Read a manifest in steps of this size; refuse one larger than MAX_MANIFEST_SIZE.
MANIFEST_STEP = 1024 * 1024
MAX_MANIFEST_SIZE = 64 * 1024 * 1024

#: Where each index of ``.indexes`` goes in a partition folder: Kafka's file names. The
#: producer snapshot Kafka hands over is the one taken at the segment's end (it is named
#: after the next offset); the leader epochs are the checkpoint file's text.
INDEX_FILE_SUFFIXES = {
    "offset": ".index",
    "timestamp": ".timeindex",
    "producerSnapshot": ".snapshot",
    "leaderEpoch": None,  # leader-epoch-checkpoint
    "transaction": ".txnindex",
}
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"


def read_object(store: ObjectStore, key: str, limit: int = MAX_MANIFEST_SIZE) -> bytes:
    """A whole (small) object: read in steps until a short read."""
    out = bytearray()
    while True:
        data = store.read(key, len(out), len(out) + MANIFEST_STEP)
        out += data
        if len(data) < MANIFEST_STEP:
            return bytes(out)
        if len(out) > limit:
            raise ManifestError(f"{store.uri(key)}: larger than {limit} bytes, not a manifest")


class RemoteSegment:
    """One segment of a tier. ``store`` reads the objects (:mod:`.objects`); the ``.log`` and
    ``.indexes`` keys default to the manifest's key with their suffixes (the plugin's key
    rules; give others where custom metadata moved them: :func:`.layout.object_key`).
    ``key_ring`` is needed only for an encrypted segment, and only once a chunk is read."""

    def __init__(self, store: ObjectStore, manifest_key: str, manifest: SegmentManifest, *,
                 key_ring: KeyRing | None = None, log_key: str | None = None,
                 indexes_key: str | None = None) -> None:
        self.store = store
        self.manifest = manifest
        self.manifest_key = manifest_key
        self.log_key = log_key or sibling(manifest_key, LOG)
        self.indexes_key = indexes_key or sibling(manifest_key, INDEXES)
        self.key_ring = key_ring
        self._cipher: ChunkCipher | None = None
        self._lock = threading.Lock()

    @classmethod
    def open(cls, uri: str, *, store: ObjectStore | None = None,
             key_ring: KeyRing | None = None, **keys) -> "RemoteSegment":
        """The segment whose manifest is ``uri`` (a path or ``s3://`` URI; with ``store``, a
        key of that store). Reads the manifest now."""
        if store is None:
            store, uri = open_uri(uri)
        if not uri.endswith(MANIFEST):
            raise SourceError(f"{store.uri(uri)}: not a {MANIFEST} object")
        manifest = parse_manifest(read_object(store, uri), store.uri(uri))
        return cls(store, uri, manifest, key_ring=key_ring, **keys)

    # ---------------------------------------------------------------------- what it is
    @property
    def size(self) -> int:
        """The original segment's size in bytes."""
        return self.manifest.size

    @property
    def start_offset(self) -> int:
        """The segment's base offset (the 20 digits of its key)."""
        name = self.manifest_key.rsplit("/", 1)[-1]
        return int(name.split("-", 1)[0])

    def uri(self, key: str | None = None) -> str:
        return self.store.uri(self.manifest_key if key is None else key)

    def chunks(self, start: int = 0, end: int | None = None) -> list[Chunk]:
        """The chunks :meth:`read` of ``[start, end)`` reads."""
        start, end = self._range(start, end)
        return self.manifest.chunk_index.chunks_for_range(start, end)

    def _range(self, start: int, end: int | None) -> tuple[int, int]:
        end = self.size if end is None else end
        if not 0 <= start <= end <= self.size:
            raise SourceError(f"{self.uri()}: byte range {start}..{end} is outside the "
                              f"segment's {self.size} bytes")
        return start, end

    # ---------------------------------------------------------------------- reading
    def _chunk_cipher(self) -> ChunkCipher:
        with self._lock:
            if self._cipher is None:
                enc = self.manifest.encryption
                if self.key_ring is None:
                    raise KeyRingError(f"{self.uri()}: the segment is encrypted with key id "
                                       f"{enc.key_id!r}: a private key is needed")
                self._cipher = ChunkCipher(self.key_ring.unwrap(enc, self.uri()), enc.aad)
            return self._cipher

    def _undo(self, stored: bytes, original_size: int, compressed: bool, where: str,
              position: int) -> bytes:
        """Decrypt (if encrypted) and decompress (if ``compressed``) one stored piece."""
        data = stored
        try:
            if self.manifest.encryption is not None:
                data = self._chunk_cipher().decrypt(stored)
            if compressed:
                data = _unzstd(data, original_size)
        except ChunkError as err:
            raise ChunkError(f"{where}: {err}", position) from err
        if len(data) != original_size:
            raise ChunkError(f"{where}: gives {len(data)} bytes, not {original_size}", position)
        return data

    def read_chunk(self, chunk: Chunk) -> bytes:
        """Chunk ``chunk``'s original bytes (all of them, checked)."""
        n = self.manifest.chunk_index.count
        where = (f"{self.uri(self.log_key)}: chunk {chunk.id} of {n} (segment bytes "
                 f"{chunk.original_position}..{chunk.original_position + chunk.original_size}, "
                 f"stored at {chunk.stored_position}..{chunk.stored_position + chunk.stored_size})")
        stored = self.store.read(self.log_key, chunk.stored_position,
                                 chunk.stored_position + chunk.stored_size)
        if len(stored) != chunk.stored_size:
            raise ChunkError(f"{where}: short chunk, the object holds {len(stored)} of its "
                             f"{chunk.stored_size} bytes", chunk.original_position)
        return self._undo(stored, chunk.original_size, self.manifest.compression, where,
                          chunk.original_position)

    def iter_range(self, start: int = 0, end: int | None = None) -> Iterator[memoryview]:
        """The original bytes ``[start, end)``, a piece per chunk, in order."""
        start, end = self._range(start, end)
        for chunk in self.manifest.chunk_index.chunks_for_range(start, end):
            data = memoryview(self.read_chunk(chunk))
            lo = max(start, chunk.original_position) - chunk.original_position
            hi = min(end, chunk.original_position + chunk.original_size) - chunk.original_position
            yield data[lo:hi]

    def read(self, start: int = 0, end: int | None = None) -> bytes:
        """The original bytes ``[start, end)`` (reads only the chunks that hold them)."""
        return b"".join(self.iter_range(start, end))

    def read_into(self, buffer: bytearray, start: int = 0, end: int | None = None) -> memoryview:
        """:meth:`read` into ``buffer`` (grown if too small), for a caller that decodes range
        after range: filling memory already touched costs a fraction of fresh memory. The
        view of ``buffer`` it returns is valid until ``buffer`` is filled again (kafkalog's
        decoded values are copies: decode it, then reuse the buffer)."""
        start, end = self._range(start, end)
        if len(buffer) < end - start:
            buffer.extend(bytes(end - start - len(buffer)))
        view = memoryview(buffer)
        pos = 0
        for piece in self.iter_range(start, end):
            view[pos:pos + len(piece)] = piece
            pos += len(piece)
        return view[:pos]

    def copy_to(self, out: BinaryIO, start: int = 0, end: int | None = None) -> int:
        """Write the original bytes ``[start, end)`` to ``out`` a chunk at a time; the number
        of bytes written. Copying the whole segment also checks that the ``.log`` object
        holds nothing past its last chunk."""
        start, end = self._range(start, end)
        if (start, end) == (0, self.size):
            self.check_object_size()
        n = 0
        for piece in self.iter_range(start, end):
            out.write(piece)
            n += len(piece)
        return n

    def check_object_size(self) -> None:
        """:class:`ChunkError` if the ``.log`` object is longer than its chunks (one read of
        a byte past their end; a shorter object shows as a short chunk when read)."""
        total = self.manifest.chunk_index.stored_size
        extra = self.store.read(self.log_key, total, total + 1)
        if extra:
            raise ChunkError(f"{self.uri(self.log_key)}: holds bytes past the {total} the "
                             "manifest's chunks cover", self.size)

    # ---------------------------------------------------------------------- indexes
    def index_bytes(self, name: str) -> bytes | None:
        """One index of ``.indexes`` (``offset``, ``timestamp``, ``producerSnapshot``,
        ``leaderEpoch``, ``transaction``) as Kafka had it, or None if the segment has none."""
        if name not in INDEX_TYPES:
            raise ValueError(f"unknown index {name!r} (known: {', '.join(INDEX_TYPES)})")
        r = self.manifest.indexes[name]
        if r is None:
            return None
        if r.size == 0:
            return b""
        where = (f"{self.uri(self.indexes_key)}: index {name} (stored at "
                 f"{r.position}..{r.position + r.size})")
        stored = self.store.read(self.indexes_key, r.position, r.position + r.size)
        if len(stored) != r.size:
            raise ChunkError(f"{where}: short, the object holds {len(stored)} of its "
                             f"{r.size} bytes", r.position)
        # never compressed; when encrypted, one AES-GCM piece whose plaintext size only the
        # tag vouches for
        if self.manifest.encryption is None:
            return stored
        try:
            return self._chunk_cipher().decrypt(stored)
        except ChunkError as err:
            raise ChunkError(f"{where}: {err}", r.position) from err

    def index_file_name(self, name: str) -> str:
        """The file name Kafka gives the index ``name`` in a partition folder."""
        suffix = INDEX_FILE_SUFFIXES[name]
        if suffix is None:
            return LEADER_EPOCH_CHECKPOINT
        offset = self.start_offset
        if name == "producerSnapshot":  # taken at the segment's end, named after the next offset
            end = self.manifest.end_offset
            offset = self.start_offset if end is None else end + 1
        return f"{offset:020d}{suffix}"

    def write_indexes(self, folder: str) -> list[str]:
        """Each index the segment has, as a file of ``folder`` named as Kafka names it; the
        paths written. Without the end offset (manifests before plugin PR #377) the producer
        snapshot is named after the start offset."""
        written = []
        for name in INDEX_TYPES:
            data = self.index_bytes(name)
            if data is None:
                continue
            path = os.path.join(folder, self.index_file_name(name))
            with open(path, "wb") as f:
                f.write(data)
            written.append(path)
        return written


def _unzstd(data: bytes, size: int) -> bytes:
    """One zstd frame that says its content size, ``size``, and nothing after it."""
    zstandard = require_module("zstandard", "zstandard")
    try:
        declared = zstandard.frame_content_size(data)
    except zstandard.ZstdError as err:
        raise ChunkError(f"not a zstd frame ({err})") from err
    if declared != size:  # the plugin's frames say their size; this bounds what is inflated
        raise ChunkError(f"zstd frame declares {declared} bytes, the chunk has {size}"
                         if declared >= 0 else "zstd frame does not declare its content size "
                         "(the plugin's frames do)")
    try:  # one shot: twice as fast as a decompressobj on 4 MiB chunks
        return zstd_decompressor().decompress(data, max_output_size=size, allow_extra_data=False)
    except zstandard.ZstdError as err:
        raise ChunkError(f"zstd: {err}") from err
