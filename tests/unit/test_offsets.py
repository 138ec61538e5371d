"""Start-offset resolution is pure; every path of Druid's order is covered here and, against the real
broker and stores, in test_supervisor.py."""

import pytest

from ingest_core.core.errors import OffsetOutOfRangeError
from ingest_core.core.offsets import (
    KnownOffset,
    OffsetReset,
    StartSource,
    TopicPartition,
    clamp_to_log,
    offsets_from_json,
    offsets_to_json,
    pending_records,
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
    assert "ingest set-offsets ds t:0=10" in msg and "resetOffsetAutomatically" in msg
    assert info.value.earliest == 10


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
