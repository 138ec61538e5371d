"""Benchmark: the Spark ingest job's records/s against a raw single-process consume of the same range.

In one run, on the same broker and the same offset range:
  raw   one process, confluent-kafka consume() of every partition, values discarded (the floor any reader pays);
  job   `run_group` of the example wikipedia spec (parse JSON, roll up by minute, write hourly Parquet
        segments, split reports), one task group cut into splits, Spark local[N] (default: both cores).
It prints both rates and their ratio (target >= 1.0), then the job's peak memory (RSS of the driver JVM plus
the Python workers, sampled every 50 ms) at each range size; it must not grow with the range.

    python benchmarks/ingest_job_throughput.py                      # 1M and 4M records, noida-db's broker
    python benchmarks/ingest_job_throughput.py --records 1000000 --bootstrap host:9092

The first job run warms up the JVM and Python workers and is not counted; SparkSession start-up (7-12 s here)
is not part of either figure.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KTP
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ingest_core.embedded import EmbeddedKafka  # noqa: E402
from ingest_core.metadata import MetadataStore  # noqa: E402
from ingest_core.planner import Plan  # noqa: E402
from ingest_core.spec import load_spec, parse_spec  # noqa: E402
from ingest_core.supervisor import PlanOptions, Supervisor  # noqa: E402
from spark_jobs.ingest_job import GroupJob, run_group, spark_session_builder  # noqa: E402

PARTITIONS = 4
# noida-db answers a fetch with everything it has, whatever fetch.max.bytes says: let the client take it
CLIENT = {"receive.message.max.bytes": 2_000_000_000}


BASE_TIME = time.time() - 1800  # every batch of events spans the same half hour


def produce(bootstrap: str, topic: str, n: int) -> None:
    rng = random.Random(7)
    base = BASE_TIME
    pool = []
    for i in range(20_000):
        added, deleted = rng.randint(0, 500), rng.randint(0, 200)
        t = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(base + i * 0.09)) + f".{i % 1000:03d}Z"
        pool.append(json.dumps({"time": t, "channel": rng.choice(["#en", "#de", "#fr", "#ja"]),
                                "page": f"Page_{rng.randint(1, 300)}", "user": f"user{rng.randint(1, 2000)}",
                                "namespace": "Main", "isRobot": int(rng.random() < 0.1), "added": added,
                                "deleted": deleted, "delta": added - deleted}).encode())
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.num.messages": 10_000,
                  "queue.buffering.max.messages": 1_000_000})
    for i in range(n):
        while True:
            try:
                p.produce(topic, pool[i % len(pool)], partition=i % PARTITIONS)
                break
            except BufferError:
                p.poll(0.05)
    p.flush(120)


def raw_consume_process(bootstrap: str, ranges: dict[int, tuple[int, int]]) -> tuple[float, int]:
    """The raw consume in a fresh process of its own: (records/s, that process's peak RSS in bytes)."""
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(_raw_consume_measured, (bootstrap, ranges))


def _raw_consume_measured(bootstrap: str, ranges: dict[int, tuple[int, int]]) -> tuple[float, int]:
    import resource

    rate = raw_consume(bootstrap, ranges)
    return rate, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def raw_consume(bootstrap: str, ranges: dict[int, tuple[int, int]]) -> float:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-raw", "enable.auto.commit": False,
                  "enable.partition.eof": False, **CLIENT})
    c.assign([KTP(TOPIC, p, start) for p, (start, _) in ranges.items()])
    remaining = {p: end for p, (_, end) in ranges.items()}
    want = sum(end - start for start, end in ranges.values())
    n = 0
    started = time.perf_counter()
    while n < want:
        for m in c.consume(10_000, 1.0):
            if m.error() is not None:
                raise RuntimeError(m.error())
            if m.offset() < remaining[m.partition()]:
                m.value()
                n += 1
    elapsed = time.perf_counter() - started
    c.close()
    return n / elapsed


class PeakRss:
    """Peak RSS of the job's processes, sampled every 50 ms: the Spark JVM, the Python workers (summed), and
    both together. The broker (noida-db) is not counted."""

    def __init__(self) -> None:
        self.peak = self.jvm = self.workers = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        me = psutil.Process()
        while not self._stop.is_set():
            jvm = workers = 0
            for child in me.children(recursive=True):
                try:
                    cmd = " ".join(child.cmdline())
                    if "noida" in cmd:
                        continue
                    if "java" in cmd:
                        jvm += child.memory_info().rss
                    else:
                        workers += child.memory_info().rss
                except psutil.Error:
                    pass
            self.jvm, self.workers = max(self.jvm, jvm), max(self.workers, workers)
            self.peak = max(self.peak, jvm + workers)
            time.sleep(0.05)

    def __enter__(self) -> "PeakRss":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


TOPIC = "bench-wiki"


def wait_until_idle(broker: EmbeddedKafka, timeout: float = 120) -> None:
    """noida-db keeps persisting its log after a burst of produces: measure only once it is quiet."""
    procs = [p for p in psutil.Process(broker.proc.pid).children(recursive=True)] + [psutil.Process(broker.proc.pid)]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        busy = sum(p.cpu_percent(interval=None) for p in procs)
        time.sleep(1.0)
        busy = sum(p.cpu_percent(interval=None) for p in procs)
        if busy < 5:
            return


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap")
    ap.add_argument("--records", type=int, nargs="+", default=[1_000_000, 4_000_000])
    ap.add_argument("--cores", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--split", type=int, default=250_000, help="maxRecordsPerSplit")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-ingest-"))
    broker = None
    try:
        spark = (spark_session_builder("bench").master(f"local[{args.cores}]")
                 .config("spark.driver.memory", "2g").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        bootstrap = args.bootstrap
        if not bootstrap:
            broker = EmbeddedKafka(work / "kafka").start()
            bootstrap = broker.bootstrap
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.delete_topics([TOPIC])
        time.sleep(1)
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)
        raw_spec = load_spec(ROOT / "dags" / "datasources" / "wikipedia.yaml").to_raw()
        raw_spec["spec"]["ioConfig"].update(topic=TOPIC, taskCount=1,
                                            consumerProperties={"bootstrap.servers": bootstrap, **CLIENT})
        raw_spec["spec"]["tuningConfig"]["maxRowsPerSegment"] = 5_000_000
        raw_spec["microbatch"].update(maxRecordsPerSplit=args.split, minSplitsPerGroup=args.cores)
        spec = parse_spec(raw_spec, "wikipedia (benchmark)")
        store = MetadataStore(f"sqlite:///{work / 'md.db'}")
        store.upgrade()
        supervisor = Supervisor(spec, store)
        supervisor.register()

        produced = 0
        results = []
        for i, n in enumerate([min(args.records)] + sorted(args.records)):
            warmup = i == 0
            if n > produced:
                t0 = time.perf_counter()
                produce(bootstrap, TOPIC, n - produced)
                print(f"produced {n - produced:,} records in {time.perf_counter() - t0:.1f}s", flush=True)
                produced = n
                if broker is not None:
                    wait_until_idle(broker)
            plan: Plan = supervisor.compute_plan(f"bench-{i}", PlanOptions())
            # every job reads the first n records of the topic, from offset 0
            plan = _from_zero(plan, n, args.split, args.cores)
            ranges = {p.tp.partition: (p.start, p.end) for p in plan.partitions}
            raw_rate, raw_rss = raw_consume_process(bootstrap, ranges)
            out = (work / f"out-{i}").as_uri()
            with PeakRss() as rss:
                t0 = time.perf_counter()
                report = run_group(spark, GroupJob(spec, plan, plan.groups[0].group_id, 0, out))
                elapsed = time.perf_counter() - t0
            job_rate = report.records / elapsed
            line = (f"{'warm-up ' if warmup else ''}{n:>9,} records: raw consume {raw_rate:>10,.0f} rec/s | job "
                    f"{job_rate:>10,.0f} rec/s ({elapsed:.1f}s, {len(plan.groups[0].splits)} splits, "
                    f"{len(report.segments)} segments, {sum(s['rows'] for s in report.segments):,} rows) | "
                    f"ratio {job_rate / raw_rate:.2f} | job peak RSS {rss.peak / 2**20:,.0f} MiB (JVM "
                    f"{rss.jvm / 2**20:,.0f}, Python workers {rss.workers / 2**20:,.0f}) | raw consumer peak RSS "
                    f"{raw_rss / 2**20:,.0f} MiB")
            print(line, flush=True)
            assert report.stats.processed == n, report.stats
            if not warmup:
                results.append((n, raw_rate, job_rate, rss.peak))
        if len(results) > 1:
            (n0, _, _, m0), (n1, _, _, m1) = results[0], results[-1]
            print(f"peak memory {m0 / 2**20:,.0f} MiB at {n0:,} records, {m1 / 2**20:,.0f} MiB at {n1:,} "
                  f"({m1 / m0:.2f}x for {n1 / n0:.0f}x the records)")
        spark.stop()
    finally:
        if broker is not None:
            broker.stop()
        shutil.rmtree(work, ignore_errors=True)


def _from_zero(plan: Plan, n: int, split: int, min_splits: int) -> Plan:
    """The same plan shape over the first n records: [0, n/partitions) of each partition."""
    from dataclasses import replace

    from ingest_core.offsets import OffsetRange, StartSource
    from ingest_core.planner import PartitionPlan, TaskGroup, split_ranges

    per = n // PARTITIONS
    parts = tuple(PartitionPlan(p.tp, 0, per, StartSource.EARLIEST) for p in plan.partitions)
    splits = split_ranges([OffsetRange(p.tp, 0, per) for p in parts], split, min_splits)
    return replace(plan, groups=(TaskGroup(0, parts, tuple(splits)),))


if __name__ == "__main__":
    main()
