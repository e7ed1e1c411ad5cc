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
from collections.abc import Mapping
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


def base_offset_of(path) -> int:
    """The base offset a segment file name carries (``00000000000000000042.index`` -> 42)."""
    stem = os.path.basename(os.fspath(path)).split(".", 1)[0].split("-", 1)[0]
    if not stem.isdigit():
        raise CorruptDataError(f"{path}: file name does not start with a base offset")
    return int(stem)


def _entries(source, entry: struct.Struct, kind: str, base_offset, preallocated: bool):
    if base_offset is None:
        base_offset = base_offset_of(source) if isinstance(source, (str, os.PathLike)) else 0
    found = []
    out = []
    with open_source(source) as view:
        buf = view.buf
        n = len(buf) - len(buf) % entry.size
        if n != len(buf):
            found.append(Finding(
                "index_partial_entry", n, len(buf),
                f"{kind} index has {len(buf) - n} bytes after its last whole "
                f"{entry.size}-byte entry", bytes=len(buf) - n,
            ))
        for pos in range(0, n, entry.size):
            raw = entry.unpack_from(buf, pos)
            if preallocated and pos > 0 and not any(raw):
                break  # preallocated zero tail
            out.append(raw)
    return base_offset, out, found


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

    Pieces of one log checked with their own batches and adjoining ``owned``
    ranges give exactly the findings of the whole (a decode split over workers).
    """
    lo, hi = owned
    found = []
    prev = None
    for i, e in enumerate(index.entries):
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
    by_last = {b.last_offset: b for b in _batches(log_source)}
    found = list(index.findings)
    prev = None
    for i, e in enumerate(index.entries):
        b = by_last.get(e.offset)
        if b is None:
            found.append(_mismatch(
                f"time index entry {i} names offset {e.offset}, the last offset of no batch",
                0, e.offset))
        elif b.max_timestamp != e.timestamp:
            found.append(_mismatch(
                f"time index entry {i}: timestamp {e.timestamp} for offset {e.offset}, "
                f"but that batch's max timestamp is {b.max_timestamp}", b.position, e.offset))
        if prev is not None and e.timestamp < prev.timestamp:
            found.append(_mismatch(
                f"time index entry {i}: timestamp {e.timestamp} is below entry {i - 1}'s "
                f"{prev.timestamp}", 0, e.offset))
        prev = e
    return found


def _batches(log_source) -> list[Batch]:
    return [b for b in scan(log_source, verify_crc=False) if isinstance(b, Batch)]
