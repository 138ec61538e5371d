"""The compaction's publish: an interval's visible segments replaced by their rewrite, in one transaction.

Under the datasource's lock (the one every publish takes):
  1. compare-and-swap on the interval's visible segments: they must be exactly the ones the compaction read
     (`CompactionCandidate.segment_ids`). An append published meanwhile makes it refuse and write nothing
     (`CompactionConflictError`): the append is never lost, and the next compaction run reads it too. The same
     rewrite published again (a retried task whose commit went through) is found visible: nothing to do;
  2. insert the rewritten segments as a new version of the interval, newer than every version in it, so they
     overshadow what they replace even for a reader that still lists the old ones as used;
  3. mark the replaced segments unused, with the time (`used_status_last_updated`: kill waits a while after it);
  4. audit what was replaced by what.
Committed offsets do not move: compaction changes how rows are stored, not which records are ingested.
Appends after it go into the new version (`Publisher._allocate` finds the covering segment).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Sequence

from ingest_core.core.commit_rules import (
    CompactionProposal,
    VisibleSegment,
    decide_compaction,
)
from ingest_core.core.periods import format_datetime, parse_datetime
from ingest_core.core.timeline import visible_segments
from ingest_core.store.main_line import MainLine
from ingest_core.store.metadata import MetadataStore
from ingest_core.store.publisher import SegmentDescriptor, segment_id
from ingest_core.store.schema import segments, utcnow

log = logging.getLogger(__name__)

COMPACT = "compact"  # the audit action


@dataclass(frozen=True)
class CompactionResult:
    interval_start: datetime
    interval_end: datetime
    version: str
    segment_ids: tuple[str, ...]  # the new ones
    replaced: tuple[str, ...]
    rows: int


def publish_compaction(store: MetadataStore, datasource: str, interval: tuple[datetime, datetime],
                       expected: Sequence[str], rewritten: Sequence[SegmentDescriptor], task_id: str,
                       now: datetime | None = None) -> CompactionResult:
    """Replace the interval's visible segments, which must be `expected` (their ids, as the compaction read
    them), by `rewritten` (each inside the interval), or refuse. Publishing the same rewrite again (a retry
    whose first commit went through) finds it visible and writes nothing."""
    now = now or utcnow()
    start, end = interval
    expected = tuple(sorted(expected))
    for seg in rewritten:
        if seg.interval_start < start or seg.interval_end > end:
            raise ValueError(f"segment {seg.location} [{seg.interval_start}, {seg.interval_end}) is outside the "
                             f"interval [{start}, {end}) it compacts")
    with MainLine.locked(store, datasource, planning_lock=False) as line:
        conn = line.conn
        every = store.segment_records.of(datasource, used_only=False, overlapping=(start, end), conn=conn)
        current = visible_segments(every)
        found = tuple(sorted(s.id for s in current))
        proposal = CompactionProposal(
            task_id, f"compaction {task_id} of {datasource!r} interval {format_datetime(start)}/"
            f"{format_datetime(end)}", frozenset(expected), frozenset(seg.location for seg in rewritten))
        if not decide_compaction(proposal, [VisibleSegment(s.id, s.run_id, s.location) for s in current]):
            mine = [s for s in current if s.run_id == task_id]
            log.info("compaction %s of %s is already published", task_id, datasource)
            return CompactionResult(start, end, mine[0].version, tuple(s.id for s in mine),
                                    tuple(mine[0].payload.get("compactedFrom", ())), sum(s.num_rows for s in mine))
        version = _newer_version(now, [s.version for s in every])
        starts: dict[str, dict[str, int]] = {}
        ends: dict[str, dict[str, int]] = {}
        for s in current:  # the offsets the replaced segments came from, widened per partition
            _widen(starts, s.start_offsets, min)
            _widen(ends, s.end_offsets, max)
        ids = []
        for num, seg in enumerate(rewritten):
            sid = segment_id(datasource, start, end, version, num)
            conn.execute(segments.insert().values(
                id=sid, datasource=datasource, interval_start=start, interval_end=end, version=version,
                partition_num=num, location=seg.location, num_rows=seg.num_rows, size_bytes=seg.size_bytes,
                used=True, run_id=task_id, group_id=0, start_offsets=starts, end_offsets=ends, created_at=now,
                used_status_last_updated=now, payload={**seg.payload, "compactedFrom": list(found)}))
            ids.append(sid)
        conn.execute(segments.update().where((segments.c.datasource == datasource) & segments.c.id.in_(found))
                     .values(used=False, used_status_last_updated=now))
        rows = sum(s.num_rows for s in rewritten)
        store.audit_log.write(datasource, COMPACT, {
            "task": task_id, "interval": f"{format_datetime(start)}/{format_datetime(end)}", "version": version,
            "replaced": list(found), "segments": ids, "rowsBefore": sum(s.num_rows for s in current),
            "rowsAfter": rows}, conn=conn)
    log.info("compaction %s of %s: %d segments of %s replaced by %d (version %s)", task_id, datasource, len(found),
             f"{format_datetime(start)}/{format_datetime(end)}", len(ids), version)
    return CompactionResult(start, end, version, tuple(ids), found, rows)


def _newer_version(now: datetime, versions: list[str]) -> str:
    """A version after every one of the interval's: now, or just after the newest if a clock ran ahead."""
    candidate = format_datetime(now)
    newest = max(versions, default="")
    if candidate > newest:
        return candidate
    return format_datetime(parse_datetime(newest) + timedelta(milliseconds=1))


def _widen(into: dict[str, dict[str, int]], offsets: dict, pick) -> None:
    for topic, parts in (offsets or {}).items():
        mine = into.setdefault(topic, {})
        for partition, offset in parts.items():
            mine[partition] = pick(mine[partition], offset) if partition in mine else offset
