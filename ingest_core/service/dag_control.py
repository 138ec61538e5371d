"""The datasource's Airflow DAG driven from the CLI: paused, unpaused and triggered with the `airflow` command
of this environment (the supervisor's actions take any `supervisor.actions.DagControl`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ingest_core.core.errors import IngestError


class AirflowCliDags:
    """Pauses DAGs with the `airflow` command of this environment (its configuration, its database)."""

    def set_paused(self, dag_id: str, paused: bool) -> None:
        airflow = str(Path(sys.executable).parent / "airflow")
        done = subprocess.run([airflow, "dags", "pause" if paused else "unpause", dag_id, "-y"],
                              capture_output=True, text=True, timeout=300, env=os.environ)
        if done.returncode != 0:
            raise IngestError(f"`airflow dags {'pause' if paused else 'unpause'} {dag_id}` failed: "
                              f"{(done.stderr or done.stdout).strip()[-2000:]}")

    def trigger(self, dag_id: str, run_id: str) -> None:
        airflow = str(Path(sys.executable).parent / "airflow")
        done = subprocess.run([airflow, "dags", "trigger", dag_id, "--run-id", run_id], capture_output=True,
                              text=True, timeout=300, env=os.environ)
        if done.returncode != 0:
            raise IngestError(f"`airflow dags trigger {dag_id} --run-id {run_id}` failed: "
                              f"{(done.stderr or done.stdout).strip()[-2000:]}; trigger it by hand, the plan is kept")
