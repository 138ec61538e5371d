"""SQL over datasources: DuckDB, embedded, reading the visible segments of each datasource a query names.

    result = run_sql(MetadataStore(url), 'SELECT channel, SUM(added) FROM wikipedia GROUP BY 1')
    result.table                       # pyarrow.Table; __time is a TIMESTAMP WITH TIME ZONE (UTC)

Each datasource the query names is a table of that name, also as `druid.<name>` (Druid's schema). Its visible set
(published, used, not overshadowed) is read once, before the query runs, so one query never sees a mix of two
publishes. Segments written with fewer columns read those columns as null, and a column whose type widened across
segments reads as the wider type. `SHOW TABLES` and Druid's `INFORMATION_SCHEMA.SCHEMATA` / `TABLES` / `COLUMNS`
list the datasources the caller may read, and nothing else; Druid's `sys.segments`, `sys.tasks` and
`sys.supervisors` (`query.system_tables`) hold their rows only.

The query runs in a DuckDB that cannot touch anything but those segments: one read-only statement (a SELECT,
PIVOT, DESCRIBE or SHOW TABLES), no file, network or extension access (`enable_external_access` off, the
configuration locked), no function that reads the host's files or settings (`query.tree`), a row limit and a time
limit. A server runs it within `SqlLimits` (threads, memory, spill, result bytes), in a worker process of its own
(`service.sql_worker`), killed at its time limit and when its client goes away. That is what makes it safe behind
the REST API's read permission.

Which tables a query reads comes from DuckDB's own parse tree (`query.tree`), with CTE scoping as SQL has it.
Its result is Druid's shape: a datasource's columns in Druid's order (`query.columns`), an unaliased expression
named `EXPR$n` (`QueryTree.column_names`).
"""

from __future__ import annotations

import difflib
import json
import os
import threading
import time
import zoneinfo
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from ingest_core.core.timeline import visible_segments
from ingest_core.query import druid_sql
from ingest_core.query.catalog import readable, register_catalog
from ingest_core.query.columns import spec_columns
from ingest_core.query.datasets import segments_dataset
from ingest_core.query.errors import (DatasourceNotReadable, DruidSqlError, SqlError, SqlResultTooLargeError,
                                      stopped_error)
from ingest_core.query.limits import DEFAULT_MAX_ROWS, DEFAULT_TIMEOUT_S, TIME_LIMIT, QueryCancel, SqlLimits
from ingest_core.query.system_tables import Supervisors, register_system_tables
from ingest_core.query.tree import DRUID_SCHEMA, QueryTree, TreeError, read_tree
from ingest_core.store.metadata import MetadataStore

READ_ONLY = ("SELECT",)
INTERRUPT_EVERY_S = 0.05  # a stopped query is interrupted again this often until it ends (an interrupt that lands
# between two of DuckDB's steps is forgotten): the CPU it uses ends within about that after the stop


@dataclass(frozen=True)
class SqlResult:
    table: pa.Table
    truncated: bool  # more rows than max_rows: the first max_rows are in `table`
    segments: dict[str, int] = field(default_factory=dict)  # per datasource read: the visible segments


def run_sql(store: MetadataStore, sql: str, *, may_read: Callable[[str], bool] | None = None,
            max_rows: int | None = DEFAULT_MAX_ROWS, timeout_s: float | None = DEFAULT_TIMEOUT_S,
            parameters: Sequence[Any] = (), time_zone: str = "UTC", limits: SqlLimits | None = None,
            cancel: QueryCancel | None = None, max_bytes: int | None = None,
            supervisors: Supervisors | None = None) -> SqlResult:
    """Run one read-only statement over the datasources it names. `may_read(name)`: whether the caller may
    read a datasource (None: every one); errors name no other, and the catalog and the sys tables list no other.
    `supervisors`: the supervisors of datasources, with their state and health (`sys.supervisors`). `parameters`
    bind the query's `?` in order; `time_zone` is the session's (literals, date parts, how timestamps read). Rows past `max_bytes` of Arrow's
    memory end the query (`SqlResultTooLargeError`) before more are fetched."""
    cancel = cancel or QueryCancel()
    con = _connect(limits)
    done = threading.Event()
    deadline = time.monotonic() + timeout_s if timeout_s else None
    watchdog = threading.Thread(target=_watch, args=(con, cancel, deadline, done), daemon=True,
                                name="sql-watchdog")
    watchdog.start()
    try:
        return _run(con, store, sql, may_read, max_rows, parameters, time_zone, cancel, max_bytes, supervisors)
    except Exception as exc:  # whatever a stop interrupted (DuckDB's InterruptException, or an OSError mid-stream)
        if cancel.reason is not None:
            raise stopped_error(cancel.reason, timeout_s) from exc
        raise
    finally:
        done.set()
        watchdog.join()
        con.close()


def _watch(con, cancel: QueryCancel, deadline: float | None, done: threading.Event) -> None:
    while not done.wait(INTERRUPT_EVERY_S):
        if cancel.reason is None and deadline is not None and time.monotonic() >= deadline:
            cancel.cancel(TIME_LIMIT)
        if cancel.reason is not None:
            con.interrupt()


def _connect(limits: SqlLimits | None):
    """A DuckDB of its own per query: no file, network or extension access; `limits` if given."""
    import duckdb

    config = {"enable_external_access": False, "autoinstall_known_extensions": False,
              "autoload_known_extensions": False, **(limits.duckdb_config() if limits else {})}
    if limits:
        os.makedirs(config["temp_directory"], mode=0o700, exist_ok=True)
    con = duckdb.connect(":memory:", config=config)
    con.execute("SET enable_progress_bar = false")  # no bar in a server's log
    con.execute("SET python_enable_replacements = false")  # a table name never reads a Python variable of ours
    return con


def _run(con, store: MetadataStore, sql: str, may_read: Callable[[str], bool] | None, max_rows: int | None,
         parameters: Sequence[Any], time_zone: str, cancel: QueryCancel, max_bytes: int | None,
         supervisors: Supervisors | None) -> SqlResult:
    import duckdb

    segments: dict[str, int] = {}
    try:
        zone = _time_zone(time_zone)
        checked, runs = _one_read_only_statement(con, _druid_to_duckdb(sql, zone))
        tree, text = _parse(con, checked, runs)
        names = _datasources_named(store, tree, may_read)
        for name in names:
            visible = visible_segments(store.segment_records.of(name, used_only=True))
            _register(con, name, segments_dataset(visible, spec_columns(store, name)))
            segments[name] = len(visible)
        if tree.catalog:
            register_catalog(con, store, tree, may_read)
        if tree.system:
            register_system_tables(con, store, tree.system, readable(store, may_read), supervisors)
        druid_sql.register(con, text)  # the macros and sketch functions the Druid SQL calls
        con.execute(f"SET TimeZone = '{zone}'")
        con.execute("SET lock_configuration = true")  # the query cannot turn file access back on
        if cancel.reason is not None:
            raise InterruptedError  # stopped before it ran: `run_sql` says why
        table, truncated = _fetch(con, text, parameters, max_rows, max_bytes)
        return SqlResult(table.rename_columns(tree.column_names(table.column_names)), truncated, segments)
    except duckdb.Error as exc:
        if cancel.reason is not None:
            raise
        empty = sorted(name for name, count in segments.items() if not count)
        hint = (f" ({', '.join(repr(n) for n in empty)} ha{'ve' if len(empty) > 1 else 's'} nothing published "
                f"yet: its only column is __time)" if empty and isinstance(exc, duckdb.BinderException) else "")
        raise SqlError(f"the query failed: {_first_line(exc)}{hint}") from exc


def _druid_to_duckdb(sql: str, zone: str) -> str:
    try:
        return druid_sql.to_duckdb(sql, zone)
    except DruidSqlError as exc:
        raise SqlError(str(exc)) from exc


def _time_zone(name: str) -> str:
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a folder ("Etc"), a long name
        raise SqlError(f"unknown time zone {name!r}: an IANA name such as 'UTC' or 'America/Los_Angeles'") from None
    return name


def _one_read_only_statement(con, sql: str) -> tuple[str, str]:
    """The one statement of `sql`: the SQL whose tree is checked, and the SQL that runs (the same but for a
    PIVOT that finds its columns first)."""
    import duckdb

    try:
        statements = con.extract_statements(sql)
    except duckdb.Error as exc:
        raise SqlError(f"the query does not parse: {_first_line(exc)}") from exc
    if len(statements) != 1:
        raise SqlError(f"one statement per query, not {len(statements)}")
    (statement,) = statements
    kind = statement.type.name
    if kind == "MULTI" and "PIVOT" in statement.query.upper():
        return _pivot(statement.query)
    if kind not in READ_ONLY:
        raise SqlError(f"only a read-only query (SELECT) runs here, not {kind}")
    return statement.query, statement.query


def _pivot(sql: str) -> tuple[str, str]:
    """A PIVOT without IN (...): DuckDB reads its column values with a statement of its own first, which has no
    parse tree to check. Read by sqlglot instead: what is checked is the SELECT of the same source, ON, USING and
    GROUP BY, and what runs is sqlglot's SQL of that same tree, so the two cannot differ."""
    import sqlglot
    from sqlglot import exp

    hint = "name its values: PIVOT t ON col IN ('a', 'b') USING ..."
    try:
        with druid_sql.quiet_sqlglot():
            tree = sqlglot.parse_one(sql, read="duckdb")
    except (sqlglot.errors.ParseError, RecursionError):
        raise SqlError(f"a PIVOT without IN (...) that could not be read: {hint}") from None
    if not isinstance(tree, exp.Pivot) or not tree.args.get("using"):
        raise SqlError(f"a PIVOT without IN (...) runs only as a statement of its own: {hint}")
    group = tree.args.get("group")
    check = exp.select(*(e.copy() for e in tree.expressions), *(e.copy() for e in tree.args["using"]),
                       *(e.copy() for e in (group.expressions if group else []))).from_(tree.this.copy())
    if tree.args.get("with"):
        check.set("with", tree.args["with"].copy())

    def reads(node: exp.Expression) -> set[str]:  # every table, function and subquery in a tree
        return {n.sql("duckdb") for n in node.find_all(exp.Table, exp.Func, exp.Subquery, exp.Query)} - {
            node.sql("duckdb")}

    if reads(tree) - reads(check):  # a part of the PIVOT that the check would not see: never run unchecked
        raise SqlError(f"a PIVOT without IN (...) with more than a source, ON, USING and GROUP BY: {hint}")
    return check.sql("duckdb"), tree.sql("duckdb")


def _parse(con, sql: str, runs: str) -> tuple[QueryTree, str]:
    """The tree of `sql` and the SQL to run: `runs`, or the tree's own SQL where it was rewritten (a listing)."""
    try:  # DuckDB's tree of a query nested a few hundred levels is deeper than Python's recursion goes
        tree = json.loads(con.execute("SELECT json_serialize_sql(?)", [sql]).fetchall()[0][0])
        if tree.get("error"):
            raise SqlError(f"the query does not parse: {tree.get('error_message')}")
        read = read_tree(tree)
    except TreeError as exc:
        raise SqlError(str(exc)) from None
    except RecursionError:
        raise SqlError("the query nests too deeply (calls, subqueries or operators within each other): nest fewer "
                       "levels, or name the inner parts in a WITH") from None
    refused = read.refused_functions()
    if refused:
        raise SqlError(f"{', '.join(f + '()' for f in refused)}: not available here (it reads the server's files, "
                       "settings or SQL of its own); a query reads datasources, and makes rows with range(), "
                       "generate_series() and unnest()")
    if runs != sql:  # a PIVOT checked as a SELECT: its columns are the values found, not that SELECT's items
        read.select = ()
    if read.rewritten:
        if runs != sql:
            raise SqlError("a PIVOT without IN (...) cannot read INFORMATION_SCHEMA, SHOW TABLES or a sys table: name its values")
        runs = con.execute("SELECT json_deserialize_sql(?)", [json.dumps(tree)]).fetchall()[0][0]
    return read, runs


def _datasources_named(store: MetadataStore, tree: QueryTree, may_read: Callable[[str], bool] | None) -> list[str]:
    """The datasources the query reads: every table it names must be one the caller may read. A name the
    caller may not read is refused alike whether it exists or not, and hints name readable datasources only."""
    names = tree.datasource_names()
    if may_read is not None:
        refused = [n for n in names if not may_read(n)]
        if refused:
            raise DatasourceNotReadable(refused)
    known = readable(store, may_read)
    unknown = [t for t in names if t not in known]
    if unknown:
        hints = [f"{t!r}" + (f" (did you mean {close[0]!r}?)" if (close := difflib.get_close_matches(
            t, known, n=1)) else "") for t in unknown]
        raise SqlError(f"no datasource named {', '.join(hints)}; the datasources are: "
                       f"{', '.join(known) or 'none yet'}")
    return names


def _register(con, name: str, data: Any) -> None:
    """`name` (and `druid.name`) as a table of `data`."""
    con.register(name, data)
    con.execute(f"CREATE SCHEMA IF NOT EXISTS {DRUID_SCHEMA}")
    con.execute(f"CREATE VIEW {DRUID_SCHEMA}.{_quoted(name)} AS SELECT * FROM temp.main.{_quoted(name)}")


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _fetch(con, sql: str, parameters: Sequence[Any], max_rows: int | None,
           max_bytes: int | None) -> tuple[pa.Table, bool]:
    reader = con.sql(sql, params=list(parameters) or None).to_arrow_reader(
        min(max_rows + 1, 100_000) if max_rows else 100_000)
    batches, rows, size = [], 0, 0
    for batch in reader:  # an interrupt while results stream ends here too (DuckDB raises an OSError)
        batches.append(batch)
        rows += batch.num_rows
        size += batch.nbytes
        if max_bytes is not None and size > max_bytes:
            raise SqlResultTooLargeError.of(None, max_bytes)
        if max_rows is not None and rows > max_rows:
            break
    table = pa.Table.from_batches(batches, schema=reader.schema)
    if max_rows is not None and table.num_rows > max_rows:
        return table.slice(0, max_rows), True
    return table, False


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
