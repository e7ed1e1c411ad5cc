"""The night calendar of the overview: which snapshot night a segment belongs to, which nights
the nightly DAG was due to read, and nights as text.

A *night* is a snapshot date (``YYYY-MM-DD``): the date in the prefix the nightly copy writes
(the snapshot template, ``{prefix}/{snapshot_date}/`` by default), which is also the UTC date of
the DAG run's logical date (dags/README.md, "Snapshot date"). The overview draws a column for
every night a run read and every night the DAG's schedule was due to read (up to now), so that a
night nothing ran for, or that had no snapshot, is on the page rather than left out.
"""

from __future__ import annotations

import datetime as dt
import re

from kafkalog_pipeline import snapshots
from kafkalog_pipeline.settings import parse_time_setting
from spark_jobs import layout

#: longest span of nights drawn as a calendar; longer: the nights in the data only
MAX_CALENDAR_DAYS = 400


def utcnow() -> dt.datetime:
    """Now, in UTC (one place, so that tests can fix the clock)."""
    return dt.datetime.now(dt.timezone.utc)


def schedule() -> str:
    """The nightly DAG's cron schedule (``KAFKALOG_NIGHTLY_SCHEDULE``, default ``0 3 * * *``),
    as its file reads it (:func:`kafkalog_pipeline.settings.parse_time_setting`)."""
    return parse_time_setting("schedule")


def _midnight(night: str) -> dt.datetime:
    return dt.datetime.combine(dt.date.fromisoformat(night), dt.time(), dt.timezone.utc)


def scheduled_nights(cron: str, first: str, now: dt.datetime) -> list[str]:
    """The nights the DAG was due to read from night ``first`` up to ``now``, oldest first: the
    UTC date of each fire time of ``cron`` that is not after ``now`` (a run's logical date is its
    fire time, and its night that date). ``ValueError`` for a schedule croniter cannot read."""
    from croniter import croniter

    out: list[str] = []
    day = _midnight(first)
    while len(out) <= MAX_CALENDAR_DAYS:
        fire = croniter(cron, day - dt.timedelta(microseconds=1)).get_next(dt.datetime)
        fire = fire.astimezone(dt.timezone.utc)
        if fire > now:
            break
        out.append(fire.date().isoformat())
        day = _midnight(out[-1]) + dt.timedelta(days=1)  # one night a day, however often it fires
    return out


def night_columns(nights, cron: str | None, now: dt.datetime) -> tuple[list[str], set[str], str | None]:
    """The overview's columns: every night in ``nights`` (those the runs read or lacked) and every
    night ``cron`` was due to read from the first of them up to ``now``; with the due nights and,
    where the schedule cannot be read, why (then every day between is a column, as due nights
    cannot be told). Beyond :data:`MAX_CALENDAR_DAYS`: the nights in the data only."""
    days = sorted(set(nights))
    if not days:
        return [], set(), None
    first = days[0]
    last = max(days[-1], now.date().isoformat())
    if (dt.date.fromisoformat(last) - dt.date.fromisoformat(first)).days >= MAX_CALENDAR_DAYS:
        return days, set(), None
    try:
        due = scheduled_nights(cron, first, now) if cron else []
        why = None if cron else "no schedule"
    except (ValueError, KeyError) as err:  # croniter's errors are ValueErrors
        due, why = [], f"schedule {cron!r} cannot be read: {err}"
    if why is not None:
        start, end = dt.date.fromisoformat(first), dt.date.fromisoformat(days[-1])
        days = [(start + dt.timedelta(days=i)).isoformat() for i in range((end - start).days + 1)]
        return days, set(), why
    return sorted(set(days) | set(due)), set(due), None


# ---- which night a segment belongs to --------------------------------------------------------

#: a day whose parts are told apart in a filled template (year, month, day all different)
_SAMPLE_DAY = dt.date(1987, 6, 5)
_PREFIX_MARK = "kafkalogprefixmark"
_DAY_PARTS = {"1987-06-05": ("iso", r"\d{4}-\d{2}-\d{2}"), "19870605": ("compact", r"\d{8}"),
              "1987": ("yyyy", r"\d{4}"), "06": ("mm", r"\d{2}"), "05": ("dd", r"\d{2}"),
              _PREFIX_MARK: (None, r".*?")}


def night_pattern(template: str) -> re.Pattern:
    """A regex over a segment's directory (the URI up to its ``<topic>-<partition>/``) that
    finds the snapshot date, built by filling ``template`` through
    :func:`kafkalog_pipeline.snapshots.snapshot_prefix` (the one definition of its
    placeholders) with a sample day and turning the day's parts back into groups."""
    filled = snapshots.snapshot_prefix(template, _PREFIX_MARK, _SAMPLE_DAY.isoformat())
    out, seen = [], set()
    for piece in re.split("(" + "|".join(map(re.escape, _DAY_PARTS)) + ")", filled):
        if piece not in _DAY_PARTS:
            out.append(re.escape(piece))
            continue
        name, rx = _DAY_PARTS[piece]
        out.append(rx if name is None else f"(?P={name})" if name in seen else f"(?P<{name}>{rx})")
        if name:
            seen.add(name)
    return re.compile("(?:^|/)" + "".join(out) + "$")


def night_of(uri, pattern: re.Pattern) -> str | None:
    """The snapshot night (``YYYY-MM-DD``) of a segment URI, or None where the URI is no
    ``.../<topic>-<partition>/<base>.log`` under a night's prefix of ``pattern``."""
    if not uri or layout.SEGMENT_KEY.search(str(uri)) is None:
        return None
    directory = str(uri).rsplit("/", 2)[0] + "/"
    m = pattern.search(directory)
    if m is None:
        return None
    parts = m.groupdict()
    try:
        if parts.get("iso"):
            day = dt.date.fromisoformat(parts["iso"])
        elif parts.get("compact"):
            day = dt.datetime.strptime(parts["compact"], "%Y%m%d").date()
        else:
            day = dt.date(int(parts["yyyy"]), int(parts["mm"]), int(parts["dd"]))
    except (TypeError, ValueError):
        return None
    return day.isoformat()


# ---- nights as text ------------------------------------------------------------------------


def nights_text(nights: list[str]) -> str:
    """``2026-11-18..2026-11-20, 2026-11-23``: runs of consecutive days as ranges."""
    days = sorted({dt.date.fromisoformat(n) for n in nights})
    spans: list[list[dt.date]] = []
    for d in days:
        if spans and (d - spans[-1][1]).days == 1:
            spans[-1][1] = d
        else:
            spans.append([d, d])
    return ", ".join(a.isoformat() if a == b else f"{a.isoformat()}..{b.isoformat()}"
                     for a, b in spans)
