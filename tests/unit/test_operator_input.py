"""Druid's resetOffsets body typed at the door (`supervisor.actions`): what no request may hold is refused, before
anything is asked of the broker or the store, with a message naming it. (Over REST: tests/system/test_permissions.)"""

from __future__ import annotations

import json

import pytest

from ingest_core.core.errors import IngestError
from ingest_core.core.offsets import OffsetRequest, request_problem
from ingest_core.supervisor.actions import druid_json_object, druid_offset_requests


def body(stream, offsets: dict) -> bytes:
    return json.dumps({"type": "kafka", "partitions": {"type": "end", "stream": stream,
                                                       "partitionOffsetMap": offsets}}).encode()


def test_a_key_given_twice_quotes_at_most_a_short_prefix_of_its_values():
    raw = b'{"partitions": 1, "partitions": [' + b", ".join([b'"' + b"x" * 1000 + b'"'] * 1000) + b"]}"
    with pytest.raises(IngestError, match="'partitions' is given twice") as refused:
        druid_json_object(raw)
    assert len(str(refused.value)) < 400


def test_a_partition_given_two_offsets_is_refused_not_one_of_them_kept():
    raw = b'{"type": "kafka", "partitions": {"type": "end", "stream": "t", "partitionOffsetMap": {"0": 1, "0": 2}}}'
    with pytest.raises(IngestError, match=r"'0' is given twice in the body \(1, 2\): give it once; nothing was "
                                          "changed"):
        druid_json_object(raw)


@pytest.mark.parametrize("raw", [b"", b"[1]", b"\xff", b'"x"', b"null"])
def test_a_body_that_is_no_json_object_is_refused(raw):
    with pytest.raises(IngestError, match="the body is not a JSON object: expected"):
        druid_json_object(raw)


@pytest.mark.parametrize("offsets", [{"x": 1}, {"0": "1"}, {"0": True}, {"0": None}, [1],
                                     # partitions as the CLI reads them: ASCII digits only (int() takes these)
                                     {"٣": 1}, {"²": 1}, {" 3": 1}, {"1_0": 1}, {"+1": 1}, {"-1": 1}])
def test_offsets_that_are_neither_numbers_nor_earliest_or_latest_are_refused(offsets):
    with pytest.raises(IngestError, match='OFFSET: a number, "earliest" or "latest"'):
        druid_offset_requests(druid_json_object(body("t", offsets)))


def test_what_the_body_asks_and_what_no_log_can_hold():
    assert druid_offset_requests(druid_json_object(body("t", {"0": 5, "1": "latest"}))) == [
        OffsetRequest("t", 0, 5), OffsetRequest("t", 1, "latest")]
    # parsed as given; `set_offsets` refuses each of these before it asks the broker, even with force
    for stream, offset, says in ((None, 1, "a topic is a non-empty name"), (["x"], 1, "a topic is a non-empty name"),
                                 (123, 1, "a topic is a non-empty name"), ("t", 10**30, "an offset is at most")):
        (request,) = druid_offset_requests(druid_json_object(body(stream, {"0": offset})))
        assert says in request_problem(request)


def test_reset_to_latest_moves_into_the_log_and_counts_what_nothing_reads():
    """`reset --to-latest`'s move, pure (`jump_to_latest`): an offset below the log start and one beyond the log
    end are moved into the log; what the main line jumps over is lost unless a backfill reads it."""
    from helpers import make_spec

    from ingest_core.core.loss import LostRange
    from ingest_core.core.offsets import KnownOffset, TopicPartition
    from ingest_core.supervisor.actions import BrokerView, jump_to_latest

    t0, t1 = TopicPartition("t", 0), TopicPartition("t", 1)
    view = BrokerView({"t": 2}, earliest={t0: 8, t1: 0}, latest={t0: 20, t1: 40}, topic_ids={"t": "id1"})
    jump = jump_to_latest(make_spec("127.0.0.1:9", "ds", topic="t"),
                          {t0: KnownOffset(5, "r1", "id1"), t1: KnownOffset(50, "r1", "id1")}, view)
    assert jump.target == {t0: 20, t1: 40} and jump.skipped == {t0: (8, 20)}
    assert [(m.tp, m.from_offset) for m in jump.below] == [(t0, 5)] and [(m.tp, m.from_offset) for m in jump.beyond] \
        == [(t1, 50)]
    assert jump.lost({}, backfilled=False) == (LostRange(t0, 5, 8), LostRange(t0, 8, 20))
    assert jump.lost({}, backfilled=True) == (LostRange(t0, 5, 8),)
    assert jump.to_json()["removedRecords"] == 3 and jump.to_json()["skippedRecords"] == 12
    warnings = jump.warnings(backfill=True, backfilled=True)
    assert warnings[0] == ("partition t-0: records 5..7 (3 records) were removed (retention or delete_records) before "
                           "they were ingested: they are lost; the backfill starts at 8")
    assert "committed offset 50 is beyond the log end offset 40" in warnings[1]
