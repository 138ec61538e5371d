"""Benchmark: how the metadata store grows under `@continuous`, and what `ingest db clean` costs on a year of it.

On PostgreSQL (embedded, fsync off), one datasource's history is generated in the database itself
(generate_series), row for row as the product writes it: a run every `86,400 / runs-per-day` seconds, each with
its plan (`core.planner.plan_run` over 4 partitions, taskCount 2), two task groups, two task reports (a real
report's JSON: one segment, one split) and two segment records per run, the one claimed range per partition
the main line's publishes extend, and an audit row a day. Printed: rows and bytes per day per table (PostgreSQL's own sizes, indexes included),
then `ingest db clean` (the real command, 30 days, the last 100 runs kept) over the whole year: its time, what
it deleted, and the tables' sizes after it and after a VACUUM.

    python benchmarks/history_retention.py                       # a year at 17,280 runs a day (one per 5 s)
    python benchmarks/history_retention.py --days 45             # what `make bench` runs: 777,600 runs, ~6 GB
    python benchmarks/history_retention.py --tiny                # 40 days at 200 a day: that it runs (the tests)
    ... [--postgres postgresql+psycopg2://user@host:port]       # a server already running
    ... [--bootstrap HOST:PORT] [--spark-connect sc://HOST:PORT]  # a broker, a Spark Connect server already running

Then Airflow's side (`harness.airflow_history`): --airflow-runs real runs of the example DAG under `airflow standalone`
(LocalExecutor, Airflow's database on PostgreSQL, the jobs on Spark Connect) for each of two datasources, a
`@continuous` one behind a data gate (fed a few events a second) and one on a PT1M schedule (caught up from
--airflow-runs minutes ago): the rows each run adds to every table of Airflow's, and its task log files. Those runs
are then copied into --days days of history in Airflow's database (the @continuous one at its measured cadence, the
other at 1,440 runs a day), and the real `airflow db clean` runs over it twice: archiving what it deletes (the 5 days
past 35, or half of what is past 30), then `--skip-archive` at 30 days, beside the `ingest db clean` above. Printed:
rows and MB per run and per day per table, each clean's time and what it deleted, the sizes after, and the growth a
day of both databases and the task logs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import secrets
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.airflow_history import (  # noqa: E402
    CAPPED,
    CONTINUOUS,
    SCHEDULED,
    HistoryAirflow,
    RunGrowth,
    Size,
    Trickle,
    db_clean,
    generate as generate_airflow,
    history_specs,
    measure,
    produce_at,
    table_sizes,
)
from harness.fixed_cost_setup import AIRFLOW as AIRFLOW_BIN, load, scratch_databases, scratch_topics  # noqa: E402
from ingest_core.dev.embedded import EmbeddedKafka  # noqa: E402
from ingest_core.dev.embedded_spark import EmbeddedSparkConnect  # noqa: E402
from ingest_core.core.offsets import StartOffset, StartSource, TopicPartition  # noqa: E402
from ingest_core.core.planner import PlanRequest, plan_run  # noqa: E402
from ingest_core.dev.embedded import EmbeddedPostgres  # noqa: E402
from ingest_core.store.metadata import MetadataStore  # noqa: E402
from ingest_core.store.schema import (  # noqa: E402
    audit_log,
    published_ranges,
    runs,
    segments,
    task_groups,
    task_reports,
)

DS = "wikipedia"
RETENTION_DAYS = 30  # both cleans': `ingest db clean`'s default
TOPIC_PARTITIONS = 2
TABLES = (runs, task_groups, task_reports, published_ranges, segments, audit_log)
REPORT = {  # a real task report (a 2-second soak run's group: one split, one segment), its run id replaced
    "datasource": DS, "error": None, "groupId": 1, "marks": {"ended": 1795886571.993, "started": 1795886570.854,
                                                            "writeEnded": 1795886571.975, "writeStarted": 1795886570.883},
    "records": 2261, "replica": 0, "rowStats": {"processed": 2261, "processedBytes": 74613, "processedWithError": 0,
                                                "thrownAway": 0, "unparseable": 0},
    "runId": "RUN", "seconds": 1.139, "segments": [{
        "bytes": 18539, "columns": ["__time", "id"], "dimensions": ["id"],
        "interval": ["2026-11-28T17:00:00.000Z", "2026-11-28T18:00:00.000Z"],
        "location": "file:///var/deep-storage/wikipedia/scheduled__2026-11-28T17~3a22~3a45.278995~2b00~3a00/group=1/"
                    "replica=0/attempt=20261128T172250Z-db05d4d5/segments/__segment=1795885200000/part-00000-fa6d9e0e-"
                    "290d-4a54-b1a2-6e397017c4f8.c000.snappy.parquet",
        "maxTime": "2026-11-28T17:22:49.665Z", "metrics": [], "minTime": "2026-11-28T17:22:34.597Z",
        "offsets": {"end": {DS: {"1": 2864}}, "start": {DS: {"1": 603}}}, "rows": 2261, "shard": 0,
        "types": {"__time": "TIMESTAMP", "id": "LONG"}}],
    "splits": [{"end": 2864, "index": 0, "lastOffset": 2863, "partition": 1, "records": 2261,
                "rowStats": {"processed": 2261, "processedBytes": 74613, "processedWithError": 0, "thrownAway": 0,
                             "unparseable": 0},
                "seconds": 0.055, "start": 603, "startedAt": 1795886571.363, "topic": DS, "unparseableEvents": []}],
    "state": "SUCCESS", "unparseableEvents": []}


def plan_json() -> str:
    tps = [TopicPartition(DS, p) for p in range(4)]
    plan = plan_run(PlanRequest(DS, "RUN", datetime(2026, 11, 28, tzinfo=timezone.utc),
                                {tp: StartOffset(1000, StartSource.COMMITTED) for tp in tps},
                                {tp: 3000 for tp in tps}, task_count=2))
    return json.dumps(plan.to_json())


def generate(engine: sa.Engine, days: int, per_day: int) -> float:
    """The history, oldest first, ending now; returns the seconds it took."""
    step = 86_400.0 / per_day
    n = days * per_day
    started = time.monotonic()
    params = {"n": n, "step": step, "ds": DS, "plan": plan_json(), "report": json.dumps(REPORT)}
    run_at = "now() - make_interval(secs => (:n - i) * :step)"
    run_id = "'scheduled__' || to_char(" + run_at + ", 'YYYY-MM-DD\"T\"HH24:MI:SS.US') || '+00:00'"
    with engine.begin() as conn:
        conn.execute(sa.text(f"""
            INSERT INTO {runs.name} (datasource, run_id, seq, status, plan, records, created_at, updated_at,
                                     published_at, running_since, deadline_at, published_records, published_rows,
                                     published_segments, published_bytes)
            SELECT :ds, {run_id}, i, 'PUBLISHED', replace(:plan, '"RUN"', to_json({run_id})::text)::json, 8000,
                   {run_at}, {run_at}, {run_at}, {run_at}, {run_at} + interval '1 hour', 8000, 8000, 2, 37078
            FROM generate_series(1, :n) AS i"""), params)
        conn.execute(sa.text(f"""
            INSERT INTO {task_groups.name} (datasource, run_id, group_id, status, records, updated_at)
            SELECT datasource, run_id, g, 'PUBLISHED', 4000, updated_at FROM {runs.name}, generate_series(0, 1) AS g
            WHERE datasource = :ds"""), params)
        conn.execute(sa.text(f"""
            INSERT INTO {task_reports.name} (datasource, run_id, group_id, replica, report, created_at)
            SELECT datasource, run_id, g, 0, replace(:report, '"RUN"', to_json(run_id)::text)::json, updated_at
            FROM {runs.name}, generate_series(0, 1) AS g WHERE datasource = :ds"""), params)
        # the main line's publishes extend one claimed range per partition (`publisher`): one row, however many runs
        conn.execute(sa.text(f"""
            INSERT INTO {published_ranges.name} (datasource, topic, partition, start_offset, end_offset, run_id,
                                                 backfill, updated_at)
            SELECT datasource, :ds, p, 0, max(seq) * 2000, max(run_id), false, max(updated_at) FROM {runs.name},
                   generate_series(0, 3) AS p
            WHERE datasource = :ds GROUP BY datasource, p"""), params)
        conn.execute(sa.text(f"""
            INSERT INTO {segments.name} (id, datasource, interval_start, interval_end, version, partition_num,
                                         location, num_rows, size_bytes, used, run_id, group_id, start_offsets,
                                         end_offsets, created_at, payload)
            SELECT datasource || '_' || seq || '_' || g, datasource, date_trunc('hour', updated_at),
                   date_trunc('hour', updated_at) + interval '1 hour', to_char(updated_at, 'YYYY-MM-DD"T"HH24:MI:SS.MS'),
                   g, 'file:///var/deep-storage/' || run_id || '/group=' || g || '/part-0.parquet', 4000, 18539, true,
                   run_id, g, '{{}}'::json, '{{}}'::json, updated_at, '{{}}'::json
            FROM {runs.name}, generate_series(0, 1) AS g WHERE datasource = :ds"""), params)
        conn.execute(sa.text(f"""
            INSERT INTO {audit_log.name} (datasource, action, actor, details, created_at)
            SELECT :ds, 'run_expired', 'scheduler', '{{"runId": "x", "reason": "past its deadline"}}'::json,
                   now() - make_interval(days => :days - d)
            FROM generate_series(1, :days) AS d"""), {**params, "days": days})
    return time.monotonic() - started


def sizes(engine: sa.Engine) -> dict[str, tuple[int, int]]:
    """Rows and bytes (table, TOAST and indexes) per table."""
    with engine.connect() as conn:
        return {t.name: (conn.execute(sa.select(sa.func.count()).select_from(t)).scalar(),
                         conn.execute(sa.text(f"SELECT pg_total_relation_size('{t.name}')")).scalar())
                for t in TABLES}


def print_sizes(title: str, got: dict[str, tuple[int, int]], days: int | None = None) -> None:
    print(title)
    for name, (rows, size) in got.items():
        per_day = f"   {rows / days:>12,.0f} rows/day {size / days / 2**20:>9.1f} MB/day" if days else ""
        print(f"  {name:<26} {rows:>12,} rows {size / 2**20:>10.1f} MB{per_day}")
    total = sum(size for _, size in got.values())
    print(f"  {'all':<26} {'':>12}      {total / 2**20:>10.1f} MB" + (f"   {'':>12}          "
                                                                      f"{total / days / 2**20:>9.1f} MB/day" if days else ""))


def store_part(args: argparse.Namespace, base: str, servers: contextlib.ExitStack, days: int, per_day: int
               ) -> dict[str, float]:
    """The store's history and `ingest db clean` over it; returns {"mb_day": the store's MB a day, "seconds":
    the clean's}."""
    [url] = scratch_databases(servers, base, [f"history_{secrets.token_hex(4)}"])
    store = MetadataStore(url)
    servers.callback(store.dispose)
    store.upgrade()
    store.datasources.register_spec(DS, {"type": "kafka"}, "f")
    engine = sa.create_engine(url)
    servers.callback(engine.dispose)
    seconds = generate(engine, days, per_day)
    print(f"generated {days} days of @continuous history at {per_day:,} runs a day ({days * per_day:,} runs) "
          f"in {seconds:.1f} s")
    before = sizes(engine)
    print_sizes("the store, before the clean (per day: what one datasource adds):", before, days)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "ingest_core.service.cli", "--metadata-url", url, "db", "clean",
                           "--yes", "--json", "--dags-folder", "/nonexistent"], capture_output=True, text=True,
                          timeout=24 * 3600)
    clean_s = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"ingest db clean: exit {done.returncode}: {done.stderr[-3000:]}")
    cleaned = json.loads(done.stdout)[DS]
    print(f"ingest db clean (30 days, the last 100 runs kept): {clean_s:.1f} s, {cleaned['runs']:,} runs, "
          f"{cleaned['taskGroups']:,} task groups, {cleaned['taskReports']:,} task reports, "
          f"{cleaned['auditRows']:,} audit rows deleted ({cleaned['runs'] / clean_s:,.0f} runs/s)")
    print_sizes("the store after the clean:", sizes(engine))
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text("VACUUM FULL"))
    print_sizes("after VACUUM FULL:", sizes(engine))
    return {"mb_day": sum(size for _, size in before.values()) / days / 2**20, "seconds": clean_s,
            "per_day": per_day}


def real_runs(args: argparse.Namespace, base: str, servers: contextlib.ExitStack, root: Path
              ) -> tuple[HistoryAirflow, list[RunGrowth]]:
    """--airflow-runs real runs of each datasource under `airflow standalone`, which is stopped after them (its
    database and environment stay, for the cleans)."""
    if args.bootstrap:
        bootstrap = args.bootstrap
    else:
        kafka = EmbeddedKafka(root / "kafka")
        servers.callback(kafka.stop)
        bootstrap = kafka.start().bootstrap
    if args.spark_connect:
        connect_url = args.spark_connect
    else:
        connect = EmbeddedSparkConnect(root / "spark-connect", driver_memory="1g")
        servers.callback(connect.stop)  # before its start: an interrupted start leaves its JVM
        connect.start()
        connect_url = connect.url
    suffix = secrets.token_hex(4)
    topics = [f"hist_continuous_{suffix}", f"hist_scheduled_{suffix}"]
    scratch_topics(servers, bootstrap, topics, TOPIC_PARTITIONS)
    airflow_db, store_db = scratch_databases(servers, base, [f"airflow_hist_{suffix}", f"ingest_hist_{suffix}"])
    n = args.airflow_runs
    airflow = HistoryAirflow(root / "airflow", bootstrap, connect_url, airflow_db, store_db)
    trickle = None
    try:
        airflow.wait_healthy()
        now = datetime.now(timezone.utc)
        # the scheduled one's past minutes, 100 events each (at their minute's Kafka timestamps): each catch-up run
        # reads its minute's; the @continuous one's gate opens on the events that trickle in
        first = now.replace(second=0, microsecond=0) - timedelta(minutes=n)
        produce_at(bootstrap, topics[1], [first.timestamp() + i * 0.6 for i in range(100 * n)], TOPIC_PARTITIONS)
        trickle = Trickle(bootstrap, topics[0], TOPIC_PARTITIONS)
        specs = history_specs(topics[0], topics[1], n, now)
        airflow.add_specs(specs)
        started = time.monotonic()
        airflow.wait_runs(list(specs), n, timeout=max(1800, 300 * n))
        print(f"airflow: {n}+ real runs of each datasource in {time.monotonic() - started:.0f} s "
              f"(load average {load()})")
    finally:
        if trickle is not None:
            trickle.stop()
        airflow.stop()
    return airflow, [measure(airflow.db, airflow.logs(), dag_id, spec["microbatch"]["schedule"])
                     for dag_id, spec in specs.items()]


def print_per_run(growths: list[RunGrowth], sizes_now: dict[str, Size]) -> None:
    """Rows per run per table (and each table's bytes in the share of its rows the runs hold)."""
    print("Airflow's database, per run (real runs; MB: the table's size in proportion to the run's rows):")
    print(f"  {'table':<30}" + "".join(f"{g.schedule + ' rows':>18}{'KB':>9}" for g in growths))
    tables = sorted({t for g in growths for t, r in g.rows.items() if r}, key=lambda t: -growths[0].rows.get(t, 0))
    for table in tables:
        cells = ""
        for g in growths:
            rows, total = g.rows.get(table, 0), sizes_now[table]
            kb = total.bytes * rows / total.rows / g.n / 1024 if total.rows else 0
            cells += f"{rows / g.n:>18,.1f}{kb:>9,.1f}"
        print(f"  {table:<30}{cells}" + ("   (the last 30 runs' only)" if table in CAPPED else ""))
    print(f"  {'task log files':<30}" + "".join(f"{'':>18}{g.log_bytes / g.n / 1024:>9,.1f}" for g in growths))
    for g in growths:
        print(f"{g.schedule}: {g.n} runs of {g.dag_id}, a run every {g.run_seconds():.1f} s "
              f"(measured), {g.runs_per_day():,.0f} runs a day")


def print_airflow_sizes(title: str, got: dict[str, Size], days: int | None = None, only: set[str] | None = None
                        ) -> None:
    shown = {t: (s.rows, s.bytes) for t, s in got.items() if only is None or t in only}
    print_sizes(title, shown, days)


def airflow_part(args: argparse.Namespace, base: str, servers: contextlib.ExitStack, root: Path, days: int,
                 store: dict[str, float]) -> None:
    airflow, growths = real_runs(args, base, servers, root)
    engine = airflow.db
    print_per_run(growths, table_sizes(engine))
    now = datetime.now(timezone.utc)
    per_day_mb: dict[str, float] = {}
    for g in growths:
        per_day = args.airflow_runs_per_day or g.runs_per_day()
        before = table_sizes(engine)
        started = time.monotonic()
        made = generate_airflow(engine, g, days, per_day, now)
        after = table_sizes(engine)
        grown = {t: Size(s.rows - before.get(t, Size(0, 0)).rows, s.bytes - before.get(t, Size(0, 0)).bytes)
                 for t, s in after.items() if s.rows > before.get(t, Size(0, 0)).rows}
        print(f"generated {days} days of Airflow history of the {g.schedule} datasource at {per_day:,.0f} runs a day "
              f"({made:,} runs, copies of its real runs) in {time.monotonic() - started:.1f} s")
        print_airflow_sizes(f"Airflow's database, what the {g.schedule} datasource added (per day):", grown, days)
        per_day_mb[g.schedule] = sum(s.bytes for s in grown.values()) / days / 2**20 * g.runs_per_day() / per_day
    cleans = [(f"before {RETENTION_DAYS + (days - RETENTION_DAYS) // 2} days, archived", now - timedelta(
        days=RETENTION_DAYS + (days - RETENTION_DAYS) // 2), ()),
              (f"before {RETENTION_DAYS} days, --skip-archive", now - timedelta(days=RETENTION_DAYS),
               ("--skip-archive",))]
    runs_before = table_sizes(engine)["dag_run"].rows
    for label, cutoff, extra in cleans:
        done = db_clean(airflow.env, engine, cutoff, *extra)
        archived = done.archived()
        runs_gone = done.before["dag_run"].rows - done.after["dag_run"].rows
        print(f"airflow db clean ({label}): {done.seconds:.1f} s, {runs_gone:,} dag runs and {done.deleted():,} rows "
              f"in all deleted ({done.deleted() / done.seconds:,.0f} rows/s), archived {archived.rows:,} rows "
              f"({archived.bytes / 2**20:.1f} MB)")
    after = table_sizes(engine)
    print(f"Airflow's dag runs: {runs_before:,} before the cleans, {after['dag_run'].rows:,} after")
    print_airflow_sizes("Airflow's database after the cleans:", after, only={
        t for t, s in after.items() if s.rows and not t.startswith("_airflow_deleted__")})
    dropped = subprocess.run([AIRFLOW_BIN, "db", "drop-archived", "--yes"], env=airflow.env, capture_output=True,
                             text=True, timeout=3600)
    if dropped.returncode != 0:
        raise SystemExit(f"airflow db drop-archived: {dropped.stderr[-2000:]}")
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text("VACUUM FULL"))
    total = sum(s.bytes for s in table_sizes(engine).values())
    print(f"after airflow db drop-archived and VACUUM FULL: Airflow's database {total / 2**20:.1f} MB")
    cont = next(g for g in growths if g.schedule == CONTINUOUS)
    logs = {g.schedule: g.log_bytes / g.n * g.runs_per_day() / 2**20 for g in growths}
    store_run = store["mb_day"] / store["per_day"]  # MB a run: the store's history is at --runs-per-day
    busy = 17_280 / cont.runs_per_day()
    sched = next(g for g in growths if g.schedule == SCHEDULED)
    for label, a_day, factor, kind in (
            (f"one {CONTINUOUS} datasource at {cont.runs_per_day():,.0f} runs a day (measured)", cont.runs_per_day(), 1,
             CONTINUOUS),
            (f"one {CONTINUOUS} datasource at 17,280 runs a day (a run every 5 s)", 17_280, busy, CONTINUOUS),
            (f"one {SCHEDULED} datasource ({sched.runs_per_day():,.0f} runs a day)", sched.runs_per_day(), 1,
             SCHEDULED)):
        print(f"growth a day, {label}: the store {store_run * a_day:,.1f} MB, Airflow's database "
              f"{per_day_mb[kind] * factor:,.1f} MB, task log files {logs[kind] * factor:,.1f} MB")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument("--runs-per-day", type=int, default=17_280, help="17,280: one run every 5 s")
    parser.add_argument("--tiny", action="store_true", help="40 days at 200 runs a day; 2 real runs each in Airflow, "
                                                            "copied at 20 a day")
    parser.add_argument("--postgres", metavar="URL", help="a PostgreSQL server, postgresql+psycopg2://user@host:port: "
                                                          "databases of its own there, dropped after (default: "
                                                          "an embedded server)")
    parser.add_argument("--bootstrap", help="a Kafka broker (default: an embedded one)")
    parser.add_argument("--spark-connect", metavar="URL", help="a Spark Connect server (default: an embedded one)")
    parser.add_argument("--airflow-runs", type=int, default=5, help="real runs of each datasource (default 5)")
    parser.add_argument("--airflow-runs-per-day", type=float, help="copy the real runs at this rate (default: the "
                                                                   "measured one; the figures a day are scaled to it)")
    parser.add_argument("--skip-airflow", action="store_true", help="the store's side only")
    parser.add_argument("--out", type=Path, help="where Airflow's home, logs and servers go (default: a temporary "
                                                 "folder, removed after)")
    args = parser.parse_args()
    days, per_day = (40, 200) if args.tiny else (args.days, args.runs_per_day)
    if args.tiny:
        args.airflow_runs, args.airflow_runs_per_day = 2, 20
    with contextlib.ExitStack() as servers:
        base = args.postgres.rstrip("/") if args.postgres else servers.enter_context(EmbeddedPostgres()).url
        store = store_part(args, base, servers, days, per_day)
        if not args.skip_airflow:
            root = args.out or Path(servers.enter_context(tempfile.TemporaryDirectory(prefix="history-")))
            airflow_part(args, base, servers, root, days, store)
    return 0


if __name__ == "__main__":
    sys.exit(main())
