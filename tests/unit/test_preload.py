"""`ingest_core.provider.preload`: what `airflow_local_settings.py` calls so that the task processes a scheduler's
LocalExecutor (or a Celery worker) forks start with the DAG factory, the Spark Connect client and the supervisor's
steps loaded. It runs before the scheduler forks: it must start no thread of Python's (a fork copies no thread,
and a lock one held would stay held in the child). Every other Airflow process (the CLI, the api-server, the
dag-processor, the triggerer, `airflow dags test`) must load nothing, or each would start seconds slower."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ingest_core.provider.preload import TASK_LIBRARIES, forks_task_processes, write_local_settings

# Airflow imports the written settings module by name from $AIRFLOW_HOME/config (on its sys.path), with the
# process's own argv
PROBE = """
import json, sys, threading
sys.argv = {argv!r}
sys.path.insert(0, {config!r})
import airflow_local_settings
assert threading.active_count() == 1, [t.name for t in threading.enumerate()]
loaded = sorted(m for m in {wanted!r} if m in sys.modules)
print(json.dumps([loaded, sorted(vars(airflow_local_settings).get("__all__", "?"))]))
"""


def loaded_by_local_settings(tmp_path: Path, argv: list[str]) -> list[str]:
    config = write_local_settings(tmp_path / "airflow").parent
    code = PROBE.format(argv=argv, config=str(config), wanted=list(TASK_LIBRARIES))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    loaded, exported = json.loads(done.stdout.strip().splitlines()[-1])
    assert exported == []  # airflow.settings takes a local settings module's names as its own
    return loaded


def test_the_scheduler_loads_the_task_libraries_and_starts_no_thread(tmp_path):
    assert loaded_by_local_settings(tmp_path, ["/venv/bin/airflow", "scheduler", "--skip-serve-logs"]) == sorted(
        TASK_LIBRARIES)


def test_a_cli_command_loads_none_of_them(tmp_path):
    assert loaded_by_local_settings(tmp_path, ["/venv/bin/airflow", "dags", "trigger", "wikipedia"]) == []


@pytest.mark.parametrize(("argv", "forks"), [
    (["airflow", "scheduler"], True),
    (["/venv/bin/airflow", "scheduler", "--skip-serve-logs"], True),
    (["airflow", "celery", "worker", "--queues", "default"], True),
    (["airflow", "standalone"], False),  # it starts `airflow scheduler` as a process of its own, which preloads
    (["airflow", "api-server", "--port", "8080"], False),
    (["airflow", "dag-processor"], False),
    (["airflow", "triggerer"], False),
    (["airflow", "dags", "test", "wikipedia"], False),  # runs its tasks itself: the imports would only move
    (["airflow", "tasks", "run", "wikipedia", "plan", "manual__1"], False),
    (["airflow", "celery", "flower"], False),
    (["airflow"], False),
])
def test_only_the_processes_whose_children_run_tasks_preload(argv, forks):
    assert forks_task_processes(argv) is forks
