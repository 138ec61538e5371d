"""Reading a datasource's committed offsets (where its main line stands) and its claimed offset ranges (what
every publish made visible). They change only in a main-line move (`main_line`) and a publish's claim
(`publisher`), each inside the datasource's locked transaction."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ingest_core.core.offsets import KnownOffset, PublishedRange, TopicPartition
from ingest_core.store.database import Database
from ingest_core.store.schema import as_utc, offsets, published_ranges


class Offsets:
    def __init__(self, db: Database):
        self.db = db

    def committed(self, name: str, *, conn: Connection | None = None) -> dict[TopicPartition, KnownOffset]:
        # plain rows of the five columns read (a mapping per row cost seconds at 100,000 partitions)
        query = sa.select(offsets.c.topic, offsets.c.partition, offsets.c.offset, offsets.c.run_id,
                          offsets.c.topic_id).where(offsets.c.datasource == name)
        with self.db.within(conn) as c:
            rows = c.execute(query).all()
        return {TopicPartition(topic, partition): KnownOffset(int(offset), run_id, topic_id)
                for topic, partition, offset, run_id, topic_id in rows}

    def last_updated(self, name: str) -> datetime | None:
        with self.db.session() as conn:
            return as_utc(conn.execute(sa.select(sa.func.max(offsets.c.updated_at))
                                       .where(offsets.c.datasource == name)).scalar())

    def claims(self, name: str, *, conn: Connection | None = None) -> list[PublishedRange]:
        """The claimed (published) offset ranges, by partition and start."""
        query = sa.select(published_ranges).where(published_ranges.c.datasource == name).order_by(
            published_ranges.c.topic, published_ranges.c.partition, published_ranges.c.start_offset)
        with self.db.within(conn) as c:
            return [PublishedRange(TopicPartition(r["topic"], int(r["partition"])), int(r["start_offset"]),
                                   int(r["end_offset"]), r["run_id"], bool(r["backfill"]))
                    for r in c.execute(query).mappings()]


def claim_row(name: str, tp: TopicPartition, start: int):
    """The WHERE clause of one claimed range's row."""
    return ((published_ranges.c.datasource == name) & (published_ranges.c.topic == tp.topic)
            & (published_ranges.c.partition == tp.partition) & (published_ranges.c.start_offset == start))
