"""The public framing API: ``kafkalog.frame`` (a segment's entries by their framing, no
record decoded) and ``kafkalog.read_batch_head`` (the fixed header of one entry).

Inputs are the real corpus (each entry as ``iter_batches`` reads it) and entries packed
by hand in ``segments`` (an encoder independent of kafkalog's), with damage at known
places. ``frame`` runs on both paths (runs of v2 batches are framed in C where the
compiled path is active): they must give the same entries, end and next entry.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest

import kafkalog
from kafkalog.writer import WriteRecord, encode_v2_batch

from tests import segments as s
from tests.paths import pure_python
from tests.segments import CORPUS_FILES as FILES, CORPUS_IDS as IDS

BOTH = pytest.mark.parametrize("pure", [True, False], ids=["pure", "compiled"])


def framed(source, pure: bool, **options) -> kafkalog.Frames:
    """``kafkalog.frame`` on one path; on the compiled one, the same as the pure one."""
    with pure_python(pure):
        got = kafkalog.frame(source, **options)
    if not pure:
        with pure_python(True):
            twin = kafkalog.frame(source, **options)
        assert (got.data, got.end, got.next_entry) == (twin.data, twin.end, twin.next_entry)
    return got


def as_frames(batches) -> list[kafkalog.Frame]:
    """What ``frame`` must say of entries ``iter_batches`` decoded."""
    return [kafkalog.Frame(b.position, b.size, b.magic, b.base_offset, b.last_offset, b.crc,
                           b.crc_valid) for b in batches]


@BOTH
@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_every_corpus_entry_is_framed_as_the_reader_reads_it(path, pure):
    f = framed(path, pure)
    assert list(f) == as_frames(kafkalog.iter_batches(path))
    assert (f.end, f.next_entry) == (path.stat().st_size, None)
    rows = np.frombuffer(f.data, np.int64).reshape(-1, len(kafkalog.FRAME_COLUMNS))
    assert rows[:, kafkalog.FRAME_COLUMNS.index("position")].tolist() == [e.position for e in f]


V2 = [s.batch_v2([s.record(i, i, b"k%d" % i, b"v" * i) for i in range(n)], base_offset=10 * n,
                 producer_id=7, producer_epoch=1, base_sequence=100)
      for n in (1, 3, 5, 2)]
PLAIN_V0 = s.message(60, b"plain", magic=0)
WRAPPER_V1 = s.wrapper(1, s.GZIP, s.gzip, [s.message(i, b"in%d" % i) for i in range(3)], 63)


def at(data: bytes, *entries: bytes) -> list[int]:
    """Where each of ``entries`` starts in ``data``."""
    return [data.index(e) for e in entries]


@BOTH
def test_mixed_magics_with_a_compressed_wrapper(pure):
    # v2 runs around v0/v1 entries; a compressed wrapper stores only its last offset
    data = V2[0] + PLAIN_V0 + WRAPPER_V1 + V2[1] + V2[2]
    f = framed(data, pure)
    p = at(data, V2[0], PLAIN_V0, WRAPPER_V1, V2[1], V2[2])
    crc = [struct.unpack_from(">I", e, 17 if e[16] == 2 else 12)[0]
           for e in (V2[0], PLAIN_V0, WRAPPER_V1, V2[1], V2[2])]
    assert list(f) == [
        kafkalog.Frame(p[0], len(V2[0]), 2, 10, 10, crc[0], True),
        kafkalog.Frame(p[1], len(PLAIN_V0), 0, 60, 60, crc[1], True),
        kafkalog.Frame(p[2], len(WRAPPER_V1), 1, None, 63, crc[2], True),
        kafkalog.Frame(p[3], len(V2[1]), 2, 30, 32, crc[3], True),
        kafkalog.Frame(p[4], len(V2[2]), 2, 50, 54, crc[4], True),
    ]
    assert (f.end, f.next_entry, len(f)) == (len(data), None, 5)
    # the wrapper's row: its stored (last) offset, and has_base_offset 0
    row = dict(zip(kafkalog.FRAME_COLUMNS, f.data[2 * 8:3 * 8]))
    assert (row["base_offset"], row["has_base_offset"], row["magic"]) == (63, 0, 1)


@BOTH
def test_damaged_crc_is_framed_and_said(pure):
    damaged = bytearray(V2[1])
    damaged[-1] ^= 0x01  # a record byte: inside the CRC
    old = s.message(70, b"x", magic=1)
    bad_old = old[:-1] + bytes([old[-1] ^ 0x01])
    data = V2[0] + bytes(damaged) + V2[2] + bad_old
    assert [e.crc_valid for e in framed(data, pure)] == [True, False, True, False]


@BOTH
def test_framing_stops_where_entries_stop(pure):
    whole = V2[0] + V2[1] + V2[2]
    # a torn tail: nothing verifies after it
    f = framed(whole[:-5], pure)
    assert (len(f), f.end, f.next_entry) == (2, len(V2[0]) + len(V2[1]), None)
    # fewer bytes than an entry header at the end
    f = framed(whole + b"\x00" * 10, pure)
    assert (len(f), f.end, f.next_entry) == (3, len(whole), None)
    # garbage between batches: framing stops at it, the next batch verifies
    hole = V2[0] + b"\x01" * 30 + V2[1]
    f = framed(hole, pure)
    assert (len(f), f.end, f.next_entry) == (1, len(V2[0]), len(V2[0]) + 30)
    # an impossible magic
    bad_magic = bytearray(V2[1])
    bad_magic[16] = 7
    f = framed(V2[0] + bytes(bad_magic) + V2[2], pure)
    assert (len(f), f.end, f.next_entry) == (1, len(V2[0]), len(V2[0]) + len(V2[1]))
    # a base offset whose last offset leaves int64 (outside the CRC: the batch verifies)
    near_top = bytearray(V2[2])  # last offset delta 4
    struct.pack_into(">q", near_top, 0, (1 << 63) - 3)
    f = framed(V2[0] + bytes(near_top) + V2[3], pure)
    assert (len(f), f.end, f.next_entry) == (1, len(V2[0]), len(V2[0]))
    # entries bigger than the limits allow
    f = framed(whole, pure, limits=kafkalog.Limits(max_entry_size=len(V2[1]) - 1))
    assert (len(f), f.end) == (1, len(V2[0]))
    assert list(framed(b"", pure)) == [] and framed(b"", pure).end == 0


@BOTH
def test_positions_are_absolute_in_a_byte_range_and_a_slice(pure):
    data = V2[0] + V2[1] + V2[2] + V2[3]
    a, b = len(V2[0]), len(V2[0]) + len(V2[1]) + len(V2[2])
    want = as_frames(kafkalog.iter_batches(data))[1:3]
    in_range = framed(data, pure, byte_range=(a, b))
    in_slice = framed(kafkalog.Slice(data[a:b], a), pure)
    assert list(in_range) == list(in_slice) == want
    assert in_range.end == in_slice.end == b


@BOTH
def test_many_batches_fill_several_rounds_of_rows(pure):
    # more batches than the compiled framer's first reservation of rows (64 times the
    # smallest batch's bytes each, plus 1024): they are all framed, in order
    data = b"".join(encode_v2_batch(i, [WriteRecord(None, b"v")]) for i in range(3000))
    f = framed(data, pure)
    assert [e.base_offset for e in f] == list(range(3000)) and f.end == len(data)


def test_read_batch_head_reads_every_v2_header_field():
    data = b"\xee" * 5 + s.batch_v2(
        [s.record(0), s.record(4)], base_offset=1234, last_offset_delta=4,
        attributes=s.TRANSACTIONAL | 2, base_timestamp=1_700_000_000_001,
        max_timestamp=1_700_000_000_009, producer_id=77, producer_epoch=3, base_sequence=99,
        leader_epoch=12, compress=s.snappy_raw)
    head = kafkalog.read_batch_head(data, 5)
    assert head == kafkalog.BatchHead(
        size=len(data) - 5, magic=2, offset=1234,
        crc=struct.unpack_from(">I", data, 5 + 17)[0], attributes=s.TRANSACTIONAL | 2,
        first_timestamp=1_700_000_000_001, max_timestamp=1_700_000_000_009,
        partition_leader_epoch=12, last_offset_delta=4, producer_id=77, producer_epoch=3,
        base_sequence=99, record_count=2)
    # the fields are the decoder's
    (b,) = kafkalog.iter_batches(data[5:])
    assert (head.crc, head.size, head.attributes) == (b.crc, b.size, b.attributes)
    # exactly the 61 bytes of the header are needed, no more
    assert kafkalog.BATCH_HEAD_SIZE == 61
    assert kafkalog.read_batch_head(data[:5 + 61], 5) == head
    with pytest.raises(kafkalog.CorruptBatchError, match="fewer than a magic 2 header's 61"):
        kafkalog.read_batch_head(data[:5 + 60], 5)


def test_read_batch_head_reads_v0_and_v1_headers():
    v0 = s.message(41, b"value", b"key", magic=0)
    v1 = s.wrapper(1, s.GZIP, s.gzip, [s.message(0, b"a"), s.message(1, b"b")], 77,
                   timestamp=1_600_000_000_123, log_append_time=True)
    assert kafkalog.read_batch_head(v0) == kafkalog.BatchHead(
        len(v0), 0, 41, struct.unpack_from(">I", v0, 12)[0], 0, None, None,
        None, None, None, None, None, None)
    assert kafkalog.read_batch_head(v1) == kafkalog.BatchHead(
        len(v1), 1, 77, struct.unpack_from(">I", v1, 12)[0], s.GZIP | 0x08,
        1_600_000_000_123, 1_600_000_000_123, None, None, None, None, None, None)
    # a v0 header is 18 bytes, a v1 header 26: as short an entry as can be is enough
    assert kafkalog.read_batch_head(v0[:18]) == kafkalog.read_batch_head(v0)
    with pytest.raises(kafkalog.CorruptBatchError):
        kafkalog.read_batch_head(v1[:25])


def test_read_batch_head_refuses_what_no_entry_starts_with():
    with pytest.raises(kafkalog.CorruptBatchError, match="impossible magic 3"):
        kafkalog.read_batch_head(bytes(16) + b"\x03" + bytes(60))
    with pytest.raises(kafkalog.CorruptBatchError, match="fewer than an entry header needs"):
        kafkalog.read_batch_head(V2[0], len(V2[0]) - 10)
    # data errors are ValueErrors too, like every kafkalog data error
    with pytest.raises(ValueError):
        kafkalog.read_batch_head(b"")


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_entry_offset_reads_what_the_decoder_reads(path):
    """kafkalog.entry_offset (what the decode job reads at a position it cuts a segment at)
    is the base offset of every batch of the real broker files, v0/v1 messages included."""
    data = path.read_bytes()
    batches = list(kafkalog.iter_batches(data, verify_crc=False))
    assert batches
    for b in batches:
        assert kafkalog.entry_offset(data, b.position) == b.base_offset
        assert kafkalog.entry_offset(memoryview(data)[b.position:b.position + 8]) == b.base_offset
