from __future__ import annotations

from datetime import datetime, timedelta, timezone

from ingest_core.core.spec import DatasourceSpec, parse_spec

T0 = datetime(2026, 3, 2, 10, 0, tzinfo=timezone.utc)  # a Monday

# a dataSchema without rollup: one row per record, `a` and `b` as string dimensions
SIMPLE = {"timestampSpec": {"column": "ts", "format": "iso"}, "dimensionsSpec": {"dimensions": ["a", "b"]},
          "metricsSpec": [{"type": "count", "name": "cnt"}],
          "granularitySpec": {"segmentGranularity": "HOUR", "queryGranularity": "NONE", "rollup": False}}


def iso(dt: datetime) -> str:
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


def http_json(base: str, method: str, path: str, token: str | None = None, body: dict | bytes | None = None):
    """(status, parsed JSON or text) of a request to an Airflow api-server at `base` (`body`: JSON, or bytes sent
    as they are)."""
    import json
    import urllib.error
    import urllib.request

    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(f"{base}{path}", method=method, headers=headers,
                                     data=body if isinstance(body, bytes) or body is None else json.dumps(body).encode())
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            status, text = r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        status, text = exc.code, exc.read().decode()
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def sqlite_store(tmp_path):
    """A fresh metadata store on SQLite in `tmp_path`."""
    from ingest_core.store.metadata import MetadataStore

    store = MetadataStore(f"sqlite:///{tmp_path / 'md.db'}")
    store.upgrade()
    return store


def produce_all(broker, topic: str, events: list[dict], partitions: int) -> None:
    """JSON events, round-robin over the topic's partitions."""
    import json

    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i, e in enumerate(events):
        p.produce(topic, json.dumps(e).encode(), partition=i % partitions)
    assert p.flush(30) == 0


def rows_of(store, datasource: str = "ds") -> list[dict]:
    """The visible rows of a datasource."""
    from ingest_core.store.reader import DatasourceReader

    return DatasourceReader(store, datasource).to_arrow().to_pylist()


def make_spec(bootstrap: str, datasource: str = "wiki", *, topic: str | None = None, topic_pattern: str | None = None,
              tuning: dict | None = None, microbatch: dict | None = None, **io) -> DatasourceSpec:
    io_config = {"inputFormat": {"type": "json"}, "consumerProperties": {"bootstrap.servers": bootstrap}, **io}
    if topic is not None:
        io_config["topic"] = topic
    if topic_pattern is not None:
        io_config["topicPattern"] = topic_pattern
    raw = {
        "type": "kafka",
        "spec": {
            "dataSchema": {"dataSource": datasource, "timestampSpec": {"column": "ts"},
                           "granularitySpec": {"segmentGranularity": "HOUR"}},
            "ioConfig": io_config,
            "tuningConfig": {"type": "kafka", **(tuning or {})},
        },
    }
    if microbatch:
        raw["microbatch"] = microbatch
    return parse_spec(raw, f"<test spec {datasource}>")


def ingest_run(spark, store, spec: DatasourceSpec, run_id: str, deep_storage_uri: str, *, stall_timeout_s: float = 30,
               options=None):
    """Plan a run, run every task group's Spark job in this session, publish: the spine without Airflow.
    Returns (plan, group reports, publish result)."""
    from ingest_core.supervisor.planning import PlanOptions, Supervisor

    supervisor = Supervisor(spec, store)
    supervisor.register()
    plan = supervisor.plan(run_id, options or PlanOptions()).plan
    reports, result = run_and_publish(spark, store, spec, plan, deep_storage_uri, stall_timeout_s=stall_timeout_s)
    return plan, reports, result


def run_and_publish(spark, store, spec: DatasourceSpec, plan, deep_storage_uri: str, *, stall_timeout_s: float = 30):
    """Run every task group of a persisted plan in this session, then publish: (group reports, publish result)."""
    from ingest_core.handover import deep_storage
    from ingest_core.spark.job import GroupJob, run_group
    from ingest_core.store.publisher import GroupResult, Publisher

    reports = []
    for group in plan.groups:
        out = deep_storage.group_uri(deep_storage_uri, spec.datasource, plan.run_id, group.group_id)
        reports.append(run_group(spark, GroupJob.of_plan(spec, plan, group.group_id, 0, out), stall_timeout_s))
    result = Publisher(store).publish(spec.datasource, plan.run_id,
                                      [GroupResult.from_report(r) for r in reports])
    for r in reports:  # as the DAG's publish step keeps them
        store.reports.add(r)
    return reports, result


def spec_from(bootstrap: str, topic: str, data_schema: dict, *, io: dict | None = None, tuning: dict | None = None,
              microbatch: dict | None = None, datasource: str = "ds") -> DatasourceSpec:
    """A spec with a full dataSchema, reading `topic` from the earliest offset."""
    raw = {
        "type": "kafka",
        "spec": {
            "dataSchema": {"dataSource": datasource, **data_schema},
            "ioConfig": {"topic": topic, "useEarliestOffset": True, "inputFormat": {"type": "json"},
                         "consumerProperties": {"bootstrap.servers": bootstrap}, **(io or {})},
            "tuningConfig": {"type": "kafka", **(tuning or {})},
        },
        "microbatch": microbatch or {},
    }
    return parse_spec(raw, f"<test spec {datasource}>")


def group_offsets(broker, group: str, topic: str, partitions: int) -> dict[int, int]:
    """A Kafka consumer group's committed offsets of `topic`, as Kafka's tooling reads them."""
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    request = ConsumerGroupTopicPartitions(group, [KafkaTopicPartition(topic, p) for p in range(partitions)])
    answer = broker.admin.list_consumer_group_offsets([request])[group].result(timeout=30)
    return {tp.partition: tp.offset for tp in answer.topic_partitions}


def broker_connections(bootstrap: str) -> set[tuple]:
    """This process's established TCP connections to the broker at `bootstrap` (their local addresses)."""
    import psutil

    port = int(bootstrap.rsplit(":", 1)[1])
    return {c.laddr for c in psutil.Process().net_connections("tcp")
            if c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED}


def store_connections(url: str) -> set:
    """This process's open connections to the metadata store at `url`: TCP connections to PostgreSQL, or the
    file descriptors open on the SQLite database file (one per connection)."""
    import psutil
    import sqlalchemy as sa

    u = sa.engine.make_url(url)
    if u.get_backend_name() == "sqlite":
        return {f.fd for f in psutil.Process().open_files() if f.path == u.database}
    return {c.laddr for c in psutil.Process().net_connections("tcp")
            if c.raddr and c.raddr.port == u.port and c.status == psutil.CONN_ESTABLISHED}


def plan_next(store, run_id: str, latest: dict, *, created_at=datetime(2026, 11, 22, 10, tzinfo=timezone.utc),
              task_count=2, ds="wiki"):
    """What Supervisor.plan does, with offsets given instead of read from Kafka: persisted, returns the plan."""
    from ingest_core.core.offsets import resolve_start_offsets
    from ingest_core.core.planner import PlanRequest, plan_run

    res = resolve_start_offsets(latest, datasource=ds, inflight=store.runs.inflight_end_offsets(ds),
                                committed=store.offsets.committed(ds), earliest={tp: 0 for tp in latest},
                                latest=latest, use_earliest=True, reset_automatically=False)
    plan = plan_run(PlanRequest(datasource=ds, run_id=run_id, created_at=created_at, starts=res.starts,
                                latest=latest, task_count=task_count))
    return store.runs.insert(plan)[0].plan


def publish_segments(store, tmp_path, run_id: str, latest: dict, tables: list, ds: str = "wiki",
                     hour=datetime(2026, 11, 22, 10, tzinfo=timezone.utc)) -> None:
    """A run planned over `latest` whose task groups wrote `tables` (pyarrow, one segment each, in order)
    into the one-hour interval at `hour`, published by the real publish."""
    import pyarrow.parquet as pq

    from ingest_core.store.publisher import GroupResult, Publisher, SegmentDescriptor

    plan = plan_next(store, run_id, latest, ds=ds)
    results = []
    for group, table in zip((g for g in plan.groups if not g.is_empty), tables):
        path = tmp_path / f"{ds}-{run_id}-{group.group_id}.parquet"
        pq.write_table(table, path)
        results.append(GroupResult(group.group_id, [SegmentDescriptor(
            hour, hour + timedelta(hours=1), path.as_uri(), table.num_rows, path.stat().st_size,
            {"columns": table.column_names})]))
    Publisher(store).publish(ds, run_id, results)


def recreate_topic(broker, topic: str, partitions: int) -> None:
    """Delete `topic` and create it again under the same name (Kafka gives it a new topic id)."""
    import time

    from confluent_kafka import KafkaException
    from confluent_kafka.admin import NewTopic

    broker.admin.delete_topics([topic])[topic].result(timeout=30)
    deadline = time.monotonic() + 60
    while True:  # the name is free once the deletion has completed
        try:
            broker.admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(timeout=30)
            break
        except KafkaException:
            assert time.monotonic() < deadline, f"{topic} could not be created again"
            time.sleep(0.2)
    wait_for_partitions(broker, topic, partitions)


def wait_for_partitions(broker, topic: str, partitions: int, timeout_s: float = 60) -> None:
    """Polls the broker's metadata until `topic` has `partitions` partitions (after a create, a re-create or an
    added partition, which the broker's metadata shows a moment later)."""
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        md = broker.admin.list_topics(topic, timeout=5).topics.get(topic)
        if md is not None and md.error is None and len(md.partitions) == partitions:
            return
        assert time.monotonic() < deadline, f"{topic} does not show {partitions} partitions after {timeout_s}s"
        time.sleep(0.1)


# The tests' own schema-registry clients: every request has a deadline, and the serializers name subjects by
# Confluent's documented TopicNameStrategy. (confluent-kafka's default strategy now first asks the registry for
# `associations`, an endpoint Apicurio never answers: without a deadline that wait was the test's whole limit.)
REGISTRY_TIMEOUT_S = 10
SERDE_CONF = {"use.deprecated.format": False, "subject.name.strategy.type": "TOPIC"}


def registry_client(url: str, **conf):
    from confluent_kafka.schema_registry import SchemaRegistryClient

    return SchemaRegistryClient({"url": url, "timeout": REGISTRY_TIMEOUT_S, "max.retries": 1, **conf})


def avro_serializer(client, schema: str, **conf):
    from confluent_kafka.schema_registry.avro import AvroSerializer

    return AvroSerializer(client, schema, conf={"subject.name.strategy.type": "TOPIC", **conf})


def protobuf_serializer(message_class, client, **conf):
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

    return ProtobufSerializer(message_class, client, {**SERDE_CONF, **conf})


def topic_records(broker, topic: str) -> list:
    """Every record of `topic` a read_committed consumer sees (aborted transactions left out)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    md = broker.admin.list_topics(topic, timeout=10)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "dl-test-reader",
                         "isolation.level": "read_committed", "enable.partition.eof": True,
                         "enable.auto.commit": False})
    parts = sorted(md.topics[topic].partitions)
    consumer.assign([TopicPartition(topic, p, 0) for p in parts])
    out, at_end = [], set()
    try:
        while at_end != set(parts):
            m = consumer.poll(10)
            assert m is not None, f"no record and no end of partition from {topic} in 10s"
            if m.error() is not None:
                assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                at_end.add(m.partition())
            else:
                at_end.discard(m.partition())
                out.append(m)
    finally:
        consumer.close()
    return out


# ------------------------------------------------------------------------------------ waits without a race

# Bounds a hang only, never a speed: a call or a child process still waiting this long is stuck, however loaded
# the machine (what the tests wait for ends by a deadline of seconds, or work of seconds); under pytest-timeout's
# 600 s, so that the test fails with this message.
WATCHDOG_S = 300.0


def ends_by_itself(call, *args, watchdog_s: float = WATCHDOG_S, **kwargs):
    """`call(*args, **kwargs)`'s result, or what it raised, raised here: it runs in a thread of its own, and the test fails
    (instead of hanging with it) if it is still waiting after `watchdog_s`: no deadline ended the wait."""
    import contextvars
    import threading

    import pytest

    outcome: dict = {}

    def run() -> None:
        try:
            outcome["result"] = call(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - raised again in the test's thread
            outcome["error"] = exc

    thread = threading.Thread(target=contextvars.copy_context().run, args=(run,), daemon=True)
    thread.start()
    thread.join(watchdog_s)
    if thread.is_alive():
        pytest.fail(f"still waiting after {watchdog_s:.0f}s: nothing ended the wait (a hang)")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


def wait_for_children(procs, results=None, watchdog_s: float = WATCHDOG_S) -> list:
    """Until every (multiprocessing) process of `procs` has exited and, with a `results` queue, each has put one
    result there: returns them in arrival order. No bound a slow machine can break: it fails at once when a child
    exits with an error or without its result (a crash at import, say; its siblings are terminated, as a barrier
    they wait at would never open), and on a hang only after `watchdog_s`."""
    import multiprocessing.connection
    import queue
    import time

    import pytest

    got: list = []
    expected = len(procs) if results is not None else 0
    deadline = time.monotonic() + watchdog_s
    try:
        while True:
            if results is not None and len(got) < expected:
                try:  # what a child put is in the pipe before it exits (its queue's feeder flushes at exit)
                    got.append(results.get(timeout=0.2))
                    continue
                except queue.Empty:
                    pass
            failed = [p for p in procs if p.exitcode not in (None, 0)]
            if failed:
                pytest.fail("child processes failed: " + ", ".join(f"{p.name} exit code {p.exitcode}" for p in failed))
            if all(p.exitcode == 0 for p in procs):
                if len(got) < expected:
                    pytest.fail(f"{expected - len(got)} of {expected} child processes exited without their result")
                return got
            if time.monotonic() > deadline:
                pytest.fail(f"child processes still running after {watchdog_s:.0f}s (a hang): "
                            + ", ".join(p.name for p in procs if p.exitcode is None))
            multiprocessing.connection.wait([p.sentinel for p in procs if p.exitcode is None], timeout=0.2)
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
            p.join()


def metrics_spec(metrics: list[dict], rollup: bool = True) -> dict:
    """A small Kafka spec (JSON input, dimension `page`, hourly rollup) around `metrics`."""
    return {"type": "kafka", "spec": {
        "dataSchema": {"dataSource": "ds", "timestampSpec": {"column": "ts", "format": "millis"},
                       "dimensionsSpec": {"dimensions": ["page"]}, "metricsSpec": metrics,
                       "granularitySpec": {"queryGranularity": "HOUR", "rollup": rollup}},
        "ioConfig": {"topic": "t", "inputFormat": {"type": "json"},
                     "consumerProperties": {"bootstrap.servers": "localhost:9092"}}}}


def metric_problems(metrics: list[dict]) -> str:
    """What parsing `metrics_spec(metrics)` refuses, as one text."""
    import pytest

    from ingest_core.core.errors import SpecError

    with pytest.raises(SpecError) as info:
        parse_spec(metrics_spec(metrics))
    return str(info.value)
