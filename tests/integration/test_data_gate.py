"""The data gate's trigger against the real broker: it fires when enough new records arrive, and at maxWait
with what there is. (The gate inside a DAG run is in test_dag.py.)"""

from __future__ import annotations

import asyncio
import os
import threading
from datetime import datetime, timedelta, timezone

import pytest
import yaml
from airflow.sdk import BaseOperator, SkipMixin
from helpers import make_spec

from ingest_core.core.offsets import TopicPartition
from ingest_core.provider.operators.plan import TRIGGER_TIMEOUT_SLACK, PlanOperator
from ingest_core.provider.triggers import new_records
from ingest_core.provider.triggers.new_records import NewRecordsTrigger

pytestmark = pytest.mark.kafka


def write_spec(path, bootstrap: str, topic: str) -> str:
    raw = {"type": "kafka", "spec": {
        "dataSchema": {"dataSource": "gated", "timestampSpec": {"column": "ts"}},
        "ioConfig": {"topic": topic, "inputFormat": {"type": "json"},
                     "consumerProperties": {"bootstrap.servers": bootstrap}}}}
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def first_event(trigger: NewRecordsTrigger):
    async def run():
        async for event in trigger.run():
            return event
    return asyncio.run(run())


def trigger_for(spec_path: str, topic: str, starts: dict[int, int], min_records: int, max_wait_s: float):
    deadline = datetime.now(timezone.utc) + timedelta(seconds=max_wait_s)
    return NewRecordsTrigger(spec_path, [[topic, p, o] for p, o in starts.items()], min_records,
                             deadline.isoformat(), poke_interval_s=0.2)


def test_fires_once_enough_records_arrive_past_the_starts(tmp_path, broker, monkeypatch):
    topic = broker.create_topic(partitions=2)
    broker.produce(topic, [b"{}"] * 30, partition=0)  # before the starts: not new
    spec_path = write_spec(tmp_path / "gated.yaml", broker.bootstrap, topic)
    trigger = trigger_for(spec_path, topic, {0: 30, 1: 0}, min_records=50, max_wait_s=120)
    # each wave of records is produced once the trigger has counted the one before (no clock decides the order)
    seen: list[int] = []
    counted = {n: threading.Event() for n in (0, 20)}
    count = new_records._pending

    def pending(*args):
        n = count(*args)
        seen.append(n)
        if n in counted:
            counted[n].set()
        return n

    monkeypatch.setattr(new_records, "_pending", pending)

    def produce_in_waves():
        if counted[0].wait(60):
            broker.produce(topic, [b"{}"] * 20, partition=0)
        if counted[20].wait(60):
            broker.produce(topic, [b"{}"] * 30, partition=1)

    producer = threading.Thread(target=produce_in_waves)
    producer.start()
    event = first_event(trigger)
    producer.join()
    assert event.payload == {"status": "ready", "records": 50}  # released by the data, not by maxWait
    assert seen[0] == 0 and 20 in seen and seen[-1] == 50  # it waited through each short count


def test_ends_at_max_wait_with_what_there_is(tmp_path, broker):
    topic = broker.create_topic(partitions=1)
    spec_path = write_spec(tmp_path / "idle.yaml", broker.bootstrap, topic)
    event = first_event(trigger_for(spec_path, topic, {0: 0}, min_records=10, max_wait_s=2))
    assert event.payload == {"status": "max_wait", "records": 0, "error": None}
    broker.produce(topic, [b"{}"] * 3)
    event = first_event(trigger_for(spec_path, topic, {0: 0}, min_records=10, max_wait_s=1))
    assert event.payload == {"status": "max_wait", "records": 3, "error": None}


def test_round_trips_through_its_serialized_form(tmp_path):
    trigger = NewRecordsTrigger("/x/spec.yaml", [["t", 0, 5]], 10, "2026-01-01T00:00:00+00:00", 2.0)
    classpath, kwargs = trigger.serialize()
    assert classpath == "ingest_core.provider.triggers.new_records.NewRecordsTrigger"
    again = NewRecordsTrigger(**kwargs)
    assert again.serialize() == (classpath, kwargs)


def test_the_gate_is_the_plan_tasks_deferral_whose_trigger_keeps_its_stored_form():
    spec = make_spec("x:1", topic="t", microbatch={"dataGate": {"minRecords": 10, "maxWait": "PT2M",
                                                                "pokeInterval": "PT3S"}})
    plan = PlanOperator(task_id="plan", spec=spec)
    # a deferral's timeout is a triggerer outage: BaseOperator's resume fails the try (retried), where a sensor's
    # would fail it for good
    from airflow.sdk.bases.operator import TRIGGER_FAIL_REPR, TriggerFailureReason
    from airflow.sdk.exceptions import TaskDeferralTimeout

    assert isinstance(plan, BaseOperator) and isinstance(plan, SkipMixin)
    with pytest.raises(TaskDeferralTimeout):
        plan.resume_execution(TRIGGER_FAIL_REPR, {"error": TriggerFailureReason.TRIGGER_TIMEOUT}, {})
    before = datetime.now(timezone.utc)
    classpath, kwargs = plan.trigger({TopicPartition("t", 1): 7, TopicPartition("t", 0): 5}).serialize()
    # Airflow's database holds both for every deferred gate: a change strands the gates deferred at an upgrade
    assert classpath == "ingest_core.provider.triggers.new_records.NewRecordsTrigger"
    assert kwargs.keys() == {"spec_path", "starts", "min_records", "deadline", "poke_interval_s"}
    assert (kwargs["spec_path"], kwargs["starts"], kwargs["min_records"], kwargs["poke_interval_s"]) \
        == (str(spec.source), [["t", 0, 5], ["t", 1, 7]], 10, 3.0)
    deadline = datetime.fromisoformat(kwargs["deadline"])
    assert before + timedelta(minutes=2) <= deadline <= datetime.now(timezone.utc) + timedelta(minutes=2)


def test_a_fleets_gates_in_one_triggerer_share_their_kafka_clients(tmp_path, broker, monkeypatch):
    """A triggerer holds every deferred gate of a fleet in one process. Each gate's own Kafka clients (3 of them,
    each with librdkafka's threads and a pthread key: a process has 1,024) made 200 gates fail with 'Failed to
    initialize thread local storage'; gates on one cluster share them now, so the threads do not grow per gate."""
    n = 100
    topics = [broker.create_topic(partitions=1) for _ in range(n)]
    triggers = [trigger_for(write_spec(tmp_path / f"g{i}.yaml", broker.bootstrap, t), t, {0: 0}, min_records=1,
                            max_wait_s=120) for i, t in enumerate(topics)]
    threads_before, readers_before = len(os.listdir("/proc/self/task")), new_records.SHARED_READERS.open()
    waiting: set[str] = set()
    all_waiting = threading.Event()
    count = new_records._pending

    def pending(reader, io, starts):
        records = count(reader, io, starts)
        if records == 0:
            waiting.add(io.topic)
            if len(waiting) == n:
                all_waiting.set()
        return records

    monkeypatch.setattr(new_records, "_pending", pending)
    grown: list[int] = []

    def produce_once_all_wait():
        if all_waiting.wait(120):
            grown.append(len(os.listdir("/proc/self/task")) - threads_before)
            for t in topics:
                broker.produce(t, [b"{}"])

    async def run_all():
        return await asyncio.wait_for(asyncio.gather(*(first_event_async(t) for t in triggers)), 180)

    producer = threading.Thread(target=produce_once_all_wait)
    producer.start()
    events = asyncio.run(run_all())
    producer.join()
    assert [e.payload for e in events] == [{"status": "ready", "records": 1}] * n
    # before: 19 threads a gate (751 for 40); now the shared reader's consumer in each thread that polls (the
    # event loop's executor and the reader's own), whatever the number of gates
    assert grown and grown[0] < n, f"{grown} threads more for {n} gates"
    # the last gate to finish closed the clients (an earlier test's abandoned gate may still hold one)
    assert new_records.SHARED_READERS.open() == readers_before


async def first_event_async(trigger: NewRecordsTrigger):
    # run to its end, as Airflow's triggerer does (the trigger returns after its event): its `finally` lets go of
    # the shared reader there and then, not whenever the event loop finalizes an abandoned generator
    events = [event async for event in trigger.run()]
    return events[0]
