"""The reports of the Spark jobs: one per task group and replica (row stats, parse exceptions, segments)."""

from __future__ import annotations

import sqlalchemy as sa

from ingest_core.handover.report import (
    AttemptReport,
    GroupReport,
    RowStats,
    published_attempt,
)
from ingest_core.store.database import Database
from ingest_core.store.schema import task_reports, utcnow


class TaskReports:
    def __init__(self, db: Database):
        self.db = db

    def add(self, report: GroupReport) -> None:
        with self.db.session() as conn:
            conn.execute(task_reports.insert().values(
                datasource=report.datasource, run_id=report.run_id, group_id=report.group_id,
                replica=report.replica, report=report.to_json(), created_at=utcnow()))

    def of(self, name: str, run_id: str | None = None) -> list[GroupReport]:
        """The reports kept, oldest first: at publish, one per task group replica that succeeded; at a run's
        report, one per group that failed (`GroupReport.failure` says why)."""
        query = sa.select(task_reports).where(task_reports.c.datasource == name)
        if run_id is not None:
            query = query.where(task_reports.c.run_id == run_id)
        with self.db.session() as conn:
            rows = conn.execute(query.order_by(task_reports.c.id)).mappings().all()
        return [GroupReport.from_json(r["report"], f"the stored report {r['id']} (ingest_task_reports) of run "
                                                   f"{r['run_id']} of {name!r}") for r in rows]

    def row_stats(self, name: str, run_id: str) -> dict[str, int]:
        """Row stats of a run: the sum over its task groups, each counted once. Replicas read the same records,
        so a group counts the report of its published replica only."""
        by_group: dict[int, list[AttemptReport]] = {}
        for report in self.of(name, run_id):
            if not report.succeeded:  # a failed group's report (kept for status) counts nothing
                continue
            by_group.setdefault(report.group_id, []).append(AttemptReport(report))
        stats = RowStats()
        for attempts in by_group.values():
            published = published_attempt(attempts)
            if published is not None:
                stats.add(published.report.stats)
        return stats.to_json() if by_group else {}
