"""Kafka's segment index files: ``.index``, ``.timeindex``, ``.txnindex``.

Wire grammar (big-endian, fixed-size entries)::

    .index      relativeOffset int32 | position int32                      (8 bytes)
    .timeindex  timestamp int64 | relativeOffset int32                     (12 bytes)
    .txnindex   version int16 | producerId int64 | firstOffset int64 |
                lastOffset int64 | lastStableOffset int64                  (34 bytes)

Offsets in ``.index``/``.timeindex`` are relative to the segment's base offset
(the 20-digit file name). An ``.index`` entry's offset is the *last* offset of
the batch that starts at its position. The offset and time indexes are
preallocated with zeros: reading stops at the first all-zero entry after entry
0. ``.txnindex`` lists aborted transactions and is written in the segment
where the transaction *ended*, so its ranges may cover earlier segments.
No checksums cover any of them: verification is against the ``.log``.
"""

from __future__ import annotations

import os
import struct
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from .errors import CorruptDataError
from .log_reader import scan
from .model import Batch, Finding
from .source import open_source

OFFSET_ENTRY = struct.Struct(">ii")
TIME_ENTRY = struct.Struct(">qi")
TXN_ENTRY = struct.Struct(">hqqqq")


class IndexEntry(NamedTuple):
    offset: int  # absolute: base offset + relative offset
    position: int


class TimeIndexEntry(NamedTuple):
    timestamp: int
    offset: int  # absolute


class AbortedTxn(NamedTuple):
    version: int
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


@dataclass(frozen=True, slots=True)
class IndexFile:
    """Entries of one index file plus what was odd about the file itself."""

    kind: str  # "offset", "time" or "txn"
    base_offset: int
    entries: tuple
    findings: tuple[Finding, ...]
    first: int = 0  # the number of entries[0] in the file (read_offset_index_range)


def base_offset_of(path) -> int:
    """The base offset a segment file name carries (``00000000000000000042.index`` -> 42)."""
    stem = os.path.basename(os.fspath(path)).split(".", 1)[0].split("-", 1)[0]
    if not stem.isdigit():
        raise CorruptDataError(f"{path}: file name does not start with a base offset")
    return int(stem)


def _raw(source, size: int, kind: str, base_offset, preallocated: bool):
    """``(base offset, the bytes of the whole entries before any preallocated zero
    tail, findings)``."""
    if base_offset is None:
        base_offset = base_offset_of(source) if isinstance(source, (str, os.PathLike)) else 0
    found = []
    with open_source(source) as view:
        data = view.buf.tobytes()
    n = len(data) - len(data) % size
    if n != len(data):
        found.append(Finding(
            "index_partial_entry", n, len(data),
            f"{kind} index has {len(data) - n} bytes after its last whole "
            f"{size}-byte entry", bytes=len(data) - n,
        ))
    stop = n
    if preallocated:  # reading stops at the first all-zero entry after entry 0
        zero, at = bytes(size), size
        while (at := data.find(zero, at, n)) >= 0:
            if at % size == 0:
                stop = at
                break
            at += 1
    return base_offset, memoryview(data)[:stop], found


def _entries(source, entry: struct.Struct, kind: str, base_offset, preallocated: bool):
    base_offset, data, found = _raw(source, entry.size, kind, base_offset, preallocated)
    return base_offset, entry.iter_unpack(data), found


def read_offset_index(source, *, base_offset: int | None = None) -> IndexFile:
    base, raw, found = _entries(source, OFFSET_ENTRY, "offset", base_offset, True)
    entries = tuple(IndexEntry(base + rel, position) for rel, position in raw)
    return IndexFile("offset", base, entries, tuple(found))


def read_time_index(source, *, base_offset: int | None = None) -> IndexFile:
    base, raw, found = _entries(source, TIME_ENTRY, "time", base_offset, True)
    entries = tuple(TimeIndexEntry(ts, base + rel) for ts, rel in raw)
    return IndexFile("time", base, entries, tuple(found))


def read_txn_index(source, *, base_offset: int | None = None) -> IndexFile:
    base, raw, found = _entries(source, TXN_ENTRY, "txn", base_offset, False)
    return IndexFile("txn", base, tuple(AbortedTxn(*r) for r in raw), tuple(found))


def offset_index_positions(source) -> list[int]:
    """The positions of an ``.index``'s entries in file order (to the preallocated
    zero tail), read in C without building the entries (a job's planner)."""
    _, data, _ = _raw(source, OFFSET_ENTRY.size, "offset", 0, True)
    return list(struct.unpack(f">{len(data) // 4}i", data)[1::2])


def read_offset_index_range(source, owned: tuple[int, int | None], *,
                            base_offset: int | None = None) -> IndexFile:
    """:func:`read_offset_index` for a piece of the log: the entries pointing into
    ``owned`` (``[start, end)``, ``end`` None: to the end and past it) and the one
    before them, which :func:`check_offset_index` compares the first with;
    ``first`` numbers them in the file. Where positions go down somewhere in the
    file, every entry is returned (``first`` 0). The file is read in C and only
    those entries are built: a task of a 1 GB segment split 16 ways checks its
    share of 262,144 entries without building the others."""
    base, data, found = _raw(source, OFFSET_ENTRY.size, "offset", base_offset, True)
    k = len(data) // OFFSET_ENTRY.size
    ints = struct.unpack(f">{2 * k}i", data)
    positions = ints[1::2]
    first, stop = offset_index_share(positions, owned) \
        if list(positions) == sorted(positions) else (0, k)
    entries = tuple(IndexEntry(base + rel, pos) for rel, pos in
                    zip(ints[2 * first:2 * stop:2], positions[first:stop]))
    return IndexFile("offset", base, entries, tuple(found), first)


def offset_index_share(ordered: Sequence[int], owned: tuple[int, int | None]) -> tuple[int, int]:
    """``(first, stop)``: the entry numbers of an ``.index`` whose positions
    (``ordered``, ascending) point into ``owned`` (``[start, end)``, ``end`` None:
    to the end and past it), and of the entry before them, which
    :func:`check_offset_index` compares the first with. The share of one piece
    of a split log (:func:`read_offset_index_range`, a job's planner)."""
    lo, hi = owned
    stop = len(ordered) if hi is None else bisect_left(ordered, hi)
    return max(0, bisect_left(ordered, lo) - 1), stop


def _mismatch(message: str, position: int = 0, offset: int | None = None) -> Finding:
    return Finding("index_mismatch", position, position, message, base_offset=offset)


def verify_offset_index(index: IndexFile, log_source) -> list[Finding]:
    """Check every ``.index`` entry against the ``.log``, as kafka-dump-log does.

    Each entry must point at the start of an entry of the log whose last
    offset equals the entry's offset; offsets and positions must increase.
    """
    last_offsets = {b.position: b.last_offset for b in _batches(log_source)}
    return list(index.findings) + check_offset_index(index, last_offsets)


def check_offset_index(index: IndexFile, last_offsets: Mapping[int, int],
                       owned: tuple[int, int | None] = (0, None)) -> list[Finding]:
    """:func:`verify_offset_index`'s checks on the entries that point into ``owned``
    (``[start, end)`` byte positions, ``end`` None: to the end and past it), given
    the last offset of every log entry that starts there (``{position: last
    offset}``). The file's own findings (``index.findings``) are not included.
    Entries are numbered from ``index.first`` (:func:`read_offset_index_range`).

    Pieces of one log checked with their own batches and adjoining ``owned``
    ranges give exactly the findings of the whole (a decode split over workers).
    """
    lo, hi = owned
    found = []
    prev = None
    for i, e in enumerate(index.entries, index.first):
        if e.position >= lo and (hi is None or e.position < hi):
            last = last_offsets.get(e.position)
            if last is None:
                found.append(_mismatch(
                    f"index entry {i} (offset {e.offset}) points at position {e.position}, "
                    "where no complete entry of the log starts", e.position, e.offset))
            elif last != e.offset:
                found.append(_mismatch(
                    f"index entry {i}: offset {e.offset}, but the batch at position "
                    f"{e.position} ends at offset {last}", e.position, e.offset))
            if prev is not None and (e.offset <= prev.offset or e.position <= prev.position):
                found.append(_mismatch(
                    f"index entry {i} (offset {e.offset}, position {e.position}) does not "
                    f"follow entry {i - 1} (offset {prev.offset}, position {prev.position})",
                    e.position, e.offset))
        prev = e
    return found


def verify_time_index(index: IndexFile, log_source) -> list[Finding]:
    """Each ``.timeindex`` entry must name a batch's last offset and its max timestamp.

    Timestamps must not decrease from entry to entry.
    """
    by_last = {b.last_offset: (b.max_timestamp, b.position) for b in _batches(log_source)}
    return list(index.findings) + check_time_index(index, by_last)


def check_time_index(index: IndexFile, batches: Mapping[int, tuple[int | None, int]],
                     owned: tuple[int | None, int | None] = (None, None)) -> list[Finding]:
    """:func:`verify_time_index`'s checks on the entries whose offsets lie in
    ``owned`` (``[lo, hi)``; None: unbounded), given ``{last offset: (max
    timestamp, position)}`` of the log's batches; the file's own findings
    (``index.findings``) are not included.

    A segment split over workers: when the ``owned`` ranges partition the offsets
    and each worker's batches are the ones whose last offsets fall in its range,
    the pieces report exactly the findings of the whole, each once.
    """
    lo, hi = owned
    found = []
    prev = None
    for i, e in enumerate(index.entries, index.first):
        if (lo is None or e.offset >= lo) and (hi is None or e.offset < hi):
            b = batches.get(e.offset)
            if b is None:
                found.append(_mismatch(
                    f"time index entry {i} names offset {e.offset}, the last offset of no batch",
                    0, e.offset))
            elif b[0] != e.timestamp:
                found.append(_mismatch(
                    f"time index entry {i}: timestamp {e.timestamp} for offset {e.offset}, "
                    f"but that batch's max timestamp is {b[0]}", b[1], e.offset))
            if prev is not None and e.timestamp < prev.timestamp:
                found.append(_mismatch(
                    f"time index entry {i}: timestamp {e.timestamp} is below entry {i - 1}'s "
                    f"{prev.timestamp}", 0, e.offset))
        prev = e
    return found


def verify_txn_index(index: IndexFile, log_source) -> list[Finding]:
    """Each ``.txnindex`` entry must end at an ABORT marker of its producer.

    Kafka appends an entry when a marker aborts a transaction that holds data in
    the partition, into the segment the marker went to: the entry's last offset
    is that marker's offset. Its first offset must not be after its last, and
    last offsets must increase from entry to entry. (An ABORT marker without an
    entry is no finding: a transaction with no data here gets none.)
    """
    markers = {}
    for b in _batches(log_source):
        if b.is_control:
            for r in b.records:
                if r.control is not None:
                    markers[r.offset] = (b.producer_id, r.control.type, b.position)
    return list(index.findings) + check_txn_index(index, markers)


def check_txn_index(index: IndexFile, markers: Mapping[int, tuple[int, str, int]],
                    owned: tuple[int | None, int | None] = (None, None)) -> list[Finding]:
    """:func:`verify_txn_index`'s checks on the entries whose last offsets lie in
    ``owned`` (``[lo, hi)``; None: unbounded), given the log's control records
    (``{offset: (producer id, control type, batch position)}``, the markers
    table's columns); the file's own findings (``index.findings``) are not included.
    Pieces of a split segment whose ``owned`` ranges partition the offsets, each
    with the markers in its range, report exactly the findings of the whole."""
    lo, hi = owned
    found = []
    prev = None
    for i, e in enumerate(index.entries, index.first):
        if (lo is None or e.last_offset >= lo) and (hi is None or e.last_offset < hi):
            head = f"txn index entry {i} (producer {e.producer_id}, offsets {e.first_offset}" \
                   f"..{e.last_offset})"
            m = markers.get(e.last_offset)
            if m is None:
                found.append(_mismatch(f"{head}: no control record at offset {e.last_offset}",
                                       0, e.last_offset))
            elif m[1] != "ABORT" or m[0] != e.producer_id:
                found.append(_mismatch(
                    f"{head}: offset {e.last_offset} holds producer {m[0]}'s {m[1]} "
                    f"control record, not producer {e.producer_id}'s ABORT",
                    m[2], e.last_offset))
            if e.first_offset > e.last_offset:
                found.append(_mismatch(f"{head}: the first offset is after the last",
                                       0 if m is None else m[2], e.last_offset))
            if prev is not None and e.last_offset <= prev.last_offset:
                found.append(_mismatch(
                    f"{head}: last offset {e.last_offset} does not follow entry {i - 1}'s "
                    f"{prev.last_offset}", 0 if m is None else m[2], e.last_offset))
        prev = e
    return found


def _batches(log_source) -> list[Batch]:
    return [b for b in scan(log_source, verify_crc=False) if isinstance(b, Batch)]
