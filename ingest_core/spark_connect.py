"""The ingest job over Spark Connect: the Airflow task is the job's client, a long-lived Spark runs it.

A `spark_connect` connection (the Spark provider's type: host, port, login = user id, password = token,
extra `use_ssl`) makes the DAG's `spark_job` tasks run `spark_jobs.ingest_job.run_group` as a Spark Connect
client inside the task: no JVM of its own, so a microbatch's fixed cost is a session (about a second) instead
of a spark-submit (18-20 s here).

- Code: the server's Python workers run the data source (`spark_jobs.kafka_source`) and the parser. This
  module ships the client's own `ingest_core` and `spark_jobs` packages with each session
  (`addArtifacts(..., pyfile=True)`), so the workers run the same code as the task; third-party packages
  (pyarrow, confluent-kafka, PyYAML, ...) must be installed on the server's Python (the project's
  dependencies). Client and worker Python must have the same major.minor: checked first, with a clear error.
- Settings: the job's required settings are session settings (`spark.conf.set`), as spark-submit's `--conf`.
- Deadline: `completionTimeout` interrupts the session's queries (`interruptAll`), so a stuck query does not
  outlive its task; killing the task (Airflow's on_kill) does the same.
- Deep storage must be reachable from the task (it reads the splits' reports and Parquet footers) and from
  the server's executors (they write them), as with spark-submit.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import sys
import tempfile
import threading
import zipfile
from pathlib import Path
from typing import Any, Iterator, Sequence

from .errors import IngestError

log = logging.getLogger(__name__)

PACKAGES = ("ingest_core", "spark_jobs")
_CONNECT_MODE = "SPARK_CONNECT_MODE_ENABLED"
RETRIES = 6  # with backoff 0.05 s x4 up to 10 s: about 25 s of an unreachable server
ROOT = Path(__file__).resolve().parents[1]


class SparkConnectError(IngestError):
    """The Spark Connect server cannot run this job (unreachable, or a different Python)."""


def code_archive() -> Path:
    """A zip of this project's packages, named by its content so an unchanged tree is zipped once."""
    files = sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*")
                   if p.is_file() and "__pycache__" not in p.parts and p.suffix in (".py", ".xml"))
    digest = hashlib.sha256()
    for f in files:
        digest.update(str(f.relative_to(ROOT)).encode())
        digest.update(f.read_bytes())
    target = Path(tempfile.gettempdir()) / f"ingest-code-{digest.hexdigest()[:16]}.zip"
    if not target.exists():
        partial = target.with_suffix(f".{os.getpid()}.partial")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as z:
            for f in files:
                z.write(f, f.relative_to(ROOT))
        partial.replace(target)
    return target


def connection_url(conn_id: str) -> str:
    from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook

    return SparkConnectHook(conn_id).get_connection_url()


def open_session(url: str) -> Any:
    """A new Spark Connect session (its own settings and data source registry) with this project's code."""
    from pyspark.sql import SparkSession

    from spark_jobs.ingest_job import REQUIRED_CONF, default_conf

    from pyspark.sql.connect.client.retries import DefaultPolicy

    os.environ[_CONNECT_MODE] = "1"  # as builder.getOrCreate() does for a remote session
    spark = SparkSession.builder.remote(url).create()  # no request yet
    # pyspark retries an unreachable server for 10 minutes; a microbatch fails sooner (about 30 s) and Airflow
    # retries the task, so a dead server fails the group instead of hanging it
    spark.client.set_retry_policies([DefaultPolicy(max_retries=RETRIES, max_backoff=10_000)])
    try:
        for key, value in {**default_conf(), **REQUIRED_CONF}.items():
            if spark.conf.isModifiable(key):  # the rest (e.g. console progress) are the server's own business
                spark.conf.set(key, value)
    except Exception as exc:  # noqa: BLE001 - grpc and pyspark raise several kinds
        raise SparkConnectError(f"cannot open a Spark Connect session at {_safe(url)}: "
                                f"{str(exc).strip().splitlines()[0] if str(exc).strip() else exc!r}") from None
    spark.addArtifacts(str(code_archive()), pyfile=True)
    check_python(spark, url)
    return spark


def check_python(spark: Any, url: str) -> None:
    """Python UDFs and data sources need the workers' Python to match the client's (major.minor)."""
    from pyspark.sql.connect import functions as F
    from pyspark.sql.types import StringType

    def version(_):  # noqa: ANN001 - untyped: Spark infers a UDF kind from type hints
        import sys as worker_sys

        return "%d.%d" % worker_sys.version_info[:2]

    try:
        found = spark.range(1).select(F.udf(version, StringType())("id")).first()[0]
    except Exception as exc:  # noqa: BLE001 - a mismatch surfaces as a worker error
        text = str(exc)
        raise SparkConnectError(
            f"the Spark Connect server at {_safe(url)} cannot run this project's Python code: "
            f"{text.strip().splitlines()[0] if text.strip() else type(exc).__name__}. Its Python workers need "
            f"Python {sys.version_info[0]}.{sys.version_info[1]} (PYSPARK_PYTHON of the server) with this "
            "project's dependencies installed") from None
    mine = "%d.%d" % sys.version_info[:2]
    if found != mine:
        raise SparkConnectError(f"the Spark Connect server at {_safe(url)} runs Python {found} on its workers, "
                                f"this task runs Python {mine}: start the server with PYSPARK_PYTHON set to a "
                                f"Python {mine} that has this project's dependencies")


def _safe(url: str) -> str:
    return url.split(";")[0]  # parameters may hold the token


class Interrupter:
    """Interrupts a session's queries at a deadline (completionTimeout) or on demand (on_kill)."""

    def __init__(self, spark: Any, timeout_s: float | None):
        self.spark = spark
        self.fired = threading.Event()
        self._timer = threading.Timer(timeout_s, self.interrupt) if timeout_s else None

    def __enter__(self) -> "Interrupter":
        if self._timer is not None:
            self._timer.daemon = True
            self._timer.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def interrupt(self) -> None:
        self.fired.set()
        try:
            self.spark.interruptAll()
        except Exception as exc:  # noqa: BLE001 - the server may be gone already
            log.warning("interrupting the Spark Connect session failed: %s", exc)


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


def run_job(url: str, application_args: Sequence[str], *, timeout_s: float | None = None,
            on_session: Any = None) -> dict[str, Any]:
    """Run one group job (spark-submit's arguments) over Spark Connect; returns the job's summary.
    `on_session(interrupter)` lets the caller interrupt it (Airflow's on_kill)."""
    with connect_mode():
        return _run_job(url, application_args, timeout_s, on_session)


def _run_job(url: str, application_args: Sequence[str], timeout_s: float | None, on_session: Any) -> dict[str, Any]:
    from spark_jobs.ingest_job import argument_parser, load_job, run_group, summary

    args = argument_parser().parse_args(list(application_args))
    job = load_job(args)
    spark = open_session(url)
    try:
        with Interrupter(spark, timeout_s) as interrupter:
            if on_session is not None:
                on_session(interrupter)
            try:
                report = run_group(spark, job, args.stall_timeout)
            except IngestError:
                if interrupter.fired.is_set():
                    raise IngestError(f"task group {job.group_id} of run {job.plan.run_id} was interrupted after "
                                      f"{timeout_s:g}s (completionTimeout) or by a kill") from None
                raise
    finally:
        try:
            spark.stop()  # releases the server-side session; the server keeps running
        except Exception:  # noqa: BLE001 - a dead server has nothing to release
            pass
    return summary(job, report)
