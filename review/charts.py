"""Charts as inline SVG, drawn on the server: no JavaScript library, nothing fetched from a CDN.

Each function returns an `<svg>` string with every text escaped, ready to embed in a page.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import Any

PALETTE = ("#2563eb", "#dc2626", "#059669", "#d97706", "#7c3aed", "#0891b2", "#db2777", "#4b5563")
AXIS = "#9ca3af"
GRID = "#e5e7eb"
TEXT = "#374151"


def _text(x: float, y: float, s: str, *, anchor: str = "middle", size: int = 11, fill: str = TEXT) -> str:
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" font-size="{size}" '
        f'fill="{fill}">{escape(s)}</text>'
    )


def _frame(width: int, height: int, label: str, body: list[str]) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="100%" '
        f'role="img" aria-label="{escape(label)}" class="chart">' + "".join(body) + "</svg>"
    )


def bar_chart(
    labels: Sequence[str],
    values: Sequence[float],
    *,
    label: str,
    width: int = 560,
    height: int = 200,
    colors: Sequence[str] | None = None,
) -> str:
    """Vertical bars with their value above; a message instead when there is nothing to draw."""
    if not values or max(values) <= 0:
        return _frame(width, height, label, [_text(width / 2, height / 2, "no data yet", fill=AXIS)])
    left, right, top, bottom = 36, 10, 18, 34
    plot_w, plot_h = width - left - right, height - top - bottom
    peak = max(values)
    slot = plot_w / len(values)
    bar_w = min(56.0, max(2.0, slot * 0.7))  # one day of data should not be one huge slab
    body = [
        f'<line x1="{left}" y1="{top + plot_h}" x2="{width - right}" y2="{top + plot_h}" stroke="{AXIS}"/>'
    ]
    step = max(1, len(labels) // 10)  # thin the axis labels so they never overlap
    for i, (name, value) in enumerate(zip(labels, values, strict=True)):
        h = plot_h * value / peak
        x = left + i * slot + (slot - bar_w) / 2
        color = colors[i % len(colors)] if colors else PALETTE[0]
        body.append(
            f'<rect x="{x:.1f}" y="{top + plot_h - h:.1f}" width="{bar_w:.1f}" height="{h:.1f}" '
            f'fill="{color}" rx="2"><title>{escape(name)}: {value:g}</title></rect>'
        )
        if len(values) <= 16:
            body.append(_text(x + bar_w / 2, top + plot_h - h - 4, f"{value:g}", size=10))
        if i % step == 0:
            body.append(_text(x + bar_w / 2, height - bottom + 14, name, size=10))
    return _frame(width, height, label, body)


def line_chart(
    series: Sequence[dict[str, Any]],
    *,
    label: str,
    y_min: float = -1.0,
    y_max: float = 1.0,
    width: int = 560,
    height: int = 220,
    x_label: str = "",
) -> str:
    """One polyline per series (`{"name", "points": [[x, y], ...]}`), a y grid and a legend."""
    points = [p for s in series for p in s["points"]]
    if not points:
        return _frame(width, height, label, [_text(width / 2, height / 2, "no scored turns yet", fill=AXIS)])
    left, right, top, bottom = 36, 10, 12, 48
    plot_w, plot_h = width - left - right, height - top - bottom
    x_lo = min(p[0] for p in points)
    x_span = max(1.0, max(p[0] for p in points) - x_lo)

    def sx(x: float) -> float:
        return left + plot_w * (x - x_lo) / x_span

    def sy(y: float) -> float:
        return top + plot_h * (y_max - y) / (y_max - y_min)

    body = []
    for tick in (y_min, (y_min + y_max) / 2, y_max):
        body.append(
            f'<line x1="{left}" y1="{sy(tick):.1f}" x2="{width - right}" y2="{sy(tick):.1f}" '
            f'stroke="{GRID}"/>'
        )
        body.append(_text(left - 6, sy(tick) + 4, f"{tick:+g}", anchor="end", size=10))
    for i, s in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        coords = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in s["points"])
        body.append(
            f'<polyline points="{coords}" fill="none" stroke="{color}" stroke-width="2">'
            f"<title>{escape(str(s['name']))}</title></polyline>"
        )
        if len(s["points"]) == 1:  # a lone point has no line: draw a dot
            x, y = s["points"][0]
            body.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{color}"/>')
        lx = left + (i % 5) * 100
        ly = height - 22 + 12 * (i // 5)
        body.append(f'<rect x="{lx}" y="{ly - 8}" width="10" height="10" fill="{color}"/>')
        body.append(_text(lx + 14, ly + 1, str(s["name"]), anchor="start", size=10))
    if x_label:
        body.append(_text(width - right, height - 30, x_label, anchor="end", size=9, fill=AXIS))
    return _frame(width, height, label, body)
