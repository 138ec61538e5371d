"""The one transaction that moves a datasource's main line (`store.main_line`), on real SQLite and PostgreSQL,
and its callers: the publish, set-offsets, reset and reset-to-latest."""

from datetime import datetime, timezone

import pytest
from helpers import broker_connections, make_spec

from ingest_core.core.errors import MetadataStoreError, TopicNotFoundError
from ingest_core.core.offsets import (
    KnownOffset,
    OffsetRange,
    PublishedRange,
    StartOffset,
    StartSource,
    TopicPartition,
)
from ingest_core.core.planner import PlanRequest, plan_run
from ingest_core.supervisor.actions import DatasourceActions
from ingest_core.store.main_line import MainLine
from ingest_core.store.records import RunStatus
from ingest_core.store.publisher import (
    GroupResult,
    Publisher,
    SegmentDescriptor,
    claim_ranges,
)

T0 = datetime(2026, 11, 22, 10, tzinfo=timezone.utc)
P0, P1 = TopicPartition("edits", 0), TopicPartition("edits", 1)


def insert_run(store, run_id, starts: dict, latest: dict):
    return store.runs.insert(plan_run(PlanRequest(datasource="wiki", run_id=run_id, created_at=T0, task_count=1,
                                                 starts=starts, latest=latest)))[0].plan


def a_main_line_with_claims_and_runs_in_flight(store):
    """Committed p0=50, p1=20 (by r1); claimed: the main line's [0, 50) of p0 and a backfill's [60, 80) of p0;
    in flight: the main line's r2 (p0 from 50) and the backfill bf2 (p1 [0, 10))."""
    with MainLine.locked(store, "wiki", planning_lock=False) as line:
        line.move({P0: 50, P1: 20}, by="r1")
        claim_ranges(line.conn, "wiki", [OffsetRange(P0, 0, 50)], "r1", backfill=False, claims=[])
        claim_ranges(line.conn, "wiki", [OffsetRange(P0, 60, 80)], "bf", backfill=True, claims=[])
    insert_run(store, "r2", {P0: StartOffset(50, StartSource.COMMITTED, "r1", 50)}, {P0: 70})
    insert_run(store, "bf2", {P1: StartOffset(0, StartSource.BACKFILL)}, {P1: 10})


def commit_version(store) -> int:
    return int(store.datasources.get("wiki")["commit_version"])


def test_a_publish_s_move_writes_its_offsets_and_bumps_the_version_only(store):
    a_main_line_with_claims_and_runs_in_flight(store)
    with MainLine.locked(store, "wiki", planning_lock=False) as line:
        moved = line.move({P0: 70}, by="r2")
    assert (moved.commit_version, moved.superseded, moved.released) == (2, [], [])
    assert commit_version(store) == 2
    assert store.offsets.committed("wiki") == {P0: KnownOffset(70, "r2"), P1: KnownOffset(20, "r1")}
    # its successors continue from it, and what others published stays theirs
    assert store.runs.get("wiki", "r2").status is RunStatus.PLANNED
    assert len(store.offsets.claims("wiki")) == 2


def test_an_operator_s_move_supersedes_the_main_line_in_flight_and_releases_the_claims_above(store):
    a_main_line_with_claims_and_runs_in_flight(store)
    with MainLine.locked(store, "wiki", planning_lock=True) as line:
        moved = line.move({P0: 30}, by="set-offsets by op", reason="an operator set them")
    assert moved.commit_version == 2 and moved.superseded == ["r2"]
    assert moved.released == [PublishedRange(P0, 30, 50, "r1", False), PublishedRange(P0, 60, 80, "bf", True)]
    assert store.offsets.claims("wiki") == [PublishedRange(P0, 0, 30, "r1", False)]
    assert store.offsets.committed("wiki") == {P0: KnownOffset(30, "set-offsets by op"), P1: KnownOffset(20, "r1")}
    r2 = store.runs.get("wiki", "r2")
    assert (r2.status, r2.superseded_by, r2.error) == (RunStatus.SUPERSEDED, "set-offsets by op", "an operator set them")
    assert store.runs.get("wiki", "bf2").status is RunStatus.PLANNED  # a backfill lies behind the main line


def test_clearing_the_main_line_releases_every_claim(store):
    a_main_line_with_claims_and_runs_in_flight(store)
    with MainLine.locked(store, "wiki", planning_lock=True) as line:
        moved = line.move(None, by="reset by op", reason="reset")
    assert store.offsets.committed("wiki") == {} and store.offsets.claims("wiki") == []
    assert moved.released == [PublishedRange(P0, 0, 50, "r1", False), PublishedRange(P0, 60, 80, "bf", True)]
    assert moved.superseded == ["r2"] and commit_version(store) == 2


def test_a_move_from_a_stale_commit_version_writes_nothing(store):
    a_main_line_with_claims_and_runs_in_flight(store)
    with pytest.raises(MetadataStoreError, match="commit version 0 is gone"):
        with store.session() as conn:
            MainLine(store, conn, "wiki", commit_version=0).move({P0: 99}, by="late", reason="late")
    assert commit_version(store) == 1 and store.offsets.committed("wiki")[P0] == KnownOffset(50, "r1")
    assert store.runs.get("wiki", "r2").status is RunStatus.PLANNED and len(store.offsets.claims("wiki")) == 2


@pytest.mark.kafka
def test_publish_set_offsets_and_reset_each_move_the_main_line_once(broker, store):
    topic = broker.create_topic(1)
    broker.produce(topic, [b'{"ts": 1}'] * 30, partition=0)
    spec, p0 = make_spec(broker.bootstrap, topic=topic), TopicPartition(topic, 0)  # from latest: a reset re-reads none
    actions = DatasourceActions(store, None, "op")
    r1 = insert_run(store, "r1", {p0: StartOffset(0, StartSource.EARLIEST)}, {p0: 10})
    Publisher(store).publish("wiki", "r1", [GroupResult(0, [SegmentDescriptor(T0, T0, "file:///s", 10, 1)])])

    def line() -> dict:
        return {tp: (k.offset, k.run_id) for tp, k in store.offsets.committed("wiki").items()}

    assert commit_version(store) == 1 and line() == {p0: (10, r1.run_id)}
    actions.set_offsets("wiki", {p0: 5}, spec, confirm_duplicates=5)
    assert commit_version(store) == 2 and line() == {p0: (5, "set-offsets by op")}
    actions.reset("wiki", spec, confirm_skip=25)  # from latest: skips 5..29
    assert commit_version(store) == 3 and store.offsets.committed("wiki") == {}
    # a backfill publishes beside the main line: it does not move it
    insert_run(store, "bf", {p0: StartOffset(20, StartSource.BACKFILL)}, {p0: 30})
    Publisher(store).publish("wiki", "bf", [GroupResult(0, [SegmentDescriptor(T0, T0, "file:///b", 10, 1)])])
    assert commit_version(store) == 3 and store.offsets.committed("wiki") == {}


@pytest.mark.kafka
def test_reset_to_latest_moves_the_main_line_once_and_closes_the_reader_it_opened(broker, store):
    topic = broker.create_topic(2)
    broker.produce(topic, [b'{"ts": 1}'] * 7, partition=0)
    broker.produce(topic, [b'{"ts": 1}'] * 3, partition=1)
    store.datasources.register_spec("wiki", {}, "fingerprint")  # the datasource exists
    actions = DatasourceActions(store, None, "op")
    before = broker_connections(broker.bootstrap)
    with pytest.raises(TopicNotFoundError) as failed:
        actions.reset_to_latest("wiki", make_spec(broker.bootstrap, topic=f"{topic}-missing"), backfill=False)
    # closed, though the error's traceback still holds the reader
    assert failed.value and not broker_connections(broker.bootstrap) - before
    assert commit_version(store) == 0
    result = actions.reset_to_latest("wiki", make_spec(broker.bootstrap, topic=topic), backfill=False)
    assert not broker_connections(broker.bootstrap) - before
    assert result.details["to"] == {topic: {"0": 7, "1": 3}} and commit_version(store) == 1
    assert {k.run_id for k in store.offsets.committed("wiki").values()} == {"reset-to-latest by op"}
