"""What the metadata store returns: the statuses of runs and task groups, and the records of runs, segments and
audit entries (plain values, no SQL)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ingest_core.core.periods import format_datetime
from ingest_core.core.planner import Plan
from ingest_core.core.states import GroupStatus, RunStatus


@dataclass(frozen=True)
class PublishedFigures:
    """What a run published, recorded by its publish in the same transaction and never recomputed: compaction
    rewrites and kill removes its segments, not what it did. `records`: Kafka offsets of the task groups it
    published (an estimate of records: compaction and transaction markers leave gaps); `rows`: rows after
    rollup; `segments` and their `bytes`."""

    records: int
    rows: int
    segments: int
    bytes: int

    def to_json(self) -> dict[str, int]:
        return {"records": self.records, "rows": self.rows, "segments": self.segments, "bytes": self.bytes}


@dataclass(frozen=True)
class RunRecord:
    datasource: str
    run_id: str
    seq: int
    status: RunStatus
    plan: Plan
    created_at: datetime
    published_at: datetime | None
    superseded_by: str | None
    error: str | None
    running_since: datetime | None = None
    deadline_at: datetime | None = None  # None: no deadline (backfills; runs planned before schema v3)
    expired_at: datetime | None = None  # when it expired (EXPIRED)
    published: PublishedFigures | None = None  # None until it publishes

    @property
    def expired(self) -> bool:
        return self.status is RunStatus.EXPIRED

    @property
    def is_final(self) -> bool:
        """Nothing changes it any more: published, superseded or expired (no retry revives it)."""
        return self.status.is_final

    def past_deadline(self, now: datetime) -> bool:
        """In flight at `now` past its deadline: it will never publish (Druid kills such a task group)."""
        return self.status.in_flight and self.deadline_at is not None and now >= self.deadline_at

    def expiry_reason(self, now: datetime) -> str:
        start = self.running_since or self.created_at
        since = (f"RUNNING since {format_datetime(start)}" if self.running_since
                 else f"PLANNED at {format_datetime(start)} and its jobs never started")
        timeout = (self.deadline_at - start).total_seconds() if self.deadline_at else 0
        return (f"expired: run {self.run_id} was {since}, past completionTimeout ({timeout:g}s, deadline "
                f"{format_datetime(self.deadline_at) if self.deadline_at else '-'}) at {format_datetime(now)}; it "
                "will not publish and its partitions go back to the committed offsets")


@dataclass(frozen=True)
class GroupOutline:
    """A run's task group as the store keeps it: its status, and when that last changed."""

    group_id: int
    status: GroupStatus
    records: int
    updated_at: datetime


@dataclass(frozen=True)
class RunOutline:
    """A run without its plan (megabytes at many partitions), with its task groups: what Druid's `sys.tasks`
    lists (`query.system_tables`)."""

    datasource: str
    run_id: str
    status: RunStatus
    created_at: datetime
    updated_at: datetime
    running_since: datetime | None
    published_at: datetime | None
    expired_at: datetime | None
    error: str | None
    groups: tuple[GroupOutline, ...] = ()


@dataclass(frozen=True)
class SegmentRecord:
    id: str
    datasource: str
    interval_start: datetime
    interval_end: datetime
    version: str
    partition_num: int
    location: str
    num_rows: int
    size_bytes: int
    used: bool
    run_id: str
    group_id: int
    start_offsets: dict
    end_offsets: dict
    created_at: datetime
    payload: dict
    used_status_last_updated: datetime | None = None  # when `used` last changed (kill waits a while after)


@dataclass(frozen=True)
class AuditRecord:
    datasource: str
    action: str
    actor: str
    details: dict
    created_at: datetime


@dataclass(frozen=True)
class DeadLetterFileRecord:
    """A published run's dead-letter file (`handover.dead_letters`): its records are the run's dead letters."""

    datasource: str
    location: str
    run_id: str
    group_id: int
    replica: int
    records: int
    size_bytes: int
    publish_seq: int  # per datasource, in publish order: the dead-letter topic's delivery marker
    created_at: datetime


def run_succeeded(run: RunRecord) -> bool | None:
    """A run's tasks: True when it published every group, False when it failed or published with failed
    groups, None while in flight or when superseded (another run's doing, not its tasks')."""
    if run.status is RunStatus.PUBLISHED:
        return run.error is None
    if run.status.failed:
        return False
    return None
