"""Each run's published figures, recorded at publish (hand-rolled version 8).

Runs published before take them from what is recorded now: their segment records (used or not) and their
published groups' records; a segment kill already removed is not counted (nothing recorded it).

Revision ID: 0008
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

from ingest_core.store.migrations.ops import add_columns

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

runs = sa.table("ingest_runs", sa.column("datasource"), sa.column("run_id"), sa.column("status"),
                sa.column("published_records"), sa.column("published_rows"), sa.column("published_segments"),
                sa.column("published_bytes"))
segments = sa.table("ingest_segments", sa.column("datasource"), sa.column("run_id"), sa.column("num_rows"),
                    sa.column("size_bytes"))
task_groups = sa.table("ingest_task_groups", sa.column("datasource"), sa.column("run_id"), sa.column("status"),
                       sa.column("records"))


def upgrade() -> None:
    add_columns("ingest_runs", sa.Column("published_records", sa.BigInteger),
                sa.Column("published_rows", sa.BigInteger), sa.Column("published_segments", sa.Integer),
                sa.Column("published_bytes", sa.BigInteger))
    same_run = (segments.c.datasource == runs.c.datasource) & (segments.c.run_id == runs.c.run_id)
    published_groups = ((task_groups.c.datasource == runs.c.datasource) & (task_groups.c.run_id == runs.c.run_id)
                        & (task_groups.c.status == "PUBLISHED"))
    op.get_bind().execute(runs.update().where((runs.c.status == "PUBLISHED") & runs.c.published_rows.is_(None)).values(
        published_records=sa.select(sa.func.coalesce(sa.func.sum(task_groups.c.records), 0))
        .where(published_groups).scalar_subquery(),
        published_rows=sa.select(sa.func.coalesce(sa.func.sum(segments.c.num_rows), 0)).where(same_run)
        .scalar_subquery(),
        published_segments=sa.select(sa.func.count()).where(same_run).scalar_subquery(),
        published_bytes=sa.select(sa.func.coalesce(sa.func.sum(segments.c.size_bytes), 0)).where(same_run)
        .scalar_subquery()))
