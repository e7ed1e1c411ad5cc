"""Debezium's own change events, vendored under tests/data/debezium/ (its README gives each
file's repository, commit and path), as the bytes a Kafka Connect worker's JsonConverter
leaves in a topic: compact JSON, the key and the value each with the schema wrapper.

- ``docs/<connector>-{key,create,update,delete}.txt``: the JSON listings of the PostgreSQL,
  SQL Server, Oracle and MongoDB connector pages (debezium/debezium
  ``documentation/modules/ROOT/pages/connectors/<connector>.adoc`` at DOCS_COMMIT), verbatim.
  The listings are written for people: the update and delete listings elide their schema
  (``"schema": { ... }``; the pages say it is the create event's, which is put in), some
  carry a trailing comma or (SQL Server's delete) a stray ``},``, which are dropped. Nothing
  else is changed; ``"{debezium-version}"`` stays the string it is.
- ``docs/debezium-server-redis-sqlserver-emp.txt``: the SQL Server ``emp`` key and value the
  Debezium Server page shows in a Redis stream (``operations/debezium-server.adoc``): a
  table with DECIMAL(19,4) columns (``decimal.handling.mode=precise``) and a DATETIME.
- ``flink-debezium-data-schema-include.txt``: the 16 events of Debezium's tutorial
  ``inventory.products`` table (MySQL, a FLOAT ``weight`` the connector writes as Connect
  FLOAT64: JSON schema type ``"double"``), one value per line, as apache/flink keeps them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "data" / "debezium"
DOCS_REPO, DOCS_COMMIT = "debezium/debezium", "aad5519902997a3627fe296f77ea6d3452e9acce"
FLINK_REPO, FLINK_COMMIT = "apache/flink", "a4726a83ad6d56dff76011a44918f293d015c260"
FLINK_PATH = "flink-formats/flink-json/src/test/resources/debezium-data-schema-include.txt"

_ELIDED = re.compile(r'"schema"\s*:\s*\{\s*\.\.\.\s*\}\s*,(\s*\}\s*,)?')
_TRAILING_COMMA = re.compile(r",(\s*[}\]])")


def compact(obj) -> str:
    """JSON text as the JsonConverter writes it (no spaces), keys in their order."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def listing(name: str, schema: dict | None = None) -> dict:
    """One vendored documentation listing as JSON (see the module's text for the two
    repairs); ``schema`` stands in for an elided ``"schema": { ... }``."""
    text = (DATA / "docs" / f"{name}.txt").read_text()
    elided = bool(_ELIDED.search(text))
    text = _TRAILING_COMMA.sub(r"\1", _ELIDED.sub('"schema": null,', text))
    obj = json.loads(text)
    if elided:
        if schema is None:
            raise ValueError(f"{name}: its schema is elided and none was given")
        obj["schema"] = schema
    return obj


def connector_events(connector: str) -> list[tuple[str, str]]:
    """``(key json, value json)`` of a connector page's create, update and delete events
    (the delete followed by its tombstone, as Debezium writes one by default)."""
    key = compact(listing(f"{connector}-key"))
    create = listing(f"{connector}-create")
    out = [(key, compact(create))]
    for what in ("update", "delete"):
        out.append((key, compact(listing(f"{connector}-{what}", create["schema"]))))
    return out + [(key, None)]


def redis_emp() -> tuple[str, dict]:
    """The Debezium Server page's SQL Server ``emp`` key and value (a delete whose
    ``before`` holds the row), decoded from the Redis CLI's quoted strings."""
    lines = (DATA / "docs" / "debezium-server-redis-sqlserver-emp.txt").read_text().splitlines()
    key, value = (json.loads(line.split(") ", 1)[1]) for line in (lines[0], lines[2]))
    return key, json.loads(value)


def products() -> list[str]:
    """The tutorial ``products`` table's 16 values (with the schema wrapper), in order."""
    return (DATA / "flink-debezium-data-schema-include.txt").read_text().splitlines()


def product_key(value: str) -> str:
    """The key the MySQL connector writes for a products value (the table's primary key
    ``id`` as a Connect struct, with the wrapper): the values file keeps no keys."""
    payload = json.loads(value)["payload"]
    row = payload["after"] if payload["after"] is not None else payload["before"]
    return compact({"schema": {"type": "struct", "fields": [
        {"type": "int32", "optional": False, "field": "id"}], "optional": False,
        "name": "dbserver1.inventory.products.Key"}, "payload": {"id": row["id"]}})
