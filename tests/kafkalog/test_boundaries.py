"""Boundary tables: every edge of the format, each case saying what it holds.

Inputs are built by hand (``tests/segments.py``: struct + crc32c + zlib) or by
kafka-python's builders, never by ``kafkalog.writer``.
"""

from __future__ import annotations


import random

import pytest

import kafkalog
from kafkalog import Batch, Control, Finding, Header, Limits
from kafkalog import default_records as v2
from kafkalog import legacy_records as legacy
from kafkalog import log_reader

from tests import segments as s

T0 = 1_700_000_000_000


def scan(data, **options):
    items = list(kafkalog.scan(data, **options))
    return [i for i in items if isinstance(i, Batch)], [i for i in items if isinstance(i, Finding)]


def clean(data, **options) -> list[Batch]:
    """Batches of input that must decode without a single finding."""
    batches, found = scan(data, **options)
    assert found == []
    assert all(b.crc_valid and b.decoded for b in batches)
    return batches


# ------------------------------------------------------------------- varints
# (value, zigzag varint bytes as the spec writes them, widest reader that accepts it)
VARINTS = [
    (0, "00", 5),  # zero: one byte
    (-1, "01", 5),  # -1 (null length) zigzags to 1
    (1, "02", 5),  # +1 zigzags to 2
    (63, "7e", 5),  # largest positive one-byte value
    (-64, "7f", 5),  # most negative one-byte value
    (64, "8001", 5),  # first positive two-byte value
    (-65, "8101", 5),  # first negative two-byte value
    (8191, "fe7f", 5),  # largest positive two-byte value
    (-8192, "ff7f", 5),  # most negative two-byte value
    (8192, "808001", 5),  # first positive three-byte value
    (-8193, "818001", 5),  # first negative three-byte value
    (2**20 - 1, "feff7f", 5),  # largest positive three-byte value
    (2**20, "80808001", 5),  # first positive four-byte value
    (-(2**20) - 1, "81808001", 5),  # first negative four-byte value
    (2**27 - 1, "feffff7f", 5),  # largest positive four-byte value
    (2**27, "8080808001", 5),  # first positive five-byte value
    (2**31 - 1, "feffffff0f", 5),  # int32 max: the largest a varint may hold
    (-(2**31), "ffffffff0f", 5),  # int32 min
    (2**31, "8080808010", 10),  # int32 max + 1: only a varlong may hold it
    (2**34, "808080808001", 10),  # a six-byte varlong
    (2**62, "80808080808080808001", 10),  # ten-byte varlong
    (2**63 - 1, "feffffffffffffffff01", 10),  # int64 max: the largest varlong
    (-(2**63), "ffffffffffffffffff01", 10),  # int64 min
]

PADDINGS = [
    (b"", b""),  # the value alone
    (b"\x80", b"\xff"),  # padding with continuation bits on both sides
    (b"\xff" * 7, b"\x80\x80\x01"),  # a longer lead-in, a varint right after
]


@pytest.mark.parametrize("value,hexbytes,width", VARINTS, ids=[str(v[0]) for v in VARINTS])
@pytest.mark.parametrize("before,after", PADDINGS, ids=["bare", "pad1", "pad7"])
def test_varint_table(value, hexbytes, width, before, after):
    enc = bytes.fromhex(hexbytes)
    # the table itself agrees with an encoder written from the spec, and with kafkalog's
    assert s.varint(value) == enc
    assert v2.encode_varint(value) == enc
    buf = before + enc + after
    # read at an offset, stop exactly at the end of the varint
    assert v2.read_varint(buf, len(before), width) == (value, len(before) + len(enc))
    # memoryview input (as the decoder sees slices) reads the same
    assert v2.read_varint(memoryview(buf), len(before), width) == (value, len(before) + len(enc))
    if width == 5:  # a value a varint can hold is also a valid varlong
        assert v2.read_varint(buf, len(before), 10) == (value, len(before) + len(enc))


@pytest.mark.parametrize(
    "hexbytes,width",
    [
        ("808080808000", 5),  # six bytes for a varint: over-long
        ("ffffffffff01", 5),  # six bytes, continuation bit set through the fifth
        ("8080808080808080808000", 10),  # eleven bytes for a varlong: over-long
        ("ffffffffffffffffffff01", 10),  # eleven bytes of 0xff: over-long
    ],
)
def test_overlong_varints_raise(hexbytes, width):
    buf = b"\xff" + bytes.fromhex(hexbytes) + b"\x00" * 4
    with pytest.raises(kafkalog.CorruptBatchError):
        v2.read_varint(buf, 1, width)


def test_non_minimal_varint_within_width_is_read():
    # zero written in five bytes: wasteful but not over-long (Java reads it too)
    assert v2.read_varint(b"\xff\x80\x80\x80\x80\x00\xff", 1, 5) == (0, 6)


@pytest.mark.parametrize(
    "hexbytes,width",
    [
        ("8080808010", 5),  # 2**31 in five bytes: fits the bytes, not an int32
        ("ffffffff1f", 5),  # zigzag 2**33-1: beyond int32
        ("ffffffffffffffffff03", 10),  # ten bytes whose value needs 65 bits: beyond int64
        ("ffffffffffffffffff7f", 10),  # ten bytes whose value needs 70 bits
    ],
)
def test_varints_beyond_their_width_raise(hexbytes, width):
    # Kafka's readVarint/readVarlong keep only 32/64 bits; a value that needs
    # more cannot have been written by Kafka and must not leak out as a huge int.
    with pytest.raises(kafkalog.CorruptBatchError):
        v2.read_varint(bytes.fromhex(hexbytes), 0, width)


def test_varint_round_trip_across_edges():
    # every power of two and its neighbours, both signs, through both encoders
    for k in range(64):
        for v in (2**k - 1, 2**k, -(2**k), -(2**k) - 1):
            if not -(2**63) <= v < 2**63:
                continue
            enc = v2.encode_varint(v)
            assert enc == s.varint(v)
            assert v2.read_varint(b"\x80" + enc + b"\xff", 1, 10) == (v, 1 + len(enc))


# ------------------------------------------- fast paths and their slow twins
def _minimal(value: int) -> bytes:
    return s.varint(value)


def _padded(extra: int):
    """Non-minimal encodings: the same value spread over up to ``extra`` more
    bytes, five at most (legal: Kafka reads them), forcing the decoder off its
    one-byte fast path."""
    def enc(value: int) -> bytes:
        b = bytearray(s.varint(value))
        pad = min(extra, 5 - len(b))
        if pad <= 0:
            return bytes(b)
        b[-1] |= 0x80
        return bytes(b) + b"\x80" * (pad - 1) + b"\x00"
    return enc


def _record_with(enc, offset_delta, ts_delta, key, value, headers) -> bytes:
    def vb(x):
        return enc(-1) if x is None else enc(len(x)) + x
    body = b"\x00" + enc(ts_delta) + enc(offset_delta) + vb(key) + vb(value) + enc(len(headers))
    for hk, hv in headers:
        body += vb(hk.encode()) + vb(hv)
    return enc(len(body)) + body


# inlined paths: one byte (zigzag < 128) and two bytes (zigzag < 16384) when minimal
FAST_PATH_VALUES = [0, 1, -1, 2, 63, -64, 64, -65, 300, 8191, -8192]
SLOW_PATH_VALUES = [8192, -8193, 1 << 20, -(1 << 27)]  # three bytes and more: read_varint


@pytest.mark.parametrize("enc", [_minimal, _padded(1), _padded(3)], ids=["minimal", "pad+1", "pad+3"])
@pytest.mark.parametrize("v", FAST_PATH_VALUES + SLOW_PATH_VALUES)
def test_record_fast_path_and_read_varint_agree(enc, v):
    # every varint field of a record holds a value at a length edge; the
    # minimal encoding takes the inlined one- or two-byte paths for small
    # values, the padded ones go through read_varint: the records must be equal
    n = abs(v) % 70  # a byte count for key/value/header lengths
    key = None if v < 0 else b"k" * n
    value = b"v" * (n + 1)
    headers = [("h%d" % i, None if i % 2 else b"x" * n) for i in range(min(n, 3))]
    recs = [_record_with(enc, od, v, key, value, headers) for od in (0, max(v, 1))]
    data = s.batch_v2(recs, base_offset=1000, base_timestamp=T0, last_offset_delta=max(v, 1))
    (b,) = clean(data)
    want_headers = tuple(Header(k, hv) for k, hv in headers)
    assert b.records == (
        kafkalog.Record(1000, T0 + v, key, value, want_headers),
        kafkalog.Record(1000 + max(v, 1), T0 + v, key, value, want_headers),
    )


def test_accelerated_crc32c_matches_a_pure_python_twin():
    # kafkalog uses the C crc32c package; kafka-python ships a pure-Python
    # CRC-32C: both must agree on every batch of the real corpus
    from kafka.record._crc32c import crc as crc32c_pure

    n = 0
    for path in s.CORPUS:
        if "__cluster_metadata" in path:
            continue  # 4814 batches: too slow for pure Python
        data = s.read_corpus(path)
        for b in kafkalog.iter_batches(data):
            covered = data[b.position + v2.ATTRIBUTES_OFFSET : b.end]
            assert b.computed_crc == crc32c_pure(covered) == b.crc
            n += 1
    assert n > 500


# ------------------------------------------------------------- header layout
def test_v2_header_struct_is_pinned():
    # 61 bytes, the field offsets of DefaultRecordBatch.java
    assert v2.HEADER.size == 61
    assert (v2.BASE_OFFSET_OFFSET, v2.LENGTH_OFFSET, v2.PARTITION_LEADER_EPOCH_OFFSET) == (0, 8, 12)
    assert (v2.MAGIC_OFFSET, v2.CRC_OFFSET, v2.ATTRIBUTES_OFFSET) == (16, 17, 21)
    assert (v2.LAST_OFFSET_DELTA_OFFSET, v2.BASE_TIMESTAMP_OFFSET, v2.MAX_TIMESTAMP_OFFSET) == (23, 27, 35)
    assert (v2.PRODUCER_ID_OFFSET, v2.PRODUCER_EPOCH_OFFSET, v2.BASE_SEQUENCE_OFFSET) == (43, 51, 53)
    assert (v2.RECORDS_COUNT_OFFSET, v2.RECORDS_OFFSET) == (57, 61)
    assert v2.LOG_OVERHEAD == 12 and v2.MIN_LENGTH == 49  # an empty batch: 61 - 12
    # framing: the magic byte sits at byte 16 of every entry, whatever its magic
    assert log_reader.MAGIC_OFFSET == 16 == legacy.MAGIC_OFFSET
    # legacy layout: crc at 12, attributes at 17, v1 timestamp at 18, key length at 18 / 26
    assert (legacy.CRC_OFFSET, legacy.ATTRIBUTES_OFFSET, legacy.TIMESTAMP_OFFSET) == (12, 17, 18)
    assert legacy.KEY_LENGTH_OFFSET == {0: 18, 1: 26}
    assert legacy.MIN_SIZE == {0: 14, 1: 22}  # crc+magic+attrs(+ts)+two lengths


def test_v2_header_agrees_with_kafka_python():
    from kafka.record.default_records import DefaultRecordBase

    assert DefaultRecordBase.HEADER_STRUCT.size == v2.HEADER.size
    assert DefaultRecordBase.CRC_OFFSET == v2.CRC_OFFSET
    assert DefaultRecordBase.ATTRIBUTES_OFFSET == v2.ATTRIBUTES_OFFSET


# ------------------------------------------------------------ v2 batch edges
def test_empty_batch_is_legal():
    # recordCount 0 (what compaction can leave behind): no records, no finding
    data = s.batch_v2([], base_offset=10, last_offset_delta=4) + s.batch_v2(
        [s.record(0)], base_offset=15
    )
    b0, b1 = clean(data)
    assert (b0.record_count, b0.records, b0.last_offset) == (0, (), 14)
    assert b0.size == 61  # header only
    assert b1.base_offset == 15  # lastOffsetDelta survived: no regression reported


def test_empty_compressed_batch_is_legal():
    # a gzip payload that inflates to nothing, recordCount 0
    (b,) = clean(s.batch_v2([], attributes=s.GZIP, compress=s.gzip))
    assert (b.compression, b.record_count, b.records) == ("gzip", 0, ())


def test_compaction_gaps_use_offset_delta_not_index():
    # offset deltas 0, 3, 7 survive; lastOffsetDelta 9 (records 8, 9 compacted away)
    recs = [s.record(0, 0, b"a"), s.record(3, 1, b"b"), s.record(7, 2, b"c")]
    data = s.batch_v2(recs, base_offset=100, last_offset_delta=9) + s.batch_v2(
        [s.record(0)], base_offset=110
    )
    b0, b1 = clean(data)
    assert [r.offset for r in b0.records] == [100, 103, 107]  # base + delta, not base + index
    assert b0.last_offset == 109 and b0.record_count == 3
    assert b1.base_offset == 110
    table = kafkalog.records_table(data)
    assert table.column("offset").to_pylist() == [100, 103, 107, 110]
    assert table.column("batch_last_offset").to_pylist()[:3] == [109] * 3


def test_delete_horizon_bit():
    # attributes bit 6: baseTimestamp holds the delete horizon
    with_bit = s.batch_v2([s.record(0)], attributes=s.DELETE_HORIZON, base_timestamp=1234567)
    without = s.batch_v2([s.record(0)], base_offset=1, base_timestamp=1234567)
    b0, b1 = clean(with_bit + without)
    assert b0.has_delete_horizon and b0.delete_horizon_ms == 1234567
    assert not b1.has_delete_horizon and b1.delete_horizon_ms is None
    table = kafkalog.batches_table(with_bit + without)
    assert table.column("delete_horizon_ms").to_pylist() == [1234567, None]
    assert table.column("has_delete_horizon").to_pylist() == [True, False]


def test_null_and_empty_are_kept_apart():
    recs = [
        s.record(0, key=None, value=None),  # null key, null value (a keyless tombstone)
        s.record(1, key=b"", value=b""),  # empty key, empty value
        s.record(2, key=b"k", value=None, headers=[("h", None), ("e", b"")]),  # null vs empty header value
        s.record(3, key=None, value=b"", headers=[("", b"x")]),  # empty header key
    ]
    (b,) = clean(s.batch_v2(recs))
    r = b.records
    assert (r[0].key, r[0].value) == (None, None)
    assert (r[1].key, r[1].value) == (b"", b"")
    assert r[2].headers == (Header("h", None), Header("e", b""))
    assert (r[3].key, r[3].value, r[3].headers) == (None, b"", (Header("", b"x"),))
    table = kafkalog.records_table(s.batch_v2(recs))
    assert table.column("key").to_pylist() == [None, b"", b"k", None]
    assert table.column("value").to_pylist() == [None, b"", None, b""]
    assert table.column("headers").to_pylist()[2] == [
        {"key": "h", "value": None}, {"key": "e", "value": b""}
    ]


def test_large_header_value():
    # a 1 MiB header value: its length is a three-byte varint
    big = bytes(range(256)) * 4096
    (b,) = clean(s.batch_v2([s.record(0, headers=[("blob", big)])]))
    assert b.records[0].headers == (Header("blob", big),)


def test_thousand_headers():
    # 1000 headers: the header count is a two-byte varint
    headers = [(f"h{i}", str(i).encode()) for i in range(1000)]
    data = s.batch_v2([s.record(0, headers=headers)])
    (b,) = clean(data)
    assert [tuple(h) for h in b.records[0].headers] == headers
    assert len(kafkalog.records_table(data).column("headers")[0]) == 1000


def test_log_append_time_overrides_record_timestamps():
    # bit 3 set: every record takes the batch maxTimestamp, whatever its delta
    recs = [s.record(0, 0), s.record(1, 5), s.record(2, -3)]
    data = s.batch_v2(recs, attributes=s.LOG_APPEND_TIME, base_timestamp=T0, max_timestamp=T0 + 999)
    (b,) = clean(data)
    assert b.timestamp_type == "LogAppendTime"
    assert [r.timestamp for r in b.records] == [T0 + 999] * 3
    # CreateTime: baseTimestamp + delta
    (c,) = clean(s.batch_v2(recs, base_timestamp=T0, max_timestamp=T0 + 5))
    assert c.timestamp_type == "CreateTime"
    assert [r.timestamp for r in c.records] == [T0, T0 + 5, T0 - 3]


# ---------------------------------------------------------- control batches
CTL = s.CONTROL | s.TRANSACTIONAL


def _control_batch(type_id, offset, epoch=0, **kw):
    return s.batch_v2([s.control_record(type_id, **kw)], base_offset=offset,
                      attributes=CTL, producer_id=42, producer_epoch=3)


def test_commit_and_abort_markers():
    data = (
        s.batch_v2([s.record(0), s.record(1)], base_offset=0, attributes=s.TRANSACTIONAL,
                   producer_id=42, producer_epoch=3, base_sequence=0)
        + _control_batch(1, 2, coordinator_epoch=7)  # COMMIT, coordinator epoch 7
        + _control_batch(0, 3, coordinator_epoch=9)  # ABORT, coordinator epoch 9
    )
    _, commit, abort = clean(data)
    assert commit.is_control and commit.is_transactional
    assert commit.records[0].control == Control(1, "COMMIT", 0, 7)
    assert abort.records[0].control == Control(0, "ABORT", 0, 9)
    tables = kafkalog.decode(data)
    assert tables.records.num_rows == 2  # markers are not data
    markers = tables.markers.to_pylist()
    assert [(m["offset"], m["control_type"], m["control_type_id"], m["coordinator_epoch"])
            for m in markers] == [(2, "COMMIT", 1, 7), (3, "ABORT", 0, 9)]
    assert {m["producer_id"] for m in markers} == {42}


@pytest.mark.parametrize(
    "type_id,name",
    [
        (2, "LEADER_CHANGE"),  # KRaft: known name, value is a LeaderChangeMessage, no epoch
        (3, "SNAPSHOT_HEADER"),  # KRaft snapshot header
        (6, "KRAFT_VOTERS"),  # KRaft voters
        (99, "UNKNOWN"),  # not a type Kafka defines: reported by id
        (-1, "UNKNOWN"),  # negative type id
    ],
)
def test_other_control_types_are_reported_by_id(type_id, name):
    data = _control_batch(type_id, 5, coordinator_epoch=None, value=b"\x00\x01opaque")
    (b,) = clean(data)
    ctl = b.records[0].control
    assert (ctl.type_id, ctl.type, ctl.coordinator_epoch) == (type_id, name, None)
    (m,) = kafkalog.markers_table(data).to_pylist()
    assert (m["control_type_id"], m["control_type"], m["value"]) == (type_id, name, b"\x00\x01opaque")


def test_real_leader_change_record_in_corpus():
    # the KRaft metadata log of the corpus holds one LEADER_CHANGE control batch
    path = [p for p in s.CORPUS if "__cluster_metadata" in p][0]
    controls = [b for b in kafkalog.iter_batches(path) if b.is_control]
    assert [b.records[0].control.type for b in controls] == ["LEADER_CHANGE"]


# ---------------------------------------------------------- producer fields
def test_sequence_wraps_at_int32_max():
    # baseSequence 2**31-2 with 3 records: 2147483646, 2147483647, then 0
    data = s.batch_v2([s.record(0), s.record(1), s.record(2)], producer_id=7,
                      producer_epoch=1, base_sequence=2**31 - 2)
    (b,) = clean(data)
    assert b.last_sequence == 0
    assert kafkalog.records_table(data).column("sequence").to_pylist() == [2147483646, 2147483647, 0]
    assert kafkalog.batches_table(data).column("last_sequence").to_pylist() == [0]


def test_sequence_follows_offset_delta_across_gaps():
    # sequence = baseSequence + offsetDelta, so compaction gaps show in it too
    data = s.batch_v2([s.record(0), s.record(4)], last_offset_delta=4, producer_id=7,
                      producer_epoch=1, base_sequence=10)
    assert kafkalog.records_table(data).column("sequence").to_pylist() == [10, 14]


def test_non_idempotent_producer_sequences_stay_minus_one():
    data = s.batch_v2([s.record(0), s.record(1)])  # producerId/epoch/baseSequence -1
    (b,) = clean(data)
    assert (b.producer_id, b.producer_epoch, b.base_sequence, b.last_sequence) == (-1, -1, -1, -1)
    assert kafkalog.records_table(data).column("sequence").to_pylist() == [-1, -1]


# ------------------------------------------------------------------- v0 / v1
def test_magic0_has_no_timestamp():
    data = s.message(0, b"a", b"k", magic=0) + s.message(1, None, None, magic=0)
    b0, b1 = clean(data)
    assert (b0.magic, b0.timestamp_type, b0.first_timestamp) == (0, None, None)
    assert b0.records[0] == kafkalog.Record(0, None, b"k", b"a")
    assert (b1.records[0].key, b1.records[0].value) == (None, None)
    ts = kafkalog.records_table(data).column("timestamp")
    assert ts.null_count == 2


@pytest.mark.parametrize("codec", [s.GZIP, s.SNAPPY, s.LZ4])
def test_magic0_wrapper_inner_offsets_are_absolute(codec):
    # v0: the inner messages carry their absolute offsets 100, 101, 103 (a gap),
    # the wrapper the last one
    inner = [s.message(o, b"m%d" % o, magic=0) for o in (100, 101, 103)]
    comp = s.lz4_kafka_v0 if codec == s.LZ4 else s.COMPRESSORS[codec]
    (b,) = clean(s.wrapper(0, codec, comp, inner, 103))
    assert [r.offset for r in b.records] == [100, 101, 103]
    assert (b.base_offset, b.last_offset, b.record_count) == (100, 103, 3)
    assert [r.timestamp for r in b.records] == [None] * 3


@pytest.mark.parametrize("codec", [s.GZIP, s.SNAPPY, s.LZ4])
def test_magic1_wrapper_inner_offsets_are_relative(codec):
    # v1: inner offsets 0, 1, 3 are relative; wrapper offset 103 is the last:
    # absolute = 103 - 3 + relative
    inner = [s.message(o, b"m%d" % o, magic=1, timestamp=T0 + o) for o in (0, 1, 3)]
    (b,) = clean(s.wrapper(1, codec, s.COMPRESSORS[codec], inner, 103))
    assert [r.offset for r in b.records] == [100, 101, 103]
    assert [r.timestamp for r in b.records] == [T0, T0 + 1, T0 + 3]  # CreateTime: inner ones


def test_magic1_log_append_time_wrapper_overrides_inner_timestamps():
    inner = [s.message(o, b"x", magic=1, timestamp=T0 + o) for o in range(3)]
    (b,) = clean(s.wrapper(1, s.GZIP, s.gzip, inner, 2, timestamp=T0 + 500, log_append_time=True))
    assert b.timestamp_type == "LogAppendTime"
    assert [r.timestamp for r in b.records] == [T0 + 500] * 3


@pytest.mark.parametrize("magic,codec", [(0, s.GZIP), (0, s.SNAPPY), (1, s.GZIP), (1, s.SNAPPY), (1, s.LZ4)])
def test_legacy_wrappers_from_kafka_python(magic, codec):
    # kafka-python's builder: inner offsets 0..n-1, wrapper offset patched to n-1 (+ base)
    base = 0 if magic == 0 else 500
    values = [b"value-%d" % i * 10 for i in range(4)]
    (b,) = clean(s.kp_legacy(magic, codec, values, offset=base))
    assert [r.offset for r in b.records] == [base + i for i in range(4)]
    assert [r.value for r in b.records] == values


def test_mixed_magic_segment_decodes_per_entry():
    # a partition upgraded across versions: v0, v1, v1 gzip, v2, v2 zstd, in one file
    data = (
        s.message(0, b"v0", magic=0)
        + s.wrapper(0, s.GZIP, s.gzip, [s.message(1, b"v0z", magic=0), s.message(2, b"v0z", magic=0)], 2)
        + s.message(3, b"v1", magic=1)
        + s.wrapper(1, s.GZIP, s.gzip, [s.message(0, b"a", magic=1), s.message(1, b"b", magic=1)], 5)
        + s.batch_v2([s.record(0), s.record(1)], base_offset=6)
        + s.kp_v2(s.ZSTD, [b"z" * 100, b"z" * 100], base_offset=8)
    )
    batches = clean(data)
    assert [b.magic for b in batches] == [0, 0, 1, 1, 2, 2]
    assert [b.compression for b in batches] == ["none", "gzip", "none", "gzip", "none", "zstd"]
    assert [r.offset for b in batches for r in b.records] == list(range(10))
    table = kafkalog.records_table(data)
    assert table.column("magic").to_pylist() == [0, 0, 0, 1, 1, 1, 2, 2, 2, 2]
    assert table.column("offset").to_pylist() == list(range(10))


# ------------------------------------------------------------------- codecs
def test_lz4_magic0_broken_and_correct_header_checksums_both_decode():
    inner = [s.message(o, b"lz4 payload %d" % o * 8, magic=0) for o in range(3)]
    broken = s.wrapper(0, s.LZ4, s.lz4_kafka_v0, inner, 2)  # Kafka 0.8-0.9's checksum
    correct = s.wrapper(0, s.LZ4, s.lz4, inner, 2)  # a correct frame (e.g. librdkafka)
    assert broken != correct
    for data in (broken, correct):
        (b,) = clean(data)
        assert [r.value for r in b.records] == [b"lz4 payload %d" % o * 8 for o in range(3)]


def test_lz4_magic1_and_v2_frames_are_standard():
    inner = [s.message(o, b"x" * 40, magic=1) for o in range(3)]
    (b,) = clean(s.wrapper(1, s.LZ4, s.lz4, inner, 2))
    assert b.record_count == 3
    (b,) = clean(s.batch_v2([s.record(i, value=b"y" * 40) for i in range(3)],
                            attributes=s.LZ4, compress=s.lz4))
    assert [r.value for r in b.records] == [b"y" * 40] * 3


@pytest.mark.parametrize(
    "compress",
    [
        s.snappy_raw,  # raw snappy (librdkafka and others)
        s.snappy_xerial,  # xerial framing (the Java client)
        lambda d: s.snappy_xerial(d, block=100),  # xerial, many blocks
        lambda d: s.snappy_xerial(d, version_le=True),  # version/compat little-endian
    ],
    ids=["raw", "xerial", "xerial-blocks", "xerial-le-version"],
)
def test_snappy_raw_and_xerial(compress):
    values = [b"snappy value %d " % i * 20 for i in range(5)]
    recs = [s.record(i, value=v) for i, v in enumerate(values)]
    (b,) = clean(s.batch_v2(recs, attributes=s.SNAPPY, compress=compress))
    assert [r.value for r in b.records] == values
    inner = [s.message(i, v, magic=1) for i, v in enumerate(values)]
    (b,) = clean(s.wrapper(1, s.SNAPPY, compress, inner, 4))
    assert [r.value for r in b.records] == values


def test_zstd_two_frames_without_content_size():
    values = [b"zstd %d " % i * 30 for i in range(6)]
    recs = [s.record(i, value=v) for i, v in enumerate(values)]
    payload = s.zstd_unsized_frames(b"".join(recs), parts=2)
    import zstandard

    params = zstandard.get_frame_parameters(payload)
    assert params.content_size == zstandard.CONTENTSIZE_UNKNOWN
    (b,) = clean(s.batch_v2(recs, attributes=s.ZSTD, payload=payload))
    assert [r.value for r in b.records] == values


def test_gzip_two_members():
    # two concatenated gzip members, as Java's GZIPInputStream reads them
    recs = [s.record(i, value=b"g%d" % i) for i in range(4)]
    payload = s.gzip(b"".join(recs[:2])) + s.gzip(b"".join(recs[2:]))
    (b,) = clean(s.batch_v2(recs, attributes=s.GZIP, payload=payload))
    assert [r.value for r in b.records] == [b"g0", b"g1", b"g2", b"g3"]


@pytest.mark.parametrize("codec", [s.GZIP, s.SNAPPY, s.LZ4, s.ZSTD])
def test_v2_codecs_from_kafka_python(codec):
    values = [b"kafka-python %d " % i * 16 for i in range(5)]
    (b,) = clean(s.kp_v2(codec, values, base_offset=40, producer=(9, 0, 100)))
    assert [r.offset for r in b.records] == list(range(40, 45))
    assert [r.value for r in b.records] == values
    assert b.last_sequence == 104


def test_limits_of_record_count_are_respected():
    # a batch within the default limits decodes; a smaller max_records_per_batch refuses it
    data = s.batch_v2([s.record(i) for i in range(10)])
    clean(data)
    batches, found = scan(data, limits=Limits(max_records_per_batch=5))
    assert [f.kind for f in found] == ["limit_exceeded"]
    assert not batches[0].decoded


def test_batch_keeps_the_dataclass_contract_with_its_slot_init():
    """Batch's own ``__init__`` (kafkalog.model._slot_init) behaves as the one
    dataclasses generates: same signature and defaults, frozen, equal, hashable,
    picklable, ``dataclasses.replace`` works."""
    import dataclasses
    import inspect
    import pickle

    reference = dataclasses.make_dataclass(
        "Reference", [(f.name, f.type, f) for f in dataclasses.fields(Batch)],
        frozen=True, slots=True)
    assert inspect.signature(Batch) == inspect.signature(reference)
    values = list(range(21))
    b = Batch(*values)
    assert (b.records, b.decoded) == ((), True)
    assert dataclasses.astuple(b) == dataclasses.astuple(reference(*values))
    assert b == Batch(**dict(zip([f.name for f in dataclasses.fields(Batch)], values)))
    assert hash(b) == hash(Batch(*values)) and b != Batch(*values, records=(), decoded=False)
    assert pickle.loads(pickle.dumps(b)) == b
    assert dataclasses.replace(b, size=99).size == 99
    with pytest.raises(dataclasses.FrozenInstanceError):
        b.size = 1
    with pytest.raises(TypeError):
        Batch(*values[:-1])
    with pytest.raises(TypeError):
        Batch(*values, surprise=1)


# --------------------------------------------- the pure path's columnar parser


def _kp_payload(records, codec=0):
    """The records bytes of a v2 batch from kafka-python's builder (independent encoder)."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    b = DefaultRecordBatchBuilder(2, codec, False, -1, -1, -1, 1 << 30)
    for offset, ts, key, value, headers in records:
        assert b.append(offset, ts, key, value, headers) is not None
    return bytes(b.build())[61:], len(records)


def _payloads():
    """Record bytes in the shapes the parser meets: null and empty keys and values,
    lengths at the one/two/three-byte varint edges, headers (null values too),
    offset gaps, timestamp deltas that need three bytes."""
    rows = [
        (0, T0, None, b"", []),
        (1, T0 + 1, b"", None, [("h", b"x"), ("n", None), ("", b"")]),
        (5, T0 - 90_000, b"k" * 63, b"v" * 64, []),
        (6, T0 + 100_000, b"k" * 8191, b"v" * 8192, [("big", b"z" * 9000)]),
        (9, T0 + 2, b"key", b"value", [("utf8-\u00e9", b"\xff")]),
    ]
    yield _kp_payload(rows)
    yield _kp_payload(rows[:1])
    yield _kp_payload([(i * 3, T0 + i * 5000, b"k%d" % i, b"v" * (i * 40), []) for i in range(50)])


def _mutations(payload: bytes, count: int):
    rng = random.Random(len(payload) * 31 + count)
    yield payload, count
    yield payload, count + 1
    yield payload, count - 1
    yield payload + b"\x00", count
    for cut in sorted({0, 1, 2, len(payload) // 2, len(payload) - 1} & set(range(len(payload)))):
        yield payload[:cut], count
    at = sorted(rng.sample(range(len(payload)), min(len(payload), 150)))
    for i in at:
        for mask in (0x01, 0x80, 0xFF):
            b = bytearray(payload)
            b[i] ^= mask
            yield bytes(b), count
    i = payload.find(b"utf8-")
    if i >= 0:  # a header key that is not UTF-8: read_records notes it, kept escaped
        yield payload[:i] + b"\xc3\x28" + payload[i + 2:], count


def _sink_state(sink):
    return (list(sink.offsets), list(sink.timestamps), list(sink.key_ends), list(sink.key_nulls),
            list(sink.value_ends), list(sink.value_nulls), list(sink.header_counts),
            list(sink.header_keys), list(sink.header_values),
            bytes(sink.keys[:sink.keys_size]), bytes(sink.values[:sink.values_size]))


def _rows_added(sink, before):
    """The records the sink gained since ``before`` (a _sink_state), as Records."""
    start, h = len(before[0]), len(before[7])
    keys, values = bytes(sink.keys[:sink.keys_size]), bytes(sink.values[:sink.values_size])
    k0 = before[2][-1] if before[2] else 0
    v0 = before[4][-1] if before[4] else 0
    out = []
    for i in range(start, len(sink.offsets)):
        k1, v1 = sink.key_ends[i], sink.value_ends[i]
        n = sink.header_counts[i]
        headers = tuple(Header(key, value) for key, value in
                        zip(sink.header_keys[h:h + n], sink.header_values[h:h + n]))
        out.append(kafkalog.Record(
            sink.offsets[i], sink.timestamps[i],
            None if i in sink.key_nulls else keys[k0:k1],
            None if i in sink.value_nulls else values[v0:v1], headers))
        k0, v0, h = k1, v1, h + n
    return out


@pytest.mark.parametrize("log_append", [None, T0 + 7])
def test_record_columns_equal_read_records_or_leave_the_batch_to_it(log_append):
    """The pure path's tables take v2 records through read_record_columns, the
    object API through read_records. On every shape and every damaged variant:
    where read_records decodes cleanly the columns hold the same records; where
    it raises or notes something, the columnar parser adds nothing (earlier
    rows stay) and steps aside, so read_records reports it."""
    from kafkalog.arrow import RecordSink
    from kafkalog.errors import CorruptDataError

    taken = left = 0
    for payload, count in _payloads():
        for data, n in _mutations(payload, count):
            sink = RecordSink(4, 4)  # tiny buffers: every batch grows them
            first, first_n = _kp_payload([(0, T0, b"a", b"b", [("x", b"y")])])
            assert v2.read_record_columns(first, first_n, 10, T0, None, sink)
            before = _sink_state(sink)
            bad_keys = []
            try:
                want = v2.read_records(data, n, 1000, T0, log_append, bad_keys)
            except (CorruptDataError, IndexError, ValueError, OverflowError):
                want = None
            took = v2.read_record_columns(memoryview(data), n, 1000, T0, log_append, sink)
            if want is None or bad_keys:
                assert not took, (n, data.hex())
                assert _sink_state(sink) == before
                left += 1
            else:
                assert took, (n, data.hex())  # the regular case is never left behind
                assert _sink_state(sink)[:1] == (before[0] + [r.offset for r in want],)
                assert _rows_added(sink, before) == [r._replace(control=None) for r in want]
                taken += 1
    assert taken >= 500 and left >= 30


def test_record_columns_leave_offsets_near_the_int64_edges_to_read_records():
    from kafkalog.arrow import RecordSink

    payload, n = _kp_payload([(0, T0, b"k", b"v", [])])
    sink = RecordSink(4, 4)
    assert not v2.read_record_columns(payload, n, v2.INT64_MAX - 5, T0, None, sink)
    assert not v2.read_record_columns(payload, n, 0, v2.INT64_MIN + 5, None, sink)
    assert v2.read_record_columns(payload, n, 0, T0, None, sink) and sink.offsets == [0]
