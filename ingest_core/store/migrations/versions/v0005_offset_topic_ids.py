"""Committed offsets record their topic's Kafka topic id (hand-rolled version 5). Rows of before stay NULL
(readable, not checked) until the next publish of their partition records it.

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa

from ingest_core.store.migrations.ops import add_columns

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    add_columns("ingest_offsets", sa.Column("topic_id", sa.String(64)))
