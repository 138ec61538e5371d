"""The committed offsets mirrored to a Kafka consumer group (ingest_core.kafka.consumer_group), on the real broker: what
Kafka's tooling then shows, and mirrors that cannot be made."""

from __future__ import annotations

import dataclasses
import logging
import time

import pytest
from confluent_kafka import Consumer
from helpers import SIMPLE, group_offsets, spec_from

from ingest_core.core.offsets import TopicPartition
from ingest_core.dev.embedded import free_port
from ingest_core.kafka.consumer_group import mirror_group, mirror_offsets

pytestmark = pytest.mark.kafka


def test_the_committed_offsets_become_the_consumer_group_s_so_kafka_shows_the_lag(broker):
    topic = broker.create_topic(partitions=2)
    broker.produce(topic, [b"x"] * 5, partition=0)
    broker.produce(topic, [b"y"] * 3, partition=1)
    spec = spec_from(broker.bootstrap, topic, SIMPLE, datasource="mirrored")
    assert mirror_group(spec) == "ingest.mirrored"
    assert mirror_offsets(spec, {TopicPartition(topic, 0): 4, TopicPartition(topic, 1): 3})
    assert group_offsets(broker, "ingest.mirrored", topic, 2) == {0: 4, 1: 3}  # lag 1 and 0 in Kafka's tooling
    assert mirror_offsets(spec, {TopicPartition(topic, 0): 5, TopicPartition(topic, 1): 3})  # the next publish
    assert group_offsets(broker, "ingest.mirrored", topic, 2) == {0: 5, 1: 3}
    named = spec_from(broker.bootstrap, topic, SIMPLE, datasource="mirrored", microbatch={"consumerGroup": "team.x"})
    assert mirror_group(named) == "team.x" and mirror_offsets(named, {TopicPartition(topic, 0): 2})
    assert group_offsets(broker, "team.x", topic, 1) == {0: 2}


def test_a_mirror_that_cannot_be_made_logs_and_fails_nothing(broker, caplog):
    topic = broker.create_topic(partitions=1)
    offsets = {TopicPartition(topic, 0): 0}
    off = spec_from(broker.bootstrap, topic, SIMPLE, datasource="quiet", microbatch={"mirrorOffsets": False})
    assert mirror_group(off) is None and not mirror_offsets(off, offsets)
    # a group that someone consumes with: Kafka moves no offsets of a group with members
    busy = spec_from(broker.bootstrap, topic, SIMPLE, datasource="busy")
    member = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "ingest.busy", "auto.offset.reset": "earliest"})
    try:
        member.subscribe([topic])
        deadline = time.monotonic() + 60
        while not member.assignment():
            assert time.monotonic() < deadline, "the member got no partition"
            member.poll(0.5)
        with caplog.at_level(logging.WARNING, logger="ingest_core.kafka.consumer_group"):
            assert not mirror_offsets(busy, offsets)
        assert "not mirrored to consumer group 'ingest.busy'" in caplog.text
    finally:
        member.close()
    # a broker that does not answer
    caplog.clear()
    dead = dataclasses.replace(busy, io_config=dataclasses.replace(
        busy.io_config, consumer_properties={"bootstrap.servers": f"127.0.0.1:{free_port()}"}))
    with caplog.at_level(logging.WARNING, logger="ingest_core.kafka.consumer_group"):
        assert not mirror_offsets(dead, offsets, timeout_s=2)
    assert "not mirrored" in caplog.text


def test_an_empty_consumer_group_name_is_a_spec_error(broker):
    from ingest_core.core.errors import SpecError

    with pytest.raises(SpecError, match="microbatch.consumerGroup: must not be empty"):
        spec_from(broker.bootstrap, "t", SIMPLE, microbatch={"consumerGroup": " "})
