"""Planning is pure: these run in milliseconds without a broker or a database."""

from datetime import datetime, timezone

import pytest

from ingest_core.core.offsets import (
    OffsetRange,
    StartOffset,
    StartSource,
    TopicPartition,
)
from ingest_core.core.planner import (
    Plan,
    PlanRequest,
    assign_groups,
    cap_by_record_limit,
    java_string_hash,
    plan_run,
    split_ranges,
    task_group_id,
)

NOW = datetime(2026, 11, 22, 12, tzinfo=timezone.utc)


def tps(topic, n):
    return [TopicPartition(topic, p) for p in range(n)]


def request(starts, latest, **kw):
    return PlanRequest(datasource="ds", run_id="r1", created_at=NOW,
                       starts={tp: StartOffset(o, StartSource.COMMITTED, "r0", o) for tp, o in starts.items()},
                       latest=latest, task_count=kw.pop("task_count", 2), **kw)


def test_modulo_assignment_like_druid():
    parts = tps("t", 5)
    groups = assign_groups({tp: 10 for tp in parts}, 2, "modulo", multi_topic=False)
    assert groups == {0: [parts[0], parts[2], parts[4]], 1: [parts[1], parts[3]]}


def test_fewer_groups_when_fewer_partitions():
    parts = tps("t", 2)
    plan = plan_run(request({tp: 0 for tp in parts}, {tp: 5 for tp in parts}, task_count=8))
    assert [g.group_id for g in plan.groups] == [0, 1]


def test_java_hash_matches_java():
    # Printed by Java's String.hashCode()
    assert java_string_hash("") == 0
    assert java_string_hash("metrics") == 955826371
    assert java_string_hash("hello world") == 1794106052
    assert java_string_hash("a-very-long-topic-name-that-overflows") == 1340849641
    assert java_string_hash("clicks") == -1357714453


@pytest.mark.parametrize("topic,expected", [("metrics", [3, 2, 1, 0]), ("clicks", [1, 2, 3, 0]),
                                            ("impressions", [2, 1, 0, 3])])
def test_multi_topic_groups_use_druids_hash(topic, expected):
    # Printed by Java: Math.abs(31 * topic.hashCode() + partition) % 4, Druid's multi-topic rule
    assert [task_group_id(TopicPartition(topic, p), 4, multi_topic=True) for p in range(4)] == expected
    assert [task_group_id(TopicPartition(topic, p), 4, multi_topic=False) for p in range(4)] == [0, 1, 2, 3]


def test_balanced_assignment_packs_by_records():
    sizes = {TopicPartition("t", 0): 1000, TopicPartition("t", 1): 10, TopicPartition("t", 2): 990,
             TopicPartition("t", 3): 20}
    balanced = assign_groups(sizes, 2, "balanced", multi_topic=False)
    loads = sorted(sum(sizes[tp] for tp in g) for g in balanced.values())
    assert loads == [1010, 1010]
    modulo = assign_groups(sizes, 2, "modulo", multi_topic=False)
    assert sorted(sum(sizes[tp] for tp in g) for g in modulo.values()) == [30, 1990]


def test_splits_are_bounded_even_and_cover_the_range():
    tp = TopicPartition("t", 0)
    splits = split_ranges([OffsetRange(tp, 100, 1100)], max_records_per_split=300)
    assert [(s.start, s.end) for s in splits] == [(100, 350), (350, 600), (600, 850), (850, 1100)]
    assert all(s.size <= 300 for s in splits)
    # min splits per group shrinks the target so one partition is read in parallel
    splits = split_ranges([OffsetRange(tp, 0, 10)], max_records_per_split=1000, min_splits=3)
    assert [(s.start, s.end) for s in splits] == [(0, 3), (3, 6), (6, 10)]  # the last takes the rounding
    assert split_ranges([OffsetRange(tp, 5, 5)], 10) == []


def test_record_cap_is_proportional_and_exact():
    ranges = {TopicPartition("t", 0): (0, 900), TopicPartition("t", 1): (50, 150), TopicPartition("t", 2): (7, 7)}
    ends = cap_by_record_limit(ranges, 101)
    read = {tp: ends[tp] - ranges[tp][0] for tp in ranges}
    assert sum(read.values()) == 101
    assert read[TopicPartition("t", 0)] in (90, 91) and read[TopicPartition("t", 2)] == 0
    assert cap_by_record_limit(ranges, 10_000) == {tp: end for tp, (_, end) in ranges.items()}


def test_end_offsets_latest_time_cap_and_record_cap():
    parts = tps("t", 3)
    starts = {parts[0]: 10, parts[1]: 0, parts[2]: 5}
    latest = {parts[0]: 110, parts[1]: 50, parts[2]: 5}
    plan = plan_run(request(starts, latest))
    assert plan.end_offsets() == latest and plan.records == 150
    # offsets at the data interval end cap the range; None means no record that late yet (keep latest)
    at_time = {parts[0]: 60, parts[1]: None, parts[2]: 5}
    plan = plan_run(request(starts, latest, offsets_at_end_time=at_time, end_time=NOW))
    assert plan.end_offsets() == {parts[0]: 60, parts[1]: 50, parts[2]: 5}
    assert plan.caps["endTime"] == 1
    # an end time earlier than the start reads nothing, never goes backwards
    plan = plan_run(request(starts, latest, offsets_at_end_time={parts[0]: 3, parts[1]: 0, parts[2]: 0}, end_time=NOW))
    assert plan.end_offsets() == {parts[0]: 10, parts[1]: 0, parts[2]: 5} and plan.is_empty
    plan = plan_run(request(starts, latest, max_records_per_run=30))
    assert plan.records == 30 and plan.caps["maxRecordsPerRun"] == 2


def test_a_future_stamped_record_never_holds_back_a_time_capped_run():
    """Kafka's offsets_for_times(b) is the first record stamped >= b: one record stamped in the future hides
    every record after it. A cap found at a record stamped past `future_after` (now plus a tolerance for clock
    skew) is no cap; an end time past `future_after` caps nothing either."""
    from datetime import timedelta

    parts = tps("t", 3)
    starts, latest = {tp: 0 for tp in parts}, {tp: 21 for tp in parts}
    b = NOW - timedelta(minutes=10)  # a run for [a, b) planned 10 minutes after b (late, or a catch-up run)
    at_b = {parts[0]: 10, parts[1]: 10, parts[2]: None}
    # p0: its record 10 is also the first stamped after now + 1 min: stamped in the future, so no cap.
    # p1: its record 10 is stamped before now + 1 min (the first one after is 15): a real cap.
    at_future = {parts[0]: 10, parts[1]: 15, parts[2]: None}
    plan = plan_run(request(starts, latest, end_time=b, offsets_at_end_time=at_b,
                            future_after=NOW + timedelta(minutes=1), offsets_at_future=at_future))
    assert plan.end_offsets() == {parts[0]: 21, parts[1]: 10, parts[2]: 21} and plan.caps["endTime"] == 1
    # an interval that ends in the future: whatever offsets_for_times(b) found is stamped in the future
    plan = plan_run(request(starts, latest, end_time=NOW + timedelta(minutes=5), offsets_at_end_time=at_b,
                            future_after=NOW + timedelta(minutes=1), offsets_at_future={tp: 3 for tp in parts}))
    assert plan.end_offsets() == latest and plan.caps["endTime"] == 0


def test_plan_is_pure_and_round_trips_through_json():
    parts = tps("t", 6)
    req = request({tp: tp.partition * 10 for tp in parts}, {tp: 1000 for tp in parts}, task_count=4,
                  max_records_per_split=100, min_splits_per_group=2)
    a, b = plan_run(req), plan_run(req)
    assert a == b and a.dumps() == b.dumps()
    again = Plan.from_json(a.to_json())
    assert again == a
    for g in a.groups:
        covered = sum(s.size for s in g.splits)
        assert covered == g.records
        assert all(s.size <= 100 for s in g.splits)


def test_empty_partitions_stay_in_plan_without_splits():
    parts = tps("t", 2)
    plan = plan_run(request({tp: 5 for tp in parts}, {parts[0]: 5, parts[1]: 9}))
    g0, g1 = plan.groups
    assert g0.is_empty and g0.partitions[0].start == g0.partitions[0].end == 5
    assert not g1.is_empty and g1.records == 4
