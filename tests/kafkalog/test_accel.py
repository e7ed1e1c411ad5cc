"""The compiled fast path and the pure-Python reference build identical tables.

The compiled path (kafkalog._speedups) decodes v2 records straight into Arrow
buffers; anything irregular it hands back to the Python reader. These tests
feed both paths the same inputs — real broker segments, writer output in every
shape, damaged files, tiny flush sizes — and compare all four tables whole.
(The robustness suite does the same on every hypothesis input.)
"""

from __future__ import annotations

import json
import os
import random
import struct
import subprocess
import sys

import pytest

import kafkalog
from kafkalog.writer import SegmentWriter, WriteRecord, encode_v2_batch

from tests.paths import assert_same_tables, decode_both, pure_python
from tests.segments import CORPUS_FILES as FILES, CORPUS_IDS as IDS

needs_compiled = pytest.mark.skipif(not kafkalog.ACCELERATED, reason="compiled path not built")
T0 = 1_763_683_200_000


def test_compiled_path_is_built_where_required():
    # `make test` sets this: the install must have built the extension
    if os.environ.get("KAFKALOG_REQUIRE_COMPILED") == "1":
        assert kafkalog.ACCELERATED


def test_environment_variable_forces_pure_python():
    from kafkalog import _accel

    with pure_python(True):
        assert not _accel.active()
    with pure_python(False):
        assert _accel.active() == kafkalog.ACCELERATED


@needs_compiled
def test_compiled_batch_layout_is_default_records():
    # the compiled path's C constants (offsets into the 61-byte v2 header, flag masks) are
    # the pure path's: one layout, written out in _speedups only so that C folds it
    from kafkalog import _speedups, default_records as v2

    assert _speedups.V2_LAYOUT == {name: getattr(v2, name) for name in _speedups.V2_LAYOUT}
    assert _speedups.V2_LAYOUT["RECORDS_OFFSET"] == v2.HEADER.size == 61
    offsets = sorted((v, k) for k, v in _speedups.V2_LAYOUT.items()
                     if k.endswith("_OFFSET") and k not in ("RECORDS_OFFSET",))
    assert [k for _, k in offsets] == [  # one per HEADER field, in its order
        "BASE_OFFSET_OFFSET", "LENGTH_OFFSET", "PARTITION_LEADER_EPOCH_OFFSET", "MAGIC_OFFSET",
        "CRC_OFFSET", "ATTRIBUTES_OFFSET", "LAST_OFFSET_DELTA_OFFSET", "BASE_TIMESTAMP_OFFSET",
        "MAX_TIMESTAMP_OFFSET", "PRODUCER_ID_OFFSET", "PRODUCER_EPOCH_OFFSET",
        "BASE_SEQUENCE_OFFSET", "RECORDS_COUNT_OFFSET"]
    sizes = [b - a for (a, _), (b, _) in zip(offsets, offsets[1:] + [(61, "")])]
    assert sizes == [struct.calcsize(">" + c) for c in v2.HEADER.format.lstrip(">")]


@needs_compiled
@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_corpus_tables_identical(path):
    assert_same_tables(*decode_both(path))


def _records(n, *, seed=0, headers=True, big=False):
    out = []
    for i in range(n):
        key = None if i % 7 == 3 else (b"" if i % 11 == 5 else b"key-%d" % (i + seed))
        value = None if i % 13 == 4 else b"v" * ((i * 37 + seed) % (5000 if big else 300))
        hs = ()
        if headers and i % 3:
            hs = (("trace", b"%08d" % i), ("empty", b""), ("null", None))[: i % 4]
        out.append(WriteRecord(key, value, headers=hs, timestamp=T0 + i * 997 - (i % 5) * 3000))
    return out


def _segment(tmp_path) -> str:
    with SegmentWriter(tmp_path, 100) as w:
        for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
            w.append(_records(40, seed=len(codec)), codec=codec)
            w.append(_records(3, big=True), codec=codec, producer_id=7, producer_epoch=1,
                     base_sequence=2**31 - 2)
        w.append(_records(5), codec="lz4", producer_id=9, producer_epoch=0, base_sequence=0,
                 transactional=True)
        w.append_marker(producer_id=9, producer_epoch=0, commit=False, coordinator_epoch=3,
                        timestamp=T0)
        w.append(_records(4), timestamp_type="LogAppendTime", log_append_time=T0 + 1)
        w.append([WriteRecord(b"a", b"1", offset_delta=0), WriteRecord(b"b", None, offset_delta=6)],
                 last_offset_delta=9, codec="zstd")
        w.append([], last_offset_delta=2)  # empty batch
        w.append([WriteRecord(b"k", b"x", timestamp=-1)])  # NO_TIMESTAMP -> null
        # a header key that is not UTF-8: the compiled path hands this batch to Python
        w.append([WriteRecord(b"k", b"v", headers=((b"\xff\xfe", b"x"),))])
        for magic in (0, 1):
            w.append(_records(6, headers=False), magic=magic, codec="gzip")
            w.append(_records(1, headers=False), magic=magic)
        w.append(_records(10), delete_horizon_ms=T0 + 5)
        return w.path


@needs_compiled
@pytest.mark.parametrize("max_rows", [1, 7, 64, 65536])
def test_writer_segments_identical_at_any_flush_size(tmp_path, max_rows):
    path = _segment(tmp_path)
    pure, compiled = decode_both(path, max_rows=max_rows)
    assert_same_tables(pure, compiled)
    assert pure.records.num_rows > 200
    assert "invalid_header_key" in pure.findings.column("kind").to_pylist()
    # every shape in the segment reached the tables
    assert set(pure.records.column("magic").to_pylist()) == {0, 1, 2}
    assert set(pure.records.column("compression").to_pylist()) == {
        "none", "gzip", "snappy", "lz4", "zstd"}


@pytest.mark.parametrize("max_rows", [1, 64, 65536])
def test_dictionary_records_hold_the_same_values(tmp_path, max_rows):
    """``dictionary=True`` (what the Spark job asks for): the records' timestamp_type and
    compression as dictionary<int8, string>, identical on both paths, with the values
    of the plain tables (magic 0's null timestamp type included)."""
    from kafkalog.arrow import RECORDS_DICTIONARY_SCHEMA, RECORDS_SCHEMA

    path = _segment(tmp_path)
    plain, _ = decode_both(path, max_rows=max_rows)
    pure, compiled = decode_both(path, max_rows=max_rows, dictionary=True)
    if kafkalog.ACCELERATED:
        assert_same_tables(pure, compiled)
    assert pure.records.schema == RECORDS_DICTIONARY_SCHEMA
    assert pure.records.cast(RECORDS_SCHEMA).equals(plain.records)
    assert None in pure.records.column("timestamp_type").to_pylist()
    for name in ("batches", "markers", "findings"):
        assert getattr(pure, name).equals(getattr(plain, name))
    empty = kafkalog.records_table(path, byte_range=(0, 0), dictionary=True)
    assert empty.num_rows == 0 and empty.schema == RECORDS_DICTIONARY_SCHEMA


def _damaged(path) -> bytes:
    data = bytearray(open(path, "rb").read())
    batches = list(kafkalog.iter_batches(bytes(data)))
    for b in batches[1:20:3]:
        data[b.position + b.size - 5] ^= 0x5A  # inside the records: CRC fails, maybe more
    data[batches[-4].position + 8] ^= 0x7F  # a size field
    return bytes(data[:-30]) + bytes(500)  # torn tail, zero padding


@needs_compiled
def test_damaged_segment_identical(tmp_path):
    pure, compiled = decode_both(_damaged(_segment(tmp_path)))
    assert_same_tables(pure, compiled)
    kinds = set(pure.findings.column("kind").to_pylist())
    assert {"crc_mismatch", "truncated_tail"} <= kinds
    assert False in pure.records.column("crc_valid").to_pylist()


@needs_compiled
def test_crc_not_verified_identical(tmp_path):
    assert_same_tables(*decode_both(_segment(tmp_path), verify_crc=False))


@needs_compiled
def test_byte_range_identical(tmp_path):
    path = _segment(tmp_path)
    batches = list(kafkalog.iter_batches(path))
    rng = (batches[3].position, batches[9].position)
    pure, compiled = decode_both(path, byte_range=rng)
    assert_same_tables(pure, compiled)
    assert pure.batches.num_rows == 6


@needs_compiled
def test_v2_boundary_values_identical():
    # lengths and deltas at the varint width edges, offsets and timestamps near int64's
    recs = [WriteRecord(b"k" * n, b"v" * (n * 3), timestamp=T0 + d, offset_delta=i * 8191)
            for i, (n, d) in enumerate([(0, 0), (63, -64), (64, 8191), (8192, -8193),
                                        (1, 2**40), (127, -(2**40))])]
    parts = [encode_v2_batch(0, recs, codec="none"),
             encode_v2_batch(2**63 - 2**32, recs[:2]),  # near the offset edge: Python decides
             encode_v2_batch(10**12, recs[:3], base_timestamp=2**63 - 10)]
    assert_same_tables(*decode_both(b"".join(parts)))


def test_install_without_compiler_falls_back(tmp_path):
    # setup.py's build step must not fail the install when compiling fails
    env = dict(os.environ, CC="/bin/false", LDSHARED="/bin/false")
    p = subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--build-lib", str(tmp_path / "lib"),
         "--build-temp", str(tmp_path / "tmp")],
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
        env=env, capture_output=True, text=True, timeout=300,
    )
    assert p.returncode == 0, p.stderr
    assert "the compiled fast path could not be built" in p.stderr
    assert "installing the pure-Python decoder only" in p.stderr
    assert not list((tmp_path / "lib").rglob("*.so"))


@needs_compiled
@pytest.mark.parametrize("codec", ["gzip", "lz4", "zstd"])
def test_compressed_chunks_end_where_the_values_fill_the_reserved_buffer(codec):
    # the compiled sink reserves its value buffer from the input size; values
    # of compressed batches inflate past it, and the chunk ends there instead
    # of growing the buffer (a copy of every value): no chunk's values exceed
    # the reservation unless one batch alone does, and nothing is lost
    data = b"".join(
        encode_v2_batch(i * 10, [WriteRecord(b"k%d" % j, (b"%08d " % (i * 10 + j)) * 250)
                                 for j in range(10)], codec=codec)
        for i in range(60))
    reserved = len(data) + (1 << 16)  # FastSink.run: min(input, max_bytes) + 64 KiB
    with pure_python(False):
        compiled = [rb for _, rb in kafkalog.stream(data, tables=("records",))]
    assert len(compiled) > 1
    for rb in compiled:
        values = rb.column("value")
        value_bytes = sum(len(v) for v in values.to_pylist())
        assert value_bytes <= reserved or rb.num_rows == 10
    assert sum(rb.num_rows for rb in compiled) == 600
    assert_same_tables(*decode_both(data))


@needs_compiled
def test_chunks_after_the_first_are_sized_from_the_last_and_end_early_when_values_grow():
    # after a flush the value buffer follows the last chunk's value bytes: a chunk
    # whose values are far bigger ends where they would not fit, nothing is lost
    small = [encode_v2_batch(i * 50, [WriteRecord(b"k", b"v%d" % j) for j in range(50)])
             for i in range(40)]  # 2,000 rows of 2-5 byte values
    big = [encode_v2_batch(2000 + i * 10, [WriteRecord(b"k", bytes([i]) * 30_000)
                                           for _ in range(10)]) for i in range(20)]
    data = b"".join(small + big)
    with pure_python(False):
        chunks = [rb for _, rb in kafkalog.stream(data, tables=("records",), max_rows=1000)]
    assert [rb.num_rows for rb in chunks[:2]] == [1000, 1000]
    assert all(rb.num_rows < 1000 for rb in chunks[2:]) and len(chunks) > 3
    assert sum(rb.num_rows for rb in chunks) == 2200
    assert_same_tables(*decode_both(data, max_rows=1000))


def _big_segment(seed: int) -> bytes:
    """~1.5 MB of v2 batches whose every value depends on ``seed``."""
    rnd = random.Random(seed)
    return b"".join(
        encode_v2_batch(i * 20, [WriteRecord(b"k%d-%d" % (seed, j), rnd.randbytes(rnd.randrange(5000)),
                                             headers=(("h", b"%d" % seed),))
                                 for j in range(20)], codec=("none", "lz4", "zstd")[i % 3])
        for i in range(30))


@needs_compiled
def test_compiled_module_decodes_into_plain_buffers_without_pyarrow():
    # _speedups writes the columns into buffers of its own; making them Arrow arrays is
    # kafkalog.arrow's (FastSink.flush). With pyarrow unimportable the module loads and
    # decodes. (`import kafkalog` itself imports kafkalog.arrow, so the package is stood
    # in for by its folder: only the compiled module and what it imports run.)
    code = """
import json, sys, types
sys.modules["pyarrow"] = None  # every import of it fails
package = types.ModuleType("kafkalog")
package.__path__ = [sys.argv[1]]
sys.modules["kafkalog"] = package
from kafkalog import _speedups
from kafkalog.default_records import encode_varint as v

body = bytes(1) + v(0) + v(0) + v(-1) + v(3) + b"abc" + v(0)  # one record: no key, "abc"
records = v(len(body)) + body
columns = _speedups.RecordColumns(False)
assert columns.add_v2(records, 1, 40, 40, 1000, 1000, False, 0, 61 + len(records), "none",
                      -1, -1, -1, 0, False, True) == 1
n, out = columns.flush()
key_validity, _, _ = out["key"]
_, value_offsets, value_data = out["value"]
print(json.dumps({
    "rows": n, "offsets": memoryview(out["offset"][1]).cast("q").tolist(),
    "key_valid_bits": memoryview(key_validity)[0], "value_ends": memoryview(value_offsets).cast("i").tolist(),
    "values": bytes(value_data).decode(), "read_only": memoryview(value_data).readonly,
    "pyarrow": sys.modules.get("pyarrow") is not None}))
"""
    p = subprocess.run([sys.executable, "-c", code, os.path.dirname(kafkalog.__file__)],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout) == {  # row 0's key bit clear: null
        "rows": 1, "offsets": [40], "key_valid_bits": 0xFE, "value_ends": [0, 3], "values": "abc",
        "read_only": True, "pyarrow": False}


@needs_compiled
def test_kept_buffers_serve_the_next_decode_and_never_a_live_table():
    # a freed table's big buffers are kept and written again by the next decode;
    # a table (or a slice of it) that is still held keeps its own bytes whatever
    # is decoded after it
    import gc

    from kafkalog import _speedups

    a_bytes, b_bytes = _big_segment(1), _big_segment(2)
    with pure_python(True):
        want_a = kafkalog.records_table(a_bytes)
        want_b = kafkalog.records_table(b_bytes)
    old = kafkalog.reuse_limit()
    try:
        kafkalog.reuse_limit(0)
        kafkalog.reuse_limit(old)
        assert _speedups.spare_bytes() == 0
        with pure_python(False):
            a = kafkalog.records_table(a_bytes)
            part = a.slice(123, 200)
            want_part = want_a.slice(123, 200)
            for _ in range(3):
                gc.collect()
                kept = _speedups.spare_bytes()
                b = kafkalog.records_table(b_bytes)
                taken = kept - _speedups.spare_bytes()
                assert b.equals(want_b)
                del b
                gc.collect()
                # b's buffers went back, and the next b takes most of them again
                assert _speedups.spare_bytes() > 2_000_000
            assert taken > 2_000_000, (kept, taken)
            assert a.equals(want_a)
            del a
            gc.collect()  # the slice holds every buffer it reaches: nothing of a is kept yet
            kept = _speedups.spare_bytes()
            for _ in range(3):
                assert kafkalog.records_table(b_bytes).equals(want_b)
            gc.collect()
            assert part.equals(want_part)
            del part
            gc.collect()
            assert _speedups.spare_bytes() > kept
            kafkalog.reuse_limit(1_000_000)  # the oldest go first, down to the limit
            assert 0 < _speedups.spare_bytes() <= 1_000_000 or _speedups.spare_bytes() == 0
            kafkalog.reuse_limit(0)
            assert _speedups.spare_bytes() == 0
            assert kafkalog.records_table(a_bytes).equals(want_a)
            gc.collect()
            assert _speedups.spare_bytes() == 0  # limit 0: nothing kept
    finally:
        kafkalog.reuse_limit(old)
    with pytest.raises(ValueError):
        kafkalog.reuse_limit(-1)


@pytest.mark.parametrize("pure", [True, False])
def test_streamed_record_batches_respect_max_bytes(pure):
    # 50 batches of 4 records of 100 kB: chunks must flush by bytes, not only by rows
    data = b"".join(
        encode_v2_batch(i * 4, [WriteRecord(b"k", bytes([i]) * 100_000) for _ in range(4)])
        for i in range(50))
    with pure_python(pure):
        chunks = [rb for _, rb in kafkalog.stream(data, tables=("records",), max_bytes=1_000_000)]
    assert sum(rb.num_rows for rb in chunks) == 200
    # a chunk closes once it holds max_bytes of batches: at most one batch (~400 kB) over
    assert max(rb.nbytes for rb in chunks) < 1_000_000 + 500_000
    assert len(chunks) >= 14


@needs_compiled
@pytest.mark.parametrize("path", FILES[:6], ids=IDS[:6])
def test_compiled_crc32c_and_its_table_twin_match_the_crc32c_package(path):
    # the fast path's CRC-32C (SSE4.2 where the CPU has it, else a table) and
    # its table twin agree with the crc32c package on every batch's CRC range
    from crc32c import crc32c

    from kafkalog import _speedups

    data = path.read_bytes()
    for b in kafkalog.iter_batches(data):
        covered = data[b.position + 21 : b.end]
        expected = crc32c(covered)
        assert _speedups.crc32c(covered) == expected == b.crc
        assert _speedups.crc32c(covered, software=True) == expected


@needs_compiled
@pytest.mark.parametrize(
    "size",
    # around the 3-stream blocks of the hardware path (3 x 256 and 3 x 4096 bytes)
    [0, 1, 7, 8, 9, 63, 64, 65, 767, 768, 769, 775, 776, 1536, 4096, 12_287, 12_288,
     12_289, 12_288 + 768, 12_288 + 767, 16_384, 24_576, 100_003],
)
def test_compiled_crc32c_at_length_edges(size):
    from crc32c import crc32c

    from kafkalog import _speedups

    data = bytes((i * 131 + 7) & 0xFF for i in range(size))
    assert _speedups.crc32c(data) == _speedups.crc32c(data, software=True) == crc32c(data)
    noise = random.Random(size).randbytes(size)
    assert _speedups.crc32c(noise) == crc32c(noise)
    # and at every alignment of the start
    for shift in range(1, 8):
        assert _speedups.crc32c(noise[shift:]) == crc32c(noise[shift:])


def _frames():
    """lz4 and zstd payloads as producers write them, and broken in every way a
    payload breaks: (codec id, payload, whether it is whole)."""
    import lz4.frame
    import zstandard

    out = []
    for size in (0, 1, 100, 70_000, 300_000):
        raw = bytes((i * 7919 + size) % 251 for i in range(size // 4)) * 4
        for codec, whole in (
                (3, lz4.frame.compress(raw, store_size=False, block_linked=False)),
                (3, lz4.frame.compress(raw, content_checksum=True, block_checksum=True)),
                (4, zstandard.ZstdCompressor(level=3).compress(raw)),
                (4, zstandard.ZstdCompressor(write_content_size=False).compress(raw))):
            out += [(codec, whole, True), (codec, whole + whole, True),
                    (codec, whole[:-1], False), (codec, whole[: len(whole) // 2], False),
                    (codec, whole + b"xx", False), (codec, whole + bytes(8), False)]
            flipped = bytearray(whole)
            flipped[len(whole) // 2] ^= 0x41
            out.append((codec, bytes(flipped), False))
    skippable = b"\x50\x2a\x4d\x18\x04\x00\x00\x00abcd"  # a skippable frame, both formats
    out += [(3, b"", True), (4, b"", True), (3, b"garbage", False), (4, b"garbage", False),
            (3, skippable + lz4.frame.compress(b"hello"), True),
            (4, skippable + zstandard.ZstdCompressor().compress(b"hello"), True)]
    return out


@needs_compiled
def test_c_inflater_agrees_with_the_python_codecs():
    """The fast path inflates lz4 and zstd through the system's C libraries. Where
    they decide, the bytes are the Python codecs'; on anything broken or over the
    limit they step aside (None) and the Python codec reports, as before."""
    from kafkalog import _speedups, codecs

    if _speedups.C_CODECS != {3, 4}:
        pytest.skip("liblz4.so.1 / libzstd.so.1 not on this machine: the Python codecs inflate")
    decided = 0
    for codec, payload, whole in _frames():
        for limit in (1 << 28, 100_000, 99_999, 1000, 0):
            try:
                expected = codecs.decompress(codec, payload, 2, limit)
            except kafkalog.KafkaLogError:
                expected = None
            got = _speedups.inflate(codec, payload, limit)
            if got is not None:
                decided += 1
                assert got == expected, (codec, len(payload), limit)
            elif whole and limit == 1 << 28:
                raise AssertionError(f"a whole payload was left to Python: {codec} {len(payload)}")
    assert decided >= 40


@pytest.mark.parametrize("options", [{}, {"verify_crc": False}, {"max_rows": 7},
                                     {"max_bytes": 5000}], ids=["default", "no-crc", "rows", "bytes"])
def test_pure_runs_of_regular_batches_equal_the_reader_batch_by_batch(tmp_path, options,
                                                                      monkeypatch):
    """On the pure path, runs of regular v2 batches skip the reader's Batch
    objects (``_RecordColumns.run``, the compiled scan_run's twin): the four
    tables are the ones the reader builds batch by batch, on real segments,
    writer output and damaged input (what a run does not take, the reader does)."""
    from kafkalog.arrow import PureRecordColumns as _RecordColumns

    regular = _segment(tmp_path)
    recs = _records(4)
    regression = b"".join(encode_v2_batch(base, recs) for base in (0, 10, 5, 20, 20, 30))
    sources = [regular, _damaged(regular), regression, *FILES]
    with pure_python(True):
        runs = [kafkalog.decode(src, **options) for src in sources]
        monkeypatch.setattr(_RecordColumns, "run", None)
        one_by_one = [kafkalog.decode(src, **options) for src in sources]
    for a, b in zip(runs, one_by_one):
        assert_same_tables(a, b)
    assert sum(t.records.num_rows for t in runs) > 100
    assert runs[2].findings.column("kind").to_pylist() == ["offset_regression"] * 2


def test_lz4_in_one_call_agrees_with_the_streaming_loop(monkeypatch):
    """Payloads too small to inflate past the limit go through one
    ``lz4.frame.decompress`` call; anything it does not decode whole is left to
    the frame-by-frame loop. Both give the same bytes or the same error."""
    from kafkalog import codecs

    def outcome(payload, limit):
        try:
            return codecs.decompress(3, payload, 2, limit)
        except kafkalog.KafkaLogError as err:
            return f"{type(err).__name__}: {err}"

    frames = [(p, whole) for codec, p, whole in _frames() if codec == 3]
    limits = (1 << 28, 100_000, 1000)
    one_call = {(i, limit): outcome(p, limit) for i, (p, _) in enumerate(frames) for limit in limits}
    monkeypatch.setattr(codecs, "_LZ4_MAX_RATIO", 1 << 40)  # the loop only
    for (i, limit), got in one_call.items():
        assert got == outcome(frames[i][0], limit), (i, limit)
    assert sum(isinstance(v, bytes) for v in one_call.values()) >= 15
    assert sum(isinstance(v, str) for v in one_call.values()) >= 15


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
def test_pure_chunks_end_before_values_outgrow_their_buffer(codec, monkeypatch):
    # the pure path's value buffer is sized from max_bytes (then from the last
    # chunk); compressed batches inflate past it: a chunk ends once its values
    # fill 7/8 of the buffer instead of growing it (a copy of every value); only
    # a batch bigger than the buffer grows it; nothing is lost either way
    from kafkalog.arrow import RecordSink

    grown = []
    grow = RecordSink.grow
    monkeypatch.setattr(RecordSink, "grow", lambda self, *a: grown.append(a) or grow(self, *a))
    small = [encode_v2_batch(i * 10, [WriteRecord(b"k", (b"%08d " % (i * 10 + j)) * 250)
                                      for j in range(10)], codec=codec) for i in range(60)]
    big = encode_v2_batch(600, [WriteRecord(b"k", bytes([j]) * 150_000) for j in range(20)],
                          codec=codec)  # 3 MB inflated
    max_bytes = 40_000  # the first buffer: 40,000 + a quarter + 64 KiB
    for data, rows in ((b"".join(small), 600), (b"".join(small) + big, 620)):
        grown.clear()
        with pure_python(True):
            chunks = [rb for _, rb in kafkalog.stream(data, tables=("records",),
                                                      max_bytes=max_bytes)]
        assert sum(rb.num_rows for rb in chunks) == rows and len(chunks) > 3
        if rows == 600:
            assert grown == []
        else:
            assert grown and all(name == "values" for name, _, _ in grown)
            last = chunks[-1].column("value").to_pylist()[-20:]
            assert last == [bytes([j]) * 150_000 for j in range(20)]
        if kafkalog.ACCELERATED:
            assert_same_tables(*decode_both(data, max_bytes=max_bytes))


@needs_compiled
def test_damaged_compressed_payloads_identical(tmp_path):
    """With CRCs not verified, damage inside lz4/zstd payloads reaches the
    inflaters: both paths give the same tables and findings."""
    path = _segment(tmp_path)
    data = bytearray(open(path, "rb").read())
    batches = [b for b in kafkalog.iter_batches(bytes(data)) if b.compression in ("lz4", "zstd")]
    for i, b in enumerate(batches):  # the frame's magic number, or a byte inside the frame
        at = b.position + 61 + (0 if i % 2 == 0 else (b.size - 61) * (i % 3 + 1) // 4)
        data[at] ^= 0x24 << (i % 3)
    pure, compiled = decode_both(bytes(data), verify_crc=False)
    assert_same_tables(pure, compiled)
    assert "decompression_error" in pure.findings.column("kind").to_pylist()
