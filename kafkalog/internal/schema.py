"""Kafka's message schema language, read at run time: one generic reader (and writer).

Kafka describes every record of its internal topics in JSON specs (``specs/``, copied
unchanged from Apache Kafka 4.3.0 and a few other commits; ``specs/README.md`` names each). A
spec is a struct of fields, each with

- ``type``: ``bool``, ``int8``, ``int16``, ``uint16``, ``int32``, ``uint32``, ``int64``,
  ``float64``, ``string``, ``bytes``, ``records``, ``uuid``, ``[]T`` (an array of any of
  these or of a struct), or a struct name (inline ``fields`` or one of the spec's
  ``commonStructs``);
- ``versions`` (``"0+"``, ``"1-3"``, ``"3"``, ``"none"``): the versions the field exists in;
- ``nullableVersions``: where it may be null; ``taggedVersions`` + ``tag``: where it is an
  optional tagged field instead of a positional one (``versions`` defaults to them). A tag is
  a JSON number or a string holding one (``"tag": "0"`` in RegisterBrokerRecord): Kafka's
  generator reads it as an Integer either way;
- ``default``: as Kafka's generator (``FieldSpec``) reads it: the *string* ``"null"`` is a
  null default; a JSON ``null`` is read by Jackson as no default at all, i.e. 0, ``""``, the
  empty array or the empty struct (``"default": null`` on ClassicMemberMetadata or
  AssignmentEpochs is an empty default, which is why Kafka writes their nulls explicitly);
- ``flexibleVersions`` (per spec, and per string/bytes field as an override).

Wire grammar, big-endian (Kafka's ``Readable``/``MessageUtil``, the code its
``MessageDataGenerator`` generates):

- fixed-width integers; ``bool`` one byte, non-zero true; ``uuid`` 16 bytes;
- non-flexible: ``string`` int16 length, ``bytes``/``records`` int32 length, arrays int32
  count; a negative one is null;
- flexible ("compact"): unsigned varint length + 1 (0 null) for all three; and every struct
  ends with a tagged-field section: unsigned varint count, then per field unsigned varint
  tag, unsigned varint size, ``size`` bytes. Tags the spec does not know are skipped (Kafka
  keeps them as unknown tagged fields); a known one must use exactly its declared size, and
  one the spec has only in other versions is an error ("Tag N is not valid for version");
- a struct-typed field that is nullable in a version is preceded by a null marker: positional,
  an int8 (negative: null; Kafka writes -1 and 1); tagged, an unsigned varint (0: null; Kafka
  writes 1 before a present struct, and a null one as tag, size 1, ``00``).

Values come out as Kafka's JSON converters write them: field names with the first letter
lower-cased, bytes as base64, UUIDs as Kafka prints them (22-character URL-safe base64 without
padding), tagged fields only when they differ from their default (a null where the default is
not null is shown). Everything wrong with the bytes (unknown version, read past the end,
leftover bytes, bad UTF-8, a tagged field of the wrong size) raises :class:`MessageError` with
the byte position and field path.
"""

from __future__ import annotations

import base64
import json
import re
import struct
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

from ..default_records import encode_uvarint
from ..errors import CorruptDataError

HIGHEST = 0x7FFF  # "N+" means N up to Short.MAX_VALUE, as in Kafka's Versions


class MessageError(CorruptDataError):
    """Bytes that do not read as the spec says (position is relative to the message)."""

    kind = "internal_record_error"


class SpecError(Exception):
    """A spec this reader does not understand (a bug in the shipped specs, not in input)."""


@dataclass(frozen=True, slots=True)
class Versions:
    low: int
    high: int  # inclusive; low > high means none

    @classmethod
    def parse(cls, text: str | None, default: "Versions | None" = None) -> "Versions":
        if text is None:
            if default is None:
                raise SpecError("versions missing")
            return default
        text = str(text).strip()
        if text in ("none", ""):
            return NONE
        if text.endswith("+"):
            return cls(int(text[:-1]), HIGHEST)
        low, _, high = text.partition("-")
        return cls(int(low), int(high or low))

    def __contains__(self, version: int) -> bool:
        return self.low <= version <= self.high

    @property
    def empty(self) -> bool:
        return self.low > self.high


NONE = Versions(0, -1)

FIXED = {
    "bool": struct.Struct(">?"),
    "int8": struct.Struct(">b"),
    "int16": struct.Struct(">h"),
    "uint16": struct.Struct(">H"),
    "int32": struct.Struct(">i"),
    "uint32": struct.Struct(">I"),
    "int64": struct.Struct(">q"),
    "float64": struct.Struct(">d"),
}
_UUID_SIZE = 16
PRIMITIVES = frozenset(FIXED) | {"string", "bytes", "records", "uuid"}


def json_name(name: str) -> str:
    """Kafka's JSON converters: the spec's name with its first letter lower-cased."""
    return name[:1].lower() + name[1:]


def snake_name(name: str) -> str:
    """``leaderEpoch`` / ``LeaderEpoch`` -> ``leader_epoch`` (row keys from spec names)."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def uuid_text(raw: bytes) -> str:
    """A UUID as Kafka's ``Uuid.toString()`` prints it: URL-safe base64, no padding."""
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


_UUID_TEXT = re.compile(r"[A-Za-z0-9_-]{22}(==)?")


def uuid_bytes(text: str) -> bytes:
    """The 16 bytes of a UUID as Kafka's ``Uuid.fromString`` reads it (URL-safe base64,
    22 characters, padding optional); ValueError for anything else."""
    if not isinstance(text, str) or not _UUID_TEXT.fullmatch(text):
        raise ValueError(f"not a Kafka UUID: {text!r} (22 characters of URL-safe base64)")
    return base64.urlsafe_b64decode(text[:22] + "==")


@dataclass(frozen=True, slots=True)
class Field:
    name: str  # the JSON name (first letter lower-cased)
    type: str  # element type for arrays
    is_array: bool
    versions: Versions
    nullable: Versions
    tagged: Versions
    tag: int | None
    flexible: Versions | None  # per-field override (string/bytes only)
    default: Any
    struct: "Struct | None" = None  # for struct types and arrays of structs

    def tagged_in(self, version: int) -> bool:
        return self.tag is not None and version in self.tagged and version in self.versions


@dataclass(frozen=True, slots=True)
class Struct:
    name: str
    fields: tuple[Field, ...]
    tags: dict = field(default_factory=dict, compare=False)  # tag -> Field


@dataclass(frozen=True, slots=True)
class MessageSpec:
    name: str
    api_key: int | None
    valid: Versions
    flexible: Versions
    struct: Struct

    def read(self, buf, version: int, pos: int = 0, end: int | None = None) -> tuple[dict, int]:
        """Read the struct of ``version`` from ``buf[pos:end]``: ``(values, new_pos)``."""
        if version not in self.valid:
            raise MessageError(f"{self.name}: unknown version {version} (this reader knows "
                               f"{versions_text(self.valid)})", pos)
        end = len(buf) if end is None else end
        return _Reader(self, version, buf, end).struct(self.struct, pos, self.name)

    def read_exactly(self, buf, version: int, pos: int = 0) -> dict:
        """:meth:`read`, and the struct must end where ``buf`` ends."""
        value, pos = self.read(buf, version, pos)
        if pos != len(buf):
            raise MessageError(f"{self.name} v{version}: {len(buf) - pos} bytes left over after "
                               f"the message (it ends at byte {pos} of {len(buf)})", pos)
        return value

    def write(self, value: dict, version: int) -> bytes:
        """Encode ``value`` (JSON-shaped, as :meth:`read` returns it; missing fields take their
        defaults) as ``version``: for tests and sample data."""
        if version not in self.valid:
            raise SpecError(f"{self.name}: version {version} not in {versions_text(self.valid)}")
        out = bytearray()
        _Writer(self, version, out).struct(self.struct, value)
        return bytes(out)


def versions_text(v: Versions) -> str:
    if v.empty:
        return "none"
    if v.high == HIGHEST:
        return f"{v.low}+"
    return str(v.low) if v.low == v.high else f"{v.low}-{v.high}"


# ---------------------------------------------------------------------------------------------
# Loading specs

def _strip_comments(text: str) -> str:
    """Kafka's specs are JSON with ``//`` line comments (outside strings)."""
    out, i, n, in_str = [], 0, len(text), False
    while i < n:
        c = text[i]
        if in_str:
            out.append(c)
            if c == "\\":
                out.append(text[i + 1])
                i += 1
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
            out.append(c)
        elif c == "/" and text.startswith("//", i):
            i = text.find("\n", i)
            if i < 0:
                break
            continue
        else:
            out.append(c)
        i += 1
    return "".join(out)


_INT_RE = re.compile(r"^-?(0x[0-9a-fA-F]+|\d+)$")


_ABSENT = object()
_STRUCT_DEFAULT = object()  # the empty struct (Kafka's new Struct()): see default_struct


def _default(type_: str, is_array: bool, raw) -> Any:
    """The field's default as its JSON value (tagged fields are written only when not default).
    Only the string ``"null"`` is a null default: Kafka's FieldSpec takes a JSON null (Jackson
    passes it as no string) as no default, like a missing one."""
    if raw == "null":
        return None
    if raw is None or raw is _ABSENT or raw == "":
        raw = None
    if is_array:
        return []
    if type_ == "bool":
        return raw is not None and str(raw).lower() == "true"
    if type_ in FIXED:
        if raw is None:
            return 0.0 if type_ == "float64" else 0
        text = str(raw)
        if type_ == "float64":
            return float(text)
        if not _INT_RE.match(text):
            raise SpecError(f"bad default {raw!r} for {type_}")
        return int(text, 0)
    if type_ == "string":
        return "" if raw is None else str(raw)
    if type_ in ("bytes", "records"):
        return ""  # base64 of no bytes
    if type_ == "uuid":
        return uuid_text(bytes(_UUID_SIZE))
    return _STRUCT_DEFAULT


def _tag(spec: dict) -> int | None:
    """A field's tag as a number (the specs write both ``"tag": 0`` and ``"tag": "0"``)."""
    raw = spec.get("tag")
    if raw is None:
        return None
    text = str(raw).strip()
    if isinstance(raw, bool) or not text.isdigit():
        raise SpecError(f"{spec.get('name')}: tag {raw!r} is not a non-negative number")
    return int(text)


def _field(spec: dict, structs: dict, pending: list) -> Field:
    tagged = Versions.parse(spec.get("taggedVersions"), NONE)
    versions = Versions.parse(spec.get("versions"), None if tagged.empty else tagged)
    type_ = spec["type"].strip()
    is_array = type_.startswith("[]")
    elem = type_[2:] if is_array else type_
    sub = None
    if elem not in PRIMITIVES:
        if "fields" in spec:
            sub = _struct(elem, spec["fields"], structs, pending)
            structs[elem] = sub
        else:
            pending.append(elem)  # a commonStruct, resolved once all are read
    flexible = spec.get("flexibleVersions")
    return Field(
        name=json_name(spec["name"]),
        type=elem,
        is_array=is_array,
        versions=versions,
        nullable=Versions.parse(spec.get("nullableVersions"), NONE),
        tagged=tagged,
        tag=_tag(spec),
        flexible=None if flexible in (None, "") else Versions.parse(flexible),
        default=_default(elem, is_array, spec.get("default", _ABSENT)),
        struct=sub,
    )


def _struct(name: str, fields: list, structs: dict, pending: list) -> Struct:
    fs = tuple(_field(f, structs, pending) for f in fields)
    return Struct(name, fs, {f.tag: f for f in fs if f.tag is not None})


def _resolve(s: Struct, structs: dict) -> Struct:
    fixed = []
    for f in s.fields:
        sub = f.struct
        if f.type not in PRIMITIVES:
            if sub is None:
                if f.type not in structs:
                    raise SpecError(f"{s.name}.{f.name}: unknown type {f.type}")
                sub = structs[f.type]
            sub = _resolve(sub, structs)
        fixed.append(Field(f.name, f.type, f.is_array, f.versions, f.nullable, f.tagged, f.tag,
                           f.flexible, f.default, sub))
    fs = tuple(fixed)
    return Struct(s.name, fs, {f.tag: f for f in fs if f.tag is not None})


def parse_spec(text: str) -> MessageSpec:
    doc = json.loads(_strip_comments(text))
    structs: dict = {}
    pending: list = []
    for common in doc.get("commonStructs", ()):
        structs[common["name"]] = _struct(common["name"], common["fields"], structs, pending)
    top = _struct(doc["name"], doc["fields"], structs, pending)
    return MessageSpec(
        name=doc["name"],
        api_key=doc.get("apiKey"),
        valid=Versions.parse(doc["validVersions"]),
        flexible=Versions.parse(doc.get("flexibleVersions"), NONE),
        struct=_resolve(top, structs),
    )


#: The folders of ``specs/``, newest first: Apache Kafka 4.3.0's specs, a record of trunk after
#: it, and the 4.0.2 layouts and records that 4.1 changed or removed (``specs/README.md``).
SPEC_RELEASES = ("4.3.0", "trunk", "4.0.2")


@cache
def spec_files() -> dict[str, tuple[str, ...]]:
    """Spec name -> the paths (``4.3.0/metadata/TopicRecord.json``, relative to ``specs/``)
    of every shipped copy, in :data:`SPEC_RELEASES` order."""
    root = resources.files(__package__).joinpath("specs")
    out: dict[str, list[str]] = {}
    for release in SPEC_RELEASES:
        for module in sorted(root.joinpath(release).iterdir(), key=lambda p: p.name):
            for p in sorted(module.iterdir(), key=lambda p: p.name):
                if p.name.endswith(".json"):
                    out.setdefault(p.name[:-5], []).append(f"{release}/{module.name}/{p.name}")
    return {name: tuple(paths) for name, paths in sorted(out.items())}


@cache
def _parsed(path: str) -> MessageSpec:
    return parse_spec(resources.files(__package__).joinpath("specs", path)
                      .read_text(encoding="utf-8"))


@cache
def spec(name: str) -> MessageSpec:
    """The shipped spec ``name`` (e.g. ``"OffsetCommitValue"``), parsed once: the newest
    release's copy (:data:`SPEC_RELEASES`)."""
    paths = spec_files().get(name)
    if not paths:
        raise KeyError(f"no shipped spec {name!r}")
    return _parsed(paths[0])


@cache
def spec_layouts(name: str) -> tuple[tuple[str, MessageSpec], ...]:
    """``(release, spec)`` of every shipped copy of spec ``name``, newest first: more than one
    only where Kafka changed a message's layout without a version bump (``specs/README.md``)."""
    return tuple((p.split("/", 1)[0], _parsed(p)) for p in spec_files().get(name, ()))


@cache
def spec_names() -> tuple[str, ...]:
    return tuple(spec_files())


# ---------------------------------------------------------------------------------------------
# Reading

_MAX_STRING = 0x7FFF  # the generated readers refuse a longer string


def _as_int32(n: int) -> int:
    """An unsigned varint as Kafka's ``readUnsignedVarint`` returns it: a Java int."""
    return n - (1 << 32) if n >= 1 << 31 else n


def default_struct(s: Struct, version: int) -> dict:
    """A struct of defaults (Kafka's ``new Struct()``) as :meth:`MessageSpec.read` shows it."""
    return {f.name: default_struct(f.struct, version) if f.default is _STRUCT_DEFAULT
            else f.default
            for f in s.fields if version in f.versions and not f.tagged_in(version)}


def is_default(f: Field, value, version: int) -> bool:
    """Whether a tagged field's value is its default (then Kafka neither writes nor shows it)."""
    if f.default is _STRUCT_DEFAULT:
        return isinstance(value, dict) and value == default_struct(f.struct, version)
    return value == f.default


def read_uvarint(buf, pos: int, end: int, what: str) -> tuple[int, int]:
    """An unsigned varint (at most 5 bytes, as Kafka's ByteUtils.readUnsignedVarint)."""
    result = shift = 0
    while True:
        if pos >= end:
            raise MessageError(f"{what}: varint runs past the end at byte {pos}", pos)
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 28:
            raise MessageError(f"{what}: unsigned varint longer than 5 bytes at byte {pos}", pos)


class _Reader:
    __slots__ = ("spec", "version", "buf", "end", "flexible")

    def __init__(self, spec: MessageSpec, version: int, buf, end: int) -> None:
        self.spec, self.version, self.buf, self.end = spec, version, buf, end
        self.flexible = version in spec.flexible

    def _need(self, pos: int, n: int, what: str) -> None:
        if n < 0 or pos + n > self.end:
            raise MessageError(f"{what}: needs {n} bytes at byte {pos}, only "
                               f"{max(self.end - pos, 0)} left (read past the end)", pos)

    def uvarint(self, pos: int, what: str) -> tuple[int, int]:
        return read_uvarint(self.buf, pos, self.end, what)

    def struct(self, s: Struct, pos: int, path: str) -> tuple[dict, int]:
        v = self.version
        out: dict = {}
        for f in s.fields:
            if v in f.versions and not f.tagged_in(v):
                out[f.name], pos = self.value(f, pos, f"{path}.{f.name}")
        if self.flexible:
            tagged, pos = self.tagged_fields(s, pos, path)
            if tagged:  # in spec order, as Kafka's JSON converter writes them
                out = {f.name: (tagged[f.name] if f.name in tagged else out[f.name])
                       for f in s.fields if f.name in out or f.name in tagged}
        return out, pos

    def tagged_fields(self, s: Struct, pos: int, path: str) -> tuple[dict, int]:
        count, pos = self.uvarint(pos, f"{path}: tagged field count")
        found: dict = {}
        last = -1
        for _ in range(count):
            tag, pos = self.uvarint(pos, f"{path}: tag")
            size, pos = self.uvarint(pos, f"{path}: size of tag {tag}")
            self._need(pos, size, f"{path}: tagged field {tag}")
            if tag <= last:
                raise MessageError(f"{path}: tag {tag} after tag {last} (tags must increase)", pos)
            last = tag
            f = s.tags.get(tag)
            end = pos + size
            if f is not None:
                if not f.tagged_in(self.version):  # Kafka: "Tag N is not valid for version"
                    raise MessageError(f"{path}: tag {tag} ({f.name}) is not valid in "
                                       f"v{self.version}", pos)
                saved, self.end = self.end, end
                try:
                    value, used = self.value(f, pos, f"{path}.{f.name}", tagged=True)
                finally:
                    self.end = saved
                if used != end:
                    raise MessageError(f"{path}.{f.name}: tagged field {tag} declares {size} "
                                       f"bytes but its value uses {used - pos}", pos)
                if not is_default(f, value, self.version):
                    found[f.name] = value
            pos = end  # unknown tags are skipped, as Kafka keeps them unread
        return found, pos

    def _length(self, f: Field, pos: int, path: str, wide: bool) -> tuple[int, int]:
        """A length or count: -1 (null: any negative one, as Kafka reads it) or >= 0."""
        flexible = self.flexible if f.flexible is None else self.version in f.flexible
        if flexible:
            n, pos = self.uvarint(pos, path)
            n = _as_int32(n) - 1  # Kafka reads the varint into an int
        else:
            fmt = FIXED["int32"] if wide else FIXED["int16"]
            self._need(pos, fmt.size, path)
            (n,) = fmt.unpack_from(self.buf, pos)
            pos += fmt.size
        n = max(n, -1)
        if n == -1 and self.version not in f.nullable:
            raise MessageError(f"{path}: null, but the field is not nullable in "
                               f"v{self.version}", pos)
        return n, pos

    def value(self, f: Field, pos: int, path: str, tagged: bool = False) -> tuple[Any, int]:
        if f.is_array:
            n, pos = self._length(f, pos, path, wide=True)
            if n < 0:
                return None, pos
            if n > self.end - pos and (f.type in FIXED or f.type in PRIMITIVES):
                raise MessageError(f"{path}: array of {n} elements in {self.end - pos} bytes "
                                   "(read past the end)", pos)
            items = []
            for i in range(n):
                item, pos = self.element(f, pos, f"{path}[{i}]")
                items.append(item)
            return items, pos
        if f.struct is not None and self.version in f.nullable:
            if tagged:  # MessageDataGenerator: readUnsignedVarint() <= 0 is null
                marker, pos = self.uvarint(pos, f"{path}: null marker")
                if _as_int32(marker) <= 0:
                    return None, pos
            else:  # readByte() < 0 is null
                self._need(pos, 1, path)
                marker = self.buf[pos]
                pos += 1
                if marker >= 0x80:
                    return None, pos
        return self.element(f, pos, path)

    def element(self, f: Field, pos: int, path: str) -> tuple[Any, int]:
        t = f.type
        fixed = FIXED.get(t)
        if fixed is not None:
            self._need(pos, fixed.size, path)
            return fixed.unpack_from(self.buf, pos)[0], pos + fixed.size
        if t == "string":
            n, pos = self._length(f, pos, path, wide=False)
            if n < 0:
                return None, pos
            if n > _MAX_STRING:
                raise MessageError(f"{path}: string of {n} bytes (Kafka's limit is "
                                   f"{_MAX_STRING})", pos)
            self._need(pos, n, path)
            try:
                return bytes(self.buf[pos:pos + n]).decode("utf-8"), pos + n
            except UnicodeDecodeError as err:
                raise MessageError(f"{path}: string is not UTF-8 ({err.reason} at byte "
                                   f"{pos + err.start})", pos) from err
        if t in ("bytes", "records"):
            n, pos = self._length(f, pos, path, wide=True)
            if n < 0:
                return None, pos
            self._need(pos, n, path)
            return base64.b64encode(self.buf[pos:pos + n]).decode("ascii"), pos + n
        if t == "uuid":
            self._need(pos, _UUID_SIZE, path)
            return uuid_text(bytes(self.buf[pos:pos + _UUID_SIZE])), pos + _UUID_SIZE
        return self.struct(f.struct, pos, path)


# ---------------------------------------------------------------------------------------------
# Writing (tests and sample data only)

#: Unsigned varints as the record format writes them (one encoder for both).
write_uvarint = encode_uvarint


class _Writer:
    __slots__ = ("spec", "version", "out", "flexible")

    def __init__(self, spec: MessageSpec, version: int, out: bytearray) -> None:
        self.spec, self.version, self.out = spec, version, out
        self.flexible = version in spec.flexible

    def struct(self, s: Struct, value: dict) -> None:
        v = self.version
        tagged = []
        for f in s.fields:
            if v not in f.versions:
                continue
            item = value.get(f.name, f.default)
            if f.tagged_in(v):
                if item is not _STRUCT_DEFAULT and not is_default(f, item, v):
                    tagged.append((f, item))
            else:
                self.value(f, item)
        if self.flexible:
            self.out += write_uvarint(len(tagged))
            for f, item in sorted(tagged, key=lambda t: t[0].tag):
                sub = _Writer(self.spec, v, bytearray())
                sub.value(f, item, tagged=True)
                self.out += write_uvarint(f.tag) + write_uvarint(len(sub.out)) + sub.out

    def _length(self, f: Field, n: int, wide: bool) -> None:
        flexible = self.flexible if f.flexible is None else self.version in f.flexible
        if flexible:
            self.out += write_uvarint(n + 1)
        else:
            self.out += (FIXED["int32"] if wide else FIXED["int16"]).pack(n)

    def value(self, f: Field, item, tagged: bool = False) -> None:
        if f.is_array:
            if item is None:
                self._length(f, -1, wide=True)
                return
            self._length(f, len(item), wide=True)
            for x in item:
                self.element(f, x)
            return
        if f.struct is not None and self.version in f.nullable:
            if item is None:  # tagged: an unsigned varint 0; positional: int8 -1
                self.out.append(0 if tagged else 0xFF)
                return
            self.out.append(1)
        self.element(f, item)

    def element(self, f: Field, item) -> None:
        t = f.type
        fixed = FIXED.get(t)
        if fixed is not None:
            self.out += fixed.pack(item)
        elif t == "string":
            if item is None:
                self._length(f, -1, wide=False)
            else:
                raw = item.encode("utf-8")
                self._length(f, len(raw), wide=False)
                self.out += raw
        elif t in ("bytes", "records"):
            if item is None:
                self._length(f, -1, wide=True)
            else:
                raw = base64.b64decode(item) if isinstance(item, str) else bytes(item)
                self._length(f, len(raw), wide=True)
                self.out += raw
        elif t == "uuid":
            self.out += uuid_bytes(item)
        else:
            self.struct(f.struct, item if isinstance(item, dict) else {})
