"""A Schema Registry rebuilt offline: from the ``_schemas`` topic, a schema folder or a live URL.

Schema Registry keeps its whole state in one compacted Kafka topic, ``_schemas``; every
instance rebuilds its store by reading it from the start (``KafkaStoreReaderThread``).
We do the same with the snapshot's segments. Each record's key and value are JSON:

* ``SCHEMA`` (key: ``subject``, ``version``, ``magic``): value ``{subject, version, id,
  schema, deleted, schemaType?, references?, guid?, ...}``; a null value deletes the version
  for good (hard delete).
* ``CONFIG`` / ``MODE`` (key: ``subject``, null for global): ``{compatibilityLevel}`` /
  ``{mode}``; null resets.
* ``NOOP``: ignored (the registry's own read barrier).
* ``DELETE_SUBJECT`` (key: ``subject``): ``{subject, version}``, versions up to it are
  soft-deleted.
* ``CLEAR_SUBJECT`` (key: ``subject``): ``{subject}``, its soft-deleted versions are gone for
  good (the registry writes it when a subject goes to IMPORT mode, to clear deleted schemas;
  we match the subject exactly, not as a context prefix).

A soft-deleted version (``deleted: true``) is hidden from the registry's listings but its
id still resolves, so data written with it still decodes; only a hard delete (a null value)
removes a version, and an id disappears once no version of any subject holds it.
``schemaType`` absent means AVRO. A reference is ``{name, subject, version}``: the name
is what the schema imports (a ``.proto`` path, an Avro full name, a JSON ``$ref``).

Records that are not JSON, or whose keytype is unknown, are not errors of the bytes:
they are kept in :attr:`Registry.problems` and skipped.
"""

from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass, field
from typing import Iterable, NamedTuple

from ..errors import KafkaLogError

AVRO, JSON, PROTOBUF = "AVRO", "JSON", "PROTOBUF"
FORMATS = (AVRO, JSON, PROTOBUF)


class RegistryError(KafkaLogError, ValueError):
    """A schema source that cannot be read, or a schema whose references do not resolve."""


class Reference(NamedTuple):
    name: str
    subject: str
    version: int


@dataclass(frozen=True, slots=True)
class Schema:
    """One registered schema, as ``GET /schemas/ids/{id}`` returns it."""

    id: int
    schema_type: str
    text: str
    references: tuple[Reference, ...] = ()
    guid: str | None = None


class SubjectVersion(NamedTuple):
    schema_id: int
    deleted: bool


def schema_from_json(doc: dict, schema_id: int | None = None) -> Schema:
    """A :class:`Schema` from the registry's JSON (a ``_schemas`` value, a REST answer):
    ``id``, ``schema``, optional ``schemaType`` (AVRO when absent), ``references``, ``guid``."""
    try:
        refs = tuple(Reference(r["name"], r["subject"], int(r["version"]))
                     for r in doc.get("references") or ())
        return Schema(int(doc["id"]) if schema_id is None else schema_id,
                      doc.get("schemaType") or AVRO, doc["schema"], refs, doc.get("guid"))
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise RegistryError(f"a schema without a usable field: {err!r}") from err


@dataclass(slots=True)
class Registry:
    """Schemas by id and GUID, subjects' versions, configs and modes.

    Build one with :meth:`from_schemas_records`, :func:`from_schemas_topic`,
    :func:`from_folder` or :func:`kafkalog.schemas.open_source` (which also opens a live
    registry: :class:`kafkalog.schemas.live.LiveRegistry`, a subclass);
    :mod:`kafkalog.schemas.decoders` compiles and caches a decoder per id on first use
    (``decoders``).
    """

    schemas: dict[int, Schema] = field(default_factory=dict)
    guids: dict[str, int] = field(default_factory=dict)
    versions: dict[tuple[str, int], SubjectVersion] = field(default_factory=dict)
    configs: dict[str | None, dict] = field(default_factory=dict)
    modes: dict[str | None, dict] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    decoders: dict = field(default_factory=dict)

    #: Not pickled: compiled decoders (closures over descriptor pools) are rebuilt on first use,
    #: so a registry can travel to Spark executors.
    _UNPICKLED = ("decoders",)

    def __getstate__(self) -> dict:
        from dataclasses import fields
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in self._UNPICKLED}

    def __setstate__(self, state: dict) -> None:
        from dataclasses import fields
        for f in fields(self):
            object.__setattr__(self, f.name, state[f.name] if f.name in state else
                               (f.default_factory() if callable(f.default_factory) else f.default))

    # ------------------------------------------------------------- lookups
    def by_id(self, schema_id: int) -> Schema | None:
        return self.schemas.get(schema_id)

    def by_guid(self, guid: str) -> Schema | None:
        schema_id = self.guids.get(guid)
        return None if schema_id is None else self.schemas.get(schema_id)

    def resolve(self, ref: Reference) -> Schema:
        """The schema a reference names (a soft-deleted version resolves too)."""
        sv = self.versions.get((ref.subject, ref.version))
        schema = None if sv is None else self.schemas.get(sv.schema_id)
        if schema is None:
            raise RegistryError(
                f"reference {ref.name!r}: subject {ref.subject!r} version {ref.version} is not registered")
        return schema

    def subjects(self, include_deleted: bool = False) -> dict[str, list[int]]:
        """``{subject: [versions]}``, as ``GET /subjects`` lists them."""
        out: dict[str, list[int]] = {}
        for (subject, version), sv in sorted(self.versions.items()):
            if include_deleted or not sv.deleted:
                out.setdefault(subject, []).append(version)
        return out

    # ------------------------------------------------------------- building
    def add(self, schema: Schema, subject: str | None = None, version: int | None = None,
            deleted: bool = False) -> None:
        self.schemas[schema.id] = schema
        if schema.guid:
            self.guids[schema.guid] = schema.id
        if subject is not None and version is not None:
            self.versions[(subject, version)] = SubjectVersion(schema.id, deleted)

    def _forget(self, keys: Iterable[tuple[str, int]]) -> None:
        """Hard-delete versions; an id nobody holds any more is gone."""
        dropped = {self.versions.pop(k).schema_id for k in list(keys) if k in self.versions}
        held = {sv.schema_id for sv in self.versions.values()}
        for schema_id in dropped - held:
            schema = self.schemas.pop(schema_id, None)
            if schema is not None and schema.guid:
                self.guids.pop(schema.guid, None)

    def apply(self, key: bytes | None, value: bytes | None, where: str = "") -> None:
        """Apply one ``_schemas`` record, as the registry's store reader does."""
        try:
            k = json.loads(key) if key is not None else None
            v = json.loads(value) if value is not None else None
        except (ValueError, UnicodeDecodeError) as err:
            self.problems.append(f"{where}: not JSON: {err}")
            return
        if not isinstance(k, dict) or not isinstance(v, (dict, type(None))):
            self.problems.append(f"{where}: key or value is not a JSON object")
            return
        keytype = k.get("keytype")
        subject = k.get("subject")
        try:
            if keytype == "SCHEMA":
                version = int(k["version"])
                if v is None:
                    self._forget([(subject, version)])
                    return
                schema = schema_from_json(v)
                if schema.schema_type not in FORMATS:
                    self.problems.append(f"{where}: schema id {schema.id}: unknown schemaType "
                                         f"{schema.schema_type!r}")
                self.add(schema, v.get("subject", subject), int(v.get("version", version)),
                         bool(v.get("deleted", False)))
            elif keytype in ("CONFIG", "MODE"):
                target = self.configs if keytype == "CONFIG" else self.modes
                if v is None:
                    target.pop(subject, None)
                else:
                    target[subject] = v
            elif keytype == "NOOP":
                pass
            elif keytype == "DELETE_SUBJECT":
                upto = int(v["version"]) if v else None
                for (s, ver), sv in list(self.versions.items()):
                    if s == subject and (upto is None or ver <= upto):
                        self.versions[(s, ver)] = sv._replace(deleted=True)
            elif keytype == "CLEAR_SUBJECT":
                self._forget([(s, ver) for (s, ver), sv in self.versions.items()
                              if s == subject and sv.deleted])
            else:
                self.problems.append(f"{where}: unknown keytype {keytype!r}")
        except RegistryError as err:
            self.problems.append(f"{where}: {keytype} record: {err}")
        except (KeyError, TypeError, ValueError) as err:
            self.problems.append(f"{where}: {keytype} record without a usable field: {err!r}")

    @classmethod
    def from_schemas_records(cls, records: Iterable[tuple[bytes | None, bytes | None]]) -> "Registry":
        """A registry from ``_schemas`` records ``(key, value)`` in offset order."""
        registry = cls()
        for i, (key, value) in enumerate(records):
            registry.apply(key, value, f"record {i}")
        return registry


# ----------------------------------------------------------------- sources
def _segment_files(path: str) -> list[str]:
    """The ``.log`` files of a ``_schemas`` segment, partition folder or snapshot root."""
    if os.path.isfile(path):
        return [path]
    folder = path
    if not any(n.endswith(".log") for n in os.listdir(path)):
        nested = [os.path.join(path, n) for n in sorted(os.listdir(path)) if n.startswith("_schemas-")]
        if nested:
            folder = nested[0]
    return [os.path.join(folder, n) for n in sorted(os.listdir(folder)) if n.endswith(".log")]


def from_schemas_topic(path: str) -> Registry:
    """Read the ``_schemas`` topic from a segment, its partition folder (``_schemas-0``) or
    a folder holding that partition folder. Segments are read in base-offset order; a
    batch whose CRC fails is skipped and noted in :attr:`Registry.problems`."""
    files = _segment_files(path)
    if not files:
        raise RegistryError(f"{path}: no _schemas segment (.log) here")
    registry = Registry()
    for f in files:
        read_schemas_segment(registry, f, f)
    return registry


def read_schemas_segment(registry: Registry, source, where: str) -> None:
    """Apply one ``_schemas`` segment's records to ``registry`` (``source``: what
    :func:`kafkalog.scan` reads, a path or a ``Slice``; ``where`` names it in problems);
    a batch whose CRC fails is skipped and noted in :attr:`Registry.problems`."""
    from ..log_reader import scan
    from ..model import Batch

    for item in scan(source):
        if not isinstance(item, Batch):
            registry.problems.append(f"{where}: {item.kind} at byte {item.position}: {item.message}")
            continue
        if item.is_control or item.crc_valid is False:
            if item.crc_valid is False:
                registry.problems.append(f"{where}: batch at byte {item.position} skipped: CRC mismatch")
            continue
        for r in item.records:
            registry.apply(r.key, r.value, f"{where} offset {r.offset}")


#: Schema file suffixes of a schema folder and the format each holds.
FOLDER_SUFFIXES = {".avsc": AVRO, ".proto": PROTOBUF, ".json": JSON}


def from_folder(path: str) -> Registry:
    """A registry from a folder of schema files.

    Two kinds of file, side by side: ``<id>.avsc``, ``<id>.proto`` or ``<id>.json`` (the
    schema text alone, its id from the file name, no references); and ``*.json`` holding
    the registry's own answer for a version (``GET /subjects/{s}/versions/{v}``:
    ``subject, version, id, schema``, optional ``schemaType``, ``references``, ``guid``),
    or a list of them — the way to give references.
    """
    registry = Registry()
    names = sorted(os.listdir(path))
    for name in names:
        stem, ext = os.path.splitext(name)
        full = os.path.join(path, name)
        if ext not in FOLDER_SUFFIXES or not os.path.isfile(full):
            continue
        with open(full, encoding="utf-8") as f:
            text = f.read()
        if ext == ".json":
            try:
                doc = json.loads(text)
            except ValueError as err:
                raise RegistryError(f"{full}: not JSON: {err}") from err
            entries = doc if isinstance(doc, list) else [doc]
            if all(isinstance(e, dict) and "schema" in e and "id" in e for e in entries):
                for e in entries:
                    try:
                        registry.add(schema_from_json(e), e.get("subject"), e.get("version"))
                    except RegistryError as err:
                        raise RegistryError(f"{full}: {err}") from err
                continue
        if not stem.isdigit():
            raise RegistryError(f"{full}: a schema file is named by its id (<id>{ext})")
        registry.add(Schema(int(stem), FOLDER_SUFFIXES[ext], text))
    if not registry.schemas:
        raise RegistryError(f"{path}: no schema files (<id>.avsc, <id>.proto, <id>.json)")
    return registry


def is_schemas_source(path: str) -> bool:
    """Whether ``path`` holds ``_schemas`` segments (else it is read as a schema folder)."""
    if os.path.isfile(path):
        return True
    names = os.listdir(path)
    return any(n.endswith(".log") for n in names) or any(n.startswith("_schemas-") for n in names)


def decode_descriptor(text: str) -> bytes | None:
    """The serialized ``FileDescriptorProto`` of a Protobuf schema registered as base64
    (the Python client's way), or None when ``text`` is ``.proto`` source (Java's way)."""
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:
        return None
