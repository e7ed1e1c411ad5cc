"""The charts' figures over runs (drawn by svg.py, placed by pages.py, ``GET /api/series``):
CRC failures, offset gaps by cause, timestamp regressions; every topic-partition of a run summed.
"""

from __future__ import annotations

from collections import Counter

from .model import Result, Run, iso_time, worst_status
from spark_jobs.audit.results import count


#: which checks feed which chart: the check names of spark_jobs/audit/registry.py
CRC_CHECKS = ("crc",)
GAP_CHECKS = ("offset_gaps",)
TIMESTAMP_CHECKS = ("log_append_time", "create_time")


#: cause used for a gap row whose details carry no ``by_cause`` counts
UNSPECIFIED_CAUSE = "unspecified"


def check_kind(check: str) -> str | None:
    """``crc`` | ``gaps`` | ``timestamps`` | None: which chart a check feeds."""
    if check in CRC_CHECKS:
        return "crc"
    if check in GAP_CHECKS:
        return "gaps"
    if check in TIMESTAMP_CHECKS:
        return "timestamps"
    return None


def gap_causes(result: Result) -> dict[str, int]:
    """Gaps by cause of an offset-gap row.

    ``details.classes`` = ``{cause: ClassCount(status, items, offsets)}`` (the audit's
    :class:`spark_jobs.audit.results.Details`): the number of gaps (``items``) of every cause,
    explained ones included; else (no classes: older rows) the extra ``by_cause`` =
    ``{cause: count}``; else the row's ``failed`` as ``unspecified``.
    """
    details = result.details
    if details is not None and details.classes:
        return {cause: c.items for cause, c in details.classes.items() if c.items}
    by_cause = None if details is None else details.extras.get("by_cause")
    if isinstance(by_cause, dict):
        return {str(c): n for c, n in ((c, count(v)) for c, v in by_cause.items()) if n}
    return {UNSPECIFIED_CAUSE: result.failed} if result.failed else {}


def timestamp_regressions(result: Result) -> int:
    """``details.regressions`` of a timestamp row (every regression, warned or failed), else ``failed``."""
    n = None if result.details is None else count(result.details.extras.get("regressions"))
    return n if n is not None else (result.failed or 0)


def series(runs: list[Run]) -> dict:
    """Chart data over runs, oldest first, all topic-partitions of a run summed.

    ``crc_failures``: ``failed`` of the CRC check; ``gaps_by_cause``: {cause: counts} of the
    offset-gap check; ``timestamp_regressions``: {check: counts} of the timestamp checks.
    A run without such a check counts 0.
    """
    ordered = list(reversed(runs))
    crc, gaps, ts = [], [], []
    for run in ordered:
        c = 0
        g: Counter = Counter()
        t: Counter = Counter()
        for r in run.results:
            kind = check_kind(r.check)
            if kind == "crc":
                c += r.failed or 0
            elif kind == "gaps":
                g.update(gap_causes(r))
            elif kind == "timestamps":
                t[r.check] += timestamp_regressions(r)
        crc.append(c)
        gaps.append(g)
        ts.append(t)
    causes = sorted({cause for g in gaps for cause in g})
    cause_status: dict[str, set] = {}
    for run in ordered:
        for r in run.results:
            if check_kind(r.check) == "gaps":
                for cause, c in ({} if r.details is None else r.details.classes).items():
                    cause_status.setdefault(cause, set()).add(str(c.status or ""))
    return {
        # the worst status the policy gave each cause: accepted ones are drawn neutral
        "gap_cause_status": {c: worst_status(cause_status.get(c, {"warn"})) for c in causes},
        "runs": [{"token": r.token, "run_id": r.run_id, "checked_at": iso_time(r.checked_at)}
                 for r in ordered],
        "crc_failures": crc,
        "gaps_by_cause": {cause: [g.get(cause, 0) for g in gaps] for cause in causes},
        "timestamp_regressions": {check: [t.get(check, 0) for t in ts] for check in TIMESTAMP_CHECKS},
    }
