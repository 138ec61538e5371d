"""KafkaOffsetReader against the real broker."""

import socket
import time
import uuid
from datetime import datetime, timedelta, timezone

import pytest
from confluent_kafka import TopicPartition as KTP
from confluent_kafka.admin import NewPartitions
from helpers import ends_by_itself

from ingest_core.core.errors import BrokerUnavailableError, TopicNotFoundError
from ingest_core.core.offsets import TopicPartition
from ingest_core.kafka.config import KafkaClientConfig
from ingest_core.kafka.offset_reader import KafkaOffsetReader


def reader_for(bootstrap, timeout_s=15.0):
    return KafkaOffsetReader(KafkaClientConfig.from_properties({"bootstrap.servers": bootstrap}), timeout_s=timeout_s)


def test_discovery_picks_up_new_partitions(broker):
    topic = broker.create_topic(2)
    reader = reader_for(broker.bootstrap)
    assert reader.partitions(topic=topic) == [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    broker.admin.create_partitions([NewPartitions(topic, 4)])[topic].result(timeout=30)
    deadline = time.monotonic() + 30
    while len(reader.partitions(topic=topic)) < 4 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert reader.partitions(topic=topic) == [TopicPartition(topic, p) for p in range(4)]


def test_topic_pattern_matches_whole_names_and_new_topics(broker):
    prefix = f"pat{uuid.uuid4().hex[:6]}"
    a = broker.create_topic(1, f"{prefix}-clicks")
    broker.create_topic(1, f"x-{prefix}-clicks")  # partial match: excluded, like Druid
    reader = reader_for(broker.bootstrap)
    assert reader.partitions(pattern=f"{prefix}-.*") == [TopicPartition(a, 0)]
    b = broker.create_topic(2, f"{prefix}-views")
    assert reader.partitions(pattern=f"{prefix}-.*") == [TopicPartition(a, 0), TopicPartition(b, 0), TopicPartition(b, 1)]


def test_missing_topic_is_a_clear_error(broker):
    with pytest.raises(TopicNotFoundError, match="does-not-exist.*does not exist"):
        reader_for(broker.bootstrap).partitions(topic="does-not-exist")


def test_earliest_latest_and_by_time(broker):
    topic = broker.create_topic(2)
    now = datetime.now(timezone.utc)
    old = int((now - timedelta(minutes=30)).timestamp() * 1000)
    new = int((now - timedelta(minutes=5)).timestamp() * 1000)
    broker.produce(topic, [b"a"] * 3, partition=0, timestamp_ms=old)
    broker.produce(topic, [b"b"] * 4, partition=0, timestamp_ms=new)
    broker.produce(topic, [b"c"] * 2, partition=1, timestamp_ms=old)
    reader = reader_for(broker.bootstrap)
    tps = reader.partitions(topic=topic)
    assert reader.earliest(tps) == {tps[0]: 0, tps[1]: 0}
    assert reader.latest(tps) == {tps[0]: 7, tps[1]: 2}
    at = reader.offsets_at(tps, now - timedelta(minutes=10))
    assert at == {tps[0]: 3, tps[1]: None}  # None: no record that late yet
    broker.admin.delete_records([KTP(topic, 0, 2)])[KTP(topic, 0, 2)].result(timeout=30)
    assert reader.earliest(tps)[tps[0]] == 2


def test_unreachable_broker_fails_fast_and_clearly():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    reader = reader_for(f"127.0.0.1:{port}", timeout_s=3)
    with pytest.raises(BrokerUnavailableError, match=f"127.0.0.1:{port}.*did not answer.*within 3s"):
        ends_by_itself(reader.partitions, topic="anything")  # the reader's deadline ends it; a hang fails


def test_queries_in_slices_give_the_same_offsets(broker):
    topic = broker.create_topic(5)
    for p in range(5):
        broker.produce(topic, [b"x"] * (p + 1), partition=p)
    reader = reader_for(broker.bootstrap)
    tps = reader.partitions(topic=topic)
    whole = reader.latest(tps)
    reader.max_partitions_per_request = 2  # three requests: 2 + 2 + 1 partitions
    assert reader.latest(tps) == whole == {tp: tp.partition + 1 for tp in tps}
    assert reader.earliest(tps) == {tp: 0 for tp in tps}


def test_close_drops_every_thread_s_connection_to_the_broker(broker):
    from helpers import broker_connections

    topic = broker.create_topic(4)
    before = broker_connections(broker.bootstrap)
    reader = reader_for(broker.bootstrap)
    reader.snapshot(reader.partitions(topic=topic))  # the snapshot's queries run on the pool's threads
    opened = broker_connections(broker.bootstrap) - before
    assert opened
    reader.close()
    assert not opened & broker_connections(broker.bootstrap)
