"""kafkalog.tiered.writer (the demo's tier): its objects read back through kafkalog.tiered to
the source segment's sha256 and indexes. That the reader follows the plugin is checked against
the tests' own encoder (tests/tiered_encoder.py, test_tiered.py); here the chunk-size lists
are also compared with that encoder's bytes."""

from __future__ import annotations

import hashlib
import io
import os
import random

import pytest

from kafkalog.tiered import KeyRing, RemoteSegment
from kafkalog.tiered.chunks import decode_chunk_sizes, encode_chunk_sizes
from kafkalog.tiered.writer import segment_objects
from tests import tiered_data as td
from tests.tiered_encoder import encode_chunk_sizes as independent_chunk_sizes

SEGMENT = dict(topic="orders", topic_id="lZ6vvmajTWKDBUTV6SQAtQ", partition=0, start_offset=0,
               end_offset=12, segment_id="adh9f8BMS4anaUnD8KWfWg")


@pytest.mark.parametrize("compression, encrypted, chunk_size", [
    (False, False, 100), (True, False, 64), (False, True, 100), (True, True, 37)])
def test_written_objects_read_back_to_the_source_segment(tmp_path, compression, encrypted,
                                                          chunk_size):
    log = td.log_bytes()
    key = td.private_key("key-b")
    objects = segment_objects(log, td.indexes(with_txn=True), prefix="tier/", **SEGMENT,
                              chunk_size=chunk_size, compression=compression,
                              key_id="key-b" if encrypted else None,
                              public_key=key.public_key() if encrypted else None,
                              random_bytes=random.Random(7).randbytes)
    for k, data in objects.items():
        (tmp_path / k).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / k).write_bytes(data)
    ring = KeyRing.from_pem_files(td.key_files(tmp_path, "key-a", "key-b")) if encrypted else None
    manifest = next(k for k in objects if k.endswith(".rsm-manifest"))
    seg = RemoteSegment.open(os.path.join(tmp_path, manifest), key_ring=ring)
    out = io.BytesIO()
    seg.copy_to(out)
    assert hashlib.sha256(out.getvalue()).hexdigest() == td.LOG_SHA256
    assert seg.manifest.chunk_index.count == -(-len(log) // chunk_size)
    for name, data in td.indexes(with_txn=True).items():
        assert seg.index_bytes(name) == data
    if encrypted:  # no plaintext chunk is stored
        assert log[:chunk_size] not in objects[manifest[:-len(".rsm-manifest")] + ".log"]


@pytest.mark.parametrize("sizes", [[], [5], [300, 300, 12], [70000, 3, 65541, 9], [1 << 30, 0, 1]])
def test_chunk_sizes_encode_as_the_plugins_codec(sizes):
    assert encode_chunk_sizes(sizes) == independent_chunk_sizes(sizes)
    assert decode_chunk_sizes(encode_chunk_sizes(sizes)) == sizes


def test_encryption_needs_a_key_id_and_its_key():
    with pytest.raises(ValueError, match="key id and its public key"):
        segment_objects(b"x", {}, prefix="", **SEGMENT, chunk_size=4, key_id="key-a")
