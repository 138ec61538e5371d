"""The metadata store's schema: its tables, their version and the migrations that create or upgrade them.

SQLAlchemy Core on PostgreSQL (production) or SQLite (embedded default). `migrate` runs inside
`Database.upgrade()` (`ingest db upgrade`); every other use of the store refuses a missing or older schema.
Everything stored is UTC (`utcnow`; `as_utc` for SQLite, which returns naive date-times).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Connection

from ingest_core.core.offsets import PublishedRange, find_overlap
from ingest_core.core.planner import Plan
from ingest_core.core.states import DetailedState, RunStatus, State

SCHEMA_VERSION = 8

Json = sa.JSON().with_variant(JSONB(), "postgresql")
Timestamp = sa.DateTime(timezone=True)

meta = sa.MetaData()

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


def _create_schema_v1(conn: Connection) -> None:
    meta.create_all(conn, checkfirst=True)


def _add_published_ranges(conn: Connection) -> None:
    """v2: the claimed offset ranges. Backfills published before claims existed claim their ranges here (whole,
    as they publish; of two that overlap, the first published keeps its claim). The main line's claims start with
    its next publish: its history may hold operator rewinds, which released what it had published."""
    published_ranges.create(conn, checkfirst=True)
    claims: dict[str, list[PublishedRange]] = {}
    for datasource, run_id, plan_json in conn.execute(sa.select(runs.c.datasource, runs.c.run_id, runs.c.plan)
                                                      .where(runs.c.status == RunStatus.PUBLISHED.value)
                                                      .order_by(runs.c.published_at)):
        plan = Plan.from_json(plan_json)
        ranges = [p.range for p in plan.partitions if p.size]
        mine = claims.setdefault(datasource, [])
        if plan.is_backfill and find_overlap(ranges, mine) is None:
            mine.extend(PublishedRange(r.tp, r.start, r.end, run_id, True) for r in ranges)
    rows = [{"datasource": ds, "topic": c.tp.topic, "partition": c.tp.partition, "start_offset": c.start,
             "end_offset": c.end, "run_id": c.run_id, "backfill": True, "updated_at": utcnow()}
            for ds, mine in claims.items() for c in mine]
    if rows:
        conn.execute(published_ranges.insert(), rows)


def _add_run_deadlines(conn: Connection) -> None:
    """v3: runs record when their jobs started, their deadline and when they expired. (v1's step creates today's
    tables, so a store created at this release has the columns already.)"""
    _add_columns(conn, runs.c.running_since, runs.c.deadline_at, runs.c.expired_at)


def _add_columns(conn: Connection, *columns: sa.Column) -> None:
    """Add the columns a table of an older schema does not have yet (nullable ones: rows of before hold NULL)."""
    for column in columns:
        table = column.table.name
        if column.name not in {c["name"] for c in sa.inspect(conn).get_columns(table)}:
            conn.execute(sa.text(f"ALTER TABLE {table} ADD COLUMN {column.name} "
                                 f"{column.type.compile(dialect=conn.dialect)}"))


def _add_dead_letter_files(conn: Connection) -> None:
    """v4: the dead-letter files of published runs (none before: dead letters start with this release)."""
    dead_letter_files.create(conn, checkfirst=True)


def _add_offset_topic_ids(conn: Connection) -> None:
    """v5: committed offsets record their topic's Kafka topic id. Rows of before stay NULL (readable, not
    checked) until the next publish of their partition records it."""
    _add_columns(conn, offsets.c.topic_id)


def _add_used_status_last_updated(conn: Connection) -> None:
    """v6: when each segment's `used` last changed (compaction marks what it replaced unused; kill waits)."""
    _add_columns(conn, segments.c.used_status_last_updated)


def _states_in_the_table(conn: Connection) -> None:
    """v7: SUSPENDED and TERMINATED are stored states (they were flags beside the state), and an expired run is
    EXPIRED (it was FAILED with `expired_at`). The flags stay, kept in step with the state."""
    conn.execute(datasources.update().where(datasources.c.terminated == sa.true()).values(
        state=State.TERMINATED.value, detailed_state=DetailedState.TERMINATED.value))
    conn.execute(datasources.update().where((datasources.c.suspended == sa.true())
                                            & (datasources.c.terminated == sa.false())).values(
        state=State.SUSPENDED.value, detailed_state=DetailedState.SUSPENDED.value))
    conn.execute(runs.update().where(runs.c.expired_at.is_not(None) & (runs.c.status == RunStatus.FAILED.value))
                 .values(status=RunStatus.EXPIRED.value))


def _add_published_figures(conn: Connection) -> None:
    """v8: each run's published figures, recorded at publish. Runs published before take them from what is
    recorded now: their segment records (used or not) and their published groups' records; a segment kill
    already removed is not counted (nothing recorded it)."""
    _add_columns(conn, runs.c.published_records, runs.c.published_rows, runs.c.published_segments,
                 runs.c.published_bytes)
    same_run = (segments.c.datasource == runs.c.datasource) & (segments.c.run_id == runs.c.run_id)
    published_groups = ((task_groups.c.datasource == runs.c.datasource) & (task_groups.c.run_id == runs.c.run_id)
                        & (task_groups.c.status == "PUBLISHED"))
    conn.execute(runs.update().where((runs.c.status == RunStatus.PUBLISHED.value)
                                     & runs.c.published_rows.is_(None)).values(
        published_records=sa.select(sa.func.coalesce(sa.func.sum(task_groups.c.records), 0))
        .where(published_groups).scalar_subquery(),
        published_rows=sa.select(sa.func.coalesce(sa.func.sum(segments.c.num_rows), 0)).where(same_run)
        .scalar_subquery(),
        published_segments=sa.select(sa.func.count()).where(same_run).scalar_subquery(),
        published_bytes=sa.select(sa.func.coalesce(sa.func.sum(segments.c.size_bytes), 0)).where(same_run)
        .scalar_subquery()))


# Ordered schema steps; a new release appends (version, step). Each runs once (`migrate`).
MIGRATIONS: list[tuple[int, Any]] = [(1, _create_schema_v1), (2, _add_published_ranges), (3, _add_run_deadlines),
                                     (4, _add_dead_letter_files), (5, _add_offset_topic_ids),
                                     (6, _add_used_status_last_updated), (7, _states_in_the_table),
                                     (8, _add_published_figures)]


def installed_version(conn: Connection) -> int:
    """The schema version of the store behind `conn` (0: none yet)."""
    if not sa.inspect(conn).has_table(schema_version.name):
        return 0
    return int(conn.execute(sa.select(sa.func.max(schema_version.c.version))).scalar() or 0)


def migrate(conn: Connection) -> list[int]:
    """Create or upgrade the schema to SCHEMA_VERSION inside the caller's transaction. Returns the versions
    applied."""
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(74201)"))  # one upgrader at a time
    schema_version.create(conn, checkfirst=True)
    current = installed_version(conn)
    applied = []
    for version, step in MIGRATIONS:
        if version > current:
            step(conn)
            conn.execute(schema_version.insert().values(id=version, version=version, upgraded_at=utcnow()))
            applied.append(version)
    return applied
