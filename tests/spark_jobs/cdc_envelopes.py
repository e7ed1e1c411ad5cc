"""Debezium change events written by hand as Debezium writes them (debezium.io, the PostgreSQL
and MySQL connector pages: their ``source`` blocks; the JsonConverter with the schema wrapper
for PostgreSQL, without it for MySQL), the expected typed and schema-less rows of a replayed
row, and the Debezium Server page's SQL Server emp row as a snapshot read. Shared by
test_cdc_changes (the change frames) and test_cdc_tables (the cdc__ tables)."""

from __future__ import annotations

import base64
import datetime as dt
import json

from tests.snapshots import T0
from tests.spark_jobs import debezium_events as dbz_events


def wrap(schema: dict, payload: dict) -> str:
    return json.dumps({"schema": schema, "payload": payload})


def fields(*specs) -> list[dict]:
    return [{"type": t, "optional": o, "field": f} for t, o, f in specs]


# ------------------------------------------------------------------ PostgreSQL, with the wrapper
ROW = fields(("int32", False, "id"), ("string", False, "first_name"),
             ("string", True, "email")) + [
    {"type": "int32", "optional": True, "name": "io.debezium.time.Date", "version": 1,
     "field": "birth_date"}]


PG_SOURCE = fields(("string", False, "version"), ("string", False, "connector"),
                   ("string", False, "name"), ("int64", False, "ts_ms"),
                   ("string", True, "snapshot"), ("string", False, "db"),
                   ("string", True, "sequence"), ("string", False, "schema"),
                   ("string", False, "table"), ("int64", True, "txId"),
                   ("int64", True, "lsn"), ("int64", True, "xmin"))


def envelope_schema(row_fields, source_fields, name="PostgreSQL_server.inventory.customers"):
    value = {"type": "struct", "fields": row_fields, "optional": True, "name": f"{name}.Value"}
    return {"type": "struct", "optional": False, "name": f"{name}.Envelope", "fields": [
        {**value, "field": "before"}, {**value, "field": "after"},
        {"type": "struct", "fields": source_fields, "optional": False,
         "name": "io.debezium.connector.postgresql.Source", "field": "source"},
        {"type": "string", "optional": False, "field": "op"},
        {"type": "int64", "optional": True, "field": "ts_ms"},
        {"type": "struct", "optional": True, "name": "event.block", "field": "transaction",
         "fields": fields(("string", False, "id"), ("int64", False, "total_order"),
                          ("int64", False, "data_collection_order"))}]}


PG_SCHEMA = envelope_schema(ROW, PG_SOURCE)


KEY_SCHEMA = {"type": "struct", "name": "PostgreSQL_server.inventory.customers.Key",
              "optional": False, "fields": fields(("int32", False, "id"))}


def pg_key(i: int) -> str:
    return wrap(KEY_SCHEMA, {"id": i})


def pg_value(op, before, after, ts, txid, lsn) -> str:
    source = {"version": "2.7.0.Final", "connector": "postgresql", "name": "PostgreSQL_server",
              "ts_ms": ts, "snapshot": "true" if op == "r" else "false", "db": "postgres",
              "sequence": f'["{lsn - 9}","{lsn}"]', "schema": "inventory",
              "table": "customers", "txId": txid, "lsn": lsn, "xmin": None}
    return wrap(PG_SCHEMA, {"before": before, "after": after, "source": source, "op": op,
                            "ts_ms": ts + 5, "transaction": None})


ANNE = {"id": 1, "first_name": "Anne", "email": "annek@noanswer.org", "birth_date": 3652}


BOB = {"id": 2, "first_name": "Bob", "email": None, "birth_date": None}


def typed_expected(row: dict) -> dict:
    """A replayed (JSON) row as the typed columns hold it: the Date as days since the epoch."""
    days = row["birth_date"]
    return {**row, "birth_date": None if days is None else
            dt.date(1970, 1, 1) + dt.timedelta(days=days)}


# ------------------------------------------------------------------ MySQL, without the wrapper
def mysql_value(op, before, after, pos, row=0, gtid=None) -> str:
    source = {"version": "2.7.0.Final", "connector": "mysql", "name": "mysql-server-1",
              "ts_ms": T0 + pos, "snapshot": "false", "db": "inventory", "table": "customers",
              "server_id": 223344, "gtid": gtid, "file": "mysql-bin.000003", "pos": pos,
              "row": row, "thread": 7, "query": None}
    return json.dumps({"op": op, "ts_ms": T0 + pos + 3, "transaction": None, "before": before,
                       "after": after, "source": source})


def mysql_key(i: int) -> str:
    return json.dumps({"id": i})


def untyped_expected(row: dict) -> dict:
    """A replayed row as a schema-less table holds it: each value's JSON text."""
    return {k: None if v is None else json.dumps(v, separators=(",", ":")) for k, v in row.items()}


def emp_snapshot() -> tuple[str, str]:
    """The Debezium Server page's SQL Server emp row as its snapshot read: the documented
    delete's key, schema and source, ``op`` ``r`` and its ``before`` row as ``after``."""
    key, value = dbz_events.redis_emp()
    payload = value["payload"]
    read = {**payload, "before": None, "after": payload["before"], "op": "r"}
    return key, json.dumps({"schema": value["schema"], "payload": read})


def unscaled(text: str, scale: int):
    """Connect's Decimal bytes by hand: big-endian two's complement, then the scale."""
    import decimal
    return decimal.Decimal(int.from_bytes(base64.b64decode(text), "big", signed=True)).scaleb(-scale)
