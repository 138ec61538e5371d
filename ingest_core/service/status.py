"""A datasource's status report, Druid's supervisor status rebuilt from the metadata store and the broker.

`build_status` is pure: it takes what was read (the datasource row, committed and latest offsets, recent
runs, recent loop errors) and the health thresholds, and returns a `StatusReport`. `collect_status` does the
reading. Health follows Druid's supervisor rules:

- a supervisor loop (here: the plan step of a run) that fails `unhealthinessThreshold` times in a row makes
  the datasource UNHEALTHY_SUPERVISOR (detailed: UNABLE_TO_CONNECT_TO_STREAM before any loop succeeded,
  else LOST_CONTACT_WITH_STREAM or the error's own state); `healthinessThreshold` successes in a row make it
  healthy again;
- runs whose tasks fail `taskUnhealthinessThreshold` times in a row make it UNHEALTHY_TASKS;
  `taskHealthinessThreshold` successful runs in a row make it healthy again.
Below a threshold the state stays what it was: one failed loop is not yet an unhealthy datasource.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from ingest_core.core.compaction import SegmentHealth, find_candidates, interval_stats
from ingest_core.core.errors import (
    BrokerUnavailableError,
    DependencyUnavailableError,
    IngestError,
    RunExpiredError,
    SpecError,
    SpecProblem,
)
from ingest_core.core.loss import RecordsLost, lost_per_partition
from ingest_core.core.offsets import TopicPartition
from ingest_core.core.periods import format_datetime
from ingest_core.core.spec import (
    DatasourceSpec,
    HealthConfig,
    find_spec_files,
    load_spec,
)
from ingest_core.core.states import LOOP_ERROR, LOOP_IDLE, State, effective_state, stored_state
from ingest_core.executor import buckets
from ingest_core.handover import deep_storage
from ingest_core.handover.report import (
    GroupFailure,
    GroupProgress,
    GroupReport,
    ServiceProblem,
    latest_split_reports,
)
from ingest_core.kafka.offset_reader import KafkaOffsetReader
from ingest_core.kafka.storage_secrets import use_deep_storage
from ingest_core.query.system_tables import SupervisorRow
from ingest_core.store.audit import RECORDS_LOST, SKIP, losses, skipped_records
from ingest_core.core.states import RunStatus
from ingest_core.store.metadata import MetadataStore
from ingest_core.store.records import AuditRecord, RunRecord
from ingest_core.store.schema import utcnow
from ingest_core.store.reader import DatasourceReader
from ingest_core.store.records import PublishedFigures, run_succeeded
from ingest_core.store.segment_schema import new_columns as first_seen
from ingest_core.supervisor.planning import spec_for

MAX_RECENT_ERRORS = 10


@dataclass(frozen=True)
class Outcome:
    """One supervisor loop or one run's tasks: when, and whether it succeeded."""

    at: datetime
    ok: bool


def is_healthy(outcomes: Iterable[Outcome], unhealthy_after: int, healthy_after: int) -> bool:
    """Druid's hysteresis: healthy until `unhealthy_after` failures in a row, then unhealthy until
    `healthy_after` successes in a row."""
    healthy, streak_ok, streak_failed = True, 0, 0
    for outcome in sorted(outcomes, key=lambda o: o.at):
        if outcome.ok:
            streak_ok, streak_failed = streak_ok + 1, 0
            if not healthy and streak_ok >= healthy_after:
                healthy = True
        else:
            streak_ok, streak_failed = 0, streak_failed + 1
            if healthy and streak_failed >= unhealthy_after:
                healthy = False
    return healthy


@dataclass(frozen=True)
class RecentError:
    timestamp: datetime
    error_class: str
    message: str
    stream_exception: bool
    run_id: str | None = None
    group_id: int | None = None  # a failed task group's error: `failure` says which records, and why
    failure: GroupFailure | None = None
    lost: RecordsLost | None = None  # records the main line moved past unread: which, and why
    service: ServiceProblem | None = None  # a service a decoder needed that did not answer (a schema registry)
    # a remote dependency that did not answer: {"dependency", "endpoint", "deadlineSeconds"} (docs/deadlines.md)
    dependency: Mapping[str, Any] | None = None
    code: str | None = None  # the error's stable code (docs/errors.md)

    @property
    def title(self) -> str:
        """What went wrong, for people: `[code] type`, as Spark prints an error condition."""
        return f"[{self.code}] {self.error_class}" if self.code else self.error_class

    def to_json(self) -> dict[str, Any]:
        out = {"timestamp": format_datetime(self.timestamp), "exceptionClass": self.error_class,
               "message": self.message, "streamException": self.stream_exception}
        if self.dependency is not None:
            out |= dict(self.dependency)
        if self.code is not None:
            out["code"] = self.code
        if self.run_id is not None:
            out["runId"] = self.run_id
        if self.failure is not None:
            out |= {"taskGroup": self.group_id, **self.failure.to_json()}
            out["exceptionClass"], out["message"] = self.error_class, self.message
        if self.lost is not None:
            out |= {"cause": self.lost.cause.value, "lostRecords": self.lost.records,
                    "lostRanges": [r.to_json() for r in self.lost.ranges]}
        if self.service is not None:
            out |= {"service": self.service.service, "url": self.service.url,
                    "unparseableRecords": self.service.records}
        return out


def service_errors(run: RunRecord, problems: Sequence[ServiceProblem]) -> list[RecentError]:
    """A run's services that did not answer (a schema registry), each named with the records it left
    unparseable: the run itself succeeded, so nothing else in status would say why those rows are missing."""
    at = run.published_at or run.created_at
    return [RecentError(at, "ServiceUnavailable", f"run {run.run_id}: {p.service} {p.url} did not answer; "
                                                  f"{p.records} records unparseable. {p.message}",
                        False, run.run_id, service=p) for p in problems]


def run_problems(reports: Sequence[GroupReport]) -> list[ServiceProblem]:
    """The services that did not answer in a run's published task groups (the kept reports)."""
    out: list[ServiceProblem] = []
    for report in reports:
        if report.succeeded:
            ServiceProblem.merge(out, report.problems)
    return out


def loss_errors(records: Sequence[AuditRecord]) -> list[RecentError]:
    """Each move past unread records (audit `records_lost`) as a recent error: loud, with its ranges."""
    return [RecentError(a.created_at, "RecordsLost", event.describe(), False, event.run_id, lost=event)
            for a, event in zip(records, losses(records))]


def run_errors(run: RunRecord, failures: Sequence[GroupReport]) -> list[RecentError]:
    """A failed run's recent errors: one per task group that failed, with its exception, offset ranges and (when
    maxParseExceptions stopped it) the limit, the count and the last parse exception; the run's own error when
    no group's report says more (an expired run, a run whose report was never kept)."""
    at = run.expired_at or run.published_at or run.created_at
    out = [RecentError(at, r.failure.error_class, f"run {run.run_id} task group {r.group_id}: {r.failure.message}",
                       False, run.run_id, r.group_id, r.failure, code=r.failure.code)
           for r in sorted(failures, key=lambda r: r.group_id) if r.failure is not None]
    if run.expired or not out:
        name, message = "RunExpired" if run.expired else "RunFailed", f"run {run.run_id}: {run.error}"
        code = RunExpiredError.code if run.expired else IngestError.code
        # a run that failed whole (killed, expired) did not ingest any of its planned ranges
        ranges = tuple(p.range for g in run.plan.groups if not g.is_empty for p in g.partitions
                       ) if run.status.failed else ()
        out.append(RecentError(at, name, message, False, run.run_id, None,
                               GroupFailure(code, name, message, ranges) if ranges else None, code=code))
    return out


@dataclass(frozen=True)
class RunSummary:
    run_id: str
    status: str
    records: int
    created_at: datetime
    published_at: datetime | None
    row_stats: dict[str, int]
    error: str | None
    deadline_at: datetime | None = None
    expired_at: datetime | None = None
    published: PublishedFigures | None = None  # as its publish recorded them

    def to_json(self) -> dict[str, Any]:
        def fmt(when: datetime | None) -> str | None:
            return format_datetime(when) if when else None
        return {"runId": self.run_id, "status": self.status, "records": self.records,
                "createdAt": fmt(self.created_at), "publishedAt": fmt(self.published_at),
                "deadline": fmt(self.deadline_at), "expiredAt": fmt(self.expired_at),
                "published": self.published.to_json() if self.published else None,
                "rowStats": self.row_stats, "error": self.error}


@dataclass(frozen=True)
class StatusReport:
    datasource: str
    stream: str
    state: str
    detailed_state: str
    healthy: bool
    suspended: bool
    terminated: bool
    committed: dict[TopicPartition, int]
    latest: dict[TopicPartition, int] | None  # None: the broker did not answer
    offsets_last_updated: datetime | None
    recent_errors: list[RecentError] = field(default_factory=list)
    recent_runs: list[RunSummary] = field(default_factory=list)
    generated_at: datetime | None = None
    active: dict[str, list[GroupProgress]] = field(default_factory=dict)  # run id -> its groups, while running
    skipped: dict[TopicPartition, int] = field(default_factory=dict)  # records `ingest skip` skipped: lost
    lost: dict[TopicPartition, int] = field(default_factory=dict)  # every record lost, whatever the cause
    segments: SegmentHealth | None = None  # per interval, and what compaction has left to do
    new_columns: NewColumns | None = None  # columns the latest published run brought (schema discovery)
    spec_warnings: tuple[SpecProblem, ...] = ()  # the current spec's (an ignored unknown field, a batch no-op)
    # the remote dependencies that did not answer this status read (the broker, deep storage), as RecentErrors
    unavailable: tuple[RecentError, ...] = ()

    @property
    def lost_records(self) -> int:
        return sum(self.lost.values())

    @property
    def lag(self) -> dict[TopicPartition, int] | None:
        """Records between what is committed and the latest offset, per partition (nothing committed: all)."""
        if self.latest is None:
            return None
        return {tp: max(0, hi - self.committed.get(tp, 0)) for tp, hi in self.latest.items()}

    @property
    def aggregate_lag(self) -> int | None:
        lag = self.lag
        return None if lag is None else sum(lag.values())

    def _keyed(self, offsets: dict[TopicPartition, int] | None) -> dict[str, int] | None:
        """Druid's keys: the partition number for one topic, `topic:partition` for a topicPattern."""
        if offsets is None:
            return None
        topics = {tp.topic for tp in [*self.committed, *(self.latest or {})]}
        return {(str(tp.partition) if len(topics) <= 1 else f"{tp.topic}:{tp.partition}"): v
                for tp, v in sorted(offsets.items())}

    def to_json(self) -> dict[str, Any]:
        partitions = len(set(self.committed) | set(self.latest or {}))
        return {
            "id": self.datasource,
            "generationTime": format_datetime(self.generated_at) if self.generated_at else None,
            "payload": {
                "dataSource": self.datasource, "stream": self.stream, "partitions": partitions,
                "currentOffsets": self._keyed(self.committed), "latestOffsets": self._keyed(self.latest),
                "minimumLag": self._keyed(self.lag), "aggregateLag": self.aggregate_lag,
                "offsetsLastUpdated": format_datetime(self.offsets_last_updated) if self.offsets_last_updated else None,
                "suspended": self.suspended, "terminated": self.terminated, "healthy": self.healthy,
                "state": self.state, "detailedState": self.detailed_state,
                "recentErrors": [e.to_json() for e in self.recent_errors],
                "skippedRecords": self._keyed(self.skipped) if self.skipped else {},
                "lostRecords": self.lost_records,
                "lostRecordsByPartition": self._keyed(self.lost) if self.lost else {},
                "recentRuns": [r.to_json() for r in self.recent_runs],
                "activeTasks": [{"id": f"{run_id}/group={g.group_id}", "runId": run_id, **g.to_json()}
                                for run_id, groups in self.active.items() for g in groups],
                "segments": self.segments.to_json() if self.segments else None,
                "newColumns": self.new_columns.to_json() if self.new_columns else None,
                "specWarnings": [str(w) for w in self.spec_warnings],
                "unavailableDependencies": [{**(e.dependency or {}), "message": e.message} for e in self.unavailable],
            },
        }


@dataclass(frozen=True)
class NewColumns:
    """The columns first seen in the latest published run, with their types (`store.segment_schema`)."""

    run_id: str
    columns: dict[str, str]

    def to_json(self) -> dict[str, Any]:
        return {"runId": self.run_id, "columns": self.columns}

    def describe(self) -> str:
        return f"{', '.join(f'{n} {t}' for n, t in self.columns.items())} (first seen in run {self.run_id})"


def new_columns(store: MetadataStore, name: str, runs: Sequence[RunRecord]) -> NewColumns | None:
    """The latest published run's new columns; None when it brought none (or nothing is published)."""
    published = [r for r in runs if r.status is RunStatus.PUBLISHED and r.published_at is not None]
    if not published:
        return None
    latest = max(published, key=lambda r: r.published_at)
    columns = first_seen(store.segment_records.of(name, used_only=False), latest.run_id)
    return NewColumns(latest.run_id, columns) if columns else None


def build_status(*, datasource: str, stream: str, row: dict | None, committed: dict[TopicPartition, int],
                 latest: dict[TopicPartition, int] | None, offsets_last_updated: datetime | None,
                 runs: Sequence[RunRecord], row_stats: dict[str, dict[str, int]], loop_errors: Sequence[AuditRecord],
                 thresholds: HealthConfig, broker_error: str | None = None,
                 now: datetime | None = None, active: dict[str, list[GroupProgress]] | None = None,
                 failures: Mapping[str, Sequence[GroupReport]] | None = None,
                 skipped: Mapping[TopicPartition, int] | None = None,
                 lost: Sequence[AuditRecord] = (), segments: SegmentHealth | None = None,
                 new_columns: NewColumns | None = None,
                 problems: Mapping[str, Sequence[ServiceProblem]] | None = None,
                 spec_warnings: Sequence[SpecProblem] = (),
                 unavailable: Sequence[DependencyUnavailableError] = (),
                 idle_loops: Sequence[AuditRecord] = ()) -> StatusReport:
    """`failures`: the failed task groups' reports, by run id; `skipped`: records skipped by `ingest skip`, per
    partition (lost on purpose); `lost`: every `records_lost` audit record (counted, the recent ones shown as
    errors); `broker_error`: why the latest offsets are unknown; `unavailable`: the dependencies that did not
    answer this read (the broker's error among them); `idle_loops`: successful loops that left no run record (a
    data gate that ended its run with nothing new, `supervisor.gate.end_idle`)."""
    stored = stored_state(row["state"], row["detailed_state"]) if row else stored_state(None, None)
    suspended, terminated = stored[0] is State.SUSPENDED, stored[0] is State.TERMINATED

    loops = [Outcome(r.created_at, True) for r in runs] + [Outcome(a.created_at, False) for a in loop_errors]
    loops += [Outcome(a.created_at, True) for a in idle_loops]
    tasks = [Outcome(r.published_at or r.created_at, ok) for r in runs if (ok := run_succeeded(r)) is not None]
    supervisor_ok = is_healthy(loops, thresholds.unhealthiness_threshold, thresholds.healthiness_threshold)
    tasks_ok = is_healthy(tasks, thresholds.task_unhealthiness_threshold, thresholds.task_healthiness_threshold)

    last_error = max(loop_errors, key=lambda a: a.created_at).details.get("detailedState") if loop_errors else None
    state, detail = effective_state(stored, supervisor_ok=supervisor_ok, tasks_ok=tasks_ok, last_loop_error=last_error)

    errors = [RecentError(a.created_at, a.details.get("errorClass", "IngestError"), a.details.get("error", ""),
                          bool(a.details.get("streamException")), dependency=a.details.get("dependency"),
                          code=a.details.get("code"))
              for a in loop_errors]
    errors += [e for r in runs if run_succeeded(r) is False for e in run_errors(r, (failures or {}).get(r.run_id, ()))]
    errors += loss_errors(lost)
    errors += [e for r in runs for e in service_errors(r, (problems or {}).get(r.run_id, ()))]
    down = [RecentError(now or utcnow(), type(e).__name__, str(e), isinstance(e, BrokerUnavailableError),
                        dependency=e.to_json(), code=e.code) for e in unavailable]
    errors += down
    if broker_error and not any(isinstance(e, BrokerUnavailableError) for e in unavailable):
        errors.append(RecentError(now or utcnow(), "BrokerUnavailableError", broker_error, True,
                                  code=BrokerUnavailableError.code))
    errors.sort(key=lambda e: e.timestamp, reverse=True)

    recent = [RunSummary(r.run_id, r.status.value, r.plan.records, r.created_at, r.published_at,
                         row_stats.get(r.run_id, {}), r.error, r.deadline_at, r.expired_at, r.published) for r in runs]
    return StatusReport(datasource, stream, state, detail, supervisor_ok and tasks_ok and not terminated,
                        suspended, terminated, committed, latest, offsets_last_updated,
                        errors[:MAX_RECENT_ERRORS], recent, now, active or {}, dict(skipped or {}),
                        lost_per_partition(losses(lost)), segments, new_columns, tuple(spec_warnings), tuple(down))


def specs_in(dags_folder: str | Path | None) -> dict[str, DatasourceSpec]:
    """The specs of a DAG folder that load, by datasource (read once per command or request)."""
    specs: dict[str, DatasourceSpec] = {}
    if dags_folder is not None and Path(dags_folder).is_dir():
        for path in find_spec_files(dags_folder):
            try:
                spec = load_spec(path)
            except SpecError:
                continue
            if spec.datasource not in specs:
                specs[spec.datasource] = spec
                use_deep_storage(spec)  # this command reads its deep storage with the spec's settings
    return specs


def collect_progress(spec: DatasourceSpec, run: RunRecord) -> list[GroupProgress]:
    """A running run's groups, from the reports its splits leave in deep storage as they read (the replica
    and attempt that read most)."""
    base = deep_storage.base_for(spec)
    out = []
    for group in run.plan.groups:
        if group.is_empty:
            continue
        ranges = [(r.start, r.end) for r in group.splits]
        best = None
        folders = [uri for replica in range(spec.io_config.replicas) for uri in deep_storage.attempt_folders(
            deep_storage.group_uri(base, spec.datasource, run.run_id, group.group_id, replica))]
        for folder in folders:
            reports, done = latest_split_reports(folder)
            progress = GroupProgress.from_splits(group.group_id, ranges, reports, done)
            if best is None or progress.records > best.records:
                best = progress
        out.append(best or GroupProgress.from_splits(group.group_id, ranges, {}, set()))
    return out


def segment_health(store: MetadataStore, name: str, spec: DatasourceSpec | None) -> SegmentHealth:
    """The visible segments per interval, and with the spec's compaction, what is left to compact."""
    visible = DatasourceReader(store, name).segments()
    search = None
    if spec is not None and spec.compaction is not None and spec.compaction.enabled:
        c = spec.compaction
        search = find_candidates(visible, granularity=c.granularity_spec.segment_granularity
                                 or spec.data_schema.granularity_spec.segment_granularity,
                                 target_rows=c.target_rows, skip_offset=c.skip_offset_from_latest,
                                 bucket=buckets.bucket)
    return SegmentHealth(interval_stats(visible), search)


@dataclass(frozen=True)
class BrokerView:
    """What the broker said for one datasource's status: its latest offsets, or why they are unknown."""

    stream: str
    latest: dict[TopicPartition, int] | None = None
    error: str | None = None
    unavailable: BrokerUnavailableError | None = None  # `error` when the broker did not answer


def read_broker(spec: DatasourceSpec | None, kafka_timeout_s: float) -> BrokerView:
    """The latest offsets of `spec`'s partitions, each call to the broker within `kafka_timeout_s`."""
    if spec is None:
        return BrokerView("?", error="no spec found for this datasource: latest offsets and lag are unknown")
    io = spec.io_config
    stream = io.topic or io.topic_pattern or "?"
    try:
        reader = KafkaOffsetReader.for_spec(spec, timeout_s=kafka_timeout_s)
        try:
            return BrokerView(stream, latest=reader.latest(reader.partitions(topic=io.topic, pattern=io.topic_pattern)))
        finally:
            reader.close()
    except BrokerUnavailableError as exc:
        return BrokerView(stream, error=str(exc), unavailable=exc)
    except IngestError as exc:
        return BrokerView(stream, error=str(exc))


def collect_statuses(store: MetadataStore, names: Sequence[str], specs: dict[str, DatasourceSpec], *,
                     kafka_timeout_s: float = 10.0) -> list[StatusReport]:
    """The status of each datasource in `names`. Their brokers are asked at once, so datasources waiting on the
    same dead broker wait together: the whole read costs one `kafka_timeout_s`, not one per datasource."""
    chosen = {name: spec_for(store, name, specs) for name in names}
    if not chosen:
        return []
    with ThreadPoolExecutor(max_workers=min(len(chosen), 16), thread_name_prefix="status-broker") as pool:
        views = dict(zip(chosen, pool.map(lambda spec: read_broker(spec, kafka_timeout_s), chosen.values())))
    return [collect_status(store, name, chosen[name], broker=views[name]) for name in names]


def collect_status(store: MetadataStore, name: str, spec: DatasourceSpec | None, *, runs_limit: int = 10,
                   kafka_timeout_s: float = 10.0, broker: BrokerView | None = None) -> StatusReport:
    """Read what `build_status` needs: the metadata store, and the latest offsets from the broker (`broker`:
    already read)."""
    store.runs.expire_overdue(name, utcnow(), "a status read")  # cheap when nothing is overdue
    read = _store_read(store, name, spec, runs_limit)
    runs = read["runs"]
    view = broker if broker is not None else read_broker(spec, kafka_timeout_s)
    unavailable: list[DependencyUnavailableError] = [view.unavailable] if view.unavailable else []
    try:
        active = {r.run_id: collect_progress(spec, r) for r in runs
                  if spec is not None and r.status is RunStatus.RUNNING}
    except DependencyUnavailableError as exc:  # deep storage: the runs' progress is unknown, the rest is not
        active = {}
        unavailable.append(exc)
    problems = {r.run_id: run_problems(store.reports.of(name, r.run_id))  # only runs with unparseable rows
                for r in runs if read["row_stats"].get(r.run_id, {}).get("unparseable")}
    return build_status(**read, stream=view.stream, latest=view.latest, broker_error=view.error, active=active,
                        segments=segment_health(store, name, spec), new_columns=new_columns(store, name, runs),
                        problems=problems, unavailable=unavailable)


def store_status(store: MetadataStore, name: str, spec: DatasourceSpec | None, *,
                 runs_limit: int = 10) -> StatusReport:
    """The status as the metadata store alone has it, changing nothing: the state, health and recent errors that
    `collect_status` reports, without asking the broker (latest offsets, lag: unknown) or deep storage (running
    runs' progress, segment health), and without expiring an overdue run (the next status read or supervisor
    cycle does). What SQL's `sys.supervisors` lists."""
    io = spec.io_config if spec is not None else None
    stream = (io.topic or io.topic_pattern or "?") if io is not None else "?"
    return build_status(**_store_read(store, name, spec, runs_limit), stream=stream, latest=None)


def _store_read(store: MetadataStore, name: str, spec: DatasourceSpec | None, runs_limit: int) -> dict[str, Any]:
    """`build_status`'s arguments that the metadata store holds."""
    row = store.datasources.require(name)
    runs = store.runs.recent(name, limit=runs_limit)
    stats = {run.run_id: store.reports.row_stats(name, run.run_id) for run in runs}
    thresholds = spec.microbatch.health if spec else HealthConfig()
    window = max(thresholds.unhealthiness_threshold + thresholds.healthiness_threshold, MAX_RECENT_ERRORS)
    return dict(datasource=name, row=row, committed={tp: k.offset for tp, k in store.offsets.committed(name).items()},
                offsets_last_updated=store.offsets.last_updated(name), runs=runs, row_stats=stats,
                loop_errors=store.audit_log.records(name, action=LOOP_ERROR, limit=window), thresholds=thresholds,
                idle_loops=store.audit_log.records(name, action=LOOP_IDLE, limit=window),
                now=utcnow(), failures={r.run_id: [t for t in store.reports.of(name, r.run_id) if not t.succeeded]
                                        for r in runs if run_succeeded(r) is False},
                skipped=skipped_records(store.audit_log.records(name, action=SKIP)),
                lost=store.audit_log.records(name, action=RECORDS_LOST),
                spec_warnings=spec.warnings if spec is not None else ())


def supervisor_rows(store: MetadataStore, names: Sequence[str],
                    specs: dict[str, DatasourceSpec]) -> list[SupervisorRow]:
    """SQL's `sys.supervisors` rows of `names` (`store_status`); `specs`: the DAG folder's (`specs_in`)."""
    rows = []
    for name in names:
        report = store_status(store, name, spec_for(store, name, specs))
        history = store.datasources.spec_history(name)
        rows.append(SupervisorRow(name, report.state, report.detailed_state, report.healthy, report.stream,
                                  report.suspended, history[-1]["spec"] if history else None))
    return rows
