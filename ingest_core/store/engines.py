"""SQLAlchemy engines of the metadata store: how one is made for a URL, and the one engine per URL that a process
shares.

An engine holds a pool of connections. Processes that open the store again and again (an Airflow worker's
tasks, the API server's requests) share one per URL (`shared_engine`), so they reuse its connections instead of
leaving a pool behind per call; the shared engines are disposed when the process exits. A forked child starts
with fresh pools: a connection must never be used by two processes.
"""

from __future__ import annotations

import atexit
import os
import threading
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Engine

_shared: dict[str, Engine] = {}
_shared_lock = threading.Lock()


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


def shared_engine(url: str) -> Engine:
    """This process's engine for `url`, made on first use."""
    with _shared_lock:
        engine = _shared.get(url)
        if engine is None:
            engine = _shared[url] = make_engine(url)
        return engine


def dispose_shared() -> None:
    """Close the shared engines' connections and forget them (at exit; the next `shared_engine` makes a new one)."""
    with _shared_lock:
        engines = list(_shared.values())
        _shared.clear()
    for engine in engines:
        engine.dispose()


def _fresh_pools_in_child() -> None:
    # SQLAlchemy's rule for forks: the child replaces the pools without closing the parent's connections. The
    # lock too: another thread of the parent may have held it at the fork.
    global _shared_lock
    _shared_lock = threading.Lock()
    for engine in list(_shared.values()):
        engine.dispose(close=False)


atexit.register(dispose_shared)
os.register_at_fork(after_in_child=_fresh_pools_in_child)
