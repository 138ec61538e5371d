"""The metadata store: committed offsets, segments, specs, runs, task reports and the audit log.

SQLAlchemy Core on PostgreSQL (production) or SQLite (embedded default). `MetadataStore.upgrade()` creates or
upgrades the schema (`ingest db upgrade`); every other method refuses to run on a missing or older schema.

Exactly-once rests on three things here: each datasource row carries a `commit_version` that every publish
bumps with a compare-and-swap, the publish transaction locks that row first (`SELECT ... FOR UPDATE` on
PostgreSQL; SQLite transactions are `BEGIN IMMEDIATE`, so writers serialize on the database lock), and the
offset ranges every publish claims (`published_ranges`), which no other publish may overlap.
"""

from __future__ import annotations

import enum
import fcntl
import hashlib
import json
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Iterator, Mapping

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Connection, Engine

from ingest_core.core.errors import IngestError, MetadataStoreError, RunNotFoundError
from ingest_core.core.offsets import (
    KnownOffset,
    OffsetRange,
    PublishedRange,
    TopicPartition,
    find_overlap,
)
from ingest_core.core.periods import format_datetime
from ingest_core.core.planner import Plan
from ingest_core.core.states import DetailedState, Event, State, transition
from ingest_core.executor.report import (
    AttemptReport,
    GroupReport,
    RowStats,
    published_attempt,
)

SCHEMA_VERSION = 3
RUN_EXPIRED = "run_expired"  # the audit action of a run that outlived its deadline

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


class RunStatus(str, enum.Enum):
    """PLANNED -> RUNNING -> PUBLISHED, or FAILED (may be retried and still publish, unless it expired), or
    SUPERSEDED (final). An in-flight run past its deadline expires: FAILED for good (`RunRecord.expired`)."""

    PLANNED = "PLANNED"
    RUNNING = "RUNNING"
    PUBLISHED = "PUBLISHED"
    FAILED = "FAILED"
    SUPERSEDED = "SUPERSEDED"  # its start offsets no longer match the committed ones; re-plan

    @property
    def in_flight(self) -> bool:
        return self in (RunStatus.PLANNED, RunStatus.RUNNING)


class GroupStatus(str, enum.Enum):
    PENDING = "PENDING"
    PUBLISHED = "PUBLISHED"
    FAILED = "FAILED"
    EMPTY = "EMPTY"  # nothing to read; its offsets still advance when the run publishes


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
    sa.Column("expired_at", Timestamp),  # it outlived its deadline: FAILED for good
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


@dataclass(frozen=True)
class RunRecord:
    datasource: str
    run_id: str
    seq: int
    status: RunStatus
    plan: Plan
    created_at: datetime
    published_at: datetime | None
    superseded_by: str | None
    error: str | None
    running_since: datetime | None = None
    deadline_at: datetime | None = None  # None: no deadline (backfills; runs planned before schema v3)
    expired_at: datetime | None = None

    @property
    def expired(self) -> bool:
        return self.expired_at is not None

    @property
    def is_final(self) -> bool:
        """Nothing changes it any more: published, superseded or expired (no retry revives it)."""
        return self.status in (RunStatus.PUBLISHED, RunStatus.SUPERSEDED) or self.expired

    def past_deadline(self, now: datetime) -> bool:
        """In flight at `now` past its deadline: it will never publish (Druid kills such a task group)."""
        return self.status.in_flight and self.deadline_at is not None and now >= self.deadline_at

    def expiry_reason(self, now: datetime) -> str:
        start = self.running_since or self.created_at
        since = (f"RUNNING since {format_datetime(start)}" if self.running_since
                 else f"PLANNED at {format_datetime(start)} and its jobs never started")
        timeout = (self.deadline_at - start).total_seconds() if self.deadline_at else 0
        return (f"expired: run {self.run_id} was {since}, past completionTimeout ({timeout:g}s, deadline "
                f"{format_datetime(self.deadline_at) if self.deadline_at else '-'}) at {format_datetime(now)}; it "
                "will not publish and its partitions go back to the committed offsets")


@dataclass(frozen=True)
class SegmentRecord:
    id: str
    datasource: str
    interval_start: datetime
    interval_end: datetime
    version: str
    partition_num: int
    location: str
    num_rows: int
    size_bytes: int
    used: bool
    run_id: str
    group_id: int
    start_offsets: dict
    end_offsets: dict
    created_at: datetime
    payload: dict


@dataclass(frozen=True)
class AuditRecord:
    datasource: str
    action: str
    actor: str
    details: dict
    created_at: datetime


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
    have = {c["name"] for c in sa.inspect(conn).get_columns(runs.name)}
    for column in (runs.c.running_since, runs.c.deadline_at, runs.c.expired_at):
        if column.name not in have:
            conn.execute(sa.text(f"ALTER TABLE {runs.name} ADD COLUMN {column.name} "
                                 f"{column.type.compile(dialect=conn.dialect)}"))


# Ordered schema steps; a new release appends (version, step). Each runs once, in its own transaction.
MIGRATIONS: list[tuple[int, Any]] = [(1, _create_schema_v1), (2, _add_published_ranges), (3, _add_run_deadlines)]


def make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        database = sa.engine.make_url(url).database
        if database and database != ":memory:":
            Path(database).parent.mkdir(parents=True, exist_ok=True)  # the embedded default lives in INGEST_HOME
        engine = sa.create_engine(url, connect_args={"timeout": 60, "check_same_thread": False})

        @sa.event.listens_for(engine, "connect")
        def _sqlite_connect(dbapi_conn, _record):  # pragma: no cover - exercised through every SQLite test
            dbapi_conn.isolation_level = None  # let SQLAlchemy's "begin" event issue BEGIN IMMEDIATE
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

        @sa.event.listens_for(engine, "begin")
        def _sqlite_begin(conn):  # pragma: no cover
            # Writers take the lock at BEGIN: two publishers serialize instead of failing to upgrade a read lock.
            conn.exec_driver_sql("BEGIN IMMEDIATE")

        return engine
    return sa.create_engine(url, pool_pre_ping=True)


class MetadataStore:
    def __init__(self, url: str, engine: Engine | None = None):
        self.url = url
        self.engine = engine or make_engine(url)
        self._schema_checked = False

    @property
    def is_postgres(self) -> bool:
        return self.engine.dialect.name == "postgresql"

    def dispose(self) -> None:
        self.engine.dispose()

    # ------------------------------------------------------------------------------------------ schema

    def current_schema_version(self) -> int:
        try:
            with self.engine.connect() as conn:
                if not sa.inspect(conn).has_table(schema_version.name):
                    return 0
                return int(conn.execute(sa.select(sa.func.max(schema_version.c.version))).scalar() or 0)
        except sa.exc.OperationalError as exc:
            raise MetadataStoreError(f"metadata store {self.safe_url} is unreachable: {exc.orig}") from None

    def upgrade(self) -> list[int]:
        """Create or upgrade the schema to SCHEMA_VERSION. Returns the versions applied."""
        applied = []
        with self.transaction() as conn:
            if self.is_postgres:
                conn.execute(sa.text("SELECT pg_advisory_xact_lock(74201)"))  # one upgrader at a time
            schema_version.create(conn, checkfirst=True)
            current = int(conn.execute(sa.select(sa.func.max(schema_version.c.version))).scalar() or 0)
            for version, step in MIGRATIONS:
                if version > current:
                    step(conn)
                    conn.execute(schema_version.insert().values(id=version, version=version, upgraded_at=utcnow()))
                    applied.append(version)
        self._schema_checked = True
        return applied

    def check_schema(self) -> None:
        if self._schema_checked:
            return
        found = self.current_schema_version()
        if found < SCHEMA_VERSION:
            raise MetadataStoreError(
                f"metadata store {self.safe_url} has schema version {found}, this release needs {SCHEMA_VERSION}: "
                f"run `ingest db upgrade`"
            )
        if found > SCHEMA_VERSION:
            raise MetadataStoreError(
                f"metadata store {self.safe_url} has schema version {found}, newer than this release "
                f"({SCHEMA_VERSION}): upgrade this installation"
            )
        self._schema_checked = True

    @property
    def safe_url(self) -> str:
        return self.engine.url.render_as_string(hide_password=True)

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        with self.engine.begin() as conn:
            yield conn

    @contextmanager
    def session(self) -> Iterator[Connection]:
        self.check_schema()
        with self.engine.begin() as conn:
            yield conn

    @contextmanager
    def planning_lock(self, name: str) -> Iterator[None]:
        """One planner per datasource at a time, across processes (Druid runs one supervisor thread per
        datasource): a plan continues from the runs in flight, so two planners at once would both start from
        the same offsets. Not the datasource row's lock: planning asks Kafka, and publishes must not wait."""
        if self.is_postgres:
            key = int.from_bytes(hashlib.sha256(f"ingest-plan:{name}".encode()).digest()[:8], "big", signed=True)
            with self.engine.connect() as conn:
                conn.execute(sa.text("SELECT pg_advisory_lock(:key)"), {"key": key})
                try:
                    yield
                finally:
                    conn.execute(sa.text("SELECT pg_advisory_unlock(:key)"), {"key": key})
                    conn.commit()
            return
        database = self.engine.url.database
        if not database or database == ":memory:":
            yield
            return
        with open(f"{database}.planning-lock", "a") as handle:  # SQLite: a file lock beside the database
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def lock_datasource(self, conn: Connection, name: str) -> Mapping[str, Any]:
        """Lock the datasource row for this transaction (creating it if needed) and return it."""
        query = sa.select(datasources).where(datasources.c.name == name)
        if self.is_postgres:
            query = query.with_for_update()
        row = conn.execute(query).mappings().first()
        if row is None:
            now = utcnow()
            if self.is_postgres:
                from sqlalchemy.dialects.postgresql import insert as pg_insert

                conn.execute(pg_insert(datasources).values(name=name, created_at=now, updated_at=now)
                             .on_conflict_do_nothing(index_elements=["name"]))
            else:
                conn.execute(datasources.insert().prefix_with("OR IGNORE").values(name=name, created_at=now,
                                                                                   updated_at=now))
            row = conn.execute(query).mappings().first()
        return row

    # ------------------------------------------------------------------------------------------ specs, state

    def register_spec(self, name: str, spec_json: dict, fingerprint: str, source: str | None = None) -> int:
        """Record the (redacted) spec; a new version only when it changed. Returns the current version."""
        with self.session() as conn:
            row = self.lock_datasource(conn, name)
            latest = conn.execute(
                sa.select(specs.c.version, specs.c.fingerprint).where(specs.c.datasource == name)
                .order_by(specs.c.version.desc()).limit(1)
            ).first()
            if latest is not None and latest.fingerprint == fingerprint:
                return int(latest.version)
            version = (int(latest.version) if latest else 0) + 1
            conn.execute(specs.insert().values(datasource=name, version=version, fingerprint=fingerprint,
                                               spec=spec_json, source=source, created_at=utcnow()))
            conn.execute(datasources.update().where(datasources.c.name == row["name"])
                         .values(spec_version=version, updated_at=utcnow()))
            return version

    def spec_history(self, name: str) -> list[dict]:
        with self.session() as conn:
            rows = conn.execute(sa.select(specs).where(specs.c.datasource == name).order_by(specs.c.version))
            return [dict(r._mapping) for r in rows]

    def datasource_row(self, name: str) -> dict | None:
        with self.session() as conn:
            row = conn.execute(sa.select(datasources).where(datasources.c.name == name)).mappings().first()
            return dict(row) if row else None

    def require_datasource(self, name: str) -> dict:
        row = self.datasource_row(name)
        if row is None:
            known = ", ".join(r["name"] for r in self.list_datasources()) or "none"
            raise IngestError(f"unknown datasource {name!r} (known: {known})")
        return row

    def list_datasources(self) -> list[dict]:
        with self.session() as conn:
            return [dict(r) for r in conn.execute(sa.select(datasources).order_by(datasources.c.name)).mappings()]

    def set_state(self, name: str, event: Event, *, conn: Connection | None = None, **flags: bool) -> None:
        """The stored state after `event` (and the `suspended` / `terminated` flags when given)."""
        state, detailed = transition(event)
        values = {"state": state.value, "detailed_state": detailed.value, "updated_at": utcnow(), **flags}
        if conn is not None:
            self.lock_datasource(conn, name)
            conn.execute(datasources.update().where(datasources.c.name == name).values(**values))
            return
        with self.session() as c:
            self.set_state(name, event, conn=c, **flags)

    # ------------------------------------------------------------------------------------------ offsets

    def committed_offsets(self, name: str, conn: Connection | None = None) -> dict[TopicPartition, KnownOffset]:
        query = sa.select(offsets).where(offsets.c.datasource == name)
        if conn is not None:
            rows = conn.execute(query).mappings().all()
        else:
            with self.session() as c:
                rows = c.execute(query).mappings().all()
        return {TopicPartition(r["topic"], r["partition"]): KnownOffset(int(r["offset"]), r["run_id"]) for r in rows}

    def offsets_last_updated(self, name: str) -> datetime | None:
        with self.session() as conn:
            return as_utc(conn.execute(sa.select(sa.func.max(offsets.c.updated_at))
                                       .where(offsets.c.datasource == name)).scalar())

    def delete_offsets(self, conn: Connection, name: str) -> None:
        conn.execute(offsets.delete().where(offsets.c.datasource == name))

    def write_offsets(self, conn: Connection, name: str, new: Mapping[TopicPartition, int], run_id: str) -> None:
        """Upsert committed offsets inside the caller's locked transaction."""
        now = utcnow()
        existing = set(self.committed_offsets(name, conn))
        for tp, off in sorted(new.items()):
            key = (offsets.c.datasource == name) & (offsets.c.topic == tp.topic) & (offsets.c.partition == tp.partition)
            if tp in existing:
                conn.execute(offsets.update().where(key).values(offset=off, run_id=run_id, updated_at=now))
            else:
                conn.execute(offsets.insert().values(datasource=name, topic=tp.topic, partition=tp.partition,
                                                     offset=off, run_id=run_id, updated_at=now))

    def bump_commit_version(self, conn: Connection, name: str, expected: int) -> int:
        result = conn.execute(
            datasources.update()
            .where((datasources.c.name == name) & (datasources.c.commit_version == expected))
            .values(commit_version=expected + 1, updated_at=utcnow())
        )
        if result.rowcount != 1:
            raise MetadataStoreError(
                f"datasource {name!r}: committed offsets changed concurrently (commit version {expected} is gone); "
                f"the publish was rolled back and can be retried"
            )
        return expected + 1

    # ------------------------------------------------------------------------------------------ claimed ranges

    def published_ranges(self, name: str, conn: Connection | None = None) -> list[PublishedRange]:
        query = sa.select(published_ranges).where(published_ranges.c.datasource == name).order_by(
            published_ranges.c.topic, published_ranges.c.partition, published_ranges.c.start_offset)
        if conn is None:
            with self.session() as c:
                return self.published_ranges(name, c)
        return [PublishedRange(TopicPartition(r["topic"], int(r["partition"])), int(r["start_offset"]),
                               int(r["end_offset"]), r["run_id"], bool(r["backfill"]))
                for r in conn.execute(query).mappings()]

    def claim_ranges(self, conn: Connection, name: str, ranges: list[OffsetRange], run_id: str, *, backfill: bool,
                     claims: list[PublishedRange]) -> None:
        """Record what a publish made visible (inside its transaction; `claims`: the datasource's current ones,
        none overlapping `ranges`). A main-line range extends the main line's stretch that ends where it starts."""
        now = utcnow()
        stretch_ends = {(c.tp, c.end): c for c in claims if not c.backfill}
        for r in ranges:
            if not r.size:
                continue
            stretch = None if backfill else stretch_ends.get((r.tp, r.start))
            if stretch is not None:
                conn.execute(published_ranges.update().where(
                    self._claim_key(name, stretch.tp) & (published_ranges.c.start_offset == stretch.start)
                ).values(end_offset=r.end, run_id=run_id, updated_at=now))
            else:
                conn.execute(published_ranges.insert().values(
                    datasource=name, topic=r.tp.topic, partition=r.tp.partition, start_offset=r.start,
                    end_offset=r.end, run_id=run_id, backfill=backfill, updated_at=now))

    def release_ranges(self, conn: Connection, name: str,
                       at: Mapping[TopicPartition, int] | None = None) -> list[PublishedRange]:
        """Release the claims at and above the given offsets (`None`: all of the datasource), inside the caller's
        locked transaction: an operator moved the main line there and asked to read those offsets again.
        Returns what was released."""
        released = []
        for claim in self.published_ranges(name, conn):
            cut = claim.start if at is None else at.get(claim.tp)
            if cut is None or claim.end <= cut:
                continue
            key = self._claim_key(name, claim.tp) & (published_ranges.c.start_offset == claim.start)
            if claim.start >= cut:
                conn.execute(published_ranges.delete().where(key))
            else:
                conn.execute(published_ranges.update().where(key).values(end_offset=cut, updated_at=utcnow()))
            released.append(replace(claim, start=max(claim.start, cut)))
        return released

    @staticmethod
    def _claim_key(name: str, tp: TopicPartition):
        return ((published_ranges.c.datasource == name) & (published_ranges.c.topic == tp.topic)
                & (published_ranges.c.partition == tp.partition))

    # ------------------------------------------------------------------------------------------ runs

    def insert_run(self, plan: Plan, conn: Connection | None = None, *,
                   deadline_at: datetime | None = None) -> tuple[RunRecord, bool]:
        """Persist a plan: (record, True). If the run id already has one (a concurrent planner won), that
        one is returned instead: (record, False). With `conn`, inside the caller's transaction. `deadline_at`:
        when it expires if its jobs never start."""
        if conn is not None:
            return self._insert_run(conn, plan, deadline_at)
        try:
            with self.session() as c:
                return self._insert_run(c, plan, deadline_at)
        except sa.exc.IntegrityError:
            return self.require_run(plan.datasource, plan.run_id), False

    def _insert_run(self, conn: Connection, plan: Plan, deadline_at: datetime | None) -> tuple[RunRecord, bool]:
        self.lock_datasource(conn, plan.datasource)
        existing = self._get_run(conn, plan.datasource, plan.run_id)
        if existing is not None:
            return existing, False
        seq = int(conn.execute(sa.select(sa.func.coalesce(sa.func.max(runs.c.seq), 0))
                               .where(runs.c.datasource == plan.datasource)).scalar()) + 1
        now = utcnow()
        conn.execute(runs.insert().values(
            datasource=plan.datasource, run_id=plan.run_id, seq=seq, status=RunStatus.PLANNED.value,
            plan=plan.to_json(), records=plan.records, created_at=plan.created_at, updated_at=now,
            deadline_at=deadline_at))
        conn.execute(task_groups.insert(), [
            {"datasource": plan.datasource, "run_id": plan.run_id, "group_id": g.group_id,
             "records": g.records, "updated_at": now,
             "status": (GroupStatus.EMPTY if g.is_empty else GroupStatus.PENDING).value}
            for g in plan.groups])
        return RunRecord(plan.datasource, plan.run_id, seq, RunStatus.PLANNED, plan, plan.created_at,
                         None, None, None, deadline_at=deadline_at), True

    def _get_run(self, conn: Connection, name: str, run_id: str) -> RunRecord | None:
        row = conn.execute(sa.select(runs).where((runs.c.datasource == name) & (runs.c.run_id == run_id))
                           ).mappings().first()
        return _run_record(row) if row else None

    def get_run(self, name: str, run_id: str, conn: Connection | None = None) -> RunRecord | None:
        if conn is not None:
            return self._get_run(conn, name, run_id)
        with self.session() as c:
            return self._get_run(c, name, run_id)

    def require_run(self, name: str, run_id: str, conn: Connection | None = None) -> RunRecord:
        record = self.get_run(name, run_id, conn)
        if record is None:
            raise RunNotFoundError(f"datasource {name!r} has no planned run {run_id!r}")
        return record

    def list_runs(self, name: str, limit: int | None = 20) -> list[RunRecord]:
        """Newest first; `limit` None: all of them."""
        query = sa.select(runs).where(runs.c.datasource == name).order_by(runs.c.seq.desc())
        with self.session() as conn:
            rows = conn.execute(query if limit is None else query.limit(limit)).mappings().all()
            return [_run_record(r) for r in rows]

    def _inflight_runs(self, conn: Connection, name: str) -> list[RunRecord]:
        rows = conn.execute(sa.select(runs).where(
            (runs.c.datasource == name) & runs.c.status.in_([s.value for s in RunStatus if s.in_flight])
        ).order_by(runs.c.seq)).mappings().all()
        return [_run_record(r) for r in rows]

    def start_run(self, name: str, run_id: str, timeout: timedelta | None, now: datetime | None = None) -> bool:
        """PLANNED (or FAILED, retried) -> RUNNING: its jobs start `now` and it must publish within `timeout`
        (completionTimeout; None: no deadline). An expired run stays expired. True when it changed."""
        now = now or utcnow()
        with self.session() as conn:
            done = conn.execute(runs.update().where(
                (runs.c.datasource == name) & (runs.c.run_id == run_id) & runs.c.expired_at.is_(None)
                & runs.c.status.in_([RunStatus.PLANNED.value, RunStatus.FAILED.value])
            ).values(status=RunStatus.RUNNING.value, running_since=now, updated_at=now,
                     deadline_at=now + timeout if timeout is not None else None))
            return done.rowcount == 1

    def set_missing_deadlines(self, name: str, deadline: datetime) -> list[str]:
        """Runs in flight from before schema v3 have no deadline: give them one, so they cannot hang the line
        either. Backfills keep none (see `start_run`). Returns their ids."""
        with self.session() as conn:
            ids = [r.run_id for r in self._inflight_runs(conn, name)
                   if r.deadline_at is None and not r.plan.is_backfill]
            if ids:
                conn.execute(runs.update().where((runs.c.datasource == name) & runs.c.run_id.in_(ids)
                                                 & runs.c.deadline_at.is_(None)).values(deadline_at=deadline))
        return ids

    def expire_overdue(self, name: str, now: datetime, by: str) -> list[str]:
        """Expire the runs in flight past their deadline: FAILED for good, with the reason and an audit record
        (`by`: who noticed). Nothing continues from their planned ends any more and their publish is refused,
        so the next run plans from the committed offsets. Returns their ids."""
        with self.session() as conn:  # a cheap read first: usually nothing is overdue
            if not any(r.past_deadline(now) for r in self._inflight_runs(conn, name)):
                return []
        expired = []
        with self.session() as conn:
            self.lock_datasource(conn, name)  # the lock a publish takes: a run publishes or expires, not both
            for run in self._inflight_runs(conn, name):
                if not run.past_deadline(now):
                    continue
                reason = run.expiry_reason(now)
                conn.execute(runs.update().where((runs.c.datasource == name) & (runs.c.run_id == run.run_id))
                             .values(status=RunStatus.FAILED.value, error=reason, expired_at=now, updated_at=now))
                self.audit(name, RUN_EXPIRED, {"runId": run.run_id, "status": run.status.value,
                                               "runningSince": run.running_since, "deadline": run.deadline_at,
                                               "detectedBy": by, "reason": reason}, conn=conn)
                expired.append(run.run_id)
        return expired

    def supersede_inflight(self, conn: Connection, name: str, by: str, reason: str) -> list[str]:
        """Mark every in-flight run superseded (their publish is then refused, and no run continues from their
        planned ends); returns their ids."""
        inflight = [s.value for s in RunStatus if s.in_flight]
        ids = [run_id for run_id, plan in conn.execute(sa.select(runs.c.run_id, runs.c.plan).where(
            (runs.c.datasource == name) & runs.c.status.in_(inflight))) if not Plan.from_json(plan).is_backfill]
        if ids:
            conn.execute(runs.update().where((runs.c.datasource == name) & runs.c.run_id.in_(ids)).values(
                status=RunStatus.SUPERSEDED.value, superseded_by=by, error=reason, updated_at=utcnow()))
        return ids

    def inflight_end_offsets(self, name: str) -> dict[TopicPartition, KnownOffset]:
        """Planned end offsets of runs that have not published yet; the latest-planned run wins per partition."""
        with self.session() as conn:
            inflight = self._inflight_runs(conn, name)
        out: dict[TopicPartition, KnownOffset] = {}
        for run in inflight:
            if run.plan.is_backfill:  # its range lies behind the main line: nothing continues from it
                continue
            for tp, end in run.plan.end_offsets().items():
                out[tp] = KnownOffset(end, run.run_id)
        return out

    def set_run_status(self, name: str, run_id: str, status: RunStatus, *, error: str | None = None,
                       superseded_by: str | None = None, conn: Connection | None = None,
                       only_from: tuple[RunStatus, ...] | None = None) -> None:
        values: dict[str, Any] = {"status": status.value, "updated_at": utcnow()}
        if error is not None:
            values["error"] = error
        if superseded_by is not None:
            values["superseded_by"] = superseded_by
        if status is RunStatus.PUBLISHED:
            values["published_at"] = utcnow()
        where = (runs.c.datasource == name) & (runs.c.run_id == run_id)
        if only_from is not None:
            where &= runs.c.status.in_([s.value for s in only_from])
        stmt = runs.update().where(where).values(**values)
        if conn is not None:
            conn.execute(stmt)
        else:
            with self.session() as c:
                c.execute(stmt)

    def set_group_status(self, conn: Connection, name: str, run_id: str, group_id: int, status: GroupStatus) -> None:
        conn.execute(task_groups.update().where(
            (task_groups.c.datasource == name) & (task_groups.c.run_id == run_id) & (task_groups.c.group_id == group_id)
        ).values(status=status.value, updated_at=utcnow()))

    def group_statuses(self, name: str, run_id: str) -> dict[int, GroupStatus]:
        with self.session() as conn:
            rows = conn.execute(sa.select(task_groups.c.group_id, task_groups.c.status).where(
                (task_groups.c.datasource == name) & (task_groups.c.run_id == run_id))).all()
        return {int(g): GroupStatus(s) for g, s in rows}

    # ------------------------------------------------------------------------------------------ segments

    def segments(self, name: str, *, used_only: bool = True, run_id: str | None = None) -> list[SegmentRecord]:
        query = sa.select(segments).where(segments.c.datasource == name)
        if used_only:
            query = query.where(segments.c.used == sa.true())
        if run_id is not None:
            query = query.where(segments.c.run_id == run_id)
        with self.session() as conn:
            rows = conn.execute(query.order_by(segments.c.interval_start, segments.c.version,
                                               segments.c.partition_num)).mappings().all()
        return [_segment_record(r) for r in rows]

    # ------------------------------------------------------------------------------------------ reports, audit

    def add_task_report(self, report: GroupReport) -> None:
        with self.session() as conn:
            conn.execute(task_reports.insert().values(
                datasource=report.datasource, run_id=report.run_id, group_id=report.group_id,
                replica=report.replica, report=report.to_json(), created_at=utcnow()))

    def task_reports(self, name: str, run_id: str | None = None) -> list[GroupReport]:
        """The reports kept at publish (one per task group replica that succeeded), oldest first."""
        query = sa.select(task_reports).where(task_reports.c.datasource == name)
        if run_id is not None:
            query = query.where(task_reports.c.run_id == run_id)
        with self.session() as conn:
            rows = conn.execute(query.order_by(task_reports.c.id)).mappings().all()
        return [GroupReport.from_json(r["report"], f"the stored report {r['id']} (ingest_task_reports) of run "
                                                   f"{r['run_id']} of {name!r}") for r in rows]

    def run_row_stats(self, name: str, run_id: str) -> dict[str, int]:
        """Row stats of a run: the sum over its task groups, each counted once. Replicas read the same records,
        so a group counts the report of its published replica only."""
        by_group: dict[int, list[AttemptReport]] = {}
        for report in self.task_reports(name, run_id):
            by_group.setdefault(report.group_id, []).append(AttemptReport(report))
        if not by_group:
            return {}
        stats = RowStats()
        for attempts in by_group.values():
            published = published_attempt(attempts)
            if published is not None:
                stats.add(published.report.stats)
        return stats.to_json()

    def audit(self, name: str, action: str, details: dict, actor: str = "system", conn: Connection | None = None) -> None:
        stmt = audit_log.insert().values(datasource=name, action=action, actor=actor,
                                         details=json.loads(json.dumps(details, default=str)), created_at=utcnow())
        if conn is not None:
            conn.execute(stmt)
        else:
            with self.session() as c:
                c.execute(stmt)

    def audit_records(self, name: str, *, action: str | None = None, limit: int | None = None) -> list[AuditRecord]:
        """Oldest first; with `limit`, the most recent ones."""
        query = sa.select(audit_log).where(audit_log.c.datasource == name)
        if action is not None:
            query = query.where(audit_log.c.action == action)
        if limit is not None:
            query = query.order_by(audit_log.c.id.desc()).limit(limit)
        with self.session() as conn:
            rows = sorted(conn.execute(query).mappings().all(), key=lambda r: r["id"])
        return [AuditRecord(r["datasource"], r["action"], r["actor"], r["details"], as_utc(r["created_at"]))
                for r in rows]


def _run_record(row: Mapping[str, Any]) -> RunRecord:
    return RunRecord(
        datasource=row["datasource"], run_id=row["run_id"], seq=int(row["seq"]), status=RunStatus(row["status"]),
        plan=Plan.from_json(row["plan"]), created_at=as_utc(row["created_at"]),
        published_at=as_utc(row["published_at"]), superseded_by=row["superseded_by"], error=row["error"],
        running_since=as_utc(row["running_since"]), deadline_at=as_utc(row["deadline_at"]),
        expired_at=as_utc(row["expired_at"]),
    )


def _segment_record(row: Mapping[str, Any]) -> SegmentRecord:
    return SegmentRecord(
        id=row["id"], datasource=row["datasource"], interval_start=as_utc(row["interval_start"]),
        interval_end=as_utc(row["interval_end"]), version=row["version"], partition_num=int(row["partition_num"]),
        location=row["location"], num_rows=int(row["num_rows"]), size_bytes=int(row["size_bytes"]),
        used=bool(row["used"]), run_id=row["run_id"], group_id=int(row["group_id"]),
        start_offsets=row["start_offsets"], end_offsets=row["end_offsets"], created_at=as_utc(row["created_at"]),
        payload=row["payload"],
    )
