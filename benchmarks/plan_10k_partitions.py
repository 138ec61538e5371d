"""Benchmark: time to plan one run over 10,000 partitions (target: <= 2 s).

Plans a run end to end (discover partitions, earliest + latest offsets in batched requests, start-offset
resolution, planning, persisting the plan) against a real broker and a SQLite metadata store, and compares
it in the same run with the naive way: one ListOffsets request per partition (measured on a sample, scaled).

    python benchmarks/plan_10k_partitions.py                 # starts noida-db's broker itself
    python benchmarks/plan_10k_partitions.py --bootstrap host:port --partitions 10000
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka import TopicPartition as KTP
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ingest_core.embedded import EmbeddedKafka  # noqa: E402
from ingest_core.metadata import MetadataStore  # noqa: E402
from ingest_core.spec import parse_spec  # noqa: E402
from ingest_core.supervisor import Supervisor  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap")
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--naive-sample", type=int, default=200)
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="plan-bench-"))
    kafka = None
    bootstrap = args.bootstrap
    if not bootstrap:
        kafka = EmbeddedKafka(work / "kafka").start()
        bootstrap = kafka.bootstrap
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        topic = f"bench-{uuid.uuid4().hex[:8]}"
        admin.create_topics([NewTopic(topic, args.partitions, 1)])[topic].result(timeout=300)
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
        for p in range(0, args.partitions, 7):  # some partitions hold data, most are empty
            producer.produce(topic, b'{"ts": 0}', partition=p)
        producer.flush(120)

        spec = parse_spec({"type": "kafka", "spec": {
            "dataSchema": {"dataSource": "bench"},
            "ioConfig": {"topic": topic, "inputFormat": {"type": "json"}, "taskCount": 8, "useEarliestOffset": True,
                         "consumerProperties": {"bootstrap.servers": bootstrap}}}})
        store = MetadataStore(f"sqlite:///{work / 'metadata.db'}")
        store.upgrade()
        sup = Supervisor(spec, store)
        times = []
        for i in range(args.repeat):
            t0 = time.perf_counter()
            record = sup.plan(f"bench-{i}")
            times.append(time.perf_counter() - t0)
            store.set_run_status("bench", f"bench-{i}", store.require_run("bench", f"bench-{i}").status.FAILED)
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
        print(f"plan run, batched (best / median)  {best:.3f} s / {median:.3f} s   (target <= 2 s)")
        print(f"offsets one request per partition  {naive:.3f} s   (scaled from {len(sample)} partitions)")
        print(f"ratio naive / batched              {naive / best:.1f}x")
    finally:
        if kafka is not None:
            kafka.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
