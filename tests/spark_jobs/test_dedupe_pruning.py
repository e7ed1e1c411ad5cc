"""The dedupe reads what recent nights wrote, however long the history.

The tables the dedupe reads are partitioned by the day their run first ingested
(``ingest_dt``); maintenance clusters ``main``'s manifests by periods of those days;
and the dedupe bounds its scan by the days of the runs whose ledger rows meet its
offsets (``overlap_days``), so the catalog skips the manifests of other nights
without opening them. These tests check that the bound never leaves out a
file that can overlap (offsets counted lost and duplicated against the segments'
truth), that clustering keeps every entry as it was, that a scan of recent nights
opens only their manifests, and that tables made before ``ingest_dt`` existed are
evolved in place and still deduplicated.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spark_jobs import decode as job
from spark_jobs import maintenance, schemas, tables
from spark_jobs.warehouse import Warehouse, run_files_prefix
from spark_jobs.warehouse.ddl import NAME_MAPPING, TABLE_PROPERTIES

from tests.runs import decode
from tests.snapshots import numbered
from tests.spark_jobs.faults import lost_and_duplicated, published, truth

DAY0 = dt.date(2026, 1, 1)


def day(i: int) -> str:
    return (DAY0 + dt.timedelta(days=i)).isoformat()


# ------------------------------------------------------------ through the decode job
@pytest.mark.pipeline
def test_a_night_overlapping_an_old_run_finds_its_rows_past_clustered_manifests(
        spark, tmp_path, monkeypatch):
    """Night 1 (day 0) ingests offsets 0-19 of orders-0; night 2 (day 20) a copy of
    orders-0 from offset 15 and other partitions; maintenance clusters the manifests;
    night 3 (day 30) holds a segment of orders-0 from offset 10. Its dedupe must reach
    back to days 0 and 20: 0 lost, 0 duplicated, and ``ingest_dt`` is each run's day."""
    ingested = {"night-1": day(0), "night-2": day(20), "night-3": day(30)}
    monkeypatch.setattr("spark_jobs.decode.job.first_ingested",
                        lambda ledger, run_id: f"{ingested[run_id]}T03:00:00+00:00")
    # the same offset always gets the same record, whichever copy holds it (batches of 5)
    n1 = numbered(tmp_path / "n1", "orders", (0,), batches=4, codecs=("lz4",))
    n2 = numbered(tmp_path / "n2", "orders", (1,), batches=4, codecs=("lz4",))
    numbered(n2, "audit", (0,), batches=2, codecs=("lz4",))
    numbered(n2, "orders", (0,), first=15, batches=2, codecs=("lz4",))
    n3 = numbered(tmp_path / "n3", "orders", (0,), first=10, batches=4, codecs=("lz4",))
    wh = tmp_path / "wh"
    w = Warehouse(str(wh))
    for run_id, src in (("night-1", n1), ("night-2", n2)):
        decode(spark, src, wh, run_id)
    for name in ("records", "batches", "markers"):
        maintenance.merge_manifests(w, name)

    seen = []
    real = job.deduplication.overlap_days
    monkeypatch.setattr(job.deduplication, "overlap_days",
                        lambda *a: seen.append(real(*a)) or seen[-1])
    out = decode(spark, n3, wh, "night-3")

    assert out["pending_partitions"] == 1 and seen == [[day(0), day(20)]]
    assert lost_and_duplicated(truth(n1, n2, n3), published(wh)) == (0, 0)
    rows = tables.read_arrow(str(wh), "records", columns=("run_id", schemas.INGEST_DT))
    assert set(zip(*(rows.column(c).to_pylist() for c in ("run_id", schemas.INGEST_DT)))) == {
        ("night-1", day(0)), ("night-2", day(20)), ("night-3", day(30))}


# ------------------------------------------------------------ the catalog alone
def record_file(wh: Warehouse, run_id: str, topic: str, partition: int, offsets,
                ingest: str | None, name: str, schema: pa.Schema = schemas.RECORDS,
                root: str | None = None) -> str:
    """A ``records`` data file as the job writes it (``schema``: an older version's,
    ``root``: the data folder, without making or evolving the table)."""
    n = len(offsets)
    given = {"partition": [partition] * n, "offset": list(offsets), "run_id": [run_id] * n,
             "topic": [topic] * n, "dt": [day(0)] * n, schemas.INGEST_DT: [ingest] * n,
             "segment": [f"s3://b/{topic}-{partition}/{0:020d}.log"] * n}
    cols = [pa.array(given[f.name], f.type) if f.name in given else pa.nulls(n, f.type)
            for f in schema]
    uri = f"{root or wh.data_root('records')}/topic={topic}/{name}"
    path = Path(uri[len("file://"):])
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_arrays(cols, schema=schema), str(path),
                   write_statistics=[c for c in schemas.STATISTICS if c in schema.names])
    return uri


def nightly(wh: Warehouse, nights: range, per_night: int = 10) -> pa.Table:
    """One run a night into ``records`` (orders-0, ``per_night`` offsets each,
    ``ingest_dt`` its day), each its own commit to ``main`` (a manifest each, as a
    published run leaves it); returns the ledger rows they would have written."""
    ledger = []
    t = wh.table("records")
    for i in nights:
        run_id = f"night-{i}"
        lo = i * per_night
        t.add_files([record_file(wh, run_id, "orders", 0, range(lo, lo + per_night), day(i),
                                 f"{run_files_prefix(run_id)}a~0.parquet",
                                 root=t.location() + "/data")])
        ledger.append({"run_id": run_id, "topic": "orders", "partition": 0,
                       "first_offset": lo, "last_offset": lo + per_night - 1,
                       "ingested_at": dt.datetime.fromisoformat(f"{day(i)}T03:00:00+00:00")})
    return pa.Table.from_pylist(ledger, schema=pa.schema(
        [schemas.LEDGER.field(c) for c in ledger[0]]))


class Opened:
    """Counts the manifests pyiceberg opens (reads the entries of)."""

    def __init__(self, monkeypatch):
        from pyiceberg.manifest import ManifestFile, clear_manifest_cache

        self.paths: list[str] = []
        real = ManifestFile.fetch_manifest_entry
        clear_manifest_cache()

        def fetch(manifest, *args, **kwargs):
            self.paths.append(manifest.manifest_path)
            return real(manifest, *args, **kwargs)

        monkeypatch.setattr(ManifestFile, "fetch_manifest_entry", fetch)


def plan(wh: Warehouse, row_filter) -> list[str]:
    return sorted(tables.table_paths(wh, "records", row_filter=row_filter))


def test_clustered_manifests_keep_every_entry_and_a_recent_scan_opens_only_its_days(
        tmp_path, monkeypatch):
    wh = Warehouse(str(tmp_path / "wh"))
    ledger = nightly(wh, range(60))
    t = wh.table("records")
    before = {e.data_file.file_path: (e.snapshot_id, e.sequence_number)
              for m in t.current_snapshot().manifests(t.io) for e in m.fetch_manifest_entry(t.io)}
    assert len(before) == 60

    out = maintenance.merge_manifests(wh, "records")
    t = wh.table("records")
    manifests = t.current_snapshot().manifests(t.io)
    # days 53-59, the ISO weeks of days 18-52, the months before: one manifest each
    periods = {maintenance.ingest_period(day(i), DAY0 + dt.timedelta(days=59)) for i in range(60)}
    assert out["manifests_after"] == len(manifests) == len(periods) < 60
    after = {e.data_file.file_path: (e.snapshot_id, e.sequence_number)
             for m in manifests for e in m.fetch_manifest_entry(t.io)}
    assert after == before  # same files, same snapshots and sequence numbers
    for m in manifests:  # each manifest holds one period
        days = {e.data_file.partition[t.spec().fields.index(
            next(f for f in t.spec().fields if f.name == schemas.INGEST_DT))]
            for e in m.fetch_manifest_entry(t.io)}
        assert len({maintenance.ingest_period(d, DAY0 + dt.timedelta(days=59)) for d in days}) == 1
    snapshot = t.current_snapshot().snapshot_id
    assert maintenance.merge_manifests(wh, "records") == {"manifests_before": len(manifests),
                                                          "manifests_after": len(manifests)}
    assert wh.table("records").current_snapshot().snapshot_id == snapshot  # nothing to do

    # a new night overlapping the last one, one overlapping night 3, one nights 16-20
    for ranges, nights in (({("orders", 0): (595, 610)}, [59]), ({("orders", 0): (35, 36)}, [3]),
                           ({("orders", 0): (165, 201)}, [16, 17, 18, 19, 20])):
        days = job.overlap_days(ledger, "night-new", ranges)
        assert days == [day(i) for i in nights]
        unbounded = plan(wh, job.overlap_filter(ranges, "records"))
        assert len(unbounded) == len(nights)
        every = Opened(monkeypatch)
        plan(wh, job.overlap_filter(ranges, "records"))
        assert len(every.paths) == len(manifests)  # without the bound: all of them
        opened = Opened(monkeypatch)
        assert plan(wh, job.overlap_filter(ranges, "records", days)) == unbounded
        periods = {maintenance.ingest_period(d, DAY0 + dt.timedelta(days=59)) for d in days}
        assert len(opened.paths) == len(periods) <= 2  # the manifests of those days alone
    # a run that overlaps nothing published reads only files of no known day
    assert job.overlap_days(ledger, "night-new", {("orders", 0): (900, 910)}) == []
    opened = Opened(monkeypatch)
    assert plan(wh, job.overlap_filter({("orders", 0): (900, 910)}, "records", [])) == []
    assert opened.paths == []
    # a ledger row without a time: no bound
    assert job.overlap_days(ledger.set_column(5, "ingested_at", pa.nulls(60, ledger.schema[5].type)),
                            "night-new", {("orders", 0): (0, 5)}) is None


def test_a_table_from_before_ingest_dt_is_evolved_and_its_old_files_still_match(tmp_path):
    """An earlier version's ``records`` (no ``ingest_dt`` column nor partition field):
    the next use adds both (Iceberg schema and partition evolution); its old files read
    as ``ingest_dt`` null, and the dedupe's bound keeps them."""
    from pyiceberg.catalog import Catalog
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import assign_fresh_schema_ids
    from pyiceberg.transforms import IdentityTransform

    wh = Warehouse(str(tmp_path / "wh"))
    old = pa.schema([f for f in schemas.RECORDS if f.name != schemas.INGEST_DT])
    ice = assign_fresh_schema_ids(Catalog._convert_schema_if_needed(old))
    wh.catalog.create_namespace_if_not_exists(wh.namespace)
    spec = PartitionSpec(*[PartitionField(source_id=ice.find_field(c).field_id, field_id=1000 + i,
                                          transform=IdentityTransform(), name=c)
                           for i, c in enumerate(("topic", "dt"))])
    t = wh.catalog.create_table(wh.identifier("records"), schema=ice, partition_spec=spec,
                                properties={k: v for k, v in TABLE_PROPERTIES.items()
                                            if schemas.INGEST_DT not in k})
    with t.transaction() as tx:
        tx.set_properties(**{NAME_MAPPING: t.schema().name_mapping.model_dump_json()})
    old_file = record_file(wh, "night-0", "orders", 0, range(0, 10), None, "night-0~a~0.parquet",
                           schema=old, root=t.location() + "/data")
    t.add_files([old_file])

    t = wh.table("records")  # evolved
    assert [f.name for f in t.spec().fields] == ["topic", "dt", schemas.INGEST_DT]
    assert schemas.INGEST_DT in {f.name for f in t.schema().fields}
    assert t.properties[f"write.metadata.metrics.column.{schemas.INGEST_DT}"] == "full"
    ledger = nightly(wh, range(1, 4))
    maintenance.merge_manifests(wh, "records")
    ranges = {("orders", 0): (5, 12)}
    days = job.overlap_days(ledger, "night-9", ranges)
    assert days == [day(1)]  # night 0 wrote no ledger row here: its file has no day
    picked = plan(wh, job.overlap_filter(ranges, "records", days))
    assert picked == plan(wh, job.overlap_filter(ranges, "records")) == sorted(
        [old_file, *(p for p in tables.table_paths(wh, "records") if "night-1" in p)])
    rows = tables.read_arrow(wh, "records", columns=("run_id", schemas.INGEST_DT))
    assert dict(zip(*(rows.column(c).to_pylist() for c in ("run_id", schemas.INGEST_DT)))) == {
        "night-0": None, "night-1": day(1), "night-2": day(2), "night-3": day(3)}
