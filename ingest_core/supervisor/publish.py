"""The publish step of a run: read the reports the run's Spark jobs left (each once), and publish every task
group that succeeded (its published replica: `handover.report.published_attempt`) in one transaction (`store.publisher`),
in order after the run it was pipelined from; then the state the run leaves the datasource in."""

from __future__ import annotations

import json
import logging
import time
from datetime import datetime, timedelta
from typing import Any

from ingest_core.core.errors import (
    IngestError,
    NothingSucceededError,
    ObjectStoreRefusedError,
    PredecessorGoneError,
    PublishPendingError,
    RunExpiredError,
    StaleRunError,
)
from ingest_core.core.offsets import OffsetRange, TopicPartition
from ingest_core.core.planner import Plan, TaskGroup
from ingest_core.core.spec import DatasourceSpec
from ingest_core.core.states import Event, after_nothing_to_read
from ingest_core.handover import deep_storage
from ingest_core.handover.job_input import JobInput
from ingest_core.handover.report import AttemptReport, GroupReport, successful_attempts
from ingest_core.core.states import RunStatus
from ingest_core.store.metadata import MetadataStore
from ingest_core.store.schema import utcnow
from ingest_core.store.publisher import GroupResult, Publisher, PublishResult
from ingest_core.supervisor.run import RunFailedForGood, RunSkipped, final_reason, open_store

log = logging.getLogger(__name__)

REPORT_READ_ATTEMPTS, REPORT_READ_RETRY_S = 3, 2.0  # a report that exists but cannot be read: retry, then fail


def publish_step(spec: DatasourceSpec, run_id: str, metadata: MetadataStore | None = None,
                 planned: bool = True) -> dict[str, Any]:
    """Publish every group whose job succeeded, in one transaction; keep the reports of its replicas that
    succeeded; returns the publish's summary (XCom, the Asset event's extra). Each report is read once. A run
    whose predecessor will never publish was planned again by the re-plan step before this one
    (`supervisor.replan`): this step never plans nor starts a Spark job. `planned`: the run's plan task
    succeeded (its task runs whatever its upstream did); without it, `RunSkipped` and nothing is read or
    changed, even when an earlier try of the plan stored one: the report step ends such a run."""
    if not planned:
        raise RunSkipped(f"the plan step of run {run_id} did not succeed: nothing to publish")
    metadata = metadata or open_store()
    record = metadata.runs.require(spec.datasource, run_id)
    if record.status is RunStatus.SUPERSEDED or record.expired:
        raise RunSkipped(final_reason(record))
    plan = record.plan
    reports = successful_reports(spec, plan)
    results = [GroupResult.from_report(replicas[0]) for replicas in reports.values()]
    try:
        result = publish_in_order(Publisher(metadata), spec.datasource, run_id, results,
                                  timeout_s=spec.io_config.completion_timeout.to_timedelta().total_seconds())
    except (RunExpiredError, NothingSucceededError) as exc:  # a retry would be refused again
        raise RunFailedForGood(str(exc)) from None
    except PredecessorGoneError as exc:  # the re-plan step ran before its predecessor went: it fails, the next
        raise RunFailedForGood(f"{exc}; the re-plan step had passed, so the run fails and the next run reads its "
                               "range") from None  # run reads its range from the committed offsets
    if not result.already_published:  # a re-run of a published run keeps the reports it has
        for replicas in reports.values():
            for report in replicas:
                metadata.reports.add(report)
    last_active = metadata.runs.last_active(spec.datasource) if plan.is_empty else None  # idleConfig's clock
    metadata.datasources.set_state(spec.datasource, state_event(spec, plan, last_active))
    summary = publish_summary(result, plan)
    log.info("publish: %s", json.dumps(summary))
    return summary


def state_event(spec: DatasourceSpec, plan: Plan, last_active: datetime | None, now: datetime | None = None) -> Event:
    """The state a published run leaves: RUNNING after rows; after nothing, IDLE or not by ioConfig.idleConfig."""
    if not plan.is_empty:
        return Event.PUBLISHED
    return nothing_new_event(spec, last_active, now)


def nothing_new_event(spec: DatasourceSpec, last_active: datetime | None, now: datetime | None = None) -> Event:
    """The state a loop that found nothing to read leaves (an empty run's publish, a data gate ending idle): IDLE,
    or not yet by ioConfig.idleConfig."""
    idle = spec.io_config.idle_config
    return after_nothing_to_read(None if idle is None else idle.enabled,
                                 timedelta(milliseconds=idle.inactive_after_millis if idle else 0), last_active,
                                 now or utcnow())


def successful_reports(spec: DatasourceSpec, plan: Plan) -> dict[int, list[GroupReport]]:
    """Per task group with something to read, the reports of its replicas that succeeded (the earliest
    successful attempt of each), the one to publish first. A group none succeeded in is left out: it failed."""
    out = {}
    for group in plan.groups:
        if group.is_empty:
            continue
        chosen = successful_attempts(plan_reports(spec, plan, group.group_id))
        if chosen:
            out[group.group_id] = [a.report for a in chosen]
    return out


def unread_groups(spec: DatasourceSpec, plan: Plan) -> list[int]:
    """The plan's groups with something to read that no job of this plan has reported on (succeeded or not)."""
    return [g.group_id for g in plan.groups if not g.is_empty and not plan_reports(spec, plan, g.group_id)]


def plan_reports(spec: DatasourceSpec, plan: Plan, group_id: int) -> list[AttemptReport]:
    """The reports of a group's attempts that read this plan of the run: a run planned again (`Plan.revision`)
    keeps its earlier jobs' output in the same folders, and a report of other offsets than the group's plan is
    never this group's (publishing it would ingest the wrong range)."""
    group = plan.group(group_id)
    return [a for a in group_reports(spec, plan.run_id, group_id) if reads(a.report, group)]


def reads(report: GroupReport, group: TaskGroup) -> bool:
    """Whether the report is of a job of this group's plan: its splits, or (failed before it read any) the
    ranges its failure names; a report that says neither is taken for the group's."""
    if report.splits and report.succeeded:
        return tuple(OffsetRange(TopicPartition(s.topic, s.partition), s.start, s.end)
                     for s in report.splits) == group.splits
    if report.failure is not None:
        return report.failure.ranges == tuple(p.range for p in group.partitions)
    return True


def group_reports(spec: DatasourceSpec, run_id: str, group_id: int) -> list[AttemptReport]:
    """The reports the attempts of a group's replicas left."""
    out = []
    for replica in range(spec.io_config.replicas):
        group = deep_storage.group_uri(deep_storage.base_for(spec), spec.datasource, run_id, group_id, replica)
        for uri in deep_storage.attempt_folders(group):
            attempt = deep_storage.attempt_id(uri)
            report = read_report(deep_storage.join(uri, "report.json"), f"the report of task group {group_id} "
                                 f"(replica {replica}, attempt {attempt}) of run {run_id}")
            if report is not None:
                out.append(AttemptReport(report, attempt))
    return out


def read_report(uri: str, what: str) -> GroupReport | None:
    """A report, or None when there is none (its job failed before writing it). Any other error is a storage
    fault: retried, then raised, so the publish task fails and Airflow retries it; taking it for "no report"
    would mark a group that succeeded as failed."""
    for attempt in range(1, REPORT_READ_ATTEMPTS + 1):
        try:
            text = deep_storage.read_text(uri)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if attempt == REPORT_READ_ATTEMPTS:
                raise IngestError(f"could not read {what} at {uri} ({exc}) in {attempt} attempts; nothing was "
                                  "published (the publish task fails and is retried)") from exc
            log.warning("reading %s at %s failed (%s): retrying", what, uri, exc)
            time.sleep(REPORT_READ_RETRY_S)
        else:
            return GroupReport.loads(text, f"{what} at {uri}")
    return None  # pragma: no cover - the loop returns or raises


def publish_in_order(publisher: Publisher, datasource: str, run_id: str, results: list[GroupResult], *,
                     timeout_s: float, poll_s: float = 2.0) -> PublishResult:
    """Publish, after the in-flight run this one was pipelined from: until that one publishes, fails or passes
    its deadline, at most `timeout_s` (completionTimeout). When it will never publish, this run's commit is
    refused (`PredecessorGoneError`, raised): the re-plan step plans such a run again before its publish."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return publisher.publish(datasource, run_id, results)
        except PredecessorGoneError as exc:
            log.warning("%s", exc)
            raise
        except PublishPendingError as exc:
            if publisher.store.runs.expire_overdue(datasource, utcnow(), f"run {run_id} waiting to publish after it"):
                continue
            if time.monotonic() > deadline:
                raise IngestError(f"{exc}; it did not publish within {timeout_s:g}s (completionTimeout)") from None
            log.info("%s: waiting", exc)
            time.sleep(poll_s)
        except StaleRunError as exc:
            log.error("%s", exc)
            raise


def publish_summary(result: PublishResult, plan: Plan) -> dict[str, Any]:
    return {"runId": result.run_id, "alreadyPublished": result.already_published, "rows": result.rows,
            "segments": list(result.segment_ids), "publishedGroups": list(result.published_groups),
            "failedGroups": list(result.failed_groups), "endOffsets": result.end_offsets, "records": plan.records}


def retry_cannot_help(job: JobInput, run_id: str) -> str | None:
    """Why a failed job would fail the same way on the same records if retried (maxParseExceptions), from the
    report of its latest attempt; None when a retry may help."""
    try:
        attempts = deep_storage.attempt_folders(job.output_uri)  # oldest first: this try's is the last
    except ObjectStoreRefusedError as exc:  # the job's store refuses these settings: so it would on a retry
        return str(exc)
    group = job.group_id
    report = read_report(deep_storage.join(attempts[-1], "report.json"),
                         f"the report of task group {group} of run {run_id}") if attempts else None
    failure = report.failure if report is not None else None
    if failure is not None and not failure.retry_can_help:
        return (f"task group {group} of run {run_id} failed, and a retry would read the same records: "
                f"{failure.title}: {failure.message}")
    return None
