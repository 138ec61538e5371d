"""Airflow's history (benchmarks/history_retention.py): what a datasource's runs leave in Airflow's database and in
its task log files, measured on real runs of the example DAG under `airflow standalone` (LocalExecutor, PostgreSQL);
those runs replicated into days of history in the database itself; and `airflow db clean` over it.

A run's rows are found by the run they belong to (its dag_id and run_id, its dag_run's id, its task instances'
ids), in every table of Airflow's that has such a key (`RUN_KEYS`): what one run adds, table by table. Generated
history copies the real runs' rows, run after run, with new run ids, ids and dates: every timestamp column moved
by the same shift, so `airflow db clean` sees them as it would see real ones."""

from __future__ import annotations

import json
import random
import shutil
import statistics
import subprocess
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

import sqlalchemy as sa
import yaml
from confluent_kafka import Producer

from harness import ROOT
from harness.fixed_cost_scheduler import Standalone
from harness.fixed_cost_setup import AIRFLOW, CONNECT_CONN, example_spec
from ingest_core.dev.demo import wiki_events

CONTINUOUS, SCHEDULED = "@continuous", "PT1M"  # the two kinds measured: a gated @continuous one, a plain scheduled one
SCHEDULE_S = 60.0  # SCHEDULED's period
# How a table's rows name the run they belong to: (its columns, the run's). The order is the insert order of
# generated history (a row after the rows it references).
RUN_KEYS: dict[str, str] = {
    "dag_run": "dag_run",
    "task_instance": "run",
    "task_instance_history": "run",
    "task_map": "run",
    "xcom": "run",
    "rendered_task_instance_fields": "run",
    "task_state_store": "run",
    "log": "run",
    "asset_event": "source_run",
    "dag_run_note": "dag_run_id",
    "deadline": "dagrun_id",
    "task_reschedule": "ti_id",
    "task_instance_note": "ti_id",
    "hitl_detail": "ti_id",
}
ID_UUIDS = {("task_instance", "id"), ("task_instance_history", "task_instance_id")}  # new ids, one per copy
# Airflow keeps these rows of the last runs only (`[core] num_dag_runs_to_retain_rendered_fields`, 30 per task): they
# do not grow with the days, so generated history has none of the older runs'
CAPPED = {"rendered_task_instance_fields"}


@dataclass(frozen=True)
class Size:
    rows: int
    bytes: int


def table_sizes(engine: sa.Engine, prefix: str = "") -> dict[str, Size]:
    """Rows and bytes (PostgreSQL's: table, TOAST and indexes) of every table in the database's schema."""
    with engine.connect() as conn:
        names = [r[0] for r in conn.execute(sa.text(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() "
            "AND table_type = 'BASE TABLE' AND table_name LIKE :p ORDER BY 1"), {"p": prefix + "%"})]
        return {n: Size(conn.execute(sa.text(f'SELECT count(*) FROM "{n}"')).scalar(),
                        conn.execute(sa.text(f"SELECT pg_total_relation_size('\"{n}\"')")).scalar()) for n in names}


def _owned(table: str, alias: str = "s") -> tuple[str, str]:
    """(the FROM clause's joins, the condition) that tie rows of `table` (as `alias`) to `runs` (dag_id, run_id,
    id, the run's key per row: `g`)."""
    kind = RUN_KEYS[table]
    if kind in ("dag_run", "run"):
        return "", f"{alias}.dag_id = g.dag_id AND {alias}.run_id = g.src_run_id"
    if kind == "source_run":
        return "", f"{alias}.source_dag_id = g.dag_id AND {alias}.source_run_id = g.src_run_id"
    if kind in ("dag_run_id", "dagrun_id"):
        return "", f"{alias}.{kind} = g.src_dag_run_id"
    return (f"JOIN task_instance ti ON ti.id = {alias}.ti_id", "ti.dag_id = g.dag_id AND ti.run_id = g.src_run_id")


def _present(engine: sa.Engine) -> list[str]:
    with engine.connect() as conn:
        have = {r[0] for r in conn.execute(sa.text(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"))}
    return [t for t in RUN_KEYS if t in have]


# ------------------------------------------------------------------------------------------------ real runs


@dataclass
class RunGrowth:
    """What the finished runs of one datasource left: rows per table, their share of each table's bytes, log files."""

    dag_id: str
    schedule: str
    runs: list[tuple[str, datetime, datetime]]  # (run_id, start, end) of its finished runs, oldest first
    rows: dict[str, int] = field(default_factory=dict)  # all its finished runs' rows, per table
    log_bytes: int = 0  # its finished runs' task log files

    @property
    def n(self) -> int:
        return len(self.runs)

    def run_seconds(self) -> float:
        """The median time from one run's start to the next's (a @continuous datasource's cadence); a run's own
        length for a single run."""
        starts = [s for _, s, _ in self.runs]
        gaps = [(b - a).total_seconds() for a, b in zip(starts, starts[1:])]
        return statistics.median(gaps) if gaps else (self.runs[0][2] - self.runs[0][1]).total_seconds()

    def runs_per_day(self) -> float:
        return 86_400 / (self.run_seconds() if self.schedule == CONTINUOUS else SCHEDULE_S)


def measure(engine: sa.Engine, logs: Path, dag_id: str, schedule: str) -> RunGrowth:
    """The rows and task log bytes of `dag_id`'s successful runs (not those in flight or failed)."""
    with engine.connect() as conn:
        runs = [tuple(r) for r in conn.execute(sa.text(
            "SELECT run_id, start_date, end_date FROM dag_run WHERE dag_id = :d AND state = 'success' "
            "ORDER BY start_date"), {"d": dag_id})]
        growth = RunGrowth(dag_id, schedule, runs)
        conn.execute(sa.text("CREATE TEMP TABLE g AS SELECT dag_id, run_id AS src_run_id, id AS src_dag_run_id "
                             "FROM dag_run WHERE dag_id = :d AND state = 'success'"), {"d": dag_id})
        for table in _present(engine):
            joins, cond = _owned(table)
            growth.rows[table] = conn.execute(sa.text(
                f"SELECT count(*) FROM {table} s {joins} JOIN g ON {cond}")).scalar()
        conn.execute(sa.text("DROP TABLE g"))
    for run_id, _, _ in runs:
        folder = logs / f"dag_id={dag_id}" / f"run_id={run_id}"
        growth.log_bytes += sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
    return growth


class HistoryAirflow(Standalone):
    """`airflow standalone` over a DAG folder of its own: the project's DAG file, and the specs `add_specs` puts
    there once it is healthy (a run queued before its api-server listens fails its first task)."""

    def __init__(self, root: Path, bootstrap: str, connect_url: str, airflow_db_url: str, metadata_url: str):
        self.dags = root / "dags"
        (self.dags / "specs").mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / "dags" / "ingest_datasources.py", self.dags / "ingest_datasources.py")
        self.start(root, bootstrap, self.dags, connect_url, airflow_db_url, metadata_url)

    def add_specs(self, specs: dict[str, dict]) -> None:
        for name, spec in specs.items():
            (self.dags / "specs" / f"{name}.yaml").write_text(yaml.safe_dump(spec))

    def logs(self) -> Path:
        return Path(self.env["AIRFLOW_HOME"]) / "logs"

    def wait_runs(self, dag_ids: list[str], n: int, timeout: float) -> None:
        """Until each DAG has `n` successful runs; a failed run ends the benchmark."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            rows = [r for d in dag_ids for r in self.query("SELECT dag_id, run_id, state FROM dag_run "
                                                           "WHERE dag_id = :d", d=d)]
            failed = [f"{d} {r}" for d, r, s in rows if s == "failed"]
            if failed:
                raise SystemExit(f"runs failed: {failed}; see {self.root}")
            if all(sum(1 for d, _, s in rows if d == dag and s == "success") >= n for dag in dag_ids):
                return
            time.sleep(1)
        raise SystemExit(f"{dag_ids} did not finish {n} runs each in {timeout:.0f} s; see {self.root}")


def history_specs(continuous_topic: str, scheduled_topic: str, runs: int, now: datetime) -> dict[str, dict]:
    """The example spec twice: `@continuous` behind a data gate, and on SCHEDULED from `runs` minutes ago with
    catch-up (its past intervals run back to back)."""
    continuous = example_spec("hist_continuous", continuous_topic, 2)
    continuous["microbatch"].update(schedule=CONTINUOUS, maxActiveRuns=1, retries=0, spark={"connId": CONNECT_CONN},
                                    dataGate={"minRecords": 1, "maxWait": "PT1M", "pokeInterval": "PT1S"})
    scheduled = example_spec("hist_scheduled", scheduled_topic, 2)
    start = now.replace(second=0, microsecond=0) - timedelta(minutes=runs)
    scheduled["microbatch"].update(schedule=SCHEDULED, maxActiveRuns=1, retries=0, spark={"connId": CONNECT_CONN},
                                   startDate=start.isoformat(), catchup=True)
    return {"hist_continuous": continuous, "hist_scheduled": scheduled}


def produce_at(bootstrap: str, topic: str, times: list[float], partitions: int) -> None:
    """Wiki-edit events with these Kafka timestamps (epoch s), one each."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for i, (t, event) in enumerate(zip(times, wiki_events(len(times), random.Random(48)))):
        p.produce(topic, json.dumps(event).encode(), partition=i % partitions, timestamp=int(t * 1000))
    if p.flush(120) != 0:
        raise SystemExit("the producer did not deliver every event")


class Trickle:
    """A few events a second to a topic, in a thread, until stopped: a @continuous datasource's gate opens at once."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: float = 20):
        self.args, self.stopping = (bootstrap, topic, partitions, rate), threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        bootstrap, topic, partitions, rate = self.args
        while not self.stopping.wait(1.0):
            produce_at(bootstrap, topic, [time.time()] * int(rate), partitions)

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(150)


# ------------------------------------------------------------------------------------------------ generated history


def _columns(conn: sa.Connection, table: str) -> list[tuple[str, str, str | None]]:
    return [tuple(r) for r in conn.execute(sa.text(
        "SELECT column_name, data_type, column_default FROM information_schema.columns WHERE table_schema = "
        "current_schema() AND table_name = :t ORDER BY ordinal_position"), {"t": table})]


def _copied(table: str, column: str, data_type: str) -> str:
    """The expression a generated copy of a row (`s`, its run `g`) takes for `column`."""
    if column in ("run_id", "source_run_id"):
        return "g.run_id"
    if column in ("dag_run_id", "dagrun_id"):
        return "g.dag_run_id"
    if (table, column) in ID_UUIDS or column == "ti_id":
        return f"md5(s.{column}::text || g.n)::uuid"  # the same new id wherever the old one is referenced
    if data_type.startswith("timestamp"):
        return f"s.{column} + g.shift"
    return f"s.{column}"


def generate(engine: sa.Engine, growth: RunGrowth, days: int, per_day: float, now: datetime) -> int:
    """`days` of `growth`'s datasource's history ending at `now`, `per_day` runs a day: its finished runs' rows
    copied in turn, each copy's dates moved to its place. Returns the runs made."""
    n = int(days * per_day)
    step = 86_400.0 / per_day
    params = {"d": growth.dag_id, "n": n, "step": step, "now": now, "k": growth.n}
    with engine.begin() as conn:
        conn.execute(sa.text(
            "CREATE TEMP TABLE tmpl AS SELECT row_number() OVER (ORDER BY start_date) - 1 AS k, run_id, id, run_after "
            "FROM dag_run WHERE dag_id = :d AND state = 'success'"), params)
        conn.execute(sa.text("""
            CREATE TEMP TABLE g AS
            SELECT i AS n, CAST(:d AS text) AS dag_id, t.run_id AS src_run_id, t.id AS src_dag_run_id,
                   split_part(t.run_id, '__', 1) || '__gen' || i || '__'
                     || to_char(:now - make_interval(secs => (:n - i) * :step), 'YYYY-MM-DD"T"HH24:MI:SS.US') AS run_id,
                   (:now - make_interval(secs => (:n - i) * :step)) - t.run_after AS shift, NULL::int AS dag_run_id
            FROM generate_series(1, :n) AS i JOIN tmpl t ON t.k = i % :k"""), params)
        conn.execute(sa.text("CREATE INDEX ON g (dag_id, src_run_id)"))
        conn.execute(sa.text("CREATE INDEX ON g (src_dag_run_id)"))
        for table in _present(engine):
            if not growth.rows.get(table) or table in CAPPED:
                continue
            cols = [(c, t) for c, t, default in _columns(conn, table)
                    if not (c == "id" and default and default.startswith("nextval"))]
            joins, cond = _owned(table)
            conn.execute(sa.text(
                f"INSERT INTO {table} ({', '.join(c for c, _ in cols)}) SELECT "
                f"{', '.join(_copied(table, c, t) for c, t in cols)} FROM {table} s {joins} JOIN g ON {cond}"))
            if table == "dag_run":
                conn.execute(sa.text("UPDATE g SET dag_run_id = d.id FROM dag_run d "
                                     "WHERE d.dag_id = g.dag_id AND d.run_id = g.run_id"))
        conn.execute(sa.text("DROP TABLE g"))
        conn.execute(sa.text("DROP TABLE tmpl"))
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text("ANALYZE"))
    return n


# ------------------------------------------------------------------------------------------------ airflow db clean


@dataclass(frozen=True)
class DbClean:
    args: list[str]
    seconds: float
    before: dict[str, Size]
    after: dict[str, Size]

    def deleted(self) -> int:
        return sum(s.rows - self.after.get(t, Size(0, 0)).rows for t, s in self.before.items()
                   if not t.startswith("_airflow_deleted__"))

    def archived(self) -> Size:
        new = [s for t, s in self.after.items() if t.startswith("_airflow_deleted__") and t not in self.before]
        return Size(sum(s.rows for s in new), sum(s.bytes for s in new))


def db_clean(env: dict[str, str], engine: sa.Engine, before: datetime, *extra: str) -> DbClean:
    """The real `airflow db clean --clean-before-timestamp BEFORE --yes EXTRA...`, timed."""
    args = ["db", "clean", "--clean-before-timestamp", before.isoformat(), "--yes", "--error-on-cleanup-failure",
            *extra]
    sizes = table_sizes(engine)
    started = time.monotonic()
    done = subprocess.run([AIRFLOW, *args], env=env, capture_output=True, text=True, timeout=24 * 3600)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"airflow {' '.join(args)}: exit {done.returncode}: {done.stderr[-3000:]}")
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text("ANALYZE"))
    return DbClean(args, seconds, sizes, table_sizes(engine))

