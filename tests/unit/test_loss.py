"""Records lost (core/loss.py) are pure arithmetic on offsets; against the real broker and stores: test_lost_records.py."""

from datetime import datetime, timezone

from ingest_core.core.loss import (
    LossCause,
    LostRange,
    RecordsLost,
    lost_per_partition,
    moved_past,
    read_by_partition,
    subtract,
)
from ingest_core.core.offsets import PublishedRange, TopicPartition
from ingest_core.core.spec import HealthConfig
from ingest_core.service.status import build_status
from ingest_core.store.records import AuditRecord

A, B = TopicPartition("t", 0), TopicPartition("t", 1)


def test_subtract_leaves_what_no_publish_read():
    assert subtract(A, 10, 50, []) == [LostRange(A, 10, 50)]
    assert subtract(A, 10, 50, [(20, 30), (0, 12), (45, 60)]) == [LostRange(A, 12, 20), LostRange(A, 30, 45)]
    assert subtract(A, 10, 50, [(5, 60)]) == [] and subtract(A, 10, 10, []) == []
    assert subtract(A, 10, 50, [(60, 70), (0, 5)]) == [LostRange(A, 10, 50)]


def test_moved_past_counts_only_forward_moves_from_a_known_position_less_what_was_published():
    claims = [PublishedRange(A, 30, 40, "backfill-1", True), PublishedRange(B, 0, 5, "r1", False)]
    lost = moved_past({A: 10, B: 5}, {A: 50, B: 2}, read_by_partition(claims))
    assert lost == [LostRange(A, 10, 30), LostRange(A, 40, 50)]  # B went back: re-read, not lost
    assert sum(r.records for r in lost) == 30
    assert moved_past({}, {A: 50}) == []  # nothing committed: no position to lose from
    # only records that existed: nothing at or past the log end, nothing of a partition the broker does not have
    assert moved_past({A: 10}, {A: 10**12}, log_end={A: 20}) == [LostRange(A, 10, 20)]
    assert moved_past({A: 30, B: 0}, {A: 10**12, B: 9}, log_end={A: 20}) == []


def test_an_event_round_trips_through_the_audit_json_and_sums_per_partition():
    event = RecordsLost(LossCause.AUTO_RESET, (LostRange(A, 5, 8), LostRange(B, 0, 2)), "r2")
    again = RecordsLost.from_json(event.to_json())
    assert again == event and again.records == 5 and event.to_json()["records"] == 5
    assert "5 records lost by resetOffsetAutomatically (run r2): t-0 offsets [5, 8) (3 records)" in event.describe()
    other = RecordsLost(LossCause.SKIP, (LostRange(A, 8, 10),))
    assert lost_per_partition([event, other]) == {A: 5, B: 2}


def test_status_counts_every_loss_and_shows_each_as_a_recent_error():
    at = datetime(2026, 11, 25, tzinfo=timezone.utc)
    events = [RecordsLost(LossCause.SET_OFFSETS, (LostRange(A, 0, 7),)),
              RecordsLost(LossCause.RESET, (LostRange(B, 3, 4),), "r9")]
    audit = [AuditRecord("ds", "records_lost", "bob", e.to_json(), at) for e in events]
    report = build_status(datasource="ds", stream="t", row=None, committed={A: 7, B: 4}, latest={A: 7, B: 4},
                          offsets_last_updated=None, runs=[], row_stats={}, loop_errors=[],
                          thresholds=HealthConfig(), lost=audit)
    payload = report.to_json()["payload"]
    assert payload["lostRecords"] == 8 and payload["lostRecordsByPartition"] == {"0": 7, "1": 1}
    errors = [e for e in payload["recentErrors"] if e["exceptionClass"] == "RecordsLost"]
    assert [(e["cause"], e["lostRecords"], e.get("runId")) for e in errors] == [("set-offsets", 7, None),
                                                                             ("reset", 1, "r9")]
    assert errors[0]["lostRanges"] == [{"topic": "t", "partition": 0, "start": 0, "end": 7, "records": 7}]
    assert report.healthy  # loud, not unhealthy: the datasource runs on
