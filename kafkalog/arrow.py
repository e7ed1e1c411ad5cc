"""Arrow output: records, batches, markers and findings as ``pyarrow`` tables.

One pass over a source fills up to four tables; :func:`stream` yields them as
bounded ``pyarrow.RecordBatch``\\ es so that a segment of any size decodes in
bounded memory. Control records are not data: they go to ``markers``, never
to ``records``. Records keep their batch's lineage, including ``crc_valid``,
so that callers decide what to do with records of damaged batches.

Timestamps are ``timestamp[ms, UTC]``; null for magic 0 and for Kafka's
NO_TIMESTAMP (-1).
"""

from __future__ import annotations

import functools
import itertools
from typing import Iterable, Iterator, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc
from crc32c import crc32c

from . import _accel, codecs
from . import default_records as v2
from .log_reader import FastRun, scan
from .model import CREATE_TIME, LOG_APPEND_TIME, Batch, Finding, batch_status, increment_sequence

TIMESTAMP = pa.timestamp("ms", tz="UTC")
HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))

RECORDS_SCHEMA = pa.schema([
    ("offset", pa.int64()),
    ("timestamp", TIMESTAMP),
    ("timestamp_type", pa.string()),
    ("key", pa.binary()),
    ("value", pa.binary()),
    ("headers", HEADERS),
    ("batch_position", pa.int64()),
    ("batch_base_offset", pa.int64()),
    ("batch_last_offset", pa.int64()),
    ("magic", pa.int8()),
    ("compression", pa.string()),
    ("producer_id", pa.int64()),
    ("producer_epoch", pa.int16()),
    ("sequence", pa.int32()),
    ("partition_leader_epoch", pa.int32()),
    ("is_transactional", pa.bool_()),
    ("crc_valid", pa.bool_()),
])

#: ``dictionary=True`` (see :func:`stream`): the records' per-batch strings as
#: ``dictionary<int8, string>`` over these fixed dictionaries, so that neither the
#: decoder nor a Parquet writer handles one string per record
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
DICTIONARY_STRING = pa.dictionary(pa.int8(), pa.string())
RECORDS_DICTIONARY_SCHEMA = pa.schema([
    pa.field(f.name, DICTIONARY_STRING) if f.name in ("timestamp_type", "compression") else f
    for f in RECORDS_SCHEMA
])
_DICTIONARY_VALUES = {"timestamp_type": TIMESTAMP_TYPES, "compression": CODECS}
_CODES = {name: {v: i for i, v in enumerate(values)}
          for name, values in (("timestamp_type", TIMESTAMP_TYPES), ("compression", CODECS))}


def dictionary_column(name: str, codes: pa.Array) -> pa.DictionaryArray:
    """int8 ``codes`` (positions in :data:`TIMESTAMP_TYPES` or :data:`CODECS`;
    null for none) as the dictionary column ``name`` of RECORDS_DICTIONARY_SCHEMA."""
    return pa.DictionaryArray.from_arrays(codes, _dictionary(name))


@functools.cache
def _dictionary(name: str) -> pa.Array:
    # made at first use: pyarrow imports pandas at its first pa.array call
    # (~0.3 s), which `import kafkalog` (and `kafkalog dump`) need not pay
    return pa.array(_DICTIONARY_VALUES[name], pa.string())


BATCHES_SCHEMA = pa.schema([
    ("position", pa.int64()),
    ("size", pa.int32()),
    ("magic", pa.int8()),
    ("base_offset", pa.int64()),
    ("last_offset", pa.int64()),
    ("record_count", pa.int32()),
    ("crc", pa.uint32()),
    ("computed_crc", pa.uint32()),
    ("crc_valid", pa.bool_()),
    ("status", pa.string()),
    ("attributes", pa.int16()),
    ("compression", pa.string()),
    ("timestamp_type", pa.string()),
    ("first_timestamp", TIMESTAMP),
    ("max_timestamp", TIMESTAMP),
    ("delete_horizon_ms", pa.int64()),
    ("partition_leader_epoch", pa.int32()),
    ("producer_id", pa.int64()),
    ("producer_epoch", pa.int16()),
    ("base_sequence", pa.int32()),
    ("last_sequence", pa.int32()),
    ("last_offset_delta", pa.int32()),
    ("is_transactional", pa.bool_()),
    ("is_control", pa.bool_()),
    ("has_delete_horizon", pa.bool_()),
])

def batch_row(position, size, magic, base_offset, last_offset, record_count, crc, computed_crc,
              attributes, compression, timestamp_type, first_timestamp, max_timestamp,
              partition_leader_epoch, producer_id, producer_epoch, base_sequence,
              last_offset_delta, is_transactional, is_control, has_delete_horizon,
              decoded=True) -> tuple:
    """One row of the batches table, in :data:`BATCHES_SCHEMA`'s order: the only place it
    is built, from a :class:`Batch` (:func:`_add_batch`) and from the header fields of the
    regular v2 batches both fast paths read without one (``_RecordColumns.run``, the compiled
    ``scan_run``). Derives ``crc_valid``, ``status``, ``delete_horizon_ms`` and
    ``last_sequence`` as :class:`Batch`'s properties do."""
    crc_valid = None if computed_crc is None else computed_crc == crc
    last_sequence = None if base_sequence is None or last_offset_delta is None \
        else increment_sequence(base_sequence, last_offset_delta)
    return (position, size, magic, base_offset, last_offset, record_count, crc, computed_crc,
            crc_valid, batch_status(decoded, crc_valid), attributes, compression,
            timestamp_type, first_timestamp, max_timestamp,
            first_timestamp if has_delete_horizon else None, partition_leader_epoch,
            producer_id, producer_epoch, base_sequence, last_sequence, last_offset_delta,
            is_transactional, is_control, has_delete_horizon)


MARKERS_SCHEMA = pa.schema([
    ("offset", pa.int64()),
    ("timestamp", TIMESTAMP),
    ("control_type", pa.string()),
    ("control_type_id", pa.int16()),
    ("control_version", pa.int16()),
    ("coordinator_epoch", pa.int32()),
    ("producer_id", pa.int64()),
    ("producer_epoch", pa.int16()),
    ("is_transactional", pa.bool_()),
    ("partition_leader_epoch", pa.int32()),
    ("batch_position", pa.int64()),
    ("key", pa.binary()),
    ("value", pa.binary()),
    ("crc_valid", pa.bool_()),
])

FINDINGS_SCHEMA = pa.schema([
    ("kind", pa.string()),
    ("position", pa.int64()),
    ("end", pa.int64()),
    ("message", pa.string()),
    ("base_offset", pa.int64()),
    ("last_offset", pa.int64()),
    ("bytes", pa.int64()),
])

SCHEMAS = {
    "records": RECORDS_SCHEMA,
    "batches": BATCHES_SCHEMA,
    "markers": MARKERS_SCHEMA,
    "findings": FINDINGS_SCHEMA,
}

DEFAULT_MAX_ROWS = 64 * 1024
DEFAULT_MAX_BYTES = 32 * 1024 * 1024


class _Columns:
    """Column lists for one table, flushed to a RecordBatch when full.

    A ``HEADERS`` column holds each row's header count; the headers themselves
    are flattened into ``header_keys``/``header_values`` as rows are added, so
    no per-record tuple outlives its batch (the cyclic GC would otherwise walk
    every one of them again and again).
    """

    __slots__ = ("schema", "cols", "rows", "nbytes", "header_keys", "header_values",
                 "run_ends", "runs", "per_run")
    no_room = False  # as the compiled RecordColumns': lists always have room

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        # records: the _LINEAGE columns have one value per batch (a tuple of them
        # per batch in ``runs``), each run ending at run_ends
        self.per_run = frozenset(_LINEAGE) if schema.names == RECORDS_SCHEMA.names \
            else frozenset()
        self._reset()

    def _reset(self) -> None:
        self.cols: list[list] = [[] for _ in self.schema]
        self.header_keys: list[str] = []
        self.header_values: list[bytes | None] = []
        self.run_ends: list[int] = []
        self.runs: list[tuple] = []
        self.rows = 0
        self.nbytes = 0

    def flush(self) -> pa.RecordBatch:
        arrays = []
        run_ends = pa.array(self.run_ends, pa.int32()) if self.per_run else None
        cols = self.cols
        if self.runs:
            cols = list(cols)
            for i, values in zip(_LINEAGE, zip(*self.runs)):
                cols[i] = values
        for i, (field, values) in enumerate(zip(self.schema, cols)):
            if i in self.per_run:
                if not values:
                    arrays.append(pa.array([], field.type))
                    continue
                if pa.types.is_dictionary(field.type):
                    code = _CODES[field.name]
                    runs = pa.RunEndEncodedArray.from_arrays(
                        run_ends, pa.array([code.get(v) for v in values], pa.int8()))
                    arrays.append(dictionary_column(field.name, pc.run_end_decode(runs)))
                    continue
                runs = pa.RunEndEncodedArray.from_arrays(run_ends, pa.array(values, field.type))
                arrays.append(pc.run_end_decode(runs))
            elif field.type == TIMESTAMP:
                ints = pa.array(values, type=pa.int64())
                ints = pc.if_else(pc.equal(ints, -1), pa.scalar(None, pa.int64()), ints)
                arrays.append(ints.cast(TIMESTAMP))
            elif field.type == HEADERS:
                arrays.append(self._headers(values))
            elif isinstance(values, pa.Array):  # built by a subclass
                arrays.append(values)
            else:
                arrays.append(pa.array(values, type=field.type))
        self._reset()
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def _headers(self, counts: list[int]) -> pa.Array:
        offsets = pa.array(itertools.accumulate(counts, initial=0), type=pa.int32())
        items = pa.StructArray.from_arrays(
            [pa.array(self.header_keys, pa.string()), pa.array(self.header_values, pa.binary())],
            fields=list(HEADERS.value_type),
        )
        return pa.ListArray.from_arrays(offsets, items, type=HEADERS)


#: base offsets whose batches' last offsets (base + an int32 delta) stay in int64
_OFFSETS_LO, _OFFSETS_HI = v2.INT64_MIN + (1 << 31), v2.INT64_MAX - (1 << 31)

#: Records-table columns that are the same for every record of a batch: kept
#: once per batch and expanded at flush (run-end decoding, in Arrow's C++).
_LINEAGE = (2, 6, 7, 8, 9, 10, 11, 12, 14, 15, 16)


class RecordSink:
    """Where ``default_records.read_record_columns`` puts one chunk's records:
    one list per column, and keys and values copied into one Arrow buffer each
    (``*_size`` bytes used; ``*_ends``: the size after each row; ``*_nulls``:
    the rows whose field is null). ``keys`` and ``values`` are writable
    memoryviews of those buffers.

    The buffers are allocated at their expected size (Arrow's allocator: in a
    fresh buffer a copy runs at about twice the speed of a growing
    ``bytearray``'s) and become the columns at flush, without a copy.
    """

    __slots__ = ("offsets", "timestamps", "key_ends", "key_nulls", "value_ends", "value_nulls",
                 "header_counts", "header_keys", "header_values", "keys", "keys_size",
                 "values", "values_size", "_buffers")

    def __init__(self, keys_capacity: int, values_capacity: int) -> None:
        self.offsets: list[int] = []
        self.timestamps: list[int] = []
        self.key_ends: list[int] = []
        self.key_nulls: list[int] = []
        self.value_ends: list[int] = []
        self.value_nulls: list[int] = []
        self.header_counts: list[int] = []
        self.header_keys: list[str] = []
        self.header_values: list[bytes | None] = []
        self._buffers: dict[str, pa.Buffer] = {}
        self.keys = self._allocate("keys", keys_capacity)
        self.values = self._allocate("values", values_capacity)
        self.keys_size = self.values_size = 0

    def _allocate(self, name: str, capacity: int) -> memoryview:
        buffer = self._buffers[name] = pa.allocate_buffer(max(capacity, 1))
        return memoryview(buffer).cast("B")

    def grow(self, name: str, size: int, need: int) -> memoryview:
        """A bigger buffer for ``name`` (``keys`` or ``values``), holding its first ``size`` bytes."""
        old = getattr(self, name)
        new = self._allocate(name, max(need, 2 * len(old)))
        new[:size] = old[:size]
        setattr(self, name, new)
        return new

    def append(self, name: str, items) -> None:
        """Append ``items`` (bytes or None each) to ``name``: rows from :class:`Record` objects."""
        data, size = getattr(self, name), getattr(self, name + "_size")
        ends, nulls = getattr(self, name[:-1] + "_ends"), getattr(self, name[:-1] + "_nulls")
        for row, item in enumerate(items, len(ends)):
            if item is None:
                nulls.append(row)
            elif item:
                end = size + len(item)
                if end > len(data):
                    data = self.grow(name, size, end)
                data[size:end] = item
                size = end
            ends.append(size)
        setattr(self, name + "_size", size)

    def rollback(self, rows: int, headers: int) -> None:
        """Back to ``rows`` rows and ``headers`` headers (the buffers' sizes only
        change when a whole batch decoded)."""
        for column in (self.offsets, self.timestamps, self.key_ends, self.value_ends,
                       self.header_counts):
            del column[rows:]
        for nulls in (self.key_nulls, self.value_nulls):
            while nulls and nulls[-1] >= rows:
                nulls.pop()
        del self.header_keys[headers:]
        del self.header_values[headers:]

    def column(self, name: str) -> pa.Array:
        """``keys`` or ``values`` as a binary column over the buffer (no copy)."""
        ends, nulls = getattr(self, name[:-1] + "_ends"), getattr(self, name[:-1] + "_nulls")
        n = len(ends)
        validity = None
        if nulls:
            valid = [True] * n
            for i in nulls:
                valid[i] = False
            validity = pa.array(valid, pa.bool_()).buffers()[1]
        offsets = pa.array(itertools.chain((0,), ends), pa.int32()).buffers()[1]
        data = self._buffers[name].slice(0, getattr(self, name + "_size"))
        return pa.Array.from_buffers(pa.binary(), n, [validity, offsets, data],
                                     null_count=len(nulls))


class _RecordColumns(_Columns):
    """The records table on the pure-Python path.

    v2 batches go from their bytes into columns (:meth:`add_v2`, through
    ``default_records.read_record_columns`` into a :class:`RecordSink`); there
    is no object per record. The batches that parser leaves to
    ``read_records`` (and v0/v1 entries) come as :class:`Batch` objects
    (:meth:`add_batch`).
    """

    __slots__ = ("sink", "max_rows", "max_bytes", "want_rows", "last_values", "ended")
    #: chunks end once the key or value bytes pass this (int32 offsets; one batch
    #: adds at most ``Limits.max_decompressed_size``, 256 MiB by default)
    BUFFER_LIMIT = 1 << 30

    def __init__(self, schema: pa.Schema, max_rows: int, max_bytes: int,
                 want_rows: bool) -> None:
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self.want_rows = want_rows
        self.last_values = None
        super().__init__(schema)

    def _reset(self) -> None:
        super()._reset()
        # values: at most the chunk's input bytes when uncompressed; after a
        # chunk, what it held; plus a quarter (a buffer too short grows by doubling)
        values = self.max_bytes if self.last_values is None else self.last_values
        values += values // 4 + (1 << 16)
        sink = self.sink = RecordSink(1 << 16, values)
        self.cols[0], self.cols[1], self.cols[5] = sink.offsets, sink.timestamps, sink.header_counts
        self.header_keys, self.header_values = sink.header_keys, sink.header_values
        self.ended = False

    @property
    def no_room(self) -> bool:
        """Whether the chunk should end: a batch's values would not fit their
        buffer (:meth:`run`), or they fill 7/8 of it (as on the compiled path,
        compressed batches end a chunk rather than grow it), or the keys or
        values near int32 offsets."""
        sink = self.sink
        return self.ended or sink.values_size >= min(len(sink.values) - (len(sink.values) >> 3),
                                                     self.BUFFER_LIMIT) \
            or sink.keys_size >= self.BUFFER_LIMIT

    @property
    def full(self) -> bool:
        return self.rows >= self.max_rows or self.nbytes >= self.max_bytes or self.no_room

    def run(self, buf, pos, base, verify_crc, limits, prev_last):
        """Consume consecutive *regular* v2 data batches from ``pos``, as the
        compiled sink's ``scan_run`` does (same rules: see there), without a
        :class:`Batch` or a generator step per batch; the first entry that is
        anything else is left to ``log_reader``, which reports it. Returns
        ``(new_pos, prev_last, rows)``: ``rows`` are the batches-table rows (None
        unless wanted). Stops when the chunk is :attr:`full`."""
        rows = [] if self.want_rows else None
        sink = self.sink
        n = len(buf)
        max_entry = limits.max_entry_size - v2.LOG_OVERHEAD
        max_records = limits.max_records_per_batch
        max_inflated = limits.max_decompressed_size
        unpack = v2.HEADER.unpack_from
        while pos + v2.RECORDS_OFFSET <= n and not self.full:
            (base_offset, size, leader_epoch, magic, crc, attributes, lod, base_ts, max_ts,
             pid, pepoch, bseq, count) = unpack(buf, pos)
            end = pos + v2.LOG_OVERHEAD + size
            codec = attributes & v2.COMPRESSION_CODEC_MASK
            if magic != 2 or size < v2.MIN_LENGTH or size > max_entry or end > n \
                    or attributes & v2.CONTROL_FLAG_MASK or codec > 4 or count > max_records \
                    or not _OFFSETS_LO <= base_offset <= _OFFSETS_HI \
                    or (prev_last is not None and base_offset <= prev_last):
                break  # control batches, limits, offset_regression: log_reader's
            computed = None
            if verify_crc:
                computed = crc32c(buf[pos + v2.ATTRIBUTES_OFFSET:end])
                if computed != crc:
                    break
            data = buf[pos + v2.RECORDS_OFFSET:end]
            if codec:
                try:
                    data = codecs.decompress(codec, data, 2, max_inflated)
                except Exception:  # noqa: BLE001 - log_reader decompresses again and reports
                    break
            if self.rows and sink.values_size + len(data) > len(sink.values):
                self.ended = True  # the batch starts the next chunk: no copy of the values
                break
            log_append = bool(attributes & v2.TIMESTAMP_TYPE_MASK)
            last_offset = base_offset + lod
            name = CODECS[codec]
            transactional = bool(attributes & v2.TRANSACTIONAL_FLAG_MASK)
            size += v2.LOG_OVERHEAD
            if self.add_v2(data, count, base_offset, last_offset, base_ts, max_ts, log_append,
                           base + pos, size, name, pid, pepoch, bseq, leader_epoch,
                           transactional, None if computed is None else True) < 0:
                break
            if rows is not None:
                rows.append(batch_row(
                    base + pos, size, 2, base_offset, last_offset, count, crc, computed,
                    attributes, name, LOG_APPEND_TIME if log_append else CREATE_TIME, base_ts,
                    max_ts, leader_epoch, pid, pepoch, bseq, lod, transactional, False,
                    bool(attributes & v2.DELETE_HORIZON_FLAG_MASK)))
            prev_last = last_offset
            pos = end
        return pos, prev_last, rows

    def flush(self) -> pa.RecordBatch:
        sink = self.sink
        self.cols[3] = sink.column("keys")
        self.cols[4] = sink.column("values")
        self.last_values = sink.values_size
        return super().flush()

    def add_v2(self, data, count, base_offset, last_offset, base_timestamp, max_timestamp,
               log_append, position, size, compression, producer_id, producer_epoch,
               base_sequence, leader_epoch, transactional, crc_valid) -> int:
        """Append one v2 batch's records from its (decompressed) bytes; -1, and
        nothing appended, where ``read_records`` must decide."""
        first = self.rows
        if not v2.read_record_columns(data, count, base_offset, base_timestamp,
                                      max_timestamp if log_append else None, self.sink):
            return -1
        if count:  # (an empty batch adds no rows, and no run)
            self._add_lineage(
                self.sink.offsets[first:], base_sequence, base_offset, size,
                (LOG_APPEND_TIME if log_append else CREATE_TIME, position, base_offset,
                 last_offset, 2, compression, producer_id, producer_epoch, leader_epoch,
                 transactional, crc_valid))
        return 0

    def add_batch(self, b: Batch) -> None:
        """Append the records of a batch read into objects."""
        sink = self.sink
        offsets, timestamps, keys, values, headers, _ = zip(*b.records)
        sink.offsets.extend(offsets)
        sink.timestamps.extend(timestamps)
        sink.append("keys", keys)
        sink.append("values", values)
        sink.header_counts.extend(map(len, headers))
        if any(headers):
            for hs in headers:
                for key, value in hs:
                    sink.header_keys.append(key)
                    sink.header_values.append(value)
        self._add_lineage(offsets, b.base_sequence, b.base_offset, b.size, (
            b.timestamp_type, b.position, b.base_offset, b.last_offset, b.magic,
            b.compression, b.producer_id, b.producer_epoch, b.partition_leader_epoch,
            b.is_transactional, b.crc_valid))

    def _add_lineage(self, offsets, seq, base_offset, size, lineage: tuple) -> None:
        """The per-record sequence numbers and the batch's lineage of ``offsets``' rows."""
        n = len(offsets)
        sequences = self.cols[13]
        if seq is None:
            sequences.extend([None] * n)
        elif seq < 0:
            sequences.extend([-1] * n)
        elif seq - base_offset + max(offsets) <= 0x7FFFFFFF:  # no wrap: plain sums
            start = seq - base_offset
            sequences.extend([start + o for o in offsets])
        else:
            sequences.extend([increment_sequence(seq, o - base_offset) for o in offsets])
        self.runs.append(lineage)
        self.rows += n
        self.run_ends.append(self.rows)
        self.nbytes += size


class FastSink:
    """The records table on the compiled path, the twin of :class:`_RecordColumns`:
    ``kafkalog._speedups.RecordColumns`` (``columns``) writes the records into plain
    buffers of Arrow's layout: runs of regular v2 batches in C (:meth:`run`, which
    ``log_reader._scan`` drives), single v2 batches the Python reader framed
    (``add_v2``), and the records of batches it decoded (``add_batch``). :meth:`flush`
    makes those buffers a RecordBatch, without a copy; ``full`` says the caller should
    flush before more is added.
    """

    __slots__ = ("schema", "columns", "add_v2", "add_batch", "_want_rows", "_max_rows",
                 "_max_bytes", "_sized")

    def __init__(self, schema: pa.Schema, want_batch_rows: bool, max_rows: int,
                 max_bytes: int) -> None:
        self.schema = schema
        self.columns = _accel.RecordColumns(
            pa.types.is_dictionary(schema.field("timestamp_type").type))
        self.add_v2 = self.columns.add_v2
        self.add_batch = self.columns.add_batch
        self._want_rows = want_batch_rows
        self._max_rows = max_rows
        self._max_bytes = max_bytes
        self._sized = False

    @property
    def full(self) -> bool:
        c = self.columns
        return c.rows >= self._max_rows or c.nbytes >= self._max_bytes or c.no_room

    def run(self, buf, pos, base, verify_crc, limits, prev_last):
        if not self._sized:  # a chunk holds at most max_bytes (plus a batch) of input
            self.columns.expect(min(len(buf) - pos, self._max_bytes) + (1 << 16), self._max_rows)
            self._sized = True
        rows = [] if self._want_rows else None
        new_pos, prev_last = self.columns.scan_run(
            buf, buf, pos, base, verify_crc, limits, prev_last, codecs.decompress, rows,
            batch_row, self._max_rows, self._max_bytes,
        )
        return new_pos, prev_last, rows

    def flush(self) -> pa.RecordBatch:
        """The records held so far as one RecordBatch (``columns.flush``'s buffers,
        wrapped as they are); starts afresh."""
        n, columns = self.columns.flush()
        arrays = []
        for field in self.schema:
            buffers = columns[field.name]
            if field.type == HEADERS:
                offsets, (nkeys, *keys), (nvalues, *values) = buffers
                items = pa.StructArray.from_arrays(
                    [_array(pa.string(), nkeys, keys), _array(pa.binary(), nvalues, values)],
                    fields=list(HEADERS.value_type))
                arrays.append(pa.ListArray.from_arrays(
                    _array(pa.int32(), n + 1, (None, offsets)), items, type=HEADERS))
            elif pa.types.is_dictionary(field.type):
                arrays.append(dictionary_column(field.name, _array(pa.int8(), n, buffers)))
            else:
                arrays.append(_array(field.type, n, buffers))
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)


def _array(type_: pa.DataType, n: int, buffers) -> pa.Array:
    """``n`` values of ``type_`` over plain buffers (None: absent), without a copy."""
    return pa.Array.from_buffers(type_, n, [None if b is None else pa.py_buffer(b)
                                            for b in buffers])


def _add_markers(c: _Columns, b: Batch) -> None:
    for r in b.records:
        ctl = r.control
        row = (
            r.offset, r.timestamp,
            ctl.type if ctl else None, ctl.type_id if ctl else None,
            ctl.version if ctl else None, ctl.coordinator_epoch if ctl else None,
            b.producer_id, b.producer_epoch, b.is_transactional,
            b.partition_leader_epoch, b.position, r.key, r.value, b.crc_valid,
        )
        for col, v in zip(c.cols, row):
            col.append(v)
        c.rows += 1
        c.nbytes += 64


def _add_batch(c: _Columns, b: Batch) -> None:
    _add_rows(c, [batch_row(
        b.position, b.size, b.magic, b.base_offset, b.last_offset, b.record_count,
        b.crc, b.computed_crc, b.attributes, b.compression, b.timestamp_type,
        b.first_timestamp, b.max_timestamp, b.partition_leader_epoch, b.producer_id,
        b.producer_epoch, b.base_sequence, b.last_offset_delta, b.is_transactional,
        b.is_control, b.has_delete_horizon, b.decoded)])


def _add_rows(c: _Columns, rows: list[tuple]) -> None:
    for col, values in zip(c.cols, zip(*rows)):
        col.extend(values)
    c.rows += len(rows)
    c.nbytes += 128 * len(rows)


def _add_finding(c: _Columns, f: Finding) -> None:
    row = (f.kind, f.position, f.end, f.message, f.base_offset, f.last_offset, f.bytes)
    for col, v in zip(c.cols, row):
        col.append(v)
    c.rows += 1
    c.nbytes += 64 + len(f.message)


def stream(
    source,
    *,
    tables: Iterable[str] = ("records", "batches", "markers", "findings"),
    max_rows: int = DEFAULT_MAX_ROWS,
    max_bytes: int = DEFAULT_MAX_BYTES,
    dictionary: bool = False,
    **options,
) -> Iterator[tuple[str, pa.RecordBatch]]:
    """Yield ``(table_name, RecordBatch)`` pairs of bounded size, in one pass.

    A RecordBatch is flushed once it holds ``max_rows`` rows or about
    ``max_bytes`` of input (records also once their values fill the buffer
    reserved for them, sized from the input and then from the last chunk:
    growing it would copy them all); every table wanted
    gets at least one (possibly empty) RecordBatch. ``dictionary=True`` gives the records'
    ``timestamp_type`` and ``compression`` as ``dictionary<int8, string>``
    (RECORDS_DICTIONARY_SCHEMA; same values, cheaper to build and to write).
    ``options`` go to :func:`kafkalog.scan`.
    """
    unknown = set(tables) - SCHEMAS.keys()
    if unknown:
        raise ValueError(f"unknown tables {sorted(unknown)}; known: {sorted(SCHEMAS)}")
    schemas = _schemas(dictionary)
    wanted = {name: _Columns(schemas[name]) for name in tables}
    flush = {name: cols.flush for name, cols in wanted.items()}
    sink = None
    if "records" in wanted and _accel.active():
        # compiled: runs of regular v2 batches go from the bytes into buffers of
        # Arrow's layout; the entries it leaves are read in Python and added as objects
        sink = FastSink(schemas["records"], "batches" in wanted, max_rows, max_bytes)
        wanted["records"] = sink.columns  # (its rows, nbytes and no_room, read directly)
        flush["records"] = sink.flush
        add_records = sink.add_batch
    elif "records" in wanted:
        # pure Python: v2 batches go from their bytes into columns, the same way
        sink = wanted["records"] = _RecordColumns(schemas["records"], max_rows, max_bytes,
                                                  "batches" in wanted)
        flush["records"] = sink.flush
        add_records = sink.add_batch
    else:
        add_records = None
    records = wanted.get("records")
    batches = wanted.get("batches")
    markers = wanted.get("markers")
    findings = wanted.get("findings")
    emitted = set()
    for item in scan(source, _sink=sink, **options):
        if isinstance(item, FastRun):  # batches the compiled sink took whole
            if item.rows:
                _add_rows(batches, item.rows)
        elif isinstance(item, Finding):
            if findings is not None:
                _add_finding(findings, item)
        else:
            if batches is not None:
                _add_batch(batches, item)
            if item.records:
                if item.is_control:
                    if markers is not None:
                        _add_markers(markers, item)
                elif records is not None:
                    add_records(item)
        for name, cols in wanted.items():
            if cols.rows >= max_rows or cols.nbytes >= max_bytes or cols.no_room:
                emitted.add(name)
                yield name, flush[name]()
    for name, cols in wanted.items():
        if cols.rows or name not in emitted:
            yield name, flush[name]()


def iter_record_batches(source, **options) -> Iterator[pa.RecordBatch]:
    """The records of ``source`` as a stream of bounded ``pyarrow.RecordBatch``\\ es."""
    for _, batch in stream(source, tables=("records",), **options):
        yield batch


def _schemas(dictionary: bool) -> dict[str, pa.Schema]:
    return {**SCHEMAS, "records": RECORDS_DICTIONARY_SCHEMA} if dictionary else SCHEMAS


def _table(source, name: str, options) -> pa.Table:
    parts = [b for _, b in stream(source, tables=(name,), **options)]
    return pa.Table.from_batches(parts, schema=_schemas(options.get("dictionary", False))[name])


def records_table(source, **options) -> pa.Table:
    """One row per data record (control records excluded); see RECORDS_SCHEMA."""
    return _table(source, "records", options)


def batches_table(source, **options) -> pa.Table:
    """One row per top-level entry, control batches included."""
    return _table(source, "batches", options)


def markers_table(source, **options) -> pa.Table:
    """One row per control record (transaction markers and KRaft control records)."""
    return _table(source, "markers", options)


def findings_table(source, **options) -> pa.Table:
    return _table(source, "findings", options)


class Tables(NamedTuple):
    records: pa.Table
    batches: pa.Table
    markers: pa.Table
    findings: pa.Table


def decode(source, **options) -> Tables:
    """All four tables of ``source`` from a single pass."""
    parts: dict[str, list] = {name: [] for name in SCHEMAS}
    for name, batch in stream(source, **options):
        parts[name].append(batch)
    schemas = _schemas(options.get("dictionary", False))
    return Tables(**{
        name: pa.Table.from_batches(batches, schema=schemas[name])
        for name, batches in parts.items()
    })
