"""Druid's catalog of the datasources a caller may read: `SHOW TABLES` and INFORMATION_SCHEMA's SCHEMATA, TABLES
and COLUMNS as Druid writes them, registered on a query's DuckDB when its tree asks for them (`tree.QueryTree`)."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa

from ingest_core.core.timeline import visible_segments
from ingest_core.query.tree import CATALOG_TABLES, DRUID_SCHEMA, SHOW_TABLES, QueryTree
from ingest_core.store.metadata import MetadataStore
from ingest_core.store.segment_schema import typed


def readable(store: MetadataStore, may_read: Callable[[str], bool] | None) -> list[str]:
    """The datasources the caller may read, by name."""
    names = sorted(d["name"] for d in store.datasources.all())
    return [n for n in names if may_read is None or may_read(n)]


def register_catalog(con, store: MetadataStore, tree: QueryTree, may_read: Callable[[str], bool] | None) -> None:
    """The listings the query asks for, of the datasources the caller may read: SHOW TABLES (`name`) and Druid's
    INFORMATION_SCHEMA tables, with Druid's columns (TABLE_CATALOG and TABLE_SCHEMA 'druid', ...)."""
    names = readable(store, may_read)
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
