"""The UI's charts are pure: series in, SVG text out. Each chart is well-formed XML, names its figures for screen
readers, draws no NaN, and escapes every text it was given."""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest

from ingest_core.core.offsets import StartOffset, StartSource, TopicPartition
from ingest_core.core.planner import PlanRequest, plan_run
from ingest_core.provider.plugins.charts import (
    Point,
    Series,
    bar_chart,
    compact,
    count,
    history_charts,
    lag_sparkline,
    line_chart,
    nice_ceiling,
    nice_seconds_ceiling,
    seconds,
    seconds_tick,
    sparkline,
)
from ingest_core.service.run_history import run_points
from ingest_core.core.states import RunStatus
from ingest_core.store.records import RunRecord
from ingest_core.store.records import PublishedFigures

SVG = "{http://www.w3.org/2000/svg}"
T0 = datetime(2026, 11, 25, 8, 0, tzinfo=timezone.utc)
CHARTS = [bar_chart, line_chart, sparkline]


def parse(svg: str) -> ET.Element:
    return ET.fromstring(svg)  # raises on anything not well-formed (an unescaped <, &, quote)


def numbers(svg: str) -> list[float]:
    """Every coordinate and size the chart draws."""
    root = parse(svg)
    out = []
    for el in root.iter():
        for name in ("x", "y", "x1", "x2", "y1", "y2", "width", "height", "cx", "cy", "r"):
            if name in el.attrib:
                out.append(float(el.attrib[name]))
        for pair in el.attrib.get("points", "").split():
            out += [float(v) for v in pair.split(",")]
    return out


def texts(svg: str) -> list[str]:
    return [el.text for el in parse(svg).iter(f"{SVG}text")]


def series(values, **kw) -> Series:
    return Series("Records per run", tuple(Point(f"run{i}", v) for i, v in enumerate(values)), **kw)


@pytest.mark.parametrize("chart", CHARTS)
def test_an_empty_history_says_so(chart):
    svg = chart(series([]))
    root = parse(svg)
    assert root.attrib["role"] == "img"
    assert root.attrib["aria-label"] == "Records per run: no runs yet" == root.find(f"{SVG}title").text
    if chart is not sparkline:
        assert "no runs yet" in texts(svg)
    assert all(math.isfinite(v) for v in numbers(svg))


def test_axes_have_ticks_from_zero_to_a_round_top_and_the_time_span():
    svg = bar_chart(series([120, 0, 37], start="11-25 08:00", end="11-25 08:20"))
    labels = texts(svg)
    assert labels[0] == "Records per run"
    assert {"0", "100", "200", "11-25 08:00", "11-25 08:20"} <= set(labels)  # 120 rounds up to 200
    bars = parse(svg).findall(f"{SVG}rect")
    assert [b.find(f"{SVG}title").text for b in bars] == ["run0: 120", "run1: 0", "run2: 37"]
    heights = [float(b.attrib["height"]) for b in bars]
    assert heights[0] > heights[2] > heights[1] == 0
    assert heights[0] / heights[2] == pytest.approx(120 / 37, rel=0.02)


@pytest.mark.parametrize("chart", CHARTS)
def test_the_label_lists_every_figure_oldest_first(chart):
    root = parse(chart(series([1234, None, 5])))
    assert root.attrib["aria-label"] == ("Records per run, 3 runs, oldest first: 1,234, none, 5; latest 5, "
                                         "highest 1,234")


@pytest.mark.parametrize("chart", CHARTS)
def test_one_run(chart):
    svg = chart(series([42], start="11-25 08:00", end="11-25 08:00"))
    root = parse(svg)
    assert root.attrib["aria-label"] == "Records per run, 1 run, oldest first: 42; latest 42, highest 42"
    assert all(math.isfinite(v) for v in numbers(svg))
    if chart is bar_chart:
        assert len(root.findall(f"{SVG}rect")) == 1
    else:  # a single marker, no line through one point
        assert len(root.findall(f"{SVG}circle")) == 1 and not root.findall(f"{SVG}polyline")


@pytest.mark.parametrize("chart", CHARTS)
def test_many_runs_stay_inside_the_chart(chart):
    values = [(i * 7919) % 1000 for i in range(500)]
    svg = chart(series(values))
    root = parse(svg)
    width, height = float(root.attrib["width"]), float(root.attrib["height"])
    if chart is bar_chart:
        rects = root.findall(f"{SVG}rect")
        assert len(rects) == 500
        assert all(0 <= float(r.attrib["x"]) and float(r.attrib["x"]) + float(r.attrib["width"]) <= width + 1
                   for r in rects)
    assert all(-1 <= v <= max(width, height) + 1 for v in numbers(svg))


@pytest.mark.parametrize("chart", CHARTS)
def test_huge_numbers_and_non_finite_values_draw_no_nan(chart):
    values = [2 ** 63 - 1, 10 ** 400, float("nan"), float("inf"), -5, 0, 10 ** 18]
    svg = chart(series(values))
    assert not re.search(r"nan|inf", svg, re.IGNORECASE)
    assert all(math.isfinite(v) for v in numbers(svg))
    label = parse(svg).attrib["aria-label"]
    assert "9,223,372,036,854,775,807" in label  # the largest Kafka offset, exactly
    assert label.count("none") == 3  # 10**400 (beyond a float), NaN, infinity: no figure
    if chart is not sparkline:
        assert "10E" in texts(svg)  # the axis: 9.2E rounds up to 10E (exa)


def test_a_count_axis_has_no_fractional_tick():
    assert {"0", "5"} <= set(texts(bar_chart(series([3, 1])))) and "2.5" not in texts(bar_chart(series([3, 1])))
    assert "2.5" in texts(bar_chart(series([3, 1], integers=False)))


def test_all_values_none_or_zero_still_draw_an_axis():
    for values in ([None, None], [0, 0, 0]):
        svg = bar_chart(series(values))
        assert all(math.isfinite(v) for v in numbers(svg))
        assert {"0", "1"} <= set(texts(svg))


@pytest.mark.parametrize("chart", CHARTS)
def test_every_text_is_escaped(chart):
    hostile = '</svg><script>alert("x")</script> & \'quote\''
    s = Series(hostile, (Point(hostile, 1, note=hostile), Point("b", 2)), start=hostile, end=hostile)
    svg = chart(s)
    root = parse(svg)  # well-formed: nothing closed the svg early
    assert "<script>" not in svg
    assert root.attrib["aria-label"].startswith(hostile)
    assert root.find(f"{SVG}title").text.startswith(hostile)
    if chart is not sparkline:
        assert hostile in texts(svg)


def test_a_lower_bound_is_shown_as_such():
    s = Series("Lag at planning", (Point("r1", 100, at_least=True), Point("r2", 40)))
    svg = line_chart(s)
    circles = parse(svg).findall(f"{SVG}circle")
    assert [c.attrib["fill"] == "#fff" for c in circles] == [True, False]  # hollow: the lag was larger
    assert "oldest first: ≥100, 40" in parse(svg).attrib["aria-label"]


def test_number_formats():
    assert [count(v) for v in (0, 1234567, 2.5, 2 ** 63 - 1)] == ["0", "1,234,567", "2.50", "9,223,372,036,854,775,807"]
    assert [compact(v) for v in (0, 950, 1200, 2.5e6, 1e9, 9.2e18, 1e24)] == [
        "0", "950", "1.2k", "2.5M", "1G", "9.2E", "1.0e+24"]
    assert [seconds(v) for v in (0.85, 12.34, 245, 7380)] == ["850 ms", "12.3 s", "4 min 05 s", "2 h 03 min"]
    assert [seconds_tick(v) for v in (0, 50, 100, 9000)] == ["0 s", "50 s", "1.7 min", "2.5 h"]
    assert [nice_seconds_ceiling(v) for v in (0, 0.3, 7, 45, 61, 200, 3599, 5000)] == [
        1, 0.5, 10, 60, 120, 300, 3600, 7200]
    assert [nice_ceiling(v) for v in (0, 1, 3, 120, 250, 251, 9.2e18)] == [1, 1, 5, 200, 250, 500, 1e19]


# ---------------------------------------------------------------------------------------------- run history


def run(seq: int, records: int, status: RunStatus = RunStatus.PUBLISHED, *, source=StartSource.COMMITTED,
        max_records: int | None = None, took_s: float = 30.0) -> RunRecord:
    tp = TopicPartition("t", 0)
    at = T0 + timedelta(minutes=10 * seq)
    plan = plan_run(PlanRequest(datasource="ds", run_id=f"run{seq}", created_at=at,
                                starts={tp: StartOffset(1000, source, None, 1000)}, latest={tp: 1000 + records},
                                task_count=1, max_records_per_run=max_records))
    return RunRecord("ds", f"run{seq}", seq, status, plan, at,
                     at + timedelta(seconds=took_s) if status is RunStatus.PUBLISHED else None, None, None)


def published(record: RunRecord, segments: int, rows: int) -> RunRecord:
    """`record` with the figures its publish recorded."""
    return replace(record, published=PublishedFigures(record.plan.records, rows, segments, 1000 * segments))


def test_run_points_oldest_first_with_what_each_run_published():
    runs = [run(3, 0), published(run(1, 120, took_s=42.5), 2, 118), published(run(2, 500, max_records=200), 1, 200),
            run(4, 80, RunStatus.FAILED), run(5, 60, source=StartSource.BACKFILL)]
    points = run_points(runs)
    assert [p.run_id for p in points] == ["run1", "run2", "run3", "run4", "run5"]
    assert [(p.lag, p.lag_capped) for p in points] == [(120, False), (200, True), (0, False), (80, False),
                                                        (None, False)]  # a backfill's range is not lag
    assert [(p.records, p.rows, p.segments) for p in points] == [(120, 118, 2), (200, 200, 1), (0, 0, 0),
                                                                 (80, 0, 0), (60, 0, 0)]
    assert [p.duration_s for p in points] == [42.5, 30.0, 30.0, None, 30.0]
    assert [p.bytes for p in points] == [2000, 1000, 0, 0, 0]


def test_the_datasource_page_charts_name_the_runs_figures():
    points = run_points([published(run(1, 120), 2, 118), run(2, 500, max_records=200), run(3, 80, RunStatus.FAILED)])
    page = history_charts(points)
    labels = re.findall(r'aria-label="([^"]*)"', page)
    assert labels == [
        "Lag at planning, 3 runs, oldest first: 120, ≥200, 80; latest 80, highest ≥200",
        "Records per run, 3 runs, oldest first: 120, 200, 80; latest 80, highest 200",
        "Rows published per run, 3 runs, oldest first: 118, 0, 0; latest 0, highest 118",
        "Segments per run, 3 runs, oldest first: 2, 0, 0; latest 0, highest 2",
        "Duration per run, 3 runs, oldest first: 30.0 s, 30.0 s, none; latest none, highest 30.0 s"]
    assert "Lag at planning: records from each run" in page  # what the lag means, under the charts
    assert "#dc2626" in page  # the failed run's bar is red
    assert 'aria-label="Lag at planning, 3 runs' in lag_sparkline(points)
    parse(f"<div>{page}</div>".replace("<figure style='margin:0'>", "<figure>"))
