"""Benchmark: Druid SQL's APPROX_COUNT_DISTINCT_DS_THETA over a day of compacted segments,
beside COUNT(DISTINCT) over the same events unrolled, in the same run.

Two datasources in one SQLite metadata store, each published hour by hour by the real exactly-once publish:
  views_rollup  a day of compacted hourly segments (one Parquet file an hour): --rows-per-hour rolled-up rows,
                each a minute and a channel with `theta_uid`, a theta sketch (lgK 14, DataSketches' standard
                bytes built by the `datasketches` package, as the job writes them) of the users it saw;
  views_raw     the same events unrolled: one row per (minute, channel, user) the sketches were built from.
Then each query through `query.engine.run_sql` (Druid SQL read by `query.druid_sql`), the median of --repeat tries,
wall time and this process's CPU (DuckDB's threads included):
  - the day's distinct users from the sketches, and per channel;
  - the baseline: COUNT(DISTINCT "user") over the raw rows, the day and per channel (exact, DuckDB's own);
  - APPROX_COUNT_DISTINCT_DS_THETA("user") over the raw rows (sketches built at query time).

    python benchmarks/sketch_query.py                     # 24 hours x 2,000 rows x 40 users (1.92M raw rows)
    python benchmarks/sketch_query.py --rows-per-hour 500
    python benchmarks/sketch_query.py --tiny              # 2 hours of 20 rows: that it runs (the tests)
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable

import datasketches as dsk
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ingest_core.core.offsets import StartOffset, StartSource, TopicPartition  # noqa: E402
from ingest_core.core.planner import PlanRequest, plan_run  # noqa: E402
from ingest_core.store.metadata import MetadataStore
from ingest_core.store.publisher import GroupResult, Publisher, SegmentDescriptor  # noqa: E402
from ingest_core.query.engine import run_sql  # noqa: E402

DAY = datetime(2026, 11, 1, tzinfo=timezone.utc)
TIME = pa.timestamp("ms", tz="UTC")
CHANNELS = ["#en.wikipedia", "#de.wikipedia", "#fr.wikipedia", "#ja.wikipedia", "#ru.wikipedia", "#es.wikipedia"]
QUERIES = {
    "sketch day": "SELECT APPROX_COUNT_DISTINCT_DS_THETA(theta_uid) AS users FROM views_rollup",
    "sketch by channel": "SELECT channel, APPROX_COUNT_DISTINCT_DS_THETA(theta_uid) AS users FROM views_rollup "
                         "GROUP BY 1 ORDER BY 1",
    "exact day": 'SELECT COUNT(DISTINCT "user") AS users FROM views_raw',
    "exact by channel": 'SELECT channel, COUNT(DISTINCT "user") AS users FROM views_raw GROUP BY 1 ORDER BY 1',
    "raw sketch day": 'SELECT APPROX_COUNT_DISTINCT_DS_THETA("user") AS users FROM views_raw',
}


def hour_tables(hour: datetime, rows: int, users_per_row: int, user_space: int,
                rng: random.Random) -> tuple[pa.Table, pa.Table]:
    """One hour: the rolled-up rows with their theta sketches, and the raw rows they came from."""
    times, channels, sketches = [], [], []
    raw_times, raw_channels, raw_users = [], [], []
    for i in range(rows):
        minute = hour + timedelta(minutes=i % 60)
        channel = CHANNELS[i % len(CHANNELS)]
        sketch = dsk.update_theta_sketch(14)
        for _ in range(users_per_row):
            user = f"user{rng.randrange(user_space)}"
            sketch.update(user)
            raw_times.append(minute)
            raw_channels.append(channel)
            raw_users.append(user)
        times.append(minute)
        channels.append(channel)
        sketches.append(sketch.compact().serialize())
    rollup = pa.table({"__time": pa.array(times, TIME), "channel": channels,
                       "theta_uid": pa.array(sketches, pa.binary())})
    raw = pa.table({"__time": pa.array(raw_times, TIME), "channel": raw_channels, "user": raw_users})
    return rollup, raw


class Store:
    """The metadata store and deep storage; one run (one segment of an hour) published per call."""

    def __init__(self, out: Path):
        self.out = out
        self.store = MetadataStore(f"sqlite:///{out / 'metadata.db'}")
        self.store.upgrade()
        self.offsets: dict[str, int] = {}

    def publish(self, datasource: str, hour: datetime, table: pa.Table) -> None:
        tp = TopicPartition(datasource, 0)
        start = self.offsets.get(datasource, 0)
        self.offsets[datasource] = start + table.num_rows
        run_id = f"{datasource}-{hour:%H}"
        plan = plan_run(PlanRequest(
            datasource=datasource, run_id=run_id, created_at=hour,
            starts={tp: StartOffset(start, StartSource.COMMITTED, expected_commit=start) if start else
                    StartOffset(0, StartSource.EARLIEST)},
            latest={tp: self.offsets[datasource]}, task_count=1))
        self.store.runs.insert(plan)
        path = self.out / "deep" / datasource / f"{hour:%Y%m%dT%H}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, path)
        (group,) = [g for g in plan.groups if not g.is_empty]
        Publisher(self.store).publish(datasource, run_id, [GroupResult(group.group_id, [SegmentDescriptor(
            hour, hour + timedelta(hours=1), path.as_uri(), table.num_rows, path.stat().st_size)])])


def timed(call: Callable[[], Any], repeat: int) -> tuple[float, float, Any]:
    """(median wall seconds, median CPU seconds of this process, the last result)."""
    walls, cpus, result = [], [], None
    for _ in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        result = call()
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    return statistics.median(walls), statistics.median(cpus), result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hours", type=int, default=24)
    parser.add_argument("--rows-per-hour", type=int, default=2000, help="rolled-up rows (sketches) per hour")
    parser.add_argument("--users-per-row", type=int, default=40, help="users each sketch saw (raw rows per row)")
    parser.add_argument("--user-space", type=int, default=1_000_000, help="users drawn from")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--seed", type=int, default=32)
    parser.add_argument("--out", type=Path, help="folder for the store and segments (default: a temporary one)")
    parser.add_argument("--tiny", action="store_true", help="2 hours of 20 rows of 5 users, once: that it runs")
    args = parser.parse_args()
    if args.tiny:
        args.hours, args.rows_per_hour, args.users_per_row, args.user_space, args.repeat = 2, 20, 5, 500, 1

    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        store, rng = Store(out), random.Random(args.seed)
        t = time.perf_counter()
        raw_rows = 0
        for h in range(args.hours):
            hour = DAY + timedelta(hours=h)
            rollup, raw = hour_tables(hour, args.rows_per_hour, args.users_per_row, args.user_space, rng)
            store.publish("views_rollup", hour, rollup)
            store.publish("views_raw", hour, raw)
            raw_rows += raw.num_rows
        print(f"built and published in {time.perf_counter() - t:.1f} s: views_rollup "
              f"{args.hours * args.rows_per_hour:,} rows with a theta sketch in {args.hours} hourly segments; "
              f"views_raw {raw_rows:,} rows")
        results = {}
        print(f"query (median of {args.repeat})                                   wall s    CPU s")
        for name, sql in QUERIES.items():
            wall, cpu, table = timed(lambda: run_sql(store.store, sql, max_rows=None).table, args.repeat)
            results[name] = (wall, cpu, table.to_pylist())
            print(f"  {name:<22} {sql[:40]:<40} {wall:8.3f} {cpu:8.3f}")
        estimate = results["sketch day"][2][0]["users"]
        exact = results["exact day"][2][0]["users"]
        error = abs(estimate - exact) / exact * 100 if exact else 0.0
        print(f"distinct users, the day: sketches {estimate:,}, exact {exact:,}, error {error:.2f}% "
              f"(theta lgK 14: 1 RSE = 0.78%)")
        by_channel = {r["channel"]: r["users"] for r in results["exact by channel"][2]}
        worst = max((abs(r["users"] - by_channel[r["channel"]]) / by_channel[r["channel"]] * 100
                     for r in results["sketch by channel"][2]), default=0.0)
        print(f"per channel, the worst error {worst:.2f}%")
        for label, sketch, exact_name in (("the day", "sketch day", "exact day"),
                                          ("by channel", "sketch by channel", "exact by channel")):
            ratio = results[sketch][0] / results[exact_name][0]
            print(f"ratio sketches / COUNT(DISTINCT) over raw rows, {label}: wall {ratio:.2f}x, "
                  f"CPU {results[sketch][1] / max(results[exact_name][1], 1e-9):.2f}x")
        store.store.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main())
