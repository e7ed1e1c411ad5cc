"""An independent replay of a Debezium topic, for tests of the ``cdc__<topic>`` tables: where
a source table stands after a partition's change events, from Debezium's documented semantics
alone (debezium.io, "Data change events"), not from the product's parser.

- A record's **key** identifies the row: its JSON, without the JsonConverter's
  ``{"schema", "payload"}`` wrapper, as canonical text (keys sorted, no spaces), the cdc
  table's ``key`` column. A record without a key has no row to change.
- A **value** is an envelope, with or without the wrapper. ``op`` ``c`` (create), ``r``
  (snapshot read) and ``u`` (update) make ``after`` the key's row; ``d`` (delete) removes it;
  a **tombstone** (null value, written after a delete for compaction) removes it too.
- ``t`` (truncate) empties the source table in Debezium; the cdc table keeps its rows and
  reports the truncate instead, so the replay keeps them unless told ``truncate="clear"``.
- ``m`` (a logical decoding message) changes no row.

Rows come back as the JSON has them (no typing by the Connect schema). A MongoDB event's
``after`` is the document as MongoDB Extended JSON text (debezium.io, the MongoDB connector's
"Change events"); its row is the document's top-level fields in relaxed form
(mongodb/specifications, ``source/extended-json/extended-json.md``): ``$oid`` its hex text,
``$numberInt``/``$numberLong`` integers, ``$numberDouble`` a float, ``$date`` milliseconds
since the epoch; a field that is null is left out (it reads null); other values as they are.
"""

from __future__ import annotations

import datetime as dt
import json


def key_of(key_json) -> str | None:
    """The row identity of a key's JSON text (``str``/``bytes``), None for no key."""
    if key_json is None:
        return None
    obj = json.loads(key_json)
    if isinstance(obj, dict) and set(obj) == {"schema", "payload"}:
        obj = obj["payload"]
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def envelope_of(value_json) -> dict:
    obj = json.loads(value_json)
    if isinstance(obj, dict) and set(obj) == {"schema", "payload"}:
        obj = obj["payload"]
    return obj


def relaxed(value):
    """One top-level value of a MongoDB document in Extended JSON's relaxed form."""
    if not isinstance(value, dict) or len(value) != 1:
        return value
    (tag, inner), = value.items()
    if tag == "$oid":
        return inner
    if tag in ("$numberInt", "$numberLong"):
        return int(inner)
    if tag == "$numberDouble":
        return float(inner)
    if tag == "$date":
        if isinstance(inner, dict):
            return int(inner["$numberLong"])
        if isinstance(inner, str):
            when = dt.datetime.fromisoformat(inner.replace("Z", "+00:00"))
            return int(when.timestamp() * 1000)
        return inner
    return value


def row_of(after) -> dict:
    """The source row of an upsert's ``after``: a struct's JSON, or a MongoDB document's
    Extended JSON text."""
    if isinstance(after, str):
        return {k: relaxed(v) for k, v in json.loads(after).items() if v is not None}
    return dict(after)


def replay(events, truncate: str = "keep") -> dict[str, dict]:
    """``{key: row}`` after ``events``: ``(offset, key json, value json or None)`` of one
    partition in offset order (committed records only)."""
    if truncate not in ("keep", "clear"):
        raise ValueError(f"truncate: 'keep' or 'clear', not {truncate!r}")
    rows: dict[str, dict] = {}
    last = None
    for offset, key_json, value_json in events:
        if last is not None and offset <= last:
            raise ValueError(f"events out of offset order: {offset} after {last}")
        last = offset
        key = key_of(key_json)
        if value_json is None:
            if key is not None:
                rows.pop(key, None)
            continue
        envelope = envelope_of(value_json)
        op = envelope["op"]
        if op == "t":
            if truncate == "clear":
                rows.clear()
            continue
        if op == "m" or key is None:
            continue
        if op in ("c", "r", "u"):
            rows[key] = row_of(envelope["after"])
        elif op == "d":
            rows.pop(key, None)
        else:
            raise ValueError(f"offset {offset}: op {op!r} is not Debezium's")
    return rows
