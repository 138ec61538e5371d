"""Benchmark: a day of 1-minute microbatches, before and after compaction, and what the Iceberg
commit adds to a publish.

A datasource of the example's shape (wiki edits, hourly segments, taskCount 2, rolled up by minute) receives
--minutes microbatches: each is a run published by the real exactly-once publish, whose two task groups each
wrote one Parquet segment (rows of wiki_events' shape, in the run's minute) into its hour. That is the layout a
1-minute schedule leaves: two files per hour per minute. The metadata store is SQLite (or --postgres).

Then, measured in the same run:
  1. files and query time before compaction: the visible segments, SQL over them (`query.engine`, DuckDB: a
     GROUP BY over the day, and one hour's count), and `DatasourceReader.to_arrow()`, each the median of
     --repeat tries;
  2. compaction of every interval with the real Spark job (`ingest_core.spark.compaction`, local[2]) and the
     real compare-and-swap publish; the same figures after; the query results must be identical;
  3. the Iceberg commit: for --iceberg-publishes microbatches of a datasource of its own (SQLite), the
     publish's time and the sync's (`store.iceberg.sync`, one commit of the new files) one after the other;
     their medians and ratio.

    python benchmarks/compaction.py                      # a day: 1,440 microbatches
    python benchmarks/compaction.py --minutes 360 --rows 500
    python benchmarks/compaction.py --tiny               # an hour of 20 microbatches: that it runs (the tests)
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

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ingest_core.core.compaction import CompactionJob, find_candidates  # noqa: E402
from ingest_core.core.offsets import StartOffset, StartSource, TopicPartition  # noqa: E402
from ingest_core.core.planner import PlanRequest, plan_run  # noqa: E402
from ingest_core.core.spec import parse_spec  # noqa: E402
from ingest_core.dev.demo import wiki_events  # noqa: E402
from ingest_core.executor import buckets  # noqa: E402
from ingest_core.store.compaction import publish_compaction  # noqa: E402
from ingest_core.store.metadata import MetadataStore
from ingest_core.store.publisher import GroupResult, Publisher, SegmentDescriptor  # noqa: E402
from ingest_core.store.reader import DatasourceReader  # noqa: E402
from ingest_core.query.engine import run_sql  # noqa: E402

DATASOURCE, TOPIC = "wiki_day", "wiki_day"
DAY = datetime(2026, 11, 1, tzinfo=timezone.utc)
TIME = pa.timestamp("ms", tz="UTC")
QUERIES = {
    "group by channel, the day": f"SELECT channel, sum(edits) AS edits, sum(added) AS added FROM {DATASOURCE} "
                                 "GROUP BY channel ORDER BY channel",
    "one hour's sums": f"SELECT sum(edits) AS edits, sum(added) AS added FROM {DATASOURCE} WHERE __time >= "
                        f"TIMESTAMPTZ '{DAY:%Y-%m-%d} 05:00:00+00' AND __time < TIMESTAMPTZ '{DAY:%Y-%m-%d} "
                        "06:00:00+00'",
}


def spec(deep: Path, iceberg: bool):
    raw = {"type": "kafka", "spec": {
        "dataSchema": {"dataSource": DATASOURCE, "timestampSpec": {"column": "time", "format": "iso"},
                       "dimensionsSpec": {"dimensions": ["channel", "page", "user", "namespace",
                                                         {"type": "long", "name": "isRobot"}]},
                       "metricsSpec": [{"type": "count", "name": "edits"},
                                       {"type": "longSum", "name": "added", "fieldName": "added"},
                                       {"type": "longSum", "name": "deleted", "fieldName": "deleted"},
                                       {"type": "longMax", "name": "max_delta", "fieldName": "delta"}],
                       "granularitySpec": {"segmentGranularity": "HOUR", "queryGranularity": "MINUTE"}},
        "ioConfig": {"topic": TOPIC, "inputFormat": {"type": "json"}, "taskCount": 2,
                     "consumerProperties": {"bootstrap.servers": "127.0.0.1:9"}},
        "tuningConfig": {"type": "kafka"}},
        "microbatch": {"deepStorage": {"uri": deep.as_uri()}, **({"iceberg": {}} if iceberg else {})},
        "compaction": {"skipOffsetFromLatest": "PT0S"}}
    return parse_spec(raw)


def segment_table(minute: datetime, rows: int, rng: random.Random) -> pa.Table:
    """One task group's rolled-up rows of one minute, as the job writes them."""
    groups: dict[tuple, list[int]] = {}
    for e in wiki_events(rows, rng):
        key = (e["channel"], e["page"], e["user"], e["namespace"], e["isRobot"])
        g = groups.setdefault(key, [0, 0, 0, -(1 << 63)])
        g[0] += 1
        g[1] += e["added"]
        g[2] += e["deleted"]
        g[3] = max(g[3], e["delta"])
    keys = list(groups)
    return pa.table({
        "__time": pa.array([minute] * len(keys), TIME),
        "channel": [k[0] for k in keys], "page": [k[1] for k in keys], "user": [k[2] for k in keys],
        "namespace": [k[3] for k in keys], "isRobot": pa.array([k[4] for k in keys], pa.int64()),
        "edits": pa.array([groups[k][0] for k in keys], pa.int64()),
        "added": pa.array([groups[k][1] for k in keys], pa.int64()),
        "deleted": pa.array([groups[k][2] for k in keys], pa.int64()),
        "max_delta": pa.array([groups[k][3] for k in keys], pa.int64())})


class Day:
    """The datasource's store, its deep storage, and the microbatches published so far."""

    def __init__(self, out: Path, metadata_url: str, rows: int, seed: int, iceberg: bool):
        self.out, self.rows, self.rng = out, rows, random.Random(seed)
        self.spec = spec(out / "deep", iceberg)
        self.store = MetadataStore(metadata_url)
        self.store.upgrade()
        self.parts = [TopicPartition(TOPIC, p) for p in range(2)]
        self.offset = 0
        self.runs = 0

    def publish_minute(self, minute: datetime) -> float:
        """One microbatch: a run of two task groups, each one segment of `rows` events; the publish's seconds."""
        start = {tp: self.offset for tp in self.parts}
        self.offset += self.rows
        run_id = f"m{self.runs:05d}"
        self.runs += 1
        plan = plan_run(PlanRequest(
            datasource=DATASOURCE, run_id=run_id, created_at=minute,
            starts={tp: StartOffset(o, StartSource.COMMITTED, expected_commit=o) if o else
                    StartOffset(0, StartSource.EARLIEST) for tp, o in start.items()},
            latest={tp: self.offset for tp in self.parts}, task_count=2))
        self.store.runs.insert(plan)
        hour = minute.replace(minute=0)
        results = []
        for group in plan.groups:
            table = segment_table(minute, self.rows, self.rng)
            path = self.out / "deep" / DATASOURCE / run_id / f"group={group.group_id}.parquet"
            path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(table, path)
            results.append(GroupResult(group.group_id, [SegmentDescriptor(
                hour, hour + timedelta(hours=1), f"file://{path}", table.num_rows, path.stat().st_size)]))
        t = time.perf_counter()
        Publisher(self.store).publish(DATASOURCE, run_id, results)
        return time.perf_counter() - t

    def figures(self, repeat: int) -> dict[str, Any]:
        visible = DatasourceReader(self.store, DATASOURCE).segments()
        out: dict[str, Any] = {"files": len(visible), "bytes": sum(s.size_bytes for s in visible),
                               "rows": sum(s.num_rows for s in visible)}
        for name, sql in QUERIES.items():
            out[name] = median_time(lambda: run_sql(self.store, sql).table, repeat)
        out["to_arrow"] = median_time(lambda: DatasourceReader(self.store, DATASOURCE).to_arrow(), repeat)
        out["results"] = {name: run_sql(self.store, sql).table.to_pylist() for name, sql in QUERIES.items()}
        return out

    def compact(self, spark: Any) -> tuple[int, float]:
        """Every interval compacted by the Spark job and published; (intervals, seconds)."""
        from ingest_core.spark.compaction import compact

        visible = DatasourceReader(self.store, DATASOURCE).segments()
        by_id = {s.id: s for s in visible}
        comp = self.spec.compaction
        found = find_candidates(visible, granularity=self.spec.data_schema.granularity_spec.segment_granularity,
                                target_rows=comp.target_rows, skip_offset=comp.skip_offset_from_latest,
                                bucket=buckets.bucket)
        t = time.perf_counter()
        for n, c in enumerate(found.candidates):
            members = sorted((by_id[i] for i in c.segment_ids), key=lambda s: (s.created_at, s.partition_num))
            job = CompactionJob(DATASOURCE, f"bench-{n}", c.interval_start, c.interval_end, c.segment_ids,
                                tuple(s.location for s in members), comp.target_rows, c.target_segments,
                                (self.out / "deep" / DATASOURCE / ".compaction" / str(n)).as_uri())
            files = compact(spark, self.spec, job)
            publish_compaction(self.store, DATASOURCE, c.interval, c.segment_ids,
                               [SegmentDescriptor(c.interval_start, c.interval_end, f.location, f.rows, f.bytes)
                                for f in files], job.task_id)
        return len(found.candidates), time.perf_counter() - t


def median_time(call: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        call()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=int, default=1440, help="1-minute microbatches (default: a day)")
    ap.add_argument("--rows", type=int, default=200, help="events per task group per microbatch")
    ap.add_argument("--repeat", type=int, default=5, help="tries per query time (the median is printed)")
    ap.add_argument("--iceberg-publishes", type=int, default=30, help="microbatches timed with an Iceberg sync")
    ap.add_argument("--postgres", metavar="URL", help="a PostgreSQL database URL for the store (default: SQLite)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--tiny", action="store_true", help="20 microbatches, 20 rows, 1 try: measures nothing")
    args = ap.parse_args()
    if args.tiny:
        ap.set_defaults(minutes=20, rows=20, repeat=1, iceberg_publishes=2)
        args = ap.parse_args()
    out = (args.out or Path(tempfile.mkdtemp(prefix="bench-compaction-"))).resolve()
    out.mkdir(parents=True, exist_ok=True)
    url = args.postgres or f"sqlite:///{out / 'metadata.db'}"
    print(f"compaction: {args.minutes} 1-minute microbatches of 2 x {args.rows} events, store "
          f"{'PostgreSQL' if args.postgres else 'SQLite'}, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; "
          f"work dir {out}")
    day = Day(out, url, args.rows, args.seed, iceberg=False)
    t = time.perf_counter()
    publishes = [day.publish_minute(DAY + timedelta(minutes=m)) for m in range(args.minutes)]
    print(f"  published {args.minutes} microbatches in {time.perf_counter() - t:.1f} s "
          f"(publish median {statistics.median(publishes) * 1000:.1f} ms)")

    before = day.figures(args.repeat)
    from ingest_core.spark.settings import spark_session_builder

    spark = spark_session_builder("compaction-bench").master("local[2]").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    try:
        intervals, seconds = day.compact(spark)
    finally:
        spark.stop()
    after = day.figures(args.repeat)
    # rows may merge (the same minute and dimensions in two runs): the sums must not change
    same = before["results"] == after["results"] and before["rows"] >= after["rows"]
    print(f"  compacted {intervals} intervals in {seconds:.1f} s (Spark local[2]); query results identical: "
          f"{'yes' if same else 'NO'}")
    print(f"{'':34} {'before':>12} {'after':>12} {'ratio':>8}")
    for key, unit in (("files", ""), ("rows", ""), ("bytes", "")):
        print(f"  {key:32} {before[key]:>12,} {after[key]:>12,} {before[key] / max(after[key], 1):>7.1f}x")
    for key in (*QUERIES, "to_arrow"):
        print(f"  {key + ' (s)':32} {before[key]:>12.3f} {after[key]:>12.3f} "
              f"{before[key] / max(after[key], 1e-9):>7.1f}x")

    # the Iceberg commit a publish adds: a datasource of its own, the publish and the sync timed one by one
    from ingest_core.store import iceberg

    (out / "iceberg").mkdir(exist_ok=True)
    ice = Day(out / "iceberg", f"sqlite:///{out / 'iceberg' / 'metadata.db'}", args.rows, args.seed, iceberg=True)
    pub, sync = [], []
    for m in range(args.iceberg_publishes):
        pub.append(ice.publish_minute(DAY + timedelta(minutes=m)))
        t = time.perf_counter()
        iceberg.sync(ice.store, ice.spec)
        sync.append(time.perf_counter() - t)
    p, s = statistics.median(pub), statistics.median(sync)
    print(f"  Iceberg commit per publish (median of {len(pub)}): publish {p * 1000:.1f} ms, sync {s * 1000:.1f} ms, "
          f"sync / publish {s / p:.1f}x")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
