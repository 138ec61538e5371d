"""`ingest_core.provider.preload`: what a scheduler imports (from `airflow_local_settings.py`) so that the task
processes its LocalExecutor forks start with the DAG factory and the Spark Connect client loaded. It is imported
before the scheduler forks: it must start no thread of Python's (a fork copies no thread, and a lock one held
would stay held in the child)."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys, threading
import ingest_core.provider.preload
assert threading.active_count() == 1, [t.name for t in threading.enumerate()]
wanted = ["pyspark.sql.connect.session", "ingest_core.provider.dag_factory", "ingest_core.spark.connect",
          "ingest_core.spark.job", "ingest_core.supervisor.run", "ingest_core.supervisor.publish",
          "ingest_core.supervisor.report", "ingest_core.supervisor.compaction"]
print(sorted(m for m in wanted if m not in sys.modules))
"""


def test_preload_loads_the_task_libraries_and_starts_no_thread():
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout
