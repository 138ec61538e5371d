"""What only a real Kafka shows: fetch sizes, transactions, compaction, truncation, partition growth and a
broker restart, each against Apache Kafka itself (the session's broker, or an own one for the restart)."""

from __future__ import annotations

import json
import time
import uuid
from datetime import timedelta

import pytest
from confluent_kafka import Producer
from helpers import (
    SIMPLE,
    T0,
    ends_by_itself,
    ingest_run,
    iso,
    produce_all,
    recreate_topic,
    rows_of,
    run_and_publish,
    spec_from,
    sqlite_store,
    wait_for_partitions,
)

from ingest_core.core.errors import TopicNotFoundError
from ingest_core.spark.kafka_source import ReadJob, SplitConsumer, SplitPartition
from ingest_core.store.metadata import MetadataStore

pytestmark = pytest.mark.kafka

FETCH_RESPONSE = 1_048_576  # librdkafka's max.partition.fetch.bytes: the most one fetch brings of one partition


@pytest.fixture
def store(tmp_path) -> MetadataStore:
    with sqlite_store(tmp_path) as s:
        yield s


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
    job = ReadJob(spec=spec, created_at=T0, splits=(), output_uri="file:///unused",
                  batch_records=10)  # several polls: statistics are served by the polls after the hold
    offsets, sizes = [], []
    for chunk in SplitConsumer(props, SplitPartition(0, topic, 0, start, end), job).chunks():
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
    job = ReadJob(spec=spec, created_at=T0, splits=(), output_uri="file:///unused")

    def conf(start, end, **props):
        return SplitConsumer({"bootstrap.servers": "127.0.0.1:9", **props}, SplitPartition(0, "t", 0, start, end),
                             job).config()

    small = conf(5_000, 5_100)
    assert small["queued.min.messages"] == 100 and small["queued.max.messages.kbytes"] == 16_384
    big = conf(0, 1_000_000)  # a big split keeps librdkafka's large batches
    assert big["queued.min.messages"] == 100_000 and "max.partition.fetch.bytes" not in big
    user = conf(0, 10, **{"queued.min.messages": 7, "queued.max.messages.kbytes": 99, "fetch.queue.backoff.ms": 5})
    assert [user[k] for k in ("queued.min.messages", "queued.max.messages.kbytes", "fetch.queue.backoff.ms")] == [7, 99, 5]
    assert user["isolation.level"] == "read_committed" and user["enable.auto.commit"] is False


def test_a_split_whose_topic_or_partition_is_gone_is_named_not_waited_out(broker):
    """A split asks for its topic's metadata only once a poll brings nothing (a healthy read never does: it saves
    a request per split): a topic deleted after the plan, or a partition that is not there, is still named, well
    before the stall timeout (600 s here; the watchdog fails the test long before it)."""
    topic = broker.create_topic()
    spec = spec_from(broker.bootstrap, topic, SIMPLE)
    job = ReadJob(spec=spec, created_at=T0, splits=(), output_uri="file:///unused", stall_timeout_s=600)
    for gone, partition in ((f"gone-{uuid.uuid4().hex[:8]}", 0), (topic, 5)):
        consumer = SplitConsumer({"bootstrap.servers": broker.bootstrap}, SplitPartition(0, gone, partition, 0, 10),
                                 job)
        with pytest.raises(TopicNotFoundError, match=f"{gone}/{partition} does not exist"):
            ends_by_itself(lambda c=consumer: list(c.chunks()), watchdog_s=60)


# ------------------------------------------------------------------------------------------ transactions


def test_read_committed_ingests_exactly_the_committed_records_of_interleaved_transactions(
        spark, broker, store, tmp_path):
    """Two transactional producers write into one partition at once: one commits, the other aborts; plain
    records fall in between; a third transaction is still open when the first run is planned."""
    topic = broker.create_topic()
    kept, aborted, log = [], [], []  # record ids; (offset, id) of every data record, from delivery reports

    def producer(tx: str | None) -> Producer:
        conf = {"bootstrap.servers": broker.bootstrap, "linger.ms": 0}
        if tx:
            conf["transactional.id"] = f"{tx}-{topic}"
        p = Producer(conf)
        if tx:
            p.init_transactions(30)
        return p

    def send(p: Producer, kind: str, n: int) -> list[str]:
        ids = [f"{kind}{len(log) + i}" for i in range(n)]
        for rid in ids:
            p.produce(topic, json.dumps({"ts": iso(T0 + timedelta(seconds=len(log))), "a": kind, "b": rid}).encode(),
                      on_delivery=lambda err, m, rid=rid: log.append((m.offset(), rid)))
        assert p.flush(30) == 0  # in log order: the producers' records interleave
        return ids

    committer, aborter, plain = producer("commit"), producer("abort"), producer(None)
    for _ in range(3):
        committer.begin_transaction()
        aborter.begin_transaction()
        for _ in range(3):
            kept += send(committer, "c", 4)
            aborted += send(aborter, "x", 3)
            kept += send(plain, "p", 2)
        committer.commit_transaction(30)
        aborter.abort_transaction(30)
    late = producer("late")  # open while the first run is planned: the last stable offset stops before it
    late.begin_transaction()
    late_ids = send(late, "l", 5)
    committer.begin_transaction()
    after_open = send(committer, "c", 4)  # committed, but above the open transaction
    committer.commit_transaction(30)
    first_open = min(o for o, rid in log if rid in late_ids)

    spec = spec_from(broker.bootstrap, topic, SIMPLE, microbatch={"minSplitsPerGroup": 4})
    plan, reports, _ = ingest_run(spark, store, spec, "r1", tmp_path.as_uri())
    assert plan.groups[0].partitions[0].end == first_open and len(plan.groups[0].splits) == 4
    assert sorted(r["b"] for r in rows_of(store)) == sorted(kept)
    # offsets hold markers and aborted records, so the splits ended at their end offsets, not at a record
    assert reports[0].records == len(kept) < first_open

    dirty = spec_from(broker.bootstrap, topic, SIMPLE, datasource="dirty",
                      io={"consumerProperties": {"bootstrap.servers": broker.bootstrap,
                                                 "isolation.level": "read_uncommitted"}})
    dirty_plan, _, _ = ingest_run(spark, store, dirty, "r1", tmp_path.as_uri())
    assert dirty_plan.groups[0].partitions[0].end > max(o for o, _ in log)  # the high watermark
    assert sorted(r["b"] for r in rows_of(store, "dirty")) == sorted(rid for _, rid in log)  # aborted ones too

    late.commit_transaction(30)
    plan2, reports2, _ = ingest_run(spark, store, spec, "r2", tmp_path.as_uri())
    assert plan2.groups[0].partitions[0].start == first_open
    assert reports2[0].records == len(late_ids) + len(after_open)
    ids = [r["b"] for r in rows_of(store)]
    assert sorted(ids) == sorted(kept + late_ids + after_open) and not set(ids) & set(aborted)  # each once


# ------------------------------------------------------------------------------------------ compaction


def read_partition(bootstrap: str, topic: str, partition: int = 0) -> list[tuple[int, bytes | None, bytes]]:
    """(offset, key, value) of every record the partition holds now, read with a plain consumer."""
    from confluent_kafka import Consumer, KafkaError
    from confluent_kafka import TopicPartition as KTP

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "test-reader", "enable.auto.commit": False,
                  "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    try:
        c.assign([KTP(topic, partition, 0)])
        out, deadline = [], time.monotonic() + 30
        while time.monotonic() < deadline:
            for m in c.consume(1000, 1.0):
                if m.error() is None:
                    out.append((m.offset(), m.key(), m.value()))
                elif m.error().code() == KafkaError._PARTITION_EOF:
                    return out
                else:
                    raise AssertionError(m.error())
        raise AssertionError(f"{topic}/{partition} not read to its end in 30s")
    finally:
        c.close()


def test_compacted_topic_ingests_the_surviving_records_and_splits_finish_at_gaps(spark, broker, store, tmp_path):
    import random

    topic = broker.create_topic(config={"cleanup.policy": "compact", "segment.ms": "100",
                                        "min.cleanable.dirty.ratio": "0.01", "min.compaction.lag.ms": "0"})
    rnd = random.Random(5)
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})

    def send(key: str, rid: str) -> None:
        p.produce(topic, json.dumps({"ts": iso(T0), "a": key, "b": rid}).encode(), key=key.encode())

    keys = [f"k{rnd.randrange(25)}" for _ in range(400)]
    for i, key in enumerate(keys):
        send(key, f"r{i}")
    assert p.flush(30) == 0
    # The cleaner compacts closed segments only. Each filler (a key of its own, never compacted) comes more
    # than segment.ms after the last, so it rolls a new segment; poll until no key of the data repeats.
    deadline, fillers = time.monotonic() + 90, 0
    while True:
        send(f"filler{fillers}", f"f{fillers}")
        fillers += 1
        assert p.flush(30) == 0
        survivors = read_partition(broker.bootstrap, topic)
        data_keys = [k for _, k, _ in survivors if not k.startswith(b"filler")]
        if len(data_keys) == len(set(data_keys)):
            break  # compacted; with no key left twice, no later cleaning changes the log
        assert time.monotonic() < deadline, f"not compacted in 90s: {len(survivors)} records left"
        time.sleep(0.2)
    assert len(set(data_keys)) == len(set(keys))
    offsets = [o for o, _, _ in survivors]
    assert offsets[-1] + 1 == len(keys) + fillers and len(data_keys) < len(keys) / 10  # mostly gaps

    spec = spec_from(broker.bootstrap, topic, SIMPLE, microbatch={"maxRecordsPerSplit": 40})
    # a split waiting for a missing offset would fail after the stall timeout instead
    plan, reports, _ = ingest_run(spark, store, spec, "r1", tmp_path.as_uri(), stall_timeout_s=20)
    assert (plan.groups[0].partitions[0].start, plan.groups[0].partitions[0].end) == (0, offsets[-1] + 1)
    splits = plan.groups[0].splits
    per_split = [sum(1 for o in offsets if s.start <= o < s.end) for s in splits]
    assert len(splits) >= 10 and 0 in per_split  # some splits hold no record at all
    assert [s.records for s in reports[0].splits] == per_split
    want = sorted(json.loads(v)["b"] for _, _, v in survivors)
    assert sorted(r["b"] for r in rows_of(store)) == want


# ------------------------------------------------------------------------------------------ truncation


def numbered(n: int, start: int = 0) -> list[bytes]:
    return [json.dumps({"ts": iso(T0 + timedelta(seconds=i)), "a": "x", "b": str(i)}).encode()
            for i in range(start, start + n)]


def ids_of(store, datasource: str = "ds") -> list[int]:
    return sorted(int(r["b"]) for r in rows_of(store, datasource))


def delete_records_before(broker, topic: str, offset: int, partition: int = 0) -> None:
    from confluent_kafka import TopicPartition as KTP

    tp = KTP(topic, partition, offset)
    assert broker.admin.delete_records([tp])[tp].result(timeout=30).low_watermark == offset  # the new log start


def test_truncation_below_the_committed_offset_stops_the_run_or_resets_to_earliest(spark, broker, store, tmp_path):
    from ingest_core.core.errors import OffsetOutOfRangeError
    from ingest_core.core.offsets import StartSource

    topic = broker.create_topic()
    broker.produce(topic, numbered(10))
    strict = spec_from(broker.bootstrap, topic, SIMPLE)
    ingest_run(spark, store, strict, "r1", tmp_path.as_uri())  # committed: 10
    broker.produce(topic, numbered(20, 10))
    delete_records_before(broker, topic, 18)  # 10..17 are gone unread

    with pytest.raises(OffsetOutOfRangeError) as info:
        ingest_run(spark, store, strict, "r2", tmp_path.as_uri())
    message = str(info.value)
    assert "start offset 10" in message and "log start offset 18" in message
    assert f"`ingest set-offsets ds {topic}:0=earliest`" in message and "ingest reset" not in message
    assert "resetOffsetAutomatically" in message
    assert store.runs.get("ds", "r2") is None and ids_of(store) == list(range(10))
    assert [k.offset for k in store.offsets.committed("ds").values()] == [10]

    lenient = spec_from(broker.bootstrap, topic, SIMPLE, tuning={"resetOffsetAutomatically": True})
    plan, reports, _ = ingest_run(spark, store, lenient, "r2", tmp_path.as_uri())
    part = plan.groups[0].partitions[0]
    assert (part.start, part.end, part.start_source) == (18, 30, StartSource.RESET_EARLIEST)
    (audit,) = [a for a in store.audit_log.records("ds") if a.action == "auto_reset"]
    assert (audit.details["fromOffset"], audit.details["toOffset"], audit.details["runId"]) == (10, 18, "r2")
    assert reports[0].records == 12 and ids_of(store) == list(range(10)) + list(range(18, 30))
    assert [k.offset for k in store.offsets.committed("ds").values()] == [30]


def test_truncation_between_plan_and_job_fails_the_job_and_publishes_nothing(spark, broker, store, tmp_path):
    from ingest_core.core.errors import NothingSucceededError, OffsetOutOfRangeError
    from ingest_core.core.offsets import OffsetRequest
    from ingest_core.handover import deep_storage
    from ingest_core.supervisor.actions import DatasourceActions
    from ingest_core.spark.job import GroupJob, run_group
    from ingest_core.store.records import RunStatus
    from ingest_core.store.publisher import Publisher
    from ingest_core.supervisor.planning import Supervisor

    topic = broker.create_topic()
    broker.produce(topic, numbered(10))
    spec = spec_from(broker.bootstrap, topic, SIMPLE)
    ingest_run(spark, store, spec, "r1", tmp_path.as_uri())
    broker.produce(topic, numbered(20, 10))
    plan = Supervisor(spec, store).plan("r2").plan  # [10, 30)
    delete_records_before(broker, topic, 15)
    job = GroupJob.of_plan(spec, plan, 0, 0, deep_storage.group_uri(tmp_path.as_uri(), "ds", "r2", 0))
    with pytest.raises(OffsetOutOfRangeError) as info:
        run_group(spark, job, stall_timeout_s=20)
    message = str(info.value)
    assert f"cannot read {topic}/0 [10, 30): offset 10 is below the log start 15" in message
    # the advice moves only this partition: a reset would re-read every other one
    assert "Nothing was committed" in message and f"`ingest set-offsets ds {topic}:0=earliest`" in message
    assert "ingest reset" not in message
    report = deep_storage.read_json(deep_storage.join(job.attempt_uri, "report.json"))
    assert report["state"] == "FAILED" and report["error"] == message
    with pytest.raises(NothingSucceededError, match="every task group with records failed"):
        Publisher(store).publish("ds", "r2", [])  # the publish step: no group succeeded
    assert store.runs.get("ds", "r2").status is not RunStatus.PUBLISHED  # never shown as published
    assert [k.offset for k in store.offsets.committed("ds").values()] == [10] and ids_of(store) == list(range(10))

    # what the message says to do: accept the loss, then the next run reads from the new log start
    DatasourceActions(store, None, "tester").set_offsets("ds", [OffsetRequest(topic, 0, "earliest")], spec)
    ingest_run(spark, store, spec, "r3", tmp_path.as_uri())
    assert ids_of(store) == list(range(10)) + list(range(15, 30))


def test_a_topic_recreated_while_a_run_is_in_flight_is_not_published(spark, broker, store, tmp_path):
    """The run was planned from the old topic; its job reads the new one, which holds the planned offsets too:
    the records read are another log's, and publishing them would skip the new log's first records."""
    from ingest_core.core.errors import NothingSucceededError, TopicRecreatedError
    from ingest_core.handover import deep_storage
    from ingest_core.spark.job import GroupJob, run_group
    from ingest_core.store.publisher import Publisher
    from ingest_core.supervisor.planning import Supervisor

    topic = broker.create_topic()
    broker.produce(topic, numbered(10))
    spec = spec_from(broker.bootstrap, topic, SIMPLE)
    ingest_run(spark, store, spec, "r1", tmp_path.as_uri())
    broker.produce(topic, numbered(10, 10))
    plan = Supervisor(spec, store).plan("r2").plan  # [10, 20) of the old topic
    recreate_topic(broker, topic, 1)
    broker.produce(topic, numbered(25, 100))  # the new log's offsets 10..19 hold records 110..119
    job = GroupJob.of_plan(spec, plan, 0, 0, deep_storage.group_uri(tmp_path.as_uri(), "ds", "r2", 0))
    with pytest.raises(TopicRecreatedError, match=f"topic {topic!r} was deleted and re-created while the run read"):
        run_group(spark, job, stall_timeout_s=20)
    with pytest.raises(NothingSucceededError):
        Publisher(store).publish("ds", "r2", [])
    assert ids_of(store) == list(range(10)) and [k.offset for k in store.offsets.committed("ds").values()] == [10]
    with pytest.raises(TopicRecreatedError, match="ingest set-offsets ds"):  # and the next plan names the choice
        Supervisor(spec, store).plan("r3")


# ------------------------------------------------------------------------------------------ partition growth


def test_partitions_added_while_a_run_is_in_flight_are_read_from_earliest_by_the_next_run(
        spark, broker, store, tmp_path):
    from confluent_kafka.admin import NewPartitions

    from ingest_core.core.offsets import StartSource, TopicPartition
    from ingest_core.supervisor.planning import Supervisor

    topic = broker.create_topic(partitions=2)
    produce_all(broker, topic, [{"ts": iso(T0), "a": "x", "b": str(i)} for i in range(20)], partitions=2)
    spec = spec_from(broker.bootstrap, topic, SIMPLE, io={"taskCount": 2})
    r1 = Supervisor(spec, store).plan("r1").plan  # two partitions, 10 records each
    broker.admin.create_partitions([NewPartitions(topic, 4)])[topic].result(timeout=30)
    wait_for_partitions(broker, topic, 4)
    # records for every partition, old and new, while r1 is in flight (its job not run yet)
    produce_all(broker, topic, [{"ts": iso(T0), "a": "x", "b": str(i)} for i in range(20, 60)], partitions=4)
    run_and_publish(spark, store, spec, r1, tmp_path.as_uri())
    assert ids_of(store) == list(range(20))

    r2, reports, _ = ingest_run(spark, store, spec, "r2", tmp_path.as_uri())
    starts = {p.tp.partition: (p.start, p.end, p.start_source) for p in r2.partitions}
    assert starts == {0: (10, 20, StartSource.COMMITTED), 1: (10, 20, StartSource.COMMITTED),
                      2: (0, 10, StartSource.NEW_PARTITION), 3: (0, 10, StartSource.NEW_PARTITION)}
    assert sum(r.records for r in reports) == 40
    assert ids_of(store) == list(range(60))  # every record once, over both runs
    assert {tp: k.offset for tp, k in store.offsets.committed("ds").items()} == {
        TopicPartition(topic, p): 20 if p < 2 else 10 for p in range(4)}


# ------------------------------------------------------------------------------------------ broker restart


@pytest.fixture(scope="module")
def own_kafka(tmp_path_factory):
    """A broker of this module's own, to restart (never the session's, nor INGEST_TEST_KAFKA's)."""
    from ingest_core.dev.embedded import EmbeddedKafka

    # C1 only: a broker that lives a minute and restarts twice starts twice as fast
    kafka = EmbeddedKafka(tmp_path_factory.mktemp("own-kafka"), jvm_options=["-XX:TieredStopAtLevel=1"])
    try:
        kafka.start()
    except RuntimeError as exc:
        pytest.fail(str(exc))
    yield kafka
    kafka.stop()


STALL_TIMEOUT = 60  # seconds without progress before a split fails


def records_read(progress_uri: str) -> int:
    """How far a split got, from the progress report it rewrites as it reads."""
    from ingest_core.handover import deep_storage

    try:
        return deep_storage.read_json(progress_uri)["records"]
    except FileNotFoundError:
        return 0


def test_broker_restarts_mid_job_neither_hang_it_nor_lose_or_double_a_record(spark, own_kafka, store, tmp_path):
    """A controlled shutdown, then a crash (SIGKILL), each while the job reads: it finishes with exactly the
    planned records, or fails with a clear error within the stall timeout and the same plan run again does."""
    import threading

    from conftest import Broker

    from ingest_core.core.errors import BrokerUnavailableError
    from ingest_core.handover import deep_storage
    from ingest_core.spark.job import GroupJob, run_group
    from ingest_core.store.publisher import GroupResult, Publisher
    from ingest_core.supervisor.planning import Supervisor

    topic = Broker(own_kafka.bootstrap).create_topic()
    n = 1500
    p = Producer({"bootstrap.servers": own_kafka.bootstrap, "linger.ms": 5, "batch.num.messages": 20})
    for v in numbered(n):
        p.produce(topic, v)
    assert p.flush(30) == 0
    del p  # no client of the test's own reconnects while the broker is down
    # Each fetch waits fetch.wait.max.ms on the broker for bytes it never gets (a response holds one batch of
    # 20 records at most), so the job reads ~200 records/s and needs the broker until its last record. The
    # client reconnects within a second of the broker's return (librdkafka's default backs off up to 10 s).
    spec = spec_from(own_kafka.bootstrap, topic, SIMPLE, io={"consumerProperties": {
        "bootstrap.servers": own_kafka.bootstrap, "max.partition.fetch.bytes": 2000, "fetch.min.bytes": 10_000_000,
        "fetch.wait.max.ms": 100, "reconnect.backoff.max.ms": 1000}}, tuning={"maxRecordsPerPoll": 20})
    plan = Supervisor(spec, store).plan("r1").plan
    out = deep_storage.group_uri(tmp_path.as_uri(), "ds", "r1", 0)
    first = GroupJob.of_plan(spec, plan, 0, 0, out, progress_interval_s=0.1)
    progress = deep_storage.join(first.attempt_uri, "progress", "split-00000.json")
    outcome: dict = {}

    def job():
        try:
            outcome["report"] = run_group(spark, first, STALL_TIMEOUT)
        except Exception as exc:  # noqa: BLE001 - the test looks at it
            outcome["error"] = exc

    runner = threading.Thread(target=job, daemon=True)
    runner.start()
    read_before, restarts = 0, 0
    for graceful in (True, False):
        deadline = time.monotonic() + 120
        while runner.is_alive() and records_read(progress) <= read_before:  # reading (again)
            assert time.monotonic() < deadline, "the job does not read"
            time.sleep(0.05)
        if not runner.is_alive():
            break  # it failed after the last restart: see below
        own_kafka.stop(graceful=graceful)
        read = records_read(progress)
        assert read_before < read < n and runner.is_alive()  # the broker went away mid-read
        read_before = read
        own_kafka.start()
        restarts += 1
    runner.join(STALL_TIMEOUT + 120)
    assert not runner.is_alive(), "the job hangs"
    assert restarts == 2 or (restarts == 1 and "error" in outcome), outcome  # both restarts hit a reading job
    if "error" in outcome:  # a clear error; the same plan run again ingests everything
        assert isinstance(outcome["error"], BrokerUnavailableError), outcome["error"]
        outcome["report"] = run_group(spark, GroupJob.of_plan(spec, plan, 0, 0, out), STALL_TIMEOUT)
    report = outcome["report"]
    assert report.records == n and report.splits[0].last_offset == n - 1
    Publisher(store).publish("ds", "r1", [GroupResult.from_report(report)])
    assert ids_of(store) == list(range(n))  # none lost, none twice
