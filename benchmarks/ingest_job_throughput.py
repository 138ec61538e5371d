"""Benchmark: the Spark ingest job's records/s against a raw consume and against Spark's own Kafka source.

In one run, on the same broker and the same offset ranges, each size measures these sides (`--sides`):
  raw          one process, confluent-kafka consume() of every partition, values discarded (the floor any
               reader pays);
  job          our job: `run_group` of the example wikipedia spec (parse JSON, filter, roll up by minute, write
               hourly Parquet segments, split reports), one task group of --split records per split;
  spark-kafka  the anchor, the job a user would write instead (`spark_kafka_jobs.anchor_job`): Spark's Kafka
               source with the same ranges, from_json, the same filter, time floor and rollup, Parquet
               partitioned by segment;
  jvm-reader   our job with Spark's Kafka source as its reader, parsing with our parser in mapInArrow
               (`spark_kafka_jobs.jvm_reader_job`): a JVM reader measured against ours.
The Spark sides share one SparkSession per size (Spark `local[N]`, default: both cores; 2 GiB driver; Spark's
Kafka source jars passed as files with spark.jars), a fresh JVM per size, warmed up by one untimed round
(SparkSession start-up is not part of any figure). Each round runs every side, in an order that rotates from
round to round; the medians over --repeat rounds are compared: job / raw (target >= 1.0), job / spark-kafka,
jvm-reader / job (the reader is worth switching at >= 1.3). It also prints each side's CPU per record (every
process of the side; the broker's apart), the job's CPU bound (the cores over its CPU per record, its broker's
included), and each Spark side's peak memory (PSS of the driver JVM plus the Python processes, sampled every
200 ms), which must not grow with the range.

    python benchmarks/ingest_job_throughput.py            # 1M and 4M records, an embedded Apache Kafka (KRaft)
    python benchmarks/ingest_job_throughput.py --quick    # 100k and 400k records, 2 rounds: a smoke run
    python benchmarks/ingest_job_throughput.py --tiny     # 4,000 records, 1 round: that it runs (the tests)
    python benchmarks/ingest_job_throughput.py --records 1000000 --bootstrap host:9092 --sides raw job
    python benchmarks/ingest_job_throughput.py --value-format protobuf   # the same events as Protobuf
    python benchmarks/ingest_job_throughput.py --value-format avro   # the same events as Avro (avro_stream)
    python benchmarks/ingest_job_throughput.py --value-format json avro --sides job   # the job over both, one JVM
    python benchmarks/ingest_job_throughput.py --sketches --records 1000000   # sketch metrics' cost

`--sketches` adds the side `sketches`: the job over the same records with the same spec plus one thetaSketch
(user), one HLLSketchBuild (page) and one quantilesDoublesSketch (delta), Druid's default sizes; it prints both
sides' CPU per record and their ratio (target: at most 1.5). Its default sides are `job sketches`.

`--value-format avro` writes the same wiki events as Avro binaries (fastavro, `WIKI_AVRO_SCHEMA`) and reads them
with an `avro_stream` inputFormat (`schema_inline`: the decoding is that of `schema_registry`, whose records carry
5 more header bytes); the anchor (`spark-kafka`, `from_json`) has no Avro counterpart here and is left out.
With several formats (`--value-format json avro`), each size measures the first one's sides, then the job side
again over the same events in each further format, on a topic of its own, in the same JVM (its warm-up round
included): what a format changes is the job's parse.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable

import psutil
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KTP
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from spark_kafka_jobs import anchor_job, jvm_reader_job, spark_kafka_jars  # noqa: E402

from ingest_core.core.planner import Plan  # noqa: E402
from ingest_core.core.spec import load_spec, parse_spec  # noqa: E402
from ingest_core.dev.embedded import EmbeddedKafka  # noqa: E402
from ingest_core.handover import deep_storage  # noqa: E402
from ingest_core.spark.job import GroupJob, run_group  # noqa: E402
from ingest_core.spark.settings import spark_session_builder  # noqa: E402
from ingest_core.store.metadata import MetadataStore
from ingest_core.supervisor.planning import PlanOptions, Supervisor  # noqa: E402

SIDES = ("raw", "job", "spark-kafka", "jvm-reader", "sketches")
# --sketches: one metric of each common sketch family, Druid's default parameters
SKETCH_METRICS = [{"type": "thetaSketch", "name": "users", "fieldName": "user"},
                  {"type": "HLLSketchBuild", "name": "pages", "fieldName": "page"},
                  {"type": "quantilesDoublesSketch", "name": "delta_quantiles", "fieldName": "delta"}]
# Every side drops robots' edits (about 10% of the rows): the spec's filter, so the anchor applies it too.
FILTER = {"type": "selector", "dimension": "isRobot", "value": "0"}
BASE_TIME = time.time() - 1800  # every batch of events spans the same half hour
VALUE_FORMATS = ("json", "avro", "protobuf")
# the wiki events' Avro schema (--value-format avro): the JSON events' fields with their types
WIKI_AVRO_SCHEMA = {"type": "record", "name": "WikiEdit", "namespace": "benchmark", "fields": [
    {"name": "time", "type": "string"}, {"name": "channel", "type": "string"}, {"name": "page", "type": "string"},
    {"name": "user", "type": "string"}, {"name": "namespace", "type": "string"}, {"name": "isRobot", "type": "int"},
    {"name": "added", "type": "int"}, {"name": "deleted", "type": "int"}, {"name": "delta", "type": "int"}]}


def encode(events: list[dict[str, Any]], value_format: str) -> list[bytes]:
    if value_format == "avro":
        import io

        import fastavro

        parsed = fastavro.parse_schema(WIKI_AVRO_SCHEMA)
        out = []
        for e in events:
            buffer = io.BytesIO()
            fastavro.schemaless_writer(buffer, parsed, e)
            out.append(buffer.getvalue())
        return out
    if value_format == "protobuf":
        cls, _ = wiki_protobuf()
        return [cls(**e).SerializeToString() for e in events]
    return [json.dumps(e).encode() for e in events]


def input_format(value_format: str) -> dict:
    if value_format == "json":
        return {"type": "json"}
    if value_format == "protobuf":
        return {"type": "protobuf", "protoBytesDecoder": {"type": "inline", "descriptorString": wiki_protobuf()[1],
                                                          "protoMessageType": "wiki.Edit"}}
    return {"type": "avro_stream", "avroBytesDecoder": {"type": "schema_inline", "schema": WIKI_AVRO_SCHEMA}}


def wiki_events(n: int = 20_000) -> list[dict[str, Any]]:
    """The benchmark's wiki edits (the same every run): the pool its topics cycle through."""
    rng = random.Random(7)
    events = []
    for i in range(n):
        added, deleted = rng.randint(0, 500), rng.randint(0, 200)
        t = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(BASE_TIME + i * 0.09)) + f".{i % 1000:03d}Z"
        events.append({"time": t, "channel": rng.choice(["#en", "#de", "#fr", "#ja"]),
                       "page": f"Page_{rng.randint(1, 300)}", "user": f"user{rng.randint(1, 2000)}",
                       "namespace": "Main", "isRobot": int(rng.random() < 0.1), "added": added,
                       "deleted": deleted, "delta": added - deleted})
    return events


def wiki_protobuf() -> tuple[Any, str]:
    """The wiki events' message class and its descriptor set (base64, for an `inline` protoBytesDecoder).
    Numbers are proto3 `optional`, so a zero is kept (a plain proto3 field at 0 would read as null)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    fdp = descriptor_pb2.FileDescriptorProto(name="wiki.proto", package="wiki", syntax="proto3")
    edit = fdp.message_type.add(name="Edit")
    T = descriptor_pb2.FieldDescriptorProto
    for number, (name, kind) in enumerate([("time", T.TYPE_STRING), ("channel", T.TYPE_STRING),
                                           ("page", T.TYPE_STRING), ("user", T.TYPE_STRING),
                                           ("namespace", T.TYPE_STRING), ("isRobot", T.TYPE_INT32),
                                           ("added", T.TYPE_INT64), ("deleted", T.TYPE_INT64),
                                           ("delta", T.TYPE_INT64)], 1):
        field = edit.field.add(name=name, number=number, type=kind, label=T.LABEL_OPTIONAL, json_name=name)
        if kind != T.TYPE_STRING:
            field.proto3_optional = True
            field.oneof_index = len(edit.oneof_decl)
            edit.oneof_decl.add(name=f"_{name}")
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(fdp.SerializeToString())
    cls = message_factory.GetMessageClass(pool.FindMessageTypeByName("wiki.Edit"))
    return cls, base64.b64encode(descriptor_pb2.FileDescriptorSet(file=[fdp]).SerializeToString()).decode()


def produce(bootstrap: str, topic: str, n: int, partitions: int, value_format: str = "json") -> None:
    pool = encode(wiki_events(), value_format)
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


# ------------------------------------------------------------------------------------------- the raw consume


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
                  "enable.partition.eof": False})
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


# ------------------------------------------------------------------------------------------- measuring


def cpu_seconds(procs: list[psutil.Process]) -> float:
    """CPU time of these processes (the broker's), with what their exited children used."""
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            pass
    return total


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


class SideMonitor:
    """CPU and peak memory of a Spark side's processes (this process, the Spark JVM, the Python daemons and
    workers; not the broker, a JVM child of this process when embedded), sampled every 200 ms.

    CPU: each process's own user + system time, from the start of the run (or its birth) to its last sample, so a
    Python worker that exits during the run counts up to then and no process counts twice (through a parent's
    children's times). Memory: PSS, not RSS: forked workers share their parent's pages, which RSS would count once
    per process; the peak of the JVM, of the Python processes (summed), and of both together."""

    def __init__(self, broker: EmbeddedKafka | None = None) -> None:
        self.peak = self.jvm = self.workers = 0
        self._skip = {p.pid for p in broker_processes(broker)}
        self._start: dict[int, float] = {}
        self._last: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _processes(self) -> list[psutil.Process]:
        me = psutil.Process()
        return [me] + [c for c in me.children(recursive=True) if c.pid not in self._skip]

    def _sample(self, memory: bool) -> None:
        jvm = workers = 0
        for proc in self._processes():
            try:
                t = proc.cpu_times()
                self._last[proc.pid] = t.user + t.system
                if memory and proc.pid != os.getpid():
                    if "java" in proc.name():
                        jvm += _pss(proc)
                    else:
                        workers += _pss(proc)
            except psutil.Error:
                pass
        if memory:
            self.jvm, self.workers = max(self.jvm, jvm), max(self.workers, workers)
            self.peak = max(self.peak, jvm + workers)

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self._sample(memory=True)

    @property
    def cpu(self) -> float:
        return sum(last - self._start.get(pid, 0.0) for pid, last in self._last.items())

    def __enter__(self) -> "SideMonitor":
        self._sample(memory=False)
        self._start = dict(self._last)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._sample(memory=False)


class Sample:
    """One side's run: records/s, its CPU per record, its broker's CPU per record, its peak memory (Spark)."""

    def __init__(self, rate: float, cpu: float, broker_cpu: float, n: int, memory: SideMonitor | None = None,
                 note: str = ""):
        self.rate, self.cpu_us, self.broker_us = rate, cpu * 1e6 / n, broker_cpu * 1e6 / n
        self.memory, self.note = memory, note


def measure_spark(broker: EmbeddedKafka | None, n: int, run: Callable[[], str]) -> Sample:
    brokers = broker_processes(broker)
    b0 = cpu_seconds(brokers)
    with SideMonitor(broker) as monitor:
        t0 = time.perf_counter()
        note = run()
        elapsed = time.perf_counter() - t0
    return Sample(n / elapsed, monitor.cpu, cpu_seconds(brokers) - b0, n, monitor, f"{elapsed:.1f}s{note}")


# ------------------------------------------------------------------------------------------- the benchmark


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", help="an existing Kafka (host:port); default: start an embedded one")
    ap.add_argument("--records", type=int, nargs="+")
    ap.add_argument("--cores", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--split", type=int, help="maxRecordsPerSplit, and records per partition (default 250,000)")
    ap.add_argument("--repeat", type=int, help="rounds per size (default: 3 up to 1M records, 2 above)")
    ap.add_argument("--sides", nargs="+", choices=SIDES)
    ap.add_argument("--value-format", choices=VALUE_FORMATS, nargs="+", default=["json"],
                    help="the records' format: json (default), avro (avro_stream) or protobuf (an inline "
                         "descriptor); no spark-kafka anchor for the last two: it reads JSON. Several: the sides "
                         "over the first, then the job side over each further one, in the same JVM")
    ap.add_argument("--quick", action="store_true", help="100k and 400k records, 25,000 per split, 2 rounds")
    ap.add_argument("--sketches", action="store_true",
                    help="add the side `sketches` (the job with a theta, an HLL and a quantiles metric more) and "
                         "print its CPU per record over the job's; default sides then: job sketches")
    ap.add_argument("--tiny", action="store_true",
                    help="4,000 records, 2,000 per split, 1 round: runs every side once, measures nothing")
    args = ap.parse_args()
    if args.tiny:
        args.records = args.records or [4_000]
        args.split = args.split or 2_000
        args.repeat = args.repeat or 1
    if args.quick:
        args.records = args.records or [100_000, 400_000]
        args.split = args.split or 25_000
        args.repeat = args.repeat or 2
    args.records = sorted(args.records or [1_000_000, 4_000_000])
    args.split = args.split or 250_000
    if args.value_format[0] != "json" and args.sides and "spark-kafka" in args.sides:
        ap.error("the spark-kafka anchor reads JSON (from_json): leave it out with --value-format "
                 + args.value_format[0])
    if args.sides and "sketches" in args.sides and not args.sketches:
        ap.error("the side `sketches` comes with --sketches")
    default_sides = (["job", "sketches"] if args.sketches else
                     [s for s in SIDES if (args.value_format[0] == "json" or s != "spark-kafka") and s != "sketches"])
    sides = [s for s in SIDES if s in (args.sides or default_sides)]
    work = Path(tempfile.mkdtemp(prefix="bench-ingest-"))
    broker = None
    started = time.monotonic()
    try:
        bootstrap = args.bootstrap
        if not bootstrap:
            broker = EmbeddedKafka(work / "kafka").start()
            bootstrap = broker.bootstrap
            print(f"embedded Apache Kafka (KRaft) at {bootstrap}; load average {os.getloadavg()[0]:.1f} on "
                  f"{os.cpu_count()} cores", flush=True)
        store = MetadataStore(f"sqlite:///{work / 'md.db'}")
        store.upgrade()
        results = []
        for n in args.records:
            repeat = args.repeat or (3 if n <= 1_000_000 else 2)
            results.append(bench_size(n, repeat, sides, bootstrap, broker, store, work, args))
        if len(results) > 1 and "job" in sides:
            (n0, m0), (n1, m1) = results[0], results[-1]
            print(f"job peak memory {m0 / 2**20:,.0f} MiB at {n0:,} records, {m1 / 2**20:,.0f} MiB at {n1:,} "
                  f"({m1 / m0:.2f}x for {n1 / n0:.0f}x the records)")
        print(f"benchmark took {(time.monotonic() - started) / 60:.1f} min; load average now "
              f"{os.getloadavg()[0]:.1f}", flush=True)
    finally:
        if broker is not None:
            broker.stop()
        shutil.rmtree(work, ignore_errors=True)


def bench_size(n: int, repeat: int, sides: list[str], bootstrap: str, broker: EmbeddedKafka | None,
               store: MetadataStore, work: Path, args: argparse.Namespace) -> tuple[int, int]:
    """The first value format's sides, then the job side over each further format: (n, the job's peak memory over
    the first format)."""
    spark = None
    if set(sides) - {"raw"} or len(args.value_format) > 1:
        # a fresh JVM per size, so its memory is its own; Spark's Kafka source jars as files, not --packages
        spark = (spark_session_builder("bench").master(f"local[{args.cores}]")
                 .config("spark.driver.memory", "2g").config("spark.jars", ",".join(spark_kafka_jars()))
                 .getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
    try:
        first, *others = args.value_format
        result = bench_format(spark, first, n, repeat, sides, bootstrap, broker, store, work, args)
        for value_format in others:
            bench_format(spark, value_format, n, repeat, ["job"], bootstrap, broker, store, work, args)
    finally:
        if spark is not None:
            stop_jvm(spark)
    return result


def bench_format(spark: Any, value_format: str, n: int, repeat: int, sides: list[str], bootstrap: str,
                 broker: EmbeddedKafka | None, store: MetadataStore, work: Path,
                 args: argparse.Namespace) -> tuple[int, int]:
    print(f"value format: {value_format} ({json.dumps(input_format(value_format))[:60]}...)", flush=True)
    spec, plan, topic = prepare(bootstrap, store, n, value_format, args)
    sketch_spec = with_sketches(spec) if "sketches" in sides else None
    ranges = {p.tp.partition: (p.start, p.end) for p in plan.partitions}
    kafka_ranges = {(p.tp.topic, p.tp.partition): (p.start, p.end) for p in plan.partitions}
    group = plan.groups[0]

    def run_raw() -> Sample:
        brokers = broker_processes(broker)
        b0 = cpu_seconds(brokers)
        rate, cpu, rss = raw_consume_process(bootstrap, topic, ranges)
        return Sample(rate, cpu, cpu_seconds(brokers) - b0, n, note=f"peak RSS {rss / 2**20:,.0f} MiB")

    def run_job(out: str) -> str:
        report = run_group(spark, GroupJob.of_plan(spec, plan, group.group_id, 0, out))
        check_report(report, n)
        return f", {len(report.segments)} segments, {sum(s.rows for s in report.segments):,} rows"

    def run_sketches(out: str) -> str:
        report = run_group(spark, GroupJob.of_plan(sketch_spec, plan, group.group_id, 0, out))
        check_report(report, n)
        return f", {len(report.segments)} segments, {sum(s.rows for s in report.segments):,} rows"

    def run_jvm_reader(out: str) -> str:
        report = jvm_reader_job(spark, GroupJob.of_plan(spec, plan, group.group_id, 0, out), bootstrap)
        check_report(report, n)
        return f", {len(report.segments)} segments, {sum(s.rows for s in report.segments):,} rows"

    def run_anchor(out: str) -> str:
        anchor_job(spark, spec, bootstrap, kafka_ranges, out)
        return ""

    runners: dict[str, Callable[[str], str]] = {"job": run_job, "spark-kafka": run_anchor,
                                                "jvm-reader": run_jvm_reader, "sketches": run_sketches}
    samples: dict[str, list[Sample]] = {s: [] for s in sides}
    ratios: dict[str, list[float]] = {}
    print(f"{n:,} records, {len(group.splits)} splits; {repeat} rounds after a warm-up, sides in rotating order",
          flush=True)
    for r in range(-1, repeat):
        order = sides[(r + 1) % len(sides):] + sides[:(r + 1) % len(sides)]
        got: dict[str, Sample] = {}
        for side in order:
            if side == "raw":
                got[side] = run_raw()
            else:
                out = work / f"out-{n}-{value_format}-{side}-{r}"
                got[side] = measure_spark(broker, n, lambda: runners[side](out.as_uri()))
            s = got[side]
            mem = (f", peak PSS {s.memory.peak / 2**20:,.0f} MiB" if s.memory is not None else "")
            print(f"  {'warm-up' if r < 0 else f'round {r + 1}'} {side:<11} {s.rate:>10,.0f} rec/s  CPU "
                  f"{s.cpu_us:5.2f} us/record, broker {s.broker_us:4.2f}  ({s.note}{mem})", flush=True)
            if side != "raw" and r >= 0:  # the warm-up's outputs are compared below
                shutil.rmtree(out, ignore_errors=True)
        if r < 0:
            compare_outputs(work, f"{n}-{value_format}", sides)
            continue
        for side, s in got.items():
            samples[side].append(s)
        for name, (a, b) in _RATIOS.items():
            if a in got and b in got:
                ratios.setdefault(name, []).append(got[a].rate / got[b].rate)
    delete_topic(bootstrap, topic)

    med = {side: statistics.median(s.rate for s in samples[side]) for side in sides}
    print(f"{n:,} records, median of {repeat} rounds:")
    for side in sides:
        cpu = statistics.median(s.cpu_us for s in samples[side])
        bcpu = statistics.median(s.broker_us for s in samples[side])
        peak = max((s.memory for s in samples[side] if s.memory is not None), key=lambda m: m.peak, default=None)
        mem = (f" | peak memory (PSS) {peak.peak / 2**20:,.0f} MiB (JVM {peak.jvm / 2**20:,.0f}, Python "
               f"{peak.workers / 2**20:,.0f})" if peak is not None else "")
        print(f"  {side:<11} {med[side]:>10,.0f} rec/s | CPU {cpu:5.2f} us/record + broker {bcpu:4.2f}{mem}")
    for name, (a, b) in _RATIOS.items():
        if a in med and b in med:
            per_round = ", ".join(f"{x:.2f}" for x in ratios[name])
            print(f"  {name:<34} {med[a] / med[b]:.2f}   (per round: {per_round}){_TARGETS.get(name, '')}")
    if "job" in sides and "sketches" in sides:
        per_round = [s.cpu_us / j.cpu_us for s, j in zip(samples["sketches"], samples["job"])]
        cpu = {side: statistics.median(s.cpu_us for s in samples[side]) for side in ("job", "sketches")}
        print(f"  sketches / job CPU per record          {cpu['sketches'] / cpu['job']:.2f}   ({cpu['sketches']:.2f} "
              f"/ {cpu['job']:.2f} us; per round: {', '.join(f'{x:.2f}' for x in per_round)})   target <= 1.5",
              flush=True)
    if "job" in sides:
        # the job keeps every core busy: it cannot go faster than the cores over its CPU per record
        per_record = statistics.median(s.cpu_us + s.broker_us for s in samples["job"]) / 1e6
        ceiling = args.cores / per_record
        vs_raw = f", {ceiling / med['raw']:.2f}x the raw consume" if "raw" in med else ""
        print(f"  job CPU bound: {args.cores} cores / {per_record * 1e6:.2f} us of CPU per record (job + broker) = "
              f"{ceiling:,.0f} rec/s{vs_raw}", flush=True)
        return n, max(s.memory.peak for s in samples["job"])
    return n, 0


_RATIOS = {"job / raw consume": ("job", "raw"), "job / Spark's Kafka source (anchor)": ("job", "spark-kafka"),
           "jvm-reader / job": ("jvm-reader", "job"), "sketches / job": ("sketches", "job")}
_TARGETS = {"job / raw consume": "   target >= 1.0",
            "jvm-reader / job": "   the JVM reader replaces ours at >= 1.3"}


def with_sketches(spec: Any) -> Any:
    """The benchmark's spec with SKETCH_METRICS added (the same datasource, so the same plan runs it)."""
    raw = spec.to_raw()
    raw["spec"]["dataSchema"]["metricsSpec"] = raw["spec"]["dataSchema"]["metricsSpec"] + SKETCH_METRICS
    return parse_spec(raw, "wikipedia with sketches (benchmark)")


def check_report(report: Any, n: int) -> None:
    stats = report.stats
    assert report.records == n and stats.processed + stats.thrown_away == n and stats.parse_exceptions == 0, \
        report.to_json()


def compare_outputs(work: Path, run: str, sides: list[str]) -> None:
    """After the warm-up: every Spark side wrote the same rollup (rows and metric totals)."""
    import pyarrow.dataset as ds

    totals = {}
    for side in sides:
        if side == "raw":
            continue
        out = work / f"out-{run}-{side}--1"
        # our job and the JVM reader write in an attempt folder of their own (`GroupJob.attempt_uri`)
        path = out if side == "spark-kafka" else next(out.glob(f"{deep_storage.ATTEMPT}*/segments"))
        if side == "sketches":
            check_sketches(path)
        # "__segment=..." folders start with "_", which pyarrow ignores by default
        table = ds.dataset(str(path), format="parquet", partitioning="hive",
                           ignore_prefixes=[".", "_SUCCESS"]).to_table()
        totals[side] = (table.num_rows, *(sum(table.column(c).to_pylist()) for c in ("edits", "added", "deleted")),
                        max(table.column("max_delta").to_pylist()))
        shutil.rmtree(out, ignore_errors=True)
    if len(set(totals.values())) > 1:
        raise AssertionError(f"the Spark sides wrote different rollups (rows, edits, added, deleted, max_delta): "
                             f"{totals}")
    if totals:
        rows, edits, *_ = next(iter(totals.values()))
        print(f"  outputs agree ({', '.join(totals)}): {edits:,} rows kept by the filter -> {rows:,} rolled-up rows",
              flush=True)


def check_sketches(path: Path) -> None:
    """The sketches side's output: every row's theta, HLL and quantiles sketch reads back (datasketches), and
    the quantiles sketches count every edit the filter kept."""
    import datasketches
    import pyarrow.dataset as ds

    table = ds.dataset(str(path), format="parquet", partitioning="hive", ignore_prefixes=[".", "_SUCCESS"]).to_table(
        columns=["edits", "users", "pages", "delta_quantiles"])
    for column, read in (("users", datasketches.compact_theta_sketch), ("pages", datasketches.hll_sketch)):
        assert all(read.deserialize(b).get_estimate() >= 1 for b in table.column(column).to_pylist()), column
    counted = sum(datasketches.quantiles_doubles_sketch.deserialize(b).n for b in table.column("delta_quantiles").to_pylist())
    assert counted == sum(table.column("edits").to_pylist()), (counted, "quantiles sketches vs edits")


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


def prepare(bootstrap: str, store: MetadataStore, n: int, value_format: str, args: argparse.Namespace):
    """A topic holding n records in `value_format`, `--split` per partition, and one run's plan over all of it:
    (spec, plan, topic); a datasource per size and format.

    Each split reads one whole partition, and so does each task of Spark's Kafka source (one per partition),
    so every Spark side reads in as many tasks."""
    topic = f"bench-wiki-{n}-{uuid.uuid4().hex[:6]}"
    partitions = max(args.cores, -(-n // args.split))
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    t0 = time.perf_counter()
    produce(bootstrap, topic, n, partitions, value_format)
    print(f"produced {n:,} records into {partitions} partitions in {time.perf_counter() - t0:.1f}s", flush=True)
    raw_spec = load_spec(ROOT / "dags" / "datasources" / "wikipedia.yaml").to_raw()
    raw_spec["spec"]["dataSchema"]["dataSource"] = f"wikipedia_{n}_{value_format}"
    raw_spec["spec"]["dataSchema"]["transformSpec"] = {"filter": FILTER}
    raw_spec["spec"]["ioConfig"].update(topic=topic, taskCount=1, useEarliestOffset=True,
                                        consumerProperties={"bootstrap.servers": bootstrap},
                                        inputFormat=input_format(value_format))
    raw_spec["spec"]["tuningConfig"]["maxRowsPerSegment"] = 5_000_000
    raw_spec["microbatch"].update(maxRecordsPerSplit=args.split, minSplitsPerGroup=args.cores)
    spec = parse_spec(raw_spec, "wikipedia (benchmark)")
    supervisor = Supervisor(spec, store)
    supervisor.register()
    plan: Plan = supervisor.compute_plan(f"bench-{n}", PlanOptions())  # its reader closed when done
    assert sum(p.end - p.start for p in plan.partitions) == n, plan
    return spec, plan, topic


def delete_topic(bootstrap: str, topic: str) -> None:
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the answer comes
        admin.delete_topics([topic])[topic].result(60)
    except Exception as exc:  # noqa: BLE001 - only disk space is at stake
        print(f"  (could not delete {topic}: {exc})", flush=True)


if __name__ == "__main__":
    main()
