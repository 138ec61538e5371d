"""When each segment's `used` last changed (hand-rolled version 6): compaction marks what it replaced unused,
kill waits a while after.

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa

from ingest_core.store.migrations.ops import Timestamp, add_columns

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    add_columns("ingest_segments", sa.Column("used_status_last_updated", Timestamp))
