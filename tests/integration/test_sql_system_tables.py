"""Druid's sys tables (sys.segments, sys.tasks, sys.supervisors) over a real metadata store (SQLite and
PostgreSQL), their values checked against what the store holds as `ingest segments --json` and `ingest status
--json` report it, and each filtered to the datasources the caller may read."""

from __future__ import annotations

import functools
import json
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest
from helpers import plan_next, publish_segments

from ingest_core.core.offsets import TopicPartition
from ingest_core.core.states import RunEvent
from ingest_core.query.engine import run_sql
from ingest_core.query.errors import DatasourceNotReadable, SqlError
from ingest_core.service.cli import main
from ingest_core.service.status import supervisor_rows

T0 = datetime(2026, 11, 22, 10, tzinfo=timezone.utc)
TIME = pa.timestamp("ms", tz="UTC")
PARTS = [TopicPartition("edits", p) for p in range(2)]


def table(n: int, start: int = 0) -> pa.Table:
    return pa.table({"__time": pa.array([T0 + timedelta(minutes=i) for i in range(start, start + n)], TIME),
                     "page": pa.array([f"p{i % 3}" for i in range(start, start + n)])})


@pytest.fixture
def two(store, tmp_path):
    """`wiki`: two publishes and a failed run; `secret`: one publish and a run in flight."""
    publish_segments(store, tmp_path, "r1", {tp: 10 for tp in PARTS}, [table(10), table(10, 10)])
    publish_segments(store, tmp_path, "r2", {tp: 15 for tp in PARTS}, [table(5, 20), table(5, 25)])
    plan_next(store, "r3", {tp: 20 for tp in PARTS})
    store.runs.start("wiki", "r3", None)
    store.runs.move("wiki", "r3", RunEvent.FAIL, error="task group 0 failed: boom")
    publish_segments(store, tmp_path, "s1", {TopicPartition("secrets", 0): 3}, [table(3)], ds="secret")
    plan_next(store, "s2", {TopicPartition("secrets", 0): 9}, ds="secret")
    return store


def cli_json(store_url: str, capsys, *args: str):
    assert main(["--metadata-url", store_url, *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_sys_tables_hold_what_ingest_segments_and_ingest_status_report(two, store_url, capsys):
    """Through `ingest query` (its worker, as the REST API's): every datasource, Druid's columns and values."""
    segments = cli_json(store_url, capsys, "query", "SELECT * FROM sys.segments ORDER BY datasource, segment_id",
                        "--json")
    listed = {d: cli_json(store_url, capsys, "segments", d, "--json") for d in ("secret", "wiki")}
    expected = sorted([(d, s) for d, segs in listed.items() for s in segs], key=lambda x: (x[0], x[1]["id"]))
    assert [(r["datasource"], r["segment_id"]) for r in segments] == [(d, s["id"]) for d, s in expected]
    for row, (_, seg) in zip(segments, expected):
        start, end = seg["interval"].split("/")
        assert (row["start"], row["end"], row["version"], row["partition_num"], row["num_rows"], row["size"]) == (
            start, end, seg["version"], seg["partitionNum"], seg["rows"], seg["bytes"])
        assert (row["is_published"], row["is_active"], row["is_available"], row["is_overshadowed"],
                row["is_realtime"], row["num_replicas"], row["replication_factor"]) == (1, 1, 1, 0, 0, 1, 1)
        assert json.loads(row["shard_spec"]) == {"type": "numbered", "partitionNum": seg["partitionNum"],
                                                 "partitions": 0}
        assert row["last_compaction_state"] is None
    assert len(segments) == 5

    supervisors = cli_json(store_url, capsys, "query", "SELECT * FROM sys.supervisors ORDER BY 1", "--json")
    statuses = {s["id"]: s["payload"] for s in cli_json(store_url, capsys, "status", "--json")}
    assert [s["supervisor_id"] for s in supervisors] == sorted(statuses) == ["secret", "wiki"]
    for row in supervisors:
        status = statuses[row["supervisor_id"]]
        assert (row["state"], row["detailed_state"], row["healthy"], row["suspended"], row["source"], row["type"]) == (
            status["state"], status["detailedState"], int(status["healthy"]), int(status["suspended"]),
            status["stream"], "kafka")
        assert row["spec"] is None  # no spec registered by these runs

    tasks = cli_json(store_url, capsys, "query", "SELECT * FROM sys.tasks WHERE type = 'ingest_run' "
                                                 "ORDER BY datasource, task_id", "--json")
    runs = {(d, r["runId"]): r for d, s in statuses.items() for r in s["recentRuns"]}
    assert [(t["datasource"], t["task_id"]) for t in tasks] == sorted(runs)
    druid_status = {"PUBLISHED": "SUCCESS", "FAILED": "FAILED", "PLANNED": "RUNNING"}
    for t in tasks:
        run = runs[(t["datasource"], t["task_id"])]
        assert (t["status"], t["group_id"], t["created_time"]) == (
            druid_status[run["status"]], t["task_id"], run["createdAt"])
        assert t["error_msg"] == (run["error"] if run["status"] == "FAILED" else None)
        assert t["runner_status"] == {"PUBLISHED": "NONE", "FAILED": "NONE", "PLANNED": "PENDING"}[run["status"]]
        assert (t["duration"] >= 0) == (run["status"] != "PLANNED")
        assert (t["location"], t["host"], t["plaintext_port"], t["tls_port"]) == (None, None, -1, -1)
    groups = cli_json(store_url, capsys, "query", "SELECT group_id, task_id, status FROM sys.tasks WHERE type = "
                                                  "'index_kafka' AND datasource = 'wiki' ORDER BY 2", "--json")
    assert groups == [{"group_id": "r1", "task_id": "r1/group=0", "status": "SUCCESS"},
                      {"group_id": "r1", "task_id": "r1/group=1", "status": "SUCCESS"},
                      {"group_id": "r2", "task_id": "r2/group=0", "status": "SUCCESS"},
                      {"group_id": "r2", "task_id": "r2/group=1", "status": "SUCCESS"},
                      {"group_id": "r3", "task_id": "r3/group=0", "status": "FAILED"},
                      {"group_id": "r3", "task_id": "r3/group=1", "status": "FAILED"}]


def wiki_reader(name: str) -> bool:
    return name == "wiki"


def test_sys_tables_and_the_catalog_show_only_the_datasources_the_caller_may_read(two):
    def rows(sql: str) -> list[dict]:
        return run_sql(two, sql, may_read=wiki_reader,
                       supervisors=functools.partial(supervisor_rows, two, specs={})).table.to_pylist()

    for table_name, column in (("segments", "datasource"), ("tasks", "datasource"), ("supervisors", "supervisor_id")):
        seen = rows(f"SELECT DISTINCT {column} AS d FROM sys.{table_name}")
        assert seen == [{"d": "wiki"}], table_name
        assert rows(f"SELECT count(*) AS n FROM sys.{table_name} WHERE {column} = 'secret'") == [{"n": 0}]
    # Druid's spellings of the names
    assert rows('SELECT count(*) AS n FROM "sys"."segments"') == rows("SELECT count(*) AS n FROM sys.segments")
    # the catalog lists the sys schema and its tables as Druid does, and describes their columns
    assert {"sys"} <= {r["SCHEMA_NAME"] for r in rows("SELECT SCHEMA_NAME FROM INFORMATION_SCHEMA.SCHEMATA")}
    assert rows("SELECT TABLE_NAME, TABLE_TYPE FROM INFORMATION_SCHEMA.TABLES WHERE TABLE_SCHEMA = 'sys' "
                "ORDER BY 1") == [{"TABLE_NAME": n, "TABLE_TYPE": "SYSTEM_TABLE"}
                                  for n in ("segments", "supervisors", "tasks")]
    columns = rows("SELECT COLUMN_NAME, DATA_TYPE, JDBC_TYPE, ORDINAL_POSITION FROM INFORMATION_SCHEMA.COLUMNS "
                   "WHERE TABLE_SCHEMA = 'sys' AND TABLE_NAME = 'segments' ORDER BY ORDINAL_POSITION")
    assert columns[:2] == [{"COLUMN_NAME": "segment_id", "DATA_TYPE": "VARCHAR", "JDBC_TYPE": 12,
                            "ORDINAL_POSITION": 1},
                           {"COLUMN_NAME": "datasource", "DATA_TYPE": "VARCHAR", "JDBC_TYPE": 12,
                            "ORDINAL_POSITION": 2}]
    assert {"COLUMN_NAME": "is_overshadowed", "DATA_TYPE": "BIGINT", "JDBC_TYPE": -5, "ORDINAL_POSITION": 14} in columns
    assert [c["COLUMN_NAME"] for c in columns] == list(run_sql(two, "SELECT * FROM sys.segments LIMIT 0").table
                                                       .column_names)


@pytest.mark.parametrize("sql", [
    "SELECT s.segment_id FROM sys.segments s JOIN secret ON s.datasource = 'secret'",
    "SELECT * FROM sys.tasks WHERE datasource IN (SELECT 'x' FROM druid.secret)",
    "SELECT (SELECT count(*) FROM secret) AS n, count(*) FROM sys.supervisors",
])
def test_a_query_joining_sys_tables_with_a_datasource_the_caller_may_not_read_is_refused(two, sql):
    with pytest.raises(DatasourceNotReadable, match="you may not read datasource 'secret'"):
        run_sql(two, sql, may_read=wiki_reader, supervisors=functools.partial(supervisor_rows, two, specs={}))


def test_a_sys_table_this_server_does_not_have_is_a_one_line_error(two):
    with pytest.raises(SqlError, match="sys.servers is not served here: the sys tables are segments, tasks"):
        run_sql(two, "SELECT * FROM sys.servers")
    with pytest.raises(SqlError, match="sys.supervisors is answered by"):
        run_sql(two, "SELECT * FROM sys.supervisors")
