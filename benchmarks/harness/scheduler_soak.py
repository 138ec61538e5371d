"""The fault soak under the scheduler (benchmarks/fault_soak.py --scheduler): a `@continuous` datasource behind a data
gate, run by Airflow's own components (scheduler with the LocalExecutor, dag-processor, triggerer, api-server), each
a process of its own on PostgreSQL, started again when it exits, as docker-compose's `restart: unless-stopped` and
the systemd units of docs/deadlines.md do. A producer sends --rate records/s all along; a poller reads the
datasource's new segments every 0.5 s. Every --fault-every seconds one fault strikes (each kind in turn), and the
soak waits until data produced after it is visible: its stall is that wait. At the end every acknowledged record
must be visible exactly once (read again from every published segment).

With --s3 deep storage is an S3 store of the soak's own that keeps its objects across a restart (`EmbeddedS3`,
persistent), and the faults include restarting it. With --sasl the datasource reads a broker of the soak's own over
SASL_SSL (SCRAM-SHA-512, its login from the environment, the CA's file in the spec); the producer and the soak's
admin use the broker's plaintext listener."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import psutil
import yaml
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from freshness import Datasource, spec_for
from harness import ROOT
from harness.fixed_cost_scheduler import Standalone
from harness.fixed_cost_setup import AIRFLOW, ExternalConnect, create_databases, drop_databases
from harness.soak_constants import log
from ingest_core.dev.embedded import EmbeddedKafka, EmbeddedPostgres, SecuredKafka, stop_group
from ingest_core.dev.embedded_s3 import EmbeddedS3, s3_spec_settings
from ingest_core.dev.embedded_spark import EmbeddedSparkConnect
from ingest_core.store.segment_schema import read_conformed

COMPONENTS = ("scheduler", "dag-processor", "triggerer", "api-server")
RESTART_DELAY_S = 2.0  # systemd's RestartSec of docs/deadlines.md
SETTLE_S = 10.0  # after data is visible again, before the next fault
STALL_BAR_S = 60.0  # issue 46: a datasource publishes again within a minute of any single fault
PARTITIONS = 2


class Supervised(Standalone):
    """Airflow's components, each on its own and started again RESTART_DELAY_S after it exits (whatever is left of
    its process group killed first, as compose and systemd do with a container or a unit)."""

    def __init__(self, root: Path, spec: dict, bootstrap: str, connect_url: str, airflow_db_url: str,
                 metadata_url: str, env: dict[str, str]):
        """`env`: more of the components' environment (the secrets the spec references)."""
        dags = root / "dags"
        (dags / "specs").mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / "dags" / "ingest_datasources.py", dags / "ingest_datasources.py")
        (dags / "specs" / "soak.yaml").write_text(yaml.safe_dump(spec))
        self.procs: dict[str, subprocess.Popen] = {}
        self.restarts: Counter = Counter()
        self.stopping = threading.Event()
        self.start(root, bootstrap, dags, connect_url, airflow_db_url, metadata_url, **env)

    def launch(self) -> None:
        for name in self.components():
            self.spawn(name)
        self.watcher = threading.Thread(target=self.watch, daemon=True)
        self.watcher.start()

    def components(self) -> dict[str, tuple[list[str], dict[str, str]]]:
        """name -> (`airflow` arguments, environment of its own over the others')."""
        return {name: ([name], {}) for name in COMPONENTS}

    def spawn(self, name: str) -> None:
        args, env = self.components()[name]
        with open(self.root / f"{name}.log", "ab") as out:
            self.procs[name] = subprocess.Popen([AIRFLOW, *args], env={**self.env, **env}, stdout=out,
                                                stderr=subprocess.STDOUT, start_new_session=True)

    def watch(self) -> None:
        while not self.stopping.wait(0.5):
            for name, proc in list(self.procs.items()):
                if proc.poll() is not None and not self.stopping.is_set():
                    log(f"  airflow {name} exited ({proc.returncode}): started again in {RESTART_DELAY_S:g} s")
                    stop_group(proc, 5)
                    time.sleep(RESTART_DELAY_S)
                    self.restarts[name] += 1
                    self.spawn(name)

    def exited(self) -> bool:
        return False  # each is started again

    def stop(self) -> None:
        self.stopping.set()
        self.watcher.join(30)
        for proc in self.procs.values():
            stop_group(proc, 30)
        self.db.dispose()


class RestartableSecuredKafka(SecuredKafka):
    """`SecuredKafka` whose restart keeps its certificates, as a real broker's does (a new CA at each start would
    fail every client that read the old one)."""

    def start(self, timeout: float = 90) -> "RestartableSecuredKafka":
        if not self.tls.ca.is_file():
            return super().start(timeout)
        EmbeddedKafka.start(self, timeout)
        return self


@dataclass
class Struck:
    kind: str
    at: float  # epoch s
    fired: bool
    detail: str
    recovered_at: float | None = None

    @property
    def stall(self) -> float | None:
        return None if self.recovered_at is None else self.recovered_at - self.at


@dataclass
class Records:
    """What the producer sent (acknowledged) and when each record was first seen in a published segment."""

    produced: dict[int, float] = field(default_factory=dict)  # id -> produce time, once acknowledged
    seen: dict[int, float] = field(default_factory=dict)
    seen_twice: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def first_seen_after(self, t: float) -> float | None:
        with self.lock:
            times = [self.seen[i] for i, p in self.produced.items() if p >= t and i in self.seen]
        return min(times) if times else None


class SchedulerSoak:
    def __init__(self, args: argparse.Namespace, out: Path):
        self.args, self.out = args, out
        self.records = Records()
        self.struck: list[Struck] = []
        self.stopping = threading.Event()
        self.datasource = self.topic = f"ssoak_{uuid.uuid4().hex[:6]}"
        self.kafka: EmbeddedKafka | None = None
        self.connect: EmbeddedSparkConnect | None = None
        self.postgres: EmbeddedPostgres | None = None
        self.s3: EmbeddedS3 | None = None
        self.struck_at: float | None = None  # when the current fault struck (`strike`)
        self.cleanups: list[Callable[[], None]] = []

    # -- services ------------------------------------------------------------------------------------------

    def start(self) -> None:
        a = self.args
        env: dict[str, str] = {}  # the secrets the spec references, in the components' environment
        if a.sasl:
            password = f"scram-{uuid.uuid4().hex}"
            self.kafka = RestartableSecuredKafka(self.out / "kafka", {"ingest": password}, uuid.uuid4().hex)
            self.kafka.start()
            self.cleanups.append(self.kafka.stop)
            self.bootstrap = self.kafka.bootstrap  # the producer's and the soak's side door
            env["INGEST_SOAK_KAFKA_PASSWORD"] = password
        elif a.bootstrap:
            self.bootstrap = a.bootstrap
        else:
            self.kafka = EmbeddedKafka(self.out / "kafka").start()
            self.cleanups.append(self.kafka.stop)
            self.bootstrap = self.kafka.bootstrap
        if a.s3:
            self.s3 = EmbeddedS3(self.out / "s3", persistent=True).start()
            self.cleanups.append(self.s3.stop)
            env.update({"INGEST_SOAK_S3_KEY": self.s3.access_key, "INGEST_SOAK_S3_SECRET": self.s3.secret_key})
        if a.spark_connect_url:
            connect_url = ExternalConnect(a.spark_connect_url).url
        else:
            self.connect = EmbeddedSparkConnect(self.out / "spark-connect", driver_memory="1g",
                                                jar_sets=("spark-s3",) if a.s3 else ())
            self.cleanups.append(self.connect.stop)  # before its start: an interrupted start leaves its JVM
            self.connect.start()
            connect_url = self.connect.url
        if a.postgres:
            pg_base = a.postgres.rstrip("/")
        else:
            self.postgres = EmbeddedPostgres().start()
            self.cleanups.append(self.postgres.stop)
            pg_base = self.postgres.url
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        admin.create_topics([NewTopic(self.topic, PARTITIONS, 1)])[self.topic].result(timeout=60)
        databases = [f"airflow_{self.datasource}", f"ingest_{self.datasource}"]
        engine = create_databases(pg_base, databases)
        if self.postgres is None:  # a shared server keeps running: drop what the soak made
            self.cleanups.append(lambda: (drop_databases(engine, databases), engine.dispose()))
        else:
            engine.dispose()
        spec = self.spec()
        os.environ.update(env)  # this process reads the segments too, with the spec's settings
        if self.s3 is not None:
            from ingest_core.core.spec import parse_spec
            from ingest_core.kafka.storage_secrets import use_deep_storage

            use_deep_storage(parse_spec(spec))
        self.airflow = Supervised(self.out / "airflow", spec,
                                  self.kafka.sasl_bootstrap if a.sasl else self.bootstrap, connect_url,
                                  f"{pg_base}/{databases[0]}", f"{pg_base}/{databases[1]}", env)
        self.cleanups.append(self.airflow.stop)
        self.airflow.wait_healthy()
        self.airflow.wait_parsed([self.datasource])
        self.sink = Datasource(self.airflow.store, self.datasource, self.topic)

    def spec(self) -> dict:
        a = self.args
        spec = spec_for(self.datasource, self.topic, "@continuous", 1, a.task_count)
        spec["spec"]["ioConfig"]["completionTimeout"] = f"PT{a.completion_timeout}S"
        spec["microbatch"].update({"retries": 2, "retryDelay": "PT2S"})
        if a.sasl:
            assert isinstance(self.kafka, SecuredKafka)
            spec["spec"]["ioConfig"]["consumerProperties"].update({
                "security.protocol": "SASL_SSL", "sasl.mechanism": self.kafka.MECHANISM, "sasl.username": "ingest",
                "sasl.password": {"type": "environment", "variable": "INGEST_SOAK_KAFKA_PASSWORD"},
                "ssl.ca.location": str(self.kafka.tls.ca)})
        if self.s3 is not None:
            spec["microbatch"]["deepStorage"] = {"uri": f"{self.s3.uri}/ingest", "s3": s3_spec_settings(
                self.s3.endpoint, "INGEST_SOAK_S3_KEY", "INGEST_SOAK_S3_SECRET")}
        return spec

    def stop(self) -> None:
        self.stopping.set()
        for cleanup in reversed(self.cleanups):
            try:
                cleanup()
            except Exception as exc:  # noqa: BLE001 - the others still stop
                log(f"  cleanup failed: {exc!r}")

    # -- records -------------------------------------------------------------------------------------------

    def produce(self) -> None:
        p = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "acks": "all",
                      "linger.ms": 5, "delivery.timeout.ms": 300_000})
        n, start = 0, time.time()
        while not self.stopping.is_set() and not self.producing_done.is_set():
            due = int((time.time() - start) * self.args.rate)
            while n < due:
                t = time.time()

                def acked(err, _msg, i=n, t=t):
                    if err is None:
                        with self.records.lock:
                            self.records.produced[i] = t
                p.produce(self.topic, json.dumps({"id": n, "ts": int(t * 1000)}).encode(), partition=n % PARTITIONS,
                          on_delivery=acked)
                n += 1
            p.poll(0.05)
        p.flush(300)

    def poll(self) -> None:
        while not self.stopping.wait(0.5):
            try:
                ids = self.sink.new_ids()
            except Exception as exc:  # noqa: BLE001 - the store's database may be down (a fault): next poll
                log(f"  poll: {type(exc).__name__}")
                continue
            now = time.time()
            with self.records.lock:
                for i in ids:
                    if i in self.records.seen:
                        self.records.seen_twice += 1
                    else:
                        self.records.seen[i] = now

    # -- faults --------------------------------------------------------------------------------------------

    def wait_for_task(self, state: str, task: str | None = None, timeout: float = 60) -> bool:
        """Until a task instance of the datasource (`task`, or any) is in `state`, at most `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.airflow.query("SELECT 1 FROM task_instance WHERE dag_id = :d AND state = :s AND task_id = "
                                  "COALESCE(:t, task_id)", d=self.datasource, s=state, t=task):
                return True
            time.sleep(0.05)
        return False

    def strike(self) -> float:
        """Called by a fault at the moment it strikes (after waiting for its moment): its stall counts from here.
        Returns time.monotonic(), for the fault's own timing."""
        self.struck_at = time.time()
        return time.monotonic()

    def kill_scheduler(self) -> tuple[bool, str]:
        """SIGKILL of its process group (its LocalExecutor workers and their tasks too) while it has a task queued:
        the worst moment, as nothing heartbeats for a queued task."""
        self.wait_for_task("queued")
        proc = self.airflow.procs["scheduler"]
        n = 1 + len(psutil.Process(proc.pid).children(recursive=True))
        self.strike()
        os.killpg(proc.pid, signal.SIGKILL)
        return True, f"SIGKILL of the scheduler's process group ({n} processes)"

    def kill_worker(self, task: str) -> tuple[bool, str]:
        """SIGKILL of the LocalExecutor worker running a `task` of the datasource, and of what it started."""
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            busy = {}
            try:
                for p in psutil.Process(self.airflow.procs["scheduler"].pid).children(recursive=True):
                    title = " ".join(p.cmdline())
                    if title.startswith("airflow worker -- LocalExecutor: "):
                        busy[title.split()[-1]] = p
            except psutil.Error:
                pass
            if busy:
                rows = self.airflow.query("SELECT CAST(id AS TEXT), task_id FROM task_instance WHERE dag_id = :d AND "
                                          "state = 'running'", d=self.datasource)
                for ti, task_id in rows:  # its task process still runs under it (not a worker that just ended one)
                    if task_id == task and ti in busy and busy[ti].children():
                        victims = [busy[ti], *busy[ti].children(recursive=True)]
                        self.strike()
                        for v in victims:
                            try:
                                v.send_signal(signal.SIGKILL)
                            except psutil.NoSuchProcess:
                                pass
                        return True, f"SIGKILL of the worker running {task} ({len(victims)} processes)"
            time.sleep(0.05)
        return False, f"no {task} ran within 180 s"

    def kill_spark_connect(self) -> tuple[bool, str]:
        if self.connect is None:
            return False, "the Spark Connect server is not the soak's own"
        self.wait_for_task("running", "spark_job")  # mid-job: the running job's session dies under it
        t = self.strike()
        self.connect.kill()
        self.connect.start()  # and its warm-up (ingest_core.spark.warmup), as a deployment runs it after a start
        warmed = self.connect.warmed_s
        return True, (f"Spark Connect server killed mid-job, up again in {self.connect.up_s:.0f} s, "
                      + (f"warmed up {warmed:.0f} s later" if warmed is not None else
                         f"its warm-up failed or outlasted its time ({time.monotonic() - t:.0f} s in all)"))

    def crash_postgres(self, during: str = "spark_job") -> tuple[bool, str]:
        """SIGKILL of PostgreSQL while a `during` task runs: a spark_job (the publish after it meets the database
        down or recovering), or the publish itself (its store connection is lost under it: the project's own
        retry of a lost connection, docs/deadlines.md)."""
        if self.postgres is None:
            return False, "PostgreSQL is not the soak's own"
        if not self.wait_for_task("running", during, timeout=120):
            return False, f"no {during} ran within 120 s"
        t = self.strike()
        stop_group(self.postgres.proc, 0, signal.SIGKILL)
        time.sleep(3)
        self.postgres.start_again()
        took = time.monotonic() - t
        return True, f"PostgreSQL SIGKILLed during a {during}, up again (crash recovery) in {took:.0f} s"

    def restart_broker(self) -> tuple[bool, str]:
        if self.kafka is None:
            return False, "the broker is not the soak's own"
        t = self.strike()
        graceful = len(self.struck) % 2 == 0
        self.kafka.restart(graceful=graceful)
        return True, (f"broker restarted ({'controlled shutdown' if graceful else 'SIGKILL'}) in "
                      f"{time.monotonic() - t:.0f} s")

    def restart_s3(self) -> tuple[bool, str]:
        if self.s3 is None:
            return False, "deep storage is not the soak's S3 store (--s3)"
        self.wait_for_task("running", "spark_job")  # mid-job: its writes and the publish's checks meet it down
        t = self.strike()
        graceful = len(self.struck) % 2 == 0
        self.s3.restart(graceful=graceful, down=3)
        return True, (f"S3 store {'stopped' if graceful else 'SIGKILLed'} mid-job, up again after 3 s down in "
                      f"{time.monotonic() - t:.0f} s")

    def cli(self, *args: str) -> tuple[int, list[str]]:
        done = subprocess.run([AIRFLOW, *args], env=self.airflow.env, capture_output=True, text=True, timeout=300)
        return done.returncode, (done.stdout + done.stderr).strip().splitlines()[-1:] or [""]

    def clear_finished(self) -> tuple[bool, str]:
        rows = self.airflow.query("SELECT run_id, logical_date FROM dag_run WHERE dag_id = :d AND state = 'success' "
                                  "AND logical_date IS NOT NULL ORDER BY end_date DESC LIMIT 1", d=self.datasource)
        if not rows:
            return False, "no finished run"
        run_id, logical = rows[0]
        self.strike()
        code, said = self.cli("tasks", "clear", self.datasource, "--start-date", logical.isoformat(),
                              "--end-date", logical.isoformat(), "--yes")
        return code == 0, f"airflow tasks clear of {run_id}: exit {code} {said[0][:120]}"

    def trigger_in_flight(self) -> tuple[bool, str]:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.airflow.query("SELECT 1 FROM dag_run WHERE dag_id = :d AND state = 'running'", d=self.datasource):
                self.strike()
                code, said = self.cli("dags", "trigger", self.datasource)
                return code == 0, f"airflow dags trigger while a run is in flight: exit {code}"
            time.sleep(0.2)
        return False, "no run in flight within 120 s"

    FAULTS = {
        "kill_scheduler": kill_scheduler,
        "kill_worker_spark_job": lambda self: self.kill_worker("spark_job"),
        "kill_worker_plan": lambda self: self.kill_worker("plan"),
        "kill_worker_publish": lambda self: self.kill_worker("publish"),
        "kill_spark_connect": kill_spark_connect,
        "crash_postgres": crash_postgres,
        "crash_postgres_publish": lambda self: self.crash_postgres("publish"),
        "restart_broker": restart_broker,
        "restart_s3": restart_s3,
        "clear_finished": clear_finished,
        "trigger_in_flight": trigger_in_flight,
    }

    # -- the soak ------------------------------------------------------------------------------------------

    def run(self) -> dict:
        a = self.args
        self.producing_done = threading.Event()
        threads = [threading.Thread(target=self.produce, daemon=True), threading.Thread(target=self.poll, daemon=True)]
        for t in threads:
            t.start()
        t0 = time.time()
        while self.records.first_seen_after(t0) is None:  # the first run: warm-up, not counted
            if time.time() - t0 > 600:
                raise SystemExit(f"nothing was published in 600 s; see {self.out}")
            time.sleep(0.5)
        log(f"first records visible after {time.time() - t0:.0f} s (warm-up, not counted)")
        start, k, settled = time.time(), 0, time.time()
        while k < len(a.faults) or time.time() - start + a.fault_every < a.duration:  # each kind once at least
            kind = a.faults[k % len(a.faults)]
            # on the beat, but never on top of the last fault: one single fault at a time
            time.sleep(max(0.0, start + k * a.fault_every - time.time(), settled + SETTLE_S - time.time()))
            self.struck_at = None
            fired, detail = self.FAULTS[kind](self)
            at = self.struck_at or time.time()
            struck = Struck(kind, at, fired, detail)
            self.struck.append(struck)
            while (seen := self.records.first_seen_after(at)) is None and time.time() - at < a.recovery_timeout:
                time.sleep(0.5)
            struck.recovered_at = seen
            settled = time.time()
            log(f"[{k + 1}] {kind}: {detail}; data published again after "
                + (f"{struck.stall:.0f} s" if seen else f"more than {a.recovery_timeout:.0f} s")
                + f"; load average {load()}")
            k += 1
        self.producing_done.set()
        threads[0].join(600)
        deadline = time.time() + a.drain
        while time.time() < deadline and any(i not in self.records.seen for i in list(self.records.produced)):
            time.sleep(1)
        self.stopping.set()
        threads[1].join(60)
        self.dump_airflow_runs()
        return self.report()

    def dump_airflow_runs(self) -> None:
        """Airflow's runs and task tries of the datasource, to airflow-runs.json: where a stall's seconds went (the
        soak's PostgreSQL goes with it)."""
        runs = self.airflow.query("SELECT run_id, state, queued_at, start_date, end_date FROM dag_run "
                                  "WHERE dag_id = :d ORDER BY queued_at", d=self.datasource)
        tries = self.airflow.query("SELECT run_id, task_id, map_index, try_number, state, queued_dttm, start_date, "
                                   "end_date FROM task_instance_history WHERE dag_id = :d UNION ALL SELECT run_id, "
                                   "task_id, map_index, try_number, state, queued_dttm, start_date, end_date FROM "
                                   "task_instance WHERE dag_id = :d ORDER BY 6", d=self.datasource)
        (self.out / "airflow-runs.json").write_text(json.dumps(
            {"runs": [list(r) for r in runs], "tries": [list(t) for t in tries]}, indent=0, default=str))

    def report(self) -> dict:
        counts: Counter = Counter()
        table = read_conformed(list(self.airflow.store.segment_records.of(self.datasource, used_only=True)), ["id"])
        counts.update(table.column("id").to_pylist() if table is not None else [])
        produced = self.records.produced
        lost = [i for i in produced if not counts.get(i)]
        dups = {i: c - 1 for i, c in counts.items() if c > 1}
        bounds = [s.at for s in self.struck] + [float("inf")]

        def of_fault(i: int) -> int:  # the fault whose window [at, next at) the record was produced in
            return max((k for k, b in enumerate(bounds[:-1]) if produced[i] >= b), default=-1)
        by: dict[str, dict] = {}
        for k, s in enumerate(self.struck):
            row = by.setdefault(s.kind, {"faults": 0, "fired": 0, "longest_stall": 0.0, "recovered": True,
                                         "lost": 0, "duplicated": 0, "details": []})
            row["faults"] += 1
            row["fired"] += s.fired
            row["recovered"] &= s.stall is not None
            row["longest_stall"] = max(row["longest_stall"], s.stall if s.stall is not None else float("inf"))
            row["details"].append(f"{s.detail}; stall " + (f"{s.stall:.1f} s" if s.stall is not None else "-"))
        for i in lost:
            if (k := of_fault(i)) >= 0:
                by[self.struck[k].kind]["lost"] += 1
        for i, n in dups.items():
            if i in produced and (k := of_fault(i)) >= 0:
                by[self.struck[k].kind]["duplicated"] += n
        return {"faults": by, "produced": len(produced), "visible": sum(counts.values()), "lost": len(lost),
                "duplicated": sum(dups.values()), "unexpected": sum(c for i, c in counts.items() if i not in produced),
                "restarts": dict(self.airflow.restarts), "load": load()}


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def print_report(r: dict, args: argparse.Namespace) -> None:
    print(f"\nscheduler soak: {sum(f['faults'] for f in r['faults'].values())} faults, one every "
          f"{args.fault_every:g} s, {args.rate:g} records/s; load average at the end {r['load']}")
    print(f"  {'fault':<24}{'fired':>7}{'longest stall':>16}{'lost':>7}{'duplicated':>12}")
    for kind, f in r["faults"].items():
        stall = f"{f['longest_stall']:.0f} s" if f["recovered"] else f">{args.recovery_timeout:.0f} s"
        print(f"  {kind:<24}{f['fired']:>4}/{f['faults']:<2}{stall:>16}{f['lost']:>7}{f['duplicated']:>12}")
    over = [k for k, f in r["faults"].items() if not f["recovered"] or f["longest_stall"] > STALL_BAR_S]
    print(f"stalls over {STALL_BAR_S:.0f} s: {', '.join(over) if over else 'none'}")
    print(f"records: produced {r['produced']}, visible {r['visible']}, lost {r['lost']}, duplicated "
          f"{r['duplicated']}, unexpected {r['unexpected']}")
    print("component restarts: " + (", ".join(f"{k} {n}" for k, n in sorted(r["restarts"].items())) or "none"))
