"""Which segments are visible: Druid's VersionedIntervalTimeline, reduced to what publishing here produces.

A segment is visible when it is used and no used segment of a newer version covers its whole interval
(a newer version of an interval replaces the older one, as a Druid overwrite does). Segments of the same
version and interval are partitions of one set and are all visible together; appends share the interval's
version (see `Publisher._allocate`), so they never hide each other. Pure: no I/O.
"""

from __future__ import annotations

from datetime import datetime
from typing import Iterable, Protocol, TypeVar


class SegmentLike(Protocol):
    interval_start: datetime
    interval_end: datetime
    version: str
    used: bool


S = TypeVar("S", bound=SegmentLike)


def overshadowed_by(segment: SegmentLike, other: SegmentLike) -> bool:
    return (other.used and other.version > segment.version
            and other.interval_start <= segment.interval_start and segment.interval_end <= other.interval_end)


def visible_segments(segments: Iterable[S]) -> list[S]:
    used = [s for s in segments if s.used]
    # few intervals per datasource-read: the quadratic scan stays cheap; sort newest first to stop early
    by_version = sorted(used, key=lambda s: s.version, reverse=True)
    out = []
    for s in used:
        if not any(overshadowed_by(s, o) for o in by_version if o.version > s.version):
            out.append(s)
    return sorted(out, key=lambda s: (s.interval_start, s.version, getattr(s, "partition_num", 0)))
