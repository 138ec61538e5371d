"""What a query reads, from DuckDB's own parse tree (`json_serialize_sql`): the tables it names, with SQL's CTE
scoping; the functions it calls; the catalog listings and system tables it asks for (SHOW TABLES,
INFORMATION_SCHEMA, `sys.*`), rewritten to the tables `query.engine` builds for them; and what its result's columns
are (`column_names`: Druid's names).
Pure: a dict in, a `QueryTree` out.

Scoping as SQL has it: a CTE hides a table of its name in its WITH's query, in the CTEs after it and in their
subqueries; not in its own body (unless RECURSIVE), not outside the WITH. So
`WITH wiki AS (SELECT * FROM wiki WHERE ...) SELECT * FROM wiki` reads the datasource `wiki` once, in the CTE.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Sequence

DRUID_SCHEMA = "druid"  # Druid's schema of datasources: `druid.wikipedia`, `"druid"."wikipedia"`
# Druid's INFORMATION_SCHEMA tables (served from the datasources the caller may read), as `query.engine` registers them
CATALOG_TABLES = {"schemata": "__ingest_information_schema_schemata", "tables": "__ingest_information_schema_tables",
                  "columns": "__ingest_information_schema_columns"}
SHOW_TABLES = "__ingest_show_tables"
SYS_SCHEMA = "sys"  # Druid's system tables (`query.system_tables`), as `query.engine` registers them
SYSTEM_TABLES = {"segments": "__ingest_sys_segments", "tasks": "__ingest_sys_tasks",
                 "supervisors": "__ingest_sys_supervisors"}

# Table functions a query may call: they make rows, and read nothing of the host. Every other (read_csv, glob,
# query, duckdb_settings, parquet_metadata, pragma_*, ...) reads files, settings or runs SQL that was never checked.
TABLE_FUNCTIONS = frozenset({"range", "generate_series", "unnest", "json_each", "json_tree", "repeat_row"})
# Scalar functions that tell the host's settings, paths or environment, or describe the query's own plumbing
REFUSED_FUNCTIONS = frozenset({"current_setting", "getenv", "getvariable", "pg_get_viewdef", "pg_get_expr",
                               "pg_postmaster_start_time", "pg_conf_load_time", "current_query"})
REFUSED_PREFIXES = ("duckdb_", "pragma_")


STAR, NAMED, EXPRESSION = "STAR", "NAMED", "EXPRESSION"  # a select item (`QueryTree.select`)


class TreeError(ValueError):
    """A query outside what runs here (a SHOW of a setting, a refused function): the message says which."""


@dataclass
class QueryTree:
    tables: set[tuple[str, str, str]] = field(default_factory=set)  # (catalog, schema, name), CTE names left out
    table_functions: set[str] = field(default_factory=set)
    functions: set[str] = field(default_factory=set)
    catalog: set[str] = field(default_factory=set)  # CATALOG_TABLES keys and "show_tables": listings asked for
    system: set[str] = field(default_factory=set)  # SYSTEM_TABLES keys: the sys tables named
    rewritten: bool = False  # the tree changed (a listing): run its SQL (`json_deserialize_sql`), not the text
    select: tuple[str, ...] = ()  # the outer SELECT's items: STAR, NAMED (a column or an alias) or EXPRESSION

    def column_names(self, names: Sequence[str]) -> list[str]:
        """The result's column names (DuckDB's `names`) as Druid gives them: Calcite names an item with no alias
        that is not a column `EXPR$` and its position in the result. A star stands for as many columns as the
        result has beyond the other items; with two stars, the items between them keep DuckDB's names."""
        out = list(names)
        stars = self.select.count(STAR)
        if stars == 0 and len(self.select) != len(out):
            return out  # not the outer SELECT's columns (DESCRIBE, PIVOT)
        first = self.select.index(STAR) if stars else len(self.select)
        last = len(self.select) - 1 - self.select[::-1].index(STAR) if stars else -1
        for i, item in enumerate(self.select):
            if item != EXPRESSION:
                continue
            if i < first:
                out[i] = f"EXPR${i}"
            elif i > last:
                position = len(out) - (len(self.select) - i)
                out[position] = f"EXPR${position}"
        return out

    def datasource_names(self) -> list[str]:
        """Each table named, as a datasource name: `druid.x` is `x`; any other schema stays in the name (and is
        then no datasource)."""
        names = set()
        for catalog, schema, name in self.tables:
            if catalog or (schema and schema.lower() not in ("main", DRUID_SCHEMA)):
                names.add(".".join(p for p in (catalog, schema, name) if p))
            else:
                names.add(name)
        return sorted(names)

    def refused_functions(self) -> list[str]:
        scalar = {f for f in self.functions if f in REFUSED_FUNCTIONS or f.startswith(REFUSED_PREFIXES)}
        return sorted(scalar | (self.table_functions - TABLE_FUNCTIONS))


def read_tree(tree: dict) -> QueryTree:
    """`tree`: `json_serialize_sql`'s output for one SELECT; rewritten in place where it lists the catalog."""
    result = QueryTree()
    _walk(tree, frozenset(), result)
    result.select = _select_items(tree)
    return result


def _select_items(tree: dict) -> tuple[str, ...]:
    """What each item of the outer SELECT (a UNION's first) is; () for any other statement."""
    statements = tree.get("statements") or [{}]
    node = statements[0].get("node") or {}
    while node.get("type") == "SET_OPERATION_NODE":
        node = node.get("left") or (node.get("children") or [{}])[0]
    if node.get("type") != "SELECT_NODE":
        return ()
    return tuple(STAR if item.get("class") == "STAR" else NAMED if item.get("alias") or item.get("class") ==
                 "COLUMN_REF" else EXPRESSION for item in node.get("select_list", []))


def _walk(node: Any, ctes: frozenset[str], out: QueryTree) -> None:
    if isinstance(node, list):
        for value in node:
            _walk(value, ctes, out)
        return
    if not isinstance(node, dict):
        return
    kind = node.get("type")
    if kind == "RECURSIVE_CTE_NODE":
        ctes = ctes | {node.get("cte_name", "").lower()}
    if "cte_map" in node:  # each CTE sees those before it; the rest of the node sees them all
        for entry in node["cte_map"].get("map", []):
            _walk(entry.get("value"), ctes, out)
            ctes = ctes | {entry["key"].lower()}
    if kind == "BASE_TABLE":
        _table(node, ctes, out)
    elif kind == "SHOW_REF":
        _show(node, out)
    elif kind == "TABLE_FUNCTION" and isinstance(node.get("function"), dict):
        out.table_functions.add(node["function"].get("function_name", "").lower())
    if node.get("class") == "FUNCTION":
        out.functions.add(node.get("function_name", "").lower())
    for key, value in node.items():
        if key != "cte_map" and isinstance(value, (dict, list)):
            _walk(value, ctes, out)


def _table(node: dict, ctes: frozenset[str], out: QueryTree) -> None:
    catalog, schema, name = node.get("catalog_name") or "", node.get("schema_name") or "", node["table_name"]
    if not catalog and not schema and name.lower() in ctes:
        return  # a CTE in scope
    if schema.lower() == "information_schema" and not catalog and name.lower() in CATALOG_TABLES:
        _rename(node, CATALOG_TABLES[name.lower()], name)
        out.catalog.add(name.lower())
        out.rewritten = True
        return
    if schema.lower() == SYS_SCHEMA and not catalog:
        if name.lower() not in SYSTEM_TABLES:
            raise TreeError(f"sys.{name} is not served here: the sys tables are {', '.join(SYSTEM_TABLES)}")
        _rename(node, SYSTEM_TABLES[name.lower()], name)
        out.system.add(name.lower())
        out.rewritten = True
        return
    out.tables.add((catalog, "" if schema.lower() == "main" else schema, name))


def _show(node: dict, out: QueryTree) -> None:
    show, name = node.get("show_type"), (node.get("table_name") or "").strip('"').lower()
    if show in ("DESCRIBE", "SUMMARY") and node.get("query") is not None:
        return  # DESCRIBE / SUMMARIZE of a query: its tables are walked as any others
    if show == "SHOW_SPECIAL" and name == "tables":
        node.clear()
        node.update(_base_table(SHOW_TABLES))
        out.catalog.add("show_tables")
        out.rewritten = True
        return
    raise TreeError(f"SHOW {name or show} is not available here: SHOW TABLES lists the datasources, "
                    f"DESCRIBE <datasource> its columns")


def _rename(node: dict, table: str, alias: str) -> None:
    node.update(schema_name="", catalog_name="", table_name=table, alias=node.get("alias") or alias,
                qualified_name={"path": [table]})


def _base_table(name: str) -> dict:
    node = copy.deepcopy(_BASE_TABLE)
    _rename(node, name, "")
    return node


# a BASE_TABLE node as DuckDB writes one (`SELECT * FROM t`): what a SHOW TABLES node is replaced by
_BASE_TABLE = {"type": "BASE_TABLE", "alias": "", "sample": None, "query_location": 0, "query_location_length": 0,
               "schema_name": "", "table_name": "t", "column_name_alias": [], "catalog_name": "", "at_clause": None,
               "qualified_name": {"path": ["t"]}}
