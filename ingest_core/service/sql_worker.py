"""A SQL query (`query.engine.run_sql`) in a process of its own, so that no query can take its server down: the
REST API's and `ingest query`'s.

    job = SqlJob(metadata_url, dags_folder, query, ..., render=functools.partial(write_result, request=request))
    with SqlWorker(ForkServer.shared()).run(job, may_read=..., cancel=cancel) as result:
        for chunk in result.chunks:   # the body, as `render` wrote it
            ...

Everything a query costs is the worker's: DuckDB's work, the Python it runs (DataSketches' functions), the
parsing of its text (sqlglot), the result's rows and their serialization. The worker has a hard memory limit
(RLIMIT_DATA: `SqlLimits.worker_memory_bytes` above what it held when forked, so that Python and Arrow fail an
allocation, and the query ends in DuckDB's "Out of Memory Error" rather than the machine's memory), runs at a
lower priority (`WORKER_NICE`) and is killed (SIGKILL) at its deadline, on Druid's cancel and when its client
goes away: no interrupt that a function written in Python or C++ could hold off. The server's side only answers
the worker's questions (may the caller read datasource X: the server holds the caller's permissions) and moves
the body's bytes on, a chunk at a time. A body larger than `SqlLimits.max_result_bytes` is an error, not sent.

Messages on the worker's connection (pickled, but the body's chunks, which are bytes as they are):
  server -> worker   the SqlJob; then the answer (True / False) to each question
  worker -> server   ("ask", name) may the caller read datasource `name`?
                     ("error", code, message) the query failed (an `SqlError` of that code)
                     ("result", truncated, size) then the body in chunks of at most CHUNK bytes
"""

from __future__ import annotations

import dataclasses
import functools
import os
import pickle
import resource
import signal
import socket
import sys
import threading
import time
import traceback
import uuid
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Callable, Iterator, Protocol

import pyarrow as pa
import sqlalchemy as sa

from ingest_core.service.status import specs_in, supervisor_rows
from ingest_core.query import druid_sql
from ingest_core.store.metadata import MetadataStore
from ingest_core.query.engine import run_sql
from ingest_core.query.errors import (DatasourceNotReadable, SqlCancelledError, SqlError, SqlResultTooLargeError,
                                      SqlTimeLimitError, stopped_error)
from ingest_core.query.limits import TIME_LIMIT, QueryCancel, SqlLimits, bytes_text

CHUNK = 1 << 20  # bytes of body per message: what the server holds of a body at once
POLL_S = 0.05  # how often the server's side looks at the deadline and the cancel while it waits for the worker
WORKER_NICE = 10  # a worker's CPU priority below the server's: the server's own API answers while queries run
MAX_QUESTIONS = 10_000  # names a query may ask about: each is the auth manager's work, in the server's process
ERRORS = {cls.code: cls for cls in (SqlError, SqlTimeLimitError, SqlCancelledError, DatasourceNotReadable,
                                    SqlResultTooLargeError)}


@dataclass(frozen=True)
class SqlJob:
    """What a worker runs (sent to it pickled): the query and its limits, and how its body is written."""

    metadata_url: str
    dags_folder: str | None  # the specs there name each datasource's deep storage settings
    query: str
    render: Callable[[pa.Table], str]  # the body of a result: a module-level function, or a partial of one
    parameters: tuple = ()
    time_zone: str = "UTC"
    timeout_s: float | None = None
    max_rows: int | None = None
    limits: SqlLimits | None = None  # None: DuckDB's defaults and no memory limit (`ingest query`: the user's own)
    asks: bool = False  # whether the worker asks the server which datasources the caller may read (else: all)


class Spawner(Protocol):
    """Where workers come from: the fork server (`service.sql_forkserver`) or `DirectFork`."""

    def fork(self, spill_dir: str) -> tuple[int, Connection]: ...

    def kill(self, pid: int) -> None: ...


class DirectFork:
    """Workers forked from this process itself: for a single-threaded command (`ingest query`), which has
    imported what a query needs already. Its workers are reaped here."""

    def fork(self, spill_dir: str) -> tuple[int, Connection]:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                ours.close()
                work(Connection(theirs.detach()), spill_dir)
                code = 0
            finally:
                os._exit(code)
        theirs.close()
        return pid, Connection(ours.detach())

    def kill(self, pid: int) -> None:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(pid, 0)


class WorkerResult:
    """A query's result while its worker sends the body: `truncated` (past max_rows), `size` (bytes) and
    `chunks`; the worker is killed (if it has not ended) by `close()` or at the end of a `with` block."""

    def __init__(self, query: "_Query", truncated: bool, size: int):
        self.query, self.truncated, self.size = query, truncated, size
        self.chunks: Iterator[bytes] = self._chunks()

    def _chunks(self) -> Iterator[bytes]:
        received = 0
        try:
            while received < self.size:
                chunk = self.query.receive(raw=True)
                received += len(chunk)
                yield chunk
        except SqlError as exc:  # stopped mid-body (its deadline, its client): the body ends short
            print(f"sql_worker: a body ended after {received} of {self.size} bytes: {exc}", file=sys.stderr)
        finally:
            self.close()

    def read(self) -> bytes:
        return b"".join(self.chunks)

    def close(self) -> None:
        self.query.close()

    def __enter__(self) -> "WorkerResult":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class SqlWorker:
    """Runs jobs in workers of a `Spawner`."""

    def __init__(self, spawner: Spawner):
        self.spawner = spawner

    def run(self, job: SqlJob, *, may_read: Callable[[str], bool] | None = None,
            cancel: QueryCancel | None = None) -> WorkerResult:
        """The job's result once its worker has it (its body still to come), or its `SqlError`: the query's own,
        or `SqlTimeLimitError` at `job.timeout_s`, `SqlCancelledError` once `cancel` is cancelled. Blocks: call it
        from a thread that may wait."""
        query = _Query(self.spawner, job, may_read, cancel or QueryCancel())
        try:
            return query.result()
        except BaseException:
            query.close()
            raise


class _Query:
    """The server's side of one worker."""

    def __init__(self, spawner: Spawner, job: SqlJob, may_read: Callable[[str], bool] | None,
                 cancel: QueryCancel):
        self.spawner, self.job, self.may_read, self.cancel = spawner, job, may_read, cancel
        self.deadline = time.monotonic() + job.timeout_s if job.timeout_s else None
        spill = os.path.join(job.limits.spill_root(), f"q-{uuid.uuid4().hex}") if job.limits else ""
        self.pid: int | None = None
        self.closing = threading.Lock()  # the body's thread and the server's loop may both close
        self.pid, self.conn = spawner.fork(spill)
        self.questions = 0
        try:
            self.conn.send(job)
        except OSError:
            self.close()
            raise SqlError(_ended_message(job.limits)) from None

    def result(self) -> WorkerResult:
        while True:
            message = self.receive()
            kind = message[0] if isinstance(message, tuple) else None
            if kind == "ask":
                self.questions += 1
                if self.questions > MAX_QUESTIONS:
                    raise SqlError(f"the query names more than {MAX_QUESTIONS:,} tables")
                self.conn.send(self.may_read is None or bool(self.may_read(message[1])))
            elif kind == "error":
                raise _error(message[1], message[2])
            elif kind == "result":
                return WorkerResult(self, message[1], message[2])
            else:
                raise SqlError(f"the query failed: its worker sent {type(message).__name__}")

    def receive(self, raw: bool = False) -> Any:
        """The worker's next message (`raw`: a chunk of body, as it is); the stop's error past the deadline or once
        cancelled; an error if the worker ended without a word."""
        while True:
            now = time.monotonic()
            if self.cancel.reason is None and self.deadline is not None and now >= self.deadline:
                self.cancel.cancel(TIME_LIMIT)
            if self.cancel.reason is not None:
                self.close()
                raise stopped_error(self.cancel.reason, self.job.timeout_s)
            wait = POLL_S if self.deadline is None else max(0.0, min(POLL_S, self.deadline - now))
            try:
                if self.conn.poll(wait):
                    message = self.conn.recv_bytes()
                    return message if raw else pickle.loads(message)
            except (EOFError, OSError):
                self.close()
                raise SqlError(_ended_message(self.job.limits)) from None

    def close(self) -> None:
        """The worker killed, unless it has ended; its connection closed. Safe to call twice."""
        with self.closing:
            pid, self.pid = self.pid, None
        if pid is not None:
            self.spawner.kill(pid)
            self.conn.close()


def _error(code: str, message: str) -> SqlError:
    """The worker's error as the class of its code, with its message (what the REST API maps to Druid's)."""
    cls = ERRORS.get(code, SqlError)
    error = cls.__new__(cls)
    Exception.__init__(error, message)
    return error


def _ended_message(limits: SqlLimits | None) -> str:
    bound = f" at its memory limit of {bytes_text(limits.worker_memory_bytes())}" if limits else ""
    return (f"the query failed: Out of Memory Error: its worker process ended{bound} (or crashed) without an "
            "answer")


# ---------------------------------------------------------------------------------------------- the worker


def preload() -> None:
    """What every worker needs, loaded once where workers are forked from (`sql_forkserver`): DuckDB's module
    (`query.engine` imports it when it first connects), SQLAlchemy's dialects of the metadata store (loaded on an
    engine's first use) and a first query's lazily built state, run on a database closed again, so that no DuckDB
    thread is left in the process that forks."""
    import duckdb

    for url in ("sqlite://", "postgresql+psycopg2://"):
        try:
            sa.create_engine(url).dispose()
        except ImportError:  # no PostgreSQL driver: a SQLite store only
            pass

    con = duckdb.connect(":memory:", config={"threads": 1})
    text = druid_sql.to_duckdb("SELECT 1 AS one", "UTC")
    con.execute("SELECT json_serialize_sql(?)", [text]).fetchall()
    druid_sql.register(con, text)
    con.sql(text).to_arrow_reader(10).read_all()
    con.close()


def work(conn: Connection, spill_dir: str) -> None:
    """A worker's life: its job from `conn`, run within its limits, the result or error sent back."""
    job: SqlJob = conn.recv()
    limits = job.limits
    if limits is not None:
        limits = dataclasses.replace(limits, temp_directory=spill_dir or limits.temp_directory)
        _bound_memory(limits.worker_memory_bytes())
        os.nice(WORKER_NICE)
    try:
        body, truncated = _body(job, limits, conn)
        conn.send(("result", truncated, len(body)))
        view = memoryview(body)
        for start in range(0, len(body), CHUNK):
            conn.send_bytes(view[start:start + CHUNK])
    except (BrokenPipeError, ConnectionResetError):  # the server's side has gone (its client, its deadline)
        return
    except SqlError as exc:
        # Python's MemoryError in a function DuckDB called (a sketch function) reaches here as DuckDB's error
        # naming it: the worker's memory limit, said as the limit it is
        out_of_memory = type(exc) is SqlError and ": MemoryError" in str(exc)
        conn.send(("error", exc.code, _out_of_memory(limits) if out_of_memory else str(exc)))
    except MemoryError:
        conn.send(("error", SqlError.code, _out_of_memory(limits)))
    except Exception as exc:  # noqa: BLE001 - a worker answers every failure in one line
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if not first.startswith("Out of Memory Error"):  # Arrow's or DuckDB's own, past the worker's limit: expected
            traceback.print_exc()
        conn.send(("error", SqlError.code, f"the query failed: {first}"))


def _body(job: SqlJob, limits: SqlLimits | None, conn: Connection) -> tuple[bytes, bool]:
    store = MetadataStore(job.metadata_url)
    specs = specs_in(job.dags_folder)  # each datasource's deep storage settings (an object store's endpoint, keys)
    asked: dict[str, bool] = {}

    def may_read(name: str) -> bool:
        if name not in asked:
            conn.send(("ask", name))
            asked[name] = conn.recv()
        return asked[name]

    max_bytes = limits.max_result_bytes_int() if limits else None
    result = run_sql(store, job.query, may_read=may_read if job.asks else None, max_rows=job.max_rows,
                     timeout_s=job.timeout_s, parameters=job.parameters, time_zone=job.time_zone, limits=limits,
                     max_bytes=max_bytes, supervisors=functools.partial(supervisor_rows, store, specs=specs))
    body = job.render(result.table).encode()
    if max_bytes is not None and len(body) > max_bytes:
        raise SqlResultTooLargeError.of(len(body), max_bytes)
    return body, result.truncated


def _bound_memory(budget: int) -> None:
    """RLIMIT_DATA at what the process holds now (its share of the fork server's imports) plus `budget`: the
    writable memory it may map, Python's, Arrow's and DuckDB's alike."""
    held = 0
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmData:"):
                held = int(line.split()[1]) * 1024
    resource.setrlimit(resource.RLIMIT_DATA, (held + budget, held + budget))


def _out_of_memory(limits: SqlLimits | None) -> str:
    bound = (f"its worker's memory limit of {bytes_text(limits.worker_memory_bytes())} (INGEST_SQL_MEMORY_LIMIT, "
             "INGEST_SQL_MAX_RESULT_BYTES)" if limits else "the machine's memory")
    return f"the query failed: Out of Memory Error: the query needs more than {bound}"
