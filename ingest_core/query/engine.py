"""SQL over datasources: DuckDB, embedded, reading the visible segments of each datasource a query names.

    result = run_sql(MetadataStore(url), 'SELECT channel, SUM(added) FROM wikipedia GROUP BY 1')
    result.table                       # pyarrow.Table; __time is a TIMESTAMP WITH TIME ZONE (UTC)

Each datasource the query names is a table of that name, also as `druid.<name>` (Druid's schema). Its visible set
(published, used, not overshadowed) is read once, before the query runs, so one query never sees a mix of two
publishes. Segments written with fewer columns read those columns as null, and a column whose type widened across
segments reads as the wider type. `SHOW TABLES` and Druid's `INFORMATION_SCHEMA.SCHEMATA` / `TABLES` / `COLUMNS`
list the datasources the caller may read, and nothing else.

The query runs in a DuckDB that cannot touch anything but those segments: one read-only statement (a SELECT,
PIVOT, DESCRIBE or SHOW TABLES), no file, network or extension access (`enable_external_access` off, the
configuration locked), no function that reads the host's files or settings (`query.tree`), a row limit and a time
limit. A server runs it within `SqlLimits` (threads, memory, spill, result bytes), in a worker process of its own
(`service.sql_worker`), killed at its time limit and when its client goes away. That is what makes it safe behind
the REST API's read permission.

Which tables a query reads comes from DuckDB's own parse tree (`query.tree`), with CTE scoping as SQL has it.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import tempfile
import threading
import time
import zoneinfo
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.dataset as ds

from ingest_core.core.errors import IngestError
from ingest_core.core.timeline import visible_segments
from ingest_core.executor.discovery import arrow_schema, castable, conform
from ingest_core.handover import deep_storage
from ingest_core.query import druid_sql
from ingest_core.store.metadata import MetadataStore
from ingest_core.store.records import SegmentRecord
from ingest_core.store.segment_schema import read_segment, typed
from ingest_core.query.tree import CATALOG_TABLES, DRUID_SCHEMA, SHOW_TABLES, QueryTree, TreeError, read_tree

DEFAULT_MAX_ROWS = 100_000
DEFAULT_TIMEOUT_S = 300.0
READ_ONLY = ("SELECT",)
EMPTY = pa.schema([("__time", pa.timestamp("ms", tz="UTC"))])  # a datasource with nothing published yet
# why a query was stopped (`QueryCancel.reason`)
TIME_LIMIT, CLIENT_GONE, CANCELLED = "time limit", "its client went away", "cancelled by its sqlQueryId"
WORKER_OVERHEAD = 256 * 2**20  # bytes a query's worker holds besides DuckDB's and the result's (`SqlLimits`)
UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "KIB": 2**10, "MIB": 2**20,
         "GIB": 2**30, "TIB": 2**40}  # DuckDB's: KB, MB, GB in powers of 1000; KiB, MiB, GiB in powers of 1024
INTERRUPT_EVERY_S = 0.05  # a stopped query is interrupted again this often until it ends (an interrupt that lands
# between two of DuckDB's steps is forgotten): the CPU it uses ends within about that after the stop


class SqlError(IngestError):
    """A query that cannot run: not one read-only statement, a table that is no datasource, DuckDB's own
    error (syntax, binding, types), or past its time limit."""

    code = "INGEST_SQL_INVALID"


class SqlTimeLimitError(SqlError):
    """The query ran past its time limit (Druid's "Query timeout")."""

    code = "INGEST_SQL_TIMEOUT"


class SqlCancelledError(SqlError):
    """The query was stopped from outside: its client went away (Druid's "Query cancelled")."""

    code = "INGEST_SQL_CANCELLED"


class SqlResultTooLargeError(SqlError):
    """The result is larger than a response may hold (`SqlLimits.max_result_bytes`)."""

    code = "INGEST_SQL_RESULT_TOO_LARGE"

    @classmethod
    def of(cls, size: int | None, limit: int) -> "SqlResultTooLargeError":
        return cls(f"the result is larger than {bytes_text(limit)}, what a response may hold"
                   + (f" ({bytes_text(size)})" if size else "")
                   + " (INGEST_SQL_MAX_RESULT_BYTES): ask for fewer rows (LIMIT) or columns")


class DatasourceNotReadable(SqlError):
    """A datasource the query names that the caller may not read (the REST API's DAG permissions)."""

    code = "INGEST_SQL_DATASOURCE_NOT_READABLE"

    def __init__(self, names: list[str]):
        self.names = names
        super().__init__(f"you may not read datasource{'s' if len(names) > 1 else ''} "
                         f"{', '.join(repr(n) for n in names)}: ask for read access to the DAG(s) of that name")


def size_bytes(text: str) -> int | None:
    """A size as DuckDB reads one ('1GB', '500 MiB', '64MB'), in bytes; None if it is not one."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", text)
    if not match or match.group(2).upper() not in UNITS:
        return None
    return int(float(match.group(1)) * UNITS[match.group(2).upper()])


def bytes_text(n: int) -> str:
    return f"{n / 10**9:g} GB" if n >= 10**9 else f"{n / 10**6:.4g} MB"


@dataclass(frozen=True)
class SqlLimits:
    """What one query may take of a server (DuckDB's settings of the same names); the REST API's come from the
    environment (`from_env`), `ingest query` runs with DuckDB's defaults (the machine is the user's own)."""

    threads: int = 2
    memory_limit: str = "1GB"
    temp_directory: str = ""  # where a query spills past memory_limit; "" a folder under the system's temp folder
    max_temp_directory_size: str = "4GB"
    max_timeout_s: float = DEFAULT_TIMEOUT_S  # a request's own time limit (Druid's context.timeout) is capped here
    max_rows: int = DEFAULT_MAX_ROWS  # rows a response holds at most (the rest are cut, and the response says so)
    max_concurrent: int = 4  # queries a server runs at once; one more is refused (Druid's 429), not queued
    max_result_bytes: str = "64MB"  # what a response body may hold; a larger result is an error

    ENV = {"threads": "INGEST_SQL_THREADS", "memory_limit": "INGEST_SQL_MEMORY_LIMIT",
           "temp_directory": "INGEST_SQL_TEMP_DIRECTORY", "max_temp_directory_size": "INGEST_SQL_MAX_TEMP_SIZE",
           "max_timeout_s": "INGEST_SQL_MAX_TIMEOUT_S", "max_rows": "INGEST_SQL_MAX_ROWS",
           "max_concurrent": "INGEST_SQL_MAX_CONCURRENT", "max_result_bytes": "INGEST_SQL_MAX_RESULT_BYTES"}

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> "SqlLimits":
        """The limits the environment sets (`ENV`), the defaults for the rest. A value that is not of its type
        is an `IngestError` (the server's configuration, not the query, is wrong)."""
        env = dict(os.environ if env is None else env)
        values: dict[str, Any] = {}
        for name, var in cls.ENV.items():
            if env.get(var):
                kind = type(getattr(cls, name))
                try:
                    values[name] = kind(env[var])
                except ValueError:
                    raise IngestError(f"{var}={env[var]!r} is not {'a whole number' if kind is int else 'a number'}"
                                      if kind is not str else f"{var}={env[var]!r}") from None
        for name in ("memory_limit", "max_result_bytes"):
            if name in values and size_bytes(values[name]) is None:
                raise IngestError(f"{cls.ENV[name]}={values[name]!r} is not a size: a number and a unit, such "
                                  "as 500MB or 2GB")
        return cls(**values)

    def spill_root(self) -> str:
        return self.temp_directory or os.path.join(tempfile.gettempdir(), f"ingest-sql-spill-{os.getuid()}")

    def max_result_bytes_int(self) -> int:
        return size_bytes(self.max_result_bytes) or 0

    def worker_memory_bytes(self) -> int:
        """What a query's worker process (`service.sql_worker`) may hold beyond its start: DuckDB's memory_limit,
        the result four times over (Arrow's, Python's rows, the body, and its bytes) and WORKER_OVERHEAD (Python's
        objects, threads' stacks, Arrow's reads of the segments)."""
        return (size_bytes(self.memory_limit) or 0) + 4 * self.max_result_bytes_int() + WORKER_OVERHEAD

    def duckdb_config(self) -> dict[str, Any]:
        return {"threads": self.threads, "memory_limit": self.memory_limit, "temp_directory": self.spill_root(),
                "max_temp_directory_size": self.max_temp_directory_size}


class QueryCancel:
    """Stops a query from another thread (the REST API's, when the client goes away): `cancel()` before or
    while `run_sql` runs it."""

    def __init__(self) -> None:
        self.reason: str | None = None

    def cancel(self, reason: str = CLIENT_GONE) -> None:
        if self.reason is None:
            self.reason = reason


@dataclass(frozen=True)
class SqlResult:
    table: pa.Table
    truncated: bool  # more rows than max_rows: the first max_rows are in `table`
    segments: dict[str, int] = field(default_factory=dict)  # per datasource read: the visible segments


def run_sql(store: MetadataStore, sql: str, *, may_read: Callable[[str], bool] | None = None,
            max_rows: int | None = DEFAULT_MAX_ROWS, timeout_s: float | None = DEFAULT_TIMEOUT_S,
            parameters: Sequence[Any] = (), time_zone: str = "UTC", limits: SqlLimits | None = None,
            cancel: QueryCancel | None = None, max_bytes: int | None = None) -> SqlResult:
    """Run one read-only statement over the datasources it names. `may_read(name)`: whether the caller may
    read a datasource (None: every one); errors name no other. `parameters` bind the query's `?` in order;
    `time_zone` is the session's (literals, date parts, how timestamps read). Rows past `max_bytes` of Arrow's
    memory end the query (`SqlResultTooLargeError`) before more are fetched."""
    cancel = cancel or QueryCancel()
    con = _connect(limits)
    done = threading.Event()
    deadline = time.monotonic() + timeout_s if timeout_s else None
    watchdog = threading.Thread(target=_watch, args=(con, cancel, deadline, done), daemon=True,
                                name="sql-watchdog")
    watchdog.start()
    try:
        return _run(con, store, sql, may_read, max_rows, parameters, time_zone, cancel, max_bytes)
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


def stopped_error(reason: str, timeout_s: float | None) -> SqlError:
    """The error of a query stopped for `reason` (`QueryCancel.reason`)."""
    if reason == TIME_LIMIT:
        return SqlTimeLimitError(f"the query ran past its time limit of {timeout_s:g} s and was stopped")
    return SqlCancelledError(f"the query was cancelled: {reason}")


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
         parameters: Sequence[Any], time_zone: str, cancel: QueryCancel, max_bytes: int | None) -> SqlResult:
    import duckdb

    segments: dict[str, int] = {}
    try:
        zone = _time_zone(time_zone)
        checked, runs = _one_read_only_statement(con, _druid_to_duckdb(sql, zone))
        tree, text = _parse(con, checked, runs)
        names = _datasources_named(store, tree, may_read)
        for name in names:
            visible = visible_segments(store.segment_records.of(name, used_only=True))
            _register(con, name, _dataset(visible))
            segments[name] = len(visible)
        if tree.catalog:
            _register_catalog(con, store, tree, may_read)
        druid_sql.register(con, text)  # the macros and sketch functions the Druid SQL calls
        con.execute(f"SET TimeZone = '{zone}'")
        con.execute("SET lock_configuration = true")  # the query cannot turn file access back on
        if cancel.reason is not None:
            raise InterruptedError  # stopped before it ran: `run_sql` says why
        table, truncated = _fetch(con, text, parameters, max_rows, max_bytes)
        return SqlResult(table, truncated, segments)
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
    except druid_sql.DruidSqlError as exc:
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
    if read.rewritten:
        if runs != sql:
            raise SqlError("a PIVOT without IN (...) cannot read INFORMATION_SCHEMA or SHOW TABLES: name its values")
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
    known = _listed(store, may_read)
    unknown = [t for t in names if t not in known]
    if unknown:
        hints = [f"{t!r}" + (f" (did you mean {close[0]!r}?)" if (close := difflib.get_close_matches(
            t, known, n=1)) else "") for t in unknown]
        raise SqlError(f"no datasource named {', '.join(hints)}; the datasources are: "
                       f"{', '.join(known) or 'none yet'}")
    return names


def _listed(store: MetadataStore, may_read: Callable[[str], bool] | None) -> list[str]:
    """The datasources the caller may read, by name."""
    names = sorted(d["name"] for d in store.datasources.all())
    return [n for n in names if may_read is None or may_read(n)]


def _register(con, name: str, data: Any) -> None:
    """`name` (and `druid.name`) as a table of `data`."""
    con.register(name, data)
    con.execute(f"CREATE SCHEMA IF NOT EXISTS {DRUID_SCHEMA}")
    con.execute(f"CREATE VIEW {DRUID_SCHEMA}.{_quoted(name)} AS SELECT * FROM temp.main.{_quoted(name)}")


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _register_catalog(con, store: MetadataStore, tree: QueryTree, may_read: Callable[[str], bool] | None) -> None:
    """The listings the query asks for, of the datasources the caller may read: SHOW TABLES (`name`) and Druid's
    INFORMATION_SCHEMA tables, with Druid's columns (TABLE_CATALOG and TABLE_SCHEMA 'druid', ...)."""
    names = _listed(store, may_read)
    n = len(names)
    con.register(SHOW_TABLES, _strings({"name": names}))
    unset = ("SCHEMA_OWNER", "DEFAULT_CHARACTER_SET_CATALOG", "DEFAULT_CHARACTER_SET_SCHEMA",
             "DEFAULT_CHARACTER_SET_NAME", "SQL_PATH")
    con.register(CATALOG_TABLES["schemata"], _strings({"CATALOG_NAME": ["druid"] * 2, "SCHEMA_NAME": [
        DRUID_SCHEMA, "INFORMATION_SCHEMA"], **{c: [None] * 2 for c in unset}}))
    con.register(CATALOG_TABLES["tables"], _strings({
        "TABLE_CATALOG": ["druid"] * n, "TABLE_SCHEMA": [DRUID_SCHEMA] * n, "TABLE_NAME": names,
        "TABLE_TYPE": ["TABLE"] * n, "IS_JOINABLE": ["NO"] * n, "IS_BROADCAST": ["NO"] * n}))
    columns: list[tuple[str, str, int, str]] = []  # table, column, position, type
    if "columns" in tree.catalog:  # each datasource's merged schema (its segment records, not its files)
        for name in names:
            visible = visible_segments(store.segment_records.of(name, used_only=True))
            types = typed(visible)[1] if visible else {"__time": "TIMESTAMP"}
            columns += [(name, c, i, druid_sql_type(t)) for i, (c, t) in enumerate(types.items(), 1)]
    table, column, position, kind = (list(x) for x in zip(*columns)) if columns else ([], [], [], [])
    rows = len(columns)
    con.register(CATALOG_TABLES["columns"], _strings({
        "TABLE_CATALOG": ["druid"] * rows, "TABLE_SCHEMA": [DRUID_SCHEMA] * rows, "TABLE_NAME": table,
        "COLUMN_NAME": column}).append_column("ORDINAL_POSITION", pa.array(position, pa.int64())).append_column(
        "COLUMN_DEFAULT", pa.nulls(rows, pa.string())).append_column(
        "IS_NULLABLE", pa.array(["NO" if c == "__time" else "YES" for c in column], pa.string())).append_column(
        "DATA_TYPE", pa.array(kind, pa.string())))


def _strings(columns: dict[str, list]) -> pa.Table:
    return pa.table({name: pa.array(values, pa.string()) for name, values in columns.items()})


def druid_sql_type(kind: str) -> str:
    """A column type (`core.column_types`) as Druid's INFORMATION_SCHEMA.COLUMNS writes it."""
    simple = {"TIMESTAMP": "TIMESTAMP", "STRING": "VARCHAR", "LONG": "BIGINT", "DOUBLE": "DOUBLE", "FLOAT": "FLOAT"}
    if kind in simple:
        return simple[kind]
    if kind.startswith("ARRAY<") and kind.endswith(">"):
        return f"{druid_sql_type(kind[6:-1])} ARRAY"
    return "COMPLEX" if kind == "ARRAY" else kind  # COMPLEX<json>, a sketch: as Druid names it


def _dataset(segments: list[SegmentRecord]) -> ds.Dataset:
    """The segments as one Arrow dataset of their merged schema (`store.segment_schema`). Files are read where
    they are, Arrow casting what widens by a cast (LONG to DOUBLE, a number to STRING); the rare segment that
    needs more (STRING to COMPLEX<json>, a scalar to an array) is read and brought to the schema first."""
    if not segments:
        return ds.dataset(EMPTY.empty_table())
    owns, target = typed(segments)
    schema = arrow_schema(target)
    files, tables = [], []
    for seg, own in zip(segments, owns):
        if all(t == target[n] or castable(t, target[n]) for n, t in own.items()):
            files.append(seg.location)
        else:
            tables.append(conform(read_segment(seg)[0], own, target).cast(schema))
    datasets = [ds.FileSystemDatasetFactory(fs, paths, ds.ParquetFileFormat()).finish(schema)
                for paths, fs in _by_filesystem(files)]
    if tables:
        datasets.append(ds.dataset(pa.concat_tables(tables)))
    return datasets[0] if len(datasets) == 1 else ds.dataset(datasets)


def _by_filesystem(locations: Iterable[str]) -> list[tuple[list[str], object]]:
    """Locations grouped by the filesystem that reads them (one per scheme and host)."""
    groups: dict[tuple[str, str], tuple[list[str], object]] = {}
    for location in locations:
        uri = deep_storage.normalize_uri(location)
        key = (urlsplit(uri).scheme, urlsplit(uri).netloc)
        fs, path = deep_storage.filesystem(uri)
        groups.setdefault(key, ([], fs))[0].append(path)
    return list(groups.values())


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
