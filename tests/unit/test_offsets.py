"""Start-offset resolution is pure; every path of Druid's order is covered here and, against the real
broker and stores, in test_supervisor.py."""

import pytest

from ingest_core.core.errors import (
    DuplicatesNotConfirmedError,
    OffsetOutOfRangeError,
    SkipNotConfirmedError,
    TopicRecreatedError,
)
from ingest_core.core.offsets import (
    KnownOffset,
    OffsetRange,
    OffsetClamp,
    OffsetRequest,
    OffsetReset,
    PublishedRange,
    StartSource,
    TopicPartition,
    check_duplicates_confirmed,
    check_skip_confirmed,
    clamp_to_log,
    move_effect,
    offsets_from_json,
    offsets_to_json,
    pending_records,
    resolve_offset_requests,
    resolve_start_offsets,
)

A, B, C = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("u", 0)
EARLIEST = {A: 10, B: 0, C: 0}
LATEST = {A: 100, B: 50, C: 7}


def resolve(inflight=None, committed=None, use_earliest=False, reset=False):
    return resolve_start_offsets([A, B, C], datasource="ds", inflight=inflight or {}, committed=committed or {},
                                 earliest=EARLIEST, latest=LATEST, use_earliest=use_earliest, reset_automatically=reset)


def test_order_inflight_then_committed_then_earliest_or_latest():
    res = resolve(inflight={A: KnownOffset(60, "run-2")}, committed={A: KnownOffset(40, "run-1"), B: KnownOffset(20, "run-1")})
    assert res.starts[A].offset == 60 and res.starts[A].source is StartSource.INFLIGHT
    assert res.starts[A].after_run == "run-2" and res.starts[A].expected_commit == 60
    assert res.starts[B].offset == 20 and res.starts[B].source is StartSource.COMMITTED
    # u-0 appeared after the datasource started: earliest, whatever useEarliestOffset says
    assert res.starts[C].offset == 0 and res.starts[C].source is StartSource.NEW_PARTITION
    assert res.starts[C].expected_commit is None
    res = resolve()
    assert {tp: s.offset for tp, s in res.starts.items()} == LATEST
    assert all(s.source is StartSource.LATEST for s in res.starts.values())
    res = resolve(use_earliest=True)
    assert {tp: s.offset for tp, s in res.starts.items()} == EARLIEST
    assert all(s.source is StartSource.EARLIEST for s in res.starts.values())


def test_truncated_start_without_reset_is_an_actionable_error():
    with pytest.raises(OffsetOutOfRangeError) as info:
        resolve(committed={A: KnownOffset(4, "run-1")})
    msg = str(info.value)
    assert "t-0" in msg and "start offset 4" in msg and "log start offset 10" in msg
    # the advice moves only this partition (a reset would re-read every other one)
    assert "`ingest set-offsets ds t:0=earliest`" in msg and "resetOffsetAutomatically" in msg
    assert "ingest reset" not in msg
    assert info.value.earliest == 10
    # two truncated partitions: one error, one command for exactly those two
    with pytest.raises(OffsetOutOfRangeError) as info:
        resolve_start_offsets([A, B, C], datasource="ds", inflight={}, committed={
            A: KnownOffset(4, "r1"), B: KnownOffset(20, "r1"), C: KnownOffset(1, "r1")},
            earliest={A: 10, B: 0, C: 3}, latest=LATEST, use_earliest=False, reset_automatically=False)
    msg = str(info.value)
    assert "partition t-0: start offset 4" in msg and "partition u-0: start offset 1" in msg
    assert "`ingest set-offsets ds t:0=earliest u:0=earliest`" in msg and "these 2 partitions" in msg


@pytest.mark.parametrize("use_earliest,target,source", [(True, 10, StartSource.RESET_EARLIEST),
                                                        (False, 100, StartSource.RESET_LATEST)])
def test_truncated_start_with_reset(use_earliest, target, source):
    res = resolve(committed={A: KnownOffset(4, "run-1")}, use_earliest=use_earliest, reset=True)
    assert res.starts[A].offset == target and res.starts[A].source is source
    # the publish still compare-and-swaps on the committed offset it was reset from
    assert res.starts[A].expected_commit == 4
    assert len(res.resets) == 1 and res.resets[0].from_offset == 4 and res.resets[0].to_offset == target


@pytest.mark.parametrize("reset", [False, True])
def test_committed_beyond_log_end_is_an_error_even_with_reset(reset):
    with pytest.raises(OffsetOutOfRangeError, match="beyond the log end offset 50.*re-created"):
        resolve(committed={B: KnownOffset(500, "run-1")}, reset=reset)


def test_clamp_to_log_moves_committed_offsets_into_the_log_and_says_which():
    gone = TopicPartition("gone", 0)  # committed, but no longer in the log: left alone
    committed = {A: KnownOffset(4, "r1"), B: KnownOffset(500, "r1"), C: KnownOffset(7, "r1"), gone: KnownOffset(3, "r1")}
    clamped, moved = clamp_to_log(committed, EARLIEST, LATEST)
    assert clamped == {A: KnownOffset(10, "r1"), B: KnownOffset(50, "r1"), C: KnownOffset(7, "r1"),
                       gone: KnownOffset(3, "r1")}
    assert moved == [OffsetReset(A, 4, 10, 10, 100), OffsetReset(B, 500, 50, 0, 50)]
    # what `reset --to-latest` needs: resolving starts from the clamped offsets never raises
    res = resolve(committed=clamped)
    assert (res.starts[A].offset, res.starts[B].offset, res.starts[C].offset) == (10, 50, 7)


def test_offsets_json_is_sparks_format():
    offs = {A: 5, B: 6, C: 7}
    assert offsets_to_json(offs) == {"t": {"0": 5, "1": 6}, "u": {"0": 7}}
    assert offsets_from_json(offsets_to_json(offs)) == offs


def test_pending_records_counts_past_each_start_and_new_partitions_from_earliest():
    assert pending_records({A: 60, B: 50, C: 0}, EARLIEST, LATEST) == 40 + 0 + 7
    assert pending_records({A: 60}, EARLIEST, LATEST) == 40 + 50 + 7  # b and u-0 appeared since
    assert pending_records({A: 120}, EARLIEST, LATEST) == 50 + 7  # never negative


# ------------------------------------------------------------------------------------------ topic ids


def test_a_stored_offset_of_another_topic_id_stops_the_run_even_inside_the_new_log():
    ids = {"t": "NEW", "u": "U1"}
    # committed 40 on t-0 lies inside the new log [10, 100): offsets alone would read on and skip 10..39
    with pytest.raises(TopicRecreatedError) as info:
        resolve_start_offsets([A, B, C], datasource="ds", inflight={}, committed={
            A: KnownOffset(40, "r1", "OLD"), B: KnownOffset(20, "r1", "OLD"), C: KnownOffset(3, "r1", "U1")},
            earliest=EARLIEST, latest=LATEST, use_earliest=False, reset_automatically=True, topic_ids=ids)
    msg = str(info.value)
    assert info.value.topics == {"t": ("OLD", "NEW")}
    assert "topic 't' was deleted and re-created" in msg and "topic id OLD" in msg and "topic id NEW" in msg
    assert "(140 records in 2 partitions)" in msg and "partition: offset 0: 40, 1: 20" in msg
    assert "`ingest set-offsets ds t=earliest`" in msg and "`ingest set-offsets ds t=latest`" in msg
    # an in-flight run planned from the old topic too
    with pytest.raises(TopicRecreatedError, match="topic 't'"):
        resolve_start_offsets([A], datasource="ds", inflight={A: KnownOffset(50, "r2", "OLD")}, committed={},
                              earliest=EARLIEST, latest=LATEST, use_earliest=False, reset_automatically=False,
                              topic_ids=ids)
    # a stored offset without an id (stored before ids were) is not judged: the next publish records it
    res = resolve_start_offsets([A], datasource="ds", inflight={}, committed={A: KnownOffset(40, "r1")},
                                earliest=EARLIEST, latest=LATEST, use_earliest=False, reset_automatically=False,
                                topic_ids=ids)
    assert res.starts[A].offset == 40


# ------------------------------------------------------------------------------------------ operator moves


def requests_resolve(*reqs, in_spec=lambda t: t in ("t", "u")):
    return resolve_offset_requests("ds", list(reqs), broker_partitions={"t": 2, "u": 1, "other": 1},
                                   in_spec=in_spec, earliest={**EARLIEST, TopicPartition("other", 0): 0},
                                   latest={**LATEST, TopicPartition("other", 0): 3})


def test_offset_requests_resolve_symbols_and_name_every_problem():
    new, problems = requests_resolve(OffsetRequest("t", None, "earliest"), OffsetRequest("u", 0, "latest"))
    assert new == {A: 10, B: 0, C: 7} and problems == []
    new, problems = requests_resolve(OffsetRequest("t", 0, 101), OffsetRequest("t", 1, 50))
    assert new == {A: 101, B: 50} and len(problems) == 1 and problems[0].forcible
    assert "t:0=101: partition t-0 ends at offset 100" in problems[0].message
    _, problems = requests_resolve(OffsetRequest("t", 0, 9))
    assert "records 9..9 were removed" in problems[0].message
    _, problems = requests_resolve(OffsetRequest("t", 0, -1))
    assert not problems[0].forcible and "never negative" in problems[0].message
    _, problems = requests_resolve(OffsetRequest("t", 5, 0))
    assert "has partitions 0..1, not 5" in problems[0].message
    _, problems = requests_resolve(OffsetRequest("nope", 0, 0))
    assert {"topic 'nope' is not one datasource 'ds' reads" in p.message for p in problems} == {True, False}
    assert any("does not exist on the broker" in p.message for p in problems)
    _, problems = requests_resolve(OffsetRequest("other", 0, 0))
    assert len(problems) == 1 and "topic 'other' is not one datasource 'ds' reads" in problems[0].message


def test_forced_offsets_outside_the_log_are_clamped_to_its_nearer_end_saying_so():
    """As Kafka's kafka-consumer-groups --reset-offsets: past the end to the end, below the start to the start."""
    new, problems = resolve_offset_requests(
        "ds", [OffsetRequest("t", 0, 10**12), OffsetRequest("t", 1, 7), OffsetRequest("u", 0, 3)],
        broker_partitions={"t": 2, "u": 1}, in_spec=lambda t: True, earliest={**EARLIEST, B: 20}, latest=LATEST,
        clamp=True)
    assert new == {A: 100, B: 20, C: 3}
    assert [p.clamp for p in problems] == [OffsetClamp(A, 10**12, 100), OffsetClamp(B, 7, 20)]
    assert problems[0].message.endswith(f"offset {10**12} lies beyond it: set to the log end 100 instead")
    assert problems[1].message.endswith("records 7..19 were removed: set to the log start 20 instead")
    assert all(p.forcible for p in problems)


def test_a_topic_name_kafka_cannot_hold_is_refused_and_never_echoed_whole():
    for topic in ("a b", "t:0", "é", "x" * 250, "a/b", "x" * 5000):
        _, problems = requests_resolve(OffsetRequest(topic, 0, 0))
        assert not problems[0].forcible and "is no Kafka topic name" in problems[0].message, topic
        assert len(problems[0].message) < 450
    assert str(OffsetRequest("x" * 300, 0, 1)).endswith("\u2026:0=1")


def test_offset_requests_out_of_range_or_given_twice_are_refused_even_with_force():
    """Typed at the door: no `--force` stores an offset past Java's long, a partition past Kafka's int,
    or keeps one of two values given for the same partition."""
    _, problems = requests_resolve(OffsetRequest("t", 0, 10**23))
    assert len(problems) == 1 and not problems[0].forcible
    assert "t:0=100000000000000000000000: an offset is at most 9223372036854775807" in problems[0].message
    _, problems = requests_resolve(OffsetRequest("t", 2**31, 0))
    assert [p.forcible for p in problems] == [False] and "a partition is at most 2147483647" in problems[0].message
    _, problems = requests_resolve(OffsetRequest("t", 0, 20), OffsetRequest("t", 0, 30), OffsetRequest("u", 0, 3))
    assert [p.forcible for p in problems] == [False]
    assert "t:0 is given twice (t:0=20, t:0=30): give one offset per partition" in problems[0].message
    _, problems = requests_resolve(OffsetRequest("t", None, "latest"), OffsetRequest("t", 1, 50))
    assert [p.forcible for p in problems] == [False] and "t:1 is given twice (t=latest, t:1=50)" in problems[0].message
    for topic in ("", None, 123, ["x"]):
        _, problems = requests_resolve(OffsetRequest(topic, 0, 1))
        assert [p.forcible for p in problems] == [False] and "a topic is a non-empty name" in problems[0].message


def test_move_effect_counts_published_records_read_again_and_records_skipped():
    committed = {A: KnownOffset(60, "r1"), B: KnownOffset(20, "r1")}
    backfilled = [PublishedRange(B, 30, 40, "bf", True)]
    effect = move_effect({A: 0, B: 25}, committed, EARLIEST, LATEST, {}, backfilled)
    # t-0 from its log start 10 (0..9 are gone), t-1 skips 20..24 and re-reads the backfill's [30, 40)
    assert effect.reread == (OffsetRange(A, 10, 60), OffsetRange(B, 30, 40)) and effect.duplicates == 60
    assert effect.skipped == (OffsetRange(B, 20, 25),) and effect.skipped_records == 5
    # a re-created topic's new log: nothing of it was published, so nothing is re-read
    effect = move_effect({A: 10}, {A: KnownOffset(60, "r1", "OLD")}, EARLIEST, LATEST, {"t": "NEW"})
    assert effect.duplicates == 0 and effect.skipped == ()
    effect = move_effect({A: 100}, {A: KnownOffset(60, "r1", "OLD")}, EARLIEST, LATEST, {"t": "NEW"})
    assert effect.skipped == (OffsetRange(A, 10, 100),)


def test_duplicates_run_only_when_their_number_is_confirmed():
    effect = move_effect({A: 50}, {A: KnownOffset(60, "r1")}, EARLIEST, LATEST, {})
    for confirmed in (None, 0, 9):
        with pytest.raises(DuplicatesNotConfirmedError, match="--confirm-duplicates 10") as info:
            check_duplicates_confirmed("set-offsets of 'ds'", effect, confirmed)
        assert info.value.duplicates == 10 and "t-0 [50, 60)" in str(info.value)
    check_duplicates_confirmed("set-offsets of 'ds'", effect, 10)
    none = move_effect({A: 70}, {A: KnownOffset(60, "r1")}, EARLIEST, LATEST, {})
    check_duplicates_confirmed("x", none, None)
    with pytest.raises(DuplicatesNotConfirmedError, match="re-reads no published records"):
        check_duplicates_confirmed("x", none, 5)


def test_a_skip_runs_only_when_yes_or_its_number_is_confirmed():
    effect = move_effect({A: 70}, {A: KnownOffset(60, "r1")}, EARLIEST, LATEST, {})
    for confirmed in (None, False, 0, 9):
        with pytest.raises(SkipNotConfirmedError, match="--confirm-skip 10") as info:
            check_skip_confirmed("set-offsets of 'ds'", effect, confirmed)
        assert info.value.skipped == 10 and "t-0 [60, 70)" in str(info.value) and "Nothing was changed" in str(
            info.value)
    check_skip_confirmed("x", effect, 10)
    check_skip_confirmed("x", effect, True)  # --yes
    back = move_effect({A: 50}, {A: KnownOffset(60, "r1")}, EARLIEST, LATEST, {})
    for confirmed in (None, 0, True):
        check_skip_confirmed("x", back, confirmed)
    with pytest.raises(SkipNotConfirmedError, match="skips no records, but 5"):
        check_skip_confirmed("x", back, 5)
