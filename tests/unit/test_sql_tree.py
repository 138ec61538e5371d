"""Which tables a query reads, from DuckDB's parse tree (`query.tree`): CTE scoping as SQL has it, the
functions it calls, the listings it asks for. DuckDB parses; nothing runs."""

from __future__ import annotations

import json

import duckdb
import pytest

from ingest_core.query.tree import SHOW_TABLES, TreeError, read_tree


def tree(sql: str) -> dict:
    con = duckdb.connect(":memory:")
    try:
        return json.loads(con.execute("SELECT json_serialize_sql(?)", [sql]).fetchall()[0][0])
    finally:
        con.close()


def tables(sql: str) -> list[str]:
    return read_tree(tree(sql)).datasource_names()


@pytest.mark.parametrize("sql, names", [
    ("SELECT * FROM wiki", ["wiki"]),
    ("WITH wiki AS (SELECT * FROM wiki) SELECT * FROM wiki", ["wiki"]),  # its own body reads the datasource
    ("WITH a AS (SELECT 1) SELECT * FROM a", []),
    ("WITH a AS (SELECT 1) SELECT * FROM (SELECT * FROM a) WHERE 1 IN (SELECT * FROM a)", []),  # seen below
    ("SELECT * FROM (WITH a AS (SELECT 1) SELECT * FROM a), a", ["a"]),  # not seen outside its WITH
    ("WITH a AS (SELECT * FROM b), b AS (SELECT 1) SELECT * FROM a, b", ["b"]),  # a CTE sees only those before
    ("WITH a AS (SELECT 1), b AS (SELECT * FROM a) SELECT * FROM b", []),
    ("WITH RECURSIVE r AS (SELECT 1 AS x UNION ALL SELECT x + 1 FROM r WHERE x < 3) SELECT * FROM r", []),
    ("WITH A AS (SELECT 1) SELECT * FROM a", []),  # identifiers are case-insensitive, as DuckDB binds them
    ("SELECT * FROM druid.wiki JOIN \"druid\".\"users\" USING (u)", ["users", "wiki"]),
    ("SELECT * FROM main.wiki, other.t, c.s.t", ["c.s.t", "other.t", "wiki"]),
    ("DESCRIBE wiki", ["wiki"]),
    ("SELECT (SELECT max(x) FROM hidden) FROM wiki", ["hidden", "wiki"]),
])
def test_tables_read_with_sql_scoping(sql, names):
    assert tables(sql) == names


def test_functions_and_listings():
    read = read_tree(tree("SELECT upper(s), current_setting('threads') FROM range(3) r, read_csv('x') c, "
                          "duckdb_settings() d"))
    assert read.refused_functions() == ["current_setting", "duckdb_settings", "read_csv"]
    assert read_tree(tree("SELECT * FROM range(3), unnest([1]), generate_series(1, 2)")).refused_functions() == []
    t = tree("SELECT * FROM (SHOW TABLES) s, INFORMATION_SCHEMA.COLUMNS c")
    read = read_tree(t)
    assert read.catalog == {"show_tables", "columns"} and read.rewritten and read.datasource_names() == []
    assert SHOW_TABLES in json.dumps(t) and "__ingest_information_schema_columns" in json.dumps(t)
    with pytest.raises(TreeError, match="SHOW threads is not available here"):
        read_tree(tree("SHOW threads"))


@pytest.mark.parametrize("sql, duckdb_names, druid_names", [
    # Calcite's names, as Druid answers them: an item with no alias that is not a column is EXPR$ and its
    # position in the result (CalciteQueryTest: `SELECT JSON_VALUE_ANY(..), SUM(cnt)` is EXPR$0, EXPR$1)
    ("SELECT count(*) FROM t", ["count_star()"], ["EXPR$0"]),
    ("SELECT page, sum(added), 1, added AS a, t.user FROM t", ["page", "sum(added)", "1", "a", "user"],
     ["page", "EXPR$1", "EXPR$2", "a", "user"]),
    # a star stands for as many columns as the result has beyond the other items
    ("SELECT *, count(*) OVER () FROM t", ["__time", "page", "count_star() OVER ()"], ["__time", "page", "EXPR$2"]),
    ("SELECT upper(page), * FROM t", ["upper(page)", "__time", "page"], ["EXPR$0", "__time", "page"]),
    # a UNION is named by its first SELECT
    ("SELECT 1 UNION ALL SELECT 2 AS two", ["1"], ["EXPR$0"]),
    ("WITH q AS (SELECT 1 AS a) SELECT a + 1, a FROM q", ["(a + 1)", "a"], ["EXPR$0", "a"]),
    # two stars: the items between them have no known position, and keep their names
    ("SELECT 1, *, 2, *, 3 FROM t", ["1", "x", "2", "x", "3"], ["EXPR$0", "x", "2", "x", "EXPR$4"]),
    ("DESCRIBE t", ["column_name"], ["column_name"]),
])
def test_unaliased_expressions_are_named_as_druid_names_them(sql, duckdb_names, druid_names):
    assert read_tree(tree(sql)).column_names(duckdb_names) == druid_names
