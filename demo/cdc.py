"""The demo's Debezium topic (issue 35 item 3): ``dbserver1.inventory.customers-0``, the change
events Debezium's PostgreSQL connector (``topic.prefix=dbserver1``) writes for table
``inventory.customers`` through the JsonConverter with ``schemas.enable=true``: each key and
value a ``{"schema": ..., "payload": ...}`` wrapper, built here from Debezium's documented
event format (the PostgreSQL connector page: the key struct, the ``Envelope`` with ``before``,
``after``, ``source``, ``transaction``, ``op``, ``ts_ms``/``ts_us``/``ts_ns``, and the
``io.debezium.connector.postgresql.Source`` struct). The table has ``REPLICA IDENTITY FULL``,
so ``before`` holds the whole old row.

* Night 1 (offsets 0..2): the initial snapshot, a read (``op`` ``r``) of rows 1001..1003, all in
  the snapshot's transaction at one LSN, a batch each.
* Night 2 (the same segment grown, 3..6): an update of 1001 (``u``), an insert of 1004
  (``c``), and a delete of 1002 (``d``) followed by its tombstone (same key, null value), each
  its own PostgreSQL transaction.

So the table holds 1001..1003 as of night 1, and 1001 (updated), 1003 and 1004 as of night 2.
"""

from __future__ import annotations

import json
from pathlib import Path

from kafkalog.writer import SegmentWriter, WriteRecord

TOPIC_PREFIX, SCHEMA, TABLE = "dbserver1", "inventory", "customers"
TOPIC = f"{TOPIC_PREFIX}.{SCHEMA}.{TABLE}"
PARTITION = 0
VERSION = "2.7.3.Final"
#: Kafka Connect's producer (idempotent by default)
PRODUCER_ID = 9100

ROWS = {
    1001: {"id": 1001, "first_name": "Sally", "last_name": "Thomas", "email": "sally.thomas@acme.com"},
    1002: {"id": 1002, "first_name": "George", "last_name": "Bailey", "email": "gbailey@foobar.com"},
    1003: {"id": 1003, "first_name": "Edward", "last_name": "Walker", "email": "ed@walker.com"},
    1004: {"id": 1004, "first_name": "Anne", "last_name": "Kretchmar", "email": "annek@noanswer.org"},
}


def _field(type_: str, field: str, optional: bool = False, **extra) -> dict:
    """A Connect schema field as the JsonConverter writes it (``extra``: name, version, ...)."""
    return {"type": type_, "optional": optional, **extra, "field": field}


#: the row's columns; ``updated_at`` a ``timestamp without time zone``: MicroTimestamp
COLUMNS = [_field("int32", "id"), _field("string", "first_name"), _field("string", "last_name"),
           _field("string", "email"),
           _field("int64", "updated_at", True, name="io.debezium.time.MicroTimestamp", version=1)]
KEY_SCHEMA = {"type": "struct", "fields": [_field("int32", "id")], "optional": False,
              "name": f"{TOPIC}.Key"}
SOURCE_FIELDS = [
    _field("string", "version"), _field("string", "connector"), _field("string", "name"),
    _field("int64", "ts_ms"),
    _field("string", "snapshot", True, name="io.debezium.data.Enum", version=1,
           parameters={"allowed": "true,first,first_in_data_collection,last_in_data_collection,"
                                  "last,false,incremental"}, default="false"),
    _field("string", "db"), _field("string", "sequence", True), _field("int64", "ts_us", True),
    _field("int64", "ts_ns", True), _field("string", "schema"), _field("string", "table"),
    _field("int64", "txId", True), _field("int64", "lsn", True), _field("int64", "xmin", True)]
TRANSACTION_FIELDS = [_field("string", "id"), _field("int64", "total_order"),
                      _field("int64", "data_collection_order")]
VALUE_SCHEMA = {
    "type": "struct", "optional": False, "name": f"{TOPIC}.Envelope", "version": 2,
    "fields": [
        {"type": "struct", "fields": COLUMNS, "optional": True, "name": f"{TOPIC}.Value",
         "field": "before"},
        {"type": "struct", "fields": COLUMNS, "optional": True, "name": f"{TOPIC}.Value",
         "field": "after"},
        {"type": "struct", "fields": SOURCE_FIELDS, "optional": False,
         "name": "io.debezium.connector.postgresql.Source", "field": "source"},
        {"type": "struct", "fields": TRANSACTION_FIELDS, "optional": True, "name": "event.block",
         "version": 1, "field": "transaction"},
        _field("string", "op"), _field("int64", "ts_ms", True), _field("int64", "ts_us", True),
        _field("int64", "ts_ns", True)]}


def _row(id_: int, updated_ms: int, **changes) -> dict:
    return {**ROWS[id_], **changes, "updated_at": updated_ms * 1000}


def key(id_: int) -> bytes:
    return json.dumps({"schema": KEY_SCHEMA, "payload": {"id": id_}}).encode()


def envelope(op: str, before, after, *, committed_ms: int, snapshot: str, tx_id: int, lsn: int,
             sequence: str) -> bytes:
    """A change event's value: the envelope in its schema wrapper. The connector handles it
    ``committed_ms`` + 250 ms (``ts_ms``), after the source database committed it."""
    source = {"version": VERSION, "connector": "postgresql", "name": TOPIC_PREFIX,
              "ts_ms": committed_ms, "snapshot": snapshot, "db": "postgres", "sequence": sequence,
              "ts_us": committed_ms * 1000, "ts_ns": committed_ms * 1_000_000, "schema": SCHEMA,
              "table": TABLE, "txId": tx_id, "lsn": lsn, "xmin": None}
    handled = committed_ms + 250
    payload = {"before": before, "after": after, "source": source, "transaction": None,
               "op": op, "ts_ms": handled, "ts_us": handled * 1000,
               "ts_ns": handled * 1_000_000}
    return json.dumps({"schema": VALUE_SCHEMA, "payload": payload}).encode()


def _snapshot(t0: int, hour: int) -> list[WriteRecord]:
    """Night 1: the initial snapshot of rows 1001..1003 (one transaction, one LSN), four
    hours into the night."""
    at, lsn = t0 + 4 * hour, 34_000_000
    flags = ("first", "true", "last")
    return [WriteRecord(key(i), envelope("r", None, _row(i, t0), committed_ms=at,
                                         snapshot=flag, tx_id=770, lsn=lsn,
                                         sequence=f'[null,"{lsn}"]'), timestamp=at + 250)
            for i, flag in zip((1001, 1002, 1003), flags)]


def _streamed(t0: int, hour: int) -> list[list[WriteRecord]]:
    """Night 2: an update, an insert, a delete and its tombstone, each a transaction of its
    own (a batch each; the delete and its tombstone are sent together), from 03:00."""
    at = t0 + 27 * hour

    def event(minute, op, before, after, tx_id, lsn):
        committed = at + minute * 60_000
        value = envelope(op, before, after, committed_ms=committed, snapshot="false",
                         tx_id=tx_id, lsn=lsn, sequence=f'["{lsn - 8}","{lsn}"]')
        return WriteRecord(key((after or before)["id"]), value, timestamp=committed + 250)

    updated = _row(1001, at, email="sally.thomas@example.com")
    deleted = event(2, "d", _row(1002, t0), None, 783, 34_001_624)
    return [[event(0, "u", _row(1001, t0), updated, 781, 34_001_208)],
            [event(1, "c", None, _row(1004, at + 60_000), 782, 34_001_416)],
            [deleted, WriteRecord(key(1002), None, timestamp=deleted.timestamp)]]


def write(night_dir: Path, night: int, t0: int, hour: int) -> None:
    """``dbserver1.inventory.customers-0`` of snapshot ``night``: one segment, grown on night 2."""
    with SegmentWriter(night_dir / f"{TOPIC}-{PARTITION}", 0, index_interval_bytes=512,
                       preallocate_bytes=1024) as w:
        # linger.ms 0 (Connect's producer default): each snapshot read goes in its own batch
        batches = [[r] for r in _snapshot(t0, hour)] + (_streamed(t0, hour) if night >= 1 else [])
        for records in batches:
            w.append(records, producer_id=PRODUCER_ID, producer_epoch=0,
                     base_sequence=w.next_offset)
