"""The cdc kind's change frames (spark_jobs.derive.cdc, issue 35 item 3) against an
independent replay.

The envelopes are written (tests/spark_jobs/cdc_envelopes.py) as Debezium writes them (debezium.io, the PostgreSQL and
MySQL connector pages: their ``source`` blocks; the JsonConverter with and without the
schema wrapper; an AvroConverter value as the decode job renders it in ``records.value_json``).
The expectation is :mod:`cdc_replay` (Debezium's documented semantics, nothing of
spark_jobs.derive): the change frame, folded here per key in offset order, must leave the same
rows. Typed columns are compared with the replay's JSON values converted here by hand.
Debezium's own events (tests/data/debezium/, its README; debezium_events) are folded the same
way: the connector pages' PostgreSQL, SQL Server, Oracle and MongoDB events, the tutorial's
products table, a SQL Server DECIMAL/DATETIME row.
"""

from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa
import pytest

from spark_jobs import findings, schemas
from spark_jobs.derive import cdc, keyed

from tests.snapshots import T0
from tests.spark_jobs.cdc_envelopes import (ANNE, BOB, PG_SCHEMA, PG_SOURCE, ROW, emp_snapshot,
                                           envelope_schema, fields, mysql_key, mysql_value, pg_key,
                                           pg_value, typed_expected, unscaled, untyped_expected,
                                           wrap)
from tests.spark_jobs.cdc_replay import key_of, replay

TOPIC = "dbserver1.inventory.customers"
RECORD_COLUMNS = ("topic", "partition", "offset", "timestamp", "key", "value", "value_json",
                  "txn_state", "is_transactional", "batch_position", "segment",
                  "segment_base_offset", "run_id")
RECORDS = pa.schema([schemas.RECORDS.field(n) for n in RECORD_COLUMNS])


def records(events, partition: int = 0) -> pa.Table:
    """Records of ``events``: ``(offset, key json, value json or None)``, or with a 4th item,
    a dict of other columns (``txn_state``, ``value``, ``value_json``)."""
    rows = []
    for event in events:
        offset, key, value = event[:3]
        extra = event[3] if len(event) > 3 else {}
        rows.append({"topic": TOPIC, "partition": partition, "offset": offset,
                     "timestamp": dt.datetime.fromtimestamp((T0 + offset) / 1000, dt.timezone.utc),
                     "key": None if key is None else key.encode(),
                     "value": None if value is None else value.encode(), "value_json": None,
                     "txn_state": None, "is_transactional": False, "batch_position": 61 * offset,
                     "segment": f"{TOPIC}-{partition}/00000000000000000000.log",
                     "segment_base_offset": 0, "run_id": "run-1", **extra})
    return pa.Table.from_pylist(rows, schema=RECORDS)


def fold(frame: pa.Table) -> dict[str, dict]:
    """The rows a change frame leaves, folded here: per key in offset order, an upsert's
    columns replace the key's row, a delete removes it."""
    state: dict[str, dict] = {}
    offsets = frame.column("offset").to_pylist()
    assert offsets == sorted(offsets)
    for row in frame.to_pylist():
        key = row["state_key"].decode()
        assert key == row["key"]
        if row["action"] == "upsert":
            state[key] = row
        else:
            assert row["action"] == "delete"
            state.pop(key, None)
    return state


# ------------------------------------------------------------------ PostgreSQL, with the wrapper
PG_EVENTS = [
    (0, pg_key(1), pg_value("r", None, ANNE, T0, 555, 24023128)),
    (1, pg_key(2), pg_value("c", None, BOB, T0 + 1, 556, 24023200)),
    (2, pg_key(1), pg_value("u", ANNE, {**ANNE, "first_name": "Anne Marie"}, T0 + 2, 557,
                            24023300)),
    (3, pg_key(2), pg_value("d", BOB, None, T0 + 3, 558, 24023400)),
    (4, pg_key(2), None),  # the delete's tombstone
    (5, pg_key(3), pg_value("c", None, {**BOB, "id": 3, "first_name": "Cy"}, T0 + 4, 559,
                            24023500)),
]


def test_postgresql_with_schema_replays():
    frame, columns, found = cdc.changes(records(PG_EVENTS), cdc.table_schema())
    assert found == []
    assert columns.names == ["partition", "key", "id", "first_name", "email", "birth_date", "op",
                             "source_ts_ms", "lsn", "txId", "xmin", "sequence", "offset",
                             "timestamp", "night", "run_id"]
    assert [columns.field(n).type for n in ("id", "first_name", "birth_date", "lsn", "sequence")] \
        == [pa.int32(), pa.string(), pa.date32(), pa.int64(), pa.string()]
    assert frame.schema == keyed.change_schema(columns)
    want = replay([e[:3] for e in PG_EVENTS])
    got = fold(frame)
    assert sorted(got) == sorted(want)
    for key, row in want.items():
        assert {n: got[key][n] for n in row} == typed_expected(row)
    # the latest change of each key carries its source position and op
    by_offset = {r["offset"]: r for r in frame.to_pylist()}
    assert (by_offset[2]["op"], by_offset[2]["lsn"], by_offset[2]["txId"],
            by_offset[2]["source_ts_ms"]) == ("u", 24023300, 557, T0 + 2)
    assert by_offset[2]["sequence"] == '["24023291","24023300"]'
    # a delete carries the key and the source, no row; its tombstone carries no op
    assert (by_offset[3]["action"], by_offset[3]["op"], by_offset[3]["key"],
            by_offset[3]["first_name"], by_offset[3]["lsn"]) == ("delete", "d", '{"id":2}',
                                                                  None, 24023400)
    assert (by_offset[4]["action"], by_offset[4]["op"], by_offset[4]["lsn"]) \
        == ("delete", None, None)
    assert by_offset[4]["timestamp"] == dt.datetime.fromtimestamp((T0 + 4) / 1000,
                                                                  dt.timezone.utc)


def test_the_state_machine_folds_the_frame_to_the_replay():
    """The lead's keyed.apply takes the frame as it is: from an empty table, the replay."""
    frame, columns, _ = cdc.changes(records(PG_EVENTS), cdc.table_schema())
    state = keyed.apply(columns.empty_table(), frame, "cdc", "2025-11-21", "run-1")
    want = replay([e[:3] for e in PG_EVENTS])
    assert sorted(state.column("key").to_pylist()) == sorted(want)
    for row in state.to_pylist():
        assert {n: row[n] for n in want[row["key"]]} == typed_expected(want[row["key"]])
        assert (row["night"], row["run_id"]) == ("2025-11-21", "run-1")


# ------------------------------------------------------------------ MySQL, without the wrapper
M1 = {"id": 1004, "first_name": "Anne", "email": "annek@noanswer.org", "tags": ["a", "b"]}
MYSQL_EVENTS = [
    (10, mysql_key(1004), mysql_value("c", None, M1, 154)),
    (11, mysql_key(1005), mysql_value("c", None, {**M1, "id": 1005, "first_name": "Ed"}, 300)),
    (12, mysql_key(1004), mysql_value("u", M1, {**M1, "email": None, "tags": []}, 484,
                                      gtid="c2a7c4b1-0a4e-11ee-9a3b-0242ac120002:23")),
    (13, mysql_key(1005), mysql_value("d", {**M1, "id": 1005}, None, 805, row=1)),
    (14, mysql_key(1005), None),
]


def test_mysql_without_schema_replays_as_json_text():
    frame, columns, found = cdc.changes(records(MYSQL_EVENTS), cdc.table_schema())
    assert found == []
    assert columns.names == ["partition", "key", "id", "first_name", "email", "tags", "op",
                             "source_ts_ms", "file", "pos", "row", "gtid", "server_id",
                             "thread", "offset", "timestamp", "night", "run_id"]
    assert all(columns.field(n).type == pa.string() for n in ("id", "first_name", "tags"))
    want = replay([e[:3] for e in MYSQL_EVENTS])
    got = fold(frame)
    assert sorted(got) == sorted(want) == ['{"id":1004}']
    row = got['{"id":1004}']
    assert {n: row[n] for n in want['{"id":1004}']} == untyped_expected(want['{"id":1004}'])
    assert (row["file"], row["pos"], row["row"], row["gtid"], row["server_id"], row["thread"]) \
        == ("mysql-bin.000003", 484, 0, "c2a7c4b1-0a4e-11ee-9a3b-0242ac120002:23", 223344, 7)
    assert [json.loads(v) for v in (row["id"], row["tags"])] == [1004, []]


def test_a_primary_key_update_moves_the_row():
    """Debezium writes a change of a row's key as a delete of the old key (and its tombstone)
    and a create under the new one."""
    events = MYSQL_EVENTS[:2] + [
        (12, mysql_key(1004), mysql_value("d", M1, None, 500)),
        (13, mysql_key(1004), None),
        (14, mysql_key(2004), mysql_value("c", None, {**M1, "id": 2004}, 500, row=1)),
        (15, mysql_key(2004), mysql_value("u", {**M1, "id": 2004},
                                          {**M1, "id": 2004, "first_name": "Anna"}, 600)),
    ]
    frame, _, found = cdc.changes(records(events), cdc.table_schema())
    want = replay([e[:3] for e in events])
    got = fold(frame)
    assert found == [] and sorted(got) == sorted(want) == ['{"id":1005}', '{"id":2004}']
    for key, row in want.items():
        assert {n: got[key][n] for n in row} == untyped_expected(row)
    assert json.loads(got['{"id":2004}']["first_name"]) == "Anna"


# ------------------------------------------------------------------ Avro, via value_json
def test_an_avro_value_is_read_from_value_json():
    """An AvroConverter value: the record's value is Schema Registry's wire format (magic 0,
    schema id, Avro bytes); the decode job's value_json holds its JSON (unions as the bare
    branch), which the cdc kind reads."""
    wire = "\x00\x00\x00\x00\x07not json"
    events = [(e[0], e[1], None if e[2] is None else wire,
               {"value_json": e[2]} if e[2] is not None else {}) for e in MYSQL_EVENTS]
    frame, columns, found = cdc.changes(records(events), cdc.table_schema())
    assert found == []
    want = replay([e[:3] for e in MYSQL_EVENTS])
    got = fold(frame)
    assert sorted(got) == sorted(want)
    for key, row in want.items():
        assert {n: got[key][n] for n in row} == untyped_expected(row)
    # the same record without value_json is no envelope: a finding, not a dropped change
    _, _, found = cdc.changes(records([events[0][:3]]), cdc.table_schema())
    assert [f.kind for f in found] == [findings.CDC_PARSE_ERROR]


# ------------------------------------------------------------------ what is no change
def test_transactions_truncate_message_and_bad_records():
    message = json.loads(mysql_value("m", None, None, 900))
    del message["before"], message["after"]
    message["message"] = {"prefix": "audit", "content": "aGk="}
    truncate = {k: v for k, v in message.items() if k != "message"} | {"op": "t"}
    events = [
        (0, mysql_key(1), mysql_value("c", None, {"id": 1}, 100)),
        (1, mysql_key(2), mysql_value("c", None, {"id": 2}, 110),
         {"txn_state": "aborted", "is_transactional": True}),
        (2, mysql_key(3), mysql_value("c", None, {"id": 3}, 120),
         {"txn_state": "open", "is_transactional": True}),
        (3, mysql_key(4), mysql_value("c", None, {"id": 4}, 130),
         {"txn_state": "committed", "is_transactional": True}),
        (4, mysql_key(1), json.dumps(message)),  # a logical decoding message: no row
        (5, mysql_key(1), json.dumps(truncate)),
        (6, mysql_key(1), '{"op": "c"'),
        (7, "not json", mysql_value("c", None, {"id": 7}, 140)),
        (8, None, mysql_value("c", None, {"id": 8}, 150)),  # a table without a key
    ]
    frame, _, found = cdc.changes(records(events, partition=3), cdc.table_schema())
    # what the replay reads: the committed records Debezium could have written (not 6, 7)
    committed = [e[:3] for e in events if e[0] not in (6, 7)
                 and (e[3:] == () or e[3]["txn_state"] == "committed")]
    assert sorted(fold(frame)) == sorted(replay(committed)) == ['{"id":1}', '{"id":4}']
    assert frame.column("offset").to_pylist() == [0, 3]
    assert [(f.kind, f.base_offset, f.last_offset) for f in found] == [
        (findings.CDC_UNSUPPORTED_OP, 5, 5), (findings.CDC_PARSE_ERROR, 6, 6),
        (findings.CDC_PARSE_ERROR, 7, 7)]
    for f in found:
        assert (f.topic, f.partition, f.segment, f.segment_base_offset, f.run_id, f.position) \
            == (TOPIC, 3, f"{TOPIC}-3/00000000000000000000.log", 0, "run-1", 61 * f.base_offset)
    assert "not JSON" in found[2].message and "offset 7" in found[2].message
    # a replay that empties the table on a truncate, as Debezium's consumers may, differs
    assert replay(committed, truncate="clear") == {}


def test_a_value_that_does_not_fit_its_column_costs_that_column_only():
    """The table typed ``id`` as int32 by a schema; a schema-less ``id`` of text does not fit:
    the row lands with ``id`` null, and one finding names the column, the offset and why."""
    events = [PG_EVENTS[0],
              (1, mysql_key(9), mysql_value("c", None, {"id": "nine", "first_name": "N"}, 100))]
    frame, columns, found = cdc.changes(records(events), cdc.table_schema())
    assert columns.field("id").type == pa.int32()
    assert frame.column("offset").to_pylist() == [0, 1]
    row = frame.to_pylist()[1]
    assert (row["key"], row["id"], row["first_name"]) == ('{"id":9}', None, '"N"')
    assert [(f.kind, f.base_offset) for f in found] == [(findings.CDC_VALUE_ERROR, 1)]
    assert found[0].message.startswith("offset 1: column id is null in the row: 'nine' "
                                       "does not fit int32")
    assert found[0].raw == events[1][2].encode()


def test_a_value_its_schema_cannot_type_and_an_unknown_type():
    """A value that does not convert by its Connect schema (a date of text) is null in a row
    that lands, one finding per such cell; a column of a type the JsonConverter does not
    write ("float64", Connect's in-memory name) holds its JSON text, one note for the column."""
    odd = envelope_schema(ROW + fields(("float64", True, "score")), PG_SOURCE)
    source = json.loads(PG_EVENTS[0][2])["payload"]["source"]
    def event(offset, after):
        return (offset, pg_key(after["id"]), wrap(odd, {"before": None, "after": after,
                                                        "source": source, "op": "c"}))
    events = [event(0, {**ANNE, "birth_date": "1980-01-01", "score": 1.5}),
              event(1, {**BOB, "score": 2})]
    frame, columns, found = cdc.changes(records(events), cdc.table_schema())
    assert (columns.field("birth_date").type, columns.field("score").type) == \
        (pa.date32(), pa.string())
    got = fold(frame)
    assert got['{"id":1}']["birth_date"] is None and got['{"id":1}']["first_name"] == "Anne"
    assert [got[k]["score"] for k in ('{"id":1}', '{"id":2}')] == ["1.5", "2"]
    assert [(f.kind, f.base_offset) for f in found] == [
        (findings.CDC_UNTYPED_COLUMN, 0), (findings.CDC_VALUE_ERROR, 0)]
    assert "column score: after.score: unknown Connect schema type 'float64'" in found[0].message
    assert "column birth_date is null in the row: after.birth_date: expected int32" \
        in found[1].message


# ------------------------------------------------------------------ Debezium's own events
from tests.spark_jobs import debezium_events as dbz_events  # noqa: E402


def keyed_records(pairs, first: int = 0) -> pa.Table:
    return records([(first + i, k, v) for i, (k, v) in enumerate(pairs)])


@pytest.mark.parametrize("connector", ["postgresql", "sqlserver", "oracle", "mongodb"])
def test_the_connector_pages_events_replay(connector):
    """Each connector page's create, update, delete and tombstone, with the schema wrapper
    (MongoDB: the document's Extended JSON): the frame folds to the replay."""
    pairs = dbz_events.connector_events(connector)
    frame, columns, found = cdc.changes(keyed_records(pairs), cdc.table_schema())
    assert found == []
    want = replay([(i, k, v) for i, (k, v) in enumerate(pairs)])
    assert fold(frame) == {} == want  # the page's row is created, updated, then deleted
    # the create and update alone: the updated row, typed as the JSON has it
    frame, columns, found = cdc.changes(keyed_records(pairs[:2]), cdc.table_schema())
    want = replay([(i, k, v) for i, (k, v) in enumerate(pairs[:2])])
    got = fold(frame)
    assert found == [] and sorted(got) == sorted(want) and len(want) == 1
    for key, row in want.items():
        assert {n: got[key][n] for n in row} == row
    if connector == "oracle":
        assert columns.field("txId").type == pa.string() and got[key]["txId"] == "6.9.809"
    if connector == "sqlserver":
        assert got[key]["event_serial_no"] == 2  # the page writes the int64 as "2"


def test_the_tutorial_products_replay_with_the_double_weight():
    values = dbz_events.products()
    pairs = [(dbz_events.product_key(v), v) for v in values]
    frame, columns, found = cdc.changes(keyed_records(pairs, 100), cdc.table_schema())
    assert found == [] and frame.num_rows == 16
    assert columns.field("weight").type == pa.float64()
    want = replay([(100 + i, k, v) for i, (k, v) in enumerate(pairs)])
    got = fold(frame)
    assert sorted(got) == sorted(want) and len(want) == 10
    for key, row in want.items():
        assert {n: got[key][n] for n in row} == row
    assert (got['{"id":107}']["weight"], got['{"id":107}']["pos"]) == (5.099999904632568, 717)


def test_a_decimal_and_datetime_table_replays():
    key, value = emp_snapshot()
    frame, columns, found = cdc.changes(records([(0, key, value)]), cdc.table_schema())
    assert found == []
    assert (columns.field("sal").type, columns.field("hiredate").type) == \
        (pa.decimal128(19, 4), pa.timestamp("ms"))
    want = replay([(0, key, value)])
    got = fold(frame)
    (k, row), = want.items()
    typed = {**row, "sal": unscaled(row["sal"], 4), "comm": unscaled(row["comm"], 4),
             "hiredate": dt.datetime(1970, 1, 1) + dt.timedelta(milliseconds=row["hiredate"])}
    assert {n: got[k][n] for n in row} == typed
    assert str(got[k]["sal"]) == "200000.0000" and got[k]["hiredate"] == dt.datetime(2019, 7, 9)


# ------------------------------------------------------------------ the table's columns
def test_a_later_envelope_widens_the_table():
    wider = envelope_schema(ROW + fields(("string", True, "phone")), PG_SOURCE)
    late = {**ANNE, "id": 4, "phone": "555-0100"}
    source = json.loads(PG_EVENTS[0][2])["payload"]["source"]
    event = (6, pg_key(4), wrap(wider, {"before": None, "after": late, "source": source,
                                        "op": "c", "ts_ms": T0, "transaction": None}))
    first, first_columns, _ = cdc.changes(records(PG_EVENTS), cdc.table_schema())
    frame, columns, found = cdc.changes(records([event]), first_columns)
    assert found == []
    assert columns.names == first_columns.names[:6] + ["phone"] + first_columns.names[6:]
    assert frame.to_pylist()[0]["phone"] == "555-0100"
    # the earlier night's rows read null for it, through the state machine's fold
    state = keyed.apply(first_columns.empty_table(), first, "cdc", "n1", "r1")
    state = pa.table({**{n: state.column(n) for n in state.column_names},
                      "phone": pa.nulls(state.num_rows, pa.string())}).select(columns.names)
    state = keyed.apply(state.cast(columns), frame, "cdc", "n2", "r2")
    assert {r["key"]: r["phone"] for r in state.to_pylist()} == {
        '{"id":1}': None, '{"id":3}': None, '{"id":4}': "555-0100"}
    # the schema alone gives the same columns as the records did
    assert cdc.table_schema([PG_SCHEMA, wider]).names == columns.names


def test_a_source_column_named_like_the_tables_own_is_renamed():
    row = {"id": 1, "timestamp": 5, "op": "x", "file": "f", "key": "k"}
    frame, columns, found = cdc.changes(records(
        [(0, mysql_key(1), mysql_value("c", None, row, 100))]), cdc.table_schema())
    assert found == []
    assert [n for n in columns.names if n.startswith(cdc.RENAMED_PREFIX)] == [
        "after_timestamp", "after_op", "after_file", "after_key"]
    got = frame.to_pylist()[0]
    assert (got["after_op"], got["op"], got["after_key"], got["key"]) \
        == ('"x"', "c", '"k"', '{"id":1}')


def test_the_key_text_is_the_same_with_or_without_the_wrapper():
    a = cdc.key_text(pg_key(1).encode())
    b = cdc.key_text(b'{ "id" : 1 }')
    assert a == b == key_of(pg_key(1)) == '{"id":1}'
    assert cdc.key_text(b'{"b": 1, "a": "\xc3\xa9"}') == '{"a":"\xe9","b":1}'


@pytest.mark.parametrize("events, pattern, want", [
    (PG_EVENTS, None, True),
    (MYSQL_EVENTS, None, True),
    ([(0, mysql_key(1), None)], None, False),  # a tombstone says nothing
    ([(0, mysql_key(1), '{"id": 1, "name": "plain JSON"}')] + MYSQL_EVENTS, None, False),
    ([(0, mysql_key(1), '{"id": 1}')], r"dbserver1\..*", True),
])
def test_detection(events, pattern, want):
    assert cdc.is_cdc(TOPIC, records(events), pattern) is want


def test_mongodb_documents_of_different_fields_widen_one_table():
    """Documents of one collection with different fields: every field a column (typed by
    the first document that has it), an envelope kept only where it brings a column."""
    key, value = dbz_events.connector_events("mongodb")[0]
    create = json.loads(value)
    docs = [{"_id": {"$numberLong": str(i)}, "name": f"n{i}"} for i in range(5)]
    docs[3]["score"] = {"$numberDouble": "1.5"}
    docs[4]["score"] = "high"  # a later document's field of another type: that cell only
    pairs = [(json.dumps({**json.loads(key), "payload": {"id": str(i)}}),
              json.dumps({**create, "payload": {**create["payload"], "after": json.dumps(d)}}))
             for i, d in enumerate(docs)]
    envelopes, untyped, _ = cdc.sources(keyed_records(pairs))
    assert len(envelopes) == 2 and untyped == []
    frame, columns, found = cdc.changes(keyed_records(pairs), cdc.table_schema())
    assert [columns.field(n).type for n in ("_id", "name", "score")] == \
        [pa.int64(), pa.string(), pa.float64()]
    got = fold(frame)
    assert [got[f'{{"id":"{i}"}}']["score"] for i in range(5)] == [None, None, None, 1.5, None]
    assert [(f.kind, f.base_offset) for f in found] == [(findings.CDC_VALUE_ERROR, 4)]
    want = replay([(i, k, v) for i, (k, v) in enumerate(pairs)])
    assert {k: {n: got[k][n] for n in r if n != "score"} for k, r in want.items()} == \
        {k: {n: v for n, v in r.items() if n != "score"} for k, r in want.items()}
