"""SQLAlchemy engines of the metadata store: how one is made for a URL, and the one engine per URL that a process
shares.

An engine holds a pool of connections. Processes that open the store again and again (an Airflow worker's
tasks, the API server's requests) share one per URL (`shared_engine`), so they reuse its connections instead of
leaving a pool behind per call; the shared engines are disposed when the process exits. A forked child starts
with fresh pools: a connection must never be used by two processes.
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import threading
import time
from pathlib import Path
from typing import Callable, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ingest_core.core import json_text
from ingest_core.core.defaults import METADATA_CONNECT_TIMEOUT_S
from ingest_core.core.errors import MetadataStoreUnavailableError, MetadataUrlError

log = logging.getLogger(__name__)
T = TypeVar("T")

# How long a transient metadata-store error (a restart, a failover, a lost connection) is retried, as Druid's SQL
# metadata connector does, before it fails what was being done.
RETRY_SECONDS = float(os.environ.get("INGEST_METADATA_RETRY_SECONDS", "60"))
RETRY_FIRST_WAIT_S, RETRY_MAX_WAIT_S = 0.25, 5.0

# PostgreSQL's SQLSTATEs worth another try: serialization failure, deadlock, the server shutting down or starting
# up; class 08 is every connection exception.
_TRANSIENT_SQLSTATES = {"40001", "40P01", "57P01", "57P02", "57P03"}
# psycopg2 reports a connection it could not open or lost with no SQLSTATE: its message says which.
_TRANSIENT_MESSAGES = ("connection refused", "server closed the connection", "connection reset",
                       "connection already closed", "terminating connection", "could not receive data",
                       "could not send data", "ssl connection has been closed", "the database system is",
                       "connection timed out", "timeout expired", "no connection to the server")


def is_transient(exc: BaseException) -> bool:
    """A metadata-store error that another try may not meet: a lost or refused connection, a server
    restarting, a serialization failure or a deadlock. Never a wrong password, database or host name, nor an
    error in a statement."""
    if isinstance(exc, sa.exc.DBAPIError) and exc.connection_invalidated:
        return True
    orig = exc.orig if isinstance(exc, sa.exc.DBAPIError) else exc
    code = getattr(orig, "pgcode", None)
    if code:
        return code in _TRANSIENT_SQLSTATES or code.startswith("08")
    return isinstance(orig, _dbapi_errors()) and any(m in str(orig).lower() for m in _TRANSIENT_MESSAGES)


def _dbapi_errors() -> tuple[type, ...]:
    try:
        import psycopg2
    except ImportError:  # pragma: no cover - SQLite only
        return ()
    return (psycopg2.OperationalError, psycopg2.InterfaceError)


def _first_line(exc: BaseException) -> str:
    text = str(exc.orig if isinstance(exc, sa.exc.DBAPIError) else exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def retry_transient(work: Callable[[], T], what: str, endpoint: str = "") -> T:
    """`work()`, tried again with a growing wait while it fails with a transient error, for up to
    RETRY_SECONDS; other errors, and one still failing then, are raised. `work` must be safe to run again
    after a failure: a transaction that failed before its commit was acknowledged may have committed, so it must
    recognise its own earlier success (the publish does: an already-published run is a no-op)."""
    deadline = time.monotonic() + RETRY_SECONDS
    wait, tries = RETRY_FIRST_WAIT_S, 1
    while True:
        try:
            return work()
        except Exception as exc:  # noqa: BLE001 - classified below; anything else is raised as it is
            if not is_transient(exc):
                raise
            if time.monotonic() + wait > deadline:
                raise MetadataStoreUnavailableError(
                    f"{what}: the metadata store still failed after {tries} tries (retried for up to "
                    f"INGEST_METADATA_RETRY_SECONDS, {RETRY_SECONDS:g}s): {_first_line(exc)}. Check that it is up "
                    "and reachable at that address.", endpoint=endpoint, deadline_s=RETRY_SECONDS) from exc
            log.warning("%s: transient metadata store error (try %d), retrying in %.2gs: %s", what, tries, wait,
                        _first_line(exc))
            time.sleep(wait)
            wait, tries = min(wait * 2, RETRY_MAX_WAIT_S), tries + 1


_shared: dict[str, Engine] = {}
_shared_lock = threading.Lock()


_EXAMPLES = "e.g. postgresql+psycopg2://user:password@host:5432/db or sqlite:////absolute/path/metadata.db"


def redact_url(url: str) -> str:
    """`url` with its password hidden, also when SQLAlchemy cannot parse it."""
    return re.sub(r"^([^:/]+://[^:@/]*:).*@", r"\1***@", url)  # to the last @: a password may hold one


def checked_url(url: str) -> sa.engine.URL:
    """`url` parsed, with a database SQLAlchemy knows and its driver installed; else a one-line error naming
    what is wrong (the password hidden)."""
    where = f"metadata store URL {redact_url(url)!r} (--metadata-url or INGEST_METADATA_URL)"
    try:
        parsed = sa.engine.make_url(url)
    except (sa.exc.ArgumentError, ValueError):  # a non-numeric port is int()'s ValueError
        port = re.search(r"://(?:.*@)?[^/:@]*:([^/]*)", url)
        why = (f"port {port.group(1)!r} is not a number" if port and not port.group(1).isdigit()
               else "it is not a URL")
        raise MetadataUrlError(f"{where}: {why}; {_EXAMPLES}") from None
    try:
        parsed.get_dialect().import_dbapi()
    except sa.exc.NoSuchModuleError:
        raise MetadataUrlError(f"{where}: SQLAlchemy knows no database {parsed.drivername!r}; {_EXAMPLES}") from None
    except ImportError as exc:
        raise MetadataUrlError(f"{where}: the driver of {parsed.drivername!r} is not installed ({exc}); "
                               f"{_EXAMPLES}") from None
    return parsed


# the JSON columns (a run's plan: 13 MB of JSON at 100,000 partitions) written and read with msgspec
_JSON_CODEC = {"json_serializer": json_text.dumps, "json_deserializer": json_text.loads}


def make_engine(url: str) -> Engine:
    """A new engine: SQLite with WAL and `BEGIN IMMEDIATE` (writers serialize), PostgreSQL with pre-ping."""
    parsed = checked_url(url)
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database
        if database and database != ":memory:":
            Path(database).parent.mkdir(parents=True, exist_ok=True)  # the embedded default lives in INGEST_HOME
        engine = sa.create_engine(url, connect_args={"timeout": 60, "check_same_thread": False}, **_JSON_CODEC)

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
    # libpq waits for ever for a server that accepts the connection and never answers: give it a deadline (the
    # URL's own ?connect_timeout= wins; only libpq drivers know the setting)
    connect_args = {"connect_timeout": METADATA_CONNECT_TIMEOUT_S} if (
        parsed.get_backend_name() == "postgresql" and parsed.get_driver_name() == "psycopg2"
        and "connect_timeout" not in parsed.query) else {}
    engine = sa.create_engine(url, pool_pre_ping=True, connect_args=connect_args, **_JSON_CODEC)
    safe_url = engine.url.render_as_string(hide_password=True)

    @sa.event.listens_for(engine, "do_connect")
    def _connect_with_retry(dialect, _record, cargs, cparams):
        # Every new connection (the pool's, a pre-ping's reconnect after a restart) waits out a restarting
        # server; a wrong password, host or database fails at once. Connecting again is always safe.
        return retry_transient(lambda: dialect.loaded_dbapi.connect(*cargs, **cparams),
                               f"connecting to the metadata store {safe_url}", safe_url)

    return engine


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
