"""The data-quality audit (spark_jobs/check_quality.py, spark_jobs/audit, expectations/).

Staged runs are made the way the pipeline makes them: segments written with
kafkalog.writer (compaction gaps, transactions and markers, LogAppendTime,
delete horizons, damaged bytes), decoded with kafkalog.decode, laid out as
docs/tables.md says by :func:`stage` below. Each fault is injected in its own
topic, so one audit run shows which check caught which fault.
"""

from __future__ import annotations

import datetime as dt
import glob
import io
import json
import os
import re

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import kafkalog
from kafkalog.writer import WriteRecord
from spark_jobs import schemas, storage, tables
from spark_jobs.warehouse import Warehouse, branch_name, run_files_prefix
from spark_jobs.audit import checks as qc
from spark_jobs.audit import context, crc, offsets, registry, timestamps
from spark_jobs.audit import records as record_checks
from spark_jobs.audit.policy import Policy

from tests.runs import decode, dq_rows
from tests.segments import CORPUS, CORPUS_DIR
from tests.snapshots import T0, recs, write_segments

pytestmark = pytest.mark.pipeline

EARLIER = dt.datetime(2025, 11, 20, tzinfo=dt.timezone.utc)
NOW = dt.datetime(2025, 11, 21, 6, tzinfo=dt.timezone.utc)


# ------------------------------------------------------------------ staging
def decode_partition(logdir, topic: str, partition: int, run_id: str, *, ingested_at=NOW,
                     snapshot="s3://snap/2025-11-21") -> dict[str, pa.Table]:
    """Decode every .log of ``logdir`` into the five tables of docs/tables.md."""
    out = {n: [] for n in ("records", "batches", "markers", "findings", "ledger")}
    for name in sorted(os.listdir(logdir)):
        if not name.endswith(".log"):
            continue
        path = os.path.join(logdir, name)
        base = int(name[:20])
        uri = f"{snapshot}/{topic}-{partition}/{name}"
        t = kafkalog.decode(path)
        n_rows = {k: getattr(t, k).num_rows for k in ("records", "batches", "markers", "findings")}

        def lineage(table, schema):
            n = table.num_rows
            cols = {c: table.column(c) for c in table.column_names}
            cols["partition"] = pa.array([partition] * n, pa.int32())
            cols["segment"] = pa.array([uri] * n, pa.string())
            cols["segment_base_offset"] = pa.array([base] * n, pa.int64())
            cols["run_id"] = pa.array([run_id] * n, pa.string())
            cols["topic"] = pa.array([topic] * n, pa.string())
            if "raw" in schema.names and "raw" not in cols:
                cols["raw"] = pa.nulls(n, pa.binary())
            schema = pa.schema([f for f in schema if f.name in cols])  # records: dt comes later
            return pa.table({f.name: pc.cast(cols[f.name], f.type) for f in schema}, schema=schema)

        records = t.records.filter(pc.field("crc_valid"))
        out["records"].append(lineage(records, schemas.RECORDS))
        out["batches"].append(lineage(t.batches, schemas.BATCHES))
        out["markers"].append(lineage(t.markers, schemas.MARKERS))
        out["findings"].append(lineage(t.findings, schemas.FINDINGS))
        offsets = t.batches.column("last_offset").to_pylist()
        firsts = t.batches.column("base_offset").to_pylist()
        out["ledger"].append(pa.Table.from_pylist([{
            "run_id": run_id, "segment": uri, "topic": topic, "partition": partition,
            "segment_base_offset": base, "object_size": os.path.getsize(path), "etag": None,
            "mtime": ingested_at, "byte_start": 0, "byte_end": os.path.getsize(path),
            "end_position": None, "first_offset": min(firsts) if firsts else None,
            "last_offset": max(offsets) if offsets else None, "last_batch_position": None,
            "last_batch_crc": None, "records": n_rows["records"], "batches": n_rows["batches"],
            "findings": n_rows["findings"], "action": "decoded", "ingested_at": ingested_at,
        }], schema=schemas.LEDGER))
    tables = {k: pa.concat_tables(v) for k, v in out.items()}
    tables["topic"] = topic
    return tables


def skipped_segment(part: dict, uri: str, base: int, action: str = "unchanged") -> dict:
    """``part`` (a :func:`decode_partition` result) with a ledger row for a segment the
    run listed but did not decode, as the decode job writes one for a segment an
    earlier run ingested whole (``unchanged``: no offsets, no rows in the other tables)."""
    row = part["ledger"].to_pylist()[0]
    row.update(segment=uri, segment_base_offset=base, byte_start=0, first_offset=None,
               last_offset=None, records=0, batches=0, findings=0, action=action)
    part["ledger"] = pa.concat_tables([part["ledger"],
                                       pa.Table.from_pylist([row], schema=schemas.LEDGER)])
    return part


def stage(root, run_id: str, parts: list[dict], *, published: bool = False) -> None:
    """Commit decoded partitions to run ``run_id``'s branch of the warehouse ``root``
    (a root path: its embedded catalog; or an Warehouse), and publish them
    with ``published``."""
    wh = root if isinstance(root, Warehouse) else Warehouse(str(root))
    wh.begin_run(run_id, reset=True)
    prefix = run_files_prefix(run_id)
    files = {n: [] for n in schemas.DECODE_TABLES}

    def put(name, i, partition: dict, table):
        schema = schemas.TABLES[name]
        for col, value in partition.items():
            if col not in table.column_names:
                table = table.append_column(col, pa.array([value] * table.num_rows, pa.string()))
        for f in schema:  # columns a Schema Registry fills (records' value columns): null here
            if f.name not in table.column_names:
                table = table.append_column(f.name, pa.nulls(table.num_rows, f.type))
        folder = "/".join(f"{k}={v}" for k, v in partition.items())
        uri = f"{wh.data_root(name)}/{folder + '/' if folder else ''}{prefix}{i}.parquet"
        store, key = storage.open_object(uri, wh.s3)
        buf = io.BytesIO()
        pq.write_table(table.select(schema.names).cast(schema), buf)
        store.write(key, buf.getvalue())
        files[name].append(uri)

    def values(name, **given):
        """The table's partition values (schemas.PARTITIONS), in order."""
        return {col: given[col] for col in schemas.PARTITIONS[name]}

    for i, p in enumerate(parts):
        topic = p["topic"]
        at = p["ledger"].column("ingested_at")[0].as_py()
        ingest = {"ingest_dt": at.astimezone(dt.timezone.utc).date().isoformat()}
        for name in ("batches", "markers", "findings"):
            put(name, i, values(name, topic=topic, **ingest), p[name])
        put("ledger", f"{topic}-{i}", {}, p["ledger"])
        records = p["records"]
        days = [("none" if ts is None else ts.strftime("%Y-%m-%d"))
                for ts in records.column("timestamp").to_pylist()]
        for day in sorted(set(days)):
            mask = pa.array([d == day for d in days])
            put("records", f"{i}-{day}", values("records", topic=topic, dt=day, **ingest),
                records.filter(mask))
    for name, uris in files.items():
        wh.commit_files(name, run_id, uris)
    if published:
        wh.publish(run_id)


def skip_to(offset):
    """What the cleaner leaves when it drops whole batches: the next offset jumps."""
    return lambda w: w.append_raw(b"", next_offset=offset)


# -------------------------------------------------------------- scenarios
def legit_parts(tmp, run_id):
    """Topics whose gaps are all legitimate (plus one warning: a missing segment)."""
    parts = []

    def compact(w):
        w.append(recs(3))                                          # 0..2
        w.append([WriteRecord(b"a", b"1", offset_delta=0, timestamp=T0 + 5000),
                  WriteRecord(b"b", None, offset_delta=4, timestamp=T0 + 5000),
                  WriteRecord(b"c", b"", offset_delta=9, timestamp=T0 + 5000)])  # 3, 7, 12 of 3..12
        skip_to(16)(w)                                             # batches 13..15 cleaned away
        w.append(recs(2, T0 + 9000))                               # 16..17
    parts.append(decode_partition(write_segments(tmp / "compact-0", [(0, compact)]),
                                  "compact", 0, run_id))

    def txn(w):
        w.append(recs(2))                                          # 0..1
        w.append(recs(2, T0 + 2000), producer_id=7, producer_epoch=0, base_sequence=0,
                 transactional=True)                               # 2..3
        w.append_marker(producer_id=7, producer_epoch=0, commit=True, timestamp=T0 + 4000)  # 4
        w.append(recs(2, T0 + 5000))                               # 5..6
        skip_to(9)(w)                                              # producer 8's aborted 7..8, cleaned
        w.append_marker(producer_id=8, producer_epoch=0, commit=False, timestamp=T0 + 9000)  # 9
        w.append(recs(1, T0 + 10000))                              # 10
    parts.append(decode_partition(write_segments(tmp / "txn-0", [(0, txn)]), "txn", 0, run_id))

    parts.append(decode_partition(write_segments(tmp / "boundary-0", [
        (20, lambda w: w.append(recs(5, T0 + 20000))),             # 20..24 (0..5 in the previous run)
        (25, lambda w: w.append(recs(5, T0 + 25000))),             # 25..29
        (40, lambda w: w.append(recs(5, T0 + 40000))),             # 40..44: segment 30 not copied
    ]), "boundary", 0, run_id))

    # the demo's night 2 (demo/data.py): segment 0 of payments-0/-1 is
    # unchanged since the previous run (skipped: no batches in this run); payments-1's
    # copy misses the segment 15..24 (planted), payments-0's next segment is adjacent
    for partition, bases in ((0, [15]), (1, [25])):
        d = write_segments(tmp / f"payments-{partition}", [
            (base, lambda w, base=base: w.append(recs(10, T0 + base * 1000))) for base in bases])
        parts.append(skipped_segment(
            decode_partition(d, "payments", partition, run_id), f"s3://snap/2025-11-21/"
            f"payments-{partition}/{0:020d}.log", 0))

    def cleaned_head(w):
        skip_to(8)(w)                                              # the cleaner removed 5..7
        w.append([WriteRecord(b"a", b"1", offset_delta=0, timestamp=T0 + 8000),
                  WriteRecord(b"b", b"2", offset_delta=2, timestamp=T0 + 8000),
                  WriteRecord(b"c", b"3", offset_delta=4, timestamp=T0 + 8000)])  # 8, 10, 12 of 8..12
        w.append(recs(2, T0 + 13_000))                             # 13..14
    parts.append(decode_partition(write_segments(tmp / "cleanhead-0", [
        (0, lambda w: w.append(recs(5))),                          # 0..4
        (5, cleaned_head)]), "cleanhead", 0, run_id))

    def horizon(w):
        # a cleaned batch whose baseTimestamp is the delete horizon, a day after its records
        w.append(recs(3), delete_horizon_ms=T0 + 86_400_000)
        w.append(recs(2, T0 + 3000))
        w.append(recs(2, T0 + 60_000), timestamp_type="LogAppendTime", log_append_time=T0 + 70_000)
        w.append(recs(2, T0 + 50_000), timestamp_type="LogAppendTime", log_append_time=T0 + 80_000)
    parts.append(decode_partition(write_segments(tmp / "horizon-0", [(0, horizon)]),
                                  "horizon", 0, run_id))
    return parts


def previous_run(tmp, run_id):
    """The published run before: boundary-0 up to offset 5; segment 0 (0..14) of
    payments-0 and payments-1 (the demo's night 1)."""
    return [decode_partition(write_segments(tmp / "prev-boundary-0", [
        (0, lambda w: w.append(recs(6)))]), "boundary", 0, run_id, ingested_at=EARLIER,
        snapshot="s3://snap/2025-11-20")] + [
        decode_partition(write_segments(tmp / f"prev-payments-{p}", [
            (0, lambda w: [w.append(recs(5)), w.append(recs(10, T0 + 5000))])]),
            "payments", p, run_id, ingested_at=EARLIER, snapshot="s3://snap/2025-11-20")
        for p in (0, 1)]


def faulty_parts(tmp, run_id):
    """One injected fault per topic."""
    parts = []

    d = write_segments(tmp / "crc-0", [(0, lambda w: [w.append(recs(3)), w.append(recs(3, T0 + 3000)),
                                                      w.append(recs(3, T0 + 6000))])])
    log = os.path.join(d, "00000000000000000000.log")
    data = bytearray(open(log, "rb").read())
    second = list(kafkalog.iter_batches(bytes(data)))[1]
    data[second.position + second.size - 2] ^= 0x20                # inside its last record
    open(log, "wb").write(bytes(data))
    parts.append(decode_partition(d, "crc", 0, run_id))

    parts.append(decode_partition(write_segments(tmp / "gap-0", [(0, lambda w: [
        w.append(recs(5)), skip_to(10)(w), w.append(recs(5, T0 + 10000))])]), "gap", 0, run_id))

    parts.append(decode_partition(write_segments(tmp / "lat-0", [(0, lambda w: [
        w.append(recs(2), timestamp_type="LogAppendTime", log_append_time=T0 + 10_000),
        w.append(recs(2), timestamp_type="LogAppendTime", log_append_time=T0 + 4_000)])]),
        "lat", 0, run_id))

    parts.append(decode_partition(write_segments(tmp / "ct-0", [(0, lambda w: [
        w.append([WriteRecord(b"k", b"v", timestamp=T0 + t) for t in (0, 1000, 500, 2000)]),
        w.append([WriteRecord(b"k", b"v", timestamp=T0 - 8000)])])]), "ct", 0, run_id))

    parts.append(decode_partition(write_segments(tmp / "maxts-0", [(0, lambda w: [
        w.append(recs(3)), w.append(recs(3, T0 + 3000), max_timestamp=T0 + 99_000)])]),
        "maxts", 0, run_id))

    p = decode_partition(write_segments(tmp / "dup-0", [(0, lambda w: w.append(recs(4)))]),
                         "dup", 0, run_id)
    p["records"] = pa.concat_tables([p["records"], p["records"].slice(2, 1)])
    parts.append(p)

    p = decode_partition(write_segments(tmp / "div-0", [(0, lambda w: w.append(recs(4)))]),
                         "div", 0, run_id)
    seg = p["batches"].column("segment")[0].as_py()
    p["findings"] = pa.concat_tables([p["findings"], pa.Table.from_pylist([{
        "partition": 0, "kind": "divergence", "position": 0, "end": None,
        "message": f"offset 2 differs between {seg} and s3://snap/2025-11-20/div-0/00000000000000000000.log",
        "base_offset": 2, "last_offset": 2, "bytes": None, "raw": None, "segment": seg,
        "segment_base_offset": 0, "run_id": run_id, "topic": "div"}], schema=schemas.FINDINGS)])
    parts.append(p)

    def torn(directory, base, cut):
        log = os.path.join(directory, f"{base:020d}.log")
        data = open(log, "rb").read()
        open(log, "wb").write(data[: len(data) - cut])

    d = write_segments(tmp / "tail-0", [
        (0, lambda w: [w.append(recs(3)), w.append(recs(3, T0 + 3000))]),   # 0..5, 3..5 torn
        (6, lambda w: w.append(recs(3, T0 + 6000)))])
    torn(d, 0, 10)
    parts.append(decode_partition(d, "tail", 0, run_id))

    d = write_segments(tmp / "livetail-0", [
        (0, lambda w: w.append(recs(3))),
        (3, lambda w: [w.append(recs(3, T0 + 3000)), w.append(recs(3, T0 + 6000))])])
    torn(d, 3, 10)                                                  # the newest segment: a live tail
    parts.append(decode_partition(d, "livetail", 0, run_id))
    return parts


POLICY_OVERRIDES = """
topics:
  ct:
    checks:
      create_time: {tolerance_ms: 1000}
"""


@pytest.fixture(scope="module")
def test_policy(tmp_path_factory):
    import yaml

    from spark_jobs.audit.policy import DEFAULT_PATH

    doc = yaml.safe_load(open(DEFAULT_PATH))
    doc["topics"].update(yaml.safe_load(POLICY_OVERRIDES)["topics"])
    path = tmp_path_factory.mktemp("policy") / "policy.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def clean_parts(tmp, run_id):
    """Nothing wrong: two adjacent segments, a committed transaction, LogAppendTime."""
    def first(w):
        w.append(recs(3), codec="zstd")                                        # 0..2
        w.append(recs(2, T0 + 3000), producer_id=3, producer_epoch=0, base_sequence=0,
                 transactional=True)                                           # 3..4
        w.append_marker(producer_id=3, producer_epoch=0, commit=True, timestamp=T0 + 5000)  # 5

    def second(w):
        w.append(recs(2, T0 + 6000), timestamp_type="LogAppendTime", log_append_time=T0 + 7000)
        w.append(recs(2, T0 + 8000), timestamp_type="LogAppendTime", log_append_time=T0 + 9000)
    return [decode_partition(write_segments(tmp / "clean-0", [(0, first), (6, second)]),
                             "clean", 0, run_id)]


def staged_tables(spark, W, run_id):
    from spark_jobs.audit import inputs
    from spark_jobs.tables import read_table

    wh = Warehouse(W)
    tables = inputs.load_tables(spark, wh, run_id, inputs.audited_snapshots(wh, run_id))
    published = read_table(spark, wh, "ledger")
    prior = context.prior_ends(published, tables["ledger"], run_id)
    return tables, prior, context.listed_segments(tables["ledger"], published, run_id)


def observed(spark, W, run_id, policy):
    tables, prior, listed = staged_tables(spark, W, run_id)
    obs, _ = qc.run_checks(tables, policy, run_id, prior=prior, listed=listed)
    return sorted(tuple(r) for r in obs.select(
        "topic", "check", "class", "first_offset", "last_offset", "offsets", "value", "status").collect())


@pytest.fixture(scope="module")
def legit_w(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("legit")
    W = str(tmp / "w")
    stage(W, "prev", previous_run(tmp, "prev"), published=True)
    stage(W, "nightly 2025-11-21", legit_parts(tmp, "nightly 2025-11-21"))
    return W


@pytest.fixture(scope="module")
def faulty_w(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("faulty")
    W = str(tmp / "w")
    stage(W, "faulty", faulty_parts(tmp, "faulty"))
    return W


# ------------------------------------------------------------------ checks
def test_legitimate_gaps_are_explained(spark, legit_w):
    got = observed(spark, legit_w, "nightly 2025-11-21", Policy.load())
    assert got == sorted([
        # topic, check, class, first, last, offsets, value, status
        ("boundary", "offset_gaps", "retention", 6, 19, 14, None, "pass"),
        ("boundary", "offset_gaps", "missing_segment", 30, 39, 10, None, "warn"),
        ("boundary", "record_gaps", "batch_gap", 30, 39, 10, None, "pass"),
        # the cleaner removed the head of segment 5 (not unreadable_bytes: it has batches)
        ("cleanhead", "offset_gaps", "compaction", 5, 7, 3, None, "pass"),
        ("cleanhead", "record_gaps", "batch_gap", 5, 7, 3, None, "pass"),
        ("cleanhead", "record_gaps", "compaction", 9, 9, 1, None, "pass"),
        ("cleanhead", "record_gaps", "compaction", 11, 11, 1, None, "pass"),
        ("compact", "offset_gaps", "compaction", 13, 15, 3, None, "pass"),
        ("compact", "record_gaps", "compaction", 4, 6, 3, None, "pass"),
        ("compact", "record_gaps", "compaction", 8, 11, 4, None, "pass"),
        ("compact", "record_gaps", "batch_gap", 13, 15, 3, None, "pass"),
        # the demo's planted case: after segment 0 (unchanged, not decoded by this run),
        # not after the previous run's end (no retention); payments-0 has no gap
        ("payments", "offset_gaps", "missing_segment", 15, 24, 10, None, "warn"),
        ("txn", "offset_gaps", "aborted_txn", 7, 8, 2, None, "pass"),
        # producer 8's ABORT at 9 ends no batch the log still holds (the cleaner removed its
        # 7..8): klog's empty transaction, counted (issue 45, value = the producer id)
        ("txn", "empty_transaction", "empty", 9, 9, 1, 8, "pass"),
        ("txn", "record_gaps", "control_marker", 4, 4, 1, None, "pass"),
        ("txn", "record_gaps", "control_marker", 7, 9, 1, None, "pass"),
        ("txn", "record_gaps", "batch_gap", 7, 9, 2, None, "pass"),
        # horizon: the delete-horizon batch's first_timestamp (a day later) is not read as a time
    ])


def test_each_fault_is_caught(spark, faulty_w, test_policy):
    got = observed(spark, faulty_w, "faulty", Policy.load(test_policy))
    assert got == sorted([
        ("crc", "crc", "crc_mismatch", 3, 5, 1, None, "fail"),
        ("crc", "record_gaps", "excluded_batch", 3, 5, 3, None, "pass"),
        ("ct", "create_time", "regression", 2, 2, 1, 500, "warn"),          # within 1000 ms
        ("ct", "create_time", "beyond_tolerance", 4, 4, 1, 10000, "fail"),
        ("div", "divergence", "divergence", 2, 2, 1, None, "fail"),
        ("dup", "duplicate_offsets", "duplicate", 2, 2, 2, None, "fail"),
        ("gap", "offset_gaps", "unexplained", 5, 9, 5, None, "fail"),
        ("gap", "record_gaps", "batch_gap", 5, 9, 5, None, "pass"),
        ("lat", "log_append_time", "regression", 2, 3, 1, 6000, "fail"),
        ("livetail", "truncated_tail", "active_segment", None, None, 1, 86, "warn"),
        ("maxts", "max_timestamp", "mismatch", 3, 5, 1, 94000, "fail"),
        ("tail", "offset_gaps", "unreadable_bytes", 3, 5, 3, None, "fail"),
        ("tail", "record_gaps", "batch_gap", 3, 5, 3, None, "pass"),
        ("tail", "truncated_tail", "truncated_tail", None, None, 1, 86, "fail"),
    ])


def test_crc_failure_names_where(spark, faulty_w):
    tables, _, _ = staged_tables(spark, faulty_w, "faulty")
    got = [tuple(r) for r in crc.crc_failures(tables["batches"], tables["findings"])
           .select("topic", "partition", "segment", "position", "first_offset").collect()]
    assert got == [("crc", 0, "s3://snap/2025-11-21/crc-0/00000000000000000000.log", 96, 3)]


def test_record_count_against_last_offset_delta(spark):
    """A batch that declares more records than its offsets span, and one whose
    records are not all in the table."""
    b = spark.createDataFrame([
        ("t", 0, 0, 4, 9, True, "ok", False, "s", 0),      # 9 records in 5 offsets
        ("t", 0, 5, 9, 5, True, "ok", False, "s", 100),    # 5 declared, 4 in the table
    ], "topic string, partition int, base_offset long, last_offset long, record_count int, "
       "crc_valid boolean, status string, is_control boolean, segment string, position long")
    r = spark.createDataFrame([("t", 0, o, 0 if o < 5 else 5) for o in (0, 1, 2, 3, 4, 5, 6, 7, 8)],
                              "topic string, partition int, offset long, batch_base_offset long")
    got = sorted(tuple(x) for x in record_checks.record_counts(r, b).select(
        "class", "first_offset", "last_offset", "offsets").collect())
    assert got == [("count_exceeds_span", 0, 4, 4), ("records_missing", 0, 4, 4),
                   ("records_missing", 5, 9, 1)]


def test_windows_are_per_partition(spark):
    """A regression across two partitions is not a regression."""
    r = spark.createDataFrame([
        ("t", 0, 0, dt.datetime(2025, 11, 21, 0, 0, 9), "CreateTime", "s0", 0),
        ("t", 1, 0, dt.datetime(2025, 11, 21, 0, 0, 1), "CreateTime", "s1", 0),
        ("t", 1, 1, dt.datetime(2025, 11, 21, 0, 0, 2), "CreateTime", "s1", 0),
        ("u", 0, 0, dt.datetime(2025, 11, 21, 0, 0, 5), "CreateTime", "s2", 0),
    ], "topic string, partition int, offset long, timestamp timestamp, timestamp_type string, "
       "segment string, batch_position long")
    assert timestamps.create_time_regressions(r).count() == 0
    assert record_checks.duplicate_offsets(r).count() == 0


# ------------------------------------------------------------------ policy
def test_policy_overrides_per_topic(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("""
checks:
  crc: {severity: fail}
  create_time: {severity: warn, tolerance_ms: null, beyond_tolerance: fail}
  offset_gaps: {classes: {compaction: pass, unexplained: fail}}
topics:
  "metrics.*":
    checks:
      create_time: {tolerance_ms: 5000}
      offset_gaps: {classes: {unexplained: warn}}
  metrics.raw:
    compacted: true
    checks: {crc: {severity: warn}}
""")
    p = Policy.load(str(path))
    assert (p.tolerance_ms("orders"), p.tolerance_ms("metrics.cpu"), p.tolerance_ms("metrics.raw")) \
        == (None, 5000, 5000)
    assert (p.severity("metrics.raw", "crc"), p.severity("metrics.cpu", "crc")) == ("warn", "fail")
    assert p.severity("metrics.cpu", "offset_gaps", "unexplained") == "warn"
    assert p.severity("orders", "offset_gaps", "unexplained") == "fail"
    assert p.severity("metrics.cpu", "offset_gaps", "compaction") == "pass"
    assert (p.compacted("metrics.raw"), p.compacted("metrics.cpu")) == (True, False)
    assert p.headline("metrics.cpu", "create_time") == "fail"
    assert p.headline("orders", "create_time") == "warn"
    path.write_text("checks: {crc: {severity: maybe}}")
    with pytest.raises(ValueError, match="crc.severity"):
        Policy.load(str(path))


# --------------------------------------------------------------- the job
def test_job_fails_the_run_and_says_why(spark, faulty_w, test_policy, capsys):
    from spark_jobs import check_quality

    code = check_quality.main(["--warehouse", faulty_w, "--run-id", "faulty", "--policy", test_policy],
                              spark=spark)
    assert code == check_quality.EXIT_CHECKS_FAILED  # a verdict, not a crash: no retry
    err = capsys.readouterr().err
    assert "FAIL offset_gaps gap-0" in err and "must not be published" in err
    rows = dq_rows(faulty_w, "faulty")
    # the last line is the verdict the Airflow task returns: the rows' outcomes, by check
    last = err.strip().splitlines()[-1]
    assert last.startswith(check_quality.VERDICT_PREFIX)
    verdict = json.loads(last[len(check_quality.VERDICT_PREFIX):])
    for status, key in (("fail", "failed"), ("warn", "warned")):
        bad = [r for r in rows if r["status"] == status]
        assert verdict[status] == len(bad) > 0
        assert verdict[key] == {c: sorted(f"{r['topic']}-{r['partition']}" for r in bad
                                          if r["check"] == c) for c in {r["check"] for r in bad}}
    assert verdict["pass"] == sum(r["status"] == "pass" for r in rows)
    # one row per check x topic-partition (the internal topics' checks only where they apply:
    # none here)
    topics = ["crc", "ct", "div", "dup", "gap", "lat", "livetail", "maxts", "tail"]
    assert sorted((r["topic"], r["check"]) for r in rows) == sorted(
        (t, c) for t in topics for c in registry.CHECKS if c not in registry.OPTIONAL_CHECKS)
    assert {r["run_id"] for r in rows} == {"faulty"}
    not_pass = sorted((r["topic"], r["check"], r["status"], r["severity"], r["failed"])
                      for r in rows if r["status"] != "pass")
    assert not_pass == [
        ("crc", "crc", "fail", "fail", 1),
        ("ct", "create_time", "fail", "fail", 2),
        ("div", "divergence", "fail", "fail", 1),
        ("dup", "duplicate_offsets", "fail", "fail", 1),
        ("gap", "offset_gaps", "fail", "fail", 1),
        ("lat", "log_append_time", "fail", "fail", 1),
        ("livetail", "truncated_tail", "warn", "warn", 1),
        ("maxts", "max_timestamp", "fail", "fail", 1),
        ("tail", "offset_gaps", "fail", "fail", 1),
        ("tail", "truncated_tail", "fail", "fail", 1),
    ]
    ct = next(r for r in rows if (r["topic"], r["check"]) == ("ct", "create_time"))
    details = json.loads(ct["details"])
    assert (details["max_step_back_ms"], details["tolerance_ms"], details["regressions"]) == (10000, 1000, 2)
    assert ct["observed"] == 5  # records
    crc = next(r for r in rows if (r["topic"], r["check"]) == ("crc", "crc"))
    item = json.loads(crc["details"])["items"][0]
    assert (item["segment"], item["position"]) == ("s3://snap/2025-11-21/crc-0/00000000000000000000.log", 96)
    # Data Docs: offline, and each suite's status is its check's worst dq_results status
    docs = os.path.join(faulty_w, "data_docs", "faulty")
    assert_offline(docs)
    worst = {}
    for r in rows:
        worst[r["check"]] = min(worst.get(r["check"], "pass"), r["status"], key=STATUS_ORDER.index)
    assert docs_statuses(docs) == {f"kafka_{c}": s for c, s in worst.items()}


#: worst first, as Data Docs and the report order them
STATUS_ORDER = ["fail", "warn", "pass"]
#: a reference to something outside the folder: any scheme or a protocol-relative URL in
#: src=/href= (script, link, img, a), CSS url(...) or @import
EXTERNAL_REF = re.compile(r"""(?:\b(?:src|href)\s*=\s*["']?\s*|url\(\s*["']?\s*|@import\s+["']?\s*)"""
                          r"(?:[a-z][a-z0-9+.-]*:|//)", re.I)
LOCAL_REF = re.compile(r"""\b(?:src|href)\s*=\s*["']([^"'#]+)""", re.I)


def assert_offline(docs_dir):
    """Every built file: no external reference, no script (the pages work with JS off),
    every relative src/href names a file of the folder; returns the files."""
    from urllib.parse import unquote

    files = [os.path.join(d, f) for d, _, fs in os.walk(docs_dir) for f in fs]
    assert os.path.join(docs_dir, "index.html") in files
    for path in files:
        text = open(path, encoding="utf-8").read()
        assert not EXTERNAL_REF.findall(text), (path, EXTERNAL_REF.findall(text))
        assert "<script" not in text.lower(), path
        for ref in LOCAL_REF.findall(text):
            target = os.path.normpath(os.path.join(os.path.dirname(path), unquote(ref)))
            assert target in files, (path, ref)
    return files


def docs_statuses(docs_dir) -> dict:
    """suite -> status, as the index lists them (its order: worst first, then by name) and as
    each suite's page says in its overview."""
    index = open(os.path.join(docs_dir, "index.html"), encoding="utf-8").read()
    rows = re.findall(r'<tr class="status-(\w+)">.*?<a href="(validations/[^"]+)">([^<]+)</a>', index, re.S)
    assert [(STATUS_ORDER.index(s), suite) for s, _, suite in rows] == \
        sorted((STATUS_ORDER.index(s), suite) for s, _, suite in rows)
    labels = {"fail": "Failed", "warn": "Warning", "pass": "Passed"}
    for status, href, _ in rows:
        page = open(os.path.join(docs_dir, href), encoding="utf-8").read()
        overview = re.search(r'Status:</span>\s*<i class="([^"]+)"[^>]*></i>\s*(\w+)', page)
        assert overview.group(2) == labels[status], (href, overview.group(0))
    return {suite: status for status, _, suite in rows}


def test_data_docs_statuses_follow_severity(tmp_path):
    """No Spark: validation results made by hand. A suite whose only unsuccessful
    expectation has severity warning is "Warning" on the index and its page, and that
    expectation's row gets the warning icon; GX's own success (false) is not rewritten."""
    from great_expectations.core import ExpectationSuiteValidationResult, ExpectationValidationResult
    from great_expectations.core.run_identifier import RunIdentifier
    from great_expectations.expectations.expectation_configuration import ExpectationConfiguration

    from expectations import data_docs, suites

    def expectation(grade, rows):
        return ExpectationValidationResult(
            success=rows == 0, result={"observed_value": rows},
            expectation_config=ExpectationConfiguration(
                type="policy_rows", severity=suites.SEVERITIES[grade],
                kwargs={"unexpected_rows_query": suites.unexpected_rows_query("crc", grade)},
                description=f"rows graded {grade}"))

    run = "night <1> & co"
    def result(name, fail_rows, warn_rows):
        evrs = [expectation("fail", fail_rows), expectation("warn", warn_rows)]
        return ExpectationSuiteValidationResult(
            success=not (fail_rows or warn_rows), results=evrs, suite_name=name,
            meta={"run_id": RunIdentifier(run_name=run), "batch_spec": {}},
            statistics={"evaluated_expectations": 2, "successful_expectations": 0,
                        "unsuccessful_expectations": 0, "success_percent": 0.0})
    results = [result("kafka_passes", 0, 0), result("kafka_warns", 0, 3), result("kafka_fails", 2, 1)]
    assert [data_docs.status(r) for r in results] == ["pass", "warn", "fail"]
    entries = data_docs.build(results, str(tmp_path), run, descriptions={"kafka_warns": "x < y"})
    assert [(e.suite, e.status, e.failed_rows, e.warned_rows) for e in entries] == [
        ("kafka_fails", "fail", 2, 1), ("kafka_warns", "warn", 0, 3), ("kafka_passes", "pass", 0, 0)]
    assert sorted(os.path.relpath(f, tmp_path) for f in assert_offline(str(tmp_path))) == [
        "index.html", "validations/kafka_fails.html", "validations/kafka_passes.html",
        "validations/kafka_warns.html"]
    assert docs_statuses(str(tmp_path)) == {"kafka_fails": "fail", "kafka_warns": "warn",
                                            "kafka_passes": "pass"}
    index = (tmp_path / "index.html").read_text()
    assert "night &lt;1&gt; &amp; co" in index and "x &lt; y" in index and run not in index
    # row icons: a failed warn-graded expectation is a warning, a failed fail-graded one a failure
    icons = lambda name: re.findall(r'<td id="section-2-[^"]*-1"[^>]*>\s*<div[^>]*>\s*<span\s*>\s*<i class="([^"]+)"',
                                    (tmp_path / "validations" / f"{name}.html").read_text())
    assert icons("kafka_warns") == ["fas fa-check-circle text-success",
                                    "fas fa-exclamation-triangle text-warning"]
    assert icons("kafka_fails") == ["fas fa-times text-danger", "fas fa-exclamation-triangle text-warning"]
    assert results[1].success is False


def test_every_check_has_a_suite_description():
    from expectations import suites

    assert set(registry.CHECKS) <= set(suites.DESCRIPTIONS)
    with pytest.raises(KeyError, match="no description"):
        suites.build_suites(None, ["no_such_check"])


def test_job_passes_explained_gaps(spark, legit_w, capsys):
    from spark_jobs import check_quality

    run_id = "nightly 2025-11-21"
    argv = ["--warehouse", legit_w, "--run-id", run_id, "--no-docs"]
    assert check_quality.main(argv, spark=spark) == 0
    rows = dq_rows(legit_w, run_id)
    assert sorted((r["topic"], r["partition"], r["check"], r["status"])
                  for r in rows if r["status"] != "pass") == [
        ("boundary", 0, "offset_gaps", "warn"), ("payments", 1, "offset_gaps", "warn")]
    planted = next(r for r in rows if (r["topic"], r["partition"], r["check"])
                   == ("payments", 1, "offset_gaps"))
    assert (planted["severity"], planted["failed"]) == ("warn", 1)
    details = json.loads(planted["details"])
    assert details["classes"] == {"missing_segment": {"status": "warn", "items": 1, "offsets": 10}}
    # the hole in plain words: topic-partition, offsets, the segment files on either side
    # (no byte position: it lies in neither file)
    item = details["items"][0]
    assert (item["message"], item["position"]) == (
        "offsets 15..24 of payments-1 are missing from the snapshot, between "
        "s3://snap/2025-11-21/payments-1/00000000000000000000.log (ends at offset 14) and "
        "s3://snap/2025-11-21/payments-1/00000000000000000025.log (starts at offset 25): "
        "the segment file based at 15 was not copied", None)
    compact = next(r for r in rows if (r["topic"], r["check"]) == ("compact", "offset_gaps"))
    assert json.loads(compact["details"])["classes"] == {
        "compaction": {"status": "pass", "items": 1, "offsets": 3}}
    assert "WARN offset_gaps boundary-0" in capsys.readouterr().err
    # a rerun replaces the run's results (same rows, nothing added)
    assert check_quality.main(argv, spark=spark) == 0
    assert len(dq_rows(legit_w, run_id)) == len(rows)
    assert tables.read_arrow(legit_w, "dq_results").num_rows == len(rows)


def test_a_small_runs_audit_runs_interpreted_with_the_same_rows(spark, legit_w, monkeypatch):
    """The audit sizes its settings to the run (inputs.sized_settings): a run of at most
    SMALL_RUN_BYTES of Parquet runs without generated code and without broadcast joins, a
    larger one with Spark's defaults; the same dq_results rows either way, and the session's
    settings are its own again after."""
    from spark_jobs import check_quality, session
    from spark_jobs.audit import inputs, job

    assert inputs.sized_settings(spark, {"records": 230_000, "batches": 90_000}) == {
        inputs.SHUFFLE_PARTITIONS: "1", **session.INTERPRETED_SQL, inputs.BROADCAST_THRESHOLD: "-1"}
    big = inputs.sized_settings(spark, {"records": 3 * inputs.BYTES_PER_PARTITION})
    assert big == {inputs.SHUFFLE_PARTITIONS: str(min(3, int(spark.conf.get(
        inputs.SHUFFLE_PARTITIONS))))}
    seen = []
    observe = job.run_observations

    def spy(*args, **kwargs):  # the settings the checks run in
        seen.append({k: spark.conf.get(k) for k in inputs.SIZED})
        return observe(*args, **kwargs)

    monkeypatch.setattr(job, "run_observations", spy)
    run_id = "nightly 2025-11-21"
    argv = ["--warehouse", legit_w, "--run-id", run_id, "--no-docs"]
    compiled = {"spark.sql.codegen.wholeStage": "true", "spark.sql.codegen.factoryMode": "FALLBACK",
                inputs.BROADCAST_THRESHOLD: "10485760", inputs.SHUFFLE_PARTITIONS: "3"}
    before = {k: spark.conf.get(k) for k in compiled}
    results = []
    try:
        for most in (-1, inputs.SMALL_RUN_BYTES):  # never interpreted, then as shipped
            for k, v in compiled.items():
                spark.conf.set(k, v)
            monkeypatch.setattr(inputs, "SMALL_RUN_BYTES", most)
            assert check_quality.main(argv, spark=spark) == 0
            assert {k: spark.conf.get(k) for k in compiled} == compiled  # restored
            results.append(sorted(json.dumps({k: v for k, v in r.items() if k != "checked_at"},
                                             sort_keys=True, default=str)
                                  for r in dq_rows(legit_w, run_id)))
    finally:
        for k, v in before.items():
            spark.conf.set(k, v)
    assert seen == [{**compiled, inputs.SHUFFLE_PARTITIONS: "1"},
                    {inputs.SHUFFLE_PARTITIONS: "1", **inputs.SMALL_RUN}]
    assert results[0] == results[1] and len(results[0]) > 10


def test_job_on_s3_clean_run(spark, s3_bucket, tmp_path, s3_catalog):
    from spark_jobs import check_quality

    W = f"s3://{s3_bucket}/warehouse"
    run_id = "scheduled__2025-11-21T00:00:00+00:00"
    wh = Warehouse(W, s3_catalog, s3=storage.S3Config.from_env())
    stage(wh, run_id, clean_parts(tmp_path, run_id))
    assert check_quality.main(["--warehouse", W, "--run-id", run_id, "--catalog", s3_catalog],
                              spark=spark) == 0
    rows = dq_rows(wh, run_id)
    assert {(r["topic"], r["partition"]) for r in rows} == {("clean", 0)}
    assert [(r["check"], r["status"]) for r in rows if r["status"] != "pass"] == []
    by_check = {r["check"]: r for r in rows}
    assert (by_check["crc"]["observed"], by_check["record_gaps"]["observed"]) == (5, 9)
    store = storage.open_store(W)
    token = storage.run_token(run_id)
    html = store.read(f"data_docs/{token}/index.html").decode()
    assert "kafka_crc" in html
    assert any(k.startswith(f"data_docs/{token}/validations/") for k in (o.key for o in store.list("data_docs/")))


def test_job_usage_errors(spark, tmp_path, capsys):
    from spark_jobs import check_quality

    assert check_quality.main(["--warehouse", str(tmp_path), "--run-id", "nothing", "--no-docs"],
                              spark=spark) == 2
    assert "has no rows" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text("checks: {crc: {severity: sometimes}}")
    assert check_quality.main(["--warehouse", str(tmp_path), "--run-id", "x", "--policy", str(bad)],
                              spark=spark) == 2


# ------------------------------------------------ with the decode job itself
def test_decode_then_audit_across_two_nights(spark, tmp_path, capsys):
    """decode_segments.py --no-publish, check_quality.py, publish; the next
    night starts above the last published offset (retention) and has a CRC flip.
    payments-1 is the demo's planted case: night 2 copies segment 0 unchanged (the
    job skips it) and segment 25, not segment 15."""
    from spark_jobs import check_quality, publish

    W = str(tmp_path / "w")
    night1 = tmp_path / "snap1"

    def with_txn(w):
        w.append(recs(3, T0 + 10_000), producer_id=4, producer_epoch=0, base_sequence=0,
                 transactional=True)                                            # 10..12
        w.append_marker(producer_id=4, producer_epoch=0, commit=True, timestamp=T0 + 13_000)  # 13
        w.append(recs(6, T0 + 14_000))                                          # 14..19
    write_segments(night1 / "orders-0", [(0, lambda w: w.append(recs(10))), (10, with_txn)])
    payments0 = (0, lambda w: [w.append(recs(5)), w.append(recs(10, T0 + 5000))])      # 0..14
    write_segments(night1 / "payments-1", [payments0])
    decode(spark, night1, W, "night-1", "--no-publish")
    assert check_quality.main(["--warehouse", W, "--run-id", "night-1", "--no-docs"], spark=spark) == 0
    publish.publish(W, "night-1")

    night2 = tmp_path / "snap2"
    write_segments(night2 / "orders-0", [
        (30, lambda w: w.append(recs(5, T0 + 30_000))),                          # 20..29 retained away
        (35, lambda w: [w.append(recs(5, T0 + 35_000)), w.append(recs(5, T0 + 40_000))])])
    write_segments(night2 / "payments-1", [
        payments0, (25, lambda w: w.append(recs(10, T0 + 25_000)))])             # 15..24 not copied
    log = night2 / "orders-0" / f"{35:020d}.log"
    data = bytearray(log.read_bytes())
    data[-3] ^= 0x01                                                             # the batch 40..44
    log.write_bytes(bytes(data))
    decode(spark, night2, W, "night-2", "--no-publish")
    capsys.readouterr()
    assert check_quality.main(["--warehouse", W, "--run-id", "night-2", "--no-docs"],
                              spark=spark) == check_quality.EXIT_CHECKS_FAILED
    assert "FAIL crc orders-0" in capsys.readouterr().err
    ledger = tables.read_arrow(W, "ledger", ref=branch_name("night-2")).to_pylist()
    assert sorted((r["topic"], r["segment_base_offset"], r["action"]) for r in ledger
                  if r["run_id"] == "night-2" and r["topic"] == "payments") == [
        ("payments", 0, "unchanged"), ("payments", 25, "decoded")]
    results = dq_rows(W, "night-2")
    assert sorted((r["topic"], r["check"], r["status"]) for r in results if r["status"] != "pass") \
        == [("orders", "crc", "fail"), ("payments", "offset_gaps", "warn")]
    rows = {r["check"]: r for r in results if r["topic"] == "orders"}
    gaps = json.loads(rows["offset_gaps"]["details"])
    assert [(i["class"], i["first_offset"], i["last_offset"]) for i in gaps["items"]] == [
        ("retention", 20, 29)]
    planted = next(r for r in results if (r["topic"], r["check"]) == ("payments", "offset_gaps"))
    assert [(i["class"], i["status"], i["first_offset"], i["last_offset"], i["segment"])
            for i in json.loads(planted["details"])["items"]] == [
        ("missing_segment", "warn", 15, 24, str(night2 / "payments-1" / f"{25:020d}.log"))]
    crc = json.loads(rows["crc"]["details"])["items"][0]
    assert (crc["first_offset"], crc["segment"]) == (40, str(log))


def test_real_corpus_passes(spark, tmp_path):
    """Real broker segments (tests/data/real, checked with `kafkalog dump`:
    no findings, no offset gaps, one KRaft control batch, CreateTime only):
    every check passes — no false alarm on data that is intact."""
    from spark_jobs import check_quality

    corpus = str(CORPUS_DIR)
    logs = [p for p in CORPUS if re.search(r"/[^/]+-\d+/\d{20}\.log$", p)]
    assert logs
    W = str(tmp_path / "w")
    decode(spark, corpus, W, "corpus", "--no-publish")
    # the two codecrafters fixtures lie outside any partition folder: graded, not passed
    unplaced = sorted(set(glob.glob(f"{corpus}/**/*.log", recursive=True)) - set(logs))
    assert len(unplaced) == 2
    assert check_quality.main(["--warehouse", W, "--run-id", "corpus", "--no-docs"],
                              spark=spark) == check_quality.EXIT_CHECKS_FAILED
    rows = dq_rows(W, "corpus")
    assert [(r["topic"], r["partition"], r["check"], r["observed"], r["failed"])
            for r in rows if r["status"] != "pass"] == [(None, None, "decoder_findings", 2, 2)]
    [bad] = [r for r in rows if r["status"] != "pass"]
    assert sorted(i["segment"] for i in json.loads(bad["details"])["items"]) == unplaced
    rows = [r for r in rows if r["topic"] is not None]
    # what was checked, counted independently with kafkalog
    expected = {}
    for log in logs:
        m = re.search(r"/([^/]+)-(\d+)/\d{20}\.log$", log)
        t = kafkalog.decode(log)
        expected[(m.group(1), int(m.group(2)))] = (t.batches.num_rows, t.records.num_rows)
    got = {(r["topic"], r["partition"]): (by["crc"], by["create_time"])
           for r in rows if r["check"] == "crc"
           for by in [{x["check"]: x["observed"] for x in rows
                       if (x["topic"], x["partition"]) == (r["topic"], r["partition"])}]}
    assert got == expected
    corpus_internal_tables(W, "corpus", logs)


def corpus_internal_tables(W, run_id, logs):
    """The corpus's __consumer_offsets and __cluster_metadata as the job's derived tables
    (staged on the run's branch) and the audit's consumer_lag, against the same files read
    here with kafkalog and kafkalog.internal directly."""
    from collections import Counter

    from kafkalog.internal import decode, decoder_for_path

    commits, types, ends = Counter(), Counter(), {}
    latest = {}
    for log in logs:
        m = re.search(r"/([^/]+)-(\d+)/\d{20}\.log$", log)
        t = kafkalog.decode(log)
        if t.batches.num_rows:
            ends[(m.group(1), int(m.group(2)))] = max(t.batches.column("last_offset").to_pylist()) + 1
        decoder = decoder_for_path(log)
        if decoder is None:
            continue
        for r in t.records.to_pylist():
            d = decode(decoder, r["key"], r["value"])
            if decoder == "cluster-metadata":
                types[d["type"]] += 1
            elif d["key"]["type"] in (0, 1):
                k, v = d["key"]["data"], d["value"]
                offset = v["data"]["offset"] if v else None
                commits[(k["group"], k["topic"], k["partition"], offset, int(m.group(2)),
                         r["offset"])] += 1
                tp = (k["group"], k["topic"], k["partition"])
                if tp not in latest or (r["timestamp"], r["offset"]) > latest[tp][0]:
                    latest[tp] = ((r["timestamp"], r["offset"]), offset)
    branch = branch_name(run_id)
    staged = lambda name: tables.read_arrow(W, name, ref=branch).to_pylist()
    assert Counter((r["group"], r["topic"], r["partition"], r["committed_offset"],
                    r["source_partition"], r["source_offset"])
                   for r in staged("consumer_offsets")) == commits
    assert sum(commits.values()) > 400  # 1,013 commits in nine partitions
    assert Counter(r["type"] for r in staged("cluster_metadata")) == types
    lag = {(r["group"], r["topic"], r["partition"]): (r["committed_offset"], r["log_end_offset"],
                                                      r["status"])
           for r in tables.read_arrow(W, "consumer_lag").to_pylist()}
    assert lag == {tp: (o, ends.get(tp[1:]), "ok" if tp[1:] in ends else "not_in_snapshot")
                   for tp, (_, o) in latest.items() if o is not None}


BATCH_COLS = ("topic string, partition int, base_offset long, last_offset long, record_count int, "
              "is_control boolean, has_delete_horizon boolean, segment string, "
              "segment_base_offset long, position long")


def test_gap_rules_for_holes_between_segments(spark):
    """A hole between two segment files: missing (nothing known), unreadable (the
    ledger lists a segment there, or a fetch_error names one), compaction (the
    policy declares the topic compacted)."""
    def batches(topic):
        return [(topic, 0, 0, 4, 5, False, False, "s/0.log", 0, 0),
                (topic, 0, 20, 24, 5, False, False, "s/20.log", 20, 0)]
    b = spark.createDataFrame(batches("lost") + batches("listed") + batches("fetch")
                              + batches("compacted"), BATCH_COLS)
    markers = spark.createDataFrame([], "topic string, partition int, offset long, producer_id long, "
                                        "control_type string")
    findings = spark.createDataFrame(
        [("fetch", 0, "fetch_error", 0, 10, "s/10.log", 10)],
        "topic string, partition int, kind string, position long, bytes long, segment string, "
        "segment_base_offset long")
    ledger = spark.createDataFrame([("listed", 0, "s/10.log", 10)],
                                   "topic string, partition int, segment string, segment_base_offset long")
    got = sorted(tuple(r) for r in offsets.offset_gaps(b, markers, findings, ledger=ledger,
                                                   compacted_topics=["compacted"])
                 .select("topic", "class", "first_offset", "last_offset").collect())
    assert got == [("compacted", "compaction", 5, 19), ("fetch", "unreadable_bytes", 5, 19),
                   ("listed", "unreadable_bytes", 5, 19), ("lost", "missing_segment", 5, 19)]


def test_gap_rules_with_every_listed_segment(spark):
    """The audit sees every segment the run listed: a segment skipped as unchanged
    (or resumed) stands for the offsets earlier runs ingested of it, so a hole after
    it is a missing segment, not retention; retention only where the snapshot's
    log starts past the previous run's end; a hole at the head of a segment that
    has batches is compaction where it shows compaction, else unexplained."""
    b = spark.createDataFrame([
        ("planted", 0, 25, 34, 10, False, False, "s/25.log", 25, 0),
        ("planted_head", 0, 27, 34, 8, False, False, "s/25.log", 25, 0),  # 25..26 cleaned too
        ("retained", 0, 25, 34, 10, False, False, "s/25.log", 25, 0),
        ("resumed", 0, 12, 14, 3, False, False, "s/0.log", 0, 500),
        ("headless", 0, 0, 4, 5, False, False, "s/0.log", 0, 0),
        ("headless", 0, 8, 12, 3, False, False, "s/5.log", 5, 0),      # 8, 10, 12 of 8..12
        ("headless_plain", 0, 0, 4, 5, False, False, "s/0.log", 0, 0),
        ("headless_plain", 0, 8, 12, 5, False, False, "s/5.log", 5, 0),
        ("first_head", 0, 3, 7, 2, False, False, "s/0.log", 0, 0),     # no prior: base 0, 0..2 cleaned
    ], BATCH_COLS)
    listed = spark.createDataFrame([
        ("planted", 0, "s/0.log", 0, 14), ("planted", 0, "s/25.log", 25, None),
        ("planted_head", 0, "s/0.log", 0, 14), ("planted_head", 0, "s/25.log", 25, None),
        ("retained", 0, "s/25.log", 25, None),
        ("resumed", 0, "s/0.log", 0, 9),
        ("headless", 0, "s/0.log", 0, None), ("headless", 0, "s/5.log", 5, None),
        ("headless_plain", 0, "s/0.log", 0, None), ("headless_plain", 0, "s/5.log", 5, None),
        ("first_head", 0, "s/0.log", 0, None),
        ("skipped_only", 0, "s/0.log", 0, 9), ("skipped_only", 0, "s/20.log", 20, 29),
    ], "topic string, partition int, segment string, segment_base_offset long, carried_last long")
    prior = spark.createDataFrame(
        [(t, 0, end, "old/0.log", 0, "prev") for t, end in
         (("planted", 14), ("planted_head", 14), ("retained", 14), ("resumed", 9),
          ("skipped_only", 29))],
        "topic string, partition int, prior_last_offset bigint, prior_segment string, "
        "prior_segment_base_offset bigint, prior_run_id string")
    markers = spark.createDataFrame([], "topic string, partition int, offset long, producer_id long, "
                                        "control_type string")
    findings = spark.createDataFrame([], "topic string, partition int, kind string, position long, "
                                         "bytes long, segment string, segment_base_offset long")
    gaps = offsets.offset_gaps(b, markers, findings, prior=prior, ledger=listed).collect()
    got = sorted((r.topic, r["class"], r.first_offset, r.last_offset) for r in gaps)
    assert got == [
        ("first_head", "compaction", 0, 2),
        ("headless", "compaction", 5, 7),
        ("headless_plain", "unexplained", 5, 7),
        ("planted", "missing_segment", 15, 24),
        ("planted_head", "missing_segment", 15, 26),
        ("resumed", "unexplained", 10, 11),
        ("retained", "retention", 15, 24),
        ("skipped_only", "missing_segment", 10, 19),
    ]
    # a missing segment names the files on either side, at no byte position
    said = {r.topic: (r.message, r.segment, r.position) for r in gaps if r["class"] == "missing_segment"}
    assert said["planted"] == (
        "offsets 15..24 of planted-0 are missing from the snapshot, between s/0.log (ends at "
        "offset 14) and s/25.log (starts at offset 25): the segment file based at 15 was not "
        "copied", "s/25.log", None)
    assert said["planted_head"][0] == (
        "offsets 15..26 of planted_head-0 are missing from the snapshot, between s/0.log (ends "
        "at offset 14) and s/25.log (based at offset 25, first batch at offset 27): the segment "
        "file based at 15 was not copied")


def test_listed_segments_carry_earlier_offsets(spark):
    """What an unchanged or resumed segment holds comes from the earlier runs' ledger
    rows since the last one that decoded it from byte 0."""
    cols = ("run_id string, segment string, topic string, partition int, segment_base_offset long, "
            "byte_start long, last_offset long, action string, ingested_at timestamp")
    t = [dt.datetime(2025, 11, d, tzinfo=dt.timezone.utc) for d in (18, 19, 20, 21)]
    published = spark.createDataFrame([
        ("r1", "n1/0.log", "p", 0, 0, 0, 99, "decoded", t[0]),       # an older version of segment 0
        ("r2", "n2/0.log", "p", 0, 0, 0, 9, "redecoded", t[1]),      # rewritten: decoded again
        ("r3", "n3/0.log", "p", 0, 0, 300, 14, "resumed", t[2]),     # grew
        ("r3", "n3/20.log", "p", 0, 20, 0, None, "failed", t[2]),
    ], cols)
    run = spark.createDataFrame([
        ("r4", "n4/0.log", "p", 0, 0, 0, None, "unchanged", t[3]),
        ("r4", "n4/20.log", "p", 0, 20, 0, 24, "decoded", t[3]),
    ], cols)
    got = sorted(tuple(r) for r in context.listed_segments(run, published, "r4").collect())
    assert got == [("p", 0, "n4/0.log", 0, 14), ("p", 0, "n4/20.log", 20, None)]
