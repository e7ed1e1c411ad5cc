"""Replicas: the copies of one topic-partition that several brokers' folders hold,
reconciled batch by batch so that a run decodes each batch once.

Users copy every broker's log directory, so with replication factor N a partition
arrives N times, under different folders (a *copy* is the folder above
``<topic>-<partition>/``, at any depth), each copy split into segments where its own
broker rolled them. Followers copy the leader's batches byte for byte, so copies
agree batch by batch: same base offset, last offset, stored CRC and size.

- :func:`frame` reads a copy's segment by its framing alone (:func:`kafkalog.frame`:
  offset, size, magic, then the stored CRC and offsets from the header): no record is
  decoded. Each batch's CRC is computed too, so that a damaged copy of a batch is never
  chosen over a sound one.
- :func:`reconcile` takes, per partition, one *primary* copy (the one reaching the
  highest offset, then the one with most batches) and every batch of it; then from
  the other copies, in that order, each batch whose offsets no chosen batch holds
  (a longer replica, the other side of a truncated tail). A batch holding offsets of
  a chosen batch with another header is a **replica divergence** (an unclean leader
  election or a truncation): one ``replica_divergence`` finding naming both copies
  (:data:`spark_jobs.findings.REPLICA_DIVERGENCE`; the audit's ``replica_divergence``
  check), recorded once
  however many copies agree with it. Where such a batch also holds offsets no chosen
  batch holds, it is decoded too and the partition's output goes through the Spark
  dedupe (:mod:`~spark_jobs.decode.deduplication`), which keeps the first copy of each
  offset; everywhere else nothing is shuffled: the chosen byte ranges become ordinary
  decode tasks that write straight into the tables.

Only the chosen bytes are decoded, so findings (CRC, index checks, a torn tail) are
those of the chosen copy's bytes; a copy that only repeats chosen batches is framed,
not decoded, and has no ledger row. A batch of a copy whose CRC fails and that was not
decoded (another copy's was) is a :data:`DAMAGED_COPY` finding naming that copy: a
broker's damaged disk is reported even where the data came through whole.
"""

from __future__ import annotations

import bisect
import functools
import struct
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np
import pyarrow as pa

import kafkalog
from spark_jobs import layout, schemas, storage
from spark_jobs.decode import tier
from spark_jobs.decode.planning import Segment, Task, meets
from spark_jobs.findings import (REPLICA_DIVERGENCE, REPLICA_DIVERGENCE_PREFIX, TIER_DIVERGENCE,
                                 TIER_DIVERGENCE_PREFIX, Finding)

#: the finding kind of a copy's batch whose CRC fails where another copy's was decoded
#: (the decoder never reads it; the audit's ``decoder_findings``, policy: warn)
DAMAGED_COPY = "replica_crc_mismatch"


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


#: a framed entry's columns (:attr:`Framed.cols`; ``has_base_offset`` 0: a legacy wrapper)
COLUMNS = kafkalog.FRAME_COLUMNS
_FRAMED_HEAD = struct.Struct("<qqB")  # end, entries, rest (Framed.to_bytes)
_POSITION, _FIRST, _LAST = (COLUMNS.index(c) for c in ("position", "base_offset", "last_offset"))


@dataclass(frozen=True, eq=False)
class Framed:
    """A segment as :func:`frame` read it: its entries as an int64 array of
    :data:`COLUMNS` (a row per entry: a snapshot's copies hold millions of batches, which
    the driver compares as arrays), where framing stopped (``end``: the segment's size, or
    the start of bytes it could not frame) and whether an entry that verifies lies past
    that point (``rest``)."""

    cols: np.ndarray
    end: int
    rest: bool

    def col(self, name: str) -> np.ndarray:
        return self.cols[:, COLUMNS.index(name)]

    @functools.cached_property
    def entries(self) -> tuple:
        """The entries as :class:`Entry` tuples (the general reconciliation path)."""
        return tuple(Entry(p, n, f if h else None, last, crc, bool(v))
                     for p, n, _magic, f, last, crc, v, h in self.cols.tolist())

    def __eq__(self, other) -> bool:
        return isinstance(other, Framed) and (self.end, self.rest) == (other.end, other.rest) \
            and np.array_equal(self.cols, other.cols)

    def to_bytes(self) -> bytes:
        """What an executor sends the driver: the columns one after another, positions and
        first offsets as differences, last offsets relative to the first, zstd-compressed
        (a copy's arrays shrink about 20x; :meth:`from_bytes` reverses it)."""
        d = np.array(self.cols, dtype=np.int64, order="F")
        d[:, _LAST] -= d[:, _FIRST]
        for c in (_POSITION, _FIRST):
            d[1:, c] = np.diff(self.cols[:, c])
        data = np.ascontiguousarray(d.T, dtype="<i8")  # (d is F-ordered: no copy)
        return _FRAMED_HEAD.pack(self.end, len(self.cols), self.rest) + \
            pa.compress(data, codec="zstd", asbytes=True)

    @classmethod
    def from_bytes(cls, data: bytes) -> "Framed":
        end, n, rest = _FRAMED_HEAD.unpack_from(data)
        raw = pa.decompress(memoryview(data)[_FRAMED_HEAD.size:], n * len(COLUMNS) * 8,
                            codec="zstd", asbytes=True)
        cols = np.frombuffer(raw, dtype="<i8").reshape(len(COLUMNS), n).T
        cols = cols.astype(np.int64, order="C")  # the one copy: an entry a row, writable
        for c in (_POSITION, _FIRST):
            np.cumsum(cols[:, c], out=cols[:, c])
        cols[:, _LAST] += cols[:, _FIRST]
        return cls(cols, end, bool(rest))


def frame(source, byte_range=None) -> Framed:
    """The entries of ``source`` (a path, bytes or :class:`kafkalog.Slice`) by framing,
    as :func:`kafkalog.frame` reads them (an implausible size or magic, or an entry past
    the end, stops it; every CRC is checked); records are not decoded."""
    f = kafkalog.frame(source, byte_range=byte_range)
    cols = np.frombuffer(f.data, dtype=np.int64).reshape(-1, len(COLUMNS))
    return Framed(cols, f.end, f.next_entry is not None)


def frame_segment(seg: Segment, s3, tier_access=None) -> Framed:
    """:func:`frame` of a listed segment, read against what the listing saw (raises
    :class:`storage.StorageError` where it cannot be read or changed since); a remote
    segment read through its tier (``tier_access``)."""
    if seg.remote:
        return frame(tier.read(seg, tier_access, s3, 0, seg.size))
    store, key = storage.open_object(seg.uri, s3)
    if isinstance(store, storage.LocalStore):
        store.verify(key, seg.pin)
        framed = frame(store.path(key))
        store.verify(key, seg.pin)
        return framed
    return frame(store.read_pinned(key, seg.pin))


def copy_of(uri: str) -> str:
    """The copy a segment belongs to: the folder above its ``<topic>-<partition>/``; for a
    folder Kafka renamed (``-future``: a move between one broker's log directories in
    flight, ``-delete``, ``-stray``) the folder itself, so that it is a copy of its own
    beside the live folder of the same log directory (each offset is then decoded once)."""
    head, folder, _ = uri.rsplit("/", 2)
    return head if layout.PARTITION_DIR.fullmatch(folder) and \
        not folder.endswith(layout.RENAMED_SUFFIXES) else f"{head}/{folder}"


def replicated(segments: list[Segment]) -> dict[tuple, list[Segment]]:
    """The topic-partitions that more than one copy holds, with their segments (a tier's
    remote segments are a copy: of those, only the ones that can meet the local tail,
    :func:`tier.overlapping`)."""
    by_tp: dict[tuple, list[Segment]] = {}
    for s in segments:
        by_tp.setdefault((s.topic, s.partition), []).append(s)
    groups = {tp: tier.overlapping(segs) for tp, segs in by_tp.items()}
    return {tp: segs for tp, segs in groups.items() if len({copy_of(s.uri) for s in segs}) > 1}


def frame_all(spark, segments: list[Segment], s3, tier_access=None) -> dict[str, Framed | None]:
    """:func:`frame_segment` of each segment on the executors (a Spark task per core);
    None for a segment that could not be read. An RDD's partitions, as the decode
    tasks (:func:`~spark_jobs.decode.executor.run_tasks`): the framings come back
    pickled. Through a DataFrame's ``mapInArrow`` the frame phase took 0.39-0.58 s
    on bench_replicas' copies, and 0.21-0.46 s so (docs/replicas.md)."""
    if not segments:
        return {}
    segs = list(segments)

    def run(numbers):
        for i in numbers:
            try:
                yield i, frame_segment(segs[i], s3, tier_access).to_bytes()
            except (storage.StorageError, OSError, kafkalog.KafkaLogError):
                yield i, None

    # framing reads at GB/s: one Spark task per core (each costs more than framing a
    # segment), not one per segment
    parts = min(len(segs), spark.sparkContext.defaultParallelism)
    framed = dict(spark.sparkContext.parallelize(range(len(segs)), parts)
                  .mapPartitions(run).collect())
    return {s.uri: (None if framed[i] is None else Framed.from_bytes(framed[i]))
            for i, s in enumerate(segs)}


@dataclass(frozen=True)
class Choice:
    """What :func:`reconcile` made of one replicated partition."""

    ranges: dict  # segment uri -> [(start, end)] byte ranges to decode, entry-aligned
    divergences: list  # finding rows (findings table columns but run_id)
    pending: bool  # a diverged batch adds offsets: the partition needs the Spark dedupe
    primary: str  # the primary copy
    damaged: list = ()  # DAMAGED_COPY finding rows: damaged batches of copies not decoded


def reconcile(segs: list[Segment], framed: dict[str, Framed]) -> Choice:
    """The byte ranges of one topic-partition's copies to decode: each batch once
    (module docstring), with the divergences between copies."""
    found = _copies_agree(segs, framed)
    if found is not None:  # the common case, decided on arrays
        ranges, primary = found
        divergences, pending = [], False
    else:
        ranges, divergences, pending, primary = _reconcile_entries(segs, framed)
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
    ranges = {u: [tuple(r) for r in rs] for u, rs in ranges.items()}
    return Choice(ranges, divergences, pending, primary, _damaged_copies(segs, framed, ranges))


def _damaged_copies(segs: list[Segment], framed: dict[str, Framed], ranges: dict) -> list[dict]:
    """A :data:`DAMAGED_COPY` finding for each batch whose CRC fails and that is not in
    the byte ranges chosen for decoding: a sound copy of it was decoded instead, or its
    offsets came from another copy. The decoder never reads it, so without this a broker's
    damaged copy would go unreported."""
    out = []
    for s in segs:
        f = framed[s.uri]
        bad = np.flatnonzero(f.col("crc_valid") == 0)
        if not len(bad):
            continue
        spans = sorted(ranges.get(s.uri, ()))
        starts = [a for a, _ in spans]
        for i in bad.tolist():
            pos, size, last = (int(f.col(c)[i]) for c in ("position", "size", "last_offset"))
            k = bisect.bisect_right(starts, pos) - 1
            if k >= 0 and pos + size <= spans[k][1]:
                continue  # decoded: the decoder reports it (crc_mismatch)
            first = int(f.col("base_offset")[i]) if f.col("has_base_offset")[i] else None
            out.append(Finding(
                topic=s.topic, partition=s.partition, kind=DAMAGED_COPY, position=pos,
                end=pos + size, base_offset=first, last_offset=last, bytes=size,
                segment=s.uri, segment_base_offset=s.base_offset,
                message=(f"the batch at {pos} of {s.uri} (offsets {first}..{last}, "
                         f"{size} bytes) fails its CRC: this copy is damaged; it was not "
                         f"decoded, those offsets were taken from another copy")).row())
    return out


def _rank(copy: str, count: int, last: int) -> tuple:
    """The primary copy sorts first: the one reaching the highest offset, then the one
    with most batches, then a live folder before a renamed one (:func:`copy_of`)."""
    return (-last, -count, copy.endswith(layout.RENAMED_SUFFIXES), copy)


def _copies_agree(segs: list[Segment], framed: dict[str, Framed]):
    """``(ranges, primary)`` when every batch of every other copy is one of the primary
    copy's (same offsets, CRC and size), the primary's batches all verify and follow one
    another without overlap (no legacy wrapper): then the primary is decoded whole and the
    others are framed only, as :func:`_reconcile_entries` would decide one batch at a
    time; None otherwise (that general path decides)."""
    by_copy: dict[str, list[Segment]] = {}
    for s in sorted(segs, key=lambda s: (s.base_offset, s.uri)):
        by_copy.setdefault(copy_of(s.uri), []).append(s)
    arrays = {c: np.concatenate([framed[s.uri].cols for s in ss]) for c, ss in by_copy.items()}
    first, last, size, crc, valid, has_first = (COLUMNS.index(n) for n in (
        "base_offset", "last_offset", "size", "crc", "crc_valid", "has_base_offset"))
    if any(len(a) == 0 or not a[:, has_first].all() for a in arrays.values()):
        return None
    primary = min(arrays, key=lambda c: _rank(c, len(arrays[c]), int(arrays[c][:, last].max())))
    p = arrays[primary]
    if not p[:, valid].all() or (len(p) > 1 and not (p[1:, first] > p[:-1, last]).all()):
        return None
    for c, o in arrays.items():
        if c == primary:
            continue
        i = np.minimum(np.searchsorted(p[:, first], o[:, first]), len(p) - 1)
        q = p[i]
        if not ((q[:, first] == o[:, first]) & (q[:, last] == o[:, last])
                & (q[:, crc] == o[:, crc]) & (q[:, size] == o[:, size])).all():
            return None
    ranges = {}
    pos, n = COLUMNS.index("position"), COLUMNS.index("size")
    for s in by_copy[primary]:
        cols = framed[s.uri].cols
        if not len(cols):
            continue
        starts, ends = cols[:, pos], cols[:, pos] + cols[:, n]
        breaks = np.flatnonzero(starts[1:] != ends[:-1]) + 1
        ranges[s.uri] = [[int(a), int(b)] for a, b in zip(starts[np.r_[0, breaks]],
                                                          ends[np.r_[breaks - 1, len(cols) - 1]])]
    return ranges, primary


def _reconcile_entries(segs: list[Segment], framed: dict[str, Framed]):
    """``(ranges, divergences, pending, primary)`` decided batch by batch."""
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

    order = sorted(copies, key=lambda c: _rank(c, len(copies[c]), max(
        (e.last_offset for _, e in copies[c]), default=-1)))
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
    return ranges, divergences, pending, (order[0] if order else "")


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
    """A divergence finding on the losing copy's batch: :data:`TIER_DIVERGENCE` where a
    remote (tiered) copy and a local one disagree, else :data:`REPLICA_DIVERGENCE`."""
    tiered = bool(seg.remote) != bool(kept_seg.remote)
    prefix = TIER_DIVERGENCE_PREFIX if tiered else REPLICA_DIVERGENCE_PREFIX
    return Finding(
        topic=seg.topic, partition=seg.partition,
        kind=TIER_DIVERGENCE if tiered else REPLICA_DIVERGENCE, position=e.position,
        end=e.position + e.size, base_offset=e.first_offset, last_offset=e.last_offset,
        bytes=e.size, segment=seg.uri, segment_base_offset=seg.base_offset,
        message=(f"{prefix} offsets {e.first_offset}..{e.last_offset} of "
                 f"{seg.topic}-{seg.partition}: the batch at {e.position} of {seg.uri} "
                 f"(crc {e.crc:#010x}, {e.size} bytes) differs from the one kept, offsets "
                 f"{kept.first_offset}..{kept.last_offset} at {kept.position} of "
                 f"{kept_seg.uri} (crc {kept.crc:#010x}, {kept.size} bytes)")).row()


def split_range(framed: Framed, start: int, end: int, split_bytes: int) -> list[tuple[int, int]]:
    """``[start, end)`` cut at entry positions about ``split_bytes`` apart (the framing
    knows every entry, so no ``.index`` is needed)."""
    positions = framed.col("position")
    inside = positions[(positions > start) & (positions < end)]
    points = [start]
    while True:  # the first entry at least split_bytes past the last cut, cut after cut
        i = np.searchsorted(inside, points[-1] + split_bytes)
        if i >= len(inside):
            break
        points.append(int(inside[i]))
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
        by_tp.setdefault((t.segment.topic, t.segment.partition), []).append(t)
    for tp, segs in groups.items():
        uris = {s.uri for s in segs}
        mine = [t for t in by_tp.get(tp, []) if t.segment.uri in uris]
        if any(framed.get(s.uri) is None for s in segs) or any(t.mode != "decode" for t in mine):
            continue
        choice = reconcile(segs, framed)
        firsts = [f.col("base_offset")[f.col("has_base_offset") == 1]
                  for f in (framed[s.uri] for s in segs)]
        first = min((int(a.min()) for a in firsts if len(a)), default=None)
        # bytes framing could not read that are decoded may hold any offset above
        lasts = [framed[s.uri].col("last_offset") for s in segs]
        last = None if any(framed[s.uri].end < s.size and s.uri in choice.ranges
                           for s in segs) else \
            max((int(a.max()) for a in lasts if len(a)), default=None)
        pending = choice.pending or (first is not None and any(
            meets((first, last), r) for r in published.get(tp, ()))) or (
            first is None and bool(published.get(tp)))
        by_uri = {t.segment.uri: t for t in mine}
        new = []
        for uri, spans in choice.ranges.items():
            t = by_uri[uri]
            for a, b in (piece for span in spans
                         for piece in split_range(framed[uri], *span, split_bytes)):
                new.append(replace(t, start=a, end=b, split=a > 0, framed=True, pending=pending,
                                   index_entries=None))
        drafts[tp] = new
        findings.extend(dict(f, run_id=run_id) for f in [*choice.divergences, *choice.damaged])
        done.add(tp)
    framed_uris = {s.uri for segs in groups.values() for s in segs}
    for t in tasks:  # (a remote segment that cannot meet the local tail was not framed)
        if (t.segment.topic, t.segment.partition) not in done or t.segment.uri not in framed_uris:
            out.append(t)
    for new in drafts.values():
        out.extend(new)
    out.sort(key=lambda t: (-(t.end - t.start), t.segment.uri, t.start))
    out = [replace(t, task=i) for i, t in enumerate(out)]
    return out, pa.Table.from_pylist(findings, schema=schemas.FINDINGS), done
