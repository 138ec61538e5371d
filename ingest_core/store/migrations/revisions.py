"""The metadata store's schema revisions (Alembic): which one a store is at, the upgrade to the newest, and how the
migrations compare with the models (`schema.meta`).

Configured here in code (no alembic.ini): the scripts are `versions/`, Alembic's environment is `env.py`. The
store's version table is `ingest_alembic_version`, never Airflow's `alembic_version`, so the store may live in
Airflow's database. A store of a release before Alembic (`legacy_marker`) is stamped at the revision of its
hand-rolled version before its first upgrade.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy.engine import Connection

from ingest_core.store import schema
from ingest_core.store.migrations import legacy_marker

VERSION_TABLE = "ingest_alembic_version"
HERE = Path(__file__).parent
_UPGRADE_LOCK = 74201  # PostgreSQL advisory lock: one upgrader at a time


class UnknownRevision(Exception):
    """The store is at a revision this release does not have: a newer release upgraded it."""

    def __init__(self, found: str, newest: str):
        super().__init__(found, newest)
        self.found, self.newest = found, newest


def is_ours(name: str | None, type_: str, parent_names: dict[str, Any]) -> bool:
    """Alembic looks only at the store's tables: the database may also hold Airflow's and the Iceberg catalog's."""
    return type_ != "table" or bool(name and name.startswith("ingest_"))


CONTEXT_OPTIONS: dict[str, Any] = {"version_table": VERSION_TABLE, "include_name": is_ours, "compare_type": True,
                                   "compare_server_default": True}


@functools.cache
def scripts() -> ScriptDirectory:
    return ScriptDirectory(str(HERE))


def head() -> str:
    return scripts().get_current_head()


def is_known(revision: str) -> bool:
    try:
        return scripts().get_revision(revision) is not None
    except CommandError:  # Alembic's ResolutionError: no such revision
        return False


def installed(conn: Connection) -> str | None:
    """The revision of the store behind `conn`: its version table's, else its hand-rolled version's (None: empty)."""
    heads = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE}).get_current_heads()
    if heads:
        return ",".join(heads)
    version = legacy_marker.installed_version(conn)
    return legacy_marker.revision_of(version) if version else None


def config(connection: Connection | None = None, url: str | None = None, **attributes: Any) -> Config:
    """Alembic's configuration for the store behind `connection` (or at `url`: for `alembic.command.revision`)."""
    cfg = Config()
    cfg.set_main_option("script_location", str(HERE))
    if url:
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    cfg.attributes.update(connection=connection, **attributes)
    return cfg


def upgrade(conn: Connection) -> list[str]:
    """Bring the store behind `conn` to the newest revision inside the caller's transaction; the revisions applied.
    Raises UnknownRevision, before any change, for a store of a newer release."""
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text(f"SELECT pg_advisory_xact_lock({_UPGRADE_LOCK})"))
    found = installed(conn)
    if found is not None and not is_known(found):
        raise UnknownRevision(found, head())
    context = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
    if found is not None and not context.get_current_heads():
        context.stamp(scripts(), found)  # a store of before Alembic, at its hand-rolled version
    applied: list[str] = []
    command.upgrade(config(conn, on_version_apply=lambda step: applied.append(step.up_revision_id)), "head")
    legacy_marker.record(conn, applied)
    return applied


def drift(conn: Connection, metadata: sa.MetaData = schema.meta) -> list[Any]:
    """What Alembic would change to make the store behind `conn` match `metadata` (empty: they agree)."""
    return compare_metadata(MigrationContext.configure(conn, opts=CONTEXT_OPTIONS), metadata)
