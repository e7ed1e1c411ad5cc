"""Which Schema Registry the decode job decodes values with (docs/schemas.md, "The DAG").

* Default: the snapshot's own ``_schemas`` topic. The plan writes its segments (every
  night of the run, in date order, whatever the ``topics`` filter says) into a manifest of
  their own, ``_staging/<run token>/schemas.json``, and every chunk's decode job gets
  ``--schema-registry <that manifest>``: a chunk need not hold ``_schemas`` itself.
* The DAG param ``schema_registry_conn_id`` names an Airflow connection instead: a live
  registry, read only. Its ``host`` is the URL (``http://registry:8081``; a bare host
  takes the connection's ``schema`` as scheme, default http, and its ``port``); its
  ``login`` and ``password``, if set, are HTTP basic auth. The URL goes on the job's
  command line; the credentials only into the spark-submit child's environment
  (``spark_jobs.decode.values.AUTH_ENV``), resolved inside the running task.

No ``_schemas`` in the snapshot and no connection: the job decodes no values (the
records' value columns stay null).
"""

from __future__ import annotations

#: the DAG param naming the connection (empty: the snapshot's own ``_schemas``)
PARAM = "schema_registry_conn_id"
SCHEMAS_MANIFEST = "schemas.json"


def connection_url(conn) -> str:
    """The registry URL of an Airflow connection (``host``, or ``schema://host:port``)."""
    host = (conn.host or "").strip().rstrip("/")
    if not host:
        raise ValueError(f"connection {conn.conn_id!r} names no host (the registry's URL)")
    if "://" in host:
        return host
    scheme = (conn.schema or "http").strip() or "http"
    return f"{scheme}://{host}" + (f":{conn.port}" if conn.port else "")


def get_connection(conn_id: str):
    """Airflow connection ``conn_id``; a missing one is a ValueError (no retry fixes it)."""
    from airflow.sdk import BaseHook

    try:
        return BaseHook.get_connection(conn_id)
    except Exception as err:  # AirflowNotFoundException, a secrets backend's own errors
        raise ValueError(f"schema registry connection {conn_id!r}: {err}") from err


def auth_env(conn_id: str | None) -> dict[str, str]:
    """The decode job's environment for the connection's basic auth (empty: none)."""
    from spark_jobs.decode.values import AUTH_ENV

    if not conn_id:
        return {}
    conn = get_connection(conn_id)
    if not conn.login:
        return {}
    return {AUTH_ENV[0]: conn.login, AUTH_ENV[1]: conn.password or ""}


def registry_args(*, url: str | None, segments, store, token: str, bucket: str,
                  prefixes: dict[str, str], access, topics) -> tuple[list[str], str | None]:
    """The decode job's ``--schema-registry`` arguments, and what they name (for the
    plan's summary): the live registry's ``url``, else a manifest of the snapshot's
    ``_schemas`` segments (listed again where the ``topics`` filter left them out),
    else nothing."""
    from spark_jobs import layout
    from spark_jobs.decode.values import SCHEMAS_TOPIC

    from . import snapshots

    if url:
        return ["--schema-registry", url], url
    found = [s for s in segments if s.topic == SCHEMAS_TOPIC]
    if not snapshots.topic_matcher(topics)(SCHEMAS_TOPIC):
        found, _ = snapshots.list_segments(bucket, prefixes, access, topics=SCHEMAS_TOPIC)
    if not found:
        return [], None
    found = sorted(found, key=lambda s: (s.snapshot_date, s.partition, s.base_offset))
    key = f"{layout.run_folder(layout.STAGING, token)}/{SCHEMAS_MANIFEST}"
    store.write(key, layout.manifest([s.manifest_entry() for s in found]))
    return ["--schema-registry", store.uri(key)], f"{len(found)} _schemas segments"
