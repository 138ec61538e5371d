"""Planning a run end to end: the real broker, the real metadata stores, every start-offset path."""

import time
from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa
from confluent_kafka import TopicPartition as KTP
from confluent_kafka.admin import NewPartitions
from helpers import broker_connections, make_spec, recreate_topic, wait_for_children, wait_for_partitions

from ingest_core.core.states import RunEvent
from ingest_core.core.errors import OffsetOutOfRangeError, TopicNotFoundError, TopicRecreatedError
from ingest_core.core.offsets import StartSource, TopicPartition
from ingest_core.core.states import RunStatus
from ingest_core.store.publisher import GroupResult, Publisher, SegmentDescriptor
from ingest_core.store.schema import offsets
from ingest_core.supervisor.planning import PlanOptions, Supervisor


def publish_all(store, record, now=None):
    plan = record.plan
    start = datetime(2026, 11, 22, tzinfo=timezone.utc)
    results = [GroupResult(g.group_id, [SegmentDescriptor(start, start + timedelta(hours=1), f"file:///x/{plan.run_id}-{g.group_id}",
                                                          g.records, 1)])
               for g in plan.groups if not g.is_empty]
    return Publisher(store).publish(plan.datasource, plan.run_id, results, now=now)


def fill(broker, topic, partitions, n):
    for p in range(partitions):
        broker.produce(topic, [b'{"ts": 1}'] * n, partition=p)


def test_first_run_starts_latest_or_earliest(broker, store):
    topic = broker.create_topic(2)
    fill(broker, topic, 2, 5)
    latest_spec = make_spec(broker.bootstrap, "ds-latest", topic=topic)
    earliest_spec = make_spec(broker.bootstrap, "ds-earliest", topic=topic, useEarliestOffset=True)
    rec = Supervisor(latest_spec, store).plan("r1")
    assert rec.plan.start_offsets() == {TopicPartition(topic, 0): 5, TopicPartition(topic, 1): 5}
    assert rec.plan.is_empty and {p.start_source for p in rec.plan.partitions} == {StartSource.LATEST}
    rec = Supervisor(earliest_spec, store).plan("r1")
    assert rec.plan.start_offsets() == {TopicPartition(topic, 0): 0, TopicPartition(topic, 1): 0}
    assert rec.plan.records == 10 and rec.status is RunStatus.PLANNED


def test_a_step_closes_the_reader_it_opened_and_leaves_the_caller_s_open(broker, store):
    from ingest_core.kafka.offset_reader import KafkaOffsetReader

    topic = broker.create_topic(2)
    fill(broker, topic, 2, 3)
    spec = make_spec(broker.bootstrap, topic=topic, useEarliestOffset=True)
    before = broker_connections(broker.bootstrap)
    sup = Supervisor(spec, store)
    assert sup.plan("r1").plan.records == 6
    assert sup.pending() == ({TopicPartition(topic, 0): 3, TopicPartition(topic, 1): 3}, 0)
    assert not broker_connections(broker.bootstrap) - before  # each step's reader closed: its connections gone
    with pytest.raises(TopicNotFoundError) as failed:
        Supervisor(make_spec(broker.bootstrap, topic=f"{topic}-missing"), store).plan("r9")
    # closed, though the error's traceback still holds the reader
    assert failed.value and not broker_connections(broker.bootstrap) - before
    reader = KafkaOffsetReader.for_spec(spec)
    try:
        Supervisor(spec, store, reader=reader).plan("r2")
        assert broker_connections(broker.bootstrap) - before  # the caller's reader is the caller's to close
        assert reader.partitions(topic=topic) == [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    finally:
        reader.close()


def test_plan_is_persisted_and_reused_for_the_same_run_id(broker, store):
    topic = broker.create_topic(3)
    fill(broker, topic, 3, 4)
    sup = Supervisor(make_spec(broker.bootstrap, topic=topic, useEarliestOffset=True, taskCount=2), store)
    first = sup.plan("scheduled__2026-11-22T10:00:00+00:00")
    fill(broker, topic, 3, 10)  # more data arrives; a retry of the same run must not see it
    again = sup.plan("scheduled__2026-11-22T10:00:00+00:00")
    assert again.plan == first.plan and again.plan.records == 12
    assert [g.group_id for g in first.plan.groups] == [0, 1]
    assert store.runs.require("wiki", "scheduled__2026-11-22T10:00:00+00:00").plan == first.plan


def test_committed_then_inflight_then_new_partition(broker, store):
    topic = broker.create_topic(2)
    fill(broker, topic, 2, 3)
    sup = Supervisor(make_spec(broker.bootstrap, topic=topic, useEarliestOffset=True), store)
    r1 = sup.plan("r1")
    publish_all(store, r1)
    fill(broker, topic, 2, 2)
    r2 = sup.plan("r2")  # from committed
    assert {p.start_source for p in r2.plan.partitions} == {StartSource.COMMITTED}
    assert r2.plan.start_offsets() == {TopicPartition(topic, 0): 3, TopicPartition(topic, 1): 3}
    fill(broker, topic, 2, 4)
    broker.admin.create_partitions([NewPartitions(topic, 3)])[topic].result(timeout=30)
    wait_for_partitions(broker, topic, 3)
    broker.produce(topic, [b'{"ts": 1}'] * 6, partition=2)
    r3 = sup.plan("r3")  # r2 still in flight: pipelined from its planned end; the new partition from earliest
    starts = {p.tp.partition: (p.start, p.start_source) for p in r3.plan.partitions}
    assert starts == {0: (5, StartSource.INFLIGHT), 1: (5, StartSource.INFLIGHT), 2: (0, StartSource.NEW_PARTITION)}
    assert r3.plan.end_offsets()[TopicPartition(topic, 2)] == 6
    publish_all(store, r2)
    publish_all(store, r3)
    assert {tp.partition: k.offset for tp, k in store.offsets.committed("wiki").items()} == {0: 9, 1: 9, 2: 6}


def test_planning_expires_runs_in_flight_past_their_deadline(broker, store):
    """A run whose process died stays RUNNING: past completionTimeout, the next plan expires it and starts from
    the committed offsets instead of its planned ends."""
    topic = broker.create_topic(2)
    fill(broker, topic, 2, 3)
    sup = Supervisor(make_spec(broker.bootstrap, topic=topic, useEarliestOffset=True, completionTimeout="PT10M"), store)
    t0 = datetime(2026, 11, 22, 10, tzinfo=timezone.utc)
    publish_all(store, sup.plan("r1", PlanOptions(now=t0)), now=t0)
    fill(broker, topic, 2, 2)
    dead = sup.plan("dead", PlanOptions(now=t0))
    assert dead.deadline_at == t0 + timedelta(minutes=10)  # if its jobs never start
    store.runs.start("wiki", "dead", sup.completion_timeout, now=t0 + timedelta(minutes=1))  # ... and then they died
    pipelined = sup.plan("r2", PlanOptions(now=t0 + timedelta(minutes=10)))  # 1 min before its deadline
    assert {p.start_source for p in pipelined.plan.partitions} == {StartSource.INFLIGHT}
    store.runs.move("wiki", "r2", RunEvent.FAIL, error="simulated")
    r3 = sup.plan("r3", PlanOptions(now=t0 + timedelta(minutes=11)))
    assert store.runs.require("wiki", "dead").expired
    assert {p.start_source for p in r3.plan.partitions} == {StartSource.COMMITTED}
    assert r3.plan.start_offsets() == {TopicPartition(topic, 0): 3, TopicPartition(topic, 1): 3}
    again = sup.plan("dead", PlanOptions(now=t0 + timedelta(minutes=12)))  # a retry of its plan step: still expired
    assert again.status is RunStatus.EXPIRED and again.expired


def test_topic_pattern_picks_up_new_topics_from_earliest(broker, store):
    import uuid

    prefix = f"multi{uuid.uuid4().hex[:6]}"
    a = broker.create_topic(2, f"{prefix}-a")
    fill(broker, a, 2, 3)
    sup = Supervisor(make_spec(broker.bootstrap, topic_pattern=f"{prefix}-.*", useEarliestOffset=False, taskCount=3), store)
    publish_all(store, sup.plan("r1"))  # first run: latest, nothing to read
    b = broker.create_topic(1, f"{prefix}-b")
    fill(broker, b, 1, 7)
    r2 = sup.plan("r2")
    assert r2.plan.start_offsets()[TopicPartition(b, 0)] == 0 and r2.plan.records == 7
    ids = {p.tp: g.group_id for g in r2.plan.groups for p in g.partitions}
    from ingest_core.core.planner import task_group_id
    assert all(gid == task_group_id(tp, 3, multi_topic=True) for tp, gid in ids.items())


@pytest.mark.parametrize("use_earliest", [True, False])
def test_truncated_topic(broker, store, use_earliest):
    topic = broker.create_topic(1)
    fill(broker, topic, 1, 5)
    tp = TopicPartition(topic, 0)
    strict = Supervisor(make_spec(broker.bootstrap, topic=topic, useEarliestOffset=True), store)
    publish_all(store, strict.plan("r1"))  # committed 5
    fill(broker, topic, 1, 10)  # offsets 5..14
    broker.admin.delete_records([KTP(topic, 0, 8)])[KTP(topic, 0, 8)].result(timeout=30)  # 5..7 gone unread
    with pytest.raises(OffsetOutOfRangeError) as info:
        strict.plan("r2")
    assert "start offset 5" in str(info.value) and "log start offset 8" in str(info.value)
    assert store.runs.get("wiki", "r2") is None and store.offsets.committed("wiki")[tp].offset == 5  # nothing lost

    lenient = Supervisor(make_spec(broker.bootstrap, topic=topic, useEarliestOffset=use_earliest,
                                   tuning={"resetOffsetAutomatically": True}), store)
    r2 = lenient.plan("r2")
    p = r2.plan.partitions[0]
    assert p.start == (8 if use_earliest else 15)
    assert p.start_source is (StartSource.RESET_EARLIEST if use_earliest else StartSource.RESET_LATEST)
    audit = [a for a in store.audit_log.records("wiki") if a.action == "auto_reset"]
    assert len(audit) == 1 and audit[0].details["fromOffset"] == 5 and audit[0].details["toOffset"] == p.start
    publish_all(store, r2)  # compare-and-swap against the offset it was reset from
    assert store.offsets.committed("wiki")[tp].offset == 15


def test_committed_offset_beyond_log_end_is_an_error(broker, store):
    topic = broker.create_topic(1)
    fill(broker, topic, 1, 20)
    sup = Supervisor(make_spec(broker.bootstrap, topic=topic, useEarliestOffset=True,
                               tuning={"resetOffsetAutomatically": True}), store)
    publish_all(store, sup.plan("r1"))
    # The topic is deleted and re-created: the stored offset 20 now points past its end.
    recreate_topic(broker, topic, 1)
    fill(broker, topic, 1, 3)
    # the committed offset carries the old topic id: named as what it is
    with pytest.raises(TopicRecreatedError, match="was deleted and re-created"):
        sup.plan("r2")
    # an offset stored without an id (before ids were) is still caught, by the log end
    with store.session() as conn:
        conn.execute(sa.update(offsets).values(topic_id=None))
    with pytest.raises(OffsetOutOfRangeError, match="start offset 20 .*beyond the log end offset 3"):
        sup.plan("r2")


def test_a_record_stamped_in_the_future_does_not_hold_back_time_capped_runs(broker, store):
    from confluent_kafka.admin import NewTopic

    topic = f"future-{time.time_ns()}"  # Kafka 4 refuses records stamped over an hour ahead unless told
    broker.admin.create_topics([NewTopic(topic, 1, 1, config={"message.timestamp.after.max.ms": str(2**62)})]
                               )[topic].result(timeout=30)
    now = datetime.now(timezone.utc)
    for ts, n in ((now - timedelta(minutes=1), 10), (now + timedelta(days=30), 1), (now - timedelta(seconds=30), 10)):
        broker.produce(topic, [b'{"ts": 1}'] * n, partition=0, timestamp_ms=int(ts.timestamp() * 1000))
    def supervisor(name):
        return Supervisor(make_spec(broker.bootstrap, name, topic=topic, useEarliestOffset=True), store)

    # `ingest plan --end-time <now + 60 s>`: everything there is, not [0, 10) for the next 30 days
    ahead = supervisor("ahead").plan("r1", PlanOptions(end_time=datetime.now(timezone.utc) + timedelta(seconds=60)))
    assert (ahead.plan.partitions[0].start, ahead.plan.partitions[0].end) == (0, 21)
    # a scheduled run planned after its interval's end b: b's cap is the future-stamped record, so no cap
    late = supervisor("late").plan("r1", PlanOptions(end_time=datetime.now(timezone.utc) - timedelta(seconds=45))).plan
    assert (late.partitions[0].start, late.partitions[0].end) == (0, 21)


def test_time_sliced_and_record_capped_runs(broker, store):
    topic = broker.create_topic(1)
    now = datetime.now(timezone.utc)
    t = [int((now - timedelta(minutes=m)).timestamp() * 1000) for m in (50, 30, 10)]
    for ts, n in zip(t, (3, 4, 5)):
        broker.produce(topic, [b'{"ts": 1}'] * n, partition=0, timestamp_ms=ts)
    sup = Supervisor(make_spec(broker.bootstrap, topic=topic, useEarliestOffset=True), store)
    r1 = sup.plan("interval-1", PlanOptions(end_time=now - timedelta(minutes=40)))
    assert r1.plan.records == 3 and r1.plan.end_time is not None
    publish_all(store, r1)
    r2 = sup.plan("interval-2", PlanOptions(end_time=now - timedelta(minutes=20)))
    assert (r2.plan.partitions[0].start, r2.plan.partitions[0].end) == (3, 7)
    publish_all(store, r2)
    r3 = sup.plan("capped", PlanOptions(max_records=2))
    assert r3.plan.records == 2
    publish_all(store, r3)
    r4 = sup.plan("rest")
    assert (r4.plan.partitions[0].start, r4.plan.partitions[0].end) == (9, 12)


def test_spec_history_is_versioned_and_redacted(broker, store, monkeypatch):
    monkeypatch.setenv("KAFKA_PW", "pw-from-env")
    spec = make_spec(broker.bootstrap, topic="x", consumerProperties={
        "bootstrap.servers": broker.bootstrap, "sasl.password": {"type": "environment", "variable": "KAFKA_PW"},
        "ssl.key.password": "literal-secret"})
    sup = Supervisor(spec, store)
    assert sup.register() == 1 and sup.register() == 1
    changed = make_spec(broker.bootstrap, topic="x", taskCount=2)
    assert Supervisor(changed, store).register() == 2
    history = store.datasources.spec_history("wiki")
    assert [h["version"] for h in history] == [1, 2]
    text = str(history)
    assert "pw-from-env" not in text and "literal-secret" not in text and "KAFKA_PW" in text


def test_concurrent_planners_of_a_datasource_plan_one_after_the_other(broker, store_url):
    """Two runs planned at once (a backfill, catch-up with maxActiveRuns > 1) in parallel processes: the
    second continues from the first's planned end instead of planning the same offsets."""
    import multiprocessing

    topic = broker.create_topic(2)
    fill(broker, topic, 2, 5)
    ctx = multiprocessing.get_context("spawn")
    start_together = ctx.Barrier(3)
    procs = [ctx.Process(target=_plan_in_process, args=(broker.bootstrap, topic, store_url, f"r{i}", start_together))
             for i in range(3)]
    for p in procs:
        p.start()
    wait_for_children(procs)
    from ingest_core.store.metadata import MetadataStore

    plans = sorted((r.plan for r in MetadataStore(store_url).runs.recent("ds")), key=lambda p: p.created_at)
    assert len(plans) == 3
    records = [p.records for p in plans]
    assert sorted(records) == [0, 0, 10]  # the offsets went to exactly one of them
    for earlier, later in zip(plans, plans[1:]):
        assert later.start_offsets() == earlier.end_offsets()


def _plan_in_process(bootstrap, topic, url, run_id, start_together):
    from ingest_core.kafka.offset_reader import KafkaOffsetReader
    from ingest_core.store.metadata import MetadataStore

    spec = make_spec(bootstrap, "ds", topic=topic, useEarliestOffset=True)
    reader = KafkaOffsetReader.for_spec(spec)
    reader.partitions(topic=topic)  # connected before the race starts
    start_together.wait()  # no timeout: a sibling that never comes fails the test in `wait_for_children`
    Supervisor(spec, MetadataStore(url), reader=reader).plan(run_id)
    reader.close()
