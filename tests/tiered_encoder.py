"""Objects as Aiven's tiered-storage plugin uploads them, for the tests: an encoder written
from the plugin's Java code (Aiven-Open/tiered-storage-for-apache-kafka, core/src/main/java/
io/aiven/kafka/tieredstorage/...), never from ``kafkalog.tiered``, which the tests check
against it. Each step names the Java class it follows.

    KafkaRemoteStorageManager.copyLogSegmentData   upload(): the three objects
      uploadSegmentLog     BaseTransformChunkEnumeration (readNBytes(chunkSize) until empty)
                           -> CompressionChunkEnumeration (ZstdCompressCtx, content size set)
                           -> EncryptionChunkEnumeration (IV prepended, Java GCM appends tag)
                           TransformFinisher: Fixed/VariableSizeChunkIndexBuilder
      uploadIndexes        transformIndex per index (encrypted, never compressed, one chunk),
                           SegmentIndexesV1Builder (positions back to back; no txn: null)
      uploadManifest       SegmentManifestV1 through Jackson (KafkaTypeSerdeModule mixins,
                           DataKeySerializer -> RsaEncryptionProvider.encryptDataKey)
    ObjectKeyFactory       keys; SegmentCustomMetadataBuilder/Serde: custom metadata
    ChunkSizesBinaryCodec + TransformedChunksSerializer: a variable index's sizes

RSA-OAEP is BouncyCastle's OAEPWithSHA3-512AndMGF1Padding: OAEP (RFC 8017 7.1.1) with
SHA3-512 for the label hash and MGF1, empty label; encoded here from the RFC, since OpenSSL
(``cryptography``) refuses SHA-3 in OAEP. ``hash_name`` lets a test encode with SHA-512 and
have ``cryptography`` decrypt it, which checks this encoder independently.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import random
import struct
from dataclasses import dataclass, field

import zstandard
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

GCM_IV_BYTES = 12  # Java's AES/GCM default IV length (GaloisCounterMode)


def _mgf(seed: bytes, n: int, hash_name: str) -> bytes:
    blocks = []
    i = 0
    while sum(map(len, blocks)) < n:
        blocks.append(hashlib.new(hash_name, seed + struct.pack(">I", i)).digest())
        i += 1
    return b"".join(blocks)[:n]


def oaep_encode(message: bytes, k: int, rng: random.Random, hash_name: str = "sha3_512",
                label: bytes = b"", separator: bytes = b"\x01") -> bytes:
    """EME-OAEP encoding (RFC 8017 7.1.1 step 2): the ``k``-byte encoded message
    (``separator`` other than 0x01 only to test a decoder)."""
    h_len = hashlib.new(hash_name).digest_size
    if len(message) > k - 2 * h_len - 2:
        raise ValueError("message too long")
    db = (hashlib.new(hash_name, label).digest() + bytes(k - len(message) - 2 * h_len - 2)
          + separator + message)
    seed = bytes(rng.getrandbits(8) for _ in range(h_len))
    masked_db = bytes(a ^ b for a, b in zip(db, _mgf(seed, k - h_len - 1, hash_name)))
    masked_seed = bytes(a ^ b for a, b in zip(seed, _mgf(masked_db, h_len, hash_name)))
    return b"\x00" + masked_seed + masked_db


def rsa_oaep_encrypt(public_key, message: bytes, rng: random.Random,
                     hash_name: str = "sha3_512") -> bytes:
    """RFC 8017 7.1.1 (EME-OAEP encoding + RSAEP) with an empty label."""
    nums = public_key.public_numbers()
    k = (nums.n.bit_length() + 7) // 8
    em = oaep_encode(message, k, rng, hash_name)
    c = pow(int.from_bytes(em, "big"), nums.e, nums.n)
    return c.to_bytes(k, "big")


def encode_chunk_sizes(values: list[int]) -> bytes:
    """ChunkSizesBinaryCodec.encode."""
    count = len(values)
    if count == 0:
        return struct.pack(">i", 0)
    if count == 1:
        return struct.pack(">ii", 1, values[0])
    body = values[:-1]
    base = min(body)

    def needed(v):
        return 1 if v <= 0xFF else 2 if v <= 0xFFFF else 3 if v <= 0xFFFFFF else 4

    width = max(needed(v - base) for v in body)
    out = bytearray(struct.pack(">iib", count, base, width))
    for v in body:
        out += struct.pack(">i", v - base)[4 - width:]
    out += struct.pack(">i", values[-1])
    return bytes(out)


def zstd_with_size(data: bytes) -> bytes:
    """ZstdCompressCtx with setPledgedSrcSize and setContentSize(true): one frame."""
    return zstandard.ZstdCompressor(write_content_size=True).compress(data)


def uvarint(v: int) -> bytes:
    """Kafka's ByteUtils.writeUnsignedVarint: 7 bits a byte, low first, high bit = more."""
    out = bytearray()
    while v >= 0x80:
        out.append(v & 0x7F | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def custom_metadata_bytes(fields: dict) -> bytes:
    """SegmentCustomMetadataSerde.serialize: a struct of only tagged fields, tags sorted:
    0 remote_size VARLONG, 1 object_prefix COMPACT_STRING, 2 object_key COMPACT_STRING."""
    if not fields:
        return b""
    out = bytearray(uvarint(len(fields)))
    for tag in sorted(fields):
        value = fields[tag]
        if tag == 0:
            body = uvarint((value << 1) ^ (value >> 63))
        else:
            raw = value.encode()
            body = uvarint(len(raw) + 1) + raw
        out += uvarint(tag) + uvarint(len(body)) + body
    return bytes(out)


@dataclass
class Upload:
    """What one copyLogSegmentData left in the bucket."""

    objects: dict  # key -> bytes
    prefix: str
    main: str
    data_key: bytes | None = None
    aad: bytes | None = None
    chunk_sizes: list = field(default_factory=list)  # the stored size of each chunk
    custom_metadata: bytes = b""

    def key(self, suffix: str) -> str:
        return f"{self.prefix}{self.main}.{suffix}"

    def write_to(self, folder) -> None:
        for key, data in self.objects.items():
            path = os.path.join(folder, key)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(data)


def upload(log: bytes, *, chunk_size: int, compression: bool = False, key_id: str | None = None,
           public_key=None, indexes: dict | None = None, prefix: str = "tiered/",
           topic: str = "orders", topic_id: str = "lZ6vvmajTWKDBUTV6SQAtQ", partition: int = 3,
           start_offset: int = 0, end_offset: int = 12, segment_id: str = "adh9f8BMS4anaUnD8KWfWg",
           seed: int = 1, with_metadata: bool = True, hash_name: str = "sha3_512",
           custom_fields: tuple = (0, 1, 2), compress=zstd_with_size) -> Upload:
    """The objects for a segment ``log`` with ``indexes`` (name -> bytes, ``transaction``
    optional), as the plugin with ``chunk.size`` = ``chunk_size``, ``compression.enabled``
    and, with ``key_id``, encryption under that key pair (the active one) would upload.
    ``compress`` replaces the plugin's zstd call (tests of frames it would not write)."""
    rng = random.Random(seed)
    encrypt = key_id is not None
    main = f"{topic}-{topic_id}/{partition}/{start_offset:020d}-{segment_id}"  # mainPath
    up = Upload({}, prefix, main)
    if encrypt:  # AesEncryptionProvider.createDataKeyAndAAD: two separate generateKey() calls
        up.data_key = rng.randbytes(32)
        up.aad = rng.randbytes(32)

    def encrypt_one(chunk: bytes) -> bytes:  # EncryptionChunkEnumeration.nextElement
        iv = rng.randbytes(GCM_IV_BYTES)
        return iv + AESGCM(up.data_key).encrypt(iv, chunk, up.aad)

    # ---- uploadSegmentLog
    pieces = [log[i:i + chunk_size] for i in range(0, len(log), chunk_size)]
    if compression:
        pieces = [compress(p) for p in pieces]
    if encrypt:
        pieces = [encrypt_one(p) for p in pieces]
    up.chunk_sizes = [len(p) for p in pieces]
    if compression:  # transformedChunkSize() is null: VariableSizeChunkIndexBuilder
        sizes = zstd_with_size(encode_chunk_sizes(up.chunk_sizes))
        chunk_index = {"type": "variable", "originalChunkSize": chunk_size,
                       "originalFileSize": len(log),
                       "transformedChunks": base64.b64encode(sizes).decode()}
    else:  # FixedSizeChunkIndexBuilder: IV + AES output size (+16) when encrypted
        fixed = chunk_size + (GCM_IV_BYTES + 16 if encrypt else 0)
        assert all(s == fixed for s in up.chunk_sizes[:-1])  # addChunk0's sanity check
        chunk_index = {"type": "fixed", "originalChunkSize": chunk_size,
                       "originalFileSize": len(log), "transformedChunkSize": fixed,
                       "finalTransformedChunkSize": up.chunk_sizes[-1] if pieces else 0}
    up.objects[up.key("log")] = b"".join(pieces)

    # ---- uploadIndexes
    indexes = indexes or {}
    segment_indexes = {}
    blob = bytearray()
    for name in ("offset", "timestamp", "producerSnapshot", "leaderEpoch", "transaction"):
        if name == "transaction" and name not in indexes:
            segment_indexes[name] = None  # SegmentIndexesV1: no txn index -> null
            continue
        data = indexes.get(name, b"")
        stored = (encrypt_one(data) if encrypt else data) if data else b""
        segment_indexes[name] = {"position": len(blob), "size": len(stored)}
        blob += stored
    up.objects[up.key("indexes")] = bytes(blob)

    # ---- uploadManifest (Jackson: fields in declaration order, compact)
    manifest = {"version": "1", "chunkIndex": chunk_index, "segmentIndexes": segment_indexes,
                "compression": compression}
    if encrypt:
        wrapped = rsa_oaep_encrypt(public_key, up.data_key, rng, hash_name)
        manifest["encryption"] = {"dataKey": f"{key_id}:{base64.b64encode(wrapped).decode()}",
                                  "aad": base64.b64encode(up.aad).decode()}
    if with_metadata:  # RemoteLogSegmentMetadataMixin, since PR #377
        manifest["remoteLogSegmentMetadata"] = {
            "remoteLogSegmentId": {"topicIdPartition": {
                "topicId": topic_id, "topicPartition": {"topic": topic, "partition": partition}},
                "id": segment_id},
            "startOffset": start_offset, "endOffset": end_offset,
            "maxTimestampMs": 1_700_000_000_000, "brokerId": 1,
            "eventTimestampMs": 1_700_000_001_000, "segmentLeaderEpochs": {"0": start_offset}}
    up.objects[up.key("rsm-manifest")] = json.dumps(manifest, separators=(",", ":")).encode()

    # ---- SegmentCustomMetadataBuilder: remote_size is the sum of the three uploads
    values = {0: sum(len(v) for v in up.objects.values()), 1: prefix, 2: main}
    up.custom_metadata = custom_metadata_bytes({t: values[t] for t in custom_fields})
    return up


# ---- __remote_log_metadata records (apache/kafka storage/src/main/resources/message/
# RemoteLogSegmentMetadataRecord.json, RemoteLogSegmentMetadataUpdateRecord.json, v0,
# flexible versions), framed as RemoteLogMetadataSerde frames them: unsigned varint frame
# version 1, api key, record version, then the fields; packed here by hand from the specs'
# field order, not with kafkalog's spec-driven writer

COPY_SEGMENT_STARTED, COPY_SEGMENT_FINISHED, DELETE_SEGMENT_STARTED = 0, 1, 2


def _compact_string(s: str) -> bytes:
    return uvarint(len(s.encode()) + 1) + s.encode()


def _compact_bytes(b: bytes | None) -> bytes:
    return uvarint(0) if b is None else uvarint(len(b) + 1) + b


def _uuid(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "==")


def _remote_segment_id(topic: str, topic_id: str, partition: int, segment_id: str) -> bytes:
    """RemoteLogSegmentIdEntry: TopicIdPartition (name, id, partition, tags), id, tags."""
    return (_compact_string(topic) + _uuid(topic_id) + struct.pack(">i", partition) + uvarint(0)
            + _uuid(segment_id) + uvarint(0))


def segment_metadata_record(topic: str, topic_id: str, partition: int, segment_id: str,
                            start_offset: int, end_offset: int, size: int, *,
                            broker_id: int = 1, max_timestamp_ms: int = 1_700_000_000_000,
                            event_timestamp_ms: int = 1_700_000_000_000,
                            leader_epochs: tuple = ((0, None),)) -> bytes:
    """RemoteLogSegmentMetadataRecord v0 (api key 0), state COPY_SEGMENT_STARTED; leader
    epochs as ``(epoch, start offset)`` pairs (None: the segment's start offset)."""
    epochs = b"".join(struct.pack(">iq", e, start_offset if o is None else o) + uvarint(0)
                      for e, o in leader_epochs)
    body = (_remote_segment_id(topic, topic_id, partition, segment_id)
            + struct.pack(">qqiqq", start_offset, end_offset, broker_id, max_timestamp_ms,
                          event_timestamp_ms)
            + uvarint(len(leader_epochs) + 1) + epochs
            + struct.pack(">i", size) + _compact_bytes(None)
            + bytes([COPY_SEGMENT_STARTED]) + uvarint(0))
    return uvarint(1) + uvarint(0) + uvarint(0) + body


def segment_update_record(topic: str, topic_id: str, partition: int, segment_id: str,
                          state: int, custom_metadata: bytes | None = None, *,
                          broker_id: int = 1, event_timestamp_ms: int = 1_700_000_001_000) -> bytes:
    """RemoteLogSegmentMetadataUpdateRecord v0 (api key 1): a new state, with the plugin's
    custom metadata (COPY_SEGMENT_FINISHED)."""
    body = (_remote_segment_id(topic, topic_id, partition, segment_id)
            + struct.pack(">iq", broker_id, event_timestamp_ms)
            + _compact_bytes(custom_metadata) + bytes([state]) + uvarint(0))
    return uvarint(1) + uvarint(1) + uvarint(0) + body
