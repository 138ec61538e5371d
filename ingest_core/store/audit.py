"""The audit log: what operators and the system did to a datasource (actions, resets, expiries, loop errors),
with who did it and the details."""

from __future__ import annotations

import json
import logging

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ingest_core.core.errors import clipped
from ingest_core.core.loss import RecordsLost
from ingest_core.core.offsets import OffsetRange, TopicPartition, offsets_from_json
from ingest_core.store.database import Database
from ingest_core.store.records import AuditRecord
from ingest_core.store.schema import as_utc, audit_log, utcnow

log = logging.getLogger(__name__)
SKIP = "skip"  # the audit action of `ingest skip`: its details' "skippedRanges" are records lost on purpose
RECORDS_LOST = "records_lost"  # one move of the main line past unread records (`core.loss.RecordsLost`)
RESET = "reset"  # a hard reset: its details' "clearedOffsets" are where the main line stood


def losses(records: list[AuditRecord]) -> list[RecordsLost]:
    """The `records_lost` audit records among `records`, as they were written."""
    return [RecordsLost.from_json(r.details) for r in records if r.action == RECORDS_LOST]


def cleared_by_last_reset(records: list[AuditRecord]) -> dict[TopicPartition, int]:
    """Where the main line stood before the newest hard reset among `records` (oldest first): a first start
    after it loses what lies between that and its own start."""
    resets = [r for r in records if r.action == RESET]
    return offsets_from_json(resets[-1].details.get("clearedOffsets") or {}) if resets else {}


def skipped_records(records: list[AuditRecord]) -> dict[TopicPartition, int]:
    """Offsets skipped per partition by the `skip` audit records among `records` (an upper bound on records:
    see `OffsetRange.size`)."""
    out: dict[TopicPartition, int] = {}
    for record in records:
        if record.action == SKIP:
            for raw in record.details.get("skippedRanges", []):
                skipped = OffsetRange.from_json(raw)
                out[skipped.tp] = out.get(skipped.tp, 0) + skipped.size
    return out


def _fitted(column: str, value: str) -> str:
    return clipped(value, audit_log.c[column].type.length)


class AuditLog:
    def __init__(self, db: Database):
        self.db = db

    def write(self, name: str, action: str, details: dict, actor: str = "system", *,
              conn: Connection | None = None) -> None:
        """`details` is stored as JSON (values it cannot hold, such as date-times, as their strings). A name
        longer than its column (a refused request may name anything) is cut to fit, ending in an ellipsis: the
        row is written on every database, never refused."""
        stmt = audit_log.insert().values(datasource=_fitted("datasource", name), action=_fitted("action", action),
                                         actor=_fitted("actor", actor),
                                         details=json.loads(json.dumps(details, default=str)), created_at=utcnow())
        with self.db.within(conn) as c:
            c.execute(stmt)

    def write_loss(self, name: str, event: RecordsLost, actor: str = "system", *,
                   conn: Connection | None = None) -> bool:
        """Audit `event` (in the caller's transaction: the move that lost the records); False when it lost none."""
        if not event.records:
            return False
        self.write(name, RECORDS_LOST, event.to_json(), actor, conn=conn)
        log.warning("datasource %s: %s", name, event.describe())
        return True

    def records(self, name: str, *, action: str | None = None, limit: int | None = None,
                conn: Connection | None = None) -> list[AuditRecord]:
        """Oldest first; with `limit`, the most recent ones."""
        query = sa.select(audit_log).where(audit_log.c.datasource == name)
        if action is not None:
            query = query.where(audit_log.c.action == action)
        if limit is not None:
            query = query.order_by(audit_log.c.id.desc()).limit(limit)
        with self.db.within(conn) as c:
            rows = sorted(c.execute(query).mappings().all(), key=lambda r: r["id"])
        return [AuditRecord(r["datasource"], r["action"], r["actor"], r["details"], as_utc(r["created_at"]))
                for r in rows]
