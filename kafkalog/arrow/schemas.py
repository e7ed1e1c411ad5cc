"""The four tables' Arrow schemas (records, batches, markers, findings), the fixed
dictionaries of the records' per-batch strings, and the one place a batches-table row is
built (:func:`batch_row`).

Timestamps are ``timestamp[ms, UTC]``; null for magic 0 and for Kafka's
NO_TIMESTAMP (-1).
"""

from __future__ import annotations

import functools

import pyarrow as pa

from ..model import CODEC_NAMES, CREATE_TIME, LOG_APPEND_TIME, batch_status, increment_sequence

TIMESTAMP = pa.timestamp("ms", tz="UTC")
HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))

RECORDS_SCHEMA = pa.schema([
    ("offset", pa.int64()),
    ("timestamp", TIMESTAMP),
    ("timestamp_type", pa.string()),
    ("key", pa.binary()),
    ("value", pa.binary()),
    ("headers", HEADERS),
    ("batch_position", pa.int64()),
    ("batch_base_offset", pa.int64()),
    ("batch_last_offset", pa.int64()),
    ("magic", pa.int8()),
    ("compression", pa.string()),
    ("producer_id", pa.int64()),
    ("producer_epoch", pa.int16()),
    ("sequence", pa.int32()),
    ("partition_leader_epoch", pa.int32()),
    ("is_transactional", pa.bool_()),
    ("crc_valid", pa.bool_()),
])

#: ``dictionary=True`` (see :func:`stream`): the records' per-batch strings as
#: ``dictionary<int8, string>`` over these fixed dictionaries, so that neither the
#: decoder nor a Parquet writer handles one string per record
TIMESTAMP_TYPES = (CREATE_TIME, LOG_APPEND_TIME)
#: codec names by codec id (a position is the id)
CODECS = tuple(CODEC_NAMES[codec_id] for codec_id in range(len(CODEC_NAMES)))
DICTIONARY_STRING = pa.dictionary(pa.int8(), pa.string())
RECORDS_DICTIONARY_SCHEMA = pa.schema([
    pa.field(f.name, DICTIONARY_STRING) if f.name in ("timestamp_type", "compression") else f
    for f in RECORDS_SCHEMA
])
_DICTIONARY_VALUES = {"timestamp_type": TIMESTAMP_TYPES, "compression": CODECS}
DICTIONARY_CODES = {name: {v: i for i, v in enumerate(values)}
          for name, values in (("timestamp_type", TIMESTAMP_TYPES), ("compression", CODECS))}


def dictionary_column(name: str, codes: pa.Array) -> pa.DictionaryArray:
    """int8 ``codes`` (positions in :data:`TIMESTAMP_TYPES` or :data:`CODECS`;
    null for none) as the dictionary column ``name`` of RECORDS_DICTIONARY_SCHEMA."""
    return pa.DictionaryArray.from_arrays(codes, _dictionary(name))


@functools.cache
def _dictionary(name: str) -> pa.Array:
    # made at first use: pyarrow imports pandas at its first pa.array call
    # (~0.3 s), which `import kafkalog` (and `kafkalog dump`) need not pay
    return pa.array(_DICTIONARY_VALUES[name], pa.string())


BATCHES_SCHEMA = pa.schema([
    ("position", pa.int64()),
    ("size", pa.int32()),
    ("magic", pa.int8()),
    ("base_offset", pa.int64()),
    ("last_offset", pa.int64()),
    ("record_count", pa.int32()),
    ("crc", pa.uint32()),
    ("computed_crc", pa.uint32()),
    ("crc_valid", pa.bool_()),
    ("status", pa.string()),
    ("attributes", pa.int16()),
    ("compression", pa.string()),
    ("timestamp_type", pa.string()),
    ("first_timestamp", TIMESTAMP),
    ("max_timestamp", TIMESTAMP),
    ("delete_horizon_ms", pa.int64()),
    ("partition_leader_epoch", pa.int32()),
    ("producer_id", pa.int64()),
    ("producer_epoch", pa.int16()),
    ("base_sequence", pa.int32()),
    ("last_sequence", pa.int32()),
    ("last_offset_delta", pa.int32()),
    ("is_transactional", pa.bool_()),
    ("is_control", pa.bool_()),
    ("has_delete_horizon", pa.bool_()),
])


def batch_row(position, size, magic, base_offset, last_offset, record_count, crc, computed_crc,
              attributes, compression, timestamp_type, first_timestamp, max_timestamp,
              partition_leader_epoch, producer_id, producer_epoch, base_sequence,
              last_offset_delta, is_transactional, is_control, has_delete_horizon,
              decoded=True) -> tuple:
    """One row of the batches table, in :data:`BATCHES_SCHEMA`'s order: the only place it
    is built, from a :class:`Batch` (:func:`add_batch_row`) and from the header fields of the
    regular v2 batches both fast paths read without one (``PureRecordColumns.run``, the compiled
    ``scan_run``). Derives ``crc_valid``, ``status``, ``delete_horizon_ms`` and
    ``last_sequence`` as :class:`Batch`'s properties do."""
    crc_valid = None if computed_crc is None else computed_crc == crc
    last_sequence = None if base_sequence is None or last_offset_delta is None \
        else increment_sequence(base_sequence, last_offset_delta)
    return (position, size, magic, base_offset, last_offset, record_count, crc, computed_crc,
            crc_valid, batch_status(decoded, crc_valid), attributes, compression,
            timestamp_type, first_timestamp, max_timestamp,
            first_timestamp if has_delete_horizon else None, partition_leader_epoch,
            producer_id, producer_epoch, base_sequence, last_sequence, last_offset_delta,
            is_transactional, is_control, has_delete_horizon)


MARKERS_SCHEMA = pa.schema([
    ("offset", pa.int64()),
    ("timestamp", TIMESTAMP),
    ("control_type", pa.string()),
    ("control_type_id", pa.int16()),
    ("control_version", pa.int16()),
    ("coordinator_epoch", pa.int32()),
    ("producer_id", pa.int64()),
    ("producer_epoch", pa.int16()),
    ("is_transactional", pa.bool_()),
    ("partition_leader_epoch", pa.int32()),
    ("batch_position", pa.int64()),
    ("key", pa.binary()),
    ("value", pa.binary()),
    ("crc_valid", pa.bool_()),
])

FINDINGS_SCHEMA = pa.schema([
    ("kind", pa.string()),
    ("position", pa.int64()),
    ("end", pa.int64()),
    ("message", pa.string()),
    ("base_offset", pa.int64()),
    ("last_offset", pa.int64()),
    ("bytes", pa.int64()),
])

SCHEMAS = {
    "records": RECORDS_SCHEMA,
    "batches": BATCHES_SCHEMA,
    "markers": MARKERS_SCHEMA,
    "findings": FINDINGS_SCHEMA,
}


def schemas_for(dictionary: bool) -> dict[str, pa.Schema]:
    """The four schemas; with ``dictionary``, the records' is RECORDS_DICTIONARY_SCHEMA."""
    return {**SCHEMAS, "records": RECORDS_DICTIONARY_SCHEMA} if dictionary else SCHEMAS
