"""The DAG's tier (issue 34 item 4): the ``tiered_storage`` param reaches the decode job's and
the audit's command lines as ``--tiered-storage``, the key ring's folder reaches spark-submit's
environment only, and a run with a tier is one chunk that lists ``__remote_log_metadata``
whatever the topics filter says. Cheap: the plan's code against the moto S3 server; no Spark."""

from __future__ import annotations

import pytest

# Airflow reads its configuration at import: airflow_env sets it first.
from tests.airflow_env import DAGS  # noqa: E402

from kafkalog_pipeline import settings, tasks  # noqa: E402
from tests.segments import kp_v2  # noqa: E402
from spark_jobs import layout, storage  # noqa: E402

pytestmark = pytest.mark.pipeline

NIGHT = "2026-11-20"
TIER = "s3://tier-bucket/tiered/"


def test_a_chunk_spec_names_the_tier_and_the_job_parses_it_back():
    from spark_jobs.decode.cli import parse_args

    spec = layout.ChunkSpec(input="m.json", output="w", run_id="r", chunk_id=0, catalog="c",
                            namespace="n", tiered_storage=TIER)
    assert parse_args(spec.argv()).tiered_storage == TIER
    bare = layout.ChunkSpec(**{**vars(spec), "tiered_storage": None})
    assert layout.TIERED_STORAGE_FLAG not in bare.argv()
    assert parse_args(bare.argv()).tiered_storage is None


def test_the_plan_makes_one_chunk_that_lists_the_metadata(s3_endpoint, s3_bucket, tmp_path,
                                                          monkeypatch):
    import boto3

    client = boto3.client("s3", endpoint_url=s3_endpoint)
    for tp in ("orders-0", "orders-1", "payments-0", f"{layout.REMOTE_LOG_METADATA_TOPIC}-0"):
        client.put_object(Bucket=s3_bucket, Key=f"snaps/{NIGHT}/b1/{tp}/00000000000000000000.log",
                          Body=kp_v2(0, [tp.encode()] * 50))
    monkeypatch.setenv("KAFKALOG_MAX_CHUNKS", "8")
    monkeypatch.setenv("KAFKALOG_CHUNK_BYTES", "1")  # without a tier: a chunk per partition
    access = storage.S3Config(endpoint_url=s3_endpoint)

    def plan(run_id, **kw):
        return tasks.plan_run(run_id=run_id, dates=[NIGHT], warehouse=str(tmp_path / "w"),
                              bucket=s3_bucket, prefix="snaps", access=access, **kw)

    assert len(plan("r0")["decode_args"]) == 4
    summary = plan("r1", topics="orders", tiered_storage=TIER)
    [args] = summary["decode_args"]
    assert args[args.index(layout.TIERED_STORAGE_FLAG) + 1] == TIER
    uri = args[args.index("--input") + 1]
    store, key = storage.open_object(uri, access.resolved())
    listed = sorted(e["uri"].split(f"/{NIGHT}/b1/")[1].split("/")[0]
                    for e in layout.read_manifest(store.read(key), uri))
    assert listed == [f"{layout.REMOTE_LOG_METADATA_TOPIC}-0", "orders-0", "orders-1"]


def test_the_key_ring_goes_into_the_environment_and_the_audit_is_told_the_tier(monkeypatch):
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    from kafkalog_pipeline.operators import KafkalogSparkSubmitOperator

    monkeypatch.setenv("AIRFLOW_VAR_KAFKALOG_TIER_KEYS", "/etc/kafkalog/tier-keys")
    seen = []

    def submit(self, context):  # what spark-submit would be given; the audit's output: none
        seen.append((dict(self.env_vars), list(self.application_args)))
        self.job_output = type("Output", (), {"verdict": None})()
    monkeypatch.setattr(SparkSubmitOperator, "execute", submit)
    context = {"params": {settings.TIER_PARAM: TIER}}
    decode_args = [tasks.DECODE_JOB, "--input", "m.json", layout.TIERED_STORAGE_FLAG, TIER]
    KafkalogSparkSubmitOperator(task_id="d", application="x.py",
                                application_args=decode_args).execute(context)
    audit = KafkalogSparkSubmitOperator(task_id="q", application="x.py",
                                        application_args=tasks.quality_args())
    audit.execute(context)
    (decode_env, decode_argv), (audit_env, audit_argv) = seen
    assert decode_env[layout.TIER_KEYS_ENV] == audit_env[layout.TIER_KEYS_ENV] == \
        "/etc/kafkalog/tier-keys"
    assert decode_argv == decode_args  # the plan put the tier there; nothing added
    assert audit_argv[-2:] == [layout.TIERED_STORAGE_FLAG, TIER]
    assert not any("tier-keys" in a for a in decode_argv + audit_argv)
    seen.clear()
    KafkalogSparkSubmitOperator(task_id="q2", application="x.py",
                                application_args=tasks.quality_args()).execute({"params": {}})
    assert layout.TIER_KEYS_ENV not in seen[0][0]  # no tier: no key ring, no flag
    assert seen[0][1] == tasks.quality_args()


def test_the_dag_param():
    from airflow.dag_processing.dagbag import DagBag

    dag = DagBag(dag_folder=str(DAGS / "kafka_segments_nightly.py")).dags["kafka_segments_nightly"]
    param = dag.params.get_param(settings.TIER_PARAM)
    assert param.value is None and "__remote_log_metadata" in param.description
