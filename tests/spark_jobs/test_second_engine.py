"""A second engine (issue 35, item 4): every table of a warehouse the pipeline wrote, read with
DuckDB's own Iceberg reader (tests/duckdb_engine.py: ``iceberg_scan`` of the metadata file,
its own manifest planning and Parquet reader), has the rows pyiceberg reads, column for
column and value for value.

The warehouse: two nights decoded by Spark, audited and published, each compared on its run
branch before publish (a snapshot read, ``snapshot_from_id``) and on ``main`` after, and at
the end every branch and tag left (a tag on records after night 1, as nights are tagged).
Night 1 is test_internal_tables' snapshot (internal topics, producer-state, leader-epoch and
partition.metadata files: the internal tables, consumer_lag) plus a partition with a
committed and an aborted transaction (markers, headers) and a __cluster_metadata partition;
night 2 is test_schema_tables' Schema Registry topics (typed tables with structs, lists, maps,
decimals, NaN, binary, timestamps; incompatible-schema findings). The tables compared are
the catalog's own listing, whatever their names (schemas.ALL_NAMES, the typed tables, and
any table added later), and the test asserts it saw the ones these nights must make.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from kafkalog.writer import SegmentWriter, WriteRecord, internal_record
from spark_jobs import layout, schemas
from spark_jobs.warehouse import Warehouse, branch_name

from tests.runs import decode
from tests import duckdb_engine
from tests.snapshots import T0
from tests.spark_jobs.internal_snapshot import TOPIC_ID, write_snapshot
from tests.schema_data import Data, Kinds, items, plain_records
from tests.schema_data import write_segment

pytestmark = pytest.mark.pipeline

NIGHTS = ("night-1", "night-2")
TAG = "night-2025-11-21"


def write_transactions(folder):
    """txn-0: a plain record, producer 5's committed transaction (2 records with headers), producer
    6's aborted one (1 record), then a plain record: 7 offsets, 2 of them markers."""
    with SegmentWriter(folder, 0) as w:
        w.append([WriteRecord(b"a", b"plain", timestamp=T0)])
        w.append([WriteRecord(b"k%d" % i, b"committed-%d" % i, ((b"h", b"\x00\x01"), ("n", None)),
                              timestamp=T0 + i) for i in range(2)],
                 producer_id=5, producer_epoch=0, base_sequence=0, transactional=True)
        w.append([WriteRecord(b"k", b"aborted", timestamp=T0 + 3)],
                 producer_id=6, producer_epoch=0, base_sequence=0, transactional=True)
        w.append_marker(producer_id=5, producer_epoch=0, commit=True, timestamp=T0 + 4)
        w.append_marker(producer_id=6, producer_epoch=0, commit=False, timestamp=T0 + 5)
        w.append([WriteRecord(None, b"after", timestamp=T0 + 6)])


def write_cluster_metadata(folder):
    """__cluster_metadata-0: a TopicRecord and a PartitionRecord of orders (KRaft's log)."""
    records = [{"type": "TOPIC_RECORD", "version": 0, "data": {"name": "orders", "topicId": TOPIC_ID}},
               {"type": "PARTITION_RECORD", "version": 1, "data": {
                   "partitionId": 0, "topicId": TOPIC_ID, "replicas": [1, 2], "isr": [1],
                   "leader": 1, "leaderEpoch": 3, "partitionEpoch": 5}}]
    with SegmentWriter(folder, 0) as w:
        w.append([internal_record("cluster-metadata", r, timestamp=T0 + i) for i, r in enumerate(records)])


def night_2_snapshot(root):
    """test_schema_tables' topics with a registry value subject (not its orders: night 1 has
    an orders-0 with other bytes)."""
    data = Data()
    kinds = Kinds(data)
    schemas_records, item_records, _ = items(data)
    write_segment(root / "_schemas-0", data.schemas + schemas_records + kinds.schemas)
    write_segment(root / "kinds-0", kinds.records)
    write_segment(root / "shop.items-0", item_records)
    write_segment(root / "events.v1-0", data.events)
    write_segment(root / "payments-0", data.payments)
    # plain values (JSON text, a string, empty, a tombstone), not the two that do not decode
    # (schema_decode fails on them, and the audit would refuse night 2)
    write_segment(root / "plain-0", plain_records(data)[:4])


@pytest.fixture(scope="module")
def compared(spark, tmp_path_factory):
    """The two nights' decode, audit and publish, comparing both engines on each run's branch
    and on main; yields (warehouse, {(night, 'branch' | 'main'): {table: rows}})."""
    from spark_jobs import check_quality, publish

    tmp = tmp_path_factory.mktemp("engines")
    snaps = {night: tmp / night for night in NIGHTS}
    for s in snaps.values():
        s.mkdir()
    write_snapshot(snaps["night-1"])
    for name, write in (("txn-0", write_transactions), ("__cluster_metadata-0", write_cluster_metadata)):
        (snaps["night-1"] / name).mkdir()
        write(snaps["night-1"] / name)
    night_2_snapshot(snaps["night-2"])

    W = str(tmp / "w")
    wh = Warehouse(W)
    con = duckdb_engine.connect()
    seen = {}
    for night in NIGHTS:
        decode(spark, snaps[night], W, night, "--no-publish")
        assert check_quality.main(["--warehouse", W, "--run-id", night, "--no-docs"],
                                  spark=spark) == 0  # passed: it may be published
        seen[(night, "branch")] = duckdb_engine.compare_warehouse(wh, ref=branch_name(night), con=con)
        publish.main(["--warehouse", W, "--run-id", night, "--require-audit"])
        seen[(night, "main")] = duckdb_engine.compare_warehouse(wh, con=con)
        if night == NIGHTS[0]:  # a tag, as a night's state is tagged (issue 35)
            records = wh.load("records")
            records.manage_snapshots().create_tag(records.current_snapshot().snapshot_id,
                                                  TAG).commit()
    seen["refs"] = duckdb_engine.compare_refs(wh, con=con)
    con.close()
    return wh, seen


def test_every_table_reads_the_same_in_duckdb_and_pyiceberg(compared):
    wh, seen = compared
    final = seen[("night-2", "main")]
    # the tables these nights must make, all compared (and whatever else the catalog lists)
    must = set(schemas.DECODE_TABLES) | {"dq_results", "consumer_lag", "consumer_offsets",
                                         "group_metadata", "transactions", "producer_state",
                                         "leader_epochs", "cluster_metadata"} | {
        layout.typed_table_name(t) for t in ("kinds", "shop.items", "payments")}
    assert must <= set(final), must - set(final)
    assert set(final) == wh.table_names()
    # not empty: each of them has rows (a comparison of two empty reads proves nothing)
    assert {n for n in must if final[n] == 0} == set()
    # the records of both nights: night 1's 7 commits, 1 group, 2 transaction states, 5 + 4
    # orders records, txn-0's 5 data records and 2 cluster metadata records; night 2 adds its
    # topics; a run branch holds what main has plus the run's rows
    assert seen[("night-1", "main")]["records"] == 7 + 1 + 2 + 5 + 4 + 5 + 2
    assert seen[("night-1", "main")]["markers"] == 2
    assert seen[("night-2", "branch")]["records"] == final["records"] > seen[("night-1", "main")]["records"]
    # the branch of night 2 exists on the tables it wrote only; it was compared there
    assert seen[("night-2", "branch")].keys() <= final.keys()
    # after both publishes: every branch and tag left, night 1's tag of records among them
    assert seen["refs"][("records", TAG)] == seen[("night-1", "main")]["records"]


def test_a_snapshot_read_is_that_snapshot_in_duckdb(compared):
    """DuckDB's ``snapshot_from_id`` reads the table as of night 1 (time travel, the way a
    night tag is read), not its current state."""
    wh, seen = compared
    table = wh.load("records")
    night_1 = next(s.snapshot_id for s in table.snapshots()
                   if s.summary.get("kafkalog.run-id") == "night-1")
    con = duckdb_engine.connect()
    old = duckdb_engine.read(con, table, snapshot=night_1)
    assert duckdb_engine.assert_same("records", duckdb_engine.read_pyiceberg(table, snapshot=night_1),
                                     old) == old.num_rows
    assert set(old.column("run_id").to_pylist()) == {"night-1"}
    assert duckdb_engine.read(con, table).num_rows == seen[("night-2", "main")]["records"]


def test_the_comparison_fails_on_any_difference():
    """assert_same is not vacuous: a row missing, a value changed (binary, a timestamp's
    instant, a struct field, a map entry), a column missing or retyped: each is a mismatch;
    the same values with UTC named differently and in another row order are not."""
    import datetime as dt

    utc = dt.timezone.utc
    schema = pa.schema([("b", pa.binary()), ("t", pa.timestamp("us", tz="UTC")),
                        ("s", pa.struct([("x", pa.int32())])), ("m", pa.map_(pa.string(), pa.int64())),
                        ("f", pa.float64())])
    rows = [{"b": b"\x00", "t": dt.datetime(2026, 1, 1, tzinfo=utc), "s": {"x": 1}, "m": [("a", 1)],
             "f": float("nan")},
            {"b": None, "t": None, "s": None, "m": None, "f": 1.0}]
    base = pa.Table.from_pylist(rows, schema)
    other_tz = pa.Table.from_pylist(rows[::-1], schema).cast(pa.schema(
        [f.with_type(pa.timestamp("us", tz="Etc/UTC")) if f.name == "t" else f for f in schema]))
    assert duckdb_engine.assert_same("t", base, other_tz) == 2
    changes = [{"b": b"\x01"}, {"t": dt.datetime(2026, 1, 1, 0, 0, 0, 1, tzinfo=utc)},
               {"s": {"x": 2}}, {"m": [("a", 2)]}, {"f": 0.0}]
    for change in changes:
        broken = pa.Table.from_pylist([{**rows[0], **change}, rows[1]], schema)
        with pytest.raises(duckdb_engine.EngineMismatch, match="only in pyiceberg"):
            duckdb_engine.assert_same("t", base, broken)
    with pytest.raises(duckdb_engine.EngineMismatch, match="2 rows in pyiceberg, 1 in DuckDB"):
        duckdb_engine.assert_same("t", base, base.slice(0, 1))
    with pytest.raises(duckdb_engine.EngineMismatch, match="columns"):
        duckdb_engine.assert_same("t", base, base.drop_columns(["f"]))
    with pytest.raises(duckdb_engine.EngineMismatch, match="types differ"):
        duckdb_engine.assert_same("t", base, base.set_column(4, "f", base.column("f").cast(pa.float32())))


def test_the_extensions_are_the_packages_files_for_this_duckdb():
    import duckdb

    paths = [duckdb_engine.extension_file(n) for n in duckdb_engine.EXTENSIONS]
    assert [p.name for p in paths] == ["avro.duckdb_extension", "iceberg.duckdb_extension"]
    assert all(p.parent.name == f"v{duckdb.__version__}" for p in paths)
    con = duckdb_engine.connect()
    loaded = dict(con.execute("SELECT extension_name, loaded FROM duckdb_extensions() "
                              "WHERE extension_name IN ('avro', 'iceberg')").fetchall())
    assert loaded == {"avro": True, "iceberg": True}


def test_a_table_duckdb_cannot_read_is_a_mismatch_naming_it(tmp_path):
    class Gone:  # a table whose metadata file is not there
        metadata_location = str(tmp_path / "00001-x.metadata.json")

        def refs(self):
            return {}

    with pytest.raises(duckdb_engine.EngineMismatch, match="records@current: DuckDB cannot read it"):
        duckdb_engine.compare_table(duckdb_engine.connect(), Gone(), "records")


def test_a_warehouse_on_s3_reads_the_same_in_duckdb(s3_bucket, s3_catalog):
    """A catalog whose tables live on S3 (the moto server, over HTTP): dq_results as the
    audit writes them and records appended by pyiceberg, read by DuckDB through httpfs and
    an S3 secret (path-style URLs)."""
    import datetime as dt

    from spark_jobs import storage

    cfg = storage.S3Config.from_env()
    wh = Warehouse(f"s3://{s3_bucket}/wh", s3_catalog, s3=cfg)
    at = dt.datetime(2026, 11, 21, 3, 5, tzinfo=dt.timezone.utc)
    wh.replace_run_rows("dq_results", "night-1", pa.Table.from_pylist([
        {"run_id": "night-1", "check": "crc", "topic": "orders", "partition": p, "status": "pass",
         "severity": "warn", "observed": 10 + p, "failed": 0, "details": "{}", "checked_at": at}
        for p in range(3)], schemas.DQ_RESULTS))
    wh.table("records").append(pa.Table.from_pylist([
        {"topic": "orders", "partition": 0, "offset": o, "timestamp": at, "key": b"k\x00",
         "value": None if o == 2 else b"v%d" % o, "headers": [{"key": "h", "value": b"\xff"}],
         "is_transactional": False, "run_id": "night-1", "ingest_dt": "2026-11-21",
         "dt": "2026-11-21"} for o in range(3)], schemas.RECORDS))
    assert wh.load("records").metadata_location.startswith(f"s3://{s3_bucket}/")
    counts = duckdb_engine.compare_warehouse(wh, con=duckdb_engine.connect(cfg.resolved()))
    assert counts == {"dq_results": 3, "records": 3}
