"""Which intervals compaction rewrites: Druid's auto-compaction search, reduced to what publishing here makes.

The visible segments are grouped by the compaction's interval (a bucket of its `segmentGranularity`, else the
datasource's). An interval is compacted when it ends at or before the latest visible segment's end minus
`skipOffsetFromLatest` (the recent intervals still get appends), and when its segments are not already what
compaction would make: more segments than `ceil(rows / maxRowsPerSegment)`, or segments of another interval
than the compaction's (a coarser `segmentGranularity`).

The candidate carries the ids of the segments it read: the compaction's publish is a compare-and-swap on them
(`store.compaction`), so an append that lands in the interval meanwhile makes the publish refuse, never lose
the append. Pure: no I/O; bucketing a time is given (`executor.buckets.bucket`), so the cut is the job's own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from ingest_core.core.granularity import Granularity
from ingest_core.core.periods import Period, format_datetime, parse_datetime

Bucket = Callable[[Granularity, datetime], tuple[datetime, datetime]]


class SegmentLike(Protocol):
    id: str
    interval_start: datetime
    interval_end: datetime
    num_rows: int
    size_bytes: int


@dataclass(frozen=True)
class CompactionCandidate:
    """One interval to rewrite, and the visible segments it reads (the compare-and-swap's expected set)."""

    interval_start: datetime
    interval_end: datetime
    segment_ids: tuple[str, ...]
    rows: int
    bytes: int
    target_segments: int  # at most this many segments after the rewrite

    @property
    def interval(self) -> tuple[datetime, datetime]:
        return self.interval_start, self.interval_end


@dataclass(frozen=True)
class CompactionSearch:
    """What the search found: the intervals to compact (oldest first) and how much stays for later."""

    candidates: list[CompactionCandidate]
    horizon: datetime | None  # intervals ending after this are skipped (skipOffsetFromLatest); None: no segments
    skipped_recent: int  # visible segments in intervals past the horizon
    compacted: int  # intervals already as compaction leaves them


def find_candidates(visible: Iterable[SegmentLike], *, granularity: Granularity, target_rows: int,
                    skip_offset: Period, bucket: Bucket) -> CompactionSearch:
    segments = list(visible)
    if not segments:
        return CompactionSearch([], None, 0, 0)
    horizon = skip_offset.subtract_from(max(s.interval_end for s in segments))
    groups: dict[tuple[datetime, datetime], list[SegmentLike]] = {}
    for s in segments:
        groups.setdefault(bucket(granularity, s.interval_start), []).append(s)
    candidates, skipped, compacted = [], 0, 0
    for (start, end), members in sorted(groups.items()):
        if end > horizon or any(s.interval_end > end for s in members):
            # recent, or a segment wider than the interval (a coarser compaction earlier): left as it is
            skipped += len(members)
            continue
        rows = sum(s.num_rows for s in members)
        target = max(1, -(-rows // target_rows))
        if len(members) <= target and all((s.interval_start, s.interval_end) == (start, end) for s in members):
            compacted += 1
            continue
        candidates.append(CompactionCandidate(start, end, tuple(sorted(s.id for s in members)), rows,
                                              sum(s.size_bytes for s in members), target))
    return CompactionSearch(candidates, horizon, skipped, compacted)


@dataclass(frozen=True)
class CompactionJob:
    """What one compaction job rewrites, and where: written by the compaction DAG's search, read by the job."""

    datasource: str
    task_id: str
    interval_start: datetime
    interval_end: datetime
    segment_ids: tuple[str, ...]
    locations: tuple[str, ...]  # the segments' files, in publish order
    target_rows: int
    target_segments: int
    output_uri: str
    # each location's column types (`core.column_types`), to read segments of differing schemas as one; empty
    # in jobs of before
    types: tuple[dict[str, str], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"datasource": self.datasource, "taskId": self.task_id,
                "interval": f"{format_datetime(self.interval_start)}/{format_datetime(self.interval_end)}",
                "segmentIds": list(self.segment_ids), "locations": list(self.locations),
                "targetRows": self.target_rows, "targetSegments": self.target_segments, "output": self.output_uri,
                **({"types": [dict(t) for t in self.types]} if self.types else {})}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "CompactionJob":
        start, end = d["interval"].split("/")
        return cls(d["datasource"], d["taskId"], parse_datetime(start), parse_datetime(end), tuple(d["segmentIds"]),
                   tuple(d["locations"]), int(d["targetRows"]), int(d["targetSegments"]), d["output"],
                   tuple(dict(t) for t in d.get("types") or ()))


@dataclass(frozen=True)
class CompactedFile:
    location: str
    rows: int
    bytes: int
    types: dict[str, str] = field(default_factory=dict)  # its column types, for its segment record

    def to_json(self) -> dict[str, Any]:
        return {"location": self.location, "rows": self.rows, "bytes": self.bytes,
                **({"types": self.types} if self.types else {})}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "CompactedFile":
        return cls(d["location"], int(d["rows"]), int(d["bytes"]), dict(d.get("types") or {}))


@dataclass(frozen=True)
class IntervalStats:
    """One interval's visible segments: how many, their rows and bytes."""

    interval_start: datetime
    interval_end: datetime
    segments: int
    rows: int
    bytes: int

    @property
    def average_bytes(self) -> int:
        return self.bytes // self.segments if self.segments else 0

    def to_json(self) -> dict[str, Any]:
        return {"interval": f"{format_datetime(self.interval_start)}/{format_datetime(self.interval_end)}",
                "segments": self.segments, "rows": self.rows, "bytes": self.bytes,
                "averageBytes": self.average_bytes}


def interval_stats(visible: Iterable[SegmentLike]) -> list[IntervalStats]:
    groups: dict[tuple[datetime, datetime], list[SegmentLike]] = {}
    for s in visible:
        groups.setdefault((s.interval_start, s.interval_end), []).append(s)
    return [IntervalStats(start, end, len(members), sum(s.num_rows for s in members),
                          sum(s.size_bytes for s in members)) for (start, end), members in sorted(groups.items())]


@dataclass(frozen=True)
class SegmentHealth:
    """What `ingest segments` and `status` show of a datasource's segments: per interval, and what compaction
    has left to do (None: the spec has no compaction)."""

    intervals: list[IntervalStats]
    compaction: CompactionSearch | None

    @property
    def segments(self) -> int:
        return sum(i.segments for i in self.intervals)

    @property
    def bytes(self) -> int:
        return sum(i.bytes for i in self.intervals)

    def describe(self) -> str:
        n = self.segments
        text = (f"{n} segments in {len(self.intervals)} intervals, {self.bytes // n if n else 0:,} bytes on average"
                if n else "no segments")
        if self.compaction is not None:
            c = self.compaction
            text += (f"; compaction: {len(c.candidates)} intervals to compact "
                     f"({sum(len(x.segment_ids) for x in c.candidates)} segments), {c.compacted} compacted, "
                     f"{c.skipped_recent} segments newer than skipOffsetFromLatest wait")
        return text

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"segments": self.segments, "intervals": len(self.intervals), "bytes": self.bytes,
                               "averageBytes": self.bytes // self.segments if self.segments else 0}
        if self.compaction is not None:
            c = self.compaction
            out["compaction"] = {
                "intervalsToCompact": len(c.candidates),
                "segmentsToCompact": sum(len(x.segment_ids) for x in c.candidates),
                "compactedIntervals": c.compacted, "segmentsWaiting": c.skipped_recent,
                "horizon": format_datetime(c.horizon) if c.horizon else None}
        return out
