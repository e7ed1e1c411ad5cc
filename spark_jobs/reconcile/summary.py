"""A sink's results summed up (pure: no Spark, no pyiceberg): what the command prints per
sink, the verdict's ``sinks`` (the run's note), the report's "Sinks" section.

:func:`totals` reads each ``sink_reconcile`` result's status and details (``details.sink``,
``details.classes``, ``details.extras.delivered``): per sink its status (the worst), its
partitions, ``delivered`` (the window's deliverable records the sink holds), and the offsets
of ``missing``, ``duplicate`` (extra copies), ``aborted_leak`` and ``not_yet_delivered``
(the lag); an upsert sink's keys instead (``missing_key``, ``stale_value``,
``deleted_key_present``, ``duplicate``: items).
"""

from __future__ import annotations

from spark_jobs.audit.policy import RANK

from .classes import (ABORTED_LEAK, DELETED_KEY_PRESENT, DUPLICATE, MISSING, MISSING_KEY,
                      NOT_YET_DELIVERED, STALE_VALUE)

#: an append sink's totals: key -> the class whose offsets it sums
APPEND_TOTALS = {"missing": MISSING, "duplicates": DUPLICATE, "leaks": ABORTED_LEAK,
                 "lag": NOT_YET_DELIVERED}
#: an upsert sink's totals: key -> the class whose items it counts
UPSERT_TOTALS = {"missing_keys": MISSING_KEY, "stale_values": STALE_VALUE,
                 "deleted_keys_present": DELETED_KEY_PRESENT, "duplicates": DUPLICATE}


def empty(mode: str = "append") -> dict:
    """The totals of a sink with no result (every count 0)."""
    return {"status": "pass", "mode": mode, "partitions": 0, "position": None,
            **{k: 0 for k in ("delivered", *APPEND_TOTALS, *UPSERT_TOTALS)}}


def totals(results) -> dict[str, dict]:
    """``{sink: {"status", "mode", "partitions", "delivered", "missing", "duplicates",
    "leaks", "lag", "position"}}`` (an upsert sink: ``missing_keys``, ``stale_values``,
    ``deleted_keys_present``, ``duplicates``) of ``results``: ``(status, details)`` pairs
    of ``sink_reconcile`` results (details: :class:`spark_jobs.audit.results.Details`),
    sinks in name order."""
    out: dict[str, dict] = {}
    for status, details in results:
        if details is None or details.extras.get("sink") is None:
            continue
        extras = details.extras
        upsert = extras.get("mode") == "upsert"
        t = out.setdefault(str(extras["sink"]), {
            "status": "pass", "mode": "upsert" if upsert else "append", "partitions": 0,
            **({k: 0 for k in UPSERT_TOTALS} if upsert else
               {"delivered": 0, **{k: 0 for k in APPEND_TOTALS}}),
            "position": extras.get("position")})
        if RANK.get(status, len(RANK)) > RANK.get(t["status"], len(RANK)):
            t["status"] = status
        t["partitions"] += 1
        if upsert:
            for key, cls in UPSERT_TOTALS.items():
                c = details.classes.get(cls)
                t[key] += (c.items or 0) if c else 0
            continue
        t["delivered"] += extras.get("delivered") or 0
        for key, cls in APPEND_TOTALS.items():
            c = details.classes.get(cls)
            t[key] += (c.offsets or 0) if c else 0
    return dict(sorted(out.items()))


def line(sink: str, t: dict) -> str:
    """``sink orders-lake: fail: delivered 25, missing 1, duplicates 1, leaks 1, lag 4``
    (an upsert sink: its keys); a count ``t`` lacks reads 0."""
    t = {**empty(str(t.get("mode") or "append")), **t}
    if t.get("mode") == "upsert":
        return (f"sink {sink}: {t['status']}: upsert, missing keys {t['missing_keys']}, "
                f"stale values {t['stale_values']}, deleted keys present "
                f"{t['deleted_keys_present']}, duplicates {t['duplicates']}")
    return (f"sink {sink}: {t['status']}: delivered {t['delivered']}, missing {t['missing']}, "
            f"duplicates {t['duplicates']}, leaks {t['leaks']}, lag {t['lag']}")


def brief(sink: str, t: dict) -> str:
    """:func:`line` as the run's note and the demo's report say it, many sinks on one line:
    ``orders-lake fail: delivered 25, missing 1, duplicates 1, leaks 1, lag 4``."""
    return line(sink, t).removeprefix("sink ").replace(": ", " ", 1)
