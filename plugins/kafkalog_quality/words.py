"""The report's words: outcomes and their order, counts, what a result is about, a problem in
plain words.

One formatter for the report page and for log lines: ``check_quality.report`` prints
``FAIL crc orders-1: ...`` lines of its own today and could print :func:`problem_line`
instead (this module needs no Spark, only the dq_results row's fields).

A result's ``details`` is the audit's typed :class:`spark_jobs.audit.results.Details`
(``classes``, ``items``, ``unit``, ``more_items``), read once where the rows are loaded
(``repository``); the functions here phrase it.
"""

from __future__ import annotations

from collections import Counter

from spark_jobs.audit.policy import RANK, SEVERITIES
from spark_jobs.audit.results import Details, Item, checked, count, plural, stored_details

#: verdict order, worst first (the policy's severities); a run's verdict is the worst status
#: among its rows
STATUSES = tuple(sorted(SEVERITIES, key=RANK.__getitem__, reverse=True))
#: a result's outcome (:attr:`Result.outcome`) when it passed having checked nothing
#: (``observed`` 0): "nothing new", never shown as a pass
NOTHING_NEW = "nothing_new"
#: how a result's outcome reads in a sentence
OUTCOME_WORDS = {"fail": "failed", "warn": "warned", "pass": "passed", NOTHING_NEW: "nothing new"}
#: how a count of results of an outcome reads: (one, several)
COUNT_NOUNS = {"fail": ("failure", "failures"), "warn": ("warning", "warnings"),
               "pass": ("pass", "passes"), NOTHING_NEW: ("nothing new", "nothing new")}
#: the unit of every count of results on the pages (one result = one dq_results row)
COUNTED = "counted per check × topic-partition"
#: what a result's configured ``severity`` means when nothing was found (never an outcome)
SEVERITY_LABELS = {"fail": "would fail", "warn": "warn-only", "pass": "report-only"}


def ordered_counts(counts: Counter) -> dict[str, int]:
    """``counts`` of outcomes in the pages' order: fail, warn, any other status, pass, nothing
    new (those four always present)."""
    c = Counter(counts)
    out = {s: c.pop(s, 0) for s in STATUSES if s != "pass"}
    rest = {"pass": c.pop("pass", 0), NOTHING_NEW: c.pop(NOTHING_NEW, 0)}
    return {**out, **dict(sorted(c.items())), **rest}


def counts_text(counts: dict[str, int]) -> str:
    """``6 warnings · 158 passes · 4 nothing new`` (outcomes with none left out)."""
    parts = []
    for outcome, n in counts.items():
        if n:
            one, several = COUNT_NOUNS.get(outcome, (f"status {outcome}", f"status {outcome}"))
            parts.append(f"{n:,} {one if n == 1 else several}")
    return " · ".join(parts) or "no results"


def suites_text(suites: dict[str, int]) -> str:
    """``17 suites, one per check: 5 warned · 12 passed``: the Data Docs' own unit."""
    return (f"{plural(sum(suites.values()), 'suite')}, one per check: "
            + " · ".join(f"{n:,} {OUTCOME_WORDS.get(s, s)}" for s, n in suites.items() if n))


def topic_partition(topic, partition) -> str:
    """``orders-1``, as Kafka names a partition's log directory (and the audit's log lines)."""
    return f"{topic if topic is not None else '?'}-{'?' if partition is None else partition}"


def where(topic, partition, night=None) -> str:
    """What a result is about: a topic-partition (``orders-1``), a whole topic (``orders
    (topic)``: a row of no partition, e.g. a deleted topic) or the snapshot itself
    (``snapshot 2026-11-27``: a row of no topic, e.g. a night without a snapshot)."""
    if topic is None and partition is None:
        return f"snapshot {night}" if night else "snapshot"
    if partition is None:
        return f"{topic} (topic)"
    return topic_partition(topic, partition)


def severity_label(severity) -> str | None:
    """The configured severity as a label (``would fail``, ``warn-only``), never as an outcome."""
    if not severity:
        return None
    return SEVERITY_LABELS.get(str(severity).lower(), f"severity {severity}")


def passed(status) -> bool:
    """Whether a stored item's or class' status is ``pass`` (the policy accepted it)."""
    return str(status or "").lower() == "pass"


def _offsets_text(first, last) -> str | None:
    if first is None and last is None:
        return None
    if first is None or last is None or first == last:
        return f"offset {first if first is not None else last}"
    return f"offsets {first}..{last}"


def describe_item(item: Item) -> str:
    """One item a check found (an entry of ``details.items``), in the audit's own words: its
    ``message`` (checks.py phrases each with offsets, segment and byte position), followed by
    whichever of offsets, segment and byte position the message does not already name."""
    message = str(item.message or "").strip()
    first, last = item.first_offset, item.last_offset
    segment, position = item.segment, item.position
    where = []
    offsets = _offsets_text(first, last)
    if offsets and not (
            (first is not None and last is not None and f"{first}..{last}" in message)
            or (first is not None and first == last and f"offset {first}" in message)
            or (last is None and f"offset {first}" in message)):
        where.append(offsets)
    seg_in = bool(segment) and str(segment) in message
    pos_in = position is not None and any(
        f"{word}{position}" in message for word in ("position ", " at ", "byte "))
    if position is not None and not pos_in:  # a byte position means nothing without its file
        where.append(f"segment {segment} at byte {position}" if segment else f"at byte {position}")
    elif segment and not seg_in:
        where.append(f"segment {segment}")
    if not message:
        label = str(item.class_ or "item").replace("_", " ")
        return f"{label} at {', '.join(where)}" if where else label
    return f"{message} ({', '.join(where)})" if where else message


def item_line(topic, partition, item: Item, night=None) -> str:
    """``payments-1: offsets 15..24: ... is missing from the snapshot`` (:func:`where`)."""
    return f"{where(topic, partition, night)}: {describe_item(item)}"


def _items(details: Details | None) -> tuple[Item, ...]:
    return () if details is None else details.items


def problem_items(details: Details | None) -> list[Item]:
    """The items of a result that are problems (status fail/warn/other), worst first as the
    audit stores them; accepted items (status ``pass``) are left out."""
    return [i for i in _items(details) if not passed(i.status)]


def more_items(details: Details | None) -> int:
    """Items the audit found beyond those it stored (``details.more_items``)."""
    return 0 if details is None else details.more_items


def accepted_items(details: Details | None) -> list[Item]:
    """The stored items the policy accepted (status ``pass``), e.g. gaps of a compacted log."""
    return [i for i in _items(details) if passed(i.status)]


def accepted_classes(details: Details | None) -> dict[str, dict]:
    """``{class: {"items", "offsets"}}`` of the classes the policy accepted (status ``pass``)
    that found something, e.g. gaps explained by compaction."""
    classes = {} if details is None else details.classes
    return {name: {"items": c.items, "offsets": c.offsets}
            for name, c in classes.items() if passed(c.status) and c.items}


def _classes_text(details: Details | None, bad: bool = True) -> str | None:
    if details is None:
        return None
    parts = []
    for name, c in details.classes.items():
        if not c.items or passed(c.status) == bad:
            continue
        parts.append(f"{name}: {plural(c.items, 'item')}"
                     + (f" ({plural(c.offsets, 'offset')})" if c.offsets else ""))
    return ", ".join(parts) or None


def first_problem(topic, partition, details: Details | None, failed=None, night=None,
                  raw=None) -> str:
    """The one line of a result that failed or warned: its first (worst) item in plain words
    (:func:`item_line`), else what its classes counted; where ``details`` is no JSON object,
    the first line of the ``raw`` text stored, if it is text."""
    items = problem_items(details)
    if items:
        return item_line(topic, partition, items[0], night)
    head = where(topic, partition, night)
    summary = _classes_text(details)
    if summary:
        return f"{head}: {summary} (no item details recorded)"
    shown = stored_details(raw) if details is None else None
    if isinstance(shown, str) and shown.strip():
        return f"{head}: {shown.strip().splitlines()[0]}"
    n = count(failed) or 0
    return f"{head}: {plural(n, 'item')} found (no details recorded)"


def checked_text(observed, details: Details | None) -> str | None:
    """``1,204 batches checked``: the result's ``observed`` count in the unit the audit gives
    (``details.unit``: batches, records or segments)."""
    n = count(observed)
    unit = None if details is None else details.unit
    return None if n is None else checked(n, str(unit or ""))


def problem_line(check, topic, partition, status, details: Details | None, failed=None,
                 observed=None, night=None, raw=None) -> str:
    """A result as one log line, e.g. ``WARN offset_gaps payments-1: 1 item, 12 batches
    checked; first: offsets 15..24: ...``: the form of ``check_quality.report``'s lines, in
    the report's vocabulary (items found, units checked)."""
    head = f"{str(status or '?').upper()} {check} {where(topic, partition, night)}"
    counts = [c for c in (plural(count(failed), "item") if count(failed) is not None else None,
                          checked_text(observed, details)) if c]
    line = first_problem(topic, partition, details, failed, night, raw)
    first = line.split(": ", 1)[1] if ": " in line else line
    return f"{head}: {', '.join(counts)}; first: {first}" if counts else f"{head}: {first}"


def result_anchor(check: str, topic, partition, night=None) -> str:
    """The id of a result's row on its run page (a cell of the overview links to it):
    ``r-crc-orders-1``, ``r-missing_partition-orders-all`` (a topic's row),
    ``r-snapshot_missing-snapshot-2026-11-27`` (the snapshot's)."""
    if topic is None and partition is None:
        return f"r-{check}-snapshot" + (f"-{night}" if night else "")
    if partition is None:
        return f"r-{check}-{topic}-all"
    return f"r-{check}-{topic_partition(topic, partition)}"
