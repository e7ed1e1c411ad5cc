#!/usr/bin/env bash
# One-shot setup before the Airflow components start (the airflow-init service of
# docker/compose.yaml): migrate the metadata database, create the connections the DAGs use, then
# the Iceberg catalog's database and tables. Safe to run again: both connections are replaced, so
# compose.yaml stays their source of truth; the catalog's role gets the password of docker/.env
# again, its database and tables are made only where missing.
#
#   KAFKALOG_SPARK_MASTER  spark://HOST:PORT of the standalone master (spark_default)
#   AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_DEFAULT_REGION  (aws_default)
#   KAFKALOG_CATALOG (default kafkalog), KAFKALOG_NAMESPACE (default kafka),
#   PYICEBERG_CATALOG__<NAME>__*  the Iceberg catalog, as pyiceberg reads it
#   AIRFLOW__DATABASE__SQL_ALCHEMY_CONN  the account that creates a PostgreSQL catalog's database
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

# A SQL catalog on PostgreSQL (compose.yaml: PYICEBERG_CATALOG__KAFKALOG__URI names the role, its
# password and the database): the role, with the password of the URI (set again on every start,
# so a new docker/.env value takes effect), and the database, owned by it, where missing. Made
# with the metadata database's account, the postgres service's superuser (POSTGRES_USER), on the
# same server. Any other catalog (SQLite, REST, ...) has nothing to create here.
#
# Safety: names are checked (lower-case letters, digits, _) before they are quoted into SQL; the
# password is never sent as text: psycopg2 computes the server's verifier (SCRAM-SHA-256) here,
# so neither a statement log nor an error message can show it. The role may not be the admin's
# own or a superuser, the database not one of the server's own, and an existing database must
# already belong to the role: this step never takes anything over.
catalog_database() {
    python - <<'PY'
import os, re, sys

from pyiceberg.utils.config import Config
from sqlalchemy.engine import make_url

name = os.environ.get("KAFKALOG_CATALOG") or "kafkalog"
props = Config().get_catalog_config(name)
if props is None:
    sys.exit(f"airflow-init: no Iceberg catalog {name!r} is configured "
             f"(PYICEBERG_CATALOG__{name.upper()}__TYPE, __URI, __WAREHOUSE, ...)")
uri = make_url(props["uri"]) if props.get("type") == "sql" and props.get("uri") else None
if uri is None or uri.get_backend_name() != "postgresql":
    print(f"airflow-init: Iceberg catalog {name!r} ({props.get('type')}): no database to create")
    sys.exit(0)
admin = make_url(os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"])
if admin.get_backend_name() != "postgresql" or (admin.host, admin.port or 5432) != (uri.host, uri.port or 5432):
    sys.exit(f"airflow-init: the catalog's database server {uri.host}:{uri.port or 5432} is not the "
             "metadata database's: create its role and database there yourself")
role, database = uri.username, uri.database
for what, value in (("user", role), ("database", database)):
    if not re.fullmatch(r"[a-z_][a-z0-9_]*", value or "") or value.startswith("pg_"):
        sys.exit(f"airflow-init: catalog {what} {value!r}: use lower-case letters, digits and _ "
                 "(not beginning with pg_)")
if role == admin.username:
    sys.exit(f"airflow-init: the catalog's user {role!r} is the metadata database's own account: "
             "give the catalog a role of its own (ICEBERG_DB_USER)")
if database in {admin.database, "postgres", "template0", "template1"}:
    sys.exit(f"airflow-init: the catalog's database {database!r} is not its own: name another")
if not uri.password:
    sys.exit(f"airflow-init: the catalog's URI has no password for {role}")

import psycopg2
from psycopg2.extensions import encrypt_password

conn = psycopg2.connect(host=admin.host, port=admin.port or 5432, user=admin.username,
                        password=admin.password, dbname=admin.database)
try:
    conn.autocommit = True  # CREATE DATABASE cannot run inside a transaction
    with conn.cursor() as cur:
        cur.execute("SELECT rolsuper FROM pg_roles WHERE rolname = %s", (role,))
        found = cur.fetchone()
        cur.execute("SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = %s",
                    (database,))
        owner = cur.fetchone()
        if found and found[0]:
            sys.exit(f"airflow-init: role {role} is a superuser: not the catalog's own account")
        if owner is not None and owner[0] != role:
            sys.exit(f"airflow-init: database {database} exists and belongs to {owner[0]}, not "
                     f"to {role}: the catalog could not create its tables there")
        verb = "ALTER" if found else "CREATE"
        # the verifier the server stores, computed here with its password_encryption method
        verifier = encrypt_password(uri.password, role, conn)
        cur.execute(f'{verb} ROLE "{role}" WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE '
                    "PASSWORD %s", (verifier,))
        if owner is None:
            cur.execute(f'CREATE DATABASE "{database}" OWNER "{role}"')
finally:
    conn.close()
print(f"airflow-init: Iceberg catalog {name!r}: role {role} "
      f"{'created' if verb == 'CREATE' else 'kept, password set again'}, database {database} "
      f"{'created' if owner is None else 'already there'} on {uri.host}")
PY
}

# Open the catalog once: pyiceberg's SQL catalog creates its own tables in its database, and the
# tables' namespace is made; a wrong URI or password fails here, not in the first night's run.
open_catalog() {
    python - <<'PY'
import os

from pyiceberg.catalog import load_catalog

name = os.environ.get("KAFKALOG_CATALOG") or "kafkalog"
namespace = os.environ.get("KAFKALOG_NAMESPACE") or "kafka"
catalog = load_catalog(name)
catalog.create_namespace_if_not_exists(namespace)
print(f"airflow-init: Iceberg catalog {name!r} ({type(catalog).__name__}) opened, "
      f"namespace {namespace}: {len(catalog.list_tables(namespace))} tables")
PY
}

airflow db migrate
replace_connection spark_default
replace_connection aws_default
catalog_database
open_catalog
echo "airflow-init: database migrated; spark_default -> $KAFKALOG_SPARK_MASTER, aws_default -> $AWS_ENDPOINT_URL"
