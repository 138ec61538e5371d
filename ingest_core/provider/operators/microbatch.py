"""The work of one DAG run (one supervisor loop), as Airflow tasks: plan -> Spark jobs -> publish -> report.

Each function is a thin shell over the spine (`Supervisor`, the Spark job, `Publisher`); Airflow gives them
the run id, the data interval and retries. Re-running a run (clear, backfill) re-executes its persisted plan:
already published -> nothing to do; superseded or expired -> skipped with the reason; otherwise it runs.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from ingest_core.core.errors import (
    IngestError,
    PublishPendingError,
    RunExpiredError,
    StaleRunError,
)
from ingest_core.core.settings import Settings
from ingest_core.core.spec import DatasourceSpec
from ingest_core.core.states import Event
from ingest_core.executor import deep_storage
from ingest_core.executor.report import AttemptReport, GroupReport, successful_attempts
from ingest_core.kafka.consumer_group import mirror_offsets
from ingest_core.store.metadata import MetadataStore, RunRecord, RunStatus, utcnow
from ingest_core.store.publisher import GroupResult, Publisher
from ingest_core.supervisor.planning import PlanOptions, Supervisor

log = logging.getLogger(__name__)

JOB_SCRIPT = Path(__file__).resolve().parents[3] / "spark_jobs" / "ingest_job.py"
SCHEDULED_RUN_TYPES = ("scheduled", "backfill")
# The one Spark job of a run with nothing to read: it succeeds at once. (A mapped task with no instances is
# skipped, and Airflow would skip publish and report after it.)
NO_JOB: list[str] = []
REPORT_READ_ATTEMPTS, REPORT_READ_RETRY_S = 3, 2.0  # a report that exists but cannot be read: retry, then fail


@dataclass(frozen=True)
class RunContext:
    """What a task needs to know about its DAG run."""

    run_id: str
    run_type: str
    data_interval_end: datetime | None

    @classmethod
    def from_airflow(cls, context: Any) -> "RunContext":
        dag_run = context["dag_run"]
        run_type = getattr(dag_run.run_type, "value", str(dag_run.run_type))
        return cls(dag_run.run_id, run_type, context.get("data_interval_end"))

    @property
    def end_time(self) -> datetime | None:
        """A scheduled or backfill run for [a, b) ingests up to the offsets at time b; a manual one, up to now."""
        return self.data_interval_end if self.run_type in SCHEDULED_RUN_TYPES else None


def store() -> MetadataStore:
    s = MetadataStore(Settings.from_env().metadata_url)
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
    """A suspended or terminated datasource plans nothing, even for a run created before it was paused."""
    from airflow.sdk.exceptions import AirflowSkipException

    row = metadata.datasource_row(datasource)
    if row is not None and row["terminated"]:
        raise AirflowSkipException(f"datasource {datasource} is terminated: nothing runs until "
                                   f"`ingest resume {datasource}`")
    if row is not None and row["suspended"]:
        raise AirflowSkipException(f"datasource {datasource} is suspended: `ingest resume {datasource}` resumes it")


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
    deep_storage.write_json(deep_storage.join(folder, "plan.json"), plan.to_json())
    # its jobs start: completionTimeout from now. A backfill has no deadline: no run waits for it, and once
    # expired nothing would ever read its range again.
    metadata.start_run(spec.datasource, run.run_id, None if plan.is_backfill else supervisor.completion_timeout)
    jobs = []
    for group in plan.groups:
        if group.is_empty:
            continue
        for replica in range(spec.io_config.replicas):
            jobs.append([*spec_args, "--plan", deep_storage.join(folder, "plan.json"),
                         "--group", str(group.group_id), "--replica", str(replica),
                         "--output", deep_storage.group_uri(deep_storage.base_for(spec), spec.datasource, run.run_id,
                                                            group.group_id, replica)])
    log.info("run %s: %d records in %d task groups -> %d Spark jobs", run.run_id, plan.records, len(plan.groups),
             len(jobs))
    return jobs or [NO_JOB]


def stage_spec(spec: DatasourceSpec, folder: str) -> list[str]:
    """Stage the spec for the run's Spark jobs; returns their spec arguments. The staged copy is redacted like
    every stored one: a literal secret stays in the spec file under `dags/`, which the job's driver reads it
    from (`--secrets-from`), so no secret lands in deep storage, XCom or the logs."""
    uri = deep_storage.join(folder, "spec.json")
    deep_storage.write_json(uri, spec.to_raw())
    return ["--spec", uri, *(["--secrets-from", spec.source] if spec.has_literal_secrets else [])]


def group_reports(spec: DatasourceSpec, run_id: str, group_id: int) -> list[AttemptReport]:
    """The reports the attempts of a group's replicas left."""
    out = []
    for replica in range(spec.io_config.replicas):
        group = deep_storage.group_uri(deep_storage.base_for(spec), spec.datasource, run_id, group_id, replica)
        for uri in deep_storage.attempt_folders(group):
            attempt = deep_storage.attempt_id(uri)
            report = _read_report(deep_storage.join(uri, "report.json"), f"the report of task group {group_id} "
                                  f"(replica {replica}, attempt {attempt}) of run {run_id}")
            if report is not None:
                out.append(AttemptReport(report, attempt))
    return out


def _read_report(uri: str, what: str) -> GroupReport | None:
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


def publish_task(spec: DatasourceSpec, run: RunContext) -> dict[str, Any]:
    """Publish every group whose job succeeded (one attempt of the lowest successful replica of each), in one
    transaction."""
    from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

    metadata = store()
    record = metadata.require_run(spec.datasource, run.run_id)
    if record.status is RunStatus.SUPERSEDED or record.expired:
        raise AirflowSkipException(final_reason(record))
    results, failed, kept = [], [], []
    for group in record.plan.groups:
        if group.is_empty:
            continue
        chosen = successful_attempts(group_reports(spec, run.run_id, group.group_id))
        if not chosen:
            failed.append(group.group_id)
            continue
        results.append(GroupResult.from_report(chosen[0].report))
        kept.extend(r.report for r in chosen)
    try:
        result = publish_in_order(Publisher(metadata), spec.datasource, run.run_id, results,
                                  timeout_s=spec.io_config.completion_timeout.to_timedelta().total_seconds())
    except RunExpiredError as exc:  # final: a retry would be refused again
        raise AirflowFailException(str(exc)) from None
    if not result.already_published:  # a re-run of a published run keeps the reports it has
        for report in kept:
            metadata.add_task_report(report)
    metadata.set_state(spec.datasource, Event.PUBLISHED_NOTHING if record.plan.is_empty else Event.PUBLISHED)
    summary = {"runId": run.run_id, "alreadyPublished": result.already_published, "rows": result.rows,
               "segments": list(result.segment_ids), "publishedGroups": list(result.published_groups),
               "failedGroups": list(result.failed_groups), "endOffsets": result.end_offsets,
               "records": record.plan.records}
    log.info("publish: %s", json.dumps(summary))
    return summary


def publish_in_order(publisher: Publisher, datasource: str, run_id: str, results: list[GroupResult], *,
                     timeout_s: float, poll_s: float = 2.0):
    """Publish, after the in-flight run this one was pipelined from: until that one publishes, fails or passes
    its deadline (then it expires, and this run is refused as stale), at most `timeout_s` (completionTimeout)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return publisher.publish(datasource, run_id, results)
        except PublishPendingError as exc:
            if publisher.store.expire_overdue(datasource, utcnow(), f"run {run_id} waiting to publish after it"):
                continue
            if time.monotonic() > deadline:
                raise IngestError(f"{exc}; it did not publish within {timeout_s:g}s (completionTimeout)") from None
            log.info("%s: waiting", exc)
            time.sleep(poll_s)
        except StaleRunError as exc:
            log.error("%s", exc)
            raise


def remove_unpublished_attempts(metadata: MetadataStore, spec: DatasourceSpec, run_id: str) -> None:
    """A final run's job output that nothing was published from (other replicas, failed attempts) goes. A
    failure here fails nothing: `ingest cleanup` removes it later."""
    from ingest_core.store.cleanup import find_orphans, remove_orphans

    try:
        remove_orphans(metadata, spec.datasource, find_orphans(metadata, spec, [run_id]), f"report of run {run_id}")
    except Exception as exc:  # noqa: BLE001 - deep storage or the store: the run's outcome stands either way
        log.warning("run %s: its unpublished job output stays for `ingest cleanup`: %s", run_id, exc)


def report_task(spec: DatasourceSpec, run: RunContext, planned: bool) -> dict[str, Any]:
    """What the run did, from the metadata store. Runs whatever happened upstream (`planned`: this attempt's
    plan step succeeded), so a run that will not publish is marked FAILED: a run pipelined from it then
    stops waiting for it, and its partitions are planned again from the committed offsets. Fails the Airflow
    run when a group failed or nothing was published; skips when a re-run found the run superseded."""
    from airflow.sdk.exceptions import AirflowSkipException

    from ingest_core.store.metadata import GroupStatus

    metadata = store()
    record = metadata.get_run(spec.datasource, run.run_id)
    if record is None:
        check_active(metadata, spec.datasource)  # skipped as suspended or terminated: not a failure
        raise IngestError(f"run {run.run_id} has no plan: a step before planning failed (see the data_gate and plan logs)")
    if record.status is RunStatus.SUPERSEDED and not planned:
        raise AirflowSkipException(f"run {run.run_id} was superseded by run {record.superseded_by}: "
                                   f"{record.error or ''}".strip())
    if record.status.in_flight:
        supervisor = Supervisor(spec, metadata)
        supervisor.expire_overdue(f"the report of run {run.run_id}")
        supervisor.mark_failed(run.run_id, "its tasks failed before publishing (see the plan, spark_job and "
                                           "publish logs)")  # unless it just expired
        record = metadata.require_run(spec.datasource, run.run_id)
    if record.is_final:
        remove_unpublished_attempts(metadata, spec, run.run_id)
    mirrored = None
    if record.status is RunStatus.PUBLISHED:  # all of them: a run whose report never ran mirrored nothing
        committed = {tp: k.offset for tp, k in metadata.committed_offsets(spec.datasource).items()}
        mirrored = mirror_offsets(spec, committed)
    stats = metadata.run_row_stats(spec.datasource, run.run_id)
    segments = metadata.segments(spec.datasource, run_id=run.run_id)
    failed = sorted(g for g, s in metadata.group_statuses(spec.datasource, run.run_id).items()
                    if s is GroupStatus.FAILED)
    out = {"runId": run.run_id, "status": record.status.value, "records": record.plan.records,
           "rowStats": stats, "segments": len(segments), "rows": sum(s.num_rows for s in segments),
           "failedGroups": failed, "error": record.error, "offsetsMirroredTo": mirrored}
    log.info("run report: %s", json.dumps(out, default=str))
    if failed:
        raise IngestError(f"run {run.run_id}: task groups {failed} failed; their partitions keep their committed "
                          "offsets and the next run reads them again")
    if record.status is not RunStatus.PUBLISHED:
        raise IngestError(f"run {run.run_id} ended {record.status.value}: {record.error or 'not published'}")
    return out


def check_job_wanted(datasource: str, run_id: str) -> None:
    """A job of a run that is published, superseded or expired (a re-executed or late task) does nothing."""
    from airflow.sdk.exceptions import AirflowSkipException

    metadata = store()
    metadata.expire_overdue(datasource, utcnow(), f"a Spark job of run {run_id}")
    record = metadata.get_run(datasource, run_id)
    reason = final_reason(record) if record is not None else None
    if reason:
        raise AirflowSkipException(f"{reason}: no Spark job")


class IngestSparkSubmitOperator(SparkSubmitOperator):
    """The ingest job of one task group: `spark-submit` for a `spark` connection (local, standalone, YARN,
    Kubernetes), with the spec's master override and a Python that has this package; for a `spark_connect`
    connection, a Spark Connect client inside this task (`ingest_core.spark.connect`): no JVM of its own."""

    def __init__(self, *, datasource: str, master: str | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.datasource = datasource
        self.master = master
        self._interrupter: Any = None

    def execute(self, context: Any) -> None:
        if not self.application_args:
            self.log.info("nothing to read in this run: no Spark job")
            return None
        check_job_wanted(self.datasource, context["dag_run"].run_id)
        if connection_type(self._conn_id) == "spark_connect":
            return self._execute_over_connect()
        env = dict(self.env_vars or {})
        env.setdefault("PATH", str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
        env.setdefault("PYSPARK_PYTHON", os.environ.get("PYSPARK_PYTHON", sys.executable))
        self.env_vars = env
        return super().execute(context)

    def _execute_over_connect(self) -> None:
        from ingest_core.provider.hooks.spark_connect import connection_url
        from ingest_core.spark.connect import run_job

        def keep(interrupter: Any) -> None:
            self._interrupter = interrupter

        timeout = self.execution_timeout.total_seconds() if self.execution_timeout else None
        summary = run_job(connection_url(self._conn_id), [str(a) for a in self.application_args],
                          timeout_s=timeout, on_session=keep)
        self.log.info("job summary: %s", json.dumps(summary))

    def on_kill(self) -> None:
        if self._interrupter is not None:  # Connect: stop the session's queries on the shared server
            self._interrupter.interrupt()
            return
        super().on_kill()

    def _get_hook(self) -> Any:
        hook = super()._get_hook()
        if self.master:
            hook._connection["master"] = self.master
        return hook


def connection_type(conn_id: str) -> str | None:
    from airflow.sdk import BaseHook

    return BaseHook.get_connection(conn_id).conn_type
