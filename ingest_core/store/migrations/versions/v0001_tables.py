"""The tables of the first release (hand-rolled version 1).

Revision ID: 0001
Revises: none
"""

import sqlalchemy as sa

from ingest_core.store.migrations.ops import Json, Timestamp, create_tables

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

v1 = sa.MetaData()

sa.Table(
    "ingest_schema_version", v1,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("upgraded_at", Timestamp, nullable=False),
)
sa.Table(
    "ingest_datasources", v1,
    sa.Column("name", sa.String(200), primary_key=True),
    sa.Column("spec_version", sa.Integer, nullable=False, server_default="0"),
    sa.Column("commit_version", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("state", sa.String(40), nullable=False, server_default="PENDING"),
    sa.Column("detailed_state", sa.String(40), nullable=False, server_default="PENDING"),
    sa.Column("suspended", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("terminated", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Column("updated_at", Timestamp, nullable=False),
)
sa.Table(
    "ingest_specs", v1,
    sa.Column("datasource", sa.String(200), primary_key=True),
    sa.Column("version", sa.Integer, primary_key=True),
    sa.Column("fingerprint", sa.String(64), nullable=False),
    sa.Column("spec", Json, nullable=False),
    sa.Column("source", sa.Text),
    sa.Column("created_at", Timestamp, nullable=False),
)
sa.Table(
    "ingest_offsets", v1,
    sa.Column("datasource", sa.String(200), primary_key=True),
    sa.Column("topic", sa.String(255), primary_key=True),
    sa.Column("partition", sa.Integer, primary_key=True),
    sa.Column("offset", sa.BigInteger, nullable=False),
    sa.Column("run_id", sa.String(250)),
    sa.Column("updated_at", Timestamp, nullable=False),
)
segments = sa.Table(
    "ingest_segments", v1,
    sa.Column("id", sa.String(512), primary_key=True),
    sa.Column("datasource", sa.String(200), nullable=False),
    sa.Column("interval_start", Timestamp, nullable=False),
    sa.Column("interval_end", Timestamp, nullable=False),
    sa.Column("version", sa.String(40), nullable=False),
    sa.Column("partition_num", sa.Integer, nullable=False),
    sa.Column("location", sa.Text, nullable=False),
    sa.Column("num_rows", sa.BigInteger, nullable=False),
    sa.Column("size_bytes", sa.BigInteger, nullable=False),
    sa.Column("used", sa.Boolean, nullable=False, server_default=sa.true()),
    sa.Column("run_id", sa.String(250), nullable=False),
    sa.Column("group_id", sa.Integer, nullable=False),
    sa.Column("start_offsets", Json, nullable=False),
    sa.Column("end_offsets", Json, nullable=False),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Column("payload", Json, nullable=False),
    sa.UniqueConstraint("datasource", "interval_start", "interval_end", "version", "partition_num",
                        name="uq_ingest_segments_slot"),
)
sa.Index("ix_ingest_segments_ds_interval", segments.c.datasource, segments.c.interval_start, segments.c.interval_end)
sa.Table(
    "ingest_runs", v1,
    sa.Column("datasource", sa.String(200), primary_key=True),
    sa.Column("run_id", sa.String(250), primary_key=True),
    sa.Column("seq", sa.BigInteger, nullable=False),
    sa.Column("status", sa.String(20), nullable=False),
    sa.Column("plan", Json, nullable=False),
    sa.Column("records", sa.BigInteger, nullable=False),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Column("updated_at", Timestamp, nullable=False),
    sa.Column("published_at", Timestamp),
    sa.Column("superseded_by", sa.String(250)),
    sa.Column("error", sa.Text),
    sa.UniqueConstraint("datasource", "seq", name="uq_ingest_runs_seq"),
)
sa.Table(
    "ingest_task_groups", v1,
    sa.Column("datasource", sa.String(200), primary_key=True),
    sa.Column("run_id", sa.String(250), primary_key=True),
    sa.Column("group_id", sa.Integer, primary_key=True),
    sa.Column("status", sa.String(20), nullable=False),
    sa.Column("records", sa.BigInteger, nullable=False),
    sa.Column("updated_at", Timestamp, nullable=False),
)
task_reports = sa.Table(
    "ingest_task_reports", v1,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("datasource", sa.String(200), nullable=False),
    sa.Column("run_id", sa.String(250), nullable=False),
    sa.Column("group_id", sa.Integer, nullable=False),
    sa.Column("replica", sa.Integer, nullable=False, server_default="0"),
    sa.Column("report", Json, nullable=False),
    sa.Column("created_at", Timestamp, nullable=False),
)
sa.Index("ix_ingest_task_reports_run", task_reports.c.datasource, task_reports.c.run_id)
sa.Table(
    "ingest_audit_log", v1,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("datasource", sa.String(200), nullable=False),
    sa.Column("action", sa.String(60), nullable=False),
    sa.Column("actor", sa.String(200), nullable=False),
    sa.Column("details", Json, nullable=False),
    sa.Column("created_at", Timestamp, nullable=False),
)


def upgrade() -> None:
    create_tables(*v1.sorted_tables)
