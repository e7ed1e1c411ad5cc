"""Tiered storage (KIP-405): segments as Kafka's remote storage plugins leave them in a bucket.

Aiven's plugin (Aiven-Open/tiered-storage-for-apache-kafka) stores each segment as a
``.log`` cut into chunks, each optionally zstd-compressed and then optionally AES-256-GCM
encrypted, an ``.indexes`` object with the segment's five indexes, and a plaintext JSON
``.rsm-manifest`` that says how. One module per part of it:

- :mod:`.layout`: object keys (``<prefix><topic>-<topicId>/<partition>/<offset>-<segmentId>``)
  and a listing grouped into segments; plain copies (mgoblin/minio-rsm) are ordinary segments;
- :mod:`.manifest`: the ``.rsm-manifest`` JSON;
- :mod:`.chunks`: the chunk index, from any byte range of the segment to the chunks holding it;
- :mod:`.crypto`: the key ring (RSA-OAEP with SHA3-512 unwraps the data key) and AES-GCM;
- :mod:`.objects`: where objects are read from (a local folder, or S3 with ranged GETs);
- :mod:`.reader`: :class:`RemoteSegment`, the original bytes back a chunk at a time;
- :mod:`.writer`: a segment's three objects as the plugin uploads them (the demo's tier).
- :mod:`.inventory`: what a tier holds, pure: the live set replayed from
  ``__remote_log_metadata``'s events, each live segment's keys, a listing's segments matched to
  the metadata's rows (the decode job's tier input and the tier audit both use it).

``__remote_log_metadata``, Kafka's record of which segments are in the tier, is read by
:mod:`kafkalog.internal.remote_log`.

    >>> from kafkalog.tiered import KeyRing, RemoteSegment
    >>> seg = RemoteSegment.open("s3://bucket/tiered/orders-AbCd…/0/000…-XyZ….rsm-manifest",
    ...                          key_ring=KeyRing.from_pem_files(["key-a.pem", "key-b.pem"]))
    >>> with open("00000000000000000000.log", "wb") as out:
    ...     seg.copy_to(out)
"""

from .chunks import Chunk, ChunkIndex
from .crypto import KeyRing
from .layout import TierSegment, group_segments, main_path, object_key
from .manifest import Encryption, IndexRange, SegmentManifest, parse_manifest
from .objects import LocalObjects, ObjectStore, S3Objects, open_prefix, open_uri
from .reader import RemoteSegment

__all__ = [
    "Chunk",
    "ChunkIndex",
    "Encryption",
    "IndexRange",
    "KeyRing",
    "LocalObjects",
    "ObjectStore",
    "RemoteSegment",
    "S3Objects",
    "SegmentManifest",
    "TierSegment",
    "group_segments",
    "main_path",
    "object_key",
    "open_prefix",
    "open_uri",
    "parse_manifest",
]
