"""Benchmark: a fleet of N datasources on one Airflow (issue 48): what each idle datasource and each microbatch costs,
how long the DAG folder takes to parse, how fast both databases grow, and how each figure grows with N.

Setup, per N and executor: Airflow's components as a deployment runs them, each a process of its own
(scheduler, dag-processor, triggerer, api-server; benchmarks/harness/scheduler_soak.py's `Supervised`), Airflow's
database and the metadata store on PostgreSQL, the product's DAG folder (dags/*.py, a generated DAG file per spec)
with N specs, each on a topic of its own (freshness.py's spec: every event one row, a data gate of maxWait PT1M),
their Spark jobs on one shared Spark Connect server. The LocalExecutor, or the CeleryExecutor with two workers
(Redis as the broker; ingest_core/dev/celery_airflow.py, as tests/system/test_cluster.py). Of the N datasources
--continuous run `@continuous`, the others on a `PT1M` schedule. Cases, each --case-seconds long, in this order:
- idle: nothing produced; every run's data gate waits, deferred, in the triggerer;
- mix: the `@continuous` ones at --mix-rate events/s each, the `PT1M` ones at --busy-rate;
- busy: every datasource at --busy-rate events/s.

Figures per case, from Airflow, the store, PostgreSQL and /proc: CPU-seconds and peak RSS (summed over each process
tree) of every component (the LocalExecutor's workers and task processes are the scheduler's tree; the Celery
workers' are theirs) and of the Spark Connect server (its JVM and Python workers); the CPU per finished run, split
into Airflow's part (every component with its task processes) and Spark's; the idle cost per datasource (the
components' CPU per second over N); freshness p50/p99 (produce to the first poll that sees the event, freshness.py's
`Datasource`) of the `@continuous` and the `PT1M` datasources; rows and bytes per finished run of every table of
both databases, and per day (rows per run x runs per day at the case's rate), and the task logs' bytes. Where the
machine does not keep up (runs due but not finished, tasks waiting for a slot, events not visible by the case's
end), it says so, with the machine's CPU split between Airflow, Spark, the benchmark, Kafka and PostgreSQL and the
rest (other processes of the machine).

    PYTHONPATH=$PWD python benchmarks/fleet.py --datasources 10 50 200 --executor local celery --case-seconds 180
    PYTHONPATH=$PWD python benchmarks/fleet.py --tiny     # N=2, every part once for a few seconds: that it runs
        [--bootstrap HOST:PORT] [--spark-connect sc://HOST:PORT] [--postgres URL]   # servers already running
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, TypeVar

import psutil
import yaml
from confluent_kafka import Producer

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dag_parse import _search_started  # noqa: E402
from freshness import PARTITIONS, Datasource, airflow_conf_env, spec_for  # noqa: E402
from harness.fixed_cost_setup import ExternalConnect, add_server_arguments, load, scratch_databases  # noqa: E402
from harness.fixed_cost_setup import scratch_topics, tree_cpu  # noqa: E402
from harness.scheduler_soak import Supervised  # noqa: E402
from ingest_core.dev.celery_airflow import celery_settings, celery_worker  # noqa: E402
from ingest_core.dev.embedded import EmbeddedKafka, EmbeddedPostgres, EmbeddedRedis  # noqa: E402
from ingest_core.dev.embedded_spark import EmbeddedSparkConnect  # noqa: E402

CASES = ("idle", "mix", "busy")
EXECUTORS = ("local", "celery")
CELERY_WORKERS = 2
DAY_S = 86_400
T = TypeVar("T")
UPGRADE_LOCK = threading.Lock()
SAMPLE_S = 2.0  # RSS and Airflow's queue, sampled this often
ID_STRIDE = 10**9  # event ids: datasource index x stride + sequence, unique across the fleet
# Airflow's defaults for how often a deployment re-parses its DAG files (the harness sets 3 s for quick pickups;
# a fleet would spend its dag-processor on that)
DEPLOYMENT_CONF = {"AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "30",
                   "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "300",
                   "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "5"}


# ------------------------------------------------------------------------------------------------- figures


@dataclass
class Tables:
    """Rows and bytes (pg_total_relation_size) of each table of one database."""

    rows: dict[str, int]
    bytes: dict[str, int]

    def minus(self, before: "Tables") -> "Tables":
        return Tables({t: n - before.rows.get(t, 0) for t, n in self.rows.items()},
                      {t: n - before.bytes.get(t, 0) for t, n in self.bytes.items()})


@dataclass
class Snapshot:
    at: float  # time.monotonic()
    cpu: dict[str, float]  # component (or spark, kafka, postgres) -> CPU-s of its process tree
    own_cpu: dict[str, float]  # the component's main process alone
    machine_busy: float  # CPU-s the whole machine spent (all cores), from /proc/stat
    bench_cpu: float  # this process (producer, poller)
    finished_runs: int
    runs_by_state: dict[str, int]
    waiting_tasks: int  # task instances scheduled or queued: waiting for a slot
    airflow: Tables
    store: Tables
    log_bytes: int


@dataclass
class Growth:
    """A table's growth in a case: per finished run and per day at the case's rate."""

    rows_per_run: float | None
    rows_per_day: float
    bytes_per_day: float


@dataclass
class Freshness:
    datasources: int
    produced: int
    visible: int
    p50: float | None
    p99: float | None
    worst_p99: float | None  # the datasource with the highest p99


@dataclass
class CaseResult:
    executor: str
    n: int
    case: str
    seconds: float
    load: tuple[str, str]
    cpu_s: dict[str, float]
    own_cpu_s: dict[str, float]
    peak_rss_mib: dict[str, float]
    machine_cpu_s: float
    bench_cpu_s: float
    finished_runs: int
    runs_due: int | None  # the PT1M runs the case's minutes call for (None: no PT1M datasource)
    runs_by_state: dict[str, int]
    task_ids: dict[str, int]  # task instances of the runs that ended, by task id and state (as in Airflow)
    waiting_tasks_end: int  # task instances scheduled or queued at the end: waiting for a slot
    max_deferred: int
    freshness: dict[str, Freshness]
    airflow_growth: dict[str, Growth]
    store_growth: dict[str, Growth]
    log_bytes_per_day: float
    restarts: dict[str, int]

    @property
    def airflow_cpu_s(self) -> float:
        return sum(v for k, v in self.cpu_s.items() if k not in ("spark", "kafka", "postgres"))

    @property
    def task_cpu_s(self) -> float:
        """The task processes' part of Airflow's CPU: the Celery workers' trees, or the scheduler's tree less its own
        process (the LocalExecutor's workers and the tasks they run)."""
        workers = [k for k in self.cpu_s if k.startswith("celery-worker")]
        if workers:
            return sum(self.cpu_s[k] for k in workers)
        return self.cpu_s.get("scheduler", 0.0) - self.own_cpu_s.get("scheduler", 0.0)

    @property
    def per_run(self) -> dict[str, float | None]:
        """CPU-s per finished run: Airflow's (its task processes' and its components' parts) and Spark's."""
        if not self.finished_runs:
            return {"airflow": None, "tasks": None, "components": None, "spark": None}
        spark, runs = self.cpu_s.get("spark"), self.finished_runs
        return {"airflow": self.airflow_cpu_s / runs, "tasks": self.task_cpu_s / runs,
                "components": (self.airflow_cpu_s - self.task_cpu_s) / runs,
                "spark": None if spark is None else spark / runs}

    @property
    def idle_cost_per_datasource(self) -> float:
        """CPU-s per second per datasource of Airflow's components (their task processes too)."""
        return self.airflow_cpu_s / self.seconds / self.n

    @property
    def kept_up(self) -> bool:
        fresh = [f for f in self.freshness.values() if f.produced]
        all_visible = all(f.visible >= 0.99 * f.produced for f in fresh)
        on_time = self.runs_due is None or self.finished_runs >= 0.8 * self.runs_due
        return all_visible and on_time and self.waiting_tasks_end <= CELERY_WORKERS * 2

    def where_the_cpu_went(self) -> dict[str, float]:
        """Shares of the machine's CPU in the case (all cores): Airflow, Spark, Kafka, PostgreSQL, the benchmark,
        and the rest of the machine."""
        parts = {"airflow": self.airflow_cpu_s, **{k: self.cpu_s[k] for k in ("spark", "kafka", "postgres")
                                                   if k in self.cpu_s}, "benchmark": self.bench_cpu_s}
        parts["rest of the machine"] = max(0.0, self.machine_cpu_s - sum(parts.values()))
        return {k: v / self.machine_cpu_s if self.machine_cpu_s else 0.0 for k, v in parts.items()}


def growth(delta: Tables, runs: int, seconds: float) -> dict[str, Growth]:
    """Per table that changed: rows per finished run, rows and bytes per day at the case's rate."""
    scale = DAY_S / seconds
    return {t: Growth(n / runs if runs else None, n * scale, delta.bytes.get(t, 0) * scale)
            for t, n in sorted(delta.rows.items()) if n or delta.bytes.get(t, 0)}


def freshness_of(produced: dict[str, dict[int, float]], seen: dict[int, float]) -> Freshness:
    """Freshness over a group of datasources: {datasource: {id: produce time}} and {id: first seen}."""
    pooled, worst = [], None
    for ids in produced.values():
        f = [seen[i] - t for i, t in ids.items() if i in seen]
        pooled += f
        if len(f) > 1:
            p99 = statistics.quantiles(f, n=100, method="inclusive")[98]
            worst = p99 if worst is None else max(worst, p99)
    q = statistics.quantiles(pooled, n=100, method="inclusive") if len(pooled) > 1 else None
    return Freshness(len(produced), sum(len(ids) for ids in produced.values()), len(pooled),
                     q[49] if q else None, q[98] if q else None, worst)


# ------------------------------------------------------------------------------------------------- Airflow


class FleetAirflow(Supervised):
    """Airflow's components over the product's DAG folder with the fleet's specs; with `celery_broker`, the
    CeleryExecutor and CELERY_WORKERS workers (each `slots` / CELERY_WORKERS task processes): `slots` task processes
    at once in all (Airflow's `[core] parallelism`)."""

    SPEC_BUNDLE = True

    def __init__(self, root: Path, specs: dict[str, dict], bootstrap: str, connect_url: str, airflow_db_url: str,
                 metadata_url: str, celery_broker: str | None, slots: int = 4,
                 airflow_conf: dict[str, str] | None = None):
        dags = root / "dags"
        (dags / "datasources").mkdir(parents=True, exist_ok=True)
        for path in (ROOT / "dags").glob("*.py"):
            shutil.copy(path, dags / path.name)
        for name, spec in specs.items():
            (dags / "datasources" / f"{name}.yaml").write_text(yaml.safe_dump(spec))
        self.celery = celery_broker is not None
        self.procs, self.restarts, self.stopping = {}, Counter(), threading.Event()
        self.slots = slots
        conf = {**DEPLOYMENT_CONF, "AIRFLOW__CORE__PARALLELISM": str(slots),
                **(celery_settings(celery_broker, airflow_db_url) if celery_broker else {}), **(airflow_conf or {})}
        with UPGRADE_LOCK:  # Alembic's migration context is global to the process: one upgrade at a time
            self.start(root, bootstrap, dags, connect_url, airflow_db_url, metadata_url, **conf)

    def components(self) -> dict[str, tuple[list[str], dict[str, str]]]:
        own = super().components()
        if self.celery:
            for i in range(1, CELERY_WORKERS + 1):
                own[f"celery-worker-{i}"] = celery_worker(f"fleet-worker-{i}", self.root / f"worker-{i}-logs",
                                                          concurrency=max(1, self.slots // CELERY_WORKERS))
        return own

    def wait_workers(self, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        for name in (n for n in self.components() if n.startswith("celery-worker")):
            while " ready." not in (self.root / f"{name}.log").read_text(errors="replace"):
                if time.monotonic() > deadline:
                    raise SystemExit(f"{name} was not ready in {timeout:.0f} s; see {self.root / f'{name}.log'}")
                time.sleep(1)

    def parse_figures(self, dag_ids: list[str]) -> dict[str, float]:
        """The first parse of the DAG folder, as benchmarks/dag_parse.py reads it: the dag-processor's loop (from its
        first search for files to the last DAG's last_parsed_time) and each file's last_parse_duration."""
        rows = self.query("SELECT fileloc, max(last_parse_duration), min(last_parsed_time) FROM dag "
                          "WHERE dag_id = ANY(:ids) GROUP BY fileloc", ids=dag_ids)
        searched = _search_started((self.root / "dag-processor.log").read_text(errors="replace"))
        first = max(r[2] for r in rows).astimezone(timezone.utc).replace(tzinfo=None)
        return {"files": len(rows), "loop_s": (first - searched).total_seconds(),
                "file_sum_s": sum(r[1] or 0 for r in rows), "file_max_s": max(r[1] or 0 for r in rows)}

    def log_bytes(self) -> int:
        folders = [Path(self.env["AIRFLOW_HOME"]) / "logs", *self.root.glob("worker-*-logs")]
        return sum(p.stat().st_size for folder in folders for p in folder.rglob("*") if p.is_file())


def tables(query: Any) -> Tables:
    """Every table of the public schema of the database `query` reads: its rows (exact) and bytes."""
    names = [r[0] for r in query("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")]
    rows, size = {}, {}
    for name in names:
        rows[name] = query(f'SELECT count(*) FROM "{name}"')[0][0]
        size[name] = query("SELECT pg_total_relation_size(CAST(:t AS regclass))", t=f'"{name}"')[0][0]
    return Tables(rows, size)


# ------------------------------------------------------------------------------------------------- traffic


class Traffic:
    """One producer for every producing datasource (each at its rate, in 10-ms slices) and one poller that reads
    each one's new segments in turn, every `poll` seconds."""

    def __init__(self, bootstrap: str, sinks: dict[str, Datasource], index: dict[str, int], poll: float):
        self.bootstrap, self.sinks, self.index, self.poll = bootstrap, sinks, index, poll
        self.produced: dict[str, dict[int, float]] = {}
        self.seen: dict[int, float] = {}
        self.next_seq: Counter = Counter()
        self.failed: list[BaseException] = []

    def run(self, rates: dict[str, float], seconds: float, drain: float, at_end: Callable[[], T]) -> T:
        """Produce at `rates` for `seconds`, then `at_end()` (its result returned), then wait up to `drain` seconds
        for the events not yet seen."""
        self.produced = {ds: {} for ds in rates}
        stop = threading.Event()
        poller = threading.Thread(target=self._guard, args=(self._poll_until, stop, list(rates)), daemon=True)
        poller.start()
        try:
            self._produce(rates, seconds)
            ended = at_end()
            deadline = time.monotonic() + drain
            while time.monotonic() < deadline and not self.failed and not self.all_seen():
                time.sleep(self.poll)
        finally:
            stop.set()
            poller.join(120)
        if self.failed:
            raise SystemExit(f"the poller failed: {self.failed[0]!r}") from self.failed[0]
        return ended

    def all_seen(self) -> bool:
        return all(i in self.seen for ids in list(self.produced.values()) for i in list(ids))

    def _guard(self, fn: Any, *args: Any) -> None:
        try:
            fn(*args)
        except BaseException as exc:  # noqa: BLE001 - the main thread raises it
            self.failed.append(exc)

    def _produce(self, rates: dict[str, float], seconds: float) -> None:
        if not rates:
            time.sleep(seconds)
            return
        p = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5, "message.timeout.ms": 60_000,
                      "queue.buffering.max.messages": 2_000_000})
        start = time.time()
        sent: Counter = Counter()
        total = {ds: int(rate * seconds) for ds, rate in rates.items()}  # exactly this many, paced; late ones catch up
        while any(sent[ds] < n for ds, n in total.items()):
            now = time.time()
            for ds, rate in rates.items():
                due = min(total[ds], int((now - start) * rate) + 1)
                while sent[ds] < due:
                    seq = self.next_seq[ds]
                    i, t = self.index[ds] * ID_STRIDE + seq, time.time()
                    try:
                        p.produce(self.sinks[ds].topic, json.dumps({"id": i, "ts": int(t * 1000)}).encode(),
                                  partition=seq % PARTITIONS)
                    except BufferError:
                        p.poll(0.01)
                        continue
                    self.produced[ds][i] = t
                    self.next_seq[ds] += 1
                    sent[ds] += 1
            p.poll(0)
            time.sleep(0.01)
        if p.flush(120) != 0:
            raise SystemExit("the producer did not deliver every event in 120 s")

    def _poll_until(self, stop: threading.Event, datasources: list[str]) -> None:
        while True:
            began = time.monotonic()
            for ds in datasources:
                ids = self.sinks[ds].new_ids()
                now = time.time()
                for i in ids:
                    self.seen.setdefault(i, now)
            if stop.is_set():
                return
            time.sleep(max(0.0, self.poll - (time.monotonic() - began)))


class Probe:
    """Samples, every SAMPLE_S, each process tree's RSS (peak kept) and the task instances deferred."""

    def __init__(self, trees: dict[str, int], airflow: FleetAirflow):
        self.trees, self.airflow = trees, airflow
        self.peak_rss: Counter = Counter()
        self.max_deferred = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(SAMPLE_S):
            for name, pid in self.trees.items():
                self.peak_rss[name] = max(self.peak_rss[name], tree_rss(pid))
            with contextlib.suppress(Exception):  # (a busy database: the next sample)
                deferred = self.airflow.query("SELECT count(*) FROM task_instance WHERE state = 'deferred'")[0][0]
                self.max_deferred = max(self.max_deferred, deferred)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)


def tree_rss(pid: int) -> int:
    total = 0
    with contextlib.suppress(psutil.Error):
        root = psutil.Process(pid)
        for p in (root, *root.children(recursive=True)):
            with contextlib.suppress(psutil.Error):
                total += p.memory_info().rss
    return total


def machine_busy() -> float:
    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0) - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)


# ---------------------------------------------------------------------------------------------------- the fleet


class Fleet:
    """N datasources on one Airflow (one executor), its cases run one after the other."""

    def __init__(self, args: argparse.Namespace, n: int, executor: str, out: Path, services: "Services"):
        self.args, self.n, self.executor, self.out, self.services = args, n, executor, out, services
        tag = uuid.uuid4().hex[:6]
        self.names = [f"fleet_{tag}_{i:03d}" for i in range(n)]
        self.continuous = set(self.names[:min(args.continuous, n)])
        self.index = {name: i for i, name in enumerate(self.names)}

    def start(self, stack: contextlib.ExitStack) -> dict[str, Any]:
        s, a = self.services, self.args
        scratch_topics(stack, s.bootstrap, self.names, PARTITIONS)
        airflow_db, store_db = scratch_databases(stack, s.pg_base, [f"airflow_{self.names[0][:-4]}",
                                                                    f"ingest_{self.names[0][:-4]}"])
        specs = {name: spec_for(name, name, "@continuous" if name in self.continuous else "PT1M", 1)
                 for name in self.names}
        redis = stack.enter_context(EmbeddedRedis(self.out / "redis")) if self.executor == "celery" else None
        started = time.monotonic()
        self.airflow = FleetAirflow(self.out / "airflow", specs, s.bootstrap, s.connect_url, airflow_db, store_db,
                                    redis.url if redis else None, slots=a.slots or max(4, self.n // 25),
                                    airflow_conf=airflow_conf_env(a.airflow_conf))
        stack.callback(self.airflow.stop)
        self.airflow.wait_healthy()
        self.airflow.wait_workers()
        self.airflow.wait_parsed(self.names, timeout=max(300, 3 * self.n))
        parse = self.airflow.parse_figures(self.names)
        print(f"  {self.executor}, N={self.n}: healthy and {self.n} DAGs parsed {time.monotonic() - started:.0f} s "
              f"after the start (not counted); first parse: loop {parse['loop_s']:.1f} s, files {parse['files']}, "
              f"per file sum {parse['file_sum_s']:.1f} s, slowest {parse['file_max_s']:.2f} s; "
              f"{self.airflow.slots} task slots; load {load()}",
              flush=True)
        self.sinks = {name: Datasource(self.airflow.store, name, name) for name in self.names}
        self.traffic = Traffic(s.bootstrap, self.sinks, self.index, max(a.poll, self.n / 100))
        return parse

    def trees(self) -> dict[str, int]:
        trees = {name: proc.pid for name, proc in self.airflow.procs.items()}
        trees.update(self.services.trees)
        return trees

    def snapshot(self) -> Snapshot:
        trees = self.trees()
        own = {}
        for name, pid in trees.items():
            with contextlib.suppress(psutil.Error):
                t = psutil.Process(pid).cpu_times()
                own[name] = t.user + t.system
        states = dict(self.airflow.query("SELECT state, count(*) FROM dag_run WHERE dag_id = ANY(:ids) GROUP BY "
                                         "state", ids=self.names))
        waiting = self.airflow.query("SELECT count(*) FROM task_instance WHERE dag_id = ANY(:ids) AND state IN "
                                     "('scheduled', 'queued')", ids=self.names)[0][0]
        me = os.times()
        return Snapshot(time.monotonic(), {name: tree_cpu(pid) for name, pid in trees.items()}, own,
                        machine_busy(), me.user + me.system,
                        sum(v for k, v in states.items() if k in ("success", "failed")), states, waiting,
                        tables(self.airflow.query), tables(self.store_query), self.airflow.log_bytes())

    def store_query(self, sql: str, **params: Any) -> list[Any]:
        import sqlalchemy as sa

        with self.airflow.store.engine.connect() as conn:
            return list(conn.execute(sa.text(sql), params))

    def rates(self, case: str) -> dict[str, float]:
        a = self.args
        if case == "idle":
            return {}
        if case == "mix":
            return {ds: a.mix_rate if ds in self.continuous else a.busy_rate for ds in self.names}
        return {ds: a.busy_rate for ds in self.names}

    def run_case(self, case: str) -> CaseResult:
        a = self.args
        rates = self.rates(case)
        load_start = load()
        probe = Probe(self.trees(), self.airflow)
        wall_start = datetime.now(timezone.utc)
        before = self.snapshot()
        restarts_before = Counter(self.airflow.restarts)
        # the case's cost: exactly its seconds; the drain after them only lets the events in flight be seen
        after = self.traffic.run(rates, a.case_seconds, a.drain if rates else 0, self.snapshot)
        probe.close()
        seconds = after.at - before.at
        task_ids = {f"{task} {state}": n for task, state, n in self.airflow.query(
            "SELECT ti.task_id, ti.state, count(*) FROM task_instance ti JOIN dag_run r ON r.dag_id = ti.dag_id AND "
            "r.run_id = ti.run_id WHERE ti.dag_id = ANY(:ids) AND r.end_date >= :t GROUP BY ti.task_id, ti.state",
            ids=self.names, t=wall_start)}
        runs = after.finished_runs - before.finished_runs
        pt1m = self.n - len(self.continuous)
        groups = {"@continuous": self.continuous, "PT1M": set(self.names) - self.continuous}
        fresh = {g: freshness_of({ds: ids for ds, ids in self.traffic.produced.items() if ds in members and ids},
                                 self.traffic.seen) for g, members in groups.items()}
        return CaseResult(
            executor=self.executor, n=self.n, case=case, seconds=seconds, load=(load_start, load()),
            cpu_s={k: after.cpu[k] - before.cpu.get(k, 0.0) for k in after.cpu},
            own_cpu_s={k: after.own_cpu[k] - before.own_cpu.get(k, 0.0) for k in after.own_cpu},
            peak_rss_mib={k: v / 2**20 for k, v in probe.peak_rss.items()},
            machine_cpu_s=after.machine_busy - before.machine_busy, bench_cpu_s=after.bench_cpu - before.bench_cpu,
            finished_runs=runs, runs_due=int(pt1m * seconds // 60) if pt1m and rates else None,
            runs_by_state={k: v - before.runs_by_state.get(k, 0) for k, v in after.runs_by_state.items()},
            task_ids=task_ids, waiting_tasks_end=after.waiting_tasks, max_deferred=probe.max_deferred,
            freshness={g: f for g, f in fresh.items() if f.produced},
            airflow_growth=growth(after.airflow.minus(before.airflow), runs, seconds),
            store_growth=growth(after.store.minus(before.store), runs, seconds),
            log_bytes_per_day=(after.log_bytes - before.log_bytes) * DAY_S / seconds,
            restarts=dict(Counter(self.airflow.restarts) - restarts_before))


class Services:
    """Kafka, Spark Connect and PostgreSQL: the benchmark's own, or running ones (then their CPU is not seen)."""

    def __init__(self, args: argparse.Namespace, out: Path, stack: contextlib.ExitStack):
        self.trees: dict[str, int] = {}
        if args.bootstrap:
            self.bootstrap = args.bootstrap
        else:
            kafka = stack.enter_context(EmbeddedKafka(out / "kafka"))
            self.bootstrap, self.trees["kafka"] = kafka.bootstrap, kafka.proc.pid
        if args.spark_connect:
            self.connect_url = ExternalConnect(args.spark_connect).url
        else:
            connect = stack.enter_context(EmbeddedSparkConnect(out / "spark-connect", driver_memory="1g"))
            self.connect_url, self.trees["spark"] = connect.url, connect.proc.pid
        if args.postgres:
            self.pg_base = args.postgres.rstrip("/")
        else:
            pg = stack.enter_context(EmbeddedPostgres())
            self.pg_base, self.trees["postgres"] = pg.url, pg.proc.pid


# ------------------------------------------------------------------------------------------------------ report


def fmt(v: float | None, spec: str = ".2f", unit: str = "") -> str:
    return "-" if v is None else f"{v:{spec}}{unit}"


def print_case(r: CaseResult) -> None:
    """The case's figures, in one print (the executors' fleets may print at once under --tiny)."""
    per_run, states = r.per_run, ", ".join(f"{k} {v}" for k, v in r.runs_by_state.items() if v)
    lines = [f"\n  {r.executor}, N={r.n}, {r.case}: {r.seconds:.0f} s; load average {r.load[0]} at the start, "
             f"{r.load[1]} at the end",
             f"    runs finished {r.finished_runs} ({states})"
             + (f", PT1M runs due {r.runs_due}" if r.runs_due is not None else "")
             + f"; tasks waiting for a slot at the end {r.waiting_tasks_end}; deferred at most {r.max_deferred}",
             "    task instances of the runs that ended: "
             + (", ".join(f"{t} {n}" for t, n in sorted(r.task_ids.items())) or "none"),
             f"    {'process tree':<18}{'CPU-s':>9}{'(own)':>9}{'CPU/s':>8}{'peak RSS MiB':>14}"]
    lines += [f"    {name:<18}{cpu:>9.1f}{r.own_cpu_s.get(name, 0):>9.1f}{cpu / r.seconds:>8.2f}"
              f"{r.peak_rss_mib.get(name, 0):>14.0f}" for name, cpu in r.cpu_s.items()]
    lines.append(f"    Airflow (components and tasks) {r.airflow_cpu_s:.1f} CPU-s = "
                 f"{r.idle_cost_per_datasource * 1000:.1f} CPU-ms/s per datasource; per finished run: Airflow "
                 f"{fmt(per_run['airflow'])} CPU-s (task processes {fmt(per_run['tasks'])}, components "
                 f"{fmt(per_run['components'])}), Spark {fmt(per_run['spark'])} CPU-s")
    lines += [f"    freshness {group:<11} ({f.datasources} datasources): p50 {fmt(f.p50, '.1f', ' s')}, p99 "
              f"{fmt(f.p99, '.1f', ' s')}, worst datasource's p99 {fmt(f.worst_p99, '.1f', ' s')}; visible "
              f"{f.visible:,} of {f.produced:,} events" for group, f in r.freshness.items()]
    for label, g in (("Airflow's database", r.airflow_growth), ("the store", r.store_growth)):
        rows, mib = sum(x.rows_per_day for x in g.values()), sum(x.bytes_per_day for x in g.values()) / 2**20
        lines.append(f"    {label}: {rows:,.0f} rows/day, {mib:,.0f} MiB/day: " + ", ".join(
            f"{t} {x.rows_per_day:,.0f} ({fmt(x.rows_per_run, '.1f')}/run)"
            for t, x in sorted(g.items(), key=lambda kv: -kv[1].rows_per_day) if x.rows_per_day))
    shares = ", ".join(f"{k} {v:.0%}" for k, v in r.where_the_cpu_went().items())
    lines += [f"    task logs: {r.log_bytes_per_day / 2**20:,.0f} MiB/day",
              f"    {'kept up' if r.kept_up else 'DID NOT KEEP UP'}; the machine's CPU "
              f"({r.machine_cpu_s / r.seconds:.2f} of {os.cpu_count()} cores): {shares}" + (f"; restarts {r.restarts}" if r.restarts else "")]
    print("\n".join(lines), flush=True)


def print_table(results: list[CaseResult], parses: dict[tuple[str, int], dict]) -> None:
    print("\nfleet (CPU: Airflow's components with their task processes; per run: per finished run)")
    print(f"  {'executor':<8}{'N':>5}  {'case':<6}{'parse s':>8}{'CPU-ms/s/ds':>12}{'run: Airflow':>13}{'Spark':>7}"
          f"{'runs':>6}{'p50 s':>7}{'p99 s':>7}{'AF rows/day':>13}{'store rows/day':>15}  load  verdict")
    for r in results:
        f = r.freshness.get("@continuous") or r.freshness.get("PT1M")
        per_run = r.per_run
        print(f"  {r.executor:<8}{r.n:>5}  {r.case:<6}{parses[r.executor, r.n]['loop_s']:>8.1f}"
              f"{r.idle_cost_per_datasource * 1000:>12.1f}{fmt(per_run['airflow'], '.1f'):>13}"
              f"{fmt(per_run['spark'], '.1f'):>7}{r.finished_runs:>6}{fmt(f.p50 if f else None, '.1f'):>7}"
              f"{fmt(f.p99 if f else None, '.1f'):>7}{sum(x.rows_per_day for x in r.airflow_growth.values()):>13,.0f}"
              f"{sum(x.rows_per_day for x in r.store_growth.values()):>15,.0f}  {r.load[1].split('/')[0]}  "
              f"{'kept up' if r.kept_up else 'NOT kept up'}")
    by = {(r.executor, r.case): [] for r in results}
    for r in results:
        by[r.executor, r.case].append(r)
    for (executor, case), rs in by.items():
        if len(rs) > 1:
            a, b = rs[0], rs[-1]
            print(f"  growth with N, {executor} {case}: N {a.n} -> {b.n} ({b.n / a.n:.0f}x): Airflow CPU "
                  f"{b.airflow_cpu_s / max(a.airflow_cpu_s, 1e-9):.1f}x, runs {b.finished_runs}/{a.finished_runs}, "
                  f"Airflow DB rows/day {_ratio(b.airflow_growth, a.airflow_growth)}, parse "
                  f"{parses[executor, b.n]['loop_s'] / max(parses[executor, a.n]['loop_s'], 1e-9):.1f}x")


def _ratio(b: dict[str, Growth], a: dict[str, Growth]) -> str:
    sa, sb = sum(x.rows_per_day for x in a.values()), sum(x.rows_per_day for x in b.values())
    return f"{sb / sa:.1f}x" if sa else "-"


# -------------------------------------------------------------------------------------------------------- main


def write_results(path: Path, args: argparse.Namespace, results: list[CaseResult],
                  parses: dict[tuple[str, int], dict]) -> None:
    path.write_text(json.dumps(
        {"args": {k: str(v) for k, v in vars(args).items()}, "parse": {f"{e}-{k}": v for (e, k), v in parses.items()},
         "cases": [{**asdict(r), "airflow_cpu_s": r.airflow_cpu_s, "per_run": r.per_run,
                    "idle_cost_per_datasource": r.idle_cost_per_datasource, "kept_up": r.kept_up,
                    "cpu_went": r.where_the_cpu_went()} for r in results]}, indent=1, default=str))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_server_arguments(ap)
    ap.add_argument("--datasources", type=int, nargs="+", default=[10, 50, 200], help="fleet sizes N")
    ap.add_argument("--executor", choices=EXECUTORS, nargs="+", default=list(EXECUTORS))
    ap.add_argument("--cases", choices=CASES, nargs="+", default=list(CASES))
    ap.add_argument("--celery-cases", choices=CASES, nargs="+", help="the CeleryExecutor's cases (default: --cases)")
    ap.add_argument("--case-seconds", type=float, default=180, help="each case's length (its cost's window)")
    ap.add_argument("--drain", type=float, default=60, help="after a case, seconds to wait for its last events "
                                                            "(their freshness; not in its cost)")
    ap.add_argument("--continuous", type=int, default=2, help="how many datasources run @continuous (the rest PT1M)")
    ap.add_argument("--mix-rate", type=float, default=1000, help="events/s of each @continuous datasource in mix")
    ap.add_argument("--busy-rate", type=float, default=2, help="events/s of each other producing datasource")
    ap.add_argument("--poll", type=float, default=1.0, help="seconds between sweeps for new segments (at least "
                                                            "N/100: one query per datasource a sweep)")
    ap.add_argument("--slots", type=int, help="task processes at once (Airflow's [core] parallelism; with Celery, "
                                              "split between its workers; a gated run holds one while its plan "
                                              "looks at its gate); default: max(4, N/25)")
    ap.add_argument("--airflow-conf", nargs="*", default=[], metavar="SECTION.KEY=VALUE",
                    help="Airflow settings over the deployment's, e.g. dag_processor.min_file_process_interval=300 "
                         "(docker-compose.yaml's)")
    ap.add_argument("--tiny", action="store_true", help="N=2, every case and executor for a few seconds")
    ap.add_argument("--out", type=Path, help="keep everything (logs, Airflow homes, results.json) here")
    args = ap.parse_args()
    if args.tiny:
        args.datasources, args.case_seconds, args.drain, args.mix_rate, args.busy_rate = [2], 5, 0, 20, 2
        args.continuous = 1
    out = (args.out or Path(tempfile.mkdtemp(prefix="bench-fleet-"))).resolve()
    out.mkdir(parents=True, exist_ok=True)
    print(f"fleet: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores, load average {load()}; "
          f"N {args.datasources}, executors {args.executor}, cases {args.cases} of {args.case_seconds:.0f} s "
          f"(drain {args.drain:.0f} s); {args.continuous} @continuous (mix {args.mix_rate:g} events/s), the rest "
          f"PT1M; busy {args.busy_rate:g} events/s; {args.slots or 'max(4, N/25)'} task slots"
          f"{'; Airflow ' + ' '.join(args.airflow_conf) if args.airflow_conf else ''}; work dir {out}",
          flush=True)
    results: list[CaseResult] = []
    parses: dict[tuple[str, int], dict] = {}
    lock = threading.Lock()

    def run_executor(executor: str, services: Services) -> None:
        cases = args.celery_cases if executor == "celery" and args.celery_cases else args.cases
        for n in args.datasources:
            with contextlib.ExitStack() as fleet_stack:
                fleet = Fleet(args, n, executor, out / f"{executor}-{n}", services)
                parse = fleet.start(fleet_stack)
                with lock:
                    parses[executor, n] = parse
                for case in cases:
                    result = fleet.run_case(case)
                    with lock:
                        results.append(result)
                        print_case(result)
                        write_results(out / "results.json", args, results, parses)

    with contextlib.ExitStack() as stack:
        services = Services(args, out, stack)
        if args.tiny:  # measuring nothing: the executors' Airflows at once, for a shorter run
            with ThreadPoolExecutor(len(args.executor)) as pool:
                for running in [pool.submit(run_executor, e, services) for e in args.executor]:
                    running.result()
        else:
            for executor in args.executor:
                run_executor(executor, services)
    results.sort(key=lambda r: (args.executor.index(r.executor), r.n, CASES.index(r.case)))
    print_table(results, parses)
    print(f"results: {out / 'results.json'}")


if __name__ == "__main__":
    main()
