"""The plan task: plan the run (or re-use its persisted plan), stage spec and plan for its Spark jobs, and
return the jobs' arguments (XCom), one job per task group x replica."""

from __future__ import annotations

import json
import logging

from ingest_core.core.planner import Plan
from ingest_core.core.spec import DatasourceSpec
from ingest_core.executor import deep_storage
from ingest_core.provider.operators.run import (
    RunContext,
    check_active,
    final_reason,
    run_folder,
    store,
)
from ingest_core.store.records import RunStatus
from ingest_core.supervisor.planning import PlanOptions, Supervisor

log = logging.getLogger(__name__)

# The one Spark job of a run with nothing to read: it succeeds at once. (A mapped task with no instances is
# skipped, and Airflow would skip publish and report after it.)
NO_JOB: list[str] = []


def plan_task(spec: DatasourceSpec, run: RunContext) -> list[list[str]]:
    """Plan (or re-use) the run's plan; stage spec and plan in deep storage; return one spark-submit argument
    list per task group x replica, or [NO_JOB] when there is nothing to read."""
    from airflow.sdk.exceptions import AirflowSkipException

    check_spark_connection(spec.microbatch.spark.conn_id)
    metadata = store()
    check_active(metadata, spec.datasource)
    supervisor = Supervisor(spec, metadata)
    supervisor.register()
    record = supervisor.plan(run.run_id, PlanOptions(end_time=run.end_time))  # expires overdue runs first
    plan = record.plan
    log.info("plan of run %s (%s):\n%s", run.run_id, record.status.value, json.dumps(plan.to_json(), indent=1))
    if record.status is RunStatus.PUBLISHED:
        log.info("run %s is already published: nothing to read", run.run_id)
        return [NO_JOB]
    if record.is_final:
        raise AirflowSkipException(final_reason(record))
    folder = run_folder(spec, run.run_id)
    spec_args = stage_spec(spec, folder)
    plan_uri = deep_storage.join(folder, "plan.json")
    deep_storage.write_json(plan_uri, plan.to_json())
    # its jobs start: completionTimeout from now. A backfill has no deadline: no run waits for it, and once
    # expired nothing would ever read its range again.
    metadata.runs.start(spec.datasource, run.run_id, None if plan.is_backfill else supervisor.completion_timeout)
    jobs = job_arguments(spec, plan, [*spec_args, "--plan", plan_uri])
    log.info("run %s: %d records in %d task groups -> %d Spark jobs", run.run_id, plan.records, len(plan.groups),
             len(jobs))
    return jobs or [NO_JOB]


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


def stage_spec(spec: DatasourceSpec, folder: str) -> list[str]:
    """Stage the spec for the run's Spark jobs; returns their spec arguments. The staged copy is redacted like
    every stored one: a literal secret stays in the spec file under `dags/`, which the job's driver reads it
    from (`--secrets-from`), so no secret lands in deep storage, XCom or the logs."""
    from ingest_core.executor.protobuf_descriptors import inline_descriptors

    uri = deep_storage.join(folder, "spec.json")
    # a protobuf descriptor file is read here, beside the spec: the executors may not see that path
    deep_storage.write_json(uri, inline_descriptors(spec).to_raw())
    return ["--spec", uri, *(["--secrets-from", spec.source] if spec.has_literal_secrets else [])]


def job_arguments(spec: DatasourceSpec, plan: Plan, staged: list[str]) -> list[list[str]]:
    """The `spark_jobs/ingest_job.py` arguments of each task group x replica with something to read;
    `staged`: the spec and plan arguments every job shares."""
    base = deep_storage.base_for(spec)
    return [[*staged, "--group", str(group.group_id), "--replica", str(replica),
             "--output", deep_storage.group_uri(base, spec.datasource, plan.run_id, group.group_id, replica)]
            for group in plan.groups if not group.is_empty for replica in range(spec.io_config.replicas)]
