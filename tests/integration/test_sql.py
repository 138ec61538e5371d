"""SQL over datasources (DuckDB) against a real metadata store (SQLite and PostgreSQL) and real Parquet segments,
published the way the Spark job's are: through the exactly-once publish."""

from __future__ import annotations

import json
import subprocess
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest
from helpers import plan_next, publish_segments, spec_from

from ingest_core.core.errors import IngestError
from ingest_core.core.offsets import TopicPartition
from ingest_core.service.cli import main
from ingest_core.query.engine import run_sql
from ingest_core.query.errors import DatasourceNotReadable, SqlError

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
    assert as_csv.stdout.splitlines() == ["page", "p0", "p0", ""]  # Druid's csv: an empty line ends it
    bad = cli("SELECT * FROM wikk")
    assert bad.returncode == 1 and bad.stderr.strip().startswith("error: no datasource named 'wikk'")
    assert "Traceback" not in bad.stderr
    # past the time limit while rows stream: the one-line error, no `OSError: INTERRUPT` traceback
    late = cli("SELECT range AS i FROM range(1000000000000) WHERE hash(range) % 10 = 0", "--timeout", "0.5",
               "--max-rows", "0")
    assert late.returncode == 1 and late.stderr.strip() == (
        "error: the query ran past its time limit of 0.5 s and was stopped"), late.stderr


def test_ingest_segments_prints_the_merged_schema_and_status_the_new_columns(wiki, store_url, capsys):
    assert main(["--metadata-url", store_url, "segments", "wiki"]) == 0
    out = capsys.readouterr().out
    schema = out[out.index("SCHEMA (merged over the visible segments)"):].splitlines()[1:]
    assert [line.split() for line in schema] == [["__time", "TIMESTAMP"], ["page", "STRING"], ["added", "DOUBLE"],
                                                 ["user", "STRING"]]
    assert main(["--metadata-url", store_url, "status", "wiki", "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["payload"]["newColumns"] == {"runId": "r2", "columns": {"user": "STRING"}}


@pytest.fixture
def wiki_and_secret(wiki, tmp_path):
    publish_segments(wiki, tmp_path, "s1", {TopicPartition("secret", 0): 1},
            [pa.table({"__time": pa.array([T0], TIME), "user": ["ann"]})], ds="secret")
    return wiki


def not_secret(name: str) -> bool:  # a reader of every datasource but `secret` (an unknown name too: 400, not 403)
    return name != "secret"


def test_sql_ctes_hide_a_datasource_only_where_sql_scopes_them(wiki_and_secret):
    def n(sql: str, **kw) -> list:
        return [tuple(r.values()) for r in run_sql(wiki_and_secret, sql, **kw).table.to_pylist()]

    # the CTE's body reads the datasource it shadows; the query reads the CTE
    assert n("WITH wiki AS (SELECT * FROM wiki WHERE page = 'p0') SELECT count(*) FROM wiki") == [(10,)]
    # a CTE inside a subquery hides nothing outside it
    assert n("SELECT a.x, b.n FROM (WITH wiki AS (SELECT 1 AS x) SELECT x FROM wiki) a, "
             "(SELECT count(*) AS n FROM wiki) b") == [(1, 30)]
    # a later CTE reads an earlier one; a CTE named like a datasource the caller may not read hides it
    assert n("WITH secret AS (SELECT 2 AS x), y AS (SELECT x + 1 AS x FROM secret) SELECT x FROM y",
             may_read=not_secret) == [(3,)]
    assert n("WITH RECURSIVE secret AS (SELECT 1 AS x UNION ALL SELECT x + 1 FROM secret WHERE x < 3) "
             "SELECT max(x) FROM secret", may_read=not_secret) == [(3,)]
    for sql in ("SELECT * FROM (WITH secret AS (SELECT 1 AS x) SELECT x FROM secret), secret",
                "WITH a AS (SELECT * FROM secret), secret AS (SELECT 1 AS x) SELECT * FROM a, secret"):
        with pytest.raises(DatasourceNotReadable, match="you may not read datasource 'secret'"):
            run_sql(wiki_and_secret, sql, may_read=not_secret)


def test_sql_pivot_show_tables_information_schema_and_druids_schema_work(wiki_and_secret):
    def rows(sql: str, **kw) -> list:
        return [tuple(r.values()) for r in run_sql(wiki_and_secret, sql, **kw).table.to_pylist()]

    pivot = run_sql(wiki_and_secret, "PIVOT (SELECT page FROM wiki) ON page USING count(*)").table
    assert pivot.column_names == ["p0", "p1", "p2"] and pivot.to_pylist() == [{"p0": 10, "p1": 10, "p2": 10}]
    in_list = "SELECT * FROM (PIVOT (SELECT page, added FROM wiki) ON page IN ('p1') USING sum(added))"
    assert rows(in_list) == [(17.0,)]  # 12 + 4 + 1
    assert rows("SELECT * FROM (SELECT page FROM wiki) PIVOT (count(*) FOR page IN ('p0', 'p2'))") == [(10, 10)]
    assert rows("UNPIVOT (SELECT 1 AS a, 2 AS b) ON a, b INTO NAME k VALUE v") == [("a", 1), ("b", 2)]
    assert rows("SHOW TABLES") == [("secret",), ("wiki",)]
    assert rows("SHOW TABLES", may_read=not_secret) == [("wiki",)]
    assert [r[0] for r in rows("DESCRIBE wiki")] == ["__time", "page", "added", "user"]
    druid = "SELECT TABLE_SCHEMA, TABLE_NAME, TABLE_TYPE FROM INFORMATION_SCHEMA.TABLES WHERE TABLE_SCHEMA = 'druid'"
    assert rows(druid) == [("druid", "secret", "TABLE"), ("druid", "wiki", "TABLE")]
    assert rows(druid, may_read=not_secret) == [("druid", "wiki", "TABLE")]
    assert rows("SELECT COLUMN_NAME, DATA_TYPE FROM INFORMATION_SCHEMA.COLUMNS WHERE TABLE_NAME = 'wiki' "
                "ORDER BY ORDINAL_POSITION", may_read=not_secret) == [
        ("__time", "TIMESTAMP"), ("page", "VARCHAR"), ("added", "DOUBLE"), ("user", "VARCHAR")]
    # Druid lists INFORMATION_SCHEMA's own tables too; of the datasources, only those the caller may read
    assert rows("SELECT DISTINCT TABLE_NAME FROM information_schema.columns WHERE TABLE_SCHEMA = 'druid'",
                may_read=not_secret) == [("wiki",)]
    assert rows("SELECT SCHEMA_NAME FROM INFORMATION_SCHEMA.SCHEMATA ORDER BY 1") == [("INFORMATION_SCHEMA",),
                                                                                      ("druid",), ("sys",)]
    for sql, n in (("SELECT count(*) FROM druid.wiki", 30), ('SELECT count(*) FROM "druid"."wiki"', 30),
                   ("SELECT count(*) FROM DRUID.wiki w JOIN wiki USING (__time, page) WHERE w.page = 'p0'", 10)):
        assert rows(sql) == [(n,)], sql
    with pytest.raises(DatasourceNotReadable, match="'secret'"):
        run_sql(wiki_and_secret, "SELECT * FROM druid.secret", may_read=not_secret)


def register_spec(store, dimensions: list, metrics: list) -> None:
    """The spec the store keeps for `wiki` (the last one registered is the datasource's)."""
    spec = spec_from("localhost:9092", "edits", {
        "timestampSpec": {"column": "ts"}, "dimensionsSpec": {"dimensions": dimensions}, "metricsSpec": metrics,
        "granularitySpec": {"segmentGranularity": "HOUR", "rollup": bool(metrics)}}, datasource="wiki")
    store.datasources.register_spec("wiki", spec.to_raw(), spec.fingerprint())


# Druid's sql-metadata-tables.md: INFORMATION_SCHEMA.COLUMNS' columns, in its order
DRUID_COLUMNS = ["TABLE_CATALOG", "TABLE_SCHEMA", "TABLE_NAME", "COLUMN_NAME", "ORDINAL_POSITION", "COLUMN_DEFAULT",
                 "IS_NULLABLE", "DATA_TYPE", "CHARACTER_MAXIMUM_LENGTH", "CHARACTER_OCTET_LENGTH", "NUMERIC_PRECISION",
                 "NUMERIC_PRECISION_RADIX", "NUMERIC_SCALE", "DATETIME_PRECISION", "CHARACTER_SET_NAME",
                 "COLLATION_NAME", "JDBC_TYPE"]


def test_sql_lists_columns_in_the_specs_order_and_names_expressions_as_druid_does(wiki):
    def names(sql: str) -> list[str]:
        return run_sql(wiki, sql).table.column_names

    # no spec kept: __time, then the columns in the order the segments first had them
    assert names("SELECT * FROM wiki") == ["__time", "page", "added", "user"]
    # Druid's order: __time, the dimensions in dimensionsSpec's order, then the metrics
    register_spec(wiki, ["user", "page"], [{"type": "doubleSum", "name": "added", "fieldName": "added"}])
    assert names("SELECT * FROM wiki") == names("SELECT * FROM druid.wiki") == ["__time", "user", "page", "added"]
    # a column the spec does not name (schema discovery, an older spec's) is a dimension after the named ones
    register_spec(wiki, ["user"], [{"type": "doubleSum", "name": "added", "fieldName": "added"}])
    assert names("SELECT * FROM wiki") == ["__time", "user", "page", "added"]
    register_spec(wiki, [], [{"type": "doubleSum", "name": "added", "fieldName": "added"}])
    assert names("SELECT * FROM wiki") == ["__time", "page", "user", "added"]
    # Druid's sql-metadata-tables.md example: ORDINAL_POSITION in that order, JDBC_TYPE from java.sql.Types
    example = ('SELECT "ORDINAL_POSITION", "COLUMN_NAME", "IS_NULLABLE", "DATA_TYPE", "JDBC_TYPE" '
               "FROM INFORMATION_SCHEMA.COLUMNS WHERE \"TABLE_NAME\" = 'wiki'")
    assert [tuple(r.values()) for r in run_sql(wiki, example).table.to_pylist()] == [
        (1, "__time", "NO", "TIMESTAMP", 93), (2, "page", "YES", "VARCHAR", 12), (3, "user", "YES", "VARCHAR", 12),
        (4, "added", "YES", "DOUBLE", 8)]
    columns = run_sql(wiki, "SELECT * FROM INFORMATION_SCHEMA.COLUMNS WHERE TABLE_NAME = 'wiki'").table
    assert columns.column_names == DRUID_COLUMNS
    assert columns.to_pylist()[0]["COLUMN_DEFAULT"] == "" and columns.to_pylist()[0]["TABLE_CATALOG"] == "druid"
    tables = run_sql(wiki, "SELECT TABLE_SCHEMA, TABLE_NAME, TABLE_TYPE FROM INFORMATION_SCHEMA.TABLES "
                           "ORDER BY 1 DESC, 2").table.to_pylist()
    assert [tuple(t.values()) for t in tables] == (
        [("sys", t, "SYSTEM_TABLE") for t in ("segments", "supervisors", "tasks")] + [("druid", "wiki", "TABLE")]
        + [("INFORMATION_SCHEMA", t, "SYSTEM_TABLE") for t in ("COLUMNS", "SCHEMATA", "TABLES")])
    # an unaliased expression is EXPR$ and its position, as Calcite names it; a column keeps its name
    assert names("SELECT count(*), page, sum(added) AS total, TIME_FLOOR(__time, 'PT1H') FROM wiki "
                 "GROUP BY 2, 4") == ["EXPR$0", "page", "total", "EXPR$3"]
    assert names("SELECT *, 1 FROM wiki") == ["__time", "page", "user", "added", "EXPR$4"]
    # a PIVOT's columns are its values, whatever the SELECT it is checked as (`page, count(*)`) names
    assert names("PIVOT (SELECT page FROM wiki WHERE page <> 'p2') ON page USING count(*)") == ["p0", "p1"]


@pytest.mark.parametrize("sql, message", [
    ("SELECT * FROM duckdb_settings()", "duckdb_settings(): not available here"),
    ("SELECT * FROM duckdb_extensions()", "duckdb_extensions(): not available here"),
    ("SELECT * FROM duckdb_settings", "no datasource named 'duckdb_settings'"),
    ("SELECT current_setting('temp_directory')", "current_setting(): not available here"),
    ("SELECT * FROM query('SELECT * FROM duckdb_settings()')", "query(): not available here"),
    ("SELECT * FROM read_csv('/etc/passwd')", "read_csv(): not available here"),
    ("SELECT * FROM read_parquet('/tmp/*.parquet')", "read_parquet(): not available here"),
    ("SELECT * FROM glob('*')", "glob(): not available here"),
    ("SELECT * FROM pragma_database_list", "no datasource named 'pragma_database_list'"),
    ("SELECT * FROM pragma_show('wiki')", "pragma_show(): not available here"),
    ("SELECT * FROM parquet_metadata('x.parquet')", "parquet_metadata(): not available here"),
    ("SELECT * FROM wiki, (SELECT * FROM duckdb_memory())", "duckdb_memory(): not available here"),
    ("SELECT * FROM pg_catalog.pg_settings", "no datasource named 'pg_catalog.pg_settings'"),
    ("SELECT * FROM information_schema.views", "no datasource named 'information_schema.views'"),
    ("SHOW temp_directory", "SHOW temp_directory is not available here"),
    ("PIVOT (SELECT * FROM read_csv('x.csv')) ON a USING count(*)", "read_csv(): not available here"),
    ("PIVOT (FROM duckdb_settings()) ON name USING first(value)", "duckdb_settings(): not available here"),
    ("PIVOT wiki ON page USING count(*) ORDER BY 1", "a PIVOT without IN (...) that could not be read"),
    ("SHOW databases", "SHOW databases is not available here"),
    ("SHOW ALL TABLES", "is not available here"),
    ("SELECT * FROM 'segments/*.parquet'", "no datasource named 'segments/*.parquet'"),
])
def test_sql_refuses_functions_that_reveal_the_host_in_one_line(wiki, sql, message):
    with pytest.raises(SqlError) as info:
        run_sql(wiki, sql)
    assert message in str(info.value) and "\n" not in str(info.value)
    assert "/root" not in str(info.value) and "/tmp/" not in str(info.value).replace("/tmp/*.parquet", "")


def test_sql_errors_name_only_datasources_the_caller_may_read(wiki_and_secret):
    with pytest.raises(SqlError) as info:
        run_sql(wiki_and_secret, "SELECT * FROM secre", may_read=not_secret)
    assert "no datasource named 'secre'; the datasources are: wiki" in str(info.value)
    assert "secret" not in str(info.value).replace("secre'", "")
    with pytest.raises(SqlError, match=r"no datasource named 'secre' \(did you mean 'secret'\?\)"):
        run_sql(wiki_and_secret, "SELECT * FROM secre")  # who may read every datasource is told
    # a reader of one datasource: any other name is refused alike, existing or not
    for name in ("secret", "secre", "nothing_like_it"):
        with pytest.raises(DatasourceNotReadable) as info:
            run_sql(wiki_and_secret, f"SELECT * FROM {name}", may_read=lambda n: n == "wiki")
        assert str(info.value).startswith(f"you may not read datasource '{name}'")
    with pytest.raises(SqlError) as info:  # DuckDB's own did-you-mean knows only the tables registered
        run_sql(wiki_and_secret, "SELECT * FROM wiki WHERE usr = 'x'", may_read=not_secret)
    assert "secret" not in str(info.value)


def test_sql_parameters_and_time_zone(wiki):
    assert run_sql(wiki, "SELECT count(*) AS n FROM wiki WHERE page = ? AND added >= ?",
                   parameters=["p0", 1]).table.to_pylist() == [{"n": 6}]
    paris = run_sql(wiki, "SELECT hour(min(__time)) AS h, hour(TIMESTAMPTZ '2026-11-22 10:00:00') AS lit FROM wiki",
                    time_zone="Europe/Paris").table.to_pylist()
    assert paris == [{"h": 11, "lit": 10}]  # 10:00 UTC is 11:00 in Paris; a literal reads as Paris time
    with pytest.raises(SqlError, match="unknown time zone 'Mars/Olympus'"):
        run_sql(wiki, "SELECT 1", time_zone="Mars/Olympus")
    with pytest.raises(SqlError, match="the query failed: .*parameters"):
        run_sql(wiki, "SELECT count(*) FROM wiki WHERE page = ?")


# rows stream at once, batch after batch, for hours (a tenth of a trillion): the limit stops it while they stream
ENDLESS_STREAM = "SELECT range AS i FROM range(1000000000000) WHERE hash(range) % 10 = 0"


def test_sql_stops_at_its_time_limit_while_results_stream_and_when_cancelled(wiki, tmp_path):
    from ingest_core.query.errors import SqlCancelledError, SqlTimeLimitError
    from ingest_core.query.limits import QueryCancel, SqlLimits

    for sql in (ENDLESS_STREAM, "SELECT count(*) FROM range(10000000000000) a"):
        with pytest.raises(SqlTimeLimitError, match="ran past its time limit of 0.5 s"):
            run_sql(wiki, sql, timeout_s=0.5, max_rows=None)
    cancel = QueryCancel()
    limits = SqlLimits(threads=1, memory_limit="200MB", temp_directory=str(tmp_path / "spill"))
    import threading

    started = threading.Timer(0.3, cancel.cancel)  # from another thread, as the REST API does
    started.start()
    with pytest.raises(SqlCancelledError, match="the query was cancelled: its client went away"):
        run_sql(wiki, "SELECT count(*) FROM range(10000000000000) a", timeout_s=None, limits=limits, cancel=cancel)
    started.join()
    cancelled_first = QueryCancel()
    cancelled_first.cancel()
    with pytest.raises(SqlCancelledError):
        run_sql(wiki, "SELECT 1", cancel=cancelled_first)


def test_sql_limits_bound_threads_memory_and_spill(tmp_path):
    from ingest_core.query.engine import _connect
    from ingest_core.query.limits import SqlLimits

    assert SqlLimits.from_env({}) == SqlLimits()
    limits = SqlLimits.from_env({"INGEST_SQL_THREADS": "1", "INGEST_SQL_MEMORY_LIMIT": "100MB",
                                 "INGEST_SQL_TEMP_DIRECTORY": str(tmp_path / "spill"),
                                 "INGEST_SQL_MAX_TEMP_SIZE": "50MB", "INGEST_SQL_MAX_TIMEOUT_S": "30",
                                 "INGEST_SQL_MAX_ROWS": "500", "INGEST_SQL_MAX_CONCURRENT": "2"})
    assert limits == SqlLimits(1, "100MB", str(tmp_path / "spill"), "50MB", 30.0, 500, 2)
    with pytest.raises(IngestError, match="INGEST_SQL_THREADS='many' is not a whole number"):
        SqlLimits.from_env({"INGEST_SQL_THREADS": "many"})
    with pytest.raises(IngestError, match="INGEST_SQL_MAX_RESULT_BYTES='lots' is not a size"):
        SqlLimits.from_env({"INGEST_SQL_MAX_RESULT_BYTES": "lots"})
    # a worker's memory: DuckDB's, the result four times over, and the rest of a Python process
    assert SqlLimits.from_env({"INGEST_SQL_MEMORY_LIMIT": "1.5GiB", "INGEST_SQL_MAX_RESULT_BYTES": "10 MB"}
                              ).worker_memory_bytes() == int(1.5 * 2**30) + 4 * 10**7 + 256 * 2**20
    con = _connect(limits)
    try:
        settings = dict(con.sql("SELECT name, value FROM duckdb_settings() WHERE name IN ('threads', "
                                "'memory_limit', 'temp_directory', 'max_temp_directory_size')").fetchall())
    finally:
        con.close()
    assert settings["threads"] == "1" and settings["temp_directory"] == str(tmp_path / "spill")
    assert settings["memory_limit"].startswith(("95", "100")) and settings["max_temp_directory_size"].startswith(
        ("47", "50"))
    assert _connect(SqlLimits()).sql("SELECT current_setting('temp_directory')").fetchall()[0][0].startswith(
        tempfile_dir())


def test_a_worker_is_killed_at_its_time_limit_and_leaves_no_process_or_spill_behind(wiki, store_url, tmp_path):
    """A query in a worker of the fork server (`service.sql_worker`), as the REST API runs one: killed at its time
    limit with its spill folder made (30 MB of DuckDB memory), which is removed; a result past its bytes; one past
    the worker's memory."""
    import functools
    import os
    import time

    from ingest_core.query.results import write_result
    from ingest_core.service.sql_api import SqlRequest
    from ingest_core.dev.process_tree import sql_worker_pids
    from ingest_core.service.sql_forkserver import ForkServer
    from ingest_core.service.sql_worker import SqlJob, SqlWorker
    from ingest_core.query.errors import SqlResultTooLargeError, SqlTimeLimitError
    from ingest_core.query.limits import SqlLimits

    spill = tmp_path / "spill"
    limits = SqlLimits(threads=1, memory_limit="30MB", temp_directory=str(spill), max_result_bytes="1MB")

    def run(sql: str, timeout_s: float = 60) -> bytes:
        job = SqlJob(store_url, None, sql, functools.partial(write_result, fmt=SqlRequest(sql).output),
                     timeout_s=timeout_s, max_rows=100_000, limits=limits, asks=True)
        with SqlWorker(ForkServer.shared()).run(job, may_read=lambda name: name == "wiki") as result:
            return result.read()

    assert json.loads(run("SELECT count(*) AS n FROM wiki")) == [{"n": 30}]
    with pytest.raises(DatasourceNotReadable):  # the server's side answers the worker's question
        run("SELECT * FROM secret")
    with pytest.raises(SqlTimeLimitError, match="ran past its time limit of 1 s"):
        run("SELECT count(*) FROM (SELECT DISTINCT range::VARCHAR || 'spilled' FROM range(1000000000000))", 1)
    deadline = time.monotonic() + 60  # a bound on the wait: the fork server reaps within REAP_EVERY_S
    while sql_worker_pids(os.getpid()) or any(spill.iterdir()):
        assert time.monotonic() < deadline, (sql_worker_pids(os.getpid()), list(spill.iterdir()))
        time.sleep(0.1)
    with pytest.raises(SqlResultTooLargeError, match="the result is larger than 1 MB, what a response may hold"):
        run("SELECT range FROM range(100000)")  # 1.8 MB of JSON
    with pytest.raises(SqlError, match="^the query failed: Out of Memory Error"):  # ~3 GB of strings
        run("SELECT length(string_agg(repeat('x', 1000000), '')) AS n FROM range(3000)")


def tempfile_dir() -> str:
    import tempfile

    return tempfile.gettempdir()


def test_sql_nested_past_pythons_recursion_or_in_a_zone_folder_is_a_one_line_error(wiki):
    for sql, says in ((f"SELECT {'abs(' * 900}1{')' * 900} AS x FROM wiki", "the query nests too deeply"),
                      (f"SELECT {'(' * 3000}1{')' * 3000} AS x", "Max expression depth limit"),
                      (f"SELECT TIME_FLOOR(__time, 'PT1H'), {'(' * 3000}1{')' * 3000} FROM wiki", "nests too deeply"),
                      ("EXPLAIN PLAN FOR SELECT * FROM wiki", "EXPLAIN PLAN FOR is not supported here")):
        with pytest.raises(SqlError) as info:
            run_sql(wiki, sql)
        assert says in str(info.value) and "\n" not in str(info.value), (sql[:30], str(info.value))
    for zone in ("Etc", "x" * 300):  # a folder of zones, a name too long for a file: unknown zones, not OSErrors
        with pytest.raises(SqlError, match="unknown time zone"):
            run_sql(wiki, "SELECT 1", time_zone=zone)
