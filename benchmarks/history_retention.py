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
"""

from __future__ import annotations

import argparse
import contextlib
import json
import secrets
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.fixed_cost_setup import create_databases, drop_databases  # noqa: E402
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument("--runs-per-day", type=int, default=17_280, help="17,280: one run every 5 s")
    parser.add_argument("--tiny", action="store_true", help="40 days at 200 runs a day")
    parser.add_argument("--postgres", metavar="URL", help="a PostgreSQL server, postgresql+psycopg2://user@host:port: "
                                                          "a database of its own there, dropped after (default: "
                                                          "an embedded server)")
    args = parser.parse_args()
    days, per_day = (40, 200) if args.tiny else (args.days, args.runs_per_day)
    with contextlib.ExitStack() as servers:
        base = args.postgres.rstrip("/") if args.postgres else servers.enter_context(EmbeddedPostgres()).url
        database = f"history_{secrets.token_hex(4)}"
        admin = create_databases(base, [database])
        servers.callback(admin.dispose)
        servers.callback(drop_databases, admin, [database])
        url = f"{base}/{database}"
        store = MetadataStore(url)
        store.upgrade()
        store.datasources.register_spec(DS, {"type": "kafka"}, "f")
        engine = sa.create_engine(url)
        seconds = generate(engine, days, per_day)
        print(f"generated {days} days of @continuous history at {per_day:,} runs a day ({days * per_day:,} runs) "
              f"in {seconds:.1f} s")
        print_sizes("the store, before the clean (per day: what one datasource adds):", sizes(engine), days)
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "ingest_core.service.cli", "--metadata-url", url, "db", "clean",
                               "--yes", "--json", "--dags-folder", "/nonexistent"], capture_output=True, text=True,
                              timeout=24 * 3600)
        clean_s = time.monotonic() - started
        if done.returncode != 0:
            print(done.stderr, file=sys.stderr)
            return 1
        cleaned = json.loads(done.stdout)[DS]
        print(f"ingest db clean (30 days, the last 100 runs kept): {clean_s:.1f} s, {cleaned['runs']:,} runs, "
              f"{cleaned['taskGroups']:,} task groups, {cleaned['taskReports']:,} task reports, "
              f"{cleaned['auditRows']:,} audit rows deleted ({cleaned['runs'] / clean_s:,.0f} runs/s)")
        print_sizes("the store after the clean:", sizes(engine))
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(sa.text("VACUUM FULL"))
        print_sizes("after VACUUM FULL:", sizes(engine))
        engine.dispose()
        store.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main())
