"""SUSPENDED and TERMINATED are stored states, and an expired run is EXPIRED (hand-rolled version 7).

They were flags beside the state, and FAILED with `expired_at`. The flags stay, kept in step with the state.

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

datasources = sa.table("ingest_datasources", sa.column("state"), sa.column("detailed_state"),
                       sa.column("suspended", sa.Boolean), sa.column("terminated", sa.Boolean))
runs = sa.table("ingest_runs", sa.column("status"), sa.column("expired_at"))


def upgrade() -> None:
    conn = op.get_bind()
    conn.execute(datasources.update().where(datasources.c.terminated == sa.true())
                 .values(state="TERMINATED", detailed_state="TERMINATED"))
    conn.execute(datasources.update().where((datasources.c.suspended == sa.true())
                                            & (datasources.c.terminated == sa.false()))
                 .values(state="SUSPENDED", detailed_state="SUSPENDED"))
    conn.execute(runs.update().where(runs.c.expired_at.is_not(None) & (runs.c.status == "FAILED"))
                 .values(status="EXPIRED"))
