"""The datasources of the metadata store: one row each (the supervisor's state, the flags an operator set, the
`commit_version` of its committed offsets) and the history of its specs.

Locking a datasource's row (`lock`) is how writers of one datasource serialize: a publish, an operator's move of
the main line, an expiry and the insertion of a run each take it first.
"""

from __future__ import annotations

from typing import Any, Mapping

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Connection

from ingest_core.core.errors import UnknownDatasourceError
from ingest_core.core.secrets import redact_spec_json
from ingest_core.core.states import Event, State, Stored, move, stored_state
from ingest_core.store.database import Database
from ingest_core.store.schema import datasources, specs, utcnow


class Datasources:
    def __init__(self, db: Database):
        self.db = db

    def lock(self, name: str, *, conn: Connection) -> Mapping[str, Any]:
        """Lock the datasource row for the transaction `conn` (creating it if needed) and return it
        (`SELECT ... FOR UPDATE` on PostgreSQL; SQLite's transactions are `BEGIN IMMEDIATE`: they hold the
        database's write lock already)."""
        query = sa.select(datasources).where(datasources.c.name == name)
        if self.db.is_postgres:
            query = query.with_for_update()
        row = conn.execute(query).mappings().first()
        if row is None:
            now = utcnow()
            if self.db.is_postgres:
                conn.execute(pg_insert(datasources).values(name=name, created_at=now, updated_at=now)
                             .on_conflict_do_nothing(index_elements=["name"]))
            else:
                conn.execute(datasources.insert().prefix_with("OR IGNORE").values(name=name, created_at=now,
                                                                                   updated_at=now))
            row = conn.execute(query).mappings().first()
        return row

    def get(self, name: str, *, conn: Connection | None = None) -> dict | None:
        with self.db.within(conn) as c:
            row = c.execute(sa.select(datasources).where(datasources.c.name == name)).mappings().first()
            return dict(row) if row else None

    def require(self, name: str) -> dict:
        row = self.get(name)
        if row is None:
            raise UnknownDatasourceError(name, [r["name"] for r in self.all()])
        return row

    def all(self) -> list[dict]:
        with self.db.session() as conn:
            return [dict(r) for r in conn.execute(sa.select(datasources).order_by(datasources.c.name)).mappings()]

    def set_state(self, name: str, event: Event, *, conn: Connection | None = None) -> Stored:
        """Move the datasource by `event` from the state it is in (`core.states.move`: `IllegalMoveError`, and
        nothing written, when that state does not take it); returns the state after it. The `suspended` and
        `terminated` columns (schema v1-v6's flags) are kept in step with the state."""
        with self.db.within(conn) as c:
            row = self.lock(name, conn=c)
            before = stored_state(row["state"], row["detailed_state"])
            state, detailed = move(before, event, name)
            if (state, detailed) != before:
                c.execute(datasources.update().where(datasources.c.name == name).values(
                    state=state.value, detailed_state=detailed.value, suspended=state is State.SUSPENDED,
                    terminated=state is State.TERMINATED, updated_at=utcnow()))
        return state, detailed

    def state(self, name: str, *, conn: Connection | None = None) -> Stored:
        """The datasource's stored state (PENDING when it has no row yet)."""
        row = self.get(name, conn=conn)
        return stored_state(row["state"], row["detailed_state"]) if row else stored_state(None, None)

    # ------------------------------------------------------------------------------------------ spec history

    def register_spec(self, name: str, spec_json: dict, fingerprint: str, source: str | None = None) -> int:
        """Record the (redacted) spec; a new version only when it changed. Returns the current version."""
        with self.db.session() as conn:
            row = self.lock(name, conn=conn)
            latest = conn.execute(
                sa.select(specs.c.version, specs.c.fingerprint).where(specs.c.datasource == name)
                .order_by(specs.c.version.desc()).limit(1)
            ).first()
            if latest is not None and latest.fingerprint == fingerprint:
                return int(latest.version)
            version = (int(latest.version) if latest else 0) + 1
            conn.execute(specs.insert().values(datasource=name, version=version, fingerprint=fingerprint,
                                               spec=redact_spec_json(spec_json), source=source, created_at=utcnow()))
            conn.execute(datasources.update().where(datasources.c.name == row["name"])
                         .values(spec_version=version, updated_at=utcnow()))
            return version

    def spec_history(self, name: str) -> list[dict]:
        """Each version, its spec redacted again under today's rules (a row stored by an older version may hold
        a literal of a key since known to be secret)."""
        with self.db.session() as conn:
            rows = conn.execute(sa.select(specs).where(specs.c.datasource == name).order_by(specs.c.version))
            return [{**r._mapping, "spec": redact_spec_json(r.spec)} for r in rows]
