"""The tasks' libraries, loaded by the Airflow processes that fork task processes, before they fork: each task
process then starts with the DAG factory, the Spark Connect client, the job and the supervisor's steps loaded
instead of importing them (docs/spark-connect.md). Airflow imports `airflow_local_settings.py` in each of its
processes, so the call goes there (`LOCAL_SETTINGS`, `write_local_settings`), and only the processes that fork
tasks pay for it: `airflow scheduler`, whose LocalExecutor forks each task's process, and `airflow celery worker`,
whose pool does. The CLI, the api-server, the dag-processor, the triggerer and `airflow dags test` (which runs
its tasks in its own process: the imports would only move) load nothing (of it only the DAG factory, which the
DAG folder's bundle imports: provider/spec_bundle.py). It starts no thread: a fork copies
none, and a lock one held would stay held in the child (tests/unit/test_preload.py)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from pathlib import Path

# the modules the tasks load as they run (provider.operators.run's STEPS, spark.job over Connect), and the DAG
# factory each task parses its DAG file with
TASK_LIBRARIES = (
    "pyspark.sql.connect.functions",
    "pyspark.sql.connect.session",
    "ingest_core.provider.dag_factory",
    "ingest_core.spark.connect",
    "ingest_core.spark.job",
    "ingest_core.supervisor.compaction",
    "ingest_core.supervisor.gate",
    "ingest_core.supervisor.publish",
    "ingest_core.supervisor.replan",
    "ingest_core.supervisor.report",
    "ingest_core.supervisor.run",
)

# `airflow <command...>` of the processes whose children run tasks
FORKING_COMMANDS = (("scheduler",), ("celery", "worker"))

LOCAL_SETTINGS = (
    "from ingest_core.provider.preload import preload_task_libraries\n\n"
    "preload_task_libraries()  # in the scheduler and Celery workers only: their task processes inherit them\n"
    "__all__ = []  # airflow.settings takes the module's other names as its own\n"
)


def forks_task_processes(argv: Sequence[str]) -> bool:
    """Whether `argv` (an `airflow` process's) is a command whose children run tasks."""
    words = [a for a in argv[1:] if not a.startswith("-")]
    return any(tuple(words[: len(command)]) == command for command in FORKING_COMMANDS)


def preload_task_libraries(argv: Sequence[str] | None = None) -> bool:
    """Import `TASK_LIBRARIES` if this process (`argv`, by default its own) forks task processes; whether it did."""
    if not forks_task_processes(sys.argv if argv is None else argv):
        return False
    for name in TASK_LIBRARIES:
        importlib.import_module(name)
    return True


def write_local_settings(airflow_home: Path) -> Path:
    """`$AIRFLOW_HOME/config/airflow_local_settings.py` with the preload: what the demo, the tests' and the
    benchmarks' Airflow homes use."""
    path = airflow_home / "config" / "airflow_local_settings.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(LOCAL_SETTINGS)
    return path
