"""Debezium change events: recognising the envelopes Debezium writes and parsing them into
changes of a source table (issue 35 item 3, the pure half; docs/debezium.md). No Spark and no
writing: the ``cdc__<topic>`` table's writer (the per-key state machinery) calls
:func:`parse` per record and applies what it returns.

A Debezium value is a Kafka Connect ``Envelope``: ``{"before", "after", "source", "op",
"ts_ms", "transaction"}``. It reaches a log as

- JSON with the JsonConverter's schema wrapper (``schemas.enable=true``):
  ``{"schema": <Connect schema of the envelope>, "payload": <the envelope>}``;
- JSON without it (``schemas.enable=false``): the envelope alone;
- Avro or Protobuf through Schema Registry, which the decode job renders as JSON text in
  ``records.value_json`` (:mod:`spark_jobs.decode.values`): the envelope's shape again, with
  no Connect schema beside it.

The key is the source table's primary (or unique) key as a Connect struct, JSON with or
without the wrapper; a null key is a table without one. After a delete Debezium writes a
*tombstone*: the same key with a null value, for log compaction.

Recognition is by shape (:func:`is_envelope`: an ``op`` Debezium writes, a ``source`` struct,
and ``before`` or ``after`` for row events) or by name (:func:`is_cdc_topic` with a topic regex,
``--cdc-topics``). Typing follows the Connect schema where the wrapper gives one
(:func:`convert_row`, :func:`convert`: the types as Kafka's JsonConverter writes their names,
and the logical types Debezium's connectors use); without a schema the row's values stay as
the JSON has them. A MongoDB event's ``after`` is the document's Extended JSON text, read
into its fields by :mod:`spark_jobs.derive.extended_json` and typed from that. A record that
is no change (bad JSON, no envelope, a bad key, a row event without a row) is a
:class:`DebeziumError` naming why; a value of one column that cannot be typed costs that
column only (:attr:`Change.errors`), never the row.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import decimal
import json
import re
from dataclasses import dataclass, field

import pyarrow as pa

from spark_jobs.derive import extended_json

#: the ``op`` values Debezium writes: create, read (a snapshot), update, delete, truncate, message
OPS = ("c", "r", "u", "d", "t", "m")
#: what a change does to the table's state: ``c``/``r``/``u`` upsert the key's row, ``d`` and a
#: tombstone delete it, ``t`` empties the table, ``m`` (a logical decoding message) is no row
UPSERT, DELETE, TRUNCATE, MESSAGE = "upsert", "delete", "truncate", "message"
ACTIONS = {"c": UPSERT, "r": UPSERT, "u": UPSERT, "d": DELETE, "t": TRUNCATE, "m": MESSAGE}
#: the ``source`` fields that place a change in the source database's log, per connector
#: (PostgreSQL: WAL position, transaction, ``[last committed, current]`` LSNs; MySQL/MariaDB:
#: binlog file, position, row in the event, GTID, server and thread; SQL Server: LSNs and serial
#: number; Oracle: SCNs). :class:`Change.position` holds those an event has.
POSITION_FIELDS = ("lsn", "txId", "xmin", "sequence",
                   "file", "pos", "row", "gtid", "server_id", "thread",
                   "change_lsn", "commit_lsn", "event_serial_no",
                   "scn", "commit_scn")

# Kafka Connect's JsonConverter writes a schema's ``type`` with the names of its JsonSchema
# constants (apache/kafka connect/json/.../JsonSchema.java): FLOAT32 as "float", FLOAT64 as
# "double"; it reads no others ("float32" is "Unknown schema type"). Each primitive's column:
PRIMITIVES = {"boolean": pa.bool_(), "int8": pa.int8(), "int16": pa.int16(), "int32": pa.int32(),
              "int64": pa.int64(), "float": pa.float32(), "double": pa.float64(),
              "bytes": pa.binary(), "string": pa.string()}
COMPOUND = ("array", "map", "struct")
_INT_BITS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}

# Logical types (a schema's ``name``): Connect's own and those of Debezium's SQL connectors
# (debezium.io, each connector's "Data type mappings"). Names not here keep their Connect
# type: io.debezium.data.Json, Uuid, Xml, Enum, EnumSet, Ltree (strings), Bits (bytes),
# io.debezium.time.Year (int32), MicroDuration, Interval, geometry structs, ...
DATE = ("io.debezium.time.Date", "org.apache.kafka.connect.data.Date")  # int32 days
# int64 ms since the epoch (Connect's name is the one a MongoDB document's $date is given)
TIMESTAMP_MS = ("io.debezium.time.Timestamp", extended_json.TIMESTAMP)
MICRO_TIMESTAMP = "io.debezium.time.MicroTimestamp"  # int64 microseconds since the epoch
NANO_TIMESTAMP = "io.debezium.time.NanoTimestamp"  # int64 nanoseconds since the epoch
ZONED_TIMESTAMP = "io.debezium.time.ZonedTimestamp"  # ISO 8601 string with its zone
TIME_MS = ("io.debezium.time.Time", "org.apache.kafka.connect.data.Time")  # int32 ms of the day
MICRO_TIME = "io.debezium.time.MicroTime"  # int64 microseconds of the day
NANO_TIME = "io.debezium.time.NanoTime"  # int64 nanoseconds of the day
ZONED_TIME = "io.debezium.time.ZonedTime"  # ISO 8601 time with its offset: kept as the string
DECIMAL = "org.apache.kafka.connect.data.Decimal"  # bytes: big-endian two's complement, scale
VARIABLE_SCALE_DECIMAL = "io.debezium.data.VariableScaleDecimal"  # struct {scale, value}
#: the most digits an Arrow (and Iceberg) decimal column holds; a wider Decimal is text
MAX_PRECISION = 38
_EPOCH = dt.datetime(1970, 1, 1)


class DebeziumError(ValueError):
    """A key or value that is not what Debezium writes; the message names the part and value."""


@dataclass(frozen=True, slots=True)
class Change:
    """One record of a Debezium topic as a change of the source table.

    ``op``: the envelope's (``c r u d t m``), None for a tombstone; ``action``: one of
    :data:`ACTIONS`' values; ``key``: the Debezium key's fields (None: no key); ``row``: the
    ``after`` row for an upsert, typed where the envelope has a schema (else None);
    ``source_ts_ms``: when the change was made in the source database; ``ts_ms``: when the
    connector processed it; ``position``: the source's :data:`POSITION_FIELDS` present.

    ``schema``: the Connect schema the row was typed by (the wrapper's envelope schema, or
    for a MongoDB document the one :mod:`~spark_jobs.derive.extended_json` gives: an
    envelope with its ``after`` struct); None for an untyped row. ``errors``: ``(column,
    why)`` of the row's columns whose value could not be typed (null in ``row``);
    ``notes``: ``(column, why)`` of the columns whose Connect type is unknown here (their
    JSON text in ``row``)."""

    op: str | None
    action: str
    key: dict | None
    row: dict | None = None
    source_ts_ms: int | None = None
    ts_ms: int | None = None
    position: dict = field(default_factory=dict)
    schema: dict | None = field(default=None, compare=False)
    errors: tuple = ()
    notes: tuple = ()

    @property
    def tombstone(self) -> bool:
        return self.op is None


# ------------------------------------------------------------------ recognition
def loads(data, what: str):
    """JSON text (``bytes`` or ``str``) as Python, or :class:`DebeziumError` naming ``what``."""
    try:
        return json.loads(data)
    except (ValueError, TypeError) as err:  # UnicodeDecodeError is a ValueError
        raise DebeziumError(f"the {what} is not JSON: {err}") from err


def unwrap(obj) -> tuple[object, dict | None]:
    """``(payload, Connect schema)`` of the JsonConverter's wrapper, else ``(obj, None)``."""
    if isinstance(obj, dict) and obj.keys() == {"schema", "payload"} and \
            isinstance(obj["schema"], dict):
        return obj["payload"], obj["schema"]
    return obj, None


def is_envelope(obj) -> bool:
    """Whether ``obj`` (a decoded JSON value, wrapped or not) has a Debezium envelope's shape."""
    payload, _ = unwrap(obj)
    if not isinstance(payload, dict) or payload.get("op") not in OPS \
            or not isinstance(payload.get("source"), dict):
        return False
    # Protobuf values rendered by the registry decoding (MessageToDict) leave out fields that
    # are not set: a create has no ``before`` there, a delete no ``after``
    return payload["op"] in ("t", "m") or "before" in payload or "after" in payload


def is_cdc_topic(topic: str, values, pattern: str | None = None) -> bool:
    """Whether ``topic`` is a Debezium topic: named by ``pattern`` (a full match), or its
    ``values`` (JSON texts: ``records.value_json`` or the value bytes; tombstones, None, say
    nothing) are envelopes, every one and at least one. A value that is not JSON is no
    envelope."""
    if pattern is not None and re.fullmatch(pattern, topic):
        return True
    seen = False
    for value in values:
        if value is None:
            continue
        try:
            if not is_envelope(json.loads(value)):
                return False
        except (ValueError, TypeError):
            return False
        seen = True
    return seen


# ------------------------------------------------------------------ parsing
def parse_key(key) -> dict | None:
    """The Debezium key's fields: JSON text (``bytes``/``str``) or already decoded, with or
    without the schema wrapper (typed by it where present); None for no key."""
    if key is None:
        return None
    obj = loads(key, "key") if isinstance(key, (bytes, bytearray, memoryview, str)) else key
    payload, schema = unwrap(obj)
    if not isinstance(payload, dict):
        raise DebeziumError(f"the key is not a struct of the table's key columns: {payload!r}")
    return convert(payload, schema, "key") if schema is not None else payload


def parse(key, value, *, value_json: str | None = None) -> Change:
    """One record of a Debezium topic as a :class:`Change`.

    ``key``/``value``: the record's bytes (JSON; None for a null key or value);
    ``value_json``: the value as the registry decoded it (``records.value_json``), read
    instead of ``value`` where given. A null value is a tombstone (a delete of ``key``)."""
    parsed_key = parse_key(key)
    if value is None and value_json is None:
        if parsed_key is None:
            raise DebeziumError("a tombstone (null value) without a key deletes nothing")
        return Change(None, DELETE, parsed_key)
    obj = loads(value_json if value_json is not None else value, "value")
    if not is_envelope(obj):
        raise DebeziumError(f"the value is not a Debezium envelope (op, source, before/after): "
                            f"{_short(obj)}")
    payload, schema = unwrap(obj)
    op = payload["op"]
    source = payload["source"]
    row, typed_by, errors, notes = None, None, (), ()
    if ACTIONS[op] == UPSERT:
        after = payload.get("after")
        if isinstance(after, str):
            row, typed_by, errors = _document(after)
            row, more, notes = convert_row(row, field_schema(typed_by, "after"), "after")
            errors += more
        elif not isinstance(after, dict):
            raise DebeziumError(_no_after(op, payload, after))
        elif schema is not None:
            after_schema = field_schema(schema, "after")
            if after_schema is None or str(after_schema.get("type", "")).lower() != "struct":
                raise DebeziumError("the envelope's schema has no 'after' struct")
            typed_by = schema
            row, errors, notes = convert_row(after, after_schema, "after")
        else:
            row = after
    return Change(op, ACTIONS[op], parsed_key, row,
                  source_ts_ms=_int_or_none(source.get("ts_ms"), "source.ts_ms"),
                  ts_ms=_int_or_none(payload.get("ts_ms"), "ts_ms"),
                  position={f: source[f] for f in POSITION_FIELDS if f in source},
                  schema=typed_by, errors=tuple(errors), notes=tuple(notes))


def _document(after: str) -> tuple[dict, dict, list]:
    """A MongoDB ``after`` (the document's Extended JSON text) as ``(row, envelope schema,
    errors)``: the document's top-level fields typed from their Extended JSON."""
    try:
        row, struct, errors = extended_json.columns(after)
    except extended_json.ExtendedJsonError as err:
        raise DebeziumError(f"after: a string that is no MongoDB document: {err}") from err
    return row, {"type": "struct", "fields": [{**struct, "field": "after"}]}, [
        (name, f"after.{name}: {why}") for name, why in errors]


def _no_after(op: str, payload: dict, after) -> str:
    """Why an upsert has no row, in the terms of the connector that wrote it."""
    if "updateDescription" in payload or "patch" in payload or \
            payload["source"].get("connector") == "mongodb":
        return (f"op {op!r} of MongoDB without the document's state: 'after' is "
                f"{_short(after)} and only the update's description ('updateDescription' or "
                f"'patch') says what changed (the connector's capture.mode does not look up "
                f"the full document); a cdc table row needs the whole document")
    return f"op {op!r} without an 'after' row: {_short(after)}"


def field_schema(struct: dict, name: str) -> dict | None:
    """The schema of field ``name`` of a Connect struct schema (None: no such field)."""
    for spec in struct.get("fields") or ():
        fname, fspec = _field(spec)
        if fname == name:
            return fspec
    return None


def _field(spec: dict) -> tuple[str, dict]:
    """A struct field's ``(name, schema)``: the JsonConverter writes the schema with the field
    name in it (``{"type", "field", ...}``); Debezium's documented key example nests it
    (``{"name", "index", "schema": {...}}``)."""
    if "field" in spec:
        return spec["field"], spec
    if isinstance(spec.get("schema"), dict) and "name" in spec:
        return spec["name"], spec["schema"]
    raise DebeziumError(f"a struct field without a name: {_short(spec)}")


# ------------------------------------------------------------------ typing by Connect schema
def convert_row(row: dict, schema: dict, path: str = "after"
                ) -> tuple[dict, list[tuple[str, str]], list[tuple[str, str]]]:
    """A row (a struct's JSON) typed column by column by its struct ``schema``: ``(row,
    errors, notes)``. A column whose value does not convert is null, with ``(column, why)``
    in ``errors``; a column whose Connect type is unknown here (:func:`column_type`) holds
    its value's JSON text, with ``(column, why)`` in ``notes``; a field the schema does not
    have is left out, with an error. One bad column never costs the row."""
    out: dict = {}
    errors: list[tuple[str, str]] = []
    notes: list[tuple[str, str]] = []
    names = set()
    for spec in schema.get("fields") or ():
        name, fspec = _field(spec)
        names.add(name)
        value = row.get(name)
        _, note = column_type(fspec)
        if note is not None:
            notes.append((name, f"{path}.{name}: {note}"))
            out[name] = None if value is None else json.dumps(
                value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
            continue
        try:
            out[name] = convert(value, fspec, f"{path}.{name}")
        except DebeziumError as err:
            out[name] = None
            errors.append((name, str(err)))
    for name in row.keys() - names:
        errors.append((name, f"{path}.{name}: a field the envelope's schema does not have "
                             f"({_short(row[name])})"))
    return out, errors, notes


def convert(value, schema: dict, path: str):
    """``value`` (as the JSON gives it) typed by its Connect ``schema``: ints range-checked,
    ``float``/``double`` (non-finite ones as the converter's strings), ``bytes`` from
    base64, maps as a JSON object or a list of pairs, the logical types of Debezium's
    temporal and decimal columns as ``date``/``datetime``/``time``/``Decimal``
    (:func:`arrow_type` gives their columns). Raises :class:`DebeziumError`."""
    if value is None:
        return None
    kind = str(schema.get("type", "")).lower()
    name = schema.get("name")
    try:
        if name is not None and name in _LOGICAL:
            return _LOGICAL[name](value, schema, path)
        if kind in _INT_BITS:
            return _int(value, _INT_BITS[kind], path)
        if kind in ("float", "double"):
            return _float(value, path)
        if kind == "boolean":
            if not isinstance(value, bool):
                raise DebeziumError(f"{path}: expected a boolean, got {_short(value)}")
            return value
        if kind == "string":
            if not isinstance(value, str):
                raise DebeziumError(f"{path}: expected a string, got {_short(value)}")
            return value
        if kind == "bytes":
            return _base64(value, path)
        if kind == "array":
            return [convert(v, schema.get("items") or {}, f"{path}[{i}]")
                    for i, v in enumerate(_typed(value, list, "an array", path))]
        if kind == "map":
            # string keys: a JSON object; other keys: a JSON array of [key, value] pairs
            pairs = value.items() if isinstance(value, dict) else _typed(value, list, "a map", path)
            out = {}
            for pair in pairs:
                if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                    raise DebeziumError(f"{path}: a map entry that is no [key, value] pair: "
                                        f"{_short(pair)}")
                k, v = pair
                out[convert(k, schema.get("keys") or {}, f"{path}.key")] = \
                    convert(v, schema.get("values") or {}, f"{path}[{k!r}]")
            return out
        if kind == "struct":
            obj = _typed(value, dict, "a struct", path)
            fields = [_field(spec) for spec in schema.get("fields") or ()]
            extra = obj.keys() - {n for n, _ in fields}
            if extra:
                raise DebeziumError(f"{path}: fields {sorted(extra)} are not in its schema")
            return {n: convert(obj.get(n), s, f"{path}.{n}") for n, s in fields}
    except (ValueError, TypeError, ArithmeticError, OverflowError) as err:
        if isinstance(err, DebeziumError):
            raise
        raise DebeziumError(f"{path}: {_short(value)} is not a {name or kind}: {err}") from err
    raise DebeziumError(f"{path}: unknown Connect schema type {schema.get('type')!r}")


def _typed(value, cls, what: str, path: str):
    if not isinstance(value, cls):
        raise DebeziumError(f"{path}: expected {what}, got {_short(value)}")
    return value


def _int(value, bits: int, path: str) -> int:
    # Debezium's documented key example writes an INT32 as "1": a decimal string is accepted
    if isinstance(value, str) and re.fullmatch(r"-?[0-9]+", value):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise DebeziumError(f"{path}: expected int{bits}, got {_short(value)}")
    if not -(1 << (bits - 1)) <= value < (1 << (bits - 1)):
        raise DebeziumError(f"{path}: {value} is out of the range of int{bits}")
    return value


def _int_or_none(value, path: str) -> int | None:
    return None if value is None else _int(value, 64, path)


def _float(value, path: str) -> float:
    # the JsonConverter writes non-finite floats as strings
    if isinstance(value, str) and value in ("NaN", "Infinity", "-Infinity"):
        return float(value.replace("Infinity", "inf"))
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise DebeziumError(f"{path}: expected a number, got {_short(value)}")
    return float(value)


def _base64(value, path: str) -> bytes:
    if not isinstance(value, str):
        raise DebeziumError(f"{path}: expected base64 text, got {_short(value)}")
    try:
        return base64.b64decode(value, validate=True)
    except binascii.Error as err:
        raise DebeziumError(f"{path}: {_short(value)} is not base64: {err}") from err


def _date(value, schema, path):
    return dt.date(1970, 1, 1) + dt.timedelta(days=_int(value, 32, path))


def _timestamp(unit: str):
    def conv(value, schema, path):
        return _EPOCH + dt.timedelta(**{unit: _int(value, 64, path)})
    return conv


def _nano_timestamp(value, schema, path):
    # nanoseconds since the epoch; the column holds microseconds (digits past them dropped)
    return _EPOCH + dt.timedelta(microseconds=_int(value, 64, path) // 1000)


_PAST_MICROS = re.compile(r"(\.[0-9]{6})[0-9]+")


def _zoned(value, schema, path):
    # ISO 8601 with a zone ("2018-06-20T13:37:03Z"); digits past microseconds are dropped
    text = _typed(value, str, "an ISO 8601 timestamp", path)
    parsed = dt.datetime.fromisoformat(_PAST_MICROS.sub(r"\1", text, count=1))
    if parsed.tzinfo is None:
        raise DebeziumError(f"{path}: {text!r} has no zone")
    return parsed.astimezone(dt.timezone.utc)


def _time(unit: str, bits: int, per_micro: int = 1):
    def conv(value, schema, path):
        count = _int(value, bits, path)
        of_day = dt.timedelta(**{unit: count // per_micro})
        if not dt.timedelta(0) <= of_day < dt.timedelta(days=1):
            raise DebeziumError(f"{path}: {value} {unit if per_micro == 1 else 'nanoseconds'} "
                                f"is not a time of day")
        return (_EPOCH + of_day).time()
    return conv


def _unscaled(data: bytes, scale: int) -> decimal.Decimal:
    """Connect's decimal bytes: the unscaled value, two's complement, most significant byte first."""
    unscaled = int(data.hex() or "0", 16)
    if data and data[0] & 0x80:
        unscaled -= 1 << (8 * len(data))
    return decimal.Decimal(f"{unscaled}E-{scale}")


def _decimal(value, schema, path):
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        # the JsonConverter's decimal.format=NUMERIC: a JSON number (default BASE64: the bytes)
        out = decimal.Decimal(str(value))
        if not out.is_finite():
            raise DebeziumError(f"{path}: {value!r} is not a decimal number")
        return out
    scale = int((schema.get("parameters") or {}).get("scale", 0))
    return _unscaled(_base64(value, path), scale)


def _variable_decimal(value, schema, path):
    obj = _typed(value, dict, "a struct {scale, value}", path)
    return _unscaled(_base64(obj.get("value"), f"{path}.value"),
                     _int(obj.get("scale"), 32, f"{path}.scale"))


_LOGICAL = {
    **{n: _date for n in DATE},
    **{n: _timestamp("milliseconds") for n in TIMESTAMP_MS},
    MICRO_TIMESTAMP: _timestamp("microseconds"),
    NANO_TIMESTAMP: _nano_timestamp,
    ZONED_TIMESTAMP: _zoned,
    **{n: _time("milliseconds", 32) for n in TIME_MS},
    MICRO_TIME: _time("microseconds", 64),
    NANO_TIME: _time("microseconds", 64, per_micro=1000),
    DECIMAL: _decimal,
    VARIABLE_SCALE_DECIMAL: _variable_decimal,
}


#: the column of each logical type :data:`_LOGICAL` converts (a Decimal's: :func:`arrow_type`)
LOGICAL_COLUMNS = {
    **{n: pa.date32() for n in DATE}, **{n: pa.timestamp("ms") for n in TIMESTAMP_MS},
    MICRO_TIMESTAMP: pa.timestamp("us"), NANO_TIMESTAMP: pa.timestamp("us"),
    ZONED_TIMESTAMP: pa.timestamp("us", tz="UTC"),
    **{n: pa.time64("us") for n in TIME_MS}, MICRO_TIME: pa.time64("us"),
    NANO_TIME: pa.time64("us"), VARIABLE_SCALE_DECIMAL: pa.string()}


def arrow_type(schema: dict) -> pa.DataType:
    """The Arrow column of values :func:`convert` gives for a Connect ``schema``. A decimal
    gets ``connect.decimal.precision`` digits (38 without it); one wider than
    :data:`MAX_PRECISION`, or with a scale outside 0..precision, and a variable-scale decimal
    (no fixed scale) are string columns (``str`` of the Decimal). Raises
    :class:`DebeziumError` for a type the JsonConverter does not write."""
    kind = str(schema.get("type", "")).lower()
    name = schema.get("name")
    if name in LOGICAL_COLUMNS:
        return LOGICAL_COLUMNS[name]
    if name == DECIMAL:
        params = schema.get("parameters") or {}
        try:
            precision = int(params.get("connect.decimal.precision", MAX_PRECISION))
            scale = int(params.get("scale", 0))
        except (TypeError, ValueError) as err:
            raise DebeziumError(f"a Decimal with parameters {params!r}: {err}") from err
        if not 0 <= scale <= precision <= MAX_PRECISION or precision == 0:
            return pa.string()
        return pa.decimal128(precision, scale)
    if kind in PRIMITIVES:
        return PRIMITIVES[kind]
    if kind == "array":
        return pa.list_(arrow_type(schema.get("items") or {}))
    if kind == "map":
        return pa.map_(arrow_type(schema.get("keys") or {}), arrow_type(schema.get("values") or {}))
    if kind == "struct":
        return pa.struct([pa.field(n, arrow_type(s)) for n, s in map(_field, schema.get("fields") or ())])
    raise DebeziumError(f"unknown Connect schema type {schema.get('type')!r}")


def column_type(schema: dict) -> tuple[pa.DataType, str | None]:
    """A source column's Arrow type and, for a Connect type unknown here, the note saying
    so: such a column is a string holding each value's JSON text."""
    try:
        return arrow_type(schema), None
    except DebeziumError as err:
        return pa.string(), f"{err}: kept as its JSON text"


def row_schema(envelope_schema: dict) -> pa.Schema:
    """The Arrow columns of the source table: the envelope schema's ``after`` struct, each
    by :func:`column_type`."""
    after = field_schema(envelope_schema, "after")
    if after is None or str(after.get("type", "")).lower() != "struct":
        raise DebeziumError("the envelope's schema has no 'after' struct")
    fields = map(_field, after.get("fields") or ())
    return pa.schema([pa.field(n, column_type(s)[0]) for n, s in fields])


def _short(value, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."

