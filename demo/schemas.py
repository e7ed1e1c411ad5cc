"""The demo's topics in Schema Registry's wire format, and the registry's own ``_schemas``.

Values are serialized by confluent-kafka's own serializers (Avro, JSON Schema, Protobuf)
against its in-memory mock registry, the independent encoder of tests/kafkalog/test_schemas.py;
``_schemas-0`` holds what that registry registered, shaped as Schema Registry's
``KafkaStore`` writes it (a CONFIG, a NOOP and a MODE record, then a SCHEMA record per
version; no ``guid``, which the mock invents at random). Per night (snapshots grow: night
2's segments start with night 1's bytes):

* ``shop.orders-0`` (Avro, a topic name with a dot): orders of ``shop.Order`` v1; night 2
  registers v2 (a ``coupon`` field with a default) and appends orders written with it;
* ``clicks-0`` (JSON Schema): 100 clicks; night 2 appends 150 more and one value whose
  schema id no registry holds (a producer pointed at another registry): the audit's
  ``schema_decode`` check warns (1 of 151 values, under ``max_share``);
* ``shipments-0`` (Protobuf, a descriptor registered as the Python client does).

Deterministic: the same night writes the same bytes.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

from kafkalog.schemas.wire import MAGIC_ID, PREFIX
from kafkalog.writer import SegmentWriter, WriteRecord
from spark_jobs.decode.values import SCHEMAS_TOPIC
ORDER_V1 = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"},
    {"name": "sku", "type": "string"},
    {"name": "qty", "type": "int"},
    {"name": "note", "type": ["null", "string"], "default": None},
]}
ORDER_V2 = {**ORDER_V1, "fields": ORDER_V1["fields"] + [
    {"name": "coupon", "type": ["null", "string"], "default": None}]}
CLICK = {"type": "object", "properties": {"page": {"type": "string"}, "ms": {"type": "integer"}}}
#: the schema id of the undecodable click (no registry holds it)
UNKNOWN_ID = 4242


def _shipment_class():
    """``demo.v1.Shipment`` built from a FileDescriptorProto (no generated code, no protoc)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    f = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name="demo/shipments.proto", package="demo.v1",
                                             syntax="proto3")
    m = fdp.message_type.add(name="Shipment")
    for number, (name, kind) in enumerate((("id", f.TYPE_INT64), ("carrier", f.TYPE_STRING),
                                           ("weight_g", f.TYPE_INT32)), 1):
        m.field.add(name=name, number=number, type=kind, label=f.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("demo.v1.Shipment"))


def _client_and_serializers(night: int):
    import authlib.deprecate  # noqa: F401  (it sets its warnings to "always" on import)

    with warnings.catch_warnings():  # authlib's "use httpx2" notice, on confluent-kafka's import
        warnings.simplefilter("ignore")
        from confluent_kafka.schema_registry import SchemaRegistryClient
        from confluent_kafka.schema_registry.avro import AvroSerializer
        from confluent_kafka.schema_registry.json_schema import JSONSerializer
        from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    client = SchemaRegistryClient.new_client({"url": f"mock://kafkalog-demo-{night}"})
    shipment_cls = _shipment_class()
    conf = {"auto.register.schemas": True}
    # registered in a fixed order, so every night gives the same ids
    ser = {"order_v1": AvroSerializer(client, json.dumps(ORDER_V1), conf=conf),
           "click": JSONSerializer(json.dumps(CLICK), client, conf=conf),
           "shipment": ProtobufSerializer(shipment_cls, client,
                                          conf={**conf, "use.deprecated.format": False})}
    if night >= 1:
        ser["order_v2"] = AvroSerializer(client, json.dumps(ORDER_V2), conf=conf)
    return client, ser, shipment_cls


def _ctx(topic: str):
    from confluent_kafka.serialization import MessageField, SerializationContext

    return SerializationContext(topic, MessageField.VALUE)


def _dumps(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def schemas_records(client, subjects) -> list[tuple[bytes, bytes | None]]:
    """``_schemas`` records (key, value) for every version ``client`` holds of ``subjects``."""
    out = []
    for subject in subjects:
        for version in client.get_versions(subject):
            rs = client.get_version(subject, version)
            value = {"subject": subject, "version": version, "id": rs.schema_id}
            if rs.schema.schema_type != "AVRO":  # the registry leaves AVRO implicit
                value["schemaType"] = rs.schema.schema_type
            value.update({"schema": rs.schema.schema_str, "deleted": False})
            out.append((_dumps({"keytype": "SCHEMA", "subject": subject, "version": version,
                                "magic": 1}), _dumps(value)))
    return out


#: what Schema Registry writes first on a fresh ``_schemas``
PREAMBLE = [(_dumps({"keytype": "CONFIG", "subject": None, "magic": 0}),
             _dumps({"compatibilityLevel": "BACKWARD"})),
            (_dumps({"keytype": "NOOP", "magic": 0}), None),
            (_dumps({"keytype": "MODE", "subject": None, "magic": 0}), _dumps({"mode": "READWRITE"}))]
SUBJECTS = ["shop.orders-value", "clicks-value", "shipments-value"]


def order(i: int, version: int) -> dict:
    o = {"id": i, "sku": f"sku-{i % 7}", "qty": i % 3 + 1, "note": "gift" if i % 4 == 0 else None}
    if version == 2:
        o["coupon"] = f"C{i}" if i % 2 else None
    return o


def click(i: int) -> dict:
    return {"page": f"/p/{i % 9}", "ms": 40 + i % 50}


def shipment(i: int) -> dict:
    return {"id": 10_000 + i, "carrier": ("ups", "dhl", "post")[i % 3], "weight_g": 250 * (i % 5)}


def write(out: Path, night: int, t0: int, hour: int) -> None:
    """Write the four partitions of snapshot ``night`` (0 or 1) under ``out``."""
    client, ser, shipment_cls = _client_and_serializers(night)

    def records(items, ts):
        return [WriteRecord(k, v, timestamp=ts + n * 1000) for n, (k, v) in enumerate(items)]

    orders = [[(f"o{i}".encode(), ser["order_v1"](order(i, 1), _ctx("shop.orders")))
               for i in range(6)]]
    clicks = [[(None, ser["click"](click(i), _ctx("clicks"))) for i in range(100)]]
    shipments = [[(f"s{i}".encode(), ser["shipment"](shipment_cls(**shipment(i)),
                                                      _ctx("shipments"))) for i in range(4)]]
    if night >= 1:
        orders.append([(f"o{i}".encode(), ser["order_v2"](order(i, 2), _ctx("shop.orders")))
                       for i in range(6, 10)])
        clicks.append([(None, ser["click"](click(i), _ctx("clicks"))) for i in range(100, 250)]
                      + [(None, PREFIX.pack(MAGIC_ID, UNKNOWN_ID) + b'{"page":"/x"}')])
    # _schemas: night 1's records (every first version), then (night 2) the versions since
    versions = schemas_records(client, SUBJECTS)
    registered = [PREAMBLE + [r for r in versions if json.loads(r[0])["version"] == 1]]
    if night >= 1:
        registered.append([r for r in versions if json.loads(r[0])["version"] > 1])
    for topic, batches in ((SCHEMAS_TOPIC, registered), ("shop.orders", orders),
                           ("clicks", clicks), ("shipments", shipments)):
        with SegmentWriter(out / f"{topic}-0", 0) as w:
            for n, batch in enumerate(batches):
                w.append(records(batch, t0 + 3 * hour + n * 24 * hour), codec="lz4")
