"""The Assets the pipeline publishes: one per warehouse table (docs/tables.md).

URIs are logical (``kafkalog://warehouse/<table>``): the warehouse root is a
run-time setting, so each asset event carries the actual root and run in its
``extra``. Downstream DAGs schedule on these (``schedule=[TABLE_ASSETS["records"]]``)
instead of polling the warehouse.
"""

from __future__ import annotations

from airflow.sdk import Asset

from spark_jobs.layout import TABLE_NAMES as TABLES

TABLE_ASSETS: dict[str, Asset] = {
    name: Asset(name=f"kafkalog.{name}", uri=f"kafkalog://warehouse/{name}", group="kafkalog")
    for name in TABLES
}
