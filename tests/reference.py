"""kafka-python's reading of a segment, as plain values: the independent oracle.

kafka-python (a test dependency) has its own decoder for v0/v1/v2. These helpers
turn what it reads into the same plain shape as ``ours()`` turns kafkalog's
output into, so tests compare whole values.
"""

from __future__ import annotations

from kafka.record import MemoryRecords

CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
TS_TYPES = {0: "CreateTime", 1: "LogAppendTime"}


def theirs(data: bytes) -> list[dict]:
    """kafka-python's batches of a v2 segment, each with its records."""
    out = []
    mr = MemoryRecords(data)
    while True:
        b = mr.next_batch()
        if b is None:
            return out
        assert b.magic == 2, "reference() covers magic 2; legacy is compared in test_interop"
        crc_valid = b.validate_crc()  # kafka-python: before iterating
        records = []
        for r in b:
            records.append({
                "offset": r.offset,
                "timestamp": r.timestamp,
                "key": r.key,
                "value": r.value,
                "headers": [(k, v) for k, v in r.headers],
                "control": r.type if b.is_control_batch else None,
            })
        out.append({
            "base_offset": b.base_offset,
            "last_offset": b.last_offset,
            "magic": b.magic,
            "crc": b.crc,
            "crc_valid": crc_valid,
            "compression": CODECS[b.compression_type],
            "timestamp_type": TS_TYPES[b.timestamp_type],
            "first_timestamp": b.first_timestamp,
            "max_timestamp": b.max_timestamp,
            "partition_leader_epoch": b.leader_epoch,
            "producer_id": b.producer_id,
            "producer_epoch": b.producer_epoch,
            "base_sequence": b.base_sequence,
            "last_sequence": b.last_sequence,
            "is_transactional": b.is_transactional,
            "is_control": b.is_control_batch,
            "record_count": b.records_count,
            "records": records,
        })


def ours(batches) -> list[dict]:
    """kafkalog Batches in the shape of :func:`theirs`."""
    out = []
    for b in batches:
        out.append({
            "base_offset": b.base_offset,
            "last_offset": b.last_offset,
            "magic": b.magic,
            "crc": b.crc,
            "crc_valid": b.crc_valid,
            "compression": b.compression,
            "timestamp_type": b.timestamp_type,
            "first_timestamp": b.first_timestamp,
            "max_timestamp": b.max_timestamp,
            "partition_leader_epoch": b.partition_leader_epoch,
            "producer_id": b.producer_id,
            "producer_epoch": b.producer_epoch,
            "base_sequence": b.base_sequence,
            "last_sequence": b.last_sequence,
            "is_transactional": b.is_transactional,
            "is_control": b.is_control,
            "record_count": b.record_count,
            "records": [{
                "offset": r.offset,
                "timestamp": r.timestamp,
                "key": r.key,
                "value": r.value,
                "headers": [(h.key, h.value) for h in r.headers],
                "control": r.control.type_id if b.is_control else None,
            } for r in b.records],
        })
    return out
