"""The DAG's choice of Schema Registry (issue 20, part 6): the snapshot's own ``_schemas``
by default, or a live registry named by an Airflow connection. Cheap: the plan's code
against the moto S3 server, connections from ``AIRFLOW_CONN_<ID>``; no Spark."""

from __future__ import annotations

import json

import pytest

# Airflow reads its configuration at import: airflow_env sets it first.
from tests.airflow_env import DAGS  # noqa: E402

from kafkalog_pipeline import schema_registry, tasks  # noqa: E402
from spark_jobs import layout, storage  # noqa: E402
from spark_jobs.decode import values  # noqa: E402

from tests.schema_data import Data, write_segment  # noqa: E402

pytestmark = pytest.mark.pipeline

NIGHT = "2026-11-20"


@pytest.fixture(scope="module")
def night(tmp_path_factory):
    """A night with ``_schemas-0`` and one Avro topic (confluent-kafka's serializers)."""
    data = Data()
    root = tmp_path_factory.mktemp("sr-night")
    write_segment(root / NIGHT / "_schemas-0", data.schemas)
    write_segment(root / NIGHT / "orders-0", data.orders)
    return root


def _plan(bucket, access, tmp_path, run_id, **kw):
    return tasks.plan_run(run_id=run_id, dates=[NIGHT], warehouse=str(tmp_path / "w"),
                          bucket=bucket, prefix="snaps", access=access, **kw)


def test_the_plan_hands_every_chunk_the_snapshots_schemas_or_the_connections_url(
        s3_endpoint, s3_bucket, night, tmp_path):
    import boto3

    from demo import data as demo_data

    demo_data.upload(night, s3_bucket, "snaps", boto3.client("s3", endpoint_url=s3_endpoint))
    access = storage.S3Config(endpoint_url=s3_endpoint)
    config = access.resolved()

    def registry_arg(summary):
        got = {a[a.index("--schema-registry") + 1] for a in summary["decode_args"]}
        assert len(got) == 1 and summary["decode_args"]
        return got.pop()

    # default: a manifest of the night's _schemas segments, even when the topics filter
    # leaves _schemas out of the decode
    for topics, run_id in ((None, "r1"), ("orders", "r2")):
        summary = _plan(s3_bucket, access, tmp_path, run_id, topics=topics)
        uri = registry_arg(summary)
        assert uri.endswith(f"/{schema_registry.SCHEMAS_MANIFEST}")
        store, key = storage.open_object(uri, config)
        listed = [e["uri"] for e in layout.read_manifest(store.read(key), uri)]
        assert listed == [f"s3://{s3_bucket}/snaps/{NIGHT}/_schemas-0/00000000000000000000.log"]
        assert summary["schemas"] == "1 _schemas segments"
        # the job reads it back into the registry the tasks get
        registry = values.registry_for_run(uri, [], config)
        assert registry.problems == [] and "orders-value" in registry.subjects()
    # a live registry: its URL, no credentials, on the command line
    summary = _plan(s3_bucket, access, tmp_path, "r3", schema_registry="http://sr:8081")
    assert registry_arg(summary) == "http://sr:8081" and summary["schemas"] == "http://sr:8081"
    assert not any("secret" in a for args in summary["decode_args"] for a in args)


def test_the_decode_task_gets_the_credentials_in_its_environment_only(monkeypatch):
    """The decode operator puts the connection's login and password into spark-submit's
    environment (the audit's gets none); its arguments carry no credentials."""
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    from kafkalog_pipeline.operators import KafkalogSparkSubmitOperator

    monkeypatch.setenv("AIRFLOW_CONN_SR_PROD", json.dumps(
        {"conn_type": "http", "host": "http://registry:8081", "login": "svc", "password": "pw"}))
    seen = []
    monkeypatch.setattr(SparkSubmitOperator, "execute",
                        lambda self, context: seen.append(dict(self.env_vars)))
    context = {"params": {schema_registry.PARAM: "sr_prod"}}
    KafkalogSparkSubmitOperator(task_id="d", application="x.py", application_args=[
        tasks.DECODE_JOB, "--schema-registry", "http://registry:8081"]).execute(context)
    assert (seen[0][values.AUTH_ENV[0]], seen[0][values.AUTH_ENV[1]]) == ("svc", "pw")
    KafkalogSparkSubmitOperator(task_id="d2", application="x.py",
                                application_args=[tasks.DECODE_JOB]).execute({"params": {}})
    assert values.AUTH_ENV[0] not in seen[1]


def test_connection_url_and_auth(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_SR_PROD", json.dumps(
        {"conn_type": "http", "host": "https://registry.example:8081/", "login": "svc",
         "password": "secret"}))
    monkeypatch.setenv("AIRFLOW_CONN_SR_BARE", json.dumps(
        {"conn_type": "http", "host": "registry", "port": 8081}))
    assert schema_registry.connection_url(schema_registry.get_connection("sr_prod")) == \
        "https://registry.example:8081"
    assert schema_registry.connection_url(schema_registry.get_connection("sr_bare")) == \
        "http://registry:8081"
    assert schema_registry.auth_env("sr_prod") == {values.AUTH_ENV[0]: "svc",
                                                   values.AUTH_ENV[1]: "secret"}
    assert schema_registry.auth_env("sr_bare") == {} and schema_registry.auth_env(None) == {}
    with pytest.raises(ValueError, match="no_such_conn"):
        schema_registry.get_connection("no_such_conn")


def test_the_dag_param_and_the_plan_task(monkeypatch):
    """The trigger form's param (empty by default); the plan task resolves the connection
    to its URL and fails at once, naming it, where it does not exist."""
    from airflow.dag_processing.dagbag import DagBag
    from airflow.sdk.exceptions import AirflowFailException

    dag = DagBag(dag_folder=str(DAGS / "kafka_segments_nightly.py")).dags["kafka_segments_nightly"]
    param = dag.params.get_param(schema_registry.PARAM)
    assert param.value is None and "_schemas" in param.description
    assert "connection" in param.schema["title"].lower()

    monkeypatch.setenv("AIRFLOW_CONN_SR_PROD", json.dumps(
        {"conn_type": "http", "host": "http://registry:8081", "login": "svc", "password": "pw"}))
    seen = {}
    monkeypatch.setattr(tasks, "wait_for_warehouse", lambda context: None)
    monkeypatch.setattr(tasks, "plan_run", lambda **kw: seen.update(kw) or {
        "warehouse": "w", "catalog": "c", "namespace": "n", "decode_args": [["x"]], "chunks": [{}],
        "segments": 1, "already_ingested": 0, "bytes": 1})

    class TI:
        def xcom_push(self, key, value):
            pass

    context = {"params": {"date_from": NIGHT, schema_registry.PARAM: "sr_prod"},
               "run_id": "r", "ti": TI()}
    assert tasks.plan_from_context(context) == [["x"]]
    assert seen["schema_registry"] == "http://registry:8081"
    context["params"][schema_registry.PARAM] = "missing_conn"
    with pytest.raises(AirflowFailException, match="missing_conn"):
        tasks.plan_from_context(context)
