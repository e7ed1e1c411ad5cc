"""A segment's three objects as Aiven's plugin uploads them (``copyLogSegmentData``), for
the demo and for anyone who needs a tier to read: the twin of :mod:`.reader`, with the
grammar of each part where its reader keeps it (:mod:`.layout` keys, :mod:`.chunks` the
chunk sizes, :mod:`.crypto` OAEP, :mod:`.manifest` the JSON's fields and index order).

The ``.log`` is cut into ``chunk_size`` chunks, each zstd-compressed (one frame, its content
size set) when ``compression``, then AES-256-GCM encrypted (a fresh 12-byte IV before it,
the tag after) with the segment's data key and AAD when a key is given; the five indexes go
back to back into ``.indexes``, each encrypted on its own, never compressed; the manifest
wraps the data key with the RSA public key (OAEP, SHA3-512 for both the digest and MGF1).
The tests check the reader against their own encoder (tests/tiered_encoder.py), not this.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os

from ..codecs import require_module
from .chunks import FIXED, VARIABLE, encode_chunk_sizes
from .crypto import DATA_KEY_SIZE, IV_SIZE, OAEP_HASH, TAG_SIZE, oaep_encode
from .layout import INDEXES, LOG, MANIFEST, main_path
from .manifest import INDEX_TYPES, OPTIONAL_INDEXES


def wrap_data_key(public_key, data_key: bytes, seed: bytes) -> bytes:
    """RSA-OAEP (SHA3-512, MGF1-SHA3-512, empty label) of ``data_key`` under ``public_key``."""
    nums = public_key.public_numbers()
    k = (nums.n.bit_length() + 7) // 8
    em = int.from_bytes(oaep_encode(data_key, k, seed), "big")
    return pow(em, nums.e, nums.n).to_bytes(k, "big")


def segment_objects(log: bytes, indexes: dict, *, prefix: str, topic: str, topic_id: str,
                    partition: int, start_offset: int, end_offset: int, segment_id: str,
                    chunk_size: int, compression: bool = False, key_id: str | None = None,
                    public_key=None, random_bytes=os.urandom,
                    segment_metadata: dict | None = None) -> dict[str, bytes]:
    """``{object key: bytes}`` of one segment (``indexes``: :data:`.manifest.INDEX_TYPES`
    name -> bytes; a missing ``transaction`` is null). With ``key_id``, encrypted under
    ``public_key``; ``random_bytes(n)`` gives the data key, AAD, IVs and OAEP seeds (a seeded
    generator makes the objects reproducible)."""
    if chunk_size <= 0:
        raise ValueError(f"chunk size {chunk_size}: must be positive")
    if (key_id is None) != (public_key is None):
        raise ValueError("encryption needs both a key id and its public key")
    if key_id:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    zstd = require_module("zstandard", "zstandard").ZstdCompressor(write_content_size=True)
    data_key = random_bytes(DATA_KEY_SIZE) if key_id else None
    aad = random_bytes(DATA_KEY_SIZE) if key_id else None  # the plugin's second generateKey()

    def encrypt(piece: bytes) -> bytes:
        iv = random_bytes(IV_SIZE)
        return iv + AESGCM(data_key).encrypt(iv, piece, aad)

    chunks = [log[i:i + chunk_size] for i in range(0, len(log), chunk_size)]
    if compression:
        chunks = [zstd.compress(c) for c in chunks]
    if key_id:
        chunks = [encrypt(c) for c in chunks]
    sizes = [len(c) for c in chunks]
    index = {"originalChunkSize": chunk_size, "originalFileSize": len(log)}
    if compression:
        index = {"type": VARIABLE, **index, "transformedChunks": base64.b64encode(
            zstd.compress(encode_chunk_sizes(sizes))).decode()}
    else:
        index = {"type": FIXED, **index,
                 "transformedChunkSize": chunk_size + (IV_SIZE + TAG_SIZE if key_id else 0),
                 "finalTransformedChunkSize": sizes[-1] if sizes else 0}

    blob, placed = bytearray(), {}
    for name in INDEX_TYPES:
        if name in OPTIONAL_INDEXES and name not in indexes:
            placed[name] = None
            continue
        data = indexes.get(name, b"")
        stored = encrypt(data) if key_id and data else data
        placed[name] = {"position": len(blob), "size": len(stored)}
        blob += stored

    manifest = {"version": "1", "chunkIndex": index, "segmentIndexes": placed,
                "compression": compression}
    if key_id:
        wrapped = wrap_data_key(public_key, data_key,
                                random_bytes(hashlib.new(OAEP_HASH).digest_size))
        manifest["encryption"] = {"dataKey": f"{key_id}:{base64.b64encode(wrapped).decode()}",
                                  "aad": base64.b64encode(aad).decode()}
    if segment_metadata is not None:
        manifest["remoteLogSegmentMetadata"] = segment_metadata
    main = prefix + main_path(topic, topic_id, partition, start_offset, segment_id)
    return {main + LOG: b"".join(chunks), main + INDEXES: bytes(blob),
            main + MANIFEST: json.dumps(manifest, separators=(",", ":")).encode()}


__all__ = ["segment_objects", "wrap_data_key"]
