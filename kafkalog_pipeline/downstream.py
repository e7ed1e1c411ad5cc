"""What the example downstream DAG (``dags/kafka_night_summary.py``) does with one night.

The nightly DAG's ``publish`` emits each table asset's event once per night it published,
``partition_key`` = the night (``YYYY-MM-DD``). A DAG scheduled with
``PartitionedAssetTimetable(assets=TABLE_ASSETS["ledger"])`` (the ledger is published last)
therefore runs once per published night, its ``dag_run.partition_key`` the night, and reads
that night's rows: here the published ledger's rows of the night (``night`` column), summed
per topic. A rerun of a night announces that night again, so the DAG runs for it again.
"""

from __future__ import annotations

from spark_jobs import layout, schemas


def night_summary(wh, night: str) -> dict:
    """The published ledger's rows of ``night`` in warehouse ``wh`` (a
    :class:`spark_jobs.warehouse.Warehouse`): ``{"night", "segments", "records", "topics":
    {topic: records}, "runs": [run ids]}``."""
    from pyiceberg.expressions import EqualTo

    night = layout.night(night)
    ledger = wh.load("ledger")
    if ledger is None or ledger.current_snapshot() is None:
        rows = []
    else:
        rows = ledger.scan(row_filter=EqualTo(schemas.NIGHT, night),
                           selected_fields=("run_id", "topic", "records")).to_arrow().to_pylist()
    topics: dict[str, int] = {}
    for row in rows:
        topics[row["topic"]] = topics.get(row["topic"], 0) + (row["records"] or 0)
    return {"night": night, "segments": len(rows), "records": sum(topics.values()),
            "topics": dict(sorted(topics.items())),
            "runs": sorted({row["run_id"] for row in rows})}


def summary_from_context(context) -> dict:
    """The example DAG's task: the night is the run's ``partition_key``; the warehouse the
    triggering event's ``extra`` names (else the settings')."""
    from . import settings
    from .tasks import open_warehouse

    dag_run = context["dag_run"]
    night = dag_run.partition_key
    if not night:
        raise ValueError("this run has no partition_key: the DAG runs once per published "
                         "night, for the night the nightly DAG's asset event carries")
    events = [e for evs in (context.get("triggering_asset_events") or {}).values() for e in evs]
    warehouse = next((e.extra.get("warehouse") for e in reversed(events)
                      if (e.extra or {}).get("warehouse")), None) \
        or settings.get("warehouse", required=True)
    summary = night_summary(open_warehouse(warehouse), night)
    if not summary["segments"]:
        raise ValueError(f"the published ledger has no row of night {night}")
    return summary
