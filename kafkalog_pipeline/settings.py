"""Where the pipeline's settings come from: Airflow Variables, else the environment.

Every setting has an Airflow Variable name and an environment variable name
(see ``SETTINGS``); a Variable wins over the environment, the environment over
the default. Nothing here touches the metadata database at import time: the
DAG file only calls :func:`parse_time_setting`, which reads the environment
(Variables at parse time cost a database query per parse, see Airflow's best
practices), and tasks call :func:`get` at run time.

S3 access for the snapshot bucket (and an ``s3://`` warehouse) comes from the
Airflow connection ``aws_default`` when it exists (login = access key id,
password = secret key, extra ``endpoint_url``, ``region_name``,
``aws_session_token``: the Amazon provider's form), else from the standard AWS
environment variables (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ...).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[1]

#: the DAG that ingests and audits nights (dags/kafka_segments_nightly.py; backfills are its runs)
NIGHTLY_DAG_ID = "kafka_segments_nightly"

#: name -> (Airflow Variable, environment variable, default)
SETTINGS: dict[str, tuple[str, str, str | None]] = {
    "warehouse": ("kafkalog_warehouse", "KAFKALOG_WAREHOUSE", None),
    "snapshot_bucket": ("kafkalog_snapshot_bucket", "KAFKALOG_SNAPSHOT_BUCKET", None),
    "snapshot_prefix": ("kafkalog_snapshot_prefix", "KAFKALOG_SNAPSHOT_PREFIX", "snapshots"),
    "snapshot_template": ("kafkalog_snapshot_template", "KAFKALOG_SNAPSHOT_TEMPLATE",
                          "{prefix}/{snapshot_date}/"),
    "chunk_bytes": ("kafkalog_chunk_bytes", "KAFKALOG_CHUNK_BYTES", str(256 * 1024 * 1024)),
    "max_chunks": ("kafkalog_max_chunks", "KAFKALOG_MAX_CHUNKS", "16"),
    # the Iceberg catalog (its name in pyiceberg's configuration) and namespace
    "catalog": ("kafkalog_catalog", "KAFKALOG_CATALOG", "kafkalog"),
    "namespace": ("kafkalog_namespace", "KAFKALOG_NAMESPACE", "kafka"),
}

#: read once, at parse time, from the environment only
PARSE_TIME: dict[str, tuple[str, str]] = {
    "schedule": ("KAFKALOG_NIGHTLY_SCHEDULE", "0 3 * * *"),
    "retry_delay_seconds": ("KAFKALOG_RETRY_DELAY_SECONDS", "60"),
    "retries": ("KAFKALOG_RETRIES", "2"),
    # how long `plan` sleeps (up_for_reschedule) while another run holds the warehouse
    "wait_seconds": ("KAFKALOG_WAIT_SECONDS", "60"),
    # JSON object of Spark properties for every spark-submit (--conf); small shuffles suit
    # nightly snapshots on a few cores: Spark's default of 200 partitions per shuffle makes
    # the audit's many small queries crawl
    "spark_conf": ("KAFKALOG_SPARK_CONF",
                   '{"spark.sql.shuffle.partitions": "8", "spark.default.parallelism": "4"}'),
}

AWS_CONN_ID = "aws_default"
SPARK_CONN_ID = "spark_default"


class SettingError(RuntimeError):
    """A required setting is missing or malformed (a permanent task error)."""


def parse_time_setting(name: str) -> str:
    env, default = PARSE_TIME[name]
    return os.environ.get(env) or default


def spark_conf() -> dict[str, str]:
    """Spark properties for spark-submit, from ``KAFKALOG_SPARK_CONF`` (read at parse time)."""
    raw = parse_time_setting("spark_conf")
    try:
        conf = json.loads(raw)
    except ValueError as err:
        raise SettingError(f"KAFKALOG_SPARK_CONF is not JSON: {err}") from None
    if not isinstance(conf, dict):
        raise SettingError("KAFKALOG_SPARK_CONF must be a JSON object")
    return {str(k): str(v) for k, v in conf.items()}


def get(name: str, *, required: bool = False) -> str | None:
    """Setting ``name``: Airflow Variable, else environment, else default."""
    var, env, default = SETTINGS[name]
    value = None
    try:
        from airflow.sdk import Variable

        value = Variable.get(var, default=None)
    except Exception as err:  # outside a task / no metadata DB: the environment decides
        log.debug("Variable %s not readable (%s); using the environment", var, err)
    if value in (None, ""):
        value = os.environ.get(env) or default
    if required and not value:
        raise SettingError(
            f"setting {name!r} is not set: define the Airflow Variable {var!r} "
            f"or the environment variable {env}")
    return value


def get_int(name: str) -> int:
    raw = get(name)
    try:
        value = int(str(raw))
    except ValueError:
        var, env, _ = SETTINGS[name]
        raise SettingError(f"{var}/{env} must be an integer, not {raw!r}") from None
    if value <= 0:
        raise SettingError(f"{SETTINGS[name][0]} must be positive, not {value}")
    return value


@dataclass(frozen=True)
class S3Access:
    """How to reach S3: endpoint, region and (optional) explicit credentials.

    ``repr`` never shows the secret.
    """

    endpoint_url: str | None = None
    region: str | None = None
    access_key: str | None = None
    secret_key: str | None = None
    session_token: str | None = None
    source: str = "environment"

    def __repr__(self) -> str:
        return (f"S3Access(endpoint_url={self.endpoint_url!r}, region={self.region!r}, "
                f"explicit_keys={self.access_key is not None}, source={self.source!r})")

    def env(self) -> dict[str, str]:
        """Environment for a child process (spark-submit) so that its boto3 sees the same S3."""
        out = {}
        if self.endpoint_url:
            out["AWS_ENDPOINT_URL"] = self.endpoint_url
        if self.region:
            out["AWS_DEFAULT_REGION"] = self.region
        if self.access_key:
            out["AWS_ACCESS_KEY_ID"] = self.access_key
            out["AWS_SECRET_ACCESS_KEY"] = self.secret_key or ""
            if self.session_token:
                out["AWS_SESSION_TOKEN"] = self.session_token
        return out

    def storage_config(self):
        """The same access as a :class:`spark_jobs.storage.S3Config`."""
        from spark_jobs.storage import S3Config

        if self.access_key:
            return S3Config(endpoint_url=self.endpoint_url, region=self.region or "us-east-1",
                            access_key=self.access_key, secret_key=self.secret_key,
                            session_token=self.session_token)
        base = S3Config.from_env(self.endpoint_url)
        return S3Config(endpoint_url=base.endpoint_url, region=self.region or base.region,
                        access_key=base.access_key, secret_key=base.secret_key,
                        session_token=base.session_token)


def s3_access(conn_id: str = AWS_CONN_ID) -> S3Access:
    """S3 access from the Airflow connection ``conn_id`` if it exists, else the environment."""
    env_endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    env_region = os.environ.get("AWS_DEFAULT_REGION") or os.environ.get("AWS_REGION")
    conn = None
    try:
        from airflow.sdk import BaseHook

        conn = BaseHook.get_connection(conn_id)
    except Exception as err:  # AirflowNotFoundException, or no Airflow around
        log.info("connection %r not found (%s): S3 access from the environment", conn_id,
                 type(err).__name__)
    if conn is None:
        return S3Access(endpoint_url=env_endpoint, region=env_region)
    extra = conn.extra_dejson or {}
    return S3Access(
        endpoint_url=extra.get("endpoint_url") or (conn.host or None) or env_endpoint,
        region=extra.get("region_name") or env_region,
        access_key=conn.login or extra.get("aws_access_key_id") or None,
        secret_key=conn.password or extra.get("aws_secret_access_key") or None,
        session_token=extra.get("aws_session_token") or None,
        source=f"connection {conn_id}",
    )


def spark_env(access: S3Access) -> dict[str, str]:
    """Environment for spark-submit: this venv's python for driver and workers, S3 access."""
    python = sys.executable
    bindir = os.path.dirname(python)
    env = {
        "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON") or python,
        "PYSPARK_DRIVER_PYTHON": os.environ.get("PYSPARK_DRIVER_PYTHON") or python,
        "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP") or "127.0.0.1",
        # spark-submit is found on this PATH (the venv's bin first)
        "PATH": bindir + os.pathsep + os.environ.get("PATH", ""),
        # the jobs import this checkout's packages, expectations/ included (not installed)
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH"))
                                      if p),
    }
    env.update(access.env())
    return env


def spark_entry() -> str:
    """Absolute path of the script spark-submit runs (it calls a ``spark_jobs`` module's main)."""
    return str(Path(__file__).resolve().with_name("spark_entry.py"))
