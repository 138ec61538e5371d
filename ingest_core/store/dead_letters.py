"""The dead-letter files of published runs: which Parquet files hold a datasource's visible dead letters. Only
a publish inserts them (`publisher`), in the transaction that inserts its segments, so a failed attempt's or
another replica's files are never listed."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import sqlalchemy as sa

from ingest_core.handover.report import DeadLetterFile
from ingest_core.store.database import Database
from ingest_core.store.records import DeadLetterFileRecord
from ingest_core.store.schema import as_utc, dead_letter_files, utcnow


class DeadLetterFiles:
    def __init__(self, db: Database):
        self.db = db

    def of(self, name: str, *, run_id: str | None = None, after_seq: int | None = None) -> list[DeadLetterFileRecord]:
        """In publish order, then by group and location; `after_seq`: only publishes after that one."""
        query = sa.select(dead_letter_files).where(dead_letter_files.c.datasource == name)
        if run_id is not None:
            query = query.where(dead_letter_files.c.run_id == run_id)
        if after_seq is not None:
            query = query.where(dead_letter_files.c.publish_seq > after_seq)
        with self.db.session() as conn:
            rows = conn.execute(query.order_by(dead_letter_files.c.publish_seq, dead_letter_files.c.group_id,
                                               dead_letter_files.c.location)).mappings().all()
        return [_record(r) for r in rows]


def record_published(conn: sa.Connection, datasource: str, run_id: str,
                     files: Sequence[tuple[int, int, DeadLetterFile]]) -> int | None:
    """Inside the publish's transaction (which holds the datasource's row lock): record `files` (group, replica,
    file) under the datasource's next publish sequence, returned (None: no files, no sequence taken)."""
    if not files:
        return None
    top = conn.execute(sa.select(sa.func.max(dead_letter_files.c.publish_seq))
                       .where(dead_letter_files.c.datasource == datasource)).scalar()
    seq = int(top or 0) + 1
    now = utcnow()
    conn.execute(dead_letter_files.insert(), [
        {"datasource": datasource, "location": f.location, "run_id": run_id, "group_id": group, "replica": replica,
         "records": f.records, "size_bytes": f.bytes, "publish_seq": seq, "created_at": now}
        for group, replica, f in files])
    return seq


def _record(row: Mapping[str, Any]) -> DeadLetterFileRecord:
    return DeadLetterFileRecord(
        datasource=row["datasource"], location=row["location"], run_id=row["run_id"], group_id=int(row["group_id"]),
        replica=int(row["replica"]), records=int(row["records"]), size_bytes=int(row["size_bytes"]),
        publish_seq=int(row["publish_seq"]), created_at=as_utc(row["created_at"]))
