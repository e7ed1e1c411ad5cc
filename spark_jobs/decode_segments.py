"""Decode Kafka segment snapshots into the warehouse's Iceberg tables (docs/tables.md).

    spark-submit spark_jobs/decode_segments.py --input URI --output W --run-id ID

The driver lists objects, reads the ledger (as ``main`` held it when the run
began) and, for big segments, the ``.index`` files, and plans tasks; executors
fetch segment bytes themselves (local files, or boto3 ranged GETs), decode them
with ``kafkalog`` into Arrow and write Parquet data files into the tables' data
folders. Partitions whose offsets may already be published (or appear twice in
this run) are written to the run's scratch space first and deduplicated in
Spark against only the files whose statistics can overlap them; two copies of
one offset with different content give a ``divergence`` finding. The driver
then commits every file to the run's branch (:mod:`spark_jobs.iceberg`), and
publishes it unless ``--no-publish`` (the DAG audits the branch first).

The planning and task functions are pure and importable; ``main(argv)`` wires
them to a SparkSession.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime as dt
import functools
import json
import os
import shutil
import struct
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, replace

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

import kafkalog
from kafkalog.indexes import offset_index_positions, offset_index_share
from spark_jobs import publish as publishing
from spark_jobs import iceberg, layout, schemas, storage, tables

DEFAULT_SPLIT_BYTES = 128 * 1024 * 1024
DEFAULT_SLACK = 1024 * 1024
DEFAULT_MAX_RAW = 64 * 1024 * 1024
#: findings whose byte range is kept verbatim in ``findings.raw``
RAW_KINDS = frozenset({"crc_mismatch", "corrupt_batch", "skipped_bytes", "truncated_tail",
                       "decompression_error", "unknown_codec", "limit_exceeded"})
#: ascending per partition: delta-encoded (a few bits a row, and no dictionary to build)
DELTA_COLUMNS = ("offset", "timestamp")
#: plain pages, no dictionary: one value per batch (or per file) repeated on every record
#: row, which LZ4 squeezes as well as a dictionary would (files +2%), at a third of the
#: cost; and the nested headers, whose dictionary saves nothing on unique values
PLAIN_COLUMNS = frozenset({
    "partition", "batch_position", "batch_base_offset", "batch_last_offset", "magic",
    "producer_id", "producer_epoch", "sequence", "partition_leader_epoch",
    "segment_base_offset", "is_transactional", "headers"})
#: strings the job hands to Parquet as dictionary arrays: the same few values on every
#: row (index types: the records' two come from kafkalog.stream(dictionary=True))
_LINEAGE_DICTIONARIES = {"segment": pa.int32(), "run_id": pa.int32(), "topic": pa.int32()}
DICTIONARY_COLUMNS = {"records": {**_LINEAGE_DICTIONARIES, "dt": pa.int32(),
                                  "timestamp_type": pa.int8(), "compression": pa.int8()}}


@functools.lru_cache(maxsize=None)
def write_schema(table: str) -> pa.Schema:
    """The Arrow schema a task writes ``table`` with: its file schema, with the
    :data:`DICTIONARY_COLUMNS` as dictionaries. A Parquet string column is the same
    either way, and files are written without the Arrow schema
    (``store_schema=False``), so readers see the file schema's plain strings."""
    dictionaries = DICTIONARY_COLUMNS.get(table, _LINEAGE_DICTIONARIES)
    return pa.schema([
        pa.field(f.name, pa.dictionary(dictionaries[f.name], f.type))
        if f.name in dictionaries else f for f in schemas.TABLES[table]])


def parquet_options(schema: pa.Schema) -> dict:
    """ParquetWriter options: LZ4 (raw) pages, delta-encoded offsets and timestamps,
    :data:`PLAIN_COLUMNS` plain, dictionaries elsewhere (Parquet falls back to plain
    pages by itself)."""
    delta = [c for c in DELTA_COLUMNS if c in schema.names]
    return dict(compression="lz4", store_schema=False,
                write_statistics=[c for c in schemas.STATISTICS if c in schema.names],
                use_dictionary=[n for n in schema.names
                                if n not in delta and n not in PLAIN_COLUMNS],
                column_encoding={c: "DELTA_BINARY_PACKED" for c in delta})


_OFFSET_SIZE_MAGIC = struct.Struct(">qiiB")  # offset, size, (leader epoch | crc), magic


# ---------------------------------------------------------------- planning


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


@dataclass(frozen=True)
class Task:
    """One executor task: the entries of ``uri`` that start in [start, end)."""

    task: int
    uri: str
    topic: str
    partition: int
    base_offset: int
    size: int
    etag: str | None
    mtime: str | None
    start: int
    end: int
    mode: str = "decode"  # decode | resume
    split: bool = False  # start is an .index position: find the entry boundary at or after it
    pending: bool = False  # output may overlap the warehouse or this run: deduplicate
    verify_position: int | None = None  # resume: the last ingested batch's position ...
    verify_crc: int | None = None  # ... and its stored CRC
    covered_end: int | None = None  # resume: the end of the prefix earlier runs ingested
    same_object: bool = False  # resume: size (and etag, where known) as when it was ingested
    index_uri: str | None = None  # the segment's .index: entries pointing into [start, end) checked
    index_entries: tuple[int, int] | None = None  # ... which are entries [first, stop) (else: read all)
    timeindex_uri: str | None = None  # the segment's .timeindex: entries naming its offsets checked
    txnindex_uri: str | None = None  # the segment's .txnindex: entries ending at its offsets checked
    index_pins: tuple = ()  # (uri, size, etag, mtime) of the index files, as listed

    pin = Segment.pin
    index_pin = Segment.index_pin

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "Task":
        return cls(**json.loads(text))


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


def discover(input_uri: str, config: storage.S3Config | None = None) -> tuple[list[Segment], list[str]]:
    """Every segment under a directory/prefix, or listed by a JSON manifest; and the
    URIs of the ``.log`` objects whose names do not say where they belong."""
    if input_uri.endswith(".json"):
        return _from_manifest(input_uri, config)
    store = storage.open_store(input_uri, config)
    objects = {o.key: o for o in store.list("")}
    segments, unparsable = [], []
    for key, obj in objects.items():
        parsed = layout.parse_segment_key(key)
        if parsed is None:
            if layout.is_log(key):
                unparsable.append(store.uri(key))
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
                             for info in found.values())))
    return sorted(segments, key=lambda s: (s.topic, s.partition, s.base_offset, s.uri)), unparsable


def _from_manifest(uri: str, config) -> tuple[list[Segment], list[str]]:
    store, key = storage.open_object(uri, config)
    segments, unparsable = [], []
    for entry in layout.read_manifest(store.read(key), uri):
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
                                beside[".timeindex"], beside[".txnindex"], tuple(pins)))
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


def ledger_ranges(ledger: pa.Table, exclude_run: str) -> dict[tuple, list[tuple[int, int]]]:
    """Per (topic, partition): the offset ranges published runs ingested."""
    out: dict[tuple, list] = {}
    for r in ledger.to_pylist():
        if r["run_id"] == exclude_run or r["first_offset"] is None:
            continue
        out.setdefault((r["topic"], r["partition"]), []).append((r["first_offset"], r["last_offset"]))
    return out


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
            common = dict(uri=s.uri, topic=s.topic, partition=s.partition,
                          base_offset=s.base_offset, size=s.size, etag=s.etag, mtime=s.mtime,
                          index_uri=s.index_uri, timeindex_uri=s.timeindex_uri,
                          txnindex_uri=s.txnindex_uri, index_pins=s.index_pins)
            if cov is not None and s.size >= cov.end:
                lo = s.base_offset if cov.last_offset is None else cov.last_offset + 1
                same = s.size == cov.object_size and (
                    s.etag is None or cov.etag is None or s.etag == cov.etag)
                drafts.append([dict(common, start=s.size if same else cov.end, end=s.size,
                                    mode="resume", verify_position=cov.last_batch_position,
                                    verify_crc=cov.last_batch_crc, covered_end=cov.end,
                                    same_object=same)])
            else:
                lo = s.base_offset
                positions = index_positions.get(s.index_uri or "", [])
                points = split_points(s, positions, split_bytes)
                ends = points[1:] + [s.size]
                # shares of the .index only where bisecting finds every entry
                ordered = positions if positions == sorted(positions) else []
                drafts.append([dict(common, start=a, end=b, split=a > 0,
                                    index_entries=_entries_into(ordered, a, b, s.size))
                               for a, b in zip(points, ends)])
            ranges.append((lo, hi))
        pending = _overlaps(ranges) or any(
            _meets(r, (a, b)) for r in ranges for (a, b) in published.get(tp, ()))
        for group in drafts:
            for d in group:
                tasks.append(Task(task=0, pending=pending, **d))
    # biggest first, so the long tasks start early
    tasks.sort(key=lambda t: (-(t.end - t.start), t.uri, t.start))
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


def _meets(a: tuple, b: tuple) -> bool:
    a_lo, a_hi = a
    b_lo, b_hi = b
    a_hi = float("inf") if a_hi is None else a_hi
    b_hi = float("inf") if b_hi is None else b_hi
    return a_lo <= b_hi and b_lo <= a_hi


def _overlaps(ranges: list[tuple]) -> bool:
    return any(_meets(a, b) for i, a in enumerate(ranges) for b in ranges[i + 1:])


# ---------------------------------------------------------------- executor side


@dataclass(frozen=True)
class Context:
    """What every executor task needs (picklable)."""

    run_id: str
    prefix: str  # file-name prefix of this attempt: <run_token>[~c<chunk>]~<attempt>
    roots: dict  # table -> where its data files go (the Iceberg table's data folder)
    scratch: dict  # table -> where output to be deduplicated goes (the run's scratch)
    s3: storage.S3Config | None
    max_raw: int = DEFAULT_MAX_RAW
    slack: int = DEFAULT_SLACK
    ingested_at: str = ""


def make_context(wh, run_id: str, attempt: str, *, chunk_id: str | None = None,
                 **kwargs) -> Context:
    """The executors' context for one attempt of a submission of run ``run_id`` into
    warehouse ``wh`` (an :class:`iceberg.Warehouse`)."""
    scratch = f"{wh.scratch_root(run_id)}/{attempt}"
    return Context(run_id=run_id, prefix=iceberg.run_files_prefix(run_id, chunk_id) + attempt,
                   roots={n: wh.data_root(n) for n in schemas.DECODE_TABLES},
                   scratch={n: f"{scratch}/{n}" for n in schemas.DECODE_TABLES},
                   s3=wh.s3, **kwargs)


def task_files(rows: list[dict], *, pending: bool = False) -> dict[str, list[str]]:
    """The data files of the tasks' ``rows``: those in the scratch, to be deduplicated
    (``pending``), or the others (a failed task's finding is never pending)."""
    files: dict[str, list[str]] = {n: [] for n in schemas.DECODE_TABLES}
    for r in rows:
        if (bool(r["pending"]) and r["action"] != "failed") == pending:
            for name, fs in (r.get("files") or {}).items():
                files[name].extend(fs)
    return files


class PartWriter:
    """Parquet files of one task, one per table and partition value, moved into the
    table's data folder (``roots``) at the end; :meth:`commit` returns their URIs.

    Parquet encoding runs on a thread of its own (Arrow releases the GIL), one
    batch at a time, while the task decodes the next: at most one batch waits.
    """

    def __init__(self, ctx: Context, part: str, roots: dict):
        self.ctx = ctx
        self.part = part
        self.roots = roots
        self.tmp = tempfile.mkdtemp(prefix="kafkalog-")
        self.writers: dict[tuple[str, str], tuple[pq.ParquetWriter, str]] = {}
        self._thread: concurrent.futures.ThreadPoolExecutor | None = None  # from the first write
        self._in_flight: concurrent.futures.Future | None = None

    def write(self, table: str, directory: str, batch: pa.RecordBatch | pa.Table) -> None:
        if batch.num_rows == 0:
            return
        name = f"{self.ctx.prefix}~{self.part}.parquet"
        key = (table, f"{directory}/{name}" if directory else name)
        entry = self.writers.get(key)
        target = write_schema(table)
        if entry is None:
            os.makedirs(self.tmp, exist_ok=True)  # again after an abort
            local = os.path.join(self.tmp, f"{len(self.writers)}.parquet")
            entry = (pq.ParquetWriter(local, target, **parquet_options(target)), local)
            self.writers[key] = entry
        if batch.schema != target:
            batch = batch.cast(target)
        self._wait()
        if self._thread is None:
            self._thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="parquet")
        write = entry[0].write_batch if isinstance(batch, pa.RecordBatch) else entry[0].write_table
        self._in_flight = self._thread.submit(write, batch)

    def _wait(self) -> None:
        """Wait for the batch in flight; its error, if any, is raised here."""
        in_flight, self._in_flight = self._in_flight, None
        if in_flight is not None:
            in_flight.result()

    def _stop_thread(self) -> None:
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.shutdown()

    def commit(self) -> dict[str, list[str]]:
        try:
            self._wait()
        finally:
            self._stop_thread()
        files: dict[str, list[str]] = {}
        for (table, key), (writer, local) in self.writers.items():
            writer.close()
            store = storage.open_store(self.roots[table], self.ctx.s3)
            store.put_file(key, local)
            files.setdefault(table, []).append(storage.join(self.roots[table], key))
        shutil.rmtree(self.tmp, ignore_errors=True)
        return files

    def abort(self) -> None:
        """Throw away what was written; writing can start again."""
        try:
            self._wait()
        except Exception:  # noqa: BLE001 - the files are thrown away anyway
            pass
        self._stop_thread()
        for writer, _ in self.writers.values():
            writer.close()
        shutil.rmtree(self.tmp, ignore_errors=True)
        self.writers.clear()


def _lineage(batch: pa.RecordBatch, table: str, task: Task, ctx: Context) -> pa.Table:
    """``batch`` (a kafkalog table's rows) with the warehouse table's lineage and
    partition columns (records: all but ``dt``, which :func:`_records_out` adds)."""
    n = batch.num_rows
    cols = {name: batch.column(name) for name in batch.schema.names}
    cols["partition"] = pa.repeat(pa.scalar(task.partition, pa.int32()), n)
    cols["segment"] = _constant(task.uri, n)
    cols["segment_base_offset"] = pa.repeat(pa.scalar(task.base_offset, pa.int64()), n)
    cols["run_id"] = _constant(ctx.run_id, n)
    cols["topic"] = _constant(task.topic, n)
    target = write_schema(table)
    names = [name for name in target.names if name in cols]
    out = pa.table([cols[name] for name in names], names=names)
    want = pa.schema([target.field(name) for name in names])
    return out if out.schema == want else out.cast(want)


def _constant(value, n: int) -> pa.DictionaryArray:
    """``n`` rows of one string (or null): a dictionary array, as Parquet stores it best."""
    zeros = pa.repeat(pa.scalar(0, pa.int32()), n)
    return pa.DictionaryArray.from_arrays(zeros, pa.array([value], pa.string()))


def _day_partitions(ts: pa.ChunkedArray | pa.Array) -> list[tuple[str, pa.Array | None]]:
    """``[(dt, mask)]`` for the rows of ``ts``; mask None means every row."""
    ms = ts.cast(pa.int64())
    # floor division (integer division truncates towards zero; timestamps can be negative)
    days = pc.divide(pc.if_else(pc.less(ms, 0), pc.subtract(ms, 86_399_999), ms), 86_400_000)
    unique = pc.unique(days).to_pylist()
    if len(unique) == 1:
        d = unique[0]
        return [("none" if d is None else _day(d), None)]
    out = []
    for d in unique:
        mask = pc.is_null(days) if d is None else pc.fill_null(pc.equal(days, d), False)
        out.append(("none" if d is None else _day(d), mask))
    return out


def _day(days: int) -> str:
    """``YYYY-MM-DD`` of an epoch day; a producer's timestamp outside years 1-9999 gets
    ``out_of_range`` (its record keeps the raw value in ``timestamp``)."""
    try:
        return (dt.date(1970, 1, 1) + dt.timedelta(days=days)).isoformat()
    except OverflowError:
        return "out_of_range"


def _records_out(writer: PartWriter, rows: pa.Table, topic: str) -> None:
    """Records rows (all columns but ``dt``) into one file per ``dt`` value."""
    for day, mask in _day_partitions(rows.column("timestamp")):
        chunk = rows if mask is None else rows.filter(mask)
        writer.write("records", partition_path(topic, day),
                     chunk.append_column(write_schema("records").field("dt"),
                                         _constant(day, chunk.num_rows)))


def partition_path(topic: str | None, day: str | None = None) -> str:
    """A data file's folder under its table's data root (Iceberg ignores folder names:
    the partition values are the files' own columns; these keep the layout readable)."""
    path = f"topic={topic if topic is not None else '__null__'}"
    return path if day is None else f"{path}/dt={day}"


def _object_source(task: Task, ctx: Context):
    """``fetch(lo, hi)`` -> (source, byte range) of the listed object only, and
    ``check()``, which raises :class:`storage.ChangedObject` where it changed since
    (a local file is read by the decoder itself: checked before and after it)."""
    store, key = storage.open_object(task.uri, ctx.s3)
    pin = task.pin
    if isinstance(store, storage.LocalStore):
        path = store.path(key)

        def fetch(lo, hi):
            store.verify(key, pin)
            return path, (lo, hi)
        return fetch, lambda: store.verify(key, pin)
    return lambda lo, hi: (kafkalog.Slice(store.read_pinned(key, pin, lo, hi), lo), None), \
        lambda: None


def _prefix_still_there(task: Task, ctx: Context) -> bool:
    """Whether the last batch an earlier run ingested is still at its position, same CRC."""
    store, key = storage.open_object(task.uri, ctx.s3)
    head = store.read_pinned(key, task.pin, task.verify_position,
                             min(task.size, task.verify_position + 21))
    if len(head) < 21:
        return False
    _offset, _size, epoch_or_crc, magic = _OFFSET_SIZE_MAGIC.unpack_from(head)
    if magic == 2:
        stored = struct.unpack_from(">I", head, 17)[0]
    elif magic in (0, 1):
        stored = epoch_or_crc & 0xFFFFFFFF
    else:
        return False
    return stored == task.verify_crc


def run_task(task: Task, ctx: Context) -> dict:
    """Decode one task into staged Parquet; return its ledger row (plus ``pending``)."""
    row = dict(run_id=ctx.run_id, segment=task.uri, topic=task.topic, partition=task.partition,
               segment_base_offset=task.base_offset, object_size=task.size, etag=task.etag,
               mtime=dt.datetime.fromisoformat(task.mtime) if task.mtime else None,
               byte_start=task.start, byte_end=task.end, end_position=task.start,
               first_offset=None, last_offset=None, last_batch_position=None,
               last_batch_crc=None, records=0, batches=0, findings=0, action="decoded",
               ingested_at=dt.datetime.fromisoformat(ctx.ingested_at), pending=task.pending)
    extra_findings = []
    start = task.start
    if task.mode == "resume":
        try:
            same = _prefix_still_there(task, ctx)
        except (storage.StorageError, OSError) as err:
            return _failed(row, task, ctx, str(err))
        if same and task.same_object:
            row.update(action="unchanged", byte_start=0, end_position=task.covered_end,
                       last_batch_position=task.verify_position, last_batch_crc=task.verify_crc)
            return row
        if same:
            row["action"] = "resumed"
        else:
            start = 0
            row.update(action="redecoded", byte_start=0, pending=True)
            extra_findings.append(dict(
                kind="segment_changed", position=task.verify_position,
                end=task.verify_position, message=(
                    f"the batch an earlier run ingested at position {task.verify_position} "
                    f"(crc {task.verify_crc:#010x}) is no longer there: the segment was "
                    "rewritten (compaction, truncation); decoded again from the start"),
                base_offset=None, last_offset=None, bytes=None, raw=None))
    part = f"t{task.task:05d}"
    writer = PartWriter(ctx, part, ctx.scratch if row["pending"] else ctx.roots)
    fetch, check = _object_source(task, ctx)
    slack = ctx.slack
    try:
        while True:
            lo = start
            hi = min(task.size, task.end + slack) if task.split or task.end < task.size \
                else task.size
            stats = _decode_window(task, ctx, writer, fetch, lo, hi, extra_findings)
            if stats is None:  # a finding reaches the window's end: read further and redo
                writer.abort()
                slack *= 4
                continue
            break
        check()  # the file the decoder read was the listed one all along
    except (storage.StorageError, kafkalog.SourceError, OSError) as err:
        writer.abort()
        return _failed(row, task, ctx, str(err))
    row.update(stats, files=writer.commit())
    return row


def _decode_window(task, ctx, writer, fetch, lo, hi, extra_findings):
    """Decode ``[lo, hi)`` of the task's segment (``hi`` past the task's end by the
    slack): its stats, or None where the window must grow.

    A task owns what lies from its first entry that verifies (``kafkalog.first_entry``
    at its start; byte 0, or where it resumes, when not split) up to the next task's
    first entry, which it finds in its slack the same way: the rows and findings of
    those bytes (so damage right at a split point is reported, and a batch there
    whose CRC fails is kept, by the task before it), the ``.index`` entries pointing
    into them, and the ``.timeindex`` entries naming (and ``.txnindex`` entries ending
    at) offsets from its first entry's offset up to the next task's. Adjoining tasks
    agree on that boundary, so every entry and finding of a segment is reported once
    however it is split.
    """
    source, byte_range = fetch(lo, hi)
    owned_start, owned_end = lo, task.end
    last = task.end >= task.size
    entries = True
    if task.split and lo > 0:
        first = kafkalog.first_entry(source, byte_range=byte_range)
        if first is None or first >= owned_end:
            entries = False  # every entry here starts in the previous task's range
        elif first != lo:
            lo = first
            if byte_range is None:  # a Slice: drop the bytes before the first entry
                source = kafkalog.Slice(memoryview(source.data)[first - source.base:], first)
            else:
                byte_range = (first, hi)
    cut = None  # where the next task's first entry starts: this task's rows end there
    if entries and not last:
        cut = _first_entry_at(source, byte_range, owned_end, hi)
        if cut is None and hi < task.size:
            return None  # the next task's first entry lies past this window: read further
    stats = _empty_stats(task)
    raw_source = source
    topic = task.topic
    last_batch = None
    last_offsets: dict[int, int] | None = {} if task.index_uri else None  # position -> last offset
    # last offset -> (max timestamp, position), for the .timeindex check
    by_last: dict[int, tuple] | None = {} if task.timeindex_uri else None
    # offset -> (producer id, control type, batch position), for the .txnindex check
    controls: dict[int, tuple] | None = {} if task.txnindex_uri else None
    for name, batch in kafkalog.stream(source, byte_range=byte_range, dictionary=True) \
            if entries else ():
        pos_col = {"records": "batch_position", "markers": "batch_position"}.get(name, "position")
        if cut is not None and batch.num_rows and pc.max(batch.column(pos_col)).as_py() >= cut:
            batch = batch.filter(pc.less(batch.column(pos_col), cut))
        if name == "records":
            good = batch.filter(batch.column("crc_valid")) \
                if not pc.all(batch.column("crc_valid")).as_py() else batch
            rows = _lineage(good, "records", task, ctx)  # crc_valid is not a records column
            _records_out(writer, rows, topic)
            stats["records"] += rows.num_rows
        elif name == "batches":
            if batch.num_rows == 0:
                continue
            ends = pc.add(batch.column("position"), batch.column("size").cast(pa.int64()))
            stats["batches"] += batch.num_rows
            stats["end_position"] = max(stats["end_position"], pc.max(ends).as_py())
            last_i = batch.num_rows - 1
            if last_offsets is not None:
                last_offsets.update(zip(batch.column("position").to_pylist(),
                                        batch.column("last_offset").to_pylist()))
            if by_last is not None:
                by_last.update(zip(batch.column("last_offset").to_pylist(), zip(
                    batch.column("max_timestamp").cast(pa.int64()).to_pylist(),
                    batch.column("position").to_pylist())))
            last_batch = (batch.column("position")[last_i].as_py(), batch.column("crc")[last_i].as_py())
            offs = batch.column("base_offset")
            lows = pc.min(offs).as_py()
            highs = pc.max(batch.column("last_offset")).as_py()
            stats["first_offset"] = lows if stats["first_offset"] is None \
                else min(stats["first_offset"], lows)
            stats["last_offset"] = highs if stats["last_offset"] is None \
                else max(stats["last_offset"], highs)
            writer.write("batches", partition_path(topic), _lineage(batch, "batches", task, ctx))
        elif name == "markers":
            if controls is not None:
                controls.update(zip(batch.column("offset").to_pylist(), zip(
                    batch.column("producer_id").to_pylist(),
                    batch.column("control_type").to_pylist(),
                    batch.column("batch_position").to_pylist())))
            writer.write("markers", partition_path(topic), _lineage(batch, "markers", task, ctx))
        else:  # findings
            if batch.num_rows == 0:
                continue
            ends = batch.column("end").to_pylist()
            starts = batch.column("position").to_pylist()
            if hi < task.size and any(e >= hi for e in ends):
                return None  # a finding of this task's runs to the window's end: read further
            raws = [_raw(raw_source, byte_range, p, e, ctx.max_raw) if k in RAW_KINDS else None
                    for k, p, e in zip(batch.column("kind").to_pylist(), starts, ends)]
            messages = [m if r is not None or k not in RAW_KINDS else
                        f"{m} (raw bytes not kept: {e - p} bytes exceed --max-raw-bytes)"
                        for m, r, k, p, e in zip(batch.column("message").to_pylist(), raws,
                                                 batch.column("kind").to_pylist(), starts, ends)]
            batch = pa.RecordBatch.from_arrays(
                [batch.column(n) if n != "message" else pa.array(messages, pa.string())
                 for n in batch.schema.names] + [pa.array(raws, pa.binary())],
                names=batch.schema.names + ["raw"])
            stats["findings"] += batch.num_rows
            writer.write("findings", partition_path(topic), _lineage(batch, "findings", task, ctx))
    if last_offsets is not None:
        # .index entries by the position they point at: [lo, cut) (the last task also
        # past the end; a task with no entry of its own: none, or the last one's)
        owned = (lo, None if last else (cut if cut is not None else task.size)) if entries \
            else ((task.size, None) if last else None)
        extra_findings = extra_findings + _index_findings(
            task, ctx, owned, last_offsets, share=cut is None or cut == owned_end)
    if by_last is not None or controls is not None:
        # .timeindex and .txnindex entries by the offset they name: from the offset of
        # this task's first entry (where it resumes: its first batch's; earlier ones
        # were checked by the run that decoded them) to the next task's
        if owned_start == 0:
            since = None
        elif task.split:
            since = _offset_at(raw_source, byte_range, lo) if entries else None
        else:
            since = stats["first_offset"]
        owned = None if owned_start > 0 and since is None else (
            since, None if cut is None else _offset_at(raw_source, byte_range, cut))
        if by_last is not None:
            extra_findings = extra_findings + _time_index_findings(task, ctx, owned, by_last)
        if controls is not None:
            extra_findings = extra_findings + _txn_index_findings(task, ctx, owned, controls)
    if extra_findings:
        fb = pa.RecordBatch.from_pylist(extra_findings, schema=pa.schema(
            [f for f in schemas.FINDINGS if f.name in extra_findings[0]]))
        stats["findings"] += fb.num_rows
        writer.write("findings", partition_path(topic), _lineage(fb, "findings", task, ctx))
    if last_batch is not None:
        stats["last_batch_position"], stats["last_batch_crc"] = last_batch
    return stats


def _first_entry_at(source, byte_range, position: int, hi: int) -> int | None:
    """``kafkalog.first_entry`` of the window's bytes from ``position`` on."""
    if byte_range is None:  # a Slice
        return kafkalog.first_entry(
            kafkalog.Slice(memoryview(source.data)[position - source.base:], position))
    return kafkalog.first_entry(source, byte_range=(position, hi))


def _offset_at(source, byte_range, position: int) -> int:
    """The offset field of the entry at ``position`` (a v2 batch's base offset)."""
    return int.from_bytes(_raw(source, byte_range, position, position + 8, 8), "big", signed=True)


def _index_findings(task: Task, ctx: Context, owned, last_offsets: dict,
                    share: bool) -> list[dict]:
    """The segment's ``.index`` entries that point into ``owned`` (``[start, end)``
    positions, end None: past the segment's end too; None: no entries), checked
    against the entries this task decoded (``kafkalog.check_offset_index``); the
    task that reads to the end of the segment also reports the file's own findings.
    ``share``: the planner's share of the file holds them all. Together a segment's
    tasks report what ``kafkalog index --verify`` does."""
    last = task.end >= task.size
    if owned is None and not last:
        return []

    def read(fetch):
        if task.index_entries is not None and share:  # the planner's share: only those bytes
            first, stop = task.index_entries
            return replace(kafkalog.read_offset_index(fetch(8 * first, 8 * stop),
                                                      base_offset=task.base_offset),
                           first=first)
        return kafkalog.read_offset_index_range(fetch(), owned or (task.size, None),
                                                base_offset=task.base_offset)

    return _checked_index(task, ctx, task.index_uri, read, lambda index: [] if owned is None
                          else kafkalog.check_offset_index(index, last_offsets, owned))


def _time_index_findings(task: Task, ctx: Context, owned, by_last: dict) -> list[dict]:
    """The segment's ``.timeindex`` entries whose offsets are in ``owned`` (``[lo, hi)``,
    None: unbounded; ``owned`` None: no entries), checked against this task's batches
    (``kafkalog.check_time_index``); the task that reads to the end of the segment also
    reports the file's own findings. The tasks of a segment own adjoining offset
    ranges (see ``_decode_window``), so together they report what ``kafkalog index
    --verify`` does, each finding once."""
    return _checked_index(
        task, ctx, task.timeindex_uri,
        lambda fetch: kafkalog.read_time_index(fetch(), base_offset=task.base_offset),
        lambda index: [] if owned is None else kafkalog.check_time_index(index, by_last, owned))


def _txn_index_findings(task: Task, ctx: Context, owned, controls: dict) -> list[dict]:
    """The segment's ``.txnindex`` entries whose last offsets are in ``owned`` (as
    for the ``.timeindex``), checked against this task's control records
    (``kafkalog.check_txn_index``): together a segment's tasks report what
    ``kafkalog index --verify`` does, each finding once."""
    return _checked_index(
        task, ctx, task.txnindex_uri,
        lambda fetch: kafkalog.read_txn_index(fetch(), base_offset=task.base_offset),
        lambda index: [] if owned is None else kafkalog.check_txn_index(index, controls, owned))


def _checked_index(task: Task, ctx: Context, uri: str, read, check) -> list[dict]:
    """Findings rows of an index file: ``check(read(fetch))``, and for the task
    that reads to the end of the segment the file's own findings, or that it could
    not be read. ``fetch(start=0, end=None)`` reads the file as it was listed: where it
    changed since, :class:`storage.ChangedObject` fails the task (the next run reads
    it again), as for the segment itself."""
    last = task.end >= task.size
    store, key = storage.open_object(uri, ctx.s3)
    pin = task.index_pin(uri)

    def fetch(start=0, end=None):
        if pin is None:  # not listed (a manifest naming a file that was missing then)
            return store.read(key, start, end)
        return store.read_pinned(key, pin, start, end)
    try:
        index = read(fetch)
    except storage.ChangedObject:
        raise
    except (storage.StorageError, OSError, kafkalog.KafkaLogError) as err:
        return [dict(kind="index_mismatch", position=0, end=0, base_offset=None,
                     last_offset=None, bytes=None, raw=None,
                     message=f"cannot read {uri} ({err}): its entries were not "
                     "checked")] if last else []
    found = (list(index.findings) if last else []) + check(index)
    return [dict(kind=f.kind, position=f.position, end=f.end,
                 message=f"{uri}: {f.message}", base_offset=f.base_offset,
                 last_offset=f.last_offset, bytes=f.bytes, raw=None) for f in found]


def _empty_stats(task: Task) -> dict:
    return dict(records=0, batches=0, findings=0, first_offset=None, last_offset=None,
                end_position=task.start, last_batch_position=None, last_batch_crc=None)


def _raw(source, byte_range, position: int, end: int, max_raw: int) -> bytes | None:
    if end - position > max_raw:
        return None
    if isinstance(source, kafkalog.Slice):
        lo = source.base
        return bytes(memoryview(source.data)[max(position - lo, 0):end - lo])
    with open(source, "rb") as f:
        f.seek(position)
        return f.read(end - position)


def _failed(row: dict, task: Task, ctx: Context, why: str) -> dict:
    """A segment that cannot be read: a ``fetch_error`` finding, and a ledger row that proves nothing."""
    writer = PartWriter(ctx, f"t{task.task:05d}", ctx.roots)
    fb = pa.RecordBatch.from_pylist([dict(
        kind="fetch_error", position=task.start, end=task.end,
        message=f"cannot read {task.uri} [{task.start}, {task.end}): {why}",
        base_offset=None, last_offset=None, bytes=task.end - task.start, raw=None)])
    writer.write("findings", partition_path(task.topic), _lineage(fb, "findings", task, ctx))
    row.update(action="failed", findings=1, files=writer.commit())
    return row


# ---------------------------------------------------------------- Spark side


def run_tasks(spark, tasks: list[Task], ctx: Context) -> list[dict]:
    """Run every task on the executors (one Spark task each); their ledger rows come back.

    The specs travel in the function's closure and each Spark partition of a
    ``range`` picks its own, so every task is exactly one Spark task (largest
    first) without shipping rows from the driver through the JVM.
    """
    if not tasks:
        return []
    specs = [t.to_json() for t in tasks]

    def decode(batches):
        for b in batches:
            out = [json.dumps(run_task(Task.from_json(specs[i]), ctx), default=_json_default)
                   for i in b.column(0).to_pylist()]
            yield pa.RecordBatch.from_arrays([pa.array(out, pa.string())], names=["row"])

    df = spark.range(0, len(specs), 1, numPartitions=len(specs))
    return [json.loads(r.row) for r in df.mapInArrow(decode, "row string").collect()]


def _json_default(value):
    if isinstance(value, dt.datetime):
        return value.isoformat()
    raise TypeError(f"cannot serialise {type(value).__name__}")


def ledger_table(rows: list[dict]) -> pa.Table:
    def ts(v):
        return dt.datetime.fromisoformat(v) if isinstance(v, str) else v
    clean = [{**{k: r.get(k) for k in schemas.LEDGER.names},
              "mtime": ts(r.get("mtime")), "ingested_at": ts(r.get("ingested_at"))} for r in rows]
    return pa.Table.from_pylist(clean, schema=schemas.LEDGER)


def dedupe(existing, staged, pending, keys: list[str], order: list[str], content: list[str] | None):
    """Rows of ``pending`` to keep, and (if ``content``) its copies that differ from the kept one.

    Per key the first row wins in this order: the warehouse (``existing``),
    this run's other staged rows (``staged``), then ``pending`` by ``order``.
    Returns ``(keep, diverging)``; ``diverging`` has the losing copies with
    ``_win_segment`` and ``_win_position`` of the kept row.
    """
    from pyspark.sql import Window, functions as F

    cols = pending.columns
    u = (existing.select(cols).withColumn("_src", F.lit(0))
         .unionByName(staged.select(cols).withColumn("_src", F.lit(1)))
         .unionByName(pending.select(cols).withColumn("_src", F.lit(2))))
    w = Window.partitionBy(*keys).orderBy("_src", *order)
    w_all = w.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    u = u.withColumn("_rank", F.row_number().over(w))
    keep = u.where("_src = 2 AND _rank = 1").select(cols)
    if content is None:
        return keep, None
    u = (u.withColumn("_h", F.xxhash64(*content))
         .withColumn("_win_h", F.first("_h").over(w_all))
         .withColumn("_win_segment", F.first("segment").over(w_all))
         .withColumn("_win_position", F.first(order[-1]).over(w_all)))
    diverging = u.where("_src = 2 AND _h != _win_h").select(*cols, "_win_segment", "_win_position")
    return keep, diverging


def divergence_findings(diverging, run_id: str):
    """One ``divergence`` finding per losing copy of an offset (findings table's columns)."""
    from pyspark.sql import functions as F

    msg = F.format_string(
        "offset %d of %s-%d has two different contents: this copy (%s, batch at %d) differs "
        "from the one kept (%s, batch at %d)",
        F.col("offset"), F.col("topic"), F.col("partition"), F.col("segment"),
        F.col("batch_position"), F.col("_win_segment"), F.col("_win_position"))
    return diverging.select(
        "topic", "partition", F.lit("divergence").alias("kind"),
        F.col("batch_position").alias("position"), F.col("batch_position").alias("end"),
        msg.alias("message"), F.col("offset").alias("base_offset"),
        F.col("offset").alias("last_offset"), F.lit(None).cast("long").alias("bytes"),
        F.lit(None).cast("binary").alias("raw"), "segment", "segment_base_offset",
        F.lit(run_id).alias("run_id"))


def write_frame(df, table: str, ctx: Context, tag: str) -> list[str]:
    """Write a DataFrame of ``table`` rows (every column but, for records, ``dt``) into
    the table's data folder from the executors; returns the files' URIs."""
    from pyspark import TaskContext

    target = write_schema(table)
    names = [n for n in target.names if n != "dt"]

    def write(batches):
        part = f"{tag}{TaskContext.get().partitionId():05d}"
        writer = PartWriter(ctx, part, ctx.roots)
        for b in batches:
            if b.num_rows == 0:
                continue
            t = pa.Table.from_batches([b])
            for topic in pc.unique(t.column("topic")).to_pylist():
                rows = t.filter(pc.equal(t.column("topic"), topic)).select(names) \
                    .cast(pa.schema([target.field(n) for n in names]))
                if table == "records":
                    _records_out(writer, rows, topic)
                else:
                    writer.write(table, partition_path(topic), rows)
        files = writer.commit().get(table, [])
        yield pa.RecordBatch.from_arrays([pa.array(files, pa.string())], names=["file"])

    cols = [c for c in df.columns if c != "dt"]
    return [r.file for r in df.select(*cols).repartition("topic", "partition")
            .mapInArrow(write, "file string").collect()]


def overlap_filter(ranges: dict[tuple[str, int], tuple[int, int]], table: str):
    """A pyiceberg row filter for the rows of ``table`` that can meet the offset
    ``ranges`` per (topic, partition): the catalog prunes the other files by their
    partition values and column statistics, so a dedupe reads no more of a topic's
    history than can overlap."""
    from pyiceberg.expressions import And, EqualTo, GreaterThanOrEqual, LessThanOrEqual, Or

    lo_col, hi_col = {"batches": ("last_offset", "base_offset")}.get(table, ("offset", "offset"))
    terms = [And(EqualTo("topic", t), EqualTo("partition", p), GreaterThanOrEqual(lo_col, lo),
                 LessThanOrEqual(hi_col, hi)) for (t, p), (lo, hi) in sorted(ranges.items())]
    out = terms[0]
    for term in terms[1:]:
        out = Or(out, term)
    return out


def resolve_pending(spark, ctx: Context, wh, bases: dict[str, int], rows: list[dict],
                    chunk_id: str | None) -> tuple[int, dict[str, list[str]]]:
    """Deduplicate the pending output (in the run's scratch) against what ``main`` held
    at ``bases`` and this run's other submissions; write the rows to keep into the
    tables' data folders. Returns ``(divergences, {table: files})``."""
    from pyspark.sql import functions as F

    pend = [r for r in rows if r["pending"] and r["action"] != "failed"]
    ranges: dict[tuple, tuple[int, int]] = {}
    for r in pend:
        if r["first_offset"] is None:
            continue
        key = (r["topic"], r["partition"])
        lo, hi = ranges.get(key, (r["first_offset"], r["last_offset"]))
        ranges[key] = (min(lo, r["first_offset"]), max(hi, r["last_offset"]))
    scratch = task_files(pend, pending=True)
    out: dict[str, list[str]] = {}
    branch = iceberg.branch_name(ctx.run_id)

    def frames(name):
        pending = tables.read_files(spark, scratch.get(name, []), name, ctx.s3)
        if not ranges:
            empty = pending.limit(0)
            return empty, empty, pending
        flt = overlap_filter(ranges, name)
        tp = F.broadcast(spark.createDataFrame(sorted(ranges), "topic string, partition int"))
        existing = tables.read_table(spark, wh, name, snapshot=bases[name], row_filter=flt)
        existing = existing.where(F.col("run_id") != ctx.run_id)
        # this run's other submissions (chunks) already on its branch
        others = [p for p in tables.table_paths(wh, name, ref=branch, row_filter=flt, run_id=ctx.run_id)
                  if chunk_id is not None and not iceberg.is_run_file(p, ctx.run_id, chunk_id)]
        staged = tables.read_files(spark, others, name, ctx.s3)
        return (existing.join(tp, ["topic", "partition"], "left_semi"),
                staged.join(tp, ["topic", "partition"], "left_semi"), pending)

    e, s, p = frames("records")
    keep, diverging = dedupe(e, s, p, ["topic", "partition", "offset"],
                             ["segment", "batch_position"],
                             ["timestamp", "key", "value", "headers"])
    diverging = diverging.cache()
    out["records"] = write_frame(keep, "records", ctx, "d")
    n_div = diverging.count()
    e, s, p = frames("batches")
    keep, _ = dedupe(e, s, p, ["topic", "partition", "base_offset", "last_offset", "crc"],
                     ["segment", "position"], None)
    out["batches"] = write_frame(keep, "batches", ctx, "d")
    e, s, p = frames("markers")
    keep, _ = dedupe(e, s, p, ["topic", "partition", "offset"], ["segment", "batch_position"], None)
    out["markers"] = write_frame(keep, "markers", ctx, "d")
    found = tables.read_files(spark, scratch.get("findings", []), "findings", ctx.s3)
    diverged = divergence_findings(diverging, ctx.run_id)
    out["findings"] = write_frame(found.select(*diverged.columns).unionByName(diverged),
                                  "findings", ctx, "d")
    diverging.unpersist()
    for files in scratch.values():
        _delete_files(files, ctx.s3)
    return n_div, out


def _delete_files(uris: list[str], s3) -> None:
    by_store: dict = {}
    for uri in uris:
        store, key = storage.open_object(uri, s3)
        by_store.setdefault(store.uri(), (store, []))[1].append(key)
    for store, keys in by_store.values():
        store.delete(keys)


# ---------------------------------------------------------------- main


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="decode_segments.py",
        description="Decode Kafka segment snapshots into Iceberg tables (records, batches, "
                    "markers, findings, ledger); see docs/tables.md.")
    p.add_argument("--input", required=True,
                   help="a local directory or s3://bucket/prefix holding <topic>-<partition>/"
                        "<base offset>.log at any depth, or a JSON manifest of segment URIs")
    p.add_argument("--output", required=True,
                   help="the warehouse root W (local path or s3://): scratch space, and the "
                        "embedded catalog's home where no catalog is configured")
    p.add_argument("--run-id", required=True,
                   help="this run's id; rerunning an id replaces exactly that run's output")
    p.add_argument("--chunk-id", help="this submission is one chunk of the run (see docs/tables.md)")
    p.add_argument("--no-publish", action="store_true",
                   help="stop after committing to the run's branch (the DAG audits, then runs "
                        "spark_jobs.publish)")
    iceberg.add_catalog_args(p)
    p.add_argument("--s3-endpoint", help="S3-compatible endpoint URL (default: AWS_ENDPOINT_URL)")
    p.add_argument("--reprocess", action="store_true",
                   help="decode every segment from byte 0 even where the ledger proves it "
                        "ingested; published offsets are deduplicated, changed ones give "
                        "divergence findings")
    p.add_argument("--split-bytes", type=int, default=DEFAULT_SPLIT_BYTES,
                   help="split segments with an .index into tasks of about this many bytes "
                        "(default %(default)s)")
    p.add_argument("--max-raw-bytes", type=int, default=DEFAULT_MAX_RAW,
                   help="keep at most this many raw bytes per finding (default %(default)s)")
    p.add_argument("--master", help="Spark master (default: spark-submit's, else local[*])")
    return p.parse_args(argv)


def main(argv=None, spark=None) -> dict:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    t0 = time.time()
    needs_s3 = any(storage.is_s3(u) for u in (args.input, args.output)) or args.s3_endpoint
    s3 = storage.S3Config.from_env(args.s3_endpoint) if needs_s3 else None
    wh = iceberg.Warehouse(args.output, args.catalog, args.namespace, s3)
    # what main held when the run began is what it deduplicates against (a whole run
    # starts its branch again; a chunk joins the branch its run's plan made)
    bases = wh.begin_run(args.run_id, reset=args.chunk_id is None)
    ledger = tables.read_arrow(wh, "ledger", snapshot=bases["ledger"])
    ctx = make_context(wh, args.run_id, uuid.uuid4().hex[:8], chunk_id=args.chunk_id,
                       max_raw=args.max_raw_bytes,
                       ingested_at=first_ingested(ledger, args.run_id))

    try:
        segments, unparsable = discover(args.input, s3)
    except layout.ManifestError as err:
        raise SystemExit(f"decode_segments: {err}") from err
    for uri in unparsable:
        print(f"decode_segments: {uri} is not {layout.GRAMMAR}: not decoded "
              "(an unparsable_name finding)", file=sys.stderr)
    coverage = {} if args.reprocess else coverage_from_ledger(ledger, trusted_runs(ledger, args.run_id))
    published = ledger_ranges(ledger, args.run_id)
    index_positions = read_index_positions(
        [s.index_uri for s in segments
         if s.index_uri and s.size > args.split_bytes and s.key not in coverage], s3)
    tasks = plan(segments, coverage, published, index_positions, args.split_bytes)

    own_session = spark is None
    if own_session:
        from spark_jobs.session import build_session

        spark = build_session("kafkalog-decode-segments", master=args.master)
    timings = {"plan": time.time() - t0}
    try:
        t1 = time.time()
        rows = run_tasks(spark, tasks, ctx)
        timings["decode"] = time.time() - t1
        files = task_files(rows)
        pending = {(r["topic"], r["partition"]) for r in rows if r["pending"]}
        t1 = time.time()
        divergences = 0
        if pending:
            divergences, deduped = resolve_pending(spark, ctx, wh, bases, rows, args.chunk_id)
            for name, fs in deduped.items():
                files[name].extend(fs)
        timings["deduplicate"] = time.time() - t1
    finally:
        if own_session and args.master is not None:
            spark.stop()
    if unparsable:
        files["findings"].extend(_write_driver_table(ctx, "findings", unparsable_findings(
            unparsable, args.run_id), "names"))
    ledger_out = ledger_table(rows)
    if ledger_out.num_rows:
        files["ledger"].extend(_write_driver_table(ctx, "ledger", ledger_out, "ledger"))
    t1 = time.time()
    counts = {"records": sum(r["records"] for r in rows), "batches": sum(r["batches"] for r in rows),
              "findings": sum(r["findings"] for r in rows) + divergences + len(unparsable)}
    for name in schemas.DECODE_TABLES:
        wh.commit_files(name, args.run_id, files[name], chunk_id=args.chunk_id,
                        summary={"kafkalog.segments": len(segments), "kafkalog.tasks": len(tasks)})
    timings["commit"] = time.time() - t1
    summary = {
        "run_id": args.run_id, "chunk_id": args.chunk_id, "segments": len(segments),
        "tasks": len(tasks), "bytes": sum(t.end - t.start for t in tasks),
        **counts, "divergences": divergences, "unparsable": len(unparsable),
        "actions": {a: sum(1 for r in rows if r["action"] == a)
                    for a in sorted({r["action"] for r in rows})},
        "pending_partitions": len(pending), "branch": iceberg.branch_name(args.run_id),
        "catalog": args.catalog, "published": False, "seconds": None,
    }
    if not args.no_publish:
        t1 = time.time()
        publishing.publish_run(wh, args.run_id)
        timings["publish"] = time.time() - t1
        summary["published"] = True
    summary["seconds"] = round(time.time() - t0, 3)
    summary["timings"] = {k: round(v, 3) for k, v in timings.items()}
    print(json.dumps(summary, sort_keys=True))
    return summary


def _write_driver_table(ctx: Context, name: str, rows: pa.Table, part: str) -> list[str]:
    """A small table the driver itself writes (the ledger, findings of the listing)."""
    writer = PartWriter(ctx, part, ctx.roots)
    target = write_schema(name)
    rows = rows.select(target.names)
    if "topic" not in schemas.PARTITIONS[name]:
        writer.write(name, "", rows.cast(target))
    else:
        topics = rows.column("topic")
        for topic in pc.unique(topics).to_pylist():
            mask = pc.is_null(topics) if topic is None else pc.fill_null(pc.equal(topics, topic), False)
            writer.write(name, partition_path(topic), rows.filter(mask).cast(target))
    return writer.commit().get(name, [])


def unparsable_findings(uris: list[str], run_id: str) -> pa.Table:
    """An ``unparsable_name`` finding per listed ``.log`` object the job cannot place."""
    rows = []
    for uri in uris:
        parent = uri.rstrip("/").rsplit("/", 2)[-2] if "/" in uri else ""
        topic, partition = layout.parse_partition_dir(parent) or (None, None)
        rows.append(dict(
            partition=partition, kind="unparsable_name", position=0,
            end=0, message=f"{uri}: the name is not {layout.GRAMMAR}, so the object was "
                           "not decoded",
            base_offset=None, last_offset=None, bytes=None, raw=None, segment=uri,
            segment_base_offset=None, run_id=run_id, topic=topic))
    return pa.Table.from_pylist(rows, schema=schemas.FINDINGS)


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


def read_index_positions(index_uris: list[str], s3, workers: int = 16) -> dict[str, list[int]]:
    """:func:`_index_positions` of each ``.index``, read ``workers`` at a time: on S3
    each is a round trip, and a snapshot can hold thousands of big segments (the
    S3 client pools 16 connections)."""
    if len(index_uris) < 2:
        return {u: _index_positions(u, s3) for u in index_uris}
    with concurrent.futures.ThreadPoolExecutor(min(workers, len(index_uris)),
                                               thread_name_prefix="plan-index") as pool:
        return dict(zip(index_uris, pool.map(lambda u: _index_positions(u, s3), index_uris)))


def _index_positions(index_uri: str, s3) -> list[int]:
    """Positions of a ``.index`` file's entries (batch starts, as the broker recorded them)."""
    store, key = storage.open_object(index_uri, s3)
    try:
        return offset_index_positions(store.read(key))
    except (kafkalog.KafkaLogError, storage.StorageError):
        return []  # no trustworthy index: the segment is one task


if __name__ == "__main__":
    # run the importable module's main: functions shipped to executors are then
    # pickled by reference to spark_jobs.decode_segments, not by value from __main__
    from spark_jobs import decode_segments

    decode_segments.main()
