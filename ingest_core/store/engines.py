"""SQLAlchemy engines of the metadata store: how one is made for a URL."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Engine


def make_engine(url: str) -> Engine:
    """A new engine: SQLite with WAL and `BEGIN IMMEDIATE` (writers serialize), PostgreSQL with pre-ping."""
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
