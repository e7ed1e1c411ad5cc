"""Where the pipeline's settings come from: Airflow Variables, else the environment.

Every setting has an Airflow Variable name and an environment variable name
(see ``SETTINGS``); a Variable wins over the environment, the environment over
the default. Nothing here touches the metadata database at import time: the
DAG file only calls :func:`parse_time_setting` and :func:`environment`, which read the
environment (Variables at parse time cost a database query per parse, see Airflow's best
practices), and tasks call :func:`get` at run time.

S3 access for the snapshot bucket (and an ``s3://`` warehouse) comes from the
Airflow connection ``aws_default`` when it exists (login = access key id,
password = secret key, extra ``endpoint_url``, ``region_name``,
``aws_session_token``: the Amazon provider's form), else from the standard AWS
environment variables (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ...):
:func:`s3_access` builds it, a :class:`spark_jobs.storage.S3Config`.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path

from spark_jobs import layout, storage
from spark_jobs.audit.policy import POLICY_ENV

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
    # the tiered-storage key ring: a folder of PKCS#8 PEM private keys on the Spark hosts
    # (key id = file name without .pem), handed to spark-submit in its environment
    # (spark_jobs.layout.TIER_KEYS_ENV), never on its command line (docs/tiered.md)
    "tier_keys": ("kafkalog_tier_keys", layout.TIER_KEYS_ENV, None),
    # who is told of a failed or warned night (kafkalog_pipeline.alerts): an Airflow notifier
    # class by dotted name, its keyword arguments (a JSON object over ours), which grades
    # (comma-separated: fail, warn; empty: none) and, for SMTP, the recipients
    "notifier": ("kafkalog_notifier", "KAFKALOG_NOTIFIER",
                 "airflow.providers.smtp.notifications.smtp.SmtpNotifier"),
    "notifier_kwargs": ("kafkalog_notifier_kwargs", "KAFKALOG_NOTIFIER_KWARGS", "{}"),
    "notify_on": ("kafkalog_notify_on", "KAFKALOG_NOTIFY_ON", "fail,warn"),
    "notify_to": ("kafkalog_notify_to", "KAFKALOG_NOTIFY_TO", None),
    # the data-quality policy the audit grades by (a YAML file on the Spark hosts and
    # Airflow's workers; unset: the product's expectations/policy.yaml)
    "policy": ("kafkalog_policy", POLICY_ENV, None),
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
    # the default of the DAG param tiered_storage (the trigger form's, and a scheduled run's):
    # empty, no tier; the demo sets its own tier
    "tiered_storage": ("KAFKALOG_TIERED_STORAGE", ""),
    # the Deadline Alert (kafkalog_pipeline.alerts): a night not published this many hours
    # after its run's logical date, when its snapshot should have landed
    "publish_deadline_hours": ("KAFKALOG_PUBLISH_DEADLINE_HOURS", "6"),
    # the default of the DAG param sinks: empty, the audit's own default file
    # (expectations/sinks.yaml, which configures none); the demo names its own
    "sinks": ("KAFKALOG_SINKS", ""),
    # where the tables are, for the table assets' URIs (kafkalog_pipeline.assets), with
    # {namespace} and {table}: e.g. s3://lake/wh/{namespace}/{table} for a REST catalog, whose
    # server places its tables itself; empty: the catalog's layout (docs/lineage.md, "Assets")
    "table_location": ("KAFKALOG_TABLE_LOCATION", ""),
}

#: the DAG param naming a tier to read beside the snapshot (``s3://bucket/prefix``; empty: none)
TIER_PARAM = "tiered_storage"
#: the DAG param naming the sinks file the audit reconciles (docs/sinks.md; empty: the
#: audit's default, ``expectations/sinks.yaml``)
SINKS_PARAM = "sinks"
#: the audit's option taking it (``spark_jobs.check_quality --sinks``)
SINKS_FLAG = "--sinks"
#: the DAG params naming topics (a regular expression, whole name) for per-key state tables:
#: ``latest__<topic>`` and Debezium's ``cdc__<topic>`` (issue 35; empty: only the topics
#: found compacted, or whose values are Debezium envelopes)
LATEST_PARAM, CDC_PARAM = "latest_topics", "cdc_topics"

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


def environment(name: str) -> str | None:
    """Setting ``name`` as the environment says, else its default: what the DAG file reads at
    parse time (no Variable: :func:`get` reads those at run time)."""
    _, env, default = SETTINGS[name]
    return os.environ.get(env) or default


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
        value = environment(name)
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


def s3_access(conn_id: str = AWS_CONN_ID) -> storage.S3Config:
    """S3 access from the Airflow connection ``conn_id`` if it exists, else the environment.

    A connection's keys are explicit (spark-submit is handed them); without a connection, or
    without keys in it, the keys are the environment's, resolved by boto's chain when needed
    (:meth:`spark_jobs.storage.S3Config.resolved`).
    """
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
        return storage.S3Config(endpoint_url=env_endpoint, region=env_region)
    extra = conn.extra_dejson or {}
    access_key = conn.login or extra.get("aws_access_key_id") or None
    return storage.S3Config(
        endpoint_url=extra.get("endpoint_url") or (conn.host or None) or env_endpoint,
        region=extra.get("region_name") or env_region,
        access_key=access_key,
        secret_key=conn.password or extra.get("aws_secret_access_key") or None,
        session_token=extra.get("aws_session_token") or None,
        explicit=access_key is not None,
        source=f"connection {conn_id}",
    )


def spark_env(access: storage.S3Config) -> dict[str, str]:
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
    env.update(access.child_env())
    return env


def spark_entry() -> str:
    """Absolute path of the script spark-submit runs (it calls a ``spark_jobs`` module's main)."""
    return str(Path(__file__).resolve().with_name("spark_entry.py"))


def tier_args(tier: str | None) -> list[str]:
    """The decode job's and the audit's arguments naming the run's tier (none without one)."""
    return [layout.TIERED_STORAGE_FLAG, tier] if tier else []


def policy_args() -> list[str]:
    """The audit's ``--policy`` (the ``policy`` setting), none where it is unset."""
    path = get("policy")
    return ["--policy", path] if path else []


def audit_args(params) -> list[list[str]]:
    """The audit's arguments the run's params add, as ``[flag, value]`` pairs: its tier
    (:func:`tier_args`), its sinks file (the param ``sinks``; none where empty), and the
    policy it grades by (:func:`policy_args`)."""
    params = params or {}
    pairs = [tier_args(params.get(TIER_PARAM))]
    sinks = params.get(SINKS_PARAM)
    pairs.append([SINKS_FLAG, str(sinks)] if sinks else [])
    pairs.append(policy_args())
    return [p for p in pairs if p]


def tier_env(tier: str | None) -> dict[str, str]:
    """spark-submit's environment for a run reading ``tier``: the key ring's folder (the
    ``tier_keys`` setting), never a command-line argument; empty without a tier or a key
    ring (unencrypted segments need none)."""
    folder = get("tier_keys") if tier else None
    return {layout.TIER_KEYS_ENV: folder} if folder else {}
