"""A segment's ``.rsm-manifest``: plaintext JSON, as the plugin's ``SegmentManifestV1`` is
written by Jackson (fields in this order)::

    {"version": "1",
     "chunkIndex": {...},                    the .log's chunks (:mod:`.chunks`)
     "segmentIndexes": {"offset": {"position": P, "size": S}, "timestamp": {...},
                        "producerSnapshot": {...}, "leaderEpoch": {...},
                        "transaction": {...} | null},
     "compression": true | false,            every .log chunk is one zstd frame
     "encryption": {"dataKey": "<keyId>:<base64>", "aad": "<base64>"},   absent: plaintext
     "remoteLogSegmentMetadata": {...}}      since plugin PR #377; informational

``segmentIndexes`` places the five indexes Kafka hands over with a segment in the
``.indexes`` object, back to back in that order (the transaction index may be missing: null).
They are never compressed; when the segment is encrypted each is one AES-GCM chunk of its
own. ``dataKey`` is the segment's AES-256 key wrapped with the RSA key named ``keyId``
(:mod:`.crypto`); ``aad`` is the associated data of every chunk and index.

The plugin's reader refuses fields it does not know (Jackson's default), and so does this one,
except inside ``remoteLogSegmentMetadata``, which it does not read back. Errors are
:class:`~kafkalog.errors.ManifestError` naming the manifest and the field.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass

from ..errors import ManifestError
from .chunks import INT32_MAX, ChunkIndex, chunk_index_from_json

#: The manifest versions this reader knows (Jackson's type id, a string).
VERSIONS = ("1",)

#: The indexes of ``.indexes``, in the order they are stored (Kafka's IndexType:
#: OFFSET, TIMESTAMP, PRODUCER_SNAPSHOT, LEADER_EPOCH, TRANSACTION).
INDEX_TYPES = ("offset", "timestamp", "producerSnapshot", "leaderEpoch", "transaction")
#: The one index the plugin may leave out (a segment without a transaction index).
OPTIONAL_INDEXES = ("transaction",)

_TOP = ("version", "chunkIndex", "segmentIndexes", "compression", "encryption",
        "remoteLogSegmentMetadata")


@dataclass(frozen=True, slots=True)
class IndexRange:
    """Where one index is stored in the ``.indexes`` object."""

    position: int
    size: int


@dataclass(frozen=True, slots=True)
class Encryption:
    key_id: str  # the key-ring id of the RSA key the data key is wrapped with
    wrapped_key: bytes  # RSA-OAEP ciphertext of the 32-byte AES key
    aad: bytes  # associated data of every AES-GCM chunk


@dataclass(frozen=True, slots=True)
class SegmentManifest:
    chunk_index: ChunkIndex
    indexes: dict  # INDEX_TYPES name -> IndexRange, or None (transaction only)
    compression: bool
    encryption: Encryption | None
    #: ``remoteLogSegmentMetadata`` as written (remoteLogSegmentId, startOffset, endOffset,
    #: maxTimestampMs, brokerId, eventTimestampMs, segmentLeaderEpochs), or None
    segment_metadata: dict | None
    version: str = "1"

    @property
    def size(self) -> int:
        """The original segment's size in bytes."""
        return self.chunk_index.original_file_size

    @property
    def end_offset(self) -> int | None:
        """The segment's last offset, where the manifest says it (plugin PR #377 and later)."""
        meta = self.segment_metadata or {}
        value = meta.get("endOffset")
        return value if type(value) is int else None


def _bytes64(value, what: str) -> bytes:
    if not isinstance(value, str):
        raise ManifestError(f"{what} is {type(value).__name__}, not a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as err:
        raise ManifestError(f"{what} is not base64: {err}") from err


def parse_data_key(text, where: str) -> tuple[str, bytes]:
    """``"<keyId>:<base64>"`` -> ``(key id, wrapped key)``, as the plugin's
    EncryptedDataKey.parse reads it (exactly one colon, a non-blank id, non-empty key)."""
    what = f"{where}: encryption.dataKey"
    if not isinstance(text, str) or text.count(":") != 1:
        raise ManifestError(f"{what} is not '<keyId>:<base64>'")
    key_id, _, wrapped = text.partition(":")
    if not key_id.strip():
        raise ManifestError(f"{what} has a blank key id")
    raw = _bytes64(wrapped, what)
    if not raw:
        raise ManifestError(f"{what} holds no wrapped key")
    return key_id, raw


def _index_range(obj, name: str, where: str) -> IndexRange | None:
    what = f"{where}: segmentIndexes.{name}"
    if obj is None:
        if name in OPTIONAL_INDEXES:
            return None
        raise ManifestError(f"{what} is missing (only {', '.join(OPTIONAL_INDEXES)} may be)")
    if not isinstance(obj, dict) or set(obj) != {"position", "size"}:
        raise ManifestError(f"{what} is not {{\"position\", \"size\"}}: {obj!r}")
    values = []
    for field in ("position", "size"):
        v = obj[field]
        if type(v) is not int or not 0 <= v <= INT32_MAX:
            raise ManifestError(f"{what}.{field} is {v!r}, not an int32 >= 0")
        values.append(v)
    return IndexRange(*values)


def parse_manifest(data: bytes, where: str) -> SegmentManifest:
    """The manifest ``data`` read from ``where`` (its path or URI, for messages)."""
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError) as err:  # UnicodeDecodeError is a ValueError
        raise ManifestError(f"{where}: not JSON: {err}") from err
    if not isinstance(doc, dict):
        raise ManifestError(f"{where}: a JSON {type(doc).__name__}, not a manifest object")
    unknown = set(doc) - set(_TOP)
    if unknown:
        raise ManifestError(f"{where}: unknown fields {', '.join(sorted(unknown))}")
    version = doc.get("version")
    if str(version) not in VERSIONS:
        raise ManifestError(f"{where}: manifest version {version!r} (this reader knows "
                            f"{', '.join(VERSIONS)})")
    for field in ("chunkIndex", "segmentIndexes", "compression"):
        if field not in doc:
            raise ManifestError(f"{where}: no {field}")
    chunk_index = chunk_index_from_json(doc["chunkIndex"], where)
    raw_indexes = doc["segmentIndexes"]
    if not isinstance(raw_indexes, dict):
        raise ManifestError(f"{where}: segmentIndexes is not an object")
    unknown = set(raw_indexes) - set(INDEX_TYPES)
    if unknown:
        raise ManifestError(f"{where}: segmentIndexes has unknown indexes "
                            f"{', '.join(sorted(unknown))}")
    indexes = {name: _index_range(raw_indexes.get(name), name, where) for name in INDEX_TYPES}
    position = 0
    for name in INDEX_TYPES:  # back to back, in this order (SegmentIndexesV1Builder)
        r = indexes[name]
        if r is None:
            continue
        if r.position != position:
            raise ManifestError(f"{where}: segmentIndexes.{name} starts at {r.position}, "
                                f"the indexes before it end at {position}")
        position += r.size
    compression = doc["compression"]
    if not isinstance(compression, bool):
        raise ManifestError(f"{where}: compression is {compression!r}, not true or false")
    encryption = None
    enc = doc.get("encryption")
    if enc is not None:
        if not isinstance(enc, dict) or set(enc) != {"dataKey", "aad"}:
            raise ManifestError(f"{where}: encryption is not {{\"dataKey\", \"aad\"}}: "
                                f"{sorted(enc) if isinstance(enc, dict) else enc!r}")
        key_id, wrapped = parse_data_key(enc["dataKey"], where)
        encryption = Encryption(key_id, wrapped, _bytes64(enc["aad"], f"{where}: encryption.aad"))
    meta = doc.get("remoteLogSegmentMetadata")
    if meta is not None and not isinstance(meta, dict):
        raise ManifestError(f"{where}: remoteLogSegmentMetadata is not an object")
    return SegmentManifest(chunk_index, indexes, compression, encryption, meta, str(version))
