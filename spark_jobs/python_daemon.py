"""Spark's Python daemon, warm: `spark.python.daemon.module=spark_jobs.python_daemon` on a long-lived Spark (Connect)
server.

Spark forks each Python worker that runs a UDF (the ingest job's split reader is one, in `mapInArrow`) from a daemon
(`pyspark.daemon`), one per session and worker module, and closes a worker idle for a minute. pyspark's daemon
imports little, so every worker it forks imports pyarrow, confluent-kafka and the rest of what the split reader
needs: about a second of CPU per worker, paid again whenever a datasource pauses for more than a minute between
runs. This daemon imports those libraries once, then serves as pyspark's does (`pyspark.daemon.manager`), so a
worker forks with them loaded.

It imports no module of this project: a session's workers import `ingest_core` from the code archive the session
ships (`ingest_core.spark.connect`), which must win over whatever copy the server has. `PRELOAD` names the
third-party modules that the shipped packages import as they load (tests/unit/test_python_daemon.py keeps it
complete). A library missing on the server is skipped here; the worker that needs it fails as it would have.

pyspark's own daemon imports nothing heavy before it forks because a library that starts threads as it loads
could leave a lock held in the child. Two of these start threads: numpy (OpenBLAS's pool) and pyarrow (jemalloc's
background thread); both stop or lock them around a fork (pthread_atfork), as multiprocessing's fork start
method needs of them too.
"""

from __future__ import annotations

import gc
import importlib
import sys

from pyspark import daemon

# what the shipped packages (ingest_core.spark.connect.PACKAGES) and the workers' own modules import as they load
PRELOAD = (
    "pyspark.worker",
    "pyspark.sql.pandas.types",
    "pyspark.sql.types",
    "pyarrow",
    "pyarrow.compute",
    "pyarrow.fs",
    "pyarrow.json",
    "pyarrow.parquet",
    "numpy",
    "pandas",
    "pyarrow.pandas_compat",
    "confluent_kafka",
    "confluent_kafka.admin",
    "croniter",
    "datasketches",
    "fastavro",
    "msgspec",
    "google.protobuf",
    "google.protobuf.descriptor",
    "google.protobuf.descriptor_pool",
    "google.protobuf.message_factory",
    "pathspec.patterns",
    "yaml",
)


def preload(names: tuple[str, ...] = PRELOAD) -> list[str]:
    """Import `names`; the ones that could not be imported."""
    missing = []
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    return missing


def main() -> None:
    missing = preload()
    if missing:
        print(f"spark_jobs.python_daemon: not preloaded (not installed): {', '.join(missing)}", file=sys.stderr)
    # what is loaded now stays out of the collector's way: the forked workers share its pages until they write
    gc.freeze()
    daemon.manager()


if __name__ == "__main__":
    main()
