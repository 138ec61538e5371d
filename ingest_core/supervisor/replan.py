"""The re-plan step of a run, between its Spark jobs and its publish (the DAG's `replan` task, whose jobs run as
the `replanned_job` tasks): a run pipelined from another (its plan continues from that run's planned end
offsets) waits here until every run it continues from is final. When one will never publish (failed, expired,
superseded), the run is planned again from the committed offsets (`Supervisor.replan`: revision + 1, audited)
and its new jobs are returned; otherwise there is nothing to plan again and it returns no job (the
`replanned_job` tasks are then skipped). So the publish that follows only ever publishes, and never starts a
Spark job.

A plan that continues from no run that may still fail (`may_be_planned_again`: no partition after a run that has
not published) can never be planned again: the plan task then skips this step and its jobs itself, and a run
costs two task processes fewer. A try of this step that re-planned but whose jobs did not all run (the task
killed, retried, or its jobs' tasks cleared) returns the jobs of that plan's groups that no job has reported on
yet. Its task runs whatever its upstream did (trigger rule `all_done`): when the run's plan task did not succeed
it ends skipped and changes nothing, even if an earlier try of that plan stored one."""

from __future__ import annotations

import logging
import time
from typing import Callable

from ingest_core.core.errors import IngestError
from ingest_core.core.planner import Plan
from ingest_core.core.spec import DatasourceSpec
from ingest_core.core.states import RunStatus
from ingest_core.handover.job_input import JobInput
from ingest_core.store.metadata import MetadataStore
from ingest_core.store.records import RunRecord
from ingest_core.supervisor.planning import Supervisor
from ingest_core.supervisor.publish import unread_groups
from ingest_core.supervisor.run import RunSkipped, final_reason, open_store
from ingest_core.supervisor.staging import stage_plan

log = logging.getLogger(__name__)

POLL_S = 2.0  # between looks at the runs this one waits for


def replan_step(spec: DatasourceSpec, run_id: str, metadata: MetadataStore | None = None,
                poll_s: float = POLL_S, planned: bool = True) -> list[JobInput]:
    """The jobs of the run planned again (replica 0 of each group: a group publishes its lowest successful
    replica); none when there is nothing to plan again (logged with why). `planned`: the run's plan task
    succeeded; without it, `RunSkipped` and nothing is read or changed."""
    if not planned:
        raise RunSkipped(f"the plan step of run {run_id} did not succeed: nothing to plan again")
    metadata = metadata or open_store()
    supervisor = Supervisor(spec, metadata)
    timeout_s = supervisor.completion_timeout.total_seconds()
    deadline = time.monotonic() + timeout_s
    while True:
        record = supervisor.replan(run_id)  # expires overdue runs first; unchanged when no predecessor is dead
        if not record.status.in_flight:
            log.info("%s: nothing to plan again", final_reason(record) or f"run {run_id} is {record.status.value}")
            return []
        waiting = in_flight_predecessors(metadata, record)
        if not waiting:
            break
        if time.monotonic() > deadline:
            raise IngestError(f"run {run_id} continues from runs {waiting}, which did not end within {timeout_s:g}s "
                              "(completionTimeout); nothing was planned again")
        log.info("run %s continues from runs %s, which have not published yet: waiting", run_id, waiting)
        time.sleep(poll_s)
    return jobs_to_run(spec, record.plan)


def may_be_planned_again(plan: Plan, lookup: Callable[[str], RunRecord | None]) -> bool:
    """Whether a run of `plan` may ever be planned again: some partition continues from a run that has not
    published (in flight, it may still fail; failed, expired or superseded, `restart_points` restarts from it).
    A run published stays published and a missing one is never looked past, so once False, always False."""
    for p in plan.partitions:
        before = lookup(p.after_run) if p.after_run else None
        if before is not None and before.status is not RunStatus.PUBLISHED:
            return True
    return False


def replan_wanted(spec: DatasourceSpec, run_id: str, metadata: MetadataStore | None = None) -> bool:
    """Whether the run's re-plan step has anything to do, from its stored plan (a retry or a clear of the plan
    task decides again): its run is in flight and `may_be_planned_again`."""
    metadata = metadata or open_store()
    record = metadata.runs.get(spec.datasource, run_id)
    if record is None or not record.status.in_flight:
        return False
    return may_be_planned_again(record.plan, lambda rid: metadata.runs.get(spec.datasource, rid))


def in_flight_predecessors(metadata: MetadataStore, record: RunRecord) -> list[str]:
    """The runs `record`'s plan continues from that may still publish (neither published nor gone)."""
    out = []
    for before in sorted({p.after_run for p in record.plan.partitions if p.after_run}):
        found = metadata.runs.get(record.datasource, before)
        if found is not None and found.status.in_flight:
            out.append(before)
    return out


def jobs_to_run(spec: DatasourceSpec, plan: Plan) -> list[JobInput]:
    """A re-planned plan's jobs that have not run: replica 0 of each group with something to read that no job
    of this plan has reported on."""
    if not plan.revision:
        log.info("run %s continues from no run that will never publish: nothing to plan again", plan.run_id)
        return []
    unread = set(unread_groups(spec, plan))
    if not unread:
        log.info("run %s (revision %d): every task group's job of this plan has run", plan.run_id, plan.revision)
        return []
    jobs = [j for j in stage_plan(spec, plan) if j.replica == 0 and j.group_id in unread]
    log.info("run %s planned again (revision %d): %d Spark jobs", plan.run_id, plan.revision, len(jobs))
    return jobs
