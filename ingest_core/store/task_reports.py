"""The reports of the Spark jobs: one per task group and replica (row stats, parse exceptions, segments)."""

from __future__ import annotations

import sqlalchemy as sa

from ingest_core.store.database import Database
from ingest_core.store.schema import task_reports, utcnow


class TaskReports:
    def __init__(self, db: Database):
        self.db = db

    def add_task_report(self, name: str, run_id: str, group_id: int, report: dict, replica: int = 0) -> None:
        with self.db.session() as conn:
            conn.execute(task_reports.insert().values(datasource=name, run_id=run_id, group_id=group_id,
                                                      replica=replica, report=report, created_at=utcnow()))

    def task_reports(self, name: str, run_id: str | None = None) -> list[dict]:
        query = sa.select(task_reports).where(task_reports.c.datasource == name)
        if run_id is not None:
            query = query.where(task_reports.c.run_id == run_id)
        with self.db.session() as conn:
            return [dict(r) for r in conn.execute(query.order_by(task_reports.c.id)).mappings()]

    def run_row_stats(self, name: str, run_id: str) -> dict[str, int]:
        """Row stats of a run: the sum over its task groups, each counted once. Replicas read the same records,
        so a group counts the report of its published replica (the lowest-numbered that succeeded), not all."""
        by_replica_desc = sorted(self.task_reports(name, run_id), key=lambda r: r["replica"], reverse=True)
        published = {r["group_id"]: r for r in by_replica_desc}  # the lowest replica of each group, written last
        stats: dict[str, int] = {}
        for r in published.values():
            for key, value in r["report"].get("rowStats", {}).items():
                stats[key] = stats.get(key, 0) + int(value)
        return stats
