"""Druid SQL for the DuckDB that runs `ingest query` and the SQL endpoint (`query.engine`).

    duckdb_sql = to_duckdb("SELECT TIME_FLOOR(__time, 'PT1H') AS h, APPROX_COUNT_DISTINCT_DS_THETA(uid) FROM t GROUP BY 1")
    register(con, duckdb_sql)   # on the query's connection: the macros and sketch UDFs that text calls

sqlglot reads the text (its `druid` dialect) and the functions Druid spells its own way are rewritten to DuckDB:
time functions to DuckDB's, through `druid_*` macros (Druid's time zone and origin rules); LATEST /
EARLIEST to `arg_max_null` / `arg_min_null` over `__time`; DataSketches aggregates to `list(x)` (FILTER and OVER
kept) finished by a UDF of `sketch_functions`. The rewrites live by concern: `time_functions`,
`aggregate_functions`, `scalar_functions`. A query without any of them is passed on as written, so DuckDB's
own SQL keeps working unchanged; one that sqlglot cannot read is passed on too (DuckDB then says what is wrong),
unless it calls a Druid function. A Druid function this server does not have, or a literal argument Druid would
refuse, is refused in one line naming the function (`DruidSqlError`).
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
from collections.abc import Callable

import sqlglot
from sqlglot import exp
from sqlglot.dialects.druid import Druid
from sqlglot.parsers.druid import DruidParser

from ingest_core.query import (
    aggregate_functions,
    scalar_functions,
    sketch_functions as sk,
    stats_functions,
    time_functions,
)
from ingest_core.query.errors import DruidSqlError
from ingest_core.query.time_functions import UTC


class _Parser(DruidParser):
    # kept as written, rewritten below: sqlglot's generic builders read TIMESTAMPADD / TIMESTAMPDIFF in another
    # argument order than Calcite's (unit first), take no maxBytesPerString in ANY_VALUE, read REGEXP_EXTRACT's
    # third argument as a position (Druid's is the capture group, as DuckDB's)
    FUNCTIONS = {**DruidParser.FUNCTIONS,
                 **{name: (lambda name: lambda args: exp.Anonymous(this=name, expressions=args))(name)
                    for name in ("TIMESTAMPADD", "TIMESTAMPDIFF", "ANY_VALUE", "REGEXP_EXTRACT")}}


class DruidDialect(Druid):
    Parser = _Parser


def to_duckdb(sql: str, zone: str = "UTC") -> str:
    """The query as DuckDB SQL: unchanged when it uses no Druid function (or sqlglot cannot read it). `zone` is
    the query's `sqlTimeZone`, the DuckDB session's TimeZone: the default zone of Druid's time functions.

    sqlglot's parser recurses a few dozen frames per nesting level, so a query nested past Python's recursion
    limit (about 40 levels of parentheses) is one it cannot read: passed on to DuckDB (which bounds its own
    nesting), or refused in one line when it calls a Druid function. Its warnings are never logged
    (`quiet_sqlglot`): what becomes of a query it cannot read is said in one line, by this or by DuckDB."""
    if _EXPLAIN.match(sql):
        raise DruidSqlError("EXPLAIN PLAN FOR is not supported here: this server runs Druid SQL on DuckDB and has no "
                            "Druid native query plan to show; run the query itself (with a LIMIT) instead")
    try:
        with quiet_sqlglot():
            return _to_duckdb(sql, zone)
    except RecursionError:
        called = [n for n in _REWRITES if n not in _DUCKDB_HAS and _calls(sql, n)]
        if called:
            raise DruidSqlError(f"the query calls Druid SQL's {called[0]} but nests too deeply to be read as Druid "
                                "SQL (parentheses or calls within each other): nest fewer levels, or name the "
                                "inner parts in a WITH") from None
        return sql


_EXPLAIN = re.compile(r"\s*EXPLAIN\s+PLAN\b", re.IGNORECASE)


class _Quiet(logging.Filter):
    """Drops the records of sqlglot's logger while this thread is in `quiet_sqlglot`."""

    def __init__(self) -> None:
        super().__init__()
        self.threads = threading.local()

    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(self.threads, "quiet", False)


_QUIET = _Quiet()
logging.getLogger("sqlglot").addFilter(_QUIET)  # sqlglot logs on this one logger only


@contextlib.contextmanager
def quiet_sqlglot():
    """No warning of sqlglot's in the server's log or on stderr while the block runs (in this thread only:
    another thread's use of sqlglot logs as it would)."""
    before = getattr(_QUIET.threads, "quiet", False)
    _QUIET.threads.quiet = True
    try:
        yield
    finally:
        _QUIET.threads.quiet = before


def _to_duckdb(sql: str, zone: str) -> str:
    try:
        trees = sqlglot.parse(sql, read=DruidDialect)
    except sqlglot.errors.SqlglotError as exc:
        called = [n for n in _REWRITES if n not in _DUCKDB_HAS and _calls(sql, n)]
        if called:  # DuckDB would only say it has no such function
            errors = getattr(exc, "errors", None) or [{}]
            where = f" (line {errors[0]['line']}, column {errors[0]['col']})" if "line" in errors[0] else ""
            reason = errors[0].get("description") or str(exc).splitlines()[0]
            raise DruidSqlError(f"the query calls Druid SQL's {called[0]} but does not read as Druid SQL: "
                                f"{reason}{where}") from None
        return sql
    if len(trees) != 1 or trees[0] is None:
        return sql
    tree = trees[0]
    changed = False
    for node in reversed(list(tree.walk())):  # children first: a rewritten argument is in place for its parent
        if zone != UTC and _timestamp_literal(node):  # Druid's TIMESTAMP is an instant: wall-clock time in the zone
            node.set("to", exp.DataType.build("TIMESTAMPTZ", dialect="duckdb"))
            changed = True
            continue
        name = _druid_name(node)
        if name is None:
            continue
        if name in UNSUPPORTED or name.startswith(("MV_", "DS_TUPLE_", "TDIGEST_", "BLOOM_")):
            raise DruidSqlError(f"Druid SQL function {name} is not supported here (docs/sql.md, "
                                f"'Druid SQL', lists the Druid SQL functions this server runs)")
        rewrite = _REWRITES.get(name)
        if rewrite is None:
            continue
        args = _args(node)
        new = _ZONED[name](name, args, zone) if name in _ZONED else rewrite(name, args)
        if name in _AGGREGATES:
            node, new = _keep_filter_and_window(node, new)
        node.replace(new)
        if node is tree:
            tree = new
        changed = True
    if changed or any(_calls(sql, name) for name in _SQLGLOT_SPELLS):
        return tree.sql(dialect="duckdb")
    return sql


def _timestamp_literal(node: exp.Expression) -> bool:
    return (isinstance(node, exp.Cast) and isinstance(node.this, exp.Literal) and node.this.is_string
            and node.to.is_type(exp.DataType.Type.TIMESTAMP))


def _calls(sql: str, name: str) -> bool:
    return re.search(rf"\b{name}\s*\(", sql, re.IGNORECASE) is not None


# Druid functions DuckDB lacks that sqlglot's DuckDB output spells DuckDB's way by itself
_SQLGLOT_SPELLS = ("NVL", "REGEXP_LIKE", "SAFE_DIVIDE", "TRUNCATE")


def _druid_name(node: exp.Expression) -> str | None:
    if isinstance(node, exp.Anonymous):
        return str(node.this).upper()
    if isinstance(node, (exp.Floor, exp.Ceil)) and node.args.get("to") is not None:
        return "FLOOR_TO" if isinstance(node, exp.Floor) else "CEIL_TO"
    if isinstance(node, exp.ApproxDistinct):
        return "APPROX_COUNT_DISTINCT"
    if isinstance(node, exp.JSONValue):
        return "JSON_VALUE"
    if type(node) in stats_functions.NODES:
        return stats_functions.NODES[type(node)]
    if isinstance(node, exp.Func) and node.sql_name() in UNSUPPORTED:  # one sqlglot parses to its own node
        return node.sql_name()
    return None


def _args(node: exp.Expression) -> list[exp.Expression]:
    if isinstance(node, exp.Anonymous):
        return list(node.expressions)
    if isinstance(node, (exp.Floor, exp.Ceil)):
        return [node.this, node.args["to"]]
    if isinstance(node, exp.JSONValue):
        return [node.this, node.args["path"], node.args.get("returning")]
    return [node.this, *node.expressions] if isinstance(node.this, exp.Expression) else list(node.expressions)


def _keep_filter_and_window(node: exp.Expression, new: exp.Expression) -> tuple[exp.Expression, exp.Expression]:
    """An aggregate under FILTER (WHERE ..) and/or OVER (..): a rewrite that is a DuckDB aggregate keeps them as
    they are; otherwise they move onto the `list(x)` inside the rewrite, and the whole construct is replaced."""
    if isinstance(new, exp.Anonymous) and str(new.this).lower() in ("arg_max_null", "arg_min_null", "any_value"):
        return node, new
    target = next(n for n in new.walk() if isinstance(n, exp.Anonymous) and str(n.this).lower() == "list")
    outer = node
    while isinstance(outer.parent, (exp.Filter, exp.Window)) and outer.parent.this is outer:
        wrapper = outer.parent.copy()
        wrapper.set("this", target.copy())
        target.replace(wrapper)
        target, outer = wrapper, outer.parent
    return outer, new


# the rewrites, by Druid's name of the function
_ZONED = time_functions.ZONED
_REWRITES: dict[str, Callable[..., exp.Expression]] = {
    **_ZONED, **time_functions.REWRITES, **aggregate_functions.REWRITES, **scalar_functions.REWRITES,
    **stats_functions.REWRITES}
_AGGREGATES = aggregate_functions.AGGREGATES | stats_functions.AGGREGATES
_DUCKDB_HAS = {*stats_functions.KINDS, "ANY_VALUE", "APPROX_COUNT_DISTINCT", "JSON_VALUE", "JSON_QUERY", "FLOOR_TO", "CEIL_TO",  # by name
               "REGEXP_EXTRACT"}

# Druid SQL functions (core and its extensions) this server does not run; besides these the MV_*, DS_TUPLE_*,
# TDIGEST_* and BLOOM_* families. Any other unknown function is DuckDB's to name.
UNSUPPORTED = {
    "APPROX_QUANTILE", "APPROX_QUANTILE_FIXED_BUCKETS", "LOOKUP", "STRING_TO_MV", "DECODE_BASE64_COMPLEX",
    "COMPLEX_DECODE_BASE64", "HLL_SKETCH_TO_STRING", "IPV4_MATCH", "IPV4_PARSE", "IPV4_STRINGIFY", "IPV6_MATCH",
    "STRING_FORMAT", "HUMAN_READABLE_BINARY_BYTE_FORMAT", "HUMAN_READABLE_DECIMAL_BYTE_FORMAT",
    "HUMAN_READABLE_DECIMAL_FORMAT", "JSON_PATHS", "TO_JSON_STRING", "PARSE_JSON", "TRY_PARSE_JSON",
    "ARRAY_CONCAT_AGG",
}

# The DuckDB macros the rewrites call (created by `register` on a connection whose query calls them)
MACROS = {**time_functions.MACROS, **scalar_functions.MACROS}


def register(con, sql: str) -> None:
    """The macros and sketch UDFs that DuckDB `sql` calls, on its connection (each costs a little to create:
    a query that calls none gets none)."""
    text = sql.lower()
    needed = {name for name in MACROS if name in text}
    needed |= {other for name in needed for other in MACROS if other in MACROS[name]}  # the macros it calls
    for name in MACROS:  # in order: a macro after those it calls
        if name in needed:
            con.execute(f"CREATE TEMP MACRO {name}{MACROS[name]}")
    functions = {**sk.FUNCTIONS, **stats_functions.FUNCTIONS}
    sk.register(con, {name for name in functions if name in text}, functions)
