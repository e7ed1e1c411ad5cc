"""Task: one executor task decodes its byte range of a segment.

It fetches the bytes itself (a local file, or boto3 ranged GETs pinned to the
listed ETag), decodes them with ``kafkalog`` into Arrow, writes the rows with their
lineage columns (:mod:`spark_jobs.decode.writing`), checks the segment's index files
against what it decoded, and returns its :class:`~spark_jobs.decode.results.TaskResult`
(ledger row, files). :func:`run_task` reads as its steps; a window's decode hands each of
``kafkalog.stream``'s tables to a handler of its own (:data:`_TABLE_HANDLERS`). A segment
that cannot be read, or changed since it was listed, gives a ``fetch_error`` finding and a
``failed`` ledger row, never ``decoded``.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import datetime as dt
import heapq
import time
from dataclasses import replace

import pyarrow as pa
import pyarrow.compute as pc

import kafkalog
from spark_jobs import storage
from spark_jobs.decode import tier, transactions, values
from spark_jobs.decode.planning import DEFAULT_SPLIT_BYTES, Task
from spark_jobs.decode.results import TaskResult
from spark_jobs.decode.writing import Context, lineage, records_out
from spark_jobs.findings import TASK_COLUMNS, Finding, task_batch
from spark_jobs.parquet import PartWriter, partition_path

#: findings whose byte range is kept verbatim in ``findings.raw``
RAW_KINDS = frozenset({"crc_mismatch", "corrupt_batch", "skipped_bytes", "truncated_tail",
                       "decompression_error", "unknown_codec", "limit_exceeded"})


#: a packed Spark task (:func:`pack`) reads its next tasks' objects ahead (``ctx.read_ahead``
#: tasks ahead, on as many threads) where a task reads a whole segment of at most this
#: size from S3; a bigger one is read when its task runs, so the read-ahead holds at most
#: ``ctx.read_ahead`` of these
READ_AHEAD_MAX_BYTES = 8 << 20


class _ReadAhead:
    """The reads of the next tasks of one Spark task, started on threads: a task's
    whole segment and its index files, each as :meth:`storage.S3Store.read_pinned`
    reads it when the task runs (same ranges, same pin checks, same errors, raised
    when the task takes the result). Reads nobody takes are cancelled or dropped."""

    def __init__(self, ctx: Context, tasks: list[Task]):
        self.ctx, self.tasks, self.started = ctx, tasks, 0
        self.reads: dict[tuple, tuple] = {}  # (uri, start, end) -> (pin, future)
        self.pool = concurrent.futures.ThreadPoolExecutor(ctx.read_ahead) \
            if ctx.read_ahead > 0 else None

    @staticmethod
    def eligible(task: Task) -> bool:
        seg = task.segment
        return (storage.is_s3(seg.uri) and not seg.remote and task.mode == "decode"
                and task.start == 0
                and task.end == seg.size and not task.split and task.index_entries is None
                and seg.size <= READ_AHEAD_MAX_BYTES)

    def upto(self, i: int) -> None:
        """Reads of tasks ``[.., i + ctx.read_ahead]`` started."""
        if self.pool is None:
            return
        while self.started < min(len(self.tasks), i + 1 + self.ctx.read_ahead):
            task = self.tasks[self.started]
            self.started += 1
            if not self.eligible(task):
                continue
            seg = task.segment
            wanted = [(seg.uri, seg.pin, seg.size)] + [
                (u, seg.index_pin(u), None)
                for u in (seg.index_uri, seg.timeindex_uri, seg.txnindex_uri)
                if u is not None and seg.index_pin(u) is not None]
            for uri, pin, end in wanted:
                store, key = storage.open_object(uri, self.ctx.s3)
                self.reads[(uri, 0, end)] = (pin, self.pool.submit(
                    store.read_pinned, key, pin, 0, end))

    def take(self, uri: str, pin, start: int, end: int | None):
        """The future of that read, where it was started with the same pin; else None."""
        got = self.reads.pop((uri, start, end), None)
        return got[1] if got is not None and got[0] == pin else None

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)
        self.reads.clear()


_AHEAD: _ReadAhead | None = None  # the running Spark task's (a Python worker runs one at a time)


@contextlib.contextmanager
def _reading_ahead(ctx: Context, tasks: list[Task]):
    global _AHEAD
    _AHEAD = ahead = _ReadAhead(ctx, tasks)
    try:
        yield ahead
    finally:
        _AHEAD = None
        ahead.close()


def _read_pinned(store, key: str, pin, start: int = 0, end: int | None = None) -> bytes:
    """``store.read_pinned``, or the read the running Spark task started ahead of it."""
    future = _AHEAD.take(store.uri(key), pin, start, end) if _AHEAD is not None else None
    return store.read_pinned(key, pin, start, end) if future is None else future.result()


def _object_source(task: Task, ctx: Context):
    """``fetch(lo, hi)`` -> (source, byte range) of the listed object only, and
    ``check()``, which raises :class:`storage.ChangedObject` where it changed since
    (a local file is read by the decoder itself: checked before and after it). A remote
    segment's bytes come from its tier's chunks (:func:`tier.read`)."""
    seg = task.segment
    if seg.remote:
        return lambda lo, hi: (kafkalog.Slice(tier.read(seg, ctx.tier, ctx.s3, lo, hi), lo),
                               None), lambda: None
    store, key = storage.open_object(seg.uri, ctx.s3)
    pin = seg.pin
    if isinstance(store, storage.LocalStore):
        path = store.path(key)

        def fetch(lo, hi):
            store.verify(key, pin)
            return path, (lo, hi)
        return fetch, lambda: store.verify(key, pin)
    return lambda lo, hi: (kafkalog.Slice(_read_pinned(store, key, pin, lo, hi), lo), None), \
        lambda: None


def _prefix_still_there(task: Task, ctx: Context) -> bool:
    """Whether the last batch an earlier run ingested is still at its position, same CRC."""
    seg = task.segment
    end = min(seg.size, task.verify_position + kafkalog.BATCH_HEAD_SIZE)
    if seg.remote:
        head = tier.read(seg, ctx.tier, ctx.s3, task.verify_position, end)
    else:
        store, key = storage.open_object(seg.uri, ctx.s3)
        head = store.read_pinned(key, seg.pin, task.verify_position, end)
    try:
        stored = kafkalog.read_batch_head(head).crc
    except kafkalog.CorruptDataError:  # no entry's header there (too short, no known magic)
        return False
    return stored == task.verify_crc


def run_task(task: Task, ctx: Context) -> TaskResult:
    """Decode one task into staged Parquet: its ledger row, files and whether they wait
    in the scratch (:class:`~spark_jobs.decode.results.TaskResult`)."""
    ledger, pending = _ledger_row(task, ctx), task.pending
    found: list[Finding] = []  # the task's own findings (beside the decoder's)
    start = task.start
    if task.mode == "resume":
        try:
            same = _prefix_still_there(task, ctx)
        except (storage.StorageError, OSError) as err:
            return _failed(ledger, pending, task, ctx, str(err))
        if same and task.same_object:
            ledger.update(action="unchanged", byte_start=0, end_position=task.covered_end,
                          last_batch_position=task.verify_position,
                          last_batch_crc=task.verify_crc)
            return TaskResult(ledger, pending=pending)
        if same:
            ledger["action"] = "resumed"
        else:
            start, pending = 0, True
            ledger.update(action="redecoded", byte_start=0)
            found.append(_segment_changed(task))
    writer = PartWriter(ctx, f"t{task.task:05d}", ctx.scratch if pending else ctx.roots)
    fetch, check = _object_source(task, ctx)
    try:
        stats = _decode(task, writer, fetch, start, found, ctx)
        check()  # the file the decoder read was the listed one all along
    except (storage.StorageError, kafkalog.SourceError, OSError) as err:
        writer.abort()
        return _failed(ledger, pending, task, ctx, str(err))
    ledger.update(stats)
    return TaskResult(ledger, writer.commit(), pending)


def _ledger_row(task: Task, ctx: Context) -> dict:
    """The task's ledger row before it runs: nothing decoded yet."""
    seg = task.segment
    return dict(run_id=ctx.run_id, segment=seg.uri, topic=seg.topic, partition=seg.partition,
                segment_base_offset=seg.base_offset, object_size=seg.size, etag=seg.etag,
                mtime=dt.datetime.fromisoformat(seg.mtime) if seg.mtime else None,
                byte_start=task.start, byte_end=task.end, end_position=task.start,
                first_offset=None, last_offset=None, last_batch_position=None,
                last_batch_crc=None, records=0, batches=0, findings=0, action="decoded",
                ingested_at=dt.datetime.fromisoformat(ctx.ingested_at), night=seg.night)


def _segment_changed(task: Task) -> Finding:
    return Finding(
        kind="segment_changed", position=task.verify_position, end=task.verify_position,
        message=(f"the batch an earlier run ingested at position {task.verify_position} "
                 f"(crc {task.verify_crc:#010x}) is no longer there: the segment was "
                 "rewritten (compaction, truncation); decoded again from the start"))


def _decode(task: Task, writer: PartWriter, fetch, start: int, found: list[Finding],
            ctx: Context) -> dict:
    """Decode the task from ``start`` in windows (:func:`_decode_window`), each next one
    reaching further where a finding or the next task's first entry lies past the last;
    its stats."""
    slack = ctx.slack
    while True:
        size = task.segment.size
        hi = min(size, task.end + slack) if task.split or not task.last else size
        stats = _decode_window(task, ctx, writer, fetch, start, hi, found)
        if stats is not None:
            break
        writer.abort()  # a finding reaches the window's end: read further and redo
        slack *= 4
    return stats


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
    owned_start = lo
    source, byte_range, lo, entries = _first_owned_entry(task, source, byte_range, lo, hi)
    cut = None  # where the next task's first entry starts: this task's rows end there
    if entries and not task.last:
        # a framed task ends where the entry after its last one starts
        cut = task.end if task.framed else _first_entry_at(source, byte_range, task.end, hi)
        if cut is None and hi < task.segment.size:
            return None  # the next task's first entry lies past this window: read further
    window = _Window(task, ctx, writer, source, byte_range, hi, cut)
    for name, batch in kafkalog.stream(source, byte_range=byte_range, dictionary=True) \
            if entries else ():
        if _TABLE_HANDLERS[name](window, window.before_cut(name, batch)):
            return None  # a finding of this task's runs to the window's end: read further
    extra_findings = extra_findings + _index_checks(window, lo, owned_start, entries)
    if extra_findings:
        window.write_findings(task_batch(extra_findings))
    return window.final_stats()


def _first_owned_entry(task: Task, source, byte_range, lo: int, hi: int):
    """``(source, byte_range, lo, entries)``: a split task's window from its first entry
    that verifies (``entries`` False: every entry here starts in the previous task's range)."""
    if not (task.split and lo > 0 and not task.framed):
        return source, byte_range, lo, True
    first = kafkalog.first_entry(source, byte_range=byte_range)
    if first is None or first >= task.end:
        return source, byte_range, lo, False
    if first != lo:
        if byte_range is None:  # a Slice: drop the bytes before the first entry
            source = kafkalog.Slice(memoryview(source.data)[first - source.base:], first)
        else:
            byte_range = (first, hi)
    return source, byte_range, first, True


class _Window:
    """One window's decode as it goes: the task's writer and stats, and what the index
    checks need of the batches and markers decoded (the per-table handlers' state)."""

    def __init__(self, task: Task, ctx: Context, writer: PartWriter, source, byte_range,
                 hi: int, cut: int | None):
        self.task, self.ctx, self.writer = task, ctx, writer
        self.source, self.byte_range, self.hi, self.cut = source, byte_range, hi, cut
        self.stats = _empty_stats(task)
        self.values = values.ValueDecoder(ctx.registry, ctx.max_raw, task.segment.topic)
        self.last_batch = None
        # position -> (base offset, last offset), for the .index check
        self.last_offsets: dict[int, tuple] | None = {} if task.segment.index_uri else None
        # last offset -> (base offset, max timestamp, position), for the .timeindex check
        self.by_last: dict[int, tuple] | None = {} if task.segment.timeindex_uri else None
        # offset -> (producer id, control type, batch position), for the .txnindex check
        self.controls: dict[int, tuple] | None = {} if task.segment.txnindex_uri else None
        # transactional rows waiting for their marker in this task
        self.txn = transactions.InTask()

    def before_cut(self, name: str, batch: pa.RecordBatch) -> pa.RecordBatch:
        """``batch``'s rows of entries before :attr:`cut` (the next task's)."""
        pos_col = {"records": "batch_position", "markers": "batch_position"}.get(name, "position")
        if self.cut is not None and batch.num_rows \
                and pc.max(batch.column(pos_col)).as_py() >= self.cut:
            return batch.filter(pc.less(batch.column(pos_col), self.cut))
        return batch

    def write(self, table: str, rows) -> None:
        self.writer.write(table, partition_path(self.task.segment.topic),
                          lineage(rows, table, self.task, self.ctx))

    def write_findings(self, batch: pa.RecordBatch) -> None:
        self.stats["findings"] += batch.num_rows
        self.write("findings", batch)

    def write_records(self, rows) -> None:
        """Records rows (with their txn_state) with their lineage, into one file per day."""
        out = lineage(rows, "records", self.task, self.ctx)  # crc_valid is not a records column
        records_out(self.writer, out, self.task.segment.topic)
        self.stats["records"] += out.num_rows

    def final_stats(self) -> dict:
        left = self.txn.leftovers()  # no marker in this task: open until the driver's step
        if left is not None:
            self.write_records(left)
        if self.last_batch is not None:
            self.stats["last_batch_position"], self.stats["last_batch_crc"] = self.last_batch
        return self.stats


def _records(w: _Window, batch: pa.RecordBatch) -> bool:
    """Records whose batch's CRC verifies, with their value columns, into one file per
    day; the values that did not decode as findings."""
    good = batch.filter(batch.column("crc_valid")) \
        if not pc.all(batch.column("crc_valid")).as_py() else batch
    good = values.with_columns(good, w.values.columns(good))
    w.write_records(w.txn.take(good))  # transactional rows wait for their marker
    found = w.values.take_findings()
    if found:
        w.write_findings(pa.RecordBatch.from_pylist(found, schema=TASK_COLUMNS))
    return False


def _batches(w: _Window, batch: pa.RecordBatch) -> bool:
    """Batch headers: the task's offsets, end and last batch, and the index checks' facts."""
    if batch.num_rows == 0:
        return False
    stats = w.stats
    ends = pc.add(batch.column("position"), batch.column("size").cast(pa.int64()))
    stats["batches"] += batch.num_rows
    stats["end_position"] = max(stats["end_position"], pc.max(ends).as_py())
    last_i = batch.num_rows - 1
    if w.last_offsets is not None or w.by_last is not None:
        positions = batch.column("position").to_pylist()
        bases = batch.column("base_offset").to_pylist()
        lasts = batch.column("last_offset").to_pylist()
        if w.last_offsets is not None:
            w.last_offsets.update(zip(positions, zip(bases, lasts)))
        if w.by_last is not None:
            w.by_last.update(zip(lasts, zip(
                bases, batch.column("max_timestamp").cast(pa.int64()).to_pylist(), positions)))
    w.last_batch = (batch.column("position")[last_i].as_py(), batch.column("crc")[last_i].as_py())
    lows = pc.min(batch.column("base_offset")).as_py()
    highs = pc.max(batch.column("last_offset")).as_py()
    stats["first_offset"] = lows if stats["first_offset"] is None \
        else min(stats["first_offset"], lows)
    stats["last_offset"] = highs if stats["last_offset"] is None \
        else max(stats["last_offset"], highs)
    w.write("batches", batch)
    return False


def _markers(w: _Window, batch: pa.RecordBatch) -> bool:
    """Control records, kept for the ``.txnindex`` check."""
    if w.controls is not None:
        w.controls.update(zip(batch.column("offset").to_pylist(), zip(
            batch.column("producer_id").to_pylist(),
            batch.column("control_type").to_pylist(),
            batch.column("batch_position").to_pylist())))
    w.write("markers", batch)
    resolved = w.txn.add_markers(batch)
    if resolved is not None:
        w.write_records(resolved)
    return False


def _decoder_findings(w: _Window, batch: pa.RecordBatch) -> bool:
    """The decoder's findings with their raw bytes (:data:`RAW_KINDS`, up to
    ``--max-raw-bytes``); True where one runs to the window's end (read further)."""
    if batch.num_rows == 0:
        return False
    ends = batch.column("end").to_pylist()
    starts = batch.column("position").to_pylist()
    if w.hi < w.task.segment.size and any(e >= w.hi for e in ends):
        return True
    kinds = batch.column("kind").to_pylist()
    raws = [_raw(w.source, w.byte_range, p, e, w.ctx.max_raw) if k in RAW_KINDS else None
            for k, p, e in zip(kinds, starts, ends)]
    messages = [m if r is not None or k not in RAW_KINDS else
                f"{m} (raw bytes not kept: {e - p} bytes exceed --max-raw-bytes)"
                for m, r, k, p, e in zip(batch.column("message").to_pylist(), raws,
                                         kinds, starts, ends)]
    w.write_findings(pa.RecordBatch.from_arrays(
        [batch.column(n) if n != "message" else pa.array(messages, pa.string())
         for n in batch.schema.names] + [pa.array(raws, pa.binary())],
        names=batch.schema.names + ["raw"]))
    return False


#: what a window does with each of ``kafkalog.stream``'s tables; True: read further
_TABLE_HANDLERS = {"records": _records, "batches": _batches, "markers": _markers,
                   "findings": _decoder_findings}


def _index_checks(w: _Window, lo: int, owned_start: int, entries: bool) -> list[Finding]:
    """The segment's index files checked against what the window decoded, each entry by
    the task that owns it (see :func:`_decode_window`)."""
    task, cut, last = w.task, w.cut, w.task.last
    out: list[Finding] = []
    if w.last_offsets is not None:
        # .index entries by the position they point at: [lo, cut) (the last task also
        # past the end; a task with no entry of its own: none, or the last one's)
        size = task.segment.size
        owned = (lo, None if last else (cut if cut is not None else size)) if entries \
            else ((size, None) if last else None)
        # the task that reads to the segment's end knows where its complete entries end
        out += _index_findings(task, w.ctx, owned, w.last_offsets,
                               share=cut is None or cut == task.end,
                               end=w.stats["end_position"] if last else None)
    if w.by_last is not None or w.controls is not None:
        # .timeindex and .txnindex entries by the offset they name: from the offset of
        # this task's first entry (where it resumes: its first batch's; earlier ones
        # were checked by the run that decoded them) to the next task's
        if owned_start == 0:
            since = None
        elif task.split:
            since = _offset_at(w.source, w.byte_range, lo) if entries else None
        else:
            since = w.stats["first_offset"]
        owned = None if owned_start > 0 and since is None else (
            since, None if cut is None else _offset_at(w.source, w.byte_range, cut))
        if w.by_last is not None:
            out += _time_index_findings(task, w.ctx, owned, w.by_last)
        if w.controls is not None:
            out += _txn_index_findings(task, w.ctx, owned, w.controls)
    return out


def _first_entry_at(source, byte_range, position: int, hi: int) -> int | None:
    """``kafkalog.first_entry`` of the window's bytes from ``position`` on."""
    if byte_range is None:  # a Slice
        return kafkalog.first_entry(
            kafkalog.Slice(memoryview(source.data)[position - source.base:], position))
    return kafkalog.first_entry(source, byte_range=(position, hi))


def _offset_at(source, byte_range, position: int) -> int:
    """The offset field of the entry at ``position`` (a v2 batch's base offset)."""
    size = kafkalog.ENTRY_OFFSET_SIZE
    return kafkalog.entry_offset(_raw(source, byte_range, position, position + size, size))


def _index_findings(task: Task, ctx: Context, owned, last_offsets: dict,
                    share: bool, end: int | None) -> list[Finding]:
    """The segment's ``.index`` entries that point into ``owned`` (``[start, end)``
    positions, end None: past the segment's end too; None: no entries), checked
    against the entries this task decoded (``kafkalog.check_offset_index``; ``end``:
    where the segment's complete entries end, for the task that reads to it); the
    task that reads to the end of the segment also reports the file's own findings.
    ``share``: the planner's share of the file holds them all. Together a segment's
    tasks report what ``kafkalog index --verify`` does."""
    last = task.last
    if owned is None and not last:
        return []

    def read(fetch):
        if task.index_entries is not None and share:  # the planner's share: only those bytes
            first, stop = task.index_entries
            return replace(kafkalog.read_offset_index(fetch(8 * first, 8 * stop),
                                                      base_offset=task.segment.base_offset),
                           first=first)
        return kafkalog.read_offset_index_range(fetch(), owned or (task.segment.size, None),
                                                base_offset=task.segment.base_offset)

    return _checked_index(task, ctx, task.segment.index_uri, read,
                          lambda index: [] if owned is None
                          else kafkalog.check_offset_index(index, last_offsets, owned, end))


def _time_index_findings(task: Task, ctx: Context, owned, by_last: dict) -> list[Finding]:
    """The segment's ``.timeindex`` entries whose offsets are in ``owned`` (``[lo, hi)``,
    None: unbounded; ``owned`` None: no entries), checked against this task's batches
    (``kafkalog.check_time_index``); the task that reads to the end of the segment also
    reports the file's own findings. The tasks of a segment own adjoining offset
    ranges (see ``_decode_window``), so together they report what ``kafkalog index
    --verify`` does, each finding once."""
    return _checked_index(
        task, ctx, task.segment.timeindex_uri,
        lambda fetch: kafkalog.read_time_index(fetch(), base_offset=task.segment.base_offset),
        lambda index: [] if owned is None else kafkalog.check_time_index(index, by_last, owned))


def _txn_index_findings(task: Task, ctx: Context, owned, controls: dict) -> list[Finding]:
    """The segment's ``.txnindex`` entries whose last offsets are in ``owned`` (as
    for the ``.timeindex``), checked against this task's control records
    (``kafkalog.check_txn_index``): together a segment's tasks report what
    ``kafkalog index --verify`` does, each finding once."""
    return _checked_index(
        task, ctx, task.segment.txnindex_uri,
        lambda fetch: kafkalog.read_txn_index(fetch(), base_offset=task.segment.base_offset),
        lambda index: [] if owned is None else kafkalog.check_txn_index(index, controls, owned))


def _checked_index(task: Task, ctx: Context, uri: str, read, check) -> list[Finding]:
    """Findings rows of an index file: ``check(read(fetch))``, and for the task
    that reads to the end of the segment the file's own findings, or that it could
    not be read. ``fetch(start=0, end=None)`` reads the file as it was listed: where it
    changed since, :class:`storage.ChangedObject` fails the task (the next run reads
    it again), as for the segment itself."""
    last = task.last
    store, key = storage.open_object(uri, ctx.s3)
    pin = task.segment.index_pin(uri)

    def fetch(start=0, end=None):
        if pin is None:  # not listed (a manifest naming a file that was missing then)
            return store.read(key, start, end)
        return _read_pinned(store, key, pin, start, end)
    try:
        index = read(fetch)
    except storage.ChangedObject:
        raise
    except (storage.StorageError, OSError, kafkalog.KafkaLogError) as err:
        return [Finding(kind="index_mismatch", position=0, end=0,
                        message=f"cannot read {uri} ({err}): its entries were not "
                        "checked")] if last else []
    found = (list(index.findings) if last else []) + check(index)
    return [Finding(kind=f.kind, position=f.position, end=f.end,
                    message=f"{uri}: {f.message}", base_offset=f.base_offset,
                    last_offset=f.last_offset, bytes=f.bytes) for f in found]


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


def _failed(ledger: dict, pending: bool, task: Task, ctx: Context, why: str) -> TaskResult:
    """A segment that cannot be read: a ``fetch_error`` finding, and a ledger row that proves nothing."""
    writer = PartWriter(ctx, f"t{task.task:05d}", ctx.roots)
    fb = task_batch([Finding(
        kind="fetch_error", position=task.start, end=task.end,
        message=f"cannot read {task.segment.uri} [{task.start}, {task.end}): {why}",
        bytes=task.end - task.start)])
    writer.write("findings", partition_path(task.segment.topic),
                 lineage(fb, "findings", task, ctx))
    ledger.update(action="failed", findings=1)
    return TaskResult(ledger, writer.commit(), pending)


#: a task's fixed cost (its GETs, files, writer), counted as this many bytes of decoding
#: when small tasks are packed into one Spark task (:func:`pack`)
TASK_COST_BYTES = 1 << 20


def pack(tasks: list[Task], slots: int, split_bytes: int) -> list[list[int]]:
    """``tasks`` (their indices) in groups, one Spark task each, largest group first.

    Starting a Spark task costs ~50-100 ms on this machine (more under load): a
    snapshot of thousands of small segments spent most of its time there. Tasks are
    spread over ``min(len(tasks), max(4 * slots, total / split_bytes))`` groups,
    each next task (largest first) into the lightest group, by its bytes plus
    :data:`TASK_COST_BYTES`; so tasks of ``split_bytes`` each stay one per group,
    and small ones share, in about four rounds of the executors' ``slots``.
    """
    weights = [t.end - t.start + TASK_COST_BYTES for t in tasks]
    n = min(len(tasks), max(4 * slots, -(-sum(weights) // max(split_bytes, 1))))
    heap = [(0, g) for g in range(n)]
    groups: list[list[int]] = [[] for _ in range(n)]
    for i in sorted(range(len(tasks)), key=lambda i: -weights[i]):
        load, g = heapq.heappop(heap)
        groups[g].append(i)
        heapq.heappush(heap, (load + weights[i], g))
    return sorted(groups, key=lambda g: -sum(weights[i] for i in g))


def run_tasks(spark, tasks: list[Task], ctx: Context,
              split_bytes: int = DEFAULT_SPLIT_BYTES) -> list[TaskResult]:
    """Run every task on the executors; their results come back.

    Tasks are packed into Spark tasks (:func:`pack`: one each where they are about
    ``split_bytes`` or more, small ones together). The groups travel in the
    function's closure; each partition of an RDD of group numbers runs its own
    group, and the results come back pickled. An RDD, not a DataFrame's ``mapInArrow``:
    a Spark task costs about half as much here (~0.06 s against ~0.12 s between two
    tasks on one core, ~0.1 s against ~0.2 s to start the job; docs/bench_job.md), and
    the results are one per task.
    """
    if not tasks:
        return []
    specs = [t.to_json() for t in tasks]
    groups = pack(tasks, spark.sparkContext.defaultParallelism, split_bytes)

    def decode(numbers):
        for g in numbers:
            yield from run_group([Task.from_json(specs[i]) for i in groups[g]], ctx)

    return spark.sparkContext.parallelize(range(len(groups)), len(groups)) \
        .mapPartitions(decode).collect()


def run_group(tasks: list[Task], ctx: Context):
    """The results of ``tasks`` (one Spark task's group), run one after another,
    each next task's small S3 objects read ahead while the one before decodes
    (:class:`_ReadAhead`)."""
    with _reading_ahead(ctx, tasks) as ahead:
        for i, task in enumerate(tasks):
            ahead.upto(i)
            yield _timed_task(task, ctx)


def _timed_task(task: Task, ctx: Context) -> TaskResult:
    """:func:`run_task` with the task's wall and CPU time."""
    t0, c0 = time.perf_counter(), time.process_time()
    result = run_task(task, ctx)
    result.seconds, result.cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
    return result
