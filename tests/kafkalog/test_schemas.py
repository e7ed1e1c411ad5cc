"""Keys and values decoded with Schema Registry schemas (issue 20, parts 1-4 and 7).

The independent encoder is confluent-kafka's own serializers (Avro, JSON Schema,
Protobuf) against its in-memory mock registry; the ``_schemas`` topic is written with
our writer from JSON shaped as Schema Registry's ``KafkaStore`` writes it, from what
the mock registry registered. Every value must decode from that ``_schemas`` segment
alone.
"""

from __future__ import annotations

import json
import struct

import pytest

from kafkalog.cli import main
from kafkalog.schemas import (
    FIELDS, MALFORMED, UNKNOWN_SCHEMA_ID, Registry, decode_fields, from_folder, from_schemas_topic,
)
from kafkalog.schemas.wire import read_message_indexes, schema_ref

from tests.schema_data import (CUSTOMER, EVENT_SCHEMA, ORDER_V1, ORDER_V2, SHOP_PROTO, Data,
                               avro_json, pb, schemas_records, write_segment)


@pytest.fixture(scope="module")
def data():
    return Data()


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory, data):
    root = tmp_path_factory.mktemp("snapshot")
    write_segment(root / "_schemas-0", data.schemas)
    write_segment(root / "orders-0", data.orders)
    write_segment(root / "events-0", data.events)
    write_segment(root / "payments-0", data.payments)
    return root


@pytest.fixture(scope="module")
def registry(snapshot):
    return from_schemas_topic(str(snapshot / "_schemas-0"))


def test_every_value_decodes_from_the_schemas_segment_alone(data, registry):
    assert registry.problems == []
    expected = [
        ("k1", "AVRO", avro_json(data.order_v1)),
        ("k2", "AVRO", avro_json(data.order_v2)),
        (None, "AVRO", avro_json(data.order_v2)),  # schema named by the __value_schema_id header
        (None, "JSON", data.event),
        (None, "PROTOBUF", pb(data.payment)),
        (None, "PROTOBUF", pb(data.refund)),
        (None, "PROTOBUF", pb(data.line)),
        (None, "PROTOBUF", pb(data.refund)),  # by header
    ]
    got = [decode_fields(registry, k, v, h) for k, v, h in data.orders + data.events + data.payments]
    assert [(f["key_decoded"], f["value_format"], f["value_decoded"]) for f in got] == expected
    assert all(f["key_error"] is None and f["value_error"] is None for f in got)
    assert list(got[0]) == list(FIELDS)
    # ids: those the serializers wrote (prefix), and the header's GUID resolved to v2's id
    ids = [struct.unpack(">I", v[1:5])[0] if v[0] == 0 else None for _, v, _ in data.orders]
    assert [f["value_schema_id"] for f in got[:2]] == ids[:2] and got[2]["value_schema_id"] == ids[1]
    assert got[0]["key_schema_id"] == struct.unpack(">I", data.orders[0][0][1:5])[0]
    # the Protobuf messages: indexes [0], [1] (second type of the file), [0, 0] (nested)
    assert [read_message_indexes(schema_ref(v, dict(h).get("__value_schema_id")).payload)[0]
            for _, v, h in data.payments] == [[0], [1], [0, 0], [1]]
    assert data.payments[3][1] == data.refund.SerializeToString()  # the bare payload
    assert got[7]["value_schema_id"] == got[5]["value_schema_id"]
    # the Protobuf rendering: int64 as a string, bytes base64, enum name, Timestamp RFC 3339
    assert got[4]["value_decoded"]["id"] == str(2**40) and got[4]["value_decoded"]["token"] == "AQI="
    assert got[4]["value_decoded"]["state"] == "SETTLED"


def test_soft_deleted_version_still_decodes_and_is_hidden(data, registry):
    assert registry.subjects()["orders-value"] == [2]
    assert registry.subjects(include_deleted=True)["orders-value"] == [1, 2]
    assert decode_fields(registry, None, data.orders[0][1])["value_decoded"]["kind"] == "NEW"
    assert registry.configs == {None: {"compatibilityLevel": "BACKWARD"}}
    assert registry.modes == {None: {"mode": "READWRITE"}}


def test_hard_delete_and_cleared_subject_forget_the_id(data):
    value = data.events[0][1]
    hard = Registry.from_schemas_records(
        schemas_records(data.client, data.subjects, hard_deleted=[("events-value", 1)]))
    f = decode_fields(hard, None, value)
    assert (f["value_schema_id"], f["value_error"], f["value_format"]) == \
        (struct.unpack(">I", value[1:5])[0], UNKNOWN_SCHEMA_ID, None)
    # DELETE_SUBJECT soft-deletes up to a version (still decodes); CLEAR_SUBJECT then forgets them
    def rec(keytype, **value):
        return (json.dumps({"keytype": keytype, "subject": "events-value", "magic": 0}).encode(),
                json.dumps({"subject": "events-value", **value}).encode())
    soft = Registry.from_schemas_records(
        schemas_records(data.client, data.subjects, extra=[rec("DELETE_SUBJECT", version=1)]))
    assert "events-value" not in soft.subjects()
    assert decode_fields(soft, None, value)["value_decoded"] == data.event
    cleared = Registry.from_schemas_records(schemas_records(
        data.client, data.subjects, extra=[rec("DELETE_SUBJECT", version=1), rec("CLEAR_SUBJECT")]))
    assert decode_fields(cleared, None, value)["value_error"] == UNKNOWN_SCHEMA_ID


def test_proto_text_as_java_registers_it_decodes_the_same(data):
    """Java clients register .proto text (compiled here with grpcio-tools' protoc); the same
    payloads decode to the same dicts as from the Python client's base64 descriptor."""
    records = []
    for key, value in data.schemas:
        v = json.loads(value) if value else None
        if v and v.get("schemaType") == "PROTOBUF":
            v["schema"] = SHOP_PROTO
            value = json.dumps(v).encode()
        records.append((key, value))
    text = Registry.from_schemas_records(records)
    assert text.by_id(6).text == SHOP_PROTO
    got = [decode_fields(text, k, v, h)["value_decoded"] for k, v, h in data.payments]
    assert got == [pb(data.payment), pb(data.refund), pb(data.line), pb(data.refund)]


def test_error_cases(data, registry):
    order_v1 = data.orders[0][1]
    payment = data.payments[0][1]

    def value(v, headers=()):
        f = decode_fields(registry, None, v, headers)
        return f["value_schema_id"], f["value_format"], f["value_decoded"], f["value_error"]

    # unknown id: the id is reported, nothing else
    assert value(b"\x00\x00\x00\x03\xe7" + order_v1[5:]) == (999, None, None, UNKNOWN_SCHEMA_ID)
    # truncated payloads of each format, trailing bytes, a message index past the file's messages
    assert value(order_v1[:-3]) == (3, "AVRO", None, MALFORMED)
    assert value(order_v1 + b"\x00") == (3, "AVRO", None, MALFORMED)
    assert value(data.events[0][1][:-2])[3] == MALFORMED
    assert value(payment[:-4]) == (6, "PROTOBUF", None, MALFORMED)
    assert value(payment[:5] + b"\x02\x0a" + payment[6:]) == (6, "PROTOBUF", None, MALFORMED)
    assert value(b"\x00\x00\x01") == (None, None, None, MALFORMED)  # magic 0, no room for an id
    # a schema header that is not magic 1 + GUID; an unknown GUID
    assert value(order_v1, [("__value_schema_id", b"\x01\x02")])[3] == MALFORMED
    assert value(order_v1, [("__value_schema_id", b"\x01" + bytes(16))]) == \
        (None, None, None, UNKNOWN_SCHEMA_ID)
    # not the wire format: no error, all null; a null value stays null
    for plain in (b'{"kind": "click"}', b"hello", b"", None):
        assert value(plain) == (None, None, None, None)


def test_any_cut_or_flipped_value_gives_a_result_never_an_exception(data, registry):
    for _, v, h in data.orders + data.events + data.payments:
        for cut in range(len(v) + 1):
            f = decode_fields(registry, None, v[:cut], h)
            assert f["value_error"] in (None, MALFORMED, UNKNOWN_SCHEMA_ID)
        for i in range(len(v)):
            flipped = v[:i] + bytes([v[i] ^ 0xFF]) + v[i + 1:]
            assert decode_fields(registry, None, flipped, h)["value_error"] in \
                (None, MALFORMED, UNKNOWN_SCHEMA_ID)


def test_schemas_records_not_understood_are_problems_not_errors(data):
    r = Registry.from_schemas_records(data.schemas + [
        (b"not json", b"{}"), (b'{"keytype":"WHAT","magic":0}', None),
        (b'{"keytype":"SCHEMA","subject":"s","version":1,"magic":1}', b'{"id":1}')])
    assert [p.split(": ", 1)[1] for p in r.problems] == [
        "not JSON: Expecting value: line 1 column 1 (char 0)", "unknown keytype 'WHAT'",
        "SCHEMA record: a schema without a usable field: KeyError('schema')"]
    assert r.by_id(1) is not None  # the good records still count


def test_schema_folder_source(tmp_path, data):
    """Schema files by id, and the registry's version JSON (for references)."""
    (tmp_path / "3.avsc").write_text(json.dumps(ORDER_V1))
    (tmp_path / "5.json").write_text(json.dumps(EVENT_SCHEMA))
    v2 = data.client.get_version("orders-value", 2)
    customer = data.client.get_version("shop.Customer", 1)
    (tmp_path / "versions.json").write_text(json.dumps([
        {"subject": "shop.Customer", "version": 1, "id": customer.schema_id,
         "schema": json.dumps(CUSTOMER)},
        {"subject": "orders-value", "version": 2, "id": v2.schema_id, "schema": json.dumps(ORDER_V2),
         "references": [{"name": "shop.Customer", "subject": "shop.Customer", "version": 1}]}]))
    (tmp_path / "7.proto").write_text(SHOP_PROTO)  # the refunds-value id
    folder = from_folder(str(tmp_path))
    got = [decode_fields(folder, None, v)["value_decoded"]
           for v in (data.orders[0][1], data.orders[1][1], data.events[0][1], data.payments[1][1])]
    assert got == [avro_json(data.order_v1), avro_json(data.order_v2), data.event, pb(data.refund)]
    (tmp_path / "versions.json").write_text(json.dumps({"id": "x", "schema": "{}"}))
    with pytest.raises(ValueError, match="versions.json: a schema without a usable field"):
        from_folder(str(tmp_path))
    (tmp_path / "orders.avsc").write_text("{}")
    with pytest.raises(ValueError, match="named by its id"):
        from_folder(str(tmp_path))


def test_cli_dump_schemas(snapshot, data, capsys):
    orders = str(snapshot / "orders-0" / "00000000000000000000.log")
    assert main(["dump", "--json", "--records", "--schemas", str(snapshot), orders]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    records = [r for r in rows if r["type"] == "record"]
    assert [r["value_decoded"] for r in records] == [avro_json(data.order_v1),
                                                    avro_json(data.order_v2),
                                                    avro_json(data.order_v2)]
    assert [r["key_decoded"] for r in records] == ["k1", "k2", None]
    assert set(FIELDS) <= set(records[0])
    # a value that does not decode: the record says so, a finding says why, exit 1
    bad = snapshot / "bad-0"
    write_segment(bad, [(None, data.orders[0][1][:-3]), (None, b"\x00\x00\x00\x03\xe7x"),
                        (None, b"plain")])
    assert main(["dump", "--json", "--records", "--schemas", str(snapshot / "_schemas-0"),
                 str(bad / "00000000000000000000.log")]) == 1
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["type"], r.get("value_error") or r.get("kind")) for r in rows[1:]] == [
        ("record", MALFORMED), ("finding", "value_decode_error"),
        ("record", UNKNOWN_SCHEMA_ID), ("finding", "value_decode_error"), ("record", None)]
    assert "schema id 999 is not registered" in rows[4]["message"]
    # text mode appends the fields; --schemas needs --records; a missing source is exit 2
    assert main(["dump", "--records", "--schemas", str(snapshot), orders]) == 0
    assert ' schemas: {"key_schema_id":' in capsys.readouterr().out
    assert main(["dump", "--schemas", str(snapshot), orders]) == 2
    assert "needs --records" in capsys.readouterr().err
    assert main(["dump", "--records", "--schemas", str(snapshot / "nope"), orders]) == 2
    err = capsys.readouterr()
    assert err.out == "" and "no such file or folder" in err.err


def test_live_registry_url(data, registry):
    """A registry over HTTP (a stand-in server on 127.0.0.1 answering from the rebuilt
    registry as Schema Registry's REST API does): GET only, each answer fetched once."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from kafkalog.schemas import open_source

    asked = []

    def answer(path):
        parts = path.strip("/").split("/")
        if parts[:2] == ["schemas", "ids"] and (s := registry.by_id(int(parts[2]))):
            return {"schema": s.text, "schemaType": s.schema_type,
                    "references": [r._asdict() for r in s.references]}
        if parts[0] == "subjects" and (sv := registry.versions.get((parts[1], int(parts[3])))):
            s = registry.by_id(sv.schema_id)
            return {"subject": parts[1], "version": int(parts[3]), "id": s.id, "schema": s.text}
        return None

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            asked.append(self.path)
            body = answer(self.path)
            self.send_response(404 if body is None else 200)
            self.end_headers()
            self.wfile.write(json.dumps(body or {"error_code": 40403}).encode())

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        live = open_source(f"http://127.0.0.1:{server.server_port}")
        values = [v for _, v, _ in data.orders[:2] + data.events + data.payments] * 2
        got = [decode_fields(live, None, v) for v in values]
        assert got == [decode_fields(registry, None, v) for v in values]
        assert decode_fields(live, None, b"\x00\x00\x00\x03\xe7x")["value_error"] == UNKNOWN_SCHEMA_ID
        assert sorted(set(asked)) == sorted(asked)  # cached: nothing asked twice
        assert "/subjects/shop.Customer/versions/1" in asked  # the reference of orders v2
    finally:
        server.shutdown()
        server.server_close()


def test_the_package_modules_import_one_another_without_a_cycle():
    # live.LiveRegistry is a registry.Registry: live imports registry, and open_source, which
    # picks a source's reader (a live one among them), is the package's. No import between
    # the package's modules, at the top of a module or inside a function, closes a cycle.
    import ast
    import graphlib
    import pathlib

    import kafkalog.schemas

    graph = {}
    for path in pathlib.Path(kafkalog.schemas.__file__).parent.glob("*.py"):
        imported = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                imported |= {node.module.split(".")[0]} if node.module else \
                    {alias.name for alias in node.names}
        graph[path.stem] = imported
    order = list(graphlib.TopologicalSorter(graph).static_order())  # CycleError if any
    assert order.index("registry") < order.index("live") < order.index("__init__")
    assert graph["live"] == {"registry"} and "live" in graph["__init__"]


def test_a_registry_pickles_without_its_compiled_decoders(data, registry):
    """The decode job will ship a registry to executors: it pickles, decoders are rebuilt."""
    import pickle
    decode_fields(registry, None, data.payments[0][1])  # compile one
    assert registry.decoders
    copy = pickle.loads(pickle.dumps(registry))
    assert copy.decoders == {} and copy.schemas == registry.schemas
    assert decode_fields(copy, None, data.payments[0][1]) == decode_fields(registry, None, data.payments[0][1])


def test_json_documents_are_validated_not_required_to_be_valid(data, registry, snapshot, capsys):
    from kafkalog.schemas import decode_one
    prefix = data.events[0][1][:5]
    ok = decode_one(registry, data.events[0][1])
    assert ok.violations == () and ok.error is None
    bad = decode_one(registry, prefix + b'{"kind": 5, "n": "x"}')
    assert (bad.decoded, bad.error) == ({"kind": 5, "n": "x"}, None)
    assert sorted(bad.violations) == ["kind: 5 is not of type 'string'", "n: 'x' is not of type 'integer'"]
    folder = snapshot / "bad-events-0"
    write_segment(folder, [(None, prefix + b'{"n": "x"}')])
    assert main(["dump", "--json", "--records", "--schemas", str(snapshot),
                 str(folder / "00000000000000000000.log")]) == 1
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert rows[1]["value_decoded"] == {"n": "x"} and rows[1]["value_error"] is None
    assert rows[2]["kind"] == "value_schema_violation"
    assert rows[2]["message"].endswith("does not validate: n: 'x' is not of type 'integer'")


def test_json_schema_references_resolve_by_name():
    from kafkalog.schemas import decode_one

    def schema(subject, schema_id, text, refs=()):
        key = {"keytype": "SCHEMA", "subject": subject, "version": 1, "magic": 1}
        value = {"subject": subject, "version": 1, "id": schema_id, "schemaType": "JSON",
                 "schema": json.dumps(text), "deleted": False,
                 "references": [{"name": n, "subject": s, "version": 1} for n, s in refs]}
        return json.dumps(key).encode(), json.dumps(value).encode()

    r = Registry.from_schemas_records([
        schema("addr", 51, {"type": "string"}),
        schema("person-value", 50, {"type": "object", "properties": {"a": {"$ref": "addr.json"}}},
               [("addr.json", "addr")])])
    d = decode_one(r, b"\x00\x00\x00\x00\x32" + b'{"a": 5}')
    assert (d.schema_id, d.decoded, d.violations) == (50, {"a": 5}, ("a: 5 is not of type 'string'",))


def test_an_avro_logical_value_fastavro_cannot_convert_costs_only_itself():
    """Bytes written by fastavro's own writer with the schema's logical types left out (a
    producer in another language writes them so: Avro's spec keeps the annotated type's
    encoding): a timestamp-millis beyond year 9999, a uuid string that is no UUID and a date
    beyond date.max make fastavro's reader fail the whole datum; the decoder reads it again
    plain and keeps those values as the bytes hold them, every other one converted as usual.
    Bytes that do not read either way are still malformed, with the first read's error."""
    import io
    import uuid

    from fastavro import parse_schema, schemaless_writer

    from kafkalog.schemas import decode_one

    schema = {"type": "record", "name": "Event", "namespace": "x", "fields": [
        {"name": "id", "type": "long"},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "u", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "days", "type": {"type": "array", "items": {"type": "int",
                                                             "logicalType": "date"}}},
        {"name": "maybe", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}]},
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 6,
                                    "scale": 2}},
        {"name": "raw", "type": "bytes"}]}
    key = {"keytype": "SCHEMA", "subject": "e-value", "version": 1, "magic": 1}
    value = {"subject": "e-value", "version": 1, "id": 77, "schema": json.dumps(schema),
             "deleted": False}
    registry = Registry.from_schemas_records([(json.dumps(key).encode(),
                                               json.dumps(value).encode())])
    prefix = b"\x00" + (77).to_bytes(4, "big")
    plain = json.loads(json.dumps(schema).replace(', "logicalType": "timestamp-millis"', "")
                       .replace(', "logicalType": "uuid"', "").replace(', "logicalType": "date"', "")
                       .replace(', "logicalType": "timestamp-micros"', "")
                       .replace(', "logicalType": "decimal"', ""))
    assert "logicalType" not in json.dumps(plain)

    def encoded(datum):
        buf = io.BytesIO()
        schemaless_writer(buf, parse_schema(plain), datum)
        return prefix + buf.getvalue()

    bad = encoded({"id": 1, "at": 2**62, "u": "not-a-uuid", "days": [3, 10**8], "maybe": 1,
                   "amount": (1234).to_bytes(2, "big"), "raw": b"\x00\xff"})
    got = decode_one(registry, bad)
    assert got.error is None
    assert got.decoded == {"id": 1, "at": 2**62, "u": "not-a-uuid",
                           "days": ["1970-01-04", 10**8],
                           "maybe": "1970-01-01T00:00:00.000001+00:00", "amount": "12.34",
                           "raw": "AP8="}
    good = decode_one(registry, encoded({"id": 2, "at": 1000, "u": str(uuid.UUID(int=5)),
                                         "days": [], "maybe": None, "amount": b"\x00",
                                         "raw": b""}))
    assert good.decoded == {"id": 2, "at": "1970-01-01T00:00:01+00:00",
                            "u": "00000000-0000-0000-0000-000000000005", "days": [],
                            "maybe": None, "amount": "0.00", "raw": ""}
    cut = decode_one(registry, bad[:-3])
    assert (cut.decoded, cut.error) == (None, "malformed")
    assert cut.reason.startswith("Avro payload of 34 bytes does not read: OverflowError")
    # (the first read's error: the timestamp's)
