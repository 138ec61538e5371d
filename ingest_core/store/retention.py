"""Bounded history: the store's runs, their task groups and task reports, and routine audit rows, kept for a
retention (Airflow's `airflow db clean` does the same for Airflow's own tables).

A `@continuous` datasource plans about 17,000 runs a day; each keeps a row in `ingest_runs` (with its plan),
a row per task group and a report per group replica. None of them is what exactly-once rests on: the
committed offsets, the offset ranges publishes claimed (`published_ranges`) and the segment records are
never touched here. What goes, per datasource:
- runs that no longer change (`RunStatus.is_final`: published, superseded, expired) and failed runs that a
  later run has published past, last updated before the cutoff and not among the last `keep_runs` planned;
- their task groups and task reports;
- audit rows older than the cutoff, except the ones a datasource's figures are counted from (records lost,
  skips, hard resets: `audit.RECORDS_LOST`, `SKIP`, `RESET`).

The deletes go in batches (`BATCH` runs a transaction), oldest first, so a year of history is cleaned without
one long transaction holding the tables.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa

from ingest_core.core.spec import DatasourceSpec
from ingest_core.core.states import RunStatus
from ingest_core.store.audit import RECORDS_LOST, RESET, SKIP
from ingest_core.store.cleanup import find_orphans, referenced_locations, remove_orphans
from ingest_core.store.database import Database
from ingest_core.store.metadata import MetadataStore
from ingest_core.store.schema import audit_log, runs, task_groups, task_reports

DEFAULT_DAYS = 30
DEFAULT_KEEP_RUNS = 100  # always kept, however old: a quiet datasource still shows its last runs
BATCH = 5_000
DB_CLEAN = "db_clean"  # the audit action
KEPT_AUDIT_ACTIONS = (RECORDS_LOST, SKIP, RESET)  # what `ingest status` counts lost and skipped records from
_FINAL = [s.value for s in RunStatus if s.is_final]


@dataclass(frozen=True)
class Retention:
    days: int = DEFAULT_DAYS
    keep_runs: int = DEFAULT_KEEP_RUNS

    def __post_init__(self) -> None:
        if self.days < 1:
            raise ValueError(f"a retention of {self.days} days keeps nothing: give at least 1")
        if self.keep_runs < 0:
            raise ValueError(f"keep_runs is {self.keep_runs}: give 0 or more")

    def cutoff(self, now: datetime) -> datetime:
        return now - timedelta(days=self.days)


@dataclass
class Cleaned:
    """What one datasource's clean removed (or, in a dry run, would remove)."""

    runs: int = 0
    task_groups: int = 0
    task_reports: int = 0
    audit_rows: int = 0
    orphan_folders: int = 0  # the deleted runs' job output that nothing was published from (`cleanup`)

    def add(self, other: Cleaned) -> None:
        self.runs += other.runs
        self.task_groups += other.task_groups
        self.task_reports += other.task_reports

    def to_json(self) -> dict[str, int]:
        return {"runs": self.runs, "taskGroups": self.task_groups, "taskReports": self.task_reports,
                "auditRows": self.audit_rows, "orphanFolders": self.orphan_folders}


class History:
    """The store's history tables, as a retention sees them."""

    def __init__(self, db: Database):
        self.db = db

    def expired_runs(self, name: str, retention: Retention, now: datetime, *, after_seq: int | None = None,
                     limit: int = BATCH) -> list[tuple[str, int]]:
        """The oldest `limit` runs of `name` (after `after_seq`) that the retention lets go, with their `seq`
        (see the module docstring)."""
        with self.db.session() as conn:
            newest = conn.execute(sa.select(sa.func.max(runs.c.seq)).where(runs.c.datasource == name)).scalar()
            if newest is None:
                return []
            published = conn.execute(sa.select(sa.func.max(runs.c.seq)).where(
                (runs.c.datasource == name) & (runs.c.status == RunStatus.PUBLISHED.value))).scalar()
            done = runs.c.status.in_(_FINAL)
            if published is not None:  # a failed run before a later publish: its start offsets are gone
                done = done | ((runs.c.status == RunStatus.FAILED.value) & (runs.c.seq < published))
            query = (sa.select(runs.c.run_id, runs.c.seq)
                     .where((runs.c.datasource == name) & done & (runs.c.updated_at < retention.cutoff(now))
                            & (runs.c.seq <= newest - retention.keep_runs))
                     .order_by(runs.c.seq).limit(limit))
            if after_seq is not None:
                query = query.where(runs.c.seq > after_seq)
            return [(run_id, seq) for run_id, seq in conn.execute(query)]

    def delete_runs(self, name: str, run_ids: list[str]) -> Cleaned:
        """The runs' rows, their task groups' and their task reports', in one transaction."""
        if not run_ids:
            return Cleaned()
        with self.db.session() as conn:
            reports = conn.execute(task_reports.delete().where(
                (task_reports.c.datasource == name) & task_reports.c.run_id.in_(run_ids))).rowcount
            groups = conn.execute(task_groups.delete().where(
                (task_groups.c.datasource == name) & task_groups.c.run_id.in_(run_ids))).rowcount
            removed = conn.execute(runs.delete().where(
                (runs.c.datasource == name) & runs.c.run_id.in_(run_ids))).rowcount
        return Cleaned(runs=removed, task_groups=groups, task_reports=reports)

    def delete_audit(self, name: str, retention: Retention, now: datetime, *, dry_run: bool = False) -> int:
        where = ((audit_log.c.datasource == name) & (audit_log.c.created_at < retention.cutoff(now))
                 & audit_log.c.action.not_in(KEPT_AUDIT_ACTIONS))
        with self.db.session() as conn:
            if dry_run:
                return int(conn.execute(sa.select(sa.func.count()).select_from(audit_log).where(where)).scalar())
            return conn.execute(audit_log.delete().where(where)).rowcount

    def count_related(self, name: str, run_ids: list[str]) -> Cleaned:
        """What `delete_runs` would remove (a dry run)."""
        with self.db.session() as conn:
            def count(table: sa.Table) -> int:
                return int(conn.execute(sa.select(sa.func.count()).select_from(table).where(
                    (table.c.datasource == name) & table.c.run_id.in_(run_ids))).scalar())
            return Cleaned(runs=len(run_ids), task_groups=count(task_groups), task_reports=count(task_reports))


def clean_history(store: MetadataStore, name: str, spec: DatasourceSpec | None, retention: Retention, now: datetime,
                  *, dry_run: bool = False, actor: str = "system") -> Cleaned:
    """Apply `retention` to datasource `name`. Each batch of runs first loses its job output that nothing was
    published from (`cleanup.find_orphans`: once the rows are gone nothing would find it), then its rows. With
    `spec` None (a datasource never planned here has no deep storage to look in) only rows go."""
    history = History(store)
    total = Cleaned()
    locations = referenced_locations(store, name) if spec is not None else []
    after: int | None = None
    while batch := history.expired_runs(name, retention, now, after_seq=after):
        run_ids, after = [run_id for run_id, _ in batch], batch[-1][1]
        if spec is not None:
            orphans = find_orphans(store, spec, run_ids, locations=locations, done=True)
            total.orphan_folders += len(orphans)
            if not dry_run:
                remove_orphans(store, name, orphans, actor)
        total.add(history.count_related(name, run_ids) if dry_run else history.delete_runs(name, run_ids))
    total.audit_rows = history.delete_audit(name, retention, now, dry_run=dry_run)
    if not dry_run and (total.runs or total.audit_rows):
        store.audit_log.write(name, DB_CLEAN, {"retentionDays": retention.days, "keepRuns": retention.keep_runs,
                                               **total.to_json()}, actor)
    return total
