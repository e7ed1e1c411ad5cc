"""Sinks against the log (issue 44): fixture sink tables in each profile's shape, each
planted with one missing offset, one duplicated offset, one aborted record and one offset
the log never held, on a partition that also has a compacted-away gap and records past the
sink's committed position; a clean copy of each; an upsert sink with a stale value and a
deleted key still present.

The source warehouse is decoded by the decode job from segments written here (kafkalog's
writer, as tests/spark_jobs/test_txn_state.py and test_latest_tables.py write them). The
sink tables are Iceberg tables written with pyiceberg in each anchor's own shape:

* ``iceberg-kafka-connect``: apache/iceberg
  kafka-connect/kafka-connect-transforms/src/main/java/org/apache/iceberg/connect/transforms/KafkaMetadataTransform.java
  (commit fe86930dca2a47b7570837e9279bb0eab485148c): ``field_name`` default
  ``_kafka_metadata``, ``nested`` default false: flat ``_kafka_metadata_topic`` (string),
  ``_kafka_metadata_partition`` (int32), ``_kafka_metadata_offset`` (int64),
  ``_kafka_metadata_timestamp`` (optional int64); nested: a struct of topic, partition,
  offset, timestamp under ``_kafka_metadata``;
* ``redpanda``: redpanda-data/redpanda src/v/datalake/table_definition.cc (as mirrored in
  erickirt/redpanda, commit a0034b8624c309b803ed7e125d00f19c86890925): the ``redpanda``
  struct of partition (int), offset (long), timestamp, headers (list of key/value), key
  (binary), timestamp_type (int); the schemaless table's ``value`` (binary);
* ``kafkalog``: this project's ``records`` (spark_jobs/schemas.py), as a DR copy;
* ``columns``: explicit column paths.

Every expectation is the planted offset itself, not the code's output.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from kafkalog.state_writer import internal_record
from kafkalog.writer import SegmentWriter, WriteRecord
from spark_jobs import tables
from spark_jobs.audit.results import read_results
from spark_jobs.reconcile import config as sink_config
from spark_jobs.reconcile import job as reconcile_job
from spark_jobs.reconcile.sink_read import normalize
from spark_jobs.warehouse import Warehouse

from tests.runs import decode

pytestmark = pytest.mark.pipeline

T0 = 1_763_683_200_000  # 2025-11-21T00:00:00Z
NIGHT = "2025-11-21"
GROUP_CONNECTOR = "orders-kc"  # the group is connect-orders-kc
COMMITTED = {0: 26, 1: 5}  # the group's committed offsets of orders-0 and orders-1
#: orders-0 as written below: deliverable offsets, and what is not
COMPACTED = (6, 7)  # a batch 5..8 holding records at 5 and 8 only
ABORTED = (9, 10)  # producer 10's records, ABORT at 11
CONTROL = (11, 22)
PAST_POSITION = (26, 27, 28, 29)
#: what is planted in each sink's copy of orders-0
PLANT_MISSING, PLANT_DUPLICATE, PLANT_ABORTED, PLANT_BEYOND = 14, 17, 9, 11


def rec(i: int, key: bytes | None = None, value: bytes | None = b"") -> WriteRecord:
    return WriteRecord(key if key is not None else f"k{i}".encode(),
                       value if value != b"" else f"v{i}".encode(), timestamp=T0 + i)


def write_log(root):
    """orders-0: 0..4 plain; 5..8 one batch holding 5 and 8 (the cleaner's evidence: fewer
    records than offsets); 9, 10 producer 10's, ABORT at 11; 12..19 plain; 20, 21 producer
    11's, COMMIT at 22; 23..29 plain. orders-1: 0..4 plain. users-0 (upserts): k1 v1, k2
    v2, k1 v1b, k3 v3, k2 tombstone. __consumer_offsets-0: group connect-orders-kc commits
    26 of orders-0 and 5 of orders-1."""
    with SegmentWriter(root / "orders-0", 0) as w:
        w.append([rec(i) for i in range(5)])
        w.append([rec(5), WriteRecord(b"k8", b"v8", timestamp=T0 + 8, offset_delta=3)])
        w.append([rec(9), rec(10)], producer_id=10, producer_epoch=0, base_sequence=0,
                 transactional=True)
        w.append_marker(producer_id=10, producer_epoch=0, commit=False, coordinator_epoch=1,
                        timestamp=T0 + 11)
        w.append([rec(i) for i in range(12, 20)])
        w.append([rec(20), rec(21)], producer_id=11, producer_epoch=0, base_sequence=0,
                 transactional=True)
        w.append_marker(producer_id=11, producer_epoch=0, commit=True, coordinator_epoch=1,
                        timestamp=T0 + 22)
        w.append([rec(i) for i in range(23, 30)])
        assert w.next_offset == 30
    with SegmentWriter(root / "orders-1", 0) as w:
        w.append([rec(i) for i in range(5)])
    with SegmentWriter(root / "users-0", 0) as w:
        w.append([rec(0, b"k1", b"v1"), rec(1, b"k2", b"v2"), rec(2, b"k1", b"v1b"),
                  rec(3, b"k3", b"v3"), rec(4, b"k2", None)])
    with SegmentWriter(root / "__consumer_offsets-0", 0) as w:
        for p, offset in COMMITTED.items():
            w.append([internal_record("offsets", {
                "key": {"type": 1, "data": {"group": f"connect-{GROUP_CONNECTOR}",
                                            "topic": "orders", "partition": p}},
                "value": {"version": 3, "data": {"offset": offset, "leaderEpoch": 0,
                                                 "metadata": "", "commitTimestamp": T0 + 100}}},
                timestamp=T0 + 100)])
    return root


def deliverable(p: int) -> list[int]:
    """The deliverable offsets of orders-p up to the committed position (from the layout
    written above, not from the code)."""
    if p == 1:
        return list(range(5))
    return [o for o in range(COMMITTED[0]) if o not in COMPACTED + ABORTED + CONTROL]


def planted(p: int) -> list[int]:
    """The offsets a planted copy of orders-p holds, one per row."""
    if p == 1:
        return deliverable(1)
    held = [o for o in deliverable(0) if o != PLANT_MISSING]
    return sorted(held + [PLANT_DUPLICATE, PLANT_ABORTED, PLANT_BEYOND])


# ------------------------------------------------------- the sinks' shapes
def kmt_flat(rows):
    return pa.table({
        "id": pa.array([f"row{o}" for _, _, o, _, _ in rows], pa.string()),
        "_kafka_metadata_topic": pa.array([t for t, *_ in rows], pa.string()),
        "_kafka_metadata_partition": pa.array([p for _, p, *_ in rows], pa.int32()),
        "_kafka_metadata_offset": pa.array([o for _, _, o, _, _ in rows], pa.int64()),
        "_kafka_metadata_timestamp": pa.array([T0 + o for _, _, o, _, _ in rows], pa.int64())})


def kmt_nested(rows):
    meta = pa.StructArray.from_arrays(
        [pa.array([t for t, *_ in rows], pa.string()),
         pa.array([p for _, p, *_ in rows], pa.int32()),
         pa.array([o for _, _, o, _, _ in rows], pa.int64()),
         pa.array([T0 + o for _, _, o, _, _ in rows], pa.int64())],
        names=["topic", "partition", "offset", "timestamp"])
    return pa.table({"id": pa.array([f"row{o}" for _, _, o, _, _ in rows], pa.string()),
                     "_kafka_metadata": meta})


def redpanda_shape(rows):
    headers = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    rp = pa.StructArray.from_arrays(
        [pa.array([p for _, p, *_ in rows], pa.int32()),
         pa.array([o for _, _, o, _, _ in rows], pa.int64()),
         pa.array([(T0 + o) * 1000 for _, _, o, _, _ in rows], pa.timestamp("us", tz="UTC")),
         pa.array([[] for _ in rows], headers),
         pa.array([k for *_, k, _ in rows], pa.binary()),
         pa.array([0 for _ in rows], pa.int32())],
        names=["partition", "offset", "timestamp", "headers", "key", "timestamp_type"])
    return pa.table({"redpanda": rp, "value": pa.array([v for *_, v in rows], pa.binary())})


def kafkalog_shape(rows):
    return pa.table({"topic": pa.array([t for t, *_ in rows], pa.string()),
                     "partition": pa.array([p for _, p, *_ in rows], pa.int32()),
                     "offset": pa.array([o for _, _, o, _, _ in rows], pa.int64()),
                     "key": pa.array([k for *_, k, _ in rows], pa.binary()),
                     "value": pa.array([v for *_, v in rows], pa.binary())})


def columns_shape(rows):
    return pa.table({"src_topic": pa.array([t for t, *_ in rows], pa.string()),
                     "src_partition": pa.array([p for _, p, *_ in rows], pa.int64()),
                     "src_offset": pa.array([o for _, _, o, _, _ in rows], pa.int64())})


SHAPES = {
    "kc-flat": (kmt_flat, "iceberg-kafka-connect", {"options": {"connector": GROUP_CONNECTOR}}),
    "kc-nested": (kmt_nested, "iceberg-kafka-connect",
                  {"options": {"connector": GROUP_CONNECTOR, "nested": True}}),
    "redpanda": (redpanda_shape, "redpanda", {"topics": ["orders"], "compare": "key_value"}),
    "kafkalog": (kafkalog_shape, "kafkalog", {"compare": "key_value"}),
    "columns": (columns_shape, "columns", {"columns": {"topic": "src_topic",
                                                       "partition": "src_partition",
                                                       "offset": "src_offset"}}),
}


def log_bytes(wh) -> dict:
    t = tables.read_arrow(str(wh), "records", columns=("topic", "partition", "offset", "key",
                                                       "value"))
    return {(r["topic"], r["partition"], r["offset"]): (r["key"], r["value"]) for r in t.to_pylist()}


def sink_rows(log: dict, held: dict[int, list[int]]):
    """(topic, partition, offset, key, value) per row: the log's bytes where it has the
    offset (a planted offset it lacks: made-up bytes)."""
    out = []
    for p, offsets in held.items():
        for o in offsets:
            k, v = log.get(("orders", p, o), (b"x", b"x"))
            out.append(("orders", p, o, k, v))
    return out


@pytest.fixture(scope="module")
def setup(spark, tmp_path_factory):
    return build(spark, tmp_path_factory.mktemp("reconcile"))


def build(spark, tmp):
    """The source warehouse (decoded by the decode job) and every sink table, in ``tmp``."""
    wh = tmp / "wh"
    decode(spark, write_log(tmp / "snap"), wh, "n1", "--latest-topics", "users", night=NIGHT)
    log = log_bytes(wh)
    from pyiceberg.catalog.sql import SqlCatalog

    props = {"uri": f"sqlite:///{tmp}/sinks.db", "warehouse": f"file://{tmp}/lake"}
    (tmp / "lake").mkdir()
    cat = SqlCatalog("sinks", **props)
    cat.create_namespace("lake")
    entries = []
    for name, (shape, profile, extra) in SHAPES.items():
        for copy, held in (("planted", {0: planted(0), 1: planted(1)}),
                           ("clean", {0: deliverable(0), 1: deliverable(1)})):
            data = shape(sink_rows(log, held))
            table = cat.create_table(f"lake.{name}_{copy}", schema=data.schema)
            half = data.num_rows // 2  # two data files: read file by file
            table.append(data.slice(0, half))
            table.append(data.slice(half))
            entries.append({"name": f"{name}-{copy}", "catalog": {"name": "sinks", "type": "sql", **props},
                            "table": f"lake.{name}_{copy}", "profile": profile,
                            "topics": ["orders*"], **extra})
    upsert = pa.table({"id": ["k1", "k2", "k3"], "payload": ["v1", "v2", "v3"],
                       "_kafka_metadata_topic": ["users"] * 3,
                       "_kafka_metadata_partition": pa.array([0, 0, 0], pa.int32()),
                       "_kafka_metadata_offset": pa.array([0, 1, 3], pa.int64()),
                       "_kafka_metadata_timestamp": pa.array([T0] * 3, pa.int64())})
    cat.create_table("lake.users", schema=upsert.schema).append(upsert)
    entries.append({"name": "users-upsert", "catalog": {"name": "sinks", "type": "sql", **props},
                    "table": "lake.users", "profile": "iceberg-kafka-connect",
                    "topics": ["users"], "mode": "upsert", "key": "id",
                    "columns": {"value": "payload"}, "options": {"connector": "users-kc"}})
    import yaml

    path = tmp / "sinks.yaml"
    path.write_text(yaml.safe_dump({"sinks": entries}))
    return wh, path, tmp


def findings(rows, sink):
    """{(partition, class): [(first, last, offsets)]} of the non-pass classes and the
    counted pass classes of ``sink``'s results."""
    out = {}
    for r in rows:
        if r.details.extras["sink"] != sink:
            continue
        for it in r.details.items:
            out.setdefault((r.partition, it.class_), []).append(
                (it.first_offset, it.last_offset, it.offsets))
    return out


@pytest.mark.timeout(1500)  # eleven sinks, one Spark pass each: ~1 min unloaded
def test_the_command_reconciles_every_profile(spark, setup, capsys):
    wh, path, _ = setup
    code = reconcile_job.main(["--warehouse", str(wh), "--sinks", str(path), "--night", NIGHT,
                               "--run-id", "rec-1"], spark=spark)
    captured = capsys.readouterr()
    out = captured.out
    assert code == reconcile_job.EXIT_FAILED, captured.err[-3000:]
    rows = read_results(str(wh), run_id="rec-1")
    assert {r.check for r in rows} == {"sink_reconcile"}
    passes = {(0, "compacted_away"): [(6, 7, 2)], (0, "not_yet_delivered"): [(26, 29, 4)]}
    for name in SHAPES:
        got = findings(rows, f"{name}-planted")
        want = {**passes,
                (0, "missing"): [(PLANT_MISSING, PLANT_MISSING, 1)],
                (0, "duplicate"): [(PLANT_DUPLICATE, PLANT_DUPLICATE, 1)],
                (0, "aborted_leak"): [(PLANT_ABORTED, PLANT_ABORTED, 1)],
                (0, "beyond_log"): [(PLANT_BEYOND, PLANT_BEYOND, 1)]}
        assert got == want, name
        assert findings(rows, f"{name}-clean") == passes, name
        mine = [r for r in rows if r.details.extras["sink"] == f"{name}-planted"]
        assert sorted((r.topic, r.partition, r.status) for r in mine) == \
            [("orders", 0, "fail"), ("orders", 1, "pass")]
        zero = next(r for r in mine if r.partition == 0)
        assert zero.details.extras["window"] == {"first_offset": 0, "last_offset": 25}
        assert zero.observed == len(deliverable(0))
        assert zero.details.extras["delivered"] == len(deliverable(0)) - 1
        assert f"sink {name}-planted: fail: delivered {len(deliverable(0)) + 5 - 1}, missing 1, " \
               "duplicates 1, leaks 1, lag 4" in out
        clean = [r for r in rows if r.details.extras["sink"] == f"{name}-clean"]
        assert {r.status for r in clean} == {"pass"}
    # the committed position is the connector's group; redpanda's is its highest offset
    kc = next(r for r in rows if r.details.extras["sink"] == "kc-flat-planted" and r.partition == 0)
    assert kc.details.extras["committed_offset"] == COMMITTED[0]
    assert "connect-orders-kc" in kc.details.extras["position"]
    rp = next(r for r in rows if r.details.extras["sink"] == "redpanda-planted" and r.partition == 0)
    assert rp.details.extras["committed_offset"] is None
    assert "highest offset" in rp.details.extras["position"]
    # the upsert sink: exactly the stale value (k1) and the deleted key (k2)
    up = findings(rows, "users-upsert")
    assert up == {(0, "stale_value"): [(2, 2, 1)], (0, "deleted_key_present"): [(4, 4, 1)]}
    assert "sink users-upsert: fail: upsert" in out


def test_configuration_errors_are_one_line_and_exit_2(spark, setup, capsys, tmp_path):
    import yaml

    wh, path, _ = setup
    doc = yaml.safe_load(path.read_text())
    cases = {
        "unknown profile": ({**doc["sinks"][0], "profile": "flink"}, "unknown profile 'flink'"),
        "missing column": ({**doc["sinks"][0], "options": {"nested": True}},
                           "has no column '_kafka_metadata.topic'"),
        "unreadable catalog": ({**doc["sinks"][0], "catalog": "no-such-catalog"},
                               "catalog no-such-catalog does not load"),
    }
    for what, (entry, words) in cases.items():
        bad = tmp_path / f"{what.replace(' ', '_')}.yaml"
        bad.write_text(yaml.safe_dump({"sinks": [entry]}))
        code = reconcile_job.main(["--warehouse", str(wh), "--sinks", str(bad)], spark=spark)
        err = capsys.readouterr().err.strip()
        assert code == 2, what
        assert len(err.splitlines()) == 1 and words in err and "Traceback" not in err, (what, err)
    assert reconcile_job.main(["--warehouse", str(wh)], spark=spark) == 2  # --sinks missing


def test_profiles_follow_the_anchors():
    """The column paths each profile resolves to (the anchors' sources, module docstring)."""
    kc = sink_config.resolve("s", "iceberg-kafka-connect", {}, ("t",), {})
    assert (kc.topic, kc.partition, kc.offset, kc.timestamp, kc.group) == (
        "_kafka_metadata_topic", "_kafka_metadata_partition", "_kafka_metadata_offset",
        "_kafka_metadata_timestamp", "connect-s")
    nested = sink_config.resolve("s", "iceberg-kafka-connect",
                                 {"nested": True, "field_name": "meta", "connector": "c"}, ("t",), {})
    assert (nested.topic, nested.offset, nested.group) == ("meta.topic", "meta.offset", "connect-c")
    rp = sink_config.resolve("s", "redpanda", {}, ("orders",), {})
    assert (rp.topic, rp.topic_value, rp.partition, rp.offset, rp.key, rp.value, rp.group) == (
        None, "orders", "redpanda.partition", "redpanda.offset", "redpanda.key", "value", None)
    with pytest.raises(sink_config.SinkConfigError, match="one topic"):
        sink_config.resolve("s", "redpanda", {}, ("orders*",), {})
    with pytest.raises(sink_config.SinkConfigError, match="Tableflow"):
        sink_config.resolve("s", "columns", {}, ("t",), {"topic": "t"})
    with pytest.raises(sink_config.SinkConfigError, match="mode upsert needs 'key'"):
        sink_config.parse({"sinks": [{"name": "a", "catalog": "c", "table": "t",
                                      "profile": "kafkalog", "topics": ["x"], "mode": "upsert"}]})
    # the nested shape normalizes to the same place as the flat one
    rows = [("orders", 0, 3, b"k", b"v")]
    flat = sink_config.parse({"sinks": [{"name": "f", "catalog": "c", "table": "t",
                                         "profile": "iceberg-kafka-connect", "topics": ["o*"]}]})[0]
    nest = sink_config.parse({"sinks": [{"name": "n", "catalog": "c", "table": "t",
                                         "profile": "iceberg-kafka-connect", "topics": ["o*"],
                                         "options": {"nested": True}}]})[0]
    assert normalize(kmt_flat(rows), flat).to_pylist() == normalize(kmt_nested(rows), nest).to_pylist()
    assert normalize(kmt_flat(rows), flat).to_pylist()[0]["offset"] == 3


def test_the_example_file_loads_and_the_default_configures_none():
    sinks = sink_config.load(sink_config.EXAMPLE_PATH)
    assert sinks and all(s.columns is not None for s in sinks)
    assert sink_config.load() == []  # the nightly audit's default: no sink, no work


def test_a_sink_grades_its_own_classes():
    from spark_jobs.audit.policy import Policy

    entry = {"name": "a", "catalog": "c", "table": "t", "profile": "kafkalog", "topics": ["x"]}
    sink = sink_config.parse({"sinks": [{**entry, "severity": {"duplicate": "warn"}}]})[0]
    policy = Policy.load()
    assert sink.grade(policy, "x", "duplicate") == "warn"
    assert sink.grade(policy, "x", "missing") == policy.severity("x", "sink_reconcile", "missing") == "fail"
    for bad, words in (({"dupe": "warn"}, "severity.dupe: not a class"),
                       ({"missing": "ignore"}, "'ignore' is not one of pass, warn, fail")):
        with pytest.raises(sink_config.SinkConfigError, match=words):
            sink_config.parse({"sinks": [{**entry, "severity": bad}]})


def sinks_file(setup, names) -> str:
    """A sinks file of ``names`` only (the fixture's entries)."""
    import yaml

    _, path, tmp = setup
    entries = [e for e in yaml.safe_load(path.read_text())["sinks"] if e["name"] in names]
    out = tmp / f"only-{'-'.join(names)}.yaml"
    out.write_text(yaml.safe_dump({"sinks": entries}))
    return str(out)


def test_the_nightly_audit_reconciles_the_configured_sinks(spark, setup, capsys):
    """The audit's sinks family and the command are one implementation: the audit of run n1
    (its night, its snapshots) writes the command's rows, under the run's id, beside its
    other checks; the Data Docs agree (great-expectations fails sink_reconcile too)."""
    from spark_jobs import check_quality

    wh, _, _ = setup
    path = sinks_file(setup, ("kc-flat-planted", "kc-flat-clean"))
    assert reconcile_job.main(["--warehouse", str(wh), "--sinks", path, "--night", NIGHT,
                               "--run-id", "rec-2"], spark=spark) == reconcile_job.EXIT_FAILED
    capsys.readouterr()
    code = check_quality.main(["--warehouse", str(wh), "--run-id", "n1", "--sinks", path],
                              spark=spark)
    captured = capsys.readouterr()
    assert code == check_quality.EXIT_CHECKS_FAILED, captured.err[-3000:]
    every = read_results(str(wh), run_id="n1")
    audit_rows = [r for r in every if r.check == "sink_reconcile"]
    assert {r.check for r in every} > {"sink_reconcile", "crc", "offset_gaps"}

    def same(rows):
        return sorted((r.details.extras["sink"], r.topic, r.partition, r.status, r.severity,
                       r.observed, r.failed, r.details.to_json()) for r in rows)

    assert same(audit_rows) == same(read_results(str(wh), run_id="rec-2"))
    assert len(audit_rows) == 4  # 2 sinks x orders-0, orders-1
    got = findings(audit_rows, "kc-flat-planted")
    assert got[(0, "duplicate")] == [(PLANT_DUPLICATE, PLANT_DUPLICATE, 1)]
    assert got[(0, "missing")] == [(PLANT_MISSING, PLANT_MISSING, 1)]
    assert "check_quality: sink kc-flat-planted: fail: delivered" in captured.out
    assert "FAIL sink_reconcile orders-0 (sink kc-flat-planted)" in captured.err
    assert "great-expectations: " in captured.out and "sink_reconcile" in \
        captured.out.split("great-expectations: ")[1].splitlines()[0]
    # a configuration error is the audit's one cause line, exit 2, before any Spark work
    bad = sinks_file(setup, ("kc-flat-planted",)) + ".bad"
    with open(bad, "w") as f:
        f.write("sinks:\n  - name: x\n")
    assert check_quality.main(["--warehouse", str(wh), "--run-id", "n1", "--sinks", bad],
                              spark=spark) == 2
    assert "sink x: needs 'catalog'" in capsys.readouterr().err


def test_no_sink_configured_is_no_row_and_no_work():
    """The sinks family loads nothing and touches no Spark session, warehouse or table where
    no sink is configured (the default file): no sink_reconcile row."""
    from types import SimpleNamespace

    from spark_jobs.audit import families
    from spark_jobs.audit.registry import FAMILIES

    class Untouchable:
        def __getattr__(self, name):
            raise AssertionError(f"touched {name}")

    family = next(f for f in FAMILIES if f.name == "sinks")
    for configured in (None, reconcile_job.Sinks(tuple(sink_config.load()))):
        run = SimpleNamespace(sinks=configured, spark=Untouchable(), wh=Untouchable(),
                              snapshots=Untouchable(), policy=Untouchable())
        loaded = family.load(run, {})
        assert loaded == {} and family.results(run, loaded) == []
        units = {("orders", 0): {"batches": 1}}
        family.places(run, loaded, units, family.checks)
        assert units == {("orders", 0): {"batches": 1}}
    assert families.SINKS in families.NOT_INTERNAL


def test_spark_reads_the_files_only_where_the_schema_history_allows_and_both_readers_agree(
        spark, setup):
    """Spark's Parquet reader reads a sink's files where every column read kept its name,
    field id and type through the table's schema history (and the files are local): the same
    rows as the FileIO reader for every profile's shape. A column renamed and renamed back, a
    promoted type, a file on an object store: the FileIO reader."""
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.types import LongType

    from spark_jobs.reconcile import sink_read

    _, path, tmp = setup
    for sink in sink_config.load(str(path)):
        if sink.name.endswith("-clean"):
            continue
        table = sink_read.open_table(sink)
        paths = sink_read.planned_files(sink, table, ["orders", "users"])
        schema = sink_read.spark_schema(sink, table, paths)
        assert schema is not None and len(paths) >= 1, sink.name
        got = sink_read.read_by_spark(spark, sink, paths, schema).collect()
        want = sink_read.read_by_fileio(spark, sink, table, paths).collect()
        assert sorted(got, key=repr) == sorted(want, key=repr) and got, sink.name
    kc = next(s for s in sink_config.load(str(path)) if s.name == "kc-flat-planted")
    cat = SqlCatalog("sinks", **{k: v for k, v in kc.catalog.items() if k != "name"})
    data = kmt_flat([("orders", 0, o, b"", b"") for o in range(3)])
    renamed = cat.create_table("lake.renamed", schema=data.schema)
    renamed.append(data)
    with renamed.update_schema() as u:
        u.rename_column("_kafka_metadata_offset", "offset_then")
    with renamed.update_schema() as u:
        u.rename_column("offset_then", "_kafka_metadata_offset")
    promoted = cat.create_table("lake.promoted", schema=data.schema)
    promoted.append(data)
    with promoted.update_schema() as u:
        u.update_column("_kafka_metadata_partition", LongType())
    for name in ("renamed", "promoted"):
        sink = sink_config.parse({"sinks": [{**{k: getattr(kc, k) for k in ("name", "catalog",
                                                                             "profile")},
                                             "table": f"lake.{name}", "topics": ["orders"]}]})[0]
        table = sink_read.open_table(sink)
        paths = sink_read.planned_files(sink, table, ["orders"])
        assert sink_read.spark_schema(sink, table, paths) is None, name
        rows = sink_read.read_sink(spark, sink, table, ["orders"]).collect()
        assert sorted(r.offset for r in rows) == [0, 1, 2], name
    table = sink_read.open_table(kc)
    assert sink_read.spark_schema(kc, table, ["s3://bucket/lake/data/a.parquet"]) is None
