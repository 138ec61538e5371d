"""Airflow's own database for a test's Airflow home: `airflow db migrate` runs once per test session and kind of
database, and every home gets a copy of what it made: what the migration would write again, seconds of CPU each
time. On SQLite (the homes of `airflow dags test`) a copy of the file; on PostgreSQL (the homes of a scheduler,
AIRFLOW__DATABASE__SQL_ALCHEMY_CONN) the database made again as a copy of a migrated template database on the same
server (`CREATE DATABASE ... TEMPLATE`), one per auth manager (its tables are part of the migration). Another
database is migrated for real."""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import sqlalchemy as sa

AIRFLOW = str(Path(sys.executable).parent / "airflow")
_template: Path | None = None
_pg_templates: dict[tuple[str, str], str] = {}  # (server, auth manager) -> its template database


def _migrate(env: dict[str, str]) -> None:
    done = subprocess.run([AIRFLOW, "db", "migrate"], env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"airflow db migrate exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


def migrate(env: dict[str, str]) -> None:
    """`airflow db migrate` for the Airflow home of `env` (`ingest_core.dev.demo.airflow_env`)."""
    global _template
    url = env.get("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN")
    if url and sa.engine.make_url(url).get_backend_name() == "postgresql":
        _from_postgres_template(env, sa.engine.make_url(url))
        return
    if url:
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


def _from_postgres_template(env: dict[str, str], url: sa.engine.URL) -> None:
    """The (new, unused) database of `url` dropped and made again as a copy of a migrated template."""
    server = url.set(database="postgres")
    key = (server.render_as_string(hide_password=False), env.get("AIRFLOW__CORE__AUTH_MANAGER", ""))
    admin = sa.create_engine(server, isolation_level="AUTOCOMMIT")
    try:
        if key not in _pg_templates:
            name = f"airflow_template_{os.getpid()}_{len(_pg_templates)}"
            with admin.connect() as conn:
                conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
            atexit.register(_drop, server, name)
            _migrate({**env, "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": url.set(database=name).render_as_string(
                hide_password=False)})
            _pg_templates[key] = name
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE "{url.database}"'))
            conn.execute(sa.text(f'CREATE DATABASE "{url.database}" TEMPLATE "{_pg_templates[key]}"'))
    finally:
        admin.dispose()


def _drop(server: sa.engine.URL, name: str) -> None:
    with contextlib.suppress(sa.exc.SQLAlchemyError):  # a private server may have stopped already
        admin = sa.create_engine(server, isolation_level="AUTOCOMMIT")
        try:
            with admin.connect() as conn:
                conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}"'))
        finally:
            admin.dispose()
