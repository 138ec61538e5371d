"""The exactly-once publish, on real SQLite and PostgreSQL, including publishers in parallel processes."""

import multiprocessing
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest
from helpers import make_spec, plan_next, wait_for_children

from ingest_core.core.states import RunEvent
from ingest_core.core.errors import (
    IngestError,
    PredecessorGoneError,
    PublishPendingError,
    RunExpiredError,
    StaleRunError,
)
from ingest_core.core.offsets import StartSource, TopicPartition
from ingest_core.core.planner import PlanRequest, plan_run
from ingest_core.core.states import GroupStatus, RunStatus
from ingest_core.store.metadata import MetadataStore
from ingest_core.store.publisher import GroupResult, Publisher, SegmentDescriptor

T0 = datetime(2026, 11, 22, 10, tzinfo=timezone.utc)
PARTS = [TopicPartition("edits", p) for p in range(4)]
SPEC = make_spec("127.0.0.1:9", "wiki", topic="edits", taskCount=2)  # the store's plans' settings; Kafka unused


def seg(hour: int, rows: int, tag: str) -> SegmentDescriptor:
    start = T0 + timedelta(hours=hour)
    return SegmentDescriptor(start, start + timedelta(hours=1), f"file:///deep/wiki/{tag}.parquet", rows, rows * 10,
                             {"columns": ["__time", "page"]})


def results_for(plan, *, skip=()):
    return [GroupResult(g.group_id, [seg(0, g.records, f"{plan.run_id}-{g.group_id}")])
            for g in plan.groups if g.group_id not in skip and not g.is_empty]


def committed(store):
    return {tp: k.offset for tp, k in store.offsets.committed("wiki").items()}


def test_publish_commits_offsets_and_segments_in_one_go(store):
    plan = plan_next(store, "r1", {tp: 10 * (tp.partition + 1) for tp in PARTS})
    result = Publisher(store).publish("wiki", "r1", results_for(plan))
    assert not result.already_published and result.published_groups == (0, 1) and result.failed_groups == ()
    assert committed(store) == {tp: 10 * (tp.partition + 1) for tp in PARTS}
    segs = store.segment_records.of("wiki")
    assert len(segs) == 2 and sum(s.num_rows for s in segs) == 100
    # appends into one interval share its version and take the next partition numbers: none overshadows another
    assert {s.version for s in segs} == {"2026-11-22T10:00:00.000Z"} and sorted(s.partition_num for s in segs) == [0, 1]
    assert segs[0].id == "wiki_2026-11-22T10:00:00.000Z_2026-11-22T11:00:00.000Z_2026-11-22T10:00:00.000Z"
    assert segs[0].start_offsets == {"edits": {"0": 0, "2": 0}} and segs[0].end_offsets == {"edits": {"0": 10, "2": 30}}
    assert store.runs.require("wiki", "r1").status is RunStatus.PUBLISHED
    assert set(store.runs.group_statuses("wiki", "r1").values()) == {GroupStatus.PUBLISHED}
    # the next run continues from the committed offsets and appends to the same interval
    plan2 = plan_next(store, "r2", {tp: 10 * (tp.partition + 1) + 5 for tp in PARTS}, created_at=T0 + timedelta(minutes=5))
    assert plan2.start_offsets() == committed(store)
    Publisher(store).publish("wiki", "r2", results_for(plan2))
    assert sorted(s.partition_num for s in store.segment_records.of("wiki")) == [0, 1, 2, 3]
    assert {s.version for s in store.segment_records.of("wiki")} == {"2026-11-22T10:00:00.000Z"}


def test_publishing_again_is_a_no_op_success(store):
    plan = plan_next(store, "r1", {tp: 5 for tp in PARTS})
    first = Publisher(store).publish("wiki", "r1", results_for(plan))
    again = Publisher(store).publish("wiki", "r1", results_for(plan))
    assert again.already_published
    assert again.segment_ids == first.segment_ids and again.rows == first.rows == 20
    assert len(store.segment_records.of("wiki")) == 2 and committed(store) == {tp: 5 for tp in PARTS}


def test_stale_run_is_rejected_names_the_winner_and_writes_nothing(store):
    # Two runs planned from the same start (e.g. a run cleared and re-planned under another id)
    a = plan_next(store, "run-a", {tp: 5 for tp in PARTS})
    store.runs.move("wiki", "run-a", RunEvent.FAIL, error="worker lost")
    b = plan_next(store, "run-b", {tp: 7 for tp in PARTS})
    assert a.start_offsets() == b.start_offsets()
    Publisher(store).publish("wiki", "run-b", results_for(b))
    before = (committed(store), [s.id for s in store.segment_records.of("wiki")])
    with pytest.raises(StaleRunError) as info:
        Publisher(store).publish("wiki", "run-a", results_for(a))
    assert info.value.superseded_by == "run-b"
    assert "run-b committed offset 7" in str(info.value) and "Nothing was written" in str(info.value)
    assert (committed(store), [s.id for s in store.segment_records.of("wiki")]) == before
    run_a = store.runs.require("wiki", "run-a")
    assert run_a.status is RunStatus.SUPERSEDED and run_a.superseded_by == "run-b"
    with pytest.raises(StaleRunError, match="superseded by run run-b"):
        Publisher(store).publish("wiki", "run-a", results_for(a))


def test_a_pipelined_run_whose_predecessor_fails_plans_again_from_the_committed_offsets(store):
    from ingest_core.supervisor.planning import RUN_REPLANNED, Supervisor

    r1 = plan_next(store, "r1", {tp: 10 for tp in PARTS})
    r2 = plan_next(store, "r2", {tp: 20 for tp in PARTS})  # starts at r1's planned end while r1 is in flight
    assert r2.start_offsets() == r1.end_offsets()
    assert all(p.start_source is StartSource.INFLIGHT and p.after_run == "r1" for p in r2.partitions)
    store.runs.move("wiki", "r1", RunEvent.FAIL, error="spark job failed")
    with pytest.raises(PredecessorGoneError, match="will never publish") as info:  # refused, but not stale
        Publisher(store).publish("wiki", "r2", results_for(r2))
    assert info.value.predecessor == "r1" and store.runs.require("wiki", "r2").status is RunStatus.PLANNED
    assert committed(store) == {} and store.segment_records.of("wiki") == []
    r3 = plan_next(store, "r3", {tp: 30 for tp in PARTS})  # pipelined from r2's ends, which its re-plan keeps

    again = Supervisor(SPEC, store).replan("r2")
    assert again.plan.revision == 1 and again.status is RunStatus.RUNNING
    assert again.plan.start_offsets() == {tp: 0 for tp in PARTS} and again.plan.end_offsets() == r2.end_offsets()
    assert {(p.after_run, p.expected_commit) for p in again.plan.partitions} == {(None, None)}  # r1's first start
    assert Supervisor(SPEC, store).plan("r2").plan == again.plan  # a re-executed run re-executes the re-plan
    [audit] = store.audit_log.records("wiki", action=RUN_REPLANNED)
    assert audit.details["predecessors"] == ["r1"] and audit.details["supersededRuns"] == ["r1"]
    # r1 cannot publish its range any more (a retry of it), r2 does, then r3 after it: nothing lost or twice
    assert store.runs.require("wiki", "r1").status is RunStatus.SUPERSEDED
    with pytest.raises(StaleRunError, match="superseded by run r2"):
        Publisher(store).publish("wiki", "r1", results_for(r1))
    Publisher(store).publish("wiki", "r2", results_for(again.plan))
    Publisher(store).publish("wiki", "r3", results_for(r3))
    assert committed(store) == {tp: 30 for tp in PARTS}
    assert [(r.start, r.end) for r in store.offsets.claims("wiki") if r.tp == PARTS[0]] == [(0, 30)]


def test_pipelined_runs_publish_in_order(store):
    r1 = plan_next(store, "r1", {tp: 10 for tp in PARTS})
    r2 = plan_next(store, "r2", {tp: 20 for tp in PARTS})
    with pytest.raises(PublishPendingError) as info:  # r2 cannot overtake r1: it waits, it is not stale
        Publisher(store).publish("wiki", "r2", results_for(r2))
    assert info.value.waiting_for == "r1" and "has not published yet" in str(info.value)
    assert store.runs.get("wiki", "r2").status is RunStatus.PLANNED
    assert committed(store) == {} and store.segment_records.of("wiki") == []
    Publisher(store).publish("wiki", "r1", results_for(r1))
    Publisher(store).publish("wiki", "r2", results_for(r2))
    assert committed(store) == {tp: 20 for tp in PARTS}


def test_a_pipelined_publish_waits_for_its_predecessor_then_commits_after_it(store):
    import threading

    from ingest_core.supervisor.publish import publish_in_order

    r1 = plan_next(store, "r1", {tp: 10 for tp in PARTS})
    r2 = plan_next(store, "r2", {tp: 20 for tp in PARTS})
    done = {}
    waiter = threading.Thread(target=lambda: done.setdefault("r2", publish_in_order(
        Publisher(store), "wiki", "r2", results_for(r2), timeout_s=60, poll_s=0.05)))
    waiter.start()
    waiter.join(0.5)
    assert waiter.is_alive() and committed(store) == {}
    Publisher(store).publish("wiki", "r1", results_for(r1))
    waiter.join(30)
    assert not done["r2"].already_published and committed(store) == {tp: 20 for tp in PARTS}
    assert [r.status for r in store.runs.recent("wiki")] == [RunStatus.PUBLISHED] * 2
    # a predecessor that never publishes: the wait is bounded, and the run is not marked stale by it
    plan_next(store, "r3", {tp: 30 for tp in PARTS})
    r4 = plan_next(store, "r4", {tp: 40 for tp in PARTS})
    with pytest.raises(IngestError, match="did not publish within 0.2s"):
        publish_in_order(Publisher(store), "wiki", "r4", results_for(r4), timeout_s=0.2, poll_s=0.05)
    assert store.runs.get("wiki", "r4").status is RunStatus.PLANNED


def test_failed_groups_keep_their_offsets(store):
    plan = plan_next(store, "r1", {tp: 10 for tp in PARTS})
    result = Publisher(store).publish("wiki", "r1", results_for(plan, skip={1}))
    assert result.published_groups == (0,) and result.failed_groups == (1,)
    g0 = {p.tp for p in plan.group(0).partitions}
    assert committed(store) == {tp: 10 for tp in g0}
    assert store.runs.group_statuses("wiki", "r1") == {0: GroupStatus.PUBLISHED, 1: GroupStatus.FAILED}
    assert "failed" in store.runs.require("wiki", "r1").error
    # the next run re-reads group 1's partitions from where they were
    nxt = plan_next(store, "r2", {tp: 12 for tp in PARTS})
    assert nxt.start_offsets() == {tp: (10 if tp in g0 else 0) for tp in PARTS}


def test_empty_groups_advance_without_a_job(store):
    plan = plan_next(store, "r1", {tp: 10 for tp in PARTS})
    Publisher(store).publish("wiki", "r1", results_for(plan))
    idle = plan_next(store, "r2", {tp: 10 for tp in PARTS})
    assert idle.is_empty
    result = Publisher(store).publish("wiki", "r2", [])
    assert result.published_groups == (0, 1) and result.rows == 0
    assert set(store.runs.group_statuses("wiki", "r2").values()) == {GroupStatus.EMPTY}


# ------------------------------------------------------------------------------------------ concurrency

def _publish_in_process(url, run_id, barrier, queue):
    store = MetadataStore(url)
    plan = store.runs.require("wiki", run_id).plan
    barrier.wait()  # no timeout: a sibling that never comes fails the test in `wait_for_children`
    try:
        r = Publisher(store).publish("wiki", run_id, results_for(plan))
        queue.put((run_id, "published" if not r.already_published else "no-op"))
    except StaleRunError as exc:
        queue.put((run_id, f"stale:{exc.superseded_by}"))
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        queue.put((run_id, f"error:{type(exc).__name__}:{exc}"))
    finally:
        store.dispose()


def _race(url, run_ids):
    ctx = multiprocessing.get_context("spawn")
    barrier, queue = ctx.Barrier(len(run_ids)), ctx.Queue()
    procs = [ctx.Process(target=_publish_in_process, args=(url, r, barrier, queue)) for r in run_ids]
    for p in procs:
        p.start()
    return sorted(wait_for_children(procs, queue))


@pytest.mark.parametrize("rounds", [3])
def test_concurrent_publishers_of_competing_runs_serialize(store_url, rounds):
    store = MetadataStore(store_url)
    for i in range(rounds):
        latest = {tp: 10 * (i + 1) for tp in PARTS}
        a = plan_next(store, f"a{i}", latest)
        store.runs.move("wiki", f"a{i}", RunEvent.FAIL, error="simulated: planned twice")
        plan_next(store, f"b{i}", latest)
        store.runs.move("wiki", f"a{i}", RunEvent.START)
        outcomes = dict(_race(store_url, [f"a{i}", f"b{i}"]))
        assert sorted(outcomes.values())[0] == "published", outcomes
        winner = next(r for r, o in outcomes.items() if o == "published")
        loser = next(r for r in outcomes if r != winner)
        assert outcomes[loser] == f"stale:{winner}", outcomes
        assert committed(store) == latest
        assert {s.run_id for s in store.segment_records.of("wiki", run_id=winner)} == {winner}
        assert store.segment_records.of("wiki", run_id=loser) == []
        assert a.start_offsets() == {tp: 10 * i for tp in PARTS}
    store.dispose()


def test_concurrent_publishers_of_the_same_run_publish_once(store_url):
    store = MetadataStore(store_url)
    plan_next(store, "r1", {tp: 10 for tp in PARTS})
    outcomes = _race(store_url, ["r1", "r1", "r1"])
    assert [o for _, o in outcomes].count("published") == 1, outcomes
    assert [o for _, o in outcomes].count("no-op") == 2, outcomes
    assert len(store.segment_records.of("wiki")) == 2 and committed(store) == {tp: 10 for tp in PARTS}
    store.dispose()


def test_a_backfill_run_publishes_whole_beside_the_main_line(store):
    from ingest_core.core.offsets import StartOffset

    r1 = plan_next(store, "r1", {tp: 10 for tp in PARTS})
    Publisher(store).publish("wiki", "r1", results_for(r1))
    backfill = plan_run(PlanRequest(datasource="wiki", run_id="bf", created_at=T0, task_count=2,
                                    starts={tp: StartOffset(10, StartSource.BACKFILL) for tp in PARTS},
                                    latest={tp: 30 for tp in PARTS}))
    store.runs.insert(backfill)
    move_main_line(store, {tp: 30 for tp in PARTS})  # as `reset --to-latest --backfill` does with it
    assert backfill.is_backfill and not r1.is_backfill
    assert store.runs.inflight_end_offsets("wiki") == {}  # nothing continues from a backfill's end
    r2 = plan_next(store, "r2", {tp: 40 for tp in PARTS})
    assert r2.start_offsets() == {tp: 30 for tp in PARTS}  # the main line goes on from its committed offsets
    with pytest.raises(IngestError, match="a backfill publishes whole"):
        Publisher(store).publish("wiki", "bf", results_for(backfill, skip=(1,)))
    assert store.runs.get("wiki", "bf").status is RunStatus.PLANNED and len(store.segment_records.of("wiki")) == 2
    Publisher(store).publish("wiki", "r2", results_for(r2))
    result = Publisher(store).publish("wiki", "bf", results_for(backfill))
    assert result.published_groups == (0, 1) and committed(store) == {tp: 40 for tp in PARTS}
    # operator actions supersede the main line's runs in flight, never a backfill
    store.runs.insert(replace(backfill, run_id="bf2"))
    r3 = plan_next(store, "r3", {tp: 50 for tp in PARTS})
    with store.session() as conn:
        assert store.runs.supersede_inflight("wiki", "x", "y", conn=conn) == [r3.run_id]
    assert store.runs.get("wiki", "bf2").status is RunStatus.PLANNED


# ------------------------------------------------------------------------------------------ claimed ranges

def backfill_run(store, run_id, start, end, parts=PARTS):
    from ingest_core.core.offsets import StartOffset

    plan = plan_run(PlanRequest(datasource="wiki", run_id=run_id, created_at=T0, task_count=2,
                                starts={tp: StartOffset(start, StartSource.BACKFILL) for tp in parts},
                                latest={tp: end for tp in parts}))
    return store.runs.insert(plan)[0].plan


def move_main_line(store, offsets, by: str = "op"):
    """An operator's move of the main line (`reset --to-latest --backfill` jumps its offsets past the backfill's
    range; set-offsets, reset): the service actions check offsets against a broker first, this store has none.
    Returns the `Move`."""
    from ingest_core.store.main_line import MainLine

    with MainLine.locked(store, "wiki", planning_lock=True) as line:
        return line.move(offsets, by=f"set-offsets by {by}", reason="an operator moved the offsets")


def test_overlapping_ranges_are_found_per_partition():
    from ingest_core.core.offsets import OffsetRange, PublishedRange, find_overlap

    a, b = PARTS[0], PARTS[1]
    claims = [PublishedRange(a, 0, 60, "r1", False), PublishedRange(a, 80, 90, "bf", True),
              PublishedRange(b, 10, 20, "r1", False)]
    assert find_overlap([OffsetRange(a, 60, 80), OffsetRange(b, 0, 10), OffsetRange(b, 20, 30)], claims) is None
    assert find_overlap([OffsetRange(a, 60, 81)], claims) == (OffsetRange(a, 60, 81), claims[1])
    assert find_overlap([OffsetRange(b, 5, 11)], claims) == (OffsetRange(b, 5, 11), claims[2])
    assert find_overlap([OffsetRange(b, 15, 15)], claims) is None  # an empty range publishes nothing


def test_two_backfills_over_the_same_offsets_publish_once(store):
    r1 = plan_next(store, "r1", {tp: 10 for tp in PARTS})
    Publisher(store).publish("wiki", "r1", results_for(r1))
    move_main_line(store, {tp: 30 for tp in PARTS})
    first, second = backfill_run(store, "bf1", 10, 30), backfill_run(store, "bf2", 20, 30)
    Publisher(store).publish("wiki", "bf1", results_for(first))
    with pytest.raises(StaleRunError) as info:
        Publisher(store).publish("wiki", "bf2", results_for(second))
    assert info.value.superseded_by == "bf1"
    assert "offsets [20, 30) overlap offsets [10, 30) already published by backfill run bf1" in str(info.value)
    assert store.segment_records.of("wiki", run_id="bf2") == [] and store.runs.get("wiki", "bf2").status is RunStatus.SUPERSEDED
    # the main line goes on after the backfills' range, beside it
    r2 = plan_next(store, "r2", {tp: 40 for tp in PARTS})
    assert r2.start_offsets() == {tp: 30 for tp in PARTS}
    Publisher(store).publish("wiki", "r2", results_for(r2))
    assert {(c.start, c.end, c.run_id) for c in store.offsets.claims("wiki") if c.tp == PARTS[0]} == {
        (0, 10, "r1"), (10, 30, "bf1"), (30, 40, "r2")}  # the main line's runs extend their stretch


def test_the_main_line_may_not_publish_what_a_backfill_published_unless_an_operator_rewinds(store):
    r1 = plan_next(store, "r1", {tp: 10 for tp in PARTS})
    Publisher(store).publish("wiki", "r1", results_for(r1))
    move_main_line(store, {tp: 30 for tp in PARTS})
    bf = backfill_run(store, "bf", 10, 30)
    # set-offsets back into the backfill's range while it is in flight: the backfill publishes first
    move_main_line(store, {tp: 20 for tp in PARTS}, "alice")
    Publisher(store).publish("wiki", "bf", results_for(bf))
    r2 = plan_next(store, "r2", {tp: 40 for tp in PARTS})
    with pytest.raises(StaleRunError) as info:
        Publisher(store).publish("wiki", "r2", results_for(r2))
    assert info.value.superseded_by == "bf" and "already published by backfill run bf" in str(info.value)
    assert "ingest set-offsets wiki edits:0=30" in str(info.value)  # how to go on after it
    assert committed(store) == {tp: 20 for tp in PARTS} and store.segment_records.of("wiki", run_id="r2") == []
    # an operator who rewinds asks for those offsets again: the claims at and above the new offsets go (audited)
    moved = move_main_line(store, {tp: 20 for tp in PARTS}, "bob")
    assert {(r.tp.partition, r.start, r.end, r.run_id) for r in moved.released
            if r.tp.topic == "edits"} == {(p, 20, 30, "bf") for p in range(4)}
    r3 = plan_next(store, "r3", {tp: 40 for tp in PARTS})
    Publisher(store).publish("wiki", "r3", results_for(r3))
    assert committed(store) == {tp: 40 for tp in PARTS}
    # a hard reset releases every claim: the next run may start from the earliest offsets
    moved = move_main_line(store, None, "carol")
    assert store.offsets.claims("wiki") == []
    assert len(moved.released) == 4 * 3  # per partition: r1's stretch, bf's [10, 20), r3's stretch


# ------------------------------------------------------------------------------------------ deadlines

MINUTE = timedelta(minutes=1)


def test_a_run_in_flight_past_its_deadline_expires_for_good(store):
    from ingest_core.store.runs import RUN_EXPIRED

    plan_next(store, "r1", {tp: 10 for tp in PARTS})
    assert store.runs.start("wiki", "r1", MINUTE, now=T0)  # its jobs start: completionTimeout PT1M
    r1 = store.runs.require("wiki", "r1")
    assert (r1.running_since, r1.deadline_at) == (T0, T0 + MINUTE)
    assert not r1.past_deadline(T0 + MINUTE - timedelta(milliseconds=1)) and r1.past_deadline(T0 + MINUTE)
    # compared in UTC whatever the zone of `now` (SQLite keeps date-times as text without their zone)
    kolkata = timezone(timedelta(hours=5, minutes=30))
    assert store.runs.expire_overdue("wiki", (T0 + MINUTE - timedelta(microseconds=1)).astimezone(kolkata),
                                     "test") == []
    assert store.runs.expire_overdue("wiki", (T0 + MINUTE).astimezone(kolkata), "the plan step of run r2") == ["r1"]
    r1 = store.runs.require("wiki", "r1")
    assert r1.status is RunStatus.EXPIRED and r1.expired and r1.is_final
    assert r1.error.startswith("expired: run r1 was RUNNING since 2026-11-22T10:00:00.000Z, past completionTimeout "
                               "(60s, deadline 2026-11-22T10:01:00.000Z)")
    (audit,) = store.audit_log.records("wiki", action=RUN_EXPIRED)
    assert audit.details["runId"] == "r1" and audit.details["detectedBy"] == "the plan step of run r2"
    # final: nothing continues from its ends, a retry does not revive it, its publish is refused
    assert store.runs.inflight_end_offsets("wiki") == {}
    assert not store.runs.start("wiki", "r1", MINUTE, now=T0 + 2 * MINUTE)
    with pytest.raises(RunExpiredError, match="r1 .* was not published: expired: "):
        Publisher(store).publish("wiki", "r1", results_for(r1.plan), now=T0 + 2 * MINUTE)
    assert store.runs.require("wiki", "r1").status is RunStatus.EXPIRED and committed(store) == {}
    r2 = plan_next(store, "r2", {tp: 12 for tp in PARTS})  # from Kafka's start again, not from r1's ends
    assert r2.start_offsets() == {tp: 0 for tp in PARTS}
    assert {p.start_source for p in r2.partitions} == {StartSource.EARLIEST}
    Publisher(store).publish("wiki", "r2", results_for(r2))
    assert committed(store) == {tp: 12 for tp in PARTS}


def test_a_late_publish_is_refused_in_the_transaction(store):
    from ingest_core.store.runs import RUN_EXPIRED

    r1 = plan_next(store, "r1", {tp: 10 for tp in PARTS})
    store.runs.start("wiki", "r1", MINUTE, now=T0)
    with pytest.raises(RunExpiredError, match="past completionTimeout"):  # nobody expired it yet: the publish does
        Publisher(store).publish("wiki", "r1", results_for(r1), now=T0 + MINUTE)
    assert committed(store) == {} and store.segment_records.of("wiki") == []
    assert store.runs.require("wiki", "r1").expired
    assert [a.details["detectedBy"] for a in store.audit_log.records("wiki", action=RUN_EXPIRED)] == ["the publish of run r1"]
    # just in time, it publishes
    r2 = plan_next(store, "r2", {tp: 10 for tp in PARTS})
    store.runs.start("wiki", "r2", MINUTE, now=T0)
    assert not Publisher(store).publish("wiki", "r2", results_for(r2), now=T0 + MINUTE / 2).already_published


def test_a_waiting_successor_expires_its_dead_predecessor_then_plans_again_and_publishes(store):
    from ingest_core.supervisor.publish import publish_in_order
    from ingest_core.store.schema import utcnow
    from ingest_core.supervisor.planning import Supervisor

    plan_next(store, "r1", {tp: 10 for tp in PARTS})
    store.runs.start("wiki", "r1", MINUTE, now=utcnow() - timedelta(hours=1))  # its process died long ago
    r2 = plan_next(store, "r2", {tp: 20 for tp in PARTS})  # planned from r1's ends before anyone noticed
    assert {p.after_run for p in r2.partitions} == {"r1"}
    # r2's own plan is refused: r1 will never publish, and nothing committed its range
    with pytest.raises(PredecessorGoneError):
        publish_in_order(Publisher(store), "wiki", "r2", results_for(r2), timeout_s=600, poll_s=60)
    assert store.runs.require("wiki", "r1").status is RunStatus.EXPIRED  # expired by that look, not waited out
    # the replan step plans it again (its jobs run in their own tasks); the publish of that plan goes through
    replanned = Supervisor(SPEC, store).replan("r2").plan
    assert replanned.revision == 1 and replanned.start_offsets() == {tp: 0 for tp in PARTS}
    result = publish_in_order(Publisher(store), "wiki", "r2", results_for(replanned), timeout_s=600, poll_s=60)
    assert not result.already_published and committed(store) == {tp: 20 for tp in PARTS}
    assert store.runs.require("wiki", "r2").status is RunStatus.PUBLISHED
    # without a way to plan again (a bare publish), the refusal is raised and nothing is written
    plan_next(store, "r3", {tp: 30 for tp in PARTS})
    r4 = plan_next(store, "r4", {tp: 40 for tp in PARTS})
    store.runs.move("wiki", "r3", RunEvent.FAIL, error="killed")
    with pytest.raises(PredecessorGoneError):
        publish_in_order(Publisher(store), "wiki", "r4", results_for(r4), timeout_s=600, poll_s=60)
    assert committed(store) == {tp: 20 for tp in PARTS}


def test_the_replan_step_plans_again_only_a_run_whose_predecessor_will_never_publish(store, tmp_path, monkeypatch):
    from ingest_core.supervisor.publish import publish_step
    from ingest_core.supervisor.replan import replan_step

    monkeypatch.setenv("INGEST_DEEP_STORAGE", tmp_path.as_uri())
    r1 = plan_next(store, "r1", {tp: 10 for tp in PARTS})
    r2 = plan_next(store, "r2", {tp: 20 for tp in PARTS})  # pipelined from r1
    Publisher(store).publish("wiki", "r1", results_for(r1))
    assert replan_step(SPEC, "r2", metadata=store) == []  # r1 published: nothing to plan again
    assert store.runs.require("wiki", "r2").plan.revision == 0
    plan_next(store, "r3", {tp: 30 for tp in PARTS})  # from r2's ends
    plan_next(store, "r4", {tp: 40 for tp in PARTS})  # from r3's
    Publisher(store).publish("wiki", "r2", results_for(r2))
    store.runs.move("wiki", "r3", RunEvent.FAIL, error="killed")
    jobs = replan_step(SPEC, "r4", metadata=store)  # r3 will never publish: r4 reads from where r3 started
    r4 = store.runs.require("wiki", "r4").plan
    assert r4.revision == 1 and r4.start_offsets() == {tp: 20 for tp in PARTS}
    assert sorted((j.group_id, j.replica) for j in jobs) == [(0, 0), (1, 0)]
    assert store.runs.require("wiki", "r3").status is RunStatus.SUPERSEDED  # a retry of r3 cannot publish
    # the publish step never plans again nor runs a job: a run behind a dead one it was not re-planned from fails
    plan_next(store, "r5", {tp: 40 for tp in PARTS})  # nothing new: no report to read
    store.runs.move("wiki", "r4", RunEvent.FAIL, error="killed")
    with pytest.raises(IngestError, match="will never publish"):
        publish_step(SPEC, "r5", metadata=store)
    assert committed(store) == {tp: 20 for tp in PARTS}


def store_snapshot(store):
    """Everything a publish or a re-plan may change: the runs, the committed offsets, the datasource's state,
    the audit log and the segments."""
    runs = {r.run_id: (r.status, r.plan.revision, r.superseded_by) for r in store.runs.recent("wiki", limit=None)}
    return (runs, committed(store), store.datasources.get("wiki"), len(store.audit_log.records("wiki")),
            [s.id for s in store.segment_records.of("wiki")])


def test_after_a_plan_that_failed_for_good_the_replan_and_publish_steps_change_nothing(store, tmp_path,
                                                                                       monkeypatch):
    """publish and replan run whatever their upstream did (trigger rule all_done: a run with nothing to read, or
    nothing to plan again, has no no-op task). When the run's plan task failed for good after an earlier try
    stored the plan, neither may act on that plan: the replan step would plan r3 again from its failed
    predecessor (superseding r2), the publish would publish the empty r1. Both end skipped, changing nothing."""
    from ingest_core.supervisor.publish import publish_step
    from ingest_core.supervisor.replan import replan_step
    from ingest_core.supervisor.run import RunSkipped

    monkeypatch.setenv("INGEST_DEEP_STORAGE", tmp_path.as_uri())
    r0 = plan_next(store, "r0", {tp: 10 for tp in PARTS})
    Publisher(store).publish("wiki", "r0", results_for(r0))
    assert plan_next(store, "r1", {tp: 10 for tp in PARTS}).is_empty  # nothing new; its plan task then failed
    plan_next(store, "r2", {tp: 20 for tp in PARTS})
    assert {p.after_run for p in plan_next(store, "r3", {tp: 30 for tp in PARTS}).partitions} == {"r2"}
    store.runs.move("wiki", "r2", RunEvent.FAIL, error="killed")  # r3's plan task failed for good too
    before = store_snapshot(store)
    for run_id in ("r1", "r3"):
        with pytest.raises(RunSkipped, match="plan"):
            replan_step(SPEC, run_id, metadata=store, planned=False)
        with pytest.raises(RunSkipped, match="plan"):
            publish_step(SPEC, run_id, metadata=store, planned=False)
    assert store_snapshot(store) == before


def test_a_spark_job_of_a_final_run_does_nothing(store, monkeypatch):
    from ingest_core.supervisor.run import RunSkipped, check_job_wanted

    monkeypatch.setenv("INGEST_METADATA_URL", store.url)
    r1 = plan_next(store, "r1", {tp: 10 for tp in PARTS})
    check_job_wanted("wiki", "r1")  # in flight: the job runs
    Publisher(store).publish("wiki", "r1", results_for(r1))
    with pytest.raises(RunSkipped, match="run r1 is already published: no Spark job"):
        check_job_wanted("wiki", "r1")
    plan_next(store, "r2", {tp: 20 for tp in PARTS})
    store.runs.start("wiki", "r2", MINUTE, now=T0)  # long past its deadline: the job's check expires it
    with pytest.raises(RunSkipped, match="run r2 is not executed again: expired: "):
        check_job_wanted("wiki", "r2")
