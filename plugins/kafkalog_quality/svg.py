"""Inline SVG charts, drawn on the server (the UI must work without any CDN or script).

One kind of chart serves every view: bars over runs (oldest left), stacked when there is
more than one series. Every bar segment carries ``data-run``, ``data-series`` and
``data-value`` attributes and a ``<title>`` tooltip, so the figures can be read back from the
DOM (and by tests) without parsing geometry.
"""

from __future__ import annotations

import math
from html import escape

#: colours of stacked series, in order (readable on white, distinct for colour-blind readers)
PALETTE = ("#d1495b", "#edae49", "#00798c", "#30638e", "#66a182", "#8d5a97", "#444e86", "#955251")

WIDTH, HEIGHT = 420, 220
LEFT, RIGHT, TOP, BOTTOM = 44, 12, 40, 58


def nice_step(limit: float, ticks: int = 4) -> int:
    """An integer tick step from {1, 2, 5} x 10^k such that ``ticks`` steps cover ``limit``."""
    if limit <= ticks:
        return 1
    raw = limit / ticks
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if m * mag >= raw:
            return int(m * mag)
    return int(10 * mag)  # pragma: no cover - the loop always returns


def bar_chart(chart_id: str, title: str, labels: list[str], series: dict[str, list[int]],
              *, tooltips: list[str] | None = None, colors: dict[str, str] | None = None,
              legend: bool | None = None, width: int = WIDTH, height: int = HEIGHT) -> str:
    """An SVG bar chart: one bar per label, one stacked segment per series (zeros drawn as nothing).

    ``labels`` are short axis labels (e.g. a run's date); ``tooltips`` the long names (run ids).
    The legend is drawn when asked, by default when there is more than one series.
    """
    n = len(labels)
    tooltips = tooltips or labels
    for name, values in series.items():
        if len(values) != n:
            raise ValueError(f"series {name!r} has {len(values)} values for {n} labels")
    colors = dict(colors or {})
    for i, name in enumerate(series):
        colors.setdefault(name, PALETTE[i % len(PALETTE)])
    totals = [sum(values[i] for values in series.values()) for i in range(n)]
    top_value = max(totals, default=0)
    step = nice_step(top_value)
    ymax = max(step * math.ceil(top_value / step), step)

    plot_w, plot_h = width - LEFT - RIGHT, height - TOP - BOTTOM
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" id="{escape(chart_id)}" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{escape(title)}" data-total="{sum(totals)}">',
        f"<title>{escape(title)}</title>",
        f'<text x="{LEFT}" y="18" class="chart-title" font-size="14" font-weight="600">'
        f"{escape(title)}</text>",
    ]
    # grid and y axis
    for k in range(0, ymax // step + 1):
        value = k * step
        y = TOP + plot_h - plot_h * value / ymax
        out.append(f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{y:.1f}" y2="{y:.1f}" '
                   f'stroke="{"#999" if value == 0 else "#e3e3e3"}" stroke-width="1"/>')
        out.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11" '
                   f'fill="#555">{value}</text>')
    if n == 0:
        out.append(f'<text x="{LEFT + plot_w / 2:.1f}" y="{TOP + plot_h / 2:.1f}" '
                   f'text-anchor="middle" font-size="13" fill="#777">no runs yet</text>')
    slot = plot_w / max(n, 1)
    bar_w = max(min(slot * 0.7, 48), 2)
    label_every = max(1, math.ceil(n / 16))  # at most ~16 axis labels
    for i in range(n):
        x = LEFT + slot * i + (slot - bar_w) / 2
        base = TOP + plot_h
        out.append(f'<g class="bar" data-run="{escape(tooltips[i])}" data-total="{totals[i]}">')
        for name, values in series.items():
            v = values[i]
            if v <= 0:
                continue
            h = plot_h * v / ymax
            base -= h
            out.append(
                f'<rect x="{x:.1f}" y="{base:.1f}" width="{bar_w:.1f}" height="{h:.1f}" '
                f'fill="{colors[name]}" data-series="{escape(name)}" data-value="{v}">'
                f"<title>{escape(tooltips[i])}: {escape(name)} {v}</title></rect>")
        out.append("</g>")
        if i % label_every == 0:
            cx = LEFT + slot * i + slot / 2
            ly = TOP + plot_h + 12
            out.append(f'<text x="{cx:.1f}" y="{ly:.1f}" font-size="10" fill="#333" '
                       f'text-anchor="end" transform="rotate(-35 {cx:.1f} {ly:.1f})">'
                       f"{escape(labels[i])}</text>")
    # legend: a row under the title, left to right
    if legend if legend is not None else len(series) > 1:
        lx = LEFT
        for name in series:
            out.append(f'<g class="legend-item" data-series="{escape(name)}">'
                       f'<rect x="{lx:.0f}" y="22" width="9" height="9" fill="{colors[name]}"/>'
                       f'<text x="{lx + 12:.0f}" y="30" font-size="10" fill="#333">'
                       f"{escape(name)}</text></g>")
            lx += 6.2 * len(name) + 22
    out.append("</svg>")
    return "".join(out)


#: fill of each outcome of a grid cell; accepted causes (retention, compaction, ...) neutral,
#: never alarm red; a status outside these is drawn as ``other``; ``nothing_new`` (checks that
#: had nothing to check) and ``no_run`` (a due night without results) light greys with a dark
#: glyph, ``none`` (not read) lighter still
OUTCOME_FILLS = {"fail": "#cf222e", "warn": "#e3a008", "pass": "#2da44e", "accepted": "#8ca3c0",
                 "other": "#6e7781", "nothing_new": "#d0d7de", "no_run": "#e6e9ed",
                 "none": "#f3f4f6"}
#: fills light enough that a cell's glyph is drawn dark on them
LIGHT_FILLS = frozenset({OUTCOME_FILLS["nothing_new"], OUTCOME_FILLS["no_run"], OUTCOME_FILLS["none"]})


def heat_grid(grid_id: str, title: str, columns: list[str], rows: list[str], cells: dict,
              *, column_labels: list[str] | None = None, lanes: list[dict] | None = None,
              legend: list[tuple[str, str]] | None = None, empty_title: str = "no data") -> str:
    """An SVG grid of coloured cells: ``rows`` (labels, top to bottom) x ``columns``.

    ``cells`` maps ``(row index, column index)`` to ``{"fill", "title", "href", "attrs", "mark"}``
    (``href`` optional: the cell is then a link; ``attrs``: extra ``data-*`` attributes;
    ``mark``: a glyph drawn in the cell, so that colour is not the only sign); a cell
    not in it is drawn empty with ``empty_title``. ``lanes`` are bars under the grid, each
    ``{"first", "last" (column indexes), "label", "title", "href", "fill", "attrs"}``, packed
    into as few rows as do not overlap (e.g. the runs and the nights each one read).
    """
    n = len(columns)
    labels = column_labels or columns
    if len(labels) != n:
        raise ValueError(f"{len(labels)} column labels for {n} columns")
    label_w = min(220, 12 + 7 * max((len(r) for r in rows), default=4))
    cell = 40 if n <= 14 else 26 if n <= 40 else max(4, min(26, 1100 // max(n, 1)))
    row_h, head_h, top = 20, 46, 28
    lane_rows: list[list[dict]] = []
    for lane in sorted(lanes or [], key=lambda l: (l["first"], l["last"])):
        for packed in lane_rows:
            if all(lane["first"] > other["last"] or lane["last"] < other["first"] for other in packed):
                packed.append(lane)
                break
        else:
            lane_rows.append([lane])
    grid_top = top + head_h
    lanes_top = grid_top + row_h * len(rows) + (10 if lane_rows else 0)
    legend_top = lanes_top + 16 * len(lane_rows) + 14
    legend_w = sum(6 * len(label) + 28 for label, _ in legend or [])
    width = max(label_w + cell * n + 16, label_w + legend_w, 360)
    height = legend_top + (18 if legend else 0)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="heat-grid" id="{escape(grid_id)}" '
           f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
           f'aria-label="{escape(title)}" data-columns="{n}" data-rows="{len(rows)}">',
           f"<title>{escape(title)}</title>",
           f'<text x="0" y="16" font-size="14" font-weight="600">{escape(title)}</text>']
    every = max(1, math.ceil(n * 14 / max(cell * n, 1)))  # a label per ~14 px at least
    for j, label in enumerate(labels):
        if j % every:
            continue
        cx = label_w + cell * j + cell / 2
        y = grid_top - 6
        out.append(f'<text class="column-label" x="{cx:.1f}" y="{y}" font-size="10" fill="#333" '
                   f'transform="rotate(-45 {cx:.1f} {y})" data-column="{escape(columns[j])}">'
                   f"{escape(label)}</text>")
    for i, row in enumerate(rows):
        y = grid_top + row_h * i
        out.append(f'<text class="row-label" x="{label_w - 8}" y="{y + row_h * 0.7:.1f}" '
                   f'text-anchor="end" font-size="11" fill="#1f2328">{escape(row)}</text>')
        for j, column in enumerate(columns):
            c = cells.get((i, j))
            x = label_w + cell * j
            fill = c["fill"] if c else OUTCOME_FILLS["none"]
            tip = c["title"] if c else empty_title.format(row=row, column=column)
            attrs = "".join(f' {escape(k)}="{escape(str(v))}"' for k, v in (c or {}).get("attrs", {}).items())
            rect = (f'<rect class="cell" x="{x + 1}" y="{y + 1}" width="{max(cell - 2, 2)}" '
                    f'height="{row_h - 2}" rx="2" fill="{fill}" data-row="{escape(row)}" '
                    f'data-column="{escape(column)}"{attrs}><title>{escape(tip)}</title></rect>')
            mark = (c or {}).get("mark")
            if mark and cell >= 16:  # the outcome as a glyph too, not by colour alone
                ink = "#424a53" if fill in LIGHT_FILLS else "#fff"
                rect += (f'<text x="{x + cell / 2:.1f}" y="{y + row_h * 0.72:.1f}" font-size="11" '
                         f'text-anchor="middle" fill="{ink}" pointer-events="none">{escape(mark)}</text>')
            out.append(f'<a href="{escape(c["href"])}">{rect}</a>' if c and c.get("href") else rect)
    for k, packed in enumerate(lane_rows):
        y = lanes_top + 16 * k
        for lane in packed:
            x = label_w + cell * lane["first"] + 1
            w = cell * (lane["last"] - lane["first"] + 1) - 2
            attrs = "".join(f' {escape(a)}="{escape(str(v))}"' for a, v in lane.get("attrs", {}).items())
            bar = (f'<rect class="lane" x="{x}" y="{y}" width="{max(w, 2)}" height="12" rx="6" '
                   f'fill="{lane.get("fill", "#d0d7de")}"{attrs}>'
                   f'<title>{escape(lane.get("title", lane["label"]))}</title></rect>')
            out.append(f'<a href="{escape(lane["href"])}">{bar}</a>' if lane.get("href") else bar)
        if k == 0:
            out.append(f'<text x="{label_w - 8}" y="{y + 10}" text-anchor="end" font-size="11" '
                       f'fill="#656d76">runs</text>')
    if legend:
        x = label_w
        for label, fill in legend:
            out.append(f'<g class="grid-legend-item"><rect x="{x}" y="{legend_top}" width="10" '
                       f'height="10" rx="2" fill="{fill}"/><text x="{x + 14}" y="{legend_top + 9}" '
                       f'font-size="11" fill="#333">{escape(label)}</text></g>')
            x += 6 * len(label) + 28
    out.append("</svg>")
    return "".join(out)
