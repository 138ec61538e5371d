"""The data gate's trigger against the real broker: it fires when enough new records arrive, and at maxWait
with what there is. (The gate inside a DAG run is in test_dag.py.)"""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import datetime, timedelta, timezone

import pytest
import yaml

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


def test_fires_once_enough_records_arrive_past_the_starts(tmp_path, broker):
    topic = broker.create_topic(partitions=2)
    broker.produce(topic, [b"{}"] * 30, partition=0)  # before the starts: not new
    spec_path = write_spec(tmp_path / "gated.yaml", broker.bootstrap, topic)
    trigger = trigger_for(spec_path, topic, {0: 30, 1: 0}, min_records=50, max_wait_s=120)

    def produce_later():
        time.sleep(1.5)
        broker.produce(topic, [b"{}"] * 20, partition=0)
        time.sleep(1.0)
        broker.produce(topic, [b"{}"] * 30, partition=1)

    producer = threading.Thread(target=produce_later)
    started = time.monotonic()
    producer.start()
    event = first_event(trigger)
    producer.join()
    assert event.payload == {"status": "ready", "records": 50}
    assert 2.5 <= time.monotonic() - started < 60  # released by the data, not by maxWait


def test_ends_at_max_wait_with_what_there_is(tmp_path, broker):
    topic = broker.create_topic(partitions=1)
    spec_path = write_spec(tmp_path / "idle.yaml", broker.bootstrap, topic)
    started = time.monotonic()
    event = first_event(trigger_for(spec_path, topic, {0: 0}, min_records=10, max_wait_s=2))
    assert event.payload == {"status": "max_wait", "records": 0, "error": None}
    assert 2 <= time.monotonic() - started < 30
    broker.produce(topic, [b"{}"] * 3)
    event = first_event(trigger_for(spec_path, topic, {0: 0}, min_records=10, max_wait_s=1))
    assert event.payload == {"status": "max_wait", "records": 3, "error": None}


def test_round_trips_through_its_serialized_form(tmp_path):
    trigger = NewRecordsTrigger("/x/spec.yaml", [["t", 0, 5]], 10, "2026-01-01T00:00:00+00:00", 2.0)
    classpath, kwargs = trigger.serialize()
    assert classpath == "ingest_core.provider.triggers.new_records.NewRecordsTrigger"
    again = NewRecordsTrigger(**kwargs)
    assert again.serialize() == (classpath, kwargs)
