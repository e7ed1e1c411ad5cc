"""Typed per-topic tables (issue 20, part 5; docs/tables.md "Typed tables", docs/schemas.md).

A topic whose values carry an **Avro**, **JSON Schema** or **Protobuf** schema of its subject
``<topic>-value`` (TopicNameStrategy) gets a table :func:`layout.typed_table_name` whose columns are the
record's fields (Protobuf: the fields of the ``.proto`` file's first top-level message,
:data:`TABLE_MESSAGE`), with the lineage columns :data:`LINEAGE` first. The driver plans each
topic from the registry (:func:`plan_topics`): the subject's versions in order, each
turned into Arrow types (:func:`arrow_type`) and merged into the table's columns
(:func:`merge`): a version that adds fields widens the table (Iceberg schema evolution,
``union_by_name``: new columns are optional, older rows read null). **A value we cannot type
costs its cell, never the row** (issue 42 item 3): a field a version types otherwise than the
table (:func:`~spark_jobs.derive.value_types.differences`), a value that does not convert or
fit its column (:func:`~spark_jobs.derive.value_types.fit`) is null in a row that lands, one
:data:`~spark_jobs.findings.TYPED_VALUE_ERROR` per cell (:class:`Cells`); a field whose schema
has no column form (a union of two non-null types, a recursive record, a JSON Schema ``$ref``
or combinator) is a column of each value's JSON text, one
:data:`~spark_jobs.findings.TYPED_UNTYPED_COLUMN` note per column. Refused whole, as one
``schema_incompatible`` finding per partition and schema id (its values stay in
``records.value_json``): a version with no table form at all (no record, a field named like a
lineage column, a reference that does not resolve) and a Protobuf value whose message indexes
name another message than the table's (read from the raw ``value``, or its
``__value_schema_id`` header).

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

import json
import os
import shutil
import tempfile
from dataclasses import replace

import pyarrow as pa
import pyarrow.parquet as pq

from kafkalog.schemas.registry import PROTOBUF
from spark_jobs import layout, schemas, storage
from spark_jobs.derive.files import FILE_ROWS, map_files
from spark_jobs.derive.step import Output, Submission
from spark_jobs.findings import TYPED_UNTYPED_COLUMN, TYPED_VALUE_ERROR, Finding
from spark_jobs.derive.value_types import (LINEAGE, TABLE_MESSAGE, TYPED_FORMATS, Untyped,
                                           column_types, converter, differences, fit, merge,
                                           message_indexes, plain, protobuf_converter,
                                           protobuf_plan, subject, text_columns, value_schema)
from spark_jobs.parquet import PartWriter, partition_path, topic_of

#: the finding kind of rows whose schema version cannot join the topic's typed table
INCOMPATIBLE = "schema_incompatible"
#: the records columns a task reads (``value``: a cell's finding keeps it as its ``raw``)
_READ = ("topic", "partition", "offset", "timestamp", "value_schema_id", "value_format",
         "value_error", "value_json", "segment", "segment_base_offset", "batch_position",
         "run_id", "value")
#: what a Protobuf topic's task reads besides: the values' message indexes (with ``value``)
_READ_INDEXES = ("headers",)
#: rows a task converts before it writes them
FLUSH_ROWS = 50_000
#: the typed_value_error findings a task writes at most; one more says how many were left out
MAX_CELL_FINDINGS = 1_000

class TopicPlan:
    """What the executors need for one topic: its table's data root and columns, the schema
    ids that go in, the incompatible ones with the reason, per Protobuf schema id
    ``(spec, {message indexes: message name})`` (:func:`protobuf_plan`), and what each
    version's own columns make of its rows (:attr:`notes`, :attr:`text`, :attr:`drop`)."""

    def __init__(self, table: str, root: str, schema: pa.Schema, ok: set, bad: dict,
                 proto: dict | None = None, versions: dict | None = None):
        self.table, self.root, self.schema, self.ok, self.bad = table, root, schema, ok, bad
        self.proto = proto or {}
        #: per schema id (``versions``: each one's own struct, :func:`version_structs`):
        #: {JSON text column path: why} (its note; where the table's column is a string) and
        #: {field names: why} of the fields it types otherwise than the table (null in its rows)
        self.notes: dict[int, dict[str, str]] = {}
        self.drop: dict[int, dict[tuple, str]] = {}
        columns = pa.struct([f for f in schema if f.name not in LINEAGE.names])
        types = column_types(columns)
        for sid, struct in (versions or {}).items():
            self.notes[sid] = {p: why for p, why in text_columns(struct).items()
                               if pa.types.is_string(types.get(p, pa.null()))}
        #: the JSON text columns: any version's value there is its JSON text
        self.text = frozenset(p for n in self.notes.values() for p in n)
        for sid, struct in (versions or {}).items():
            self.drop[sid] = differences(columns, struct, text=self.text)

    def columns(self) -> tuple[str, ...]:
        """The records columns the executors read for this topic (Protobuf values: their
        message indexes too, from ``value`` and ``headers``)."""
        return _READ + (_READ_INDEXES if self.proto else ())


def plan_schemas(registry, topic: str, existing: pa.Schema | None) -> tuple[pa.Schema | None,
                                                                             set, dict]:
    """``(columns, ok ids, {bad id: reason})`` of ``topic``'s value subject (Avro, JSON
    Schema, Protobuf), its versions merged in order into ``existing`` (the table's value
    columns, if any). A version that changes a field's type is ok (the table's type stays;
    :class:`TopicPlan` nulls that field in its rows); bad: one with no table form at all."""
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
    cols = None if current is None else plain(pa.schema([current.field(i)
                                                        for i in range(current.num_fields)]))
    return cols, ok, bad


def version_structs(registry, ids) -> dict:
    """``{schema id: its own columns as a struct}`` (JSON text fields marked,
    :data:`~spark_jobs.derive.value_types.JSON_TEXT`) of the versions ``ids``."""
    return {sid: pa.struct(list(value_schema(registry, sid))) for sid in sorted(ids)}


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
        out[topic] = TopicPlan(name, layout.table_folder(table.location()), full, ok, bad,
                               protobuf_specs(registry, ok), version_structs(registry, ok))
    return out



# ------------------------------------------------------------------ rows


class Cells:
    """The cell findings of one task: a :data:`~spark_jobs.findings.TYPED_VALUE_ERROR` per
    value that is null in its row (at most :data:`MAX_CELL_FINDINGS`, then one more per
    topic saying how many were left out: :meth:`close`), and a
    :data:`~spark_jobs.findings.TYPED_UNTYPED_COLUMN` note per JSON text column and topic,
    at the first record of a version that has it."""

    def __init__(self, limit: int = MAX_CELL_FINDINGS):
        self.limit, self.written = limit, 0
        self.noted: set[tuple[str, str]] = set()
        self.left: dict[str, list] = {}  # topic -> [count, first offset, last offset, finding]

    @staticmethod
    def finding(cols: dict, i: int, kind: str, message: str) -> Finding:
        value, o = cols.get("value", [None] * (i + 1))[i], cols["offset"][i]
        return Finding(
            kind=kind, message=f"offset {o}: {message}", position=cols["batch_position"][i],
            end=cols["batch_position"][i], base_offset=o, last_offset=o,
            bytes=None if value is None else len(value), raw=value, topic=cols["topic"][i],
            partition=cols["partition"][i], segment=cols["segment"][i],
            segment_base_offset=cols["segment_base_offset"][i], run_id=cols["run_id"][i])

    def value_error(self, cols: dict, i: int, where: str, why: str, out: list) -> None:
        if self.written < self.limit:
            self.written += 1
            out.append(self.finding(cols, i, TYPED_VALUE_ERROR,
                                    f"column {where} is null in the row: {why}"))
            return
        o = cols["offset"][i]
        left = self.left.setdefault(cols["topic"][i], [0, o, o, self.finding(
            cols, i, TYPED_VALUE_ERROR, "")])
        left[0], left[1], left[2] = left[0] + 1, min(left[1], o), max(left[2], o)

    def note(self, cols: dict, i: int, notes: dict, sid: int, out: list) -> None:
        for where, why in notes.items():
            if (cols["topic"][i], where) not in self.noted:
                self.noted.add((cols["topic"][i], where))
                out.append(self.finding(cols, i, TYPED_UNTYPED_COLUMN,
                                        f"column {where} holds each value's JSON text (schema "
                                        f"id {sid}: {why})"))

    def close(self) -> list[Finding]:
        """One finding per topic of the cells beyond the limit."""
        out = []
        for n, first, last, f in self.left.values():
            out.append(replace(f, base_offset=first, last_offset=last, raw=None, bytes=None,
                               message=f"{n} more value(s) at offsets {first}..{last} are null "
                                       f"in their rows (findings past {self.limit} a task are "
                                       "not listed; records.value_json holds the values)"))
        self.left = {}
        return out


def _pop(doc, names: tuple, why: str, bad: list) -> None:
    """Take field ``names`` out of ``doc`` (value_json data), ``bad`` naming it if it held a
    value."""
    d = doc
    for n in names[:-1]:
        d = d.get(n) if isinstance(d, dict) else None
    v = d.pop(names[-1], None) if isinstance(d, dict) else None
    if v is not None:
        bad.append((".".join(names), f"{v!r:.120}: {why}"))


def _clear(row: dict, names: tuple) -> None:
    d = row
    for n in names[:-1]:
        d = d.get(n) if isinstance(d, dict) else None
    if isinstance(d, dict) and names[-1] in d:
        d[names[-1]] = None


def rows_of(records: pa.Table, plan: TopicPlan, cells: Cells | None = None
            ) -> tuple[pa.Table | None, dict, list[Finding]]:
    """The typed rows of one topic's records, ``{(partition, schema id): [first offset, last
    offset, rows, segment, segment base offset, position, reason]}`` of the values that do
    not go in (a version with no table form; a Protobuf value of another message), and the
    cells' findings: a value that does not convert or fit its column is null in a row that
    lands, a field a version types otherwise than the table is null in that version's rows,
    each with a :data:`~spark_jobs.findings.TYPED_VALUE_ERROR` (:class:`Cells`)."""
    cells = Cells() if cells is None else cells
    cols = {c: records.column(c).to_pylist() for c in plan.columns() if c in records.column_names}
    convert = converter(pa.struct([f for f in plan.schema if f.name not in LINEAGE.names]),
                        plan.text)
    proto = {sid: (protobuf_converter(("msg", spec)), names)
             for sid, (spec, names) in plan.proto.items()}
    rows, kept, errors, bad, found = [], [], [], {}, []
    noted: set[int] = set()

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
        cell_errors: list[tuple[str, str]] = []
        if cols["value_format"][i] == PROTOBUF:
            conv, names = proto[sid]
            try:
                indexes = message_indexes(cols["value"][i], cols["headers"][i])
            except ValueError as err:
                refuse(i, sid, f"its message indexes do not read: {err}")
                continue
            if indexes != TABLE_MESSAGE:
                refuse(i, sid, f"its message indexes {list(indexes)} name "
                               f"{names.get(indexes, 'no message')}, not "
                               f"{names[TABLE_MESSAGE]} (indexes {list(TABLE_MESSAGE)}, "
                               "the table's message)")
                continue
        else:
            conv = convert
        try:
            doc = json.loads(cols["value_json"][i])
        except (TypeError, ValueError) as err:
            doc = None
            cell_errors.append(("(value)", f"value_json does not parse: {err}"))
        drop = plan.drop.get(sid, {})
        for names, why in drop.items():
            _pop(doc, names, why, cell_errors)
        row = conv(doc, cell_errors, "") or {}
        for names in drop:
            _clear(row, names)
        if sid not in noted:
            noted.add(sid)
            cells.note(cols, i, plan.notes.get(sid, {}), sid, found)
        row.update(kafka_topic=cols["topic"][i], kafka_partition=cols["partition"][i],
                   kafka_offset=cols["offset"][i], kafka_timestamp=cols["timestamp"][i],
                   kafka_schema_id=sid, run_id=cols["run_id"][i])
        rows.append(row)
        kept.append(i)
        errors.append(cell_errors)
    if not rows:
        return None, bad, found
    typed, misfits = fit(rows, plan.schema)
    for j, where, why in misfits:
        errors[j].append((where, why))
    for j, errs in enumerate(errors):
        for where, why in errs:
            cells.value_error(cols, kept[j], where, why, found)
    return typed, bad, found


def _findings(topic: str, plan: TopicPlan, bad: dict, run_id: str) -> list[dict]:
    out = []
    for (partition, sid), (first, last, n, segment, base, position, why) in sorted(bad.items()):
        out.append(Finding(
            topic=topic, partition=partition, kind=INCOMPATIBLE, position=position,
            end=position, base_offset=first, last_offset=last,
            message=f"{n} value(s) at offsets {first}..{last} carry schema id {sid}, a version "
                    f"of {subject(topic)} that does not fit {plan.table}: {why}; "
                    "they are not in the typed table (records.value_json holds them)",
            segment=segment, segment_base_offset=base, run_id=run_id).row())
    return out


def derive(sub: Submission) -> Output:
    """The typed tables' data files of one submission (and their findings, under
    ``findings``), written on the executors from the run's deduplicated records files;
    ``({table: [file URIs]}, {table: rows})``. Nothing where no topic has a value subject."""
    spark, ctx, wh, record_files, registry = sub.spark, sub.ctx, sub.wh, sub.records, sub.registry
    from pyspark import TaskContext

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

    def task(paths):
        part = f"typed{TaskContext.get().partitionId():05d}"
        tmp = tempfile.mkdtemp(prefix="kafkalog-typed-")
        out: list[tuple] = []
        findings: list[dict] = []
        cells = Cells()
        try:
            for path in paths:
                topic = topic_of(path)
                plan = plans[topic]
                records = read_file(path, "records", ctx.s3).select(list(plan.columns()))
                local, writer, n, bad = None, None, 0, {}
                for piece in records.to_batches(FLUSH_ROWS):
                    typed, found, new = rows_of(pa.Table.from_batches([piece]), plan, cells)
                    findings += [f.row() for f in new]
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
            findings += [f.row() for f in cells.close()]
            files = {}
            if findings:
                fw = PartWriter(ctx, part, {"findings": findings_root})
                for topic in sorted({f["topic"] for f in findings}):
                    fw.write("findings", partition_path(topic), pa.Table.from_pylist(
                        [f for f in findings if f["topic"] == topic], schema=schemas.FINDINGS))
                files = fw.commit()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        rows = [{"table": t, "file": f, "rows": n} for t, f, n in out]
        rows += [{"table": "findings", "file": f, "rows": None} for f in files.get("findings", [])]
        rows += [{"table": "findings", "file": None, "rows": len(findings)}] if findings else []
        yield pa.RecordBatch.from_pylist(rows, schema=FILE_ROWS)

    return map_files(spark, paths, task)


__all__ = ["FLUSH_ROWS", "INCOMPATIBLE", "MAX_CELL_FINDINGS", "Cells", "TopicPlan", "derive",
           "plan_schemas", "plan_topics", "protobuf_specs", "rows_of", "version_structs"]
