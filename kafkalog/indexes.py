"""Kafka's segment index files: ``.index``, ``.timeindex``, ``.txnindex``.

Wire grammar (big-endian, fixed-size entries)::

    .index      relativeOffset int32 | position int32                      (8 bytes)
    .timeindex  timestamp int64 | relativeOffset int32                     (12 bytes)
    .txnindex   version int16 | producerId int64 | firstOffset int64 |
                lastOffset int64 | lastStableOffset int64                  (34 bytes)

Offsets in ``.index``/``.timeindex`` are relative to the segment's base offset
(the 20-digit file name). The offset and time indexes are preallocated with
zeros: reading stops at the first all-zero entry after entry 0. ``.txnindex``
lists aborted transactions and is written in the segment where the transaction
*ended*, so its ranges may cover earlier segments. No checksums cover any of
them: verification is against the ``.log``, by what brokers write and Kafka's
lookups need (:data:`INDEX_RULES`), not by one writer's habits:

* ``LogSegment.append`` (apache/kafka ``core/src/main/scala/kafka/log/LogSegment.scala``
  to 3.6, ``storage/src/main/java/org/apache/kafka/storage/internals/log/LogSegment.java``
  since) indexes one *append*, however many batches it holds (a follower's fetch, the
  cleaner's chunk, a v0/v1 message set), at the position where the append starts: with
  its largest offset since 2.0, its first offset in 0.10.1-1.1 (the offset of its first
  message before). ``LogSegment.recover`` indexes each batch, by its last offset since
  2.0 (its first before).
* The time index gets (the segment's largest timestamp so far, the offset of the record
  holding it) after an append: ``LogValidator`` tracks that record per record to 3.6
  (a batch whose max timestamp is on its first record is indexed at its first offset),
  3.7 takes the append's last offset and 3.8 on the last offset of the batch holding it,
  as a follower's append and ``recover`` always did.
* ``OffsetIndex.lookup`` gives the entry with the largest offset at or below a target and
  the log is read on from its position; ``TimeIndex.lookup`` likewise by timestamp.
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


def _mismatch(rule: str, message: str, position: int = 0, offset: int | None = None) -> Finding:
    """An ``index_mismatch`` finding whose message ends with the rule it breaks
    (``(rule <name>)``, a key of :data:`INDEX_RULES`)."""
    return Finding("index_mismatch", position, position, f"{message} (rule {rule})",
                   base_offset=offset)


#: The rules :func:`check_offset_index`, :func:`check_time_index` and
#: :func:`check_txn_index` hold index entries to: each ``index_mismatch`` finding names
#: the one it breaks. They are Kafka's lookup contract and what a broker of any version
#: writes (apache/kafka ``LogSegment.append``/``recover``, ``LogValidator``,
#: ``OffsetIndex``/``TimeIndex``; see the module docstring).
INDEX_RULES = {
    # .index
    "position_in_log": "the entry's position lies within the log's complete entries",
    "position_at_batch_start": "a log entry (batch) starts at the entry's position",
    "batch_starts_by_offset": "the batch at the entry's position starts at or before its offset",
    "offset_in_append": "a batch from the entry's position up to the next entry's holds its offset",
    "offsets_increase": "each entry's offset is above the one before",
    "positions_increase": "each entry's position is above the one before",
    # .timeindex
    "offset_in_segment": "a batch of the segment holds the entry's offset",
    "timestamp_is_batch_max": "the batch holding the entry's offset (or an earlier one of "
                              "its append, after the previous entry) has the entry's "
                              "timestamp as its max timestamp",
    "timestamps_do_not_decrease": "each entry's timestamp is at least the one before",
    "offsets_do_not_decrease": "each entry's offset is at least the one before",
    # .txnindex
    "ends_at_control_record": "a control record is at the entry's last offset",
    "ends_at_producers_abort": "that control record is the entry's producer's ABORT",
    "first_not_after_last": "the entry's first offset is not after its last",
    "last_offsets_increase": "each entry's last offset is above the one before",
}


def verify_offset_index(index: IndexFile, log_source) -> list[Finding]:
    """Check every ``.index`` entry against the ``.log`` (:func:`check_offset_index`):
    the file's own findings, then each entry's."""
    batches = _batches(log_source)
    return list(index.findings) + check_offset_index(
        index, {b.position: (b.base_offset, b.last_offset) for b in batches},
        end=max((b.end for b in batches), default=0))


def check_offset_index(index: IndexFile, batches: Mapping[int, tuple[int | None, int]],
                       owned: tuple[int, int | None] = (0, None),
                       end: int | None = None) -> list[Finding]:
    """The ``.index`` entries that point into ``owned`` (``[start, end)`` byte
    positions, ``end`` None: to the end and past it) checked against the log entries
    that start there (``{position: (base offset, last offset)}``; a base offset None:
    not known, an undecodable v0/v1 wrapper) by Kafka's lookup contract, each finding
    naming its rule (:data:`INDEX_RULES`). ``end``: where the log's complete entries
    end (None: not known here, a piece before the last). The file's own findings
    (``index.findings``) are not included. Entries are numbered from ``index.first``
    (:func:`read_offset_index_range`).

    ``OffsetIndex.lookup`` gives the entry with the largest offset at or below a target
    and the log is read from its position: an entry is right when the batch there
    starts at or before its offset and holds it or a batch after it does, before the
    next entry's position (a broker indexes a multi-batch append as its largest offset
    at the position where the append starts; 0.10.1-1.1 brokers as its first offset).

    Pieces of one log checked with their own batches and adjoining ``owned`` ranges
    (the last with ``end``) give exactly the findings of the whole (a decode split over
    workers, at ``.index`` positions).
    """
    lo, hi = owned
    starts = sorted(batches)
    entries = index.entries
    found = []
    prev = None
    for k, e in enumerate(entries):
        i = index.first + k
        if e.position >= lo and (hi is None or e.position < hi):
            head = f"index entry {i} (offset {e.offset}, position {e.position})"
            b = batches.get(e.position)
            if b is None:
                if end is not None and e.position >= end:
                    found.append(_mismatch(
                        "position_in_log", f"{head} points at or past the end of the log's "
                        f"complete entries (byte {end})", e.position, e.offset))
                else:
                    found.append(_mismatch(
                        "position_at_batch_start", f"{head}: no complete entry of the log "
                        "starts at that position", e.position, e.offset))
            elif b[0] is not None and b[0] > e.offset:
                found.append(_mismatch(
                    "batch_starts_by_offset", f"{head}: the batch there starts at offset "
                    f"{b[0]}, after the entry's offset", e.position, e.offset))
            else:
                nxt = entries[k + 1].position if k + 1 < len(entries) else None
                if not _held_from(batches, starts, e.position, nxt, e.offset):
                    found.append(_mismatch(
                        "offset_in_append", f"{head}: no batch from that position "
                        + ("on" if nxt is None or nxt <= e.position else f"up to {nxt}")
                        + f" holds offset {e.offset} (the batch there ends at offset {b[1]})",
                        e.position, e.offset))
            if prev is not None and e.offset <= prev.offset:
                found.append(_mismatch(
                    "offsets_increase", f"{head}: offset not above entry {i - 1}'s "
                    f"({prev.offset})", e.position, e.offset))
            if prev is not None and e.position <= prev.position:
                found.append(_mismatch(
                    "positions_increase", f"{head}: position not above entry {i - 1}'s "
                    f"({prev.position})", e.position, e.offset))
        prev = e
    return found


def _held_from(batches: Mapping[int, tuple[int | None, int]], starts: Sequence[int],
               position: int, stop: int | None, offset: int) -> bool:
    """Whether a batch from ``position`` (a batch start) up to ``stop`` (the next
    entry's position; None or not above ``position``: to the end) holds ``offset``."""
    if stop is not None and stop <= position:
        stop = None
    for j in range(bisect_left(starts, position), len(starts)):
        if stop is not None and starts[j] >= stop:
            return False
        base, last = batches[starts[j]]
        if base is not None and base > offset:
            return False  # offsets grow with positions: no later batch holds it
        if offset <= last:
            return True
    return False


def verify_time_index(index: IndexFile, log_source) -> list[Finding]:
    """Check every ``.timeindex`` entry against the ``.log`` (:func:`check_time_index`):
    the file's own findings, then each entry's."""
    by_last = {b.last_offset: (b.base_offset, b.max_timestamp, b.position)
               for b in _batches(log_source)}
    return list(index.findings) + check_time_index(index, by_last)


def check_time_index(index: IndexFile, batches: Mapping[int, tuple[int | None, int | None, int]],
                     owned: tuple[int | None, int | None] = (None, None)) -> list[Finding]:
    """The ``.timeindex`` entries whose offsets lie in ``owned`` (``[lo, hi)``; None:
    unbounded) checked against the log's batches (``{last offset: (base offset, max
    timestamp, position)}``), each finding naming its rule (:data:`INDEX_RULES`); the
    file's own findings (``index.findings``) are not included.

    A broker's entry is (the largest timestamp so far in the segment, the offset of the
    record holding it): the record's own offset (``LogValidator`` to 3.7, per record),
    the last offset of its batch (3.8 on, a follower's append, ``LogSegment.recover``)
    or the append's first (a v1 append in log-append time). However written, the batch
    holding the entry's offset (or an earlier batch of its append) has the entry's timestamp as its max.

    A segment split over workers: when the ``owned`` ranges partition the offsets
    and each worker's batches are the ones whose offsets fall in its range,
    the pieces report exactly the findings of the whole, each once.
    """
    lo, hi = owned
    lasts = sorted(batches)
    found = []
    prev = None
    for i, e in enumerate(index.entries, index.first):
        if (lo is None or e.offset >= lo) and (hi is None or e.offset < hi):
            head = f"time index entry {i} (timestamp {e.timestamp}, offset {e.offset})"
            j = bisect_left(lasts, e.offset)
            b = batches[lasts[j]] if j < len(lasts) else None
            if b is None or (b[0] is not None and b[0] > e.offset):
                found.append(_mismatch("offset_in_segment",
                                       f"{head}: no batch of the log holds that offset",
                                       0, e.offset))
                b = None
            elif b[1] != e.timestamp and not _earlier_max(batches, lasts, j, e, prev):
                found.append(_mismatch(
                    "timestamp_is_batch_max", f"{head}: the batch holding that offset "
                    f"(at position {b[2]}) has max timestamp {b[1]}", b[2], e.offset))
            at = 0 if b is None else b[2]
            if prev is not None and e.timestamp < prev.timestamp:
                found.append(_mismatch(
                    "timestamps_do_not_decrease", f"{head}: timestamp below entry {i - 1}'s "
                    f"({prev.timestamp})", at, e.offset))
            if prev is not None and e.offset < prev.offset:
                found.append(_mismatch(
                    "offsets_do_not_decrease", f"{head}: offset below entry {i - 1}'s "
                    f"({prev.offset})", at, e.offset))
        prev = e
    return found


def _earlier_max(batches, lasts, j, e, prev) -> bool:
    """Whether a batch before the one holding ``e``'s offset, and after the previous
    entry's offset, has ``e``'s timestamp as its max: a multi-batch append indexed at its
    last offset (Kafka 3.7's leader path) names the append's last offset with the max of
    an earlier batch of it. The record holding a new maximum comes after the previous
    entry's offset (an entry is appended only when the maximum grows)."""
    floor = -1 if prev is None else prev.offset
    for k in range(j - 1, -1, -1):
        if lasts[k] <= floor:
            return False
        if batches[lasts[k]][1] == e.timestamp:
            return True
    return False


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
                found.append(_mismatch("ends_at_control_record",
                                       f"{head}: no control record at offset {e.last_offset}",
                                       0, e.last_offset))
            elif m[1] != "ABORT" or m[0] != e.producer_id:
                found.append(_mismatch(
                    "ends_at_producers_abort", f"{head}: offset {e.last_offset} holds "
                    f"producer {m[0]}'s {m[1]} control record, not producer "
                    f"{e.producer_id}'s ABORT", m[2], e.last_offset))
            if e.first_offset > e.last_offset:
                found.append(_mismatch("first_not_after_last",
                                       f"{head}: the first offset is after the last",
                                       0 if m is None else m[2], e.last_offset))
            if prev is not None and e.last_offset <= prev.last_offset:
                found.append(_mismatch(
                    "last_offsets_increase", f"{head}: last offset {e.last_offset} does not "
                    f"follow entry {i - 1}'s {prev.last_offset}", 0 if m is None else m[2],
                    e.last_offset))
        prev = e
    return found


def _batches(log_source) -> list[Batch]:
    return [b for b in scan(log_source, verify_crc=False) if isinstance(b, Batch)]
