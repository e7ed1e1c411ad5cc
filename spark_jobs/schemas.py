"""The warehouse tables' schemas (docs/tables.md), as Arrow schemas.

Each table's file schema excludes its Hive partition columns, which live in
the directory names (``PARTITIONS``). The Spark schema of a table as read is
the file schema followed by the partition columns as strings.
"""

from __future__ import annotations

import pyarrow as pa

from kafkalog import arrow as ka

TS = ka.TIMESTAMP
_LINEAGE = [("segment", pa.string()), ("segment_base_offset", pa.int64()), ("run_id", pa.string())]


def _with(schema: pa.Schema, drop=(), retype=None, extra=()) -> pa.Schema:
    retype = retype or {}
    fields = [pa.field(f.name, retype.get(f.name, f.type)) for f in schema if f.name not in drop]
    return pa.schema([("partition", pa.int32())] + fields + list(extra) + _LINEAGE)


RECORDS = _with(ka.RECORDS_SCHEMA, drop={"crc_valid"})
BATCHES = _with(ka.BATCHES_SCHEMA, retype={"crc": pa.int64(), "computed_crc": pa.int64()})
MARKERS = _with(ka.MARKERS_SCHEMA)
FINDINGS = _with(ka.FINDINGS_SCHEMA, extra=[("raw", pa.binary())])
LEDGER = pa.schema([
    ("run_id", pa.string()),
    ("segment", pa.string()),
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("segment_base_offset", pa.int64()),
    ("object_size", pa.int64()),
    ("etag", pa.string()),
    ("mtime", TS),
    ("byte_start", pa.int64()),
    ("byte_end", pa.int64()),
    ("end_position", pa.int64()),
    ("first_offset", pa.int64()),
    ("last_offset", pa.int64()),
    ("last_batch_position", pa.int64()),
    ("last_batch_crc", pa.int64()),
    ("records", pa.int64()),
    ("batches", pa.int64()),
    ("findings", pa.int64()),
    ("action", pa.string()),
    ("ingested_at", TS),
])
DQ_RESULTS = pa.schema([
    ("run_id", pa.string()),
    ("check", pa.string()),
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("status", pa.string()),
    ("severity", pa.string()),
    ("observed", pa.int64()),
    ("failed", pa.int64()),
    ("details", pa.string()),
    ("checked_at", TS),
])

#: file schema of each table
TABLES = {
    "records": RECORDS,
    "batches": BATCHES,
    "markers": MARKERS,
    "findings": FINDINGS,
    "ledger": LEDGER,
    "dq_results": DQ_RESULTS,
}

#: Hive partition columns of each table, outermost first
PARTITIONS = {
    "records": ("topic", "dt"),
    "batches": ("topic",),
    "markers": ("topic",),
    "findings": ("topic",),
    "ledger": (),
    "dq_results": (),
}

#: the tables a decode run writes, in publish order (ledger last: it is what later runs trust)
DECODE_TABLES = ("records", "batches", "markers", "findings", "ledger")


def read_schema(name: str) -> pa.Schema:
    """The table's schema as read back: file columns, then partition columns (strings)."""
    schema = TABLES[name]
    extra = [pa.field(p, pa.string()) for p in PARTITIONS[name] if p not in schema.names]
    return pa.schema(list(schema) + extra)


def spark_arrow_schema(name: str) -> pa.Schema:
    """:func:`read_schema` with the types Spark's Arrow exchange takes (timestamps in µs)."""
    return pa.schema([pa.field(f.name, pa.timestamp("us", tz="UTC"))
                      if pa.types.is_timestamp(f.type) else f for f in read_schema(name)])


def spark_schema(name: str):
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(read_schema(name))
