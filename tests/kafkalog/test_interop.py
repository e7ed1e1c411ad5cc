"""Interop evidence: kafkalog against an independent encoder/decoder (kafka-python).

Three directions, every magic x codec each magic supports:

1. kafka-python's builders write, kafkalog reads: kafkalog must decode what
   kafka-python's own ``MemoryRecords`` decodes, record for record and field
   for field, and what was put in.
2. ``kafkalog.writer`` writes, kafka-python reads: same comparison the other
   way round, including LogAppendTime, idempotent and transactional producers,
   control markers, compaction gaps, empty batches and delete horizons.
3. ``SegmentWriter`` writes a partition directory: kafkalog (and kafka-python)
   read the ``.log`` back, and the ``.index``/``.timeindex``/``.txnindex``
   agree with the log and with Kafka's indexing rule worked out by hand.

kafka-python is only a test oracle here; nothing of it is used by kafkalog.
"""

from __future__ import annotations

import os
import struct

import kafka.codec
import pytest
import xxhash
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

import kafkalog
from kafkalog.indexes import AbortedTxn, IndexEntry, TimeIndexEntry
from kafkalog.model import Control
from kafkalog.writer import (
    DEFAULT_TIMESTAMP,
    SegmentWriter,
    WriteRecord,
    encode_control_batch,
    encode_legacy_entry,
    encode_v2_batch,
)

from tests.segments import CORPUS, read_corpus

CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
V2_CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
LEGACY_CODECS = ["none", "gzip", "snappy", "lz4"]
TS_TYPES = {None: None, 0: "CreateTime", 1: "LogAppendTime"}

T0 = 1_650_000_000_000
BASE = 1_000_000

#: (key, value, headers, timestamp): null and empty keys/values/header values,
#: a non-ASCII header key, a negative timestamp delta, a 2**33 ms delta (a
#: 5-byte varlong), a 300-byte key (2-byte varint length). Values repeat so
#: that every codec shrinks the batch: kafka-python silently writes
#: uncompressed when compression does not pay, and the tests check it did not.
SAMPLE = [
    (b"key-0", b"value " * 40, [("h1", b"a"), ("h2", None)], T0),
    (None, b"value " * 40, [], T0 + 5),
    (b"", None, [("", b"")], T0 - 3),
    (b"k" * 300, b"", [("\u00fcn\u00efcode", b"\x00\xff")], T0 + 2**33),
    (b"key-4", b"value " * 40, [], T0 + 1),
]


def write_records(sample=SAMPLE, deltas=None):
    deltas = deltas or range(len(sample))
    return [
        WriteRecord(key, value, tuple(headers), ts, delta)
        for (key, value, headers, ts), delta in zip(sample, deltas)
    ]


# ------------------------------------------------------------------ helpers
def kl_records(batches):
    """kafkalog records as plain tuples (Header NamedTuples compare as tuples)."""
    return [
        (r.offset, r.timestamp, r.key, r.value, tuple(r.headers))
        for b in batches
        for r in b.records
    ]


def kp_decode(buf):
    """kafka-python's view: [(batch, crc_ok, records)], CRC checked before iterating."""
    out = []
    for batch in MemoryRecords(bytes(buf)):
        crc_ok = batch.validate_crc()
        out.append((batch, crc_ok, list(batch)))
    return out


def kp_records(decoded):
    return [
        (r.offset, r.timestamp, r.key, r.value, tuple(tuple(h) for h in r.headers))
        for _, _, records in decoded
        for r in records
    ]


def expected(sample, base, deltas=None, *, timestamps=True, log_append_time=None, headers=True):
    deltas = deltas or range(len(sample))
    out = []
    for (key, value, hs, ts), d in zip(sample, deltas):
        if not timestamps:
            ts = None
        elif log_append_time is not None:
            ts = log_append_time
        out.append((base + d, ts, key, value, tuple(hs) if headers else ()))
    return out


def decode_clean(buf):
    """kafkalog's batches of ``buf``, asserting it found nothing wrong."""
    assert kafkalog.findings(buf) == []
    batches = list(kafkalog.iter_batches(buf))
    assert all(b.crc_valid is True and b.decoded for b in batches)
    return batches


def kp_v2_batch(codec, sample, deltas, *, base_offset, leader_epoch, producer_id=-1,
                producer_epoch=-1, base_sequence=-1, transactional=False):
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=CODEC_IDS[codec], is_transactional=transactional,
        producer_id=producer_id, producer_epoch=producer_epoch,
        base_sequence=base_sequence, batch_size=1 << 20,
    )
    for delta, (key, value, headers, ts) in zip(deltas, sample):
        assert builder.append(delta, timestamp=ts, key=key, value=value, headers=headers)
    buf = builder.build()
    # The broker assigns baseOffset (byte 0) and partitionLeaderEpoch (byte 12),
    # both outside the CRC, exactly like this.
    struct.pack_into(">q", buf, 0, base_offset)
    struct.pack_into(">i", buf, 12, leader_epoch)
    return bytes(buf)


def kp_legacy_entries(magic, codec, sample, base):
    """What a 0.8-0.10 broker stores for ``sample`` produced at offset ``base``."""
    builder = LegacyRecordBatchBuilder(magic, CODEC_IDS[codec], batch_size=1 << 20)
    if codec == "none":  # a message set of plain messages, absolute offsets
        for i, (key, value, _, ts) in enumerate(sample):
            assert builder.append(base + i, timestamp=ts, key=key, value=value)
        return bytes(builder.build())
    first = base if magic == 0 else 0  # inner offsets: absolute (v0), relative (v1)
    for i, (key, value, _, ts) in enumerate(sample):
        assert builder.append(first + i, timestamp=ts, key=key, value=value)
    buf = builder.build()
    # The wrapper's offset is the last inner offset (outside the CRC).
    struct.pack_into(">q", buf, 0, base + len(sample) - 1)
    return bytes(buf)


def wrapper_value(entry, magic):
    """The value of a v0/v1 wrapper message, read by hand from the wire grammar."""
    at = 12 + 4 + 1 + 1 + (8 if magic == 1 else 0)
    (key_len,) = struct.unpack_from(">i", entry, at)
    assert key_len == -1
    (value_len,) = struct.unpack_from(">i", entry, at + 4)
    return entry[at + 8 : at + 8 + value_len]


def lz4_header_checksum(frame):
    """``"kafka-v0"`` or ``"standard"``: which bytes the frame's HC byte hashes (xxhash lib)."""
    assert frame[:4] == b"\x04\x22\x4d\x18"
    flg = frame[4]
    hc_at = 6 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)
    standard = (xxhash.xxh32_intdigest(frame[4:hc_at]) >> 8) & 0xFF
    broken = (xxhash.xxh32_intdigest(frame[0:hc_at]) >> 8) & 0xFF
    assert standard != broken  # else this frame cannot tell them apart
    if frame[hc_at] == standard:
        return "standard"
    if frame[hc_at] == broken:
        return "kafka-v0"
    return "neither"


# ============================================ 1. kafka-python writes, kafkalog reads
PRODUCERS = {
    "plain": dict(deltas=[0, 1, 2, 3, 4]),
    "idempotent-sequence-wraps": dict(
        deltas=[0, 1, 2, 3, 4], producer_id=4242, producer_epoch=7, base_sequence=2**31 - 3),
    "transactional-compacted": dict(
        deltas=[0, 2, 3, 7, 9], producer_id=99, producer_epoch=0, base_sequence=0,
        transactional=True),
}


@pytest.mark.parametrize("producer", list(PRODUCERS))
@pytest.mark.parametrize("codec", V2_CODECS)
def test_kafka_python_v2_batch_reads_the_same(codec, producer):
    options = dict(PRODUCERS[producer])
    deltas = options.pop("deltas")
    buf = kp_v2_batch(codec, SAMPLE, deltas, base_offset=BASE, leader_epoch=17, **options)

    (kb, kp_crc_ok, kp_recs), = kp_decode(buf)
    (b,) = decode_clean(buf)
    want = expected(SAMPLE, BASE, deltas)
    assert kp_crc_ok is True
    assert kp_records([(kb, True, kp_recs)]) == want
    assert kl_records([b]) == want

    producer_id = options.get("producer_id", -1)
    base_sequence = options.get("base_sequence", -1)
    assert (
        b.magic, b.base_offset, b.last_offset, b.last_offset_delta, b.record_count,
        b.partition_leader_epoch, b.crc, b.attributes, b.compression, b.timestamp_type,
        b.first_timestamp, b.max_timestamp, b.producer_id, b.producer_epoch,
        b.base_sequence, b.last_sequence, b.is_transactional, b.is_control,
        b.has_delete_horizon, b.size,
    ) == (
        kb.magic, kb.base_offset, kb.last_offset, kb.last_offset_delta, kb.records_count,
        kb.leader_epoch, kb.crc, kb.attributes, codec, TS_TYPES[kb.timestamp_type],
        kb.first_timestamp, kb.max_timestamp, kb.producer_id, kb.producer_epoch,
        kb.base_sequence, kb.last_sequence, kb.is_transactional, kb.is_control_batch,
        False, kb.size_in_bytes,
    )
    # ... and what kafka-python agrees on is what was put in.
    assert (b.base_offset, b.last_offset, b.first_timestamp, b.max_timestamp) == (
        BASE, BASE + deltas[-1], T0, T0 + 2**33)
    assert (b.producer_id, b.base_sequence, b.is_transactional) == (
        producer_id, base_sequence, options.get("transactional", False))
    if producer == "idempotent-sequence-wraps":
        assert b.last_sequence == 1  # 2**31-3 + 4 wraps past 2**31-1 to 0, 1


@pytest.mark.parametrize("codec", LEGACY_CODECS)
@pytest.mark.parametrize("magic", [0, 1])
def test_kafka_python_legacy_messages_read_the_same(magic, codec):
    buf = kp_legacy_entries(magic, codec, SAMPLE, BASE)

    kp = kp_decode(buf)
    batches = decode_clean(buf)
    want = expected(SAMPLE, BASE, timestamps=magic == 1, headers=False)
    assert kp_records(kp) == want
    assert kl_records(batches) == want

    assert len(batches) == len(kp) == (len(SAMPLE) if codec == "none" else 1)
    for b, (kb, kp_crc_ok, recs) in zip(batches, kp):
        assert kp_crc_ok is True
        assert all(r.validate_crc() for r in recs)  # inner CRCs too
        assert (b.magic, b.last_offset, b.compression, b.timestamp_type, b.size) == (
            kb.magic, kb.base_offset, codec, TS_TYPES[kb.timestamp_type], kb.size_in_bytes)
        assert (b.base_offset, b.record_count) == (recs[0].offset, len(recs))
        assert (b.producer_id, b.is_transactional, b.is_control) == (None, False, False)
    if codec == "lz4":
        # kafka-python writes the magic-0 frame with Kafka 0.8/0.9's wrong
        # header checksum: kafkalog had to repair it to get here.
        want_kind = "kafka-v0" if magic == 0 else "standard"
        assert lz4_header_checksum(wrapper_value(buf, magic)) == want_kind


def test_kafka_python_mixed_magics_in_one_segment():
    """A partition upgraded from v0 to v1 to v2 holds all three, dispatched per entry."""
    parts = [
        kp_legacy_entries(0, "gzip", SAMPLE[:2], 0),
        kp_legacy_entries(0, "none", SAMPLE[2:3], 2),
        kp_legacy_entries(1, "lz4", SAMPLE[:3], 3),
        kp_legacy_entries(1, "none", SAMPLE[3:4], 6),
        kp_v2_batch("zstd", SAMPLE, range(5), base_offset=7, leader_epoch=1),
        kp_v2_batch("none", SAMPLE[:1], [0], base_offset=12, leader_epoch=2),
    ]
    buf = b"".join(parts)
    batches = decode_clean(buf)
    assert kl_records(batches) == kp_records(kp_decode(buf))
    assert [(b.magic, b.base_offset, b.last_offset) for b in batches] == [
        (0, 0, 1), (0, 2, 2), (1, 3, 5), (1, 6, 6), (2, 7, 11), (2, 12, 12)]
    assert [b.position for b in batches] == [sum(map(len, parts[:i])) for i in range(6)]


@pytest.mark.parametrize("magic", [0, 1, 2])
def test_uncompressed_encoding_is_byte_identical_to_kafka_python(magic):
    """Without a codec the encoding is fully determined: both encoders must agree."""
    if magic == 2:
        theirs = kp_v2_batch("none", SAMPLE, range(5), base_offset=BASE, leader_epoch=3,
                             producer_id=5, producer_epoch=1, base_sequence=40,
                             transactional=True)
        ours = encode_v2_batch(BASE, write_records(), partition_leader_epoch=3, producer_id=5,
                               producer_epoch=1, base_sequence=40, transactional=True)
    else:
        theirs = kp_legacy_entries(magic, "none", SAMPLE, BASE)
        ours = b"".join(
            encode_legacy_entry(BASE, [r], magic=magic)  # r.offset_delta is i
            for r in write_records()
        )
    assert ours == theirs


def test_writer_reproduces_real_broker_batches_byte_for_byte():
    """Every batch a real broker wrote (uncompressed v2: data, idempotent
    producers, KRaft metadata with a LeaderChange control batch) re-encodes to
    the identical bytes from its decoded fields: the writer is the broker's
    encoding, and kafkalog's decoding lost nothing."""
    count = 0
    for path in CORPUS:
        data = read_corpus(path)
        for b in kafkalog.iter_batches(data):
            assert b.timestamp_type == "CreateTime"  # else record deltas are not recoverable
            records = [
                WriteRecord(r.key, r.value, tuple(r.headers), r.timestamp, r.offset - b.base_offset)
                for r in b.records
            ]
            ours = encode_v2_batch(
                b.base_offset, records, codec=b.compression,
                base_timestamp=None if b.has_delete_horizon else b.first_timestamp,
                max_timestamp=b.max_timestamp, partition_leader_epoch=b.partition_leader_epoch,
                producer_id=b.producer_id, producer_epoch=b.producer_epoch,
                base_sequence=b.base_sequence, transactional=b.is_transactional,
                control=b.is_control, delete_horizon_ms=b.delete_horizon_ms,
                last_offset_delta=b.last_offset_delta,
            )
            assert ours == data[b.position : b.end], (path, b.position)
            count += 1
    assert count > 1000


# ============================================ 2. kafkalog writes, kafka-python reads
LAT = T0 + 777
HORIZON = T0 + 86_400_000
V2_SCENARIOS = {
    "plain": dict(),
    "idempotent": dict(producer_id=7, producer_epoch=3, base_sequence=2**31 - 2),
    "transactional": dict(producer_id=8, producer_epoch=1, base_sequence=0, transactional=True,
                          partition_leader_epoch=12),
    "log-append-time": dict(timestamp_type="LogAppendTime", log_append_time=LAT),
    "compacted": dict(deltas=[0, 3, 4, 8, 11], last_offset_delta=15),
    "delete-horizon": dict(delete_horizon_ms=HORIZON, deltas=[0, 1, 5, 6, 9]),
}


@pytest.mark.parametrize("scenario", list(V2_SCENARIOS))
@pytest.mark.parametrize("codec", V2_CODECS)
def test_writer_v2_batch_read_by_kafka_python(codec, scenario):
    options = dict(V2_SCENARIOS[scenario])
    deltas = options.pop("deltas", [0, 1, 2, 3, 4])
    buf = encode_v2_batch(BASE, write_records(deltas=deltas), codec=codec, **options)

    (kb, kp_crc_ok, recs), = kp_decode(buf)
    want = expected(SAMPLE, BASE, deltas, log_append_time=options.get("log_append_time"))
    assert kp_crc_ok is True
    assert kp_records([(kb, True, recs)]) == want
    (b,) = decode_clean(buf)
    assert kl_records([b]) == want

    last_delta = options.get("last_offset_delta", deltas[-1])
    lat = scenario == "log-append-time"
    assert (
        kb.base_offset, kb.last_offset, kb.records_count, kb.compression_type,
        kb.timestamp_type, kb.first_timestamp, kb.max_timestamp, kb.leader_epoch,
        kb.producer_id, kb.producer_epoch, kb.base_sequence, kb.is_transactional,
        kb.is_control_batch, bool(kb.attributes & 0x40), kb.size_in_bytes,
    ) == (
        BASE, BASE + last_delta, 5, CODEC_IDS[codec],
        1 if lat else 0, HORIZON if scenario == "delete-horizon" else T0,
        LAT if lat else T0 + 2**33, options.get("partition_leader_epoch", 0),
        options.get("producer_id", -1), options.get("producer_epoch", -1),
        options.get("base_sequence", -1), options.get("transactional", False),
        False, scenario == "delete-horizon", len(buf),
    )
    assert (b.compression, b.last_offset, b.last_sequence, b.delete_horizon_ms) == (
        codec, kb.last_offset, kb.last_sequence,
        HORIZON if scenario == "delete-horizon" else None)
    if codec == "snappy":  # the Java client's framing, not raw snappy
        assert buf[61:69] == b"\x82SNAPPY\x00"


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
def test_writer_transaction_and_marker_read_by_kafka_python(commit):
    data = encode_v2_batch(50, write_records(), codec="lz4", producer_id=31, producer_epoch=4,
                           base_sequence=0, transactional=True)
    marker = encode_control_batch(55, commit=commit, producer_id=31, producer_epoch=4,
                                  coordinator_epoch=9, timestamp=T0 + 60_000,
                                  partition_leader_epoch=6)
    buf = data + marker
    (kb_data, ok1, recs), (kb, ok2, (control,)) = kp_decode(buf)
    assert (ok1, ok2) == (True, True)
    assert kp_records([(kb_data, ok1, recs)]) == expected(SAMPLE, 50)
    assert (kb_data.is_transactional, kb_data.is_control_batch) == (True, False)
    assert (
        kb.base_offset, kb.last_offset, kb.is_transactional, kb.is_control_batch,
        kb.producer_id, kb.producer_epoch, kb.base_sequence, kb.leader_epoch,
        kb.first_timestamp, kb.max_timestamp,
    ) == (55, 55, True, True, 31, 4, -1, 6, T0 + 60_000, T0 + 60_000)
    assert (control.offset, control.version, control.type, control.commit, control.abort) == (
        55, 0, 1 if commit else 0, commit, not commit)
    assert control.key == struct.pack(">hh", 0, 1 if commit else 0)
    assert control.value == struct.pack(">hi", 0, 9)
    assert control.headers == []

    batches = decode_clean(buf)
    assert kl_records(batches[:1]) == expected(SAMPLE, 50)
    (rec,) = batches[1].records
    assert rec.control == Control(1 if commit else 0, "COMMIT" if commit else "ABORT", 0, 9)
    assert (batches[1].is_control, batches[1].is_transactional, rec.offset, rec.timestamp) == (
        True, True, 55, T0 + 60_000)


def test_writer_empty_batch_read_by_kafka_python():
    """A batch compaction emptied keeps its producer state and offset range."""
    buf = encode_v2_batch(100, [], last_offset_delta=4, producer_id=5, producer_epoch=0,
                          base_sequence=10)
    (kb, ok, recs), = kp_decode(buf)
    assert (ok, recs, kb.records_count, kb.base_offset, kb.last_offset, kb.last_sequence,
            kb.first_timestamp, kb.max_timestamp) == (True, [], 0, 100, 104, 14, -1, -1)
    (b,) = decode_clean(buf)
    assert (b.records, b.record_count, b.base_offset, b.last_offset, b.last_sequence) == (
        (), 0, 100, 104, 14)


LEGACY_CASES = [(0, "CreateTime")] + [(1, "CreateTime"), (1, "LogAppendTime")]


@pytest.mark.parametrize("codec", LEGACY_CODECS)
@pytest.mark.parametrize(("magic", "timestamp_type"), LEGACY_CASES)
def test_writer_legacy_entry_read_by_kafka_python(magic, timestamp_type, codec):
    lat = LAT if timestamp_type == "LogAppendTime" else None
    if codec == "none":  # one message per record, one entry each
        deltas = [0, 1, 2, 3, 4]
        buf = b"".join(
            encode_legacy_entry(BASE, [r], magic=magic, timestamp_type=timestamp_type,
                                log_append_time=lat)  # at BASE + r.offset_delta
            for r in write_records()
        )
    else:  # one wrapper; offset gaps as compaction leaves them
        deltas = [0, 1, 3, 4, 6]
        buf = encode_legacy_entry(BASE, write_records(deltas=deltas), magic=magic, codec=codec,
                                  timestamp_type=timestamp_type, log_append_time=lat)

    kp = kp_decode(buf)
    want = expected(SAMPLE, BASE, deltas, timestamps=magic == 1, log_append_time=lat,
                    headers=False)
    assert kp_records(kp) == want
    batches = decode_clean(buf)
    assert kl_records(batches) == want
    for b, (kb, ok, recs) in zip(batches, kp, strict=True):
        assert ok is True and all(r.validate_crc() for r in recs)
        assert (kb.magic, kb.compression_type, TS_TYPES[kb.timestamp_type]) == (
            magic, CODEC_IDS[codec], None if magic == 0 else timestamp_type)
        assert (kb.base_offset, b.last_offset) == (recs[-1].offset, recs[-1].offset)
    if codec != "none" and magic == 1:  # the wrapper's timestamp
        assert batches[0].max_timestamp == (lat or T0 + 2**33)
    if codec != "none":
        # Inside the wrapper, read by hand after kafka-python's codecs: inner
        # offsets absolute (v0) or relative (v1), uncompressed, own timestamps.
        inner = kp_decompress(codec, magic, wrapper_value(buf, magic))
        assert inner_messages(inner, magic) == [
            (BASE + d if magic == 0 else d, magic, 0, None if magic == 0 else ts)
            for d, (_, _, _, ts) in zip(deltas, SAMPLE)
        ]
    if codec == "lz4":
        assert lz4_header_checksum(wrapper_value(buf, magic)) == (
            "kafka-v0" if magic == 0 else "standard")


def kp_decompress(codec, magic, payload):
    if codec == "gzip":
        return kafka.codec.gzip_decode(payload)
    if codec == "snappy":
        return kafka.codec.snappy_decode(payload)
    if magic == 0:
        return kafka.codec.lz4_decode_old_kafka(payload)
    return kafka.codec.lz4_decode(payload)


def inner_messages(data, magic):
    """(offset, magic, attributes, timestamp) of each message of a message set."""
    out, pos = [], 0
    while pos < len(data):
        offset, size, _crc, m, attributes = struct.unpack_from(">qiIbb", data, pos)
        ts = struct.unpack_from(">q", data, pos + 18)[0] if magic == 1 else None
        out.append((offset, m, attributes, ts))
        pos += 12 + size
    assert pos == len(data)
    return out


def test_writer_rejects_what_kafka_cannot_hold():
    with pytest.raises(ValueError):
        encode_v2_batch(0, [])  # an empty batch needs last_offset_delta
    with pytest.raises(ValueError):
        encode_v2_batch(0, write_records(), timestamp_type="LogAppendTime")
    with pytest.raises(ValueError):
        encode_v2_batch(0, write_records(deltas=[0, 2, 2, 3, 4]))
    with pytest.raises(kafkalog.UnknownCodecError):
        encode_legacy_entry(0, write_records(), magic=1, codec="zstd")
    with pytest.raises(ValueError):
        encode_legacy_entry(0, write_records(), magic=1)  # uncompressed: one message
    with pytest.raises(ValueError):
        encode_legacy_entry(0, write_records()[:1], magic=0, timestamp_type="LogAppendTime",
                            log_append_time=LAT)


_bytes = st.none() | st.binary(max_size=40)
_record = st.builds(
    WriteRecord,
    key=_bytes,
    value=_bytes,
    headers=st.lists(st.tuples(st.text(max_size=8), _bytes), max_size=3).map(tuple),
    timestamp=st.none() | st.integers(0, 2**42),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=st.lists(_record, min_size=1, max_size=8),
       gaps=st.lists(st.integers(1, 1000), min_size=8, max_size=8),
       codec=st.sampled_from(V2_CODECS),
       base=st.integers(0, 2**62))
def test_writer_v2_agrees_with_kafka_python_on_arbitrary_records(records, gaps, codec, base):
    deltas = [sum(gaps[:i]) for i in range(len(records))]
    records = [r._replace(offset_delta=d) for r, d in zip(records, deltas)]
    buf = encode_v2_batch(base, records, codec=codec)
    want = [
        (base + d, DEFAULT_TIMESTAMP if r.timestamp is None else r.timestamp, r.key, r.value,
         r.headers)
        for r, d in zip(records, deltas)
    ]
    (kb, ok, recs), = kp_decode(buf)
    assert ok is True
    assert kp_records([(kb, ok, recs)]) == want
    assert kl_records(decode_clean(buf)) == want


# ================================================ 3. SegmentWriter round trip
def _files(directory, base):
    return {
        suffix: os.path.join(directory, f"{base:020d}{suffix}")
        for suffix in (".log", ".index", ".timeindex", ".txnindex")
    }


def kafka_index_rule(batches, base, interval):
    """Kafka 3.7+ LogSegment.append, restated for the test: expected index entries."""
    offsets, times = [], []
    since, max_ts, max_off, last_time = 0, -1, base, -1
    for b in batches:
        ts = -1 if b.max_timestamp is None else b.max_timestamp
        if ts > max_ts:
            max_ts, max_off = ts, b.last_offset
        if since > interval:
            offsets.append(IndexEntry(b.last_offset, b.position))
            if max_ts > last_time:
                times.append(TimeIndexEntry(max_ts, max_off))
                last_time = max_ts
            since = 0
        since += b.size
    closing = TimeIndexEntry(max_ts, max_off) if max_ts > last_time else None
    return offsets, times, closing


def test_segment_round_trip_mixed_magics_codecs_and_transactions(tmp_path):
    base = 5000
    want: list = []  # data records (offset, ts, key, value, headers)
    spans: list = []  # (magic, first, last) of every entry
    with SegmentWriter(tmp_path, base, index_interval_bytes=300) as w:
        for magic, codec in [(0, "none"), (0, "gzip"), (0, "lz4"), (1, "none"), (1, "snappy")]:
            first = w.next_offset
            assert w.append(write_records(SAMPLE[:3]), magic=magic, codec=codec) == (
                first, first + 2)
            want += expected(SAMPLE[:3], first, timestamps=magic == 1, headers=False)
            spans += ([(magic, first + i, first + i) for i in range(3)] if codec == "none"
                      else [(magic, first, first + 2)])
        first = w.next_offset
        w.append(write_records(SAMPLE[:2]), magic=1, codec="lz4",
                 timestamp_type="LogAppendTime", log_append_time=LAT)
        want += expected(SAMPLE[:2], first, log_append_time=LAT, headers=False)
        spans.append((1, first, first + 1))
        for codec in V2_CODECS:
            first = w.next_offset
            assert w.append(write_records(), codec=codec, partition_leader_epoch=3) == (
                first, first + 4)
            want += expected(SAMPLE, first)
            spans.append((2, first, first + 4))
        # two producers' transactions interleave; 10 aborts, 11 commits
        txn = {}
        for pid in (10, 11, 10):
            first = w.next_offset
            txn.setdefault(pid, first)
            w.append(write_records(SAMPLE[:2]), codec="gzip", producer_id=pid,
                     producer_epoch=0, base_sequence=0, transactional=True)
            want += expected(SAMPLE[:2], first)
            spans.append((2, first, first + 1))
        abort_at = w.append_marker(producer_id=10, producer_epoch=0, commit=False,
                                   coordinator_epoch=2, timestamp=T0 + 10)
        commit_at = w.append_marker(producer_id=11, producer_epoch=0, commit=True,
                                    timestamp=T0 + 11)
        spans += [(2, abort_at, abort_at), (2, commit_at, commit_at)]
        # compaction leftovers: a batch with gaps, an emptied batch, a delete horizon
        first = w.next_offset
        assert w.append(write_records(deltas=[1, 2, 4, 6, 7]), codec="zstd",
                        last_offset_delta=9) == (first, first + 9)
        want += expected(SAMPLE, first, [1, 2, 4, 6, 7])
        spans.append((2, first, first + 9))
        first = w.next_offset
        assert w.append([], last_offset_delta=2, producer_id=12, producer_epoch=0,
                        base_sequence=0) == (first, first + 2)
        spans.append((2, first, first + 2))
        first = w.next_offset
        w.append(write_records(), codec="snappy", delete_horizon_ms=HORIZON)
        want += expected(SAMPLE, first)
        spans.append((2, first, first + 4))
        end_offset, end_position = w.next_offset, w.position

    files = _files(tmp_path, base)
    log = files[".log"]
    assert w.path == log
    assert os.path.getsize(log) == end_position
    assert kafkalog.findings(log) == []
    batches = list(kafkalog.iter_batches(log))
    assert [(b.magic, b.base_offset, b.last_offset) for b in batches] == spans
    assert spans[0][1] == base and end_offset == spans[-1][2] + 1
    assert all(b.crc_valid for b in batches)
    data = [b for b in batches if not b.is_control]
    assert kl_records(data) == want
    assert [r.control.type for b in batches if b.is_control for r in b.records] == [
        "ABORT", "COMMIT"]
    # kafka-python reads the whole file the same way
    with open(log, "rb") as f:
        kp = kp_decode(f.read())
    assert all(ok for _, ok, _ in kp)
    assert kp_records([x for x in kp if not getattr(x[0], "is_control_batch", False)]) == want

    # indexes agree with the log and with Kafka's rule
    offset_index = kafkalog.read_offset_index(files[".index"])
    time_index = kafkalog.read_time_index(files[".timeindex"])
    assert kafkalog.verify_offset_index(offset_index, log) == []
    assert kafkalog.verify_time_index(time_index, log) == []
    offsets, times, closing = kafka_index_rule(batches, base, 300)
    assert len(offsets) >= 5
    assert offset_index.entries == tuple(offsets)
    assert time_index.entries == tuple(times + ([closing] if closing else []))
    # the largest timestamp, named by the *first* batch that reached it
    first_max = next(b for b in batches if b.max_timestamp == T0 + 2**33)
    assert (first_max.magic, first_max.compression) == (2, "none")
    assert time_index.entries[-1] == TimeIndexEntry(T0 + 2**33, first_max.last_offset)

    # producer 10's transaction spans producer 11's open one: LSO = 11's first offset
    txn_index = kafkalog.read_txn_index(files[".txnindex"])
    assert txn_index.entries == (AbortedTxn(0, 10, txn[10], abort_at, txn[11]),)
    assert txn_index.findings == ()
    assert kafkalog.verify_txn_index(txn_index, log) == []


def _one_record_batches(w, timestamps):
    """Batches of identical size: one record each, timestamp delta 0."""
    for ts in timestamps:
        w.append([WriteRecord(b"k", b"v" * 20, (), ts)])


STAMPS = [T0, T0 + 1, T0 + 2, T0 + 9, T0 + 3, T0 + 20]


@pytest.mark.parametrize("preallocate", [0, 1000])
def test_index_entries_follow_kafka_rule_by_hand(tmp_path, preallocate):
    size = len(encode_v2_batch(0, [WriteRecord(b"k", b"v" * 20, (), T0)]))
    b = 42
    with SegmentWriter(tmp_path, b, index_interval_bytes=size,
                       preallocate_bytes=preallocate) as w:
        _one_record_batches(w, STAMPS)
    files = _files(tmp_path, b)
    # An entry goes in when *more* than `size` bytes precede the batch since the
    # last entry: batches 2 and 4, never batch 0.
    offsets = (IndexEntry(b + 2, 2 * size), IndexEntry(b + 4, 4 * size))
    # Time entries: largest timestamp so far, and the last offset of its batch
    # (T0+9 lives in batch 3); a closed segment adds the final maximum.
    times = [TimeIndexEntry(T0 + 2, b + 2), TimeIndexEntry(T0 + 9, b + 3)]
    if preallocate:
        assert os.path.getsize(files[".index"]) == 1000
        assert os.path.getsize(files[".timeindex"]) == 996  # whole 12-byte entries
    else:
        times.append(TimeIndexEntry(T0 + 20, b + 5))
        assert os.path.getsize(files[".index"]) == 2 * 8
        assert os.path.getsize(files[".timeindex"]) == 3 * 12
    offset_index = kafkalog.read_offset_index(files[".index"])
    time_index = kafkalog.read_time_index(files[".timeindex"])
    assert (offset_index.base_offset, offset_index.entries) == (b, offsets)
    assert (time_index.base_offset, time_index.entries) == (b, tuple(times))
    assert kafkalog.verify_offset_index(offset_index, files[".log"]) == []
    assert kafkalog.verify_time_index(time_index, files[".log"]) == []
    assert not os.path.exists(files[".txnindex"])  # no aborted transaction
    with open(files[".index"], "rb") as f:  # big-endian, relative offsets
        assert f.read(16) == struct.pack(">iiii", 2, 2 * size, 4, 4 * size)


def test_segment_writer_raw_bytes_and_refusals(tmp_path):
    with SegmentWriter(tmp_path, 7) as w:
        assert w.append(write_records(SAMPLE[:1])) == (7, 7)
        raw = encode_v2_batch(100, write_records(SAMPLE[:1]))
        assert w.append_raw(raw, next_offset=101) == w.position - len(raw)
        assert w.next_offset == 101
        assert w.append(write_records(SAMPLE[:2]), magic=1) == (101, 102)
        w.append_raw(b"\x00" * 30)  # a preallocated tail, as a crash leaves it
    log = _files(tmp_path, 7)[".log"]
    assert [(b.base_offset, b.last_offset) for b in kafkalog.iter_batches(log)] == [
        (7, 7), (100, 100), (101, 101), (102, 102)]
    assert [(f.kind, f.bytes) for f in kafkalog.findings(log)] == [("truncated_tail", 30)]
    with pytest.raises(FileExistsError):  # never overwrites a segment
        SegmentWriter(tmp_path, 7)
    with pytest.raises(ValueError):
        w.append(write_records(SAMPLE[:1]))  # closed
    # a head the cleaner removed: the file keeps base 3, its first batch starts at 6
    with SegmentWriter(tmp_path / "head", 3) as w:
        w.skip_to(6)
        assert w.append(write_records(SAMPLE[:2])) == (6, 7)
        with pytest.raises(ValueError):
            w.skip_to(7)  # offsets only move forward
    assert [(b.base_offset, b.last_offset) for b in
            kafkalog.iter_batches(_files(tmp_path / "head", 3)[".log"])] == [(6, 7)]
