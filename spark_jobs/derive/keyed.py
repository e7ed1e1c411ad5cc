"""Per-key state tables (issue 35; docs/tables.md "Latest per key", docs/debezium.md "The
cdc table"): ``latest__<topic>`` (the latest committed record per key of a compacted topic) and
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

**The refresh** (:mod:`spark_jobs.derive.keyed_tasks`: planned on the driver after the
run's commit and its transaction resolution, folded on the executors, one task per Kafka
partition): the *candidates* of a partition are the run's own records of it
on the branch and the records whose transaction the run resolved committed. A candidate
at or below the highest offset ``main`` held of the partition when the run began (a late
marker, a backfilled night) may be older than a change already folded in, or than a
tombstone that removed its key: then every record of the partition from that offset on is
read again, so the fold sees the key's whole later history. The partition's state files
are read, the changes folded in, and one file written per partition where a key changed
(or none where its last key went); the files
replace the old ones in one snapshot on the run's branch (copy-on-write, no delete files).
State files are not named by the run (:func:`state_path`), so a rerun's branch keeps
``main``'s state and folds the same changes in again. A table whose first rows this run
writes (a topic found compacted today) is built from every record of the topic.

**Nights.** The table's ``night`` is the night a row became its key's latest. Publishing
tags each table's state ``night-YYYY-MM-DD`` (:mod:`spark_jobs.warehouse.tags`).
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_jobs import layout, schemas
from spark_jobs.derive.value_types import normalized
from spark_jobs.parquet import column_or_null, conform, read_parquet, write_parquet

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
        out[f.name] = column_or_null(rows, f)
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
    write_parquet(path, rows, config)


def read_state(paths: list[str], schema: pa.Schema, config) -> pa.Table:
    """The rows of state files ``paths`` in ``schema`` (a column a file lacks reads null)."""
    parts = [schema.empty_table()] + [conform(read_parquet(path, config), schema)
                                      for path in paths]
    return pa.concat_tables(parts)


# --------------------------------------------------------------------- a table and its candidates

@dataclass
class Keyed:
    """One keyed table a run refreshes: its kind, topic, name and columns; ``new``: the
    run makes it (every record of the topic is a candidate)."""

    kind: str
    topic: str
    name: str
    schema: pa.Schema
    new: bool = False


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


def count_changed(before: pa.Table, after: pa.Table) -> int:
    """Keys whose row changed, came or went between two states of a partition."""
    def rows(t):
        return set(zip(t.column("key").to_pylist(), t.column("offset").to_pylist()))

    return len(rows(before) ^ rows(after))


__all__ = ["CHANGE_COLUMNS", "DELETE", "Keyed", "LATEST", "READ", "TAIL", "UPSERT", "apply",
           "change_schema", "compacted_topics", "count_changed", "distinct_offsets",
           "is_auto_topic", "latest_changes", "latest_schema", "matcher", "merged",
           "read_state", "row_columns", "state_keys", "state_path", "table_columns", "visible",
           "write_state"]
