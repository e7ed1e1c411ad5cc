"""Airflow settings for the DAG tests; import this module before anything imports airflow.

Airflow reads its configuration once, at import: a temporary home (SQLite metadata
DB), this repository's dags/, no examples, low parallelism, short retry delays.
"""

import os
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DAGS = REPO / "dags"
DAG_ID = "kafka_segments_nightly"

os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="kafkalog-dags-airflow-"))
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(DAGS)
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__CORE__PARALLELISM"] = "2"
os.environ.setdefault("KAFKALOG_RETRY_DELAY_SECONDS", "1")
