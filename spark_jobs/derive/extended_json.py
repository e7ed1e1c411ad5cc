"""MongoDB Extended JSON documents as typed columns: the ``after`` of a Debezium MongoDB
change event (issue 42 item 2; docs/debezium.md "MongoDB").

Debezium's MongoDB connector writes a document's state not as a Connect struct but as one
string, the document in MongoDB Extended JSON (``{"_id": {"$numberLong": "1004"},
"first_name": "Anne"}``; its schema, where the JsonConverter's wrapper gives one, is a
``string`` named ``io.debezium.data.Json``). :func:`columns` reads such a document into the
source document's top-level fields, each typed from its Extended JSON form, and gives the
Connect schema of the columns it made, so that the cdc table types them as it types a
relational row (:mod:`spark_jobs.derive.debezium`):

- ``{"$oid": hex}``: ``string``, the 24 hex digits;
- ``{"$numberInt": s}``, ``{"$numberLong": s}``, a JSON integer: ``int64``;
- ``{"$numberDouble": s}`` (``"NaN"``, ``"Infinity"`` too), a JSON number with a fraction:
  ``double``;
- ``{"$numberDecimal": s}``: ``string``, the decimal's text (no fixed scale);
- ``{"$date": ...}`` (``{"$numberLong": ms}``, ms, or ISO 8601 text): ``int64`` named
  ``org.apache.kafka.connect.data.Timestamp``, the ms since the epoch;
- ``{"$binary": {"base64", "subType"}}`` (or the legacy ``{"$binary", "$type"}``): ``bytes``;
- a string, ``true``/``false``: ``string``, ``boolean``;
- a nested document, an array, any other ``$`` type: ``string``, its Extended JSON text.

A field whose value is null gives no column type: the column is left out of the row (it
reads null, as the document has it). The specification: mongodb/specifications,
``source/extended-json/extended-json.md``.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json

#: Connect's Timestamp logical type (int64 ms since the epoch), the Connect type of a $date
TIMESTAMP = "org.apache.kafka.connect.data.Timestamp"


class ExtendedJsonError(ValueError):
    """A document that is not MongoDB Extended JSON (or one of its values); names the value."""


def _text(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _date_ms(inner) -> int:
    if isinstance(inner, dict) and inner.keys() == {"$numberLong"}:
        return int(inner["$numberLong"])
    if isinstance(inner, int) and not isinstance(inner, bool):
        return inner
    if isinstance(inner, str):
        parsed = dt.datetime.fromisoformat(inner.replace("Z", "+00:00"))
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=dt.timezone.utc)
        return round(parsed.timestamp() * 1000)
    raise ExtendedJsonError(f"$date of {inner!r}")


def _binary(value: dict) -> str:
    inner = value["$binary"]
    data = inner.get("base64") if isinstance(inner, dict) else inner
    if not isinstance(data, str):
        raise ExtendedJsonError(f"$binary of {inner!r}")
    try:
        base64.b64decode(data, validate=True)
    except binascii.Error as err:
        raise ExtendedJsonError(f"$binary {data!r} is not base64: {err}") from err
    return data


def value(v) -> tuple[dict, object]:
    """One Extended JSON value as ``(Connect schema, JSON value of that schema)``."""
    if isinstance(v, bool):
        return {"type": "boolean", "optional": True}, v
    if isinstance(v, int):
        return {"type": "int64", "optional": True}, v
    if isinstance(v, float):
        return {"type": "double", "optional": True}, v
    if isinstance(v, str):
        return {"type": "string", "optional": True}, v
    if isinstance(v, dict) and len(v) in (1, 2) and all(k.startswith("$") for k in v):
        try:
            if v.keys() == {"$oid"} and isinstance(v["$oid"], str):
                return {"type": "string", "optional": True}, v["$oid"]
            if len(v) == 1 and ("$numberInt" in v or "$numberLong" in v):
                return {"type": "int64", "optional": True}, int(next(iter(v.values())))
            if v.keys() == {"$numberDouble"}:
                number = float(v["$numberDouble"])
                text = v["$numberDouble"] if number != number or number in (
                    float("inf"), float("-inf")) else number
                return {"type": "double", "optional": True}, text
            if v.keys() == {"$numberDecimal"} and isinstance(v["$numberDecimal"], str):
                return {"type": "string", "optional": True}, v["$numberDecimal"]
            if v.keys() == {"$date"}:
                return {"type": "int64", "optional": True, "name": TIMESTAMP,
                        "version": 1}, _date_ms(v["$date"])
            if "$binary" in v and (len(v) == 1 or "$type" in v):
                return {"type": "bytes", "optional": True}, _binary(v)
        except (ValueError, TypeError) as err:
            if isinstance(err, ExtendedJsonError):
                raise
            raise ExtendedJsonError(f"{_text(v)} is not Extended JSON: {err}") from err
    return {"type": "string", "optional": True}, _text(v)


def columns(text) -> tuple[dict, dict, list[tuple[str, str]]]:
    """A document's Extended JSON text as ``(row, Connect struct schema, errors)``: the row's
    values as the JsonConverter would write them for that schema (the module's table), for
    :func:`spark_jobs.derive.debezium.convert_row`; ``errors``, ``(field, why)`` of the
    fields whose value is no Extended JSON (left out of the row and the schema). Raises
    :class:`ExtendedJsonError` for a text that is no JSON document."""
    if not isinstance(text, str):
        raise ExtendedJsonError(f"expected the document's Extended JSON text, got {text!r:.80}")
    try:
        doc = json.loads(text)
    except ValueError as err:
        raise ExtendedJsonError(f"the document is not JSON: {err}") from err
    if not isinstance(doc, dict):
        raise ExtendedJsonError(f"the document is not a JSON object: {text[:80]!r}")
    row, fields, errors = {}, [], []
    for name, v in doc.items():
        if v is None:
            continue
        try:
            schema, out = value(v)
        except ExtendedJsonError as err:
            errors.append((name, str(err)))
            continue
        fields.append({**schema, "field": name})
        row[name] = out
    return row, {"type": "struct", "optional": True, "fields": fields}, errors


__all__ = ["TIMESTAMP", "ExtendedJsonError", "columns", "value"]
