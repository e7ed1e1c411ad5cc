"""Plan: what a run reads, from the listing and the ledger.

:func:`discover` lists the segments (a directory or prefix, or a JSON manifest)
with what the listing saw of each object (reads are pinned to it); from the
ledger as ``main`` held it when the run began, :func:`coverage_from_ledger` finds
the prefix of each segment earlier runs proved ingested; :func:`plan` makes the
executor tasks: skip or resume what is covered, split big segments at ``.index``
positions, mark partitions whose offsets can meet published ones (or another
copy in this run) as pending, i.e. to be deduplicated. Pure functions but the
listing and index reads.
"""

from __future__ import annotations

import concurrent.futures
import datetime as dt
import json
from dataclasses import asdict, dataclass, replace

import pyarrow as pa

import kafkalog
from kafkalog.indexes import offset_index_positions, offset_index_share
from spark_jobs import layout, schemas, storage

DEFAULT_SPLIT_BYTES = 128 * 1024 * 1024


@dataclass(frozen=True)
class Remote:
    """Where a remote (tiered-storage) segment's bytes are: its ``.log`` and ``.indexes``
    objects (the segment's ``uri`` is its ``.rsm-manifest``), and its last offset, as
    ``__remote_log_metadata`` says (spark_jobs.decode.tier)."""

    log_uri: str
    indexes_uri: str
    end_offset: int


@dataclass(frozen=True)
class Segment:
    uri: str
    topic: str
    partition: int
    base_offset: int
    size: int
    etag: str | None = None
    mtime: str | None = None  # ISO-8601 UTC
    index_uri: str | None = None
    timeindex_uri: str | None = None
    txnindex_uri: str | None = None
    #: what the listing saw of the index files: ``(uri, size, etag, mtime)`` each
    index_pins: tuple = ()
    #: the snapshot night (``YYYY-MM-DD``) whose listing held it (the manifest's, or the job's
    #: ``--night``); None where the input named none
    night: str | None = None
    #: a remote segment (tiered storage, spark_jobs.decode.tier; ``uri`` is its
    #: ``.rsm-manifest``); None: an object read as it is
    remote: Remote | None = None

    @property
    def key(self) -> tuple[str, int, int]:
        return (self.topic, self.partition, self.base_offset)

    @property
    def pin(self) -> storage.Pin:
        return storage.Pin(self.size, self.etag, self.mtime)

    def index_pin(self, uri: str) -> storage.Pin | None:
        """What the listing saw of one of the segment's index files (None: not known)."""
        for pinned_uri, *pin in self.index_pins:
            if pinned_uri == uri:
                return storage.Pin(*pin)
        return None

    @classmethod
    def from_dict(cls, d: dict) -> "Segment":
        """A segment from its :func:`dataclasses.asdict` (through JSON: tuples as lists)."""
        remote = d.get("remote")
        return cls(**{**d, "index_pins": tuple(tuple(p) for p in d.get("index_pins", ())),
                      "remote": Remote(**remote) if remote else None})


@dataclass(frozen=True)
class Task:
    """One executor task: the entries of its ``segment`` that start in [start, end)."""

    task: int
    segment: Segment
    start: int
    end: int
    mode: str = "decode"  # decode | resume
    split: bool = False  # start is an .index position: find the entry boundary at or after it
    pending: bool = False  # output may overlap the warehouse or this run: deduplicate
    framed: bool = False  # start and end are entry boundaries (replicas.py framed them)
    verify_position: int | None = None  # resume: the last ingested batch's position ...
    verify_crc: int | None = None  # ... and its stored CRC
    covered_end: int | None = None  # resume: the end of the prefix earlier runs ingested
    same_object: bool = False  # resume: size (and etag, where known) as when it was ingested
    #: the segment's .index entries pointing into [start, end) are checked: entries
    #: [first, stop) of it (None: the whole file is read)
    index_entries: tuple[int, int] | None = None

    @property
    def last(self) -> bool:
        """The segment's last task: it reads to the segment's end."""
        return self.end >= self.segment.size

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "Task":
        d = json.loads(text)
        entries = d.get("index_entries")
        return cls(**{**d, "segment": Segment.from_dict(d["segment"]),
                      "index_entries": tuple(entries) if entries is not None else None})


@dataclass
class Coverage:
    """What earlier runs ingested of one segment: its prefix [0, end) and that prefix's last batch."""

    end: int
    last_batch_position: int
    last_batch_crc: int
    last_offset: int | None
    run_id: str
    object_size: int
    etag: str | None


def discover(input_uri: str, config: storage.S3Config | None = None, *,
             state_files: list | None = None, night: str | None = None,
             log_dir_files: list | None = None) -> tuple[list[Segment], list[str]]:
    """Every segment under a directory/prefix, or listed by a JSON manifest; and the
    URIs of the ``.log`` objects whose names do not say where they belong. The
    partitions' state files (layout.STATE_FILE_KEY: beside the segments, or the
    manifest's ``state_files``) are appended to ``state_files`` where one is given, the
    log directories' own files (layout.LOG_DIR_FILE_KEY, or the manifest's
    ``log_dir_files``) to ``log_dir_files`` as ``{"uri", "night"}``.
    ``night``: the snapshot night of the segments whose manifest entry names none."""
    if input_uri.endswith(".json"):
        return _from_manifest(input_uri, config, state_files, night, log_dir_files)
    store = storage.open_store(input_uri, config)
    objects = {o.key: o for o in store.list("")}
    segments, unparsable = [], []
    for key, obj in objects.items():
        parsed = layout.parse_segment_key(key)
        if parsed is None:
            if layout.is_log(key):
                unparsable.append(store.uri(key))
            elif state_files is not None and layout.parse_state_key(key) is not None:
                state_files.append(store.uri(key))
            elif log_dir_files is not None and layout.parse_log_dir_key(key) is not None:
                log_dir_files.append({"uri": store.uri(key), "night": night})
            continue
        found = {suffix: objects[layout.index_key(key, suffix)] for suffix in layout.INDEX_SUFFIXES
                 if layout.index_key(key, suffix) in objects}
        beside = {suffix: store.uri(found[suffix].key) if suffix in found else None
                  for suffix in layout.INDEX_SUFFIXES}
        segments.append(Segment(
            uri=store.uri(key), topic=parsed[0], partition=parsed[1], base_offset=parsed[2],
            size=obj.size, etag=obj.etag, mtime=obj.mtime.isoformat(),
            index_uri=beside[".index"], timeindex_uri=beside[".timeindex"],
            txnindex_uri=beside[".txnindex"],
            index_pins=tuple((store.uri(info.key), *storage.Pin.of(info))
                             for info in found.values()), night=night))
    return sorted(segments, key=lambda s: (s.topic, s.partition, s.base_offset, s.uri)), unparsable


def _from_manifest(uri: str, config, state_files: list | None = None, night: str | None = None,
                   log_dir_files: list | None = None) -> tuple[list[Segment], list[str]]:
    store, key = storage.open_object(uri, config)
    segments, unparsable = [], []
    data = store.read(key)
    if state_files is not None:
        state_files.extend(layout.read_manifest_state_files(data, uri))
    if log_dir_files is not None:
        log_dir_files.extend({"uri": e["uri"], "night": e["night"] or night}
                             for e in layout.read_manifest_log_dir_files(data, uri))
    for entry in layout.read_manifest(data, uri):
        seg_uri = entry["uri"]
        parsed = layout.parse_segment_key(seg_uri)
        if parsed is None:
            unparsable.append(seg_uri)
            continue
        seg_store, seg_key = storage.open_object(seg_uri, config)
        if entry.get("size") is None:
            info = seg_store.stat(seg_key)
            entry.update(size=info.size, etag=info.etag, mtime=info.mtime.isoformat())
        beside = {suffix: entry.get(suffix[1:]) for suffix in layout.INDEX_SUFFIXES}
        pins = []
        if entry["size"] > 0:
            for suffix, named in beside.items():
                beside[suffix], pin = _beside(seg_store, seg_uri, seg_key, suffix, named, config)
                if pin is not None:
                    pins.append((beside[suffix], *pin))
        segments.append(Segment(seg_uri, parsed[0], parsed[1], parsed[2], int(entry["size"]),
                                entry.get("etag"), _iso(entry.get("mtime")), beside[".index"],
                                beside[".timeindex"], beside[".txnindex"], tuple(pins),
                                entry.get("night") or night))
    return sorted(segments, key=lambda s: (s.topic, s.partition, s.base_offset, s.uri)), unparsable


def _beside(store, seg_uri: str, seg_key: str, suffix: str, named: str | None,
            config) -> tuple[str | None, storage.Pin | None]:
    """The segment's index file with ``suffix`` (the manifest's, else the one beside it
    where one exists) and what it is now (its reads are pinned to that)."""
    if named:
        store, key = storage.open_object(named, config)
    else:
        key = layout.index_key(seg_key, suffix)
    try:
        info = store.stat(key)
    except (storage.StorageError, OSError):
        return named, None
    return named or (store.uri(key) if storage.is_s3(seg_uri) else store.path(key)), \
        storage.Pin.of(info)


def _iso(value) -> str | None:
    return value.isoformat() if isinstance(value, dt.datetime) else value


def coverage_from_ledger(ledger: pa.Table, runs: list[str]) -> dict[tuple, Coverage]:
    """Per segment (topic, partition, base offset): the prefix ``runs`` proved ingested.

    ``runs`` are the trusted runs in the order they were first published. A
    run's rows for a segment start a prefix when they chain from byte 0 without
    a hole (split tasks end where the next one starts); a later ``resumed`` row
    extends the prefix it starts at; ``unchanged`` rows leave it as it is.
    """
    order = {r: i for i, r in enumerate(runs)}
    rows = [r for r in ledger.to_pylist() if r["run_id"] in order and r["action"] != "failed"]
    by_seg: dict[tuple, dict[str, list[dict]]] = {}
    for r in rows:
        key = (r["topic"], r["partition"], r["segment_base_offset"])
        by_seg.setdefault(key, {}).setdefault(r["run_id"], []).append(r)
    best: dict[tuple, Coverage] = {}
    for key, per_run in by_seg.items():
        cov = None
        for run_id in sorted(per_run, key=order.get):
            parts = sorted(per_run[run_id], key=lambda r: r["byte_start"])
            last = parts[-1]
            chained = all(a["byte_end"] == b["byte_start"] for a, b in zip(parts, parts[1:]))
            if not chained:
                continue
            if last["last_batch_position"] is None:  # nothing complete was read
                if cov is not None and parts[0]["byte_start"] == cov.end:
                    cov = replace(cov, object_size=last["object_size"], etag=last["etag"])
                continue
            last_offset = max((p["last_offset"] for p in parts if p["last_offset"] is not None),
                              default=None)
            if parts[0]["byte_start"] == 0 and parts[0]["action"] != "unchanged":
                cov = Coverage(last["end_position"], last["last_batch_position"],
                               last["last_batch_crc"], last_offset, run_id,
                               last["object_size"], last["etag"])
            elif cov is not None and parts[0]["action"] == "resumed" \
                    and parts[0]["byte_start"] == cov.end:
                cov = Coverage(last["end_position"], last["last_batch_position"],
                               last["last_batch_crc"],
                               last_offset if last_offset is not None else cov.last_offset,
                               run_id, last["object_size"], last["etag"])
            elif cov is not None and parts[0]["action"] == "unchanged":
                cov = replace(cov, object_size=last["object_size"], etag=last["etag"])
        if cov is not None:
            best[key] = cov
    return best


def ingested(ledger: pa.Table, run_id: str, *, reprocess: bool = False) -> dict[tuple, Coverage]:
    """What run ``run_id`` may skip or resume: :func:`coverage_from_ledger` of the runs it
    trusts (:func:`trusted_runs`); nothing with ``reprocess``. The one rule the decode job
    and the DAG's planner (kafkalog_pipeline.tasks.plan_run) both apply."""
    return {} if reprocess else coverage_from_ledger(ledger, trusted_runs(ledger, run_id))


def resume_from(cov: Coverage | None, size: int, etag: str | None) -> tuple[int, bool] | None:
    """Where a segment listed with ``size`` and ``etag`` is read from, given what earlier
    runs ingested of it (``cov``): None (from byte 0: nothing ingested, or the object is
    now shorter than that prefix), else ``(start, same_object)``. The object ingested
    (same size, and ETag where both are known) starts at its end: nothing to decode,
    the task only checks that the last ingested batch is still there and writes an
    ``unchanged`` ledger row. Another object holding the prefix starts where it ends."""
    if cov is None or size < cov.end:
        return None
    same = size == cov.object_size and (etag is None or cov.etag is None or etag == cov.etag)
    return (size if same else cov.end), same


def ledger_ranges(ledger: pa.Table, exclude_run: str) -> dict[tuple, list[tuple[int, int]]]:
    """Per (topic, partition): the offset ranges published runs ingested."""
    out: dict[tuple, list] = {}
    for r in ledger.to_pylist():
        if r["run_id"] == exclude_run or r["first_offset"] is None:
            continue
        out.setdefault((r["topic"], r["partition"]), []).append((r["first_offset"], r["last_offset"]))
    return out


def overlap_days(ledger: pa.Table, run_id: str,
                 ranges: dict[tuple, tuple[int, int]]) -> list[str] | None:
    """The :data:`~spark_jobs.schemas.INGEST_DT` days of the published runs (other than
    ``run_id``) whose ledger rows meet the offset ``ranges`` per (topic, partition),
    sorted: every row of the warehouse that can share an offset with ``ranges`` was
    written by such a run (a run's rows lie within its ledger rows' offsets), in a file
    of its day, or else in a file of no day (written before ``ingest_dt`` existed).
    None (no bound) where such a run has no recorded ingestion time."""
    days = set()
    cols = [ledger.column(n).to_pylist()
            for n in ("run_id", "topic", "partition", "first_offset", "last_offset",
                      "ingested_at")]
    for run, topic, part, lo, hi, at in zip(*cols):
        want = ranges.get((topic, part))
        if run == run_id or lo is None or want is None or not meets((lo, hi), want):
            continue
        if at is None:
            return None
        days.add(schemas.ingest_day(at))
    return sorted(days)


def split_points(segment: Segment, index_positions: list[int], split_bytes: int) -> list[int]:
    """Batch-aligned start positions (from ``.index``) about ``split_bytes`` apart, 0 first."""
    points = [0]
    for pos in sorted(set(index_positions)):
        if 0 < pos < segment.size and pos - points[-1] >= split_bytes:
            points.append(pos)
    return points


def plan(segments: list[Segment], coverage: dict[tuple, Coverage],
         published: dict[tuple, list[tuple[int, int]]], index_positions: dict[str, list[int]],
         split_bytes: int = DEFAULT_SPLIT_BYTES) -> list[Task]:
    """Tasks for ``segments``: skip or resume what the ledger proves ingested, split big ones.

    A topic-partition is *pending* (its output is deduplicated) when an offset
    range this run may produce can meet one the warehouse already holds, or
    another copy in this run (two brokers' replicas, two snapshots).
    """
    by_tp: dict[tuple, list[Segment]] = {}
    for s in segments:
        by_tp.setdefault((s.topic, s.partition), []).append(s)
    tasks: list[Task] = []
    for tp, segs in sorted(by_tp.items()):
        bases = sorted({s.base_offset for s in segs})
        ranges, drafts = [], []
        for s in segs:
            later = [b for b in bases if b > s.base_offset]
            hi = later[0] - 1 if later else None
            cov = coverage.get(s.key)
            common = dict(segment=s)
            resume = resume_from(cov, s.size, s.etag)
            if resume is not None:
                lo = s.base_offset if cov.last_offset is None else cov.last_offset + 1
                start, same = resume
                drafts.append([dict(common, start=start, end=s.size,
                                    mode="resume", verify_position=cov.last_batch_position,
                                    verify_crc=cov.last_batch_crc, covered_end=cov.end,
                                    same_object=same)])
            else:
                lo = s.base_offset
                # a remote segment's batch positions come from its .indexes (by its uri)
                positions = index_positions.get(s.index_uri or s.uri, [])
                points = split_points(s, positions, split_bytes)
                ends = points[1:] + [s.size]
                # shares of the .index only where bisecting finds every entry
                ordered = positions if positions == sorted(positions) else []
                drafts.append([dict(common, start=a, end=b, split=a > 0,
                                    index_entries=_entries_into(ordered, a, b, s.size))
                               for a, b in zip(points, ends)])
            ranges.append((lo, hi))
        pending = _overlaps(ranges) or any(
            meets(r, (a, b)) for r in ranges for (a, b) in published.get(tp, ()))
        for group in drafts:
            for d in group:
                tasks.append(Task(task=0, pending=pending, **d))
    # biggest first, so the long tasks start early
    tasks.sort(key=lambda t: (-(t.end - t.start), t.segment.uri, t.start))
    return [replace(t, task=i) for i, t in enumerate(tasks)]


def _entries_into(ordered: list[int], start: int, end: int, size: int):
    """The ``.index`` entries a task of a split segment checks, as ``(first, stop)``
    entry numbers in ``ordered`` (the file's positions, in ascending order): those
    pointing into ``[start, end)`` and the one before them (the first is compared
    with it), so a task reads only its share of a big index. None (the task reads
    the whole file) for the segment's last task, which also takes the entries past
    the end and the file's own findings, and without ``ordered`` positions."""
    if end >= size or not ordered:
        return None
    return offset_index_share(ordered, (start, end))


def meets(a: tuple, b: tuple) -> bool:
    a_lo, a_hi = a
    b_lo, b_hi = b
    a_hi = float("inf") if a_hi is None else a_hi
    b_hi = float("inf") if b_hi is None else b_hi
    return a_lo <= b_hi and b_lo <= a_hi


def _overlaps(ranges: list[tuple]) -> bool:
    return any(meets(a, b) for i, a in enumerate(ranges) for b in ranges[i + 1:])


def first_ingested(ledger: pa.Table, run_id: str) -> str:
    """When run ``run_id`` first ingested (a rerun keeps it: later runs' ledgers may
    rely on what it ingested first), else now; ISO-8601."""
    mine = [r for r, a in zip(ledger.column("ingested_at").to_pylist(),
                              ledger.column("run_id").to_pylist()) if a == run_id and r]
    first = min(mine) if mine else dt.datetime.now(dt.timezone.utc)
    return first.isoformat()


def trusted_runs(ledger: pa.Table, run_id: str) -> list[str]:
    """The published runs whose ledger may let ``run_id`` skip bytes, in the order
    they first ingested.

    A new run trusts every published run. A rerun trusts only the runs that
    first ingested before it did, so it decodes what it decoded the first time:
    a later run may have skipped bytes because this run had ingested them.
    """
    first: dict[str, dt.datetime] = {}
    for r, at in zip(ledger.column("run_id").to_pylist(), ledger.column("ingested_at").to_pylist()):
        if at is not None and (r not in first or at < first[r]):
            first[r] = at
    ordered = sorted(first, key=lambda r: (first[r], r))
    if run_id not in first:
        return ordered
    return [r for r in ordered if first[r] < first[run_id]]


def read_index_positions(index_uris: list[str], s3, workers: int = 16,
                         pins: dict | None = None) -> dict[str, list[int]]:
    """:func:`index_positions` of each ``.index`` (against its listed ``pins[uri]``),
    read ``workers`` at a time: on S3 each is a round trip, and a snapshot can hold
    thousands of big segments (the S3 client pools 16 connections)."""
    pins = pins or {}

    def one(uri):
        return index_positions(uri, s3, pins.get(uri))
    if len(index_uris) < 2:
        return {u: one(u) for u in index_uris}
    with concurrent.futures.ThreadPoolExecutor(min(workers, len(index_uris)),
                                               thread_name_prefix="plan-index") as pool:
        return dict(zip(index_uris, pool.map(one, index_uris)))


def index_positions(index_uri: str, s3, pin: storage.Pin | None = None) -> list[int]:
    """Positions of a ``.index`` file's entries (batch starts, as the broker recorded
    them), read against ``pin`` (what the listing saw) where given."""
    store, key = storage.open_object(index_uri, s3)
    try:
        return offset_index_positions(store.read(key) if pin is None else store.read_pinned(key, pin))
    except (kafkalog.KafkaLogError, storage.StorageError):
        return []  # no trustworthy index (or not the one listed): the segment is one task
