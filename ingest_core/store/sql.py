"""SQL over datasources: DuckDB, embedded, reading the visible segments of each datasource a query names.

    result = run_sql(MetadataStore(url), 'SELECT channel, SUM(added) FROM wikipedia GROUP BY 1')
    result.table                       # pyarrow.Table; __time is a TIMESTAMP WITH TIME ZONE (UTC)

Each datasource the query names is a table of that name. Its visible set (published, used, not overshadowed) is
read once, before the query runs, so one query never sees a mix of two publishes. Segments written with fewer
columns read those columns as null, and a column whose type widened across segments reads as the wider type.

The query runs in a DuckDB that cannot touch anything but those segments: one read-only statement (a SELECT), no file, network or extension access (`enable_external_access` off, the configuration locked), a
row limit and a time limit. That is what makes it safe behind the REST API's read permission.
"""

from __future__ import annotations

import difflib
import json
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.dataset as ds

from ingest_core.core.errors import IngestError
from ingest_core.core.timeline import visible_segments
from ingest_core.executor import deep_storage
from ingest_core.executor.discovery import arrow_schema, castable, conform
from ingest_core.store import druid_sql
from ingest_core.store.metadata import MetadataStore
from ingest_core.store.records import SegmentRecord
from ingest_core.store.segment_schema import read_segment, typed

DEFAULT_MAX_ROWS = 100_000
DEFAULT_TIMEOUT_S = 300.0
READ_ONLY = ("SELECT",)
EMPTY = pa.schema([("__time", pa.timestamp("ms", tz="UTC"))])  # a datasource with nothing published yet


class SqlError(IngestError):
    """A query that cannot run: not one read-only statement, a table that is no datasource, DuckDB's own
    error (syntax, binding, types), or past its time limit."""


class DatasourceNotReadable(SqlError):
    """A datasource the query names that the caller may not read (the REST API's DAG permissions)."""

    def __init__(self, names: list[str]):
        self.names = names
        super().__init__(f"you may not read datasource{'s' if len(names) > 1 else ''} "
                         f"{', '.join(repr(n) for n in names)}: ask for read access to the DAG(s) of that name")


@dataclass(frozen=True)
class SqlResult:
    table: pa.Table
    truncated: bool  # more rows than max_rows: the first max_rows are in `table`
    segments: dict[str, int] = field(default_factory=dict)  # per datasource read: the visible segments


def run_sql(store: MetadataStore, sql: str, *, may_read: Callable[[str], bool] | None = None,
            max_rows: int | None = DEFAULT_MAX_ROWS, timeout_s: float | None = DEFAULT_TIMEOUT_S) -> SqlResult:
    """Run one read-only statement over the datasources it names. `may_read(name)`: whether the caller may
    read a datasource (None: every one)."""
    import duckdb

    con = duckdb.connect(":memory:", config={"enable_external_access": False, "autoinstall_known_extensions": False,
                                             "autoload_known_extensions": False})
    segments: dict[str, int] = {}
    try:
        statement = _one_read_only_statement(con, _druid_to_duckdb(sql))
        druid_sql.register(con, statement)
        names = _datasources_named(con, store, statement)
        if may_read is not None:
            refused = sorted(n for n in names if not may_read(n))
            if refused:
                raise DatasourceNotReadable(refused)
        for name in names:
            visible = visible_segments(store.segments(name, used_only=True))
            con.register(name, _dataset(visible))
            segments[name] = len(visible)
        con.execute("SET TimeZone = 'UTC'")
        con.execute("SET lock_configuration = true")  # the query cannot turn file access back on
        table, truncated = _fetch(con, statement, max_rows, timeout_s)
        return SqlResult(table, truncated, segments)
    except duckdb.Error as exc:
        empty = sorted(name for name, count in segments.items() if not count)
        hint = (f" ({', '.join(repr(n) for n in empty)} ha{'ve' if len(empty) > 1 else 's'} nothing published "
                f"yet: its only column is __time)" if empty and isinstance(exc, duckdb.BinderException) else "")
        raise SqlError(f"the query failed: {_first_line(exc)}{hint}") from exc
    finally:
        con.close()


def _druid_to_duckdb(sql: str) -> str:
    try:
        return druid_sql.to_duckdb(sql)
    except druid_sql.DruidSqlError as exc:
        raise SqlError(str(exc)) from exc


def _one_read_only_statement(con, sql: str) -> str:
    import duckdb

    try:
        statements = con.extract_statements(sql)
    except duckdb.Error as exc:
        raise SqlError(f"the query does not parse: {_first_line(exc)}") from exc
    if len(statements) != 1:
        raise SqlError(f"one statement per query, not {len(statements)}")
    (statement,) = statements
    kind = statement.type.name
    if kind not in READ_ONLY:
        raise SqlError(f"only a read-only query (SELECT) runs here, not {kind}")
    return statement.query


def _datasources_named(con, store: MetadataStore, sql: str) -> list[str]:
    """The datasources the query reads: every table it names (CTE names aside) must be one. Read from DuckDB's
    parse tree: binding the query would need the tables first."""
    tree = json.loads(con.execute("SELECT json_serialize_sql(?)", [sql]).fetchall()[0][0])
    if tree.get("error"):
        raise SqlError(f"the query does not parse: {tree.get('error_message')}")
    tables, ctes = set(), set()
    _walk(tree, tables, ctes)
    names = sorted({f"{schema}.{t}" if schema else t for schema, t in tables if schema or t not in ctes})
    known = {d["name"] for d in store.list_datasources()}
    unknown = [t for t in names if t not in known]
    if unknown:
        hints = [f"{t!r}" + (f" (did you mean {close[0]!r}?)" if (close := difflib.get_close_matches(
            t, sorted(known), n=1)) else "") for t in unknown]
        raise SqlError(f"no datasource named {', '.join(hints)}; the datasources are: "
                       f"{', '.join(sorted(known)) or 'none yet'}")
    return names


def _walk(node: Any, tables: set[tuple[str, str]], ctes: set[str]) -> None:
    if isinstance(node, dict):
        if node.get("type") == "BASE_TABLE":
            schema = "" if node.get("schema_name") in ("", "main") else node["schema_name"]
            tables.add((schema, node["table_name"]))
        if "cte_map" in node:
            ctes.update(entry["key"] for entry in node["cte_map"].get("map", []))
        for value in node.values():
            _walk(value, tables, ctes)
    elif isinstance(node, list):
        for value in node:
            _walk(value, tables, ctes)


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


def _fetch(con, sql: str, max_rows: int | None, timeout_s: float | None) -> tuple[pa.Table, bool]:
    import duckdb

    timer = threading.Timer(timeout_s, con.interrupt) if timeout_s else None
    if timer is not None:
        timer.daemon = True
        timer.start()
    try:
        reader = con.sql(sql).to_arrow_reader(min(max_rows + 1, 100_000) if max_rows else 100_000)
        batches, rows = [], 0
        for batch in reader:
            batches.append(batch)
            rows += batch.num_rows
            if max_rows is not None and rows > max_rows:
                break
        table = pa.Table.from_batches(batches, schema=reader.schema)
    except duckdb.InterruptException as exc:
        raise SqlError(f"the query ran past its time limit of {timeout_s:g} s and was stopped") from exc
    finally:
        if timer is not None:
            timer.cancel()
    if max_rows is not None and table.num_rows > max_rows:
        return table.slice(0, max_rows), True
    return table, False


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
