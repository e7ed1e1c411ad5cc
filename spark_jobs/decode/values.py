"""Values as data: the ``records`` columns a Schema Registry's schemas fill
(docs/schemas.md, "In the tables").

Each records batch a task decodes gets :data:`COLUMNS`: the key's and the value's schema
id and format, the value decoded to JSON text (``value_json``, the shapes of
``kafkalog dump --schemas``: :func:`kafkalog.schemas.decode_one`), and why a value in the
wire format did not decode (``value_error``: ``unknown_schema_id`` or ``malformed``). Each
such value is also a ``value_decode_error`` finding with its bytes (at most
``--max-raw-bytes``), up to :data:`MAX_FINDINGS_PER_TASK` per task; the audit's
``schema_decode`` check counts them all from ``value_error``.

The registry comes from the driver (:func:`registry_for_run`) in the task context. The
hot path is a byte test (:func:`_wire_mask`): only values whose first byte is the wire format's magic 0 (or
whose record names a schema in a ``__value_schema_id`` header) are looked at one by one;
a batch with none of them gets null columns at once, as does every batch when the run
has no registry.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kafkalog import schemas as sr
from kafkalog.schemas.wire import MAGIC_ID
from spark_jobs.findings import Finding
from spark_jobs.schemas import VALUE_COLUMNS

#: the columns this module adds to ``records`` (before the lineage columns), in order
COLUMNS = pa.schema(VALUE_COLUMNS)
#: the finding a value in the wire format that does not decode gives
FINDING_KIND = "value_decode_error"
#: at most this many ``value_decode_error`` findings per task (one more says how many
#: were left out); ``records.value_error`` holds every one
MAX_FINDINGS_PER_TASK = 1000
#: the topic Schema Registry keeps its state in
SCHEMAS_TOPIC = "_schemas"

_HEADER_NAMES = pa.array([sr.KEY_SCHEMA_HEADER, sr.VALUE_SCHEMA_HEADER], pa.string())


def null_columns(n: int) -> list[pa.Array]:
    return [pa.nulls(n, f.type) for f in COLUMNS]


def _wire_mask(column: pa.Array) -> np.ndarray:
    """True where a key or value starts with the wire format's magic byte 0: the first byte
    of each non-empty value, read straight from the Arrow buffers (no copy, no new array)."""
    n = len(column)
    _, offsets, data = column.buffers()
    if data is None or n == 0:
        return np.zeros(n, dtype=bool)
    width = np.int64 if pa.types.is_large_binary(column.type) else np.int32
    offsets = np.frombuffer(offsets, dtype=width, count=column.offset + n + 1)[column.offset:]
    starts = offsets[:-1]
    nonempty = np.flatnonzero(offsets[1:] > starts)  # a null value is empty too
    out = np.zeros(n, dtype=bool)
    out[nonempty] = np.frombuffer(data, dtype=np.uint8)[starts[nonempty]] == MAGIC_ID
    if column.null_count:  # Arrow lets a null slot span bytes: it is no value
        out &= column.is_valid().to_numpy(zero_copy_only=False)
    return out


def _schema_headers(headers: pa.Array) -> bool:
    """Whether any record of the batch has a ``__key_schema_id``/``__value_schema_id`` header."""
    flat = pc.list_flatten(headers)
    if len(flat) == 0:
        return False
    return bool(pc.any(pc.is_in(flat.field("key"), value_set=_HEADER_NAMES)).as_py())


def _as_array(column) -> pa.Array:
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


#: Kafka's own topics (``__consumer_offsets``, ``__transaction_state``,
#: ``__cluster_metadata``) are never in the wire format, though their keys and values start
#: with a 0 byte (an int16 version): they are not looked at (the internal tables decode them)
INTERNAL_PREFIX = "__"


def decodes_topic(topic: str | None) -> bool:
    """Whether values of ``topic`` may be in Schema Registry's wire format."""
    return not (topic or "").startswith(INTERNAL_PREFIX)


class ValueDecoder:
    """Adds :data:`COLUMNS` to a task's records batches (of ``topic``) and collects its
    findings."""

    def __init__(self, registry: sr.Registry | None, max_raw: int, topic: str | None = None):
        self.registry = registry if decodes_topic(topic) else None
        self.max_raw = max_raw
        self.findings: list[dict] = []
        self.left_out = 0

    def columns(self, batch: pa.RecordBatch) -> list[pa.Array]:
        """The :data:`COLUMNS` of ``batch`` (a kafkalog records batch)."""
        n = batch.num_rows
        if self.registry is None or n == 0:
            return null_columns(n)
        keys, values = _as_array(batch.column("key")), _as_array(batch.column("value"))
        wire = _wire_mask(keys) | _wire_mask(values)
        headers = _as_array(batch.column("headers"))
        named = _schema_headers(headers)
        if not named and not wire.any():
            return null_columns(n)
        rows = set(np.flatnonzero(wire).tolist())
        if named:
            rows.update(i for i, hs in enumerate(headers.to_pylist())
                        if hs and any(h["key"] in (sr.KEY_SCHEMA_HEADER, sr.VALUE_SCHEMA_HEADER)
                                      for h in hs))
        out = [[None] * n for _ in COLUMNS]
        offsets = batch.column("offset")
        positions = batch.column("batch_position")
        for i in sorted(rows):
            hs = headers[i].as_py() if named else None
            hs = [(h["key"], h["value"]) for h in hs] if hs else ()
            key = keys[i].as_py()
            if key is not None:
                k = self._key(key, sr.wire_header(hs, sr.KEY_SCHEMA_HEADER))
                out[0][i], out[2][i] = k
            value = values[i].as_py()
            if value is None:
                continue
            d = sr.decode_one(self.registry, value, sr.wire_header(hs, sr.VALUE_SCHEMA_HEADER))
            out[1][i], out[3][i] = d.schema_id, d.format
            if d.error is not None:
                out[5][i] = d.error
                self._finding(d, value, offsets[i].as_py(), positions[i].as_py())
            elif d.schema_id is not None or d.format is not None:
                out[4][i] = json.dumps(d.decoded, ensure_ascii=False, separators=(",", ":"))
        return [pa.array(col, f.type) for col, f in zip(out, COLUMNS)]

    def _key(self, key: bytes, header: bytes | None) -> tuple[int | None, str | None]:
        """A key's schema id and format: looked up, not decoded (the key stays bytes)."""
        try:
            ref = sr.schema_ref(key, header)
        except sr.WireFormatError:
            return None, None
        if ref is None:
            return None, None
        schema = self.registry.by_id(ref.schema_id) if ref.guid is None \
            else self.registry.by_guid(ref.guid)
        if schema is None:
            return ref.schema_id, None
        return schema.id, schema.schema_type

    def _finding(self, d: sr.Decoded, value: bytes, offset: int, position: int) -> None:
        if len(self.findings) >= MAX_FINDINGS_PER_TASK:
            self.left_out += 1
            return
        raw = value if len(value) <= self.max_raw else None
        what = f"schema id {d.schema_id}" if d.schema_id is not None else "a schema header"
        message = f"offset {offset}: value ({what}) is {d.error}: {d.reason}"
        if raw is None:
            message += f" (raw bytes not kept: {len(value)} bytes exceed --max-raw-bytes)"
        self.findings.append(Finding(
            kind=FINDING_KIND, position=position, end=position, message=message,
            base_offset=offset, last_offset=offset, bytes=len(value), raw=raw).task_row())

    def take_findings(self) -> list[dict]:
        """The findings so far (and one that counts those left out), emptied."""
        out, self.findings = self.findings, []
        if self.left_out:
            out.append(Finding(
                kind=FINDING_KIND, position=out[-1]["position"] if out else 0,
                end=out[-1]["end"] if out else 0,
                message=f"{self.left_out} more undecodable values in this task not listed "
                        f"(at most {MAX_FINDINGS_PER_TASK} a task); records.value_error has "
                        "them all").task_row())
            self.left_out = 0
        return out


def with_columns(batch: pa.RecordBatch, cols: list[pa.Array]) -> pa.RecordBatch:
    """``batch`` with :data:`COLUMNS` appended (by name: :func:`writing.lineage` orders them)."""
    return pa.RecordBatch.from_arrays(list(batch.columns) + cols,
                                      names=batch.schema.names + COLUMNS.names)


# ------------------------------------------------------------------ the driver
#: where the job takes a live registry's basic-auth user and password from (never the
#: command line: the DAG sets them from its Airflow connection)
AUTH_ENV = ("KAFKALOG_SCHEMA_REGISTRY_USER", "KAFKALOG_SCHEMA_REGISTRY_PASSWORD")


def auth_from_env(environ=None) -> tuple[str, str] | None:
    """``(user, password)`` from :data:`AUTH_ENV`, or None where no user is set."""
    import os

    env = os.environ if environ is None else environ
    user = env.get(AUTH_ENV[0])
    return (user, env.get(AUTH_ENV[1], "")) if user else None


def describe(registry: sr.Registry | None) -> str | None:
    """The run summary's word on its registry: None, the URL, or how many schemas."""
    if registry is None:
        return None
    url = getattr(registry, "url", None)
    return url or f"{len(registry.schemas)} schemas, {len(registry.problems)} records skipped"


def schemas_segments(segments) -> list:
    """The listing's ``_schemas`` segments: by partition, then folder (several nights'
    copies one night after the other: their folders differ by the night's date), then
    base offset."""
    return sorted((s for s in segments if s.topic == SCHEMAS_TOPIC),
                  key=lambda s: (s.partition, s.uri.rsplit("/", 1)[0], s.base_offset))


def registry_for_run(source: str | None, segments, s3=None, *, auth=None) -> sr.Registry | None:
    """The run's registry: from ``source`` (``--schema-registry``: a registry URL, a
    segment manifest or ``s3://`` prefix holding ``_schemas`` segments, a local
    ``_schemas`` folder or a schema folder) if given, else from the listing's own
    ``_schemas`` segments; None when there is neither (nothing is decoded).

    Skipped ``_schemas`` records are said on stderr, as ``kafkalog dump --schemas`` does."""
    if source and source.startswith(("http://", "https://")):
        from kafkalog.schemas.live import LiveRegistry
        registry = LiveRegistry(source, auth=auth)
    elif source and (source.endswith(".json") or source.startswith("s3://")):
        # a manifest (the DAG's plan writes one of the snapshot's _schemas segments) or a
        # snapshot prefix in S3
        from spark_jobs.decode.planning import discover

        found = schemas_segments(discover(source, s3)[0])
        if not found:
            raise sr.RegistryError(f"{source}: no {SCHEMAS_TOPIC} segments there")
        registry = _from_segments(found, s3)
    elif source:
        registry = sr.open_source(source)
    else:
        found = schemas_segments(segments)
        if not found:
            return None
        registry = _from_segments(found, s3)
    for problem in registry.problems:
        print(f"decode_segments: schemas: skipped {problem}", file=sys.stderr)
    return registry


def _from_segments(segments, s3) -> sr.Registry:
    """A registry from ``_schemas`` segments (local or ``s3://``), read in the given order."""
    import kafkalog
    from kafkalog.schemas.registry import read_schemas_segment
    from spark_jobs import storage

    registry = sr.Registry()
    for seg in segments:
        store, key = storage.open_object(seg.uri, s3)
        read_schemas_segment(registry, kafkalog.Slice(store.read(key), 0), seg.uri)
    return registry
