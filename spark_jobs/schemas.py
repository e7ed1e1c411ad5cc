"""The warehouse tables' schemas (docs/tables.md), as Arrow schemas.

A table's schema is its Iceberg schema and the schema of every data file: the
partition columns (``PARTITIONS``, identity partitions) are ordinary columns
inside each file, one value per file, after the others.
"""

from __future__ import annotations

import pyarrow as pa

from kafkalog import arrow as ka
from spark_jobs import layout

TS = ka.TIMESTAMP
_LINEAGE = [("segment", pa.string()), ("segment_base_offset", pa.int64()), ("run_id", pa.string())]


_TOPIC = [("topic", pa.string())]
#: the day (UTC, ``YYYY-MM-DD``) the run that wrote a row first ingested: a partition of
#: the tables the dedupe reads, so that its scans skip whole manifests of older nights
#: (:func:`ingest_day`, docs/tables.md)
INGEST_DT = "ingest_dt"
_INGESTED = _TOPIC + [(INGEST_DT, pa.string())]
#: the snapshot night a ledger row's segment was listed in, and the night a dq_results row is about
NIGHT = "night"


def _with(schema: pa.Schema, drop=(), retype=None, extra=(), partitions=_TOPIC) -> pa.Schema:
    retype = retype or {}
    fields = [pa.field(f.name, retype.get(f.name, f.type)) for f in schema if f.name not in drop]
    return pa.schema([("partition", pa.int32())] + fields + list(extra) + _LINEAGE
                     + list(partitions))


#: what a Schema Registry's schemas fill in (issue 20; spark_jobs/decode/values.py): the key's
#: and value's schema id and format (AVRO, JSON, PROTOBUF), the value as JSON text, and why a
#: value in the wire format did not decode (unknown_schema_id, malformed); null otherwise
VALUE_COLUMNS = [("key_schema_id", pa.int32()), ("value_schema_id", pa.int32()),
                 ("key_format", pa.string()), ("value_format", pa.string()),
                 ("value_json", pa.string()), ("value_error", pa.string())]
#: records of a partition folder Kafka renamed: ``delete``, ``future`` or ``stray``; null for
#: a live folder (issue 36; kafkalog.folders, spark_jobs.decode.writing.folder_state)
FOLDER_STATE = "folder_state"
_FOLDER_STATE = [(FOLDER_STATE, pa.string())]
#: a transactional record's outcome (issue 35; spark_jobs/decode/transactions.py): the state
#: the first COMMIT/ABORT marker of its producer after it gives (:data:`TXN_ENDS`), or
#: :data:`TXN_OPEN` while none is known in any night; null for a record outside transactions
TXN_STATE = "txn_state"
TXN_OPEN = "open"
#: a marker's control_type -> the txn_state of the records it ends
TXN_ENDS = {"COMMIT": "committed", "ABORT": "aborted"}
RECORDS = _with(ka.RECORDS_SCHEMA, drop={"crc_valid"},
                extra=VALUE_COLUMNS + _FOLDER_STATE + [(TXN_STATE, pa.string())],
                partitions=_INGESTED + [("dt", pa.string())])
BATCHES = _with(ka.BATCHES_SCHEMA, retype={"crc": pa.int64(), "computed_crc": pa.int64()},
                partitions=_INGESTED)
MARKERS = _with(ka.MARKERS_SCHEMA, partitions=_INGESTED)
FINDINGS = _with(ka.FINDINGS_SCHEMA, extra=[("raw", pa.binary())])
LEDGER = pa.schema([
    ("run_id", pa.string()),
    ("segment", pa.string()),
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("segment_base_offset", pa.int64()),
    ("object_size", pa.int64()),
    ("etag", pa.string()),
    ("mtime", TS),
    ("byte_start", pa.int64()),
    ("byte_end", pa.int64()),
    ("end_position", pa.int64()),
    ("first_offset", pa.int64()),
    ("last_offset", pa.int64()),
    ("last_batch_position", pa.int64()),
    ("last_batch_crc", pa.int64()),
    ("records", pa.int64()),
    ("batches", pa.int64()),
    ("findings", pa.int64()),
    ("action", pa.string()),
    ("ingested_at", TS),
    #: the snapshot night (``YYYY-MM-DD``) whose listing held the segment: what the audit
    #: of a night reads "as of" (null where the run's input named no night)
    (NIGHT, pa.string()),
])
DQ_RESULTS = pa.schema([
    ("run_id", pa.string()),
    ("check", pa.string()),
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("status", pa.string()),
    ("severity", pa.string()),
    ("observed", pa.int64()),
    ("failed", pa.int64()),
    ("details", pa.string()),
    ("checked_at", TS),
    #: the night the row is about: the latest night the run read (its "as of" night), or the
    #: night a ``snapshot_missing`` row says had no snapshot; null where no night was named
    (NIGHT, pa.string()),
])

#: file schema of each table
TABLES = {
    "records": RECORDS,
    "batches": BATCHES,
    "markers": MARKERS,
    "findings": FINDINGS,
    "ledger": LEDGER,
    "dq_results": DQ_RESULTS,
}

#: identity partition columns of each table, outermost first
PARTITIONS = {
    "records": ("topic", "dt", INGEST_DT),
    "batches": ("topic", INGEST_DT),
    "markers": ("topic", INGEST_DT),
    "findings": ("topic",),
    "ledger": (),
    "dq_results": (),
}

#: columns whose min/max statistics the job's data files carry, and the catalog keeps
#: (queries, the dedupe and a run's replacement by ``run_id`` prune on them; on key/value
#: bytes they would cost ~10% of a write). The partition columns' are what the catalog takes as a file's partition
#: value: without them a file would be registered with null partitions. txn_state's let the
#: leftover resolution find the files holding open rows ('aborted' < 'committed' < 'open').
STATISTICS = ("topic", "dt", INGEST_DT, "run_id", "partition", "offset", "timestamp", "base_offset",
              "last_offset", "position", "batch_position", "segment_base_offset",
              "max_timestamp", "first_timestamp", TXN_STATE)

DECODE_TABLES = layout.DECODE_TABLES
#: every table
NAMES = layout.TABLE_NAMES
if tuple(TABLES) != NAMES:
    raise RuntimeError("spark_jobs.layout.TABLE_NAMES and schemas.TABLES name different tables")


def ingest_day(when) -> str:
    """The :data:`INGEST_DT` value of a run that first ingested at ``when`` (a datetime,
    or its ISO-8601 text; naive means UTC): its UTC day, ``YYYY-MM-DD``."""
    import datetime as dt

    if isinstance(when, str):
        when = dt.datetime.fromisoformat(when)
    if when.tzinfo is not None:
        when = when.astimezone(dt.timezone.utc)
    return when.date().isoformat()


def spark_arrow_schema(name: str) -> pa.Schema:
    """The table's schema with the types Spark's Arrow exchange takes (timestamps in µs)."""
    return pa.schema([pa.field(f.name, pa.timestamp("us", tz="UTC"))
                      if pa.types.is_timestamp(f.type) else f for f in TABLES[name]])


def spark_schema(name: str):
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(TABLES[name])


# ----------------------------------------------------------------------------------------
# Kafka's internal topics and the partitions' state files (issue 19; docs/tables.md).
# Unpartitioned: small tables. ``topic``/``partition`` are the partition a row is about
# (the committed-to partition of an offset commit, the partition folder of a state file);
# a decoded record's own place is ``source_topic``/``source_partition``/``source_offset``
# (+ the lineage columns the other tables carry).

_SOURCE = [("source_topic", pa.string()), ("source_partition", pa.int32()),
           ("source_offset", pa.int64()), ("timestamp", TS)] + _LINEAGE
_KEYED = [("record_type", pa.int16()), ("value_version", pa.int16()), ("tombstone", pa.bool_())]

CONSUMER_OFFSETS = pa.schema([
    ("group", pa.string()), ("topic", pa.string()), ("partition", pa.int32()),
    ("committed_offset", pa.int64()), ("leader_epoch", pa.int32()), ("metadata", pa.string()),
    ("commit_timestamp", TS), ("expire_timestamp", TS)] + _KEYED + _SOURCE)
GROUP_METADATA = pa.schema([
    ("group", pa.string()), ("record", pa.string())] + _KEYED + [
    ("protocol_type", pa.string()), ("generation", pa.int32()), ("protocol", pa.string()),
    ("leader", pa.string()), ("state_timestamp", TS), ("members", pa.int32()),
    ("key_json", pa.string()), ("value_json", pa.string())] + _SOURCE)
TRANSACTIONS = pa.schema([
    ("transactional_id", pa.string())] + _KEYED + [
    ("producer_id", pa.int64()), ("producer_epoch", pa.int16()),
    ("previous_producer_id", pa.int64()), ("next_producer_id", pa.int64()),
    ("timeout_ms", pa.int32()), ("state", pa.string()), ("partitions_json", pa.string()),
    ("last_update_timestamp", TS), ("start_timestamp", TS)] + _SOURCE)
CLUSTER_METADATA = pa.schema([
    ("type", pa.string()), ("version", pa.int16()), ("topic_id", pa.string()),
    ("topic_name", pa.string()), ("partition_id", pa.int32()), ("data_json", pa.string())]
    + _SOURCE)
_STATE_LINEAGE = [("topic_id", pa.string()), ("file", pa.string()), ("run_id", pa.string())]
PRODUCER_STATE = pa.schema([
    ("topic", pa.string()), ("partition", pa.int32()), ("snapshot_offset", pa.int64()),
    ("producer_id", pa.int64()), ("producer_epoch", pa.int16()), ("first_sequence", pa.int32()),
    ("last_sequence", pa.int32()), ("last_offset", pa.int64()), ("offset_delta", pa.int32()),
    ("timestamp", TS), ("coordinator_epoch", pa.int32()),
    ("current_txn_first_offset", pa.int64())] + _STATE_LINEAGE)
LEADER_EPOCHS = pa.schema([
    ("topic", pa.string()), ("partition", pa.int32()), ("epoch", pa.int32()),
    ("start_offset", pa.int64())] + _STATE_LINEAGE)
# --- a log directory's own files (issue 36): one row set per night and log directory
# (``log_dir``: the folder holding the partition folders, as listed); ``file``: the URI read
_DIR_LINEAGE = [("file", pa.string()), (NIGHT, pa.string()), ("run_id", pa.string())]
BROKER_STATE = pa.schema([
    ("log_dir", pa.string()), ("cluster_id", pa.string()), ("node_id", pa.int32()),
    ("directory_id", pa.string()), ("meta_version", pa.int32()),
    ("clean_shutdown", pa.bool_()), ("broker_epoch", pa.int64())] + _DIR_LINEAGE)
PARTITION_CHECKPOINTS = pa.schema([
    ("log_dir", pa.string()), ("topic", pa.string()), ("partition", pa.int32()),
    ("recovery_point", pa.int64()), ("recovery_point_file", pa.string()),
    ("high_watermark", pa.int64()), ("high_watermark_file", pa.string()),
    ("log_start_offset", pa.int64()), ("log_start_offset_file", pa.string()),
    ("cleaner_offset", pa.int64()), ("cleaner_offset_file", pa.string()),
    (NIGHT, pa.string()), ("run_id", pa.string())])
KRAFT_SNAPSHOTS = pa.schema([
    ("log_dir", pa.string()), ("snapshot_offset", pa.int64()), ("snapshot_epoch", pa.int32()),
    ("bootstrap", pa.bool_()), ("deleted", pa.bool_()),
    ("last_contained_log_timestamp", TS), ("offset", pa.int64()), ("control", pa.bool_()),
    ("type", pa.string()), ("version", pa.int16()), ("topic_id", pa.string()),
    ("topic_name", pa.string()), ("partition_id", pa.int32()), ("data_json", pa.string())]
    + _DIR_LINEAGE)
QUORUM_STATE = pa.schema([
    ("log_dir", pa.string()), ("data_version", pa.int32()), ("cluster_id", pa.string()),
    ("leader_id", pa.int32()), ("leader_epoch", pa.int32()), ("voted_id", pa.int32()),
    ("voted_directory_id", pa.string()), ("applied_offset", pa.int64()),
    ("current_voters", pa.list_(pa.int32()))] + _DIR_LINEAGE)
# --- __share_group_state (KIP-932), decoded like the other internal topics
SHARE_GROUP_STATE = pa.schema([
    ("group_id", pa.string()), ("topic_id", pa.string()), ("partition", pa.int32()),
    ("record", pa.string()), ("tombstone", pa.bool_()), ("snapshot_epoch", pa.int32()),
    ("state_epoch", pa.int32()), ("leader_epoch", pa.int32()), ("start_offset", pa.int64()),
    ("delivery_complete_count", pa.int32()), ("create_timestamp", TS),
    ("write_timestamp", TS),
    ("state_batches", pa.list_(pa.struct([
        ("first_offset", pa.int64()), ("last_offset", pa.int64()),
        ("delivery_state", pa.int8()), ("delivery_state_name", pa.string()),
        ("delivery_count", pa.int16())])))] + _SOURCE)
# --- the tier's segments (issue 34), replayed from __remote_log_metadata as of a night
REMOTE_SEGMENTS = pa.schema([
    ("segment_id", pa.string()), ("topic_id", pa.string()), ("topic", pa.string()),
    ("partition", pa.int32()), ("start_offset", pa.int64()), ("end_offset", pa.int64()),
    ("max_timestamp", TS), ("broker_id", pa.int32()), ("segment_size_in_bytes", pa.int64()),
    ("segment_leader_epochs", pa.list_(pa.struct([
        ("leader_epoch", pa.int32()), ("start_offset", pa.int64())]))),
    ("state", pa.string()),
    ("state_history", pa.list_(pa.struct([
        ("state", pa.string()), ("event_timestamp", TS), ("broker_id", pa.int32()),
        ("metadata_partition", pa.int32()), ("metadata_offset", pa.int64())]))),
    ("custom_metadata", pa.binary()), ("remote_size", pa.int64()),
    ("object_prefix", pa.string()), ("object_key", pa.string()),
    ("partition_delete_state", pa.string()), ("problems", pa.list_(pa.string())),
    (NIGHT, pa.string()), ("run_id", pa.string())])
# --- transactions as the data partitions show them (issue 45; spark_jobs/derive/producer_txns.py)
PRODUCER_TRANSACTIONS = pa.schema([
    ("transactional_id", pa.string()), ("producer_id", pa.int64()),
    ("producer_epoch", pa.int16()), ("marker_epoch", pa.int16()), ("outcome", pa.string()),
    ("partitions", pa.list_(pa.struct([
        ("topic", pa.string()), ("partition", pa.int32()), ("first_offset", pa.int64()),
        ("last_offset", pa.int64()), ("batches", pa.int32()), ("records", pa.int64()),
        ("marker_offset", pa.int64())]))),
    ("start_time", TS), ("end_time", TS), ("duration_ms", pa.int64()),
    ("offsets_committed", pa.bool_()), ("groups", pa.list_(pa.string())),
    ("offset_commits", pa.list_(pa.struct([
        ("group", pa.string()), ("topic", pa.string()), ("partition", pa.int32()),
        ("committed_offset", pa.int64()), ("source_partition", pa.int32()),
        ("source_offset", pa.int64())]))),
    ("fenced", pa.bool_()), ("txn_key", pa.string()), ("as_of", TS), ("run_id", pa.string())])
# --- Kafka Streams groups (KIP-1071) as of the night (issue 45; spark_jobs/derive/streams_groups.py)
STREAMS_GROUPS = pa.schema([
    ("group", pa.string()), ("epoch", pa.int32()), ("topology_epoch", pa.int32()),
    ("topology_json", pa.string()),
    ("members", pa.list_(pa.struct([
        ("member_id", pa.string()), ("client_id", pa.string()), ("client_host", pa.string()),
        ("instance_id", pa.string()), ("process_id", pa.string()),
        ("topology_epoch", pa.int32()), ("member_epoch", pa.int32()), ("state", pa.int8()),
        ("active_tasks", pa.string()), ("standby_tasks", pa.string()),
        ("warmup_tasks", pa.string())]))),
    (NIGHT, pa.string()), ("run_id", pa.string())])
CONSUMER_LAG = pa.schema([
    ("run_id", pa.string()), ("group", pa.string()), ("topic", pa.string()),
    ("partition", pa.int32()), ("committed_offset", pa.int64()), ("commit_timestamp", TS),
    ("log_start_offset", pa.int64()), ("log_end_offset", pa.int64()), ("lag", pa.int64()),
    ("status", pa.string()), ("source_run_id", pa.string()), ("source_offset", pa.int64())])

INTERNAL = dict(zip(layout.INTERNAL_TABLES, (
    CONSUMER_OFFSETS, GROUP_METADATA, TRANSACTIONS, CLUSTER_METADATA, PRODUCER_STATE,
    LEADER_EPOCHS, BROKER_STATE, PARTITION_CHECKPOINTS, KRAFT_SNAPSHOTS, QUORUM_STATE,
    SHARE_GROUP_STATE, REMOTE_SEGMENTS, PRODUCER_TRANSACTIONS, STREAMS_GROUPS,
    CONSUMER_LAG)))
TABLES.update(INTERNAL)
PARTITIONS.update({name: () for name in INTERNAL})
#: the tables a decode run derives from internal topics and state files
DERIVED_TABLES = layout.DERIVED_TABLES
#: every table, the internal ones included (created on first use only)
ALL_NAMES = NAMES + layout.INTERNAL_TABLES
if tuple(TABLES) != ALL_NAMES:
    raise RuntimeError("spark_jobs.layout.INTERNAL_TABLES and schemas.INTERNAL differ")
