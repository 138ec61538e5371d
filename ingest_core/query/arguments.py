"""A Druid SQL function's arguments as the rewrites read them (literals Druid takes only as literals: a period,
a time zone, a size) and the DuckDB nodes they build. Pure: sqlglot's trees in, sqlglot's trees out."""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from ingest_core.query.errors import DruidSqlError

Rewrite = Callable[[str, list], exp.Expression]  # (the function's name as called, its arguments) -> DuckDB's node


def string_arg(fn: str, arg: exp.Expression | None, what: str, default: str | None = None) -> str | None:
    """A string literal argument's text (`default` when absent or NULL); refused in one line naming `fn` and
    `what` otherwise."""
    if arg is None or isinstance(arg, exp.Null):
        return default
    if isinstance(arg, exp.Literal) and arg.is_string:
        return arg.this
    raise DruidSqlError(f"{fn}: the {what} must be a string literal, not {arg.sql('duckdb')}")


def number_arg(fn: str, arg: exp.Expression | None, what: str, default: float) -> float:
    """A number literal argument (a negative one too), as `string_arg`."""
    if arg is None or isinstance(arg, exp.Null):
        return default
    value = arg.this if isinstance(arg, exp.Neg) else arg
    if isinstance(value, exp.Literal) and not value.is_string:
        number = float(value.this)
        return -number if isinstance(arg, exp.Neg) else number
    raise DruidSqlError(f"{fn}: the {what} must be a number literal, not {arg.sql('duckdb')}")


def arity(fn: str, args: list, low: int, high: int) -> None:
    if not low <= len(args) <= high:
        expected = str(low) if low == high else f"{low} to {high}"
        raise DruidSqlError(f"{fn} takes {expected} arguments, not {len(args)}")


def call(name: str, *args: exp.Expression) -> exp.Expression:
    return exp.Anonymous(this=name, expressions=list(args))


def sql_string(text: str) -> exp.Expression:
    return exp.Literal.string(text)


def sql_number(value: float) -> exp.Expression:
    return exp.Literal.number(int(value) if float(value).is_integer() else value)


def instant(arg: exp.Expression) -> exp.Expression:
    """A Druid TIMESTAMP (always UTC) as DuckDB's TIMESTAMP WITH TIME ZONE (the session's zone is UTC)."""
    return exp.Cast(this=arg, to=exp.DataType.build("TIMESTAMPTZ", dialect="duckdb"))


def renamed(name: str, low: int, high: int) -> Rewrite:
    """The rewrite of a function that is DuckDB's `name` with the same arguments (`low` to `high` of them)."""
    def rewrite(fn: str, args: list) -> exp.Expression:
        arity(fn, args, low, high)
        return call(name, *args)
    return rewrite
