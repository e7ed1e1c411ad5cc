"""Per-key state tables (issue 35; docs/tables.md "Latest per key", "Change data capture"):
``latest__<topic>`` (the latest committed record per key of a compacted topic) and
``cdc__<topic>`` (a Debezium topic's source table), one state machine for both.

**What is in a table.** Per (Kafka partition, key) the row of the key's latest change as
of the night: a change is an *upsert* (a record with a value; a Debezium ``c``/``r``/``u``)
or a *delete* (a tombstone; a Debezium ``d``), and the latest is the one at the highest
offset. Aborted and open transactional records are no change (``records.txn_state``); a
record whose marker lands a night later becomes a change that night, and counts only if
no later change of its key is known. Records without a key are no change (a compacted
topic needs one).

**A change frame** (:data:`CHANGE_COLUMNS` then the table's columns) is what a kind makes
of records: :func:`latest_changes` here, :mod:`spark_jobs.derive.cdc` for Debezium.
:func:`apply` folds changes into a partition's state: pure, idempotent (the same changes
again change nothing, so reruns and overlapping snapshots change nothing).

**The refresh** (:func:`refresh`, on the driver after the run's commit and its
transaction resolution): the *candidates* of a partition are the run's own records of it
on the branch and the records whose transaction the run resolved committed. A candidate
at or below the highest offset ``main`` held of the partition when the run began (a late
marker, a backfilled night) may be older than a change already folded in, or than a
tombstone that removed its key: then every record of the partition from that offset on is
read again, so the fold sees the key's whole later history. The partition's state files
are read, the changes folded in, and one file per touched partition written; the files
replace the old ones in one snapshot on the run's branch (copy-on-write, no delete files).
State files are not named by the run (:func:`state_path`), so a rerun's branch keeps
``main``'s state and folds the same changes in again. A table whose first rows this run
writes (a topic found compacted today) is built from every record of the topic.

**Nights.** The table's ``night`` is the night a row became its key's latest. Publishing
tags each table's state ``night-YYYY-MM-DD`` (:mod:`spark_jobs.warehouse.tags`).
"""

from __future__ import annotations

import os
import re
import tempfile
import uuid
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from spark_jobs import layout, schemas, storage
from spark_jobs.derive.value_types import normalized
from spark_jobs.parquet import parquet_options

#: the columns a change frame begins with: the partition, the key's identity (bytes), the
#: record's offset and what the change does
CHANGE_COLUMNS = pa.schema([("partition", pa.int32()), ("state_key", pa.binary()),
                            ("offset", pa.int64()), ("action", pa.string())])
UPSERT, DELETE = "upsert", "delete"
#: the records columns a refresh reads
READ = ("topic", "partition", "offset", "timestamp", "key", "value", "headers", "value_json",
        "value_schema_id", "is_transactional", schemas.TXN_STATE, "batch_position", "segment",
        "segment_base_offset", "run_id")
#: the columns every keyed table ends with
TAIL = pa.schema([(schemas.NIGHT, pa.string()), ("run_id", pa.string())])
#: a latest table's own columns (the typed value columns go between these and :data:`TAIL`)
LATEST = pa.schema([schemas.RECORDS.field(n) for n in
                    ("partition", "key", "value", "offset", "timestamp", "headers", "value_json")])
#: the typed table's columns a latest table does not take (its lineage)
_TYPED_LINEAGE = ("kafka_topic", "kafka_partition", "kafka_offset", "kafka_timestamp",
                  "kafka_schema_id", "run_id")


# --------------------------------------------------------------------- which topics

def is_auto_topic(topic: str) -> bool:
    """Whether evidence may make ``topic`` a latest table by itself: not an internal topic
    (``__consumer_offsets``, ``_schemas``: they have tables of their own)."""
    return not topic.startswith("_")


def compacted_topics(batches: pa.Table) -> set[str]:
    """The topics whose ``batches`` show the log cleaner's work: a batch with a delete
    horizon (KIP-534), or a data batch holding fewer records than its offsets span
    (compaction removed some; a v2 batch keeps its base and last offsets)."""
    if batches.num_rows == 0:
        return set()
    span = pc.add(pc.subtract(batches.column("last_offset"), batches.column("base_offset")), 1)
    thinned = pc.and_(pc.invert(pc.fill_null(batches.column("is_control"), False)),
                      pc.less(batches.column("record_count"), span))
    shows = pc.or_(pc.fill_null(batches.column("has_delete_horizon"), False),
                   pc.fill_null(thinned, False))
    return set(batches.filter(shows).column("topic").to_pylist())


def matcher(pattern: str | None):
    """A topic predicate of a ``--latest-topics``/``--cdc-topics`` regular expression
    (whole name; None: nothing)."""
    if not pattern:
        return lambda topic: False
    compiled = re.compile(pattern)
    return lambda topic: compiled.fullmatch(topic) is not None


# --------------------------------------------------------------------- changes

def visible(records: pa.Table) -> pa.Table:
    """The records that are changes at all: with a key, and outside transactions or
    committed."""
    state = records.column(schemas.TXN_STATE)
    ok = pc.and_kleene(pc.is_valid(records.column("key")),
                 pc.or_kleene(pc.is_null(state), pc.equal(state, schemas.TXN_ENDS["COMMIT"])))
    return records.filter(pc.fill_null(ok, False))


def latest_changes(records: pa.Table, columns: pa.Schema) -> pa.Table:
    """A latest table's change frame of ``records`` (:data:`READ` columns, plus the typed
    columns where the topic has them): each visible record an upsert, a tombstone a
    delete."""
    rows = visible(records)
    action = pc.if_else(pc.is_null(rows.column("value")), DELETE, UPSERT)
    out = {"partition": rows.column("partition"), "state_key": rows.column("key"),
           "offset": rows.column("offset"), "action": action}
    for f in row_columns(columns):
        out[f.name] = rows.column(f.name) if f.name in rows.column_names \
            else pa.nulls(rows.num_rows, f.type)
    return pa.table(out).cast(change_schema(columns))


def row_columns(columns: pa.Schema) -> list[pa.Field]:
    """The table's columns a change frame carries after :data:`CHANGE_COLUMNS` (not those,
    not :data:`TAIL`)."""
    return [f for f in columns if f.name not in CHANGE_COLUMNS.names and f.name not in TAIL.names]


def change_schema(columns: pa.Schema) -> pa.Schema:
    """The change frame of a table of ``columns``."""
    return pa.schema(list(CHANGE_COLUMNS) + row_columns(columns))


def state_keys(state: pa.Table, kind: str) -> pa.Array:
    """The key identity of a table's rows (a latest table's ``key``; a cdc table's
    canonical key text, as bytes)."""
    key = state.column("key")
    return key.cast(pa.binary()) if kind == layout.CDC else key


def apply(state: pa.Table, changes: pa.Table, kind: str, night: str | None,
          run_id: str) -> pa.Table:
    """Fold ``changes`` (a change frame) into ``state`` (table rows, one per key): per key
    the change or row at the highest offset wins (the row on a tie: it is the same record,
    folded in before), and a winning delete removes the key. New rows get ``night`` and
    ``run_id``; carried rows keep theirs. Returns the state's rows in offset order."""
    names = state.schema.names
    if changes.num_rows == 0:
        return state
    new = changes.append_column(schemas.NIGHT, pa.repeat(pa.scalar(night, pa.string()),
                                                         changes.num_rows)) \
        .append_column("run_id", pa.repeat(pa.scalar(run_id), changes.num_rows))
    n_old = state.num_rows
    all_keys = pa.concat_arrays([
        state_keys(state, kind).combine_chunks().cast(pa.binary()),
        new.column("state_key").combine_chunks().cast(pa.binary())])
    offsets = np.concatenate([state.column("offset").to_numpy(),
                              new.column("offset").to_numpy()]).astype(np.int64)
    source = np.concatenate([np.ones(n_old, np.int8), np.zeros(new.num_rows, np.int8)])
    order = pc.sort_indices(pa.table({"k": all_keys, "o": offsets, "s": source}),
                            sort_keys=[("k", "ascending"), ("o", "ascending"),
                                       ("s", "ascending")]).to_numpy()
    sorted_keys = all_keys.take(pa.array(order))
    last = np.ones(len(order), bool)
    if len(order) > 1:
        last[:-1] = pc.not_equal(sorted_keys[:-1], sorted_keys[1:]).to_numpy(
            zero_copy_only=False)
    winners = order[last]
    from_state = winners[winners < n_old]
    from_new = winners[winners >= n_old] - n_old
    picked = new.take(pa.array(from_new))
    picked = picked.filter(pc.equal(picked.column("action"), UPSERT))
    parts = [state.take(pa.array(from_state)),
             picked.select(names).cast(state.schema)]
    out = pa.concat_tables(parts)
    return out.take(pc.sort_indices(out, sort_keys=[("partition", "ascending"),
                                                    ("offset", "ascending")]))


# --------------------------------------------------------------------- files

def state_path(root: str, partition: int) -> str:
    """A new state file of Kafka partition ``partition`` under the table's data folder
    ``root``: named by no run (a rerun's branch keeps it; see the module's text)."""
    return f"{root.rstrip('/')}/state-p{partition}-{uuid.uuid4().hex}.parquet"


def write_state(path: str, rows: pa.Table, config) -> None:
    """Write one state file (the table's columns, the job's Parquet options)."""
    fd, local = tempfile.mkstemp(suffix=".parquet", prefix="kafkalog-keyed-")
    os.close(fd)
    try:
        with pq.ParquetWriter(local, rows.schema, **parquet_options(rows.schema)) as writer:
            writer.write_table(rows)
        store, key = storage.open_object(path, config)
        store.put_file(key, local)
    finally:
        if os.path.exists(local):
            os.unlink(local)


def read_state(paths: list[str], schema: pa.Schema, config) -> pa.Table:
    """The rows of state files ``paths`` in ``schema`` (a column a file lacks reads null)."""
    import io

    parts = [schema.empty_table()]
    for path in paths:
        store, key = storage.open_object(path, config)
        t = pq.read_table(io.BytesIO(store.read(key)))
        for f in schema:
            if f.name not in t.column_names:
                t = t.append_column(f.name, pa.nulls(t.num_rows, f.type))
        parts.append(t.select(schema.names).cast(schema))
    return pa.concat_tables(parts)


# --------------------------------------------------------------------- the refresh

@dataclass
class Keyed:
    """One keyed table a run refreshes: its kind, topic, name and columns; ``new``: the
    run makes it (every record of the topic is a candidate)."""

    kind: str
    topic: str
    name: str
    schema: pa.Schema
    new: bool = False


def candidates(wh, ref: str, keyed: Keyed, run_id: str, partitions: set[int],
               resolved: pa.Table | None, published: dict) -> pa.Table:
    """The records a refresh folds in (see the module's text): the run's own records of
    ``partitions`` on branch ``ref`` and its ``resolved`` ones; from the lowest of those
    at or below ``published`` (``{(topic, partition): [(first, last)]}``: the offset ranges
    ``main`` held when the run began), every record of the partition from there on."""
    from pyiceberg.expressions import And, EqualTo, GreaterThanOrEqual, In, Or

    from spark_jobs.tables import read_arrow

    topic = keyed.topic
    where = And(EqualTo("topic", topic), In("partition", sorted(partitions)))
    if keyed.new:
        return read_arrow(wh, "records", ref=ref, columns=READ, row_filter=where)
    own = read_arrow(wh, "records", ref=ref, columns=READ,
                     row_filter=And(where, EqualTo("run_id", run_id)))
    parts = [own]
    if resolved is not None and resolved.num_rows:
        mine = pc.and_(pc.equal(resolved.column("topic"), topic),
                       pc.is_in(resolved.column("partition"),
                                pa.array(sorted(partitions), pa.int32())))
        parts.append(resolved.filter(mine).select(list(READ)).cast(own.schema))
    rows = pa.concat_tables(parts)
    lows = {}
    for p, o in zip(rows.column("partition").to_pylist(), rows.column("offset").to_pylist()):
        held = published.get((topic, p))
        if held and o <= max(hi for _, hi in held):
            lows[p] = min(lows.get(p, o), o)
    if lows:
        again = read_arrow(wh, "records", ref=ref, columns=READ, row_filter=And(
            EqualTo("topic", topic), And(In("partition", sorted(lows)),
                                         GreaterThanOrEqual("offset", min(lows.values())))))
        keep = [o >= lows[p] for p, o in zip(again.column("partition").to_pylist(),
                                             again.column("offset").to_pylist())]
        rows = pa.concat_tables([rows, again.filter(pa.array(keep, pa.bool_()))])
    return distinct_offsets(rows)


def distinct_offsets(rows: pa.Table) -> pa.Table:
    """``rows`` with each (partition, offset) once (the newest state of a record read
    twice wins: a resolved row over its open copy)."""
    if rows.num_rows == 0:
        return rows
    rank = np.arange(rows.num_rows)
    order = pc.sort_indices(pa.table({"p": rows.column("partition"), "o": rows.column("offset"),
                                      "r": rank}),
                            sort_keys=[("p", "ascending"), ("o", "ascending"),
                                       ("r", "descending")]).to_numpy()
    p = rows.column("partition").to_numpy()[order]
    o = rows.column("offset").to_numpy()[order]
    first = np.ones(len(order), bool)
    first[1:] = (p[1:] != p[:-1]) | (o[1:] != o[:-1])
    return rows.take(pa.array(order[first]))


def with_typed(wh, ref: str, rows: pa.Table, columns: pa.Schema) -> pa.Table:
    """``rows`` (records) with the typed table's value columns of their (partition,
    offset), read from the topic's typed table on ``ref`` (null where it has no row)."""
    from pyiceberg.expressions import And, GreaterThanOrEqual, In

    value_cols = [f for f in columns if f.name not in LATEST.names and f.name not in TAIL.names]
    if not value_cols or rows.num_rows == 0:
        return rows
    topic = rows.column("topic")[0].as_py()
    table = wh.load(layout.typed_table_name(topic))
    found = None
    if table is not None and ref in table.refs():
        low = pc.min(rows.column("offset")).as_py()
        found = table.scan(snapshot_id=table.refs()[ref].snapshot_id, row_filter=And(
            In("kafka_partition", sorted(set(rows.column("partition").to_pylist()))),
            GreaterThanOrEqual("kafka_offset", low))).to_arrow()
    at = {}
    if found is not None:
        for i, (p, o) in enumerate(zip(found.column("kafka_partition").to_pylist(),
                                       found.column("kafka_offset").to_pylist())):
            at[(p, o)] = i
    idx = [at.get((p, o)) for p, o in zip(rows.column("partition").to_pylist(),
                                           rows.column("offset").to_pylist())]
    for f in value_cols:
        if found is not None and f.name in found.column_names:
            col = found.column(f.name).take(pa.array(idx, pa.int64())).cast(f.type)
        else:
            col = pa.nulls(rows.num_rows, f.type)
        rows = rows.append_column(f, col) if f.name not in rows.column_names else rows
    return rows


def latest_schema(wh, topic: str) -> pa.Schema:
    """A latest table's columns: :data:`LATEST`, the topic's typed value columns (where it
    has a typed table), :data:`TAIL`."""
    typed = wh.load(layout.typed_table_name(topic))
    extra = [] if typed is None else [
        pa.field(f.name, normalized(f.type)) for f in table_columns(typed)
        if f.name not in _TYPED_LINEAGE and f.name not in LATEST.names
        and f.name not in TAIL.names]
    return pa.schema(list(LATEST) + extra + list(TAIL))


def table_columns(table) -> pa.Schema:
    """An Iceberg table's columns as this package writes them (not pyiceberg's large types)."""
    return pa.schema([pa.field(f.name, normalized(f.type, keep_zone=True))
                      for f in table.schema().as_arrow()])


def merged(have: pa.Schema, want: pa.Schema) -> pa.Schema:
    """``want``'s columns with those of ``have`` it lacks (an older envelope's) before
    :data:`TAIL`."""
    extra = [f for f in have if f.name not in want.names]
    body = [f for f in want if f.name not in TAIL.names]
    return pa.schema(body + extra + list(TAIL))


def fold(wh, keyed: Keyed, changes: pa.Table, head: int, night: str | None,
         run_id: str) -> tuple[list[str], dict[str, pa.Table], int]:
    """What folding ``changes`` into table ``keyed`` at snapshot ``head`` of its branch
    replaces: the live files holding the touched partitions, and the new files' rows by
    path (one file per partition); and the number of keys changed."""
    from pyiceberg.expressions import In

    from spark_jobs.tables import table_paths

    touched = sorted(set(changes.column("partition").to_pylist()))
    if not touched:
        return [], {}, 0
    drop = table_paths(wh, keyed.name, snapshot=head, row_filter=In("partition", touched))
    old = read_state(drop, keyed.schema, wh.s3)
    root = wh.data_root(keyed.name)
    out, changed = {}, 0
    parts = old.column("partition").to_numpy(zero_copy_only=False)
    for p in sorted(set(parts.tolist()) | set(touched)):
        state = old.filter(pa.array(parts == p))
        mine = changes.filter(pc.equal(changes.column("partition"), p))
        after = apply(state, mine, keyed.kind, night, run_id)
        changed += count_changed(state, after)
        if after.num_rows:
            out[state_path(root, p)] = after
    return drop, out, changed


def count_changed(before: pa.Table, after: pa.Table) -> int:
    """Keys whose row changed, came or went between two states of a partition."""
    def rows(t):
        return set(zip(t.column("key").to_pylist(), t.column("offset").to_pylist()))

    return len(rows(before) ^ rows(after))


def refresh(wh, keyed: Keyed, run_id: str, night: str | None, partitions: set[int],
            resolved: pa.Table | None, published: dict, make_changes) -> dict:
    """Refresh ``keyed`` on run ``run_id``'s branch (see the module's text): candidates of
    ``partitions`` → changes (``make_changes(records, schema)``: the kind's change frame,
    the table's columns and findings; the table is made or widened to them) → folded into
    the state files → one snapshot. Returns ``{"keys": n,
    "files": k, "findings": [...]}``."""
    from pyiceberg.exceptions import CommitFailedException

    from spark_jobs.warehouse import CatalogError, branch_name
    from spark_jobs.warehouse.snapshots import COMMIT_ATTEMPTS, backoff

    ref = branch_name(run_id)
    rows = candidates(wh, ref, keyed, run_id, partitions, resolved, published)
    changes, schema, found = make_changes(rows, keyed.schema)
    table = wh.load(keyed.name)
    keyed.schema = schema if table is None else merged(table_columns(table), schema)
    wh.typed_table(keyed.name, keyed.schema)  # made, or widened by a new column
    if keyed.new:  # made by this run (or first written): its branch begins now
        wh.begin_table(keyed.name, run_id)
    for attempt in range(COMMIT_ATTEMPTS):
        head = wh.table(keyed.name).refs()[ref].snapshot_id
        drop, files, changed = fold(wh, keyed, changes, head, night, run_id)
        if not changed:
            return {"keys": 0, "files": 0, "findings": found}
        try:
            for path, state in files.items():
                write_state(path, state, wh.s3)
            wh.replace_files(keyed.name, run_id, drop, list(files), parent=head,
                             summary={"kafkalog.step": keyed.kind, "kafkalog.keys": changed,
                                      **({"kafkalog.night": night} if night else {})})
        except CommitFailedException:
            _forget(files, wh.s3)
            backoff(attempt)
            continue
        except BaseException:
            _forget(files, wh.s3)
            raise
        return {"keys": changed, "files": len(files), "findings": found}
    raise CatalogError(f"{keyed.name}: could not refresh on run {run_id!r} after "
                       f"{COMMIT_ATTEMPTS} tries")


def _forget(files, config) -> None:
    try:
        storage.delete_objects(list(files), config)
    except (storage.StorageError, OSError):  # an orphan: maintenance's orphans removes it
        pass


__all__ = ["CHANGE_COLUMNS", "DELETE", "Keyed", "LATEST", "READ", "TAIL", "UPSERT", "apply",
           "candidates", "compacted_topics", "merged", "table_columns", "count_changed", "distinct_offsets", "fold",
           "is_auto_topic", "latest_changes", "latest_schema", "matcher", "change_schema", "row_columns",
           "read_state", "refresh", "state_keys", "state_path", "visible", "with_typed",
           "write_state"]
