"""Druid's ingestion metrics of a datasource, taken from its status report (`service.status`), so each value is
what `ingest status` says at the same moment. `druid_metrics` is pure: a `StatusReport`, the run that just ended and
the time, in; `Metric`s out. The Airflow listener (`provider.plugins.metrics_listener`) sends them through Airflow's
own metrics (StatsD or OpenTelemetry, `[metrics]`); docs/metrics.md says what a StatsD user sees.

Druid's names and kinds (its statsd-emitter's): the lags are gauges, the events, rows and segments of one run are
counts (a StatsD counter: Prometheus' rate() over them works across runs), a run's time is a timer in milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Literal

from ingest_core.service.status import RunSummary, StatusReport

Kind = Literal["gauge", "count", "timing"]

# Druid's event counters, by the key `ingest status` gives them in a run's rowStats
EVENT_METRICS = {"processed": "ingest/events/processed", "processedBytes": "ingest/events/processedBytes",
                 "processedWithError": "ingest/events/processedWithError",
                 "unparseable": "ingest/events/unparseable", "thrownAway": "ingest/events/thrownAway"}
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
PUBLISH_AGE = "ingest/publish/age"  # no Druid name: milliseconds since the datasource's last publish


@dataclass(frozen=True)
class Metric:
    """One value to emit: Druid's name, its kind, and its dimensions (always `dataSource`)."""

    name: str
    value: float
    kind: Kind
    tags: tuple[tuple[str, str], ...]

    @property
    def tag_dict(self) -> dict[str, str]:
        return dict(self.tags)


def _millis(when: datetime) -> int:
    """Milliseconds since the epoch, cut as `ingest status` prints a time (`format_datetime`): a duration between
    two printed times is then exactly the one sent."""
    return (when - EPOCH) // timedelta(milliseconds=1)


def _ms_between(start: datetime, end: datetime) -> float:
    return float(_millis(end) - _millis(start))


def lag_metrics(report: StatusReport) -> list[Metric]:
    """Druid's Kafka lag: per partition, total, highest and mean; nothing when the broker did not answer (an
    unknown lag is no 0)."""
    lag = report.lag
    if lag is None:
        return []
    base = (("dataSource", report.datasource), ("stream", report.stream))
    out = [Metric("ingest/kafka/partitionLag", float(v), "gauge",
                  (("dataSource", report.datasource), ("stream", tp.topic), ("partition", str(tp.partition))))
           for tp, v in sorted(lag.items())]
    total = sum(lag.values())
    out.append(Metric("ingest/kafka/lag", float(total), "gauge", base))
    if lag:
        out.append(Metric("ingest/kafka/maxLag", float(max(lag.values())), "gauge", base))
        out.append(Metric("ingest/kafka/avgLag", total / len(lag), "gauge", base))
    return out


def run_metrics(report: StatusReport, run: RunSummary) -> list[Metric]:
    """One run's figures as `ingest status` lists them in recentRuns: its row stats (0 for a run that read
    nothing), what it published, and its time from its plan to its publish or its end (task/run/time). Druid's
    `taskId` dimension is left out: a run id is a new series per run in Prometheus, and Airflow's StatsD refuses its
    `:` and `+`."""
    tags = (("dataSource", report.datasource), ("taskStatus", run.status))
    out = [Metric(name, float(run.row_stats.get(key, 0)), "count", tags) for key, name in EVENT_METRICS.items()]
    if run.published is not None:
        out.append(Metric("ingest/rows/output", float(run.published.rows), "count", tags))
        out.append(Metric("ingest/segments/count", float(run.published.segments), "count", tags))
    ended = run.published_at or run.expired_at
    if ended is not None:
        out.append(Metric("task/run/time", _ms_between(run.created_at, ended), "timing", tags))
    return out


def last_published(report: StatusReport) -> datetime | None:
    """When the datasource last published, among the runs its status lists."""
    return max((r.published_at for r in report.recent_runs if r.published_at is not None), default=None)


def druid_metrics(report: StatusReport, run_id: str | None, now: datetime) -> list[Metric]:
    """What to emit after run `run_id` ended: the lag, that run's figures (when the status lists it), and the
    age of the last publish at `now`."""
    out = lag_metrics(report)
    run = next((r for r in report.recent_runs if r.run_id == run_id), None)
    if run is not None:
        out += run_metrics(report, run)
    published = last_published(report)
    if published is not None:
        out.append(Metric(PUBLISH_AGE, max(0.0, _ms_between(published, now)), "gauge",
                          (("dataSource", report.datasource),)))
    return out


def untagged_name(metric: Metric) -> str:
    """The name for a StatsD without tags (Airflow's plain StatsD): the dimensions that tell series apart folded
    into it, as Druid's statsd-emitter does (`ingest/kafka/lag.wikipedia`, `ingest/kafka/partitionLag.wikipedia.3`).
    Airflow allows letters, digits and `_.-/` in a name: other characters become `_`."""
    tags = metric.tag_dict
    parts = [metric.name, tags["dataSource"]] + ([tags["partition"]] if "partition" in tags else [])
    return ".".join(_safe(p) for p in parts)


def statsd_tags(metric: Metric) -> dict[str, str]:
    """The dimensions as StatsD tags: Airflow refuses a whole InfluxDB-tagged name with a character beyond `_.-/`
    (a datasource name may have any): those become `_`."""
    return {k: _safe(v, keep=".") for k, v in metric.tags}


def _safe(text: str, keep: str = "") -> str:
    return "".join(c if c.isascii() and (c.isalnum() or c in "_-/" + keep) else "_" for c in text)
