"""Values as data in the warehouse (issue 20, part 5): the records' schema columns,
``value_decode_error`` findings, the registry the job builds and ships.

The values are confluent-kafka's (tests/schema_data.py's Data: its serializers against its mock
registry); the expected ``value_json`` is computed from what the serializers were given
(schema_data.avro_json, MessageToDict of the original messages), not from our decoder.
"""

from __future__ import annotations

import datetime
import json
import math
import pickle
import struct

import pyarrow as pa
import pytest

import kafkalog
from kafkalog.schemas import Registry
from spark_jobs import findings, layout, schemas, tables
from spark_jobs.derive import typed as typed_tables, value_types
from spark_jobs.warehouse import Warehouse
from spark_jobs.warehouse.ddl import TABLE_PROPERTIES, partition_spec
from spark_jobs.decode import values
from spark_jobs.decode.planning import discover

from tests.runs import decode
from tests.schema_data import (AT, KINDS_DEFAULTS, KINDS_PROTO, UNKNOWN, Data, Kinds, avro_json,
                               items, pb, plain_records, write_segment)


def items_json(datum: dict) -> dict:
    return {k: v.isoformat() if isinstance(v, (datetime.date, datetime.datetime)) else v
            for k, v in datum.items()}


@pytest.fixture(scope="module")
def data():
    return Data()


#: the columns of All (v1)
INNER = pa.struct([("name", pa.string()), ("n", pa.int64())])
KINDS_COLUMNS = pa.struct([
    ("d", pa.float64()), ("f", pa.float32()), ("i32", pa.int32()), ("i64", pa.int64()),
    ("u32", pa.int64()), ("u64", pa.decimal128(20, 0)), ("s32", pa.int32()), ("s64", pa.int64()),
    ("fx32", pa.int64()), ("fx64", pa.decimal128(20, 0)), ("sf32", pa.int32()),
    ("sf64", pa.int64()), ("b", pa.bool_()), ("s", pa.string()), ("raw", pa.binary()),
    ("color", pa.string()), ("inner", INNER), ("nums", pa.list_(pa.int32())),
    ("inners", pa.list_(INNER)), ("counts", pa.map_(pa.string(), pa.int64())),
    ("by_id", pa.map_(pa.int32(), INNER)), ("text", pa.string()), ("number", pa.int32()),
    ("maybe", pa.int32()), ("at", pa.timestamp("us", tz="UTC")), ("big", pa.int64()),
    ("attrs", pa.string())])


@pytest.fixture(scope="module")
def kinds(data):
    return Kinds(data)


def comparable(row: dict) -> dict:
    """A typed kinds row as the expectations hold it: maps in key order, ``attrs`` parsed,
    NaN as a string (NaN != NaN)."""
    row = dict(row)
    for k in ("counts", "by_id"):
        row[k] = sorted(row[k]) if row[k] is not None else None
    if row["attrs"] is not None and isinstance(row["attrs"], str):
        row["attrs"] = json.loads(row["attrs"])
    return {k: "NaN" if isinstance(v, float) and math.isnan(v) else v for k, v in row.items()}


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory, data, kinds):
    root = tmp_path_factory.mktemp("snap")
    write_segment(root / "_schemas-0", data.schemas + items(data)[0] + kinds.schemas)
    write_segment(root / "kinds-0", kinds.records)
    write_segment(root / "shop.items-0", items(data)[1])
    write_segment(root / "orders-0", data.orders)
    write_segment(root / "events.v1-0", data.events)
    write_segment(root / "payments-0", data.payments)
    write_segment(root / "plain-0", plain_records(data))
    return root


def expected_json(data, kinds) -> dict[tuple[str, int], object]:
    """``(topic, offset) -> value`` as the serializers were given it (None: no value_json)."""
    out = {("orders", i): avro_json(v) for i, v in
           enumerate([data.order_v1, data.order_v2, data.order_v2])}
    out[("events.v1", 0)] = data.event
    out.update({("payments", i): pb(m) for i, m in
                enumerate([data.payment, data.refund, data.line, data.refund])})
    out.update({("plain", i): None for i in range(6)})
    out.update({("shop.items", i): items_json(d) for i, d in enumerate(items(data)[2])})
    out.update({("kinds", i): pb(m) for i, m in enumerate(kinds.messages)})
    return out


def decoded_columns(registry, log) -> list[dict]:
    """The value columns of one segment's records, as a task adds them."""
    dec = values.ValueDecoder(registry, 1 << 20)
    out = []
    for name, batch in kafkalog.stream(str(log)):
        if name == "records":
            out += pa.Table.from_batches([values.with_columns(batch, dec.columns(batch))]) \
                .select(values.COLUMNS.names).to_pylist()
    return out, dec.take_findings()


def test_value_columns_and_findings_without_spark(data, kinds, snapshot):
    """The task's side: the registry from the listing's ``_schemas`` segments, pickled as
    the task context ships it; every value decodes to what the serializer was given; the
    non-wire values cost nothing and stay null; the two broken ones are findings."""
    segments, _ = discover(str(snapshot))
    registry = pickle.loads(pickle.dumps(values.registry_for_run(None, segments)))
    assert registry.problems == [] and len(registry.schemas) >= 7
    want = expected_json(data, kinds)
    for topic in ("orders", "events.v1", "payments"):
        cols, found = decoded_columns(registry, next((snapshot / f"{topic}-0").glob("*.log")))
        assert found == []
        got = [json.loads(c["value_json"]) for c in cols]
        assert got == [want[(topic, i)] for i in range(len(cols))]
        fmt = {"orders": "AVRO", "events.v1": "JSON", "payments": "PROTOBUF"}[topic]
        assert {c["value_format"] for c in cols} == {fmt}
        assert all(c["value_schema_id"] is not None and c["value_error"] is None for c in cols)
    orders, _ = decoded_columns(registry, snapshot / "orders-0" / "00000000000000000000.log")
    key_id = struct.unpack(">I", data.orders[0][0][1:5])[0]
    assert [(c["key_schema_id"], c["key_format"]) for c in orders] == \
        [(key_id, "AVRO"), (key_id, "AVRO"), (None, None)]

    cols, found = decoded_columns(registry, snapshot / "plain-0" / "00000000000000000000.log")
    assert cols[:4] == [dict.fromkeys(values.COLUMNS.names)] * 4
    assert [(c["value_schema_id"], c["value_error"], c["value_json"]) for c in cols[4:]] == [
        (999, "unknown_schema_id", None),
        (struct.unpack(">I", data.orders[0][1][1:5])[0], "malformed", None)]
    assert [(f["kind"], f["base_offset"], f["raw"]) for f in found] == [
        ("value_decode_error", 4, UNKNOWN), ("value_decode_error", 5, data.orders[0][1][:-3])]
    assert "offset 4: value (schema id 999) is unknown_schema_id" in found[0]["message"]


def test_no_registry_no_decoding_and_findings_are_bounded(data, snapshot, monkeypatch):
    cols, found = decoded_columns(None, snapshot / "orders-0" / "00000000000000000000.log")
    assert cols == [dict.fromkeys(values.COLUMNS.names)] * 3 and found == []
    assert values.registry_for_run(None, [s for s in discover(str(snapshot))[0]
                                          if s.topic != "_schemas"]) is None
    monkeypatch.setattr(values, "MAX_FINDINGS_PER_TASK", 1)
    dec = values.ValueDecoder(Registry(), max_raw=2)
    batch = pa.RecordBatch.from_pylist(
        [dict(offset=i, key=None, value=UNKNOWN, headers=[], batch_position=0) for i in range(3)],
        schema=pa.schema([f for f in kafkalog.RECORDS_SCHEMA if f.name in
                          ("offset", "key", "value", "headers", "batch_position")]))
    assert dec.columns(batch)[5].to_pylist() == ["unknown_schema_id"] * 3
    found = dec.take_findings()
    assert [f["raw"] for f in found] == [None, None]  # longer than max_raw: not kept, said
    assert "raw bytes not kept" in found[0]["message"]
    assert found[1]["message"].startswith("2 more undecodable values")


def test_the_byte_test_reads_first_bytes_of_sliced_null_and_large_arrays():
    data = [b"\x00a", b"", None, b"a\x00", b"\x00", b"x"]
    want = [True, False, False, False, True, False]
    for t in (pa.binary(), pa.large_binary()):
        arr = pa.array(data, t)
        assert values._wire_mask(arr).tolist() == want
        assert values._wire_mask(arr.slice(3)).tolist() == want[3:]
    # a null slot that spans bytes (Arrow allows it) is still no value
    spans = pa.Array.from_buffers(pa.binary(), 2, [pa.py_buffer(bytes([0b01])),
                                                   pa.py_buffer(struct.pack("<3i", 0, 1, 2)),
                                                   pa.py_buffer(b"x\x00")])
    assert spans.to_pylist() == [b"x", None] and values._wire_mask(spans).tolist() == [False, False]


def test_kafkas_own_topics_are_never_taken_for_the_wire_format(data, snapshot):
    """``__consumer_offsets`` keys and values start with an int16 version (a 0 byte): they
    must not become unknown_schema_id (found by make demo once issue 19's topics met these)."""
    registry = values.registry_for_run(None, discover(str(snapshot))[0])
    batch = pa.RecordBatch.from_pylist(
        [dict(offset=0, key=b"\x00\x01\x00\x03grp", value=b"\x00\x03\x00\x00", headers=[],
              batch_position=0)],
        schema=pa.schema([f for f in kafkalog.RECORDS_SCHEMA if f.name in
                          ("offset", "key", "value", "headers", "batch_position")]))
    for topic in ("__consumer_offsets", "__transaction_state", "__cluster_metadata"):
        dec = values.ValueDecoder(registry, 1 << 20, topic)
        assert [c.to_pylist() for c in dec.columns(batch)] == [[None]] * 6
        assert dec.take_findings() == []
    # elsewhere the same bytes would be an error (4 bytes: shorter than the wire prefix)
    assert values.ValueDecoder(registry, 1 << 20, "_schemas").columns(batch)[5].to_pylist() == \
        ["malformed"]


def test_auth_comes_from_the_environment_only():
    assert values.auth_from_env({}) is None
    assert values.auth_from_env({values.AUTH_ENV[0]: "u", values.AUTH_ENV[1]: "p"}) == ("u", "p")


@pytest.mark.parametrize("added", [values.COLUMNS.names, (schemas.FOLDER_STATE,)],
                         ids=["value_columns", "folder_state"])
def test_an_old_records_table_gains_the_columns_and_old_rows_read_null(tmp_path, added):
    """A records table an earlier version made (without the value columns of issue 20, or
    issue 36's ``folder_state``) evolves on first use (Iceberg schema evolution, optional
    columns); its rows read as null there."""
    from pyiceberg.catalog import Catalog
    from pyiceberg.schema import assign_fresh_schema_ids

    wh = Warehouse(str(tmp_path / "wh"))
    old = pa.schema([f for f in schemas.RECORDS if f.name not in added])
    ice = assign_fresh_schema_ids(Catalog._convert_schema_if_needed(old))
    wh.catalog.create_namespace_if_not_exists(wh.namespace)
    t = wh.catalog.create_table(wh.identifier("records"), schema=ice,
                                partition_spec=partition_spec("records", ice),
                                properties=TABLE_PROPERTIES)
    row = {f.name: None for f in old}
    row.update(offset=0, topic="t", partition=0, run_id="old", dt="2026-01-01",
               headers=[], value=b"\x00\x00\x00\x00\x01")
    t.append(pa.Table.from_pylist([row], schema=old))
    evolved = wh.table("records")
    names = [f.name for f in evolved.schema().fields]
    assert set(added) <= set(names)
    assert all(not evolved.schema().find_field(n).required for n in added)
    got = tables.read_arrow(wh, "records").to_pylist()
    assert [{k: r[k] for k in added} for r in got] == [dict.fromkeys(added)]
    # the Spark reader of s3:// files goes through read_file: an old file reads null there too
    old_file = tables.table_paths(wh, "records")[0]
    assert tables.read_file(old_file, "records").select(list(added)).to_pylist() == \
        [dict.fromkeys(added)]


@pytest.mark.pipeline
def test_the_job_fills_value_json_and_records_undecodable_values(spark, data, kinds, snapshot,
                                                                 tmp_path):
    """One Spark run over the snapshot (about 10 s): the registry from its own ``_schemas``
    segments travels to the executors; records hold every value as the serializer was given
    it, findings the two broken values with their bytes."""
    from spark_jobs import decode as job

    wh = tmp_path / "wh"
    summary = decode(spark, snapshot, wh, "n1")
    ids = {json.loads(v)["id"] for k, v in data.schemas + items(data)[0] + kinds.schemas
           if v and b'"SCHEMA"' in k}
    assert summary["schemas"] == f"{len(ids)} schemas, 0 records skipped"
    rows = tables.read_arrow(str(wh), "records").to_pylist()
    got = {(r["topic"], r["offset"]): None if r["value_json"] is None else json.loads(r["value_json"])
           for r in rows if r["topic"] != "_schemas"}
    assert got == expected_json(data, kinds)
    assert {r["value_format"] for r in rows if r["topic"] == "_schemas"} == {None}
    found = [f for f in tables.read_arrow(str(wh), "findings").to_pylist()
             if f["kind"] == values.FINDING_KIND]
    assert sorted((f["topic"], f["base_offset"], f["raw"]) for f in found) == [
        ("plain", 4, UNKNOWN), ("plain", 5, data.orders[0][1][:-3])]

    # typed tables (the same run): one per topic with a value subject, rows as the
    # serializer was given them, versions merged; v3 of shop.items changes n's type: its row
    # lands with n null and a typed_value_error; kinds' Node (not the table's message) is a
    # schema_incompatible finding, not a row; payments: only its payments-value version
    w = Warehouse(str(wh))
    assert summary["typed"] == {"values__kinds": 5, "values__orders": 3, "values__payments": 1,
                                "values__shop_dot_items": 3}
    assert [n for n in w.run_tables() if layout.typed_topic(n)] == \
        ["values__kinds", "values__orders", "values__payments", "values__shop_dot_items"]

    def typed(topic):
        rows = w.table(layout.typed_table_name(topic)).scan().to_arrow().to_pylist()
        for r in rows:
            assert (r.pop("kafka_topic"), r.pop("kafka_partition"), r.pop("run_id")) == \
                (topic, 0, "n1") and r.pop("kafka_timestamp") is not None
        return sorted(rows, key=lambda r: r["kafka_offset"])

    v1, v2, v3 = items(data)[2]
    assert typed("shop.items") == [
        {**v1, "dims": {"w": 2.0, "h": None}, "color": None, "kafka_offset": 0,
         "kafka_schema_id": 101},
        {**v2, "kafka_offset": 1, "kafka_schema_id": 102},
        {**v3, "n": None, "kafka_offset": 2, "kafka_schema_id": 103}]
    got_ids = {(r["topic"], r["offset"]): r["value_schema_id"] for r in rows}
    order_id = {o: sid for (t, o), sid in got_ids.items() if t == "orders"}
    assert typed("orders") == [
        {**o, "tags": list(o["tags"].items()), "customer": o.get("customer"),
         "kafka_offset": i, "kafka_schema_id": order_id[i]}
        for i, o in enumerate([data.order_v1, data.order_v2, data.order_v2])]
    assert {r.pop("kafka_offset"): (r.pop("kafka_schema_id"), comparable(r))
            for r in typed("kinds")} == \
        {o: (sid, comparable(row)) for o, (sid, row) in kinds.rows.items()}
    assert typed("payments") == [{
        "id": 2**40, "currency": "EUR", "token": b"\x01\x02", "state": "SETTLED",
        "at": data.payment.at.ToDatetime(datetime.timezone.utc),
        "lines": [{"sku": "x", "qty": 2}], "kafka_offset": 0,
        "kafka_schema_id": got_ids[("payments", 0)]}]
    incompatible = sorted((f for f in tables.read_arrow(str(wh), "findings").to_pylist()
                           if f["kind"] == typed_tables.INCOMPATIBLE), key=lambda f: f["topic"])
    assert [(f["topic"], f["base_offset"], f["last_offset"]) for f in incompatible] == \
        [("kinds", 3, 3)]
    assert "kinds.v1.Node, not kinds.v1.All" in incompatible[0]["message"]
    cells = [f for f in tables.read_arrow(str(wh), "findings").to_pylist()
             if f["kind"] == findings.TYPED_VALUE_ERROR]
    assert [(f["topic"], f["partition"], f["base_offset"], f["raw"]) for f in cells] == \
        [("shop.items", 0, 2, items(data)[1][2][1])]
    assert cells[0]["message"] == ("offset 2: column n is null in the row: 'three': its schema "
                                   "version types n as string, the table's column is int32")


def test_typed_table_names_round_trip_and_never_collide():
    topics = ["shop.orders", "shop_orders", "a_.b", "a__dot__b", "_.", "x-y", "a"]
    names = [layout.typed_table_name(t) for t in topics]
    assert names[:2] == ["values__shop_dot_orders", "values__shop__orders"]
    assert len(set(names)) == len(topics) and all("." not in n for n in names)
    assert [layout.typed_topic(n) for n in names] == topics
    assert [layout.typed_topic(n) for n in ("records", "values__a_b", "values__")] == [None] * 3


def test_avro_types_become_arrow_columns_and_versions_merge(data):
    """Each Avro type's column type; v2 widens (top-level and nested); v3's type change
    keeps the table's type (its values of that field are null in its rows); a field with
    no column form is JSON text; a value schema that is no record is Untyped."""
    import pyarrow as pa

    registry = Registry.from_schemas_records(items(data)[0])
    v1 = value_types.value_schema(registry, 101)
    assert v1 == pa.schema([
        ("id", pa.int64()), ("name", pa.string()), ("price", pa.float32()),
        ("ok", pa.bool_()), ("n", pa.int32()), ("at", pa.timestamp("us", tz="UTC")),
        ("day", pa.date32()), ("dims", pa.struct([("w", pa.float64())])),
        ("labels", pa.list_(pa.string()))])
    cols, ok, bad = typed_tables.plan_schemas(registry, "shop.items", None)
    assert ok == {101, 102, 103} and bad == {} and cols.field("n").type == pa.int32()
    plan = typed_tables.TopicPlan("t", "", pa.schema(list(value_types.LINEAGE) + list(cols)),
                                  ok, bad, versions=typed_tables.version_structs(registry, ok))
    assert plan.drop == {101: {}, 102: {}, 103: {
        ("n",): "its schema version types n as string, the table's column is int32"}}
    assert cols.field("dims").type == pa.struct([("w", pa.float64()), ("h", pa.float64())])
    assert cols.names[-1] == "color"
    named: dict = {}
    assert value_types.arrow_type(
        {"type": "record", "name": "R", "fields": [
            {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A"]}},
            {"name": "m", "type": {"type": "map", "values": ["null", "E"]}},
            {"name": "f", "type": {"type": "fixed", "name": "F", "size": 2}}]}, named) == \
        pa.struct([("e", pa.string()), ("m", pa.map_(pa.string(), pa.string())),
                   ("f", pa.binary())])
    with pytest.raises(value_types.Untyped):
        value_types.arrow_type(["null", "int", "string"], {})
    linked = value_types.arrow_type({"type": "record", "name": "L", "fields": [
        {"name": "v", "type": ["null", "int", "string"]}, {"name": "next", "type": "L"}]}, {})
    assert linked == pa.struct([("v", pa.string()), ("next", pa.string())])
    assert value_types.text_columns(linked) == {"v": "a union of 2 non-null types",
                                                "next": "recursive record L"}
    # a field named like a lineage column cannot be typed
    clash = Registry.from_schemas_records([(b'{"keytype":"SCHEMA","subject":"t-value",'
                                            b'"version":1,"magic":1}', json.dumps(
        {"subject": "t-value", "version": 1, "id": 7, "deleted": False, "schema": json.dumps(
            {"type": "record", "name": "T", "fields": [{"name": "run_id", "type": "string"}]})
         }).encode())])
    assert typed_tables.plan_schemas(clash, "t", None)[1:] == (set(), {7: (
        "field(s) ['run_id'] clash with the lineage columns")})


@pytest.mark.pipeline
def test_schema_decode_check_grades_the_share_per_partition(spark):
    """``schema_decode``: one observation per undecodable value, warn by class; a partition
    beyond ``max_share`` fails; values outside the wire format are not counted."""
    from spark_jobs.audit import checks, schema_decode
    from spark_jobs.audit.policy import Policy

    rows = [("a", 0, i, 5, None) for i in range(199)] + [("a", 0, 199, 999, "unknown_schema_id")] \
        + [("b", 0, 0, 5, None), ("b", 0, 1, 5, "malformed")] \
        + [("c", 0, i, None, None) for i in range(5)]
    records = spark.createDataFrame(
        [(t, p, o, sid, err, "seg", 0) for t, p, o, sid, err in rows],
        "topic string, partition int, offset bigint, value_schema_id int, value_error string, "
        "segment string, batch_position bigint")
    policy = Policy.load()
    topics = ["a", "b", "c"]
    obs = checks.apply_policy(schema_decode.schema_decode(
        records, schema_decode.share_frame(spark, policy, topics)), policy, topics)
    got = sorted((r.topic, r.first_offset, r["class"], r.status, r.value) for r in obs.collect())
    assert got == [("a", 199, "unknown_schema_id", "warn", 999),
                   ("b", 1, "beyond_max_share", "fail", 5)]
    messages = {r.topic: r.message for r in obs.collect()}
    assert "1 of 200 values in the wire format of this partition did not decode (0.5%, " \
        "max_share 1.0%)" in messages["a"]
    assert "1 of 2 values" in messages["b"] and "50.0%" in messages["b"]


def test_a_typed_table_evolves_by_name_and_old_rows_read_null(data, tmp_path):
    """Night 1 knew v1, night 2 brings v2: the table a night-1 run made gains v2's top-level
    and nested columns (optional); its rows read null there; the same columns again change
    nothing."""
    import pyarrow as pa

    registry = Registry.from_schemas_records(items(data)[0])
    wh = Warehouse(str(tmp_path / "wh"))
    name = layout.typed_table_name("shop.items")
    v1 = pa.schema(list(value_types.LINEAGE) + list(value_types.value_schema(registry, 101)))
    table = wh.typed_table(name, v1)
    assert name in wh.run_tables() and wh.run_tables()[-1] == "ledger"
    row = {**items(data)[2][0], "kafka_offset": 0, "run_id": "n1"}
    table.append(pa.Table.from_pylist([row], schema=v1))
    old = value_types.value_schema(registry, 101)
    cols, ok, bad = typed_tables.plan_schemas(
        registry, "shop.items", pa.schema([f for f in table.schema().as_arrow()
                                           if f.name not in value_types.LINEAGE.names]))
    assert ok == {101, 102, 103} and bad == {} and cols.names[:len(old)] == old.names
    evolved = wh.typed_table(name, pa.schema(list(value_types.LINEAGE) + list(cols)))
    assert not evolved.schema().find_field("color").required
    assert not evolved.schema().find_field("dims.h").required
    got = evolved.scan().to_arrow().to_pylist()
    assert [(r["id"], r["color"], r["dims"]) for r in got] == [(1, None, {"w": 2.0, "h": None})]
    again = wh.typed_table(name, pa.schema(list(value_types.LINEAGE) + list(cols)))
    assert again.metadata.last_updated_ms == evolved.metadata.last_updated_ms
    with pytest.raises(KeyError):
        wh.table(layout.typed_table_name("nothing.here"))


def test_a_value_that_does_not_fit_costs_its_cell_never_the_row(data):
    """rows_of: a value_json field that does not convert (not expected from the decoder, but
    never a crash), v3's string where the table's ``n`` is int32, and a value that is no
    object: every row lands, the cell null, one typed_value_error each (offset, column);
    a version with no table form (no record at all) is still refused whole."""
    import pyarrow as pa

    registry = Registry.from_schemas_records(items(data)[0])
    cols, ok, bad = typed_tables.plan_schemas(registry, "shop.items", None)
    plan = typed_tables.TopicPlan("values__shop_dot_items", "", pa.schema(
        list(value_types.LINEAGE) + list(cols)), ok, {104: "no record"},
        versions=typed_tables.version_structs(registry, ok))
    good, wrong, v3 = (json.dumps(items_json(d)) for d in items(data)[2])
    wrong = wrong.replace('"n": -1', '"n": "minus one"').replace('"day": "1970-01-01"',
                                                                 '"day": "1970-13-01"')
    records = pa.Table.from_pylist([
        dict(topic="shop.items", partition=0, offset=o, timestamp=None, value_schema_id=sid,
             value_format="AVRO", value_error=None, value_json=j, segment="s",
             segment_base_offset=0, batch_position=0, run_id="r", value=b"v%d" % o)
        for o, sid, j in ((0, 101, good), (1, 102, wrong), (2, 103, v3), (3, 102, "[1]"),
                          (4, 104, "{}"))])
    typed, refused, found = typed_tables.rows_of(records, plan)
    rows = typed.to_pylist()
    assert [r["kafka_offset"] for r in rows] == [0, 1, 2, 3]
    assert [(r["n"], r["day"], r["name"]) for r in rows] == [
        (3, datetime.date(2026, 11, 25), "a"), (None, None, "b"), (None, datetime.date(2000, 2, 29), "c"),
        (None, None, None)]
    assert [(f.kind, f.base_offset, f.raw, f.message.split(" is null")[0]) for f in found] == [
        (findings.TYPED_VALUE_ERROR, 1, b"v1", "offset 1: column n"),
        (findings.TYPED_VALUE_ERROR, 1, b"v1", "offset 1: column day"),
        (findings.TYPED_VALUE_ERROR, 2, b"v2", "offset 2: column n"),
        (findings.TYPED_VALUE_ERROR, 3, b"v3", "offset 3: column (value)")]
    assert "'minus one' does not convert: TypeError: 'minus one' is not an integer" in \
        found[0].message
    assert "'1970-13-01' does not convert: ValueError" in found[1].message
    assert "types n as string, the table's column is int32" in found[2].message
    assert {k: v[:3] for k, v in refused.items()} == {(0, 104): [4, 4, 1]}
    # past the limit: one more finding says how many cells were left out
    cells = typed_tables.Cells(limit=1)
    typed_tables.rows_of(records, plan, cells)
    (rest,) = cells.close()
    assert (rest.base_offset, rest.last_offset, rest.raw) == (1, 3, None)
    assert rest.message.startswith("3 more value(s) at offsets 1..3 are null")


def test_json_schema_values_get_columns_too():
    """JSON Schema: object -> struct, array -> list, formats -> timestamp/date, a nullable
    type -> its type; a combinator or a $ref is Untyped; a version that changes a type is
    refused; the documents convert as they are."""
    import pyarrow as pa

    v1 = {"type": "object", "properties": {
        "page": {"type": "string"}, "ms": {"type": "integer"},
        "at": {"type": "string", "format": "date-time"}, "day": {"type": ["string", "null"],
                                                                  "format": "date"},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}},
        "geo": {"type": "object", "properties": {"lat": {"type": "number"}}},
        "ok": {"type": "boolean"}}}
    v2 = {**v1, "properties": {**v1["properties"], "ref": {"type": "string"}}}
    v3 = {**v1, "properties": {**v1["properties"], "ms": {"type": "number"}}}

    def record(version, sid, schema):
        return (json.dumps({"keytype": "SCHEMA", "subject": "clicks-value", "version": version,
                            "magic": 1}).encode(),
                json.dumps({"subject": "clicks-value", "version": version, "id": sid,
                            "schemaType": "JSON", "schema": json.dumps(schema),
                            "deleted": False}).encode())

    registry = Registry.from_schemas_records([record(1, 11, v1), record(2, 12, v2),
                                              record(3, 13, v3)])
    cols, ok, bad = typed_tables.plan_schemas(registry, "clicks", None)
    assert ok == {11, 12, 13} and bad == {}
    assert cols == pa.schema([
        ("page", pa.string()), ("ms", pa.int64()), ("at", pa.timestamp("us", tz="UTC")),
        ("day", pa.date32()), ("tags", pa.list_(pa.string())),
        ("geo", pa.struct([("lat", pa.float64())])), ("ok", pa.bool_()), ("ref", pa.string())])
    for untyped in ({"oneOf": [{"type": "string"}]}, {"$ref": "#/x"}, {"type": ["string", "integer"]},
                    {}):
        with pytest.raises(value_types.Untyped):
            value_types.json_schema_type(untyped)
    plan = typed_tables.TopicPlan("values__clicks", "", pa.schema(
        list(value_types.LINEAGE) + list(cols)), ok, bad,
        versions=typed_tables.version_structs(registry, ok))
    assert plan.drop[13] == {("ms",): "its schema version types ms as double, the table's "
                                      "column is int64"}
    doc = {"page": "/", "ms": 3, "at": "2026-11-25T22:00:01.250Z", "day": None,
           "tags": ["a"], "geo": {"lat": 1.5}, "ok": True}
    records = pa.Table.from_pylist([
        dict(topic="clicks", partition=0, offset=0, timestamp=None, value_schema_id=11,
             value_format="JSON", value_error=None, value_json=json.dumps(doc), segment="s",
             segment_base_offset=0, batch_position=0, run_id="r")])
    typed, refused, found = typed_tables.rows_of(records, plan)
    row = typed.to_pylist()[0]
    assert refused == {} and found == [] and row["at"] == AT and row["geo"] == {"lat": 1.5} and row["ref"] is None


def kinds_registry(kinds, *extra) -> Registry:
    return Registry.from_schemas_records(kinds.schemas + list(extra))


def test_protobuf_descriptors_become_arrow_columns_and_versions_merge(kinds, tmp_path):
    """Protobuf: the table's message is the file's first top-level message (All); each
    field kind's column; v2 widens (top-level and nested); a version registered as .proto
    text (as Java clients do) that changes a type is refused; a recursive message and a
    change of map keys keeps the table's keys; a recursive message's field is JSON text."""
    v3 = KINDS_PROTO.replace("int32 i32 = 3;", "string i32 = 3;")
    text = (json.dumps({"keytype": "SCHEMA", "subject": "kinds-value", "version": 3,
                        "magic": 1}).encode(),
            json.dumps({"subject": "kinds-value", "version": 3, "id": 150,
                        "schemaType": "PROTOBUF", "schema": v3, "deleted": False}).encode())
    registry = kinds_registry(kinds, text)
    v1, v2 = kinds.ids
    assert value_types.value_schema(registry, v1) == pa.schema(list(KINDS_COLUMNS))
    cols, ok, bad = typed_tables.plan_schemas(registry, "kinds", None)
    assert ok == {v1, v2, 150} and bad == {} and cols.field("i32").type == pa.int32()
    assert value_types.differences(pa.struct(list(cols)), pa.struct(list(
        value_types.value_schema(registry, 150)))) == {
        ("i32",): "its schema version types i32 as string, the table's column is int32"}
    assert cols.names == KINDS_COLUMNS.names + ["added"]
    assert cols.field("inner").type == pa.struct(list(INNER) + [("flag", pa.bool_())])
    assert cols.field("by_id").type.item_type == cols.field("inner").type
    _, spec, names = value_types.protobuf_plan(registry, v1)
    assert names[value_types.TABLE_MESSAGE] == "kinds.v1.All" and names[(1,)] == "kinds.v1.Node"
    assert names[(0, 0)] == "kinds.v1.All.Inner"
    assert {n: d for n, _, d in spec} == KINDS_DEFAULTS
    # the next run plans against the table as Iceberg gives it back (decimal, int map keys)
    table = Warehouse(str(tmp_path / "wh")).typed_table(
        "values__kinds", pa.schema(list(value_types.LINEAGE) + list(cols)))
    existing = pa.schema([f for f in table.schema().as_arrow()
                          if f.name not in value_types.LINEAGE.names])
    assert typed_tables.plan_schemas(registry, "kinds", existing) == (cols, ok, bad)
    node, node_spec = value_types.protobuf_type(kinds.messages[3].DESCRIPTOR)
    assert node == pa.struct([("label", pa.string()), ("next", pa.string())])
    assert value_types.text_columns(node) == {"next": "recursive message kinds.v1.Node"}
    assert node_spec == (("label", "str", ""), ("next", "json", None))
    keys = pa.map_(pa.int32(), pa.string())
    assert value_types.merge(keys, pa.map_(pa.string(), pa.string())) == keys
    assert value_types.differences(keys, pa.map_(pa.string(), pa.string()), "m") == {
        (): "its schema version types m as map<string, string>, the table's column is "
            "map<int32, string>"}


def kinds_records(registry, log) -> pa.Table:
    """The kinds segment as records rows (the columns the typed tables read), value columns
    decoded as a task decodes them."""
    cols, found = decoded_columns(registry, log)
    assert found == []
    raw = []
    for name, batch in kafkalog.stream(str(log)):
        if name == "records":
            raw += batch.select(["offset", "timestamp", "value", "headers",
                                 "batch_position"]).to_pylist()
    return pa.Table.from_pylist([
        {**r, **c, "topic": "kinds", "partition": 0, "segment": str(log),
         "segment_base_offset": 0, "run_id": "r"} for r, c in zip(raw, cols)])


def test_protobuf_rows_are_the_messages_serialized(kinds, snapshot):
    """rows_of over what confluent-kafka's ProtobufSerializer wrote: each row equals the
    message it was given, field by field (proto3 defaults filled where a field has no
    presence, null where it has; uint64 max, int64 min, NaN and infinities, bytes, an
    unknown enum number, a wrapper set to 0); a value named by a header is typed; the
    second top-level message (indexes [1]) is refused with both messages named."""
    registry = values.registry_for_run(None, discover(str(snapshot))[0])
    cols, ok, bad = typed_tables.plan_schemas(registry, "kinds", None)
    plan = typed_tables.TopicPlan("values__kinds", "", pa.schema(
        list(value_types.LINEAGE) + list(cols)), ok, bad,
        typed_tables.protobuf_specs(registry, ok))
    assert plan.columns()[-2:] == ("value", "headers")
    records = kinds_records(registry, snapshot / "kinds-0" / "00000000000000000000.log")
    typed, refused, found = typed_tables.rows_of(records, plan)
    assert found == []
    got = {}
    for r in typed.to_pylist():
        lineage = {n: r.pop(n) for n in value_types.LINEAGE.names}
        got[lineage["kafka_offset"]] = (lineage["kafka_schema_id"], comparable(r))
    assert got == {o: (sid, comparable(row)) for o, (sid, row) in kinds.rows.items()}
    node = refused[(0, kinds.ids[0])]
    assert list(refused) == [(0, kinds.ids[0])] and node[:3] == [3, 3, 1]
    assert "message indexes [1] name kinds.v1.Node, not kinds.v1.All" in node[6]


def test_latest_tables_carry_the_typed_columns(spark, snapshot, tmp_path):
    """latest__<topic> of topics with a value schema (issue 35): per key the latest record's
    offset, as a replay of the records table gives it, with the typed table's columns of that
    record (the same values the typed table holds at that offset)."""
    from spark_jobs import decode as job

    wh = tmp_path / "wh"
    out = decode(spark, snapshot, wh, "n1", "--latest-topics", r"orders|shop\.items|kinds",
                 night="2026-11-20")
    w = Warehouse(str(wh))
    checked = 0
    for topic in ("orders", "shop.items", "kinds"):
        latest = {}
        for r in sorted(tables.read_arrow(str(wh), "records").to_pylist(), key=lambda r: r["offset"]):
            if r["topic"] == topic and r["key"] is not None:
                latest[r["key"]] = r["offset"] if r["value"] is not None else None
        want = {k: o for k, o in latest.items() if o is not None}
        name = layout.latest_table_name(topic)
        rows = w.load(name).scan().to_arrow().to_pylist() if want else []
        assert {r["key"]: r["offset"] for r in rows} == want
        typed = {r["kafka_offset"]: r for r in
                 w.load(layout.typed_table_name(topic)).scan().to_arrow().to_pylist()}
        for r in rows:
            value_cols = [c for c in r if c not in ("partition", "key", "value", "offset",
                                                    "timestamp", "headers", "value_json",
                                                    "night", "run_id")]
            assert value_cols, name
            if r["offset"] in typed:
                assert {c: r[c] for c in value_cols} == {c: typed[r["offset"]][c]
                                                         for c in value_cols}
                checked += 1
            assert r["night"] == "2026-11-20"
        if want:
            assert out["keyed"][name] == len(want)
    assert checked
