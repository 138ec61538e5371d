"""The segment records of a datasource: every segment a publish made visible, where its file is, its rows and
the offset ranges it came from. Only a publish inserts them (`publisher`)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from ingest_core.store.database import Database
from ingest_core.store.records import SegmentRecord
from ingest_core.store.schema import as_utc, segments


class SegmentRecords:
    def __init__(self, db: Database):
        self.db = db

    def of(self, name: str, *, used_only: bool = True, run_id: str | None = None,
           overlapping: tuple[datetime, datetime] | None = None,
           conn: sa.Connection | None = None) -> list[SegmentRecord]:
        """By interval, version and partition number; `run_id`: only the segments that run published;
        `overlapping`: only those whose interval overlaps [start, end)."""
        query = sa.select(segments).where(segments.c.datasource == name)
        if overlapping is not None:
            query = query.where((segments.c.interval_start < overlapping[1])
                                & (segments.c.interval_end > overlapping[0]))
        if used_only:
            query = query.where(segments.c.used == sa.true())
        if run_id is not None:
            query = query.where(segments.c.run_id == run_id)
        with self.db.within(conn) as c:
            rows = c.execute(query.order_by(segments.c.interval_start, segments.c.version,
                                            segments.c.partition_num)).mappings().all()
        return [_segment_record(r) for r in rows]


def _segment_record(row: Mapping[str, Any]) -> SegmentRecord:
    return SegmentRecord(
        id=row["id"], datasource=row["datasource"], interval_start=as_utc(row["interval_start"]),
        interval_end=as_utc(row["interval_end"]), version=row["version"], partition_num=int(row["partition_num"]),
        location=row["location"], num_rows=int(row["num_rows"]), size_bytes=int(row["size_bytes"]),
        used=bool(row["used"]), run_id=row["run_id"], group_id=int(row["group_id"]),
        start_offsets=row["start_offsets"], end_offsets=row["end_offsets"], created_at=as_utc(row["created_at"]),
        payload=row["payload"], used_status_last_updated=as_utc(row["used_status_last_updated"]),
    )
