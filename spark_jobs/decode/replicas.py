"""Replicas: the copies of one topic-partition that several brokers' folders hold,
reconciled batch by batch so that a run decodes each batch once.

Users copy every broker's log directory, so with replication factor N a partition
arrives N times, under different folders (a *copy* is the folder above
``<topic>-<partition>/``, at any depth), each copy split into segments where its own
broker rolled them. Followers copy the leader's batches byte for byte, so copies
agree batch by batch: same base offset, last offset, stored CRC and size.

- :func:`frame` reads a copy's segment by its framing alone (offset, size, magic,
  then the stored CRC and last offset delta from the header): no record is decoded.
  It computes each batch's CRC too, so that a damaged copy of a batch is never
  chosen over a sound one.
- :func:`reconcile` takes, per partition, one *primary* copy (the one reaching the
  highest offset, then the one with most batches) and every batch of it; then from
  the other copies, in that order, each batch whose offsets no chosen batch holds
  (a longer replica, the other side of a truncated tail). A batch holding offsets of
  a chosen batch with another header is a **replica divergence** (an unclean leader
  election or a truncation): one ``divergence`` finding naming both copies
  (:data:`DIVERGENCE_PREFIX`; the audit's ``replica_divergence`` check), recorded once
  however many copies agree with it. Where such a batch also holds offsets no chosen
  batch holds, it is decoded too and the partition's output goes through the Spark
  dedupe (:mod:`~spark_jobs.decode.deduplication`), which keeps the first copy of each
  offset; everywhere else nothing is shuffled: the chosen byte ranges become ordinary
  decode tasks that write straight into the tables.

Only the chosen bytes are decoded, so findings (CRC, index checks, a torn tail) are
those of the chosen copy's bytes; a copy that only repeats chosen batches is framed,
not decoded, and has no ledger row.
"""

from __future__ import annotations

import bisect
import json
import struct
import zlib
from dataclasses import dataclass, replace
from typing import NamedTuple

import pyarrow as pa
from crc32c import crc32c

import kafkalog
from kafkalog import default_records as v2
from kafkalog import legacy_records as legacy
from kafkalog.log_reader import LOG_OVERHEAD, MAGIC_OFFSET, MIN_SIZE, OFFSET_AND_SIZE
from kafkalog.model import DEFAULT_LIMITS
from kafkalog.source import open_source
from spark_jobs import schemas, storage
from spark_jobs.decode.planning import Segment, Task, meets

#: how the message of a replica's ``divergence`` finding starts (the audit's
#: ``replica_divergence`` check tells these from record-level divergences by it)
DIVERGENCE_PREFIX = "replica divergence:"

_U32 = struct.Struct(">I")
_I32 = struct.Struct(">i")


class Entry(NamedTuple):
    """One top-level entry of a segment, as framing sees it."""

    position: int
    size: int
    first_offset: int | None  # None: a v0/v1 compressed wrapper (only its last is stored)
    last_offset: int
    crc: int  # as stored
    valid: bool  # the stored CRC matches the bytes

    @property
    def header(self) -> tuple:
        """What two copies of one batch share."""
        return (self.first_offset, self.last_offset, self.crc, self.size)


@dataclass(frozen=True)
class Framed:
    """A segment as :func:`frame` read it: its entries, where framing stopped (``end``:
    the segment's size, or the start of bytes it could not frame) and whether an entry
    that verifies lies past that point (``rest``)."""

    entries: tuple
    end: int
    rest: bool

    def to_json(self) -> str:
        return json.dumps([list(map(list, self.entries)), self.end, self.rest])

    @classmethod
    def from_json(cls, text: str) -> "Framed":
        entries, end, rest = json.loads(text)
        return cls(tuple(Entry(*(e[:5]), bool(e[5])) for e in entries), end, rest)


def frame(source, byte_range=None) -> Framed:
    """The entries of ``source`` (a path, bytes or :class:`kafkalog.Slice`) by framing:
    offset, size and magic (``kafkalog.log_reader``'s rules: an implausible size or
    magic, or an entry past the end, stops it), then the stored CRC and offsets from
    the header. Records are not decoded."""
    max_size = DEFAULT_LIMITS.max_entry_size - LOG_OVERHEAD
    out = []
    with open_source(source, byte_range) as view:
        buf, base, n = view.buf, view.base, len(view.buf)
        pos = 0
        while n - pos > MAGIC_OFFSET:
            offset, size = OFFSET_AND_SIZE.unpack_from(buf, pos)
            magic = buf[pos + MAGIC_OFFSET]
            min_size = MIN_SIZE.get(magic)
            end = pos + LOG_OVERHEAD + size
            if min_size is None or not min_size <= size <= max_size or end > n:
                break
            if magic == 2:
                (crc,) = _U32.unpack_from(buf, pos + v2.CRC_OFFSET)
                valid = crc32c(buf[pos + v2.ATTRIBUTES_OFFSET:end]) == crc
                (delta,) = _I32.unpack_from(buf, pos + v2.LAST_OFFSET_DELTA_OFFSET)
                first, last = offset, offset + delta
            else:
                (crc,) = _U32.unpack_from(buf, pos + legacy.CRC_OFFSET)
                valid = zlib.crc32(buf[pos + legacy.MAGIC_OFFSET:end]) == crc
                compressed = buf[pos + legacy.ATTRIBUTES_OFFSET] & legacy.CODEC_MASK
                first, last = (None if compressed else offset), offset
            out.append(Entry(base + pos, end - pos, first, last, crc, valid))
            pos = end
        rest = pos < n and kafkalog.first_entry(buf[pos:]) is not None
        return Framed(tuple(out), base + pos, rest)


def frame_segment(seg: Segment, s3) -> Framed:
    """:func:`frame` of a listed segment, read against what the listing saw (raises
    :class:`storage.StorageError` where it cannot be read or changed since)."""
    store, key = storage.open_object(seg.uri, s3)
    if isinstance(store, storage.LocalStore):
        store.verify(key, seg.pin)
        framed = frame(store.path(key))
        store.verify(key, seg.pin)
        return framed
    return frame(store.read_pinned(key, seg.pin))


def copy_of(uri: str) -> str:
    """The copy a segment belongs to: the folder above its ``<topic>-<partition>/``."""
    return uri.rsplit("/", 2)[0]


def replicated(segments: list[Segment]) -> dict[tuple, list[Segment]]:
    """The topic-partitions that more than one copy holds, with their segments."""
    by_tp: dict[tuple, list[Segment]] = {}
    for s in segments:
        by_tp.setdefault((s.topic, s.partition), []).append(s)
    return {tp: segs for tp, segs in by_tp.items() if len({copy_of(s.uri) for s in segs}) > 1}


def frame_all(spark, segments: list[Segment], s3) -> dict[str, Framed | None]:
    """:func:`frame_segment` of each segment on the executors (a Spark task per core);
    None for a segment that could not be read."""
    if not segments:
        return {}
    specs = [json.dumps(s.__dict__) for s in segments]

    def run(batches):
        for b in batches:
            out = []
            for i in b.column(0).to_pylist():
                seg = Segment(**{k: tuple(tuple(p) for p in v) if k == "index_pins" else v
                                 for k, v in json.loads(specs[i]).items()})
                try:
                    out.append(frame_segment(seg, s3).to_json())
                except (storage.StorageError, OSError, kafkalog.KafkaLogError):
                    out.append("null")
            yield pa.RecordBatch.from_arrays([pa.array(out, pa.string())], names=["framed"])

    # framing reads at GB/s: one Spark task per core (each costs more than framing a
    # segment), not one per segment
    parts = min(len(specs), spark.sparkContext.defaultParallelism)
    rows = spark.range(0, len(specs), 1, numPartitions=parts) \
        .mapInArrow(run, "framed string").collect()
    # mapInArrow keeps the range's order within and across partitions
    return {s.uri: (None if r.framed == "null" else Framed.from_json(r.framed))
            for s, r in zip(segments, rows)}


@dataclass(frozen=True)
class Choice:
    """What :func:`reconcile` made of one replicated partition."""

    ranges: dict  # segment uri -> [(start, end)] byte ranges to decode, entry-aligned
    divergences: list  # finding rows (findings table columns but run_id)
    pending: bool  # a diverged batch adds offsets: the partition needs the Spark dedupe
    primary: str  # the primary copy


def reconcile(segs: list[Segment], framed: dict[str, Framed]) -> Choice:
    """The byte ranges of one topic-partition's copies to decode: each batch once
    (module docstring), with the divergences between copies."""
    copies: dict[str, list[tuple[Segment, Entry]]] = {}
    for s in sorted(segs, key=lambda s: (s.base_offset, s.uri)):
        prev_last = None
        entries = copies.setdefault(copy_of(s.uri), [])
        if entries:
            prev_last = entries[-1][1].last_offset
        for e in framed[s.uri].entries:
            if e.first_offset is None:  # a legacy wrapper: from the previous entry on
                e = e._replace(first_offset=e.last_offset if prev_last is None
                               else min(prev_last + 1, e.last_offset))
            entries.append((s, e))
            prev_last = e.last_offset

    def rank(copy):
        es = copies[copy]
        return (-max((e.last_offset for _, e in es), default=-1), -len(es), copy)
    order = sorted(copies, key=rank)
    chosen = _Kept()
    divergences, reported, pending = [], set(), False
    for sound in (True, False):  # a copy whose CRC verifies before one that does not
        for copy in order:
            for s, e in copies[copy]:
                if e.valid != sound or (sound and e.header in chosen.headers):
                    continue  # (the same batch as a kept one: framed only)
                met = chosen.meeting(e)
                if not met:
                    chosen.add(s, e)
                    continue
                if not sound or any(c.header == e.header for _, c in met):
                    continue  # the same batch (framed only), or a damaged copy: its CRC
                    # fails, so its header says nothing of what it held
                if e.header not in reported:
                    reported.add(e.header)
                    divergences.append(_divergence(s, e, *met[0]))
                held = sum(min(e.last_offset, c.last_offset) - max(e.first_offset, c.first_offset) + 1
                           for _, c in met)
                if held < e.last_offset - e.first_offset + 1:
                    pending = True  # offsets only this batch holds: decode it, dedupe
                    chosen.add(s, e)
    ranges: dict[str, list[list[int]]] = {}
    for s, e in sorted(chosen.items, key=lambda x: (x[0].uri, x[1].position)):
        spans = ranges.setdefault(s.uri, [])
        if spans and spans[-1][1] == e.position:
            spans[-1][1] = e.position + e.size
        else:
            spans.append([e.position, e.position + e.size])
    primary = order[0] if order else ""
    for s in segs:
        f = framed[s.uri]
        if f.end < s.size and (f.rest or copy_of(s.uri) == primary):
            # bytes framing could not read: the primary's are decoded for their findings
            # (a torn tail); another copy's only where entries follow them (then they
            # may repeat chosen offsets: deduplicate)
            pending = pending or f.rest
            spans = ranges.setdefault(s.uri, [])
            if spans and spans[-1][1] == f.end:
                spans[-1][1] = s.size
            else:
                spans.append([f.end, s.size])
    return Choice({u: [tuple(r) for r in rs] for u, rs in ranges.items()}, divergences,
                  pending, primary)


class _Kept:
    """The entries kept so far, by first offset, with what meets an offset range found by
    bisection (a partition's copies hold thousands of batches each)."""

    def __init__(self):
        self.items: list[tuple[Segment, Entry]] = []
        self.firsts: list[int] = []
        self.headers: set[tuple] = set()
        self.widest = 0

    def add(self, seg: Segment, e: Entry) -> None:
        if not self.firsts or e.first_offset >= self.firsts[-1]:  # in order: most of them
            self.firsts.append(e.first_offset)
            self.items.append((seg, e))
        else:
            i = bisect.bisect_right(self.firsts, e.first_offset)
            self.firsts.insert(i, e.first_offset)
            self.items.insert(i, (seg, e))
        self.headers.add(e.header)
        self.widest = max(self.widest, e.last_offset - e.first_offset)

    def meeting(self, e: Entry) -> list[tuple[Segment, Entry]]:
        """The kept entries whose offsets meet ``e``'s, by first offset."""
        i = bisect.bisect_right(self.firsts, e.last_offset)
        out = []
        while i > 0 and self.firsts[i - 1] >= e.first_offset - self.widest:
            i -= 1
            if self.items[i][1].last_offset >= e.first_offset:
                out.append(self.items[i])
        return out[::-1]


def _divergence(seg: Segment, e: Entry, kept_seg: Segment, kept: Entry) -> dict:
    return dict(
        topic=seg.topic, partition=seg.partition, kind="divergence", position=e.position,
        end=e.position + e.size, base_offset=e.first_offset, last_offset=e.last_offset,
        bytes=e.size, raw=None, segment=seg.uri, segment_base_offset=seg.base_offset,
        message=(f"{DIVERGENCE_PREFIX} offsets {e.first_offset}..{e.last_offset} of "
                 f"{seg.topic}-{seg.partition}: the batch at {e.position} of {seg.uri} "
                 f"(crc {e.crc:#010x}, {e.size} bytes) differs from the one kept, offsets "
                 f"{kept.first_offset}..{kept.last_offset} at {kept.position} of "
                 f"{kept_seg.uri} (crc {kept.crc:#010x}, {kept.size} bytes)"))


def split_range(framed: Framed, start: int, end: int, split_bytes: int) -> list[tuple[int, int]]:
    """``[start, end)`` cut at entry positions about ``split_bytes`` apart (the framing
    knows every entry, so no ``.index`` is needed)."""
    points = [start]
    for e in framed.entries:
        if start < e.position < end and e.position - points[-1] >= split_bytes:
            points.append(e.position)
    return list(zip(points, points[1:] + [end]))


def replan(tasks: list[Task], groups: dict[tuple, list[Segment]],
           framed: dict[str, Framed | None], published: dict[tuple, list[tuple[int, int]]],
           run_id: str, split_bytes: int) -> tuple[list[Task], pa.Table, set[tuple]]:
    """``tasks`` with those of the replicated partitions ``groups`` replaced by tasks of
    the byte ranges :func:`reconcile` chose, cut about ``split_bytes`` apart (pending
    only where they can meet ``published`` offsets, or a diverged batch adds offsets);
    the divergence findings; and the partitions reconciled. A partition with a copy
    that could not be framed, or with a segment the ledger already covers (a resume),
    keeps its tasks."""
    out, findings, done = [], [], set()
    drafts = {}
    by_tp: dict[tuple, list[Task]] = {}
    for t in tasks:
        by_tp.setdefault((t.topic, t.partition), []).append(t)
    for tp, segs in groups.items():
        mine = by_tp.get(tp, [])
        if any(framed.get(s.uri) is None for s in segs) or any(t.mode != "decode" for t in mine):
            continue
        choice = reconcile(segs, framed)
        first = min((e.first_offset for f in (framed[s.uri] for s in segs)
                     for e in f.entries if e.first_offset is not None), default=None)
        # bytes framing could not read that are decoded may hold any offset above
        last = None if any(framed[s.uri].end < s.size and s.uri in choice.ranges
                           for s in segs) else \
            max((e.last_offset for f in (framed[s.uri] for s in segs) for e in f.entries),
                default=None)
        pending = choice.pending or (first is not None and any(
            meets((first, last), r) for r in published.get(tp, ()))) or (
            first is None and bool(published.get(tp)))
        by_uri = {t.uri: t for t in mine}
        new = []
        for uri, spans in choice.ranges.items():
            t = by_uri[uri]
            for a, b in (piece for span in spans
                         for piece in split_range(framed[uri], *span, split_bytes)):
                new.append(replace(t, start=a, end=b, split=a > 0, framed=True, pending=pending,
                                   index_entries=None))
        drafts[tp] = new
        findings.extend(dict(f, run_id=run_id) for f in choice.divergences)
        done.add(tp)
    for t in tasks:
        if (t.topic, t.partition) not in done:
            out.append(t)
    for new in drafts.values():
        out.extend(new)
    out.sort(key=lambda t: (-(t.end - t.start), t.uri, t.start))
    out = [replace(t, task=i) for i, t in enumerate(out)]
    return out, pa.Table.from_pylist(findings, schema=schemas.FINDINGS), done
