"""Schema Registry data for the tests (issue 20): records serialized by confluent-kafka's own
serializers (Avro, JSON Schema, Protobuf) against its in-memory mock registry, and the
``_schemas`` records shaped as Schema Registry's ``KafkaStore`` writes them (``Data``);
.proto text compiled by protoc (``proto_classes``); ``write_segment``, a partition folder's
segment written with our writer; the typed-table topics of issue 20 part 5 (``items``,
``Kinds``, ``plain_records``). Used by tests/kafkalog/test_schemas.py and the Spark, DAG
and second-engine tests of typed tables."""

from __future__ import annotations

import base64
import datetime
import decimal
import importlib.resources
import io
import json
import math
import os
import struct
import warnings

from kafkalog.writer import SegmentWriter, WriteRecord

import authlib.deprecate  # noqa: E402,F401  (it sets its warnings to "always" on import)

with warnings.catch_warnings():  # authlib's "use httpx2" notice, on confluent-kafka's import
    warnings.simplefilter("ignore")
    from confluent_kafka.schema_registry import (
        Schema, SchemaReference, SchemaRegistryClient, header_schema_id_serializer,
    )
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.schema_registry.json_schema import JSONSerializer
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.json_format import MessageToDict
from grpc_tools import protoc


CUSTOMER = {"type": "record", "name": "Customer", "namespace": "shop",
            "fields": [{"name": "name", "type": "string"}]}


ORDER_V1 = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"},
    {"name": "note", "type": ["null", "string"], "default": None},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["NEW", "PAID"]}},
    {"name": "raw", "type": "bytes"},
    {"name": "digest", "type": {"type": "fixed", "name": "Digest", "size": 2}},
    {"name": "tags", "type": {"type": "map", "values": "int"}},
    {"name": "amount", "type": ["null", "double"], "default": None},
]}


# v2 adds a field with a default and refers to shop.Customer in another subject
ORDER_V2 = {**ORDER_V1, "fields": ORDER_V1["fields"] + [
    {"name": "customer", "type": ["null", "shop.Customer"], "default": None}]}


EVENT_SCHEMA = {"type": "object", "properties": {"kind": {"type": "string"}, "n": {"type": "integer"}}}


SHOP_PROTO = """syntax = "proto3";
package shop.v1;
import "google/protobuf/timestamp.proto";
message Payment {
  int64 id = 1;
  string currency = 2;
  bytes token = 3;
  enum State { UNKNOWN = 0; SETTLED = 1; }
  State state = 4;
  google.protobuf.Timestamp at = 5;
  message Line { string sku = 1; int32 qty = 2; }
  repeated Line lines = 6;
}
message Refund {
  int64 payment_id = 1;
  Payment.Line line = 2;
}
"""


def proto_classes(text: str, package: str, names, file: str = "shop.proto") -> dict:
    """The messages ``names`` of .proto ``text``, compiled by protoc (grpcio-tools) into a
    fresh pool."""
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, file), "w") as f:
            f.write(text)
        include = str(importlib.resources.files("grpc_tools") / "_proto")
        assert protoc.main(["protoc", f"-I{tmp}", f"-I{include}", "--include_imports",
                            f"--descriptor_set_out={tmp}/d.pb", file]) == 0
        with open(f"{tmp}/d.pb", "rb") as f:
            fds = descriptor_pb2.FileDescriptorSet.FromString(f.read())
    pool = descriptor_pool.DescriptorPool()
    for fdp in fds.file:
        pool.Add(fdp)
    return {n: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.{n}"))
            for n in names}


def proto_module():
    """The messages of SHOP_PROTO."""
    return proto_classes(SHOP_PROTO, "shop.v1", ("Payment", "Refund", "Payment.Line"))


def schemas_records(client, subjects, deleted=(), hard_deleted=(), extra=()):
    """``_schemas`` records (key, value) for every version the mock registry holds, shaped
    as Schema Registry's KafkaStore writes them: a CONFIG and a NOOP first, then each
    version's SCHEMA record; soft deletes rewrite the SCHEMA record with deleted true,
    hard deletes follow with a null value."""
    def dumps(obj):
        return json.dumps(obj, separators=(",", ":")).encode()

    out = [(dumps({"keytype": "CONFIG", "subject": None, "magic": 0}),
            dumps({"compatibilityLevel": "BACKWARD"})),
           (dumps({"keytype": "NOOP", "magic": 0}), None),
           (dumps({"keytype": "MODE", "subject": None, "magic": 0}), dumps({"mode": "READWRITE"}))]
    values = {}
    for subject in subjects:
        for version in client.get_versions(subject):
            rs = client.get_version(subject, version)
            value = {"subject": subject, "version": version, "id": rs.schema_id, "guid": rs.guid}
            if rs.schema.schema_type != "AVRO":  # the registry leaves AVRO implicit
                value["schemaType"] = rs.schema.schema_type
            if rs.schema.references:
                value["references"] = [{"name": r.name, "subject": r.subject, "version": r.version}
                                       for r in rs.schema.references]
            value.update({"schema": rs.schema.schema_str, "deleted": False})
            key = {"keytype": "SCHEMA", "subject": subject, "version": version, "magic": 1}
            values[(subject, version)] = (key, value)
            out.append((dumps(key), dumps(value)))
    for sv in deleted:
        key, value = values[sv]
        out.append((dumps(key), dumps({**value, "deleted": True})))
    for sv in hard_deleted:
        out.append((dumps(values[sv][0]), None))
    return out + list(extra)


class Data:
    """Records serialized by confluent-kafka, and the ``_schemas`` records of its registry."""

    def __init__(self):
        client = SchemaRegistryClient.new_client({"url": "mock://kafkalog-test"})
        conf = {"auto.register.schemas": True}

        def ctx(topic, field=MessageField.VALUE, headers=None):
            return SerializationContext(topic, field, headers)

        # Avro: two versions of one subject, v2 with a reference; a string key
        client.register_schema("shop.Customer", Schema(json.dumps(CUSTOMER), "AVRO"))
        v1 = AvroSerializer(client, json.dumps(ORDER_V1), conf=conf)
        v2 = AvroSerializer(client, Schema(json.dumps(ORDER_V2), "AVRO",
                                           [SchemaReference("shop.Customer", "shop.Customer", 1)]),
                            conf=conf)
        key = AvroSerializer(client, '"string"', conf=conf)
        self.order_v1 = {"id": 1, "note": None, "kind": "NEW", "raw": b"\x00\xff",
                         "digest": b"ab", "tags": {"a": 1}, "amount": 2.5}
        self.order_v2 = {**self.order_v1, "id": 2, "note": "hi", "kind": "PAID",
                         "customer": {"name": "Ada"}}
        self.orders = [
            (key("k1", ctx("orders", MessageField.KEY)), v1(self.order_v1, ctx("orders")), ()),
            (key("k2", ctx("orders", MessageField.KEY)), v2(self.order_v2, ctx("orders")), ()),
        ]
        # the same v2 value with its schema named by a header (GUID), not the prefix
        headers = []
        by_header = AvroSerializer(client, Schema(json.dumps(ORDER_V2), "AVRO",
                                                  [SchemaReference("shop.Customer", "shop.Customer", 1)]),
                                   conf={**conf, "schema.id.serializer": header_schema_id_serializer})
        value = by_header(self.order_v2, ctx("orders", headers=headers))
        self.orders.append((None, value, tuple(headers)))

        # JSON Schema
        events = JSONSerializer(json.dumps(EVENT_SCHEMA), client, conf=conf)
        self.event = {"kind": "click", "n": 3}
        self.events = [(None, events(self.event, ctx("events")), ())]

        # Protobuf: two message types of one .proto (indexes [0] and [1]) and a nested one
        m = proto_module()
        self.payment = m["Payment"](id=2**40, currency="EUR", token=b"\x01\x02", state=1,
                                    lines=[m["Payment.Line"](sku="x", qty=2)])
        self.payment.at.FromSeconds(1_700_000_000)
        self.refund = m["Refund"](payment_id=7, line=m["Payment.Line"](sku="y", qty=1))
        self.line = m["Payment.Line"](sku="z")
        pconf = {**conf, "use.deprecated.format": False}
        ser = {n: ProtobufSerializer(m[n], client, conf=pconf) for n in m}
        self.payments = [(None, ser["Payment"](self.payment, ctx("payments")), ()),
                         (None, ser["Refund"](self.refund, ctx("refunds")), ()),
                         (None, ser["Payment.Line"](self.line, ctx("lines")), ())]
        # a Protobuf value named by header: GUID and message indexes in the header
        headers = []
        by_header = ProtobufSerializer(m["Refund"], client, conf={
            **pconf, "schema.id.serializer": header_schema_id_serializer})
        self.payments.append((None, by_header(self.refund, ctx("refunds", headers=headers)),
                              tuple(headers)))
        self.client = client
        self.subjects = ["shop.Customer", "orders-key", "orders-value", "events-value",
                         "payments-value", "refunds-value", "lines-value"]
        self.schemas = schemas_records(client, self.subjects, deleted=[("orders-value", 1)])


def write_segment(folder, records):
    with SegmentWriter(folder) as w:
        w.append([WriteRecord(r[0], r[1], tuple(r[2]) if len(r) > 2 else ()) for r in records])
    return os.path.join(folder, "00000000000000000000.log")


def b64(b: bytes) -> str:
    return base64.b64encode(b).decode()


def avro_json(datum: dict) -> dict:
    """The issue's rendering of an Avro datum: bytes and fixed as standard base64."""
    return {k: b64(v) if isinstance(v, bytes) else v for k, v in datum.items()}


def pb(msg) -> dict:
    return MessageToDict(msg, preserving_proto_field_name=True)


# -- the typed tables' topics (tests/spark_jobs/test_schema_tables.py) ---------------------------

#: a value whose schema id nobody registered, and an Avro value cut short
UNKNOWN = b"\x00" + struct.pack(">I", 999) + b"\x02"


#: topic shop.items (a '.' in its name) and its value subject's three versions: v2 adds a
#: top-level and a nested field with defaults, v3 changes ``n`` from int to string
ITEM_V1 = {"type": "record", "name": "Item", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"}, {"name": "name", "type": "string"},
    {"name": "price", "type": "float"}, {"name": "ok", "type": "boolean"},
    {"name": "n", "type": "int"},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "dims", "type": {"type": "record", "name": "Dims",
                              "fields": [{"name": "w", "type": "double"}]}},
    {"name": "labels", "type": {"type": "array", "items": "string"}}]}


ITEM_V2 = {**ITEM_V1, "fields": [
    *[f for f in ITEM_V1["fields"] if f["name"] != "dims"],
    {"name": "dims", "type": {"type": "record", "name": "Dims", "fields": [
        {"name": "w", "type": "double"}, {"name": "h", "type": ["null", "double"],
                                          "default": None}]}},
    {"name": "color", "type": ["null", "string"], "default": None}]}


ITEM_V3 = {**ITEM_V2, "fields": [{**f, "type": "string"} if f["name"] == "n" else f
                                 for f in ITEM_V2["fields"]]}


ITEM_IDS = (101, 102, 103)


AT = datetime.datetime(2026, 11, 25, 22, 0, 1, 250000, tzinfo=datetime.timezone.utc)


def items(data):
    """``(_schemas records, shop.items records, the data each was given)``: fastavro as the
    serializer, the wire prefix by hand (ids far from the mock registry's)."""
    from fastavro import parse_schema, schemaless_writer

    given = [
        {"id": 1, "name": "a", "price": 1.5, "ok": True, "n": 3, "at": AT,
         "day": datetime.date(2026, 11, 25), "dims": {"w": 2.0}, "labels": ["x", "y"]},
        {"id": 2, "name": "b", "price": 0.25, "ok": False, "n": -1, "at": AT,
         "day": datetime.date(1970, 1, 1), "dims": {"w": 1.0, "h": 4.0}, "labels": [],
         "color": "red"},
        {"id": 3, "name": "c", "price": 2.0, "ok": True, "n": "three", "at": AT,
         "day": datetime.date(2000, 2, 29), "dims": {"w": 0.0, "h": None}, "labels": ["z"],
         "color": None}]
    records, schemas_out = [], []
    for version, (sid, schema, datum) in enumerate(zip(ITEM_IDS, (ITEM_V1, ITEM_V2, ITEM_V3),
                                                       given), 1):
        key = {"keytype": "SCHEMA", "subject": "shop.items-value", "version": version,
               "magic": 1}
        value = {"subject": "shop.items-value", "version": version, "id": sid,
                 "schema": json.dumps(schema), "deleted": False}
        schemas_out.append((json.dumps(key).encode(), json.dumps(value).encode()))
        buf = io.BytesIO()
        schemaless_writer(buf, parse_schema(schema), datum)
        records.append((None, b"\x00" + struct.pack(">I", sid) + buf.getvalue(), ()))
    return schemas_out, records, given


#: topic kinds: every Protobuf field kind in the table's message All (index [0]); a second
#: top-level message Node (index [1], recursive); v2 adds a top-level and a nested field
KINDS_PROTO = """syntax = "proto3";
package kinds.v1;
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";
import "google/protobuf/struct.proto";
message All {
  double d = 1; float f = 2; int32 i32 = 3; int64 i64 = 4; uint32 u32 = 5; uint64 u64 = 6;
  sint32 s32 = 7; sint64 s64 = 8; fixed32 fx32 = 9; fixed64 fx64 = 10; sfixed32 sf32 = 11;
  sfixed64 sf64 = 12; bool b = 13; string s = 14; bytes raw = 15;
  enum Color { RED = 0; GREEN = 1; }
  Color color = 16;
  message Inner { string name = 1; int64 n = 2; }
  Inner inner = 17;
  repeated int32 nums = 18;
  repeated Inner inners = 19;
  map<string, int64> counts = 20;
  map<int32, Inner> by_id = 21;
  oneof choice { string text = 22; int32 number = 23; }
  optional int32 maybe = 24;
  google.protobuf.Timestamp at = 25;
  google.protobuf.Int64Value big = 26;
  google.protobuf.Struct attrs = 27;
}
message Node { string label = 1; Node next = 2; }
"""


KINDS_V2 = KINDS_PROTO.replace("int64 n = 2; }", "int64 n = 2; bool flag = 3; }").replace(
    "attrs = 27;\n", "attrs = 27;\n  string added = 28;\n")


#: an All row with nothing set: proto3 defaults where a field has no presence, else null
KINDS_DEFAULTS = {
    "d": 0.0, "f": 0.0, "i32": 0, "i64": 0, "u32": 0, "u64": decimal.Decimal(0), "s32": 0,
    "s64": 0, "fx32": 0, "fx64": decimal.Decimal(0), "sf32": 0, "sf64": 0, "b": False, "s": "",
    "raw": b"", "color": "RED", "inner": None, "nums": [], "inners": [], "counts": [],
    "by_id": [], "text": None, "number": None, "maybe": None, "at": None, "big": None,
    "attrs": None}


class Kinds:
    """The kinds topic's values, serialized by confluent-kafka's ProtobufSerializer against
    ``data``'s mock registry (ids after Data's), the messages given, and the typed rows they
    must give (literals; v2's columns null in v1's rows)."""

    def __init__(self, data):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from confluent_kafka.schema_registry import header_schema_id_serializer
            from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
            from confluent_kafka.serialization import MessageField, SerializationContext

        m = proto_classes(KINDS_PROTO, "kinds.v1", ("All", "All.Inner", "Node"), "kinds.proto")
        m2 = proto_classes(KINDS_V2, "kinds.v1", ("All", "All.Inner"), "kinds.proto")
        conf = {"auto.register.schemas": True, "use.deprecated.format": False}
        All, Inner = m["All"], m["All.Inner"]
        full = All(d=float("nan"), f=1.5, i32=-5, i64=-2**63, u32=2**32 - 1, u64=2**64 - 1,
                   s32=-7, s64=-2**40, fx32=7, fx64=2**63, sf32=-8, sf64=-9, b=True, s="é",
                   raw=b"\x00\xff", color=1, inner=Inner(name="x"), nums=[1, 2],
                   inners=[Inner(name="a"), Inner()], counts={"a": 1, "b": -2**63},
                   by_id={1: Inner(name="one", n=2), -3: Inner()}, text="t", maybe=0)
        full.at.FromNanoseconds(1_700_000_000_123_456_789)
        full.big.value = 2**62
        full.attrs.update({"k": [1, "x", None], "z": {"q": True}})
        edge = All(d=float("inf"), f=float("-inf"), number=0, color=7, inner=Inner())
        edge.big.value = 0  # a wrapper set to its zero value is there, not null
        node = m["Node"](label="n", next=m["Node"](label="m"))
        self.messages = [full, All(), edge, node, All(i32=4),
                         m2["All"](i32=5, added="new", inner=m2["All.Inner"](flag=True))]

        def ctx(headers=None):
            return SerializationContext("kinds", MessageField.VALUE, headers)

        ser = {n: ProtobufSerializer(c, data.client, conf=conf) for n, c in m.items()}
        self.records = [(None, ser["All"](x, ctx()), ()) for x in self.messages[:3]]
        self.records.append((None, ser["Node"](node, ctx()), ()))
        headers = []  # All named by a header: its indexes [0] are in the header
        by_header = ProtobufSerializer(All, data.client, conf={
            **conf, "schema.id.serializer": header_schema_id_serializer})
        self.records.append((None, by_header(self.messages[4], ctx(headers)), tuple(headers)))
        self.records.append((None, ProtobufSerializer(m2["All"], data.client, conf=conf)(
            self.messages[5], ctx()), ()))
        self.schemas = schemas_records(data.client, ["kinds-value"])[3:]
        self.ids = [v["id"] for v in sorted((json.loads(v) for _, v in self.schemas),
                                            key=lambda v: v["version"])]  # v1, v2 (any order)
        v2 = {"added": None}
        self.rows = {  # offset -> (schema id, typed row)
            0: (self.ids[0], {
                **KINDS_DEFAULTS, **v2, "d": math.nan, "f": 1.5, "i32": -5, "i64": -2**63,
                "u32": 2**32 - 1, "u64": decimal.Decimal(2**64 - 1), "s32": -7, "s64": -2**40,
                "fx32": 7, "fx64": decimal.Decimal(2**63), "sf32": -8, "sf64": -9, "b": True,
                "s": "é", "raw": b"\x00\xff", "color": "GREEN",
                "inner": {"name": "x", "n": 0, "flag": None}, "nums": [1, 2],
                "inners": [{"name": "a", "n": 0, "flag": None}, {"name": "", "n": 0, "flag": None}],
                "counts": [("a", 1), ("b", -2**63)],
                "by_id": [(-3, {"name": "", "n": 0, "flag": None}),
                          (1, {"name": "one", "n": 2, "flag": None})],
                "text": "t", "maybe": 0,
                "at": datetime.datetime(2023, 11, 14, 22, 13, 20, 123456, datetime.timezone.utc),
                "big": 2**62, "attrs": {"k": [1, "x", None], "z": {"q": True}}}),
            1: (self.ids[0], {**KINDS_DEFAULTS, **v2}),
            2: (self.ids[0], {**KINDS_DEFAULTS, **v2, "d": math.inf, "f": -math.inf,
                              "number": 0, "color": "7", "big": 0,
                              "inner": {"name": "", "n": 0, "flag": None}}),
            4: (self.ids[0], {**KINDS_DEFAULTS, **v2, "i32": 4}),
            5: (self.ids[1], {**KINDS_DEFAULTS, "i32": 5, "added": "new",
                              "inner": {"name": "", "n": 0, "flag": True}})}


def plain_records(data):
    """Values not in the wire format (JSON text, a string, empty, null) and two that are
    but do not decode (an unknown id; an Avro payload cut short)."""
    cut = data.orders[0][1][:-3]
    return [(b"k", b'{"plain": true}', ()), (None, b"text", ()), (None, b"", ()),
            (b"tombstone", None, ()), (None, UNKNOWN, ()), (None, cut, ())]
