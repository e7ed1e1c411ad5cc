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

from . import _accel
from .log_reader import FastRun, scan
from .model import Batch, Finding, increment_sequence

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


#: Records-table columns that are the same for every record of a batch: kept
#: once per batch and expanded at flush (run-end decoding, in Arrow's C++).
_LINEAGE = (2, 6, 7, 8, 9, 10, 11, 12, 14, 15, 16)


def _add_records(c: _Columns, b: Batch) -> None:
    recs = b.records
    n = len(recs)
    offsets, timestamps, keys, values, headers, _ = zip(*recs)
    cols = c.cols
    cols[0].extend(offsets)
    cols[1].extend(timestamps)
    cols[3].extend(keys)
    cols[4].extend(values)
    cols[5].extend(map(len, headers))
    if any(headers):
        for hs in headers:
            for key, value in hs:
                c.header_keys.append(key)
                c.header_values.append(value)
    seq = b.base_sequence
    if seq is None:
        cols[13].extend([None] * n)
    elif seq < 0:
        cols[13].extend([-1] * n)
    else:
        base = b.base_offset
        if seq - base + max(offsets) <= 0x7FFFFFFF:  # no wrap: plain sums
            start = seq - base
            cols[13].extend([start + o for o in offsets])
        else:
            cols[13].extend([increment_sequence(seq, o - base) for o in offsets])
    lineage = (b.timestamp_type, b.position, b.base_offset, b.last_offset, b.magic,
               b.compression, b.producer_id, b.producer_epoch, b.partition_leader_epoch,
               b.is_transactional, b.crc_valid)
    c.runs.append(lineage)
    c.rows += n
    c.run_ends.append(c.rows)
    c.nbytes += b.size


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
    # the compiled sink builds the same row, in this order, for the batches it reads
    _add_rows(c, [(
        b.position, b.size, b.magic, b.base_offset, b.last_offset, b.record_count,
        b.crc, b.computed_crc, b.crc_valid, b.status, b.attributes, b.compression,
        b.timestamp_type, b.first_timestamp, b.max_timestamp, b.delete_horizon_ms,
        b.partition_leader_epoch, b.producer_id, b.producer_epoch, b.base_sequence,
        b.last_sequence, b.last_offset_delta, b.is_transactional, b.is_control,
        b.has_delete_horizon,
    )])


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
    ``max_bytes`` of input (on the compiled path, records also once their
    values fill the buffer reserved for them, sized from the input and then
    from the last chunk: growing it would copy them all); every table wanted
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
    sink = None
    if "records" in wanted and _accel.active():
        # compiled: runs of regular v2 batches go from the bytes into Arrow
        # buffers; the entries it leaves are read in Python and added as objects
        sink = _accel.FastSink(schemas["records"], "batches" in wanted, max_rows, max_bytes)
        wanted["records"] = sink.columns
        add_records = sink.columns.add_batch
    else:
        add_records = functools.partial(_add_records, wanted.get("records"))
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
                yield name, cols.flush()
    for name, cols in wanted.items():
        if cols.rows or name not in emitted:
            yield name, cols.flush()


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
