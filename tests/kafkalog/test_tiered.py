"""kafkalog.tiered against objects written by an encoder that follows Aiven's plugin
(tests/tiered_encoder.py) from a real broker's segment (tests/data/tiered): every form the
plugin writes decodes to the segment's sha256, any byte range reads only its chunks, the
indexes come back as Kafka's files, and every fault is one error naming the object and
position."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import random

import pytest
import zstandard

import kafkalog
from kafkalog.errors import (
    ChunkError,
    KafkaLogError,
    KeyRingError,
    ManifestError,
    RemoteObjectError,
    SourceError,
)
from kafkalog.tiered import KeyRing, LocalObjects, RemoteSegment
from kafkalog.tiered.chunks import decode_chunk_sizes
from kafkalog.tiered.crypto import _rsa_raw, oaep_decode
from kafkalog.tiered.layout import group_segments, object_key

from tests import tiered_data as td
from tests import tiered_encoder as enc

LOG = td.log_bytes()


class CountingStore(LocalObjects):
    """A local store that records every read: (key, start, end)."""

    def __init__(self, root):
        super().__init__(root)
        self.reads = []

    def read(self, key, start, end):
        self.reads.append((key, start, end))
        return super().read(key, start, end)


def _put(tmp_path, up) -> str:
    up.write_to(tmp_path)
    return str(tmp_path / up.key("rsm-manifest"))


def _open(tmp_path, up, ring=None) -> RemoteSegment:
    return RemoteSegment.open(_put(tmp_path, up), key_ring=ring)


@pytest.fixture(scope="module")
def ring_b(tmp_path_factory):
    return KeyRing.from_pem_files(td.key_files(tmp_path_factory.mktemp("keys"), "key-b"))


@pytest.fixture(scope="module")
def ring_ab(tmp_path_factory):
    folder = tmp_path_factory.mktemp("keys2")
    return KeyRing.from_pem_files(td.key_files(folder, "key-a", "key-b"))


# The forms the plugin writes: chunk.size, compression.enabled, encryption (active key id).
CASES = {
    "plain": dict(chunk_size=1000),
    "compressed": dict(chunk_size=1000, compression=True),
    "encrypted": dict(chunk_size=1000, key_id="key-b"),
    "compressed+encrypted": dict(chunk_size=1000, compression=True, key_id="key-b"),
    "one-chunk": dict(chunk_size=len(LOG), compression=True, key_id="key-b"),
    "chunk-larger-than-segment": dict(chunk_size=1 << 20, key_id="key-b"),
    "small-chunks": dict(chunk_size=97, compression=True),
}


@pytest.mark.parametrize("case", CASES)
def test_every_form_gives_the_segment_back(tmp_path, ring_b, case):
    opts = CASES[case]
    up = enc.upload(LOG, public_key=td.private_key("key-b").public_key(), indexes=td.indexes(),
                    **opts)
    seg = _open(tmp_path, up, ring_b)
    assert seg.size == len(LOG)
    assert seg.manifest.chunk_index.kind == ("variable" if opts.get("compression") else "fixed")
    assert hashlib.sha256(seg.read()).hexdigest() == td.LOG_SHA256
    out = tmp_path / "copy.log"
    with open(out, "wb") as f:
        assert seg.copy_to(f) == len(LOG)
    assert hashlib.sha256(out.read_bytes()).hexdigest() == td.LOG_SHA256
    # the stored chunks are the encoder's, one for one
    index = seg.manifest.chunk_index
    assert [index.chunk(i).stored_size for i in range(index.count)] == up.chunk_sizes


def test_a_two_key_ring_whose_second_key_was_used(tmp_path, ring_ab):
    up = enc.upload(LOG, chunk_size=1000, compression=True, key_id="key-b",
                    public_key=td.private_key("key-b").public_key(), indexes=td.indexes())
    assert ring_ab.ids == ["key-a", "key-b"]
    seg = _open(tmp_path, up, ring_ab)
    assert hashlib.sha256(seg.read()).hexdigest() == td.LOG_SHA256
    assert seg.manifest.encryption.key_id == "key-b"


def test_the_wrapped_key_and_aad_are_the_encoders(tmp_path, ring_b):
    up = enc.upload(LOG, chunk_size=1000, key_id="key-b",
                    public_key=td.private_key("key-b").public_key())
    seg = _open(tmp_path, up, ring_b)
    assert seg.manifest.encryption.aad == up.aad
    assert ring_b.unwrap(seg.manifest.encryption, "m") == up.data_key


@pytest.mark.parametrize("case", ["plain", "compressed+encrypted"])
def test_a_byte_range_reads_only_its_chunks(tmp_path, ring_b, case):
    opts = CASES[case]
    up = enc.upload(LOG, public_key=td.private_key("key-b").public_key(), **opts)
    up.write_to(tmp_path)
    store = CountingStore(str(tmp_path))
    seg = RemoteSegment.open(up.key("rsm-manifest"), store=store, key_ring=ring_b)
    cs = opts["chunk_size"]
    rnd = random.Random(7)
    ranges = [(0, 1), (999, 1001), (1000, 2000), (len(LOG) - 1, len(LOG)), (5, 5)]
    ranges += [tuple(sorted(rnd.sample(range(len(LOG) + 1), 2))) for _ in range(30)]
    starts = [0]
    for s in up.chunk_sizes:
        starts.append(starts[-1] + s)
    buffer = bytearray(b"old bytes")  # reused from range to range, as a task would
    for start, end in ranges:
        store.reads.clear()
        assert seg.read(start, end) == LOG[start:end], (start, end)
        wanted = list(range(start // cs, (end - 1) // cs + 1)) if end > start else []
        assert [c.id for c in seg.chunks(start, end)] == wanted
        assert store.reads == [(up.key("log"), starts[i], starts[i + 1]) for i in wanted]
        store.reads.clear()
        assert seg.read_into(buffer, start, end) == LOG[start:end], (start, end)
        assert store.reads == [(up.key("log"), starts[i], starts[i + 1]) for i in wanted]


def test_a_byte_range_decodes_as_the_segment_does(tmp_path, ring_b):
    up = enc.upload(LOG, chunk_size=1000, compression=True, key_id="key-b",
                    public_key=td.private_key("key-b").public_key(), indexes=td.indexes())
    seg = _open(tmp_path, up, ring_b)
    entries = kafkalog.read_offset_index(seg.index_bytes("offset"), base_offset=0).entries
    start = entries[0].position  # an entry start, as a Spark task's range would be
    want = kafkalog.decode(td.LOG, byte_range=(start, len(LOG)))
    got = kafkalog.decode(kafkalog.Slice(seg.read(start), start))
    assert got.records.num_rows == want.records.num_rows > 0
    assert got.records.equals(want.records) and got.batches.equals(want.batches)


@pytest.mark.parametrize("encrypted", [False, True])
def test_indexes_come_back_as_kafkas_files(tmp_path, ring_b, encrypted):
    up = enc.upload(LOG, chunk_size=1000, key_id="key-b" if encrypted else None,
                    public_key=td.private_key("key-b").public_key(),
                    indexes=td.indexes(with_txn=True), end_offset=12)
    seg = _open(tmp_path, up, ring_b)
    originals = td.indexes(with_txn=True)
    for name, data in originals.items():
        assert seg.index_bytes(name) == data, name
    folder = tmp_path / "partition"
    folder.mkdir()
    written = sorted(os.path.basename(p) for p in seg.write_indexes(str(folder)))
    assert written == ["00000000000000000000.index", "00000000000000000000.timeindex",
                       "00000000000000000000.txnindex", "00000000000000000013.snapshot",
                       "leader-epoch-checkpoint"]
    # the files read as a broker's do
    for name in ("00000000000000000000.index", "00000000000000000000.timeindex",
                 "00000000000000000013.snapshot", "leader-epoch-checkpoint"):
        assert (folder / name).read_bytes() == (td.DATA / name).read_bytes()
    txn = kafkalog.read_txn_index(str(folder / "00000000000000000000.txnindex"))
    assert [tuple(e) for e in txn.entries] == [(0, 7, 3, 5, 3)]


def test_a_segment_without_a_transaction_index(tmp_path):
    up = enc.upload(LOG, chunk_size=1000, indexes=td.indexes())
    seg = _open(tmp_path, up)
    assert json.loads(up.objects[up.key("rsm-manifest")])["segmentIndexes"]["transaction"] is None
    assert seg.index_bytes("transaction") is None
    assert seg.index_bytes("offset") == td.indexes()["offset"]


def test_an_old_manifest_names_the_snapshot_after_the_start_offset(tmp_path):
    up = enc.upload(LOG, chunk_size=1000, indexes=td.indexes(), with_metadata=False)
    seg = _open(tmp_path, up)
    assert seg.manifest.segment_metadata is None and seg.manifest.end_offset is None
    assert seg.index_file_name("producerSnapshot") == "00000000000000000000.snapshot"
    assert seg.read() == LOG


# ------------------------------------------------------------------ faults: one error each

def _encrypted(tmp_path, **kw):
    opts = dict(chunk_size=1000, compression=True, key_id="key-b",
                public_key=td.private_key("key-b").public_key(), indexes=td.indexes())
    opts.update(kw)
    up = enc.upload(LOG, **opts)
    return up, _put(tmp_path, up)


def _error(fn, kind):
    with pytest.raises(kind) as info:
        fn()
    message = str(info.value)
    assert "\n" not in message
    return info.value, message


@pytest.mark.parametrize("cut", ["one byte", "half", "whole"])
def test_a_short_chunk(tmp_path, ring_b, cut):
    """The .log object cut inside (or before) its last chunk."""
    up, manifest = _encrypted(tmp_path)
    log_path = tmp_path / up.key("log")
    data = log_path.read_bytes()
    last = len(up.chunk_sizes) - 1
    cut = {"one byte": 1, "half": up.chunk_sizes[-1] // 2, "whole": up.chunk_sizes[-1]}[cut]
    log_path.write_bytes(data[:-cut])
    seg = RemoteSegment.open(manifest, key_ring=ring_b)
    assert seg.read(0, 1000) == LOG[:1000]  # chunks before it still read
    err, msg = _error(seg.read, ChunkError)
    assert f"chunk {last} of {last + 1}" in msg and "short chunk" in msg
    assert str(log_path) in msg
    assert f"holds {up.chunk_sizes[-1] - cut} of its {up.chunk_sizes[-1]} bytes" in msg
    assert err.position == last * 1000


def test_bytes_after_the_last_chunk(tmp_path):
    up = enc.upload(LOG, chunk_size=1000)
    manifest = _put(tmp_path, up)
    log_path = tmp_path / up.key("log")
    log_path.write_bytes(log_path.read_bytes() + b"\0")
    seg = RemoteSegment.open(manifest)
    assert seg.read() == LOG  # the chunks are whole...
    with open(tmp_path / "out", "wb") as out:  # ...but a copy of the segment says so
        _, msg = _error(lambda: seg.copy_to(out), ChunkError)
    assert f"holds bytes past the {len(LOG)} the manifest's chunks cover" in msg


def test_an_unknown_key_id(tmp_path, tmp_path_factory):
    _, manifest = _encrypted(tmp_path)
    ring = KeyRing.from_pem_files(td.key_files(tmp_path_factory.mktemp("a"), "key-a"))
    seg = RemoteSegment.open(manifest, key_ring=ring)  # the manifest reads without keys
    _, msg = _error(seg.read, KeyRingError)
    assert "key id 'key-b', which the key ring does not hold (it holds: key-a)" in msg
    assert manifest in msg


def test_a_wrong_key(tmp_path, tmp_path_factory):
    _, manifest = _encrypted(tmp_path)
    ring = KeyRing.from_pem_files(td.key_files(tmp_path_factory.mktemp("w"), "key-b",
                                               swap={"key-b": "key-a"}))
    seg = RemoteSegment.open(manifest, key_ring=ring)
    _, msg = _error(seg.read, KeyRingError)
    assert "private key 'key-b' does not unwrap the data key" in msg


def test_no_key_for_an_encrypted_segment(tmp_path):
    _, manifest = _encrypted(tmp_path)
    seg = RemoteSegment.open(manifest)
    _, msg = _error(lambda: seg.read(0, 10), KeyRingError)
    assert "encrypted with key id 'key-b': a private key is needed" in msg
    _, msg = _error(lambda: seg.index_bytes("offset"), KeyRingError)


@pytest.mark.parametrize("where", ["iv", "ciphertext", "tag"])
def test_a_flipped_byte_fails_its_chunk_only(tmp_path, ring_b, where):
    up, manifest = _encrypted(tmp_path)
    log_path = tmp_path / up.key("log")
    data = bytearray(log_path.read_bytes())
    chunk = 5
    start = sum(up.chunk_sizes[:chunk])
    at = {"iv": start + 3, "ciphertext": start + 12 + 40, "tag": start + up.chunk_sizes[chunk] - 2}
    data[at[where]] ^= 0x20
    log_path.write_bytes(bytes(data))
    seg = RemoteSegment.open(manifest, key_ring=ring_b)
    err, msg = _error(seg.read, ChunkError)
    assert f"chunk {chunk} of" in msg and "AES-GCM tag does not verify" in msg
    assert err.position == chunk * 1000
    assert seg.read(0, chunk * 1000) == LOG[:chunk * 1000]
    assert seg.read((chunk + 1) * 1000) == LOG[(chunk + 1) * 1000:]


def test_every_flipped_byte_is_an_error_never_other_bytes(tmp_path, ring_b):
    up, manifest = _encrypted(tmp_path)
    log_path = tmp_path / up.key("log")
    good = log_path.read_bytes()
    rnd = random.Random(3)
    for at in rnd.sample(range(len(good)), 120):
        bad = bytearray(good)
        bad[at] ^= 1 << rnd.randrange(8)
        log_path.write_bytes(bytes(bad))
        seg = RemoteSegment.open(manifest, key_ring=ring_b)
        with pytest.raises(ChunkError):
            seg.read()


def test_a_flipped_byte_without_encryption_is_caught_by_zstd_or_the_batch_crcs(tmp_path):
    """No checksum covers an unencrypted chunk (docs/tiered.md): zstd catches some damage
    (a ChunkError), the rest comes back as other bytes, which kafkalog's decoder then reports
    (the record batches' CRC-32C). Never another exception."""
    up = enc.upload(LOG, chunk_size=1000, compression=True)
    manifest = _put(tmp_path, up)
    log_path = tmp_path / up.key("log")
    good = log_path.read_bytes()
    rnd = random.Random(13)
    seen = {"chunk error": 0, "batch findings": 0, "same bytes": 0}
    for at in rnd.sample(range(len(good)), 150):
        bad = bytearray(good)
        bad[at] ^= 1 << rnd.randrange(8)
        log_path.write_bytes(bytes(bad))
        try:
            data = RemoteSegment.open(manifest).read()
        except ChunkError:
            seen["chunk error"] += 1
            continue
        if data == LOG:
            seen["same bytes"] += 1
        else:
            assert kafkalog.findings(data), at  # damage must not pass both layers
            seen["batch findings"] += 1
    assert seen["chunk error"] > 0 and seen["batch findings"] > 0, seen


def test_a_flipped_byte_in_an_encrypted_index(tmp_path, ring_b):
    up, manifest = _encrypted(tmp_path)
    path = tmp_path / up.key("indexes")
    data = bytearray(path.read_bytes())
    data[30] ^= 1  # inside the offset index, the first one
    path.write_bytes(bytes(data))
    seg = RemoteSegment.open(manifest, key_ring=ring_b)
    _, msg = _error(lambda: seg.index_bytes("offset"), ChunkError)
    assert "index offset" in msg and "AES-GCM tag does not verify" in msg
    assert seg.index_bytes("leaderEpoch") == td.indexes()["leaderEpoch"]


def test_a_damaged_compressed_chunk(tmp_path):
    up = enc.upload(LOG, chunk_size=1000, compression=True)
    manifest = _put(tmp_path, up)
    log_path = tmp_path / up.key("log")
    data = bytearray(log_path.read_bytes())
    data[5] ^= 0x0F  # the first frame's header: its content size
    log_path.write_bytes(bytes(data))
    seg = RemoteSegment.open(manifest)
    _, msg = _error(lambda: seg.read(0, 10), ChunkError)
    assert "chunk 0 of 14" in msg and "zstd" in msg


@pytest.mark.parametrize("frame, why", [
    (lambda p: zstandard.ZstdCompressor(write_content_size=False).compress(p),
     "zstd frame does not declare its content size"),
    (lambda p: enc.zstd_with_size(p) + b"\0\0", "contains 2 bytes of unused data"),
    (lambda p: enc.zstd_with_size(p + b"!"), "zstd frame declares 1001 bytes, the chunk has 1000"),
], ids=["no content size", "bytes after", "other size"])
def test_zstd_frames_the_plugin_does_not_write(tmp_path, frame, why):
    seg = _open(tmp_path, enc.upload(LOG, chunk_size=1000, compression=True, compress=frame))
    _, msg = _error(lambda: seg.read(0, 10), ChunkError)
    assert "chunk 0 of 14" in msg and why in msg


def test_a_chunk_of_another_size_than_the_manifest_says(tmp_path):
    up = enc.upload(LOG, chunk_size=1000)
    doc = json.loads(up.objects[up.key("rsm-manifest")])
    doc["chunkIndex"]["transformedChunkSize"] = 999  # the chunks are 1000 bytes
    up.objects[up.key("rsm-manifest")] = json.dumps(doc).encode()
    seg = _open(tmp_path, up)
    _, msg = _error(lambda: seg.read(1000, 1010), ChunkError)
    assert "chunk 1 of 14" in msg and "gives 999 bytes, not 1000" in msg


@pytest.mark.parametrize("missing", ["log", "indexes", "rsm-manifest"])
def test_a_missing_object(tmp_path, ring_b, missing):
    up, manifest = _encrypted(tmp_path)
    os.remove(tmp_path / up.key(missing))
    if missing == "rsm-manifest":
        _, msg = _error(lambda: RemoteSegment.open(manifest, key_ring=ring_b), RemoteObjectError)
    else:
        seg = RemoteSegment.open(manifest, key_ring=ring_b)
        read = seg.read if missing == "log" else (lambda: seg.index_bytes("timestamp"))
        _, msg = _error(read, RemoteObjectError)
    assert f"{tmp_path / up.key(missing)}: no such object" in msg


def test_a_range_outside_the_segment(tmp_path):
    seg = _open(tmp_path, enc.upload(LOG, chunk_size=1000))
    _, msg = _error(lambda: seg.read(10, len(LOG) + 1), SourceError)
    assert f"outside the segment's {len(LOG)} bytes" in msg


def _mutate(doc, path, value):
    *parents, last = path
    for p in parents:
        doc = doc[p]
    if value is _DELETE:
        del doc[last]
    else:
        doc[last] = value


_DELETE = object()
_SIZES_OF_TWO = base64.b64encode(enc.zstd_with_size(enc.encode_chunk_sizes([5, 6]))).decode()
MALFORMED = {
    "not json": (None, b"{not json", "not JSON"),
    "an array": (None, b"[1, 2]", "a JSON list, not a manifest object"),
    "version 2": (("version",), "2", "manifest version '2' (this reader knows 1)"),
    "no chunk index": (("chunkIndex",), _DELETE, "no chunkIndex"),
    "unknown field": (("segmentFormat",), "iceberg", "unknown fields segmentFormat"),
    "chunk index type": (("chunkIndex", "type"), "other", "chunkIndex.type is 'other'"),
    "chunk size 0": (("chunkIndex", "originalChunkSize"), 0, "originalChunkSize is 0"),
    "negative size": (("chunkIndex", "originalFileSize"), -1, "originalFileSize is -1"),
    "size as text": (("chunkIndex", "originalFileSize"), "13751", "originalFileSize is '13751'"),
    "sizes not base64": (("chunkIndex", "transformedChunks"), "%%%", "is not base64"),
    "sizes not zstd": (("chunkIndex", "transformedChunks"), "AAAA", "not a zstd frame"),
    "sizes then more": (("chunkIndex", "transformedChunks"), base64.b64encode(
        enc.zstd_with_size(enc.encode_chunk_sizes([1] * 14)) + b"\0").decode(), "unused data"),
    "too few sizes": (("chunkIndex", "transformedChunks"), _SIZES_OF_TWO,
                      "lists 2 chunks; 13751 bytes in chunks of 1000 make 14"),
    "index gap": (("segmentIndexes", "timestamp", "position"), 99,
                  "segmentIndexes.timestamp starts at 99"),
    "no offset index": (("segmentIndexes", "offset"), None, "segmentIndexes.offset is missing"),
    "compression text": (("compression",), "yes", "compression is 'yes'"),
    "data key no colon": (("encryption", "dataKey"), "key-b", "is not '<keyId>:<base64>'"),
    "data key two colons": (("encryption", "dataKey"), "a:b:c", "is not '<keyId>:<base64>'"),
    "blank key id": (("encryption", "dataKey"), " :AAAA", "has a blank key id"),
    "aad not base64": (("encryption", "aad"), "!!", "encryption.aad is not base64"),
    "encryption lacks aad": (("encryption", "aad"), _DELETE, "encryption is not"),
}


@pytest.mark.parametrize("case", MALFORMED)
def test_a_malformed_manifest(tmp_path, case):
    path, value, expected = MALFORMED[case]
    up = enc.upload(LOG, chunk_size=1000, compression=True, key_id="key-b",
                    public_key=td.private_key("key-b").public_key())
    key = up.key("rsm-manifest")
    if path is None:
        up.objects[key] = value
    else:
        doc = json.loads(up.objects[key])
        _mutate(doc, path, value)
        up.objects[key] = json.dumps(doc).encode()
    manifest = _put(tmp_path, up)
    err, msg = _error(lambda: RemoteSegment.open(manifest), ManifestError)
    assert msg.startswith(f"{manifest}: ") and expected in msg, msg
    assert isinstance(err, KafkaLogError) and isinstance(err, ValueError)


def test_any_damage_to_a_manifest_is_a_manifest_error_or_still_reads(tmp_path, ring_b):
    """Truncations and bit flips of a real manifest (variable index, encrypted): each opens
    and reads the segment back, or fails with a KafkaLogError, never another exception."""
    up = enc.upload(LOG, chunk_size=1000, compression=True, key_id="key-b",
                    public_key=td.private_key("key-b").public_key(), indexes=td.indexes())
    manifest = _put(tmp_path, up)
    good = up.objects[up.key("rsm-manifest")]
    rnd = random.Random(11)
    damaged = [good[:n] for n in range(0, len(good), 7)]
    for _ in range(300):
        bad = bytearray(good)
        bad[rnd.randrange(len(bad))] ^= 1 << rnd.randrange(8)
        damaged.append(bytes(bad))
    damaged.append(b"[" * 100_000)  # deeper than json's recursion limit
    outcomes = set()
    for data in damaged:
        with open(manifest, "wb") as f:
            f.write(data)
        try:
            got = RemoteSegment.open(manifest, key_ring=ring_b).read()
        except KafkaLogError as err:
            outcomes.add(type(err).__name__)
            assert "\n" not in str(err)
            continue
        assert got == LOG  # a flip JSON does not see (white space, a key's case is refused)
        outcomes.add("read")
    assert {"ManifestError", "KeyRingError", "ChunkError"} <= outcomes


# ------------------------------------------------------------------ the parts, one by one

@pytest.mark.parametrize("values", [[], [7], [1000, 1000], [1000, 1300, 999, 7],
                                    [70_000, 5, 300, 1], [1 << 25, 3, 9], [2**31 - 1, 0, 5]],
                         ids=lambda v: f"{len(v)}-values")
def test_chunk_sizes_codec_reads_the_plugins_encoding(values):
    assert decode_chunk_sizes(enc.encode_chunk_sizes(values)) == values


@pytest.mark.parametrize("data, why", [
    (b"\0\0\0", "too few for the count"),
    (b"\xff\xff\xff\xff", "negative count"),
    (b"\0\0\0\x01\0\0", "one value declared"),
    (b"\0\0\0\x02\0\0\0\0\x05" + bytes(9), "5 bytes per value"),
    (enc.encode_chunk_sizes([1, 2, 3]) + b"\0", "1 bytes left over"),
    (enc.encode_chunk_sizes([1, 2, 3])[:-1], "need 15 bytes, have 14"),
], ids=["no count", "negative", "no value", "width 5", "left over", "cut"])
def test_chunk_sizes_codec_refuses_what_the_plugin_does_not_write(data, why):
    with pytest.raises(ValueError, match=why):
        decode_chunk_sizes(data)


def test_oaep_decoding_agrees_with_cryptography_and_the_encoder_with_it():
    """The OAEP code is the same for every hash; SHA-512 is one OpenSSL does, so both sides
    of the SHA3-512 wrap are checked against an independent implementation."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding

    key = td.private_key("key-a")
    oaep = padding.OAEP(mgf=padding.MGF1(hashes.SHA512()), algorithm=hashes.SHA512(), label=None)
    rnd = random.Random(5)
    for n in (0, 1, 32, 126):
        message = rnd.randbytes(n)
        theirs = key.public_key().encrypt(message, oaep)
        assert oaep_decode(_rsa_raw(key, theirs), "sha512") == message
        ours = enc.rsa_oaep_encrypt(key.public_key(), message, rnd, "sha512")
        assert key.decrypt(ours, oaep) == message
    with pytest.raises(ValueError, match="OAEP decoding error"):
        oaep_decode(_rsa_raw(key, theirs), "sha3_512")  # the wrong hash never passes


def test_oaep_decoding_checks_every_part_of_the_encoding():
    rnd = random.Random(9)
    k = 256
    message = rnd.randbytes(32)
    assert oaep_decode(enc.oaep_encode(message, k, rnd)) == message
    bad = {"label": enc.oaep_encode(message, k, rnd, label=b"x"),
           "first byte": b"\x01" + enc.oaep_encode(message, k, rnd)[1:],
           "separator": enc.oaep_encode(b"\x02" + message, k, rnd, separator=b"\x00")}
    for name, em in bad.items():
        with pytest.raises(ValueError, match="OAEP decoding error"):
            oaep_decode(em)
    with pytest.raises(ValueError, match="too small for OAEP"):
        oaep_decode(bytes(129))


def test_key_files(tmp_path):
    (tmp_path / "broken.pem").write_text("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
    _, msg = _error(lambda: KeyRing.from_pem_files([tmp_path / "broken.pem"]), KeyRingError)
    assert "broken.pem: not a PEM private key" in msg
    _, msg = _error(lambda: KeyRing.from_pem_files([tmp_path / "nope.pem"]), KeyRingError)
    assert "cannot read private key" in msg and "nope.pem" in msg
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    ec_key = ec.generate_private_key(ec.SECP256R1())
    (tmp_path / "ec.pem").write_bytes(ec_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    _, msg = _error(lambda: KeyRing.from_pem_files([tmp_path / "ec.pem"]), KeyRingError)
    assert "not an RSA private key" in msg
    one, two = td.key_files(tmp_path, "key-a"), tmp_path / "sub"
    two.mkdir()
    again = td.key_files(two, "key-a")
    _, msg = _error(lambda: KeyRing.from_pem_files(one + again), KeyRingError)
    assert "a second private key with id 'key-a'" in msg


def test_keys_follow_the_plugins_rules_and_custom_metadata():
    up = enc.upload(LOG, chunk_size=1000, prefix="p/")
    main = up.main
    assert up.key("log") == object_key("p/", main, ".log")
    moved = object_key("new/", main, ".log", {"object_prefix": "old/"})
    assert moved == f"old/{main}.log"
    assert object_key("p/", main, ".indexes", {"object_key": "x/y"}) == "p/x/y.indexes"


def test_a_listing_groups_objects_into_segments():
    listing = [
        ("tiered/orders-lZ6vvmajTWKDBUTV6SQAtQ/3/00000000000000000000-adh9f8BMS4anaUnD8KWfWg.log", 10),
        ("tiered/orders-lZ6vvmajTWKDBUTV6SQAtQ/3/00000000000000000000-adh9f8BMS4anaUnD8KWfWg.indexes", 2),
        ("tiered/orders-lZ6vvmajTWKDBUTV6SQAtQ/3/00000000000000000000-adh9f8BMS4anaUnD8KWfWg.rsm-manifest", 3),
        ("tiered/my-topic-lZ6vvmajTWKDBUTV6SQAtQ/0/00000000000000000100-Bdh9f8BMS4anaUnD8KWfWg.log", 5),
        # mgoblin/minio-rsm: a plain partition folder under the bucket's root
        ("/clicks-1/00000000000000000042.log", 7),
        ("/clicks-1/00000000000000000042.index", 8),
        ("/clicks-1/00000000000000000042-leader-epoch-checkpoint", 9),
        ("/clicks-1/00000000000000000099.index", 1),  # no .log: not a segment
        ("README", 1),
    ]
    segments, other = group_segments(listing)
    assert other == 2
    got = [(s.layout, s.topic, s.partition, s.start_offset, s.topic_id, s.segment_id,
            sorted(s.objects), s.complete) for s in segments]
    assert got == [
        ("plain", "clicks", 1, 42, None, None,
         ["-leader-epoch-checkpoint", ".index", ".log"], True),
        ("aiven", "my-topic", 0, 100, "lZ6vvmajTWKDBUTV6SQAtQ", "Bdh9f8BMS4anaUnD8KWfWg",
         [".log"], False),
        ("aiven", "orders", 3, 0, "lZ6vvmajTWKDBUTV6SQAtQ", "adh9f8BMS4anaUnD8KWfWg",
         [".indexes", ".log", ".rsm-manifest"], True),
    ]
    assert segments[0].base == "/clicks-1/00000000000000000042"
