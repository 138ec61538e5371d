"""Airflow's own database for a test's Airflow home: on SQLite (the homes of `airflow dags test`), `airflow db
migrate` runs once per test session, into a home of its own, and every home gets a copy of that file: what the
migration would write again, seconds of CPU each time. Another database (AIRFLOW__DATABASE__SQL_ALCHEMY_CONN) is
migrated for real."""

from __future__ import annotations

import atexit
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

AIRFLOW = str(Path(sys.executable).parent / "airflow")
_template: Path | None = None


def _migrate(env: dict[str, str]) -> None:
    done = subprocess.run([AIRFLOW, "db", "migrate"], env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"airflow db migrate exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


def migrate(env: dict[str, str]) -> None:
    """`airflow db migrate` for the Airflow home of `env` (`ingest_core.dev.demo.airflow_env`)."""
    global _template
    if env.get("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"):
        _migrate(env)
        return
    if _template is None:
        home = Path(tempfile.mkdtemp(prefix="airflow-db-template-"))
        atexit.register(shutil.rmtree, home, True)
        _migrate({**env, "AIRFLOW_HOME": str(home)})
        _template = home / "airflow.db"
    target = Path(env["AIRFLOW_HOME"]) / "airflow.db"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_template, target)
