"""The one place where ingested data becomes visible: the exactly-once publish of a run.

One metadata transaction:
  1. lock the datasource row (its `commit_version` is the compare-and-swap token);
  2. ask `core.commit_rules.decide` whether the run may commit onto what the store holds now (every partition
     starts where the committed offsets end, in order after the runs it continues from, and no offset it
     publishes was published already), then claim its ranges;
  4. insert the segment records, and the records of the published attempts' dead-letter files;
  5. advance the committed offsets to the run's planned end offsets (not a backfill's) and bump the
     `commit_version`: the move of the main line that operator actions make too (`main_line.MainLine`);
  6. mark the run and its task groups published (groups that failed keep their old offsets).
Publishing an already-published run is a no-op success. A run whose starts no longer match is stale: the
transaction writes nothing, the run is marked SUPERSEDED, and `StaleRunError` names the run that got there
first. A run past its deadline (completionTimeout) is refused too, and expires (`RunExpiredError`). Everything
else (jobs, retries, replicas) may fail and retry freely because this check refuses stale commits.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Sequence

import sqlalchemy as sa

from ingest_core.core.commit_rules import LineState, Predecessor, Proposal, decide
from ingest_core.core.errors import RunExpiredError, StaleRunError
from ingest_core.core.loss import LossCause, RecordsLost, read_by_partition, subtract
from ingest_core.core.offsets import OffsetRange, PublishedRange, offsets_to_json
from ingest_core.core.periods import format_datetime
from ingest_core.core.planner import PartitionPlan, Plan
from ingest_core.core.states import GroupStatus, RunEvent, RunStatus
from ingest_core.handover.report import DeadLetterFile, GroupReport
from ingest_core.store.audit import RESET, cleared_by_last_reset
from ingest_core.store.dead_letters import record_published
from ingest_core.store.engines import retry_transient
from ingest_core.store.main_line import MainLine
from ingest_core.store.metadata import MetadataStore
from ingest_core.store.offsets import claim_row
from ingest_core.store.records import PublishedFigures
from ingest_core.store.runs import published_columns
from ingest_core.store.schema import as_utc, published_ranges, segments, utcnow

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SegmentDescriptor:
    """A segment a Spark job wrote to deep storage (not yet visible)."""

    interval_start: datetime
    interval_end: datetime
    location: str
    num_rows: int
    size_bytes: int
    payload: dict = field(default_factory=dict)  # columns, min/max time, producing offset ranges, ...


@dataclass(frozen=True)
class GroupResult:
    """A task group whose job succeeded, with the segments it wrote."""

    group_id: int
    segments: Sequence[SegmentDescriptor]
    replica: int = 0
    dead_letters: Sequence[DeadLetterFile] = ()  # in the same attempt's folder as the segments

    @classmethod
    def from_report(cls, report: GroupReport) -> "GroupResult":
        """From a Spark job's group report; each segment's record keeps its report as payload."""
        if not report.succeeded:
            raise ValueError(f"task group {report.group_id} did not succeed: {report.error}")
        segs = [SegmentDescriptor(s.interval_start, s.interval_end, s.location, s.rows, s.bytes, payload=s.to_json())
                for s in report.segments]
        return cls(report.group_id, segs, report.replica, tuple(report.dead_letters))


@dataclass(frozen=True)
class PublishResult:
    run_id: str
    already_published: bool
    published_groups: tuple[int, ...]
    failed_groups: tuple[int, ...]
    segment_ids: tuple[str, ...]
    rows: int
    end_offsets: dict
    commit_version: int | None


def segment_id(datasource: str, start: datetime, end: datetime, version: str, partition_num: int) -> str:
    """Druid's segment id: dataSource_start_end_version[_partitionNum]."""
    base = f"{datasource}_{format_datetime(start)}_{format_datetime(end)}_{version}"
    return base if partition_num == 0 else f"{base}_{partition_num}"


def claim_ranges(conn: sa.Connection, datasource: str, ranges: list[OffsetRange], run_id: str, *, backfill: bool,
                 claims: list[PublishedRange]) -> None:
    """Record what a publish makes visible, inside its transaction (`claims`: the datasource's current ones, none
    overlapping `ranges`). A main-line range extends the main line's stretch that ends where it starts."""
    now = utcnow()
    stretch_ends = {(c.tp, c.end): c for c in claims if not c.backfill}
    for r in ranges:
        if not r.size:
            continue
        stretch = None if backfill else stretch_ends.get((r.tp, r.start))
        if stretch is not None:
            conn.execute(published_ranges.update().where(claim_row(datasource, stretch.tp, stretch.start))
                         .values(end_offset=r.end, run_id=run_id, updated_at=now))
        else:
            conn.execute(published_ranges.insert().values(
                datasource=datasource, topic=r.tp.topic, partition=r.tp.partition, start_offset=r.start,
                end_offset=r.end, run_id=run_id, backfill=backfill, updated_at=now))


class Publisher:
    def __init__(self, store: MetadataStore):
        self.store = store

    def publish(self, datasource: str, run_id: str, results: Sequence[GroupResult], *,
                now: datetime | None = None) -> PublishResult:
        """Publish, retried while the metadata store fails transiently (`engines.retry_transient`). A try whose
        commit went through but whose answer was lost is recognised by the next one: the run reads PUBLISHED,
        which is checked before the compare-and-swap, so it returns as already published, never as a
        conflict; a try that did not commit wrote nothing (one transaction), so the next one starts over."""
        return retry_transient(lambda: self._publish_once(datasource, run_id, results, now or utcnow()),
                               f"the publish of run {run_id} of {datasource!r}")

    def _publish_once(self, datasource: str, run_id: str, results: Sequence[GroupResult],
                      now: datetime) -> PublishResult:
        try:
            with MainLine.locked(self.store, datasource, planning_lock=False) as line:
                return self._publish(line, run_id, results, now)
        except RunExpiredError:
            # rolled back too; a run past its deadline expires for good (its own transaction)
            self.store.runs.expire_overdue(datasource, now, f"the publish of run {run_id}")
            raise
        except StaleRunError as exc:
            # The publish transaction rolled back; record why, so reruns and status can explain it.
            self.store.runs.move(datasource, run_id, RunEvent.SUPERSEDE, error=str(exc),
                                 superseded_by=exc.superseded_by)
            raise

    def _publish(self, line: MainLine, run_id: str, results: Sequence[GroupResult], now: datetime) -> PublishResult:
        conn, datasource, runs = line.conn, line.name, self.store.runs
        run = runs.require(datasource, run_id, conn=conn)
        plan = run.plan
        if run.status is RunStatus.PUBLISHED:
            log.info("run %s of %s is already published: nothing to do", run_id, datasource)
            return self._replay_result(conn, plan)
        if run.status is RunStatus.SUPERSEDED:
            raise StaleRunError(
                f"run {run_id} of {datasource!r} was superseded by run {run.superseded_by}: {run.error or ''}".strip(),
                run_id=run_id, superseded_by=run.superseded_by)
        if run.expired or run.past_deadline(now):  # too late: any planner may expire it and re-plan its range
            reason = run.error if run.expired else run.expiry_reason(now)
            raise RunExpiredError(f"run {run_id} of {datasource!r} was not published: {reason}", run_id=run_id)

        by_group = {r.group_id: r for r in results}
        committed = line.committed()
        claims = self.store.offsets.claims(datasource, conn=conn)
        state = LineState(datasource, committed, claims, self._predecessors(conn, datasource, plan))
        decision = decide(Proposal(plan, frozenset(by_group)), state)
        publishing, failed, parts = decision.publishing, decision.failed, decision.proposal.parts
        ranges = list(decision.ranges)
        claim_ranges(conn, datasource, ranges, run_id, backfill=plan.is_backfill, claims=claims)

        seg_ids: list[str] = []
        rows = size = 0
        version = format_datetime(plan.created_at)
        for g in publishing:
            group_start = offsets_to_json({p.tp: p.start for p in g.partitions})
            group_end = offsets_to_json({p.tp: p.end for p in g.partitions})
            for seg in by_group[g.group_id].segments if g.group_id in by_group else ():
                sid, seg_version, num, start, end = self._allocate(conn, datasource, seg, version)
                conn.execute(segments.insert().values(
                    id=sid, datasource=datasource, interval_start=start, interval_end=end,
                    version=seg_version, partition_num=num, location=seg.location, num_rows=seg.num_rows,
                    size_bytes=seg.size_bytes, used=True, run_id=run_id, group_id=g.group_id,
                    start_offsets=group_start, end_offsets=group_end, created_at=utcnow(), payload=seg.payload))
                seg_ids.append(sid)
                rows += seg.num_rows
                size += seg.size_bytes
        record_published(conn, datasource, run_id, [(g.group_id, by_group[g.group_id].replica, f)
                                                    for g in publishing if g.group_id in by_group
                                                    for f in by_group[g.group_id].dead_letters])

        new_offsets = {p.tp: p.end for p in parts}
        commit_version = None
        if not plan.is_backfill:  # the main line's offsets: compare-and-swap, advance (`decision.new_offsets`)
            for event in self._losses(line, run_id, parts, committed, claims):
                self.store.audit_log.write_loss(datasource, event, conn=conn)
            commit_version = line.move(new_offsets, by=run_id, topic_ids=plan.topic_ids).commit_version
        for g in publishing:
            status = GroupStatus.EMPTY if g.is_empty and g.group_id not in by_group else GroupStatus.PUBLISHED
            runs.set_group_status(datasource, run_id, g.group_id, status, conn=conn)
        for g in failed:
            runs.set_group_status(datasource, run_id, g.group_id, GroupStatus.FAILED, conn=conn)
        error = f"task groups {[g.group_id for g in failed]} failed; their partitions keep their offsets" if failed else None
        figures = PublishedFigures(sum(g.records for g in publishing), rows, len(seg_ids), size)
        runs.move(datasource, run_id, RunEvent.PUBLISH, error=error, conn=conn, **published_columns(figures))
        log.info("published run %s of %s: %d segments, %d rows, groups %s (failed: %s)", run_id, datasource,
                 len(seg_ids), rows, [g.group_id for g in publishing], [g.group_id for g in failed])
        return PublishResult(run_id, False, tuple(g.group_id for g in publishing), tuple(g.group_id for g in failed),
                             tuple(seg_ids), rows, offsets_to_json(new_offsets), commit_version)

    def _predecessors(self, conn: sa.Connection, datasource: str, plan: Plan) -> dict[str, Predecessor]:
        """The runs `plan`'s partitions continue from, as they stand now (`commit_rules.PublishesInOrder`)."""
        out = {}
        for run_id in {p.after_run for g in plan.groups for p in g.partitions if p.after_run}:
            run = self.store.runs.get(datasource, run_id, conn=conn)
            if run is not None:
                out[run_id] = Predecessor(run_id, run.status.value, run.status.in_flight,
                                          run.status is RunStatus.PUBLISHED, run.error)
        return out

    def _losses(self, line: MainLine, run_id: str, parts: list[PartitionPlan], committed: dict,
                claims: list[PublishedRange]) -> list[RecordsLost]:
        """What this publish moves the main line past without reading: a start reset above the offset it was
        reset from (resetOffsetAutomatically), or a first start above where the main line stood before a hard
        reset. Counted here, when the offsets really move, so a run that fails and is planned again counts once."""
        read = read_by_partition(claims)
        auto = [r for p in parts if p.expected_commit is not None and p.start > p.expected_commit
                for r in subtract(p.tp, p.expected_commit, p.start, read.get(p.tp, ()))]
        first = [p for p in parts if p.expected_commit is None and p.tp not in committed]
        cleared = cleared_by_last_reset(self.store.audit_log.records(line.name, action=RESET, limit=1,
                                                                     conn=line.conn)) if first else {}
        after_reset = [r for p in first if p.tp in cleared and p.start > cleared[p.tp]
                       for r in subtract(p.tp, cleared[p.tp], p.start, read.get(p.tp, ()))]
        return [RecordsLost(cause, tuple(ranges), run_id) for cause, ranges in
                ((LossCause.AUTO_RESET, auto), (LossCause.RESET, after_reset)) if ranges]

    @staticmethod
    def _allocate(conn: sa.Connection, datasource: str, seg: SegmentDescriptor,
                  run_version: str) -> tuple[str, str, int, datetime, datetime]:
        """Druid-style append: a segment joins the newest used set whose interval covers its own (its interval,
        or a coarser one that compaction made), taking that set's version and next partition number, so appends
        never overshadow each other and are never overshadowed. Returns (id, version, partition number,
        interval start, interval end)."""
        row = conn.execute(
            sa.select(segments.c.interval_start, segments.c.interval_end, segments.c.version,
                      sa.func.max(segments.c.partition_num).label("top"))
            .where((segments.c.datasource == datasource) & (segments.c.used == sa.true())
                   & (segments.c.interval_start <= seg.interval_start) & (segments.c.interval_end >= seg.interval_end))
            .group_by(segments.c.interval_start, segments.c.interval_end, segments.c.version)
            .order_by(segments.c.version.desc()).limit(1)
        ).first()
        if row is None:
            start, end, version, num = seg.interval_start, seg.interval_end, run_version, 0
        else:
            start, end, version, num = as_utc(row.interval_start), as_utc(row.interval_end), row.version, int(row.top) + 1
        return segment_id(datasource, start, end, version, num), version, num, start, end

    def _replay_result(self, conn: sa.Connection, plan: Plan) -> PublishResult:
        rows = conn.execute(sa.select(segments.c.id, segments.c.num_rows).where(
            (segments.c.datasource == plan.datasource) & (segments.c.run_id == plan.run_id))).all()
        statuses = self.store.runs.group_statuses(plan.datasource, plan.run_id, conn=conn)
        published = tuple(sorted(g for g, s in statuses.items() if s is not GroupStatus.FAILED))
        failed = tuple(sorted(g for g, s in statuses.items() if s is GroupStatus.FAILED))
        ends = {p.tp: p.end for g in plan.groups if g.group_id in published for p in g.partitions}
        return PublishResult(plan.run_id, True, published, failed, tuple(r.id for r in rows),
                             sum(int(r.num_rows) for r in rows), offsets_to_json(ends), None)
