"""One metadata database: its engine, its transactions, its schema check and upgrade, and the planning lock.

The repositories (`datasources`, `runs`, ...) run their statements through it: inside the caller's
transaction when given one (`conn=`), else in one of their own (`within`). Every transaction but the schema
upgrade's first checks that the store is at the schema revision this release needs (`migrations.history`).
"""

from __future__ import annotations

import fcntl
import hashlib
from contextlib import contextmanager
from typing import Iterator

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from ingest_core.core.errors import MetadataStoreError, MetadataStoreUnavailableError
from ingest_core.store.migrations import history
from ingest_core.store.engines import make_engine


class Database:
    def __init__(self, url: str, engine: Engine | None = None):
        self.url = url
        self.engine = engine or make_engine(url)
        self._schema_checked = False

    @property
    def is_postgres(self) -> bool:
        return self.engine.dialect.name == "postgresql"

    @property
    def safe_url(self) -> str:
        return self.engine.url.render_as_string(hide_password=True)

    def dispose(self) -> None:
        """Close the engine's pooled connections (a later use opens new ones)."""
        self.engine.dispose()

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.dispose()

    # ------------------------------------------------------------------------------------------ schema

    def current_revision(self) -> str | None:
        """The schema revision the store is at (None: an empty database)."""
        try:
            with self.engine.connect() as conn:
                return history.installed(conn)
        except sa.exc.OperationalError as exc:
            raise MetadataStoreUnavailableError(f"metadata store {self.safe_url} is unreachable: {exc.orig}",
                                                endpoint=self.safe_url) from None

    def upgrade(self) -> history.SchemaUpgrade:
        """Create or upgrade the schema to the newest revision, in one transaction."""
        import ingest_core.store.migrations.revisions as revisions  # Alembic: imported by the upgrade only (0.2 s)

        try:
            with self.transaction() as conn:
                done = revisions.upgrade(conn)
        except history.UnknownRevision as exc:
            raise self._unknown(exc.found) from None
        except revisions.UpgradeFailed as exc:
            raise MetadataStoreError(
                f"metadata store {self.safe_url}: the schema upgrade from revision {exc.found or 'none (empty)'} "
                f"failed at revision {exc.revision} ({exc.title}): {exc.reason}; nothing was changed (the upgrade "
                f"is one transaction)") from None
        self._schema_checked = True
        return done

    def check_schema(self) -> None:
        if self._schema_checked:
            return
        found = self.current_revision()
        if found != history.head():
            if found is not None and not history.is_known(found):
                raise self._unknown(found)
            raise MetadataStoreError(
                f"metadata store {self.safe_url} has schema revision {found or 'none (empty)'}, this release needs "
                f"{history.head()}: run `ingest db upgrade`")
        self._schema_checked = True

    def _unknown(self, found: str) -> MetadataStoreError:
        return MetadataStoreError(
            f"metadata store {self.safe_url} is at schema revision {found}, which this release does not know (its "
            f"newest is {history.head()}): a newer release upgraded it; run that release or a later one; "
            f"nothing was changed")

    # ------------------------------------------------------------------------------------------ transactions

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """A transaction without the schema check (the upgrade's, and tests that build old schemas)."""
        with self.engine.begin() as conn:
            yield conn

    @contextmanager
    def session(self) -> Iterator[Connection]:
        self.check_schema()
        with self.engine.begin() as conn:
            yield conn

    @contextmanager
    def within(self, conn: Connection | None) -> Iterator[Connection]:
        """The caller's transaction `conn`, or a session of its own when None."""
        if conn is not None:
            yield conn
            return
        with self.session() as own:
            yield own

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
