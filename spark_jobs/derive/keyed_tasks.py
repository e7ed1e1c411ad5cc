"""The per-key state tables' refresh on the executors (issue 35; the state machine is
:mod:`spark_jobs.derive.keyed`): the driver plans, one task per Kafka partition folds.

**The driver plans** (:func:`plan`), per keyed table and per Kafka partition ``P`` the
run touched, a :class:`Item`: the ``records`` data files on the run's branch that may hold
the partition's candidates (pyiceberg's scan planning with ``topic``, ``partition`` and
``run_id = run OR offset >= low``), ``low`` (below), the rows of ``P`` the run's
transaction resolution committed (few: Arrow IPC bytes in the task's row), the state
files of ``P`` at the branch's head, and for a latest table with typed columns the typed
table's files. ``low`` is where the partition is read again from (``keyed``'s text): the
lowest candidate offset at or below the highest offset ``main`` held of ``P`` when the run
began, taken from the lower bounds of the run's own files' ``offset`` statistics and the
resolved rows' offsets. A file's lower bound is at or below each of its rows' offsets, so
``low`` is at or below the driver refresh's: the fold reads some records again that it
did not need, and folding a record again changes nothing (:func:`keyed.apply`). A table
the run makes reads every record of the topic's partition.

**A task** (:func:`fold_partition`, on an executor) reads those files (``s3://`` too,
:func:`spark_jobs.storage.open_object`), keeps the candidates, builds the change frame
with the kind's function (:func:`keyed.latest_changes` after joining the typed columns;
:func:`spark_jobs.derive.cdc.changes`), folds it into the partition's state
(:func:`keyed.apply`) and, where a key changed, writes the partition's new state file.
Only file names, counts and findings reach the driver (:data:`FOLDED`), which commits one
copy-on-write snapshot per table (:meth:`spark_jobs.warehouse.Warehouse.commit_rewrite`): a
commit refused because the branch moved plans the state files again at the new head and
folds again; new state files are deleted only where their commit is known not to have landed.

**A cdc table's columns are one schema** across its partitions: a first pass
(:func:`sources_of`, :data:`SOURCES`) gives each partition's envelope schemas, untyped
column names and position fields; the driver concatenates them in partition order and
types the table once (:func:`spark_jobs.derive.cdc.table_schema`), exactly as one
:func:`~spark_jobs.derive.cdc.changes` over all the candidates in (partition, offset)
order would; the fold pass then uses those columns. The alternative, each task widening
its own file's columns and the driver widening the table to their union, could type one
new column two ways (a Connect type in one partition, JSON text in another, when one
partition's first envelope has the wrapper and another's has not), and would judge a
value's fit (a ``cdc_value_error``) against a column the table does not end with. The
price is reading a cdc topic's candidates twice; a latest table folds in one pass.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from spark_jobs import layout
from spark_jobs.derive import keyed
from spark_jobs.derive.files import on_executors
from spark_jobs.parquet import column_or_null, read_parquet

#: what a fold task yields per partition: its new state file (null: none written), the
#: state files it replaces, the keys changed, its findings (:class:`~spark_jobs.findings.Finding`
#: rows as Arrow IPC bytes: a finding's ``raw`` bytes do not go into JSON)
FOLDED = pa.schema([("partition", pa.int32()), ("file", pa.string()),
                    ("dropped", pa.list_(pa.string())), ("keys", pa.int64()),
                    ("findings", pa.binary())])
#: what a cdc table's first pass yields per partition (:func:`spark_jobs.derive.cdc.sources`;
#: envelope schemas as JSON text)
SOURCES = pa.schema([("partition", pa.int32()), ("envelopes", pa.list_(pa.string())),
                     ("untyped", pa.list_(pa.string())), ("positions", pa.list_(pa.string()))])
#: ``low`` of a table the run makes: every record of the partition is a candidate
FROM_START = -(1 << 63)
_TYPED_KEYS = ("kafka_partition", "kafka_offset")


@dataclass
class Item:
    """One Kafka partition's fold (see the module's text); ``low`` None: the run's own
    records and the resolved ones only."""

    partition: int
    files: list[str]
    low: int | None
    resolved: bytes | None
    state: list[str] = field(default_factory=list)
    typed: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Fold:
    """What every task of one table's fold shares: the table, the run, the change frame's
    columns (``changes``) and the table's (``columns``), where state files go."""

    kind: str
    topic: str
    run_id: str
    night: str | None
    changes: pa.Schema
    columns: pa.Schema
    root: str
    s3: object = None


# ------------------------------------------------------------------ Arrow in a task's row

def to_ipc(table: pa.Table) -> bytes:
    """``table`` as Arrow IPC stream bytes."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def from_ipc(data: bytes) -> pa.Table:
    """The table of :func:`to_ipc`'s bytes."""
    return pa.ipc.open_stream(pa.py_buffer(bytes(data))).read_all()


# ------------------------------------------------------------------ the driver's plan

def _scan(table, snapshot: int, row_filter) -> list:
    from spark_jobs.warehouse import CatalogError

    out = []
    for task in table.scan(snapshot_id=snapshot, row_filter=row_filter).plan_files():
        if task.delete_files:
            raise CatalogError(f"{table.name()}: snapshot {snapshot} has delete files, "
                               "which this pipeline never writes and cannot read")
        out.append(task.file)
    return out


def _bound(data_file, field_id: int, upper: bool = False) -> int | None:
    """A data file's lower (``upper``: upper) bound of an integer column, from its
    statistics (None: none kept)."""
    from pyiceberg.conversions import from_bytes
    from pyiceberg.types import IntegerType, LongType

    raw = ((data_file.upper_bounds if upper else data_file.lower_bounds) or {}).get(field_id)
    if raw is None:
        return None
    return from_bytes(LongType() if len(raw) == 8 else IntegerType(), raw)


def plan(wh, k: keyed.Keyed, run_id: str, partitions: set[int], resolved: pa.Table | None,
         published: dict, ingest_dt: str | None = None) -> list[Item]:
    """The candidates' work items of table ``k`` (no state files yet: :func:`with_state`),
    one per partition of ``partitions`` that has any (see the module's text). The records
    files are planned in at most two scans for all the partitions (the run's own, pruned to
    its ``ingest_dt`` partition where given: the manifests of other days are skipped by
    their partition summaries; then the partitions read again from ``low``), and shared out
    by the files' ``partition`` statistics."""
    from pyiceberg.expressions import And, EqualTo, GreaterThanOrEqual, In

    from spark_jobs import schemas
    from spark_jobs.warehouse import branch_name

    ref = branch_name(run_id)
    records = wh.table("records")
    snapshot = records.refs()[ref].snapshot_id
    offset_id = records.schema().find_field("offset").field_id
    partition_id = records.schema().find_field("partition").field_id
    typed_table = None
    if k.kind == layout.LATEST and typed_columns(k.schema):
        typed_table = wh.load(layout.typed_table_name(k.topic))
        if typed_table is not None and ref not in typed_table.refs():
            typed_table = None
    parts = sorted(partitions)
    mine = {p: _resolved_of(resolved, k.topic, p) for p in parts}
    where = And(EqualTo("topic", k.topic), In("partition", parts))
    if k.new:
        files = _by_partition(_scan(records, snapshot, where), partition_id, parts)
        lows = {p: FROM_START for p in parts}
        lowest = {p: None for p in parts}
    else:
        own_filter = And(where, EqualTo("run_id", run_id))
        if ingest_dt:
            own_filter = And(own_filter, EqualTo(schemas.INGEST_DT, ingest_dt))
        files = _by_partition(_scan(records, snapshot, own_filter), partition_id, parts)
        lows, lowest = {}, {}
        for p in parts:
            firsts = [_bound(f, offset_id) for f in files[p]]
            firsts = [FROM_START if o is None else o for o in firsts]
            firsts += mine[p].column("offset").to_pylist() if mine[p] is not None else []
            held = published.get((k.topic, p))
            top = max(hi for _, hi in held) if held else None
            again = [o for o in firsts if top is not None and o <= top]
            lows[p] = min(again) if again else None
            lowest[p] = min(firsts) if firsts else None
        again = sorted(p for p in parts if lows[p] is not None)
        if again:  # the partitions read again from their low (one scan for them all)
            more = _by_partition(_scan(records, snapshot, And(
                And(EqualTo("topic", k.topic), In("partition", again)),
                GreaterThanOrEqual("offset", min(lows[p] for p in again)))), partition_id, again)
            for p in again:
                seen = {f.file_path for f in files[p]}
                files[p] = files[p] + [f for f in more[p] if f.file_path not in seen]
    items = []
    for p in parts:
        if not files[p] and mine[p] is None:
            continue
        typed = []
        if typed_table is not None:
            tfilter = EqualTo("kafka_partition", p)
            if lowest[p] is not None and lowest[p] != FROM_START:
                tfilter = And(tfilter, GreaterThanOrEqual("kafka_offset", lowest[p]))
            typed = [f.file_path for f in _scan(
                typed_table, typed_table.refs()[ref].snapshot_id, tfilter)]
        items.append(Item(p, [f.file_path for f in files[p]], lows[p],
                          None if mine[p] is None else to_ipc(mine[p]), typed=typed))
    return items


def _by_partition(data_files: list, field_id: int, partitions: list[int]) -> dict[int, list]:
    """``data_files`` shared out to the Kafka partitions their ``partition`` statistics
    span (a file without them: to every partition)."""
    out = {p: [] for p in partitions}
    for f in data_files:
        lo, hi = _bound(f, field_id), _bound(f, field_id, upper=True)
        for p in partitions:
            if (lo is None or lo <= p) and (hi is None or p <= hi):
                out[p].append(f)
    return out


def _resolved_of(resolved: pa.Table | None, topic: str, partition: int) -> pa.Table | None:
    """The rows of ``resolved`` of one partition (the :data:`keyed.READ` columns), or None."""
    if resolved is None or resolved.num_rows == 0:
        return None
    mine = resolved.filter(pc.and_(pc.equal(resolved.column("topic"), topic),
                                   pc.equal(resolved.column("partition"), partition)))
    return mine.select(list(keyed.READ)) if mine.num_rows else None


def with_state(wh, name: str, head: int, items: list[Item]) -> list[Item]:
    """``items`` with the state files of their partitions at snapshot ``head`` of table
    ``name``."""
    from pyiceberg.expressions import EqualTo

    from spark_jobs.tables import table_paths

    for item in items:
        item.state = table_paths(wh, name, snapshot=head,
                                 row_filter=EqualTo("partition", item.partition))
    return items


def typed_columns(columns: pa.Schema) -> list[pa.Field]:
    """A latest table's typed value columns (none: no typed table)."""
    return [f for f in columns if f.name not in keyed.LATEST.names
            and f.name not in keyed.TAIL.names]


# ------------------------------------------------------------------ a task

def candidate_rows(item: dict, job: Fold) -> pa.Table:
    """The candidate records of a work item (an :class:`Item` as a dict), each offset once."""
    from spark_jobs.tables import read_file

    parts = []
    for path in item["files"]:
        rows = read_file(path, "records", job.s3).select(list(keyed.READ))
        keep = pc.and_(pc.equal(rows.column("topic"), job.topic),
                       pc.equal(rows.column("partition"), item["partition"]))
        if item["low"] is not None:
            keep = pc.and_(keep, pc.or_(pc.equal(rows.column("run_id"), job.run_id),
                                        pc.greater_equal(rows.column("offset"), item["low"])))
        else:
            keep = pc.and_(keep, pc.equal(rows.column("run_id"), job.run_id))
        parts.append(rows.filter(pc.fill_null(keep, False)))
    if item["resolved"] is not None:  # last: a resolved row wins over a copy read before
        parts.append(from_ipc(item["resolved"]))
    if not parts:
        from spark_jobs import schemas

        return pa.schema([schemas.RECORDS.field(n) for n in keyed.READ]).empty_table()
    schema = parts[0].schema
    return keyed.distinct_offsets(pa.concat_tables([t.cast(schema) for t in parts]))


def join_typed(rows: pa.Table, typed: pa.Table | None, columns: pa.Schema) -> pa.Table:
    """``rows`` (records) with the typed columns of ``columns`` from ``typed`` (the typed
    table's rows, by ``kafka_partition``/``kafka_offset``; null where it has none)."""
    value_cols = typed_columns(columns)
    if not value_cols or rows.num_rows == 0:
        return rows
    at = {}
    if typed is not None:
        for i, key in enumerate(zip(*(typed.column(c).to_pylist() for c in _TYPED_KEYS))):
            at[key] = i
    idx = pa.array([at.get(key) for key in zip(rows.column("partition").to_pylist(),
                                                rows.column("offset").to_pylist())], pa.int64())
    for f in value_cols:
        if f.name in rows.column_names:
            continue
        if typed is not None and f.name in typed.column_names:
            col = typed.column(f.name).take(idx).cast(f.type)
        else:
            col = pa.nulls(rows.num_rows, f.type)
        rows = rows.append_column(f, col)
    return rows


def typed_rows(item: dict, job: Fold) -> pa.Table | None:
    """The typed table's rows of a work item's partition (its value columns a latest table
    takes; a column a file lacks reads null)."""
    want = typed_columns(job.changes)
    parts = []
    for path in item["typed"]:
        t = read_parquet(path, job.s3)
        t = t.filter(pc.fill_null(pc.equal(t.column("kafka_partition"), item["partition"]),
                                  False))
        cols = {c: t.column(c).cast(pa.int64() if c == "kafka_offset" else pa.int32())
                for c in _TYPED_KEYS}
        for f in want:
            cols[f.name] = column_or_null(t, f).cast(f.type)
        parts.append(pa.table(cols))
    return pa.concat_tables(parts) if parts else None


def changes_of(rows: pa.Table, item: dict, job: Fold) -> tuple[pa.Table, list]:
    """A partition's change frame (the kind's function) and findings."""
    if job.kind == layout.LATEST:
        rows = join_typed(rows, typed_rows(item, job), job.changes)
        return keyed.latest_changes(rows, job.changes), []
    from spark_jobs.derive import cdc

    frame, _, found = cdc.changes(keyed.visible(rows), job.changes)
    return frame, found


def fold_partition(item: dict, job: Fold) -> dict:
    """Fold a work item's changes into its partition's state; where a key changed, write
    the new state file. A row of :data:`FOLDED`."""
    changes, found = changes_of(candidate_rows(item, job), item, job)
    p = item["partition"]
    out = {"partition": p, "file": None, "dropped": [], "keys": 0,
           "findings": to_ipc(pa.Table.from_pylist([f.row() for f in found])) if found else None}
    if changes.num_rows == 0:
        return out
    old = keyed.read_state(item["state"], job.columns, job.s3)
    state = old.filter(pc.fill_null(pc.equal(old.column("partition"), p), False))
    after = keyed.apply(state, changes, job.kind, job.night, job.run_id)
    changed = keyed.count_changed(state, after)
    if not changed:
        return out
    if after.num_rows:
        out["file"] = keyed.state_path(job.root, p)
        keyed.write_state(out["file"], after, job.s3)
    out.update(dropped=list(item["state"]), keys=changed)
    return out


def sources_of(item: dict, job: Fold) -> dict:
    """A cdc table's first pass over a work item: a row of :data:`SOURCES`."""
    from spark_jobs.derive import cdc

    envelopes, untyped, positions = cdc.sources(keyed.visible(candidate_rows(item, job)))
    return {"partition": item["partition"], "envelopes": [cdc.canonical(e) for e in envelopes],
            "untyped": untyped, "positions": positions}


# ------------------------------------------------------------------ on Spark

def _map(spark, items: list[Item], fn, job: Fold, out: pa.Schema) -> list[dict]:
    """``fn(item, job)`` over ``items`` on the executors, one row of ``out`` each
    (:func:`~spark_jobs.derive.files.on_executors`; ``fn`` gets the item as a dict)."""
    def task(part):
        rows = [fn(asdict(item), job) for item in part]
        yield pa.RecordBatch.from_pylist(rows, schema=out)

    return on_executors(spark, items, task, out)


def cdc_columns(spark, items: list[Item], job: Fold, base: pa.Schema) -> pa.Schema:
    """A cdc table's columns: ``base`` widened by every partition's sources, in partition
    order (the module's text)."""
    from spark_jobs.derive import cdc

    envelopes, untyped, positions = {}, {}, set()
    got = _map(spark, items, sources_of, job, SOURCES)
    for r in sorted(got, key=lambda r: r["partition"]):
        for text in r["envelopes"]:
            envelopes.setdefault(text, json.loads(text))
        untyped.update(dict.fromkeys(r["untyped"]))
        positions.update(r["positions"])
    return cdc.table_schema(envelopes.values(), untyped=untyped, positions=positions, base=base)


def refresh(spark, wh, k: keyed.Keyed, run_id: str, night: str | None, partitions: set[int],
            resolved: pa.Table | None, published: dict, ingest_dt: str | None = None) -> dict:
    """Refresh table ``k`` on run ``run_id``'s branch on the executors (the module's text;
    ``published``: ``{(topic, partition): [(first, last)]}``, the offset ranges ``main``
    held when the run began; ``ingest_dt``: the run's records' partition value). Returns ``{"keys": n, "files": k, "findings": [...]}``."""
    from spark_jobs.findings import Finding
    from spark_jobs.warehouse.commits import Rewrite

    items = plan(wh, k, run_id, partitions, resolved, published, ingest_dt)
    job = Fold(k.kind, k.topic, run_id, night, k.schema, k.schema, "", wh.s3)
    schema = cdc_columns(spark, items, job, k.schema) if k.kind == layout.CDC else k.schema
    table = wh.load(k.name)
    k.schema = schema if table is None else keyed.merged(keyed.table_columns(table), schema)
    wh.typed_table(k.name, k.schema)  # made, or widened by a new column
    if k.new:  # made by this run (or first written): its branch begins now
        wh.begin_table(k.name, run_id)
    job = Fold(k.kind, k.topic, run_id, night, schema, k.schema, wh.data_root(k.name), wh.s3)

    def fold(head: int, attempt: int):
        got = _map(spark, with_state(wh, k.name, head, items), fold_partition, job, FOLDED)
        found = [Finding(**r) for g in got if g["findings"] is not None
                 for r in from_ipc(g["findings"]).to_pylist()]
        changed = sum(g["keys"] for g in got)
        if not changed:
            return {"keys": 0, "files": 0, "findings": found}
        files = [g["file"] for g in got if g["file"] is not None]
        return Rewrite([f for g in got for f in g["dropped"]], files,
                       {"kafkalog.step": k.kind, "kafkalog.keys": changed,
                        **({"kafkalog.night": night} if night else {})},
                       {"keys": changed, "files": len(files), "findings": found})

    return wh.commit_rewrite(k.name, run_id, fold,
                             what=f"{k.name}: could not refresh on run {run_id!r}")


__all__ = ["FOLDED", "FROM_START", "Fold", "Item", "SOURCES", "candidate_rows",
           "cdc_columns", "changes_of", "fold_partition", "from_ipc", "join_typed", "plan",
           "refresh", "sources_of", "to_ipc", "typed_columns", "typed_rows", "with_state"]
