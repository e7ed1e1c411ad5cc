"""What the weekly maintenance DAG's tasks do: :mod:`spark_jobs.maintenance` on the warehouse.

The warehouse, catalog and namespace are the nightly DAG's settings
(:mod:`kafkalog_pipeline.settings`); the thresholds are the DAG run's params
(:data:`DEFAULTS`). Each function takes plain values and returns a small JSON-able
summary (XCom carries counts, never data). Every step is idempotent: compacting
again finds no group it already rewrote, expiring and deleting again find nothing.

Maintenance runs while no nightly run holds the warehouse (has planned and not yet
finished publishing, :func:`kafkalog_pipeline.tasks.runs_holding_warehouse`): a run
that began before a compaction publishes by re-applying its files onto the new
``main``, whose rewritten files span wider offset ranges than the ones they replace.
``tables`` waits, rescheduling itself, while such a run is running. Nothing here
imports pyarrow, pyiceberg or Spark at import time (the DAG file imports this).
"""

from __future__ import annotations

import datetime as dt
import logging
import os

from . import settings

log = logging.getLogger(__name__)

NIGHTLY_DAG_ID = settings.NIGHTLY_DAG_ID
#: read once, at parse time, from the environment (as settings.PARSE_TIME)
SCHEDULE_ENV, SCHEDULE_DEFAULT = "KAFKALOG_MAINTENANCE_SCHEDULE", "0 5 * * 0"  # Sundays 05:00 UTC

#: the DAG's params (a manual run can change them)
DEFAULTS = {
    "older_than_days": 7,
    "retain_last": 10,
    "orphan_grace_hours": 72,
    "min_files": 4,
    "clean_metadata": True,
    "dry_run": False,
}


def schedule() -> str:
    return os.environ.get(SCHEDULE_ENV) or SCHEDULE_DEFAULT


def options(params: dict | None) -> dict:
    """The maintenance thresholds: the run's params over :data:`DEFAULTS`, checked."""
    out = dict(DEFAULTS)
    out.update({k: v for k, v in (params or {}).items() if k in DEFAULTS and v is not None})
    try:
        out = {"older_than_days": float(out["older_than_days"]),
               "retain_last": int(out["retain_last"]),
               "orphan_grace_hours": float(out["orphan_grace_hours"]),
               "min_files": int(out["min_files"]),
               "clean_metadata": bool(out["clean_metadata"]), "dry_run": bool(out["dry_run"])}
    except (TypeError, ValueError) as err:
        raise settings.SettingError(f"bad maintenance params {params!r}: {err}") from None
    if out["retain_last"] < 1 or out["min_files"] < 2 or out["older_than_days"] < 0 \
            or out["orphan_grace_hours"] < 0:
        raise settings.SettingError(
            f"maintenance params out of range: {out} (retain_last >= 1, min_files >= 2, "
            "days and hours >= 0)")
    return out


def open_warehouse(warehouse: str | None = None):
    """The warehouse of the settings (a :class:`spark_jobs.warehouse.Warehouse`)."""
    from . import tasks

    return tasks.open_warehouse(warehouse or settings.get("warehouse", required=True))


def list_tables(warehouse: str | None = None) -> list[str]:
    """The warehouse's existing tables (maintenance creates none)."""
    from spark_jobs import maintenance

    return maintenance.existing_tables(open_warehouse(warehouse))


def _brief(result: dict, limit: int = 20) -> dict:
    if len(result.get("skipped", ())) > limit:
        result = {**result, "skipped": result["skipped"][:limit],
                  "skipped_not_shown": len(result["skipped"]) - limit}
    return result


def compact(table: str, params: dict | None = None, *, warehouse: str | None = None) -> dict:
    """Compact the table's small files, then merge its manifests."""
    from spark_jobs import maintenance

    opts = options(params)
    wh = open_warehouse(warehouse)
    out = maintenance.compact_table(wh, table, min_files=opts["min_files"], dry_run=opts["dry_run"])
    out.update(maintenance.merge_manifests(wh, table, dry_run=opts["dry_run"]))
    return _brief({"table": table, **out})


def expire(table: str, params: dict | None = None, *, warehouse: str | None = None,
           now=None) -> dict:
    from spark_jobs import maintenance

    opts = options(params)
    now = now or dt.datetime.now(dt.timezone.utc)
    return {"table": table, **maintenance.expire_table(
        open_warehouse(warehouse), table,
        older_than=now - dt.timedelta(days=opts["older_than_days"]),
        retain_last=opts["retain_last"], dry_run=opts["dry_run"])}


def remove_orphans(table: str, params: dict | None = None, *, warehouse: str | None = None) -> dict:
    from spark_jobs import maintenance

    opts = options(params)
    return {"table": table, **maintenance.remove_orphans(
        open_warehouse(warehouse), table, grace=dt.timedelta(hours=opts["orphan_grace_hours"]),
        dry_run=opts["dry_run"], clean_metadata=opts["clean_metadata"])}


def clean_scratch(params: dict | None = None, *, warehouse: str | None = None) -> dict:
    from spark_jobs import maintenance

    opts = options(params)
    return maintenance.clean_scratch(open_warehouse(warehouse),
                                     grace=dt.timedelta(hours=opts["orphan_grace_hours"]),
                                     dry_run=opts["dry_run"])


def report(compacted, expired, orphans, scratch: dict) -> dict:
    """One summary of the run (the shape of ``spark_jobs.maintenance.maintain``'s totals)."""
    from spark_jobs.maintenance import TOTALS

    per = {}
    for part in (*compacted, *expired, *orphans):
        per.setdefault(part["table"], {}).update({k: v for k, v in part.items() if k != "table"})
    out = {"tables": per, **scratch}
    for key in TOTALS:
        out[key] = sum(t.get(key, 0) for t in per.values())
    log.info("maintenance: %s", {k: v for k, v in out.items() if k != "tables"})
    return out


# ------------------------------------------------------------ Airflow glue


def nightly_runs_holding(ti) -> list[str]:
    """The nightly DAG's *running* runs that have planned and not finished publishing.
    (The Task SDK gives a run's state as a ``DagRunState``, a ``str`` enum: it equals its
    value.)"""
    from . import tasks

    holders = tasks.runs_holding_warehouse(
        ti.get_task_states(dag_id=NIGHTLY_DAG_ID, task_ids=[tasks.PLAN_TASK, tasks.PUBLISH_TASK]),
        run_id="")
    return [r for r in holders
            if ti.get_dagrun_state(dag_id=NIGHTLY_DAG_ID, run_id=r) == "running"]


def wait_for_nightly(context) -> None:
    """Reschedule the task while a nightly run holds the warehouse (nothing to wait for
    outside a running task)."""
    from airflow.sdk.exceptions import AirflowRescheduleException

    ti = context.get("ti")
    if ti is None:
        return
    busy = nightly_runs_holding(ti)
    if busy:
        wait = int(settings.parse_time_setting("wait_seconds"))
        log.info("maintenance waits for the warehouse: nightly run %s has planned and not "
                 "published yet; trying again in %d s", ", ".join(busy), wait)
        raise AirflowRescheduleException(
            reschedule_date=dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=wait))


def tables_from_context(context) -> list[str]:
    """The ``tables`` task: wait for the warehouse, check the params, list the tables."""
    from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

    wait_for_nightly(context)
    try:
        options(context.get("params"))
        names = list_tables()
    except settings.SettingError as err:
        raise AirflowFailException(str(err)) from err
    if not names:
        raise AirflowSkipException("the warehouse has no tables yet: nothing to maintain")
    return names
