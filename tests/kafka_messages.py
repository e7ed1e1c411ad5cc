"""An independent writer of Kafka messages from their JSON specs, and sample values for them.

Nothing here comes from ``kafkalog``: the specs are read from their JSON text, and bytes are
written by the rules of the code Kafka's generator emits, as read in apache/kafka
``generator/src/main/java/org/apache/kafka/message/`` at a9ce3221537b (4.3.0; read from the
confluentinc/kafka history):

- ``MessageDataGenerator.generateClassWriter``: positional fields in spec order; in flexible
  versions a tagged-field section after them (count, then per field tag, size, bytes, tags in
  increasing order). A tagged field whose default is the string ``"null"`` is written when it
  is not null; any other tagged field is written when it differs from its default, and a null
  one as tag, size 1, ``writeUnsignedVarint(0)``. A present nullable tagged struct is written
  as size + 1, ``writeUnsignedVarint(1)``, the struct; a positional nullable struct after
  ``writeByte(-1)`` (null) or ``writeByte(1)``.
- ``generateVariableLengthWriter``: flexible: unsigned varint length + 1 (0 null); otherwise
  int16 (string) or int32 (bytes, arrays) length, -1 null. Tagged fields are always compact.
- ``FieldSpec.fieldDefault``: a JSON ``"default": null`` reaches FieldSpec as no string (Jackson),
  so it is the empty default (0, "", [], an empty struct), not null; only ``"null"`` is null.
- ``JsonConverterGenerator``: a tagged field is shown when it is not its default (a null one
  where the default is not null is shown); positional fields always. Names are the spec's with
  the first letter lower-cased, bytes base64, UUIDs Kafka's URL-safe base64 without padding.

:func:`samples` makes values that set every field (and every tagged field), leave everything
at its default, null every nullable field, and stretch lengths past one-byte varints.
"""

from __future__ import annotations

import base64
import json
import re
import struct

MAX_VERSION = 0x7FFF
_COMMENT = re.compile(r"^\s*//.*$", re.M)
_FIXED = {"int8": ">b", "int16": ">h", "uint16": ">H", "int32": ">i", "uint32": ">I",
          "int64": ">q", "float64": ">d"}
_RANGES = {"int8": (-2**7, 2**7 - 1), "int16": (-2**15, 2**15 - 1), "uint16": (0, 2**16 - 1),
           "int32": (-2**31, 2**31 - 1), "uint32": (0, 2**32 - 1),
           "int64": (-2**63, 2**63 - 1)}


def load(text: str) -> dict:
    """A spec's JSON (Kafka's specs have whole-line ``//`` comments), with every field's
    ``commonStructs`` type given its fields."""
    doc = json.loads(_COMMENT.sub("", text))
    common = {c["name"]: c["fields"] for c in doc.get("commonStructs", ())}

    def resolve(fields):
        for f in fields:
            elem = f["type"].strip().removeprefix("[]")
            if "fields" not in f and elem in common:
                f["fields"] = common[elem]
            if "fields" in f:
                resolve(f["fields"])
    resolve(doc["fields"])
    return doc


def versions(text) -> range:
    """``"0+"``, ``"1-3"``, ``"2"``, ``"none"`` as a range."""
    if text is None:
        return range(0)
    text = str(text).strip()
    if text in ("", "none"):
        return range(0)
    if text.endswith("+"):
        return range(int(text[:-1]), MAX_VERSION + 1)
    low, _, high = text.partition("-")
    return range(int(low), int(high or low) + 1)


def uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def kafka_uuid(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def json_name(name: str) -> str:
    return name[0].lower() + name[1:]


class F:
    """One field of a spec, as the generator sees it in one version."""

    def __init__(self, spec: dict):
        self.spec = spec
        self.name = json_name(spec["name"])
        self.type = spec["type"].strip()
        self.array = self.type.startswith("[]")
        self.elem = self.type[2:] if self.array else self.type
        self.fields = spec.get("fields")
        tagged = spec.get("taggedVersions")
        self.tagged = versions(tagged)
        self.versions = versions(spec.get("versions", tagged))
        self.nullable = versions(spec.get("nullableVersions"))
        self.tag = None if spec.get("tag") is None else int(spec["tag"])
        raw = spec.get("default")
        self.default_text = "" if raw is None else str(raw)
        self.flexible = spec.get("flexibleVersions")

    def present(self, v: int) -> bool:
        return v in self.versions

    def is_tagged(self, v: int) -> bool:
        return self.tag is not None and v in self.tagged and v in self.versions

    def is_struct(self) -> bool:
        return self.fields is not None and not self.array

    def default(self, v: int):
        d = self.default_text
        if d == "null":
            return None
        if self.array:
            return []
        if self.is_struct():
            return struct_default(self.fields, v)
        t = self.elem
        if t == "bool":
            return d.lower() == "true"
        if t in _RANGES:
            if d == "":
                return 0
            return int(d[2:], 16) if d.startswith("0x") else int(d)
        if t == "float64":
            return float(d) if d else 0.0
        if t == "string":
            return d
        if t in ("bytes", "records"):
            return b""
        if t == "uuid":
            return bytes(16)
        raise ValueError(f"{self.name}: no default for {t}")


def fields_of(specs: list) -> list[F]:
    return [F(s) for s in specs]


def struct_default(specs: list, v: int) -> dict:
    """``new Struct()`` in version v: every positional field at its default (tagged ones too,
    though the JSON form leaves them out)."""
    return {f.name: f.default(v) for f in fields_of(specs) if f.present(v)}


# ------------------------------------------------------------------ writing

class Writer:
    def __init__(self, flexible: range):
        self.flexible = flexible

    def struct(self, specs: list, v: int, value: dict) -> bytes:
        out = bytearray()
        tagged = []
        for f in fields_of(specs):
            if not f.present(v):
                continue
            x = value[f.name] if f.name in value else f.default(v)
            if f.is_tagged(v):
                if f.default_text == "null":
                    if x is not None:
                        tagged.append((f.tag, self.tagged_value(f, v, x)))
                elif x is None:
                    tagged.append((f.tag, uvarint(0)))
                elif x != f.default(v):
                    tagged.append((f.tag, self.tagged_value(f, v, x)))
            else:
                out += self.value(f, v, x)
        if v in self.flexible:
            out += uvarint(len(tagged))
            for tag, body in sorted(tagged):
                out += uvarint(tag) + uvarint(len(body)) + body
        return bytes(out)

    def tagged_value(self, f: F, v: int, x) -> bytes:
        if f.is_struct():
            body = self.struct(f.fields, v, x)
            return (uvarint(1) + body) if v in f.nullable else body
        return self.value(f, v, x, compact=True)

    def value(self, f: F, v: int, x, compact: bool | None = None) -> bytes:
        if compact is None:
            compact = v in (versions(f.flexible) if f.flexible else self.flexible)
        if f.array:
            if x is None:
                return uvarint(0) if compact else struct.pack(">i", -1)
            head = uvarint(len(x) + 1) if compact else struct.pack(">i", len(x))
            return head + b"".join(self.element(f, v, e, compact) for e in x)
        if f.is_struct():
            if v in f.nullable:
                if x is None:
                    return b"\xff"
                return b"\x01" + self.struct(f.fields, v, x)
            return self.struct(f.fields, v, x)
        return self.element(f, v, x, compact)

    def element(self, f: F, v: int, x, compact: bool) -> bytes:
        t = f.elem
        if f.fields is not None:
            return self.struct(f.fields, v, x)
        if t in _FIXED:
            return struct.pack(_FIXED[t], x)
        if t == "bool":
            return b"\x01" if x else b"\x00"
        if t == "uuid":
            return x
        if t == "string":
            if x is None:
                return uvarint(0) if compact else struct.pack(">h", -1)
            raw = x.encode()
            return (uvarint(len(raw) + 1) if compact else struct.pack(">h", len(raw))) + raw
        if t in ("bytes", "records"):
            if x is None:
                return uvarint(0) if compact else struct.pack(">i", -1)
            return (uvarint(len(x) + 1) if compact else struct.pack(">i", len(x))) + x
        raise ValueError(f"{f.name}: cannot write {t}")


def encode(doc: dict, v: int, value: dict) -> bytes:
    """The message ``doc`` (a :func:`load`-ed spec) of version v holding ``value``."""
    return Writer(versions(doc.get("flexibleVersions"))).struct(doc["fields"], v, value)


# ------------------------------------------------------------------ the JSON form

def shown(doc: dict, v: int, value: dict) -> dict:
    """``value`` as Kafka's JSON converter shows it (and kafkalog's reader returns it)."""
    return _shown(doc["fields"], v, value)


def _shown(specs: list, v: int, value: dict) -> dict:
    out = {}
    for f in fields_of(specs):
        if not f.present(v):
            continue
        x = value[f.name] if f.name in value else f.default(v)
        if f.is_tagged(v) and x is not None and x == f.default(v):
            continue
        if f.is_tagged(v) and x is None and f.default_text == "null":
            continue
        out[f.name] = _json(f, v, x)
    return out


def _json(f: F, v: int, x):
    if x is None:
        return None
    if f.array:
        return [_json_element(f, v, e) for e in x]
    return _json_element(f, v, x)


def _json_element(f: F, v: int, x):
    if f.fields is not None:
        return _shown(f.fields, v, x)
    if f.elem == "uuid":
        return kafka_uuid(x)
    if f.elem in ("bytes", "records"):
        return base64.b64encode(x).decode()
    return x


# ------------------------------------------------------------------ sample values

#: the kinds of :func:`samples`
KINDS = ("set", "defaults", "nulls", "long")


def samples(doc: dict, v: int) -> dict[str, dict]:
    """Values of version v of ``doc``, by kind: ``set`` (every field, tagged ones included,
    off its default; nullable ones not null), ``defaults`` (nothing set: every field at its
    default, tagged ones unwritten), ``nulls`` (every nullable field null, tagged ones too;
    the rest set), ``long`` (strings, bytes and arrays past 127, two-byte varints)."""
    return {kind: _sample(doc["fields"], v, kind, 1) for kind in KINDS}


def _sample(specs: list, v: int, kind: str, seed: int) -> dict:
    if kind == "defaults":
        return {}
    out = {}
    for i, f in enumerate(fields_of(specs)):
        if not f.present(v):
            continue
        if kind == "nulls" and v in f.nullable:
            out[f.name] = None
            continue
        out[f.name] = _sample_value(f, v, kind, seed * 31 + i)
    return out


def _sample_value(f: F, v: int, kind: str, seed: int):
    if f.array:
        n = 130 if kind == "long" and f.fields is None else 2
        return [_sample_element(f, v, kind, seed + k) for k in range(n)]
    return _sample_element(f, v, kind, seed)


def _sample_element(f: F, v: int, kind: str, seed: int):
    t = f.elem
    if f.fields is not None:
        return _sample(f.fields, v, kind, seed + 7)
    if t == "bool":
        return not f.default(v) if not f.array else seed % 2 == 0
    if t in _RANGES:
        low, high = _RANGES[t]
        if kind == "long":
            return high - seed % 3 if seed % 2 else max(low, -high + seed % 5)
        n = 3 + seed % 90
        return n if n != f.default(v) or f.array else n + 1
    if t == "float64":
        return 1.5 + seed
    if t == "string":
        text = f"{f.name}-{seed}-é"
        return (text * 20)[:200] if kind == "long" else text
    if t in ("bytes", "records"):
        return bytes((seed + k) % 256 for k in range(200 if kind == "long" else 3))
    if t == "uuid":
        return bytes((seed * 7 + k) % 256 for k in range(16))
    raise ValueError(f"{f.name}: no sample for {t}")
