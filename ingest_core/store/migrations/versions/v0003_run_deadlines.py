"""Runs record when their jobs started, their deadline and when they expired (hand-rolled version 3).

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa

from ingest_core.store.migrations.ops import Timestamp, add_columns

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    add_columns("ingest_runs", sa.Column("running_since", Timestamp), sa.Column("deadline_at", Timestamp),
                sa.Column("expired_at", Timestamp))
