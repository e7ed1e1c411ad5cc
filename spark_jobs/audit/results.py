"""``dq_results``: one row per run × check × place (docs/tables.md) — its typed form, how a
row is graded, and reading and writing the table.

* :class:`DqResult` is one row, :class:`Details` its ``details`` column (JSON in the table:
  :meth:`Details.to_json` / :meth:`Details.from_json`), :class:`Item` one observation it
  names and :class:`ClassCount` a class' tally; :meth:`DqResult.to_row` is the table's dict
  form (what :func:`write` takes and the audit returns).
* Readers — the report plugin, the demo — use :func:`read_results` (typed rows of the table)
  or :func:`parse_details` (one ``details`` value) rather than the JSON;
  :func:`stored_details` is the value as stored, for showing it raw.
* :func:`graded_result` grades one check at one place from its observations' aggregates
  (built by :mod:`.rows`); :func:`missing_night_rows` the plan's ``snapshot_missing`` rows.
* :func:`place`, :func:`verdict`, :func:`plural`, :func:`checked`: the words every reader
  uses for a row.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import pyarrow as pa

from .. import schemas
from ..schemas import NIGHT
from ..warehouse import AUDITED
from .policy import RANK, Policy, worst
from .log_dir_checks import MIXED_CLUSTER
from .registry import SNAPSHOT_MISSING, SNAPSHOT_MISSING_CLASS, UNITS
from ..reconcile import summary as sink_summary
from ..reconcile.classes import CHECK as SINK_CHECK

#: a result's details hold at most this many items (the worst first); ``more_items`` counts
#: the rest
MAX_ITEMS = 20
#: the timestamp checks, whose details also hold ``max_step_back_ms`` and ``regressions``
TIMESTAMP_CHECKS = ("create_time", "log_append_time")


class ClassCount(NamedTuple):
    """One class of a result's observations: its status and how many items and offsets."""

    status: str
    items: int
    offsets: int | None


#: the keys of an item in ``details.items``, in order (``class`` is :attr:`Item.class_`)
ITEM_KEYS = ("class", "status", "first_offset", "last_offset", "offsets", "value", "segment",
             "position", "message")


class Item(NamedTuple):
    """One observation a result names (an entry of ``details.items``)."""

    class_: str
    status: str
    first_offset: int | None = None
    last_offset: int | None = None
    offsets: int | None = None
    value: int | None = None
    segment: str | None = None
    position: int | None = None
    message: str | None = None

    def to_dict(self) -> dict:
        return dict(zip(ITEM_KEYS, self))

    @classmethod
    def from_dict(cls, d: Mapping) -> Item:
        return cls(*(d.get(k) for k in ITEM_KEYS))


#: the keys of every result's details; the others are :attr:`Details.extras`
_CORE_KEYS = frozenset(("unit", "classes", "items", "more_items"))


@dataclass(frozen=True, slots=True)
class Details:
    """A result's ``details``: the ``unit`` its ``observed`` counts (:data:`.registry.UNITS`),
    its observations per ``classes``, its first :data:`MAX_ITEMS` ``items`` (worst first),
    ``more_items`` beyond those, and the per-check ``extras``: ``max_step_back_ms`` and
    ``regressions`` (the timestamp checks), ``tolerance_ms`` (``create_time``),
    ``compacted_topic`` (``offset_gaps`` of a topic the policy declares compacted)."""

    unit: str | None
    classes: Mapping[str, ClassCount] = field(default_factory=dict)
    items: tuple[Item, ...] = ()
    more_items: int = 0
    extras: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        """The ``details`` column's JSON: ``unit``, ``classes``, ``items``, ``more_items``,
        then the extras, in that order."""
        return json.dumps({
            "unit": self.unit,
            "classes": {name: c._asdict() for name, c in self.classes.items()},
            "items": [it.to_dict() for it in self.items],
            "more_items": self.more_items,
            **self.extras,
        }, sort_keys=False, default=str)

    @classmethod
    def from_json(cls, raw: str | bytes) -> Details:
        """The details of a ``details`` value; ``ValueError`` where it is not a JSON object."""
        d = json.loads(raw)
        if not isinstance(d, dict):
            raise ValueError(f"details is a JSON {type(d).__name__}, not an object")
        classes = d.get("classes") if isinstance(d.get("classes"), dict) else {}
        items = d.get("items") if isinstance(d.get("items"), list) else ()
        extras = {k: v for k, v in d.items() if k not in _CORE_KEYS}
        return cls(d.get("unit"),
                   {str(name): ClassCount(c.get("status"), count(c.get("items")),
                                          count(c.get("offsets")))
                    for name, c in classes.items() if isinstance(c, dict)},
                   tuple(Item.from_dict(it) for it in items if isinstance(it, dict)),
                   count(d.get("more_items")) or 0, extras)


def count(value) -> int | None:
    """A count as stored in ``details`` (an int; older rows: a numeric string or float) as
    an int; None where it is none or no number."""
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return None


def parse_details(raw) -> Details | None:
    """The :class:`Details` of a dq_results ``details`` value (a JSON string, bytes, or a
    dict already parsed); None where it is null or not a JSON object (show it raw)."""
    if raw is None or raw == "":
        return None
    try:
        return Details.from_json(raw if isinstance(raw, (str, bytes)) else json.dumps(raw))
    except (TypeError, ValueError):
        return None


def stored_details(raw):
    """A ``details`` value as stored, for showing it as it is (the report's raw view, its
    JSON API): the JSON decoded, whatever its type; the text itself where it is no JSON;
    None where it is null or empty."""
    if raw is None or raw == "":
        return None
    try:
        return json.loads(raw)
    except (TypeError, ValueError):
        return raw


class DqResult(NamedTuple):
    """One dq_results row (:data:`spark_jobs.schemas.DQ_RESULTS`), typed."""

    run_id: str
    check: str
    topic: str | None
    partition: int | None
    status: str
    severity: str
    observed: int
    failed: int
    details: Details | None
    checked_at: dt.datetime | None
    night: str | None

    def to_row(self) -> dict:
        """The row as the table holds it (``details`` as JSON)."""
        row = self._asdict()
        row["details"] = None if self.details is None else self.details.to_json()
        row[NIGHT] = row.pop("night")
        return row

    @classmethod
    def from_row(cls, row: Mapping) -> DqResult:
        """A row of the table (a dict of its columns, or of some of them: the others None)
        typed; ``details`` by :func:`parse_details`."""
        return cls(*(row.get(f) for f in cls._fields[:8]), parse_details(row.get("details")),
                   row.get("checked_at"), row.get(NIGHT))


def read_results(warehouse, *, run_id: str | None = None, check: str | None = None,
                 ref: str | None = None, config=None) -> list[DqResult]:
    """The rows of ``dq_results`` of ``warehouse`` (a :class:`spark_jobs.warehouse.Warehouse`
    or its root), typed: all, or those of ``run_id`` and/or ``check``; ``ref``: a branch or
    tag (default ``main``). No Spark (pyiceberg)."""
    from pyiceberg.expressions import AlwaysTrue, And, EqualTo

    from ..tables import read_arrow

    where = AlwaysTrue()
    if run_id is not None:
        where = And(where, EqualTo("run_id", run_id))
    if check is not None:
        where = And(where, EqualTo("check", check))
    rows = read_arrow(warehouse, "dq_results", ref=ref, row_filter=where, config=config)
    return [DqResult.from_row(r) for r in rows.to_pylist()]


#: how a result about no topic-partition (findings of objects outside any partition folder)
#: is named
UNPLACED = "(outside any partition)"


def place(row) -> str:
    """What a dq_results row is about, in words: ``orders-0``; a topic (``clicks``: every
    partition of it gone); the night of a ``snapshot_missing`` row; the night's log
    directories (``mixed_cluster``); :data:`UNPLACED`."""
    if row["topic"] is not None:
        tp = row["topic"] if row["partition"] is None else f"{row['topic']}-{row['partition']}"
        if row["check"] == SINK_CHECK:  # one result per sink x topic-partition
            sink = sink_of(row)
            return f"{tp} (sink {sink})" if sink else tp
        return tp
    if row["check"] == SNAPSHOT_MISSING:
        return row.get(NIGHT) or "?"
    if row["check"] == MIXED_CLUSTER:
        return f"log directories of {row.get(NIGHT) or '?'}"
    return UNPLACED


def sink_of(row) -> str | None:
    """The sink a ``sink_reconcile`` row is about (``details.sink``; None: another check's)."""
    if row["check"] != SINK_CHECK:
        return None
    raw = row.get("details") if isinstance(row, Mapping) else None
    details = raw if isinstance(raw, Details) else parse_details(raw)
    sink = details.extras.get("sink") if details is not None else None
    return str(sink) if sink is not None else None


def verdict(rows) -> dict:
    """The run's verdict, small enough for XCom and an asset event's ``extra``: results
    (check x topic-partition) per outcome, and per check that failed or warned its
    topic-partitions: ``{"fail": 1, "warn": 3, "pass": 40, "failed": {"crc": ["orders-0"]},
    "warned": {...}}``; with ``sink_reconcile`` results, also ``"sinks"``: per sink its
    totals (:func:`spark_jobs.reconcile.summary.totals`: delivered, missing, duplicates,
    leaks, lag), which the run's note shows."""
    out: dict = {"fail": 0, "warn": 0, "pass": 0, "failed": {}, "warned": {}}
    sinks = []
    for r in sorted(rows, key=lambda r: (r["check"], place(r))):
        status = r["status"] if r["status"] in ("fail", "warn") else "pass"
        out[status] += 1
        if status != "pass":
            out["failed" if status == "fail" else "warned"].setdefault(r["check"], []).append(
                place(r))
        if r["check"] == SINK_CHECK:
            sinks.append((r["status"], parse_details(r["details"])))
    if sinks:
        out["sinks"] = {name: {k: v for k, v in t.items() if k != "position"}
                        for name, t in sink_summary.totals(sinks).items()}
    return out


def plural(n: int, word: str) -> str:
    """``1 item``, ``1,204 items``."""
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def checked(n: int, unit: str | None) -> str:
    """``1,204 batches checked``, ``1 batch checked``: a result's ``observed`` count in its
    unit (:data:`.registry.UNITS`' plural nouns: batches, records, segments)."""
    unit = unit or ""
    if n == 1 and unit.endswith("s"):
        unit = unit[:-2] if unit.endswith(("ches", "shes", "sses", "xes")) else unit[:-1]
    return f"{n:,} {unit} checked" if unit else f"{n:,} checked"


def graded_result(run_id: str, check: str, topic, partition, observed: int, cls, items,
                  policy: Policy, checked_at: dt.datetime, night: str | None) -> DqResult:
    """The result of one check at one place: ``cls`` its per-class aggregates (check, class,
    status, severity, items, offsets, max_value), ``items`` its first observations
    (:data:`.observations.OBSERVATION_NAMES` plus status)."""
    bad = [c for c in cls if c["status"] != "pass"]
    status = worst(c["status"] for c in cls)
    severity = worst(c["severity"] for c in bad) if bad else policy.headline(topic, check)
    details = Details(
        unit=UNITS[check],
        classes={c["class"]: ClassCount(c["status"], c["items"], c["offsets"])
                 for c in sorted(cls, key=lambda c: (-RANK[c["status"]], c["class"]))},
        items=tuple(Item(it["class"], *(it[k] for k in ITEM_KEYS[1:])) for it in items),
        more_items=max(0, sum(c["items"] for c in cls) - MAX_ITEMS),
        extras=check_extras(check, topic, cls, policy))
    return DqResult(run_id, check, topic, partition, status, severity, observed,
                    sum(c["items"] for c in bad), details, checked_at, night)


def check_extras(check: str, topic, cls, policy: Policy) -> dict:
    """The per-check entries of a result's details (:attr:`Details.extras`)."""
    extras: dict = {}
    if check in TIMESTAMP_CHECKS:
        steps = [c["max_value"] for c in cls if c["max_value"] is not None]
        extras["max_step_back_ms"] = max(steps) if steps else None
        extras["regressions"] = sum(c["items"] for c in cls)
    if check == "create_time":
        extras["tolerance_ms"] = policy.tolerance_ms(topic)
    if check == "offset_gaps" and policy.compacted(topic):
        extras["compacted_topic"] = True
    return extras


def missing_night_rows(run_id: str, missing: dict[str, str], policy: Policy,
                       checked_at: dt.datetime | None = None) -> list[dict]:
    """The ``snapshot_missing`` rows of run ``run_id``: one per night of ``missing`` (night
    -> where its snapshot should be: the prefix listed), topic and partition null, graded by
    the policy (``snapshot_missing``, warn by default)."""
    checked_at = checked_at or dt.datetime.now(dt.timezone.utc)
    status = policy.severity(None, SNAPSHOT_MISSING, SNAPSHOT_MISSING_CLASS)
    rows = []
    for night, where in sorted(missing.items()):
        cls = {"check": SNAPSHOT_MISSING, "class": SNAPSHOT_MISSING_CLASS, "status": status,
               "severity": status, "items": 1, "offsets": None, "max_value": None}
        item = {"class": SNAPSHOT_MISSING_CLASS, "status": status, "first_offset": None,
                "last_offset": None, "offsets": None, "value": None, "segment": where,
                "position": None,
                "message": f"no snapshot for {night}: no segment under {where}"}
        rows.append(graded_result(run_id, SNAPSHOT_MISSING, None, None, 1, [cls], [item], policy,
                                  checked_at, night).to_row())
    return rows


def to_table(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=schemas.DQ_RESULTS)


def write(wh, run_id: str, rows: list[dict], audited: dict | None = None) -> None:
    """Replace run ``run_id``'s rows of the ``dq_results`` table of ``wh`` (an
    :class:`spark_jobs.warehouse.Warehouse`) in one snapshot, but for its ``snapshot_missing``
    rows (the plan's: :func:`write_missing_nights`); the snapshot's summary names the
    snapshots the audit read (``kafkalog.audited``)."""
    from pyiceberg.expressions import And, EqualTo, NotEqualTo

    summary = {AUDITED: json.dumps(audited, sort_keys=True)} if audited else {}
    wh.replace_run_rows("dq_results", run_id, to_table(rows), summary,
                        where=And(EqualTo("run_id", run_id), NotEqualTo("check", SNAPSHOT_MISSING)))


def write_missing_nights(wh, run_id: str, missing: dict[str, str], found, policy: Policy
                         ) -> list[dict]:
    """Record which nights of run ``run_id`` have no snapshot (``missing``: night -> the
    prefix listed): its ``snapshot_missing`` rows replaced by these, in one snapshot that
    also drops every run's ``snapshot_missing`` rows of the nights ``found`` (a late
    snapshot, once run, replaces the result). Returns the rows written."""
    from pyiceberg.expressions import And, EqualTo, In, Or

    rows = missing_night_rows(run_id, missing, policy)
    where = And(EqualTo("run_id", run_id), EqualTo("check", SNAPSHOT_MISSING))
    if found:
        where = Or(where, And(EqualTo("check", SNAPSHOT_MISSING), In(NIGHT, sorted(found))))
    wh.replace_run_rows("dq_results", run_id, to_table(rows), where=where)
    return rows


def missing_nights_to_replace(wh, run_id: str, found) -> bool:
    """Whether ``dq_results`` holds a ``snapshot_missing`` row that run ``run_id``'s
    :func:`write_missing_nights` would replace: the run's own, or one of a night ``found``."""
    from pyiceberg.expressions import EqualTo

    from ..tables import read_arrow

    rows = read_arrow(wh, "dq_results", row_filter=EqualTo("check", SNAPSHOT_MISSING),
                      columns=("run_id", NIGHT)).to_pylist()
    return any(r["run_id"] == run_id or r[NIGHT] in set(found) for r in rows)


def run_missing_nights(wh, run_id: str) -> list[dict]:
    """Run ``run_id``'s ``snapshot_missing`` rows as its plan wrote them (the audit's verdict
    counts them)."""
    from pyiceberg.expressions import And, EqualTo

    from ..tables import read_arrow

    return read_arrow(wh, "dq_results", row_filter=And(EqualTo("run_id", run_id),
                                                       EqualTo("check", SNAPSHOT_MISSING))).to_pylist()
