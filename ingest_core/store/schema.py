"""The metadata store's tables (the models): what the code reads and writes.

SQLAlchemy Core on PostgreSQL (production) or SQLite (embedded default). The migrations that create and upgrade
them are Alembic revisions (`migrations/`), run by `Database.upgrade()` (`ingest db upgrade`); every other use of
the store refuses a missing, older or unknown revision. A change here comes with a revision that makes it: a test
upgrades an empty database and compares it with these tables. Everything stored is UTC (`utcnow`; `as_utc` for
SQLite, which returns naive date-times).
"""

from __future__ import annotations

from datetime import datetime, timezone

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB

from ingest_core.core.states import DetailedState, State

Json = sa.JSON().with_variant(JSONB(), "postgresql")
Timestamp = sa.DateTime(timezone=True)

meta = sa.MetaData()

# The hand-rolled version of the releases before Alembic (`migrations/legacy_marker.py`): read once to stamp an old
# store, and still written, so those releases refuse a newer store.
schema_version = sa.Table(
    "ingest_schema_version", meta,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("upgraded_at", Timestamp, nullable=False),
)

# Supervisor state per datasource. commit_version is the compare-and-swap token of its committed offsets.
datasources = sa.Table(
    "ingest_datasources", meta,
    sa.Column("name", sa.String(200), primary_key=True),
    sa.Column("spec_version", sa.Integer, nullable=False, server_default="0"),
    sa.Column("commit_version", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("state", sa.String(40), nullable=False, server_default=State.PENDING.value),
    sa.Column("detailed_state", sa.String(40), nullable=False, server_default=DetailedState.PENDING.value),
    # v1-v6's flags beside the state; since v7 SUSPENDED and TERMINATED are states, and these follow them
    sa.Column("suspended", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("terminated", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Column("updated_at", Timestamp, nullable=False),
)

specs = sa.Table(
    "ingest_specs", meta,
    sa.Column("datasource", sa.String(200), primary_key=True),
    sa.Column("version", sa.Integer, primary_key=True),
    sa.Column("fingerprint", sa.String(64), nullable=False),
    sa.Column("spec", Json, nullable=False),  # redacted: secret references only, never secret values
    sa.Column("source", sa.Text),
    sa.Column("created_at", Timestamp, nullable=False),
)

offsets = sa.Table(
    "ingest_offsets", meta,
    sa.Column("datasource", sa.String(200), primary_key=True),
    sa.Column("topic", sa.String(255), primary_key=True),
    sa.Column("partition", sa.Integer, primary_key=True),
    sa.Column("offset", sa.BigInteger, nullable=False),
    sa.Column("run_id", sa.String(250)),  # the run (or operator action) that set it
    sa.Column("updated_at", Timestamp, nullable=False),
    # v5: Kafka's id of the topic the offset was read from (NULL: set before v5; the next publish records it)
    sa.Column("topic_id", sa.String(64)),
)

segments = sa.Table(
    "ingest_segments", meta,
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
    # when `used` last changed (Druid's name): kill deletes a segment only a while after it became unused
    sa.Column("used_status_last_updated", Timestamp),
    sa.UniqueConstraint("datasource", "interval_start", "interval_end", "version", "partition_num",
                        name="uq_ingest_segments_slot"),
)
sa.Index("ix_ingest_segments_ds_interval", segments.c.datasource, segments.c.interval_start, segments.c.interval_end)


# Offset ranges each publish made visible, per partition ("claims"). A backfill, which neither continues from
# nor moves the committed offsets, may publish only offsets nobody published, and the main line may not publish
# what a backfill did. The main line's runs extend their previous range (one row per stretch). Operator actions
# that move the main line's offsets release the claims at and above the new offsets.
published_ranges = sa.Table(
    "ingest_published_ranges", meta,
    sa.Column("datasource", sa.String(200), primary_key=True),
    sa.Column("topic", sa.String(255), primary_key=True),
    sa.Column("partition", sa.Integer, primary_key=True),
    sa.Column("start_offset", sa.BigInteger, primary_key=True),
    sa.Column("end_offset", sa.BigInteger, nullable=False),
    sa.Column("run_id", sa.String(250), nullable=False),
    sa.Column("backfill", sa.Boolean, nullable=False),
    sa.Column("updated_at", Timestamp, nullable=False),
)


runs = sa.Table(
    "ingest_runs", meta,
    sa.Column("datasource", sa.String(200), primary_key=True),
    sa.Column("run_id", sa.String(250), primary_key=True),
    sa.Column("seq", sa.BigInteger, nullable=False),  # planning order within the datasource
    sa.Column("status", sa.String(20), nullable=False),
    sa.Column("plan", Json, nullable=False),
    sa.Column("records", sa.BigInteger, nullable=False),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Column("updated_at", Timestamp, nullable=False),
    sa.Column("published_at", Timestamp),
    sa.Column("superseded_by", sa.String(250)),
    sa.Column("error", sa.Text),
    # v3: completionTimeout bounds a run in flight, from when its jobs started (until then, from planning)
    sa.Column("running_since", Timestamp),
    sa.Column("deadline_at", Timestamp),
    sa.Column("expired_at", Timestamp),  # it outlived its deadline: EXPIRED (v3-v6: FAILED with this set)
    # v8: what the run published, recorded by its publish (compaction and kill never change them): Kafka offsets
    # of the groups it published, rows (after rollup), segments and their bytes. NULL: it has not published.
    sa.Column("published_records", sa.BigInteger),
    sa.Column("published_rows", sa.BigInteger),
    sa.Column("published_segments", sa.Integer),
    sa.Column("published_bytes", sa.BigInteger),
    sa.UniqueConstraint("datasource", "seq", name="uq_ingest_runs_seq"),
)

task_groups = sa.Table(
    "ingest_task_groups", meta,
    sa.Column("datasource", sa.String(200), primary_key=True),
    sa.Column("run_id", sa.String(250), primary_key=True),
    sa.Column("group_id", sa.Integer, primary_key=True),
    sa.Column("status", sa.String(20), nullable=False),
    sa.Column("records", sa.BigInteger, nullable=False),
    sa.Column("updated_at", Timestamp, nullable=False),
)

task_reports = sa.Table(
    "ingest_task_reports", meta,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("datasource", sa.String(200), nullable=False),
    sa.Column("run_id", sa.String(250), nullable=False),
    sa.Column("group_id", sa.Integer, nullable=False),
    sa.Column("replica", sa.Integer, nullable=False, server_default="0"),
    sa.Column("report", Json, nullable=False),
    sa.Column("created_at", Timestamp, nullable=False),
)
sa.Index("ix_ingest_task_reports_run", task_reports.c.datasource, task_reports.c.run_id)

# v4: the dead-letter files each publish made visible (`handover.dead_letters`), recorded in the publish's
# transaction with its segments. `publish_seq` numbers the publishes that had dead letters, per datasource, in the
# order they committed (publishes hold the datasource's row lock): the dead-letter topic's delivery marker.
dead_letter_files = sa.Table(
    "ingest_dead_letter_files", meta,
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

audit_log = sa.Table(
    "ingest_audit_log", meta,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("datasource", sa.String(200), nullable=False),
    sa.Column("action", sa.String(60), nullable=False),
    sa.Column("actor", sa.String(200), nullable=False),
    sa.Column("details", Json, nullable=False),
    sa.Column("created_at", Timestamp, nullable=False),
)


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def as_utc(value: datetime | None) -> datetime | None:
    """SQLite returns naive date-times; everything here is UTC."""
    if value is None:
        return None
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)
