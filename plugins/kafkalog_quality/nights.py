"""Nights at a glance: the overview's grid of snapshot nights (columns) by what was graded (rows).

**Columns** (:func:`.calendar.night_columns`): every night a run read or found no snapshot of,
and every night the nightly DAG's schedule was due to read from the first of them up to now,
so that a night nothing ran for is on the page instead of left out.

**Rows**: the snapshot itself (results of no topic, e.g. a ``.log`` outside any partition
folder), a topic (a result of a whole topic, e.g. a deleted one), each topic-partition.

A **cell** is the worst outcome of that row's checks in the newest run that read the night
(a run covers one night, the nightly DAG, or several, a date range; a night may be read by
several runs: a rerun, a range over nights already run). A night a run was due to read and
found **no snapshot** of (its ``snapshot_missing`` row) is drawn as such in every row, coloured
by that row's status; a due night **no run** has results for is marked "no run". A run's nights
are those of its :class:`.data.Coverage`; a row of a topic-partition its ledger rows do not name
(``missing_partition``: tonight lacks it), of a topic, or of the snapshot is placed on the
night its row names (the ``night`` column), else on every night the run read.
"""

from __future__ import annotations

import datetime as dt
import re
from collections import Counter
from dataclasses import dataclass, field
from dataclasses import replace as dataclass_replace
from typing import NamedTuple

from spark_jobs.audit.registry import SNAPSHOT_MISSING
from spark_jobs.audit.results import plural

from . import calendar
from .model import Coverage, Result, Run, worst_rank, worst_status
from .words import (NOTHING_NEW, OUTCOME_WORDS, accepted_classes, counts_text, more_items,
                    ordered_counts, problem_items, where)

#: a cell's outcome when every check passed and some found items the policy accepts
ACCEPTED = "accepted"
#: a column's outcome where the night had no snapshot (drawn in that finding's status colour)
NO_SNAPSHOT = "no_snapshot"
#: a column's outcome where the schedule was due to read the night and no run has results for it
NO_RUN = "no_run"

_EPOCH = dt.datetime.min.replace(tzinfo=dt.timezone.utc)


def status_on_night(r: Result, night: str, run_nights, pattern: re.Pattern | None) -> str:
    """A result's status on one of the nights its run read for its topic-partition. A run
    of one night: its status. A run of several: the worst of its stored problem items whose
    segment lies in that night (pass if none), when every item is stored with a segment of a
    known night; else (items not stored, or not placed) its status on every night."""
    if len(run_nights) <= 1 or r.status == "pass" or pattern is None:
        return r.status
    items = problem_items(r.details)
    if not items or more_items(r.details):
        return r.status
    placed = [calendar.night_of(i.segment, pattern) for i in items]
    if any(p is None for p in placed):
        return r.status
    return worst_status(str(i.status or "").lower() for i, p in zip(items, placed) if p == night)


def outcome_on_night(r: Result, night: str, run_nights, pattern: re.Pattern | None) -> str:
    """:func:`status_on_night`, a pass that checked nothing being :data:`NOTHING_NEW`."""
    status = status_on_night(r, night, run_nights, pattern)
    return NOTHING_NEW if status == "pass" and r.observed == 0 else status


def _calm(outcomes) -> str:
    """The worst of ``outcomes``; where none is a problem: ``accepted`` if one is, ``nothing
    new`` if all are, else ``pass``."""
    outcomes = list(outcomes)
    worst = worst_status("pass" if o in (ACCEPTED, NOTHING_NEW) else o for o in outcomes)
    if worst != "pass":
        return worst
    if ACCEPTED in outcomes:
        return ACCEPTED
    return NOTHING_NEW if outcomes and all(o == NOTHING_NEW for o in outcomes) else "pass"


@dataclass(frozen=True)
class Cell:
    """One row (topic-partition, topic, or the snapshot) on one night, as the newest run that
    read it graded it."""

    topic: str | None
    partition: int | None
    night: str
    outcome: str  # fail | warn | pass | accepted | nothing_new | a status outside those
    run: Run
    problems: tuple  # ((Result, status on this night), ...) that failed or warned, worst first
    accepted: dict  # {class: items} the policy accepted (e.g. retention, compaction)
    counts: dict  # {outcome: results} on this night
    anchor: str | None  # the run page's row to open (the worst check), None: the page's top
    run_nights: tuple  # every night the run read of this row
    others: tuple  # ((Run, outcome), ...) older runs that read it too

    @property
    def tp(self) -> str:
        """The row's label: ``orders-1``, ``orders (topic)``, ``snapshot``."""
        return where(self.topic, self.partition)

    def title(self) -> str:
        """The cell's tooltip: night, row, outcome, which checks, which run."""
        lines = [f"{self.night} · {self.tp} · {OUTCOME_WORDS.get(self.outcome, self.outcome)}"]
        for r, status in self.problems:
            found = f" ({plural(r.failed, 'item')})" if r.failed else ""
            lines.append(f"{status} {r.check}{found}")
        if self.accepted:
            lines.append("accepted: " + ", ".join(f"{k} {plural(v, 'item')}"
                                                 for k, v in self.accepted.items()))
        lines.append(f"checks: {counts_text(self.counts)}")
        span = (f" (it read {plural(len(self.run_nights), 'night')}: "
                f"{calendar.nights_text(list(self.run_nights))})" if len(self.run_nights) > 1 else "")
        lines.append(f"run {self.run.run_id}{span}")
        lines += [f"also read by run {o.run_id}: {OUTCOME_WORDS.get(s, s)}" for o, s in self.others]
        return "\n".join(lines)

    def as_json(self) -> dict:
        return {"night": self.night, "topic": self.topic, "partition": self.partition,
                "label": self.tp, "outcome": self.outcome, "token": self.run.token,
                "run_id": self.run.run_id, "anchor": self.anchor, "counts": self.counts,
                "accepted": self.accepted,
                "problems": [{"check": r.check, "status": s, "items": r.failed,
                              "line": r.first_problem()} for r, s in self.problems],
                "run_nights": list(self.run_nights),
                "also_read_by": [{"token": o.token, "run_id": o.run_id, "outcome": s}
                                 for o, s in self.others]}


@dataclass(frozen=True)
class NoSnapshot:
    """A night a run was due to read and found no snapshot of: its ``snapshot_missing`` row."""

    night: str
    run: Run
    result: Result
    others: tuple  # ((Run, status), ...) older runs that found none either

    @property
    def status(self) -> str:
        return self.result.status

    def title(self, row: str | None = None) -> str:
        """Its tooltip (in grid row ``row``): night, "no snapshot", status, the line, the run."""
        where = f" · {row}" if row else ""
        lines = [f"{self.night}{where} · no snapshot · {OUTCOME_WORDS.get(self.status, self.status)}",
                 self.result.first_problem(), f"run {self.run.run_id}"]
        lines += [f"also found by run {o.run_id}" for o, _ in self.others]
        return "\n".join(lines)

    def as_json(self) -> dict:
        return {"night": self.night, "status": self.status, "token": self.run.token,
                "run_id": self.run.run_id, "anchor": self.result.anchor,
                "line": self.result.first_problem(),
                "also_found_by": [{"token": o.token, "run_id": o.run_id} for o, _ in self.others]}


class Problem(NamedTuple):
    """One failed or warned result on a night: which run graded it, the row, its status there."""

    run: Run
    result: Result
    status: str


@dataclass
class Overview:
    nights: list[str]  # the columns, oldest first
    partitions: list[tuple]  # the rows: (None, None) the snapshot, (topic, None), (topic, partition)
    cells: dict  # {(topic, partition, night): Cell}
    coverage: dict  # {token: Coverage}
    runs: list[Run]  # newest first
    unplaced: list[Run]  # runs with no night to show (Coverage.reason)
    no_snapshot: dict = field(default_factory=dict)  # {night: NoSnapshot}
    no_run: list = field(default_factory=list)  # nights due by the schedule with no results
    schedule: str | None = None  # the cron expression the due nights come from
    schedule_note: str | None = None  # why due nights are not known, where they are not
    by_night: dict = field(default_factory=dict)  # {night: [Cell, ...]}, made from ``cells``

    def __post_init__(self):
        for (_, _, night), cell in self.cells.items():
            self.by_night.setdefault(night, []).append(cell)

    def night_outcome(self, night: str) -> str | None:
        """The worst outcome of a night: of its cells and, where it had no snapshot, that
        finding's status (``accepted``, ``nothing new`` count as passes); :data:`NO_RUN` for a
        due night without results; None: nothing to say."""
        outcomes = [c.outcome for c in self.by_night.get(night, ())]
        if night in self.no_snapshot:
            outcomes.append(self.no_snapshot[night].status)
        if not outcomes:
            return NO_RUN if night in self.no_run else None
        return _calm(outcomes)

    def problems(self, night: str) -> list[Problem]:
        """The night's failed and warned results, worst first, then by row and check."""
        out = []
        gone = self.no_snapshot.get(night)
        if gone is not None and gone.status != "pass":
            out.append(Problem(gone.run, gone.result, gone.status))
        for c in self.by_night.get(night, ()):
            out += [Problem(c.run, r, s) for r, s in c.problems]
        return sorted(out, key=lambda p: (worst_rank(p.status), _row_key(p.result.topic,
                                                                          p.result.partition),
                                          p.result.check))

    def problem_nights(self) -> list[tuple[str, list[Problem]]]:
        """Nights with a failed or warned result, newest first, with those results."""
        return [(n, found) for n in reversed(self.nights) if (found := self.problems(n))]

    def as_json(self) -> dict:
        return {
            "nights": self.nights,
            "partitions": [where(t, p) for t, p in self.partitions],
            "night_outcomes": {n: self.night_outcome(n) for n in self.nights},
            "cells": [c.as_json() for c in self.cells.values()],
            "no_snapshot": {n: m.as_json() for n, m in sorted(self.no_snapshot.items())},
            "no_run": self.no_run, "schedule": self.schedule, "schedule_note": self.schedule_note,
            "runs": [{"token": r.token, "run_id": r.run_id, **self.coverage[r.token].as_json()}
                     for r in self.runs if r.token in self.coverage],
        }


def _row_key(topic, partition) -> tuple:
    """Rows in order: the snapshot, then by topic, a topic's own row before its partitions."""
    return (topic is not None, topic or "", -1 if partition is None else partition)


def overview(runs: list[Run], coverage: dict, pattern: re.Pattern | None = None, *,
             cron: str | None = None, now: dt.datetime | None = None) -> Overview:
    """The nights-at-a-glance grid of ``runs`` read with ``coverage`` ({token: Coverage},
    :meth:`.repository.Warehouse.coverage`); ``pattern`` (:func:`.calendar.night_pattern`) places a
    range run's items on their nights (:func:`status_on_night`); ``cron`` (default: the nightly
    DAG's schedule) and ``now`` (default: the clock) give the nights that were due."""
    now = now or calendar.utcnow()
    cron = calendar.schedule() if cron is None else cron
    graded: dict[tuple, list[tuple[int, Run, Cell]]] = {}
    missing: dict[str, list[tuple[int, Run, Result]]] = {}
    unplaced = []
    by_time = sorted(runs, key=lambda r: (r.checked_at or _EPOCH, r.token), reverse=True)
    for rank, run in enumerate(by_time):
        cov = coverage.get(run.token) or Coverage()
        if run.error or not run.results:
            unplaced.append(run)
            continue
        gone = run.missing_nights
        for night, r in gone.items():
            missing.setdefault(night, []).append((rank, run, r))
        fallback = tuple(cov.read) or ((run.as_of,) if run.as_of else ())
        rows_by_key: dict[tuple, list[Result]] = {}
        for r in run.results:
            if not (r.check == SNAPSHOT_MISSING and r.night in gone):
                rows_by_key.setdefault((r.topic, r.partition), []).append(r)
        placed = bool(gone)
        for (topic, partition), rows in rows_by_key.items():
            nights = cov.partitions.get((topic, partition)) if partition is not None else None
            nights = nights or tuple(sorted({r.night for r in rows if r.night})) or fallback
            for night in nights:
                cell = _cell(run, topic, partition, night, rows, nights, pattern)
                graded.setdefault((topic, partition, night), []).append((rank, run, cell))
                placed = True
        if not placed:
            unplaced.append(run)
    no_snapshot = {}
    for night, found in missing.items():
        rank, run, r = found[0]  # the newest run that found no snapshot
        on_night = [k for k in graded if k[2] == night]
        if any(graded[k][0][0] < rank for k in on_night):
            continue  # a newer run read the night: its cells say what the snapshot held
        no_snapshot[night] = NoSnapshot(night, run, r, tuple((o, x.status) for _, o, x in found[1:]))
        for k in on_night:  # what older runs read of it gives way
            del graded[k]
    cells = {key: dataclass_replace(found[0][2], others=tuple((r, c.outcome) for _, r, c in found[1:]))
             for key, found in graded.items()}
    seen = {n for _, _, n in cells} | set(no_snapshot)
    columns, due, note = calendar.night_columns(seen, cron, now)
    rows = sorted({(t, p) for t, p, _ in cells}, key=lambda k: _row_key(*k))
    return Overview(columns, rows, cells, coverage, by_time, unplaced, no_snapshot,
                    [n for n in columns if n in due and n not in seen], cron, note)


def _cell(run: Run, topic, partition, night, rows, nights, pattern) -> Cell:
    outcomes = [(r, outcome_on_night(r, night, nights, pattern)) for r in rows]
    problems = tuple(sorted(((r, o) for r, o in outcomes if o not in ("pass", NOTHING_NEW)),
                            key=lambda ro: (worst_rank(ro[1]), ro[0].check)))
    accepted: Counter = Counter()
    accepting = None
    for r in sorted(rows, key=lambda r: r.check):
        for name, info in accepted_classes(r.details).items():
            accepted[name] += info["items"]
            accepting = accepting or r
    outcome = _calm([o for _, o in outcomes] + ([ACCEPTED] if accepted else []))
    target = problems[0][0] if problems else accepting
    return Cell(topic, partition, night, outcome, run, problems, dict(accepted),
                ordered_counts(Counter(o for _, o in outcomes)),
                target.anchor if target else None, tuple(nights), ())

