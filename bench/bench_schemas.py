"""Schema Registry decoding speed on one core: kafkalog.schemas next to fastavro and protobuf.

Issue 20 part 8; all figures from one run.

Input, written once into bench/out/ and reused (fixed seed): N records per format whose
values confluent-kafka's own serializers (``AvroSerializer``, ``ProtobufSerializer``)
wrote against its in-memory mock registry, in segments written with kafkalog's writer
(100 records a batch, uncompressed), beside a ``_schemas`` segment holding the mock
registry's versions as Schema Registry's ``KafkaStore`` writes them. One schema per
format, an order of 10 fields: long, string, double, boolean, a timestamp (Avro
timestamp-millis, Protobuf google.protobuf.Timestamp), an enum, a nested record
(message), an array (repeated) of records, a map of strings and an optional string. Keys
are plain text (``order-<n>``, not in the wire format), as many producers write them.

The records are read from the segments once (``kafkalog.iter_batches``); then each
decoder decodes the same list, chunk by chunk (``--chunk``, 10,000 records), the decoders
taking turns (in an order that rotates each round); a decoder's time is the sum over the
chunks of each chunk's best of ``--repeat`` runs (a shared, noisy machine):

(a) kafkalog: ``decode_fields(registry, key, value, headers)`` with the registry rebuilt
    from the ``_schemas`` segment (``open_source``, as ``kafkalog dump --schemas`` and the
    job do), then the decoded value rendered as JSON text (``json.dumps``, compact): the
    wire parse, the schema lookup by id, the decode, the issue's rendering;
(b) the peer alone: the payload after the 5-byte prefix (and, for Protobuf, the single
    ``0x00`` message-index byte) read by ``fastavro.schemaless_reader`` with the writer
    schema parsed once (``parse_schema``), or by the generated message class's
    ``FromString`` (the classes the values were serialized from);
(c) the peer and its rendering to the same JSON: ``json.dumps`` of fastavro's dict, or of
    ``MessageToDict(msg, preserving_proto_field_name=True)``.

(c) minus (b) is the rendering cost; a/c near 1.0 means kafkalog adds little to what any
decoder of these values must do. Before timing, (a) and (c) are checked to give the same
JSON text on a sample of records (``--check``, default 2,000; exit 1 if not).

    .venv/bin/python bench/bench_schemas.py [--records 200000] [--repeat 5] [--chunk 10000]
        [--format avro protobuf] [--check 2000] [--json FILE]
"""

from __future__ import annotations

import argparse
import datetime
import gc
import importlib
import importlib.resources
import io
import json
import os
import platform
import random
import shutil
import sys
import tempfile
import time
import warnings
from importlib import metadata
from pathlib import Path

import kafkalog
from kafkalog.schemas import decode_fields, open_source
from kafkalog.writer import SegmentWriter, WriteRecord

# authlib.deprecate sets its warnings to "always" when imported: import it first, so that the
# filter below silences its "use httpx2" notice on confluent-kafka's import
importlib.import_module("authlib.deprecate")
with warnings.catch_warnings():  # authlib's "use httpx2" notice, on confluent-kafka's import
    warnings.simplefilter("ignore")
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

from fastavro import parse_schema, schemaless_reader
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.internal import api_implementation
from google.protobuf.json_format import MessageToDict
from grpc_tools import protoc

GENERATOR = "v2"  # bump when the records change (part of the folder name)
PER_BATCH = 100
BASE_TS = 1_763_600_000_000
TOPICS = {"avro": "orders_avro", "protobuf": "orders_proto"}

ORDER_AVRO = {
    "type": "record", "name": "Order", "namespace": "shop", "fields": [
        {"name": "id", "type": "long"},
        {"name": "customer", "type": {"type": "record", "name": "Customer", "fields": [
            {"name": "id", "type": "string"},
            {"name": "name", "type": "string"},
            {"name": "email", "type": ["null", "string"], "default": None}]}},
        {"name": "status", "type": {"type": "enum", "name": "Status",
                                    "symbols": ["NEW", "PAID", "SHIPPED", "CANCELLED"]}},
        {"name": "amount", "type": "double"},
        {"name": "currency", "type": "string"},
        {"name": "created_at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "lines", "type": {"type": "array", "items": {
            "type": "record", "name": "Line", "fields": [
                {"name": "sku", "type": "string"},
                {"name": "qty", "type": "int"},
                {"name": "price", "type": "double"}]}}},
        {"name": "attributes", "type": {"type": "map", "values": "string"}},
        {"name": "coupon", "type": ["null", "string"], "default": None},
        {"name": "express", "type": "boolean"},
    ]}
ORDER_PROTO = """syntax = "proto3";
package shop.v1;
import "google/protobuf/timestamp.proto";
message Order {
  int64 id = 1;
  message Customer { string id = 1; string name = 2; optional string email = 3; }
  Customer customer = 2;
  enum Status { NEW = 0; PAID = 1; SHIPPED = 2; CANCELLED = 3; }
  Status status = 3;
  double amount = 4;
  string currency = 5;
  google.protobuf.Timestamp created_at = 6;
  message Line { string sku = 1; int32 qty = 2; double price = 3; }
  repeated Line lines = 7;
  map<string, string> attributes = 8;
  optional string coupon = 9;
  bool express = 10;
}
"""


def render(obj) -> str:
    """The decoded value as JSON text, as the CLI writes its records (compact)."""
    return json.dumps(obj, separators=(",", ":"))


def _iso(v):
    if isinstance(v, datetime.datetime):
        return v.isoformat()
    raise TypeError(f"{type(v).__name__} is not JSON serializable")


def render_avro(datum) -> str:
    """fastavro's datum as JSON text the way a consumer would write it: json.dumps with a
    hook for the one value JSON cannot hold here (the timestamp-millis datetime, ISO 8601)."""
    return json.dumps(datum, separators=(",", ":"), default=_iso)


# ------------------------------------------------------------------ input
def order(rnd: random.Random, n: int) -> dict:
    """One order as a plain dict (Avro's shape; the Protobuf message is built from it)."""
    return {
        "id": 10_000_000 + n,
        "customer": {"id": f"c-{rnd.randrange(10**6):06d}",
                     "name": rnd.choice(["Ada Lovelace", "Alan Turing", "Grace Hopper",
                                         "Edsger Dijkstra", "Barbara Liskov"]),
                     "email": None if rnd.random() < 0.3 else f"user{rnd.randrange(10**5)}@example.com"},
        "status": rnd.choice(["NEW", "PAID", "SHIPPED", "CANCELLED"]),
        "amount": round(rnd.random() * 500, 2),
        "currency": rnd.choice(["EUR", "USD", "GBP"]),
        "created_at": datetime.datetime.fromtimestamp((BASE_TS + n * 37) / 1000, datetime.UTC),
        "lines": [{"sku": f"SKU-{rnd.randrange(10**5):05d}", "qty": rnd.randrange(1, 5),
                   "price": round(rnd.random() * 100, 2)} for _ in range(rnd.randrange(1, 4))],
        "attributes": {k: rnd.choice(["web", "app", "store", "yes", "no"])
                       for k in rnd.sample(["channel", "gift", "region", "campaign"],
                                           rnd.randrange(0, 3))},
        "coupon": None if rnd.random() < 0.8 else f"SAVE{rnd.randrange(5, 30)}",
        "express": rnd.random() < 0.25,
    }


def proto_classes() -> dict:
    """Order (and nested types) compiled from ORDER_PROTO by protoc (grpcio-tools):
    the generated classes a consumer with the .proto would have."""
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "order.proto").write_text(ORDER_PROTO)
        include = str(importlib.resources.files("grpc_tools") / "_proto")
        if protoc.main(["protoc", f"-I{tmp}", f"-I{include}", "--include_imports",
                        f"--descriptor_set_out={tmp}/d.pb", "order.proto"]) != 0:
            raise SystemExit("protoc failed on ORDER_PROTO")
        fds = descriptor_pb2.FileDescriptorSet.FromString(Path(tmp, "d.pb").read_bytes())
    pool = descriptor_pool.DescriptorPool()
    for fdp in fds.file:
        pool.Add(fdp)
    return {n: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"shop.v1.{n}"))
            for n in ("Order", "Order.Customer", "Order.Line")}


def proto_order(classes: dict, d: dict):
    customer = {k: v for k, v in d["customer"].items() if v is not None}
    msg = classes["Order"](
        id=d["id"], customer=classes["Order.Customer"](**customer), status=d["status"],
        amount=d["amount"], currency=d["currency"],
        lines=[classes["Order.Line"](**line) for line in d["lines"]],
        attributes=d["attributes"], express=d["express"])
    msg.created_at.FromDatetime(d["created_at"])
    if d["coupon"] is not None:
        msg.coupon = d["coupon"]
    return msg


def schemas_topic_records(client, subjects) -> list[tuple[bytes, bytes]]:
    """The mock registry's versions as ``_schemas`` SCHEMA records (KafkaStore's JSON)."""
    out = []
    for subject in subjects:
        for version in client.get_versions(subject):
            rs = client.get_version(subject, version)
            key = {"keytype": "SCHEMA", "subject": subject, "version": version, "magic": 1}
            value = {"subject": subject, "version": version, "id": rs.schema_id,
                     "schema": rs.schema.schema_str, "deleted": False}
            if rs.schema.schema_type != "AVRO":  # the registry leaves AVRO implicit
                value["schemaType"] = rs.schema.schema_type
            out.append((json.dumps(key).encode(), json.dumps(value).encode()))
    return out


def write_topic(folder: Path, records) -> None:
    with SegmentWriter(folder) as w:
        for i in range(0, len(records), PER_BATCH):
            w.append([WriteRecord(k, v, ()) for k, v in records[i:i + PER_BATCH]])


def ensure_input(out: Path, n: int) -> Path:
    """``out/schemas-<GENERATOR>-<n>/`` with ``_schemas-0``, ``orders_avro-0``,
    ``orders_proto-0``; written to a temporary folder and renamed, reused afterwards."""
    root = out / f"schemas-{GENERATOR}-{n}"
    if (root / "_schemas-0").exists():
        return root
    t0 = time.perf_counter()
    client = SchemaRegistryClient.new_client({"url": f"mock://bench-schemas-{os.getpid()}"})
    conf = {"auto.register.schemas": True}
    avro = AvroSerializer(client, json.dumps(ORDER_AVRO), conf=conf)
    classes = proto_classes()
    proto = ProtobufSerializer(classes["Order"], client,
                               conf={**conf, "use.deprecated.format": False})
    rnd = random.Random(f"orders-{n}")
    values: dict[str, list] = {"avro": [], "protobuf": []}
    for i in range(n):
        d = order(rnd, i)
        key = f"order-{d['id']}".encode()
        values["avro"].append(
            (key, avro(d, SerializationContext(TOPICS["avro"], MessageField.VALUE))))
        values["protobuf"].append(
            (key, proto(proto_order(classes, d),
                        SerializationContext(TOPICS["protobuf"], MessageField.VALUE))))
    tmp = Path(tempfile.mkdtemp(prefix=root.name + ".tmp-", dir=out))
    write_topic(tmp / "_schemas-0", schemas_topic_records(
        client, [f"{t}-value" for t in TOPICS.values()]))
    for fmt, topic in TOPICS.items():
        write_topic(tmp / f"{topic}-0", values[fmt])
    try:
        tmp.rename(root)
    except OSError:  # another run got there first
        shutil.rmtree(tmp)
    print(f"# wrote {root} in {time.perf_counter() - t0:.1f} s")
    return root


def read_records(folder: Path) -> list[tuple]:
    """(key, value, headers) of every record of the partition folder's segments."""
    out = []
    for log in sorted(folder.glob("*.log")):
        for b in kafkalog.iter_batches(str(log)):
            if b.crc_valid is not True:
                raise SystemExit(f"{log}: CRC mismatch in the benchmark input")
            out.extend((r.key, r.value, r.headers) for r in b.records)
    return out


# --------------------------------------------------------------- decoders
def kafkalog_path(registry):
    def run(records) -> list[str]:
        out = []
        for key, value, headers in records:
            fields = decode_fields(registry, key, value, headers)
            if fields["value_error"] is not None:
                raise SystemExit(f"kafkalog: value_error {fields['value_error']}")
            out.append(render(fields["value_decoded"]))
        return out
    return run


def avro_peer(parsed, rendered: bool):
    def decode(records) -> list:
        return [schemaless_reader(io.BytesIO(v[5:]), parsed, None) for _, v, _ in records]

    def decode_render(records) -> list[str]:
        return [render_avro(schemaless_reader(io.BytesIO(v[5:]), parsed, None))
                for _, v, _ in records]
    return decode_render if rendered else decode


def protobuf_peer(cls, rendered: bool):
    parse = cls.FromString

    def decode(records) -> list:
        return [parse(v[6:]) for _, v, _ in records]

    def decode_render(records) -> list[str]:
        return [render(MessageToDict(parse(v[6:]), preserving_proto_field_name=True))
                for _, v, _ in records]
    return decode_render if rendered else decode


def peer_inputs_ok(fmt: str, records) -> None:
    """The peers skip a fixed prefix: every value must have it (magic 0, one schema id,
    and for Protobuf the single message-index byte 0x00, i.e. [0])."""
    prefix = records[0][1][:6 if fmt == "protobuf" else 5]
    if prefix[0] != 0 or (fmt == "protobuf" and prefix[5] != 0):
        raise SystemExit(f"{fmt}: unexpected wire prefix {prefix.hex()}")
    if any(v[:len(prefix)] != prefix for _, v, _ in records):
        raise SystemExit(f"{fmt}: values do not all share the prefix {prefix.hex()}")


# ------------------------------------------------------------------ running
def measure(decoders, records, repeat: int, chunk: int) -> dict[str, float]:
    """Seconds per decoder for all ``records``: the sum over chunks of ``chunk`` records of
    each chunk's best of ``repeat`` runs. Decoders take turns chunk by chunk, in an order
    that rotates every round, so a busy moment of a shared machine costs one chunk's run,
    not a whole pass, and no decoder always runs first."""
    chunks = [records[i:i + chunk] for i in range(0, len(records), chunk)]
    best = {name: [float("inf")] * len(chunks) for name, _ in decoders}
    for r in range(repeat):
        turn = decoders[r % len(decoders):] + decoders[:r % len(decoders)]
        for i, part in enumerate(chunks):
            for name, fn in turn:
                gc.collect()
                t0 = time.perf_counter()
                result = fn(part)
                t = time.perf_counter() - t0
                if len(result) != len(part):
                    raise SystemExit(f"{name}: {len(result)} results for {len(part)} records")
                del result
                best[name][i] = min(best[name][i], t)
    return {name: sum(times) for name, times in best.items()}


def pin_to_one_cpu() -> int | None:
    if not hasattr(os, "sched_setaffinity"):
        return None
    cpu = sorted(os.sched_getaffinity(0))[-1]
    os.sched_setaffinity(0, {cpu})
    return cpu


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "?"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=200_000, help="records per format (200000)")
    ap.add_argument("--repeat", type=int, default=5, help="runs per chunk and decoder, best kept (5)")
    ap.add_argument("--format", nargs="+", default=list(TOPICS), choices=list(TOPICS))
    ap.add_argument("--chunk", type=int, default=10_000,
                    help="records a timed run decodes; each chunk's best run counts (10000)")
    ap.add_argument("--check", type=int, default=2000,
                    help="records whose (a) and (c) JSON must be equal (2000)")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "out",
                    help="where the input segments are written and reused (bench/out)")
    ap.add_argument("--json", type=Path, metavar="FILE", help="also write the results here")
    args = ap.parse_args(argv)
    if min(args.records, args.repeat, args.chunk) < 1:
        ap.error("--records, --repeat and --chunk must be at least 1")
    args.out.mkdir(parents=True, exist_ok=True)
    root = ensure_input(args.out, args.records)
    cpu = pin_to_one_cpu()
    env = {"python": f"{platform.python_implementation()} {platform.python_version()}",
           "machine": platform.machine(), "cpus": os.cpu_count(), "pinned_cpu": cpu,
           "repeat": args.repeat, "chunk": args.chunk, "kafkalog_accelerated": kafkalog.ACCELERATED,
           "fastavro": _version("fastavro"), "protobuf": _version("protobuf"),
           "protobuf_backend": api_implementation.Type(),
           "confluent-kafka": _version("confluent-kafka")}
    print(f"# {env['python']}, {env['machine']}, {env['cpus']} cpus; pinned to cpu {cpu}; "
          f"per chunk of {args.chunk:,} records the best of {args.repeat} runs, "
          "decoders interleaved")
    print(f"# fastavro {env['fastavro']}, protobuf {env['protobuf']} ({env['protobuf_backend']} "
          f"backend), values by confluent-kafka {env['confluent-kafka']} serializers; input {root}")

    registry = open_source(str(root / "_schemas-0"))
    classes = proto_classes()
    results, failures = [], []
    for fmt in args.format:
        records = read_records(root / f"{TOPICS[fmt]}-0")
        peer_inputs_ok(fmt, records)
        vbytes = sum(len(v) for _, v, _ in records)
        if fmt == "avro":
            schema_id = int.from_bytes(records[0][1][1:5], "big")
            parsed = parse_schema(json.loads(registry.by_id(schema_id).text))
            peer, peer_r = avro_peer(parsed, False), avro_peer(parsed, True)
            peer_name = f"fastavro {env['fastavro']} schemaless_reader"
        else:
            peer, peer_r = (protobuf_peer(classes["Order"], False),
                            protobuf_peer(classes["Order"], True))
            peer_name = f"protobuf {env['protobuf']} FromString"
        decoders = [("kafkalog", kafkalog_path(registry)), ("peer", peer),
                    ("peer+json", peer_r)]
        labels = {"kafkalog": "(a) kafkalog decode_fields + json",
                  "peer": f"(b) {peer_name}",
                  "peer+json": "(c) (b) + " + ("json.dumps" if fmt == "avro"
                                               else "MessageToDict + json.dumps")}
        sample = records[:args.check]
        a, c = decoders[0][1](sample), peer_r(sample)
        unequal = sum(x != y for x, y in zip(a, c))
        if unequal:
            i = next(i for i, (x, y) in enumerate(zip(a, c)) if x != y)
            failures.append(f"{fmt}: (a) and (c) differ on {unequal} of {len(sample)} records; "
                            f"first, record {i}: {a[i]} != {c[i]}")
        best = measure(decoders, records, args.repeat, args.chunk)
        n = len(records)
        print()
        print(f"== {fmt}: {n:,} values, {vbytes / n:.0f} bytes each on average "
              f"({vbytes / 1e6:.1f} MB); (a) == (c) on {len(sample):,} records: "
              f"{'yes' if not unequal else 'NO'}")
        print(f"{'decoder':46} {'records/s':>11} {'µs/record':>10} {'ms':>9}")
        row = {"format": fmt, "records": n, "value_bytes": vbytes, "equal_sample": len(sample),
               "equal": not unequal, "decoders": {}}
        for name, _ in decoders:
            t = best[name]
            print(f"{labels[name]:46} {n / t:11,.0f} {t / n * 1e6:10.2f} {t * 1e3:9.1f}")
            row["decoders"][name] = {"label": labels[name], "seconds": t, "records_per_s": n / t}
        row["ratios"] = {"kafkalog_vs_peer_json": best["peer+json"] / best["kafkalog"],
                         "kafkalog_vs_peer": best["peer"] / best["kafkalog"],
                         "render_share_of_peer_json": 1 - best["peer"] / best["peer+json"]}
        results.append(row)
        del records

    print()
    print(f"{'format':9} {'(a) vs (c)':>11} {'(a) vs (b)':>11} {'json in (c)':>12}")
    for row in results:
        r = row["ratios"]
        print(f"{row['format']:9} {r['kafkalog_vs_peer_json']:11.2f} {r['kafkalog_vs_peer']:11.2f} "
              f"{r['render_share_of_peer_json']:12.0%}")
    print("((a) vs (c) = time of (c) / time of (a): 1.00 = kafkalog as fast as the peer with its "
          "rendering; (a) vs (b) the same against the bare decode; json in (c) = the rendering's "
          "share of (c))")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"environment": env, "results": results,
                                         "failures": failures}, indent=2) + "\n")
        print(f"# results written to {args.json}")
    if failures:
        print("FAILED: " + "; ".join(failures), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
