"""Runs under `airflow dags test`, each timed step by step (the DAG file's hooks) and its CPU counted."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

import psutil

from harness.fixed_cost_setup import AIRFLOW, CpuGroup, bench_env, check_run, to_epoch, tree_cpu, write_dags
from ingest_core.dev.embedded_spark import EmbeddedSparkConnect
from ingest_core.store.metadata import MetadataStore


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
    bodies = sum(out.get(f"step {b} body", 0.0) for b in ("plan", "spark_job", "replan", "publish", "report"))
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
    for task in ("plan", "spark_job", "replan", "replanned_job", "publish", "report"):
        row(f"task {task}", f"task {task}")
        row(f"{task} body (our code)", f"step {task} body", 1)
        if task == "spark_job":
            for step in ("imports (Connect client, job)", "load job (spec, group input)", "session open (all)",
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


def print_against_floor(warm: list[dict[str, Any]], floor: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Where a Connect run's seconds go beyond Airflow alone's (the same DAG shape with empty tasks): each part of
    the run, median of each side's warm runs, side by side."""
    parts = [("Airflow: CLI start to first task", "airflow: CLI start to first task (imports, DAG parse, run)"),
             ("task plan", "task plan"), ("task spark_job (all groups)", "task spark_job"),
             ("task publish", "task publish"), ("task report", "task report"),
             ("Airflow: between tasks", "airflow: between tasks"),
             ("Airflow: last task to exit", "airflow: last task to exit")]
    sides = [[breakdown(r) for r in runs] for runs in (warm, floor)]
    out: dict[str, list[float]] = {}
    print(f"\nWhere a warm Connect run's seconds go beyond Airflow alone's (medians of {len(warm)} and {len(floor)} "
          "warm runs):")
    print(f"  {'':<36}{'Connect':>10}{'Airflow alone':>15}{'difference':>12}")
    for label, key in parts:
        values = [statistics.median([b.get(key, 0.0) for b in side]) for side in sides]
        out[label] = values
        print(f"  {label:<36}{values[0]:>8.2f} s{values[1]:>13.2f} s{values[0] - values[1]:>+10.2f} s")
    walls = [statistics.median([r["wall"] for r in runs]) for runs in (warm, floor)]
    out["whole run"] = walls
    print(f"  {'whole run':<36}{walls[0]:>8.2f} s{walls[1]:>13.2f} s{walls[0] - walls[1]:>+10.2f} s")
    server = statistics.median([r["cpu_server"] for r in warm])
    print(f"  (the Connect server's CPU per warm run: {server:.2f} CPU-s, the JVM and its Python workers)")
    return out
