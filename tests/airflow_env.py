"""Airflow settings for the DAG tests; import this module before anything imports airflow.

Airflow reads its configuration once, at import: a temporary home (SQLite metadata
DB), this repository's dags/ and plugins/, no examples, low parallelism, short retry delays.
"""

import os
import tempfile
from pathlib import Path

from kafkalog_pipeline.settings import NIGHTLY_DAG_ID
from tests.spark_settings import SUBMIT_CONF

REPO = Path(__file__).resolve().parent.parent
DAGS = REPO / "dags"
DAG_ID = NIGHTLY_DAG_ID

os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="kafkalog-dags-airflow-"))
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(DAGS)
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
# this repository's plugins, as in the demo: the nightly runs' notes are a listener's
os.environ["AIRFLOW__CORE__PLUGINS_FOLDER"] = str(REPO / "plugins")
os.environ["AIRFLOW__CORE__PARALLELISM"] = "2"
os.environ.setdefault("KAFKALOG_RETRY_DELAY_SECONDS", "1")
# every spark-submit of the DAGs (read at parse time): a JVM that starts fast (spark_settings)
os.environ.setdefault("KAFKALOG_SPARK_CONF", SUBMIT_CONF)


def parse_dags(dag_folder: Path) -> dict:
    """Parse ``dag_folder`` (a folder or one file) with a DagBag in a fresh interpreter
    that has already imported Airflow, as the dag-processor has: import errors, DAG
    ids, the seconds the parse took, and every package it imported (top level)."""
    import json
    import subprocess
    import sys

    code = (
        "import time, json, sys\n"
        "from airflow.dag_processing.dagbag import DagBag\n"
        "t = time.perf_counter()\n"
        f"bag = DagBag(dag_folder={str(dag_folder)!r})\n"
        "elapsed = time.perf_counter() - t\n"
        "print(json.dumps({'errors': {k: str(v) for k, v in bag.import_errors.items()},"
        " 'dags': sorted(bag.dags), 'seconds': elapsed,"
        " 'packages': sorted({m.split('.')[0] for m in sys.modules})}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ), timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


#: the peer a DAG file's parse time is measured against: the least any DAG that submits a
#: Spark job pays (the Spark provider's operator, whose import pulls in the OpenLineage
#: provider's listener chain where that provider is installed, plus one TaskFlow task)
PEER_DAG = """\
from datetime import datetime
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, task

with DAG("peer_spark_dag", start_date=datetime(2026, 1, 1), schedule="@daily"):
    @task
    def plan():
        return 1
    plan() >> SparkSubmitOperator(task_id="decode", application="job.py")
"""


def parse_against_peer(dag_folder: Path, rounds: int = 3) -> dict:
    """Parse ``dag_folder`` and :data:`PEER_DAG` in turn, ``rounds`` times each (fresh
    interpreters, interleaved, so that both see the same load): the last parse of ours, and
    the fastest seconds of each (``seconds``, ``peer_seconds``)."""
    with tempfile.TemporaryDirectory(prefix="kafkalog-peer-dag-") as folder:
        peer = Path(folder) / "peer_spark_dag.py"
        peer.write_text(PEER_DAG)
        ours, theirs = [], []
        for _ in range(rounds):
            result = parse_dags(dag_folder)
            ours.append(result["seconds"])
            peer_result = parse_dags(peer)
            assert peer_result["errors"] == {}, peer_result
            theirs.append(peer_result["seconds"])
    return {**result, "seconds": min(ours), "peer_seconds": min(theirs)}
