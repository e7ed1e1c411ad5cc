"""Weekly: keep the warehouse's Iceberg tables fast to plan and small on disk.

`tables` waits while a nightly run holds the warehouse (planned, not yet published),
then lists the tables; per table (dynamic task mapping): `compact` rewrites each
run's small files of one partition value (and Kafka partition) into one file (a rerun
of the run still replaces exactly its rows) and merges the table's manifests (planning
reads fewer files), `expire_snapshots` drops snapshots older than
`older_than_days` but the last `retain_last` of main and whatever an open run branch
needs, `remove_orphans` deletes files under the table's `data/` that no snapshot
references and older than `orphan_grace_hours` (and, with `clean_metadata`, such
manifests and metadata files under its `metadata/`); `clean_scratch` deletes the scratch
space crashed runs left; `report` sums it up. Logic: kafkalog_pipeline/maintenance.py
and the package spark_jobs/maintenance/ (`python -m spark_jobs.maintenance` does the same by hand).

Warehouse, catalog and namespace: the nightly DAG's settings (dags/README.md).
Schedule: `KAFKALOG_MAINTENANCE_SCHEDULE` (cron, default Sundays 05:00 UTC).
"""

from __future__ import annotations

import datetime as dt

from airflow.sdk import Param, chain, dag, task

from kafkalog_pipeline import maintenance, settings

default_args = {
    "owner": "data-platform",
    "retries": int(settings.parse_time_setting("retries")),
    "retry_delay": dt.timedelta(seconds=int(settings.parse_time_setting("retry_delay_seconds"))),
    "retry_exponential_backoff": True,
    "max_retry_delay": dt.timedelta(minutes=30),
    "execution_timeout": dt.timedelta(hours=4),
}
D = maintenance.DEFAULTS


@dag(
    dag_id="kafka_warehouse_maintenance",
    description="Compact small files, expire old snapshots, delete orphan files",
    schedule=maintenance.schedule(),
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
    catchup=False,
    max_active_runs=1,
    dagrun_timeout=dt.timedelta(hours=12),
    default_args=default_args,
    tags=["kafkalog", "iceberg", "maintenance"],
    doc_md=__doc__,
    params={
        "older_than_days": Param(D["older_than_days"], type="number", minimum=0,
                                 title="Expire snapshots older than (days)"),
        "retain_last": Param(D["retain_last"], type="integer", minimum=1,
                             title="Always keep main's last N snapshots"),
        "orphan_grace_hours": Param(D["orphan_grace_hours"], type="number", minimum=0,
                                    title="Delete unreferenced files older than (hours)",
                                    description="Longer than any decode run takes"),
        "min_files": Param(D["min_files"], type="integer", minimum=2,
                           title="Compact a run's partition value from this many small files"),
        "clean_metadata": Param(D["clean_metadata"], type="boolean",
                                title="Also delete unreferenced metadata files",
                                description="Manifests, manifest lists, old metadata.json"),
        "dry_run": Param(D["dry_run"], type="boolean", title="Dry run",
                         description="Report what would be done, change nothing"),
    },
)
def kafka_warehouse_maintenance():
    @task(retries=3)
    def tables(**context) -> list[str]:
        return maintenance.tables_from_context(context)

    @task(map_index_template="{{ task.op_kwargs['table'] }}")
    def compact(table: str, **context) -> dict:
        return maintenance.compact(table, context["params"])

    @task(map_index_template="{{ task.op_kwargs['table'] }}")
    def expire_snapshots(table: str, **context) -> dict:
        return maintenance.expire(table, context["params"])

    @task(map_index_template="{{ task.op_kwargs['table'] }}")
    def remove_orphans(table: str, **context) -> dict:
        return maintenance.remove_orphans(table, context["params"])

    @task
    def clean_scratch(**context) -> dict:
        return maintenance.clean_scratch(context["params"])

    @task
    def report(compacted, expired, orphans, scratch) -> dict:
        return maintenance.report(list(compacted), list(expired), list(orphans), scratch)

    names = tables()
    compacted = compact.expand(table=names)
    expired = expire_snapshots.expand(table=names)
    orphans = remove_orphans.expand(table=names)
    scratch = clean_scratch()
    # compaction first (what it replaces, expiry and orphan removal free), scratch last
    chain(compacted, expired, orphans, scratch)
    report(compacted, expired, orphans, scratch)


kafka_warehouse_maintenance()
