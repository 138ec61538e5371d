"""Druid's ingestion metrics sent through Airflow's own metrics (`[metrics]`: StatsD, DogStatsD or OpenTelemetry)
when a run's report task succeeds. An Airflow listener of the project's plugin (plugins/ingest_plugin.py), so no
operator changes: Airflow calls it in the process that ran the task (the task runner under a scheduler, the
`airflow dags test` process), where `[metrics]` is already set up.

The figures are the datasource's status report (`service.status.collect_status`, what `ingest status` reads) turned
into Druid's metrics by `service.metrics`. The report task runs last and whatever happened upstream, so the lag is
sent after a failed run too. With no metrics backend on, the listener reads nothing.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from airflow.listeners import hookimpl

log = logging.getLogger(__name__)

REPORT_TASK, INGEST_TAG = "report", "ingest"  # the run's last task, and its DAG's tag (provider.dag_factory)
KAFKA_TIMEOUT_S = 10.0  # each call to the broker for the latest offsets


def backend_on() -> bool:
    from airflow.sdk.configuration import conf

    return any(conf.getboolean("metrics", key, fallback=False)
               for key in ("statsd_on", "statsd_datadog_enabled", "otel_on"))


def backend() -> str:
    """The backend Airflow picked, in its own order (`stats_utils.get_stats_factory`): "dogstatsd", "statsd" (with
    InfluxDB-style tags: "statsd-tagged"; Airflow's plain StatsD drops tags) or "otel" (tags are attributes)."""
    from airflow.sdk.configuration import conf

    if conf.getboolean("metrics", "statsd_datadog_enabled", fallback=False):
        return "dogstatsd"
    if conf.getboolean("metrics", "statsd_on", fallback=False):
        return "statsd-tagged" if conf.getboolean("metrics", "statsd_influxdb_enabled", fallback=False) else "statsd"
    return "otel"


def emit(metrics: list, kind_of_backend: str) -> None:
    """Each metric through Airflow's Stats, by its kind; without tags, with its dimensions in its name."""
    from airflow.sdk.observability import stats

    from ingest_core.service.metrics import statsd_tags, untagged_name

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
    from ingest_core.service.metrics import druid_metrics
    from ingest_core.service.status import collect_status
    from ingest_core.store.schema import utcnow
    from ingest_core.supervisor.planning import spec_for
    from ingest_core.supervisor.run import open_store

    store = open_store()
    if store.datasources.get(datasource) is None:
        return 0
    report = collect_status(store, datasource, spec_for(store, datasource, {}), kafka_timeout_s=KAFKA_TIMEOUT_S)
    metrics = druid_metrics(report, run_id, utcnow())
    emit(metrics, backend())
    return len(metrics)


def is_ingest_report(task_instance: Any) -> bool:
    """The report task of a datasource's DAG (tagged `ingest` by `provider.dag_factory`), not another DAG's task
    of that name. Where Airflow hands no task (a state set from outside), the datasource's row decides."""
    if getattr(task_instance, "task_id", None) != REPORT_TASK:
        return False
    dag = getattr(getattr(task_instance, "task", None), "dag", None)
    return dag is None or INGEST_TAG in (dag.tags or ())


@hookimpl
def on_task_instance_success(previous_state: Any, task_instance: Any) -> None:
    if not is_ingest_report(task_instance) or not backend_on():
        return
    started = time.monotonic()
    try:
        sent = emit_for_run(task_instance.dag_id, task_instance.run_id)
        log.info("sent %d ingest metrics of %s run %s in %.2f s", sent, task_instance.dag_id, task_instance.run_id,
                 time.monotonic() - started)
    except Exception:  # a metric is never worth a task: the run's outcome stands
        log.warning("ingest metrics of %s run %s not sent", task_instance.dag_id, task_instance.run_id,
                    exc_info=True)
