"""Typed per-topic tables (issue 20, part 5; docs/tables.md "Typed tables", docs/schemas.md).

A topic whose values carry an **Avro**, **JSON Schema** or **Protobuf** schema of its subject
``<topic>-value`` (TopicNameStrategy) gets a table :func:`layout.typed_table_name` whose columns are the
record's fields (Protobuf: the fields of the ``.proto`` file's first top-level message,
:data:`TABLE_MESSAGE`), with the lineage columns :data:`LINEAGE` first. The driver plans each
topic from the registry (:func:`plan_topics`): the subject's versions in order, each
turned into Arrow types (:func:`arrow_type`) and merged into the table's columns
(:func:`merge`): a version that adds fields widens the table (Iceberg schema evolution,
``union_by_name``: new columns are optional, older rows read null); a version that changes
a field's type (or cannot be typed: a union of two non-null types, a recursive record) is
*incompatible*: its rows are not written to the typed table (they stay in
``records.value_json``) and each run records one ``schema_incompatible`` finding per
partition and schema id, as is a value that does not convert to the columns (a JSON
document may break its schema) and a Protobuf value whose message indexes name another
message than the table's (read from the raw ``value``, or its ``__value_schema_id`` header).

Rows come from the run's *deduplicated* ``records`` files (what the run commits: reruns and
overlapping snapshots never give a row twice), read on the executors, from ``value_json``:
the decoder already ran once per value and its output is what tests pin against the
serializers' input; the conversion back is type-directed and exact (bytes and fixed are
base64, timestamps and dates ISO 8601, an enum its symbol, a union its branch's value), and
needs no schema compilation on the executors. Protobuf's ``value_json`` omits fields at their
default value: the driver puts each version's per-field kinds and defaults in the plan
(:func:`protobuf_type`), and an absent field becomes its proto3 default (0, "", false, the
enum's first name, empty list or map) or null where the field has presence (``optional``,
oneof members, messages). A record whose value did not decode (``value_error``) or carries
a schema id that is not a version of the topic's value subject is not typed.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
import os
import tempfile

import pyarrow as pa
import pyarrow.parquet as pq

from kafkalog.schemas import VALUE_SCHEMA_HEADER, wire_header
from kafkalog.schemas.registry import AVRO, JSON, PROTOBUF
from kafkalog.schemas.wire import WireFormatError, read_message_indexes, schema_ref
from spark_jobs import layout, schemas, storage
from spark_jobs.internal_tables import FILE_ROWS, map_files

#: the lineage columns each typed row starts with (prefixed: a value field may be ``offset``)
LINEAGE = pa.schema([("kafka_topic", pa.string()), ("kafka_partition", pa.int32()),
                     ("kafka_offset", pa.int64()),
                     ("kafka_timestamp", schemas.RECORDS.field("timestamp").type),
                     ("kafka_schema_id", pa.int32()), ("run_id", pa.string())])
#: the value formats that get typed tables
TYPED_FORMATS = (AVRO, JSON, PROTOBUF)
#: the finding kind of rows whose schema version cannot join the topic's typed table
INCOMPATIBLE = "schema_incompatible"
#: the records columns a task reads
_READ = ("topic", "partition", "offset", "timestamp", "value_schema_id", "value_format",
         "value_error", "value_json", "segment", "segment_base_offset", "batch_position",
         "run_id")
#: what a Protobuf topic's task reads besides: the values' message indexes
_READ_INDEXES = ("value", "headers")
#: rows a task converts before it writes them
FLUSH_ROWS = 50_000

_PRIMITIVES = {"boolean": pa.bool_(), "int": pa.int32(), "long": pa.int64(),
               "float": pa.float32(), "double": pa.float64(), "bytes": pa.binary(),
               "string": pa.string()}


class Untyped(ValueError):
    """A schema that has no table form, or a version that does not fit the table."""


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
    if t in ("record", "error"):
        full = _full(s["name"], s.get("namespace", namespace))
        ns = full.rpartition(".")[0] or None
        fields = [pa.field(f["name"], arrow_type(f["type"], named, ns, building | {full}))
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
        return pa.struct([pa.field(n, json_schema_type(p, f"{where}.{n}"))
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
        if schema.references:
            raise Untyped("a JSON Schema with references")
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


_PB_CONVERT = {
    "int": int, "dec": lambda v: decimal.Decimal(int(v)), "float": float,
    "str": lambda v: v if isinstance(v, str) else _not(v, "a string"),
    "bool": lambda v: v if isinstance(v, bool) else _not(v, "a boolean"),
    "enum": lambda v: v if isinstance(v, str) else str(int(v)),  # an unknown number: its str
    "bytes": base64.b64decode, "ts": datetime.datetime.fromisoformat,
    "json": lambda v: json.dumps(v, ensure_ascii=False, separators=(",", ":"))}
#: map keys: MessageToDict writes them as strings
_PB_KEYS = {"int": int, "dec": lambda k: decimal.Decimal(int(k)), "str": str,
            "bool": {"true": True, "false": False}.__getitem__}


def _not(v, what):
    raise TypeError(f"{v!r} is not {what}")


def protobuf_converter(kind):
    """MessageToDict data of ``kind`` (a :func:`protobuf_type` spec item) -> column values;
    an absent field becomes its default."""
    if isinstance(kind, tuple) and kind[0] == "msg":
        convs = [(n, protobuf_converter(k), d) for n, k, d in kind[1]]

        def message(d):
            if d is None:
                return None
            out = {}
            for n, c, default in convs:
                v = d.get(n)
                out[n] = (list(default) if isinstance(default, list) else default) \
                    if v is None else c(v)
            return out
        return message
    if isinstance(kind, tuple) and kind[0] == "list":
        c = protobuf_converter(kind[1])
        return lambda xs: [c(x) for x in xs]
    if isinstance(kind, tuple) and kind[0] == "map":
        k, c = _PB_KEYS[kind[1]], protobuf_converter(kind[2])
        return lambda m: [(k(key), c(v)) for key, v in m.items()]
    return _PB_CONVERT[kind]


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


def _norm(t: pa.DataType) -> pa.DataType:
    """``t`` as this module writes it (what Iceberg reads back as large types, tz +00:00)."""
    if pa.types.is_large_string(t):
        return pa.string()
    if pa.types.is_large_binary(t):
        return pa.binary()
    if pa.types.is_timestamp(t):
        return pa.timestamp("us", tz="UTC")
    if pa.types.is_struct(t):
        return pa.struct([pa.field(t.field(i).name, _norm(t.field(i).type))
                          for i in range(t.num_fields)])
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.list_(_norm(t.value_type))
    if pa.types.is_map(t):
        return pa.map_(_norm(t.key_type), _norm(t.item_type))
    return t


def merge(old: pa.DataType, new: pa.DataType, where: str = "value") -> pa.DataType:
    """``old`` widened by the struct fields ``new`` adds; :class:`Untyped` where a type
    changes (no promotion: int -> long is a change here, stated in docs/schemas.md)."""
    old, new = _norm(old), _norm(new)
    if pa.types.is_struct(old) and pa.types.is_struct(new):
        have = {old.field(i).name: old.field(i).type for i in range(old.num_fields)}
        out = []
        for i in range(old.num_fields):
            f = old.field(i)
            j = new.get_field_index(f.name)
            out.append(f if j < 0 else pa.field(f.name, merge(f.type, new.field(j).type,
                                                               f"{where}.{f.name}")))
        out += [new.field(i) for i in range(new.num_fields) if new.field(i).name not in have]
        return pa.struct(out)
    if pa.types.is_list(old) and pa.types.is_list(new):
        return pa.list_(merge(old.value_type, new.value_type, f"{where}[]"))
    if pa.types.is_map(old) and pa.types.is_map(new):
        if old.key_type != new.key_type:
            raise Untyped(f"{where} changes its map keys from {old.key_type} to {new.key_type}")
        return pa.map_(old.key_type, merge(old.item_type, new.item_type, f"{where}{{}}"))
    if old != new:
        raise Untyped(f"{where} changes type from {old} to {new}")
    return old


class TopicPlan:
    """What the executors need for one topic: its table's data root and columns, the schema
    ids that go in, the incompatible ones with the reason, and per Protobuf schema id
    ``(spec, {message indexes: message name})`` (:func:`protobuf_plan`)."""

    def __init__(self, table: str, root: str, schema: pa.Schema, ok: set, bad: dict,
                 proto: dict | None = None):
        self.table, self.root, self.schema, self.ok, self.bad = table, root, schema, ok, bad
        self.proto = proto or {}

    def columns(self) -> tuple[str, ...]:
        """The records columns the executors read for this topic (Protobuf values: their
        message indexes too, from ``value`` and ``headers``)."""
        return _READ + (_READ_INDEXES if self.proto else ())


def plan_schemas(registry, topic: str, existing: pa.Schema | None) -> tuple[pa.Schema | None,
                                                                             set, dict]:
    """``(columns, ok ids, {bad id: reason})`` of ``topic``'s value subject (Avro, JSON
    Schema, Protobuf), its versions merged in order into ``existing`` (the table's value
    columns, if any)."""
    current = None if existing is None else pa.struct(list(existing))
    ok, bad = set(), {}
    for (subj, _version), sv in sorted(registry.versions.items()):
        schema = registry.by_id(sv.schema_id) if subj == subject(topic) else None
        if schema is None or schema.schema_type not in TYPED_FORMATS or sv.schema_id in ok:
            continue
        try:
            fields = pa.struct(list(value_schema(registry, sv.schema_id)))
            current = fields if current is None else merge(current, fields)
            ok.add(sv.schema_id)
        except Untyped as err:
            bad[sv.schema_id] = str(err)
        except Exception as err:  # a reference that does not resolve, a schema not JSON
            bad[sv.schema_id] = f"{type(err).__name__}: {err}"
    ok -= set(bad)
    cols = None if current is None else pa.schema([current.field(i)
                                                  for i in range(current.num_fields)])
    return cols, ok, bad


def protobuf_specs(registry, ids) -> dict:
    """``{schema id: (spec, {message indexes: name})}`` of the Protobuf schemas among ``ids``
    (:attr:`TopicPlan.proto`)."""
    out = {}
    for sid in sorted(ids):
        if registry.by_id(sid).schema_type == PROTOBUF:
            _, spec, names = protobuf_plan(registry, sid)
            out[sid] = (spec, names)
    return out


def plan_topics(wh, registry, topics) -> dict[str, TopicPlan]:
    """The typed tables of ``topics`` (made or evolved here, on the driver), by topic."""
    out = {}
    if registry is None:
        return out
    subjects = {s for s, _ in registry.versions}
    for topic in sorted(topics):
        if topic.startswith("_") or subject(topic) not in subjects:
            continue  # _schemas, Kafka's own topics, topics without a value subject
        name = layout.typed_table_name(topic)
        table = wh.load(name)
        existing = None
        if table is not None:
            arrow = table.schema().as_arrow()
            existing = pa.schema([f for f in arrow if f.name not in LINEAGE.names])
        cols, ok, bad = plan_schemas(registry, topic, existing)
        if cols is None or not ok and table is None:
            if bad:
                out[topic] = TopicPlan(name, "", LINEAGE, set(), bad)
            continue
        full = pa.schema(list(LINEAGE) + list(cols))
        table = wh.typed_table(name, full)
        out[topic] = TopicPlan(name, table.location().rstrip("/") + "/data", full, ok, bad,
                               protobuf_specs(registry, ok))
    return out


# ------------------------------------------------------------------ rows


def converter(t: pa.DataType):
    """``value_json`` data -> what ``pa.Table.from_pylist`` takes for type ``t``."""
    if pa.types.is_struct(t):
        convs = [(t.field(i).name, converter(t.field(i).type)) for i in range(t.num_fields)]
        return lambda d: None if d is None else {n: c(d.get(n)) for n, c in convs}
    if pa.types.is_list(t):
        c = converter(t.value_type)
        return lambda xs: None if xs is None else [c(x) for x in xs]
    if pa.types.is_map(t):
        c = converter(t.item_type)
        return lambda m: None if m is None else [(k, c(v)) for k, v in m.items()]
    if pa.types.is_binary(t):
        return lambda v: None if v is None else base64.b64decode(v)
    if pa.types.is_timestamp(t):
        return lambda v: None if v is None else datetime.datetime.fromisoformat(v)
    if pa.types.is_date(t):
        return lambda v: None if v is None else datetime.date.fromisoformat(v)
    return lambda v: v


def rows_of(records: pa.Table, plan: TopicPlan) -> tuple[pa.Table | None, dict]:
    """The typed rows of one topic's records and ``{(partition, schema id): [first
    offset, last offset, rows, segment, segment base offset, position, reason]}`` of the
    values that do not go in: an incompatible version, or a value that does not convert to
    the table's columns (not expected: value_json is the decoder's output for that schema;
    but never a crash)."""
    cols = {c: records.column(c).to_pylist() for c in plan.columns() if c in records.column_names}
    convert = converter(pa.struct(list(plan.schema)))
    proto = {sid: (protobuf_converter(("msg", spec)), names)
             for sid, (spec, names) in plan.proto.items()}
    rows, bad = [], {}

    def refuse(i, sid, reason):
        o = cols["offset"][i]
        b = bad.setdefault((cols["partition"][i], sid), [
            o, o, 0, cols["segment"][i], cols["segment_base_offset"][i],
            cols["batch_position"][i], reason])
        b[0], b[1], b[2] = min(b[0], o), max(b[1], o), b[2] + 1

    for i in range(records.num_rows):
        sid = cols["value_schema_id"][i]
        if cols["value_format"][i] not in TYPED_FORMATS or cols["value_error"][i] is not None \
                or sid is None:
            continue
        if sid in plan.bad:
            refuse(i, sid, plan.bad[sid])
            continue
        if sid not in plan.ok:
            continue
        try:
            if cols["value_format"][i] == PROTOBUF:
                conv, names = proto[sid]
                indexes = message_indexes(cols["value"][i], cols["headers"][i])
                if indexes != TABLE_MESSAGE:
                    refuse(i, sid, f"its message indexes {list(indexes)} name "
                                   f"{names.get(indexes, 'no message')}, not "
                                   f"{names[TABLE_MESSAGE]} (indexes {list(TABLE_MESSAGE)}, "
                                   "the table's message)")
                    continue
                row = conv(json.loads(cols["value_json"][i]))
            else:
                row = convert(json.loads(cols["value_json"][i]))
        except (ValueError, TypeError, AttributeError, KeyError, decimal.InvalidOperation) as err:
            refuse(i, sid, f"the value does not convert: {type(err).__name__}: {err}")
            continue
        row.update(kafka_topic=cols["topic"][i], kafka_partition=cols["partition"][i],
                   kafka_offset=cols["offset"][i], kafka_timestamp=cols["timestamp"][i],
                   kafka_schema_id=sid, run_id=cols["run_id"][i])
        rows.append((i, row))
    if not rows:
        return None, bad
    try:
        return pa.Table.from_pylist([r for _, r in rows], schema=plan.schema), bad
    except (pa.ArrowException, TypeError, ValueError):
        pass
    kept = []
    for i, row in rows:  # one by one, to name the rows that do not fit
        try:
            pa.Table.from_pylist([row], schema=plan.schema)
            kept.append(row)
        except (pa.ArrowException, TypeError, ValueError) as err:
            refuse(i, row["kafka_schema_id"],
                   f"the value does not fit the columns: {type(err).__name__}: {err}")
    return (pa.Table.from_pylist(kept, schema=plan.schema) if kept else None), bad


def _findings(topic: str, plan: TopicPlan, bad: dict, run_id: str) -> list[dict]:
    out = []
    for (partition, sid), (first, last, n, segment, base, position, why) in sorted(bad.items()):
        out.append(dict(
            topic=topic, partition=partition, kind=INCOMPATIBLE, position=position,
            end=position, base_offset=first, last_offset=last, bytes=None, raw=None,
            message=f"{n} value(s) at offsets {first}..{last} carry schema id {sid}, a version "
                    f"of {subject(topic)} that does not fit {plan.table}: {why}; "
                    "they are not in the typed table (records.value_json holds them)",
            segment=segment, segment_base_offset=base, run_id=run_id))
    return out


def topic_of(path: str) -> str | None:
    """The topic of a records file (its folder ``topic=<name>``: writing.partition_path)."""
    for part in path.split("/"):
        if part.startswith("topic="):
            return part[len("topic="):]
    return None




def derive(spark, ctx, wh, record_files: list[str], registry) -> tuple[dict, dict]:
    """The typed tables' data files of one submission (and their findings, under
    ``findings``), written on the executors from the run's deduplicated records files;
    ``({table: [file URIs]}, {table: rows})``. Nothing where no topic has a value subject."""
    from pyspark import TaskContext

    from spark_jobs.decode.writing import PartWriter, partition_path
    from spark_jobs.tables import read_file

    by_topic: dict[str, list[str]] = {}
    for path in record_files:
        by_topic.setdefault(topic_of(path), []).append(path)
    plans = plan_topics(wh, registry, [t for t in by_topic if t is not None])
    paths = [p for t in plans for p in by_topic[t]]
    if not paths:
        return {}, {}
    findings_root = ctx.roots["findings"]
    run_id = ctx.run_id

    def task(batches):
        part = f"typed{TaskContext.get().partitionId():05d}"
        tmp = tempfile.mkdtemp(prefix="kafkalog-typed-")
        out: list[tuple] = []
        findings: list[dict] = []
        try:
            for b in batches:
                for path in b.column("path").to_pylist():
                    topic = topic_of(path)
                    plan = plans[topic]
                    records = read_file(path, "records", ctx.s3).select(list(plan.columns()))
                    local, writer, n, bad = None, None, 0, {}
                    for piece in records.to_batches(FLUSH_ROWS):
                        typed, found = rows_of(pa.Table.from_batches([piece]), plan)
                        for k, v in found.items():
                            have = bad.setdefault(k, v)
                            if have is not v:
                                have[0], have[1] = min(have[0], v[0]), max(have[1], v[1])
                                have[2] += v[2]
                        if typed is None:
                            continue
                        if writer is None:
                            local = os.path.join(tmp, f"{len(out)}.parquet")
                            writer = pq.ParquetWriter(local, plan.schema)
                        writer.write_table(typed)
                        n += typed.num_rows
                    findings += _findings(topic, plan, bad, run_id)
                    if writer is not None:
                        writer.close()
                        key = f"{ctx.prefix}~{part}~{len(out)}.parquet"
                        storage.open_store(plan.root, ctx.s3).put_file(key, local)
                        out.append((plan.table, storage.join(plan.root, key), n))
            files = {}
            if findings:
                fw = PartWriter(ctx, part, {"findings": findings_root})
                for topic in sorted({f["topic"] for f in findings}):
                    fw.write("findings", partition_path(topic), pa.Table.from_pylist(
                        [f for f in findings if f["topic"] == topic], schema=schemas.FINDINGS))
                files = fw.commit()
        finally:
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
        rows = [{"table": t, "file": f, "rows": n} for t, f, n in out]
        rows += [{"table": "findings", "file": f, "rows": None} for f in files.get("findings", [])]
        rows += [{"table": "findings", "file": None, "rows": len(findings)}] if findings else []
        yield pa.RecordBatch.from_pylist(rows, schema=FILE_ROWS)

    return map_files(spark, paths, task)


__all__ = ["INCOMPATIBLE", "LINEAGE", "TABLE_MESSAGE", "TYPED_FORMATS", "TopicPlan", "Untyped",
           "arrow_type", "converter", "derive", "json_schema_type", "merge", "message_indexes",
           "plan_schemas", "plan_topics", "protobuf_converter", "protobuf_plan", "protobuf_specs",
           "protobuf_type",
           "rows_of", "value_schema"]
