"""The main line: a datasource's committed offsets, and the one transaction that moves them.

Whatever changes the committed offsets (a publish advancing them: `publisher`; an operator's reset,
reset-to-latest or set-offsets: `supervisor.actions`) does it in a `MainLine.locked` transaction with `move`:

  1. lock the datasource row (an operator's move takes the planning lock first, so no planner plans from the
     offsets it changes; a publish does not, so it never waits for a planner asking Kafka);
  2. write the new offsets, or clear them all (a reset);
  3. bump the datasource's `commit_version`: a compare-and-swap on the version read under the lock;
  4. an operator's move only (it gives a `reason`): supersede the main line's runs in flight, which were planned
     from where it stood, and release the claimed ranges at and above the new offsets (all of them after a
     reset): the operator asked to read those offsets again.

The caller's other steps (a publish's checks, claims and segments; an operator's backfill run and audit record)
run in the same transaction, on `conn`.
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Iterator, Mapping

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ingest_core.core.errors import MetadataStoreError
from ingest_core.core.offsets import KnownOffset, PublishedRange, TopicPartition
from ingest_core.store.offsets import claim_row
from ingest_core.store.schema import datasources, offsets, published_ranges, utcnow

if TYPE_CHECKING:
    from ingest_core.store.metadata import MetadataStore


@dataclass(frozen=True)
class Move:
    """What one move of the main line did."""

    commit_version: int  # the datasource's, after the move
    superseded: list[str]  # the runs in flight it superseded
    released: list[PublishedRange]  # the claims it released, each from where it was cut


class MainLine:
    """One datasource's main line inside its locked transaction `conn` (see `locked`)."""

    def __init__(self, store: MetadataStore, conn: Connection, name: str, commit_version: int):
        self.store, self.conn, self.name = store, conn, name
        self.commit_version = commit_version  # as read under the lock: the compare-and-swap's expected value

    @classmethod
    @contextmanager
    def locked(cls, store: MetadataStore, name: str, *, planning_lock: bool) -> Iterator[MainLine]:
        """A transaction holding the datasource row's lock (and with `planning_lock`, the planning lock too);
        it commits when the block ends, and writes nothing if the block raises."""
        with store.planning_lock(name) if planning_lock else nullcontext(), store.session() as conn:
            row = store.datasources.lock(name, conn=conn)
            yield cls(store, conn, name, int(row["commit_version"]))

    def committed(self) -> dict[TopicPartition, KnownOffset]:
        return self.store.offsets.committed(self.name, conn=self.conn)

    def move(self, to: Mapping[TopicPartition, int] | None, *, by: str, reason: str | None = None,
             topic_ids: Mapping[str, str] | None = None) -> Move:
        """Set the committed offsets of `to`'s partitions (others keep theirs; None: clear them all) and bump
        `commit_version`. `topic_ids`: Kafka's id of the topics the offsets were read from, stored with them (a
        topic without one keeps the id it had). `by`: who set them (the publishing run's id, or e.g. "set-offsets by alice").
        `reason`: why an operator moved them; then the runs in flight are superseded (by `by`, with the reason)
        and the claims at and above `to` released. A publish gives none: its successors continue from it."""
        if to is None:
            self.conn.execute(offsets.delete().where(offsets.c.datasource == self.name))
        else:
            self._write(to, by, topic_ids or {})
        self._bump()
        if reason is None:
            return Move(self.commit_version, [], [])
        superseded = self.store.runs.supersede_inflight(self.name, by, reason, conn=self.conn)
        return Move(self.commit_version, superseded, self._release(to))

    def _write(self, new: Mapping[TopicPartition, int], by: str, topic_ids: Mapping[str, str]) -> None:
        # one statement for the updates and one for the inserts, however many partitions (100,000 rows one by
        # one took seconds)
        now = utcnow()
        existing = self.committed()
        updates, inserts = [], []
        for tp, off in sorted(new.items()):
            known = existing.get(tp)
            topic_id = topic_ids.get(tp.topic) or (known.topic_id if known is not None else None)
            if known is not None:
                updates.append({"b_topic": tp.topic, "b_partition": tp.partition, "b_offset": off,
                                "b_topic_id": topic_id})
            else:
                inserts.append({"datasource": self.name, "topic": tp.topic, "partition": tp.partition, "offset": off,
                                "run_id": by, "updated_at": now, "topic_id": topic_id})
        if updates:
            self.conn.execute(
                offsets.update().where((offsets.c.datasource == self.name)
                                       & (offsets.c.topic == sa.bindparam("b_topic"))
                                       & (offsets.c.partition == sa.bindparam("b_partition")))
                .values(offset=sa.bindparam("b_offset"), run_id=by, updated_at=now,
                        topic_id=sa.bindparam("b_topic_id")), updates)
        if inserts:
            self.conn.execute(offsets.insert(), inserts)

    def _bump(self) -> None:
        expected = self.commit_version
        result = self.conn.execute(
            datasources.update()
            .where((datasources.c.name == self.name) & (datasources.c.commit_version == expected))
            .values(commit_version=expected + 1, updated_at=utcnow())
        )
        if result.rowcount != 1:
            raise MetadataStoreError(
                f"datasource {self.name!r}: committed offsets changed concurrently (commit version {expected} is "
                f"gone); the publish was rolled back and can be retried"
            )
        self.commit_version = expected + 1

    def _release(self, at: Mapping[TopicPartition, int] | None) -> list[PublishedRange]:
        """Release the claims at and above `at` (None: all of them); returns what was released."""
        released = []
        for claim in self.store.offsets.claims(self.name, conn=self.conn):
            cut = claim.start if at is None else at.get(claim.tp)
            if cut is None or claim.end <= cut:
                continue
            key = claim_row(self.name, claim.tp, claim.start)
            if claim.start >= cut:
                self.conn.execute(published_ranges.delete().where(key))
            else:
                self.conn.execute(published_ranges.update().where(key).values(end_offset=cut, updated_at=utcnow()))
            released.append(replace(claim, start=max(claim.start, cut)))
        return released
