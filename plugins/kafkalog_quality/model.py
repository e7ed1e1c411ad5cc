"""What the report shows, as types: a result (one dq_results row), a run (its results and
verdict) and a run's coverage (the snapshot nights and topic-partitions it read).

The overview is keyed by *snapshot night*: the dates whose snapshots a run read (the ledger's
``night``, else the ``{snapshot_date}`` of the segment URIs in its ledger rows), not the time
its audit ran; a night the run was due to read and found no snapshot of is one of its nights
too (its SNAPSHOT_MISSING row). The grid itself: nights.py; reading the tables: repository.py.
"""

from __future__ import annotations

import datetime as dt
import re
from collections import Counter
from dataclasses import dataclass, field

from spark_jobs.audit.registry import SNAPSHOT_MISSING
from spark_jobs.audit.results import Details, stored_details
from spark_jobs.reconcile import summary as sink_summary
from spark_jobs.reconcile.classes import CHECK as SINK_CHECK

from .calendar import night_of
from .words import (NOTHING_NEW, STATUSES, first_problem, ordered_counts, result_anchor,
                    topic_partition, where)


@dataclass(frozen=True)
class Result:
    """One dq_results row."""

    run_id: str
    check: str
    topic: str | None
    partition: int | None
    status: str
    severity: str | None
    observed: int | None
    failed: int | None
    details: Details | None  # the audit's typed details; None where they are no JSON object
    checked_at: dt.datetime | None
    night: str | None = None  # the column NIGHT, where the table has it
    raw_details: str | None = None  # the details column as stored (shown raw; the JSON API)

    @property
    def outcome(self) -> str:
        """Its ``status``, except :data:`NOTHING_NEW` for a pass that checked nothing
        (``observed`` 0, e.g. ``crc`` over a partition whose segments were all unchanged)."""
        return NOTHING_NEW if self.status == "pass" and self.observed == 0 else self.status

    @property
    def sink(self) -> str | None:
        """The sink a ``sink_reconcile`` result is about (``details.sink``; else None)."""
        if self.check != SINK_CHECK or self.details is None:
            return None
        sink = self.details.extras.get("sink")
        return None if sink is None else str(sink)

    @property
    def label(self) -> str:
        """What the row is about: ``orders-1``, ``orders (topic)``, ``snapshot 2026-11-27``;
        a sink's, ``orders-1 (sink orders-lake)``."""
        place = where(self.topic, self.partition, self.night)
        return place if self.sink is None else f"{place} (sink {self.sink})"

    @property
    def anchor(self) -> str:
        """The id of its row on the run page (:func:`result_anchor`; a sink's, with its
        name: one result per sink x topic-partition)."""
        anchor = result_anchor(self.check, self.topic, self.partition, self.night)
        return anchor if self.sink is None else f"{anchor}-sink-{re.sub(r'[^A-Za-z0-9_.-]', '_', self.sink)}"

    def first_problem(self) -> str:
        """Its one problem line (:func:`first_problem`)."""
        return first_problem(self.topic, self.partition, self.details, self.failed, self.night,
                             self.raw_details)

    def as_json(self) -> dict:
        return {
            "run_id": self.run_id, "check": self.check, "topic": self.topic,
            "partition": self.partition, "status": self.status, "severity": self.severity,
            "observed": self.observed, "failed": self.failed,
            "details": stored_details(self.raw_details),
            "checked_at": iso_time(self.checked_at), "night": self.night, "outcome": self.outcome,
        }


@dataclass
class Run:
    """The results of one run: its rows of the ``dq_results`` table (one ``run_id``)."""

    token: str
    run_id: str
    checked_at: dt.datetime | None
    results: list[Result] = field(default_factory=list)
    error: str | None = None  # set when its rows could not be read (a broken data file)
    has_docs: bool = False

    @property
    def counts(self) -> dict[str, int]:
        """Results by ``status`` (what the verdict is made of)."""
        c = Counter(r.status for r in self.results)
        out = {s: c.pop(s, 0) for s in STATUSES}
        out.update(sorted(c.items()))  # any status outside pass|warn|fail, shown as is
        return out

    @property
    def sinks(self) -> dict[str, dict]:
        """Per sink of its ``sink_reconcile`` results: the totals
        (:func:`spark_jobs.reconcile.summary.totals`: status, delivered, missing, duplicates,
        leaks, lag, partitions, position)."""
        return sink_summary.totals((r.status, r.details) for r in self.results
                                   if r.check == SINK_CHECK)

    @property
    def tally(self) -> dict[str, int]:
        """Results by :attr:`Result.outcome`, as the pages count them: the passes that checked
        nothing apart, as :data:`NOTHING_NEW`."""
        return tally(self.results)

    @property
    def as_of(self) -> str | None:
        """The latest snapshot night the run read, as its rows say (column :data:`NIGHT` of
        its rows other than :data:`SNAPSHOT_MISSING`); None where they do not say."""
        return max((r.night for r in self.results if r.night and r.check != SNAPSHOT_MISSING),
                   default=None)

    @property
    def missing_nights(self) -> dict[str, "Result"]:
        """``{night: its SNAPSHOT_MISSING row}``: the nights the run was due to read that had
        no snapshot."""
        return {r.night: r for r in sorted(self.results, key=lambda r: r.night or "")
                if r.check == SNAPSHOT_MISSING and r.night}

    def suites(self) -> dict[str, int]:
        """The Data Docs' counts: one great-expectations suite per check, whose status is the
        check's worst over the topic-partitions (expectations/README.md)."""
        worst = {}
        for c in self.checks():
            worst[c["check"]] = c["status"]
        c = Counter(worst.values())
        return {**{s: c.pop(s, 0) for s in STATUSES}, **dict(sorted(c.items()))}

    @property
    def verdict(self) -> str:
        """``fail`` | ``warn`` | ``pass``; ``error`` (unreadable) or ``empty`` (no rows)."""
        if self.error:
            return "error"
        if not self.results:
            return "empty"
        counts = self.counts
        if counts["fail"]:
            return "fail"
        # a status outside pass|warn|fail never lets a run pass
        return "pass" if counts["pass"] == len(self.results) else "warn"

    def checks(self) -> list[dict]:
        """Per check: its rows (sorted by topic, partition), counts and worst status."""
        by_check: dict[str, list[Result]] = {}
        for r in self.results:
            by_check.setdefault(r.check, []).append(r)
        out = []
        for name in sorted(by_check):
            rows = sorted(by_check[name], key=lambda r: (r.topic or "", -1 if r.partition is None
                                                        else r.partition))
            statuses = Counter(r.status for r in rows)
            worst = next((s for s in STATUSES if statuses.get(s)), rows[0].status)
            out.append({
                "check": name,
                "severity": sorted({r.severity for r in rows if r.severity}),
                "status": worst,
                "counts": dict(statuses),
                "failed": sum(r.failed or 0 for r in rows),
                "rows": rows,
            })
        return out

    def by_outcome(self) -> list[tuple[str, list[Result]]]:
        """The rows grouped by :attr:`Result.outcome`, problems first: ``fail``, ``warn``, any
        status outside pass|warn|fail, ``pass``, then :data:`NOTHING_NEW`; in a group by
        check, topic, partition and night. Only groups with rows."""
        groups: dict[str, list[Result]] = {}
        for r in self.results:
            groups.setdefault(r.outcome, []).append(r)
        order = (["fail", "warn"] + sorted(set(groups) - set(STATUSES) - {NOTHING_NEW})
                 + ["pass", NOTHING_NEW])
        key = (lambda r: (r.check, r.topic or "", -1 if r.partition is None else r.partition,
                          r.night or ""))
        return [(s, sorted(groups[s], key=key)) for s in order if groups.get(s)]

    def summary_json(self) -> dict:
        return {
            "token": self.token, "run_id": self.run_id, "checked_at": iso_time(self.checked_at),
            "verdict": self.verdict, "counts": self.counts, "tally": self.tally,
            "suites": self.suites(), "has_docs": self.has_docs, "error": self.error,
        }

    def as_json(self) -> dict:
        out = self.summary_json()
        out["checks"] = [{k: v for k, v in c.items() if k != "rows"} for c in self.checks()]
        out["results"] = [r.as_json() for r in self.results]
        return out


#: the states of a run's latest attempt that, newer than its results, the pages show instead
RUNNING, FAILED = "running", "failed"


@dataclass(frozen=True)
class Attempt:
    """A run's latest attempt as Airflow knows it, where it is newer than the run's results
    (:func:`superseded`): it is running (or queued) or it failed before writing results (a
    crash, a task before the audit), so the results are an earlier attempt's. ``task``: the
    task that stopped it (or that runs); ``cause``: its one line (``tasks.CAUSE_KEY``)."""

    state: str  # RUNNING | FAILED
    began: dt.datetime | None
    task: str | None = None
    cause: str | None = None

    def headline(self) -> str:
        """``failed: decode_chunk crashed: StorageError: …`` / ``running (since …)``."""
        since = f" since {self.began:%Y-%m-%d %H:%M} UTC" if self.began else ""
        if self.state == FAILED:
            what = f"{self.task} failed" if self.task else "it failed"
            return f"latest attempt failed{since}: {what}" + (f": {self.cause}" if self.cause else "")
        what = f" ({self.task})" if self.task else ""
        return f"latest attempt running{since}{what}: no verdict yet"

    def as_json(self) -> dict:
        return {"state": self.state, "began": iso_time(self.began), "task": self.task,
                "cause": self.cause}


def superseded(checked_at: dt.datetime | None, began: dt.datetime | None, run_state: str,
               quality_state: str | None) -> bool:
    """Whether a run's results (checked at ``checked_at``) are an earlier attempt's: Airflow's
    run (``run_state``) is queued, running or failed, its latest attempt began after the
    results were written, and its audit task (``quality_state``) did not succeed in it (a run
    cleared only from ``publish`` on keeps its audit's results)."""
    if run_state not in ("queued", RUNNING, FAILED) or began is None:
        return False
    if quality_state == "success":
        return False
    return checked_at is None or checked_at < began


def shown_verdict(run: "Run", attempt: Attempt | None) -> str:
    """What the pages show as a run's verdict: its latest attempt's state where that is newer
    than its results (running, failed), else the results' verdict."""
    return attempt.state if attempt is not None else run.verdict


@dataclass(frozen=True)
class Coverage:
    """What one run read: ``partitions`` = {(topic, partition): its nights, sorted};
    ``missing`` = the nights it was due to read that had no snapshot; ``reason`` says why a run
    has no nights (no ledger rows found, paths the template does not match). ``published``:
    its ledger rows are on ``main`` (True), only in the ledger snapshot its audit read (False),
    nowhere (None); ``branch``: the run's Iceberg branch, where the ledger still has it."""

    partitions: dict = field(default_factory=dict)
    reason: str | None = None
    missing: tuple = ()
    published: bool | None = None
    branch: str | None = None

    @classmethod
    def of(cls, rows, pattern: re.Pattern, template: str, reason: str | None = None,
           **more) -> "Coverage":
        """From ledger rows ``(topic, partition, segment, night)``: a row's ``night``, else
        the night of its segment's URI by the snapshot template (rows written before the
        ledger had the column)."""
        found: dict[tuple[str, int], set[str]] = {}
        unmatched = []
        for topic, partition, segment, night in rows:
            night = night or night_of(segment, pattern)
            if night is None:
                unmatched.append(segment)
            else:
                found.setdefault((topic, partition), set()).add(night)
        if not found and unmatched:
            reason = (f"no segment of this run lies under a night of the snapshot template "
                      f"{template!r} (e.g. {unmatched[0]})")
        if more.get("missing"):
            reason = None  # its nights are known: those without a snapshot
        return cls({tp: tuple(sorted(n)) for tp, n in sorted(found.items())}, reason, **more)

    @property
    def read(self) -> list[str]:
        """The nights whose snapshots it read."""
        return sorted({n for nights in self.partitions.values() for n in nights})

    @property
    def nights(self) -> list[str]:
        """Every night it was about: those it read and those that had no snapshot."""
        return sorted(set(self.read) | set(self.missing))

    @property
    def topics(self) -> list[str]:
        return sorted({t for t, _ in self.partitions})

    def as_json(self) -> dict:
        return {"nights": self.nights, "no_snapshot": list(self.missing), "topics": self.topics,
                "partitions": {topic_partition(t, p): list(n) for (t, p), n in self.partitions.items()},
                "reason": self.reason, "published": self.published, "branch": self.branch}


def tally(results) -> dict[str, int]:
    """Results by :attr:`Result.outcome` (:func:`ordered_counts`)."""
    return ordered_counts(Counter(r.outcome for r in results))


def worst_status(statuses) -> str:
    """``fail`` over ``warn`` over any status outside pass|warn|fail over ``pass``."""
    present = {str(s) for s in statuses}
    for s in STATUSES[:-1]:
        if s in present:
            return s
    other = sorted(present - set(STATUSES))
    return other[0] if other else "pass"


def worst_rank(status: str) -> float:
    """Sort key of a status, worst first: fail, warn, any status outside those, pass."""
    return STATUSES.index(status) if status in STATUSES else len(STATUSES) - 1.5


def iso_time(value: dt.datetime | None) -> str | None:
    """``value`` as ISO 8601 text for the JSON API (None for none)."""
    return value.isoformat() if value is not None else None
