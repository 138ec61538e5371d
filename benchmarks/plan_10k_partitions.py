"""Benchmark: time to plan one run over 10,000 partitions (target: <= 2 s).

Plans a run end to end (discover partitions, earliest + latest offsets in batched requests, start-offset
resolution, planning, persisting the plan) against a real broker and a SQLite metadata store, and compares
it in the same run with the naive way: one ListOffsets request per partition (measured on a sample, scaled).

    python benchmarks/plan_10k_partitions.py                 # starts an embedded Apache Kafka (KRaft) itself
    python benchmarks/plan_10k_partitions.py --bootstrap host:port --partitions 10000   # or any Kafka you name
    python benchmarks/plan_10k_partitions.py --tiny          # 50 partitions, once: that it runs (the tests)
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psutil
from confluent_kafka import Producer
from confluent_kafka import TopicPartition as KTP
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic, OffsetSpec

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ingest_core.core.states import RunEvent
from ingest_core.core.spec import parse_spec  # noqa: E402
from ingest_core.dev.embedded import EmbeddedKafka  # noqa: E402
from ingest_core.kafka.offset_reader import KafkaOffsetReader  # noqa: E402
from ingest_core.store.metadata import MetadataStore
from ingest_core.supervisor.planning import Supervisor  # noqa: E402

# A KRaft controller refuses one operation of more than 10,000 metadata records ("excessively large batch"):
# a topic of 10,000 partitions is created with part of them, then grown.
PARTITIONS_PER_REQUEST = 5_000


def create_topic(admin: AdminClient, topic: str, partitions: int) -> None:
    first = min(partitions, PARTITIONS_PER_REQUEST)
    admin.create_topics([NewTopic(topic, first, 1)])[topic].result(timeout=300)
    total = first
    while total < partitions:
        total = min(partitions, total + PARTITIONS_PER_REQUEST)
        admin.create_partitions([NewPartitions(topic, total)])[topic].result(timeout=300)
    deadline = time.monotonic() + 300
    while len(admin.list_topics(topic, timeout=30).topics[topic].partitions) < partitions:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{topic} did not reach {partitions} partitions in 300 s")
        time.sleep(0.5)


def _cpu(proc: psutil.Process | None) -> float:
    if proc is None:
        return 0.0
    t = proc.cpu_times()
    return t.user + t.system


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", help="an existing Kafka (host:port); default: start an embedded one")
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--naive-sample", type=int, default=200)
    ap.add_argument("--tiny", action="store_true", help="50 partitions, one plan, 10 naive requests: measures nothing")
    args = ap.parse_args()
    if args.tiny:  # new defaults; the sizes given on the command line still win
        ap.set_defaults(partitions=50, repeat=1, naive_sample=10)
        args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="plan-bench-"))
    kafka = None
    bootstrap = args.bootstrap
    if not bootstrap:
        # 10,000 partitions' metadata and log objects want more than the tests' 512 MiB heap
        kafka = EmbeddedKafka(work / "kafka", heap="1g").start()
        bootstrap = kafka.bootstrap
    reader = None
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        topic = f"bench-{uuid.uuid4().hex[:8]}"
        t0 = time.perf_counter()
        create_topic(admin, topic, args.partitions)
        print(f"created {topic} with {args.partitions} partitions in {time.perf_counter() - t0:.1f} s", flush=True)
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "log_level": 3})
        for p in range(0, args.partitions, 7):  # some partitions hold data, most are empty
            producer.produce(topic, b'{"ts": 0}', partition=p)
        producer.flush(120)
        del producer

        spec = parse_spec({"type": "kafka", "spec": {
            "dataSchema": {"dataSource": "bench"},
            "ioConfig": {"topic": topic, "inputFormat": {"type": "json"}, "taskCount": 8, "useEarliestOffset": True,
                         "consumerProperties": {"bootstrap.servers": bootstrap}}}})
        store = MetadataStore(f"sqlite:///{work / 'metadata.db'}")
        store.upgrade()
        reader = KafkaOffsetReader.for_spec(spec)  # one reader for every repeat: the planning step, not the connect
        sup = Supervisor(spec, store, reader=reader)
        broker = psutil.Process(kafka.proc.pid) if kafka is not None else None
        times, cpus, broker_cpus = [], [], []
        for i in range(args.repeat):
            b0 = _cpu(broker)
            c0 = time.process_time()  # every thread of this process, librdkafka's included
            t0 = time.perf_counter()
            record = sup.plan(f"bench-{i}")
            times.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
            broker_cpus.append(_cpu(broker) - b0)
            store.runs.move("bench", f"bench-{i}", RunEvent.FAIL)
        plan = record.plan
        assert len(plan.partitions) == args.partitions

        # Baseline: one ListOffsets request per partition (earliest + latest), on a sample, scaled up.
        sample = [KTP(topic, p) for p in range(min(args.naive_sample, args.partitions))]
        t0 = time.perf_counter()
        for ktp in sample:
            for spec_ in (OffsetSpec.earliest(), OffsetSpec.latest()):
                admin.list_offsets({ktp: spec_})[ktp].result()
        naive = (time.perf_counter() - t0) / len(sample) * args.partitions

        best, median = min(times), statistics.median(times)
        print(f"partitions                         {args.partitions}")
        print(f"task groups / splits               {len(plan.groups)} / {sum(len(g.splits) for g in plan.groups)}")
        print(f"plan run, batched (best / median)  {best:.3f} s / {median:.3f} s   (target <= 2 s: "
              f"{'met' if median <= 2 else 'NOT met'})")
        print(f"plan run CPU (median)              {statistics.median(cpus):.3f} s in this process"
              + (f", {statistics.median(broker_cpus):.3f} s in the broker" if broker is not None else "")
              + f"   (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
        print(f"offsets one request per partition  {naive:.3f} s   (scaled from {len(sample)} partitions)")
        print(f"ratio naive / batched              {naive / best:.1f}x", flush=True)
        admin.delete_topics([topic])
    finally:
        # close the clients before the broker goes, or librdkafka logs every refused reconnect
        if reader is not None:
            reader.close()
        reader = admin = None
        gc.collect()
        if kafka is not None:
            kafka.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
