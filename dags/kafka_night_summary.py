"""Example downstream DAG: once per published night, that night's rows.

Scheduled with Airflow's `PartitionedAssetTimetable` on the ledger table's asset: the
nightly DAG's `publish` emits one event per night it published, `partition_key` = the night
(YYYY-MM-DD; the ledger is published last), so this DAG runs once per night, with
`dag_run.partition_key` = that night. A multi-night run (`date_from`..`date_to`) gives one run
here per night; a backfill only its nights; a rerun of a night runs it again for that night.

`summarize` reads the published ledger's rows of the night and sums them per topic (the
XCom `return_value`). Replace it with what a consumer does with a night. Logic:
kafkalog_pipeline/downstream.py.
"""

from __future__ import annotations

import datetime as dt

from airflow.sdk import PartitionedAssetTimetable, dag, task

from kafkalog_pipeline.assets import TABLE_ASSETS

NIGHT_ASSET = TABLE_ASSETS["ledger"]


@dag(
    dag_id="kafka_night_summary",
    description="Example: once per published night, that night's ledger rows",
    schedule=PartitionedAssetTimetable(assets=NIGHT_ASSET),
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
    catchup=False,
    default_args={"owner": "data-platform", "retries": 1},
    tags=["kafkalog", "example"],
    doc_md=__doc__,
)
def kafka_night_summary():
    @task(task_id="summarize", inlets=[NIGHT_ASSET])
    def summarize(**context) -> dict:
        from kafkalog_pipeline.downstream import summary_from_context

        return summary_from_context(context)

    summarize()


kafka_night_summary()
