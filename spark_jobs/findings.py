"""Finding rows: one builder for the ``findings`` table's rows (columns:
:data:`spark_jobs.schemas.FINDINGS`; docs/tables.md "findings").

Every stage that finds something wrong builds a :class:`Finding`: the decode task (fetch,
index and value errors, a changed segment), the replicas' reconciliation, the listing (a name
the job cannot place), the derived and the typed tables. A task's own findings carry no
lineage (:data:`TASK_COLUMNS`: :func:`spark_jobs.decode.writing.lineage` adds the partition,
segment and run); the others are whole rows (:func:`table`).

The kinds the job itself names across modules live here; the decoder's own kinds are
:mod:`kafkalog`'s.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass

import pyarrow as pa

from spark_jobs import schemas

#: two copies of one offset with different content (the dedupe: a copy against what the
#: warehouse held, or another pending copy)
DIVERGENCE = "divergence"
#: two brokers' copies of a partition holding different batches at the same offsets
#: (spark_jobs.decode.replicas; the audit's ``replica_divergence`` check)
REPLICA_DIVERGENCE = "replica_divergence"
#: how a replica divergence's message starts. Runs before the kind of its own wrote replica
#: divergences as :data:`DIVERGENCE` findings told apart by this prefix alone; old
#: warehouses keep those rows, and the audit still recognises them by it
REPLICA_DIVERGENCE_PREFIX = "replica divergence:"

#: a remote (tiered-storage) copy of a partition's offsets and the local copy of the same
#: offsets holding different batches (issue 34: the job's reconciliation of tier and
#: local tail; the audit's tier check ``tier_divergence``)
TIER_DIVERGENCE = "tier_divergence"
#: how a tier divergence's message starts (a remote copy against the local one), beside
#: :data:`REPLICA_DIVERGENCE_PREFIX`
TIER_DIVERGENCE_PREFIX = "tier divergence:"

#: a record of a Debezium topic that is no change of its ``cdc__`` table: its key or value is
#: not what Debezium writes, or a value does not fit the table's column
#: (spark_jobs.derive.cdc; the record stays in ``records``)
CDC_PARSE_ERROR = "cdc_parse_error"
#: one column of a Debezium change whose value cannot be typed (a value that does not fit
#: its Connect schema or the table's column): the row lands with that column null; the
#: finding names the column, the offset and why, its ``raw`` the record's value
#: (spark_jobs.derive.cdc)
CDC_VALUE_ERROR = "cdc_value_error"
#: a ``cdc__`` table column whose Connect schema type is unknown to the parser: it holds each
#: value's JSON text; one finding per column and change frame, at the first record with it
CDC_UNTYPED_COLUMN = "cdc_untyped_column"
#: a Debezium change the ``cdc__`` table does not apply: ``t`` (a truncate: every row of the
#: source table goes, which a per-key table cannot say)
CDC_UNSUPPORTED_OP = "cdc_unsupported_op"

#: one cell of a typed table (``values__<topic>``, spark_jobs.derive.typed) whose value cannot
#: be typed (it does not convert or fit its column, or its schema version types the field
#: otherwise than the table): the row lands with that column null; the finding names the
#: column path, the offset and why, its ``raw`` the record's value
TYPED_VALUE_ERROR = "typed_value_error"
#: a typed table column whose schema type has no column form (a union of two types, a
#: recursive record, a JSON Schema ``$ref`` or combinator, ...): it holds each value's JSON
#: text; one note per column (and task), at the first record of a version that has it
TYPED_UNTYPED_COLUMN = "typed_untyped_column"

#: the columns of a finding a decode task fills (the lineage columns come after)
TASK_COLUMNS = pa.schema([f for f in schemas.FINDINGS if f.name in (
    "kind", "position", "end", "message", "base_offset", "last_offset", "bytes", "raw")])


@dataclass(frozen=True, slots=True)
class Finding:
    """One row of the ``findings`` table (its columns, by name)."""

    kind: str
    message: str
    position: int | None = 0
    end: int | None = 0
    base_offset: int | None = None
    last_offset: int | None = None
    bytes: int | None = None
    raw: bytes | None = None
    topic: str | None = None
    partition: int | None = None
    segment: str | None = None
    segment_base_offset: int | None = None
    run_id: str | None = None

    def row(self) -> dict:
        """The whole row, every column of :data:`spark_jobs.schemas.FINDINGS`."""
        return asdict(self)

    def task_row(self) -> dict:
        """The :data:`TASK_COLUMNS` a decode task writes (its lineage is added after)."""
        return {name: getattr(self, name) for name in TASK_COLUMNS.names}


def table(found: Iterable[Finding]) -> pa.Table:
    """Whole finding rows as the ``findings`` table's columns."""
    return pa.Table.from_pylist([f.row() for f in found], schema=schemas.FINDINGS)


def task_batch(found: Iterable[Finding]) -> pa.RecordBatch:
    """A decode task's findings as :data:`TASK_COLUMNS`."""
    return pa.RecordBatch.from_pylist([f.task_row() for f in found], schema=TASK_COLUMNS)


__all__ = ["CDC_PARSE_ERROR", "CDC_UNSUPPORTED_OP", "CDC_UNTYPED_COLUMN", "CDC_VALUE_ERROR",
           "DIVERGENCE", "REPLICA_DIVERGENCE", "REPLICA_DIVERGENCE_PREFIX", "TASK_COLUMNS",
           "TIER_DIVERGENCE", "TIER_DIVERGENCE_PREFIX", "TYPED_UNTYPED_COLUMN",
           "TYPED_VALUE_ERROR", "Finding", "table", "task_batch"]
