"""Group reports: one JSON form from the Spark job to the store (reports written before the typed reports still
read, unchanged), and the one rule that picks a group's published replica. Pure: no Spark, broker or database."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from ingest_core.core.offsets import OffsetRange, TopicPartition
from ingest_core.handover.report import (
    AttemptReport,
    GroupReport,
    GroupState,
    ReportFormatError,
    RowStats,
    StagedSegment,
    published_attempt,
    successful_attempts,
)

# report.json files as the Spark job wrote them before reports were typed (integration tests' output)
REPORTS = Path(__file__).parents[1] / "data" / "reports"


@pytest.mark.parametrize("name", ["parse_exceptions", "segments_and_splits", "failed"])
def test_a_report_written_by_the_job_reads_and_writes_back_unchanged(name):
    text = (REPORTS / f"{name}.json").read_text()
    report = GroupReport.loads(text, name)
    assert report.to_json() == json.loads(text)
    assert GroupReport.from_json(report.to_json(), "again") == report


def test_a_report_keeps_when_its_job_and_splits_did_what():
    # the job's marks and each split's start: where a job's seconds went (benchmarks/freshness.py reads them)
    report = GroupReport.loads((REPORTS / "segments_and_splits.json").read_text(), "segments_and_splits.json")
    report.marks = {"started": 1700000000.0, "writeStarted": 1700000000.5, "writeEnded": 1700000003.25,
                    "ended": 1700000003.5}
    report.splits[0].started_at = 1700000001.125
    again = GroupReport.from_json(json.loads(json.dumps(report.to_json())), "again")
    assert again == report and again.splits[0].started_at == 1700000001.125
    assert again.marks["writeEnded"] - again.marks["writeStarted"] == 2.75
    assert again.splits[1].started_at is None and "startedAt" not in again.splits[1].to_json()


def test_a_report_reads_as_typed_values():
    report = GroupReport.loads((REPORTS / "parse_exceptions.json").read_text(), "parse_exceptions.json")
    assert report.succeeded and report.state is GroupState.SUCCESS
    assert (report.datasource, report.run_id, report.group_id, report.replica) == ("ds", "r1", 0, 0)
    assert report.stats == RowStats(processed=20, processed_bytes=1145, processed_with_error=1, unparseable=2)
    assert report.records == 23 and [e.offset for e in report.saved_exceptions] == [11, 12]
    (segment,) = report.segments
    assert segment.interval_start == datetime(2026, 3, 2, 10, tzinfo=timezone.utc)
    assert segment.interval_end == datetime(2026, 3, 2, 11, tzinfo=timezone.utc)
    assert (segment.rows, segment.bytes, segment.shard) == (21, 1481, 0)
    assert segment.offsets == (OffsetRange(TopicPartition("t-61093f2231", 0), 0, 23),)
    failed = GroupReport.loads((REPORTS / "failed.json").read_text(), "failed.json")
    assert not failed.succeeded and "cannot reach Kafka" in failed.error


def test_a_segment_with_several_topics_and_partitions_round_trips():
    ranges = (OffsetRange(TopicPartition("a", 2), 5, 9), OffsetRange(TopicPartition("a", 10), 0, 3),
              OffsetRange(TopicPartition("b", 0), 7, 7))
    segment = StagedSegment(datetime(2026, 1, 1, tzinfo=timezone.utc), datetime(2026, 1, 2, tzinfo=timezone.utc), 1,
                            "file:///d/s.parquet", 3, 100, None, None, ("__time",), (), (), tuple(sorted(ranges)))
    data = segment.to_json()
    assert data["offsets"] == {"start": {"a": {"2": 5, "10": 0}, "b": {"0": 7}},
                               "end": {"a": {"2": 9, "10": 3}, "b": {"0": 7}}}
    assert data["minTime"] is None and data["maxTime"] is None
    assert StagedSegment.from_json(json.loads(json.dumps(data, sort_keys=True))) == segment


@pytest.mark.parametrize("data, problem", [
    ({"groupId": 0, "state": "SUCCESS"}, "it has no 'datasource'"),
    ([1, 2], "list indices must be integers"),
    ({"datasource": "ds", "runId": "r1", "groupId": "zero", "state": "SUCCESS", "rowStats": {}},
     "invalid literal for int"),
    ({"datasource": "ds", "runId": "r1", "groupId": 0, "state": "DONE", "rowStats": {}}, "'DONE' is not a valid"),
])
def test_a_malformed_report_names_where_it_came_from_and_what_is_wrong(data, problem):
    with pytest.raises(ReportFormatError) as caught:
        GroupReport.from_json(data, "file:///deep/ds/r1/report.json")
    assert str(caught.value).startswith("file:///deep/ds/r1/report.json is not a task group report")
    assert problem in str(caught.value)
    assert "re-running the task group's Spark job" in str(caught.value)


def test_a_report_that_is_not_json_names_its_file():
    with pytest.raises(ReportFormatError, match=r"^f\.json is not a task group report .*\(not JSON: "):
        GroupReport.loads('{"groupId": 0, "sta', "f.json")


def attempt(replica: int, attempt_id: str, state: GroupState = GroupState.SUCCESS) -> AttemptReport:
    return AttemptReport(GroupReport("ds", "r1", 0, replica, state, RowStats(), [], []), attempt_id)


def test_publish_picks_the_earliest_successful_attempt_of_the_lowest_successful_replica():
    attempts = [attempt(1, "b"), attempt(0, "c"), attempt(0, "a", GroupState.FAILED), attempt(0, "d"),
                attempt(2, "a", GroupState.FAILED)]
    assert [(a.replica, a.attempt) for a in successful_attempts(attempts)] == [(0, "c"), (1, "b")]
    assert published_attempt(attempts) == attempt(0, "c")
    assert published_attempt(reversed(attempts)) == attempt(0, "c")  # whatever order they were listed in
    assert published_attempt([attempt(1, "a", GroupState.FAILED), attempt(2, "z")]) == attempt(2, "z")


def test_no_successful_attempt_publishes_nothing():
    assert successful_attempts([attempt(0, "a", GroupState.FAILED)]) == []
    assert published_attempt([attempt(0, "a", GroupState.FAILED)]) is None
    assert published_attempt([]) is None


def test_stored_reports_without_attempts_pick_the_lowest_replica():
    assert published_attempt([AttemptReport(attempt(r, "").report) for r in (2, 0, 1)]).replica == 0
