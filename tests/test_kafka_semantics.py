"""What only a real Kafka shows, against Apache Kafka itself."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest
from confluent_kafka import Producer

from helpers import SIMPLE, T0, iso, spec_from
from spark_jobs.kafka_source import ReadJob, SplitConsumer, SplitPartition

pytestmark = pytest.mark.kafka

FETCH_RESPONSE = 1_048_576  # librdkafka's max.partition.fetch.bytes: the most one fetch brings of one partition


# ------------------------------------------------------------------------------------------ fetch sizes


def test_a_split_mid_partition_fetches_its_range_not_the_rest_of_the_log(broker):
    topic = broker.create_topic()
    values = [json.dumps({"ts": iso(T0 + timedelta(seconds=i)), "a": str(i), "pad": "x" * 10_000}).encode()
              for i in range(2000)]
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "batch.num.messages": 10})  # 100 KB batches
    for v in values:
        p.produce(topic, v, partition=0)
    assert p.flush(30) == 0
    spec = spec_from(broker.bootstrap, topic, SIMPLE)
    start, end = 600, 700
    received: list[int] = []  # librdkafka's statistics: bytes received from the brokers so far
    props = {"bootstrap.servers": broker.bootstrap, "statistics.interval.ms": 50,
             "stats_cb": lambda s: received.append(json.loads(s)["rx_bytes"])}
    job = ReadJob(spec_raw=spec.to_raw(), created_at=iso(T0), splits=[], output_uri="file:///unused",
                  batch_records=10)  # several polls: statistics are served by the polls after the hold
    offsets, sizes = [], []
    for chunk in SplitConsumer(props, SplitPartition(0, topic, 0, start, end), job, spec).chunks():
        if not offsets:
            # The first chunk is being parsed: a reader that pre-fetches without bound pulls the rest of the
            # log now. A bounded one stops by itself, so its figures do not depend on how long this takes.
            time.sleep(2)
        offsets.extend(chunk.offsets)
        sizes.extend(map(len, chunk.values))
    assert offsets == list(range(start, end))
    needed, rest = sum(sizes), sum(map(len, values[end:]))
    assert received and needed <= max(received), received
    # the range, at most one more fetch response (librdkafka refills its queue once the range is taken from
    # it), and the producer batches cut by the range's ends: far below the 13 MB after the range
    assert max(received) <= needed + FETCH_RESPONSE + 300_000 < rest / 5, (max(received), needed, rest)


def test_split_consumer_bounds_its_queue_by_the_range_and_user_settings_win():
    spec = spec_from("127.0.0.1:9", "t", SIMPLE)
    job = ReadJob(spec_raw=spec.to_raw(), created_at=iso(T0), splits=[], output_uri="file:///unused")

    def conf(start, end, **props):
        return SplitConsumer({"bootstrap.servers": "127.0.0.1:9", **props}, SplitPartition(0, "t", 0, start, end),
                             job, spec).config()

    small = conf(5_000, 5_100)
    assert small["queued.min.messages"] == 100 and small["queued.max.messages.kbytes"] == 16_384
    big = conf(0, 1_000_000)  # a big split keeps librdkafka's large batches
    assert big["queued.min.messages"] == 100_000 and "max.partition.fetch.bytes" not in big
    user = conf(0, 10, **{"queued.min.messages": 7, "queued.max.messages.kbytes": 99, "fetch.queue.backoff.ms": 5})
    assert (user["queued.min.messages"], user["queued.max.messages.kbytes"], user["fetch.queue.backoff.ms"]) == (7, 99, 5)
    assert user["isolation.level"] == "read_committed" and user["enable.auto.commit"] is False
