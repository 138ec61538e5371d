"""`ingest_schema_version`, the hand-rolled schema version of the releases before Alembic: one row per step
applied (1-8).

Such a store is at the last step of the unbroken run 1, 2, 3, ...: a store made on a development branch that
skipped a number (ran 6 before 5 existed) gets the missing steps, which find their work done where it is. The
revisions numbered like those steps keep adding rows, so a release of before reads a newer store as newer than
itself and refuses it.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ingest_core.store.schema import schema_version, utcnow


def installed_version(conn: Connection) -> int:
    """The hand-rolled version of the store behind `conn` (0: no marker, or no step 1)."""
    if not sa.inspect(conn).has_table(schema_version.name):
        return 0
    return unbroken_run(set(conn.execute(sa.select(schema_version.c.version)).scalars()))


def unbroken_run(done: set[int]) -> int:
    """The last step of the run 1, 2, 3, ... in `done` (0: no step 1)."""
    version = 0
    while version + 1 in done:
        version += 1
    return version


def revision_of(version: int) -> str:
    return f"{version:04d}"


def record(conn: Connection, revisions: list[str]) -> None:
    """Add the marker rows of the numbered revisions just applied (the table is revision 0001's)."""
    done = set(conn.execute(sa.select(schema_version.c.version)).scalars())
    rows = [{"id": int(r), "version": int(r), "upgraded_at": utcnow()} for r in revisions
            if r.isdigit() and int(r) not in done]
    if rows:
        conn.execute(schema_version.insert(), rows)
