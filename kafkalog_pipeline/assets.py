"""The Assets the pipeline publishes: one per warehouse table (docs/tables.md).

A table's asset is named ``kafkalog.<table>``; its URI is the table's dataset, the one the
lineage events name (docs/lineage.md): the table's location as OpenLineage names a location
(:func:`kafkalog_pipeline.lineage.dataset_uri`), ``file:///W/kafka/records`` for a local
warehouse ``W``'s embedded catalog, ``s3://lake/iceberg/kafka/records`` for a SQL catalog whose
``warehouse`` is ``s3://lake/iceberg``. A URI is fixed when the DAG file is parsed, without the
metadata database or the catalog, so the location is derived from the environment
(:func:`table_location`): ``KAFKALOG_TABLE_LOCATION`` (a template) where set, else where the
catalog (``KAFKALOG_CATALOG``, as pyiceberg's configuration defines it for the warehouse
``KAFKALOG_WAREHOUSE``) makes a table of the namespace ``KAFKALOG_NAMESPACE``
(:func:`spark_jobs.warehouse.catalog.default_table_location`). Where neither can say (no
warehouse in the environment, a REST catalog without the template) the URI is the logical
:data:`LOGICAL_URI` the assets had before (docs/history.md, issue 46). Each asset event carries
the run's warehouse root and run in its ``extra``.

Downstream DAGs schedule on these instead of polling the warehouse: a table
asset's events carry the night as their ``partition_key``, one per night published, so a DAG
schedules on them with ``PartitionedAssetTimetable(assets=TABLE_ASSETS["ledger"])`` and runs
once per night (``dags/kafka_night_summary.py``; a plain ``schedule=[asset]`` is not triggered
by partitioned events). Refer to an asset by its name (``TABLE_ASSETS["ledger"]``,
``Asset.ref(name="kafkalog.ledger")``), which does not depend on where the warehouse is.

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
from spark_jobs.warehouse import CatalogError, catalog

from . import lineage, settings

GROUP = "kafkalog"
#: a table asset's URI where its location cannot be known at parse time (the URI of them all
#: before issue 46)
LOGICAL_URI = "kafkalog://warehouse/{table}"


def table_location(name: str) -> str | None:
    """Where table ``name`` is, as the environment says at parse time: the template
    ``KAFKALOG_TABLE_LOCATION`` (``{namespace}``, ``{table}``), else where the catalog makes it
    (read from pyiceberg's configuration, nothing opened or written); None where neither says."""
    namespace = settings.environment("namespace")
    template = settings.parse_time_setting("table_location")
    if template:
        env = settings.PARSE_TIME["table_location"][0]
        if "{table}" not in template:
            raise settings.SettingError(f"{env} {template!r} names no {{table}}: every table "
                                        "would have one location")
        try:
            return template.format(namespace=namespace, table=name)
        except (KeyError, IndexError, ValueError) as err:
            raise settings.SettingError(f"{env} {template!r}: only {{namespace}} and {{table}} "
                                        f"may be named ({type(err).__name__}: {err})") from None
    root = settings.environment("warehouse")
    if not root:
        return None
    try:
        props = catalog.catalog_properties(root, settings.environment("catalog"),
                                           parse_time=True)
    except CatalogError:  # none configured for an S3 warehouse: the tasks will say so
        return None
    return catalog.default_table_location(props, namespace, name)


def table_uri(name: str) -> str:
    """The URI of table ``name``'s asset: its location's dataset, else :data:`LOGICAL_URI`."""
    location = table_location(name)
    return LOGICAL_URI.format(table=name) if location is None else lineage.dataset_uri(location)


def table_asset(name: str) -> Asset:
    """The asset of warehouse table ``name``."""
    return Asset(name=f"kafkalog.{name}", uri=table_uri(name), group=GROUP)


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
