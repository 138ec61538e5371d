"""Airflow's CeleryExecutor as a cluster runs it: the settings its components share and each Celery worker's
command. tests/system/test_cluster.py and benchmarks/fleet.py start their workers from here."""

from __future__ import annotations

import os
from pathlib import Path


def celery_settings(broker_url: str, airflow_db_url: str) -> dict[str, str]:
    """The environment of every component (scheduler, dag-processor, api-server, workers): Redis (or any Celery
    broker) at `broker_url`, task results in Airflow's own database. The secrets are shared so that the api-server
    accepts the tokens of the tasks the workers run."""
    return {
        "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor", "AIRFLOW__CELERY__BROKER_URL": broker_url,
        "AIRFLOW__CELERY__RESULT_BACKEND": "db+" + airflow_db_url.replace("+asyncpg", ""),
        # a loaded machine answers Redis slowly, not never; one process sends the queued tasks
        "AIRFLOW__CELERY__OPERATION_TIMEOUT": "30", "AIRFLOW__CELERY__SYNC_PARALLELISM": "1",
        "AIRFLOW__API__WORKERS": "1", "AIRFLOW__API_AUTH__JWT_SECRET": os.urandom(16).hex(),
        "AIRFLOW__API__SECRET_KEY": os.urandom(16).hex()}


def celery_worker(name: str, log_folder: Path, concurrency: int = 2) -> tuple[list[str], dict[str, str]]:
    """(`airflow` arguments, environment of its own) of the Celery worker `name`: `concurrency` task processes, its
    task logs in `log_folder`, as on a machine of its own (it serves none: the UI reads them from there)."""
    return (["celery", "worker", "--concurrency", str(concurrency), "--celery-hostname", f"{name}@%h",
             "--skip-serve-logs", "--without-gossip", "--without-mingle"],
            {"AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(log_folder)})
