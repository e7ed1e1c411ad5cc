"""Column lists for one table, filled row by row and flushed to a bounded RecordBatch:
the batches, markers and findings tables, and the base of the records table's pure path
(:class:`.records.PureRecordColumns`)."""

from __future__ import annotations

import itertools

import pyarrow as pa
import pyarrow.compute as pc

from ..model import Batch, Finding
from .schemas import (
    DICTIONARY_CODES,
    HEADERS,
    RECORDS_SCHEMA,
    TIMESTAMP,
    batch_row,
    dictionary_column,
)

#: Records-table columns that are the same for every record of a batch: kept
#: once per batch and expanded at flush (run-end decoding, in Arrow's C++).
LINEAGE = (2, 6, 7, 8, 9, 10, 11, 12, 14, 15, 16)


class Columns:
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
        # records: the LINEAGE columns have one value per batch (a tuple of them
        # per batch in ``runs``), each run ending at run_ends
        self.per_run = frozenset(LINEAGE) if schema.names == RECORDS_SCHEMA.names \
            else frozenset()
        self.reset()

    def reset(self) -> None:
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
            for i, values in zip(LINEAGE, zip(*self.runs)):
                cols[i] = values
        for i, (field, values) in enumerate(zip(self.schema, cols)):
            if i in self.per_run:
                if not values:
                    arrays.append(pa.array([], field.type))
                    continue
                if pa.types.is_dictionary(field.type):
                    code = DICTIONARY_CODES[field.name]
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
        self.reset()
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def _headers(self, counts: list[int]) -> pa.Array:
        offsets = pa.array(itertools.accumulate(counts, initial=0), type=pa.int32())
        items = pa.StructArray.from_arrays(
            [pa.array(self.header_keys, pa.string()), pa.array(self.header_values, pa.binary())],
            fields=list(HEADERS.value_type),
        )
        return pa.ListArray.from_arrays(offsets, items, type=HEADERS)


def add_markers(c: Columns, b: Batch) -> None:
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


def add_batch_row(c: Columns, b: Batch) -> None:
    add_rows(c, [batch_row(
        b.position, b.size, b.magic, b.base_offset, b.last_offset, b.record_count,
        b.crc, b.computed_crc, b.attributes, b.compression, b.timestamp_type,
        b.first_timestamp, b.max_timestamp, b.partition_leader_epoch, b.producer_id,
        b.producer_epoch, b.base_sequence, b.last_offset_delta, b.is_transactional,
        b.is_control, b.has_delete_horizon, b.decoded)])


def add_rows(c: Columns, rows: list[tuple]) -> None:
    for col, values in zip(c.cols, zip(*rows)):
        col.extend(values)
    c.rows += len(rows)
    c.nbytes += 128 * len(rows)


def add_finding(c: Columns, f: Finding) -> None:
    row = (f.kind, f.position, f.end, f.message, f.base_offset, f.last_offset, f.bytes)
    for col, v in zip(c.cols, row):
        col.append(v)
    c.rows += 1
    c.nbytes += 64 + len(f.message)
