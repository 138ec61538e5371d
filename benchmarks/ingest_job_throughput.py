"""Benchmark: the Spark ingest job's records/s against a raw single-process consume of the same range.

In one run, on the same broker and the same offset range:
  raw   one process, confluent-kafka consume() of every partition, values discarded (the floor any reader pays);
  job   `run_group` of the example wikipedia spec (parse JSON, roll up by minute, write hourly Parquet
        segments, split reports), one task group of --split records per split, Spark local[N] (default: both
        cores). Each size has its own topic of n / --split partitions, one split each (see `prepare`).
Each size runs --repeat rounds (raw, then job) and compares the medians; it prints both rates and their ratio
(target >= 1.0), the rollup (records in, rows out), the job's CPU bound (the cores over its CPU per record,
its broker's included: the fastest it could go with every core busy), then the job's peak memory (PSS of the
driver JVM plus the Python processes, sampled every 200 ms) at each range size; it must not grow with the range.

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
import statistics
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

# noida-db answers a fetch with everything it has, whatever fetch.max.bytes says: let the client take it
CLIENT = {"receive.message.max.bytes": 2_000_000_000}


BASE_TIME = time.time() - 1800  # every batch of events spans the same half hour


def produce(bootstrap: str, topic: str, n: int, partitions: int) -> None:
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
                p.produce(topic, pool[i % len(pool)], partition=i % partitions)
                break
            except BufferError:
                p.poll(0.05)
    p.flush(120)


def raw_consume_process(bootstrap: str, topic: str, ranges: dict[int, tuple[int, int]]) -> tuple[float, float, int]:
    """The raw consume in a fresh process of its own: (records/s, its CPU seconds, its peak RSS in bytes)."""
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(_raw_consume_measured, (bootstrap, topic, ranges))


def _raw_consume_measured(bootstrap: str, topic: str, ranges: dict[int, tuple[int, int]]) -> tuple[float, float, int]:
    import resource

    rate, cpu = raw_consume(bootstrap, topic, ranges)
    return rate, cpu, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def raw_consume(bootstrap: str, topic: str, ranges: dict[int, tuple[int, int]]) -> tuple[float, float]:
    """(records/s, CPU seconds of every thread of this process, librdkafka's included)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-raw", "enable.auto.commit": False,
                  "enable.partition.eof": False, **CLIENT})
    c.assign([KTP(topic, p, start) for p, (start, _) in ranges.items()])
    remaining = {p: end for p, (_, end) in ranges.items()}
    want = sum(end - start for start, end in ranges.values())
    n = 0
    cpu = time.process_time()
    started = time.perf_counter()
    while n < want:
        for m in c.consume(10_000, 1.0):
            if m.error() is not None:
                raise RuntimeError(m.error())
            if m.offset() < remaining[m.partition()]:
                m.value()
                n += 1
    elapsed = time.perf_counter() - started
    cpu = time.process_time() - cpu
    c.close()
    return n / elapsed, cpu


def cpu_seconds(procs: list[psutil.Process]) -> float:
    """CPU time of these processes, with what their exited children used."""
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            pass
    return total


def job_processes() -> list[psutil.Process]:
    """This process (the driver's Python side) and its descendants but the broker: the JVM, Python workers."""
    me = psutil.Process()
    out = [me]
    for child in me.children(recursive=True):
        try:
            if "noida" not in " ".join(child.cmdline()):
                out.append(child)
        except psutil.Error:
            pass
    return out


def broker_processes(broker: EmbeddedKafka | None) -> list[psutil.Process]:
    if broker is None or broker.proc is None:
        return []  # an external broker's CPU is not ours to see
    root = psutil.Process(broker.proc.pid)
    return [root, *root.children(recursive=True)]


def _pss(proc: psutil.Process) -> int:
    """Proportional set size from /proc/<pid>/smaps_rollup (cheap enough to sample often; psutil's
    memory_full_info walks every mapping); RSS where the kernel has no rollup."""
    try:
        with open(f"/proc/{proc.pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return proc.memory_info().rss


class PeakMemory:
    """Peak memory of the job's processes, sampled every 200 ms (reading PSS is not free): the Spark JVM, the
    Python processes (the daemon, its forked workers and the planner workers, summed), and both together. PSS,
    not RSS: forked workers share their parent's pages, which RSS would count once per process. The broker is
    not counted."""

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
                        jvm += _pss(child)
                    else:
                        workers += _pss(child)
                except psutil.Error:
                    pass
            self.jvm, self.workers = max(self.jvm, jvm), max(self.workers, workers)
            self.peak = max(self.peak, jvm + workers)
            time.sleep(0.2)

    def __enter__(self) -> "PeakMemory":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


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
    ap.add_argument("--split", type=int, default=250_000, help="maxRecordsPerSplit, and records per partition")
    ap.add_argument("--repeat", type=int, default=3, help="rounds per size; the medians are compared")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-ingest-"))
    broker = None
    try:
        bootstrap = args.bootstrap
        if not bootstrap:
            broker = EmbeddedKafka(work / "kafka").start()
            bootstrap = broker.bootstrap
        store = MetadataStore(f"sqlite:///{work / 'md.db'}")
        store.upgrade()
        results = []
        for n in sorted(args.records):
            spec, plan, topic = prepare(bootstrap, broker, store, n, args)
            # each size gets a fresh JVM, warmed up by one untimed run, so its memory is its own
            spark = (spark_session_builder("bench").master(f"local[{args.cores}]")
                     .config("spark.driver.memory", "2g").getOrCreate())
            spark.sparkContext.setLogLevel("ERROR")
            ranges = {p.tp.partition: (p.start, p.end) for p in plan.partitions}
            raw_rates, job_rates, job_cpus, peak = [], [], [], PeakMemory()
            # rounds alternate the two, so a slow spell of the shared cores hits both alike
            for r in range(-1, args.repeat):
                warmup = r < 0
                brokers = broker_processes(broker)
                b0 = cpu_seconds(brokers)
                raw_rate, raw_cpu, raw_rss = raw_consume_process(bootstrap, topic, ranges)
                b1 = cpu_seconds(brokers)
                out = (work / f"out-{n}-{r}").as_uri()
                procs = job_processes()
                j0 = cpu_seconds(procs)
                with PeakMemory() as rss:
                    t0 = time.perf_counter()
                    report = run_group(spark, GroupJob(spec, plan, plan.groups[0].group_id, 0, out))
                    elapsed = time.perf_counter() - t0
                job_cpu = cpu_seconds(procs) - j0
                b2 = cpu_seconds(brokers)
                assert report.stats.processed == n, report.stats
                if not warmup:
                    peak = max(peak, rss, key=lambda m: m.peak)
                    raw_rates.append(raw_rate)
                    job_rates.append(report.records / elapsed)
                    job_cpus.append((job_cpu + b2 - b1) / n)  # the job's and its broker's CPU per record
                rows = sum(s["rows"] for s in report.segments)
                # CPU per record: what each side costs whatever the machine's other load
                us = 1e6 / n
                print(f"  {'warm-up' if warmup else f'round {r + 1}'}: raw consume {raw_rate:>10,.0f} rec/s "
                      f"(CPU {raw_cpu * us:.2f} us/record, broker {(b1 - b0) * us:.2f}) | job "
                      f"{report.records / elapsed:>10,.0f} rec/s ({elapsed:.1f}s, CPU {job_cpu * us:.2f} us/record, "
                      f"broker {(b2 - b1) * us:.2f}; {len(plan.groups[0].splits)} splits, {len(report.segments)} segments, "
                      f"{rows:,} rows) | raw consumer peak RSS {raw_rss / 2**20:,.0f} MiB", flush=True)
            stop_jvm(spark)
            raw_rate, job_rate = statistics.median(raw_rates), statistics.median(job_rates)
            # the job keeps every core busy: it cannot go faster than the cores over its CPU per record
            cpu_per_record = statistics.median(job_cpus)
            ceiling = args.cores / cpu_per_record
            print(f"{n:>9,} records, median of {args.repeat}: raw consume {raw_rate:>10,.0f} rec/s | job "
                  f"{job_rate:>10,.0f} rec/s | ratio {job_rate / raw_rate:.2f} | rollup {n:,} -> {rows:,} rows | "
                  f"job peak memory (PSS) {peak.peak / 2**20:,.0f} MiB (JVM {peak.jvm / 2**20:,.0f}, Python "
                  f"{peak.workers / 2**20:,.0f})", flush=True)
            print(f"{'':>9}  CPU bound: {args.cores} cores / {cpu_per_record * 1e6:.2f} us of CPU per record "
                  f"(job + broker) = {ceiling:,.0f} rec/s, {ceiling / raw_rate:.2f}x the raw consume", flush=True)
            results.append((n, raw_rate, job_rate, peak.peak))
        if len(results) > 1:
            (n0, _, _, m0), (n1, _, _, m1) = results[0], results[-1]
            print(f"peak memory {m0 / 2**20:,.0f} MiB at {n0:,} records, {m1 / 2**20:,.0f} MiB at {n1:,} "
                  f"({m1 / m0:.2f}x for {n1 / n0:.0f}x the records)")
    finally:
        if broker is not None:
            broker.stop()
        shutil.rmtree(work, ignore_errors=True)


def stop_jvm(spark) -> None:
    """Stop Spark and its JVM, so the next size starts with a JVM of its own (PySpark keeps one per process)."""
    from pyspark import SparkContext

    spark.stop()
    gateway = SparkContext._gateway
    if gateway is not None:
        proc = gateway.proc
        gateway.shutdown()
        proc.stdin.close()  # the JVM exits when its stdin closes
        proc.wait(60)
    SparkContext._gateway = SparkContext._jvm = None


def prepare(bootstrap: str, broker: EmbeddedKafka | None, store: MetadataStore, n: int, args: argparse.Namespace):
    """A topic holding n records, `--split` per partition, and one run's plan over all of it: (spec, plan, topic).

    Each split reads one whole partition. noida-db answers a fetch with everything from the fetch offset to
    the end of the log, whatever fetch.max.bytes says, so a split starting mid-partition would also receive
    (and its client parse) the rest of the partition: that would measure the broker, not the job."""
    topic = f"bench-wiki-{n}"
    partitions = max(args.cores, -(-n // args.split))
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic])
    time.sleep(1)
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    t0 = time.perf_counter()
    produce(bootstrap, topic, n, partitions)
    print(f"produced {n:,} records into {partitions} partitions in {time.perf_counter() - t0:.1f}s", flush=True)
    if broker is not None:
        wait_until_idle(broker)
    # one untimed read of it all: the broker's first read of fresh data costs it more than later ones
    raw_consume_process(bootstrap, topic, {p: (0, n // partitions + (p < n % partitions)) for p in range(partitions)})
    if broker is not None:
        wait_until_idle(broker)
    raw_spec = load_spec(ROOT / "dags" / "datasources" / "wikipedia.yaml").to_raw()
    raw_spec["spec"]["dataSchema"]["dataSource"] = f"wikipedia_{n}"
    raw_spec["spec"]["ioConfig"].update(topic=topic, taskCount=1, useEarliestOffset=True,
                                        consumerProperties={"bootstrap.servers": bootstrap, **CLIENT})
    raw_spec["spec"]["tuningConfig"]["maxRowsPerSegment"] = 5_000_000
    raw_spec["microbatch"].update(maxRecordsPerSplit=args.split, minSplitsPerGroup=args.cores)
    spec = parse_spec(raw_spec, "wikipedia (benchmark)")
    supervisor = Supervisor(spec, store)
    supervisor.register()
    plan: Plan = supervisor.compute_plan(f"bench-{n}", PlanOptions())
    assert sum(p.end - p.start for p in plan.partitions) == n, plan
    return spec, plan, topic


if __name__ == "__main__":
    main()
