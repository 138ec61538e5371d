"""The plan and replan tasks: the supervisor's plan step (`supervisor.run.plan_step`) and re-plan step
(`supervisor.replan.replan_step`); their jobs' typed inputs (`handover.job_input.JobInput`, as JSON) go to XCom
for the mapped Spark job tasks (`spark_job`, `replanned_job`)."""

from __future__ import annotations

from typing import Any

from ingest_core.core.spec import DatasourceSpec
from ingest_core.provider.operators.run import RunContext, airflow_step

# The one Spark job of a run with nothing to read: it succeeds at once. (A mapped task with no instances is
# skipped, and Airflow would skip publish and report after it.)
NO_JOB: dict[str, Any] = {}


def plan_task(spec: DatasourceSpec, run: RunContext) -> list[dict[str, Any]]:
    """One job input per task group x replica, or [NO_JOB] when there is nothing to read."""
    from ingest_core.supervisor.run import plan_step  # the steps load as their task runs: see STEPS

    check_spark_connection(spec.microbatch.spark.conn_id)
    return [j.to_json() for j in airflow_step(lambda: plan_step(spec, run.run_id, run.end_time))] or [NO_JOB]


def replan_task(spec: DatasourceSpec, run: RunContext) -> list[dict[str, Any]]:
    """The jobs of the run planned again (`supervisor.replan.replan_step`), or [NO_JOB] when nothing is."""
    from ingest_core.supervisor.replan import replan_step

    return [j.to_json() for j in airflow_step(lambda: replan_step(spec, run.run_id))] or [NO_JOB]


def check_spark_connection(conn_id: str) -> None:
    """Without the connection the Spark provider silently submits to YARN: fail clearly instead."""
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowFailException

    try:
        BaseHook.get_connection(conn_id)
    except Exception as exc:  # noqa: BLE001 - Airflow raises AirflowNotFoundException, varying by version
        # configuration, not a transient failure: fail without retries
        raise AirflowFailException(
            f"the Spark connection {conn_id!r} does not exist ({exc}). Create it, e.g. "
            f"AIRFLOW_CONN_{conn_id.upper()}='{{\"conn_type\": \"spark\", \"host\": \"local[*]\"}}' for local mode "
            "or host spark://master:7077 for a standalone cluster, or set microbatch.spark.connId in the spec."
        ) from None
