#!/usr/bin/env bash
# One-shot setup before the Airflow components start (the airflow-init service of
# docker/compose.yaml): migrate the metadata database, then create the connections the DAGs use.
# Safe to run again: both connections are replaced, so compose.yaml stays their source of truth.
#
#   KAFKALOG_SPARK_MASTER  spark://HOST:PORT of the standalone master (spark_default)
#   AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_DEFAULT_REGION  (aws_default)
set -euo pipefail

: "${KAFKALOG_SPARK_MASTER:?must be spark://HOST:PORT}"
: "${AWS_ENDPOINT_URL:?must name the S3 endpoint}"
: "${AWS_ACCESS_KEY_ID:?}" "${AWS_SECRET_ACCESS_KEY:?}"
case "$KAFKALOG_SPARK_MASTER" in
    spark://*:*) ;;
    *) echo "airflow-init: KAFKALOG_SPARK_MASTER=$KAFKALOG_SPARK_MASTER is not spark://HOST:PORT" >&2
       exit 2 ;;
esac

# The JSON of connection $1, built from the environment by Python so that no value needs shell
# quoting. --conn-json keeps conn_type "aws" even where the Amazon provider is not installed
# (--conn-type would turn an unknown type into "generic").
conn_json() {
    python - "$1" <<'PY'
import json, os, sys

host, port = os.environ["KAFKALOG_SPARK_MASTER"].rsplit(":", 1)
connections = {
    # SparkSubmitOperator: host spark://HOST plus port make the master URL; the driver runs in
    # the task's own process (client mode), the executors on the workers.
    "spark_default": {
        "conn_type": "spark",
        "host": host,
        "port": int(port),
        "extra": {"deploy-mode": "client"},
    },
    # S3 (MinIO) for Airflow-side code; the Spark jobs' boto3 reads the same environment.
    "aws_default": {
        "conn_type": "aws",
        "login": os.environ["AWS_ACCESS_KEY_ID"],
        "password": os.environ["AWS_SECRET_ACCESS_KEY"],
        "extra": {
            "endpoint_url": os.environ["AWS_ENDPOINT_URL"],
            "region_name": os.environ.get("AWS_DEFAULT_REGION") or "us-east-1",
        },
    },
}
print(json.dumps(connections[sys.argv[1]]))
PY
}

replace_connection() {  # NAME
    local json
    json="$(conn_json "$1")"
    airflow connections delete "$1" >/dev/null 2>&1 || true
    airflow connections add "$1" --conn-json "$json"
}

airflow db migrate
replace_connection spark_default
replace_connection aws_default
echo "airflow-init: database migrated; spark_default -> $KAFKALOG_SPARK_MASTER, aws_default -> $AWS_ENDPOINT_URL"
