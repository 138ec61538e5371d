"""Druid's ingestion metrics sent through Airflow's own metrics (`[metrics]`: StatsD, DogStatsD or OpenTelemetry)
when a run's report task succeeds. An Airflow listener of the project's plugin (plugins/ingest_plugin.py), so no
operator changes: Airflow calls it in the process that ran the task (the task runner under a scheduler, the
`airflow dags test` process), where `[metrics]` is already set up. Airflow imports its plugins in each of its
processes: this module is light, and the sending (`metrics_emitter`, which loads the status report's reading) loads
only when a report task succeeds with metrics on.

A run its data gate ended idle (nothing new by maxWait, in the plan task: `provider.operators.plan`) has no report
task: that plan task's success sends them instead, so an idle datasource's lag (0) and state (IDLE) keep being
sent every maxWait.

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

REPORT_TASK, GATE_TASK, INGEST_TAG = "report", "plan", "ingest"  # (provider.dag_factory; the gate is in the plan)


def backend_on() -> bool:
    from airflow.sdk.configuration import conf

    return any(conf.getboolean("metrics", key, fallback=False)
               for key in ("statsd_on", "statsd_datadog_enabled", "otel_on"))


def is_ingest_report(task_instance: Any) -> bool:
    """The report task of a datasource's DAG (tagged `ingest` by `provider.dag_factory`), or its plan task when
    its data gate ended the run idle (the run's last task then), not another DAG's task of that name. Where Airflow hands no
    task (a state set from outside), the datasource's row decides."""
    task_id, task = getattr(task_instance, "task_id", None), getattr(task_instance, "task", None)
    if task_id == GATE_TASK:
        if not getattr(task, "ended_idle", False):  # it planned: the run's report sends them
            return False
    elif task_id != REPORT_TASK:
        return False
    dag = getattr(task, "dag", None)
    return dag is None or INGEST_TAG in (dag.tags or ())


@hookimpl
def on_task_instance_success(previous_state: Any, task_instance: Any) -> None:
    if not is_ingest_report(task_instance) or not backend_on():
        return
    started = time.monotonic()
    try:
        from ingest_core.provider.plugins.metrics_emitter import emit_for_run

        sent = emit_for_run(task_instance.dag_id, task_instance.run_id)
        log.info("sent %d ingest metrics of %s run %s in %.2f s", sent, task_instance.dag_id, task_instance.run_id,
                 time.monotonic() - started)
    except Exception:  # a metric is never worth a task: the run's outcome stands
        log.warning("ingest metrics of %s run %s not sent", task_instance.dag_id, task_instance.run_id,
                    exc_info=True)
