"""The soak: the broker, the database, the Airflow home and Spark it runs on, the records it produces, the
runs under each fault (`Fault`: a case of benchmarks/fault_soak.py) and the check that every record is visible
exactly once."""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import sqlalchemy as sa
import yaml
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition as KTP
from confluent_kafka.admin import AdminClient, NewTopic

from harness import ROOT
from harness.dag_runs import DagTest
from harness.soak_constants import AIRFLOW, DATASOURCE, TOPIC, log
from harness.soak_report import Iteration, Report, RunResult
from ingest_core.dev.demo import airflow_env
from ingest_core.dev.embedded import EmbeddedKafka, EmbeddedPostgres
from ingest_core.dev.embedded_s3 import EmbeddedS3, s3_spec_settings
from ingest_core.dev.embedded_spark import EmbeddedSparkConnect
from ingest_core.handover import deep_storage
from ingest_core.store.metadata import MetadataStore
from ingest_core.store.reader import DatasourceReader


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
    def __init__(self, args: argparse.Namespace, out: Path, faults: dict[str, Fault]):
        """`faults`: the kinds the soak may draw, by name (benchmarks/fault_soak.py's cases)."""
        self.args, self.out, self.faults = args, out, faults
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
        self.s3: EmbeddedS3 | None = None
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
        # the Spark Connect server starts while the broker starts and Airflow's database is made: each mostly one
        # process starting up (the pool's exit waits for it, also when something else failed)
        with ThreadPoolExecutor(1) as pool:
            connect_started = None
            if self.args.spark_connect:
                self.connect = EmbeddedSparkConnect(self.out / "spark-connect", driver_memory="1g",
                                                    jar_sets=("spark-s3",) if self.args.s3 else ())
                connect_started = pool.submit(self.connect.start)
            self.kafka = EmbeddedKafka(self.out / "kafka").start()
            self.admin = AdminClient({"bootstrap.servers": self.kafka.bootstrap})
            self.admin.create_topics([NewTopic(TOPIC, self.args.partitions, 1)])[TOPIC].result(timeout=60)
            self.wait_partitions(self.args.partitions)
            s3_env = {}
            if self.args.s3:
                self.s3 = EmbeddedS3(self.out / "s3").start()
                s3_env = {"INGEST_SOAK_S3_KEY": self.s3.access_key, "INGEST_SOAK_S3_SECRET": self.s3.secret_key}
                os.environ.update(s3_env)  # this process reads the deep storage too (the checks), as the spec says
            dags = self.out / "dags"
            (dags / "specs").mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / "dags" / "ingest_datasources.py", dags / "ingest_datasources.py")
            (dags / "specs" / f"{DATASOURCE}.yaml").write_text(yaml.safe_dump(self.spec()))
            self.env = airflow_env(self.out, self.kafka.bootstrap, dags_folder=dags,
                                   metadata_url=f"{self.pg_base}/{self.databases[0]}",
                                   spark_connect_url=self.connect.url if self.connect else None,
                                   AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"{self.pg_base}/{self.databases[1]}", **s3_env)
            if self.s3 is not None:
                from ingest_core.core.spec import parse_spec
                from ingest_core.kafka.storage_secrets import use_deep_storage

                use_deep_storage(parse_spec(self.spec()))
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
            if connect_started is not None:
                connect_started.result()
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
        if self.s3 is not None:
            self.s3.stop()
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
                           **({"iceberg": {}} if self.args.iceberg else {}),
                           **(self.s3_settings() if self.args.s3 else {})},
        }

    def s3_settings(self) -> dict:
        """The spec's deep storage on the soak's object store; spark-submit's jobs get Hadoop's S3A jars."""
        from ingest_core.dev import jars

        assert self.s3 is not None
        out: dict = {"deepStorage": {"uri": f"{self.s3.uri}/ingest", "s3": s3_spec_settings(
            self.s3.endpoint, "INGEST_SOAK_S3_KEY", "INGEST_SOAK_S3_SECRET")}}
        if not self.args.spark_connect:
            out["spark"] = {"conf": {"spark.jars": ",".join(str(p) for p in jars.ensure("spark-s3"))}}
        return out

    @property
    def deep_storage(self) -> str:
        return f"{self.s3.uri}/ingest" if self.s3 is not None else self.env["INGEST_DEEP_STORAGE"]

    def progress_reported(self, run_id: str) -> bool:
        """Whether a split of the run reported progress (its job reads Kafka)."""
        run = deep_storage.run_uri(self.deep_storage, DATASOURCE, run_id)
        return any("/progress/" in f.path for f in deep_storage.list_files(run, ".json"))

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
                fault = self.faults[kind]
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
        if self.s3 is not None:
            self.check_cleanup()

    def check_cleanup(self) -> None:
        """Cleanup of every final run, as `ingest cleanup --yes`; then no orphan and no incomplete upload under
        a final run may be left."""
        from ingest_core.core.spec import parse_spec
        from ingest_core.handover import s3_uploads
        from ingest_core.store.cleanup import find_orphans, remove_orphans

        spec, report = parse_spec(self.spec()), self.report
        final = [r.run_id for r in self.store.runs.recent(DATASOURCE, limit=None) if r.is_final]
        runs = [deep_storage.run_uri(self.deep_storage, DATASOURCE, r) for r in final]
        orphans = find_orphans(self.store, spec, final)
        report.uploads_aborted = sum(len(s3_uploads.incomplete_uploads(o.uri)) for o in orphans)
        remove_orphans(self.store, DATASOURCE, orphans, "fault soak")
        report.orphans_removed = len(orphans)
        report.orphans_left = len(find_orphans(self.store, spec, final))
        report.uploads_left = sum(len(s3_uploads.incomplete_uploads(r)) for r in runs)

    def iceberg_rows(self, counts: Counter) -> tuple[int, int]:
        """(files, rows whose uid the Iceberg table holds other than as often as the reader): the table is read
        by pyiceberg alone, after the heal runs' reports synced it."""
        from pyiceberg.catalog.sql import SqlCatalog

        from ingest_core.store.iceberg import file_io_properties

        catalog = SqlCatalog("ingest", uri=self.env["INGEST_METADATA_URL"], **file_io_properties(self.deep_storage))
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
