"""The ``cdc__<topic>`` table's changes (issue 35 item 3; docs/debezium.md "The cdc table"):
a Debezium topic's records as a change frame for the per-key state machine
(:mod:`spark_jobs.derive.keyed`), parsed by :mod:`spark_jobs.derive.debezium`. Pure pyarrow,
no Spark, no writing.

**The table's columns** (:func:`table_schema`), in this order: ``partition``; ``key``, the
Debezium key as canonical JSON text (the key's payload without the schema wrapper, keys
sorted, no spaces: the same key gives the same text with or without the wrapper); the source
table's columns from ``after``; ``op``; ``source_ts_ms``; the source position fields present
(:data:`POSITIONS`); the record's ``offset`` and ``timestamp``; then ``night`` and ``run_id``
(:data:`spark_jobs.derive.keyed.TAIL`).

- A source column is typed from the envelope's Connect schema where the JsonConverter's
  wrapper gives one (:func:`spark_jobs.derive.debezium.row_schema`). Without a schema (no
  wrapper; a registry value read from ``records.value_json``) a column is a string holding
  the JSON text of each value (``42``, ``"Anne"``, ``{"a":1}``; a JSON null is null):
  guessing Arrow types from JSON values would fix a column's type by its first value.
- A column is typed once, by the first envelope that has it (or by the table as it stands);
  a later envelope adding columns widens the table (a new column is null in older rows).
- **One bad value costs one column, never the row**: a value that does not convert by its
  Connect schema, or does not fit its column's type, is null in a row that lands, and a
  :data:`~spark_jobs.findings.CDC_VALUE_ERROR` finding names the column, the offset and why
  (its ``raw``: the record's value). A column of a Connect type unknown here holds each
  value's JSON text, with one :data:`~spark_jobs.findings.CDC_UNTYPED_COLUMN` note per
  column and frame. A MongoDB document's fields are typed from their Extended JSON
  (:mod:`spark_jobs.derive.extended_json`).
- A source column named like one of the table's own columns (:data:`RESERVED`: ``key``,
  ``offset``, ``timestamp``, ``op``, a position field, ...) is called ``after_<name>``.

**Changes** (:func:`changes`): per record of the topic, in offset order, outside aborted and
open transactions: ``c``/``r``/``u`` upsert the key's row; ``d`` and a tombstone delete it
(the change carries the key, ``op``, the source fields, ``offset``/``timestamp``; the row's
columns are null; a tombstone's ``op`` is null). ``t`` (truncate) is no change but a
:data:`~spark_jobs.findings.CDC_UNSUPPORTED_OP` finding; ``m`` (a logical decoding message)
is no row of the table and is passed over. A record without a key (a source table without a
primary key) has no identity in a per-key table: no change (the state machine's
:func:`~spark_jobs.derive.keyed.visible` leaves such records out before). A record that does
not parse is a :data:`~spark_jobs.findings.CDC_PARSE_ERROR` finding naming why; none is
dropped silently.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json

import pyarrow as pa
import pyarrow.compute as pc

from spark_jobs import schemas
from spark_jobs.derive import debezium as dbz
from spark_jobs.derive import keyed
from spark_jobs.findings import (CDC_PARSE_ERROR, CDC_UNSUPPORTED_OP, CDC_UNTYPED_COLUMN,
                                 CDC_VALUE_ERROR, Finding)

#: the columns a cdc table begins with: the Kafka partition and the key's canonical JSON text
HEAD = pa.schema([schemas.RECORDS.field("partition"), pa.field("key", pa.string())])
#: the change's own columns after the source table's: its ``op`` and ``source.ts_ms``
META = pa.schema([("op", pa.string()), ("source_ts_ms", pa.int64())])
#: the position fields Debezium writes as text (PostgreSQL's ``sequence`` is a JSON array
#: in a string, SQL Server's LSNs ``00000027:00000758:0003``, Oracle's SCNs decimal strings)
_TEXT_POSITIONS = ("sequence", "file", "gtid", "change_lsn", "commit_lsn", "scn", "commit_scn")
#: each source position field's column type (their Connect types; MySQL's ``row`` an int32)
POSITIONS = {name: pa.string() if name in _TEXT_POSITIONS else
             pa.int32() if name == "row" else pa.int64() for name in dbz.POSITION_FIELDS}
#: the record's columns a cdc table ends with, before :data:`~spark_jobs.derive.keyed.TAIL`
RECORD = pa.schema([schemas.RECORDS.field("offset"), schemas.RECORDS.field("timestamp")])
#: the names a source column cannot have (renamed ``after_<name>``)
RESERVED = frozenset(HEAD.names + META.names + list(POSITIONS) + RECORD.names
                     + keyed.TAIL.names + keyed.CHANGE_COLUMNS.names)
RENAMED_PREFIX = "after_"
#: values of a topic :func:`is_cdc` looks at, at most (the first non-null ones)
DETECT = 10
_SKIPPED_TXN = (schemas.TXN_ENDS["ABORT"], schemas.TXN_OPEN)
_FIT_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError,
               ValueError, OverflowError)


# ------------------------------------------------------------------ detection

def is_cdc(topic: str, records: pa.Table, pattern: str | None = None) -> bool:
    """Whether ``topic`` is a Debezium topic, by :func:`debezium.is_cdc_topic` over the
    first :data:`DETECT` non-null values of ``records`` (its rows: ``value_json`` where the
    registry decoded the value, else ``value``), or by name (``pattern``)."""
    values = []
    texts = records.column("value_json").to_pylist() if "value_json" in records.column_names \
        else [None] * records.num_rows
    for text, raw in zip(texts, records.column("value").to_pylist()):
        value = text if text is not None else raw
        if value is not None:
            values.append(value)
            if len(values) == DETECT:
                break
    return dbz.is_cdc_topic(topic, values, pattern)


# ------------------------------------------------------------------ the table's columns

def column_name(name: str) -> str:
    """The table's name for source column ``name`` (see :data:`RESERVED`)."""
    return RENAMED_PREFIX + name if name in RESERVED else name


def table_schema(envelope_schemas=(), *, untyped=(), positions=(),
                 base: pa.Schema | None = None) -> pa.Schema:
    """A cdc table's columns (the module's text): ``base``'s (the table as it stands) widened
    by the source columns of ``envelope_schemas`` (Connect schemas of envelopes, typed), the
    source column names ``untyped`` (of envelopes without a schema: JSON text), and the
    position fields ``positions`` (besides those the schemas' ``source`` has). A position
    column is typed as :data:`POSITIONS` says unless the table has it, or a schema's
    ``source`` types it as a string (Oracle's ``txId``)."""
    source: dict[str, pa.DataType] = {}
    present = set(positions)
    kinds: dict[str, pa.DataType] = {}  # a position column's type where it is not POSITIONS'
    if base is not None:
        for f in base:
            if f.name in POSITIONS:
                present.add(f.name)
                kinds[f.name] = f.type
            elif f.name not in RESERVED:
                source[f.name] = f.type
    for envelope in envelope_schemas:
        for f in dbz.row_schema(envelope):
            source.setdefault(column_name(f.name), f.type)
        src = dbz.field_schema(envelope, "source")
        if src is not None and str(src.get("type", "")).lower() == "struct":
            struct = dbz.arrow_type(src)
            for i in range(struct.num_fields):
                f = struct.field(i)
                if f.name in POSITIONS:
                    present.add(f.name)
                    # Oracle's txId is text ("6.28.807"), PostgreSQL's an int64
                    if pa.types.is_string(f.type):
                        kinds.setdefault(f.name, f.type)
    for name in untyped:
        source.setdefault(column_name(name), pa.string())
    return pa.schema(list(HEAD) + [pa.field(n, t) for n, t in source.items()] + list(META)
                     + [pa.field(n, kinds.get(n, POSITIONS[n])) for n in dbz.POSITION_FIELDS
                        if n in present]
                     + list(RECORD) + list(keyed.TAIL))


# ------------------------------------------------------------------ changes

def canonical(payload) -> str:
    """JSON text of a decoded JSON value, the same for the same value: keys sorted, no spaces."""
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def key_text(key) -> str | None:
    """The canonical JSON text of a Debezium key (its payload, without the schema wrapper);
    None for no key."""
    if key is None:
        return None
    payload, _ = dbz.unwrap(dbz.loads(key, "key"))
    return canonical(payload)


def _json_default(value):
    """JSON text of what :func:`debezium.convert` gives beyond JSON's own types."""
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, (decimal.Decimal, dt.date, dt.time)):  # datetime is a date
        return value.isoformat() if not isinstance(value, decimal.Decimal) else str(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


def _cell(value, column: pa.DataType, typed: bool):
    """A source value as its column holds it: JSON text in a string column unless the value
    is a typed string (or a typed Decimal: its text); else the value itself (Arrow checks
    the fit)."""
    if value is None or not pa.types.is_string(column) or (typed and isinstance(value, str)):
        return value
    if typed and isinstance(value, decimal.Decimal):  # a decimal without a fixed scale
        return str(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      default=_json_default)


def _position(value, column: pa.DataType, name: str):
    """A source position value in its column's type (a Protobuf int64 comes as a string)."""
    if value is None:
        return None
    if pa.types.is_string(column):
        return value if isinstance(value, str) else canonical(value)
    if isinstance(value, str) and value.lstrip("-").isdigit():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise dbz.DebeziumError(f"source.{name}: expected an integer, got {value!r}")
    return value


class _Parsed:
    """The records of a change frame as they are parsed: their rows' values by column, the
    envelope schemas and column names met (in order), the findings."""

    def __init__(self, rows: pa.Table):
        self.rows = rows
        self.kept: list[int] = []
        self.changes: list[tuple[dbz.Change, str, bool]] = []
        self.envelopes: dict[str, dict] = {}
        self.columns: set[str] = set()  # the source columns of the envelopes kept
        self.untyped: dict[str, None] = {}
        self.positions: set[str] = set()
        self.found: list[Finding] = []

    def finding(self, i: int, kind: str, message: str) -> None:
        r = {n: self.rows.column(n)[i].as_py() for n in (
            "topic", "partition", "offset", "batch_position", "segment", "segment_base_offset",
            "run_id", "value") if n in self.rows.column_names}
        value = r.get("value")
        self.found.append(Finding(
            kind=kind, message=f"offset {r.get('offset')}: {message}",
            position=r.get("batch_position"), end=r.get("batch_position"),
            base_offset=r.get("offset"), last_offset=r.get("offset"),
            bytes=None if value is None else len(value), raw=value, topic=r.get("topic"),
            partition=r.get("partition"), segment=r.get("segment"),
            segment_base_offset=r.get("segment_base_offset"), run_id=r.get("run_id")))

    def envelope(self, schema: dict) -> None:
        """Keep an envelope schema that can widen the table: one with a ``source`` (its
        position fields) or a column not met before. MongoDB's (one per set of a document's
        fields, :mod:`spark_jobs.derive.extended_json`) would otherwise be one per document;
        leaving out one that brings nothing new gives :func:`table_schema` the same columns."""
        text = canonical(schema)
        if text in self.envelopes:
            return
        names = set(dbz.row_schema(schema).names)
        if dbz.field_schema(schema, "source") is not None or not names <= self.columns:
            self.envelopes[text] = schema
            self.columns |= names

    def add(self, i: int, key, value, value_json) -> None:
        try:
            change = dbz.parse(key, value, value_json=value_json)
            if change.key is None or change.op == "m":
                return
            if change.op == "t":
                self.finding(i, CDC_UNSUPPORTED_OP, "a truncate (op 't') empties the source "
                             "table; the cdc table applies changes per key and keeps its rows")
                return
            text = key_text(key)
            typed = change.schema is not None
            if typed:
                self.envelope(change.schema)
            elif change.row is not None:
                self.untyped.update(dict.fromkeys(change.row))
        except dbz.DebeziumError as err:
            self.finding(i, CDC_PARSE_ERROR, str(err))
            return
        self.positions.update(change.position)
        self.kept.append(i)
        self.changes.append((change, text, typed))


def committed(records: pa.Table) -> pa.Table:
    """``records`` outside aborted and open transactions, in (partition, offset) order."""
    if schemas.TXN_STATE in records.column_names:
        state = records.column(schemas.TXN_STATE)
        records = records.filter(pc.invert(pc.fill_null(pc.is_in(
            state, value_set=pa.array(_SKIPPED_TXN)), False)))
    return records.take(pc.sort_indices(records, sort_keys=[("partition", "ascending"),
                                                            ("offset", "ascending")]))


def _parse(records: pa.Table) -> _Parsed:
    """``records`` outside aborted and open transactions, each parsed."""
    rows = committed(records)
    parsed = _Parsed(rows)
    texts = rows.column("value_json").to_pylist() if "value_json" in rows.column_names \
        else [None] * rows.num_rows
    for i, (key, value, text) in enumerate(zip(rows.column("key").to_pylist(),
                                               rows.column("value").to_pylist(), texts)):
        parsed.add(i, key, value, text)
    return parsed


def sources(records: pa.Table) -> tuple[list[dict], list[str], list[str]]:
    """What the changes of ``records`` widen a table by (:func:`table_schema`'s arguments):
    the envelope schemas and the untyped source column names, each in the order met, and
    the position fields present. The parts of a topic's records (its Kafka partitions,
    each on an executor) give :func:`changes`' columns when concatenated in partition order
    (envelopes, untyped names, positions each), as :func:`changes` of all of them would."""
    parsed = _parse(records)
    return list(parsed.envelopes.values()), list(parsed.untyped), sorted(parsed.positions)


def changes(records: pa.Table, schema: pa.Schema | None = None
            ) -> tuple[pa.Table, pa.Schema, list[Finding]]:
    """The change frame of a Debezium topic's ``records`` (columns of
    :data:`spark_jobs.schemas.RECORDS`; the module's text), the table's columns (``schema``,
    the table as it stands, widened by what the records bring: :func:`table_schema`) and the
    findings."""
    parsed = _parse(records)
    rows = parsed.rows
    columns = table_schema(parsed.envelopes.values(), untyped=parsed.untyped,
                           positions=parsed.positions, base=schema)
    frame_schema = keyed.change_schema(columns)
    values = [_values(change, text, typed, columns) for change, text, typed in parsed.changes]
    kept = parsed.kept
    noted: set[str] = set()
    for j, (change, _, _) in enumerate(parsed.changes):
        for name, why in change.notes:
            if column_name(name) not in noted:  # once per column: the first record with it
                noted.add(column_name(name))
                parsed.finding(kept[j], CDC_UNTYPED_COLUMN, f"column {column_name(name)}: {why}")
        for name, why in change.errors:
            parsed.finding(kept[j], CDC_VALUE_ERROR, f"column {column_name(name)} is null in "
                           f"the row: {why}")
    for (j, name), why in sorted(_misfits(values, frame_schema).items()):
        parsed.finding(kept[j], CDC_VALUE_ERROR, f"column {name} is null in the row: {why}")
    take = pa.array(kept, pa.int64())
    out = {"partition": rows.column("partition").take(take),
           "offset": rows.column("offset").take(take),
           "timestamp": rows.column("timestamp").take(take)}
    arrays = [out[f.name].cast(f.type) if f.name in out
              else pa.array([v.get(f.name) for v in values], f.type) for f in frame_schema]
    found = sorted(parsed.found, key=lambda f: (f.partition or 0, f.base_offset or 0))
    return pa.Table.from_arrays(arrays, schema=frame_schema), columns, found


def _values(change: dbz.Change, text: str, typed: bool, columns: pa.Schema) -> dict:
    """A change's values by column (the record's own columns come from ``records``)."""
    out = {"state_key": text.encode("utf-8"), "key": text, "op": change.op,
           "action": keyed.UPSERT if change.action == dbz.UPSERT else keyed.DELETE,
           "source_ts_ms": change.source_ts_ms}
    for name, value in change.position.items():
        out[name] = value  # typed in _misfits' first pass (an error names the record)
    for name, value in (change.row or {}).items():
        column = column_name(name)
        out[column] = _cell(value, columns.field(column).type, typed)
    return out


def _misfits(values: list[dict], frame_schema: pa.Schema) -> dict[tuple[int, str], str]:
    """The cells whose values do not fit their columns, ``(row, column) -> why``, each made
    null in place (the positions are typed here, in place): a row is never lost for one
    column."""
    bad: dict[tuple[int, str], str] = {}
    for j, row in enumerate(values):
        for name in POSITIONS:
            if name in row:
                try:
                    row[name] = _position(row[name], frame_schema.field(name).type, name)
                except dbz.DebeziumError as err:
                    bad[(j, name)] = str(err)
                    row[name] = None
    for f in frame_schema:
        if f.name in ("partition", "offset", "timestamp"):
            continue
        column = [row.get(f.name) for row in values]
        try:
            pa.array(column, f.type)
            continue
        except _FIT_ERRORS:
            pass
        for j, value in enumerate(column):
            try:
                pa.array([value], f.type)
            except _FIT_ERRORS as err:
                bad[(j, f.name)] = f"{value!r:.120} does not fit {f.type}: {err}"
                values[j][f.name] = None
    return bad


__all__ = ["DETECT", "HEAD", "META", "POSITIONS", "RECORD", "RENAMED_PREFIX", "RESERVED",
           "canonical", "changes", "column_name", "committed", "is_cdc", "key_text",
           "sources", "table_schema"]
