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
