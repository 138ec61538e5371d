"""The offset ranges each publish claimed (hand-rolled version 2).

Backfills published before claims existed claim their ranges here (whole, as they publish; of two that overlap,
the first published keeps its claim). The main line's claims start with its next publish: its history may hold
operator rewinds, which released what it had published.

Revision ID: 0002
Revises: 0001
"""

from datetime import datetime, timezone

import sqlalchemy as sa
from alembic import op

from ingest_core.core.offsets import PublishedRange, find_overlap
from ingest_core.core.planner import Plan
from ingest_core.store.migrations.ops import Json, Timestamp, create_tables

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

published_ranges = sa.Table(
    "ingest_published_ranges", sa.MetaData(),
    sa.Column("datasource", sa.String(200), primary_key=True),
    sa.Column("topic", sa.String(255), primary_key=True),
    sa.Column("partition", sa.Integer, primary_key=True),
    sa.Column("start_offset", sa.BigInteger, primary_key=True),
    sa.Column("end_offset", sa.BigInteger, nullable=False),
    sa.Column("run_id", sa.String(250), nullable=False),
    sa.Column("backfill", sa.Boolean, nullable=False),
    sa.Column("updated_at", Timestamp, nullable=False),
)
runs = sa.table("ingest_runs", sa.column("datasource"), sa.column("run_id"), sa.column("plan", Json),
                sa.column("status"), sa.column("published_at"))


def upgrade() -> None:
    conn = op.get_bind()
    create_tables(published_ranges)
    claims: dict[str, list[PublishedRange]] = {}
    for datasource, run_id, plan_json in conn.execute(sa.select(runs.c.datasource, runs.c.run_id, runs.c.plan)
                                                      .where(runs.c.status == "PUBLISHED")
                                                      .order_by(runs.c.published_at)):
        plan = Plan.from_json(plan_json)
        ranges = [p.range for p in plan.partitions if p.size]
        mine = claims.setdefault(datasource, [])
        if plan.is_backfill and find_overlap(ranges, mine) is None:
            mine.extend(PublishedRange(r.tp, r.start, r.end, run_id, True) for r in ranges)
    now = datetime.now(timezone.utc)
    rows = [{"datasource": ds, "topic": c.tp.topic, "partition": c.tp.partition, "start_offset": c.start,
             "end_offset": c.end, "run_id": c.run_id, "backfill": True, "updated_at": now}
            for ds, mine in claims.items() for c in mine]
    if rows:
        conn.execute(published_ranges.insert(), rows)
