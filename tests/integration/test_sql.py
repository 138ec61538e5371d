"""SQL over datasources (DuckDB) against a real metadata store (SQLite and PostgreSQL) and real Parquet segments,
published the way the Spark job's are: through the exactly-once publish."""

from __future__ import annotations

import json
import subprocess
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest
from helpers import plan_next, publish_segments

from ingest_core.core.offsets import TopicPartition
from ingest_core.service.cli import main
from ingest_core.store.sql import DatasourceNotReadable, SqlError, run_sql

T0 = datetime(2026, 11, 22, 10, tzinfo=timezone.utc)
PARTS = [TopicPartition("edits", p) for p in range(2)]
TIME = pa.timestamp("ms", tz="UTC")


def rows(n: int, start: int = 0, **extra) -> pa.Table:
    cols = {"__time": pa.array([T0 + timedelta(minutes=i % 60) for i in range(start, start + n)], TIME),
            "page": pa.array([f"p{i % 3}" for i in range(start, start + n)])}
    return pa.table({**cols, **extra})


@pytest.fixture
def wiki(store, tmp_path):
    """Two publishes: the first with `added` as a long; the second with `added` as a double and a new column."""
    publish_segments(store, tmp_path, "r1", {tp: 10 for tp in PARTS},
            [rows(10, added=pa.array(range(10), pa.int64())), rows(10, 10, added=pa.array([1] * 10, pa.int64()))])
    publish_segments(store, tmp_path, "r2", {tp: 15 for tp in PARTS},
            [rows(5, 20, added=pa.array([0.5] * 5), user=pa.array(["ann"] * 5)),
             rows(5, 25, added=pa.array([0.25] * 5), user=pa.array(["bob"] * 5))])
    return store


def test_sql_reads_every_visible_segment_with_merged_columns_and_widened_types(wiki):
    result = run_sql(wiki, "SELECT count(*) AS n, sum(added) AS added, count(user) AS users, "
                           "min(__time) AS first, typeof(min(__time)) AS time_type, typeof(sum(added)) AS sum_type "
                           "FROM wiki")
    (row,) = result.table.to_pylist()
    assert row["n"] == 30 and row["added"] == pytest.approx(45 + 10 + 2.5 + 1.25) and row["users"] == 10
    assert row["first"] == T0 and row["time_type"] == "TIMESTAMP WITH TIME ZONE" and row["sum_type"] == "DOUBLE"
    assert result.segments == {"wiki": 4} and not result.truncated
    # an interval filter and a group by, as a user would write them
    by_page = run_sql(wiki, "SELECT page, count(*) AS n FROM wiki WHERE __time >= TIMESTAMPTZ "
                            "'2026-11-22 10:10:00+00' GROUP BY page ORDER BY page").table.to_pylist()
    assert by_page == [{"page": "p0", "n": 6}, {"page": "p1", "n": 7}, {"page": "p2", "n": 7}]


def test_sql_joins_datasources_and_reads_an_empty_one(wiki, tmp_path):
    publish_segments(wiki, tmp_path, "u1", {TopicPartition("users", 0): 2},
            [pa.table({"__time": pa.array([T0, T0], TIME), "user": ["ann", "bob"], "team": ["red", "blue"]})],
            ds="users")
    joined = run_sql(wiki, "SELECT team, count(*) AS n FROM wiki JOIN users USING (user) GROUP BY team "
                           "ORDER BY team").table.to_pylist()
    assert joined == [{"team": "blue", "n": 5}, {"team": "red", "n": 5}]
    plan_next(wiki, "e1", {TopicPartition("empty", 0): 0}, ds="empty")  # known, nothing published
    assert run_sql(wiki, "SELECT count(*) AS n FROM empty").table.to_pylist() == [{"n": 0}]
    with pytest.raises(SqlError, match="'empty' has nothing published yet: its only column is __time"):
        run_sql(wiki, "SELECT page FROM empty")


@pytest.mark.parametrize("sql, message", [
    ("SELECT 1; SELECT 2", "one statement per query, not 2"),
    ("DELETE FROM wiki", "only a read-only query (SELECT) runs here, not DELETE"),
    ("CREATE TABLE t AS SELECT 1", "not CREATE"),
    ("COPY (SELECT * FROM wiki) TO '/tmp/stolen.csv'", "not COPY"),
    ("ATTACH '/tmp/other.db'", "not ATTACH"),
    ("SELECT * FROM read_csv('/etc/passwd')", "Permission Error"),
    ("SELECT * FROM read_parquet('/tmp/*.parquet')", "Permission Error"),
    ("SELECT * FROM wikk", "no datasource named 'wikk' (did you mean 'wiki'?)"),
    ("SELECT nope FROM wiki", "the query failed: Binder Error"),
    ("SELEC 1", "does not parse"),
])
def test_sql_refuses_anything_but_one_read_only_query_over_datasources(wiki, sql, message):
    with pytest.raises(SqlError, match=None) as info:
        run_sql(wiki, sql)
    assert message in str(info.value)


def test_sql_refuses_datasources_the_caller_may_not_read_and_limits_rows_and_time(wiki, tmp_path):
    publish_segments(wiki, tmp_path, "s1", {TopicPartition("secret", 0): 1},
            [pa.table({"__time": pa.array([T0], TIME), "user": ["ann"]})], ds="secret")
    with pytest.raises(DatasourceNotReadable, match="you may not read datasource 'secret'"):
        run_sql(wiki, "SELECT * FROM wiki JOIN secret USING (user)", may_read=lambda name: name == "wiki")
    assert run_sql(wiki, "SELECT count(*) AS n FROM wiki", may_read=lambda n: n == "wiki").table.num_rows == 1
    limited = run_sql(wiki, "SELECT * FROM wiki ORDER BY __time", max_rows=7)
    assert limited.truncated and limited.table.num_rows == 7
    with pytest.raises(SqlError, match="ran past its time limit of 0.5 s"):
        run_sql(wiki, "SELECT count(*) FROM range(10000000000000) a", timeout_s=0.5)  # hours of work


def test_ingest_query_prints_a_table_json_and_csv_and_errors_in_one_line(wiki, store_url, capsys):
    def cli(*args: str) -> subprocess.CompletedProcess:
        code = main(["--metadata-url", store_url, "query", *args])
        out = capsys.readouterr()
        return subprocess.CompletedProcess(args, code, out.out, out.err)

    table = cli("SELECT page, count(*) AS n FROM wiki GROUP BY page ORDER BY page")
    assert table.returncode == 0, table.stderr
    assert table.stdout.splitlines() == ["page  n", "----  --", "p0    10", "p1    10", "p2    10", "(3 rows)"]
    as_json = cli("SELECT page, min(__time) AS first FROM wiki GROUP BY page ORDER BY page LIMIT 1", "--json")
    assert json.loads(as_json.stdout) == [{"page": "p0", "first": "2026-11-22T10:00:00.000Z"}]
    as_csv = cli("SELECT page FROM wiki ORDER BY page LIMIT 2", "--csv")
    assert as_csv.stdout.splitlines() == ["page", "p0", "p0"]
    bad = cli("SELECT * FROM wikk")
    assert bad.returncode == 1 and bad.stderr.strip().startswith("error: no datasource named 'wikk'")
    assert "Traceback" not in bad.stderr


def test_ingest_segments_prints_the_merged_schema_and_status_the_new_columns(wiki, store_url, capsys):
    assert main(["--metadata-url", store_url, "segments", "wiki"]) == 0
    out = capsys.readouterr().out
    schema = out[out.index("SCHEMA (merged over the visible segments)"):].splitlines()[1:]
    assert [line.split() for line in schema] == [["__time", "TIMESTAMP"], ["page", "STRING"], ["added", "DOUBLE"],
                                                 ["user", "STRING"]]
    assert main(["--metadata-url", store_url, "status", "wiki", "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["payload"]["newColumns"] == {"runId": "r2", "columns": {"user": "STRING"}}
