"""Charts drawn on the server as SVG text: no JavaScript, no dependency, nothing fetched when a page loads.

The drawing is pure: a `Series` (typed points) in, SVG markup out. Every chart names its figures for screen
readers (`role="img"`, `aria-label` and `<title>`: the values, oldest first), each bar or point has its own
tooltip, and every text is escaped. Values that are not finite numbers (NaN, infinities, beyond a float) are
no figure: a gap, never a NaN coordinate. Bars and axes start at 0; a negative value is drawn as 0 (its tooltip
says what it is). The bottom half of the module turns a datasource's run history into the UI's charts.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from ingest_core.service.run_history import RunPoint
from ingest_core.store.records import RunStatus

Tone = Literal["ok", "bad", "muted"]
_FILL = {"ok": "#2563eb", "bad": "#dc2626", "muted": "#9ca3af"}
_LINE = "#d97706"
_GRID, _AXIS, _TEXT = "#e5e7eb", "#6b7280", "#374151"


def count(value: float) -> str:
    """A figure in full: 1,234,567 (a fraction keeps 2 decimals)."""
    if isinstance(value, int) or float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.2f}"


def compact(value: float) -> str:
    """An axis tick: 950, 1.2k, 3.4M, ... 9.2E (exa); scientific beyond."""
    v = float(value)
    for scale, suffix in ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= scale:
            return f"{v:.1e}" if abs(v) >= 1e21 else f"{v / scale:.3g}{suffix}"
    return f"{v:.3g}"


def seconds(value: float) -> str:
    """A duration: 850 ms, 12.3 s, 4 min 05 s, 2 h 03 min."""
    s = float(value)
    if s < 1:
        return f"{s * 1000:.0f} ms"
    if s < 60:
        return f"{s:.1f} s"
    if s < 3600:
        return f"{int(s // 60)} min {int(s % 60):02d} s"
    return f"{int(s // 3600):,} h {int(s % 3600 // 60):02d} min"


def seconds_tick(value: float) -> str:
    """A duration on an axis, short: 0 s, 50 s, 1.7 min, 2.5 h."""
    s = float(value)
    if s < 60:
        return f"{s:.3g} s"
    if s < 3600:
        return f"{s / 60:.2g} min"
    return f"{s / 3600:.3g} h"


def nice_ceiling(value: float) -> float:
    """The axis's top: the smallest 1, 2, 2.5 or 5 times a power of ten at or above `value` (1 for nothing)."""
    if not value > 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if value <= step * power * (1 + 1e-12):
            return step * power
    return 10 * power


_SECONDS_STEPS = (1, 2, 5, 10, 20, 30, 60, 120, 180, 300, 600, 1200, 1800, 3600)


def nice_seconds_ceiling(value: float) -> float:
    """A duration axis's top: a round number of seconds, minutes (up to an hour) or hours."""
    if value > 3600:
        return 3600 * nice_ceiling(value / 3600)
    return float(next((s for s in _SECONDS_STEPS if value <= s), 3600)) if value >= 1 else nice_ceiling(value)


@dataclass(frozen=True)
class Point:
    label: str              # what the point is (a run id): its tooltip starts with it
    value: float | None     # None (or not finite): no figure, drawn as a gap
    note: str = ""          # the tooltip's end (a run's status)
    tone: Tone = "ok"
    at_least: bool = False  # a lower bound: shown as "≥", a hollow marker


@dataclass(frozen=True)
class Series:
    title: str
    points: tuple[Point, ...]  # oldest first
    exact: Callable[[float], str] = count  # a value in full (labels, tooltips)
    tick: Callable[[float], str] = compact  # an axis tick
    start: str = ""  # the x axis's ends (when the first and last points were)
    end: str = ""
    integers: bool = True  # counts: no tick between two whole numbers (2.5 segments)
    ceiling: Callable[[float], float] = nice_ceiling  # the y axis's top, from the highest value


def _finite(value: float | None) -> float | None:
    if value is None:
        return None
    try:
        v = float(value)
    except (OverflowError, TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _figure(series: Series, p: Point) -> str:
    if _finite(p.value) is None:
        return "none"
    return ("≥" if p.at_least else "") + series.exact(p.value)


def describe(series: Series) -> str:
    """The chart in words (its aria-label and title): every figure, oldest first."""
    if not series.points:
        return f"{series.title}: no runs yet"
    n = len(series.points)
    text = f"{series.title}, {n} run{'s' if n != 1 else ''}, oldest first: " + ", ".join(
        _figure(series, p) for p in series.points)
    known = [p for p in series.points if _finite(p.value) is not None]
    if known:
        top = max(known, key=lambda p: float(p.value))
        text += f"; latest {_figure(series, series.points[-1])}, highest {_figure(series, top)}"
    return text


def _esc(text: str) -> str:
    return html.escape(text, quote=True)


def _n(x: float) -> str:
    return f"{x:.1f}"


def _svg(series: Series, width: int, height: int, body: str, cls: str) -> str:
    label = _esc(describe(series))
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="{cls}" role="img" aria-label="{label}" '
            f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
            f'font-family="system-ui,sans-serif"><title>{label}</title>{body}</svg>')


@dataclass(frozen=True)
class _Frame:
    """The plot area of a chart with axes, and its y scale."""

    left: float
    right: float
    top: float
    bottom: float
    ymax: float
    slots: int

    def x(self, i: int) -> float:  # the centre of point i's slot
        return self.left + (i + 0.5) * (self.right - self.left) / self.slots

    def y(self, v: float) -> float:
        return self.bottom - (self.bottom - self.top) * min(max(v, 0.0), self.ymax) / self.ymax

    @property
    def slot(self) -> float:
        return (self.right - self.left) / self.slots


def _axes(series: Series, width: int, height: int) -> tuple[_Frame | None, str]:
    """The title, the y axis's grid and ticks, the x axis's ends; no frame when there is nothing to draw."""
    out = [f'<text x="4" y="14" font-size="12" font-weight="600" fill="{_TEXT}">{_esc(series.title)}</text>']
    if not series.points:
        out.append(f'<text x="{width / 2:.1f}" y="{height / 2 + 8:.1f}" font-size="12" text-anchor="middle" '
                   f'fill="{_AXIS}">no runs yet</text>')
        return None, "".join(out)
    values = [v for p in series.points if (v := _finite(p.value)) is not None]
    frame = _Frame(52.0, width - 8.0, 24.0, height - 20.0, series.ceiling(max(values, default=0.0)),
                   len(series.points))
    for fraction in (0.0, 0.5, 1.0):
        tick = frame.ymax * fraction
        if series.integers and not tick.is_integer():
            continue
        y = _n(frame.y(tick))
        out.append(f'<line x1="{_n(frame.left)}" x2="{_n(frame.right)}" y1="{y}" y2="{y}" '
                   f'stroke="{_AXIS if fraction == 0 else _GRID}" stroke-width="1"/>'
                   f'<text x="{_n(frame.left - 4)}" y="{y}" dy="3" font-size="10" text-anchor="end" '
                   f'fill="{_AXIS}">{_esc(series.tick(tick))}</text>')
    base = _n(height - 6.0)
    if series.start:
        out.append(f'<text x="{_n(frame.left)}" y="{base}" font-size="10" fill="{_AXIS}">{_esc(series.start)}</text>')
    if series.end and len(series.points) > 1:
        out.append(f'<text x="{_n(frame.right)}" y="{base}" font-size="10" text-anchor="end" '
                   f'fill="{_AXIS}">{_esc(series.end)}</text>')
    if not values:
        out.append(f'<text x="{_n((frame.left + frame.right) / 2)}" y="{_n((frame.top + frame.bottom) / 2)}" '
                   f'font-size="12" text-anchor="middle" fill="{_AXIS}">no figures</text>')
    return frame, "".join(out)


def _tooltip(series: Series, p: Point) -> str:
    return f"<title>{_esc(p.label)}: {_esc(_figure(series, p))}{_esc(' ' + p.note if p.note else '')}</title>"


def bar_chart(series: Series, *, width: int = 320, height: int = 160) -> str:
    """One bar per point, on a y axis from 0."""
    frame, body = _axes(series, width, height)
    bars = []
    if frame is not None:
        bar = max(1.0, frame.slot * 0.7)
        for i, p in enumerate(series.points):
            v = _finite(p.value)
            if v is None:
                continue
            top = frame.y(v)
            if v > 0:  # a small figure still shows
                top = min(top, frame.bottom - 1)
            bars.append(f'<rect x="{_n(frame.x(i) - bar / 2)}" y="{_n(top)}" width="{_n(bar)}" '
                        f'height="{_n(frame.bottom - top)}" fill="{_FILL[p.tone]}">{_tooltip(series, p)}</rect>')
    return _svg(series, width, height, body + "".join(bars), "chart")


def _runs_of_figures(series: Series) -> list[list[int]]:
    """The indexes of consecutive points with a figure: a line is broken where one has none."""
    runs: list[list[int]] = [[]]
    for i, p in enumerate(series.points):
        if _finite(p.value) is None:
            runs.append([])
        else:
            runs[-1].append(i)
    return [r for r in runs if r]


def line_chart(series: Series, *, width: int = 320, height: int = 160) -> str:
    """A line through the points (a marker each; hollow for a lower bound), on a y axis from 0."""
    frame, body = _axes(series, width, height)
    parts = []
    if frame is not None:
        for stretch in _runs_of_figures(series):
            if len(stretch) > 1:
                xy = " ".join(f"{_n(frame.x(i))},{_n(frame.y(float(series.points[i].value)))}" for i in stretch)
                parts.append(f'<polyline points="{xy}" fill="none" stroke="{_LINE}" stroke-width="2"/>')
        for i, p in enumerate(series.points):
            v = _finite(p.value)
            if v is None:
                continue
            colour = _LINE if p.tone == "ok" else _FILL[p.tone]
            parts.append(f'<circle cx="{_n(frame.x(i))}" cy="{_n(frame.y(v))}" r="3" stroke="{colour}" '
                         f'stroke-width="1.5" fill="{"#fff" if p.at_least else colour}">{_tooltip(series, p)}</circle>')
    return _svg(series, width, height, body + "".join(parts), "chart")


def sparkline(series: Series, *, width: int = 120, height: int = 24) -> str:
    """A small line without axes (for a table cell), its latest point marked; scaled from 0 to the highest."""
    if not series.points:
        body = f'<line x1="0" x2="{width}" y1="{height - 1}" y2="{height - 1}" stroke="{_GRID}"/>'
        return _svg(series, width, height, body, "sparkline")
    values = [v for p in series.points if (v := _finite(p.value)) is not None]
    frame = _Frame(3.0, width - 3.0, 3.0, height - 3.0, max(max(values, default=0.0), 0.0) or 1.0, len(series.points))
    parts = [f'<line x1="0" x2="{width}" y1="{_n(frame.bottom)}" y2="{_n(frame.bottom)}" stroke="{_GRID}"/>']
    for stretch in _runs_of_figures(series):
        if len(stretch) > 1:
            xy = " ".join(f"{_n(frame.x(i))},{_n(frame.y(float(series.points[i].value)))}" for i in stretch)
            parts.append(f'<polyline points="{xy}" fill="none" stroke="{_LINE}" stroke-width="1.5"/>')
    last = len(series.points) - 1
    if (v := _finite(series.points[last].value)) is not None:
        parts.append(f'<circle cx="{_n(frame.x(last))}" cy="{_n(frame.y(v))}" r="2.5" fill="{_LINE}"/>')
    return _svg(series, width, height, "".join(parts), "sparkline")


# ---------------------------------------------------------------------------------------------- run history

LAG_CAPTION = ("Lag at planning: records from each run's start offsets to the ends it planned, which were the "
               "latest offsets then unless endTime or maxRecordsPerRun capped the run (hollow, ≥: the lag was "
               "larger). Backfills have none.")
RUNS_CAPTION = ("Per run, oldest first: Kafka offsets planned; rows and segments it published (rows after "
                "rollup); time from planning to publish. Red: failed; grey: superseded or in flight. Exact "
                "figures in Recent runs below.")


def _when(at: datetime) -> str:
    return at.strftime("%m-%d %H:%M")


def _tone(status: RunStatus) -> Tone:
    return {RunStatus.PUBLISHED: "ok", RunStatus.FAILED: "bad", RunStatus.EXPIRED: "bad"}.get(status, "muted")


def _series(title: str, history: Sequence[RunPoint], value: Callable[[RunPoint], float | None], *,
            duration: bool = False, lag: bool = False) -> Series:
    points = tuple(Point(r.run_id, value(r), r.status.value.lower(), _tone(r.status), lag and r.lag_capped)
                   for r in history)
    start, end = (_when(history[0].planned_at), _when(history[-1].planned_at) + " UTC") if history else ("", "")
    if duration:
        return Series(title, points, seconds, seconds_tick, start, end, integers=False,
                      ceiling=nice_seconds_ceiling)
    return Series(title, points, count, compact, start, end)


def lag_series(history: Sequence[RunPoint]) -> Series:
    return _series("Lag at planning", history, lambda r: r.lag, lag=True)


def lag_sparkline(history: Sequence[RunPoint]) -> str:
    return sparkline(lag_series(history))


def history_charts(history: Sequence[RunPoint]) -> str:
    """The datasource page's charts (HTML): lag over the recent runs, then records, rows, segments and duration
    per run, with what they mean under them."""
    charts = [line_chart(lag_series(history)),
              bar_chart(_series("Records per run", history, lambda r: r.records)),
              bar_chart(_series("Rows published per run", history, lambda r: r.rows)),
              bar_chart(_series("Segments per run", history, lambda r: r.segments)),
              bar_chart(_series("Duration per run", history, lambda r: r.duration_s, duration=True))]
    figures = "".join(f"<figure style='margin:0'>{c}</figure>" for c in charts)
    return (f"<div class='charts' style='display:flex;flex-wrap:wrap;gap:8px 16px'>{figures}</div>"
            f"<p style='font-size:12px;color:#6b7280;max-width:980px'>{_esc(LAG_CAPTION)} {_esc(RUNS_CAPTION)}</p>")
