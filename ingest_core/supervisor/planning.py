"""One supervisor loop's planning step, with its I/O: discover, resolve starts, snapshot ends, plan, persist.

The pure work happens in `offsets.resolve_start_offsets` and `planner.plan_run`; this module only gathers
their inputs from Kafka and the metadata store and persists the result. A run id's plan is persisted before
any job starts; asking again for the same run id returns the persisted plan unchanged, so retries, clears
and backfills re-execute exactly what was planned.

Supervisor states (Druid's vocabulary, shown by `ingest status`) and their transitions:
`ingest_core.core.states`. A failed loop is recorded here (audit `loop_error`); `status` derives
UNHEALTHY_SUPERVISOR from a run of them.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Iterator, Mapping

from ingest_core.core.errors import BrokerUnavailableError, DependencyUnavailableError, IngestError, SpecError
from ingest_core.core.offsets import (
    StartOffset,
    StartResolution,
    StartSource,
    TopicPartition,
    offsets_to_json,
    pending_records,
    resolve_start_offsets,
)
from ingest_core.core.planner import FUTURE_TOLERANCE, Plan, PlanRequest, plan_run
from ingest_core.core.spec import DatasourceSpec, parse_spec
from ingest_core.core.states import (
    FIRST_LOOP_STATES,
    LOOP_ERROR,
    Event,
    RunEvent,
    loop_error_state,
)
from ingest_core.kafka.offset_reader import KafkaOffsetReader, OffsetSnapshot
from ingest_core.kafka.storage_secrets import use_deep_storage
from ingest_core.store.main_line import MainLine
from ingest_core.core.states import RunStatus
from ingest_core.store.metadata import MetadataStore
from ingest_core.store.records import RunRecord
from ingest_core.store.schema import utcnow

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PlanOptions:
    """Per-run planning inputs that are not in the spec."""

    end_time: datetime | None = None  # cap end offsets at the offsets at this time (data interval end)
    max_records: int | None = None  # overrides microbatch.maxRecordsPerRun
    now: datetime | None = None  # plan creation time; default: the wall clock


def plan_request(spec: DatasourceSpec, run_id: str, created_at: datetime, starts: Mapping[TopicPartition, StartOffset],
                 latest: Mapping[TopicPartition, int], **limits: Any) -> PlanRequest:
    """The planner's input for every run of `spec` (a loop's, a reset's backfill) from `starts` to `latest`: the
    spec's task count, assignment and split sizes. `limits`: the run's own `PlanRequest` fields
    (max_records_per_run, end_time and its offsets, future_after and its offsets); a backfill has none, it plans
    its whole range."""
    io, micro = spec.io_config, spec.microbatch
    return PlanRequest(datasource=spec.datasource, run_id=run_id, created_at=created_at, starts=starts, latest=latest,
                       task_count=io.task_count, multi_topic=io.topic_pattern is not None, assignment=micro.assignment,
                       max_records_per_split=micro.max_records_per_split,
                       min_splits_per_group=micro.min_splits_per_group, spec_fingerprint=spec.fingerprint(), **limits)


RUN_REPLANNED = "run_replanned"  # the audit action of `Supervisor.replan`


def restart_points(plan: Plan, lookup: Callable[[str], RunRecord | None]
                   ) -> tuple[dict[TopicPartition, StartOffset], set[str]]:
    """Where each partition of `plan` starts once the runs it continues from that will never publish are left
    out: a partition pipelined from such a run starts where that run started (walking back over every dead one);
    others keep their start. Returns the starts and the dead runs met."""
    starts, gone = {}, set()
    for p in plan.partitions:
        at = p
        while at.after_run is not None:
            before = lookup(at.after_run)
            if before is None or before.status.in_flight or before.status is RunStatus.PUBLISHED:
                break  # it may still publish, or did: the publish's compare-and-swap judges
            own = next((q for q in before.plan.partitions if q.tp == p.tp), None)
            if own is None:
                break
            gone.add(before.run_id)
            at = own
        starts[p.tp] = StartOffset(at.start, at.start_source, at.after_run, at.expected_commit)
    return starts, gone


class Supervisor:
    """One datasource's planning. `reader`: the caller's, used and left open; without one, each step that asks
    Kafka opens a reader of its own and closes it when done."""

    def __init__(self, spec: DatasourceSpec, store: MetadataStore, reader: KafkaOffsetReader | None = None):
        self.spec = spec
        self.store = store
        self._reader = reader

    @property
    def datasource(self) -> str:
        return self.spec.datasource

    @contextmanager
    def _kafka(self) -> Iterator[KafkaOffsetReader]:
        """The reader given to this supervisor (the caller's, kept open), else one of its own for one step,
        closed after it: its threads and its connections to the brokers."""
        if self._reader is not None:
            yield self._reader
            return
        reader = KafkaOffsetReader.for_spec(self.spec)
        try:
            yield reader
        finally:
            reader.close()

    def register(self) -> int:
        """Record the spec (redacted) in the spec history; returns its version."""
        return self.store.datasources.register_spec(self.datasource, self.spec.to_raw(), self.spec.fingerprint(), self.spec.source)

    @property
    def completion_timeout(self) -> timedelta:
        return self.spec.io_config.completion_timeout.to_timedelta()

    def expire_overdue(self, by: str, now: datetime | None = None) -> list[str]:
        """Runs in flight past their deadline will never publish (their process died, their report never ran):
        expire them, so nothing plans from their ends and the next run starts from the committed offsets."""
        now = now or utcnow()
        self.store.runs.set_missing_deadlines(self.datasource, now + self.completion_timeout)
        expired = self.store.runs.expire_overdue(self.datasource, now, by)
        for run_id in expired:
            log.warning("datasource %s: run %s is past its completionTimeout and expired (noticed by %s)",
                        self.datasource, run_id, by)
        return expired

    def plan(self, run_id: str, options: PlanOptions = PlanOptions()) -> RunRecord:
        """The persisted plan of `run_id`, planning and persisting it first if there is none."""
        with self.store.planning_lock(self.datasource):  # concurrent runs plan one after the other
            self.expire_overdue(f"the plan step of run {run_id}", options.now)
            existing = self.store.runs.get(self.datasource, run_id)
            if existing is not None:
                log.info("run %s of %s already has a plan (%s, %d records): reusing it", run_id, self.datasource,
                         existing.status.value, existing.plan.records)
                return existing
            plan = self.compute_plan(run_id, options)
            # a run whose jobs never start (its plan step died) expires too
            record, inserted = self.store.runs.insert(plan, deadline_at=plan.created_at + self.completion_timeout)
        if inserted:
            self._audit_resets(plan)
        return record

    def replan(self, run_id: str, now: datetime | None = None) -> RunRecord:
        """Plan a pipelined run again when a run it continues from will never publish (failed, expired,
        superseded): each such partition starts where the first of those dead runs started (the committed
        offset, or a live run's planned end), with the same end offsets, so a run pipelined from this one stays
        valid. Persisted (revision + 1, a new deadline, audited `run_replanned`) in one transaction under the
        planning lock and the lock every publish takes; failed predecessors are superseded by it, so a retry
        of theirs cannot publish the same offsets. The publish's compare-and-swap still decides: a re-plan that
        something overtook is refused as stale. Returns the run's record (unchanged when nothing is gone)."""
        now = now or utcnow()
        self.expire_overdue(f"the re-plan of run {run_id}", now)
        with MainLine.locked(self.store, self.datasource, planning_lock=True) as line:
            runs = self.store.runs
            record = runs.require(self.datasource, run_id, conn=line.conn)
            if not record.status.in_flight:
                return record
            starts, gone = restart_points(record.plan, lambda rid: runs.get(self.datasource, rid, conn=line.conn))
            if not gone:
                return record
            old = record.plan
            plan = replace(plan_run(plan_request(self.spec, run_id, old.created_at, starts, old.end_offsets())),
                           end_time=old.end_time, revision=old.revision + 1, topic_ids=old.topic_ids)
            dead = [runs.get(self.datasource, rid, conn=line.conn) for rid in sorted(gone)]
            failed = [r.run_id for r in dead if r.status is RunStatus.FAILED]  # may be retried
            for rid in failed:  # a retry of theirs must not publish what this run now reads
                runs.move(self.datasource, rid, RunEvent.SUPERSEDE, superseded_by=run_id, conn=line.conn,
                          error=f"its range was planned again by run {run_id}")
            record = runs.replace_plan(plan, deadline_at=now + self.completion_timeout, conn=line.conn)
            self.store.audit_log.write(self.datasource, RUN_REPLANNED, {
                "runId": run_id, "revision": plan.revision, "predecessors": sorted(gone), "supersededRuns": failed,
                "from": offsets_to_json(old.start_offsets()), "to": offsets_to_json(plan.start_offsets())},
                conn=line.conn)
        log.warning("datasource %s: run %s planned again from %s (revision %d): runs %s will never publish",
                    self.datasource, run_id, offsets_to_json(plan.start_offsets()), plan.revision, sorted(gone))
        return record

    def compute_plan(self, run_id: str, options: PlanOptions = PlanOptions()) -> Plan:
        micro = self.spec.microbatch
        future_after = datetime.now(timezone.utc) + FUTURE_TOLERANCE  # by the wall clock, not options.now
        snap, resolution, topic_ids = self._resolve(options.end_time, future_after)
        plan = plan_run(plan_request(
            self.spec, run_id, options.now or datetime.now(timezone.utc), resolution.starts, snap.latest,
            max_records_per_run=options.max_records if options.max_records is not None else micro.max_records_per_run,
            offsets_at_end_time=snap.at_time,
            end_time=options.end_time,
            future_after=future_after,
            offsets_at_future=snap.at_future,
            topic_ids=topic_ids,
        ))
        self.store.datasources.set_state(self.datasource, Event.PLANNED)
        return plan

    def pending(self) -> tuple[dict[TopicPartition, int], int]:
        """Where the next run would start, per partition, and how many records it would find now (the data
        gate's question)."""
        self.expire_overdue("the data gate")
        snap, resolution, _ = self._resolve(None)
        starts = {tp: s.offset for tp, s in resolution.starts.items()}
        return starts, pending_records(starts, snap.earliest, snap.latest)

    def _resolve(self, end_time: datetime | None, future_after: datetime | None = None
                 ) -> tuple[OffsetSnapshot, StartResolution, dict[str, str]]:
        """Discover partitions, snapshot their offsets and topic ids and resolve where each starts."""
        io = self.spec.io_config
        first_loop = self._first_loop()
        try:
            if first_loop:
                self.store.datasources.set_state(self.datasource, Event.CONNECTING)
            with self._kafka() as reader:
                tps = reader.partitions(topic=io.topic, pattern=io.topic_pattern)
                snap = reader.snapshot(tps, at=end_time, future_after=future_after if end_time else None,
                                       topic_ids=True)
                topic_ids = snap.topic_ids
            resolution = resolve_start_offsets(
                tps,
                datasource=self.datasource,
                inflight=self.store.runs.inflight_end_offsets(self.datasource),
                committed=self.store.offsets.committed(self.datasource),
                earliest=snap.earliest,
                latest=snap.latest,
                use_earliest=io.use_earliest_offset,
                reset_automatically=self.spec.tuning_config.reset_offset_automatically,
                topic_ids=topic_ids,
            )
        except IngestError as exc:  # e.g. an unreachable broker, a missing topic, offsets out of range
            self._record_loop_error(exc, first_loop)
            raise
        for reset in resolution.resets:
            log.warning("datasource %s partition %s: start offset %d is below the log start %d; "
                        "resetOffsetAutomatically moves it to %d (records in between are skipped or re-read)",
                        self.datasource, reset.tp, reset.from_offset, reset.earliest, reset.to_offset)
        return snap, resolution, topic_ids

    def _record_loop_error(self, exc: IngestError, first_loop: bool) -> None:
        """The failed loop goes to the audit log; `status` turns a run of them into UNHEALTHY_SUPERVISOR."""
        stream = isinstance(exc, BrokerUnavailableError)
        detailed = loop_error_state(stream, first_loop).value
        details = {"error": str(exc), "errorClass": type(exc).__name__, "code": exc.code,
                   "streamException": stream,
                   "detailedState": detailed}
        if isinstance(exc, DependencyUnavailableError):  # status names it: which, where, how long it was given
            details["dependency"] = exc.to_json()
        self.store.audit_log.write(self.datasource, LOOP_ERROR, details)

    def _first_loop(self) -> bool:
        row = self.store.datasources.get(self.datasource)
        return row is None or row["detailed_state"] in {s.value for s in FIRST_LOOP_STATES}

    def _audit_resets(self, plan: Plan) -> None:
        for p in plan.partitions:
            if p.start_source in (StartSource.RESET_EARLIEST, StartSource.RESET_LATEST):
                self.store.audit_log.write(self.datasource, "auto_reset", {
                    "runId": plan.run_id, "topic": p.tp.topic, "partition": p.tp.partition,
                    "fromOffset": p.expected_commit, "toOffset": p.start,
                    "reason": "start offset below the log start; tuningConfig.resetOffsetAutomatically is true",
                })

    def mark_failed(self, run_id: str, error: str) -> None:
        self.store.runs.move(self.datasource, run_id, RunEvent.FAIL, error=error)


def spec_for(store: MetadataStore, name: str, specs: dict[str, DatasourceSpec]) -> DatasourceSpec | None:
    """The datasource's spec: from the DAG folder's specs, else the last version registered in the metadata
    store (secrets there are references, resolved in this environment)."""
    if name in specs:
        return specs[name]
    history = store.datasources.spec_history(name)
    if not history:
        return None
    try:
        spec = parse_spec(history[-1]["spec"], f"<metadata store: {name} v{history[-1]['version']}>")
    except SpecError:
        return None
    use_deep_storage(spec)
    return spec
