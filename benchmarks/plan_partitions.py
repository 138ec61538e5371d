"""Benchmark: one run's plan step over 100,000 partitions (target: <= 1 s), and where its time goes.

The plan step is what the DAG's plan task runs (`supervisor.run.plan_step`): the datasource's checks, expiring
overdue runs, discovering the partitions, their earliest and latest offsets (batched ListOffsets) and topic ids,
the committed offsets and the runs in flight from the metadata store, start-offset resolution, the plan (task
groups `partition % taskCount`, splits), persisting it, staging it in deep storage, its log line and the run's
start. Timers around the functions the step calls give the breakdown (their names are printed); "rest" is the
step's time outside them. Three cases, each `--repeat` times:
- first: nothing committed, nothing in flight (the datasource's first run);
- committed: every partition's offsets committed (each run after a publish: 100,000 rows read);
- pipelined: one run in flight (`maxActiveRuns` 2: the plan continues from its planned ends, read from its plan).
Baseline in the same run: one ListOffsets request per partition (earliest and latest), on a sample, scaled.

A topic of 100,000 partitions does not fit one broker on this machine: Kafka keeps each partition's active
segment open (a file descriptor: the hard limit here is 20,000 per process) and maps its offset and time
indexes (vm.max_map_count is 65,530 per process). Without --bootstrap the benchmark starts a KRaft cluster
of its own: one broker-and-controller plus brokers, `--partitions-per-broker` partitions each (default 15,000).

    python benchmarks/plan_partitions.py                      # 100,000 partitions on a cluster it starts
    python benchmarks/plan_partitions.py --partitions 10000   # one broker
    python benchmarks/plan_partitions.py --bootstrap host:port --postgres postgresql+psycopg2://user@host:port
    python benchmarks/plan_partitions.py --tiny               # 50 partitions, once: that it runs (the tests)
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import os
import resource
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable, Iterator

import psutil
import sqlalchemy as sa
from confluent_kafka import Producer
from confluent_kafka import TopicPartition as KTP
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic, OffsetSpec

# --code DIR: import ingest_core from DIR (an export of an older commit: before and after on one broker)
_code = sys.argv[sys.argv.index("--code") + 1] if "--code" in sys.argv[:-1] else None
sys.path.insert(0, _code or str(Path(__file__).resolve().parents[1]))

from ingest_core.core.spec import parse_spec  # noqa: E402
from ingest_core.core.states import RunEvent  # noqa: E402
from ingest_core.dev.embedded import EmbeddedKafka  # noqa: E402
from ingest_core.kafka.offset_reader import KafkaOffsetReader  # noqa: E402
from ingest_core.store.main_line import MainLine  # noqa: E402
from ingest_core.store.metadata import MetadataStore  # noqa: E402
from ingest_core.store.offsets import Offsets  # noqa: E402
from ingest_core.store.runs import Runs  # noqa: E402
from ingest_core.supervisor import planning, run  # noqa: E402

TARGET_S = 1.0
# A KRaft controller refuses one operation of more than 10,000 metadata records ("excessively large batch"):
# a topic is created with part of its partitions, then grown.
PARTITIONS_PER_REQUEST = 5_000
DATASOURCE = "bench"


# ------------------------------------------------------------------------------------------- the broker


class JoiningBroker(EmbeddedKafka):
    """A broker-only node of `first`'s cluster: its controller is `first`'s."""

    def __init__(self, data_dir: Path, first: EmbeddedKafka, node_id: int, **kwargs: Any):
        super().__init__(data_dir, cluster_id=first.cluster_id, **kwargs)
        self.controller_port = first.controller_port
        self.node_id = node_id

    def _ports(self) -> dict[str, int]:
        return {"broker": self.port}

    def _config(self) -> dict[str, str]:
        return {**super()._config(), "process.roles": "broker", "node.id": str(self.node_id),
                "listeners": f"PLAINTEXT://127.0.0.1:{self.port}"}


@contextlib.contextmanager
def cluster(work: Path, brokers: int, heap: str) -> Iterator[list[EmbeddedKafka]]:
    # small index files: every partition's two indexes are created (sparse) and mapped
    config = {"log.index.size.max.bytes": "65536"}
    nodes: list[EmbeddedKafka] = []
    try:
        nodes.append(EmbeddedKafka(work / "kafka-1", heap=heap, broker_config=config).start())
        for n in range(2, brokers + 1):
            nodes.append(JoiningBroker(work / f"kafka-{n}", nodes[0], n, heap=heap, broker_config=config).start())
        admin = AdminClient({"bootstrap.servers": nodes[0].bootstrap})
        deadline = time.monotonic() + 120
        while len(admin.list_topics(timeout=30).brokers) < brokers:  # all registered before the topic's placed
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {len(admin.list_topics(timeout=30).brokers)} of {brokers} brokers joined")
            time.sleep(0.5)
        yield nodes
    finally:
        for node in reversed(nodes):
            node.stop()


def create_topic(admin: AdminClient, bootstrap: str, topic: str, partitions: int) -> None:
    first = min(partitions, PARTITIONS_PER_REQUEST)
    admin.create_topics([NewTopic(topic, first, 1)])[topic].result(timeout=600)
    total = first
    while total < partitions:
        total = min(partitions, total + PARTITIONS_PER_REQUEST)
        admin.create_partitions([NewPartitions(topic, total)])[topic].result(timeout=600)
    # every partition's leader must answer before anything is timed
    probe = KafkaOffsetReader.for_spec(bench_spec(topic, bootstrap), timeout_s=600)
    try:
        probe.latest(probe.partitions(topic=topic))
    finally:
        probe.close()


def bench_spec(topic: str, bootstrap: str):
    return parse_spec({"type": "kafka", "spec": {
        "dataSchema": {"dataSource": DATASOURCE},
        "ioConfig": {"topic": topic, "inputFormat": {"type": "json"}, "taskCount": 8, "useEarliestOffset": True,
                     # each Kafka call's deadline (default 15 s): a DescribeTopics of 100,000 partitions took
                     # longer on this machine under load
                     "consumerProperties": {"bootstrap.servers": bootstrap, "default.api.timeout.ms": 120_000}}}})


# ------------------------------------------------------------------------------------------- the timers

# (owner, attribute, label): the calls on the step's own thread do not overlap, so they add up to the step (with
# "rest"); the reader's queries on its threads (earliest, latest, topic ids) run at the same time as each other
TIMED: list[tuple[Any, str, str]] = [
    (run, "check_active", "store: datasource state"),
    (planning.Supervisor, "register", "store: spec history"),
    (Runs, "set_missing_deadlines", "store: runs in flight (deadlines)"),
    (Runs, "expire_overdue", "store: runs in flight (expiry)"),
    (Runs, "get", "store: this run's plan, if any"),
    (KafkaOffsetReader, "for_spec", "kafka: reader's clients"),
    (KafkaOffsetReader, "partitions", "kafka: discover partitions"),
    (KafkaOffsetReader, "snapshot", "kafka: offsets (and topic ids)"),
    (KafkaOffsetReader, "earliest", "kafka: earliest offsets"),
    (KafkaOffsetReader, "latest", "kafka: latest offsets"),
    (KafkaOffsetReader, "topic_ids", "kafka: topic ids"),
    (KafkaOffsetReader, "close", "kafka: reader closed"),
    (Runs, "inflight_end_offsets", "store: planned ends of runs in flight"),
    (Offsets, "committed", "store: committed offsets"),
    (planning, "resolve_start_offsets", "pure: start offsets"),
    (planning, "plan_run", "pure: plan (groups, splits)"),
    (Runs, "insert", "store: plan persisted"),
    (run, "log_plan", "log line"),
    (run, "stage_plan", "deep storage: group inputs staged"),
    (Runs, "start", "store: run started"),
]


class Timers:
    """Wall time per label of the wrapped functions, summed over their calls. A call inside another timed call
    of the same thread is the outer one's (`Runs.insert` asks `Runs.get`, for one)."""

    def __init__(self) -> None:
        self.wall: dict[str, float] = defaultdict(float)
        self.parallel: set[str] = set()  # labels timed on another thread than the step's
        self._undo: list[Callable[[], None]] = []
        self._depth = threading.local()

    def install(self) -> None:
        for owner, name, label in TIMED:
            if not hasattr(owner, name):  # older code (--code) without it: its time is in "rest"
                continue
            raw = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
            func = raw.__func__ if isinstance(raw, classmethod) else raw
            wrapped = self._timed(func, label)
            setattr(owner, name, classmethod(wrapped) if isinstance(raw, classmethod) else wrapped)
            self._undo.append(lambda owner=owner, name=name, raw=raw: setattr(owner, name, raw))

    def uninstall(self) -> None:
        for undo in self._undo:
            undo()

    def _timed(self, func: Callable, label: str) -> Callable:
        def timed(*args: Any, **kwargs: Any) -> Any:
            depth = getattr(self._depth, "n", 0)
            self._depth.n = depth + 1
            t0 = time.perf_counter()
            try:
                return func(*args, **kwargs)
            finally:
                self._depth.n = depth
                if depth == 0:
                    self.wall[label] += time.perf_counter() - t0
                    if threading.current_thread() is not threading.main_thread():
                        self.parallel.add(label)
        return timed


# ------------------------------------------------------------------------------------------- the cases


def _cpu(procs: list[psutil.Process]) -> float:
    return sum(t.user + t.system for t in (p.cpu_times() for p in procs))


def plan_case(case: str, repeat: int, spec: Any, store: MetadataStore, brokers: list[psutil.Process],
              timers: Timers) -> list[dict[str, Any]]:
    """Plan `repeat` runs of `case`; each run's figures."""
    out = []
    for i in range(repeat):
        run_id = f"{case}-{i}-{uuid.uuid4().hex[:6]}"
        ahead = None
        if case == "pipelined":  # a run in flight, planned and started, that this one continues from
            ahead = f"{run_id}-ahead"
            run.plan_step(spec, ahead, None, metadata=store)
        gc.collect()
        timers.wall.clear()
        b0, c0, t0 = _cpu(brokers), time.process_time(), time.perf_counter()
        jobs = run.plan_step(spec, run_id, None, metadata=store)
        wall = time.perf_counter() - t0
        cpu, broker_cpu = time.process_time() - c0, _cpu(brokers) - b0
        parts = {label: (seconds, label in timers.parallel) for label, seconds in timers.wall.items()}
        record = store.runs.require(DATASOURCE, run_id)
        if case == "pipelined" and not all(p.after_run == ahead for p in record.plan.partitions):
            raise SystemExit(f"run {run_id} did not continue from the run in flight {ahead}")
        for rid in (run_id, ahead):
            if rid is not None:
                store.runs.move(DATASOURCE, rid, RunEvent.FAIL, error="benchmark")
        out.append({"wall": wall, "cpu": cpu, "broker_cpu": broker_cpu, "parts": parts,
                    "xcom": len(json.dumps([job.to_json() for job in jobs])), "partitions": len(record.plan.partitions),
                    "ends": record.plan.end_offsets(), "groups": record.plan.groups})
    return out


def report(store_name: str, case: str, results: list[dict[str, Any]], brokers: bool) -> None:
    walls = [r["wall"] for r in results]
    best = min(range(len(results)), key=lambda k: walls[k])
    median = statistics.median(walls)
    print(f"\n{store_name}, case {case}: plan step (best / median of {len(walls)})  {walls[best]:.3f} s / "
          f"{median:.3f} s   (target <= {TARGET_S:g} s: {'met' if median <= TARGET_S else 'NOT met'})")
    print(f"  CPU of the step (median)                  {statistics.median(r['cpu'] for r in results):.3f} s in "
          f"this process" + (f", {statistics.median(r['broker_cpu'] for r in results):.3f} s in the brokers"
                             if brokers else ""))
    parts = results[best]["parts"]
    top = 0.0
    for _, _, label in TIMED:
        if label in parts:
            seconds, parallel = parts[label]
            print(f"  {label:<42}{seconds:.3f} s" + ("   (in parallel, within the offsets)" if parallel else ""))
            top += 0 if parallel else seconds
    print(f"  {'rest (outside the timed calls)':<42}{walls[best] - top:.3f} s")
    print(f"  XCom (the jobs' arguments)                {results[best]['xcom']} bytes", flush=True)


@contextlib.contextmanager
def metadata_store(url: str | None, work: Path, name: str) -> Iterator[tuple[str, MetadataStore]]:
    """A fresh store: SQLite in `work`, or database `name` on the PostgreSQL server `url` (dropped after)."""
    if url is None:
        store = MetadataStore(f"sqlite:///{work / 'metadata.db'}")
        store.upgrade()
        yield "SQLite", store
        store.engine.dispose()
        return
    admin = sa.create_engine(f"{url.rstrip('/')}/postgres", isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    store = MetadataStore(f"{url.rstrip('/')}/{name}")
    try:
        store.upgrade()
        yield "PostgreSQL", store
    finally:
        store.engine.dispose()
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", help="an existing Kafka (host:port); default: start a cluster of its own")
    ap.add_argument("--partitions", type=int, default=100_000)
    ap.add_argument("--partitions-per-broker", type=int, default=15_000,
                    help="the cluster it starts has ceil(partitions / this) brokers")
    ap.add_argument("--broker-heap", default="1536m")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--naive-sample", type=int, default=200)
    ap.add_argument("--postgres", metavar="URL", help="a PostgreSQL server (postgresql+psycopg2://user@host:port): "
                                                       "the cases run again with the store there")
    ap.add_argument("--topic", help="plan this existing topic (kept) instead of creating one")
    ap.add_argument("--code", metavar="DIR", help="import ingest_core from DIR (e.g. an export of an older commit)")
    ap.add_argument("--tiny", action="store_true", help="50 partitions, one plan per case, 10 naive requests: "
                                                        "measures nothing")
    args = ap.parse_args()
    if args.tiny:  # new defaults; the sizes given on the command line still win
        ap.set_defaults(partitions=50, repeat=1, naive_sample=10)
        args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="plan-bench-"))
    os.environ["INGEST_DEEP_STORAGE"] = (work / "deep-storage").as_uri()  # where the step stages the plan
    brokers = max(1, math.ceil(args.partitions / args.partitions_per_broker))
    try:
        with contextlib.ExitStack() as stack:
            if args.bootstrap:
                bootstrap, procs = args.bootstrap, []
            else:
                t0 = time.perf_counter()
                nodes = stack.enter_context(cluster(work, brokers, args.broker_heap))
                bootstrap = nodes[0].bootstrap
                procs = [psutil.Process(n.proc.pid) for n in nodes]
                print(f"started {brokers} broker(s) in {time.perf_counter() - t0:.1f} s (file descriptors per "
                      f"process: {resource.getrlimit(resource.RLIMIT_NOFILE)[1]})", flush=True)
            run_cases(args, work, bootstrap, procs)
    finally:
        gc.collect()
        shutil.rmtree(work, ignore_errors=True)


def run_cases(args: argparse.Namespace, work: Path, bootstrap: str, procs: list[psutil.Process]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = args.topic or f"bench-{uuid.uuid4().hex[:8]}"
    if args.topic:
        args.partitions = len(admin.list_topics(topic, timeout=60).topics[topic].partitions)
    else:
        t0 = time.perf_counter()
        create_topic(admin, bootstrap, topic, args.partitions)
        print(f"created {topic} with {args.partitions} partitions in {time.perf_counter() - t0:.1f} s", flush=True)
    produce(bootstrap, topic, args.partitions)
    spec = bench_spec(topic, bootstrap)
    timers = Timers()
    timers.install()
    try:
        stores = [None] + ([args.postgres] if args.postgres else [])
        for url in stores:
            with metadata_store(url, work, f"plan_bench_{uuid.uuid4().hex[:8]}") as (store_name, store):
                first = plan_case("first", args.repeat, spec, store, procs, timers)
                report(store_name, "first", first, bool(procs))
                plan = first[-1]
                assert plan["partitions"] == args.partitions
                # a publish's move of the main line: every partition's offsets committed
                with MainLine.locked(store, DATASOURCE, planning_lock=False) as line:
                    line.move(plan["ends"], by="benchmark")
                produce(bootstrap, topic, args.partitions)  # the runs after it find records to read
                for case in ("committed", "pipelined"):
                    report(store_name, case, plan_case(case, args.repeat, spec, store, procs, timers), bool(procs))
    finally:
        timers.uninstall()
    groups = plan["groups"]

    # Baseline: one ListOffsets request per partition (earliest + latest), on a sample, scaled up.
    sample = [KTP(topic, p) for p in range(min(args.naive_sample, args.partitions))]
    t0 = time.perf_counter()
    for ktp in sample:
        for spec_ in (OffsetSpec.earliest(), OffsetSpec.latest()):
            admin.list_offsets({ktp: spec_})[ktp].result()
    naive = (time.perf_counter() - t0) / len(sample) * args.partitions
    batched = plan_kafka_time(first)
    print(f"\npartitions                                  {args.partitions}")
    print(f"task groups / splits                        {len(groups)} / {sum(len(g.splits) for g in groups)}")
    print(f"offsets batched (case first, best)          {batched:.3f} s")
    print(f"offsets one request per partition           {naive:.3f} s   (scaled from {len(sample)} partitions)")
    ratio = naive / batched  # below 1 at --tiny's size (the batched case's connections dominate): never "0.0"
    print(f"ratio naive / batched                       {ratio:.1f}x" if ratio >= 1 else
          f"ratio naive / batched                       {ratio:.3g}x")
    print(f"load average                                {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores",
          flush=True)
    if not args.topic:
        admin.delete_topics([topic])


def produce(bootstrap: str, topic: str, partitions: int) -> None:
    """One record to one partition in 7: some partitions hold data, most are empty."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "log_level": 3})
    # the brokers learn of the partitions added in batches at their own pace: a producer whose metadata has fewer
    # refuses a record to a partition past them at once (Unknown partition)
    deadline = time.monotonic() + 300
    while len(producer.list_topics(topic, timeout=60).topics[topic].partitions) < partitions:
        if time.monotonic() > deadline:
            raise SystemExit(f"the producer's metadata still lacks partitions of {topic} after 300 s")
        time.sleep(1)
    for p in range(0, partitions, 7):
        producer.produce(topic, b'{"ts": 0}', partition=p)
        producer.poll(0)
    producer.flush(300)


def plan_kafka_time(results: list[dict[str, Any]]) -> float:
    """The best run's time in the offset queries (earliest and latest, at the same time)."""
    return min(max(r["parts"].get(label, (0.0, True))[0] for label in ("kafka: earliest offsets",
                                                                        "kafka: latest offsets"))
               for r in results)


if __name__ == "__main__":
    main()
