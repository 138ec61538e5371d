"""One run of a datasource's loop, step by step, as the DAG's tasks call it: plan, the Spark jobs' arguments,
publish (`supervisor.publish`), report (`supervisor.report`). Each step first expires the runs past their
deadline (`Supervisor.expire_overdue`). The steps take typed inputs and return typed results; a step that has
nothing to do raises `RunSkipped`, one a retry cannot help raises `RunFailedForGood`. The Airflow operators
(`provider/operators/`) only gather the inputs and turn these two into Airflow's skip and fail.

Re-running a run (clear, backfill) re-executes its persisted plan: already published -> nothing to do;
superseded or expired -> skipped with the reason; a suspended or terminated datasource -> skipped.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from datetime import datetime

from ingest_core.core.errors import IngestError, KafkaAuthenticationError
from ingest_core.core.planner import Plan
from ingest_core.core.settings import Settings
from ingest_core.core.spec import DatasourceSpec
from ingest_core.core.states import Event, refusal
from ingest_core.executor.formats.protobuf_descriptors import inline_descriptors
from ingest_core.handover import deep_storage
from ingest_core.core.states import RunStatus
from ingest_core.store.metadata import MetadataStore
from ingest_core.store.records import RunRecord
from ingest_core.store.schema import utcnow
from ingest_core.supervisor.planning import PlanOptions, Supervisor

log = logging.getLogger(__name__)


class RunSkipped(Exception):
    """The step has nothing to do, and that is no failure (Airflow: skipped)."""


class RunFailedForGood(IngestError):
    """The step failed and a retry would fail the same way (Airflow: failed without retries)."""

    code = "INGEST_RUN_FAILED_FOR_GOOD"


def open_store() -> MetadataStore:
    s = MetadataStore.shared(Settings.from_env().metadata_url)
    s.check_schema()
    return s


def run_folder(spec: DatasourceSpec, run_id: str) -> str:
    return deep_storage.run_uri(deep_storage.base_for(spec), spec.datasource, run_id)


def final_reason(record: RunRecord) -> str | None:
    """Why a run's tasks have nothing left to do (published, superseded, expired); None while it may still run."""
    if record.status is RunStatus.PUBLISHED:
        return f"run {record.run_id} is already published"
    if record.status is RunStatus.SUPERSEDED:
        return (f"run {record.run_id} was superseded by run {record.superseded_by} and is not executed again: "
                f"{record.error or ''}").strip()
    if record.expired:
        return f"run {record.run_id} is not executed again: {record.error}"
    return None


def check_active(metadata: MetadataStore, datasource: str) -> None:
    """A suspended or terminated datasource plans nothing, even for a run created before it was paused (the
    state table's LOOP)."""
    why = refusal(metadata.datasources.state(datasource)[0], Event.LOOP, datasource)
    if why is not None:
        raise RunSkipped(why)


def plan_step(spec: DatasourceSpec, run_id: str, end_time: datetime | None,
              metadata: MetadataStore | None = None) -> list[list[str]]:
    """Plan (or re-use) the run's plan; stage spec and plan in deep storage; return one spark-submit argument
    list per task group x replica ([] when there is nothing to read, or the run is already published)."""
    metadata = metadata or open_store()
    check_active(metadata, spec.datasource)
    supervisor = Supervisor(spec, metadata)
    supervisor.register()
    try:
        record = supervisor.plan(run_id, PlanOptions(end_time=end_time))  # expires overdue runs first
    except KafkaAuthenticationError as exc:  # refused credentials or certificate: a retry would be refused too
        raise RunFailedForGood(str(exc)) from None
    plan = record.plan
    log_plan(plan, record.status)
    if record.status is RunStatus.PUBLISHED:
        log.info("run %s is already published: nothing to read", run_id)
        return []
    if record.is_final:
        raise RunSkipped(final_reason(record))
    jobs = stage_plan(spec, plan)
    # its jobs start: completionTimeout from now. A backfill has no deadline: no run waits for it, and once
    # expired nothing would ever read its range again.
    metadata.runs.start(spec.datasource, run_id, None if plan.is_backfill else supervisor.completion_timeout)
    log.info("run %s: %d records in %d task groups -> %d Spark jobs", run_id, plan.records, len(plan.groups),
             len(jobs))
    return jobs


LOGGED_PLAN_PARTITIONS = 1000  # a larger plan is logged as a summary: 100,000 partitions are 13 MB of JSON


def log_plan(plan: Plan, status: RunStatus) -> None:
    """The plan in the task's log: whole up to LOGGED_PLAN_PARTITIONS partitions, else its figures per task
    group (the whole plan is staged beside the run's spec, `stage_plan`)."""
    if len(plan.partitions) <= LOGGED_PLAN_PARTITIONS:
        log.info("plan of run %s (%s):\n%s", plan.run_id, status.value, json.dumps(plan.to_json(), indent=1))
        return
    log.info("plan of run %s (%s): %d partitions, %d records, start sources %s; task groups (id: partitions, "
             "records, splits): %s; staged whole as plan.json in the run's folder", plan.run_id, status.value,
             len(plan.partitions), plan.records, dict(Counter(p.start_source.value for p in plan.partitions)),
             ", ".join(f"{g.group_id}: {len(g.partitions)}, {g.records}, {len(g.splits)}" for g in plan.groups))


def stage_plan(spec: DatasourceSpec, plan: Plan) -> list[list[str]]:
    """Stage spec and plan where the run's jobs read them (a cleared run re-executes this plan); the jobs'
    arguments, one list per task group x replica with something to read."""
    folder = run_folder(spec, plan.run_id)
    plan_uri = deep_storage.join(folder, "plan.json")
    deep_storage.write_json(plan_uri, plan.to_json())
    return job_arguments(spec, plan, [*stage_spec(spec, folder), "--plan", plan_uri])


def stage_spec(spec: DatasourceSpec, folder: str) -> list[str]:
    """Stage the spec for the run's Spark jobs; returns their spec arguments. The staged copy is redacted like
    every stored one: a literal secret stays in the spec file under `dags/`, which the job's driver reads it
    from (`--secrets-from`), so no secret lands in deep storage, XCom or the logs."""
    uri = deep_storage.join(folder, "spec.json")
    # a protobuf descriptor file is read here, beside the spec: the executors may not see that path
    deep_storage.write_json(uri, inline_descriptors(spec).to_raw())
    # the driver reads the staged copy from deep storage: an object store's settings come from the spec file too
    secrets_from = spec.has_literal_secrets or spec.microbatch.deep_storage.s3 is not None
    return ["--spec", uri, *(["--secrets-from", spec.source] if secrets_from else [])]


def job_arguments(spec: DatasourceSpec, plan: Plan, staged: list[str]) -> list[list[str]]:
    """The `spark_jobs/ingest_job.py` arguments of each task group x replica with something to read;
    `staged`: the spec and plan arguments every job shares."""
    base = deep_storage.base_for(spec)
    return [[*staged, "--group", str(group.group_id), "--replica", str(replica),
             "--output", deep_storage.group_uri(base, spec.datasource, plan.run_id, group.group_id, replica)]
            for group in plan.groups if not group.is_empty for replica in range(spec.io_config.replicas)]


def check_job_wanted(datasource: str, run_id: str) -> None:
    """A job of a run that is published, superseded or expired (a re-executed or late task) does nothing."""
    metadata = open_store()
    metadata.runs.expire_overdue(datasource, utcnow(), f"a Spark job of run {run_id}")
    record = metadata.runs.get(datasource, run_id)
    reason = final_reason(record) if record is not None else None
    if reason:
        raise RunSkipped(f"{reason}: no Spark job")

