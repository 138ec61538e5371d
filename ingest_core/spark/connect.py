"""The ingest job over Spark Connect: the Airflow task is the job's client, a long-lived Spark runs it.

A `spark_connect` connection (the Spark provider's type: host, port, login = user id, password = token,
extra `use_ssl`) makes the DAG's `spark_job` tasks run `ingest_core.spark.job.run_group` as a Spark Connect
client inside the task: no JVM of its own, so a microbatch's fixed cost is a session (about a second) instead
of a spark-submit (18-20 s here).

- Sessions: the jobs of one datasource share one server-side session per version of this project's code (a
  `session_id` derived from both). Spark starts Python daemons per session and keeps them until the server
  stops (SPARK-54055): a session per job cost each job about 3.5 s of worker start-up and left 3 idle Python
  daemons on the server for good. A worker idle for a minute is closed and forked again from its daemon: with
  `spark.python.daemon.module=spark_jobs.python_daemon` on the server it forks with the job's libraries loaded. A job detaches from the shared session without releasing it. A session the
  server has closed (its idle timeout, `spark.connect.session.manager.defaultSessionTimeout`) cannot be
  reopened: the next of a few derived ids is used, then a session of the job's own.
- Code: the server's Python workers run the split reader (`ingest_core.spark.kafka_source`) and the parser. This
  module ships the client's own executor-side packages (`PACKAGES`, source and bytecode) with the session
  (`addArtifacts(..., pyfile=True)`), so the workers run the same code as the task; third-party packages
  (pyarrow, confluent-kafka, PyYAML, ...) must be installed on the server's Python (the project's
  dependencies). Client and worker Python must have the same major.minor: checked once per session, with a
  clear error.
- Settings: the job's required settings are session settings (`spark.conf.set`), as spark-submit's `--conf`.
- Deadline: `completionTimeout` interrupts the job's own queries (`interruptTag` on a tag of the job), so a
  stuck query does not outlive its task and the other jobs in the session go on; killing the task (Airflow's
  on_kill) does the same.
- Deep storage must be reachable from the task (it reads the splits' reports and Parquet footers) and from
  the server's executors (they write them), as with spark-submit.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import logging
import marshal
import os
import sys
import tempfile
import threading
import time
import uuid
import zipfile
from pathlib import Path
from typing import Any, Iterator, Sequence

from ingest_core.core.defaults import SPARK_CONNECT_TIMEOUT_S, STALL_TIMEOUT_S
from ingest_core.core.errors import IngestError, SparkConnectError, SparkConnectUnavailableError
from ingest_core.handover.job_input import JobInput
from ingest_core.spark.job_errors import spark_condition
from ingest_core.spark.settings import REQUIRED_CONF, default_conf

log = logging.getLogger(__name__)

# what the server's Python workers import: the split reader and its parser, never Airflow, the store or dev tools
PACKAGES = ("ingest_core/__init__.py", "ingest_core/core", "ingest_core/handover", "ingest_core/executor",
            "ingest_core/kafka", "ingest_core/spark")
_CONNECT_MODE = "SPARK_CONNECT_MODE_ENABLED"
# pyspark's retries of an unavailable server: 0.05 s doubling to 1 s, then every second, about 26 s in all; a
# server back within them (restarted) is asked again within a second of it (with 10 s steps, up to 10 s later)
RETRIES, RETRY_FIRST_MS, RETRY_MAX_MS = 30, 50, 1000
# gRPC's own reconnection of the channel: it waits 1 s growing to 120 s between tries by default, and pyspark's
# retries meanwhile fail at once; a restarted server was met up to 6 s after it was back (BENCHMARKS.md)
RECONNECT_OPTIONS = [("grpc.initial_reconnect_backoff_ms", 100), ("grpc.min_reconnect_backoff_ms", 100),
                     ("grpc.max_reconnect_backoff_ms", 1000)]
SESSION_GENERATIONS = 16  # shared session ids tried before a job opens a session of its own
PYTHON_CHECKED = "ingest.connect.pythonVersion"  # a session setting: the check passed in this session
CODE_ADDED = "ingest.connect.codeArchive"  # a session setting: the code archive (by name) the session has
# addArtifacts(pyfile=True) calls importlib.invalidate_caches(), which two threads of a process must not run at once
_ADDING = threading.Lock()
ROOT = Path(__file__).resolve().parents[2]


# how long the server may take to accept a session's channel (docs/deadlines.md)
CONNECT_TIMEOUT_VAR = "INGEST_SPARK_CONNECT_TIMEOUT"


def connect_timeout_s() -> float:
    """`INGEST_SPARK_CONNECT_TIMEOUT` (seconds), else the default."""
    value = os.environ.get(CONNECT_TIMEOUT_VAR, "").strip()
    try:
        return float(value) if value else SPARK_CONNECT_TIMEOUT_S
    except ValueError:
        raise SparkConnectError(f"{CONNECT_TIMEOUT_VAR}={value!r} is not a number of seconds") from None


def code_archive() -> Path:
    """A zip of this project's packages, named by its content and this Python's bytecode version so an unchanged
    tree is zipped once. Each module goes as source and as bytecode (`x.pyc` beside `x.py`, which zipimport loads
    first): a worker importing from the zip would otherwise compile every module again, about 0.3 CPU-s per
    worker. A worker of another Python version ignores the bytecode (its magic number differs) and compiles."""
    files = sorted(p for pkg in PACKAGES for p in ((ROOT / pkg).rglob("*") if (ROOT / pkg).is_dir() else [ROOT / pkg])
                   if p.is_file() and "__pycache__" not in p.parts and p.suffix == ".py")
    digest = hashlib.sha256(importlib.util.MAGIC_NUMBER)
    for f in files:
        digest.update(str(f.relative_to(ROOT)).encode())
        digest.update(f.read_bytes())
    target = Path(tempfile.gettempdir()) / f"ingest-code-{digest.hexdigest()[:16]}.zip"
    if not target.exists():
        partial = target.with_suffix(f".{os.getpid()}.{uuid.uuid4().hex}.partial")  # threads zip at once too
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as z:
            for f in files:
                name = f.relative_to(ROOT).as_posix()
                source = f.read_bytes()
                z.writestr(name, source)
                z.writestr(name + "c", _bytecode(source, name))
        partial.replace(target)
    return target


def _bytecode(source: bytes, name: str) -> bytes:
    """`source` compiled as a .pyc that is never checked against its source (PEP 552: flags 0b01, the source's
    hash; the zip holds both, written together)."""
    header = importlib.util.MAGIC_NUMBER + (0b01).to_bytes(4, "little") + importlib.util.source_hash(source)
    return header + marshal.dumps(compile(source, name, "exec", dont_inherit=True))


def session_url(url: str, datasource: str, code: Path, generation: int = 0) -> str:
    """`url` with the `session_id` that the jobs of `datasource` running `code` share (the same for every task
    and host: a digest of the server, the datasource, the code and the generation)."""
    digest = hashlib.sha256("\0".join((_safe(url), datasource, code.name, str(generation))).encode()).digest()
    session_id = str(uuid.UUID(bytes=digest[:16], version=4))
    base, sep, params = url.partition(";")
    return f"{base.rstrip('/')}/;{params + ';' if sep else ''}session_id={session_id}"


def open_session(url: str, datasource: str | None = None, timeout_s: float | None = None) -> Any:
    """A Spark Connect session with this project's code: the datasource's shared one, or one of its own. A
    server that does not accept the session's channel within `timeout_s` (default `connect_timeout_s()`) is
    `SparkConnectUnavailableError`."""
    timeout_s = connect_timeout_s() if timeout_s is None else timeout_s
    code = code_archive()
    opened = None
    if datasource is not None:
        shared = (_connect(session_url(url, datasource, code, g), url, timeout_s) for g in range(SESSION_GENERATIONS))
        opened = next((s for s in shared if s is not None), None)
        if opened is None:
            log.warning("the Spark Connect server closed %d sessions of %s: this job opens one of its own",
                        SESSION_GENERATIONS, datasource)
        else:
            opened[0].release_session_on_close = False  # others use it: stop() only detaches
    spark, settings = opened or _connect(url, url, timeout_s)
    # a shared session has the code and passed the check in its first job: asked with the settings, in one request
    if settings.get(CODE_ADDED) != code.name:
        add_code(spark, code)
        spark.conf.set(CODE_ADDED, code.name)
    if settings.get(PYTHON_CHECKED) != _python():
        check_python(spark, url)
        spark.conf.set(PYTHON_CHECKED, _python())
    return spark


def add_code(spark: Any, code: Path, attempts: int = 5) -> None:
    """Ship the code archive with the session. Adding the same file again is a no-op, but two jobs adding it at
    the same moment make the server refuse one (FileAlreadyExistsException): that one adds it again, after the
    other has (the archive's name is its content's digest, so the file is the same)."""
    for attempt in range(attempts):
        try:
            with _ADDING:
                spark.addArtifacts(str(code), pyfile=True)
            return
        except Exception as exc:  # noqa: BLE001 - grpc and pyspark raise several kinds
            if "FileAlreadyExistsException" not in str(exc) or attempt == attempts - 1:
                raise
            time.sleep(0.2 * (attempt + 1))


def _connect(url: str, shown: str, timeout_s: float) -> tuple[Any, dict[str, str]] | None:
    """A client of the session `url` names (a new one if it names none), with the job's settings, and the
    session's settings; None if the server closed that session."""
    from pyspark.sql.connect.client import DefaultChannelBuilder
    from pyspark.sql.connect.client.retries import DefaultPolicy
    from pyspark.sql.connect.session import SparkSession

    os.environ[_CONNECT_MODE] = "1"  # as builder.getOrCreate() does for a remote session
    spark = SparkSession.builder.channelBuilder(DefaultChannelBuilder(url, RECONNECT_OPTIONS)).create()  # no request yet
    # pyspark retries an unreachable server for 10 minutes; a microbatch fails sooner (about 30 s) and Airflow
    # retries the task, so a dead server fails the group instead of hanging it
    spark.client.set_retry_policies([DefaultPolicy(max_retries=RETRIES, backoff_multiplier=2,
                                                   initial_backoff=RETRY_FIRST_MS, max_backoff=RETRY_MAX_MS)])
    _await_channel(spark, shown, timeout_s)
    try:
        settings = spark.conf.getAll  # one request; a shared session has the job's settings from its first job
        for key, value in {**default_conf(), **REQUIRED_CONF}.items():
            # the rest (e.g. console progress) are the server's own business
            if settings.get(key) != value and spark.conf.isModifiable(key):
                spark.conf.set(key, value)
                settings[key] = value
    except Exception as exc:  # noqa: BLE001 - grpc and pyspark raise several kinds
        if "INVALID_HANDLE.SESSION_CLOSED" in str(exc):
            spark.release_session_on_close = False
            spark.stop()
            return None
        raise SparkConnectError(f"cannot open a Spark Connect session at {_safe(shown)}: "
                                f"{str(exc).strip().splitlines()[0] if str(exc).strip() else exc!r}") from None
    return spark, settings


def _await_channel(spark: Any, shown: str, timeout_s: float) -> None:
    """The session's gRPC channel connected (HTTP/2 handshake done) within `timeout_s`. gRPC gives a server that
    accepts the connection and never answers about 20 s per attempt, and pyspark retries: without this a session
    waited most of a minute and failed with a bare gRPC error."""
    import grpc

    try:
        grpc.channel_ready_future(spark.client._channel).result(timeout=timeout_s)
    except grpc.FutureTimeoutError:
        spark.release_session_on_close = False  # nothing to release on a server that never answered
        try:
            spark.stop()
        except Exception:  # noqa: BLE001 - closing a channel that never connected
            pass
        raise SparkConnectUnavailableError(
            f"the Spark Connect server at {_safe(shown)} did not accept a session within {timeout_s:g}s "
            f"({CONNECT_TIMEOUT_VAR}): check that it runs and is reachable from here; the job did not start",
            endpoint=_safe(shown), deadline_s=timeout_s) from None


def _python() -> str:
    return "%d.%d" % sys.version_info[:2]


def check_python(spark: Any, url: str) -> None:
    """Python UDFs (the split reader too) need the workers' Python to match the client's (major.minor)."""
    from pyspark.sql.connect import functions as F
    from pyspark.sql.types import StringType

    def version(_):  # noqa: ANN001 - untyped: Spark infers a UDF kind from type hints
        return "%d.%d" % sys.version_info[:2]  # the worker's: cloudpickle sends a module by its name

    try:
        # useArrow given: else pyspark reads a setting from the process's active session, which need not be `spark`
        found = spark.range(1).select(F.udf(version, StringType(), useArrow=False)("id")).first()[0]
    except Exception as exc:  # noqa: BLE001 - a mismatch surfaces as a worker error
        text = str(exc)
        raise SparkConnectError(
            f"the Spark Connect server at {_safe(url)} cannot run this project's Python code: "
            f"{text.strip().splitlines()[0] if text.strip() else type(exc).__name__}. Its Python workers need "
            f"Python {sys.version_info[0]}.{sys.version_info[1]} (PYSPARK_PYTHON of the server) with this "
            "project's dependencies installed") from None
    mine = _python()
    if found != mine:
        raise SparkConnectError(f"the Spark Connect server at {_safe(url)} runs Python {found} on its workers, "
                                f"this task runs Python {mine}: start the server with PYSPARK_PYTHON set to a "
                                f"Python {mine} that has this project's dependencies")


def _safe(url: str) -> str:
    return url.split(";")[0]  # parameters may hold the token


class Interrupter:
    """Interrupts the job's queries (those this thread runs, tagged) at a deadline (completionTimeout) or on
    demand (on_kill); the session's other jobs go on."""

    def __init__(self, spark: Any, timeout_s: float | None):
        self.spark = spark
        self.tag = f"ingest-job-{uuid.uuid4().hex}"
        self.fired = threading.Event()
        self._timer = threading.Timer(timeout_s, self.interrupt) if timeout_s else None

    def __enter__(self) -> "Interrupter":
        self.spark.addTag(self.tag)
        if self._timer is not None:
            self._timer.daemon = True
            self._timer.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self.spark.removeTag(self.tag)

    def interrupt(self) -> None:
        self.fired.set()
        try:
            self.spark.interruptTag(self.tag)
        except Exception as exc:  # noqa: BLE001 - the server may be gone already
            log.warning("interrupting the Spark Connect job failed: %s", exc)


@contextlib.contextmanager
def connect_mode() -> Iterator[None]:
    """pyspark switches `pyspark.sql.functions` to Spark Connect for the whole process once a remote session
    exists (an environment variable); restore the process's mode afterwards, so a classic SparkSession in the
    same process (tests, benchmarks) keeps working."""
    before = os.environ.get(_CONNECT_MODE)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(_CONNECT_MODE, None)
        else:
            os.environ[_CONNECT_MODE] = before


def run_job(url: str, job: JobInput, *, timeout_s: float | None = None, on_session: Any = None,
            stall_timeout_s: float = STALL_TIMEOUT_S) -> dict[str, Any]:
    """Run one group job over Spark Connect; returns the job's summary. `on_session(interrupter)` lets the caller
    interrupt it (Airflow's on_kill)."""
    with connect_mode():
        return _run_job(url, job, timeout_s, on_session, stall_timeout_s)


def run_compaction(url: str, application_args: Sequence[str], *, timeout_s: float | None = None,
                   on_session: Any = None) -> dict[str, Any]:
    """Run one compaction job (`CompactionInput.to_args`, `spark_jobs/compact_job.py`'s arguments) over Spark
    Connect."""
    from ingest_core.spark.compaction import argument_parser, compact, load

    with connect_mode():
        spec, job = load(argument_parser().parse_args(list(application_args)))
        spark = open_session(url, spec.datasource)
        try:
            with Interrupter(spark, timeout_s) as interrupter:
                if on_session is not None:
                    on_session(interrupter)
                files = compact(spark, spec, job)
        finally:
            try:
                spark.stop()
            except Exception:  # noqa: BLE001 - a dead server has nothing to release
                pass
    return {"files": len(files), "rows": sum(f.rows for f in files)}


def _run_job(url: str, given: JobInput, timeout_s: float | None, on_session: Any,
             stall_timeout_s: float) -> dict[str, Any]:
    """The job; once more at once, as a new attempt on a new session, when its server went away under it (killed
    and started again, or still starting: the new session waits for it as any does). Airflow's retry would do the
    same, but only after the task's retryDelay (a minute by default)."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    try:
        return _run_job_once(url, given, timeout_s, on_session, stall_timeout_s)
    except Exception as exc:
        if not server_gone(exc):
            raise
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            raise
        log.warning("the Spark Connect server at %s went away during the job (%s): running it again now, as a new "
                    "attempt on a new session", _safe(url), _first_line(exc))
        return _run_job_once(url, given, left, on_session, stall_timeout_s)


# Spark Connect's conditions of a request that met a server other than the one its session was opened on
_SERVER_CHANGED = ("INVALID_HANDLE.SESSION_CHANGED", "INVALID_HANDLE.SESSION_NOT_FOUND",
                   "INVALID_HANDLE.OPERATION_NOT_FOUND")


def server_gone(exc: BaseException) -> bool:
    """Whether `exc`, or an error it was raised from, says the job's Spark Connect server went away: unavailable
    past pyspark's retries (gRPC's UNAVAILABLE), or restarted under the job's session. Not a session that could
    not be opened within its deadline (`SparkConnectUnavailableError`): that one waited already."""
    import grpc


    seen: BaseException | None = exc
    while seen is not None and not isinstance(seen, SparkConnectUnavailableError):
        status = getattr(seen, "getGrpcStatusCode", None)
        if callable(status) and status() == grpc.StatusCode.UNAVAILABLE:
            return True
        if isinstance(seen, grpc.RpcError) and seen.code() == grpc.StatusCode.UNAVAILABLE:
            return True
        if spark_condition(seen) in _SERVER_CHANGED:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _run_job_once(url: str, given: JobInput, timeout_s: float | None, on_session: Any,
                  stall_timeout_s: float) -> dict[str, Any]:
    from ingest_core.spark.job import load_job, run_group, summary

    job = load_job(given)  # a new attempt
    spark = open_session(url, job.spec.datasource)
    try:
        with Interrupter(spark, timeout_s) as interrupter:
            if on_session is not None:
                on_session(interrupter)
            try:
                report = run_group(spark, job, stall_timeout_s)
            except IngestError:
                if interrupter.fired.is_set():
                    raise IngestError(f"task group {job.group_id} of run {job.run_id} was interrupted after "
                                      f"{timeout_s:g}s (completionTimeout) or by a kill") from None
                raise
    finally:
        try:
            spark.stop()  # detaches from the shared session (releases a session of its own)
        except Exception:  # noqa: BLE001 - a dead server has nothing to release
            pass
    return summary(job, report)
