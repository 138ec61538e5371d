"""Druid's ingestion metrics of one run, read (`service.status.collect_status`, as `ingest status` reads them) and
sent through Airflow's Stats by the backend `[metrics]` picked; `metrics_listener` calls it after a run's report
task. Loads the status report's reading (the store, Kafka's clients, deep storage): only when metrics are sent."""

from __future__ import annotations

from airflow.sdk.configuration import conf
from airflow.sdk.observability import stats

from ingest_core.service.metrics import Metric, druid_metrics, statsd_tags, untagged_name
from ingest_core.service.status import collect_status
from ingest_core.store.schema import utcnow
from ingest_core.supervisor.planning import spec_for
from ingest_core.supervisor.run import open_store

KAFKA_TIMEOUT_S = 10.0  # each call to the broker for the latest offsets


def backend() -> str:
    """The backend Airflow picked, in its own order (`stats_utils.get_stats_factory`): "dogstatsd", "statsd" (with
    InfluxDB-style tags: "statsd-tagged"; Airflow's plain StatsD drops tags) or "otel" (tags are attributes)."""
    if conf.getboolean("metrics", "statsd_datadog_enabled", fallback=False):
        return "dogstatsd"
    if conf.getboolean("metrics", "statsd_on", fallback=False):
        return "statsd-tagged" if conf.getboolean("metrics", "statsd_influxdb_enabled", fallback=False) else "statsd"
    return "otel"


def emit(metrics: list[Metric], kind_of_backend: str) -> None:
    """Each metric through Airflow's Stats, by its kind; without tags, with its dimensions in its name."""
    for m in metrics:
        if kind_of_backend == "statsd":
            name, tags = untagged_name(m), None
        else:
            name, tags = m.name, (m.tag_dict if kind_of_backend == "otel" else statsd_tags(m))
        if m.kind == "count":
            stats.incr(name, count=int(m.value), tags=tags)
        elif m.kind == "timing":
            stats.timing(name, m.value, tags=tags)
        else:
            stats.gauge(name, m.value, tags=tags)


def emit_for_run(datasource: str, run_id: str) -> int:
    """Read the datasource's status and send its metrics after run `run_id`; how many were sent."""
    store = open_store()
    if store.datasources.get(datasource) is None:
        return 0
    report = collect_status(store, datasource, spec_for(store, datasource, {}), kafka_timeout_s=KAFKA_TIMEOUT_S)
    metrics = druid_metrics(report, run_id, utcnow())
    emit(metrics, backend())
    return len(metrics)
