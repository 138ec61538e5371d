"""Benchmark: the fixed cost of one small microbatch through the DAG, Spark Connect against spark-submit.

The example `wikipedia` spec (taskCount 2, --task-count: two task groups, so two `spark_job` tasks per run), as
two DAGs that differ only in their topic and their Spark connection: `fc_connect` (a `spark_connect` connection to
one local Spark Connect server, started once) and `fc_submit` (a `spark` connection: one spark-submit, local[2], per
task group). Before each run, --records events (`ingest_core.dev.demo.wiki_events`) are produced to the DAG's topic, and
each run must publish exactly them. Everything runs in one process tree on this machine, both modes in the same
run (interleaved, so both see the same load):

1. `airflow dags test` (tasks in the CLI's process, SQLite Airflow DB, SQLite metadata store): --runs runs per
   mode, the first reported apart as cold; wall time per run (median, min, max) and CPU seconds per run (user +
   sys of the `airflow dags test` process tree; for Connect mode plus the server's CPU over the run, measured
   apart; each tree in a cgroup of its own where one can be made, so exited Python workers count, else wait4
   and psutil); the ratios. Where the seconds of a warm Connect run go: each task's start/end from the
   Airflow home's airflow.db (task_instance), Airflow's own time (the whole run minus the tasks), and inside
   `spark_job` the steps of the Connect client (imports, session, code upload, Python check, the job, stop),
   timed by hooks that this benchmark's copy of the DAG file wraps around them (`BENCH_TIMINGS`). Then a probe
   opens sessions on the warm server step by step, and the server's idle Python daemons are counted.
2. Under a scheduler (`airflow standalone`, LocalExecutor, Airflow's DB on a private PostgreSQL): `airflow dags
   trigger` then poll Airflow's DB until the run succeeds; fewer runs (--scheduler-runs). Skip: --skip-scheduler.
3. Large runs: 1M records (and 4M with --large) through the same DAGs under `airflow dags test`, both modes:
   Connect must be no slower than spark-submit.

The Connect server's cold start is printed, not counted in any run. Target: a small run end to end in
<= 10 s under `airflow dags test` in Connect mode, with at most a tenth of spark-submit's CPU per run.

    PYTHONPATH=$PWD python benchmarks/microbatch_fixed_cost.py [--runs 5] [--records 1000] [--skip-scheduler]
        [--scheduler-runs 3] [--skip-large | --large | --large-records N ...] [--task-count 2] [--out DIR]
    PYTHONPATH=$PWD python benchmarks/microbatch_fixed_cost.py --tiny    # every part once, tiny: that it runs
        [--bootstrap HOST:PORT] [--spark-connect sc://HOST:PORT] [--postgres URL]   # servers already running

Given servers (the tests give theirs) are used instead of starting the benchmark's own: the Connect server's cold
start and CPU are then not measured (printed as 0), so its figures are for a tiny run only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psutil
import yaml
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ingest_core.dev.demo import airflow_env, spark_connection, wiki_events  # noqa: E402
from ingest_core.dev.embedded import (  # noqa: E402
    EmbeddedKafka,
    EmbeddedPostgres,
    EmbeddedSparkConnect,
    free_port,
)
from ingest_core.store.metadata import MetadataStore  # noqa: E402
from ingest_core.store.records import RunStatus  # noqa: E402

BIN = Path(sys.executable).parent
AIRFLOW = str(BIN / "airflow")
PARTITIONS = 4
CONNECT_CONN = "spark_connect_bench"
MODES = ("connect", "submit")
LABEL = {"connect": "Spark Connect", "submit": "spark-submit", "floor": "Airflow alone"}
# Airflow's own floor: the ingest DAG's shape (plan -> 2 mapped jobs -> publish -> report) with tasks that do
# nothing, run the same way: what any DAG of that shape costs under `airflow dags test` on this machine.
FLOOR_DAG = '''
from airflow.sdk import DAG, task

with DAG("{dag_id}", schedule=None):
    @task
    def plan():
        return [0, 1]

    @task
    def spark_job(group):
        return group

    @task
    def publish(groups):
        return len(groups)

    @task
    def report(n):
        return n

    report(publish(spark_job.expand(group=plan())))
'''
TARGET_WALL_S, TARGET_CPU_RATIO = 10.0, 0.1

# The benchmark's copy of dags/ingest_datasources.py. With BENCH_TIMINGS set (the `airflow dags test` runs), it
# wraps the task bodies and the Connect client's steps with timers that append one JSON line per call to that
# file: the code measured is the product's own, the wrappers cost microseconds. pyspark is imported only inside
# the task (as the product does), so the import moves nowhere.
DAG_FILE = '''"""fixed-cost benchmark: airflow DAG file (dags/ingest_datasources.py) plus timing hooks."""
import functools
import json
import os
import time
from pathlib import Path

_TIMINGS = os.environ.get("BENCH_TIMINGS")


def _record(step, started, seconds):
    with open(_TIMINGS, "a") as f:
        f.write(json.dumps({"pid": os.getpid(), "step": step, "start": started, "seconds": seconds}) + "\\n")


def _timed(owner, name, step):
    fn = getattr(owner, name)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        t0, w0 = time.perf_counter(), time.time()
        try:
            return fn(*args, **kwargs)
        finally:
            _record(step, w0, time.perf_counter() - t0)
    setattr(owner, name, wrapper)


def _install_hooks():
    from ingest_core.provider import dag_factory
    from ingest_core.provider.operators.spark_job import IngestSparkSubmitOperator
    from ingest_core.spark import connect as spark_connect

    if getattr(dag_factory, "_bench_hooked", False):  # Airflow may run this file twice in one process
        return
    dag_factory._bench_hooked = True
    for name in ("plan_task", "publish_task", "report_task"):
        _timed(dag_factory, name, name.replace("_task", " body"))
    _timed(IngestSparkSubmitOperator, "execute", "spark_job body")
    _timed(spark_connect, "open_session", "session open (all)")
    _timed(spark_connect, "code_archive", "code archive (hash/zip)")
    _timed(spark_connect, "check_python", "Python-version UDF check")
    real_run_job = spark_connect.run_job

    def run_job(*args, **kwargs):
        t0, w0 = time.perf_counter(), time.time()
        import pyspark.sql.connect.session as connect_session  # what open_session and the job module import
        import ingest_core.spark.job as ingest_job
        from pyspark.sql import SparkSession
        _record("imports (Connect client, job)", w0, time.perf_counter() - t0)
        if not getattr(ingest_job, "_bench_hooked", False):
            ingest_job._bench_hooked = True
            _timed(ingest_job, "run_group", "run_group (the job)")
            _timed(ingest_job, "_ingest", "Spark read, rollup, write (+ describe)")
            _timed(ingest_job, "describe_segments", "segment files described")
            _timed(ingest_job, "_check_topic_ids", "topic ids checked (Kafka admin)")
            _timed(ingest_job, "load_job", "load job (spec, plan)")
            _timed(SparkSession.Builder, "create", "session create (gRPC)")
            _timed(connect_session.SparkSession, "addArtifacts", "code upload (addArtifacts)")
            _timed(connect_session.SparkSession, "stop", "session stop")
        t1, w1 = time.perf_counter(), time.time()
        try:
            return real_run_job(*args, **kwargs)
        finally:
            _record("run_job (all)", w1, time.perf_counter() - t1)
    spark_connect.run_job = run_job


if _TIMINGS:
    _install_hooks()
    _t0, _w0 = time.perf_counter(), time.time()

from ingest_core.provider.dag_factory import load_dags  # noqa: E402

globals().update(load_dags(Path(__file__).resolve().parent))
if _TIMINGS:
    _record("DAG file (load_dags)", _w0, time.perf_counter() - _t0)
'''


# ------------------------------------------------------------------------------------------------ helpers


def load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def stats(values: list[float]) -> tuple[float, float, float]:
    return statistics.median(values), min(values), max(values)


def fmt3(values: list[float], unit: str = "s") -> str:
    if not values:
        return "-"
    med, lo, hi = stats(values)
    return f"{med:.1f} {unit} (min {lo:.1f}, max {hi:.1f})"


def tree_cpu(pid: int) -> float:
    """user + sys of a process and its descendants, with what their exited, reaped children used."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0.0
    total = 0.0
    for p in procs:
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
    return total


def server_python(connect: EmbeddedSparkConnect) -> tuple[int, float]:
    """The Connect server's Python daemons (Spark keeps one per worker module and session environment) and
    their PSS with their forked workers, MiB."""
    daemons, pss = 0, 0
    if connect.proc is None:
        return daemons, pss
    with contextlib.suppress(psutil.Error):
        for child in psutil.Process(connect.proc.pid).children():
            with contextlib.suppress(psutil.Error):
                if "pyspark.daemon" not in " ".join(child.cmdline()):
                    continue
                daemons += 1
                for p in (child, *child.children(recursive=True)):
                    with contextlib.suppress(OSError, psutil.Error):
                        with open(f"/proc/{p.pid}/smaps_rollup") as f:
                            pss += next(int(ln.split()[1]) for ln in f if ln.startswith("Pss:"))
    return daemons, pss / 1024


class ExternalConnect:
    """A Spark Connect server the benchmark did not start (--spark-connect): its CPU and processes are not seen."""

    proc = None

    def __init__(self, url: str):
        self.url = url


class CpuGroup:
    """CPU of a process tree with every process that ever was in it: a cgroup of its own (v1 cpuacct, else v2),
    so workers that exit unseen count too. (pyspark's daemon ignores SIGCHLD: its forked Python workers are
    reaped by the kernel and their CPU reaches no parent's rusage, which wait4 and psutil would miss.) Needs
    root; None where no cgroup can be made."""

    def __init__(self, path: Path):
        self.path = path

    @classmethod
    def make(cls, name: str) -> "CpuGroup | None":
        for root in (Path("/sys/fs/cgroup/cpuacct"), Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup")):
            path = root / f"bench-fixedcost-{os.getpid()}-{name}"
            try:
                path.mkdir(exist_ok=True)
                group = cls(path)
                group.usage()
                return group
            except (OSError, ValueError, StopIteration):
                with contextlib.suppress(OSError):
                    path.rmdir()
        return None

    def add(self, pid: int) -> None:
        (self.path / "cgroup.procs").write_text(str(pid))

    def enter(self) -> None:
        """In a child between fork and exec (preexec_fn): this process and all it starts."""
        self.add(os.getpid())

    def usage(self) -> float:
        if (self.path / "cpuacct.usage").exists():
            return int((self.path / "cpuacct.usage").read_text()) / 1e9
        stat = (self.path / "cpu.stat").read_text().split()
        return int(stat[stat.index("usage_usec") + 1]) / 1e6

    def remove(self) -> None:
        with contextlib.suppress(OSError):
            self.path.rmdir()


def make_pool(n: int = 20_000, seed: int = 16) -> list[bytes]:
    return [json.dumps(e).encode() for e in wiki_events(n, random.Random(seed))]


def produce(bootstrap: str, topic: str, n: int, pool: list[bytes] | None = None,
            rng: random.Random | None = None) -> None:
    """n wiki-edit events: fresh ones from wiki_events (small runs), or cycled from a pool of them (large)."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10_000,
                  "queue.buffering.max.messages": 1_000_000})
    events = (pool[i % len(pool)] for i in range(n)) if pool else (json.dumps(e).encode()
                                                                   for e in wiki_events(n, rng or random.Random()))
    for i, value in enumerate(events):
        while True:
            try:
                p.produce(topic, value, partition=i % PARTITIONS)
                break
            except BufferError:
                p.poll(0.05)
    if p.flush(300) != 0:
        raise RuntimeError("the producer did not deliver every event")


def write_dags(folder: Path, prefix: str, topics: dict[str, str], task_count: int,
               floor: bool = True) -> dict[str, str]:
    """The example spec with `task_count` task groups, once per mode: {mode: dag_id}, and with `floor` Airflow's
    floor (`floor`). No retries: a failure shows at once."""
    (folder / "specs").mkdir(parents=True, exist_ok=True)
    (folder / "ingest_datasources.py").write_text(DAG_FILE)
    dag_ids = {}
    if floor:
        dag_ids["floor"] = f"{prefix}_floor"
        (folder / "airflow_floor.py").write_text(FLOOR_DAG.format(dag_id=dag_ids["floor"]))
    for mode in MODES:
        raw = yaml.safe_load((ROOT / "dags" / "datasources" / "wikipedia.yaml").read_text())
        dag_id = f"{prefix}_{mode}"
        raw["spec"]["dataSchema"]["dataSource"] = dag_id
        raw["spec"]["ioConfig"].update(topic=topics[mode], taskCount=task_count)
        raw["microbatch"].update(retries=0, spark={"connId": CONNECT_CONN if mode == "connect" else "spark_default"})
        (folder / "specs" / f"{dag_id}.yaml").write_text(yaml.safe_dump(raw))
        dag_ids[mode] = dag_id
    return dag_ids


def bench_env(home: Path, bootstrap: str, dags: Path, connect_url: str, **extra: str) -> dict[str, str]:
    env = airflow_env(home, bootstrap, dags_folder=dags, **extra)  # spark_default: spark-submit, local[2]
    env[f"AIRFLOW_CONN_{CONNECT_CONN.upper()}"] = json.dumps(spark_connection(connect_url))
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    return env


def to_epoch(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.timestamp()


def check_run(store: MetadataStore, dag_id: str, run_id: str, records: int) -> None:
    run = store.runs.get(dag_id, run_id)
    if run is None or run.status is not RunStatus.PUBLISHED or run.plan.records != records:
        found = "no run" if run is None else f"{run.status.value}, {run.plan.records} records"
        raise SystemExit(f"{dag_id} run {run_id}: expected {records} records published, found {found}")


# --------------------------------------------------------------------------------- airflow dags test


class DagsTest:
    """One Airflow home (SQLite Airflow DB, SQLite metadata store) with both DAGs."""

    def __init__(self, out: Path, bootstrap: str, connect: EmbeddedSparkConnect, topics: dict[str, str],
                 task_count: int):
        self.out = out
        self.dag_ids = write_dags(out / "dags", "fc", topics, task_count)
        self.env = bench_env(out, bootstrap, out / "dags", connect.url)
        self.connect = connect
        self.server_group = CpuGroup.make("connect-server")
        # the server's tree from now on, its exited Python workers included (a given server's is not seen)
        if self.server_group is not None and connect.proc is not None:
            for p in [psutil.Process(connect.proc.pid), *psutil.Process(connect.proc.pid).children(recursive=True)]:
                with contextlib.suppress(OSError, psutil.Error):
                    self.server_group.add(p.pid)
        how = ("cgroups (every process, exited ones included)" if self.server_group
               else "wait4 and psutil (exited Python workers missed)")
        print(f"  CPU measured by {how}")
        self.store = MetadataStore(self.env["INGEST_METADATA_URL"])
        self.store.upgrade()
        (out / "logs").mkdir(exist_ok=True)
        (out / "timings").mkdir(exist_ok=True)
        started = time.monotonic()
        with open(out / "logs" / "airflow-db-migrate.log", "wb") as log:
            subprocess.run([AIRFLOW, "db", "migrate"], env=self.env, stdout=log, stderr=subprocess.STDOUT, check=True)
        print(f"  airflow db migrate (SQLite): {time.monotonic() - started:.1f} s")

    def run(self, mode: str, name: str, records: int) -> dict[str, Any]:
        """One `airflow dags test` of the mode's DAG: wall and CPU, its run id, its tasks from airflow.db."""
        dag_id = self.dag_ids[mode]
        timings = self.out / "timings" / f"{name}.jsonl"
        log_path = self.out / "logs" / f"{name}.log"
        env = {**self.env, "BENCH_TIMINGS": str(timings)}
        server_before = self.server_cpu() if mode == "connect" else 0.0
        group = CpuGroup.make(name) if self.server_group else None
        t0 = time.time()
        with open(log_path, "wb") as log:
            proc = subprocess.Popen([AIRFLOW, "dags", "test", dag_id], env=env, stdout=log, stderr=subprocess.STDOUT,
                                    preexec_fn=group.enter if group else None)
            _, status, usage = os.wait4(proc.pid, 0)  # without cgroups: the tree that it reaped
            proc.returncode = os.waitstatus_to_exitcode(status)
        t1 = time.time()
        server_cpu = self.server_cpu() - server_before if mode == "connect" else 0.0
        cpu_airflow = group.usage() if group else usage.ru_utime + usage.ru_stime
        if group:
            group.remove()
        if proc.returncode != 0:
            raise SystemExit(f"{name}: airflow dags test {dag_id} exited {proc.returncode}; log {log_path}:\n"
                             f"{log_path.read_text(errors='replace')[-3000:]}")
        run_id, run_start, run_end, tasks = self.last_run(dag_id)
        if mode != "floor":
            check_run(self.store, dag_id, run_id, records)
        return {"mode": mode, "name": name, "records": records, "wall": t1 - t0, "t0": t0, "t1": t1,
                "cpu_airflow": cpu_airflow, "cpu_server": server_cpu, "cpu": cpu_airflow + server_cpu,
                "cpu_wait4": usage.ru_utime + usage.ru_stime, "run_id": run_id,
                "run_start": run_start, "run_end": run_end, "tasks": tasks,
                "timings": [json.loads(ln) for ln in timings.read_text().splitlines()] if timings.exists() else []}

    def server_cpu(self) -> float:
        if self.connect.proc is None:
            return 0.0
        return self.server_group.usage() if self.server_group else tree_cpu(self.connect.proc.pid)

    def last_run(self, dag_id: str) -> tuple[str, float, float, list[dict[str, Any]]]:
        with contextlib.closing(sqlite3.connect(self.out / "airflow" / "airflow.db")) as db:
            run_id, start, end = db.execute("SELECT run_id, start_date, end_date FROM dag_run WHERE dag_id = ? "
                                            "ORDER BY id DESC LIMIT 1", (dag_id,)).fetchone()
            rows = db.execute("SELECT task_id, map_index, start_date, end_date, state FROM task_instance "
                              "WHERE dag_id = ? AND run_id = ? ORDER BY start_date", (dag_id, run_id)).fetchall()
        tasks = [{"task": t if m < 0 else f"{t}[{m}]", "start": to_epoch(s), "end": to_epoch(e), "state": st}
                 for t, m, s, e, st in rows]
        return run_id, to_epoch(start), to_epoch(end), tasks


def breakdown(run: dict[str, Any]) -> dict[str, float]:
    """Where one run's wall time went: the tasks (airflow.db), Airflow around them, the steps inside spark_job."""
    tasks = [t for t in run["tasks"] if t["start"] and t["end"]]
    out: dict[str, float] = {}
    for t in tasks:
        key = t["task"].split("[")[0]
        out[f"task {key}"] = out.get(f"task {key}", 0.0) + t["end"] - t["start"]
    first, last = min(t["start"] for t in tasks), max(t["end"] for t in tasks)
    in_tasks = sum(t["end"] - t["start"] for t in tasks)
    out["airflow: CLI start to first task (imports, DAG parse, run)"] = first - run["t0"]
    out["airflow: between tasks"] = (last - first) - in_tasks
    out["airflow: last task to exit"] = run["t1"] - last
    out["airflow: all outside tasks"] = run["wall"] - in_tasks
    for rec in run["timings"]:
        out[f"step {rec['step']}"] = out.get(f"step {rec['step']}", 0.0) + rec["seconds"]
    bodies = sum(out.get(f"step {b} body", 0.0) for b in ("plan", "spark_job", "publish", "report"))
    out["airflow: task start/finish around the bodies"] = in_tasks - bodies
    return out


def print_breakdown(warm: list[dict[str, Any]]) -> dict[str, float]:
    per_run = [breakdown(r) for r in warm]
    keys = list(dict.fromkeys(k for b in per_run for k in b))
    med = {k: statistics.median([b.get(k, 0.0) for b in per_run]) for k in keys}
    wall = statistics.median([r["wall"] for r in warm])
    jobs = sum(1 for t in warm[0]["tasks"] if t["task"].startswith("spark_job"))

    def row(label: str, key: str, indent: int = 0) -> None:
        if key in med:
            print(f"  {'  ' * indent}{label:<58} {med[key]:6.2f} s  {100 * med[key] / wall:5.1f}%")

    print(f"\nWhere a warm Connect run's {wall:.2f} s go (median of {len(warm)} runs; {jobs} spark_job tasks, "
          "summed):")
    row("Airflow: CLI start to first task (imports, DAG parse, run)", "airflow: CLI start to first task "
        "(imports, DAG parse, run)")
    row("of which the DAG file (load_dags, each parse)", "step DAG file (load_dags)", 1)
    for task in ("plan", "spark_job", "publish", "report"):
        row(f"task {task}", f"task {task}")
        row(f"{task} body (our code)", f"step {task} body", 1)
        if task == "spark_job":
            for step in ("imports (Connect client, job)", "load job (spec, plan)", "session open (all)",
                         "session create (gRPC)", "code archive (hash/zip)", "code upload (addArtifacts)",
                         "Python-version UDF check", "run_group (the job)", "Spark read, rollup, write (+ describe)",
                         "segment files described", "topic ids checked (Kafka admin)", "session stop"):
                row(step, f"step {step}", 2 if step in ("session create (gRPC)", "code archive (hash/zip)",
                                                          "code upload (addArtifacts)",
                                                          "Python-version UDF check",
                                                          "Spark read, rollup, write (+ describe)",
                                                          "segment files described",
                                                          "topic ids checked (Kafka admin)") else 1)
    row("Airflow: task start/finish around the bodies (all tasks)", "airflow: task start/finish around the bodies")
    row("Airflow: between tasks", "airflow: between tasks")
    row("Airflow: last task to exit", "airflow: last task to exit")
    row("Airflow: everything outside the tasks", "airflow: all outside tasks")
    print(f"  {'whole run (wall)':<58} {wall:6.2f} s")
    return med


# ----------------------------------------------------------------------------------- the scheduler


class Standalone:
    """`airflow standalone` (LocalExecutor) with its DB on PostgreSQL, as tests/system/test_scheduler.py's harness
    (not imported: that module needs pytest and the tests' conftest)."""

    def __init__(self, root: Path, bootstrap: str, connect: EmbeddedSparkConnect, topics: dict[str, str],
                 task_count: int, airflow_db_url: str, metadata_url: str):
        import sqlalchemy as sa

        port = free_port()
        self.root = root
        # no floor DAG: it has no schedule, so the scheduler never runs it and `wait_idle` would wait for it forever
        self.dag_ids = write_dags(root / "dags", "fs", topics, task_count, floor=False)
        self.base = f"http://localhost:{port}"
        self.env = bench_env(
            root, bootstrap, root / "dags", connect.url, metadata_url=metadata_url,
            AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=airflow_db_url, AIRFLOW__CORE__PARALLELISM="4",
            AIRFLOW__API__PORT=str(port), AIRFLOW__CORE__EXECUTION_API_SERVER_URL=f"{self.base}/execution/",
            AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC="1", AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL="3",
            AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL="3",
            # a task's supervisor gives up on the api-server after 5 s by default: a loaded machine exceeds that
            AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT="60")
        self.db = sa.create_engine(airflow_db_url.replace("+asyncpg", ""))
        self.store = MetadataStore(metadata_url)
        self.store.upgrade()
        self.airflow("db", "migrate")
        self.log = open(root / "standalone.log", "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen([AIRFLOW, "standalone"], env=self.env, stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def wait_healthy(self, timeout: float = 300) -> None:
        import urllib.request

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError, ValueError):
                with urllib.request.urlopen(f"{self.base}/api/v2/monitor/health", timeout=5) as r:
                    health = json.load(r)
                if all(health.get(k, {}).get("status") == "healthy" for k in ("scheduler", "dag_processor")):
                    return
            if self.proc.poll() is not None:
                break
            time.sleep(1)
        raise SystemExit(f"airflow standalone did not become healthy; see {self.root / 'standalone.log'}")

    def airflow(self, *args: str) -> None:
        done = subprocess.run([AIRFLOW, *args], env=self.env, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise SystemExit(f"airflow {' '.join(args)}: {done.stdout[-3000:]}{done.stderr[-3000:]}")

    def query(self, sql: str, **params: Any) -> list[Any]:
        import sqlalchemy as sa

        with self.db.connect() as conn:
            return list(conn.execute(sa.text(sql), params))

    def wait_idle(self, timeout: float = 600) -> None:
        """Until both DAGs are parsed and every run they have (the first scheduled one) has finished."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            parsed = {r[0] for r in self.query("SELECT dag_id FROM dag")}
            runs = self.query("SELECT dag_id, state FROM dag_run")
            if set(self.dag_ids.values()) <= parsed and not any(s in ("queued", "running") for _, s in runs):
                if all(any(d == dag and s in ("success", "failed") for d, s in runs) for dag in self.dag_ids.values()):
                    return
            time.sleep(1)
        raise SystemExit(f"the DAGs did not settle in {timeout}s; see {self.root / 'standalone.log'}")

    def trigger(self, mode: str, name: str, records: int, timeout: float = 900) -> dict[str, Any]:
        """`airflow dags trigger` with a run id, then poll Airflow's DB until that run succeeds."""
        dag_id = self.dag_ids[mode]
        t0 = time.time()
        self.airflow("dags", "trigger", dag_id, "--run-id", name)
        t_cli = time.time()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            rows = self.query("SELECT state, queued_at, start_date, end_date FROM dag_run "
                              "WHERE dag_id = :d AND run_id = :r", d=dag_id, r=name)
            if rows and rows[0][0] == "success":
                t_seen = time.time()
                break
            if rows and rows[0][0] == "failed":
                raise SystemExit(f"scheduler run {name} of {dag_id} failed; see {self.root}")
            time.sleep(0.2)
        else:
            raise SystemExit(f"scheduler run {name} of {dag_id} did not finish in {timeout}s")
        _, queued, start, end = rows[0]
        tasks = self.query("SELECT task_id, map_index, start_date, end_date FROM task_instance "
                           "WHERE dag_id = :d AND run_id = :r ORDER BY start_date", d=dag_id, r=name)
        check_run(self.store, dag_id, name, records)
        end_e = to_epoch(end)
        return {"mode": mode, "name": name, "wall": end_e - t0, "polled": t_seen - t0, "cli": t_cli - t0,
                "queued_to_start": to_epoch(start) - to_epoch(queued), "run": end_e - to_epoch(start),
                "tasks": {f"{t}" if m < 0 else f"{t}[{m}]": to_epoch(e) - to_epoch(s) for t, m, s, e in tasks}}

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, 15)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait()
        self.log.close()
        self.db.dispose()


# ---------------------------------------------------------------------------------------------- main


def small_runs(args: argparse.Namespace, bench: DagsTest, bootstrap: str, topics: dict[str, str]) -> dict[str, Any]:
    rng = random.Random(16)
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in MODES}
    print(f"\n== airflow dags test: {args.runs} runs per mode of {args.records:,} records, {args.task_count} task "
          f"groups (modes interleaved, load {load()})")
    floor: list[dict[str, Any]] = []
    for i in range(args.runs):
        for mode in (MODES if i % 2 == 0 else MODES[::-1]) + ("floor",):
            if mode != "floor":
                produce(bootstrap, topics[mode], args.records, rng=rng)
            r = bench.run(mode, f"{mode}-{i}", args.records)
            (floor if mode == "floor" else runs[mode]).append(r)
            extra = f" (Connect server {r['cpu_server']:.1f} s)" if mode == "connect" else ""
            print(f"  {LABEL[mode]:<13} run {i}{' (cold)' if i == 0 else '':<7}: {r['wall']:6.1f} s wall, "
                  f"{r['cpu']:6.1f} CPU-s{extra}   load {load()}", flush=True)
    print(f"\n  {'':<14}{'cold run':>22}   {'warm runs: wall, median (min, max)':<36} CPU per warm run, median")
    summary: dict[str, Any] = {}
    for mode in MODES:
        cold, warm = runs[mode][0], runs[mode][1:] or runs[mode][:1]
        cpu = [r["cpu"] for r in warm]
        split = (f" = {statistics.median([r['cpu_airflow'] for r in warm]):.1f} dags test + "
                 f"{statistics.median([r['cpu_server'] for r in warm]):.1f} server") if mode == "connect" else ""
        walls = fmt3([r["wall"] for r in warm])
        print(f"  {LABEL[mode]:<14}{cold['wall']:>8.1f} s, {cold['cpu']:5.1f} CPU-s   {walls:<36}"
              f" {fmt3(cpu, 'CPU-s')}{split}")
        summary[mode] = {"cold_wall": cold["wall"], "cold_cpu": cold["cpu"],
                         "wall": stats([r["wall"] for r in warm]), "cpu": stats(cpu),
                         "cpu_airflow": statistics.median([r["cpu_airflow"] for r in warm]),
                         "cpu_server": statistics.median([r["cpu_server"] for r in warm])}
    for mode in MODES:
        per_run = [breakdown(r) for r in (runs[mode][1:] or runs[mode])]
        keys = ["task plan", "task spark_job", "task publish", "task report", "airflow: all outside tasks"]
        summary[mode]["tasks"] = {k: statistics.median([b.get(k, 0.0) for b in per_run]) for k in keys}
        print(f"  {LABEL[mode]:<14}tasks, warm median: " + ", ".join(
            f"{k.replace('task ', '').replace('airflow: all outside tasks', 'Airflow outside the tasks')} {v:.1f} s"
            for k, v in summary[mode]["tasks"].items()))
    warm_floor = floor[1:] or floor
    summary["floor"] = {"wall": stats([r["wall"] for r in warm_floor]), "cpu": stats([r["cpu"] for r in warm_floor])}
    print(f"  {LABEL['floor']:<14}(the same DAG shape, empty tasks): {fmt3([r['wall'] for r in warm_floor])}, "
          f"{fmt3([r['cpu'] for r in warm_floor], 'CPU-s')} per warm run")
    wall_ratio = summary["connect"]["wall"][0] / summary["submit"]["wall"][0]
    cpu_ratio = summary["connect"]["cpu"][0] / summary["submit"]["cpu"][0]
    print(f"  ratio connect / spark-submit (warm medians): wall {wall_ratio:.3f}, CPU {cpu_ratio:.3f}")
    summary["ratio"] = {"wall": wall_ratio, "cpu": cpu_ratio}
    summary["breakdown"] = print_breakdown(runs["connect"][1:] or runs["connect"])
    summary["runs"] = runs
    return summary


def scheduler_runs(args: argparse.Namespace, out: Path, bootstrap: str, connect: EmbeddedSparkConnect,
                   admin: AdminClient) -> dict[str, Any]:
    import sqlalchemy as sa

    topics = {m: f"fs_{m}{args.tag}" for m in MODES}
    create_topics(admin, topics.values())
    rng = random.Random(17)
    print(f"\n== under the scheduler (airflow standalone, LocalExecutor, Airflow DB on PostgreSQL): "
          f"{args.scheduler_runs} triggered runs per mode (load {load()})")
    with contextlib.ExitStack() as stack:
        pg_base = args.postgres.rstrip("/") if args.postgres else stack.enter_context(EmbeddedPostgres()).url
        databases = [f"airflow_fc{args.tag}", f"ingest_fc{args.tag}"]
        admin_engine = sa.create_engine(f"{pg_base}/postgres", isolation_level="AUTOCOMMIT")
        stack.callback(admin_engine.dispose)
        with admin_engine.connect() as conn:
            for name in databases:
                conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
        if args.postgres:  # another's server: its databases go again (a private server goes whole)
            stack.callback(drop_databases, admin_engine, databases)
        started = time.monotonic()
        sched = Standalone(out / "standalone", bootstrap, connect, topics, args.task_count,
                           f"{pg_base}/{databases[0]}", f"{pg_base}/{databases[1]}")
        try:
            sched.wait_healthy()
            print(f"  standalone healthy after {time.monotonic() - started:.0f} s (not counted)", flush=True)
            sched.wait_idle()
            print(f"  its first scheduled runs (empty topics) done after {time.monotonic() - started:.0f} s",
                  flush=True)
            runs: dict[str, list[dict[str, Any]]] = {m: [] for m in MODES}
            for i in range(args.scheduler_runs):
                for mode in (MODES if i % 2 == 0 else MODES[::-1]):
                    produce(bootstrap, topics[mode], args.records, rng=rng)
                    r = sched.trigger(mode, f"bench-{mode}-{i}", args.records)
                    runs[mode].append(r)
                    print(f"  {LABEL[mode]:<13} trigger {i}: {r['wall']:6.1f} s trigger to success "
                          f"(the CLI {r['cli']:.1f} s, queued to running {r['queued_to_start']:.1f} s, run "
                          f"{r['run']:.1f} s; seen by the poll at {r['polled']:.1f} s)   load {load()}", flush=True)
        finally:
            sched.stop()
    summary: dict[str, Any] = {}
    for mode in MODES:
        rs = runs[mode]
        tasks = {k: statistics.median([r["tasks"].get(k, 0.0) for r in rs]) for k in rs[0]["tasks"]}
        print(f"  {LABEL[mode]:<13} trigger to success {fmt3([r['wall'] for r in rs])}; the CLI "
              f"{statistics.median([r['cli'] for r in rs]):.1f} s, queued to running "
              f"{statistics.median([r['queued_to_start'] for r in rs]):.1f} s, run "
              f"{statistics.median([r['run'] for r in rs]):.1f} s; tasks: "
              + ", ".join(f"{k} {v:.1f} s" for k, v in tasks.items()))
        summary[mode] = {"wall": stats([r["wall"] for r in rs]), "runs": rs, "tasks": tasks}
    summary["ratio"] = summary["connect"]["wall"][0] / summary["submit"]["wall"][0]
    print(f"  ratio connect / spark-submit (medians): {summary['ratio']:.3f}")
    return summary


def drop_databases(admin_engine: Any, names: list[str]) -> None:
    import sqlalchemy as sa

    with admin_engine.connect() as conn:
        for name in names:
            conn.execute(sa.text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                 "WHERE datname = :n AND pid <> pg_backend_pid()"), {"n": name})
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}"'))


def large_runs(args: argparse.Namespace, bench: DagsTest, bootstrap: str, topics: dict[str, str]) -> list[dict]:
    sizes = args.large_records or [1_000_000] + ([4_000_000] if args.large else [])
    pool = make_pool()
    out = []
    print("\n== large runs through the DAG (airflow dags test; events cycled from a pool of 20,000 wiki_events)")
    for n in sizes:
        for mode in MODES:
            started = time.monotonic()
            produce(bootstrap, topics[mode], n, pool=pool)
            print(f"  produced {n:,} to {topics[mode]} in {time.monotonic() - started:.0f} s", flush=True)
        row = {"records": n}
        for mode in MODES:
            r = bench.run(mode, f"{mode}-large-{n}", n)
            jobs = [t["end"] - t["start"] for t in r["tasks"] if t["task"].startswith("spark_job")]
            row[mode] = {"wall": r["wall"], "cpu": r["cpu"], "spark_jobs": jobs}
            print(f"  {n:>9,} records, {LABEL[mode]:<13}: {r['wall']:6.1f} s wall "
                  f"({n / r['wall']:,.0f} rec/s), spark_job tasks {' + '.join(f'{j:.1f}' for j in jobs)} s, "
                  f"{r['cpu']:.1f} CPU-s   load {load()}", flush=True)
        verdict = "yes" if row["connect"]["wall"] <= row["submit"]["wall"] else "NO"
        print(f"  {n:>9,} records: Connect {row['connect']['wall']:.1f} s vs spark-submit "
              f"{row['submit']['wall']:.1f} s "
              f"(ratio {row['connect']['wall'] / row['submit']['wall']:.3f}): Connect no slower: {verdict}")
        out.append(row)
    return out


def probe(url: str, rounds: int) -> None:
    """(in a fresh Python, `--probe URL`) what opening a session costs, step by step, on a warm server: as
    the task does it (settings, our code as session artifacts, the Python-version UDF), then the same UDF in a
    session without artifacts; in each session the UDF and a one-row Python data source read twice (the first
    pays for the session's Python workers). Prints one JSON line per session."""
    t0 = time.perf_counter()
    import pyspark.sql.connect.session  # noqa: F401 - the client's import, as in the task
    from pyspark.sql import SparkSession

    from ingest_core.spark import connect as spark_connect
    from ingest_core.spark.job import REQUIRED_CONF, default_conf
    print(json.dumps({"imports": time.perf_counter() - t0}), flush=True)
    for kind in ["as the task does"] * rounds + ["no artifacts"] * rounds:
        row: dict[str, Any] = {"kind": kind}
        with spark_connect.connect_mode():
            os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
            t = time.perf_counter()
            spark = SparkSession.builder.remote(url).create()
            row["create"] = time.perf_counter() - t
            t = time.perf_counter()
            for key, value in {**default_conf(), **REQUIRED_CONF}.items():
                if spark.conf.isModifiable(key):
                    spark.conf.set(key, value)
            row["settings"] = time.perf_counter() - t
            if kind == "as the task does":
                t = time.perf_counter()
                spark.addArtifacts(str(spark_connect.code_archive()), pyfile=True)
                row["artifacts"] = time.perf_counter() - t
            t = time.perf_counter()
            spark_connect.check_python(spark, url)
            row["udf check"] = time.perf_counter() - t
            t = time.perf_counter()
            spark_connect.check_python(spark, url)
            row["udf again"] = time.perf_counter() - t
            source = probe_source()
            for label in ("data source read", "read again"):  # a one-row Python data source
                t = time.perf_counter()
                spark.dataSource.register(source)
                spark.read.format(source.name()).load().collect()
                row[label] = time.perf_counter() - t
            t = time.perf_counter()
            spark.stop()
            row["stop"] = time.perf_counter() - t
        print(json.dumps(row), flush=True)


def probe_source() -> Any:
    """A Python data source of one row: what a session's first read of our own data source pays on top of its
    work (Spark starts the session's data-source workers), without Kafka."""
    from pyspark.sql.datasource import DataSource, DataSourceReader

    class OneRowReader(DataSourceReader):
        def read(self, partition: Any) -> Any:
            yield (1,)

    class OneRow(DataSource):
        @classmethod
        def name(cls) -> str:
            return "bench_one_row"

        def schema(self) -> str:
            return "id int"

        def reader(self, schema: Any) -> Any:
            return OneRowReader()

    return OneRow


def session_probe(env: dict[str, str], url: str, rounds: int) -> list[dict[str, Any]]:
    print(f"\n== opening a Connect session, step by step, on the warm server (a fresh Python; load {load()})")
    done = subprocess.run([sys.executable, __file__, "--probe", url, "--probe-rounds", str(rounds)], env=env,
                          capture_output=True, text=True, timeout=1800)
    rows = [json.loads(ln) for ln in done.stdout.splitlines() if ln.startswith("{")]
    if done.returncode != 0:
        raise SystemExit(f"the session probe exited {done.returncode}: {done.stderr[-2000:]}")
    for row in rows:
        print("  " + ", ".join(f"{k} {v:.2f} s" if isinstance(v, float) else str(v) for k, v in row.items()))
    return rows


def create_topics(admin: AdminClient, names: Any) -> None:
    futures = admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in names])
    for f in futures.values():
        f.result(timeout=60)


def save(out: Path, results: dict[str, Any]) -> None:
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="airflow dags test runs per mode (the first is cold)")
    ap.add_argument("--scheduler-runs", type=int, default=3, help="triggered runs per mode under the scheduler")
    ap.add_argument("--records", type=int, default=1000, help="records produced before each small run")
    ap.add_argument("--skip-scheduler", action="store_true", help="no airflow standalone part")
    ap.add_argument("--skip-large", action="store_true", help="no 1M-record runs")
    ap.add_argument("--large", action="store_true", help="also 4M-record runs")
    ap.add_argument("--large-records", type=int, nargs="+", help="the large runs' sizes (default: 1M, with --large 4M)")
    ap.add_argument("--probe-sessions", type=int, default=3, help="sessions the probe opens of each kind")
    ap.add_argument("--task-count", type=int, default=2, help="the spec's taskCount: spark_job tasks per run")
    ap.add_argument("--tiny", action="store_true",
                    help="1 run per mode of 50 records, 1 task group, 1 triggered run per mode, 2,000-record large "
                         "runs, 1 probe session of each kind: every part once, measures nothing")
    ap.add_argument("--out", type=Path, help="keep everything (logs, Airflow homes, results.json) here")
    ap.add_argument("--bootstrap", help="a running Kafka broker to use instead of starting one (topics of its own)")
    ap.add_argument("--spark-connect", metavar="URL",
                    help="a running Spark Connect server (sc://host:port) to use instead of starting one: its cold "
                         "start and CPU are then not measured")
    ap.add_argument("--postgres", help="a PostgreSQL server, postgresql+psycopg2://user@host:port, for the scheduler "
                                       "part's databases (created and dropped again) instead of a private one")
    ap.add_argument("--probe", metavar="URL", help=argparse.SUPPRESS)  # internal: the session probe's process
    ap.add_argument("--probe-rounds", type=int, default=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.tiny:  # new defaults; what the command line gives still wins
        ap.set_defaults(runs=1, records=50, task_count=1, scheduler_runs=1, large_records=[2_000], probe_sessions=1)
        args = ap.parse_args()
    if args.probe:
        return probe(args.probe, args.probe_rounds)
    args.tag = f"_{uuid.uuid4().hex[:6]}" if args.bootstrap or args.postgres else ""  # names on a shared server
    out = (args.out or Path(tempfile.mkdtemp(prefix="bench-fixedcost-"))).resolve()
    out.mkdir(parents=True, exist_ok=True)
    load_start = load()
    print(f"fixed cost per microbatch: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores, "
          f"load average {load_start} (1/5/15 min); work dir {out}")
    results: dict[str, Any] = {"load_start": load_start, "args": {k: str(v) for k, v in vars(args).items()}}
    bench: DagsTest | None = None
    failed: list[str] = []

    def part(name: str, run: Any) -> None:
        """One optional part: a failure keeps the other parts' figures, and the benchmark exits 1 at the end."""
        try:
            results[name] = run()
        except (Exception, SystemExit) as exc:  # noqa: BLE001
            print(f"  the {name} part failed: {exc}", flush=True)
            results[name] = {"error": str(exc)}
            failed.append(name)
        save(out, results)

    try:
        with contextlib.ExitStack() as services:
            started = time.monotonic()
            if args.bootstrap:
                bootstrap = args.bootstrap
                print(f"  Apache Kafka at {bootstrap} (given)")
            else:
                bootstrap = services.enter_context(EmbeddedKafka(out / "kafka")).bootstrap
                print(f"  Apache Kafka up in {time.monotonic() - started:.1f} s ({bootstrap})")
            started = time.monotonic()
            if args.spark_connect:
                connect = ExternalConnect(args.spark_connect)
                results["connect_cold_start"] = 0.0
                print(f"  Spark Connect server at {connect.url} (given: its cold start and CPU not measured)")
            else:
                connect = services.enter_context(EmbeddedSparkConnect(out / "spark-connect"))
                results["connect_cold_start"] = time.monotonic() - started
                print(f"  Spark Connect server cold start: {results['connect_cold_start']:.1f} s (not counted in "
                      f"any run) at {connect.url}", flush=True)
            admin = AdminClient({"bootstrap.servers": bootstrap})
            topics = {m: f"fc_{m}{args.tag}" for m in MODES}
            create_topics(admin, topics.values())
            bench = DagsTest(out, bootstrap, connect, topics, args.task_count)
            results["dags_test"] = small = small_runs(args, bench, bootstrap, topics)
            save(out, results)
            daemons, pss = results["server_python_after_small"] = server_python(connect)
            print(f"  the Connect server now keeps {daemons} Python daemons, {pss:,.0f} MiB PSS with their workers "
                  f"(after {args.runs} Connect runs of {args.task_count} sessions each)")
            part("session_probe", lambda: session_probe(bench.env, connect.url, args.probe_sessions))
            if not args.skip_scheduler:
                part("scheduler", lambda: scheduler_runs(args, out, bootstrap, connect, admin))
            if not args.skip_large:
                part("large", lambda: large_runs(args, bench, bootstrap, topics))
            daemons, pss = results["server_python_at_end"] = server_python(connect)
            print(f"  at the end the Connect server keeps {daemons} Python daemons, {pss:,.0f} MiB PSS")
            wall, cpu_ratio = small["connect"]["wall"][0], small["ratio"]["cpu"]
            met = wall <= TARGET_WALL_S and cpu_ratio <= TARGET_CPU_RATIO
            print(f"\nTarget (a small run in <= {TARGET_WALL_S:g} s under airflow dags test in Connect mode, "
                  f"<= {TARGET_CPU_RATIO:g}x spark-submit's CPU): wall {wall:.1f} s "
                  f"({'met' if wall <= TARGET_WALL_S else 'NOT met'}), CPU {cpu_ratio:.3f}x "
                  f"({'met' if cpu_ratio <= TARGET_CPU_RATIO else 'NOT met'}): {'MET' if met else 'NOT MET'}")
            results["target_met"] = met
            floor_wall, floor_cpu = small["floor"]["wall"][0], small["floor"]["cpu"][0]
            print(f"Airflow's own floor under airflow dags test (the same DAG shape, tasks that do nothing): "
                  f"{floor_wall:.1f} s and {floor_cpu:.1f} CPU-s per run ({floor_cpu / small['submit']['cpu'][0]:.3f}x "
                  f"spark-submit's CPU); the Connect run adds {wall - floor_wall:.1f} s and "
                  f"{small['connect']['cpu'][0] - floor_cpu:.1f} CPU-s to it")
    finally:
        if bench is not None and bench.server_group is not None:
            bench.server_group.remove()  # the server has stopped: its group is empty
        results["load_end"] = load()
        print(f"load average at start {load_start}, at end {results['load_end']}")
        save(out, results)
        print(f"results: {out / 'results.json'}")
    if args.out is None:
        shutil.rmtree(out / "kafka", ignore_errors=True)  # the large runs' log; the rest stays for a look
    if failed:
        raise SystemExit(f"the benchmark's {', '.join(failed)} part(s) failed (see above; logs in {out})")


if __name__ == "__main__":
    main()
