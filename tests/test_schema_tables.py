"""Values as data in the warehouse (issue 20, part 5): the records' schema columns,
``value_decode_error`` findings, the registry the job builds and ships.

The values are confluent-kafka's (test_schemas.Data: its serializers against its mock
registry); the expected ``value_json`` is computed from what the serializers were given
(test_schemas.avro_json, MessageToDict of the original messages), not from our decoder.
"""

from __future__ import annotations

import json
import pickle
import struct

import pyarrow as pa
import pytest

import kafkalog
from kafkalog.schemas import Registry
from spark_jobs import iceberg, schemas, tables
from spark_jobs.decode import values
from spark_jobs.decode.planning import discover

from test_schemas import Data, avro_json, pb, write_segment

#: a value whose schema id nobody registered, and an Avro value cut short
UNKNOWN = b"\x00" + struct.pack(">I", 999) + b"\x02"


@pytest.fixture(scope="module")
def data():
    return Data()


def plain_records(data):
    """Values not in the wire format (JSON text, a string, empty, null) and two that are
    but do not decode (an unknown id; an Avro payload cut short)."""
    cut = data.orders[0][1][:-3]
    return [(b"k", b'{"plain": true}', ()), (None, b"text", ()), (None, b"", ()),
            (b"tombstone", None, ()), (None, UNKNOWN, ()), (None, cut, ())]


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory, data):
    root = tmp_path_factory.mktemp("snap")
    write_segment(root / "_schemas-0", data.schemas)
    write_segment(root / "orders-0", data.orders)
    write_segment(root / "events.v1-0", data.events)
    write_segment(root / "payments-0", data.payments)
    write_segment(root / "plain-0", plain_records(data))
    return root


def expected_json(data) -> dict[tuple[str, int], object]:
    """``(topic, offset) -> value`` as the serializers were given it (None: no value_json)."""
    out = {("orders", i): avro_json(v) for i, v in
           enumerate([data.order_v1, data.order_v2, data.order_v2])}
    out[("events.v1", 0)] = data.event
    out.update({("payments", i): pb(m) for i, m in
                enumerate([data.payment, data.refund, data.line, data.refund])})
    out.update({("plain", i): None for i in range(6)})
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


def test_value_columns_and_findings_without_spark(data, snapshot):
    """The task's side: the registry from the listing's ``_schemas`` segments, pickled as
    the task context ships it; every value decodes to what the serializer was given; the
    non-wire values cost nothing and stay null; the two broken ones are findings."""
    segments, _ = discover(str(snapshot))
    registry = pickle.loads(pickle.dumps(values.registry_for_run(None, segments)))
    assert registry.problems == [] and len(registry.schemas) >= 7
    want = expected_json(data)
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


def test_an_old_records_table_gains_the_columns_and_old_rows_read_null(tmp_path):
    """A records table an earlier version made (no value columns) evolves on first use
    (Iceberg schema evolution, optional columns); its rows read as null there."""
    from pyiceberg.catalog import Catalog
    from pyiceberg.schema import assign_fresh_schema_ids

    wh = iceberg.Warehouse(str(tmp_path / "wh"))
    old = pa.schema([f for f in schemas.RECORDS if f.name not in values.COLUMNS.names])
    ice = assign_fresh_schema_ids(Catalog._convert_schema_if_needed(old))
    wh.catalog.create_namespace_if_not_exists(wh.namespace)
    t = wh.catalog.create_table(wh.identifier("records"), schema=ice,
                                partition_spec=iceberg.partition_spec("records", ice),
                                properties=iceberg.TABLE_PROPERTIES)
    row = {f.name: None for f in old}
    row.update(offset=0, topic="t", partition=0, run_id="old", dt="2026-01-01",
               headers=[], value=b"\x00\x00\x00\x00\x01")
    t.append(pa.Table.from_pylist([row], schema=old))
    evolved = wh.table("records")
    names = [f.name for f in evolved.schema().fields]
    assert set(values.COLUMNS.names) <= set(names)
    assert all(not evolved.schema().find_field(n).required for n in values.COLUMNS.names)
    got = tables.read_arrow(wh, "records").to_pylist()
    assert [{k: r[k] for k in values.COLUMNS.names} for r in got] == \
        [dict.fromkeys(values.COLUMNS.names)]
    # the Spark reader of s3:// files goes through read_file: an old file reads null there too
    old_file = tables.table_paths(wh, "records")[0]
    assert tables.read_file(old_file, "records").select(values.COLUMNS.names).to_pylist() == \
        [dict.fromkeys(values.COLUMNS.names)]


@pytest.mark.pipeline
def test_the_job_fills_value_json_and_records_undecodable_values(spark, data, snapshot, tmp_path):
    """One Spark run over the snapshot (about 10 s): the registry from its own ``_schemas``
    segments travels to the executors; records hold every value as the serializer was given
    it, findings the two broken values with their bytes."""
    from spark_jobs import decode as job

    wh = tmp_path / "wh"
    summary = job.main(["--input", str(snapshot), "--output", str(wh), "--run-id", "n1"],
                       spark=spark)
    ids = {json.loads(v)["id"] for k, v in data.schemas if v and b'"SCHEMA"' in k}
    assert summary["schemas"] == f"{len(ids)} schemas, 0 records skipped"
    rows = tables.read_arrow(str(wh), "records").to_pylist()
    got = {(r["topic"], r["offset"]): None if r["value_json"] is None else json.loads(r["value_json"])
           for r in rows if r["topic"] != "_schemas"}
    assert got == expected_json(data)
    assert {r["value_format"] for r in rows if r["topic"] == "_schemas"} == {None}
    found = [f for f in tables.read_arrow(str(wh), "findings").to_pylist()
             if f["kind"] == values.FINDING_KIND]
    assert sorted((f["topic"], f["base_offset"], f["raw"]) for f in found) == [
        ("plain", 4, UNKNOWN), ("plain", 5, data.orders[0][1][:-3])]


@pytest.mark.pipeline
def test_schema_decode_check_grades_the_share_per_partition(spark):
    """``schema_decode``: one observation per undecodable value, warn by class; a partition
    beyond ``max_share`` fails; values outside the wire format are not counted."""
    from spark_jobs.quality import checks, schema_decode
    from spark_jobs.quality.policy import Policy

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
