"""HTML pages of the Data quality view: plain server-rendered HTML, no script, no CDN.

Every page carries ``<base href>`` = the app's mount point, so links are relative to it and
work behind a path prefix, directly or inside Airflow's embedded-view iframe.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections import Counter
from html import escape
from urllib.parse import quote

from spark_jobs.audit.results import plural, stored_details

from . import model, nights, remedies, series, svg, words
from .calendar import nights_text

STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:16px 24px;color:#1f2328}
h1{font-size:20px;margin:0 0 12px}h2{font-size:16px;margin:20px 0 8px}
table{border-collapse:collapse;margin:8px 0 16px}
th,td{border-bottom:1px solid #e1e4e8;padding:4px 10px;text-align:left;vertical-align:top}
th{background:#f6f8fa;font-weight:600}td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
.verdict,.status{display:inline-block;padding:1px 8px;border-radius:10px;font-weight:600;font-size:12px}
.verdict-pass,.status-pass{background:#dafbe1;color:#116329}
.verdict-warn,.status-warn{background:#fff8c5;color:#7d4e00}
.verdict-fail,.status-fail{background:#ffebe9;color:#a40e26}
.verdict-error,.verdict-empty,.status-other{background:#eaeef2;color:#424a53}
.verdict-failed{background:#a40e26;color:#fff}.verdict-running{background:#ddf4ff;color:#0550ae}
#attempt{border:1px solid #ffb3b8;background:#fff5f5;border-radius:6px;padding:6px 14px;margin:8px 0 16px}
#attempt.attempt-running{border-color:#54aeff;background:#f1f8ff}.attempt-note{font-size:12px;white-space:normal}
tr.row-fail td{background:#fff5f5}tr.row-warn td{background:#fffdf0}
.charts{display:flex;flex-wrap:wrap;gap:12px}.charts svg{border:1px solid #e1e4e8;border-radius:6px;background:#fff}
pre{margin:4px 0;white-space:pre-wrap;font-size:12px}summary{cursor:pointer;color:#0969da}
.problem-line{font-size:13px;font-variant-numeric:tabular-nums;overflow-wrap:anywhere}
.problem-line .uri{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12px}
td.items,th,td.verdict-cell,td.run-cell,td.when,td.docs,details.topics summary{white-space:nowrap}
td.tp,td.check-name{overflow-wrap:anywhere;min-width:6em}td.checked{min-width:6em;max-width:10em}td.check-name{max-width:10em}td.tp{max-width:11em}
td.problem{min-width:18em}.scroll{overflow-x:auto;max-width:100%}
.uri{border-bottom:1px dotted #8c959f;cursor:help;white-space:nowrap}
.nothing-new,tr.row-nothing-new td{color:#656d76}
details.topics{display:inline-block;vertical-align:top}details.topics summary{color:#656d76}
details.topics .tp-list{white-space:normal;max-width:26em;color:#656d76;font-size:12px}
#not-published{border:1px solid #ffb3b8;background:#fff5f5;border-radius:6px;padding:4px 14px;margin:8px 0 16px}
#not-published h2{margin:8px 0 4px;color:#a40e26}#not-published ol{margin:4px 0 8px;padding-left:22px}
#not-published li{margin:4px 0}#not-published p{margin:6px 0}
pre.policy{display:table;background:#f6f8fa;padding:4px 10px;border-radius:4px;margin:4px 0}
details.read-branch{margin:0 0 6px}
.not-published-note{color:#a40e26;font-size:12px}td.run-cell .error{white-space:normal}
.group-title{font-size:16px;font-weight:600;color:#1f2328}#passes{margin:20px 0}
details.more-items ul{margin:4px 0;padding-left:18px;font-family:ui-monospace,monospace;font-size:12px}
.muted{color:#656d76}.error{color:#a40e26}nav a{margin-right:12px}
tr:target td{background:#ddf4ff !important;outline:2px solid #0969da}
#nights svg{display:block;margin:8px 0;max-width:100%;height:auto}.heat-grid a rect.cell:hover{stroke:#1f2328;stroke-width:1.5}
#night-problems h3{font-size:14px;margin:12px 0 4px}#night-problems ul{margin:0;padding-left:18px}
li.night-problem{margin:2px 0}li.night-problem a{text-decoration:none;margin-right:6px}
#headline{font-weight:600}td.nights{white-space:nowrap}
"""


def _page(title: str, base: str, body: str) -> str:
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<base href=\"{escape(base.rstrip('/') + '/')}\">"
        f"<title>{escape(title)}</title><style>{STYLE}</style></head>"
        f"<body>{body}</body></html>"
    )


def _when(value: dt.datetime | None, form: str = "%Y-%m-%d %H:%M:%S UTC") -> str:
    return value.astimezone(dt.timezone.utc).strftime(form) if value else "—"


def _short_when(value: dt.datetime | None, fallback: str) -> str:
    return value.astimezone(dt.timezone.utc).strftime("%m-%d %H:%M") if value else fallback[:14]


def _status_class(status: str) -> str:
    return f"status-{status}" if status in words.STATUSES else "status-other"


#: a URI or absolute path in an audit message (trailing punctuation is left outside)
_URI = re.compile(r"(?:\b[a-z][a-z0-9+.-]*://|(?<![\w./:-])/)[^\s<>\"'()\[\],;]+", re.IGNORECASE)


def short_uri(uri: str) -> str:
    """``…/orders-0/00000000000000000034.log``: a segment (or any object, or a night's folder)
    by its last two path parts, which name the partition folder and the file."""
    parts = uri.rstrip("/").split("/")
    short = "/".join(parts[-2:]) + ("/" if uri.endswith("/") else "")
    return "…/" + short if len(short) + 8 < len(uri) else uri


def line_html(text: str) -> str:
    """A problem line as HTML: escaped, every URI in it shortened to its partition folder and
    file name (:func:`short_uri`), the whole URI on hover (``title``)."""
    out, at = [], 0
    for m in _URI.finditer(text):
        uri = m.group(0).rstrip(".:")
        out.append(escape(text[at:m.start()]))
        short = short_uri(uri)
        out.append(escape(uri) if short == uri else
                   f'<span class="uri" title="{escape(uri)}">{escape(short)}</span>')
        at = m.start() + len(uri)
    out.append(escape(text[at:]))
    return "".join(out)


def run_href(token: str) -> str:
    return f"runs/{quote(token)}"


def docs_href(token: str) -> str:
    return f"runs/{quote(token)}/docs/index.html"


def _night_label(run: model.Run, coverage: dict) -> str:
    """A chart's axis label of a run: the nights it read (``11-19``, ``11-18..11-20``)."""
    cov = coverage.get(run.token)
    nights = cov.nights if cov is not None else []
    if not nights:
        return "? " + _short_when(run.checked_at, run.token)
    first, last = nights[0][5:], nights[-1][5:]
    return first if first == last else f"{first}..{last}"


def _by_night(runs: list[model.Run], coverage: dict) -> list[model.Run]:
    """Runs newest first by the first night they read (runs of no known night last), then by
    when they were checked: the order :func:`series.series` expects."""
    epoch = dt.datetime.min.replace(tzinfo=dt.timezone.utc)

    def key(run):
        cov = coverage.get(run.token)
        nights = cov.nights if cov is not None else []
        return (nights[0] if nights else "", run.checked_at or epoch, run.token)
    return sorted(runs, key=key, reverse=True)


def cause_colors(statuses: dict[str, str]) -> dict[str, str]:
    """Colours of offset-gap causes by the status the policy gave them: accepted causes
    (retention, compaction, ...) neutral greys and blues, warned amber, failed red."""
    fills = {"pass": ("#8ca3c0", "#b8c4d6", "#5f7a99", "#a7b1bd", "#6e7781"),
             "warn": ("#e3a008", "#c98a00", "#f2c14e"), "fail": ("#cf222e", "#a40e26", "#e5534b")}
    used: Counter = Counter()
    out = {}
    for cause, status in sorted(statuses.items()):
        shades = fills.get(status, fills["pass"])
        out[cause] = shades[used[status] % len(shades)]
        used[status] += 1
    return out


def charts(runs: list[model.Run], coverage: dict | None = None) -> str:
    """The three charts over runs, as inline SVG: one bar per run, labelled by the snapshot
    nights it read (oldest left)."""
    coverage = coverage or {}
    runs = _by_night(runs, coverage)
    s = series.series(runs)
    ordered = list(reversed(runs))
    labels = [_night_label(r, coverage) for r in ordered]
    names = [f"{r.run_id} (nights {nights_text(coverage[r.token].nights)})"
             if r.token in coverage and coverage[r.token].nights else r.run_id for r in ordered]
    return "".join([
        svg.bar_chart("chart-crc", "CRC failures per run", labels,
                      {"crc failures": s["crc_failures"]}, tooltips=names,
                      colors={"crc failures": svg.OUTCOME_FILLS["fail"]}),
        svg.bar_chart("chart-gaps", "Offset gaps by cause (grey-blue: accepted)", labels,
                      s["gaps_by_cause"], tooltips=names, legend=True,
                      colors=cause_colors(s["gap_cause_status"])),
        svg.bar_chart("chart-timestamps", "Timestamp regressions per run", labels,
                      s["timestamp_regressions"], tooltips=names, legend=True,
                      colors={"log_append_time": "#30638e", "create_time": "#66a182"}),
    ])


_OUTCOME_LABELS = {"fail": "failed", "warn": "warned", "pass": "passed",
                   nights.ACCEPTED: "passed, accepted items (retention, compaction, ...)",
                   words.NOTHING_NEW: "nothing new (nothing to check)", nights.NO_RUN: "no run"}

#: the glyph of each outcome in a grid cell (colour is not the only sign)
_MARKS = {"fail": "✕", "warn": "!", "pass": "✓", nights.ACCEPTED: "~", words.NOTHING_NEW: "=",
          nights.NO_RUN: "–"}
#: the glyph of a night without a snapshot (its colour: that finding's status)
NO_SNAPSHOT_MARK = "∅"
#: the grid's first row: each night's worst
NIGHT_ROW = "whole night"


def _fill(outcome: str | None) -> str:
    return svg.OUTCOME_FILLS.get(outcome or "none", svg.OUTCOME_FILLS["other"])


def _no_snapshot_cell(gone: nights.NoSnapshot, label: str | None) -> dict:
    return {"fill": _fill(gone.status), "mark": NO_SNAPSHOT_MARK, "title": gone.title(label),
            "href": f"{run_href(gone.run.token)}#{gone.result.anchor}",
            "attrs": {"data-night": gone.night, "data-outcome": gone.status,
                      "data-kind": nights.NO_SNAPSHOT, "data-token": gone.run.token}}


def night_grid(ov: nights.Overview, attempts: dict[str, model.Attempt] | None = None) -> str:
    """The heat grid: a row of each night's worst, then the snapshot, topics and
    topic-partitions (rows) x nights; nights without a snapshot and due nights without a run
    are columns of their own."""
    if not ov.nights:
        return ('<p id="no-nights" class="muted">No run with a known snapshot night yet: the '
                "grid needs the runs' ledger rows (see the runs below).</p>")
    long = len(ov.nights) > 31
    labels = [n[5:] if long else n for n in ov.nights]
    col = {n: j for j, n in enumerate(ov.nights)}
    rows = [NIGHT_ROW] + [words.where(t, p) for t, p in ov.partitions]
    cells = {}
    for j, night in enumerate(ov.nights):
        outcome = ov.night_outcome(night)
        gone = ov.no_snapshot.get(night)
        if gone is not None:
            cells[(0, j)] = _no_snapshot_cell(gone, None)
        elif outcome == nights.NO_RUN:
            cells[(0, j)] = {"fill": _fill(nights.NO_RUN), "mark": _MARKS[nights.NO_RUN],
                             "title": f"{night}: no run — the schedule ({ov.schedule}) was due to "
                                      "read this night and no run has results for it (yet)",
                             "attrs": {"data-night": night, "data-outcome": nights.NO_RUN}}
        elif outcome is not None:
            cells[(0, j)] = {"fill": _fill(outcome), "mark": _MARKS.get(outcome, "?"),
                             "href": f"#night-{night}",
                             "title": f"{night}: {_OUTCOME_LABELS.get(outcome, outcome)} (worst of "
                                      "the night)",
                             "attrs": {"data-night": night, "data-outcome": outcome}}
    for i, (topic, partition) in enumerate(ov.partitions, start=1):
        label = rows[i]
        for j, night in enumerate(ov.nights):
            c = ov.cells.get((topic, partition, night))
            if c is None and night in ov.no_snapshot:
                cells[(i, j)] = _no_snapshot_cell(ov.no_snapshot[night], label)
            elif c is None and night in ov.no_run:
                cells[(i, j)] = {"fill": _fill(nights.NO_RUN), "title": f"{night} · {label}: no run",
                                 "attrs": {"data-night": night, "data-outcome": nights.NO_RUN}}
            elif c is not None:
                href = run_href(c.run.token) + (f"#{c.anchor}" if c.anchor else "")
                cells[(i, j)] = {"fill": _fill(c.outcome), "mark": _MARKS.get(c.outcome, "?"),
                                 "href": href, "title": c.title(),
                                 "attrs": {"data-night": night, "data-tp": c.tp,
                                           "data-outcome": c.outcome, "data-token": c.run.token,
                                           "data-checks": " ".join(r.check for r, _ in c.problems)}}
    lanes, unplaced = [], {r.token for r in ov.unplaced}
    for run in ov.runs:
        cov = ov.coverage.get(run.token) or model.Coverage()
        spans = sorted({n for n in cov.nights + ([run.as_of] if run.as_of else []) if n in col})
        if not spans or run.token in unplaced:
            continue
        topics = (f" of {', '.join(cov.topics)} ({plural(len(cov.partitions), 'topic-partition')})"
                  if cov.partitions else "")
        attempt = (attempts or {}).get(run.token)
        shown = "fail" if attempt is not None and attempt.state == model.FAILED else run.verdict
        lanes.append({"first": col[spans[0]], "last": col[spans[-1]], "label": run.run_id,
                      "href": run_href(run.token),
                      "fill": _fill(shown if shown in svg.OUTCOME_FILLS else "other"),
                      "title": f"run {run.run_id}: "
                               + (f"{attempt.headline()} (earlier results: {run.verdict})"
                                  if attempt is not None else run.verdict) + "; "
                               f"{plural(len(spans), 'night')} ({nights_text(spans)}){topics}",
                      "attrs": {"data-token": run.token, "data-nights": " ".join(spans)}})
    legend = [(_OUTCOME_LABELS[k].split(" (")[0], svg.OUTCOME_FILLS[k])
              for k in ("fail", "warn", "pass")]
    legend += [("accepted (retention, compaction, ...)", svg.OUTCOME_FILLS[nights.ACCEPTED]),
               ("= nothing new", svg.OUTCOME_FILLS[words.NOTHING_NEW])]
    if ov.no_snapshot:
        legend.append((f"{NO_SNAPSHOT_MARK} no snapshot", _fill(max(
            (g.status for g in ov.no_snapshot.values()), key=lambda s: -model.worst_rank(s)))))
    if ov.no_run:
        legend.append(("– no run", svg.OUTCOME_FILLS[nights.NO_RUN]))
    legend.append(("not read", svg.OUTCOME_FILLS["none"]))
    return svg.heat_grid("night-grid", "Snapshot nights (columns) by topic-partition: worst check",
                         ov.nights, rows, cells, column_labels=labels, lanes=lanes, legend=legend,
                         empty_title="{column} · {row}: not read (no run read it this night)")


#: problem lines shown per night on the overview (the run page has them all)
NIGHT_LINES = 8
#: unhealthy nights listed under the grid and in the headline, newest first (the grid has all)
PROBLEM_NIGHTS = 14


def night_problems(ov: nights.Overview) -> str:
    """Under the grid: each unhealthy night, newest first, with one line per failed or warned
    check and topic-partition (the run page's problem line: offsets, segment, bytes)."""
    bad = ov.problem_nights()[:PROBLEM_NIGHTS]
    if not bad:
        return ('<p id="healthy" class="muted">No night failed or warned.</p>' if ov.cells else "")
    out = ['<section id="night-problems">']
    for night, problems in bad:
        outcome = ov.night_outcome(night) or ""
        lines = []
        for p in problems:
            href = f"{run_href(p.run.token)}#{p.result.anchor}"
            lines.append(
                f'<li class="night-problem item-{escape(p.status)}" data-check="{escape(p.result.check)}" '
                f'data-tp="{escape(p.result.label)}"><a href="{escape(href)}"><span class="status '
                f'{_status_class(p.status)}">{escape(p.status)}</span> {escape(p.result.check)}</a> '
                f'<span class="problem-line">{line_html(p.result.first_problem())}</span></li>')
        shown, more = lines[:NIGHT_LINES], len(lines) - NIGHT_LINES
        runs = sorted({p.run.token: p.run for p in problems}.values(), key=lambda r: r.run_id)
        links = ", ".join(f'<a href="{escape(run_href(r.token))}">{escape(r.run_id)}</a>' for r in runs)
        more_text = f'<li class="muted">{more} more: see {links}</li>' if more > 0 else ""
        counts = words.counts_text(words.ordered_counts(Counter(p.status for p in problems)))
        what = "no snapshot · found by" if night in ov.no_snapshot else "read by"
        out.append(
            f'<div class="night" id="night-{escape(night)}" data-night="{escape(night)}" '
            f'data-outcome="{escape(outcome)}"><h3><span class="verdict verdict-{escape(outcome)}">'
            f'{escape(outcome)}</span> Night {escape(night)} <span class="muted">· '
            f"{escape(counts)} · {what} {links}</span></h3>"
            f'<ul>{"".join(shown)}{more_text}</ul></div>')
    out.append("</section>")
    return "".join(out)


def _partitions_text(cov: model.Coverage) -> str:
    """``orders 0, 1 · payments 0``: the topic-partitions a run read, by topic."""
    by_topic: dict[str, list[int]] = {}
    for t, p in cov.partitions:
        by_topic.setdefault(t, []).append(p)
    return " · ".join(f"{t} {', '.join(map(str, sorted(ps)))}" for t, ps in sorted(by_topic.items()))


def topics_folded(cov: model.Coverage | None) -> str:
    """``12 topic-partitions`` (of 8 topics), the list behind it (a disclosure)."""
    if cov is None or not cov.partitions:
        return '<span class="muted">—</span>'
    return (f'<details class="topics"><summary>{plural(len(cov.partitions), "topic-partition")}'
            f'</summary><div class="tp-list">{escape(_partitions_text(cov))}</div></details>')


def _nights_cell(cov: model.Coverage | None) -> str:
    if cov is None or not cov.nights:
        reason = cov.reason if cov is not None and cov.reason else "no ledger rows"
        return f'<td class="nights muted" title="{escape(reason)}">unknown</td>'
    gone = (f'<div class="no-snapshot">no snapshot: {escape(nights_text(list(cov.missing)))}</div>'
            if cov.missing else "")
    return (f'<td class="nights" data-nights="{escape(" ".join(cov.nights))}">'
            f"{escape(nights_text(cov.read))}{gone}</td>")


def _unplaced_reason(run: model.Run, ov: nights.Overview) -> str:
    if run.error:
        return run.error
    if not run.results:
        return "no results"
    cov = ov.coverage.get(run.token)
    return (cov.reason if cov is not None and cov.reason else "no ledger rows of this run")


def _suites_title(run: model.Run) -> str:
    return f"The Data Docs count {words.suites_text(run.suites())}"


def index_page(runs: list[model.Run], base: str, root: str, ov: nights.Overview | None = None,
               attempts: dict[str, model.Attempt] | None = None) -> str:
    """The overview; ``attempts``: the runs whose latest attempt in Airflow is newer than
    their results (:func:`.dag_runs.attempts`), shown by that attempt's state."""
    ov = ov or nights.overview(runs, {})
    attempts = attempts or {}
    rows = []
    for run in runs:
        attempt = attempts.get(run.token)
        verdict = model.shown_verdict(run, attempt)
        tally = run.tally
        docs = (f'<a class="docs-link" href="{escape(docs_href(run.token))}" '
                f'title="{escape(_suites_title(run))}">Data Docs</a>'
                if run.has_docs else '<span class="muted">—</span>')
        cov = ov.coverage.get(run.token)
        note = f'<div class="error">{escape(run.error)}</div>' if run.error else ""
        if remedies.unpublished(run, cov):
            note += '<div class="not-published-note">not published: main unchanged</div>'
        if attempt is not None:
            note += (f'<div class="attempt-note {"error" if attempt.state == model.FAILED else "muted"}">'
                     f"{escape(attempt.headline())}; the counts are an earlier attempt's "
                     f"({escape(run.verdict)})</div>")

        rows.append(
            f'<tr class="run row-{escape(verdict)}" data-token="{escape(run.token)}" '
            f'data-run-id="{escape(run.run_id)}" data-verdict="{escape(verdict)}" '
            f'data-results-verdict="{escape(run.verdict)}">'
            f'<td class="verdict-cell"><span class="verdict verdict-{escape(verdict)}">'
            f"{escape(verdict)}</span></td>"
            f'<td class="run-cell"><a class="run-link" href="{escape(run_href(run.token))}">'
            f"{escape(run.run_id)}</a>{note}</td>"
            f"{_nights_cell(cov)}<td class=\"read\">{topics_folded(cov)}</td>"
            + "".join(f'<td class="num count-{k}">{tally[k]}</td>'
                      for k in ("fail", "warn", "pass", words.NOTHING_NEW))
            + f'<td class="when" title="{_when(run.checked_at)}">{_when(run.checked_at, "%Y-%m-%d %H:%M")}</td>'
            f'<td class="docs">{docs}</td></tr>')
    table = (
        '<div class="scroll"><table id="runs"><thead><tr><th>Verdict</th><th>Run</th>'
        '<th>Snapshot nights</th><th>Read</th>'
        + "".join(f'<th class="num" title="results, {words.COUNTED}">{words.COUNT_NOUNS[k][1]}</th>'
                  for k in ("fail", "warn", "pass", words.NOTHING_NEW))
        + '<th>Checked at (UTC)</th><th>Data Docs</th>'
        f'</tr></thead><tbody>{"".join(rows)}</tbody></table></div>'
        if runs else '<p id="no-runs" class="muted">No data-quality results in this warehouse yet.</p>')
    if attempts:
        attempts_note = ('<p id="attempts" class="error">' + "; ".join(
            f'run <a href="{escape(run_href(r.token))}">{escape(r.run_id)}</a>: '
            f"{escape(attempts[r.token].headline())}" for r in runs if r.token in attempts)
            + ". The grid shows those runs' earlier results.</p>")
    else:
        attempts_note = ""
    unhealthy = [n for n, _ in ov.problem_nights()]
    if unhealthy:
        older = len(unhealthy) - PROBLEM_NIGHTS
        headline = ("Unhealthy nights: " + ", ".join(
            f'<a href="#night-{escape(n)}">{escape(n)}</a> ({escape(ov.night_outcome(n) or "")}'
            + (", no snapshot" if n in ov.no_snapshot else "") + ")"
            for n in unhealthy[:PROBLEM_NIGHTS])
            + (f" and {older} older (in the grid)" if older > 0 else ""))
    elif ov.cells or ov.no_snapshot:
        headline = "Every night read so far passed."
    else:
        headline = ""
    no_run = (f'<p id="no-run" class="muted">No run has results for the scheduled night(s) '
              f"{escape(nights_text(ov.no_run))} (schedule <code>{escape(ov.schedule or '')}</code>)."
              "</p>" if ov.no_run else "")
    if ov.schedule_note:
        no_run += f'<p id="schedule-note" class="muted">{escape(ov.schedule_note)}</p>'
    unplaced = ""
    if ov.unplaced:
        unplaced = ('<p id="unplaced" class="muted">Not in the grid (no snapshot night known): '
                    + "; ".join(f'<a href="{escape(run_href(r.token))}">{escape(r.run_id)}</a> '
                                f"({escape(_unplaced_reason(r, ov))})" for r in ov.unplaced) + "</p>")
    body = (
        "<h1>Data quality</h1>"
        f'<p class="muted">Warehouse <code>{escape(root)}</code> · {len(runs)} run(s) · '
        f'<a href="api/nights">JSON</a> · results are {words.COUNTED}; the Data Docs count '
        "suites (one per check)</p>"
        f'<section id="nights"><h2>Nights at a glance</h2>'
        f'<p id="headline">{headline}</p>{attempts_note}{no_run}{night_grid(ov, attempts)}{unplaced}'
        f"{night_problems(ov)}</section>"
        f"<h2>Runs</h2>{table}"
        f'<h2>Per run</h2><section class="charts" id="charts">{charts(runs, ov.coverage)}</section>'
    )
    return _page("Data quality", base, body)


def _raw_details(raw) -> str:
    """The row's ``details`` as stored (JSON), only behind a disclosure."""
    details = stored_details(raw)
    if details is None:
        return ""
    text = details if isinstance(details, str) else json.dumps(details, indent=2, sort_keys=True)
    return (f'<details class="raw"><summary>raw details (JSON)</summary>'
            f"<pre>{escape(text)}</pre></details>")


def _more_items(r: model.Result) -> str:
    """Every other stored item of a result, one plain line each (the first is already shown)."""
    problems = words.problem_items(r.details)
    lines = [f'<li class="item item-{escape(str(i.status or "other"))}">'
             f'{line_html(words.item_line(r.topic, r.partition, i, r.night))}</li>'
             for i in problems[1:]]
    lines += [f'<li class="item item-pass"><span class="muted">accepted:</span> '
              f'{line_html(words.item_line(r.topic, r.partition, i, r.night))}</li>'
              for i in words.accepted_items(r.details)]
    shown = len(lines)
    more = words.more_items(r.details)
    if more:
        lines.append(f'<li class="muted">{plural(more, "more item")} not stored '
                     "(the audit keeps the first 20 per check and topic-partition)</li>")
    if not lines:
        return ""
    summary = plural(shown, "more item") if shown else "more"
    return f'<details class="more-items"><summary>{summary}</summary><ul>{"".join(lines)}</ul></details>'


def _accepted_text(details) -> str:
    acc = words.accepted_classes(details)
    return ", ".join(f"{k}: {plural(v['items'], 'item')}" for k, v in acc.items())


def _row_attrs(r: model.Result) -> str:
    return (f'id="{escape(r.anchor)}" class="result row-{escape(r.outcome.replace("_", "-"))}" '
            f'data-check="{escape(r.check)}" data-topic="{escape(r.topic or "")}" '
            f'data-partition="{"" if r.partition is None else r.partition}" '
            f'data-night="{escape(r.night or "")}" data-status="{escape(r.status)}"')


def _checked(r: model.Result) -> str:
    if r.outcome == words.NOTHING_NEW:
        return (f'<span class="nothing-new" title="{escape(words.checked_text(r.observed, r.details) or "")}">'
                "nothing new</span>")
    return escape(words.checked_text(r.observed, r.details) or "—")


def _problem_row(r: model.Result) -> str:
    accepted = _accepted_text(r.details)
    also = f'<div class="muted">also accepted: {escape(accepted)}</div>' if accepted else ""
    items = "—" if r.failed is None else plural(r.failed, "item")
    return (
        f"<tr {_row_attrs(r)}>"
        f'<td class="check-name">{escape(r.check)}</td><td class="tp">{escape(r.label)}</td>'
        f'<td class="problem"><div class="problem-line">{line_html(r.first_problem())}</div>'
        f"{also}{_more_items(r)}{_raw_details(r.raw_details)}</td>"
        f'<td class="num items">{escape(items)}</td>'
        f'<td class="num checked">{_checked(r)}</td></tr>')


def _pass_row(r: model.Result) -> str:
    accepted = _accepted_text(r.details)
    label = words.severity_label(r.severity)
    return (
        f"<tr {_row_attrs(r)}>"
        f'<td class="check-name">{escape(r.check)}</td><td class="tp">{escape(r.label)}</td>'
        f'<td class="num checked">{_checked(r)}</td>'
        f'<td class="accepted">{escape(accepted) if accepted else "<span class=muted>—</span>"}</td>'
        f'<td class="if-found">{escape(label) if label else "—"}</td>'
        f"<td>{_raw_details(r.raw_details)}</td></tr>")


_GROUP_TITLES = {"fail": "Failed", "warn": "Warned"}


def _run_nights(cov: model.Coverage | None) -> str:
    """``Snapshot nights read: 2026-11-18..2026-11-20 (3 nights) · 12 topic-partitions of 8
    topics`` (folded); the nights without a snapshot; a range run's nights per topic-partition
    where they differ."""
    if cov is None:
        return ""
    if not cov.nights:
        return (f'<div id="nights" class="muted">Snapshot nights read: unknown '
                f'({escape(cov.reason or "no ledger rows")})</div>')
    read = (f"Snapshot nights read: {escape(nights_text(cov.read))} "
            f"({plural(len(cov.read), 'night')}) · {topics_folded(cov)}" if cov.read else "")
    gone = (f'<div class="no-snapshot">No snapshot: {escape(nights_text(list(cov.missing)))}</div>'
            if cov.missing else "")
    differ = len({n for n in cov.partitions.values()}) > 1
    extra = ""
    if differ:
        extra = ('<details class="tp-nights"><summary>nights per topic-partition</summary><ul>'
                 + "".join(f"<li>{escape(words.topic_partition(t, p))}: {escape(nights_text(list(n)))}</li>"
                           for (t, p), n in cov.partitions.items()) + "</ul></details>")
    return (f'<div id="nights" data-nights="{escape(" ".join(cov.nights))}">{read}{gone}</div>'
            f"{extra}")


def counts_line(run: model.Run) -> str:
    """``6 warnings · 158 passes · 4 nothing new, counted per check × topic-partition`` (the
    pages' one count of results: a check on one topic-partition fails, warns, passes or has
    nothing new to check; it finds items)."""
    parts = [f'<span class="count-{escape(k)}">{escape(words.counts_text({k: v}))}</span>'
             for k, v in run.tally.items() if v]
    return (f'<p id="counts">{" · ".join(parts) or "no results"}, {words.COUNTED}</p>')


#: the "Sinks" table's columns: (title, the totals' key) of an append sink
_SINK_COLUMNS = (("Delivered", "delivered"), ("Missing", "missing"),
                 ("Duplicates", "duplicates"), ("Leaks", "leaks"), ("Lag", "lag"))


def sinks_section(run: model.Run) -> str:
    """The "Sinks" section: one row per Kafka->lake sink the run reconciled (check
    ``sink_reconcile``, docs/sinks.md): its outcome, the records of its windows it holds
    (delivered), the offsets it lacks (missing), holds twice (duplicates), of aborted or open
    transactions (leaks) and not yet delivered (lag), and where its position came from;
    nothing where the run reconciled none."""
    sinks = run.sinks
    if not sinks:
        return ""
    rows = []
    for name, t in sinks.items():
        if t["mode"] == "upsert":
            counts = (f'<td colspan="{len(_SINK_COLUMNS)}">upsert: missing keys {t["missing_keys"]:,}, '
                      f'stale values {t["stale_values"]:,}, deleted keys present '
                      f'{t["deleted_keys_present"]:,}, duplicates {t["duplicates"]:,}</td>')
        else:
            counts = "".join(f'<td class="num {key}">{t[key]:,}</td>' for _, key in _SINK_COLUMNS)
        rows.append(
            f'<tr class="sink row-{escape(t["status"])}" data-sink="{escape(name)}" '
            f'data-status="{escape(t["status"])}"><td class="sink-name">{escape(name)}</td>'
            f'<td><span class="verdict verdict-{escape(t["status"])}">{escape(t["status"])}</span></td>'
            f'{counts}<td class="num">{t["partitions"]:,}</td>'
            f'<td class="muted position">{escape(t.get("position") or "—")}</td></tr>')
    head = "".join(f'<th class="num">{escape(title)}</th>' for title, _ in _SINK_COLUMNS)
    return ('<section id="sinks"><h2>Sinks</h2><p class="muted">Each Kafka-to-lake sink '
            "against the log as of the night (check sink_reconcile; its rows below, one per "
            "sink × topic-partition): delivered records of its window, offsets missing, "
            "extra copies, records of aborted or open transactions, offsets past its "
            "position.</p><div class=\"scroll\"><table><thead><tr><th>Sink</th><th>Outcome</th>"
            f'{head}<th class="num">Partitions</th><th>Position</th></tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table></div></section>')


def run_page(run: model.Run, base: str, coverage: model.Coverage | None = None, *,
             root: str = "W", catalog: str = "kafkalog", namespace: str = "kafka",
             skip_reason: str | None = None, attempt: model.Attempt | None = None) -> str:
    """One run, problems first; a failed run not published opens with what that means and
    the ways forward (:mod:`.remedies`); ``skip_reason``: why Airflow's plan task skipped it;
    ``attempt``: its latest attempt where that is newer than its results (running, failed):
    the page's verdict, and the results below are said to be an earlier attempt's."""
    verdict = model.shown_verdict(run, attempt)
    docs = (f'<a class="docs-link" href="{escape(docs_href(run.token))}">Data Docs of this run</a> '
            f'<span class="muted" id="suites">(they count {escape(words.suites_text(run.suites()))})</span>'
            if run.has_docs else '<span class="muted">no Data Docs for this run</span>')
    parts = [
        '<nav><a href="./">← all runs</a>'
        f'<a href="api/runs/{escape(quote(run.token))}">JSON</a></nav>',
        f'<h1>Run <span id="run-id">{escape(run.run_id)}</span> '
        f'<span id="verdict" class="verdict verdict-{escape(verdict)}">{escape(verdict)}</span></h1>',
        _attempt_section(run, attempt),
        remedies.section(run, coverage, root=root, catalog=catalog, namespace=namespace)
        if attempt is None else "",
        (f'<p id="skip-reason" class="muted">Airflow skipped the rest of this run: '
         f"{escape(skip_reason)}</p>" if skip_reason else ""),
        f"<p>Checked at {_when(run.checked_at)} · {docs}</p>",
        _run_nights(coverage),
        counts_line(run),
        sinks_section(run),
    ]
    if run.error:
        parts.append(f'<p class="error">This run\'s results could not be read: {escape(run.error)}</p>')
    groups = run.by_outcome()
    if run.results and not any(s not in ("pass", words.NOTHING_NEW) for s, _ in groups):
        parts.append('<p id="no-problems">No check failed or warned.</p>')
    for outcome, rows in groups:
        n = f"{len(rows):,}"
        if outcome in ("pass", words.NOTHING_NEW):
            body = "".join(_pass_row(r) for r in rows)
            title, note, anchor = (
                (f"Passed: {n}", f"({words.COUNTED}; items the policy accepts are listed; "
                                 "“would fail” is what a check does if it finds something)", "passes")
                if outcome == "pass" else
                (f"Nothing new: {n}", f"({words.COUNTED}; nothing to check, e.g. every segment "
                                      "unchanged since an earlier night: not a pass)", "nothing-new"))
            parts.append(
                f'<details id="{anchor}" class="outcome" data-status="{escape(outcome)}">'
                f'<summary><span class="group-title">{title}</span> '
                f'<span class="muted">{note}</span></summary>'
                '<div class="scroll"><table><thead><tr><th>Check</th><th>Where</th>'
                '<th class="num">Checked</th><th>Accepted items</th><th>If found</th><th></th>'
                f"</tr></thead><tbody>{body}</tbody></table></div></details>")
            continue
        title = _GROUP_TITLES.get(outcome, f"Status {outcome}")
        body = "".join(_problem_row(r) for r in rows)
        parts.append(
            f'<section id="outcome-{escape(outcome)}" class="outcome" data-status="{escape(outcome)}">'
            f'<h2>{escape(title)}: {n} <span class="muted group-unit">({words.COUNTED})</span></h2>'
            '<div class="scroll"><table><thead><tr><th>Check</th><th>Where</th><th>Problem</th>'
            '<th class="num">Items</th><th class="num">Checked</th></tr></thead>'
            f"<tbody>{body}</tbody></table></div></section>")
    return _page(f"Data quality · {run.run_id}", base, "".join(parts))


def _attempt_section(run: model.Run, attempt: model.Attempt | None) -> str:
    """What Airflow's newer attempt of the run says, before the results of an earlier one."""
    if attempt is None:
        return ""
    return (f'<section id="attempt" class="attempt-{escape(attempt.state)}" '
            f'data-state="{escape(attempt.state)}"><p class="{"error" if attempt.state == model.FAILED else ""}">'
            f"<strong>{escape(attempt.headline()[0].upper() + attempt.headline()[1:])}.</strong></p>"
            f'<p class="muted">What follows are the results of an earlier attempt (verdict '
            f'<span class="verdict verdict-{escape(run.verdict)}" id="earlier-verdict">'
            f"{escape(run.verdict)}</span>, checked at {_when(run.checked_at)}): not this "
            "attempt's. "
            + ("See the failed task's log in Airflow; clearing it runs the night again."
               if attempt.state == model.FAILED else
               "This attempt's verdict replaces them when its audit ends.")
            + "</p></section>")


def message_page(title: str, message: str, base: str) -> str:
    return _page(title, base, f'<nav><a href="./">← all runs</a></nav><h1>{escape(title)}</h1>'
                              f'<p class="error" id="message">{escape(message)}</p>')
