"""The compaction search (pure) and the compaction section of a spec."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import pytest

from ingest_core.core.compaction import find_candidates
from ingest_core.core.errors import SpecError
from ingest_core.core.granularity import Granularity
from ingest_core.core.periods import Period
from ingest_core.core.spec import parse_spec

T0 = datetime(2026, 11, 22, tzinfo=timezone.utc)
HOUR, DAY = Granularity.named("HOUR"), Granularity.named("DAY")


@dataclass(frozen=True)
class Seg:
    id: str
    interval_start: datetime
    interval_end: datetime
    num_rows: int = 10
    size_bytes: int = 100


def hour_bucket(g: Granularity, when: datetime) -> tuple[datetime, datetime]:
    """Floors to the hour or the day, as executor.buckets does (kept pure here)."""
    step = timedelta(hours=1) if g.name == "HOUR" else timedelta(days=1)
    start = T0 + ((when - T0) // step) * step
    return start, start + step


def segs(hour: int, n: int, prefix: str = "s", hours: int = 1, rows: int = 10) -> list[Seg]:
    start = T0 + timedelta(hours=hour)
    return [Seg(f"{prefix}{hour}-{i}", start, start + timedelta(hours=hours), rows) for i in range(n)]


def search(visible, granularity=HOUR, target_rows=1000, skip="PT1H"):
    return find_candidates(visible, granularity=granularity, target_rows=target_rows,
                           skip_offset=Period.parse(skip), bucket=hour_bucket)


def test_intervals_past_the_horizon_wait_and_compacted_ones_are_left_alone():
    found = search(segs(0, 3) + segs(1, 1) + segs(2, 2) + segs(3, 4))  # latest end 04:00, horizon 03:00
    assert [c.interval_start.hour for c in found.candidates] == [0, 2]  # hour 1 is one segment already
    assert (found.horizon, found.skipped_recent, found.compacted) == (T0 + timedelta(hours=3), 4, 1)
    first = found.candidates[0]
    assert (first.segment_ids, first.rows, first.bytes, first.target_segments) == (
        ("s0-0", "s0-1", "s0-2"), 30, 300, 1)


def test_the_target_row_count_decides_how_many_segments_an_interval_keeps():
    # 1,200 rows at 500 per segment need 3 segments: three are already as few as it gets
    full = search(segs(0, 3, rows=400) + segs(5, 1), target_rows=500)
    assert full.candidates == [] and full.compacted == 1
    (two,) = search(segs(0, 3, rows=100) + segs(5, 1), target_rows=150).candidates
    assert two.rows == 300 and two.target_segments == 2


def test_a_coarser_granularity_gathers_hours_and_skips_wider_segments():
    found = search(segs(0, 1) + segs(1, 1) + segs(30, 1), granularity=DAY, skip="PT0S")
    (day,) = found.candidates  # one segment per hour, but hour segments are not DAY segments
    assert day.interval == (T0, T0 + timedelta(days=1)) and day.segment_ids == ("s0-0", "s1-0")
    wide = [Seg("month", T0, T0 + timedelta(days=30))] + segs(24 * 40, 1)
    assert search(wide, granularity=DAY, skip="PT0S").candidates == []  # wider than a day: left as it is


def test_no_segments_no_candidates():
    assert search([]).candidates == [] and search([]).horizon is None


def minimal(compaction) -> dict:
    return {"type": "kafka", "spec": {
        "dataSchema": {"dataSource": "w", "timestampSpec": {"column": "ts"},
                       "granularitySpec": {"segmentGranularity": "HOUR"}},
        "ioConfig": {"topic": "t", "inputFormat": {"type": "json"}, "consumerProperties": {"bootstrap.servers": "x:1"}}},
        "compaction": compaction}


def test_a_druid_compaction_config_loads_with_its_field_names():
    spec = parse_spec(minimal({"dataSource": "w", "skipOffsetFromLatest": "PT6H", "taskPriority": 25,
                               "tuningConfig": {"partitionsSpec": {"type": "dynamic", "maxRowsPerSegment": 100}},
                               "granularitySpec": {"segmentGranularity": "DAY"}}))
    c = spec.compaction
    assert (str(c.skip_offset_from_latest), c.target_rows, c.granularity_spec.segment_granularity.name) == (
        "PT6H", 100, "DAY")
    assert [w.path for w in spec.warnings] == ["compaction.taskPriority"]
    assert parse_spec(minimal({"maxRowsPerSegment": 7})).compaction.target_rows == 7
    assert parse_spec(minimal({})).compaction.skip_offset_from_latest == Period.parse("P1D")
    assert parse_spec(minimal(None)).compaction is None


def test_compaction_config_mistakes_are_named():
    with pytest.raises(SpecError) as info:
        parse_spec(minimal({"dataSource": "other", "skipOffsetFromLatest": "-PT1H", "schedule": "nope",
                            "tuningConfig": {"partitionsSpec": {"type": "hashed"}},
                            "granularitySpec": {"segmentGranularity": "FIFTEEN_MINUTE"}, "skipOfset": "P1D"}))
    text = str(info.value)
    for expected in ("compaction.dataSource: is 'other', but this spec's dataSource is 'w'",
                     "compaction.skipOffsetFromLatest: must be a non-negative period",
                     "compaction.schedule: 'nope' is not a valid cron expression",
                     "compaction.tuningConfig.partitionsSpec.type: partitionsSpec type 'hashed' is not supported",
                     "compaction.granularitySpec.segmentGranularity: FIFTEEN_MINUTE does not hold whole HOUR",
                     "compaction.skipOfset: unknown field"):
        assert expected in text, text


def test_segment_health_says_per_interval_and_what_is_left_to_compact():
    from ingest_core.core.compaction import SegmentHealth, interval_stats

    visible = segs(0, 3) + segs(1, 1) + segs(3, 2)
    stats = interval_stats(visible)
    assert [(i.interval_start.hour, i.segments, i.rows, i.average_bytes) for i in stats] == [
        (0, 3, 30, 100), (1, 1, 10, 100), (3, 2, 20, 100)]
    health = SegmentHealth(stats, search(visible))
    assert health.describe() == ("6 segments in 3 intervals, 100 bytes on average; compaction: 1 intervals to "
                                 "compact (3 segments), 1 compacted, 2 segments newer than skipOffsetFromLatest wait")
    assert health.to_json()["compaction"] == {"intervalsToCompact": 1, "segmentsToCompact": 3,
                                              "compactedIntervals": 1, "segmentsWaiting": 2,
                                              "horizon": "2026-11-22T03:00:00.000Z"}
    assert SegmentHealth([], None).describe() == "no segments"
