"""Value schemas as Arrow types: the pure half of the typed tables (:mod:`spark_jobs.derive.typed`;
docs/schemas.md "Typed tables").

A Schema Registry version (Avro, JSON Schema, Protobuf) becomes the Arrow columns of its
topic's typed table (:func:`value_schema`: :func:`arrow_type`, :func:`json_schema_type`,
:func:`protobuf_type`), versions merge into one table's columns (:func:`merge`: a version
that adds fields widens it; where one changes a field's type the table's stays,
:func:`differences` names those fields), a field with no column form is a string column of
JSON text (:data:`JSON_TEXT`, :func:`text_columns`), and a decoded value
(``records.value_json``) converts back to those columns (:func:`converter`,
:func:`protobuf_converter`, then :func:`fit`): a value that does not convert or fit is null,
its column path and why reported, never raised. No Spark, no warehouse: the registry and
Arrow only.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json

import pyarrow as pa

from kafkalog.schemas import VALUE_SCHEMA_HEADER, wire_header
from kafkalog.schemas.registry import AVRO, JSON, PROTOBUF
from kafkalog.schemas.wire import WireFormatError, read_message_indexes, schema_ref
from spark_jobs import schemas

#: the lineage columns each typed row starts with (prefixed: a value field may be ``offset``)
LINEAGE = pa.schema([("kafka_topic", pa.string()), ("kafka_partition", pa.int32()),
                     ("kafka_offset", pa.int64()),
                     ("kafka_timestamp", schemas.RECORDS.field("timestamp").type),
                     ("kafka_schema_id", pa.int32()), ("run_id", pa.string())])
#: the value formats that get typed tables
TYPED_FORMATS = (AVRO, JSON, PROTOBUF)

_PRIMITIVES = {"boolean": pa.bool_(), "int": pa.int32(), "long": pa.int64(),
               "float": pa.float32(), "double": pa.float64(), "bytes": pa.binary(),
               "string": pa.string()}


class Untyped(ValueError):
    """A schema (or one field's) that has no column form."""


#: the field metadata key of a column kept as JSON text (its schema has no column form here;
#: the value is the reason); a version's own struct carries it (:func:`text_columns`), the
#: table's columns do not (:func:`plain`)
JSON_TEXT = b"kafkalog.json_text"


def _field(name: str, make) -> pa.Field:
    """``pa.field(name, make())``, or a JSON text column where ``make`` finds no column form."""
    try:
        return pa.field(name, make())
    except Untyped as err:
        return pa.field(name, pa.string(), metadata={JSON_TEXT: str(err).encode("utf-8")})


def path(where: str, name: str) -> str:
    """A column's path: ``dims.h``, ``labels[]``, ``tags{}``."""
    return f"{where}.{name}" if where else name


def text_columns(t: pa.DataType, where: str = "") -> dict[str, str]:
    """``{column path: reason}`` of the JSON text columns in a version's struct ``t``."""
    out: dict[str, str] = {}
    if pa.types.is_struct(t):
        for i in range(t.num_fields):
            f = t.field(i)
            if f.metadata and JSON_TEXT in f.metadata:
                out[path(where, f.name)] = f.metadata[JSON_TEXT].decode("utf-8")
            else:
                out.update(text_columns(f.type, path(where, f.name)))
    elif pa.types.is_list(t):
        out.update(text_columns(t.value_type, f"{where}[]"))
    elif pa.types.is_map(t):
        out.update(text_columns(t.item_type, f"{where}{{}}"))
    return out


def column_types(t: pa.DataType, where: str = "") -> dict[str, pa.DataType]:
    """``{column path: type}`` of every field, item and map value inside struct ``t``."""
    out: dict[str, pa.DataType] = {}
    if pa.types.is_struct(t):
        for i in range(t.num_fields):
            p = path(where, t.field(i).name)
            out[p] = t.field(i).type
            out.update(column_types(t.field(i).type, p))
    elif pa.types.is_list(t):
        out[f"{where}[]"] = t.value_type
        out.update(column_types(t.value_type, f"{where}[]"))
    elif pa.types.is_map(t):
        out[f"{where}{{}}"] = t.item_type
        out.update(column_types(t.item_type, f"{where}{{}}"))
    return out


def plain(schema: pa.Schema) -> pa.Schema:
    """``schema`` without field metadata (what a table is made with)."""
    return pa.schema([pa.field(f.name, normalized(f.type)) for f in schema])


def subject(topic: str) -> str:
    return f"{topic}-value"


def _full(name: str, namespace: str | None) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


def arrow_type(s, named: dict, namespace: str | None = None, building=frozenset()) -> pa.DataType:
    """The Arrow type of Avro schema ``s``; ``named`` collects (and resolves) named types.
    Every field is nullable: a column a later version adds reads null in older rows."""
    if isinstance(s, str):
        if s in _PRIMITIVES:
            return _PRIMITIVES[s]
        if s == "null":
            raise Untyped("a field of type null alone")
        for full in (_full(s, namespace), s):
            if full in building:
                raise Untyped(f"recursive record {full}")
            if full in named:
                return named[full]
        raise Untyped(f"unknown named type {s!r}")
    if isinstance(s, list):
        branches = [b for b in s if b != "null"]
        if len(branches) != 1:
            raise Untyped(f"a union of {len(branches)} non-null types")
        return arrow_type(branches[0], named, namespace, building)
    t, logical = s.get("type"), s.get("logicalType")
    if t == "long" and logical in ("timestamp-millis", "timestamp-micros"):
        return pa.timestamp("us", tz="UTC")
    if t == "int" and logical == "date":
        return pa.date32()
    if (t, logical) in (("int", "time-millis"), ("long", "time-micros")):
        return pa.time64("us")
    if t in ("bytes", "fixed") and logical == "decimal":
        precision, scale = s.get("precision"), s.get("scale", 0)
        column = pa.decimal128(precision, scale) if isinstance(precision, int) and \
            0 < precision <= 38 and isinstance(scale, int) and 0 <= scale <= precision \
            else pa.string()  # no Iceberg decimal (precision 1..38): the decimal's text
        if t == "fixed":
            named[_full(s["name"], s.get("namespace", namespace))] = column
        return column
    if t == "string" and logical == "uuid" or \
            t == "long" and logical in ("local-timestamp-millis", "local-timestamp-micros"):
        return pa.string()  # the UUID's text; a local timestamp's ISO text (it has no zone)
    if t in ("record", "error"):
        full = _full(s["name"], s.get("namespace", namespace))
        ns = full.rpartition(".")[0] or None
        fields = [_field(f["name"], lambda f=f: arrow_type(f["type"], named, ns,
                                                           building | {full}))
                  for f in s["fields"]]
        named[full] = pa.struct(fields)
        return named[full]
    if t in ("enum", "fixed"):
        full = _full(s["name"], s.get("namespace", namespace))
        named[full] = pa.string() if t == "enum" else pa.binary()
        return named[full]
    if t == "array":
        return pa.list_(arrow_type(s["items"], named, namespace, building))
    if t == "map":
        return pa.map_(pa.string(), arrow_type(s["values"], named, namespace, building))
    return arrow_type(t, named, namespace, building)


_JSON_PRIMITIVES = {"integer": pa.int64(), "number": pa.float64(), "boolean": pa.bool_()}
_JSON_FORMATS = {"date-time": pa.timestamp("us", tz="UTC"), "date": pa.date32()}


def json_schema_type(s, where: str = "value") -> pa.DataType:
    """The Arrow type of JSON Schema ``s``: ``object`` with ``properties`` -> struct (other
    properties are not typed), ``array`` with one ``items`` schema -> list, ``string``
    (``format`` ``date-time`` / ``date`` -> timestamp / date), ``integer`` -> int64,
    ``number`` -> float64, ``boolean``; ``["T", "null"]`` -> T. ``$ref``, the combinators
    (``oneOf`` ...) and a schema without a type have no column form (:class:`Untyped`)."""
    if not isinstance(s, dict):
        raise Untyped(f"{where}: schema {s!r} has no column form")
    for k in ("$ref", "oneOf", "anyOf", "allOf", "not", "if", "enum", "const"):
        if k in s and not (k in ("enum", "const") and "type" in s):
            raise Untyped(f"{where}: {k} has no column form")
    t = s.get("type")
    if isinstance(t, list):
        rest = [x for x in t if x != "null"]
        if len(rest) != 1:
            raise Untyped(f"{where}: a union of {len(rest)} non-null types")
        t = rest[0]
    if t == "object":
        props = s.get("properties") or {}
        if not isinstance(props, dict):
            raise Untyped(f"{where}: properties is not an object")
        return pa.struct([_field(n, lambda n=n, p=p: json_schema_type(p, f"{where}.{n}"))
                          for n, p in props.items()])
    if t == "array":
        return pa.list_(json_schema_type(s.get("items"), f"{where}[]"))
    if t == "string":
        return _JSON_FORMATS.get(s.get("format"), pa.string())
    if t in _JSON_PRIMITIVES:
        return _JSON_PRIMITIVES[t]
    raise Untyped(f"{where}: type {t!r} has no column form")


def value_schema(registry, schema_id: int) -> pa.Schema:
    """The columns of an Avro value schema (a record), referenced schemas resolved, of a
    JSON Schema (an object; references have no column form yet), or of a Protobuf schema's
    table message (:func:`protobuf_plan`)."""
    named: dict = {}
    seen: set[int] = set()
    if registry.by_id(schema_id).schema_type == PROTOBUF:
        return _columns(protobuf_plan(registry, schema_id)[0])
    if registry.by_id(schema_id).schema_type == JSON:
        schema = registry.by_id(schema_id)
        top = json_schema_type(json.loads(schema.text))
        if not pa.types.is_struct(top):
            raise Untyped(f"the value schema is {top}, not an object")
        return _columns(top)

    def parse(s, depth=0):
        if depth > 32:
            raise Untyped("references nest deeper than 32")
        for ref in s.references:
            r = registry.resolve(ref)
            if r.id not in seen:
                seen.add(r.id)
                parse(r, depth + 1)
        return arrow_type(json.loads(s.text), named)

    top = parse(registry.by_id(schema_id))
    if not pa.types.is_struct(top):
        raise Untyped(f"the value schema is {top}, not a record")
    return _columns(top)


# ---------------------------------------------------------------- Protobuf
#: the table's message: the first top-level message of the subject's ``.proto`` file
TABLE_MESSAGE = (0,)
_WK = "google.protobuf."
#: well-known wrappers: their column is the scalar they wrap (null when absent)
_WRAPPERS = {f"{_WK}{n}Value": t for n, t in (
    ("Double", "double"), ("Float", "float"), ("Int64", "int64"), ("UInt64", "uint64"),
    ("Int32", "int32"), ("UInt32", "uint32"), ("Bool", "bool"), ("String", "string"),
    ("Bytes", "bytes"))}
#: well-known types whose column is the JSON text of what MessageToDict gave
_JSON_TEXT = {f"{_WK}{n}" for n in ("Duration", "Struct", "Value", "ListValue", "Any",
                                    "FieldMask", "Empty")}
#: Protobuf scalar -> (Arrow type, how value_json holds it, the proto3 default as a column value)
_PB_SCALARS = {
    "double": (pa.float64(), "float", 0.0), "float": (pa.float32(), "float", 0.0),
    "int32": (pa.int32(), "int", 0), "sint32": (pa.int32(), "int", 0),
    "sfixed32": (pa.int32(), "int", 0), "uint32": (pa.int64(), "int", 0),
    "fixed32": (pa.int64(), "int", 0), "int64": (pa.int64(), "int", 0),
    "sint64": (pa.int64(), "int", 0), "sfixed64": (pa.int64(), "int", 0),
    "uint64": (pa.decimal128(20, 0), "dec", decimal.Decimal(0)),
    "fixed64": (pa.decimal128(20, 0), "dec", decimal.Decimal(0)),
    "bool": (pa.bool_(), "bool", False), "string": (pa.string(), "str", ""),
    "bytes": (pa.binary(), "bytes", b"")}


def _pb_scalar_names() -> dict[int, str]:
    from google.protobuf.descriptor import FieldDescriptor as F

    return {getattr(F, f"TYPE_{n.upper()}"): n for n in _PB_SCALARS}


def protobuf_type(message, building=frozenset()) -> tuple[pa.DataType, tuple]:
    """``(struct type, spec)`` of a Protobuf message descriptor. The spec is what the
    executors convert ``value_json`` with (they get no descriptors): a tuple of
    ``(field name, kind, default)``, kind ``"int"``, ``"dec"``, ``"float"``, ``"str"``,
    ``"enum"``, ``"bool"``, ``"bytes"``, ``"ts"``, ``"json"``, ``("msg", spec)``,
    ``("list", kind)`` or ``("map", key kind, value kind)``; default: the column value of an
    absent field (proto3 without presence: its zero value; with presence: None)."""
    from google.protobuf.descriptor import FieldDescriptor as F

    scalars = _pb_scalar_names()
    full = message.full_name
    if full in building:
        raise Untyped(f"recursive message {full}")
    building = building | {full}

    def value_type(f, where) -> tuple[pa.DataType, object, object]:
        if f.type in (F.TYPE_MESSAGE, F.TYPE_GROUP):
            name = f.message_type.full_name
            if name == f"{_WK}Timestamp":
                return pa.timestamp("us", tz="UTC"), "ts", None
            if name in _WRAPPERS:
                t, kind, _ = _PB_SCALARS[_WRAPPERS[name]]
                return t, kind, None
            if name in _JSON_TEXT:
                return pa.string(), "json", None
            t, spec = protobuf_type(f.message_type, building)
            return t, ("msg", spec), None
        if f.type == F.TYPE_ENUM:
            default = f.enum_type.values_by_number.get(f.default_value, f.enum_type.values[0])
            return pa.string(), "enum", default.name
        if f.type not in scalars:
            raise Untyped(f"{where}: field type {f.type} has no column form")
        return _PB_SCALARS[scalars[f.type]]

    fields, spec = [], []
    for f in message.fields:
        where = f"{full}.{f.name}"
        try:
            if f.message_type is not None and f.message_type.GetOptions().map_entry:
                entry = f.message_type
                kt, kk, _ = value_type(entry.fields_by_name["key"], where)
                vt, vk, _ = value_type(entry.fields_by_name["value"], where)
                t, kind, default = pa.map_(kt, vt), ("map", kk, vk), []
            elif f.is_repeated:
                it, ik, _ = value_type(f, where)
                t, kind, default = pa.list_(it), ("list", ik), []
            else:
                t, kind, default = value_type(f, where)
                if f.has_presence:
                    default = None
            fields.append(pa.field(f.name, t))
        except Untyped as err:  # a recursive message: the field's MessageToDict as JSON text
            fields.append(pa.field(f.name, pa.string(),
                                   metadata={JSON_TEXT: str(err).encode("utf-8")}))
            kind, default = "json", None
        spec.append((f.name, kind, default))
    return pa.struct(fields), tuple(spec)


def _message_names(fdp) -> dict[tuple[int, ...], str]:
    """``{message indexes: full name}`` of every message a FileDescriptorProto defines."""
    out = {}

    def walk(types, prefix, path):
        for i, m in enumerate(types):
            out[path + (i,)] = prefix + m.name
            walk(m.nested_type, f"{prefix}{m.name}.", path + (i,))

    walk(fdp.message_type, f"{fdp.package}." if fdp.package else "", ())
    return out


def protobuf_plan(registry, schema_id: int) -> tuple[pa.StructType, tuple, dict]:
    """``(struct type, spec, {message indexes: name})`` of Protobuf schema ``schema_id``'s
    table message (:data:`TABLE_MESSAGE`), from the decoder's own descriptors."""
    from google.protobuf import descriptor_pb2

    from kafkalog.schemas.decoders import decoder_for

    desc = decoder_for(registry, registry.by_id(schema_id)).message_class(TABLE_MESSAGE).DESCRIPTOR
    fdp = descriptor_pb2.FileDescriptorProto()
    desc.file.CopyToProto(fdp)
    t, spec = protobuf_type(desc)
    return t, spec, _message_names(fdp)


def _integral(v) -> int:
    """An integer column's value: an int (int64 as text, Protobuf's JSON), or a float with no
    fraction (JSON Schema's ``1.0`` is an integer); never a bool, never truncated (Arrow
    would take 1.5 as 1)."""
    if isinstance(v, bool):
        _not(v, "an integer")
    if isinstance(v, int):
        return v
    if isinstance(v, str):
        return int(v)
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return _not(v, "an integer")


def _number(v) -> float:
    """A float column's value: a number (NaN and the infinities as text too); never a bool
    (Arrow would take true as 1.0)."""
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        _not(v, "a number")
    return float(v)


_PB_CONVERT = {
    "int": _integral, "dec": lambda v: decimal.Decimal(_integral(v)), "float": _number,
    "str": lambda v: v if isinstance(v, str) else _not(v, "a string"),
    "bool": lambda v: v if isinstance(v, bool) else _not(v, "a boolean"),
    "enum": lambda v: v if isinstance(v, str) else str(int(v)),  # an unknown number: its str
    "bytes": lambda v: base64.b64decode(v, validate=True),
    "ts": datetime.datetime.fromisoformat, "json": lambda v: _json_text(v)}
#: map keys: MessageToDict writes them as strings
_PB_KEYS = {"int": int, "dec": lambda k: decimal.Decimal(int(k)), "str": str,
            "bool": {"true": True, "false": False}.__getitem__}
#: what a value that does not convert raises (binascii.Error is a ValueError)
_CONVERT_ERRORS = (ValueError, TypeError, AttributeError, KeyError, IndexError,
                   decimal.InvalidOperation, OverflowError)


def _not(v, what):
    raise TypeError(f"{v!r:.80} is not {what}")


def _json_text(v) -> str:
    return json.dumps(v, ensure_ascii=False, separators=(",", ":"))


def _leaf(f):
    """A converter ``c(v, bad, where)`` of ``f``: a value ``f`` refuses is None, its column
    path and why appended to ``bad``."""
    def c(v, bad, where):
        if v is None:
            return None
        try:
            return f(v)
        except _CONVERT_ERRORS as err:
            bad.append((where, f"{v!r:.120} does not convert: {type(err).__name__}: {err}"))
            return None
    return c


def _items(c, suffix: str):
    def items(xs, bad, where):
        if xs is None:
            return None
        if not isinstance(xs, list):
            bad.append((where, f"{xs!r:.120} is not an array"))
            return None
        return [c(x, bad, where + suffix) for x in xs]
    return items


def _entries(key, c):
    """A map's converter: ``key`` converts its keys (a key it refuses costs the whole map)."""
    def entries(m, bad, where):
        if m is None:
            return None
        try:
            keys = [key(k) for k in m]
        except _CONVERT_ERRORS as err:
            bad.append((where, f"{m!r:.120} is not a map of its keys: {type(err).__name__}: {err}"))
            return None
        return [(k, c(v, bad, f"{where}{{}}")) for k, v in zip(keys, m.values())]
    return entries


def _object(convs, fill: bool):
    """A struct's converter over ``convs`` ``(name, converter, default)``; ``fill``: an absent
    field is its default (Protobuf), else null."""
    def obj(d, bad, where):
        if d is None:
            return None
        if not isinstance(d, dict):
            bad.append((where or "(value)", f"{d!r:.120} is not an object"))
            return None
        out = {}
        for n, c, default in convs:
            v = d.get(n)
            if v is None:
                out[n] = (list(default) if isinstance(default, list) else default) if fill \
                    else None
            else:
                out[n] = c(v, bad, path(where, n))
        return out
    return obj


def protobuf_converter(kind):
    """MessageToDict data of ``kind`` (a :func:`protobuf_type` spec item) -> column values,
    ``c(value, bad, where)``; an absent field becomes its default; a value that does not
    convert is None, ``(column path, why)`` appended to ``bad``."""
    if isinstance(kind, tuple) and kind[0] == "msg":
        return _object([(n, protobuf_converter(k), d) for n, k, d in kind[1]], fill=True)
    if isinstance(kind, tuple) and kind[0] == "list":
        return _items(protobuf_converter(kind[1]), "[]")
    if isinstance(kind, tuple) and kind[0] == "map":
        return _entries(_PB_KEYS[kind[1]], protobuf_converter(kind[2]))
    return _leaf(_PB_CONVERT[kind])


def message_indexes(value: bytes, headers) -> tuple[int, ...]:
    """The message indexes of a Protobuf value in the wire format (``headers``: the records
    column's ``{key, value}`` items; a ``__value_schema_id`` header holds them there)."""
    hs = [(h["key"], h["value"]) for h in headers] if headers else ()
    ref = schema_ref(value, wire_header(hs, VALUE_SCHEMA_HEADER))
    if ref is None:
        raise WireFormatError("not in the wire format")
    return tuple(read_message_indexes(ref.payload)[0])


def _columns(top: pa.StructType) -> pa.Schema:
    fields = [top.field(i) for i in range(top.num_fields)]
    clash = sorted({f.name for f in fields} & set(LINEAGE.names))
    if clash:
        raise Untyped(f"field(s) {clash} clash with the lineage columns")
    return pa.schema(fields)


def normalized(t: pa.DataType, *, keep_zone: bool = False) -> pa.DataType:
    """``t`` as this module writes it (what Iceberg reads back as large types, tz +00:00);
    ``keep_zone``: a timestamp without a zone stays without (Iceberg's ``timestamp`` beside
    ``timestamptz``: a table whose columns have both, the cdc tables')."""
    if pa.types.is_large_string(t):
        return pa.string()
    if pa.types.is_large_binary(t):
        return pa.binary()
    if pa.types.is_timestamp(t):
        return pa.timestamp("us", tz=None if keep_zone and t.tz is None else "UTC")
    if pa.types.is_struct(t):
        return pa.struct([pa.field(t.field(i).name, normalized(t.field(i).type,
                                                               keep_zone=keep_zone))
                          for i in range(t.num_fields)])
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.list_(normalized(t.value_type, keep_zone=keep_zone))
    if pa.types.is_map(t):
        return pa.map_(normalized(t.key_type, keep_zone=keep_zone),
                       normalized(t.item_type, keep_zone=keep_zone))
    return t


def merge(old: pa.DataType, new: pa.DataType) -> pa.DataType:
    """``old`` widened by the struct fields ``new`` adds (nested too); where a type changes
    (no promotion: int -> long is a change here, stated in docs/schemas.md) ``old``'s stays:
    that version's values of the field are null in its rows (:func:`differences`)."""
    old, new = normalized(old), normalized(new)
    if pa.types.is_struct(old) and pa.types.is_struct(new):
        have = {old.field(i).name for i in range(old.num_fields)}
        out = []
        for i in range(old.num_fields):
            f = old.field(i)
            j = new.get_field_index(f.name)
            out.append(f if j < 0 else pa.field(f.name, merge(f.type, new.field(j).type)))
        out += [new.field(i) for i in range(new.num_fields) if new.field(i).name not in have]
        return pa.struct(out)
    if pa.types.is_list(old) and pa.types.is_list(new):
        return pa.list_(merge(old.value_type, new.value_type))
    if pa.types.is_map(old) and pa.types.is_map(new) and old.key_type == new.key_type:
        return pa.map_(old.key_type, merge(old.item_type, new.item_type))
    return old


def differences(column: pa.DataType, version: pa.DataType, where: str = "",
                text=frozenset()) -> dict[tuple[str, ...], str]:
    """``{field names from the top: why}`` of the fields a version types otherwise than the
    table's columns (through structs; a list or map whose items differ is one), but the JSON
    text columns ``text`` (paths), which hold any version's value as its JSON text."""
    col, ver = normalized(column), normalized(version)
    if where in text and pa.types.is_string(col):
        return {}
    if pa.types.is_struct(col) and pa.types.is_struct(ver):
        out = {}
        for i in range(ver.num_fields):
            f = ver.field(i)
            j = col.get_field_index(f.name)
            if j >= 0:
                for names, why in differences(col.field(j).type, f.type, path(where, f.name),
                                              text).items():
                    out[(f.name,) + names] = why
        return out
    inner = {}
    if pa.types.is_list(col) and pa.types.is_list(ver):
        inner = differences(col.value_type, ver.value_type, f"{where}[]", text)
    elif pa.types.is_map(col) and pa.types.is_map(ver) and col.key_type == ver.key_type:
        inner = differences(col.item_type, ver.item_type, f"{where}{{}}", text)
    elif col != ver:
        return {(): f"its schema version types {where} as {ver}, the table's column is {col}"}
    return {(): next(iter(inner.values()))} if inner else {}  # the whole list or map



# ------------------------------------------------------------------ rows


def converter(t: pa.DataType, text=frozenset(), where: str = ""):
    """``value_json`` data -> what ``pa.Table.from_pylist`` takes for type ``t``, as
    ``c(value, bad, where)``: a value that does not convert is None, ``(column path, why)``
    appended to ``bad``; a path in ``text`` (:func:`text_columns`) holds the value's JSON
    text."""
    if where in text and pa.types.is_string(t):
        return _leaf(_json_text)
    if pa.types.is_struct(t):
        return _object([(t.field(i).name, converter(t.field(i).type, text,
                                                    path(where, t.field(i).name)), None)
                        for i in range(t.num_fields)], fill=False)
    if pa.types.is_list(t):
        return _items(converter(t.value_type, text, f"{where}[]"), "[]")
    if pa.types.is_map(t):
        return _entries(str, converter(t.item_type, text, f"{where}{{}}"))
    if pa.types.is_binary(t):
        return _leaf(lambda v: base64.b64decode(v, validate=True))
    if pa.types.is_timestamp(t):
        return _leaf(datetime.datetime.fromisoformat)
    if pa.types.is_date(t):
        return _leaf(datetime.date.fromisoformat)
    if pa.types.is_time(t):
        return _leaf(datetime.time.fromisoformat)
    if pa.types.is_decimal(t):
        return _leaf(lambda v: decimal.Decimal(v) if isinstance(v, (str, int))
                     else _not(v, "a decimal's text"))
    if pa.types.is_integer(t):
        return _leaf(lambda v: _integral(v) if not isinstance(v, str) else _not(v, "an integer"))
    if pa.types.is_floating(t):
        return _leaf(lambda v: v if isinstance(v, (int, float)) and not isinstance(v, bool)
                     else _not(v, "a number"))
    return lambda v, bad, where: v


#: what Arrow raises for a value that does not fit its column
FIT_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError,
              ValueError, OverflowError)


def fit(rows: list[dict], schema: pa.Schema) -> tuple[pa.Table, list[tuple[int, str, str]]]:
    """``rows`` as a table of ``schema``, and ``[(row, column path, why)]`` of the cells that
    did not fit their columns, each null in a row that is kept (a struct cell: only the
    fields that do not fit). One pass where all fit; cell by cell only in a column that
    does not."""
    try:
        return pa.Table.from_pylist(rows, schema=schema), []
    except FIT_ERRORS:
        pass
    bad: list[tuple[int, str, str]] = []
    for f in schema:
        try:
            pa.array([r.get(f.name) for r in rows], f.type)
            continue
        except FIT_ERRORS:
            pass
        for j, r in enumerate(rows):
            r[f.name] = _fit_cell(r.get(f.name), f.type, f.name, j, bad)
    return pa.Table.from_pylist(rows, schema=schema), bad


def _fit_cell(v, t: pa.DataType, where: str, j: int, bad: list):
    try:
        pa.array([v], t)
        return v
    except FIT_ERRORS as err:
        if pa.types.is_struct(t) and isinstance(v, dict):
            return {t.field(i).name: _fit_cell(v.get(t.field(i).name), t.field(i).type,
                                               path(where, t.field(i).name), j, bad)
                    for i in range(t.num_fields)}
        bad.append((j, where, f"{v!r:.120} does not fit {t}: {type(err).__name__}: {err}"))
        return None


__all__ = ["FIT_ERRORS", "JSON_TEXT", "LINEAGE", "TABLE_MESSAGE", "TYPED_FORMATS", "Untyped",
           "arrow_type", "column_types", "converter", "differences", "fit", "json_schema_type", "merge",
           "message_indexes", "normalized", "path", "plain", "protobuf_converter",
           "protobuf_plan", "protobuf_type", "subject", "text_columns", "value_schema"]
