"""Decoders per schema format; one is compiled per schema id on first use and cached.

Each decoder takes the payload after the schema id (``memoryview``; for Protobuf the
message indexes first) and returns plain JSON-ready data:

* **Avro** (fastavro ``schemaless_reader``; referenced schemas are parsed first into one
  ``named_schemas`` dict so their named types resolve): records as objects, a union as
  its branch's bare value, enums as symbols, maps as objects, bytes and fixed as
  standard base64. Logical types come back as fastavro converts them and are rendered
  as JSON can hold them: timestamps, dates and times in ISO 8601, decimals and UUIDs
  as strings. A logical value fastavro cannot convert (a timestamp beyond year 9999, a
  ``uuid`` string that is no UUID) does not cost the record: the datum is read again
  without logical types and that value stays as the bytes hold it (the long, the string),
  the others converted as above. Bytes left after the datum are malformed.
* **JSON Schema**: the JSON document itself; it is validated, and a document that does not
  validate is still decoded, its violations reported beside it (:func:`kafkalog.schemas.decode_one`).
* **Protobuf**: ``MessageToDict(msg, preserving_proto_field_name=True)`` of the message
  the indexes name. A schema registered as base64 ``FileDescriptorProto`` goes straight
  into a ``DescriptorPool``; ``.proto`` text is compiled with ``protoc`` from
  grpcio-tools (in process, ``--descriptor_set_out``), references written beside it
  under their import names; well-known imports (``google/protobuf/*.proto``) come from
  protobuf's own descriptors (or protoc's include folder for text).
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import decimal
import importlib
import io
import json
import os
import tempfile
import uuid
from typing import Callable

from .registry import AVRO, JSON, PROTOBUF, Registry, RegistryError, Schema, decode_descriptor
from .wire import WireFormatError, read_message_indexes

#: ``decode(payload, message_indexes=None)``; the indexes matter to Protobuf only
Decoder = Callable[..., object]


class PayloadError(WireFormatError):
    """A payload that its schema does not read (truncated, wrong bytes, bytes left over)."""


def decoder_for(registry: Registry, schema: Schema) -> Decoder:
    """The cached decoder of ``schema``; :class:`RegistryError` if it does not compile."""
    dec = registry.decoders.get(schema.id)
    if dec is None:
        if isinstance(dec := registry.decoders.get(("error", schema.id)), RegistryError):
            raise dec
        try:
            dec = _COMPILERS[schema.schema_type](registry, schema)
        except RegistryError as err:
            registry.decoders[("error", schema.id)] = err
            raise
        except Exception as err:  # the schema libraries' own parse errors, at one boundary
            e = RegistryError(f"schema id {schema.id} ({schema.schema_type}) does not compile: {err}")
            registry.decoders[("error", schema.id)] = e
            raise e from err
        registry.decoders[schema.id] = dec
    return dec


# -------------------------------------------------------------------- Avro
def _jsonable(v):
    """fastavro's datum as plain JSON data (bytes base64, logical types as strings)."""
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_jsonable(x) for x in v]
    if isinstance(v, (bytes, bytearray)):
        return base64.b64encode(v).decode("ascii")
    if isinstance(v, (datetime.datetime, datetime.date, datetime.time)):
        return v.isoformat()
    if isinstance(v, (decimal.Decimal, uuid.UUID)):
        return str(v)
    return v


def _avro_renderer(parsed, named: dict):
    """What turns fastavro's datum of ``parsed`` into JSON data, in place, visiting only the
    parts of the schema that need it (bytes, fixed, logical types); None when the datum is
    JSON data as it comes (no walk, no copy: the common case). A union, a logical type and
    a recursive reference that need it go through :func:`_jsonable` (by the value's type)."""
    building: set[str] = set()
    by_name: dict[str, object] = {}

    def needs(s, seen: set[str]) -> bool:
        if isinstance(s, str):
            if s == "bytes":
                return True
            if s in named and s not in seen:
                seen.add(s)
                return needs(named[s], seen)
            return False
        if isinstance(s, list):
            return any(needs(b, seen) for b in s)
        if "logicalType" in s:
            return True
        t = s.get("type")
        if t in ("record", "error"):
            return any(needs(f["type"], seen) for f in s.get("fields", ()))
        if t == "array":
            return needs(s["items"], seen)
        if t == "map":
            return needs(s["values"], seen)
        if t in ("fixed", "enum"):
            return t == "fixed"
        return needs(t, seen)

    def of(s):
        if not needs(s, set()):
            return None
        if isinstance(s, str):
            if s == "bytes":
                return _jsonable
            if s in by_name:
                return by_name[s]
            if s in building:  # a recursive type that needs rendering: by value, below here
                return _jsonable
            building.add(s)
            by_name[s] = of(named[s])
            building.discard(s)
            return by_name[s]
        if isinstance(s, list) or "logicalType" in s:
            return _jsonable
        t = s["type"]
        if t in ("record", "error"):
            if s.get("name") in named:
                building.add(s["name"])
            convert = [(f["name"], c) for f in s["fields"] if (c := of(f["type"])) is not None]
            building.discard(s.get("name"))

            def record(d):
                for name, c in convert:
                    d[name] = c(d[name])
                return d
            return record
        if t == "array":
            item = of(s["items"])
            return lambda xs: [item(x) for x in xs]
        if t == "map":
            value = of(s["values"])
            return lambda m: {k: value(v) for k, v in m.items()}
        if t == "fixed":
            return _jsonable
        return of(t)

    return of(parsed)


def _plain(s):
    """Avro schema ``s`` (JSON) without its logical types: the types they annotate."""
    if isinstance(s, list):
        return [_plain(b) for b in s]
    if not isinstance(s, dict):
        return s
    out = {k: v for k, v in s.items() if k != "logicalType"}
    for k in ("type", "items", "values"):
        if k in out:
            out[k] = _plain(out[k])
    if isinstance(out.get("fields"), list):
        out["fields"] = [{**f, "type": _plain(f.get("type"))} if isinstance(f, dict) else f
                         for f in out["fields"]]
    return out


#: the Python types of an Avro type's values as fastavro reads them (a union's branch)
_AVRO_PY = {"null": (type(None),), "boolean": (bool,), "int": (int,), "long": (int,),
            "float": (float, int), "double": (float, int), "bytes": (bytes,), "string": (str,),
            "record": (dict,), "error": (dict,), "map": (dict,), "array": (list,),
            "fixed": (bytes,), "enum": (str,)}


def _lenient_renderer(parsed, named: dict):
    """What renders a datum read *without* logical types (:func:`_plain`) as the decoder
    renders one read with them: each logical value converted by fastavro's own reader,
    and one that does not convert (a timestamp beyond year 9999, a ``uuid`` string that is
    no UUID) left as it is in the bytes (the long, the string, the bytes as base64), so
    one bad value never costs the record."""
    from fastavro.read import LOGICAL_READERS

    def fits(s, v) -> bool:  # whether a union's branch ``s`` holds value ``v``
        if isinstance(s, str) and s in named:
            s = named[s]
        t = s if isinstance(s, str) else s.get("type")
        if isinstance(t, dict):
            return fits(t, v)
        return isinstance(v, _AVRO_PY.get(t, ())) and (t == "boolean" or not isinstance(v, bool))

    def render(s, v):
        if v is None:
            return None
        if isinstance(s, str):
            return render(named[s], v) if s in named else _jsonable(v)
        if isinstance(s, list):
            return next((render(b, v) for b in s if fits(b, v)), _jsonable(v))
        t, logical = s.get("type"), s.get("logicalType")
        if logical is not None and isinstance(t, str):
            reader = LOGICAL_READERS.get(f"{t}-{logical}")
            try:
                return _jsonable(v if reader is None else reader(v, s, s))
            except Exception:  # the value as it is in the bytes
                return _jsonable(v)
        if t in ("record", "error"):
            return {f["name"]: render(f["type"], v.get(f["name"])) for f in s["fields"]}
        if t == "array":
            return [render(s["items"], x) for x in v]
        if t == "map":
            return {k: render(s["values"], x) for k, x in v.items()}
        if t in ("fixed", "enum"):
            return _jsonable(v)
        return render(t, v)

    return lambda datum: render(parsed, datum)


def _avro(registry: Registry, schema: Schema) -> Decoder:
    from fastavro import parse_schema, schemaless_reader

    def parse(s: Schema, named: dict, seen: set, strip=lambda x: x, depth: int = 0):
        if depth > 32:
            raise RegistryError(f"schema id {schema.id}: references nest deeper than 32")
        for ref in s.references:
            r = registry.resolve(ref)
            if r.id not in seen:
                seen.add(r.id)
                parse(r, named, seen, strip, depth + 1)
        return parse_schema(strip(json.loads(s.text)), named_schemas=named)

    named: dict = {}
    parsed = parse(schema, named, set())
    render = _avro_renderer(parsed, named)
    logical = _has_logical(schema, registry)
    lenient: list = []  # (plain schema, renderer), made on the first value that needs it

    def read(payload: memoryview, schema_):
        buf = io.BytesIO(payload)
        try:
            datum = schemaless_reader(buf, schema_, None)
        except Exception as err:  # fastavro raises EOFError, StopIteration, UnicodeDecodeError, ...
            raise PayloadError(f"Avro payload of {len(payload)} bytes does not read: "
                               f"{type(err).__name__}: {err}") from err
        if buf.tell() != len(payload):
            raise PayloadError(f"Avro datum ends at byte {buf.tell()} of {len(payload)}")
        return datum

    def decode(payload: memoryview, indexes=None):
        try:
            datum = read(payload, parsed)
        except PayloadError as err:
            if not logical:
                raise
            if not lenient:  # a logical value fastavro does not convert: read it plain
                lenient.append((parse(schema, {}, set(), _plain),
                                _lenient_renderer(parsed, named)))
            plain, again = lenient[0]
            try:
                return again(read(payload, plain))
            except Exception:  # the bytes do not read either way: the first read's error
                raise err from err.__cause__
        return datum if render is None else render(datum)

    return decode


def _has_logical(schema: Schema, registry: Registry, depth: int = 0) -> bool:
    """Whether ``schema`` or a schema it references names a logical type."""
    if '"logicalType"' in schema.text:
        return True
    return depth < 32 and any(_has_logical(registry.resolve(r), registry, depth + 1)
                              for r in schema.references)


# -------------------------------------------------------------------- JSON
def _json(registry: Registry, schema: Schema) -> Decoder:
    """The document; ``decode.violations(doc)`` validates it (jsonschema, the draft its
    ``$schema`` names, draft 7 by default; references resolved by their names as ``$ref``)."""
    from jsonschema import Draft7Validator, validators
    from referencing import Registry as Resources, Resource
    from referencing.jsonschema import DRAFT7

    resources: dict[str, Resource] = {}

    def collect(s: Schema, depth: int = 0) -> None:
        if depth > 32:
            raise RegistryError(f"schema id {schema.id}: references nest deeper than 32")
        for ref in s.references:
            if ref.name not in resources:
                r = registry.resolve(ref)
                resources[ref.name] = Resource.from_contents(json.loads(r.text),
                                                             default_specification=DRAFT7)
                collect(r, depth + 1)

    doc = json.loads(schema.text)  # a schema that is no JSON fails here, once
    collect(schema)
    cls = validators.validator_for(doc, default=Draft7Validator)
    cls.check_schema(doc)
    validator = cls(doc, registry=Resources().with_resources(resources.items()))

    def decode(payload: memoryview, indexes=None):
        try:
            return json.loads(bytes(payload))
        except (ValueError, UnicodeDecodeError) as err:
            raise PayloadError(f"JSON payload does not parse: {err}") from err

    def violations(value) -> list[str]:
        try:
            return [f"{'/'.join(map(str, e.absolute_path)) or '(document)'}: {e.message}"
                    for e in validator.iter_errors(value)]
        except Exception as err:  # an unresolvable $ref and the like, at one boundary
            return [f"not validated: {type(err).__name__}: {err}"]

    decode.violations = violations
    return decode


# ---------------------------------------------------------------- Protobuf
def _file_protos(registry: Registry, schema: Schema) -> list:
    """``FileDescriptorProto``s of ``schema`` and everything it imports, dependencies first."""
    from google.protobuf import descriptor_pb2

    descriptor = decode_descriptor(schema.text)
    if descriptor is None:
        return _compile_proto_text(registry, schema)
    out = []
    for ref in schema.references:
        out.extend(_file_protos(registry, registry.resolve(ref)))
    fdp = descriptor_pb2.FileDescriptorProto.FromString(descriptor)
    if not fdp.name:
        fdp.name = f"schema_{schema.id}.proto"
    out.append(fdp)
    return out


def _compile_proto_text(registry: Registry, schema: Schema) -> list:
    """Compile ``.proto`` text (and its references, by import name) with grpcio-tools' protoc."""
    import importlib.resources

    from google.protobuf import descriptor_pb2
    from grpc_tools import protoc

    with tempfile.TemporaryDirectory(prefix="kafkalog-proto-") as tmp:
        def write(name: str, s: Schema, depth: int = 0) -> None:
            if depth > 32:
                raise RegistryError(f"schema id {schema.id}: references nest deeper than 32")
            if decode_descriptor(s.text) is not None:
                raise RegistryError(f"schema id {s.id} ({name}): a FileDescriptorProto imported "
                                    "by .proto text is not supported")
            path = os.path.join(tmp, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(s.text)
            for ref in s.references:
                write(ref.name, registry.resolve(ref), depth + 1)

        main = f"kafkalog_schema_{schema.id}.proto"
        write(main, schema)
        out = os.path.join(tmp, "out.pb")
        include = str(importlib.resources.files("grpc_tools") / "_proto")
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            rc = protoc.main(["protoc", f"-I{tmp}", f"-I{include}", "--include_imports",
                              f"--descriptor_set_out={out}", main])
        if rc != 0 or not os.path.exists(out):
            raise RegistryError(f"schema id {schema.id}: protoc failed ({rc}) {err.getvalue().strip()}")
        with open(out, "rb") as f:
            return list(descriptor_pb2.FileDescriptorSet.FromString(f.read()).file)


def _well_known(default_pool, name: str):
    """A file protobuf (or googleapis-common-protos) ships compiled, e.g.
    ``google/protobuf/timestamp.proto`` from ``google.protobuf.timestamp_pb2``; KeyError if none."""
    try:
        return default_pool.FindFileByName(name)
    except KeyError:
        pass
    if name.endswith(".proto"):
        try:  # importing the generated module registers it in the default pool
            importlib.import_module(name[:-len(".proto")].replace("/", ".") + "_pb2")
        except ImportError:
            pass
    return default_pool.FindFileByName(name)


def _protobuf(registry: Registry, schema: Schema) -> Decoder:
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    from google.protobuf.json_format import MessageToDict
    from google.protobuf.message import DecodeError

    pool = descriptor_pool.DescriptorPool()
    default = descriptor_pool.Default()
    added: set[str] = set()

    def add(fdp) -> None:
        if fdp.name in added:
            return
        for dep in fdp.dependency:  # a well-known import nobody registered: protobuf's own
            if dep not in added and dep not in names:
                try:
                    wk = descriptor_pb2.FileDescriptorProto()
                    _well_known(default, dep).CopyToProto(wk)
                except KeyError as err:
                    raise RegistryError(f"schema id {schema.id}: import {dep!r} is neither a "
                                        "reference nor a well-known type") from err
                add(wk)
        pool.Add(fdp)
        added.add(fdp.name)

    protos = _file_protos(registry, schema)
    names = {p.name for p in protos}
    for p in protos:
        add(p)
    main = protos[-1]
    package = f"{main.package}." if main.package else ""
    classes: dict[tuple[int, ...], type] = {}

    def message_class(indexes):
        key = tuple(indexes)
        cls = classes.get(key)
        if cls is None:
            types, name = main.message_type, package
            for depth, i in enumerate(indexes):
                if i >= len(types):
                    raise PayloadError(f"message index {i} at depth {depth}: "
                                       f"{main.name} has {len(types)} messages there")
                name += types[i].name
                types = types[i].nested_type
                name += "."
            cls = classes[key] = message_factory.GetMessageClass(
                pool.FindMessageTypeByName(name[:-1]))
        return cls

    def decode(payload: memoryview, indexes: list[int] | None = None):
        pos = 0
        if indexes is None:
            if payload and payload[0] == 0:  # count 0, i.e. [0]: the common case, one byte
                indexes, pos = (0,), 1
            else:
                indexes, pos = read_message_indexes(payload)
        cls = classes.get(tuple(indexes)) or message_class(indexes)
        try:  # protobuf parses a memoryview as it is: no copy of the payload
            msg = cls.FromString(payload[pos:])
        except DecodeError as err:
            raise PayloadError(f"Protobuf payload does not parse as {cls.DESCRIPTOR.full_name}: "
                               f"{err}") from err
        return MessageToDict(msg, preserving_proto_field_name=True)

    decode.message_class = message_class  # the typed tables read the descriptors through it
    return decode


_COMPILERS = {AVRO: _avro, JSON: _json, PROTOBUF: _protobuf}
