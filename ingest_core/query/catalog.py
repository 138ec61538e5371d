"""Druid's catalog of the datasources a caller may read: `SHOW TABLES` and INFORMATION_SCHEMA's SCHEMATA, TABLES
and COLUMNS with Druid's columns and values (its `InformationSchema`: catalog `druid`, the datasources in schema
`druid`, the system tables in `INFORMATION_SCHEMA` and `sys` (`query.system_tables`), JDBC_TYPE from
java.sql.Types, ORDINAL_POSITION in Druid's column order), registered on a query's DuckDB when its tree asks for
them (`tree.QueryTree`)."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa

from ingest_core.core.column_types import TIMESTAMP
from ingest_core.core.timeline import visible_segments
from ingest_core.executor.discovery import type_of_arrow
from ingest_core.query.columns import TIME, in_druid_order, spec_columns, sql_type
from ingest_core.query.system_tables import SCHEMAS as SYS_TABLES
from ingest_core.query.tree import CATALOG_TABLES, DRUID_SCHEMA, SHOW_TABLES, SYS_SCHEMA, QueryTree
from ingest_core.store.metadata import MetadataStore
from ingest_core.store.segment_schema import typed


def readable(store: MetadataStore, may_read: Callable[[str], bool] | None) -> list[str]:
    """The datasources the caller may read, by name."""
    names = sorted(d["name"] for d in store.datasources.all())
    return [n for n in names if may_read is None or may_read(n)]


def register_catalog(con, store: MetadataStore, tree: QueryTree, may_read: Callable[[str], bool] | None) -> None:
    """The listings the query asks for, of the datasources the caller may read: SHOW TABLES (`name`) and Druid's
    INFORMATION_SCHEMA tables with Druid's columns, INFORMATION_SCHEMA's own tables listed as Druid lists them."""
    names = readable(store, may_read)
    con.register(SHOW_TABLES, pa.table({"name": pa.array(names, pa.string())}))
    con.register(CATALOG_TABLES["schemata"], pa.Table.from_pylist(
        [{"CATALOG_NAME": CATALOG, "SCHEMA_NAME": schema} for schema in (DRUID_SCHEMA, INFORMATION_SCHEMA, SYS_SCHEMA)],
        schema=SCHEMATA))
    con.register(CATALOG_TABLES["tables"], pa.Table.from_pylist(
        [_table(DRUID_SCHEMA, name, "TABLE") for name in names]
        + [_table(INFORMATION_SCHEMA, name, "SYSTEM_TABLE") for name in SYSTEM_TABLES]
        + [_table(SYS_SCHEMA, name, "SYSTEM_TABLE") for name in SYS_TABLES], schema=TABLES))
    rows: list[dict] = []
    if "columns" in tree.catalog:  # each datasource's merged schema (its segment records, not its files)
        for name in names:
            rows += _columns(DRUID_SCHEMA, name, datasource_types(store, name))
        for name, schema in SYSTEM_TABLES.items():
            rows += _columns(INFORMATION_SCHEMA, name, {f.name: type_of_arrow(f.type) for f in schema})
        for name, schema in SYS_TABLES.items():
            rows += _columns(SYS_SCHEMA, name, {f.name: type_of_arrow(f.type) for f in schema})
    con.register(CATALOG_TABLES["columns"], pa.Table.from_pylist(rows, schema=COLUMNS))


def datasource_types(store: MetadataStore, name: str) -> dict[str, str]:
    """A datasource's columns and types, in Druid's order (`columns.in_druid_order`)."""
    visible = visible_segments(store.segment_records.of(name, used_only=True))
    types = typed(visible)[1] if visible else {TIME: TIMESTAMP}
    return in_druid_order(types, spec_columns(store, name))


def _table(schema: str, name: str, kind: str) -> dict:
    return {"TABLE_CATALOG": CATALOG, "TABLE_SCHEMA": schema, "TABLE_NAME": name, "TABLE_TYPE": kind,
            "IS_JOINABLE": "NO", "IS_BROADCAST": "NO"}


def _columns(schema: str, table: str, types: dict[str, str]) -> list[dict]:
    """INFORMATION_SCHEMA.COLUMNS' rows of a table (InformationSchema.generateColumnMetadata's values): a
    datasource's columns are nullable but __time, as in Druid's SQL-compatible null handling."""
    rows = []
    for position, (column, kind) in enumerate(types.items(), 1):
        t = sql_type(kind)
        rows.append({
            "TABLE_CATALOG": CATALOG, "TABLE_SCHEMA": schema, "TABLE_NAME": table, "COLUMN_NAME": column,
            "ORDINAL_POSITION": position, "COLUMN_DEFAULT": "", "IS_NULLABLE": "NO" if column == TIME else "YES",
            "DATA_TYPE": t.name, "NUMERIC_PRECISION": t.numeric_precision,
            "NUMERIC_PRECISION_RADIX": 10 if t.numeric else None, "NUMERIC_SCALE": t.numeric_scale,
            "DATETIME_PRECISION": t.datetime_precision, "JDBC_TYPE": t.jdbc})
    return rows


def _schema(*columns: str, longs: tuple[str, ...] = ()) -> pa.Schema:
    return pa.schema([(c, pa.int64() if c in longs else pa.string()) for c in columns])


# Druid's INFORMATION_SCHEMA tables, their columns as docs/querying/sql-metadata-tables.md lists them
CATALOG, INFORMATION_SCHEMA = "druid", "INFORMATION_SCHEMA"
SCHEMATA = _schema("CATALOG_NAME", "SCHEMA_NAME", "SCHEMA_OWNER", "DEFAULT_CHARACTER_SET_CATALOG",
                   "DEFAULT_CHARACTER_SET_SCHEMA", "DEFAULT_CHARACTER_SET_NAME", "SQL_PATH")
TABLES = _schema("TABLE_CATALOG", "TABLE_SCHEMA", "TABLE_NAME", "TABLE_TYPE", "IS_JOINABLE", "IS_BROADCAST")
COLUMNS = _schema("TABLE_CATALOG", "TABLE_SCHEMA", "TABLE_NAME", "COLUMN_NAME", "ORDINAL_POSITION", "COLUMN_DEFAULT",
                  "IS_NULLABLE", "DATA_TYPE", "CHARACTER_MAXIMUM_LENGTH", "CHARACTER_OCTET_LENGTH",
                  "NUMERIC_PRECISION", "NUMERIC_PRECISION_RADIX", "NUMERIC_SCALE", "DATETIME_PRECISION",
                  "CHARACTER_SET_NAME", "COLLATION_NAME", "JDBC_TYPE",
                  longs=("ORDINAL_POSITION", "CHARACTER_MAXIMUM_LENGTH", "CHARACTER_OCTET_LENGTH", "NUMERIC_PRECISION",
                         "NUMERIC_PRECISION_RADIX", "NUMERIC_SCALE", "DATETIME_PRECISION", "JDBC_TYPE"))
SYSTEM_TABLES = {"COLUMNS": COLUMNS, "SCHEMATA": SCHEMATA, "TABLES": TABLES}
