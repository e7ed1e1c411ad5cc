"""A value the typed tables cannot type costs its cell, never the row (issue 42 item 3;
docs/tables.md "Typed tables", docs/schemas.md).

The values are written by independent encoders: confluent-kafka's JSONSerializer,
AvroSerializer and ProtobufSerializer against its mock registry (the schemas it registers are
the ``_schemas`` records, test_schemas.schemas_records), and for the one value confluent's
serializer refuses to write — an Avro ``decimal(4, 2)`` holding 123456.78 — fastavro's
``schemaless_writer`` with the field as plain ``bytes`` (the unscaled big-endian integer, as
the Avro spec's decimal encoding says), and a timestamp-millis beyond year 9999 (a long
fastavro's reader cannot convert), framed with the wire prefix by hand. The records go
through the job's own decoder (spark_jobs.decode.values) and :func:`typed.rows_of`; every
expected row is what the serializers were given, the bad cell null.
"""

from __future__ import annotations

import datetime
import decimal
import io
import json
import struct
import warnings

import pyarrow as pa
import pytest

import kafkalog
from kafkalog.schemas import Registry
from spark_jobs import findings
from spark_jobs.decode import values
from spark_jobs.derive import typed, value_types
from spark_jobs.audit.policy import Policy

from tests.schema_data import proto_classes, schemas_records, write_segment

#: JSON Schema: ``extra`` is a oneOf (no column form: JSON text); v2 says ``code`` is a number
READING_V1 = {"type": "object", "properties": {
    "id": {"type": "integer"}, "code": {"type": "string"}, "big": {"type": "integer"},
    "extra": {"oneOf": [{"type": "integer"}, {"type": "object"}, {"type": "string"}]}}}
READING_V2 = {**READING_V1, "properties": {**READING_V1["properties"],
                                           "code": {"type": "number"}}}
#: JSON Schema: v2 makes ``x`` (int64 in the table) a oneOf and ``y`` (a oneOf) a string
MIXED_V1 = {"type": "object", "properties": {
    "x": {"type": "integer"}, "y": {"oneOf": [{"type": "integer"}, {"type": "string"}]}}}
MIXED_V2 = {"type": "object", "properties": {
    "x": {"oneOf": [{"type": "integer"}, {"type": "string"}]}, "y": {"type": "string"}}}
#: Avro: a decimal(4, 2), a union of two non-null types (JSON text), a timestamp
PRICE = {"type": "record", "name": "Price", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 4,
                                "scale": 2}},
    {"name": "alt", "type": ["null", "int", "string"]},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}
#: the writer schema of the bad price: ``amount`` as the bytes a decimal is encoded as
PRICE_BYTES = {**PRICE, "fields": [{**f, "type": "bytes"} if f["name"] == "amount" else f
                                   for f in PRICE["fields"]]}
#: Avro's other logical types, each with its column (docs/schemas.md)
CLOCK = {"type": "record", "name": "Clock", "namespace": "shop", "fields": [
    {"name": "t_ms", "type": {"type": "int", "logicalType": "time-millis"}},
    {"name": "t_us", "type": {"type": "long", "logicalType": "time-micros"}},
    {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
    {"name": "local", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
    {"name": "cost", "type": {"type": "fixed", "name": "Cost", "size": 8,
                              "logicalType": "decimal", "precision": 10, "scale": 3}},
    {"name": "wide", "type": {"type": "bytes", "logicalType": "decimal", "precision": 40,
                              "scale": 0}}]}
#: Protobuf: the table's message is recursive (``next``: JSON text)
TREE = """syntax = "proto3";
package tree.v1;
message Node { string label = 1; Node next = 2; int64 weight = 3; }
"""
AT = datetime.datetime(2026, 11, 25, 22, 0, 1, 250000, tzinfo=datetime.timezone.utc)


class Topics:
    """The three topics' records (key, value, headers), their ``_schemas`` records and what
    each value was given."""

    def __init__(self):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from confluent_kafka.schema_registry import SchemaRegistryClient
            from confluent_kafka.schema_registry.avro import AvroSerializer
            from confluent_kafka.schema_registry.json_schema import JSONSerializer
            from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
            from confluent_kafka.serialization import MessageField, SerializationContext
        from fastavro import parse_schema, schemaless_writer

        client = SchemaRegistryClient.new_client({"url": "mock://kafkalog-typed-cells"})
        conf = {"auto.register.schemas": True}

        def ctx(topic):
            return SerializationContext(topic, MessageField.VALUE)

        v1 = JSONSerializer(json.dumps(READING_V1), client, conf=conf)
        v2 = JSONSerializer(json.dumps(READING_V2), client, conf=conf)
        self.readings = [({"id": 1, "code": "a", "big": 2**70, "extra": 5}, v1),
                         ({"id": 2, "code": "b", "big": 7, "extra": {"x": [1, None]}}, v1),
                         ({"id": 3, "code": 12.5, "big": 8, "extra": "s"}, v2)]
        self.readings.append(({"id": 4.0, "code": "d", "big": 1, "extra": "t"}, v1))
        self.records = {"readings": [(None, ser(d, ctx("readings")), ())
                                     for d, ser in self.readings]}
        # a document that breaks v1 (the serializer validates, so Python's json writes it,
        # framed by hand): 1.5 and true where v1 says integer; the decoder still decodes it
        broken = {"id": 1.5, "code": "e", "big": True, "extra": 0}
        v1_id = client.get_version("readings-value", 1).schema_id
        self.records["readings"].append(
            (None, b"\x00" + struct.pack(">I", v1_id) + json.dumps(broken).encode(), ()))
        self.readings.append(({**broken, "id": None, "big": None}, None))

        m1 = JSONSerializer(json.dumps(MIXED_V1), client, conf=conf)
        m2 = JSONSerializer(json.dumps(MIXED_V2), client, conf=conf)
        self.records["mixed"] = [(None, m1({"x": 1, "y": 2}, ctx("mixed")), ()),
                                 (None, m2({"x": "a", "y": "b"}, ctx("mixed")), ())]

        price = AvroSerializer(client, json.dumps(PRICE), conf=conf)
        self.prices = [{"id": 1, "amount": decimal.Decimal("12.34"), "alt": 5, "at": AT},
                       {"id": 2, "amount": decimal.Decimal("-0.50"), "alt": "x", "at": AT}]
        self.records["prices"] = [(None, price(d, ctx("prices")), ()) for d in self.prices]
        sid = client.get_latest_version("prices-value").schema_id
        buf = io.BytesIO()
        bad = {"id": 3, "amount": (12345678).to_bytes(4, "big", signed=True), "alt": None,
               "at": AT}
        schemaless_writer(buf, parse_schema(PRICE_BYTES), bad)
        self.records["prices"].append((None, b"\x00" + struct.pack(">I", sid) + buf.getvalue(),
                                       ()))
        self.prices.append({**bad, "amount": None})
        # a timestamp beyond year 9999 (fastavro's reader cannot convert it): the decoder
        # keeps the long, the typed cell is null
        buf = io.BytesIO()
        late = {"id": 4, "amount": (1234).to_bytes(2, "big", signed=True), "alt": 7,
                "at": 2**62}
        schemaless_writer(buf, parse_schema({**PRICE_BYTES, "fields": [
            {**f, "type": "long"} if f["name"] == "at" else f for f in PRICE_BYTES["fields"]]}),
            late)
        self.records["prices"].append((None, b"\x00" + struct.pack(">I", sid) + buf.getvalue(),
                                       ()))
        self.prices.append({**late, "amount": decimal.Decimal("12.34"), "at": None})

        clock = AvroSerializer(client, json.dumps(CLOCK), conf=conf)
        self.clocks = [{"t_ms": datetime.time(12, 0, 1, 250000),
                        "t_us": datetime.time(23, 59, 59, 999999),
                        "id": "0b9a5c52-6b9f-4d6e-9a3c-2f1e8d7c6b5a",
                        "local": datetime.datetime(2026, 11, 25, 22, 0, 1, 250000),
                        "cost": decimal.Decimal("-1234567.891"),
                        "wide": decimal.Decimal(10**39 + 7)}]
        self.records["clock"] = [(None, clock(d, ctx("clock")), ()) for d in self.clocks]

        m = proto_classes(TREE, "tree.v1", ("Node",), "tree.proto")
        node = ProtobufSerializer(m["Node"], client, conf={**conf,
                                                           "use.deprecated.format": False})
        self.trees = [m["Node"](label="a", next=m["Node"](label="b", weight=2), weight=3),
                      m["Node"](label="leaf")]
        self.records["tree"] = [(None, node(n, ctx("tree")), ()) for n in self.trees]
        self.schemas = schemas_records(client, ["readings-value", "mixed-value", "prices-value",
                                                "clock-value", "tree-value"])


@pytest.fixture(scope="module")
def topics():
    return Topics()


@pytest.fixture(scope="module")
def registry(topics):
    return Registry.from_schemas_records(topics.schemas)


def typed_rows(registry, tmp_path, topic, records, cells=None):
    """``rows_of`` over ``records`` written to a segment and decoded as a task decodes them:
    ``(rows by offset without lineage but the schema id, refused, findings)``."""
    log = write_segment(tmp_path / f"{topic}-0", records)
    dec = values.ValueDecoder(registry, 1 << 20)
    rows = []
    for name, batch in kafkalog.stream(log):
        if name == "records":
            t = pa.Table.from_batches([values.with_columns(batch, dec.columns(batch))])
            rows += t.select(["offset", "timestamp", "value", "headers", "batch_position"]
                             + values.COLUMNS.names).to_pylist()
    assert dec.take_findings() == []
    table = pa.Table.from_pylist([{**r, "topic": topic, "partition": 0, "segment": log,
                                   "segment_base_offset": 0, "run_id": "r"} for r in rows])
    cols, ok, bad = typed.plan_schemas(registry, topic, None)
    plan = typed.TopicPlan(f"values__{topic}", "", pa.schema(list(value_types.LINEAGE)
                                                              + list(cols)), ok, bad,
                           typed.protobuf_specs(registry, ok), typed.version_structs(registry, ok))
    out, refused, found = typed.rows_of(table, plan, cells)
    got = {}
    for r in out.to_pylist():
        lineage = {n: r.pop(n) for n in value_types.LINEAGE.names}
        got[lineage["kafka_offset"]] = r
    return got, refused, found, plan


def kinds(found):
    return [(f.kind, f.base_offset, f.message.split(" is null")[0].split(" holds")[0])
            for f in found]


def test_json_schema_an_integer_beyond_int64_and_a_type_change_cost_their_cells(
        topics, registry, tmp_path):
    """``big`` = 2**70 (a valid JSON Schema integer, no int64), v2's number where the table's
    ``code`` is a string, and a document breaking v1 (1.5 and true for integers: never
    truncated to 1): every row lands with that cell null, one typed_value_error each (offset,
    column, why, the record's value as raw); 4.0 is the integer 4; ``extra``, a oneOf, is a
    column of JSON text, noted once."""
    got, refused, found, plan = typed_rows(registry, tmp_path, "readings",
                                           topics.records["readings"])
    assert plan.schema.field("code").type == pa.string()
    assert plan.schema.field("extra").type == pa.string()
    want = {}
    for o, (d, _) in enumerate(topics.readings):
        want[o] = {**d, "extra": json.dumps(d["extra"], separators=(",", ":"))}
    want[0]["big"], want[2]["code"] = None, None
    assert got == want and got[3]["id"] == 4 and isinstance(got[3]["id"], int)
    assert refused == {}
    assert kinds(found) == [(findings.TYPED_UNTYPED_COLUMN, 0, "offset 0: column extra"),
                            (findings.TYPED_VALUE_ERROR, 0, "offset 0: column big"),
                            (findings.TYPED_VALUE_ERROR, 2, "offset 2: column code"),
                            (findings.TYPED_VALUE_ERROR, 4, "offset 4: column id"),
                            (findings.TYPED_VALUE_ERROR, 4, "offset 4: column big")]
    assert "1.5 does not convert: TypeError: 1.5 is not an integer" in found[3].message
    assert "True does not convert" in found[4].message
    by_kind = {(f.kind, f.base_offset): f for f in found}
    big = by_kind[(findings.TYPED_VALUE_ERROR, 0)]
    assert "1180591620717411303424 does not fit int64" in big.message
    assert big.raw == topics.records["readings"][0][1] and big.bytes == len(big.raw)
    assert "12.5: its schema version types code as double, the table's column is string" \
        in by_kind[(findings.TYPED_VALUE_ERROR, 2)].message
    assert "oneOf has no column form" in by_kind[(findings.TYPED_UNTYPED_COLUMN, 0)].message


def test_a_json_text_column_holds_every_versions_json_text_and_a_typed_one_stays(
        topics, registry, tmp_path):
    """``y``, JSON text by v1, holds v2's string as JSON text too; ``x``, int64 by v1, stays
    int64: v2's oneOf value there is null with a typed_value_error, and no note (the column is
    no JSON text)."""
    got, refused, found, plan = typed_rows(registry, tmp_path, "mixed", topics.records["mixed"])
    assert [plan.schema.field(n).type for n in ("x", "y")] == [pa.int64(), pa.string()]
    assert got == {0: {"x": 1, "y": "2"}, 1: {"x": None, "y": '"b"'}} and refused == {}
    assert kinds(found) == [(findings.TYPED_UNTYPED_COLUMN, 0, "offset 0: column y"),
                            (findings.TYPED_VALUE_ERROR, 1, "offset 1: column x")]
    assert "'a': its schema version types x as string, the table's column is int64" in \
        found[1].message


def test_avro_a_decimal_beyond_its_precision_costs_its_cell(topics, registry, tmp_path):
    """A decimal(4, 2) column: confluent's serializer's values land exact; fastavro's bytes of
    123456.78 (precision 8), and a timestamp-millis beyond year 9999 (the decoder keeps its
    long), are null in rows that land, one typed_value_error each; the union of int and
    string is JSON text, noted once."""
    got, refused, found, plan = typed_rows(registry, tmp_path, "prices",
                                           topics.records["prices"])
    assert plan.schema.field("amount").type == pa.decimal128(4, 2)
    assert got == {o: {**d, "alt": None if d["alt"] is None else json.dumps(d["alt"])}
                   for o, d in enumerate(topics.prices)}
    assert refused == {}
    assert kinds(found) == [(findings.TYPED_UNTYPED_COLUMN, 0, "offset 0: column alt"),
                            (findings.TYPED_VALUE_ERROR, 2, "offset 2: column amount"),
                            (findings.TYPED_VALUE_ERROR, 3, "offset 3: column at")]
    assert "does not fit decimal128(4, 2)" in found[1].message
    assert "4611686018427387904 does not convert: TypeError" in found[2].message
    assert "a union of 2 non-null types" in found[0].message


def test_avro_logical_types_have_their_columns(topics, registry, tmp_path):
    """time-millis/-micros -> time, uuid -> string, local-timestamp -> its ISO text, a fixed
    decimal -> decimal(10, 3), a decimal wider than Iceberg's 38 digits -> its text: each
    value as confluent's serializer was given it, no finding."""
    got, refused, found, plan = typed_rows(registry, tmp_path, "clock", topics.records["clock"])
    assert [plan.schema.field(n).type for n in ("t_ms", "t_us", "id", "local", "cost", "wide")] \
        == [pa.time64("us"), pa.time64("us"), pa.string(), pa.string(), pa.decimal128(10, 3),
            pa.string()]
    (given,) = topics.clocks
    assert got == {0: {**given, "local": given["local"].isoformat(),
                       "wide": str(given["wide"])}}
    assert refused == {} and found == []


def test_protobuf_a_recursive_message_keeps_its_table(topics, registry, tmp_path):
    """The table's message refers to itself: its ``next`` column holds MessageToDict's JSON
    text, noted once; every row lands (before, the whole version had no table form)."""
    from google.protobuf.json_format import MessageToDict

    got, refused, found, plan = typed_rows(registry, tmp_path, "tree", topics.records["tree"])
    assert plan.schema.names[len(value_types.LINEAGE):] == ["label", "next", "weight"]
    want = {}
    for o, n in enumerate(topics.trees):
        d = MessageToDict(n, preserving_proto_field_name=True)
        want[o] = {"label": n.label, "weight": n.weight, "next": None if "next" not in d else
                   json.dumps(d["next"], separators=(",", ":"))}
    assert got == want and refused == {}
    assert kinds(found) == [(findings.TYPED_UNTYPED_COLUMN, 0, "offset 0: column next")]
    assert "recursive message tree.v1.Node" in found[0].message


def test_a_task_notes_a_column_once_and_the_audit_warns(topics, registry, tmp_path):
    """One :class:`typed.Cells` over two pieces of a topic notes its JSON text column once;
    the audit's decoder_findings grades both kinds warn (policy.yaml), not ``other``'s fail."""
    cells = typed.Cells()
    records = topics.records["prices"]
    _, _, first, _ = typed_rows(registry, tmp_path / "a", "prices", records[:1], cells)
    _, _, second, _ = typed_rows(registry, tmp_path / "b", "prices", records, cells)
    assert [f.kind for f in first] == [findings.TYPED_UNTYPED_COLUMN]
    assert [f.kind for f in second] == [findings.TYPED_VALUE_ERROR] * 2
    policy = Policy.load()
    assert [policy.severity("prices", "decoder_findings", k) for k in (
        findings.TYPED_VALUE_ERROR, findings.TYPED_UNTYPED_COLUMN, "no_such_kind")] == \
        ["warn", "warn", "fail"]
