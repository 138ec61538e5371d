"""One run of a datasource's loop, step by step, as the DAG's tasks call it: the data gate's look
(`supervisor.gate`), plan (here: its jobs' inputs staged by `supervisor.staging`), the re-plan of a run whose
predecessor will never publish (`supervisor.replan`), publish (`supervisor.publish`), report
(`supervisor.report`). Each step first expires the runs past their
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
from ingest_core.core.states import Event, RunStatus, refusal
from ingest_core.handover.job_input import BadJobInput, JobInput
from ingest_core.store.metadata import MetadataStore
from ingest_core.store.records import RunRecord
from ingest_core.store.schema import utcnow
from ingest_core.supervisor.planning import PlanOptions, Supervisor
from ingest_core.supervisor.staging import job_input_of_legacy_args, stage_plan

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
              metadata: MetadataStore | None = None) -> list[JobInput]:
    """Plan (or re-use) the run's plan; stage the spec and each task group's input in deep storage; return one
    `JobInput` per task group x replica ([] when there is nothing to read, or the run is already published)."""
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
    group (each group's input is staged beside the run's spec, `staging.stage_plan`; the whole plan is in the
metadata store)."""
    if len(plan.partitions) <= LOGGED_PLAN_PARTITIONS:
        log.info("plan of run %s (%s):\n%s", plan.run_id, status.value, json.dumps(plan.to_json(), indent=1))
        return
    log.info("plan of run %s (%s): %d partitions, %d records, start sources %s; task groups (id: partitions, "
             "records, splits): %s; whole in the metadata store (`ingest plan`)", plan.run_id, status.value,
             len(plan.partitions), plan.records, dict(Counter(p.start_source.value for p in plan.partitions)),
             ", ".join(f"{g.group_id}: {len(g.partitions)}, {g.records}, {len(g.splits)}" for g in plan.groups))


def job_input_of(value: dict | list) -> JobInput:
    """The typed input of a Spark job task (its XCom value); a list is the argv of a run an earlier version
    planned, still in flight across an upgrade (`staging.job_input_of_legacy_args`). One that names no job fails
    its task for good: the run fails, and the next run reads its range."""
    try:
        return job_input_of_legacy_args(value) if isinstance(value, list) else JobInput.from_json(value)
    except BadJobInput as exc:
        raise RunFailedForGood(str(exc)) from None


def check_job_wanted(datasource: str, run_id: str) -> None:
    """A job of a run that is published, superseded or expired (a re-executed or late task) does nothing."""
    metadata = open_store()
    metadata.runs.expire_overdue(datasource, utcnow(), f"a Spark job of run {run_id}")
    record = metadata.runs.get(datasource, run_id)
    reason = final_reason(record) if record is not None else None
    if reason:
        raise RunSkipped(f"{reason}: no Spark job")

