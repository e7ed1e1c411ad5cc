"""Every finding kind, with its exact position and byte count, and every kind
of source giving the same answer.

Segments are built by hand (``tests/segments.py``) so that the byte positions
in the assertions can be computed independently of the decoder.
"""

from __future__ import annotations

import io
import pathlib

import pytest

import kafkalog
from kafkalog import Batch, Finding, Limits
from kafkalog.model import FINDING_KINDS

from tests import segments as s


def split(items):
    items = list(items)
    return [i for i in items if isinstance(i, Batch)], [i for i in items if isinstance(i, Finding)]


def three() -> list[bytes]:
    """Three valid v2 batches, offsets 0..5 (two records each)."""
    return [
        s.batch_v2([s.record(0, value=b"a%d" % o), s.record(1, value=b"b%d" % o)], base_offset=o)
        for o in (0, 2, 4)
    ]


def starts(parts: list[bytes]) -> list[int]:
    out, pos = [], 0
    for p in parts:
        out.append(pos)
        pos += len(p)
    return out


def test_finding_kinds_are_all_covered_below():
    # each kind of FINDING_KINDS has a test in this file (grep-able by name)
    text = pathlib.Path(__file__).read_text()
    for kind in FINDING_KINDS:
        assert f'"{kind}"' in text, kind


# ------------------------------------------------------------- crc_mismatch
def test_crc_mismatch_v2_batch_still_yields_records():
    parts = three()
    bad = bytearray(parts[1])
    i = bad.index(b"a2")
    bad[i : i + 2] = b"XX"  # same length: records still parse, CRC no longer matches
    parts[1] = bytes(bad)
    data = b"".join(parts)
    p = starts(parts)
    items = list(kafkalog.scan(data))
    batches, found = split(items)
    assert [b.position for b in batches] == p  # all three, in order
    b = batches[1]
    assert b.crc_valid is False and b.is_valid() is False and b.decoded
    assert b.status == "crc_mismatch"
    assert [r.value for r in b.records] == [b"XX", b"b2"]  # as kafka-dump-log shows them
    with pytest.raises(kafkalog.CrcMismatchError) as err:
        b.ensure_valid()
    assert isinstance(err.value, kafkalog.KafkaLogError) and isinstance(err.value, ValueError)
    assert f"0x{b.crc:08x}" in str(err.value) and f"0x{b.computed_crc:08x}" in str(err.value)
    (f,) = found
    assert (f.kind, f.position, f.end) == ("crc_mismatch", p[1], p[2])
    assert (f.base_offset, f.last_offset) == (2, 3)
    assert items.index(f) == items.index(b) + 1  # right after its batch
    # the good ones stay good
    assert batches[0].is_valid() and batches[2].is_valid()
    batches[0].ensure_valid()
    # records of damaged batches are kept in the table, flagged
    table = kafkalog.records_table(data)
    assert table.column("crc_valid").to_pylist() == [True, True, False, False, True, True]


def test_crc_mismatch_in_the_stored_crc_field():
    parts = three()
    bad = bytearray(parts[0])
    bad[17] ^= 0x01  # the CRC field itself
    data = bytes(bad) + parts[1] + parts[2]
    batches, found = split(kafkalog.scan(data))
    assert len(batches) == 3 and batches[0].decoded and not batches[0].is_valid()
    assert [(f.kind, f.position, f.end) for f in found] == [("crc_mismatch", 0, len(parts[0]))]


def test_crc_not_verified_on_request():
    parts = three()
    bad = bytearray(parts[1])
    i = bad.index(b"a2")
    bad[i : i + 2] = b"XX"
    data = parts[0] + bytes(bad) + parts[2]
    batches, found = split(kafkalog.scan(data, verify_crc=False))
    assert found == []  # nothing checks the CRC, and nothing else is wrong
    b = batches[1]
    assert b.crc_valid is None and b.computed_crc is None and b.status == "unverified"
    assert b.records[0].value == b"XX"
    assert b.is_valid() is False
    with pytest.raises(kafkalog.CrcMismatchError):
        b.ensure_valid()  # cannot vouch for a batch that was never checked


def test_crc_mismatch_legacy_message():
    m0 = s.message(0, b"one", magic=1)
    m1 = s.message(1, b"two", magic=1, crc=0xDEADBEEF)  # wrong CRC-32
    m2 = s.message(2, b"six", magic=0)
    data = m0 + m1 + m2
    batches, found = split(kafkalog.scan(data))
    assert [b.base_offset for b in batches] == [0, 1, 2]
    assert batches[1].records[0].value == b"two" and batches[1].crc == 0xDEADBEEF
    assert [(f.kind, f.position, f.end) for f in found] == [("crc_mismatch", len(m0), len(m0) + len(m1))]


def test_crc_mismatch_of_an_inner_legacy_message():
    # the wrapper's CRC is right; one inner message's own CRC is not
    inner = [s.message(0, b"a"), s.message(1, b"b", crc=123), s.message(2, b"c")]
    data = s.wrapper(1, s.GZIP, s.gzip, inner, 12)
    batches, found = split(kafkalog.scan(data))
    assert batches[0].crc_valid and [r.offset for r in batches[0].records] == [10, 11, 12]
    (f,) = found
    assert (f.kind, f.position, f.end) == ("crc_mismatch", 0, len(data))
    assert "11" in f.message  # names the inner offset


# ----------------------------------------------------------- truncated_tail
@pytest.mark.parametrize("left", [1, 11, 12, 16, 17, 30, 61, -1])
def test_truncated_tail_incomplete_last_entry(left):
    # the last batch is cut `left` bytes into itself (-1: one byte short of whole)
    parts = three()
    p = starts(parts)
    left = len(parts[2]) - 1 if left == -1 else left
    data = b"".join(parts)[: p[2] + left]
    items = list(kafkalog.scan(data))
    batches, found = split(items)
    assert [b.position for b in batches] == p[:2]
    (f,) = found
    assert (f.kind, f.position, f.end, f.bytes) == ("truncated_tail", p[2], p[2] + left, left)
    assert items[-1] is f  # it ends iteration


def test_truncated_tail_legacy_entry():
    m = [s.message(o, b"value %d" % o, magic=1) for o in range(3)]
    data = b"".join(m)[:-5]
    batches, found = split(kafkalog.scan(data))
    assert len(batches) == 2
    assert [(f.kind, f.position, f.bytes) for f in found] == [("truncated_tail", 2 * len(m[0]), len(m[2]) - 5)]


@pytest.mark.parametrize("zeros", [1, 16, 17, 4096])
def test_truncated_tail_zero_filled_preallocated(zeros):
    # a preallocated segment: valid batches, then zeros to the end
    parts = three()
    data = b"".join(parts) + bytes(zeros)
    batches, found = split(kafkalog.scan(data))
    assert len(batches) == 3
    (f,) = found
    assert (f.kind, f.position, f.end, f.bytes) == ("truncated_tail", sum(map(len, parts)), len(data), zeros)


def test_all_zero_file_is_one_truncated_tail():
    found = kafkalog.findings(bytes(10_000))
    assert [(f.kind, f.position, f.bytes) for f in found] == [("truncated_tail", 0, 10_000)]


def test_empty_input_gives_nothing():
    assert list(kafkalog.scan(b"")) == []


# -------------------------------------------- corrupt_batch / skipped_bytes
@pytest.mark.parametrize(
    "field,value",
    [
        ("size", 3),  # below the 49 bytes of an empty v2 batch
        ("size", -7),  # negative
        ("size", 2**31 - 1),  # past the end of the data and past max_entry_size
        ("magic", 3),  # no such magic
        ("magic", 0xFF),  # no such magic
    ],
)
def test_corrupt_batch_then_skipped_bytes_then_resync(field, value):
    parts = three()
    p = starts(parts)
    bad = bytearray(parts[1])
    if field == "size":
        bad[8:12] = value.to_bytes(4, "big", signed=True)
    else:
        bad[16] = value
    data = parts[0] + bytes(bad) + parts[2]
    items = list(kafkalog.scan(data))
    batches, found = split(items)
    assert [b.position for b in batches] == [p[0], p[2]]  # resynchronised on the third
    assert [(f.kind, f.position, f.end, f.bytes) for f in found] == [
        ("corrupt_batch", p[1], p[2], None),
        ("skipped_bytes", p[1], p[2], p[2] - p[1]),
    ]
    assert [type(i).__name__ for i in items] == ["Batch", "Finding", "Finding", "Batch"]


def test_garbage_between_batches_is_skipped():
    parts = three()
    junk = bytes(range(100, 137))  # 37 bytes that are no entry
    data = parts[0] + junk + parts[1] + parts[2]
    batches, found = split(kafkalog.scan(data))
    g = len(parts[0])
    assert [b.base_offset for b in batches] == [0, 2, 4]
    assert batches[1].position == g + len(junk)
    assert [(f.kind, f.position, f.end, f.bytes) for f in found] == [
        ("corrupt_batch", g, g + 37, None),
        ("skipped_bytes", g, g + 37, 37),
    ]


def test_garbage_to_the_end_is_skipped_to_the_end():
    parts = three()
    junk = b"\xff" * 50
    data = parts[0] + junk
    batches, found = split(kafkalog.scan(data))
    g = len(parts[0])
    assert len(batches) == 1
    assert [(f.kind, f.position, f.end, f.bytes) for f in found] == [
        ("corrupt_batch", g, g + 50, None),
        ("skipped_bytes", g, g + 50, 50),
    ]


def test_corrupt_records_inside_a_valid_frame():
    # right CRC, but one record declares more bytes than it uses
    rec = bytearray(s.record(0, value=b"abc"))
    rec[0] += 2  # length + 1 (zigzag)
    bad = s.batch_v2([bytes(rec) + b"\x00"], base_offset=2)
    parts = three()
    data = parts[0] + bad + parts[2]
    batches, found = split(kafkalog.scan(data))
    assert [b.base_offset for b in batches] == [0, 2, 4]
    assert batches[1].crc_valid and not batches[1].decoded and batches[1].status == "undecoded"
    g = len(parts[0])
    (f,) = found
    assert (f.kind, f.position, f.end) == ("corrupt_batch", g, g + len(bad))
    assert (f.base_offset, f.last_offset) == (2, 2)


@pytest.mark.parametrize(
    "records,count,why",
    [
        ([s.record(0), s.record(1)], 3, "fewer records than recordCount"),
        ([s.record(0), s.record(1)], 1, "bytes left after recordCount records"),
        ([s.record(0) + b"\x00\x00"], 1, "trailing bytes after the last record"),
        ([s.record(0)[:-1]], 1, "record cut short"),
    ],
)
def test_records_must_fill_the_batch_exactly(records, count, why):
    bad = s.batch_v2(records, count=count, last_offset_delta=1)
    batches, found = split(kafkalog.scan(bad + three()[1]))
    assert not batches[0].decoded, why
    assert [(f.kind, f.position, f.end) for f in found] == [("corrupt_batch", 0, len(bad))], why
    assert batches[1].decoded


# ------------------------------------------------------ decompression_error
@pytest.mark.parametrize("codec", [s.GZIP, s.SNAPPY, s.LZ4, s.ZSTD])
def test_decompression_error(codec):
    parts = three()
    garbage = b"\x1f\x8b this is not what its codec says" * 3
    if codec == s.SNAPPY:
        garbage = b"\x82SNAPPY\x00" + b"\x00\x00\x00\x01" * 2 + b"\x00\x00\x00\x10" + b"\xff" * 16
    bad = s.batch_v2([], count=2, base_offset=2, attributes=codec, payload=garbage)  # CRC right, payload not
    data = parts[0] + bad + parts[2]
    batches, found = split(kafkalog.scan(data))
    g = len(parts[0])
    assert [b.position for b in batches] == [0, g, g + len(bad)]
    b = batches[1]
    assert b.crc_valid and not b.decoded and b.records == ()
    (f,) = found
    assert (f.kind, f.position, f.end) == ("decompression_error", g, g + len(bad))


def test_decompression_error_legacy_wrapper():
    first = s.message(4, b"ok")
    bad = s.message(5, b"not gzip at all", magic=1, attributes=s.GZIP)
    data = first + bad + s.message(6, b"ok")
    batches, found = split(kafkalog.scan(data))
    # the wrapper's own offset (5) is its last inner offset; its first is unknown
    assert [(b.base_offset, b.last_offset) for b in batches] == [(4, 4), (None, 5), (6, 6)]
    assert not batches[1].decoded and batches[1].crc_valid
    g = len(first)
    assert [(f.kind, f.position, f.end) for f in found] == [("decompression_error", g, g + len(bad))]


def test_truncated_compressed_stream_is_a_decompression_error():
    recs = [s.record(i, value=b"v" * 50) for i in range(5)]
    payload = s.gzip(b"".join(recs))[:-12]  # the gzip trailer and some data gone
    bad = s.batch_v2([], count=5, attributes=s.GZIP, payload=payload)
    assert [f.kind for f in kafkalog.findings(bad)] == ["decompression_error"]


# ------------------------------------------------------------ unknown_codec
@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codec_v2(codec):
    parts = three()
    bad = s.batch_v2([s.record(0)], base_offset=2, attributes=codec)
    data = parts[0] + bad + parts[2]
    batches, found = split(kafkalog.scan(data))
    g = len(parts[0])
    b = batches[1]
    assert (b.compression, b.decoded, b.crc_valid) == (f"unknown({codec})", False, True)
    assert [(f.kind, f.position, f.end) for f in found] == [("unknown_codec", g, g + len(bad))]
    assert batches[2].decoded


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [4, 5, 7])
def test_unknown_codec_legacy(magic, codec):
    # zstd (4) did not exist before magic 2: inside a v0/v1 message it is unknown too
    bad = s.message(0, s.zstd(s.message(0, b"x", magic=magic)), magic=magic, attributes=codec)
    data = bad + s.message(1, b"next", magic=magic)
    batches, found = split(kafkalog.scan(data))
    assert (batches[0].compression, batches[0].decoded) == (f"unknown({codec})", False)
    assert [(f.kind, f.position, f.end) for f in found] == [("unknown_codec", 0, len(bad))]
    assert batches[1].records[0].value == b"next"


# ------------------------------------------------------------ limit_exceeded
def test_limit_exceeded_decompressed_size():
    recs = [s.record(i, value=bytes(1000)) for i in range(10)]  # 10 KB inflated
    bad = s.batch_v2(recs, attributes=s.ZSTD, compress=s.zstd, base_offset=100)
    data = three()[0] + bad
    g = len(three()[0])
    limits = Limits(max_decompressed_size=4096)
    batches, found = split(kafkalog.scan(data, limits=limits))
    assert [(f.kind, f.position, f.end) for f in found] == [("limit_exceeded", g, g + len(bad))]
    assert batches[0].decoded and not batches[1].decoded
    assert kafkalog.findings(data) == []  # within the default limits it is fine


def test_limit_exceeded_record_count():
    bad = s.batch_v2([s.record(i) for i in range(20)])
    batches, found = split(kafkalog.scan(bad, limits=Limits(max_records_per_batch=19)))
    assert [(f.kind, f.position, f.end) for f in found] == [("limit_exceeded", 0, len(bad))]


def test_entry_larger_than_max_entry_size_is_not_plausible():
    big = s.batch_v2([s.record(0, value=bytes(5000))])
    small = three()
    data = small[0] + big + small[1]
    batches, found = split(kafkalog.scan(data, limits=Limits(max_entry_size=1000)))
    g = len(small[0])
    assert [b.base_offset for b in batches] == [0, 2]
    assert [(f.kind, f.position, f.end) for f in found] == [
        ("corrupt_batch", g, g + len(big)), ("skipped_bytes", g, g + len(big))
    ]


# --------------------------------------------------------- offset_regression
@pytest.mark.parametrize("base", [0, 1, 3])
def test_offset_regression(base):
    # previous batch ends at offset 3: a batch starting at 3 or below regresses
    parts = three()
    again = s.batch_v2([s.record(0)], base_offset=base)
    data = parts[0] + parts[1] + again + parts[2]
    p = starts([parts[0], parts[1], again, parts[2]])
    batches, found = split(kafkalog.scan(data))
    assert len(batches) == 4 and all(b.is_valid() for b in batches)
    assert [(f.kind, f.position, f.end, f.base_offset, f.last_offset) for f in found] == [
        ("offset_regression", p[2], p[3], base, base)  # the next one (4) is above it again
    ]


def test_gaps_are_not_regressions():
    # a jump forward (compaction, DeleteRecords) is fine
    data = s.batch_v2([s.record(0)], base_offset=0) + s.batch_v2([s.record(0)], base_offset=1000)
    assert kafkalog.findings(data) == []


# ---------------------------------------- invalid_header_key / control records
def test_invalid_header_key():
    rec = s.record(0, headers=[(b"\xff\xfekey", b"v"), ("ok", b"w")])
    data = s.batch_v2([rec], base_offset=7)
    batches, found = split(kafkalog.scan(data))
    assert batches[0].decoded
    keys = [h.key for h in batches[0].records[0].headers]
    assert keys == ["\\xff\\xfekey", "ok"]  # kept, escaped
    assert [(f.kind, f.position, f.end, f.base_offset) for f in found] == [
        ("invalid_header_key", 0, len(data), 7)
    ]


@pytest.mark.parametrize(
    "key,value",
    [
        (b"\x00", None),  # key of one byte: no room for version + type
        (None, None),  # null key
        (b"\x00\x00\x00\x01", b"\x00"),  # COMMIT whose value is too short for its epoch
    ],
)
def test_corrupt_control_record(key, value):
    data = s.batch_v2([s.record(0, key=key, value=value)], attributes=s.CONTROL | s.TRANSACTIONAL,
                      producer_id=1, producer_epoch=0)
    batches, found = split(kafkalog.scan(data))
    assert batches[0].decoded and batches[0].records[0].control is None
    assert [(f.kind, f.position, f.end) for f in found] == [("corrupt_control_record", 0, len(data))]


# --------------------------------------------------------------- byte ranges
def test_byte_range_positions_stay_absolute():
    parts = three() + [s.batch_v2([s.record(0)], base_offset=6)]
    p = starts(parts) + [sum(map(len, parts))]
    data = b"".join(parts)
    whole = list(kafkalog.scan(data))
    part = list(kafkalog.scan(data, byte_range=(p[1], p[3])))
    assert part == whole[1:3]  # same batches, same absolute positions
    assert list(kafkalog.scan(data, byte_range=(p[2], None))) == whole[2:]
    assert list(kafkalog.scan(data, byte_range=(p[2], p[2]))) == []


def test_byte_range_findings_are_absolute():
    parts = three()
    p = starts(parts)
    data = b"".join(parts)
    cut = p[2] + 20
    found = kafkalog.findings(data, byte_range=(p[1], cut))
    # the range ends inside the third batch: a truncated tail at its absolute start
    assert [(f.kind, f.position, f.end, f.bytes) for f in found] == [("truncated_tail", p[2], cut, 20)]
    table = kafkalog.records_table(data, byte_range=(p[1], p[2]))
    assert table.column("batch_position").to_pylist() == [p[1], p[1]]


@pytest.mark.parametrize("byte_range", [(-1, 10), (10, 5), (0, 10**9)])
def test_byte_range_outside_the_source(byte_range, tmp_path):
    data = b"".join(three())
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(data)
    for source in (data, path):
        with pytest.raises(kafkalog.SourceError):
            list(kafkalog.scan(source, byte_range=byte_range))


# ------------------------------------------------------------------ sources
def _segment_with_everything() -> bytes:
    parts = three()
    bad = bytearray(parts[1])
    bad[-1] ^= 1  # crc_mismatch
    return (
        parts[0] + bytes(bad) + b"\xaa" * 20 + parts[2]  # skipped bytes
        + s.wrapper(1, s.GZIP, s.gzip, [s.message(0, b"x"), s.message(1, b"y")], 7)
        + s.kp_v2(s.LZ4, [b"lz4 " * 10] * 2, base_offset=8)
        + bytes(100)  # preallocated tail
    )


def test_every_source_kind_gives_the_same_answer(tmp_path):
    data = _segment_with_everything()
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(data)
    expected = list(kafkalog.scan(data))
    assert {f.kind for f in expected if isinstance(f, Finding)} == {
        "crc_mismatch", "corrupt_batch", "skipped_bytes", "truncated_tail"
    }
    with open(path, "rb") as f:
        from_file = list(kafkalog.scan(f))
    sources = {
        "str path": list(kafkalog.scan(str(path))),
        "pathlib": list(kafkalog.scan(path)),
        "bytes": list(kafkalog.scan(bytes(data))),
        "bytearray": list(kafkalog.scan(bytearray(data))),
        "memoryview": list(kafkalog.scan(memoryview(data))),
        "memoryview slice": list(kafkalog.scan(memoryview(b"??" + data)[2:])),
        "file": from_file,
        "BytesIO": list(kafkalog.scan(io.BytesIO(data))),
    }
    for name, items in sources.items():
        assert items == expected, name
    # the Arrow path agrees too
    t_bytes = kafkalog.decode(data)
    t_path = kafkalog.decode(path)
    t_bio = kafkalog.decode(io.BytesIO(data))
    for a, b, c in zip(t_bytes, t_path, t_bio):
        assert a.equals(b) and a.equals(c)


def test_byte_range_is_the_same_for_every_source(tmp_path):
    data = _segment_with_everything()
    path = tmp_path / "seg.log"
    path.write_bytes(data)
    rng = (len(three()[0]), len(data) - 50)
    expected = list(kafkalog.scan(data, byte_range=rng))
    assert expected and expected[0].position == rng[0]
    with open(path, "rb") as f:
        assert list(kafkalog.scan(f, byte_range=rng)) == expected
    assert list(kafkalog.scan(path, byte_range=rng)) == expected
    assert list(kafkalog.scan(io.BytesIO(data), byte_range=rng)) == expected


def test_records_survive_the_source_closing(tmp_path):
    # records are copies: they stay readable after the file is unmapped
    path = tmp_path / "seg.log"
    path.write_bytes(b"".join(three()))
    batches = list(kafkalog.iter_batches(path))
    assert [r.value for b in batches for r in b.records] == [b"a0", b"b0", b"a2", b"b2", b"a4", b"b4"]


def test_empty_file(tmp_path):
    path = tmp_path / "empty.log"
    path.write_bytes(b"")
    assert list(kafkalog.scan(path)) == []
    assert kafkalog.decode(path).records.num_rows == 0


def test_missing_file_raises_source_error(tmp_path):
    missing = tmp_path / "nope" / "00000000000000000000.log"
    with pytest.raises(kafkalog.SourceError) as err:
        list(kafkalog.scan(missing))
    assert isinstance(err.value, kafkalog.KafkaLogError) and isinstance(err.value, OSError)
    assert "00000000000000000000.log" in str(err.value)
    with pytest.raises(kafkalog.SourceError):
        kafkalog.decode(str(missing))
    with pytest.raises(kafkalog.SourceError):
        kafkalog.findings(missing)


def test_directory_is_not_a_source(tmp_path):
    with pytest.raises(kafkalog.SourceError):
        list(kafkalog.scan(tmp_path))


@pytest.mark.parametrize("source", [io.StringIO("text"), 12345, None, ["a"]],
                         ids=["text file", "int", "None", "list"])
def test_unusable_sources_raise_source_error(source):
    with pytest.raises(kafkalog.SourceError):
        list(kafkalog.scan(source))


def test_batches_behind_a_damaged_size_field_are_recovered():
    # Batch 0's size field is changed to cover batches 0 and 1 exactly, so its
    # declared end is a valid entry start (batch 2). Its CRC then fails and its
    # records run on: the reader must still find batch 1 inside that range.
    parts = three()
    data = bytearray(b"".join(parts))
    data[8:12] = (len(parts[0]) + len(parts[1]) - 12).to_bytes(4, "big")
    batches, found = split(kafkalog.scan(bytes(data)))
    assert [(b.base_offset, b.position, b.decoded) for b in batches] == [
        (0, 0, False), (2, len(parts[0]), True), (4, len(parts[0]) + len(parts[1]), True),
    ]
    assert [f.kind for f in found] == ["crc_mismatch", "corrupt_batch"]
    assert [len(b.records) for b in batches[1:]] == [2, 2]


def test_resync_over_a_large_zero_region_is_exact():
    # a broken entry, 8 MiB of zeros (as a preallocated, partly rewritten file
    # might hold), then a valid batch: skipped exactly up to that batch
    parts = three()
    junk = b"\xff" * 30
    zeros = bytes(8 << 20)
    data = parts[0] + junk + zeros + parts[1]
    g = len(parts[0])
    batches, found = split(kafkalog.scan(data))
    assert [b.base_offset for b in batches] == [0, 2]
    stop = g + 30 + len(zeros)
    assert [(f.kind, f.position, f.end) for f in found] == [
        ("corrupt_batch", g, stop), ("skipped_bytes", g, stop),
    ]
