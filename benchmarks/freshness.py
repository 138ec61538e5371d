"""Benchmark: freshness under the scheduler, the time from an event's produce to the first query that sees it.

A datasource whose DAG runs back to back (`microbatch.schedule: "@continuous"`, or --schedule PT5S with
--max-active-runs 2 for runs that overlap) under `airflow standalone` (LocalExecutor, Airflow's database on
PostgreSQL, its Spark jobs on a warm Spark Connect server). A producer sends events at a steady rate for a fixed
time, each carrying its id and its produce time (epoch ms, also its __time); a poller asks the metadata store every
--poll seconds for the datasource's published segments and reads the ids of the new ones: an event's freshness is
the time of the first poll that sees it minus its produce time (so it includes up to one poll interval, as a user
polling a dashboard would). Per rate: p50, p95, p99 and max freshness, the backlog (produced, not yet visible) over
time, and whether it grows (the median freshness of the last third of the events against the first third). The
highest rate held is the highest one with p99 <= 30 s whose freshness did not grow.

Beside it, in the same run and measured the same way: the anchor a user would pick instead, Spark Structured
Streaming over the same kind of topic with a 1-second processing-time trigger writing Parquet (Spark's Kafka
source, `from_json`); an event is visible once the file sink's log (`_spark_metadata`) lists a file holding it.
The two are measured one after the other, so neither takes the other's cores.

    PYTHONPATH=$PWD python benchmarks/freshness.py [--rates 1000 5000 10000] [--duration 600]
    PYTHONPATH=$PWD python benchmarks/freshness.py --tiny       # 20 events/s for 15 s, each side: that it runs
        [--bootstrap HOST:PORT] [--spark-connect sc://HOST:PORT] [--postgres URL]   # servers already running
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

import pyarrow.parquet as pq
import yaml
from confluent_kafka import Producer

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ingest_core.dev.embedded import EmbeddedKafka, EmbeddedPostgres, stop_group  # noqa: E402
from ingest_core.dev.embedded_spark import EmbeddedSparkConnect  # noqa: E402
from ingest_core.store.metadata import MetadataStore
from ingest_core.store.segment_schema import read_conformed  # noqa: E402
from harness import run_phases  # noqa: E402
from harness.fixed_cost_scheduler import Standalone  # noqa: E402
from harness.fixed_cost_setup import CONNECT_CONN, ExternalConnect, add_server_arguments, load  # noqa: E402
from harness.fixed_cost_setup import scratch_databases, scratch_topics  # noqa: E402
from spark_kafka_jobs import spark_kafka_jars  # noqa: E402

PARTITIONS = 4
HELD_P99 = 30.0  # seconds: the bar for "a rate held"


# ------------------------------------------------------------------------------------------------- figures


@dataclass
class Phase:
    """One rate, one side: when each event was produced and first seen."""

    side: str
    rate: int
    produced: dict[int, float] = field(default_factory=dict)  # id -> produce time (epoch s)
    seen: dict[int, float] = field(default_factory=dict)  # id -> first poll that saw it
    duplicates: int = 0
    produce_seconds: float = 0.0  # longer than asked when the producer fell behind its rate
    backlog: list[tuple[float, int]] = field(default_factory=list)  # (seconds since start, produced - seen)
    started: float = 0.0  # epoch s: the producer's start
    ended: float = 0.0  # epoch s: the poller's stop (every event seen, or the drain over)
    load: tuple[str, str] = ("", "")  # the load average at the start and at the end

    def freshness(self) -> list[float]:
        return [self.seen[i] - t for i, t in sorted(self.produced.items(), key=lambda kv: kv[1]) if i in self.seen]

    def summary(self) -> dict[str, Any]:
        f = self.freshness()
        if not f:
            return {"side": self.side, "rate": self.rate, "visible": 0, "produced": len(self.produced)}
        q = statistics.quantiles(f, n=100, method="inclusive") if len(f) > 1 else [f[0]] * 99
        third = max(1, len(f) // 3)
        first, last = statistics.median(f[:third]), statistics.median(f[-third:])
        growing = last > first * 1.5 + 2.0  # a trend, not the noise of one slow run
        return {"side": self.side, "rate": self.rate, "produced": len(self.produced), "visible": len(f),
                "produce_seconds": self.produce_seconds,
                "missing": len(self.produced) - len(f), "duplicates": self.duplicates,
                "p50": q[49], "p95": q[94], "p99": q[98], "max": max(f), "first_third_p50": first,
                "last_third_p50": last, "growing": growing,
                "held": not growing and q[98] <= HELD_P99 and len(f) == len(self.produced),
                "load_start": self.load[0], "load_end": self.load[1], "backlog": self.backlog}


def print_summary(s: dict[str, Any]) -> None:
    if not s.get("visible"):
        print(f"  {s['side']:<22} {s['rate']:>7,}/s  nothing visible of {s['produced']:,} events")
        return
    print(f"  {s['side']:<22} {s['rate']:>7,}/s  p50 {s['p50']:6.1f} s  p95 {s['p95']:6.1f} s  p99 {s['p99']:6.1f} s"
          f"  max {s['max']:6.1f} s  events {s['visible']:,} of {s['produced']:,} (duplicates {s['duplicates']})"
          f"  lag {'growing' if s['growing'] else 'steady'} (p50 first third {s['first_third_p50']:.1f} s, "
          f"last third {s['last_third_p50']:.1f} s); produced in {s['produce_seconds']:.0f} s; load average "
          f"{s['load_start']} at the start, {s['load_end']} at the end")
    marks = s["backlog"][:: max(1, len(s["backlog"]) // 8)]
    print("      backlog over time: " + ", ".join(f"{t:.0f} s {n:,}" for t, n in marks))


# ------------------------------------------------------------------------------------------------ the sides


class Sink(Protocol):
    name: str
    topic: str

    def new_ids(self) -> list[int]: ...


class Datasource:
    """This project's side: the datasource's published segments, as a query over it would see them."""

    name = "this project"

    def __init__(self, store: MetadataStore, datasource: str, topic: str):
        self.store, self.datasource, self.topic = store, datasource, topic
        self._read: set[str] = set()

    def new_ids(self) -> list[int]:
        """The ids of the segments published since the last call. A segment that cannot be read now (deep storage
        down: the fault soak) is read at the next call; what was read before it is returned."""
        fresh = [s for s in self.store.segment_records.of(self.datasource, used_only=True) if s.id not in self._read]
        ids: list[int] = []
        for segment in fresh:  # nothing compacts here: every published segment stays visible
            try:
                table = read_conformed([segment], ["id"])
            except Exception:
                if ids:
                    break
                raise
            ids.extend(table.column("id").to_pylist() if table is not None else [])
            self._read.add(segment.id)
        return ids


class StructuredStreaming:
    """The anchor: a Structured Streaming query (1-second trigger, Parquet file sink) in a spark-submit of its own."""

    name = "Structured Streaming 1s"

    def __init__(self, out: Path, bootstrap: str, topic: str):
        self.topic, self.folder = topic, out / "anchor-table"
        script = out / "anchor_stream.py"
        script.write_text(ANCHOR_JOB)
        self.log = open(out / "anchor.log", "wb")  # noqa: SIM115 - closed in stop()
        submit = Path(sys.executable).parent / "spark-submit"
        self.proc = subprocess.Popen(
            [str(submit), "--master", "local[2]", "--conf", "spark.sql.shuffle.partitions=2",
             "--conf", "spark.sql.session.timeZone=UTC", "--jars", ",".join(spark_kafka_jars()),
             str(script), bootstrap, topic, str(self.folder), str(out / "anchor-checkpoint")],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, "PYSPARK_PYTHON": sys.executable})
        self._files: set[str] = set()

    def wait_started(self, timeout: float = 300) -> None:
        """Until the query committed its first (empty) batch: Spark's start is not counted."""
        log = self.folder / "_spark_metadata"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if log.is_dir() and any(p.name[0].isdigit() for p in log.iterdir()):
                return
            if self.proc.poll() is not None:
                raise SystemExit(f"the Structured Streaming query exited {self.proc.returncode}; see anchor.log")
            time.sleep(0.5)
        raise SystemExit(f"the Structured Streaming query did not start in {timeout:.0f} s; see anchor.log")

    def committed_files(self) -> list[str]:
        """The file sink's log: each batch's entry lists its files (a `.compact` entry all files so far)."""
        files = []
        log = self.folder / "_spark_metadata"
        for entry in sorted(p for p in log.iterdir() if p.name[0].isdigit() and not p.name.endswith(".tmp")):
            with contextlib.suppress(FileNotFoundError):
                for line in entry.read_text().splitlines()[1:]:  # the first line is the log's version
                    if line.strip():
                        files.append(json.loads(line)["path"])
        return files

    def new_ids(self) -> list[int]:
        ids: list[int] = []
        for uri in self.committed_files():
            if uri not in self._files:
                self._files.add(uri)
                ids.extend(pq.read_table(uri.removeprefix("file:"), columns=["id"]).column("id").to_pylist())
        return ids

    def stop(self) -> None:
        stop_group(self.proc, 60)
        self.log.close()


ANCHOR_JOB = '''
import sys
from pyspark.sql import SparkSession, functions as F

bootstrap, topic, path, checkpoint = sys.argv[1:5]
spark = SparkSession.builder.appName("freshness-anchor").getOrCreate()
events = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", topic).option("startingOffsets", "earliest").load())
rows = events.select(F.from_json(F.col("value").cast("string"), "id BIGINT, ts BIGINT").alias("e")).select(
    "e.id", F.timestamp_millis(F.col("e.ts")).alias("__time"))
query = (rows.writeStream.format("parquet").option("path", path).option("checkpointLocation", checkpoint)
         .trigger(processingTime="1 second").start())
query.awaitTermination()
'''


# ----------------------------------------------------------------------------------------------- one phase


def produce_steadily(bootstrap: str, topic: str, rate: int, seconds: float, phase: Phase, next_id: int) -> int:
    """`rate` x `seconds` events at `rate` events/s, in 10-ms slices, each event's produce time taken as it is
    handed over to the client."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "queue.buffering.max.messages": 2_000_000,
                  "message.timeout.ms": 60_000})
    failed: list[int] = []
    total = int(rate * seconds)  # exactly this many, paced; late slices catch up
    start = time.time()
    sent = 0
    while sent < total:
        due = min(total, int((time.time() - start) * rate) + 1)
        while sent < due:
            i = next_id + sent
            t = time.time()
            payload = json.dumps({"id": i, "ts": int(t * 1000)}).encode()
            try:
                p.produce(topic, payload, partition=i % PARTITIONS,
                          on_delivery=lambda err, _msg, i=i: err is not None and failed.append(i))
            except BufferError:
                p.poll(0.01)
                continue
            phase.produced[i] = t
            sent += 1
        p.poll(0)
        time.sleep(0.01)
    phase.produce_seconds = time.time() - start
    if p.flush(120) != 0:
        raise SystemExit("the producer did not deliver every event in 120 s")
    for i in failed:  # not acknowledged: never expected to be seen
        phase.produced.pop(i, None)
    return next_id + sent


def measure(sink: Sink, bootstrap: str, rate: int, seconds: float, poll: float, drain: float,
            next_id: int) -> tuple[Phase, int]:
    phase = Phase(sink.name, rate)
    stop = threading.Event()
    start = phase.started = time.time()
    load_start = load()

    failed: list[BaseException] = []

    def poller() -> None:
        try:
            poll_until(stop)
        except BaseException as exc:  # noqa: BLE001 - the main thread raises it
            failed.append(exc)

    def poll_until(stop: threading.Event) -> None:
        while True:
            now = time.time()
            for i in sink.new_ids():
                if i in phase.seen:
                    phase.duplicates += 1
                else:
                    phase.seen[i] = now
            phase.backlog.append((now - start, len(phase.produced) - len(phase.seen)))
            if stop.is_set():
                return
            time.sleep(max(0.0, poll - (time.time() - now)))

    thread = threading.Thread(target=poller, daemon=True)
    thread.start()
    next_id = produce_steadily(bootstrap, sink.topic, rate, seconds, phase, next_id)
    deadline = time.monotonic() + drain  # then until every acknowledged event is seen (or the drain ends)
    while time.monotonic() < deadline and not failed and any(i not in phase.seen for i in list(phase.produced)):
        time.sleep(poll)
    stop.set()
    thread.join(timeout=120)
    phase.ended, phase.load = time.time(), (load_start, load())
    if failed:
        raise SystemExit(f"the poller failed: {failed[0]!r}") from failed[0]
    return phase, next_id


# ---------------------------------------------------------------------------------------------------- main


def spec_for(datasource: str, topic: str, schedule: str, max_active_runs: int, task_count: int = 1,
             read_up_to: str | None = None) -> dict[str, Any]:
    """Every event one row (no rollup), its __time its produce time; the DAG's jobs on the Connect server."""
    return {
        "type": "kafka",
        "spec": {
            "dataSchema": {
                "dataSource": datasource,
                "timestampSpec": {"column": "ts", "format": "millis"},
                "dimensionsSpec": {"dimensions": [{"type": "long", "name": "id"}]},
                "granularitySpec": {"segmentGranularity": "HOUR", "queryGranularity": "NONE", "rollup": False},
            },
            "ioConfig": {"topic": topic, "inputFormat": {"type": "json"}, "taskCount": task_count, "useEarliestOffset": True,
                         "completionTimeout": "PT10M", "consumerProperties": {
                             "bootstrap.servers": {"type": "environment", "variable": "INGEST_KAFKA_BOOTSTRAP"}}},
            "tuningConfig": {"type": "kafka"},
        },
        "microbatch": {"schedule": schedule, "maxActiveRuns": max_active_runs, "retries": 0,
                       **({"readUpTo": read_up_to} if read_up_to else {}), "spark": {"connId": CONNECT_CONN},
                       # the gate waits in the triggerer while the topic is idle: no empty runs back to back
                       "dataGate": {"minRecords": 1, "maxWait": "PT1M", "pokeInterval": "PT1S"}},
    }


def airflow_conf_env(settings: list[str]) -> dict[str, str]:
    """`section.key=value` -> {"AIRFLOW__SECTION__KEY": value}, Airflow's environment form of a setting."""
    env = {}
    for setting in settings:
        name, sep, value = setting.partition("=")
        section, dot, key = name.partition(".")
        if not (sep and dot and section and key):
            raise SystemExit(f"--airflow-conf {setting!r}: expected section.key=value")
        env[f"AIRFLOW__{section.upper()}__{key.upper()}"] = value
    return env


class FreshnessScheduler(Standalone):
    """`airflow standalone` over one datasource of this benchmark's own (the fixed-cost benchmark's harness)."""

    def __init__(self, root: Path, spec: dict[str, Any], bootstrap: str, connect_url: str, airflow_db_url: str,
                 metadata_url: str, airflow_conf: dict[str, str] | None = None):
        dags = root / "dags"
        (dags / "specs").mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / "dags" / "ingest_datasources.py", dags / "ingest_datasources.py")
        (dags / "specs" / "freshness.yaml").write_text(yaml.safe_dump(spec))
        self.start(root, bootstrap, dags, connect_url, airflow_db_url, metadata_url, **(airflow_conf or {}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rates", type=int, nargs="+", default=[1_000, 5_000, 10_000], help="events/s, one phase each")
    ap.add_argument("--duration", type=float, default=600, help="seconds of producing per rate")
    ap.add_argument("--drain", type=float, default=300, help="seconds to wait for the last events after a phase")
    ap.add_argument("--poll", type=float, default=0.5, help="seconds between the queries that look for new rows")
    ap.add_argument("--schedule", default="@continuous", help="the datasource's microbatch.schedule")
    ap.add_argument("--max-active-runs", type=int, default=1)
    ap.add_argument("--read-up-to", choices=["intervalEnd", "latest"],
                    help="the datasource's microbatch.readUpTo (default: the spec's default for the schedule)")
    ap.add_argument("--task-count", type=int, default=1, help="the datasource's ioConfig.taskCount (Spark jobs per run)")
    ap.add_argument("--airflow-conf", nargs="*", default=[], metavar="SECTION.KEY=VALUE",
                    help="Airflow settings for the scheduler's side, e.g. scheduler.scheduler_idle_sleep_time=0.2")
    ap.add_argument("--skip-anchor", action="store_true", help="no Structured Streaming side")
    ap.add_argument("--warmup", type=int, default=200, metavar="EVENTS",
                    help="events produced (in 1 s) and waited for before the first rate, not counted: the first run "
                         "on a Spark Connect server starts its Python workers (the issue measures a warm server)")
    ap.add_argument("--tiny", action="store_true", help="20 events/s for 15 s on each side: that it runs")
    ap.add_argument("--out", type=Path, help="keep everything (logs, Airflow home, results.json) here")
    add_server_arguments(ap)
    args = ap.parse_args()
    if args.tiny:
        ap.set_defaults(rates=[20], duration=15, drain=240, warmup=0)
        args = ap.parse_args()
    tag = uuid.uuid4().hex[:6]
    out = (args.out or Path(tempfile.mkdtemp(prefix="bench-freshness-"))).resolve()
    out.mkdir(parents=True, exist_ok=True)
    print(f"freshness: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores, load average "
          f"{load()}; schedule {args.schedule} (maxActiveRuns {args.max_active_runs}, taskCount {args.task_count}"
          f"{', readUpTo ' + args.read_up_to if args.read_up_to else ''}"
          f"{', Airflow ' + ' '.join(args.airflow_conf) if args.airflow_conf else ''}), rates {args.rates} events/s "
          f"for {args.duration:.0f} s each, poll every {args.poll} s; work dir {out}", flush=True)
    results: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}, "phases": []}
    with contextlib.ExitStack() as services:
        bootstrap = args.bootstrap or services.enter_context(EmbeddedKafka(out / "kafka")).bootstrap
        connect_url = (ExternalConnect(args.spark_connect) if args.spark_connect
                       else services.enter_context(EmbeddedSparkConnect(out / "spark-connect"))).url
        pg_base = args.postgres.rstrip("/") if args.postgres else services.enter_context(EmbeddedPostgres()).url
        topics = {"project": f"fresh_{tag}", "anchor": f"fresh_anchor_{tag}"}
        scratch_topics(services, bootstrap, list(topics.values()), PARTITIONS)
        airflow_db, store_db = scratch_databases(services, pg_base, [f"airflow_fresh_{tag}", f"ingest_fresh_{tag}"])

        datasource = f"fresh_{tag}"
        spec = spec_for(datasource, topics["project"], args.schedule, args.max_active_runs, args.task_count,
                        args.read_up_to)
        started = time.monotonic()
        sched = FreshnessScheduler(out / "standalone", spec, bootstrap, connect_url, airflow_db, store_db,
                                   airflow_conf_env(args.airflow_conf))
        services.callback(sched.stop)
        sched.wait_healthy()
        sched.wait_parsed([datasource])
        print(f"  airflow standalone healthy, the DAG parsed, after {time.monotonic() - started:.0f} s "
              f"(not counted)", flush=True)
        sink = Datasource(sched.store, datasource, topics["project"])
        next_id = 0
        if args.warmup:
            warm, next_id = measure(sink, bootstrap, args.warmup, 1, args.poll, 600, next_id)
            print(f"  warm-up: {len(warm.seen):,} of {len(warm.produced):,} events visible after "
                  f"{warm.ended - warm.started:.0f} s (not counted)", flush=True)
        summaries = []
        print(f"\n== {sink.name}: `{args.schedule}` under airflow standalone, jobs on Spark Connect")
        phases = []
        cpus = []
        for rate in args.rates:
            cpu0 = sched.cpu()
            phase, next_id = measure(sink, bootstrap, rate, args.duration, args.poll, args.drain, next_id)
            cpus.append(sched.cpu() - cpu0)
            phases.append(phase)
            summaries.append(phase.summary())
            print_summary(summaries[-1])
            results["phases"].append(summaries[-1])
        runs = sched.query("SELECT state, count(*) FROM dag_run WHERE dag_id = :d GROUP BY state", d=datasource)
        print("  DAG runs: " + ", ".join(f"{n} {state}" for state, n in runs), flush=True)
        # where each rate's seconds went: the runs that planned while it was produced or drained
        all_runs = run_phases.collect(sched.query, sched.store, datasource)
        for phase, summary, cpu in zip(phases, summaries, cpus):
            summary["runs"] = run_phases.summarize(run_phases.in_window(all_runs, phase.started, phase.ended))
            summary["runs"]["airflow_cpu"] = cpu
            print(f"  {phase.rate:,} events/s:")
            run_phases.print_phases(summary["runs"])
        sched.stop()

        if not args.skip_anchor:
            anchor = StructuredStreaming(out, bootstrap, topics["anchor"])
            services.callback(anchor.stop)
            started = time.monotonic()
            anchor.wait_started()
            print(f"\n== the anchor: Spark Structured Streaming, 1-second trigger, Parquet (started in "
                  f"{time.monotonic() - started:.0f} s, not counted)", flush=True)
            for rate in args.rates:
                phase, next_id = measure(anchor, bootstrap, rate, args.duration, args.poll, args.drain, next_id)
                summaries.append(phase.summary())
                print_summary(summaries[-1])
                results["phases"].append(summaries[-1])

    print("\nsummary (freshness = produce to the first poll that sees the event)")
    for side in dict.fromkeys(s["side"] for s in summaries):
        held = [s["rate"] for s in summaries if s["side"] == side and s.get("held")]
        print(f"  {side:<22} highest rate held (p99 <= {HELD_P99:.0f} s, lag steady, nothing missing): "
              + (f"{max(held):,} events/s" if held else "none of those tried"))
    bad = [s for s in summaries if s.get("missing") or s.get("duplicates") or not s.get("visible")]
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    for s in bad:
        print(f"  {s['side']} at {s['rate']}/s: {s.get('missing', s['produced'])} events never seen, "
              f"{s.get('duplicates', 0)} seen twice")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
