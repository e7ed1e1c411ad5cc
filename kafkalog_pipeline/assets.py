"""The Assets the pipeline publishes: one per warehouse table (docs/tables.md).

URIs are logical (``kafkalog://warehouse/<table>``): the warehouse root is a
run-time setting, so each asset event carries the actual root and run in its
``extra``. Downstream DAGs schedule on these instead of polling the warehouse: a table
asset's events carry the night as their ``partition_key``, one per night published, so a DAG
schedules on them with ``PartitionedAssetTimetable(assets=TABLE_ASSETS["ledger"])`` and runs
once per night (``dags/kafka_night_summary.py``; a plain ``schedule=[asset]`` is not triggered
by partitioned events).

The tables of Kafka's internal topics and state files (``consumer_offsets``, ...)
exist only once a run had rows for them, so ``publish`` declares one alias,
:data:`DERIVED_ALIAS`, and adds an event through it for each such table the publish
moved (:data:`DERIVED_ASSETS`): a DAG scheduled on ``DERIVED_ASSETS["consumer_offsets"]``
runs after the nights that brought new commits, not after every night. The typed
per-topic tables (``values__<topic>``, issue 20) and the per-key state tables
(``latest__<topic>``, ``cdc__<topic>``, issue 35) are announced the same way:
:func:`derived_asset` gives their asset (``table_asset("values__shop_dot_orders")``).
"""

from __future__ import annotations

from airflow.sdk import Asset, AssetAlias

from spark_jobs.layout import DERIVED_TABLES, TABLE_NAMES, keyed_table, typed_topic

GROUP = "kafkalog"


def table_asset(name: str) -> Asset:
    """The asset of warehouse table ``name``."""
    return Asset(name=f"kafkalog.{name}", uri=f"kafkalog://warehouse/{name}", group=GROUP)


TABLE_ASSETS: dict[str, Asset] = {name: table_asset(name) for name in TABLE_NAMES}
DERIVED_ASSETS: dict[str, Asset] = {name: table_asset(name) for name in DERIVED_TABLES}
DERIVED_ALIAS = AssetAlias(name="kafkalog.derived_tables", group=GROUP)


def derived_asset(name: str) -> Asset | None:
    """The asset announced through :data:`DERIVED_ALIAS` when a publish moves table
    ``name``: a derived, typed or per-key state table's; ``None`` for the fixed tables (own outlets)."""
    if name in DERIVED_ASSETS:
        return DERIVED_ASSETS[name]
    return table_asset(name) if typed_topic(name) is not None or keyed_table(name) is not None \
        else None
