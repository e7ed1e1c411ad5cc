"""HTML pages of the Data quality view: plain server-rendered HTML, no script, no CDN.

Every page carries ``<base href>`` = the app's mount point, so links are relative to it and
work behind a path prefix, directly or inside Airflow's embedded-view iframe.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from html import escape
from urllib.parse import quote

from . import data, svg

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
tr.row-fail td{background:#fff5f5}tr.row-warn td{background:#fffdf0}
.charts{display:flex;flex-wrap:wrap;gap:12px}.charts svg{border:1px solid #e1e4e8;border-radius:6px;background:#fff}
pre{margin:4px 0;white-space:pre-wrap;font-size:12px}summary{cursor:pointer;color:#0969da}
.problem-line{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:13px}
td.items,td.checked,td.tp,td.check-name,th{white-space:nowrap}
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


def _when(value: dt.datetime | None) -> str:
    return value.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC") if value else "—"


def _short_when(value: dt.datetime | None, fallback: str) -> str:
    return value.astimezone(dt.timezone.utc).strftime("%m-%d %H:%M") if value else fallback[:14]


def _status_class(status: str) -> str:
    return f"status-{status}" if status in data.STATUSES else "status-other"


def run_href(token: str) -> str:
    return f"runs/{quote(token)}"


def docs_href(token: str) -> str:
    return f"runs/{quote(token)}/docs/index.html"


def _night_label(run: data.Run, coverage: dict) -> str:
    """A chart's axis label of a run: the nights it read (``11-19``, ``11-18..11-20``)."""
    cov = coverage.get(run.token)
    nights = cov.nights if cov is not None else []
    if not nights:
        return "? " + _short_when(run.checked_at, run.token)
    first, last = nights[0][5:], nights[-1][5:]
    return first if first == last else f"{first}..{last}"


def _by_night(runs: list[data.Run], coverage: dict) -> list[data.Run]:
    """Runs newest first by the first night they read (runs of no known night last), then by
    when they were checked: the order :func:`data.series` expects."""
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


def charts(runs: list[data.Run], coverage: dict | None = None) -> str:
    """The three charts over runs, as inline SVG: one bar per run, labelled by the snapshot
    nights it read (oldest left)."""
    coverage = coverage or {}
    runs = _by_night(runs, coverage)
    s = data.series(runs)
    ordered = list(reversed(runs))
    labels = [_night_label(r, coverage) for r in ordered]
    names = [f"{r.run_id} (nights {data.nights_text(coverage[r.token].nights)})"
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
                   data.ACCEPTED: "passed, accepted items (retention, compaction, ...)"}


#: the glyph of each outcome in a grid cell (colour is not the only sign)
_MARKS = {"fail": "✕", "warn": "!", "pass": "✓", data.ACCEPTED: "~"}


def _fill(outcome: str | None) -> str:
    return svg.OUTCOME_FILLS.get(outcome or "none", svg.OUTCOME_FILLS["other"])


def night_grid(ov: data.Overview) -> str:
    """The heat grid: topic-partitions (rows, under a row of each night's worst) x nights."""
    if not ov.nights:
        return ('<p id="no-nights" class="muted">No run with a known snapshot night yet: the '
                "grid needs the runs' ledger rows (see the runs below).</p>")
    long = len(ov.nights) > 31
    labels = [n[5:] if long else n for n in ov.nights]
    col = {n: j for j, n in enumerate(ov.nights)}
    rows = ["every topic-partition"] + [data.topic_partition(t, p) for t, p in ov.partitions]
    cells = {}
    for j, night in enumerate(ov.nights):
        outcome = ov.night_outcome(night)
        if outcome is not None:
            cells[(0, j)] = {"fill": _fill(outcome), "mark": _MARKS.get(outcome, "?"),
                             "href": f"#night-{night}",
                             "title": f"{night}: {_OUTCOME_LABELS.get(outcome, outcome)} (worst of "
                                      "its topic-partitions)",
                             "attrs": {"data-night": night, "data-outcome": outcome}}
    for i, (topic, partition) in enumerate(ov.partitions, start=1):
        for j, night in enumerate(ov.nights):
            c = ov.cells.get((topic, partition, night))
            if c is None:
                continue
            href = run_href(c.run.token) + (f"#{c.anchor}" if c.anchor else "")
            cells[(i, j)] = {"fill": _fill(c.outcome), "mark": _MARKS.get(c.outcome, "?"),
                             "href": href, "title": c.title(),
                             "attrs": {"data-night": night, "data-tp": c.tp, "data-outcome": c.outcome,
                                       "data-token": c.run.token,
                                       "data-checks": " ".join(r.check for r, _ in c.problems)}}
    lanes, unplaced = [], {r.token for r in ov.unplaced}
    for run in ov.runs:
        cov = ov.coverage.get(run.token)
        if cov is None or not cov.nights or run.token in unplaced:
            continue
        first, last = col[cov.nights[0]], col[cov.nights[-1]]
        lanes.append({"first": first, "last": last, "label": run.run_id, "href": run_href(run.token),
                      "fill": _fill(run.verdict if run.verdict in svg.OUTCOME_FILLS else "other"),
                      "title": f"run {run.run_id}: {run.verdict}; read "
                               f"{data.plural(len(cov.nights), 'night')} ({data.nights_text(cov.nights)}) "
                               f"of {', '.join(cov.topics)} ({data.plural(len(cov.partitions), 'topic-partition')})",
                      "attrs": {"data-token": run.token, "data-nights": " ".join(cov.nights)}})
    legend = [(_OUTCOME_LABELS[k].split(" (")[0] if k != data.ACCEPTED else "accepted (retention, compaction, ...)",
               svg.OUTCOME_FILLS[k]) for k in ("fail", "warn", "pass", data.ACCEPTED)]
    legend.append(("not read", svg.OUTCOME_FILLS["none"]))
    return svg.heat_grid("night-grid", "Snapshot nights (columns) by topic-partition: worst check",
                         ov.nights, rows, cells, column_labels=labels, lanes=lanes, legend=legend,
                         empty_title="{column} · {row}: no run read this night")


#: problem lines shown per night on the overview (the run page has them all)
NIGHT_LINES = 8
#: unhealthy nights listed under the grid and in the headline, newest first (the grid has all)
PROBLEM_NIGHTS = 14


def night_problems(ov: data.Overview) -> str:
    """Under the grid: each unhealthy night, newest first, with one line per failed or warned
    check and topic-partition (the run page's problem line: offsets, segment, bytes)."""
    bad = ov.problem_nights()[:PROBLEM_NIGHTS]
    if not bad:
        return ('<p id="healthy" class="muted">No night failed or warned.</p>' if ov.cells else "")
    out = ['<section id="night-problems">']
    for night, cells in bad:
        outcome = ov.night_outcome(night)
        lines, statuses = [], Counter()
        for c in cells:
            for r, status in c.problems:
                statuses[status] += 1
                href = f"{run_href(c.run.token)}#{data.result_anchor(r.check, r.topic, r.partition)}"
                lines.append(
                    f'<li class="night-problem item-{escape(status)}" data-check="{escape(r.check)}" '
                    f'data-tp="{escape(c.tp)}"><a href="{escape(href)}"><span class="status '
                    f'{_status_class(status)}">{escape(status)}</span> {escape(r.check)}</a> '
                    f'<span class="problem-line">'
                    f"{escape(data.first_problem(r.topic, r.partition, r.details, r.failed))}</span></li>")
        shown, more = lines[:NIGHT_LINES], len(lines) - NIGHT_LINES
        runs = sorted({c.run.token: c.run for c in cells}.values(), key=lambda r: r.run_id)
        more_text = ""
        if more > 0:
            more_text = (f'<li class="muted">{more} more: see '
                         + ", ".join(f'<a href="{escape(run_href(r.token))}">run {escape(r.run_id)}</a>'
                                     for r in runs) + "</li>")
        out.append(
            f'<div class="night" id="night-{escape(night)}" data-night="{escape(night)}" '
            f'data-outcome="{escape(outcome or "")}"><h3><span class="verdict verdict-{escape(outcome or "")}">'
            f'{escape(outcome or "")}</span> Night {escape(night)} '
            f'<span class="muted">· checks per topic-partition: '
            + " · ".join(f"{n} {escape(data.OUTCOME_WORDS.get(k, k))}"
                         for k, n in sorted(statuses.items(), key=lambda kv: data.worst_rank(kv[0])))
            + ' · read by '
            + ", ".join(f'<a href="{escape(run_href(r.token))}">{escape(r.run_id)}</a>' for r in runs)
            + f'</span></h3><ul>{"".join(shown)}{more_text}</ul></div>')
    out.append("</section>")
    return "".join(out)


def _nights_cell(cov: data.Coverage | None) -> str:
    if cov is None or not cov.nights:
        reason = cov.reason if cov is not None and cov.reason else "no ledger rows"
        return f'<td class="nights muted" title="{escape(reason)}">unknown</td>'
    return (f'<td class="nights" data-nights="{escape(" ".join(cov.nights))}">'
            f"{escape(data.nights_text(cov.nights))}"
            f'<div class="muted">{escape(", ".join(cov.topics))} · '
            f"{data.plural(len(cov.partitions), 'topic-partition')}</div></td>")


def _unplaced_reason(run: data.Run, ov: data.Overview) -> str:
    if run.error:
        return run.error
    if not run.results:
        return "no results"
    cov = ov.coverage.get(run.token)
    return (cov.reason if cov is not None and cov.reason else "no ledger rows of this run")


def index_page(runs: list[data.Run], base: str, root: str, ov: data.Overview | None = None) -> str:
    ov = ov or data.overview(runs, {})
    rows = []
    for run in runs:
        counts = run.counts
        docs = (f'<a class="docs-link" href="{escape(docs_href(run.token))}">Data Docs</a>'
                if run.has_docs else '<span class="muted">—</span>')
        note = f'<div class="error">{escape(run.error)}</div>' if run.error else ""
        rows.append(
            f'<tr class="run row-{escape(run.verdict)}" data-token="{escape(run.token)}" '
            f'data-run-id="{escape(run.run_id)}" data-verdict="{escape(run.verdict)}">'
            f'<td><a class="run-link" href="{escape(run_href(run.token))}">{escape(run.run_id)}</a>{note}</td>'
            f"{_nights_cell(ov.coverage.get(run.token))}"
            f'<td class="num count-fail">{counts["fail"]}</td>'
            f'<td class="num count-warn">{counts["warn"]}</td>'
            f'<td class="num count-pass">{counts["pass"]}</td>'
            f'<td><span class="verdict verdict-{escape(run.verdict)}">{escape(run.verdict)}</span></td>'
            f"<td>{_when(run.checked_at)}</td>"
            f"<td>{docs}</td></tr>")
    table = (
        '<table id="runs"><thead><tr><th>Run</th><th>Snapshot nights read</th>'
        '<th class="num" title="checks per topic-partition">failed</th>'
        '<th class="num">warned</th><th class="num">passed</th><th>Verdict</th><th>Checked at</th>'
        '<th>Data Docs</th>'
        f'</tr></thead><tbody>{"".join(rows)}</tbody></table>'
        if runs else '<p id="no-runs" class="muted">No data-quality results in this warehouse yet.</p>')
    unhealthy = [n for n, _ in ov.problem_nights()]
    if unhealthy:
        older = len(unhealthy) - PROBLEM_NIGHTS
        headline = ("Unhealthy nights: " + ", ".join(
            f'<a href="#night-{escape(n)}">{escape(n)}</a> ({escape(ov.night_outcome(n) or "")})'
            for n in unhealthy[:PROBLEM_NIGHTS])
            + (f" and {older} older (in the grid)" if older > 0 else ""))
    elif ov.cells:
        headline = "Every night read so far passed."
    else:
        headline = ""
    unplaced = ""
    if ov.unplaced:
        unplaced = ('<p id="unplaced" class="muted">Not in the grid (no snapshot night known): '
                    + "; ".join(f'<a href="{escape(run_href(r.token))}">{escape(r.run_id)}</a> '
                                f"({escape(_unplaced_reason(r, ov))})" for r in ov.unplaced) + "</p>")
    body = (
        "<h1>Data quality</h1>"
        f'<p class="muted">Warehouse <code>{escape(root)}</code> · {len(runs)} run(s) · '
        '<a href="api/nights">JSON</a> · counts are checks per topic-partition</p>'
        f'<section id="nights"><h2>Nights at a glance</h2>'
        f'<p id="headline">{headline}</p>{night_grid(ov)}{unplaced}{night_problems(ov)}</section>'
        f"<h2>Runs</h2>{table}"
        f'<h2>Per run</h2><section class="charts" id="charts">{charts(runs, ov.coverage)}</section>'
    )
    return _page("Data quality", base, body)


def _raw_details(details) -> str:
    """The row's ``details`` as stored (JSON), only behind a disclosure."""
    if details is None:
        return ""
    text = details if isinstance(details, str) else json.dumps(details, indent=2, sort_keys=True)
    return (f'<details class="raw"><summary>raw details (JSON)</summary>'
            f"<pre>{escape(text)}</pre></details>")


def _more_items(r: data.Result) -> str:
    """Every other stored item of a result, one plain line each (the first is already shown)."""
    problems = data.problem_items(r.details)
    lines = [f'<li class="item item-{escape(str(i.get("status") or "other"))}">'
             f'{escape(data.item_line(r.topic, r.partition, i))}</li>' for i in problems[1:]]
    lines += [f'<li class="item item-pass"><span class="muted">accepted:</span> '
              f'{escape(data.item_line(r.topic, r.partition, i))}</li>'
              for i in data.accepted_items(r.details)]
    shown = len(lines)
    more = data.more_items(r.details)
    if more:
        lines.append(f'<li class="muted">{data.plural(more, "more item")} not stored '
                     "(the audit keeps the first 20 per check and topic-partition)</li>")
    if not lines:
        return ""
    summary = data.plural(shown, "more item") if shown else "more"
    return f'<details class="more-items"><summary>{summary}</summary><ul>{"".join(lines)}</ul></details>'


def _accepted_text(details) -> str:
    acc = data.accepted_classes(details)
    return ", ".join(f"{k}: {data.plural(v['items'], 'item')}" for k, v in acc.items())


def _tp(r: data.Result) -> str:
    return data.topic_partition(r.topic, r.partition) if r.topic is not None else "—"


def _row_attrs(r: data.Result) -> str:
    return (f'id="{escape(data.result_anchor(r.check, r.topic, r.partition))}" '
            f'class="result row-{escape(r.status)}" data-check="{escape(r.check)}" '
            f'data-topic="{escape(r.topic or "")}" '
            f'data-partition="{"" if r.partition is None else r.partition}" '
            f'data-status="{escape(r.status)}"')


def _problem_row(r: data.Result) -> str:
    accepted = _accepted_text(r.details)
    also = f'<div class="muted">also accepted: {escape(accepted)}</div>' if accepted else ""
    items = "—" if r.failed is None else data.plural(r.failed, "item")
    checked = data.checked_text(r.observed, r.details) or "—"
    return (
        f"<tr {_row_attrs(r)}>"
        f'<td><span class="status {_status_class(r.status)}">{escape(r.status)}</span></td>'
        f'<td class="check-name">{escape(r.check)}</td><td class="tp">{escape(_tp(r))}</td>'
        f'<td class="problem"><div class="problem-line">'
        f"{escape(data.first_problem(r.topic, r.partition, r.details, r.failed))}</div>"
        f"{also}{_more_items(r)}{_raw_details(r.details)}</td>"
        f'<td class="num items">{escape(items)}</td>'
        f'<td class="num checked">{escape(checked)}</td></tr>')


def _pass_row(r: data.Result) -> str:
    accepted = _accepted_text(r.details)
    label = data.severity_label(r.severity)
    return (
        f"<tr {_row_attrs(r)}>"
        f'<td class="check-name">{escape(r.check)}</td><td class="tp">{escape(_tp(r))}</td>'
        f'<td class="num checked">{escape(data.checked_text(r.observed, r.details) or "—")}</td>'
        f'<td class="accepted">{escape(accepted) if accepted else "<span class=muted>—</span>"}</td>'
        f'<td class="if-found">{escape(label) if label else "—"}</td>'
        f"<td>{_raw_details(r.details)}</td></tr>")


_GROUP_TITLES = {"fail": "Failed", "warn": "Warned"}
_COUNT_WORDS = data.OUTCOME_WORDS


def _run_nights(cov: data.Coverage | None) -> str:
    """``Snapshot nights read: 2026-11-18..2026-11-20 (3 nights) of orders, payments (4
    topic-partitions)``; a range run's nights per topic-partition where they differ."""
    if cov is None:
        return ""
    if not cov.nights:
        return (f'<p id="nights" class="muted">Snapshot nights read: unknown '
                f'({escape(cov.reason or "no ledger rows")})</p>')
    text = (f"{escape(data.nights_text(cov.nights))} ({data.plural(len(cov.nights), 'night')}) of "
            f"{escape(', '.join(cov.topics))} ({data.plural(len(cov.partitions), 'topic-partition')})")
    differ = len({n for n in cov.partitions.values()}) > 1
    extra = ""
    if differ:
        extra = ('<details class="tp-nights"><summary>nights per topic-partition</summary><ul>'
                 + "".join(f"<li>{escape(data.topic_partition(t, p))}: {escape(data.nights_text(list(n)))}</li>"
                           for (t, p), n in cov.partitions.items()) + "</ul></details>")
    return (f'<p id="nights" data-nights="{escape(" ".join(cov.nights))}">Snapshot nights read: '
            f"{text}</p>{extra}")


def counts_line(run: data.Run) -> str:
    """``Checks per topic-partition: 2 failed · 3 warned · 28 passed`` (the page's one count
    vocabulary: a check on one topic-partition fails, warns or passes; it finds items)."""
    parts = [f'<span class="count-{escape(k)}">{v} {escape(_COUNT_WORDS.get(k, k))}</span>'
             for k, v in run.counts.items()]
    return ('<p id="counts">Checks per topic-partition: ' + " · ".join(parts) + "</p>")


def run_page(run: data.Run, base: str, coverage: data.Coverage | None = None) -> str:
    docs = (f'<a class="docs-link" href="{escape(docs_href(run.token))}">Data Docs of this run</a>'
            if run.has_docs else '<span class="muted">no Data Docs for this run</span>')
    parts = [
        '<nav><a href="./">← all runs</a>'
        f'<a href="api/runs/{escape(quote(run.token))}">JSON</a></nav>',
        f'<h1>Run <span id="run-id">{escape(run.run_id)}</span> '
        f'<span id="verdict" class="verdict verdict-{escape(run.verdict)}">{escape(run.verdict)}</span></h1>',
        f"<p>Checked at {_when(run.checked_at)} · {docs}</p>",
        _run_nights(coverage),
        counts_line(run),
    ]
    if run.error:
        parts.append(f'<p class="error">This run\'s results could not be read: {escape(run.error)}</p>')
    groups = run.by_outcome()
    if run.results and not any(s != "pass" for s, _ in groups):
        parts.append('<p id="no-problems">No check failed or warned.</p>')
    for status, rows in groups:
        n = data.plural(len(rows), "check")
        if status == "pass":
            body = "".join(_pass_row(r) for r in rows)
            parts.append(
                f'<details id="passes" class="outcome" data-status="pass">'
                f'<summary><span class="group-title">Passed: {n}</span> '
                '<span class="muted">(items the policy accepts are listed; '
                "“would fail” is what a check does if it finds something)</span></summary>"
                '<table><thead><tr><th>Check</th><th>Topic-partition</th><th class="num">Checked</th>'
                '<th>Accepted items</th><th>If found</th><th></th></tr></thead>'
                f"<tbody>{body}</tbody></table></details>")
            continue
        title = _GROUP_TITLES.get(status, f"Status {status}")
        body = "".join(_problem_row(r) for r in rows)
        parts.append(
            f'<section id="outcome-{escape(status)}" class="outcome" data-status="{escape(status)}">'
            f'<h2>{escape(title)}: {n}</h2>'
            '<table><thead><tr><th>Outcome</th><th>Check</th><th>Topic-partition</th><th>Problem</th>'
            '<th class="num">Items</th><th class="num">Checked</th></tr></thead>'
            f"<tbody>{body}</tbody></table></section>")
    return _page(f"Data quality · {run.run_id}", base, "".join(parts))


def message_page(title: str, message: str, base: str) -> str:
    return _page(title, base, f'<nav><a href="./">← all runs</a></nav><h1>{escape(title)}</h1>'
                              f'<p class="error" id="message">{escape(message)}</p>')
