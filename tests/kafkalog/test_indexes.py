"""Index files: readers, preallocated tails, and verification against the .log.

Index bytes are packed by hand here (struct), independent of kafkalog.writer;
the log is a real broker segment from the corpus.
"""

from __future__ import annotations

import struct

import pytest

import kafkalog
from kafkalog.indexes import (
    OFFSET_ENTRY,
    TIME_ENTRY,
    TXN_ENTRY,
    base_offset_of,
)

from tests.segments import CORPUS_FILES as FILES

# first_topic-2: 16 single-record batches (offsets 0..15), then one holding 16..17
LOG = next(p for p in FILES if "first_topic-2" in str(p))


def rule_of(finding) -> str:
    """The rule an index finding names (its message ends with ``(rule <name>)``)."""
    rule = finding.message.rsplit("(rule ", 1)[1].rstrip(")")
    assert rule in kafkalog.INDEX_RULES, finding.message
    return rule


def positions_and_batches():
    return [(b.position, b) for b in kafkalog.iter_batches(LOG)]


def test_entry_sizes_are_the_formats():
    assert (OFFSET_ENTRY.size, TIME_ENTRY.size, TXN_ENTRY.size) == (8, 12, 34)


@pytest.mark.parametrize("name,expected", [
    ("00000000000000000000.index", 0),
    ("/a/b/00000000000000001234.timeindex", 1234),
    ("00000000000000000042-uuid.log", 42),  # tiered-storage style names
])
def test_base_offset_from_file_name(name, expected):
    assert base_offset_of(name) == expected


def test_base_offset_needs_digits():
    with pytest.raises(kafkalog.CorruptDataError):
        base_offset_of("segment.index")


def test_offset_index_stops_at_preallocated_zeros(tmp_path):
    # entry 0 may be all zero (offset 0 at position 0); zeros after it are padding
    raw = struct.pack(">iiii", 0, 0, 5, 410) + bytes(8 * 100)
    path = tmp_path / "00000000000000000100.index"
    path.write_bytes(raw)
    idx = kafkalog.read_offset_index(path)
    assert idx.base_offset == 100
    assert idx.entries == (kafkalog.IndexEntry(100, 0), kafkalog.IndexEntry(105, 410))
    assert idx.findings == ()


def test_partial_trailing_entry_is_a_finding(tmp_path):
    path = tmp_path / "00000000000000000000.index"
    path.write_bytes(struct.pack(">ii", 0, 0) + b"\x01\x02\x03")
    idx = kafkalog.read_offset_index(path)
    assert len(idx.entries) == 1
    assert [(f.kind, f.position, f.bytes) for f in idx.findings] == [("index_partial_entry", 8, 3)]


def test_time_index_entries(tmp_path):
    raw = struct.pack(">qiqi", 1_700_000_000_000, 3, 1_700_000_000_500, 9) + bytes(24)
    path = tmp_path / "00000000000000000010.timeindex"
    path.write_bytes(raw)
    idx = kafkalog.read_time_index(path)
    assert idx.entries == (kafkalog.TimeIndexEntry(1_700_000_000_000, 13),
                           kafkalog.TimeIndexEntry(1_700_000_000_500, 19))


def test_txn_index_entries_are_not_preallocated(tmp_path):
    raw = struct.pack(">hqqqq", 0, 7, 100, 120, 100) + struct.pack(">hqqqq", 0, 0, 0, 0, 0)
    path = tmp_path / "00000000000000000000.txnindex"
    path.write_bytes(raw)
    idx = kafkalog.read_txn_index(path)
    assert idx.entries == (kafkalog.AbortedTxn(0, 7, 100, 120, 100),
                           kafkalog.AbortedTxn(0, 0, 0, 0, 0))


def test_verify_offset_index_against_a_real_log():
    batches = positions_and_batches()
    # an entry every fourth batch, offset = the batch's LAST offset, as the broker writes
    entries = [struct.pack(">ii", b.last_offset, pos) for pos, b in batches[::4]]
    idx = kafkalog.read_offset_index(b"".join(entries), base_offset=0)
    assert kafkalog.verify_offset_index(idx, LOG) == []


def test_verify_offset_index_catches_each_kind_of_lie():
    batches = positions_and_batches()
    (p0, b0), (p1, b1), (p2, b2) = batches[0], batches[1], batches[-1]
    entries = [
        (b0.last_offset, p0),        # fine
        (b1.last_offset, p1 + 1),    # position inside a batch
        (b2.base_offset - 1, p2),    # offset is not the batch's last offset
        (b1.last_offset, p2 + 10),   # goes backwards, and lands mid-batch
    ]
    idx = kafkalog.read_offset_index(b"".join(struct.pack(">ii", o, p) for o, p in entries),
                                     base_offset=0)
    found = kafkalog.verify_offset_index(idx, LOG)
    assert [f.kind for f in found] == ["index_mismatch"] * 4
    assert [(f.message.split(":")[0], rule_of(f)) for f in found] == [
        (f"index entry 1 (offset {b1.last_offset}, position {p1 + 1})", "position_at_batch_start"),
        (f"index entry 2 (offset {b2.base_offset - 1}, position {p2})", "batch_starts_by_offset"),
        (f"index entry 3 (offset {b1.last_offset}, position {p2 + 10})",
         "position_at_batch_start"),
        (f"index entry 3 (offset {b1.last_offset}, position {p2 + 10})", "offsets_increase"),
    ]
    assert f"the batch there starts at offset {b2.base_offset}" in found[1].message


def test_check_offset_index_over_pieces_gives_the_whole_logs_findings():
    """What a split decode does: each piece checks the entries pointing into its own byte
    range against the batches that start there; together they report the whole log's
    findings once each, including the entry past the end (the last piece's)."""
    batches = positions_and_batches()
    (p0, b0), (p1, b1), (p2, b2) = batches[0], batches[1], batches[-1]
    entries = [(b0.last_offset, p0), (b1.last_offset, p1 + 1), (b2.base_offset - 1, p2),
               (b1.last_offset, p2 + 10), (b2.last_offset + 5, p2 + 10_000)]
    idx = kafkalog.read_offset_index(b"".join(struct.pack(">ii", o, p) for o, p in entries),
                                     base_offset=0)
    whole = kafkalog.verify_offset_index(idx, LOG)
    assert len(whole) == 5 and rule_of(whole[-1]) == "position_in_log"
    end = batches[-1][1].end
    cuts = [0, p1, p1 + 2, p2, None]  # pieces [0, p1), [p1, p1+2), [p1+2, p2), [p2, end..)
    pieces = []
    for lo, hi in zip(cuts, cuts[1:]):
        mine = {p: (b.base_offset, b.last_offset) for p, b in batches
                if p >= lo and (hi is None or p < hi)}
        pieces += kafkalog.check_offset_index(idx, mine, (lo, hi), end if hi is None else None)
    assert pieces == whole
    assert kafkalog.check_offset_index(
        idx, {p: (b.base_offset, b.last_offset) for p, b in batches}, end=end) == whole


@pytest.mark.parametrize("shuffled", [False, True])
def test_read_offset_index_range_gives_each_piece_its_entries(shuffled):
    """Reading only a piece's share of a big .index (and the entry before it) checks
    to the same findings as reading it whole; where positions go down somewhere the
    whole file is returned instead."""
    from kafkalog.indexes import offset_index_positions

    batches = positions_and_batches()
    entries = [(b.last_offset, p) for p, b in batches]
    entries[5] = (entries[5][0], entries[5][1] + 1)  # points inside a batch
    entries[4] = (entries[3][0], entries[4][1])  # the first of a piece repeats an offset
    entries.append((entries[-1][0] + 3, batches[-1][0] + 10_000))  # past the end
    if shuffled:
        entries[2], entries[3] = entries[3], entries[2]
    raw = b"".join(struct.pack(">ii", o, p) for o, p in entries) + bytes(8 * 4) + b"\x01"
    whole = kafkalog.read_offset_index(raw, base_offset=0)
    assert [e.position for e in whole.entries] == offset_index_positions(raw)
    end = batches[-1][1].end
    expected = kafkalog.check_offset_index(
        whole, {p: (b.base_offset, b.last_offset) for p, b in batches}, end=end)
    assert len(expected) == 4 + shuffled
    assert any("index entry 4" in f.message and rule_of(f) == "offsets_increase"
               for f in expected) != shuffled
    cuts = [0, batches[4][0], batches[9][0], batches[-1][0], None]
    got = []
    for lo, hi in zip(cuts, cuts[1:]):
        piece = kafkalog.read_offset_index_range(raw, (lo, hi), base_offset=0)
        assert piece.findings == whole.findings
        if shuffled:
            assert (piece.first, piece.entries) == (0, whole.entries)
        else:
            assert piece.entries == whole.entries[piece.first:piece.first + len(piece.entries)]
            assert len(piece.entries) < len(whole.entries)
        mine = {p: (b.base_offset, b.last_offset) for p, b in batches
                if p >= lo and (hi is None or p < hi)}
        got += kafkalog.check_offset_index(piece, mine, (lo, hi), end if hi is None else None)
    assert got == expected


def test_verify_time_index_against_a_real_log():
    batches = [b for _, b in positions_and_batches()]
    good = [(b.max_timestamp, b.last_offset) for b in batches[::5]]
    idx = kafkalog.read_time_index(b"".join(struct.pack(">qi", t, o) for t, o in good),
                                   base_offset=0)
    assert kafkalog.verify_time_index(idx, LOG) == []

    wrong_ts = [(batches[3].max_timestamp + 1, batches[3].last_offset)]
    idx = kafkalog.read_time_index(b"".join(struct.pack(">qi", t, o) for t, o in wrong_ts),
                                   base_offset=0)
    found = kafkalog.verify_time_index(idx, LOG)
    assert [(f.kind, rule_of(f)) for f in found] == [("index_mismatch", "timestamp_is_batch_max")]
    assert f"has max timestamp {batches[3].max_timestamp}" in found[0].message


def test_index_findings_use_the_documented_kinds(tmp_path):
    from kafkalog.model import INDEX_FINDING_KINDS

    from kafkalog.writer import SegmentWriter, WriteRecord

    with SegmentWriter(tmp_path, 0, index_interval_bytes=1) as w:
        for i in range(3):
            w.append([WriteRecord(b"k", b"v" * 50, timestamp=1000 + i)])
    index = tmp_path / "00000000000000000000.index"
    data = bytearray(index.read_bytes())
    data[-1] ^= 1  # the last entry points one byte off
    index.write_bytes(bytes(data) + b"\x00\x01")  # and a partial entry at the end
    idx = kafkalog.read_offset_index(index)
    found = list(idx.findings) + kafkalog.verify_offset_index(idx, tmp_path / "00000000000000000000.log")
    assert {f.kind for f in found} == set(INDEX_FINDING_KINDS)


def _transactions(tmp_path):
    """A segment (kafkalog's writer) where producer 7 aborts, 8 commits and 9 aborts,
    their data interleaved; ``{name: offset}`` of its markers and first data batches."""
    from kafkalog.writer import SegmentWriter, WriteRecord

    at = {}
    with SegmentWriter(tmp_path, 100) as w:
        w.append([WriteRecord(b"k", b"plain")])
        for pid in (7, 8, 9):
            at[f"first{pid}"], _ = w.append([WriteRecord(b"k", b"t%d" % pid)] * 2, producer_id=pid,
                                            producer_epoch=0, base_sequence=0, transactional=True)
        at["abort7"] = w.append_marker(producer_id=7, producer_epoch=0, commit=False)
        at["commit8"] = w.append_marker(producer_id=8, producer_epoch=0, commit=True)
        w.append([WriteRecord(b"k", b"plain")])
        at["abort9"] = w.append_marker(producer_id=9, producer_epoch=0, commit=False)
        at["data"] = w.append([WriteRecord(b"k", b"plain")])[0]
    return tmp_path / "00000000000000000100.log", tmp_path / "00000000000000000100.txnindex", at


def _txn_index(entries):
    """A .txnindex of (producer id, first offset, last offset) entries, packed by hand."""
    return kafkalog.read_txn_index(b"".join(struct.pack(">hqqqq", 0, pid, first, last, last + 1)
                                            for pid, first, last in entries), base_offset=100)


def test_verify_txn_index_catches_each_kind_of_lie(tmp_path):
    log, written, at = _transactions(tmp_path)
    # what the writer wrote: one entry per aborted transaction, ending at its marker
    idx = kafkalog.read_txn_index(written)
    assert [(e.producer_id, e.first_offset, e.last_offset) for e in idx.entries] == [
        (7, at["first7"], at["abort7"]), (9, at["first9"], at["abort9"])]
    assert kafkalog.verify_txn_index(idx, log) == []
    assert kafkalog.verify_txn_index(_txn_index([(7, at["first7"], at["abort7"])]), log) == []
    entries = [
        (7, at["first7"], at["abort7"]),   # fine
        (8, at["first8"], at["commit8"]),  # a COMMIT, not an ABORT
        (7, at["first7"], at["abort9"]),   # producer 9's ABORT
        (9, at["first9"], at["data"]),     # a data batch, no control record
        (9, at["abort9"] + 1, at["abort9"]),  # first offset after the last ...
        (9, at["first9"], at["abort7"]),   # ... and last offsets going back
        (9, at["first9"], 10_000),         # past the end of the log
    ]
    found = kafkalog.verify_txn_index(_txn_index(entries), log)
    assert [f.kind for f in found] == ["index_mismatch"] * 8
    assert [(f.message.split(":")[0], f.base_offset) for f in found] == [
        ("txn index entry 1 (producer 8, offsets 103..108)", at["commit8"]),
        ("txn index entry 2 (producer 7, offsets 101..110)", at["abort9"]),
        ("txn index entry 3 (producer 9, offsets 105..111)", at["data"]),
        ("txn index entry 4 (producer 9, offsets 111..110)", at["abort9"]),
        ("txn index entry 4 (producer 9, offsets 111..110)", at["abort9"]),
        ("txn index entry 5 (producer 9, offsets 105..107)", at["abort7"]),
        ("txn index entry 5 (producer 9, offsets 105..107)", at["abort7"]),
        ("txn index entry 6 (producer 9, offsets 105..10000)", 10_000),
    ]
    assert [rule_of(f) for f in found] == [
        "ends_at_producers_abort", "ends_at_producers_abort", "ends_at_control_record",
        "first_not_after_last", "last_offsets_increase", "ends_at_producers_abort",
        "last_offsets_increase", "ends_at_control_record"]
    assert "offset 108 holds producer 8's COMMIT control record, not producer 8's ABORT" \
        in found[0].message
    assert "offset 110 holds producer 9's ABORT control record, not producer 7's ABORT" \
        in found[1].message
    assert "no control record at offset 111" in found[2].message
    assert "the first offset is after the last" in found[3].message
    assert "last offset 110 does not follow entry 3's 111" in found[4].message
    assert "holds producer 7's ABORT" in found[5].message
    assert "last offset 107 does not follow entry 4's 110" in found[6].message
    assert "no control record at offset 10000" in found[7].message
    # positions: the marker's batch where there is one
    markers = {r["offset"]: r["batch_position"] for r in kafkalog.markers_table(log).to_pylist()}
    assert found[0].position == markers[at["commit8"]] and found[2].position == 0

    # pieces of a split decode: each checks the entries whose last offsets are its own,
    # with its own markers; together, the whole file's findings once each
    rows = kafkalog.markers_table(log).to_pylist()
    whole = kafkalog.check_txn_index(_txn_index(entries), {
        r["offset"]: (r["producer_id"], r["control_type"], r["batch_position"]) for r in rows})
    assert whole == found
    cuts = [None, at["commit8"], at["abort9"], at["abort9"] + 1, None]
    pieces = []
    for lo, hi in zip(cuts, cuts[1:]):
        mine = {r["offset"]: (r["producer_id"], r["control_type"], r["batch_position"])
                for r in rows if (lo is None or r["offset"] >= lo) and (hi is None or r["offset"] < hi)}
        pieces += kafkalog.check_txn_index(_txn_index(entries), mine, (lo, hi))
    assert sorted(pieces, key=lambda f: f.message) == sorted(whole, key=lambda f: f.message)
    assert len(pieces) == len(whole)
