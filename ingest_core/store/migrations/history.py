"""The revisions this release ships and the one a store is at, read without Alembic: every process checks the
store's revision before its first transaction, few upgrade it, and importing Alembic costs about 0.2 s.

`versions/vNNNN_*.py` holds revision NNNN (tests/integration/test_schema_revisions.py holds Alembic's own reading
of the scripts to that). The store's version table is `ingest_alembic_version`, never Airflow's `alembic_version`,
so the store may live in Airflow's database.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ingest_core.store.migrations import legacy_marker

VERSION_TABLE = "ingest_alembic_version"
VERSIONS = Path(__file__).parent / "versions"


class UnknownRevision(Exception):
    """The store is at a revision this release does not have: a newer release upgraded it."""

    def __init__(self, found: str, newest: str):
        super().__init__(found, newest)
        self.found, self.newest = found, newest


@dataclass(frozen=True)
class SchemaUpgrade:
    """What an upgrade did: the revision the store was at when the upgrade began (None: an empty database) and the
    revisions it applied, in order."""

    before: str | None
    applied: tuple[str, ...]

    @property
    def after(self) -> str | None:
        return self.applied[-1] if self.applied else self.before


@functools.cache
def shipped() -> tuple[str, ...]:
    """This release's revisions, oldest first."""
    return tuple(sorted(path.name[1:5] for path in VERSIONS.glob("v[0-9][0-9][0-9][0-9]_*.py")))


def head() -> str:
    return shipped()[-1]


def is_known(revision: str) -> bool:
    return revision in shipped()


def installed(conn: Connection) -> str | None:
    """The revision of the store behind `conn`: its version table's, else its hand-rolled version's (None: empty)."""
    if sa.inspect(conn).has_table(VERSION_TABLE):
        heads = conn.execute(sa.text(f"SELECT version_num FROM {VERSION_TABLE}")).scalars().all()
        if heads:
            return ",".join(sorted(heads))
    version = legacy_marker.installed_version(conn)
    return legacy_marker.revision_of(version) if version else None
