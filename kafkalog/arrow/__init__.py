"""Arrow output: records, batches, markers and findings as ``pyarrow`` tables.

One pass over a source fills up to four tables; :func:`stream` yields them as
bounded ``pyarrow.RecordBatch``\\ es so that a segment of any size decodes in
bounded memory. Control records are not data: they go to ``markers``, never
to ``records``. Records keep their batch's lineage, including ``crc_valid``,
so that callers decide what to do with records of damaged batches.

:mod:`.schemas` holds the tables' schemas, :mod:`.columns` fills the batches, markers and
findings tables, :mod:`.records` the records table (pure Python and compiled); this module
drives one pass over a source into them.
"""

from __future__ import annotations

from typing import Iterable, Iterator, NamedTuple

import pyarrow as pa

from .. import _accel
from ..log_reader import FastRun, scan
from ..model import Finding
from .columns import Columns, add_batch_row, add_finding, add_markers, add_rows
from .records import FastSink, PureRecordColumns, RecordSink
from .schemas import (
    BATCHES_SCHEMA,
    CODECS,
    DICTIONARY_STRING,
    FINDINGS_SCHEMA,
    HEADERS,
    MARKERS_SCHEMA,
    RECORDS_DICTIONARY_SCHEMA,
    RECORDS_SCHEMA,
    SCHEMAS,
    TIMESTAMP,
    TIMESTAMP_TYPES,
    batch_row,
    dictionary_column,
    schemas_for,
)

__all__ = [
    "BATCHES_SCHEMA", "CODECS", "DEFAULT_MAX_BYTES", "DEFAULT_MAX_ROWS", "DICTIONARY_STRING",
    "FINDINGS_SCHEMA", "FastSink", "HEADERS", "MARKERS_SCHEMA", "PureRecordColumns",
    "RECORDS_DICTIONARY_SCHEMA", "RECORDS_SCHEMA", "RecordSink", "SCHEMAS", "TIMESTAMP",
    "TIMESTAMP_TYPES", "Tables", "batch_row", "batches_table", "decode", "dictionary_column",
    "findings_table", "iter_record_batches", "markers_table", "records_table", "stream",
]

DEFAULT_MAX_ROWS = 64 * 1024
DEFAULT_MAX_BYTES = 32 * 1024 * 1024


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
    schemas = schemas_for(dictionary)
    wanted = {name: Columns(schemas[name]) for name in tables}
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
        sink = wanted["records"] = PureRecordColumns(schemas["records"], max_rows, max_bytes,
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
                add_rows(batches, item.rows)
        elif isinstance(item, Finding):
            if findings is not None:
                add_finding(findings, item)
        else:
            if batches is not None:
                add_batch_row(batches, item)
            if item.records:
                if item.is_control:
                    if markers is not None:
                        add_markers(markers, item)
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


def _table(source, name: str, options) -> pa.Table:
    parts = [b for _, b in stream(source, tables=(name,), **options)]
    return pa.Table.from_batches(parts, schema=schemas_for(options.get("dictionary", False))[name])


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
    schemas = schemas_for(options.get("dictionary", False))
    return Tables(**{
        name: pa.Table.from_batches(batches, schema=schemas[name])
        for name, batches in parts.items()
    })
