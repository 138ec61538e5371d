"""Fault-injection soak: many microbatches of the real DAG, each under a fault, then a check that every
produced record is visible exactly once.

Everything is real: Apache Kafka (`EmbeddedKafka`), PostgreSQL (`EmbeddedPostgres`, or --postgres) holding both
the ingestion metadata store and Airflow's own database, and the datasource's DAG run by `airflow dags test`
in an Airflow home of its own (plan -> spark-submit jobs -> publish -> report). With --spark-connect the jobs
run on a local Spark Connect server of the soak's own instead (`EmbeddedSparkConnect`), one session per
datasource. The datasource reads one topic
with rollup disabled, so every record is one row; every record carries a unique id (`uid`).

Each iteration produces a batch of records, then runs one microbatch under a fault drawn from:

  clean              a run with nothing done to it
  kill_spark         SIGKILL of a running spark-submit job's process tree (Airflow retries the task); with
                     --spark-connect, of the Spark Connect server's whole tree, started again at once
  kill_airflow       SIGKILL of the whole `airflow dags test` process group at a milestone
  mark_failed        the DAG run marked failed through Airflow (the REST API's own `PATCH dagRun state=failed`
                     code, run against Airflow's database: `airflow dags test` has no API server) while it runs
  rerun_published    re-execution of tasks of an already-published run (`airflow tasks test <dag> spark_job
                     <run> --map-index 0` and/or `... publish <run>`)
  two_runs           a second run started while the first one is at a milestone
  broker_restart     the broker restarted (controlled shutdown or SIGKILL) while the run is at a milestone
  partition_growth   the topic gains a partition (and records in it) at a milestone
  operator           an operator between runs (no run of its own): the topic deleted and re-created, taken
                     up with the command TopicRecreatedError advises (`set-offsets TOPIC=earliest`: the new
                     topic's records must all be ingested), `ingest reset --to-latest`, `ingest set-offsets`
                     forward (a skip), `delete_records` of unread records (recovered by the next run's
                     resetOffsetAutomatically or the set-offsets the error advises); what they move past is
                     lost on purpose and must be counted exactly by the store's lost counter (none of it
                     visible, nothing else lost); unread records of the deleted topic are counted apart

A fault strikes at a milestone, drawn by the seeded RNG and observed, never guessed from a delay:
`planned` (the store holds the run's plan), `spark` (a spark-submit JVM is in the run's process tree; with
--spark-connect: a spark_job task started), `reading` (Spark's Python workers are up, or with --spark-connect a
split of the run reported progress: the job reads Kafka), `publish` (the publish task started) and
`published` (the store marks the run published; report has not run yet). A milestone the run ends before is
recorded as "did not fire". Every round of len(--faults) iterations draws each fault once, in a seeded order,
so a short soak still covers every kind; each iteration's parameters come from its own seeded RNG.

A producer thread adds --rate records/s (ids `bg-…`) all along, so the latest offsets move while runs are in
flight; which run takes them depends on timing, the faults and their milestones do not.

With --hostile, each iteration also produces one record of every hostile kind (HOSTILE below: malformed JSON,
event times a segment cannot hold, numbers past the long range, an object where a number goes, bytes that are
not UTF-8, payloads that are not objects). None may stop a run; each must end as Druid counts it: dropped
(unparseable) records never visible, rows ingested with an error visible exactly once.

Afterwards: clean runs until the lag is 0 (at most --heal-runs; not healed otherwise), then the datasource is
read (`DatasourceReader`, segment by segment) and every acknowledged uid must be there exactly once. With
--iceberg the datasource also has an Iceberg table, and pyiceberg must read exactly the same rows from it: the
kill_airflow fault at `published` is a SIGKILL between a publish and its Iceberg commit. After
each iteration the soak also prints the lag, the runs the store still holds in flight, and the duplicates and
unreadable segments found so far, so a broken invariant is pinned to the fault that broke it.

    python benchmarks/fault_soak.py --iterations 16 --seed 1
    python benchmarks/fault_soak.py --iterations 2 --faults kill_airflow --keep --out /tmp/soak
    python benchmarks/fault_soak.py --iterations 14 --spark-connect
    python benchmarks/fault_soak.py --tiny --spark-connect      # one clean microbatch: that it runs (the tests)

Prints runs, faults by kind, failed runs, runs to heal, lost, duplicated, median run time; writes
report.json, metadata.json (runs, offsets, segments) and every run's log under --out. Exits 1 on any lost,
duplicated or unexpected record, an unreadable segment, or when the datasource did not heal.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Callable

import psutil
import sqlalchemy as sa
import yaml
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as KTP
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from ingest_core.dev.demo import airflow_env  # noqa: E402
from ingest_core.dev.embedded import (  # noqa: E402
    EmbeddedKafka,
    EmbeddedPostgres,
    EmbeddedSparkConnect,
)
from ingest_core.executor import deep_storage  # noqa: E402
from ingest_core.store.metadata import MetadataStore  # noqa: E402
from ingest_core.store.records import RunStatus  # noqa: E402
from ingest_core.store.reader import DatasourceReader  # noqa: E402

AIRFLOW = str(Path(sys.executable).parent / "airflow")
DATASOURCE = TOPIC = "soak"
BASE_LOGICAL_DATE = datetime(2026, 1, 1, tzinfo=timezone.utc)
MILESTONES = ("started", "planned", "spark", "reading", "publish", "published")
MAX_PARTITIONS = 32  # a full soak draws partition_growth 10+ times

# The REST API's `PATCH /api/v2/dags/{dag}/dagRuns/{run} {"state": "failed"}`, its own service function, run
# against Airflow's database in this Airflow home (no api-server runs beside `airflow dags test`). It imports
# Airflow first and says "ready", then marks the run it reads from stdin, only while that run is running.
MARK_FAILED = """
import sys
from sqlalchemy import select
from airflow.api_fastapi.core_api.datamodels.dag_run import DagRunMutableStates
from airflow.api_fastapi.core_api.services.public.dag_run import patch_dag_run_state
from airflow.models.dagbag import DBDagBag
from airflow.models.dagrun import DagRun
from airflow.utils.session import create_session

print("ready", flush=True)
dag_id, run_id = sys.stdin.readline().split()
with create_session() as session:
    dag_run = session.scalar(select(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id))
    if dag_run is None or dag_run.state != "running":
        print("not marked: the run is", dag_run and dag_run.state, flush=True)
        sys.exit(3)
    dag = DBDagBag().get_dag_for_run(dag_run, session=session)
    patch_dag_run_state(dag=dag, dag_run=dag_run, state=DagRunMutableStates.FAILED, session=session)
    print("marked failed while running", flush=True)
"""


def log(msg: str) -> None:
    print(f"[{datetime.now():%H:%M:%S}] {msg}", flush=True)


# ------------------------------------------------------------------------------------------------ the report

@dataclass
class RunResult:
    """One `airflow dags test` (or `airflow tasks test`) the soak started."""

    label: str
    iteration: int | None
    fault: str
    run_id: str | None
    exit_code: int | None
    seconds: float
    killed: bool  # by the soak, on purpose
    log: str


@dataclass
class Iteration:
    index: int
    fault: str
    params: dict
    fired: bool
    detail: str
    produced: int
    lag_after: int | None
    in_flight_after: list[str]
    duplicated_so_far: int
    unreadable_so_far: int


@dataclass
class Report:
    seed: int
    iterations: int
    spark: str = "spark-submit"  # or "Spark Connect"
    faults: Counter = field(default_factory=Counter)
    fired: Counter = field(default_factory=Counter)
    runs: list[RunResult] = field(default_factory=list)
    log: list[Iteration] = field(default_factory=list)
    heal_runs: int = 0
    runs_to_heal: int | None = None  # None: not healed within --heal-runs
    produced: int = 0
    undelivered: int = 0  # records the broker never acknowledged (not expected anywhere)
    visible_rows: int = 0
    lost: int = 0
    duplicated: int = 0  # rows beyond the first of a uid
    unexpected: int = 0  # rows whose uid was never acknowledged
    hostile_produced: int = 0
    hostile_wrong: list[str] = field(default_factory=list)  # hostile uids visible when they must not be, or not once
    unreadable_segments: list[str] = field(default_factory=list)
    lost_by_fault: dict = field(default_factory=dict)  # producing iteration's fault -> lost uids
    # the operator fault: offsets it moved past unread (the soak's own ranges), the store's lost counter, the
    # acknowledged records in those ranges (each must be invisible), and any of them visible after all
    lost_expected: dict = field(default_factory=dict)  # partition -> offsets
    lost_counted: dict = field(default_factory=dict)  # partition -> the store's lostRecords
    lost_on_purpose: int = 0  # acknowledged uids (not hostile) in the ranges, invisible as they must be
    lost_records_seen: int = 0  # acknowledged records (hostile too) in the ranges
    lost_but_visible: list[str] = field(default_factory=list)
    # acknowledged into a topic the operator deleted before any run read them: gone with the topic, nobody's loss
    destroyed: int = 0
    # --iceberg: rows the Iceberg table holds other than the reader's (each uid as often), and its files
    iceberg_mismatch: int | None = None
    iceberg_files: int | None = None
    duplicated_by_run: dict = field(default_factory=dict)  # run id -> duplicate rows in its segments
    final_lag: int | None = None
    in_flight_at_end: list[str] = field(default_factory=list)

    @property
    def healed(self) -> bool:
        return self.runs_to_heal is not None

    @property
    def ok(self) -> bool:
        return (self.healed and not self.lost and not self.duplicated and not self.unexpected
                and not self.unreadable_segments and not self.hostile_wrong and self.loss_counted_exactly
                and not self.iceberg_mismatch)

    @property
    def loss_counted_exactly(self) -> bool:
        """Every offset the operator moved past is counted by the store, no more, and was a real record."""
        return (self.lost_counted == self.lost_expected and not self.lost_but_visible
                and self.lost_records_seen == sum(self.lost_expected.values()))

    @property
    def failed_runs(self) -> list[RunResult]:
        """Runs that ended other than with exit 0, the soak's own kills included."""
        return [r for r in self.runs if r.exit_code != 0]

    @property
    def median_run_s(self) -> float | None:
        done = [r.seconds for r in self.runs if r.exit_code == 0 and r.label.startswith("dags test")]
        return statistics.median(done) if done else None

    def summary(self) -> str:
        killed = sum(r.killed for r in self.failed_runs)
        faults = ", ".join(f"{k} {n} (fired {self.fired[k]})" for k, n in sorted(self.faults.items()))
        heal = (f"{self.runs_to_heal}" if self.healed else f"NOT HEALED after {self.heal_runs} clean runs "
                f"(lag {self.final_lag}, in flight: {', '.join(self.in_flight_at_end) or 'none'})")
        median = f"{self.median_run_s:.1f} s" if self.median_run_s is not None else "-"
        lines = [
            f"seed {self.seed}, {self.iterations} iterations, jobs on {self.spark}",
            f"runs: {len(self.runs)} ({sum(r.label.startswith('dags test') for r in self.runs)} DAG runs, "
            f"{sum(r.label.startswith('tasks test') for r in self.runs)} task re-executions)",
            f"faults: {faults}",
            f"failed runs: {len(self.failed_runs)} ({killed} killed by the soak, "
            f"{len(self.failed_runs) - killed} failed on their own)",
            f"runs to heal: {heal}",
            f"produced: {self.produced} acknowledged records ({self.undelivered} not acknowledged); "
            f"visible rows: {self.visible_rows}",
            f"lost: {self.lost}" + (f" {self.lost_by_fault}" if self.lost else ""),
            f"lost on purpose (operator): {sum(self.lost_expected.values())} offsets {self.lost_expected} "
            f"({self.lost_records_seen} acknowledged records, {self.lost_on_purpose} of them good); the store counted "
            f"{self.lost_counted}: {'exact' if self.loss_counted_exactly else 'WRONG'}"
            + (f"; visible though lost: {self.lost_but_visible[:5]}" if self.lost_but_visible else "")
            + (f"; {self.destroyed} unread records deleted with the re-created topic" if self.destroyed else ""),
            f"duplicated: {self.duplicated}" + (f" {self.duplicated_by_run}" if self.duplicated else ""),
            *([f"iceberg: {self.iceberg_files} files, rows other than the reader's: {self.iceberg_mismatch}"]
              if self.iceberg_mismatch is not None else []),
            f"unexpected: {self.unexpected}, unreadable segments: {len(self.unreadable_segments)}",
            f"hostile records: {self.hostile_produced} produced, {len(self.hostile_wrong)} not as Druid counts them"
            + (f" {self.hostile_wrong[:10]}" if self.hostile_wrong else ""),
            f"median run time: {median}",
            f"result: {'PASS' if self.ok else 'FAIL'}",
        ]
        return "\n".join(lines)

    def to_json(self) -> dict:
        # not asdict(self): it rebuilds a Counter from (key, value) pairs, counting the pairs
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out.update(faults=dict(self.faults), fired=dict(self.fired), runs=[asdict(r) for r in self.runs],
                   log=[asdict(e) for e in self.log])
        out.update(healed=self.healed, ok=self.ok, failed_runs=len(self.failed_runs), median_run_s=self.median_run_s)
        return out


# ------------------------------------------------------------------------------------------------ a DAG run

class DagTest:
    """One `airflow dags test` in its own process group. Milestones are observed in its output (its task
    starts), in the metadata store (its plan, its publish) and in its process tree (Spark)."""

    RUN_ID = re.compile(r"<TaskInstance: \S+ (manual__\S+)")

    def __init__(self, soak: "Soak", label: str, iteration: int | None, fault: str):
        self.soak, self.label, self.iteration, self.fault = soak, label, iteration, fault
        soak.logical_dates += 1
        self.logical_date = BASE_LOGICAL_DATE + timedelta(minutes=soak.logical_dates)
        self.log_path = soak.out / "logs" / f"{soak.logical_dates:03d}-{label.replace(' ', '-')}.log"
        self.run_id: str | None = None
        self.events: set[str] = {"started"}
        self.killed = False
        self.started = time.monotonic()
        self.proc = subprocess.Popen([AIRFLOW, "dags", "test", DATASOURCE, self.logical_date.isoformat()],
                                     env=soak.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     start_new_session=True, text=True, errors="replace")
        soak.processes.append(self.proc)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        with open(self.log_path, "w") as out:
            for line in self.proc.stdout:
                out.write(line)
                out.flush()
                if self.run_id is None and (m := self.RUN_ID.search(line)):
                    self.run_id = m.group(1)
                if "[DAG TEST] starting task_id=publish" in line:
                    self.events.add("publish")
                if "[DAG TEST] starting task_id=spark_job" in line and self.soak.connect is not None:
                    self.events.add("spark")

    def _spark_tree(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.Error:
            return []

    @staticmethod
    def _cmdline(p: psutil.Process) -> str:
        try:
            return " ".join(p.cmdline())
        except psutil.Error:
            return ""

    def spark_jvms(self) -> list[psutil.Process]:
        return [p for p in self._spark_tree() if "org.apache.spark.deploy.SparkSubmit" in self._cmdline(p)]

    def reached(self, milestone: str) -> bool:
        if milestone in self.events:
            return True
        if milestone in ("planned", "published") and self.run_id:
            run = self.soak.store.runs.get(DATASOURCE, self.run_id)
            if run is not None and (milestone == "planned" or run.status is RunStatus.PUBLISHED):
                self.events.add(milestone)
        elif milestone == "spark" and self.spark_jvms():
            self.events.add(milestone)
        elif milestone == "reading" and self.soak.connect is not None and self.run_id:
            if any(self.soak.run_folder(self.run_id).glob("group=*/replica=*/attempt=*/progress/*.json")):
                self.events.add(milestone)
        elif milestone == "reading" and any("pyspark.daemon" in self._cmdline(p) or "pyspark.worker" in
                                            self._cmdline(p) for p in self._spark_tree()):
            self.events.add(milestone)
        return milestone in self.events

    def wait_for(self, milestone: str, timeout: float) -> bool:
        """True once the run reached `milestone`; False when it ended (or the timeout passed) first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.reached(milestone):
                return True
            if self.proc.poll() is not None:
                return self.reached(milestone)
            time.sleep(0.1)
        return False

    def kill(self) -> None:
        """SIGKILL the whole process group: `airflow dags test`, its task runners, spark-submit and Spark."""
        self.killed = True
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(30)

    def wait(self, timeout: float) -> RunResult:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            log(f"  {self.label} still running after {timeout:.0f}s: killed")
            self.kill()
            self.killed = False  # not a fault the soak injected: a run that did not end
        self._reader.join(30)
        result = RunResult(self.label, self.iteration, self.fault, self.run_id, self.proc.returncode,
                           round(time.monotonic() - self.started, 1), self.killed, str(self.log_path))
        self.soak.report.runs.append(result)
        return result


def kill_tree(root: psutil.Process) -> int:
    """SIGKILL a process and everything under it, all at once (no parent left to notice and respawn)."""
    procs = [root]
    try:
        procs += root.children(recursive=True)
    except psutil.Error:
        pass
    for p in procs:
        try:
            p.send_signal(signal.SIGKILL)
        except psutil.Error:
            pass
    return len(procs)


# ------------------------------------------------------------------------------------------------ the faults

@dataclass
class Outcome:
    fired: bool
    detail: str


class Fault:
    """One kind of fault: `draw` its parameters from the iteration's RNG, then `run` one microbatch under it."""

    kind = ""
    milestones: tuple[str, ...] = ("started",)

    def draw(self, rng: random.Random) -> dict:
        return {"milestone": rng.choice(self.milestones)}

    def run(self, soak: "Soak", i: int, params: dict) -> Outcome:
        raise NotImplementedError

    @staticmethod
    def finish(soak: "Soak", run: DagTest) -> RunResult:
        return run.wait(soak.run_timeout)


class Clean(Fault):
    kind = "clean"

    def draw(self, rng):
        return {}

    def run(self, soak, i, params):
        r = self.finish(soak, soak.start_run(i, self.kind))
        return Outcome(True, f"exit {r.exit_code}")


class KillSpark(Fault):
    """SIGKILL of a spark-submit job's whole process tree (the JVM, the Python driver, Spark's workers); with
    --spark-connect, of the Spark Connect server's whole tree (every job on it), started again at once."""

    kind = "kill_spark"
    milestones = ("spark", "reading")

    def run(self, soak, i, params):
        run = soak.start_run(i, self.kind)
        fired, detail = False, "the run ended before the milestone"
        if soak.connect is not None:
            if run.wait_for(params["milestone"], soak.run_timeout) and run.proc.poll() is None:
                t = time.monotonic()
                n = 1 + len(psutil.Process(soak.connect.proc.pid).children(recursive=True))
                soak.connect.kill()
                soak.connect.start()
                fired, detail = True, (f"killed the Spark Connect server ({n} processes), up again in "
                                       f"{time.monotonic() - t:.0f}s")
        elif run.wait_for(params["milestone"], soak.run_timeout) and (jvms := run.spark_jvms()):
            n = kill_tree(jvms[0])
            fired, detail = True, f"killed a spark-submit tree ({n} processes)"
        r = self.finish(soak, run)
        return Outcome(fired, f"{detail}; run exit {r.exit_code}")


class KillAirflow(Fault):
    """SIGKILL of the whole `airflow dags test` process group."""

    kind = "kill_airflow"
    milestones = ("planned", "spark", "reading", "publish", "published")

    def run(self, soak, i, params):
        run = soak.start_run(i, self.kind)
        fired = run.wait_for(params["milestone"], soak.run_timeout) and run.proc.poll() is None
        if fired:
            run.kill()
        r = self.finish(soak, run)
        return Outcome(fired, f"run {r.run_id} " + ("killed" if fired else f"ended first (exit {r.exit_code})"))


class MarkFailed(Fault):
    """The DAG run marked failed through Airflow while it runs (what an operator does in the UI or with
    `PATCH /api/v2/dags/{dag}/dagRuns/{run}`); `airflow dags test` then schedules none of its other tasks."""

    kind = "mark_failed"
    milestones = ("planned", "spark", "reading", "publish")

    def run(self, soak, i, params):
        with open(soak.out / "logs" / f"mark-failed-{i}.log", "w") as err:
            marker = subprocess.Popen([sys.executable, "-c", MARK_FAILED], env=soak.env, stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=err, text=True, start_new_session=True)
        soak.processes.append(marker)
        ready = ""
        while ready not in ("ready", None):  # Airflow imported: marking then takes milliseconds
            ready = marker.stdout.readline().strip() or (None if marker.poll() is not None else "")
        run = soak.start_run(i, self.kind)
        fired, detail = False, "the run ended before the milestone"
        if ready is None:
            detail = f"the marker did not start (see logs/mark-failed-{i}.log)"
        elif run.wait_for(params["milestone"], soak.run_timeout) and run.proc.poll() is None and run.run_id:
            said = marker.communicate(f"{DATASOURCE} {run.run_id}\n", timeout=300)[0].strip()
            fired, detail = marker.returncode == 0, said.splitlines()[-1] if said else "?"
        if marker.poll() is None:
            marker.kill()
            marker.wait(30)
        r = self.finish(soak, run)
        return Outcome(fired, f"{detail}; run exit {r.exit_code}")


class RerunPublished(Fault):
    """A published run's tasks executed again: `airflow tasks test` of spark_job (map index 0), of publish, or
    of both, in that order."""

    kind = "rerun_published"

    def draw(self, rng):
        return {"tasks": rng.choice([["spark_job"], ["publish"], ["spark_job", "publish"]])}

    def run(self, soak, i, params):
        r = self.finish(soak, soak.start_run(i, self.kind))
        if r.exit_code != 0 or not r.run_id:
            return Outcome(False, f"the run to re-execute failed (exit {r.exit_code})")
        codes = []
        for task in params["tasks"]:
            extra = ["--map-index", "0"] if task == "spark_job" else []
            codes.append(soak.tasks_test(i, self.kind, task, r.run_id, *extra).exit_code)
        return Outcome(True, f"re-executed {params['tasks']} of {r.run_id}: exit {codes}")


class TwoRuns(Fault):
    """A second run started while the first is at a milestone (Airflow's max_active_runs does not hold back
    `airflow dags test`)."""

    kind = "two_runs"
    milestones = ("started", "planned", "spark", "publish")

    def run(self, soak, i, params):
        first = soak.start_run(i, self.kind)
        fired = first.wait_for(params["milestone"], soak.run_timeout) and first.proc.poll() is None
        second = soak.start_run(i, self.kind, label="second")
        a, b = self.finish(soak, first), self.finish(soak, second)
        return Outcome(fired, f"exits {a.exit_code}, {b.exit_code}" + ("" if fired else " (first ended first)"))


class BrokerRestart(Fault):
    kind = "broker_restart"
    milestones = ("planned", "spark", "reading", "publish")

    def draw(self, rng):
        return {"milestone": rng.choice(self.milestones), "graceful": rng.random() < 0.5}

    def run(self, soak, i, params):
        run = soak.start_run(i, self.kind)
        fired = run.wait_for(params["milestone"], soak.run_timeout) and run.proc.poll() is None
        took = 0.0
        if fired:
            t = time.monotonic()
            soak.kafka.restart(graceful=params["graceful"])
            took = time.monotonic() - t
        r = self.finish(soak, run)
        how = "controlled shutdown" if params["graceful"] else "SIGKILL"
        return Outcome(fired, (f"broker restarted ({how}, {took:.0f}s)" if fired else "the run ended first")
                       + f"; run exit {r.exit_code}")


class PartitionGrowth(Fault):
    kind = "partition_growth"
    milestones = ("started", "planned", "spark")

    def draw(self, rng):
        return {"milestone": rng.choice(self.milestones), "records": rng.randint(50, 300)}

    def run(self, soak, i, params):
        run = soak.start_run(i, self.kind)
        fired = run.wait_for(params["milestone"], soak.run_timeout)
        detail = "the run ended first"
        if fired:
            before = soak.partitions()
            if before < MAX_PARTITIONS:
                res = soak.admin.create_partitions([NewPartitions(TOPIC, before + 1)])
                res[TOPIC].result(timeout=60)
                soak.wait_partitions(before + 1)
                soak.produce(params["records"], f"i{i}g", iteration=i, partition=before)
                detail = f"partitions {before} -> {before + 1}, {params['records']} records in the new one"
            else:
                fired, detail = False, f"already {before} partitions"
        r = self.finish(soak, run)
        return Outcome(fired, f"{detail}; run exit {r.exit_code}")


class Operator(Fault):
    """What an operator does between runs, each a real command and no DAG run of its own: `ingest
    reset --to-latest`, then (once a batch is produced) `ingest set-offsets` forward on one partition (a skip)
    and `delete_records` of unread records on another, recovered by the spec's resetOffsetAutomatically (the
    next run resets past them) or by the set-offsets the error advises; then the topic deleted and created
    again, taken up with the command TopicRecreatedError advises (`set-offsets TOPIC=earliest`): the new topic's
    records must all be ingested, none skipped. The old topic's records no run had read go with it (counted apart:
    nobody could ingest them). Every offset they move past is lost on
    purpose: the soak keeps the ranges from the store's committed offsets and the broker's answers (not from the
    product's accounting), and at the end each lost record must lie in them, none visible, and the store's lost
    counter equal them exactly."""

    kind = "operator"
    actions = ("reset_to_latest", "set_offsets_forward", "records_deleted", "topic_recreated")

    def draw(self, rng):
        return {"batch": rng.randint(100, 300), "skip": rng.randint(5, 40), "delete": rng.randint(5, 40),
                "partition": rng.randrange(MAX_PARTITIONS),
                "recover": rng.choice(["resetOffsetAutomatically", "set-offsets"])}

    def run(self, soak, i, params):
        # the topic deleted and created again (a new topic id): the next plan would stop with
        # TopicRecreatedError; the operator follows its advice to start over from the new topic's first record
        # (first: a deletion recovered by a later run's resetOffsetAutomatically must happen in the same log)
        destroyed = soak.recreate_topic()
        soak.produce(params["batch"], f"i{i}new", iteration=i)  # the new topic's first records: none may be skipped
        soak.ingest(i, "set-offsets", DATASOURCE, f"{TOPIC}=earliest", "--yes")
        recreated = f"topic re-created ({destroyed} unread records went with it), set-offsets {TOPIC}=earliest"
        before = soak.committed()
        soak.ingest(i, "reset", DATASOURCE, "--to-latest", "--yes")
        for p, to in soak.committed().items():
            start = before.get(p, soak.watermarks(p)[0])  # never committed: the next run read from the log start
            if to > start:
                soak.lose(p, start, to)
        done = [recreated, f"reset --to-latest from {before}"]
        soak.produce(params["batch"], f"i{i}op", iteration=i)  # unread records to skip and delete
        committed = soak.committed()
        parts = sorted(committed)
        skip_p = parts[params["partition"] % len(parts)]
        delete_p = parts[(params["partition"] + 1) % len(parts)]
        c, hi = committed[skip_p], soak.watermarks(skip_p)[1]
        to = min(c + params["skip"], hi)
        if to > c:
            soak.ingest(i, "set-offsets", DATASOURCE, f"{TOPIC}:{skip_p}={to}", "--yes")
            soak.lose(skip_p, c, to)
            done.append(f"set-offsets p{skip_p} {c} -> {to}")
        c, hi = soak.committed()[delete_p], soak.watermarks(delete_p)[1]
        to = min(c + params["delete"], hi)
        if to > c:
            tp = KTP(TOPIC, delete_p, to)
            soak.admin.delete_records([tp])[tp].result(timeout=60)
            soak.lose(delete_p, c, to)
            if params["recover"] == "set-offsets":  # what the next run's error would advise
                soak.ingest(i, "set-offsets", DATASOURCE, f"{TOPIC}:{delete_p}={to}", "--yes")
            done.append(f"records {c}..{to - 1} of p{delete_p} deleted ({params['recover']})")
        return Outcome(len(done) == 4, "; ".join(done))


FAULTS: dict[str, Fault] = {f.kind: f for f in (Clean(), KillSpark(), KillAirflow(), MarkFailed(), RerunPublished(),
                                                 TwoRuns(), BrokerRestart(), PartitionGrowth(), Operator())}


# ------------------------------------------------------------------------------------------------ the soak

# Hostile records: kind -> (value for uid u, iteration i and a time ts, visibility): "absent" (dropped as
# unparseable), "once" (ingested with an error: a null column), "at most once" (either is right; a row, if any,
# carries u as its uid's prefix). Payloads without a uid are only checked not to stop anything.
HOSTILE: dict[str, tuple[Callable[[str, int, int], bytes], str]] = {
    "malformed_json": (lambda u, i, ts: b'{"uid": "%s", "ts": %d, "iter' % (u.encode(), ts), "absent"),
    "time_past_year_9999": (lambda u, i, ts: json.dumps({"ts": 253402300800000, "uid": u, "iteration": i}).encode(),
                            "absent"),
    "time_unreadable": (lambda u, i, ts: json.dumps({"ts": "yesterday", "uid": u, "iteration": i}).encode(), "absent"),
    "time_year_one": (lambda u, i, ts: json.dumps({"ts": -62135596800000, "uid": u, "iteration": i}).encode(),
                      "at most once"),
    "long_past_2_63": (lambda u, i, ts: b'{"ts": %d, "uid": "%s", "iteration": 9223372036854775808}' % (ts, u.encode()),
                       "once"),
    "long_1e300": (lambda u, i, ts: json.dumps({"ts": ts, "uid": u, "iteration": 1e300}).encode(), "once"),
    "long_nan": (lambda u, i, ts: b'{"ts": %d, "uid": "%s", "iteration": NaN}' % (ts, u.encode()), "at most once"),
    "long_is_object": (lambda u, i, ts: json.dumps({"ts": ts, "uid": u, "iteration": {"n": i}}).encode(), "once"),
    "not_utf8": (lambda u, i, ts: b'{"ts": %d, "uid": "%s\xff\xfe", "iteration": %d}' % (ts, u.encode(), i),
                 "at most once"),
    "array_payload": (lambda u, i, ts: b"[1, 2, 3]", "no uid"),
    "empty_object": (lambda u, i, ts: b"{}", "no uid"),
}


class BackgroundProducer(threading.Thread):
    def __init__(self, soak: "Soak", rate: float):
        super().__init__(daemon=True)
        self.soak, self.rate = soak, rate
        self.stopping = threading.Event()

    def run(self) -> None:
        n = 0
        while not self.stopping.wait(1.0 / self.rate):
            self.soak.produce_one(f"bg-{n}", iteration=self.soak.current_iteration)
            n += 1


class Soak:
    def __init__(self, args: argparse.Namespace, out: Path):
        self.args, self.out = args, out
        self.report = Report(args.seed, args.iterations, "Spark Connect" if args.spark_connect else "spark-submit")
        self.processes: list[subprocess.Popen] = []
        self.logical_dates = 0
        self.current_iteration: int | None = None
        self.delivered: dict[str, tuple[int, int, int | None]] = {}  # uid -> (partition, offset, iteration)
        self.undelivered: list[str] = []
        self.hostile: dict[str, str] = {}  # uid -> expected visibility (HOSTILE), once acknowledged
        self.hostile_at: dict[str, tuple[int, int]] = {}  # uid -> (partition, offset)
        # (topic generation, partition) -> [start, end) the operator moved past; a re-created topic is a new
        # generation, whose offsets start again at 0
        self.lost_ranges: dict[tuple[int, int], list[tuple[int, int]]] = {}
        self.generation = 0
        self.generation_of: dict[str, int] = {}  # uid -> the generation of the topic it was produced to
        self.destroyed: set[str] = set()  # uids deleted with their topic before any run read them
        self._lock = threading.RLock()  # delivery callbacks run inside produce()'s poll
        self.completion_timeout_s = float(args.completion_timeout)
        # a run ends on its own within: spark jobs (each bounded by completionTimeout) plus a publish that may
        # wait completionTimeout for a predecessor, per try
        self.run_timeout = 2 * (args.retries + 1) * self.completion_timeout_s + 300
        self.postgres: EmbeddedPostgres | None = None
        self.kafka: EmbeddedKafka | None = None
        self.connect: EmbeddedSparkConnect | None = None
        self.databases: list[str] = []
        self.pg_base = ""

    # -- services --------------------------------------------------------------------------------------

    def start(self) -> None:
        (self.out / "logs").mkdir(parents=True, exist_ok=True)
        t = time.monotonic()
        if self.args.postgres:
            self.pg_base = self.args.postgres.rstrip("/")
        else:
            self.postgres = EmbeddedPostgres().start()
            self.pg_base = self.postgres.url
        tag = f"soak_{os.getpid()}_{uuid.uuid4().hex[:6]}"
        self.databases = [f"{tag}_ingest", f"{tag}_airflow"]
        engine = sa.create_engine(f"{self.pg_base}/postgres", isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            for name in self.databases:
                conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
        engine.dispose()
        self.kafka = EmbeddedKafka(self.out / "kafka").start()
        self.admin = AdminClient({"bootstrap.servers": self.kafka.bootstrap})
        self.admin.create_topics([NewTopic(TOPIC, self.args.partitions, 1)])[TOPIC].result(timeout=60)
        self.wait_partitions(self.args.partitions)
        dags = self.out / "dags"
        (dags / "specs").mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / "dags" / "ingest_datasources.py", dags / "ingest_datasources.py")
        (dags / "specs" / f"{DATASOURCE}.yaml").write_text(yaml.safe_dump(self.spec()))
        if self.args.spark_connect:
            self.connect = EmbeddedSparkConnect(self.out / "spark-connect", driver_memory="1g").start()
        self.env = airflow_env(self.out, self.kafka.bootstrap, dags_folder=dags,
                               metadata_url=f"{self.pg_base}/{self.databases[0]}",
                               spark_connect_url=self.connect.url if self.connect else None,
                               AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"{self.pg_base}/{self.databases[1]}")
        # short-lived test JVMs: C1 only, as the tests do (an outer SPARK_SUBMIT_OPTS wins)
        self.env.setdefault("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1")
        self.store = MetadataStore(self.env["INGEST_METADATA_URL"])
        self.store.upgrade()
        with open(self.out / "logs" / "airflow-db-migrate.log", "wb") as f:
            subprocess.run([AIRFLOW, "db", "migrate"], env=self.env, stdout=f, stderr=subprocess.STDOUT, check=True)
        self.producer_config = {"bootstrap.servers": self.kafka.bootstrap, "enable.idempotence": True,
                                "acks": "all", "linger.ms": 5, "delivery.timeout.ms": 300_000,
                                "topic.metadata.refresh.interval.ms": 5000}  # sees added partitions soon
        self.producer = Producer(self.producer_config)
        spark = f"Spark Connect {self.connect.url}" if self.connect else "spark-submit"
        log(f"ready in {time.monotonic() - t:.0f}s: broker {self.kafka.bootstrap}, PostgreSQL {self.pg_base}, "
            f"{spark}, out {self.out}")

    def stop(self) -> None:
        for proc in self.processes:  # only what the soak started, each by its own process group
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(30)
        if getattr(self, "store", None) is not None:
            self.store.dispose()
        if self.kafka is not None:
            self.kafka.stop()
        if self.connect is not None:
            self.connect.stop()
        if self.databases and not self.args.keep and self.pg_base and self.postgres is None:
            engine = sa.create_engine(f"{self.pg_base}/postgres", isolation_level="AUTOCOMMIT")
            with engine.connect() as conn:
                for name in self.databases:
                    conn.execute(sa.text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                         "WHERE datname = :n AND pid <> pg_backend_pid()"), {"n": name})
                    conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}"'))
            engine.dispose()
        if self.postgres is not None:
            self.postgres.stop()

    def spec(self) -> dict:
        return {
            "type": "kafka",
            "spec": {
                "dataSchema": {
                    "dataSource": DATASOURCE,
                    "timestampSpec": {"column": "ts", "format": "millis"},
                    "dimensionsSpec": {"dimensions": ["uid", {"type": "long", "name": "iteration"}]},
                    "granularitySpec": {"segmentGranularity": "HOUR", "queryGranularity": "NONE", "rollup": False},
                },
                "ioConfig": {
                    "topic": TOPIC, "inputFormat": {"type": "json"}, "useEarliestOffset": True,
                    "consumerProperties": {"bootstrap.servers": {"type": "environment",
                                                                 "variable": "INGEST_KAFKA_BOOTSTRAP"}},
                    "taskCount": self.args.task_count, "replicas": 1,
                    "completionTimeout": f"PT{int(self.completion_timeout_s)}S",
                },
                # the operator fault deletes records and lets the run reset past them (or sets the offsets itself)
                "tuningConfig": {"type": "kafka",
                                 **({"resetOffsetAutomatically": True} if "operator" in self.args.faults else {})},
            },
            "microbatch": {"schedule": "PT10M", "retries": self.args.retries, "retryDelay": "PT2S",
                           **({"deadLetter": {}} if self.args.hostile else {}),
                           **({"iceberg": {}} if self.args.iceberg else {})},
        }

    def run_folder(self, run_id: str) -> Path:
        """Where a run's jobs write (deep storage is a local folder here)."""
        base = deep_storage.run_uri(self.env["INGEST_DEEP_STORAGE"], DATASOURCE, run_id)
        return Path(deep_storage.filesystem(base)[1])

    # -- records ---------------------------------------------------------------------------------------

    def produce_one(self, uid: str, iteration: int | None, partition: int | None = None,
                    hostile: str | None = None) -> None:
        ts = int(time.time() * 1000)
        if hostile is None:
            value = json.dumps({"ts": ts, "uid": uid, "iteration": iteration}).encode()
        else:
            make, expected = HOSTILE[hostile]
            value = make(uid, iteration or 0, ts)

        def delivered(err, msg, uid=uid):
            with self._lock:
                if err is not None:
                    self.undelivered.append(uid)
                elif hostile is not None:
                    self.hostile[uid] = expected
                    self.hostile_at[uid] = (msg.partition(), msg.offset())
                else:
                    self.delivered[uid] = (msg.partition(), msg.offset(), iteration)
        kwargs = {"partition": partition} if partition is not None else {"key": uid.encode()}
        deadline = time.monotonic() + 60
        with self._lock:
            self.generation_of[uid] = self.generation
            while True:
                try:
                    self.producer.produce(TOPIC, value, on_delivery=delivered, **kwargs)
                    break
                except BufferError:
                    self.producer.poll(0.1)
                except KafkaException as exc:  # a partition just added: the producer's metadata catches up
                    if exc.args[0].code() != KafkaError._UNKNOWN_PARTITION or time.monotonic() > deadline:
                        raise
                    self.producer.list_topics(TOPIC, timeout=10)
                    self.producer.poll(0.2)
            self.producer.poll(0)

    def produce(self, n: int, prefix: str, iteration: int | None, partition: int | None = None) -> int:
        for k in range(n):
            self.produce_one(f"{prefix}-{k}", iteration, partition)
        self.flush()
        return n

    def produce_hostile(self, iteration: int) -> int:
        for kind in HOSTILE:
            self.produce_one(f"h{iteration}-{kind}", iteration, hostile=kind)
        self.flush()
        return len(HOSTILE)

    def flush(self) -> None:
        remaining = self.producer.flush(300)
        if remaining:
            raise RuntimeError(f"{remaining} records were not delivered within 300 s")

    def partitions(self) -> int:
        md = self.admin.list_topics(TOPIC, timeout=30)
        return len(md.topics[TOPIC].partitions)

    def wait_partitions(self, n: int) -> None:
        deadline = time.monotonic() + 60
        while self.partitions() != n:
            if time.monotonic() > deadline:
                raise RuntimeError(f"topic {TOPIC} did not reach {n} partitions")
            time.sleep(0.2)

    def lag(self) -> int | None:
        """Records between the committed offsets and the latest ones, over every partition; None when the broker
        does not answer."""
        committed = {tp.partition: k.offset for tp, k in self.store.offsets.committed(DATASOURCE).items()}
        consumer = Consumer({"bootstrap.servers": self.kafka.bootstrap, "group.id": "fault-soak-lag"})
        try:
            total = 0
            for p in range(self.partitions()):
                _, high = consumer.get_watermark_offsets(KTP(TOPIC, p), timeout=30)
                total += max(0, high - committed.get(p, 0))
            return total
        except Exception:  # noqa: BLE001 - report it as unknown
            return None
        finally:
            consumer.close()

    def committed(self) -> dict[int, int]:
        return {tp.partition: k.offset for tp, k in self.store.offsets.committed(DATASOURCE).items()}

    def watermarks(self, partition: int) -> tuple[int, int]:
        """The partition's log start and end, from the broker."""
        consumer = Consumer({"bootstrap.servers": self.kafka.bootstrap, "group.id": "fault-soak-lag"})
        try:
            return consumer.get_watermark_offsets(KTP(TOPIC, partition), timeout=30)
        finally:
            consumer.close()

    def lose(self, partition: int, start: int, end: int) -> None:
        """Offsets [start, end) of `partition` that an operator moved the datasource past: lost on purpose."""
        self.lost_ranges.setdefault((self.generation, partition), []).append((start, end))

    def recreate_topic(self) -> int:
        """Delete TOPIC and create it again with as many partitions (a new topic id), the producer held still
        meanwhile; returns how many acknowledged records went with it unread (past the committed offsets)."""
        with self._lock:  # the background producer waits
            self.flush()
            partitions = self.partitions()
            committed = self.committed()
            gone = {uid for uid, (p, o, _) in self.delivered.items()
                    if self.generation_of.get(uid) == self.generation and o >= committed.get(p, 0)}
            gone |= {uid for uid, (p, o) in self.hostile_at.items()
                     if self.generation_of.get(uid) == self.generation and o >= committed.get(p, 0)}
            self.destroyed |= gone
            self.admin.delete_topics([TOPIC])[TOPIC].result(timeout=60)
            deadline = time.monotonic() + 120
            while True:  # the name is free once the deletion has completed
                try:
                    self.admin.create_topics([NewTopic(TOPIC, partitions, 1)])[TOPIC].result(timeout=60)
                    break
                except KafkaException:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
            self.wait_partitions(partitions)
            self.generation += 1
            # a fresh idempotent producer: the old one's sequence numbers belong to the deleted log
            self.producer = Producer(self.producer_config)
        return len(gone)

    def lost_offsets(self) -> dict[tuple[int, int], list[tuple[int, int]]]:
        """The operator's ranges per (generation, partition), overlaps merged (two actions may move past the
        same offsets)."""
        out = {}
        for p, ranges in self.lost_ranges.items():
            merged: list[tuple[int, int]] = []
            for a, b in sorted(ranges):
                if merged and a <= merged[-1][1]:
                    merged[-1] = (merged[-1][0], max(merged[-1][1], b))
                else:
                    merged.append((a, b))
            out[p] = merged
        return out

    def ingest(self, iteration: int, *args: str) -> None:
        """An operator's `ingest` command (the datasource's DAG folder and store from the soak's environment)."""
        self.logical_dates += 1
        log_path = self.out / "logs" / f"{self.logical_dates:03d}-ingest-{args[0]}.log"
        with open(log_path, "w") as out:
            done = subprocess.run([sys.executable, "-m", "ingest_core.service.cli", *args, "--no-airflow",
                                   "--actor", "soak-operator"], env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                  timeout=300)
        if done.returncode != 0:
            raise RuntimeError(f"`ingest {' '.join(args)}` failed (exit {done.returncode}): see {log_path}")
        log(f"  ingest {' '.join(args)}: {log_path.read_text().strip().splitlines()[-1][:300]}")

    def in_flight(self) -> list[str]:
        return [f"{r.run_id} ({r.status.value})" for r in self.store.runs.recent(DATASOURCE, limit=1000)
                if r.status.in_flight]

    # -- runs ------------------------------------------------------------------------------------------

    def start_run(self, iteration: int | None, fault: str, label: str = "") -> DagTest:
        run = DagTest(self, f"dags test {fault}{' ' + label if label else ''}", iteration, fault)
        return run

    def tasks_test(self, iteration: int, fault: str, task: str, run_id: str, *extra: str) -> RunResult:
        self.logical_dates += 1
        log_path = self.out / "logs" / f"{self.logical_dates:03d}-tasks-test-{task}.log"
        t = time.monotonic()
        with open(log_path, "w") as out:
            proc = subprocess.Popen([AIRFLOW, "tasks", "test", DATASOURCE, task, run_id, *extra], env=self.env,
                                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
            self.processes.append(proc)
            try:
                code = proc.wait(self.run_timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                code = proc.wait(30)
        result = RunResult(f"tasks test {task}", iteration, fault, run_id, code, round(time.monotonic() - t, 1),
                           False, str(log_path))
        self.report.runs.append(result)
        return result

    # -- checks ----------------------------------------------------------------------------------------

    def read_rows(self) -> tuple[Counter, Counter, list[str]]:
        """(uid -> rows, run id -> rows holding a uid seen before, unreadable segments) of the visible segments,
        read one segment at a time so one missing file does not hide the rest."""
        import pyarrow.parquet as pq

        counts: Counter = Counter()
        dup_runs: Counter = Counter()
        unreadable = []
        for seg in DatasourceReader(self.store, DATASOURCE).segments():
            try:
                fs, path = deep_storage.filesystem(seg.location)
                uids = pq.read_table(path, filesystem=fs, columns=["uid"]).column("uid").to_pylist()
            except Exception as exc:  # noqa: BLE001 - an unreadable published segment is a finding
                unreadable.append(f"{seg.id} (run {seg.run_id}, {seg.num_rows} rows): {type(exc).__name__}: {exc}")
                continue
            for uid in uids:
                if counts[uid]:
                    dup_runs[seg.run_id] += 1
                counts[uid] += 1
        return counts, dup_runs, unreadable

    # -- the soak --------------------------------------------------------------------------------------

    def schedule(self) -> list[str]:
        """Every round of len(faults) iterations draws each fault once, in a seeded order."""
        rng = random.Random(self.args.seed)
        out: list[str] = []
        while len(out) < self.args.iterations:
            round_ = list(self.args.faults)
            rng.shuffle(round_)
            out += round_
        return out[: self.args.iterations]

    def run(self) -> Report:
        report = self.report
        producer = BackgroundProducer(self, self.args.rate) if self.args.rate > 0 else None
        if producer:
            producer.start()
        try:
            for i, kind in enumerate(self.schedule()):
                self.current_iteration = i
                rng = random.Random(f"{self.args.seed}:{i}")
                fault = FAULTS[kind]
                params = fault.draw(rng)
                n = self.produce(rng.randint(200, 1500), f"i{i}", iteration=i)
                if self.args.hostile:
                    n += self.produce_hostile(i)
                log(f"[{i + 1}/{self.args.iterations}] {kind} {params or ''} ({n} records produced)")
                outcome = fault.run(self, i, params)
                report.faults[kind] += 1
                report.fired[kind] += outcome.fired
                counts, _, unreadable = self.read_rows()
                dups = sum(c - 1 for c in counts.values() if c > 1)
                entry = Iteration(i, kind, params, outcome.fired, outcome.detail, n, self.lag(), self.in_flight(),
                                  dups, len(unreadable))
                report.log.append(entry)
                log(f"  {outcome.detail}; lag {entry.lag_after}, in flight {entry.in_flight_after or '-'}, "
                    f"duplicated so far {dups}, unreadable segments {len(unreadable)}")
        finally:
            if producer:
                producer.stopping.set()
                producer.join(30)
            self.current_iteration = None
            self.flush()
        self.heal()
        self.verify()
        return report

    def heal(self) -> None:
        report = self.report
        for k in range(1, self.args.heal_runs + 1):
            report.heal_runs = k
            r = DagTest(self, f"dags test heal {k}", None, "heal").wait(self.run_timeout)
            lag = self.lag()
            log(f"heal run {k}: exit {r.exit_code} in {r.seconds:.0f}s, lag {lag}, in flight {self.in_flight() or '-'}")
            if r.exit_code == 0 and lag == 0:
                report.runs_to_heal = k
                return

    def verify(self) -> None:
        report = self.report
        counts, dup_runs, unreadable = self.read_rows()
        delivered = dict(self.delivered)
        report.produced, report.undelivered = len(delivered), len(self.undelivered)
        report.visible_rows = sum(c for uid, c in counts.items() if uid in delivered)  # hostile ones apart
        ranges = self.lost_offsets()

        def lost_on_purpose(uid: str, partition: int, offset: int) -> bool:
            return any(a <= offset < b for a, b in ranges.get((self.generation_of.get(uid, 0), partition), ()))
        purposely = {uid for uid, (p, o, _) in delivered.items() if lost_on_purpose(uid, p, o)}
        hostile_lost = {uid for uid, (p, o) in self.hostile_at.items() if lost_on_purpose(uid, p, o)}
        report.destroyed = len(self.destroyed & set(delivered))  # good records; hostile ones are checked apart
        report.lost_on_purpose = len(purposely)
        report.lost_records_seen = len(purposely) + len(hostile_lost)
        report.lost_but_visible = [uid for uid in purposely | hostile_lost if counts.get(uid)]
        expected: Counter = Counter()
        for (_, p), rs in ranges.items():
            expected[p] += sum(b - a for a, b in rs)
        report.lost_expected = dict(sorted(expected.items()))
        from ingest_core.service.status import collect_status

        report.lost_counted = {tp.partition: n for tp, n in sorted(collect_status(self.store, DATASOURCE, None)
                                                                     .lost.items())}
        lost = [uid for uid in delivered if uid not in counts and uid not in purposely and uid not in self.destroyed]
        report.lost = len(lost)
        report.duplicated = sum(c - 1 for c in counts.values() if c > 1)
        hostile = {uid: kind for uid, kind in self.hostile.items() if uid not in hostile_lost | self.destroyed}
        report.hostile_produced = len(self.hostile)
        report.hostile_wrong = self.misplaced_hostile(counts, hostile)
        if self.args.hostile:
            report.hostile_wrong += self.misplaced_dead_letters(hostile)
        report.unexpected = sum(c for uid, c in counts.items() if uid not in delivered
                                and not any(uid.startswith(h) for h in hostile))
        report.unreadable_segments = unreadable
        kinds = {e.index: e.fault for e in report.log}
        by_fault: Counter = Counter()
        for uid in lost:
            it = delivered[uid][2]
            by_fault[f"iteration {it} {kinds.get(it, '?')}" if it is not None else "no iteration"] += 1
        report.lost_by_fault = dict(by_fault)
        report.duplicated_by_run = dict(dup_runs)
        report.final_lag = self.lag()
        report.in_flight_at_end = self.in_flight()
        if self.args.iceberg:
            report.iceberg_files, report.iceberg_mismatch = self.iceberg_rows(counts)

    def iceberg_rows(self, counts: Counter) -> tuple[int, int]:
        """(files, rows whose uid the Iceberg table holds other than as often as the reader): the table is read
        by pyiceberg alone, after the heal runs' reports synced it."""
        from pyiceberg.catalog.sql import SqlCatalog

        catalog = SqlCatalog("ingest", uri=self.env["INGEST_METADATA_URL"])
        try:
            table = catalog.load_table(("ingest", DATASOURCE))
            files = sum(1 for _ in table.scan().plan_files())
            seen = Counter(table.scan(selected_fields=("uid",)).to_arrow().column("uid").to_pylist())
        finally:
            catalog.engine.dispose()
        return files, sum((seen - counts).values()) + sum((counts - seen).values())

    @staticmethod
    def misplaced_hostile(counts: Counter, hostile: dict[str, str]) -> list[str]:
        """Hostile uids not visible as their kind must be (a row of a not-UTF-8 uid carries it as a prefix)."""
        wrong = []
        for uid, expected in hostile.items():
            seen = counts.get(uid, 0) if expected != "at most once" else sum(
                c for visible, c in counts.items() if visible is not None and visible.startswith(uid))
            if (expected == "absent" and seen) or (expected == "once" and seen != 1) or \
                    (expected == "at most once" and seen > 1):
                wrong.append(f"{uid}: {seen} rows (expected {expected})")
        return wrong

    def misplaced_dead_letters(self, hostile: dict[str, str]) -> list[str]:
        """With --hostile the spec keeps dead letters: each record at most once; each hostile record that must be
        dropped or ingested with an error exactly once; no good record at all."""
        table = DatasourceReader(self.store, DATASOURCE).dead_letters()
        wrong = []
        places = Counter(zip(table.column("partition").to_pylist(), table.column("offset").to_pylist()))
        wrong += [f"dead letter of {p}:{o} kept {n} times" for (p, o), n in places.items() if n > 1]
        values = [v or b"" for v in table.column("value").to_pylist()]
        for uid, expected in hostile.items():
            if expected == "no uid":
                continue
            seen = sum(b'"%s' % uid.encode() in v for v in values)
            if (expected in ("absent", "once") and seen != 1) or seen > 1:
                wrong.append(f"{uid}: {seen} dead letters (expected {'1' if expected != 'at most once' else '0 or 1'})")
        everything = b"\n".join(values)
        good = [uid for uid in self.delivered if b'"%s"' % uid.encode() in everything][:5]
        wrong += [f"{uid}: a good record among the dead letters" for uid in good]
        return wrong

    def dump_metadata(self) -> None:
        """The store's runs, offsets and segments, for the evidence."""
        runs = [{"run_id": r.run_id, "status": r.status.value, "records": r.plan.records, "error": r.error,
                 "superseded_by": r.superseded_by, "created_at": str(r.created_at),
                 "published_at": str(r.published_at) if r.published_at else None,
                 "ranges": {f"{p.tp.topic}:{p.tp.partition}": [p.start, p.end] for g in r.plan.groups
                            for p in g.partitions}}
                for r in self.store.runs.recent(DATASOURCE, limit=10_000)]
        offsets = {f"{tp.topic}:{tp.partition}": [k.offset, k.run_id]
                   for tp, k in self.store.offsets.committed(DATASOURCE).items()}
        segments = [{"id": s.id, "run_id": s.run_id, "group": s.group_id, "rows": s.num_rows, "location": s.location,
                     "used": s.used} for s in self.store.segment_records.of(DATASOURCE, used_only=False)]
        (self.out / "metadata.json").write_text(json.dumps({"runs": runs, "offsets": offsets, "segments": segments},
                                                           indent=1, default=str))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iterations", type=int, default=16, help="microbatches under a fault (default 16)")
    ap.add_argument("--seed", type=int, default=1, help="draws the faults, their milestones and batch sizes")
    ap.add_argument("--faults", default=",".join(FAULTS),
                    help=f"comma-separated subset of: {', '.join(FAULTS)} (default: all)")
    ap.add_argument("--out", type=Path, help="where broker data, Airflow home, deep storage, logs and the report go "
                                             "(default: a new temp dir; must be empty)")
    ap.add_argument("--keep", action="store_true", help="keep --out (and the databases on --postgres) afterwards; "
                                                        "without it they are removed when the soak passes")
    ap.add_argument("--postgres", help="a PostgreSQL server, postgresql+psycopg2://user@host:port (default: a "
                                       "private one); the soak creates its two databases there")
    ap.add_argument("--heal-runs", type=int, default=3, help="clean runs allowed to bring the lag to 0 (default 3)")
    ap.add_argument("--rate", type=float, default=10.0, help="background records/s while the faults run (0: off)")
    ap.add_argument("--partitions", type=int, default=2, help="the topic's partitions at the start (default 2)")
    ap.add_argument("--task-count", type=int, default=2, help="the spec's taskCount (default 2)")
    ap.add_argument("--retries", type=int, default=1, help="Airflow retries of each task (default 1)")
    ap.add_argument("--spark-connect", action="store_true",
                    help="run the jobs on a local Spark Connect server (kill_spark kills it) instead of spark-submit")
    ap.add_argument("--completion-timeout", type=int, default=120,
                    help="the spec's completionTimeout in seconds (default 120)")
    ap.add_argument("--hostile", action="store_true",
                    help="each iteration also produces one record of every hostile kind (bad JSON, times and numbers)")
    ap.add_argument("--iceberg", action="store_true",
                    help="the datasource also has an Iceberg table (microbatch.iceberg): at the end it must hold every "
                         "visible row exactly once, whatever killed the runs between their publish and its commit")
    ap.add_argument("--tiny", action="store_true",
                    help="one clean microbatch and its heal run, one task group: that the soak runs, no fault")
    args = ap.parse_args(argv)
    if args.tiny:  # new defaults; what the command line gives still wins
        ap.set_defaults(iterations=1, faults="clean", heal_runs=2, task_count=1, completion_timeout=60, rate=5.0)
        args = ap.parse_args(argv)
    args.faults = [f.strip() for f in args.faults.split(",") if f.strip()]
    unknown = [f for f in args.faults if f not in FAULTS]
    if unknown or not args.faults:
        ap.error(f"unknown faults {unknown}; choose from {', '.join(FAULTS)}")
    return args


def run_soak(args: argparse.Namespace) -> tuple[Report, Path]:
    """Run the soak of `args` (see `parse_args`); returns its report and the folder holding its evidence
    (removed when it passed, unless --keep)."""
    if args.out is None:
        out = Path(tempfile.mkdtemp(prefix="fault-soak-"))
    else:
        out = args.out.resolve()
        if out.exists() and any(out.iterdir()):
            raise SystemExit(f"--out {out} is not empty")
        out.mkdir(parents=True, exist_ok=True)
    soak = Soak(args, out)
    try:
        soak.start()
        log(f"fault soak: seed {args.seed}, {args.iterations} iterations over {', '.join(args.faults)}")
        soak.run()
        soak.dump_metadata()
    finally:
        soak.stop()
        (out / "report.json").write_text(json.dumps(soak.report.to_json(), indent=1, default=str))
    if soak.report.ok and not args.keep:
        shutil.rmtree(out, ignore_errors=True)
    return soak.report, out


def main(argv: list[str] | None = None) -> int:
    report, out = run_soak(parse_args(argv))
    print("\n" + report.summary(), flush=True)
    if out.exists():
        print(f"logs, report.json and metadata.json in {out}")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
