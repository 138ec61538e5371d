"""The metadata store: committed offsets, segments, specs, runs, task reports and the audit log.

`MetadataStore` is the database (`database.Database`: engine, sessions, schema check and upgrade, planning
lock) with one repository per noun as attributes: `datasources` (state, spec history, the row lock), `runs`
(and task groups, deadlines, expiry), `offsets` (committed offsets and claimed ranges, read), `segment_records`,
`reports` (task reports) and `audit_log`. Its methods below are the names the rest of the code has always
used; each is one repository call. What moves the committed offsets is `main_line.MainLine`; the publish's own
SQL is in `publisher`.

Exactly-once rests on three things: each datasource row carries a `commit_version` that every move of its
committed offsets bumps with a compare-and-swap, that transaction locks the row first (`SELECT ... FOR UPDATE`
on PostgreSQL; SQLite transactions are `BEGIN IMMEDIATE`, so writers serialize on the database lock), and the
offset ranges every publish claims (`published_ranges`), which no other publish may overlap.

The tables, records and helpers are importable from here too, under the names code and tests have used.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy.engine import Connection

from ingest_core.core.offsets import KnownOffset, PublishedRange, TopicPartition
from ingest_core.core.planner import Plan
from ingest_core.core.states import GroupStatus, RunStatus
from ingest_core.handover.report import GroupReport
from ingest_core.store.audit import AuditLog
from ingest_core.store.database import Database
from ingest_core.store.datasources import Datasources
from ingest_core.store.dead_letters import DeadLetterFiles
from ingest_core.store.engines import make_engine, shared_engine
from ingest_core.store.offsets import Offsets
from ingest_core.store.records import AuditRecord, RunRecord, SegmentRecord
from ingest_core.store.runs import RUN_EXPIRED, Runs
from ingest_core.store.schema import (
    MIGRATIONS,
    SCHEMA_VERSION,
    as_utc,
    audit_log,
    datasources,
    dead_letter_files,
    meta,
    offsets,
    published_ranges,
    runs,
    schema_version,
    segments,
    specs,
    task_groups,
    task_reports,
    utcnow,
)
from ingest_core.store.segments import SegmentRecords
from ingest_core.store.task_reports import TaskReports

__all__ = [
    "MIGRATIONS", "RUN_EXPIRED", "SCHEMA_VERSION", "AuditRecord", "GroupStatus", "MetadataStore", "RunRecord",
    "RunStatus", "SegmentRecord", "as_utc", "audit_log", "datasources", "dead_letter_files", "make_engine", "meta", "offsets",
    "published_ranges", "runs", "schema_version", "segments", "specs", "task_groups", "task_reports", "utcnow",
]


class MetadataStore(Database):
    # The repositories are views over this database, made per use: a store keeps no reference cycle, so a
    # dropped one is freed at once, and its engine's connections with it.

    @property
    def datasources(self) -> Datasources:
        return Datasources(self)

    @property
    def runs(self) -> Runs:
        return Runs(self)

    @property
    def offsets(self) -> Offsets:
        return Offsets(self)

    @property
    def segment_records(self) -> SegmentRecords:
        return SegmentRecords(self)

    @property
    def dead_letter_files(self) -> DeadLetterFiles:
        return DeadLetterFiles(self)

    @property
    def reports(self) -> TaskReports:
        return TaskReports(self)

    @property
    def audit_log(self) -> AuditLog:
        return AuditLog(self)

    @classmethod
    def shared(cls, url: str) -> MetadataStore:
        """A store on this process's one engine for `url` (`engines.shared_engine`, disposed at exit): for
        code that opens the store per task or per request."""
        return cls(url, shared_engine(url))

    # ------------------------------------------------------------------------------------------ datasources

    def register_spec(self, name: str, spec_json: dict, fingerprint: str, source: str | None = None) -> int:
        return self.datasources.register_spec(name, spec_json, fingerprint, source)

    def spec_history(self, name: str) -> list[dict]:
        return self.datasources.spec_history(name)

    def datasource_row(self, name: str) -> dict | None:
        return self.datasources.get(name)

    def require_datasource(self, name: str) -> dict:
        return self.datasources.require(name)

    def list_datasources(self) -> list[dict]:
        return self.datasources.all()

    # ------------------------------------------------------------------------------------------ offsets

    def committed_offsets(self, name: str, *, conn: Connection | None = None) -> dict[TopicPartition, KnownOffset]:
        return self.offsets.committed(name, conn=conn)

    def offsets_last_updated(self, name: str) -> datetime | None:
        return self.offsets.last_updated(name)

    def published_ranges(self, name: str, *, conn: Connection | None = None) -> list[PublishedRange]:
        return self.offsets.claims(name, conn=conn)

    # ------------------------------------------------------------------------------------------ runs

    def insert_run(self, plan: Plan, *, deadline_at: datetime | None = None,
                   conn: Connection | None = None) -> tuple[RunRecord, bool]:
        return self.runs.insert(plan, deadline_at=deadline_at, conn=conn)

    def get_run(self, name: str, run_id: str, *, conn: Connection | None = None) -> RunRecord | None:
        return self.runs.get(name, run_id, conn=conn)

    def require_run(self, name: str, run_id: str, *, conn: Connection | None = None) -> RunRecord:
        return self.runs.require(name, run_id, conn=conn)

    def list_runs(self, name: str, limit: int | None = 20) -> list[RunRecord]:
        return self.runs.recent(name, limit)

    def last_active(self, name: str) -> datetime | None:
        return self.runs.last_active(name)

    def inflight_end_offsets(self, name: str) -> dict[TopicPartition, KnownOffset]:
        return self.runs.inflight_end_offsets(name)

    def start_run(self, name: str, run_id: str, timeout: timedelta | None, now: datetime | None = None) -> bool:
        return self.runs.start(name, run_id, timeout, now)

    def set_missing_deadlines(self, name: str, deadline: datetime) -> list[str]:
        return self.runs.set_missing_deadlines(name, deadline)

    def expire_overdue(self, name: str, now: datetime, by: str) -> list[str]:
        return self.runs.expire_overdue(name, now, by)

    def group_statuses(self, name: str, run_id: str) -> dict[int, GroupStatus]:
        return self.runs.group_statuses(name, run_id)

    # ------------------------------------------------------------------------------------------ segments, reports

    def segments(self, name: str, *, used_only: bool = True, run_id: str | None = None) -> list[SegmentRecord]:
        return self.segment_records.of(name, used_only=used_only, run_id=run_id)

    def add_task_report(self, report: GroupReport) -> None:
        self.reports.add_task_report(report)

    def task_reports(self, name: str, run_id: str | None = None) -> list[GroupReport]:
        return self.reports.task_reports(name, run_id)

    def run_row_stats(self, name: str, run_id: str) -> dict[str, int]:
        return self.reports.run_row_stats(name, run_id)

    # ------------------------------------------------------------------------------------------ audit

    def audit(self, name: str, action: str, details: dict, actor: str = "system", *,
              conn: Connection | None = None) -> None:
        self.audit_log.write(name, action, details, actor, conn=conn)

    def audit_records(self, name: str, *, action: str | None = None, limit: int | None = None) -> list[AuditRecord]:
        return self.audit_log.records(name, action=action, limit=limit)
