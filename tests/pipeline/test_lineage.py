"""OpenLineage (issue 46, docs/lineage.md): one night run by ``airflow dags test`` with the
provider's file transport, and its events file read back.

The night is one partition written with kafkalog.writer, one byte of its second batch
flipped (the CRC mismatch of test_dags_e2e's failed audit): the audit fails, so the night is
also the FAIL path of the audit task. The events are the provider's (the Airflow tasks') and
the Spark runs' own (spark_jobs/lineage.py), in one file. Expected names come from the
warehouse's catalog (pyiceberg: each table's location) and the bucket written here, not from
kafkalog_pipeline.lineage.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

# Airflow reads its configuration at import: airflow_env sets it first.
from tests.airflow_env import DAG_ID, REPO  # noqa: E402
from tests.pipeline.demo_nights import upload_crc_night  # noqa: E402

pytestmark = pytest.mark.pipeline

NIGHT = "2026-11-28"
TOPIC = "lineage"
NAMESPACE = "kafkalog-lineage-test"


def plant_night(tmp_path: Path, pipeline) -> None:
    """One segment of 3 gzip batches in ``nightly/NIGHT/lineage-0/``, a byte in its middle
    flipped (a CRC mismatch)."""
    upload_crc_night(tmp_path, pipeline, NIGHT, TOPIC, 1_795_219_200_000)


def run_night(events_file: Path) -> subprocess.CompletedProcess:
    """``airflow dags test`` of the night, in its own process with OpenLineage configured as
    docs/lineage.md says (the file transport)."""
    env = dict(os.environ)
    env.update({
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
            {"type": "file", "log_file_path": str(events_file), "append": True}),
        "AIRFLOW__OPENLINEAGE__NAMESPACE": NAMESPACE,
        "AIRFLOW__OPENLINEAGE__EXECUTE_IN_THREAD": "True",
        "AIRFLOW__OPENLINEAGE__EXTRACTORS": "kafkalog_pipeline.lineage_tasks.NightlyTaskExtractor",
        "AIRFLOW__OPENLINEAGE__EXECUTION_TIMEOUT": "120",
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p),
    })
    conf = {"date_from": None, "date_to": None, "topics": "*", "reprocess": False}
    return subprocess.run(
        [sys.executable, "-m", "airflow", "dags", "test", DAG_ID, f"{NIGHT}T03:00:00+00:00",
         "--conf", json.dumps(conf)],
        env=env, capture_output=True, text=True, timeout=900)


def test_one_night_names_its_inputs_outputs_parents_and_failed_assertions(tmp_path, pipeline):
    from airflow.providers.openlineage.utils.utils import translate_airflow_asset
    from pyiceberg.catalog import load_catalog

    from kafkalog_pipeline.assets import table_asset
    from spark_jobs.layout import DECODE_TABLES
    from spark_jobs.warehouse import branch_name
    from spark_jobs.warehouse.catalog import catalog_properties

    plant_night(tmp_path, pipeline)
    events_file = tmp_path / "openlineage.jsonl"
    out = run_night(events_file)
    assert events_file.exists(), (out.stdout[-3000:], out.stderr[-5000:])
    events = [json.loads(line) for line in events_file.read_text().splitlines() if line.strip()]

    def of(job: str):
        return [e for e in events if e["job"]["name"] == job]

    decode = of(f"{DAG_ID}.decode_chunk")
    audit = of(f"{DAG_ID}.check_quality")
    assert [e["eventType"] for e in decode] == ["START", "COMPLETE"], [
        (e["job"]["name"], e["eventType"]) for e in events]
    assert [e["eventType"] for e in audit] == ["START", "FAIL"]  # the CRC mismatch fails it
    assert all(e["job"]["namespace"] == NAMESPACE for e in decode + audit)

    # the input: the night's snapshot prefix, as OpenLineage names an S3 location (the plan
    # listed it, the decode read it)
    prefix = {(f"s3://{pipeline['bucket']}", f"nightly/{NIGHT}")}
    inputs = {(d["namespace"], d["name"]) for d in decode[-1]["inputs"]}
    assert inputs == prefix, inputs
    plan = of(f"{DAG_ID}.plan")
    assert [e["eventType"] for e in plan] == ["START", "COMPLETE"]
    assert {(d["namespace"], d["name"]) for d in plan[-1]["inputs"]} == prefix

    # the outputs: every table the decode writes, by its location (the catalog's), with its
    # name in the catalog as a TABLE symlink
    warehouse = str(pipeline["warehouse"])
    catalog = load_catalog("kafkalog", **catalog_properties(warehouse))
    run_id = decode[-1]["run"]["facets"]["airflow"]["dagRun"]["run_id"]
    outputs = {d["name"]: d for d in decode[-1]["outputs"]}
    for name in DECODE_TABLES:
        location = catalog.load_table(("kafka", name)).location()
        path = location[len("file://"):] if location.startswith("file://") else location
        assert path in outputs, (name, path, sorted(outputs))
        dataset = outputs[path]
        assert dataset["namespace"] == "file"
        assert {"namespace": dataset["facets"]["symlinks"]["identifiers"][0]["namespace"],
                "name": f"kafka.{name}", "type": "TABLE"} \
            == dataset["facets"]["symlinks"]["identifiers"][0]
        assert dataset["facets"]["catalog"]["framework"] == "iceberg"
        # the table's asset (the DAG's, parsed in this environment) is that dataset
        ours = translate_airflow_asset(table_asset(name), None)
        assert (ours.namespace, ours.name) == ("file", path), name

    # the Spark runs: their own START and COMPLETE/FAIL, each naming the Airflow task's run
    # (their job names: the jobs' app names, spark_jobs/decode/job.py, check_quality.py)
    for task_events, app, end in ((decode, "kafkalog_decode_segments", "COMPLETE"),
                                  (audit, "check_quality", "FAIL")):
        spark = of(app)
        assert [e["eventType"] for e in spark] == ["START", end], [
            (e["job"]["name"], e["eventType"]) for e in events]
        for e in spark:
            parent = e["run"]["facets"]["parent"]
            assert parent["run"]["runId"] == task_events[0]["run"]["runId"]
            assert (parent["job"]["namespace"], parent["job"]["name"]) == (
                NAMESPACE, task_events[0]["job"]["name"])
            assert parent["root"]["job"]["name"] == DAG_ID
            assert e["job"]["namespace"] == NAMESPACE

    # the audit's results on the tables it read: crc failed on batches, with its row count
    failed = audit[-1]
    batches_path = catalog.load_table(("kafka", "batches")).location()[len("file://"):]
    batches = next(d for d in failed["inputs"] if d["name"] == batches_path)
    assertions = batches["inputFacets"]["dataQualityAssertions"]["assertions"]
    crc = [a for a in assertions if a["assertion"] == "crc"]
    assert crc and all(not a["success"] for a in crc), assertions
    assert any(a["params"]["place"] == f"{TOPIC}-0" for a in crc)
    assert any(a["success"] for a in assertions)  # the checks that passed say so too
    table = catalog.load_table(("kafka", "batches"))
    head = table.refs()[branch_name(run_id)].snapshot_id
    assert batches["inputFacets"]["dataQualityMetrics"]["rowCount"] == len(
        table.scan(snapshot_id=head).to_arrow())
    assert {d["name"].rsplit("/", 1)[-1] for d in failed["outputs"]} >= {"dq_results"}


# ------------------------------------------------------------------ the pieces, without a run
def test_locations_are_named_as_openlineage_names_them():
    """OpenLineage's spec/Naming.md: S3 is namespace s3://{bucket}, name {object key}; a local
    file system is namespace file, name {path}."""
    from kafkalog_pipeline.lineage import location_name

    assert location_name("s3://snap/nightly/2026-11-21/") == ("s3://snap", "nightly/2026-11-21")
    assert location_name("s3://tier/kafka-tiered") == ("s3://tier", "kafka-tiered")
    assert location_name("file:///w/kafka/records") == ("file", "/w/kafka/records")
    assert location_name("/w/kafka/records/") == ("file", "/w/kafka/records")


def asset_env(monkeypatch, warehouse: str, catalog: str | None = None) -> None:
    """The environment a DAG file is parsed in: the warehouse (and catalog), nothing else."""
    for var in ("KAFKALOG_TABLE_LOCATION", "KAFKALOG_CATALOG", "KAFKALOG_NAMESPACE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("KAFKALOG_WAREHOUSE", warehouse)
    if catalog:
        monkeypatch.setenv("KAFKALOG_CATALOG", catalog)


def test_a_table_asset_is_the_dataset_the_lineage_events_name(tmp_path, monkeypatch):
    """A local warehouse's embedded catalog (the demo's): each table's asset, made before the
    warehouse exists as at parse time (nothing opened or written), is what pyiceberg then
    makes the table as, named as the events name its output dataset; Airflow's own
    conversion of the asset (the common-io provider's ``file`` converter, which the
    OpenLineage provider applies to outlets) gives the same namespace and name."""
    from airflow.providers.openlineage.utils.utils import translate_airflow_asset

    from kafkalog_pipeline.assets import table_asset
    from kafkalog_pipeline.lineage import table_datasets
    from spark_jobs.warehouse import Warehouse

    root = tmp_path / "warehouse"
    asset_env(monkeypatch, str(root))
    names = ("records", "ledger", "consumer_offsets", "values__shop_dot_orders")
    assets = {n: table_asset(n) for n in names}
    assert not root.exists()  # parse time wrote nothing (no .pyiceberg.yaml, no catalog.db)
    assert assets["records"].uri == f"file://{root}/kafka/records"
    assert assets["records"].name == "kafkalog.records"

    wh = Warehouse(str(root))
    for name in names[:3]:
        wh.table(name)
    wh.typed_table(names[3], pa.schema([pa.field("order_id", pa.int64())]))
    for dataset in table_datasets(wh, names, "output"):
        table = dataset.name.rsplit("/", 1)[-1]
        ours = translate_airflow_asset(assets[table], None)
        assert (ours.namespace, ours.name) == (dataset.namespace, dataset.name) == (
            "file", wh.load(table).location()[len("file://"):]), table


def test_an_s3_warehouse_asset_joins_the_datasets_namespace_and_name(
        tmp_path, s3_bucket, s3_catalog, monkeypatch):
    """The production shape (docker/compose.yaml): the warehouse root on S3, a SQL catalog
    whose warehouse is ``s3://<bucket>/iceberg``: the asset's URI is the S3 location the
    table gets, the events' namespace ``s3://<bucket>`` and name its key joined (the naming
    spec's URI). The Amazon provider, not installed here, turns an ``s3://`` asset into that
    pair; without it Airflow keeps the URI as written (no normalizer) and names no dataset."""
    from airflow.providers.openlineage.utils.utils import translate_airflow_asset

    from kafkalog_pipeline.assets import table_asset
    from kafkalog_pipeline.lineage import table_datasets
    from spark_jobs import storage
    from spark_jobs.warehouse import Warehouse

    asset_env(monkeypatch, f"s3://{s3_bucket}/kafka", s3_catalog)
    asset = table_asset("records")
    assert asset.uri == f"s3://{s3_bucket}/iceberg/kafka/records"
    wh = Warehouse(f"s3://{s3_bucket}/kafka", s3_catalog, s3=storage.S3Config.from_env())
    wh.table("records")
    [dataset] = table_datasets(wh, ["records"], "output")
    assert (dataset.namespace, dataset.name) == (f"s3://{s3_bucket}", "iceberg/kafka/records")
    assert asset.uri == f"{dataset.namespace}/{dataset.name}" == wh.load("records").location()
    converted = translate_airflow_asset(asset, None)
    if converted is not None:  # the Amazon provider is installed
        assert (converted.namespace, converted.name) == (dataset.namespace, dataset.name)


def test_where_the_catalog_places_its_tables_the_setting_says(tmp_path, monkeypatch):
    """A REST catalog's server places its tables: no URI can be derived, so the asset keeps
    the logical one unless KAFKALOG_TABLE_LOCATION says; a template that names no table (or
    another field) is refused; no warehouse in the environment: the logical URI."""
    from kafkalog_pipeline.assets import table_asset
    from kafkalog_pipeline.settings import SettingError

    monkeypatch.setenv("PYICEBERG_CATALOG__RESTY__URI", "https://iceberg.example.com/api")
    monkeypatch.setenv("PYICEBERG_CATALOG__RESTY__WAREHOUSE", "lake")
    asset_env(monkeypatch, "s3://lake/kafkalog", "resty")
    assert table_asset("records").uri == "kafkalog://warehouse/records"
    monkeypatch.setenv("KAFKALOG_TABLE_LOCATION", "s3://lake/tables/{namespace}/{table}/")
    assert table_asset("records").uri == "s3://lake/tables/kafka/records"
    for bad in ("s3://lake/tables/{namespace}", "s3://lake/{schema}/{table}"):
        monkeypatch.setenv("KAFKALOG_TABLE_LOCATION", bad)
        with pytest.raises(SettingError, match="KAFKALOG_TABLE_LOCATION"):
            table_asset("records")
    monkeypatch.delenv("KAFKALOG_TABLE_LOCATION")
    monkeypatch.delenv("KAFKALOG_WAREHOUSE")
    assert table_asset("ledger").uri == "kafkalog://warehouse/ledger"


def test_the_spark_integrations_transport_properties_become_the_clients():
    """The keys OpenLineage's Spark integration reads (spark.openlineage.transport.*: its docs'
    configuration page) as the Python client's transport configuration."""
    from spark_jobs.lineage import job_name, properties, transport_config

    props = properties({"spark.openlineage.transport.type": "http",
                        "spark.openlineage.transport.url": "http://marquez:5000",
                        "spark.openlineage.transport.endpoint": "api/v1/lineage",
                        "spark.openlineage.transport.timeoutInMillis": "5000",
                        "spark.openlineage.transport.auth.type": "api_key",
                        "spark.openlineage.transport.auth.apiKey": "k",
                        "spark.openlineage.transport.headers.X-Team": "data",
                        "spark.app.name": "not ours"})
    assert transport_config(props) == {
        "type": "http", "url": "http://marquez:5000", "endpoint": "api/v1/lineage",
        "timeout": 5.0, "auth": {"type": "api_key", "apiKey": "k"},
        "custom_headers": {"X-Team": "data"}}
    assert transport_config({"transport.type": "file", "transport.location": "/l.jsonl"}) == {
        "type": "file", "log_file_path": "/l.jsonl", "append": True}
    assert transport_config({}) is None  # no transport: no events
    with pytest.raises(ValueError, match="kafka"):
        transport_config({"transport.type": "kafka"})
    assert job_name("kafkalog-decode-segments") == "kafkalog_decode_segments"


def test_a_rerun_is_the_child_of_the_task_that_triggers_it():
    """The rerun's conf leaves out the ``openlineage`` entry of this run's params (its own
    parent, from whoever triggered it): TriggerDagRunOperator then adds this task's run
    (apache-airflow-providers-standard utils/openlineage.py skips a conf that has one)."""
    from kafkalog_pipeline.tasks import OPENLINEAGE_CONF, rerun_request
    from tests.pipeline.dag_runs import FakeTI

    ti = FakeTI({("publish", "conflict"): {"table": "records", "runs": ["r0"], "files": 1},
                 ("plan", "plan"): {"dates": ["2026-11-20"]}})
    params = {"topics": "*", "rerun_of": None,
              OPENLINEAGE_CONF: {"parentRunId": "0190-old", "parentJobName": "x.y"}}
    _, conf = rerun_request({"ti": ti, "run_id": "manual__1", "params": params})
    assert OPENLINEAGE_CONF not in conf and conf["rerun_of"] == "manual__1"
