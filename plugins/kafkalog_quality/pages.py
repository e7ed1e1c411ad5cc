"""HTML pages of the Data quality view: plain server-rendered HTML, no script, no CDN.

Every page carries ``<base href>`` = the app's mount point, so links are relative to it and
work behind a path prefix, directly or inside Airflow's embedded-view iframe.
"""

from __future__ import annotations

import datetime as dt
import json
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


def charts(runs: list[data.Run]) -> str:
    """The three charts over runs, as inline SVG."""
    s = data.series(runs)
    ordered = list(reversed(runs))
    labels = [_short_when(r.checked_at, r.token) for r in ordered]
    names = [r.run_id for r in ordered]
    return "".join([
        svg.bar_chart("chart-crc", "CRC failures per run", labels,
                      {"crc failures": s["crc_failures"]}, tooltips=names,
                      colors={"crc failures": "#d1495b"}),
        svg.bar_chart("chart-gaps", "Offset gaps by cause", labels, s["gaps_by_cause"],
                      tooltips=names, legend=True),
        svg.bar_chart("chart-timestamps", "Timestamp regressions per run", labels,
                      s["timestamp_regressions"], tooltips=names, legend=True,
                      colors={"log_append_time": "#30638e", "create_time": "#66a182"}),
    ])


def index_page(runs: list[data.Run], base: str, root: str) -> str:
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
            f"<td>{_when(run.checked_at)}</td>"
            f'<td class="num count-fail">{counts["fail"]}</td>'
            f'<td class="num count-warn">{counts["warn"]}</td>'
            f'<td class="num count-pass">{counts["pass"]}</td>'
            f'<td><span class="verdict verdict-{escape(run.verdict)}">{escape(run.verdict)}</span></td>'
            f"<td>{docs}</td></tr>")
    table = (
        '<table id="runs"><thead><tr><th>Run</th><th>Checked at</th>'
        '<th class="num" title="checks per topic-partition">failed</th>'
        '<th class="num">warned</th><th class="num">passed</th><th>Verdict</th><th>Data Docs</th>'
        f'</tr></thead><tbody>{"".join(rows)}</tbody></table>'
        if runs else '<p id="no-runs" class="muted">No data-quality results in this warehouse yet.</p>')
    body = (
        "<h1>Data quality</h1>"
        f'<p class="muted">Warehouse <code>{escape(root)}</code> · {len(runs)} run(s) · '
        '<a href="api/runs">JSON</a></p>'
        f'<section class="charts" id="charts">{charts(runs)}</section>'
        f"<h2>Runs</h2>{table}"
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
    return (f'class="result row-{escape(r.status)}" data-check="{escape(r.check)}" '
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


def counts_line(run: data.Run) -> str:
    """``Checks per topic-partition: 2 failed · 3 warned · 28 passed`` (the page's one count
    vocabulary: a check on one topic-partition fails, warns or passes; it finds items)."""
    parts = [f'<span class="count-{escape(k)}">{v} {escape(_COUNT_WORDS.get(k, k))}</span>'
             for k, v in run.counts.items()]
    return ('<p id="counts">Checks per topic-partition: ' + " · ".join(parts) + "</p>")


def run_page(run: data.Run, base: str) -> str:
    docs = (f'<a class="docs-link" href="{escape(docs_href(run.token))}">Data Docs of this run</a>'
            if run.has_docs else '<span class="muted">no Data Docs for this run</span>')
    parts = [
        '<nav><a href="./">← all runs</a>'
        f'<a href="api/runs/{escape(quote(run.token))}">JSON</a></nav>',
        f'<h1>Run <span id="run-id">{escape(run.run_id)}</span> '
        f'<span id="verdict" class="verdict verdict-{escape(run.verdict)}">{escape(run.verdict)}</span></h1>',
        f"<p>Checked at {_when(run.checked_at)} · {docs}</p>",
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
