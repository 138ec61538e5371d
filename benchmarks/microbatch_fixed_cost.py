"""Benchmark: the fixed cost of one small microbatch through the DAG, Spark Connect against spark-submit.

The example `wikipedia` spec (taskCount 2, --task-count: two task groups, so two `spark_job` tasks per run), as
two DAGs that differ only in their topic and their Spark connection: `fc_connect` (a `spark_connect` connection to
one local Spark Connect server, started once) and `fc_submit` (a `spark` connection: one spark-submit, local[2], per
task group). Before each run, --records events (`ingest_core.dev.demo.wiki_events`) are produced to the DAG's topic, and
each run must publish exactly them. Everything runs in one process tree on this machine, both modes in the same
run (interleaved, so both see the same load):

1. `airflow dags test` (tasks in the CLI's process, SQLite Airflow DB, SQLite metadata store): --runs runs per
   mode, the first reported apart as cold (its datasource's session starts its Python workers). Before them,
   --warm-jobs group jobs of a datasource of their own warm the Connect server's JVM, as a server that serves
   runs all day is (not counted; their times are printed). Wall time per run (median, min, max) and CPU seconds
   per run (user + sys of the `airflow dags test` process tree; for Connect mode plus the server's CPU over the
   run, measured apart; each tree in a cgroup of its own where one can be made, so exited Python workers count,
   else wait4 and psutil); the ratios. Where the seconds of a warm Connect run go: each task's start/end from the
   Airflow home's airflow.db (task_instance), Airflow's own time (the whole run minus the tasks), and inside
   `spark_job` the steps of the Connect client (imports, session, code upload, Python check, the job, stop),
   timed by hooks that this benchmark's copy of the DAG file wraps around them (`BENCH_TIMINGS`). Then a probe
   opens sessions on the warm server step by step, and the server's idle Python daemons are counted.
2. Under a scheduler (`airflow standalone`, LocalExecutor, Airflow's DB on a private PostgreSQL; the scheduler
   preloads the tasks' libraries as docs/spark-connect.md recommends, unless --no-preload): `airflow dags
   trigger` then poll Airflow's DB until the run succeeds. Connect's and Airflow alone's first runs are warm-ups,
   reported apart and not counted (a datasource's first run opens its Connect session, whose Python workers
   start); then --scheduler-runs runs per mode: Connect and Airflow alone (the floor DAG, triggered the same way)
   in turns, then spark-submit's unless --skip-submit (its 60-70 s runs in between would let Spark close the
   Connect session's idle Python workers); the ratios. Skip: --skip-scheduler.
3. Large runs: 1M records (and 4M with --large) through the same DAGs under `airflow dags test`, both modes:
   Connect must be no slower than spark-submit.

The Connect server's cold start is printed, not counted in any run. Target: a small run end to end in
<= 10 s under `airflow dags test` in Connect mode, with at most a tenth of spark-submit's CPU per run.

    PYTHONPATH=$PWD python benchmarks/microbatch_fixed_cost.py [--runs 5] [--warm-jobs 20] [--records 1000]
        [--skip-scheduler] [--scheduler-runs 3] [--skip-large | --large | --large-records N ...] [--task-count 2]
        [--no-preload] [--out DIR]
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
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

BENCHMARKS = Path(__file__).resolve().parent
if str(BENCHMARKS) not in sys.path:  # its harness, also when the script is imported by path
    sys.path.insert(0, str(BENCHMARKS))

from harness.fixed_cost_dags_test import DagsTest, breakdown, print_against_floor, print_breakdown  # noqa: E402
from harness.fixed_cost_scheduler import Standalone  # noqa: E402
from harness.fixed_cost_warmup import warm_server  # noqa: E402
from harness.fixed_cost_setup import (  # noqa: E402
    LABEL,
    MODES,
    PARTITIONS,
    TARGET_CPU_RATIO,
    TARGET_FLOOR_RATIO,
    TARGET_WALL_S,
    ExternalConnect,
    create_databases,
    drop_databases,
    example_spec,
    fmt3,
    load,
    make_pool,
    produce,
    server_python,
    stats,
)
from ingest_core.dev.embedded import EmbeddedKafka, EmbeddedPostgres  # noqa: E402
from ingest_core.dev.embedded_spark import EmbeddedSparkConnect  # noqa: E402


# ------------------------------------------------------------------------------------- the runs measured


def warmup(args: argparse.Namespace, bench: DagsTest, url: str, admin: AdminClient) -> list[float]:
    name = f"fc_warm{args.tag}"
    create_topics(admin, [name])
    started = time.monotonic()
    seconds = warm_server(url, example_spec(name, name, args.task_count), args.warm_jobs, args.records,
                          bench.out / "warm", bench.env)
    fifth = max(1, len(seconds) // 5)
    print(f"  server warm-up: {len(seconds)} group jobs of {args.records // args.task_count:,} records in "
          f"{time.monotonic() - started:.1f} s (not counted), a job's run_job {seconds[0]:.2f} s first, median of "
          f"the first {fifth} {statistics.median(seconds[:fifth]):.2f} s, of the last {fifth} "
          f"{statistics.median(seconds[-fifth:]):.2f} s", flush=True)
    return seconds


def benched_modes(args: argparse.Namespace) -> tuple[str, ...]:
    """The Spark modes measured: spark-submit's too unless --skip-submit."""
    return ("connect",) if args.skip_submit else MODES


def small_runs(args: argparse.Namespace, bench: DagsTest, bootstrap: str, topics: dict[str, str]) -> dict[str, Any]:
    rng = random.Random(16)
    modes = benched_modes(args)
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    paused = f", a pause of {args.pause:g} s before each" if args.pause else ""
    print(f"\n== airflow dags test: {args.runs} runs per mode of {args.records:,} records, {args.task_count} task "
          f"groups (modes interleaved{paused}, load {load()})")
    floor: list[dict[str, Any]] = []
    for i in range(args.runs):
        for mode in (modes if i % 2 == 0 else modes[::-1]) + ("floor",):
            if mode != "floor":
                produce(bootstrap, topics[mode], args.records, rng=rng)
            if args.pause:
                time.sleep(args.pause)
            r = bench.run(mode, f"{mode}-{i}", args.records)
            (floor if mode == "floor" else runs[mode]).append(r)
            extra = f" (Connect server {r['cpu_server']:.1f} s)" if mode == "connect" else ""
            print(f"  {LABEL[mode]:<13} run {i}{' (cold)' if i == 0 else '':<7}: {r['wall']:6.1f} s wall, "
                  f"{r['cpu']:6.1f} CPU-s{extra}   load {load()}", flush=True)
    print(f"\n  {'':<14}{'cold run':>22}   {'warm runs: wall, median (min, max)':<36} CPU per warm run, median")
    summary: dict[str, Any] = {}
    for mode in modes:
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
    for mode in modes:
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
    floor_ratio = summary["connect"]["wall"][0] / summary["floor"]["wall"][0]
    print(f"  ratio connect / Airflow alone (warm medians): wall {floor_ratio:.3f} (target <= {TARGET_FLOOR_RATIO:g})")
    summary["ratio"] = {"floor": floor_ratio}
    if not args.skip_submit:
        wall_ratio = summary["connect"]["wall"][0] / summary["submit"]["wall"][0]
        cpu_ratio = summary["connect"]["cpu"][0] / summary["submit"]["cpu"][0]
        print(f"  ratio connect / spark-submit (warm medians): wall {wall_ratio:.3f}, CPU {cpu_ratio:.3f}")
        summary["ratio"].update(wall=wall_ratio, cpu=cpu_ratio)
    summary["breakdown"] = print_breakdown(runs["connect"][1:] or runs["connect"])
    summary["against_floor"] = print_against_floor(runs["connect"][1:] or runs["connect"], warm_floor)
    summary["runs"] = runs
    summary["floor_runs"] = floor
    return summary


def scheduler_runs(args: argparse.Namespace, out: Path, bootstrap: str, connect: EmbeddedSparkConnect,
                   admin: AdminClient) -> dict[str, Any]:
    modes = benched_modes(args)
    topics = {m: f"fs_{m}{args.tag}" for m in modes}
    create_topics(admin, topics.values())
    rng = random.Random(17)
    print(f"\n== under the scheduler (airflow standalone, LocalExecutor, Airflow DB on PostgreSQL"
          f"{'' if args.no_preload else '; the scheduler preloads the tasks libraries'}): a warm-up run and "
          f"{args.scheduler_runs} triggered runs per mode (load {load()})")
    with contextlib.ExitStack() as stack:
        pg_base = args.postgres.rstrip("/") if args.postgres else stack.enter_context(EmbeddedPostgres()).url
        databases = [f"airflow_fc{args.tag}", f"ingest_fc{args.tag}"]
        admin_engine = create_databases(pg_base, databases)
        stack.callback(admin_engine.dispose)
        if args.postgres:  # another's server: its databases go again (a private server goes whole)
            stack.callback(drop_databases, admin_engine, databases)
        started = time.monotonic()
        sched = Standalone(out / "standalone", bootstrap, connect, topics, args.task_count,
                           f"{pg_base}/{databases[0]}", f"{pg_base}/{databases[1]}", preload=not args.no_preload)
        try:
            sched.wait_healthy()
            print(f"  standalone healthy after {time.monotonic() - started:.0f} s (not counted)", flush=True)
            sched.wait_idle()
            print(f"  the DAGs parsed (triggered runs only: no schedule) after {time.monotonic() - started:.0f} s",
                  flush=True)
            def trigger(mode: str, key: str, counted: bool = True) -> dict[str, Any]:
                """One triggered run of `mode` (its run id ends in `key`), printed; a warm-up is not counted."""
                if mode != "floor":
                    produce(bootstrap, topics[mode], args.records, rng=rng)
                r = sched.trigger(mode, f"bench-{mode}-{key}", args.records)
                label = f"trigger {key}" if counted else "warm-up"
                print(f"  {LABEL[mode]:<13} {label}: {r['wall']:6.1f} s trigger to success "
                      f"(the CLI {r['cli']:.1f} s, queued to running {r['queued_to_start']:.1f} s, run "
                      f"{r['run']:.1f} s; seen by the poll at {r['polled']:.1f} s; Airflow {r['airflow_cpu']:.1f} CPU-s; "
                      f"{r['processes']} task processes: "
                      + ", ".join(f"{k} {v:.1f}" for k, v in r["tasks"].items())
                      + f"){'' if counted else ' not counted'}   load {load()}", flush=True)
                return r

            warmups = {mode: trigger(mode, "warm-up", counted=False) for mode in ("connect", "floor")}
            runs: dict[str, list[dict[str, Any]]] = {m: [] for m in (*modes, "floor")}
            # Connect and Airflow alone (the floor DAG, triggered the same way) in turns, then spark-submit's
            # runs: a spark-submit run (60-70 s) between two Connect runs let Spark close the session's idle
            # Python workers (after a minute), so each Connect run started its workers again: not a warm run
            pairs = [("connect", "floor") if i % 2 == 0 else ("floor", "connect") for i in range(args.scheduler_runs)]
            order = [(i, mode) for i, pair in enumerate(pairs) for mode in pair]
            if "submit" in modes:  # each starts a JVM: none is warm
                order += [(i, "submit") for i in range(args.scheduler_runs)]
            for i, mode in order:
                runs[mode].append(trigger(mode, str(i)))
        finally:
            sched.stop()
    summary: dict[str, Any] = {"warm_up": warmups}
    for mode in (*modes, "floor"):
        rs = runs[mode]
        tasks = {k: statistics.median([r["tasks"].get(k, 0.0) for r in rs]) for k in rs[0]["tasks"]}
        print(f"  {LABEL[mode]:<13} trigger to success {fmt3([r['wall'] for r in rs])}; the CLI "
              f"{statistics.median([r['cli'] for r in rs]):.1f} s, queued to running "
              f"{statistics.median([r['queued_to_start'] for r in rs]):.1f} s, run "
              f"{statistics.median([r['run'] for r in rs]):.1f} s; Airflow's CPU (the standalone tree, task "
              f"processes included) {fmt3([r['airflow_cpu'] for r in rs], 'CPU-s')}; task processes "
              f"{statistics.median([r['processes'] for r in rs]):g}; tasks: "
              + ", ".join(f"{k} {v:.1f} s" for k, v in tasks.items()))
        summary[mode] = {"wall": stats([r["wall"] for r in rs]), "runs": rs, "tasks": tasks,
                         "airflow_cpu": stats([r["airflow_cpu"] for r in rs]),
                         "processes": statistics.median([r["processes"] for r in rs])}
    if "submit" in modes:
        summary["ratio"] = summary["connect"]["wall"][0] / summary["submit"]["wall"][0]
        print(f"  ratio connect / spark-submit (medians): {summary['ratio']:.3f}")
    # the run as the scheduler saw it, queued to success: what a schedule's or the UI's run takes; trigger to
    # success adds the `airflow dags trigger` CLI's own seconds (a Python start and Airflow's imports)
    queued_to_end = {m: statistics.median([r["queued_to_start"] + r["run"] for r in runs[m]]) for m in runs}
    summary["queued_to_end"] = queued_to_end
    summary["floor_ratio"] = queued_to_end["connect"] / queued_to_end["floor"]
    summary["floor_trigger_ratio"] = summary["connect"]["wall"][0] / summary["floor"]["wall"][0]
    print(f"  ratio connect / Airflow alone (medians): queued to success {summary['floor_ratio']:.3f} "
          f"({queued_to_end['connect']:.1f} s against {queued_to_end['floor']:.1f} s), trigger to success "
          f"{summary['floor_trigger_ratio']:.3f} (target <= {TARGET_FLOOR_RATIO:g}; the same DAG shape with empty "
          "tasks, triggered the same way)")
    return summary


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
    session without artifacts; in each session the UDF and a one-row `mapInArrow` over `spark.range`, the job's
    read without Kafka, twice each (the first pays for the session's Python workers), then the same written as
    Parquet, twice: Spark's own time for a query of the job's shape, without Kafka, parsing or rollup. Prints one
    JSON line per session."""
    t0 = time.perf_counter()
    import pyspark.sql.connect.session  # noqa: F401 - the client's import, as in the task
    from pyspark.sql import SparkSession

    from ingest_core.spark import connect as spark_connect
    from ingest_core.spark.settings import REQUIRED_CONF, default_conf
    print(json.dumps({"imports": time.perf_counter() - t0}), flush=True)
    written = Path(tempfile.mkdtemp(prefix="probe-writes-"))  # the server's filesystem: a local server's
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
            for label in ("mapInArrow read", "read again"):  # the job's read (`spark.job.read_splits`), no Kafka
                t = time.perf_counter()
                spark.range(0, 1, 1, 1).mapInArrow(probe_read, "id long").collect()
                row[label] = time.perf_counter() - t
            for label in ("write", "write again"):  # the job's write (`spark.job._ingest`), one row
                t = time.perf_counter()
                (spark.range(0, 1, 1, 1).mapInArrow(probe_read, "id long").write.mode("error")
                 .parquet(str(written / uuid.uuid4().hex)))
                row[label] = time.perf_counter() - t
            t = time.perf_counter()
            spark.stop()
            row["stop"] = time.perf_counter() - t
        print(json.dumps(row), flush=True)
    shutil.rmtree(written, ignore_errors=True)


def probe_read(batches: Any) -> Any:
    """The split reader's shape without Kafka: each input row handed back."""
    yield from batches


def session_probe(env: dict[str, str], url: str, rounds: int) -> dict[str, Any]:
    print(f"\n== opening a Connect session, step by step, on the warm server (a fresh Python; load {load()})")
    done = subprocess.run([sys.executable, __file__, "--probe", url, "--probe-rounds", str(rounds)], env=env,
                          capture_output=True, text=True, timeout=1800)
    rows = [json.loads(ln) for ln in done.stdout.splitlines() if ln.startswith("{")]
    if done.returncode != 0:
        raise SystemExit(f"the session probe exited {done.returncode}: {done.stderr[-2000:]}")
    for row in rows:
        print("  " + ", ".join(f"{k} {v:.2f} s" if isinstance(v, float) else str(v) for k, v in row.items()))
    floor = statistics.median(r["write again"] for r in rows if "write again" in r)
    print(f"  Spark's own floor for a query of a job's shape (one row through a mapInArrow, written as Parquet, "
          f"in a warm session): {floor:.2f} s (median of 'write again')")
    return {"sessions": rows, "spark_floor": floor}


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
    ap.add_argument("--no-preload", action="store_true",
                    help="the scheduler does not preload the tasks' libraries (airflow_local_settings.py calling "
                         "ingest_core.provider.preload, docs/spark-connect.md): each task process imports its own")
    ap.add_argument("--skip-large", action="store_true", help="no 1M-record runs")
    ap.add_argument("--skip-submit", action="store_true",
                    help="no spark-submit runs (under airflow dags test and under the scheduler): Connect and "
                         "Airflow alone only (with --skip-scheduler --skip-large: the ratio to Airflow alone, in a "
                         "fraction of the time)")
    ap.add_argument("--warm-jobs", type=int, default=20,
                    help="group jobs run through the Connect server before the timed runs (plan, run_job, publish "
                         "on a datasource of their own): a server that serves runs all day has compiled its hot "
                         "paths, a fresh JVM takes its first 15 or so jobs to get there; 0: none")
    ap.add_argument("--pause", type=float, default=0.0,
                    help="seconds to wait before each run (e.g. 70: Spark closes a Python worker idle for a minute, so "
                         "each Connect run starts its workers, as a datasource whose runs are over a minute apart)")
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
        ap.set_defaults(runs=1, records=50, task_count=1, scheduler_runs=1, large_records=[2_000], probe_sessions=1,
                        warm_jobs=1)
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
            if args.warm_jobs:
                results["server_warmup"] = warmup(args, bench, connect.url, admin)
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
            wall, floor_wall, floor_cpu = small["connect"]["wall"][0], *(small["floor"][k][0] for k in ("wall", "cpu"))
            met = small["ratio"]["floor"] <= TARGET_FLOOR_RATIO
            print(f"\nTarget (a Connect run <= {TARGET_FLOOR_RATIO:g}x the same DAG with empty tasks, under airflow "
                  f"dags test): {wall:.1f} s against {floor_wall:.1f} s, {small['ratio']['floor']:.3f}x: "
                  f"{'MET' if met else 'NOT MET'}; the Connect run adds {wall - floor_wall:.1f} s and "
                  f"{small['connect']['cpu'][0] - floor_cpu:.1f} CPU-s to Airflow's own floor")
            spark_floor = results.get("session_probe", {}).get("spark_floor")  # none if the probe failed
            if spark_floor is not None:
                print(f"  of which Spark's own: {args.task_count} queries of a job's shape, "
                      f"{args.task_count} x {spark_floor:.2f} s on this server (the session probe)")
            results["target_met"] = met
            under = results.get("scheduler", {})
            if "floor_ratio" in under:
                met_there = under["floor_ratio"] <= TARGET_FLOOR_RATIO
                print(f"Under the scheduler (a run queued to success, as a schedule or the UI starts it): "
                      f"{under['queued_to_end']['connect']:.1f} s against {under['queued_to_end']['floor']:.1f} s, "
                      f"{under['floor_ratio']:.3f}x: {'MET' if met_there else 'NOT MET'}")
                results["scheduler_target_met"] = met_there
            if not args.skip_submit:
                cpu_ratio = small["ratio"]["cpu"]
                print(f"Earlier target (a small run in <= {TARGET_WALL_S:g} s, <= {TARGET_CPU_RATIO:g}x spark-submit's "
                      f"CPU): wall {wall:.1f} s, CPU {cpu_ratio:.3f}x; Airflow alone is "
                      f"{floor_cpu / small['submit']['cpu'][0]:.3f}x spark-submit's CPU")
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
