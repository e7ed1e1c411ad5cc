"""The records table, decoded from a batch's bytes into Arrow's buffers without an
object per record: on the pure-Python path :class:`PureRecordColumns` (through a
:class:`RecordSink`), on the compiled path its twin :class:`FastSink`."""

from __future__ import annotations

import itertools

import pyarrow as pa
from crc32c import crc32c

from .. import _accel, codecs
from .. import default_records as v2
from ..model import CREATE_TIME, LOG_APPEND_TIME, Batch, increment_sequence
from .columns import Columns
from .schemas import CODECS, HEADERS, batch_row, dictionary_column

#: base offsets whose batches' last offsets (base + an int32 delta) stay in int64
_OFFSETS_LO, _OFFSETS_HI = v2.INT64_MIN + (1 << 31), v2.INT64_MAX - (1 << 31)


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


class PureRecordColumns(Columns):
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

    def reset(self) -> None:
        super().reset()
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
    """The records table on the compiled path, the twin of :class:`PureRecordColumns`:
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
