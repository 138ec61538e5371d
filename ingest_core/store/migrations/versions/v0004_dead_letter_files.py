"""The dead-letter files of published runs (hand-rolled version 4; none before: dead letters start here).

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa

from ingest_core.store.migrations.ops import Timestamp, create_tables

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

dead_letter_files = sa.Table(
    "ingest_dead_letter_files", sa.MetaData(),
    sa.Column("datasource", sa.String(200), primary_key=True),
    sa.Column("location", sa.Text, primary_key=True),
    sa.Column("run_id", sa.String(250), nullable=False),
    sa.Column("group_id", sa.Integer, nullable=False),
    sa.Column("replica", sa.Integer, nullable=False),
    sa.Column("records", sa.BigInteger, nullable=False),
    sa.Column("size_bytes", sa.BigInteger, nullable=False),
    sa.Column("publish_seq", sa.BigInteger, nullable=False),
    sa.Column("created_at", Timestamp, nullable=False),
)
sa.Index("ix_ingest_dead_letter_files_run", dead_letter_files.c.datasource, dead_letter_files.c.run_id)


def upgrade() -> None:
    create_tables(dead_letter_files)
