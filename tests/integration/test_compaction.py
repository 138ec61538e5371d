"""Compaction's publish on a real metadata store (SQLite and PostgreSQL), over real Parquet segments published by
the real publish: a compare-and-swap on the interval's visible segments; appends are never lost."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from helpers import make_spec, publish_segments

from ingest_core.core.granularity import Granularity
from ingest_core.core.offsets import TopicPartition
from ingest_core.core.periods import Period
from ingest_core.executor.buckets import bucket
from ingest_core.core.commit_rules import CompactionConflictError
from ingest_core.core.compaction import find_candidates
from ingest_core.store.compaction import COMPACT, publish_compaction
from ingest_core.store.publisher import SegmentDescriptor
from ingest_core.store.reader import DatasourceReader

T0 = datetime(2026, 11, 22, 10, tzinfo=timezone.utc)
PARTS = [TopicPartition("edits", p) for p in range(2)]
TIME = pa.timestamp("ms", tz="UTC")
HOUR, DAY = Granularity.named("HOUR"), Granularity.named("DAY")


def rows(n: int, start: int = 0, hour: datetime = T0) -> pa.Table:
    return pa.table({"__time": pa.array([hour + timedelta(minutes=i % 60) for i in range(start, start + n)], TIME),
                     "page": pa.array([f"p{i % 3}" for i in range(start, start + n)]),
                     "added": pa.array(range(start, start + n), pa.int64())})


def three_runs(store, tmp_path, hour: datetime = T0, first: int = 0) -> None:
    for i in range(3):
        end = 5 * (first + i + 1)
        publish_segments(store, tmp_path, f"r{first + i}", {tp: end for tp in PARTS},
                         [rows(5, 10 * (first + i), hour), rows(5, 10 * (first + i) + 5, hour)], hour=hour)


def candidates(store, granularity=HOUR, target_rows=1000):
    visible = DatasourceReader(store, "wiki").segments()
    return find_candidates(visible, granularity=granularity, target_rows=target_rows,
                           skip_offset=Period.parse("PT0S"), bucket=bucket).candidates


def rewrite(store, tmp_path, candidate, name: str) -> list[SegmentDescriptor]:
    """What the compaction job does, here with pyarrow: the candidate's rows in one file."""
    table = DatasourceReader(store, "wiki").to_arrow(interval=candidate.interval)
    path = tmp_path / f"{name}.parquet"
    pq.write_table(table, path)
    return [SegmentDescriptor(candidate.interval_start, candidate.interval_end, path.as_uri(), table.num_rows,
                              path.stat().st_size)]


def sums(store) -> tuple[int, int]:
    table = DatasourceReader(store, "wiki").to_arrow()
    return table.num_rows, pc.sum(table.column("added")).as_py()


def test_compaction_replaces_an_intervals_segments_with_the_same_rows(store, tmp_path):
    three_runs(store, tmp_path)
    before = sums(store)
    (candidate,) = candidates(store)
    assert len(candidate.segment_ids) == 6 and candidate.rows == 30 and candidate.target_segments == 1
    rewritten = rewrite(store, tmp_path, candidate, "c1")
    result = publish_compaction(store, "wiki", candidate.interval, candidate.segment_ids, rewritten, "compact-1")
    assert sums(store) == before == (30, sum(range(30)))
    (visible,) = DatasourceReader(store, "wiki").segments()
    assert visible.id == result.segment_ids[0] and visible.version == result.version > "2026-11-22T10:00:00.000Z"
    old = [s for s in store.segment_records.of("wiki", used_only=False) if not s.used]
    assert sorted(s.id for s in old) == list(candidate.segment_ids)
    (audit,) = store.audit_log.records("wiki", action=COMPACT)
    assert audit.details["replaced"] == list(candidate.segment_ids) and audit.details["rowsAfter"] == 30
    assert candidates(store) == []  # compacted: nothing more to do
    # a retried publish whose first commit went through: already published, nothing written twice
    again = publish_compaction(store, "wiki", candidate.interval, candidate.segment_ids, rewritten, "compact-1")
    assert again.segment_ids == result.segment_ids and len(DatasourceReader(store, "wiki").segments()) == 1


def test_an_append_that_races_a_compaction_is_kept_and_the_compaction_refused(store, tmp_path):
    three_runs(store, tmp_path)
    (candidate,) = candidates(store)
    rewritten = rewrite(store, tmp_path, candidate, "c1")
    publish_segments(store, tmp_path, "late", {tp: 20 for tp in PARTS}, [rows(2, 100), rows(2, 102)])  # meanwhile
    before = [s.id for s in DatasourceReader(store, "wiki").segments()]
    with pytest.raises(CompactionConflictError, match="the interval changed after it was read"):
        publish_compaction(store, "wiki", candidate.interval, candidate.segment_ids, rewritten, "compact-1")
    assert [s.id for s in DatasourceReader(store, "wiki").segments()] == before and sums(store)[0] == 34
    (again,) = candidates(store)  # the next compaction run reads the append too
    publish_compaction(store, "wiki", again.interval, again.segment_ids, rewrite(store, tmp_path, again, "c2"),
                       "compact-2")
    assert sums(store) == (34, sum(range(30)) + sum(range(100, 104)))


def test_an_append_after_a_coarser_compaction_joins_the_compacted_interval(store, tmp_path):
    three_runs(store, tmp_path, T0)
    three_runs(store, tmp_path, T0 + timedelta(hours=1), first=3)
    tomorrow = T0 + timedelta(days=1)
    publish_segments(store, tmp_path, "tomorrow", {tp: 35 for tp in PARTS},
                     [rows(5, 300, tomorrow), rows(5, 305, tomorrow)], hour=tomorrow)
    (day,) = candidates(store, granularity=DAY)  # tomorrow is the latest day: left alone (skipOffsetFromLatest)
    assert day.interval == (T0.replace(hour=0), T0.replace(hour=0) + timedelta(days=1)) and len(day.segment_ids) == 12
    publish_compaction(store, "wiki", day.interval, day.segment_ids, rewrite(store, tmp_path, day, "day"),
                       "compact-day")
    # a run planned before the compaction publishes an hour of that day after it: its segment takes the DAY
    # interval and version, so the DAY segment does not overshadow it
    publish_segments(store, tmp_path, "late", {tp: 40 for tp in PARTS}, [rows(3, 200), rows(3, 203)])
    visible = [s for s in DatasourceReader(store, "wiki").segments() if s.interval_start < tomorrow]
    assert {(s.interval_start, s.interval_end) for s in visible} == {day.interval}
    assert len({s.version for s in visible}) == 1 and len(visible) == 3
    assert sums(store) == (76, sum(range(60)) + sum(range(200, 206)) + sum(range(300, 310)))


def test_the_spark_job_rolls_segments_up_again_with_combining_aggregators(spark, tmp_path):
    """Segments of one interval, written as ingestion writes them, rewritten by the real Spark job: rows with the
    same time and dimensions merge (count and sums add, a longSum past the long range stays exact over several
    rows, min/max keep theirs, first/last follow publish order); no row or sum changes."""
    from ingest_core.spark.compaction import CompactionJob, compact

    spec = make_spec("127.0.0.1:9", "wiki", topic="edits", taskCount=1, microbatch=None)
    raw_metrics = [{"type": "count", "name": "count"}, {"type": "longSum", "name": "added", "fieldName": "a"},
                   {"type": "doubleSum", "name": "ratio", "fieldName": "r"}, {"type": "longMin", "name": "low",
                                                                                "fieldName": "a"},
                   {"type": "longMax", "name": "high", "fieldName": "a"},
                   {"type": "longFirst", "name": "first", "fieldName": "a"},
                   {"type": "longLast", "name": "last", "fieldName": "a"}]
    from ingest_core.core.spec import parse_spec

    raw = spec.to_raw()
    raw["spec"]["dataSchema"]["metricsSpec"] = raw_metrics
    raw["spec"]["dataSchema"]["dimensionsSpec"] = {"dimensions": ["page"]}
    spec = parse_spec(raw)
    big = (1 << 63) - 10

    def segment(name, pages, added, extra=None):
        n = len(pages)
        table = pa.table({"__time": pa.array([T0] * n, TIME), "page": pa.array(pages),
                          "count": pa.array([2] * n, pa.int64()), "added": pa.array(added, pa.int64()),
                          "ratio": pa.array([0.5] * n), "low": pa.array(added, pa.int64()),
                          "high": pa.array(added, pa.int64()), "first": pa.array(added, pa.int64()),
                          "last": pa.array(added, pa.int64()), **(extra or {})})
        path = tmp_path / f"{name}.parquet"
        pq.write_table(table, path)
        return path.as_uri()

    locations = (segment("a", ["x", "y"], [1, big]), segment("b", ["x", "y"], [5, 20]),
                 segment("c", ["x"], [-3], {"user": pa.array(["ann"])}))
    job = CompactionJob("wiki", "compact-1", T0, T0 + timedelta(hours=1), ("a", "b", "c"), locations, 1000, 1,
                        (tmp_path / "out").as_uri())
    files = compact(spark, spec, job)
    table = pa.concat_tables(pq.read_table(f.location.removeprefix("file://")) for f in files)
    by_key = {}
    for row in table.to_pylist():
        by_key.setdefault((row["page"], row.get("user")), []).append(row)
    (x,) = by_key[("x", None)]
    assert (x["count"], x["added"], x["ratio"], x["low"], x["high"], x["first"], x["last"]) == (4, 6, 1.0, 1, 5, 1, 5)
    (xa,) = by_key[("x", "ann")]  # another dimension value: its own row
    assert (xa["count"], xa["added"]) == (2, -3)
    ys = by_key[("y", None)]  # a longSum past the long range: several rows whose values add up exactly
    assert sum(r["added"] for r in ys) == big + 20 and len(ys) > 1 and sum(r["count"] for r in ys) == 4
    assert {(r["low"], r["high"], r["first"], r["last"]) for r in ys} == {(20, big, big, 20)}
    assert table.schema.field("__time").type == TIME and len(files) == 1 and sum(f.rows for f in files) == len(table)


def test_kill_deletes_what_compaction_made_unused_only_after_the_buffer_period(store, tmp_path):
    from ingest_core.store import iceberg
    from ingest_core.store.kill import KILL, kill

    spec = make_spec("127.0.0.1:9", "wiki", topic="edits", taskCount=2,
                     microbatch={"iceberg": {}, "deepStorage": {"uri": (tmp_path / "deep").as_uri()}})
    three_runs(store, tmp_path)
    iceberg.sync(store, spec)  # the table holds the six segments' files
    (candidate,) = candidates(store)
    compacted_at = datetime(2026, 11, 23, 12, tzinfo=timezone.utc)
    publish_compaction(store, "wiki", candidate.interval, candidate.segment_ids,
                       rewrite(store, tmp_path, candidate, "c1"), "compact-1", now=compacted_at)
    old = [s for s in store.segment_records.of("wiki", used_only=False) if not s.used]
    assert len(old) == 6 and all(s.used_status_last_updated == compacted_at for s in old)
    refused = tmp_path / "deep" / "wiki" / ".compaction" / "run" / "0"  # a rewrite the publish refused
    refused.mkdir(parents=True)
    (refused / "part-0.parquet").write_bytes(b"x")
    buffer = timedelta(hours=1)

    early = kill(store, spec, buffer, compacted_at + timedelta(minutes=30), [refused.as_uri()])
    assert early.segments == () and all(Path(s.location.removeprefix("file://")).exists() for s in old)
    # past the buffer, but the Iceberg table still holds the old files (its sync has not run): kept
    kept = kill(store, spec, buffer, compacted_at + timedelta(hours=2))
    assert sorted(kept.kept_for_iceberg) == sorted(s.id for s in old) and kept.segments == ()
    iceberg.sync(store, spec)
    done = kill(store, spec, buffer, datetime.now(timezone.utc) + timedelta(hours=2), [refused.as_uri()])
    assert sorted(done.segments) == sorted(s.id for s in old) and done.folders == (refused.as_uri(),)
    assert not any(Path(s.location.removeprefix("file://")).exists() for s in old) and not refused.exists()
    assert [s.used for s in store.segment_records.of("wiki", used_only=False)] == [True]  # the records went too
    assert sums(store) == (30, sum(range(30)))  # the visible rows never changed
    (audit,) = store.audit_log.records("wiki", action=KILL)
    assert sorted(audit.details["segments"]) == sorted(s.id for s in old)


def test_compact_job_under_spark_submit_and_a_reader_sees_the_old_set_or_the_new_never_a_mix(pg_store, tmp_path):
    """The job as the compaction DAG runs it in spark-submit mode, then its publish while readers read: each read
    lists one visible set, all of one version, with every row (PostgreSQL: one spark-submit is enough)."""
    store = pg_store
    import json
    import os
    import subprocess
    import sys
    import threading

    from ingest_core.core.compaction import CompactionJob
    from ingest_core.handover import deep_storage
    from ingest_core.spark.compaction import read_report

    three_runs(store, tmp_path)
    spec = make_spec("127.0.0.1:9", "wiki", topic="edits", taskCount=2)
    (candidate,) = candidates(store)
    members = [s for s in DatasourceReader(store, "wiki").segments()]
    job = CompactionJob("wiki", "compact-x", candidate.interval_start, candidate.interval_end,
                        candidate.segment_ids, tuple(s.location for s in members), 1000, 1,
                        (tmp_path / "out").as_uri())
    (tmp_path / "spec.json").write_text(json.dumps(spec.to_raw()))
    (tmp_path / "job.json").write_text(json.dumps(job.to_json()))
    submit = os.path.join(os.path.dirname(sys.executable), "spark-submit")
    script = os.path.join(os.path.dirname(__file__), "..", "..", "spark_jobs", "compact_job.py")
    done = subprocess.run([submit, "--master", "local[2]", "--conf", "spark.ui.enabled=false", script,
                           "--spec", str(tmp_path / "spec.json"), "--job", str(tmp_path / "job.json")],
                          capture_output=True, text=True, env={**os.environ, "PYSPARK_PYTHON": sys.executable},
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"files": 1, "rows": 30}, done.stdout[-2000:]  # no two rows merge here
    files = read_report(job.output_uri)
    bad = subprocess.run([sys.executable, script, "--spec", str(tmp_path / "nope.json"), "--job", "x"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "compact_job:" in bad.stderr

    seen, stop = [], threading.Event()

    def read():
        while not stop.is_set():
            reader = DatasourceReader(store, "wiki")
            listed = reader.segments()
            seen.append(({s.version for s in listed}, len(listed), sum(s.num_rows for s in listed)))

    readers = [threading.Thread(target=read) for _ in range(2)]
    for t in readers:
        t.start()
    publish_compaction(store, "wiki", candidate.interval, candidate.segment_ids,
                       [SegmentDescriptor(candidate.interval_start, candidate.interval_end, f.location, f.rows,
                                          f.bytes) for f in files], job.task_id)
    while not any(n == 1 for _, n, _ in seen):  # a read after the swap
        threading.Event().wait(0.01)
    stop.set()
    for t in readers:
        t.join()
    assert {(len(v), n, rows) for v, n, rows in seen} <= {(1, 6, 30), (1, 1, 30)}
    assert deep_storage.read_json(deep_storage.join(job.output_uri, "report.json"))["job"]["taskId"] == "compact-x"


def test_the_ingest_tab_shows_each_runs_published_figures_after_compaction_and_kill(store, tmp_path, monkeypatch):
    """Each run's figures are what its publish recorded: compaction rewrites its segments and kill removes their
    records, and the Ingest tab (its JSON and its page) still shows what the run published, not what is left."""
    import re

    from ingest_core.provider.plugins import ui
    from ingest_core.store.kill import kill

    monkeypatch.setenv("INGEST_METADATA_URL", store.url)
    monkeypatch.setenv("AIRFLOW__CORE__DAGS_FOLDER", str(tmp_path / "no-dags"))
    spec = make_spec("127.0.0.1:9", "wiki", topic="edits", taskCount=2,
                     microbatch={"deepStorage": {"uri": (tmp_path / "deep").as_uri()}})
    three_runs(store, tmp_path)

    def shown() -> tuple[dict, list]:
        payload = ui.supervisor_status("wiki", None)["payload"]
        page = ui.datasource_page("wiki", None).body.decode()
        table = page[page.index("<h3>Recent runs</h3>"):]
        return ({r["runId"]: r["published"] for r in payload["recentRuns"]},
                re.findall(r"<tr><td class=''>(r\d)</td>(.*?)</tr>", table))

    before = shown()
    figures, rows = before
    assert sorted(figures) == ["r0", "r1", "r2"] and len(rows) == 3
    assert all((f["records"], f["rows"], f["segments"]) == (10, 10, 2) and f["bytes"] > 0 for f in figures.values())
    (candidate,) = candidates(store)
    compacted_at = datetime(2026, 11, 23, 12, tzinfo=timezone.utc)
    publish_compaction(store, "wiki", candidate.interval, candidate.segment_ids,
                       rewrite(store, tmp_path, candidate, "c1"), "compact-1", now=compacted_at)
    done = kill(store, spec, timedelta(hours=1), datetime.now(timezone.utc) + timedelta(hours=2))
    assert len(done.segments) == 6 and [s.run_id for s in store.segment_records.of("wiki", used_only=False)] == ["compact-1"]
    assert shown() == before
    assert sums(store) == (30, sum(range(30)))
