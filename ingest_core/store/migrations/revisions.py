"""The metadata store's schema revisions under Alembic: the upgrade to the newest, and how the migrations compare
with the models (`schema.meta`). Which revision a store is at is `history`'s (no Alembic needed for that).

Configured here in code (no alembic.ini): the scripts are `versions/`, Alembic's environment is `env.py`, the
version table is `history.VERSION_TABLE`. A store of a release before Alembic (`legacy_marker`) is stamped at the
revision of its hand-rolled version before its first upgrade.
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
from sqlalchemy.engine import Connection

from ingest_core.store import schema
from ingest_core.store.engines import is_transient
from ingest_core.store.migrations import legacy_marker
from ingest_core.store.migrations.history import (
    VERSION_TABLE,
    SchemaUpgrade,
    UnknownRevision,
    head,
    installed,
    is_known,
    shipped,
)

HERE = Path(__file__).parent
_UPGRADE_LOCK = 74201  # PostgreSQL advisory lock: one upgrader at a time


class UpgradeFailed(Exception):
    """A revision's statement failed: the caller's transaction, and with it the whole upgrade, rolls back."""

    def __init__(self, found: str | None, revision: str, title: str, reason: str):
        super().__init__(found, revision, title, reason)
        self.found, self.revision, self.title, self.reason = found, revision, title, reason


def is_ours(name: str | None, type_: str, parent_names: dict[str, Any]) -> bool:
    """Alembic looks only at the store's tables: the database may also hold Airflow's and the Iceberg catalog's."""
    return type_ != "table" or bool(name and name.startswith("ingest_"))


CONTEXT_OPTIONS: dict[str, Any] = {"version_table": VERSION_TABLE, "include_name": is_ours, "compare_type": True,
                                   "compare_server_default": True}


@functools.cache
def scripts() -> ScriptDirectory:
    return ScriptDirectory(str(HERE))


def config(connection: Connection | None = None, url: str | None = None, **attributes: Any) -> Config:
    """Alembic's configuration for the store behind `connection` (or at `url`: for `alembic.command.revision`)."""
    cfg = Config()
    cfg.set_main_option("script_location", str(HERE))
    cfg.set_main_option("file_template", "v%%(rev)s_%%(slug)s")  # history.shipped() reads the number there
    if url:
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    cfg.attributes.update(connection=connection, **attributes)
    return cfg


def upgrade(conn: Connection) -> SchemaUpgrade:
    """Bring the store behind `conn` to the newest revision inside the caller's transaction (one upgrader at a time:
    what it was at is read once the upgrader has the store).
    Raises UnknownRevision, before any change, for a store of a newer release; UpgradeFailed when a revision's
    statement fails (a lost connection is raised as it is: the engine's retries apply)."""
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text(f"SELECT pg_advisory_xact_lock({_UPGRADE_LOCK})"))
    found = installed(conn)
    if found is not None and not is_known(found):
        raise UnknownRevision(found, head())
    context = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
    if found is not None and not context.get_current_heads():
        context.stamp(scripts(), found)  # a store of before Alembic, at its hand-rolled version
    applied: list[str] = []
    try:
        command.upgrade(config(conn, on_version_apply=lambda step: applied.append(step.up_revision_id)), "head")
    except sa.exc.DBAPIError as exc:
        if is_transient(exc):
            raise
        failed = [r for r in shipped() if found is None or r > found][len(applied)]
        raise UpgradeFailed(found, failed, " ".join(scripts().get_revision(failed).doc.split()),
                            str(exc.orig).strip().splitlines()[0]) from None
    legacy_marker.record(conn, applied)
    return SchemaUpgrade(found, tuple(applied))


def drift(conn: Connection, metadata: sa.MetaData = schema.meta) -> list[Any]:
    """What Alembic would change to make the store behind `conn` match `metadata` (empty: they agree)."""
    return compare_metadata(MigrationContext.configure(conn, opts=CONTEXT_OPTIONS), metadata)
