"""Druid SQL's JSON, string and number functions that DuckDB spells otherwise (JSON_VALUE, TEXTCAT, ICONTAINS_STRING,
PARSE_LONG, BITWISE_*, ...), rewritten for DuckDB."""

from __future__ import annotations

from sqlglot import exp

from ingest_core.query.arguments import Rewrite, arity, call, number_arg, renamed, sql_string
from ingest_core.query.errors import DruidSqlError


def _json_value(fn: str, args: list) -> exp.Expression:
    value, path, returning = args
    scalar = call("druid_json_value", value,
                  sql_string(path.sql("druid").strip("'")) if isinstance(path, exp.JSONPath) else path)
    return exp.TryCast(this=scalar, to=returning) if isinstance(returning, exp.DataType) else scalar


def _json_query(fn: str, args: list) -> exp.Expression:
    arity(fn, args, 2, 2)
    return call("json_extract", *args)


def _icontains(fn: str, args: list) -> exp.Expression:
    arity(fn, args, 2, 2)
    return call("contains", call("lower", args[0]), call("lower", args[1]))


def _parse_long(fn: str, args: list) -> exp.Expression:
    arity(fn, args, 1, 2)
    if int(number_arg(fn, args[1] if len(args) > 1 else None, "radix", 10)) != 10:
        raise DruidSqlError(f"{fn}: only radix 10 is supported here")
    return exp.TryCast(this=args[0], to=exp.DataType.build("BIGINT"))


def _operator(node: type[exp.Expression]) -> Rewrite:
    def rewrite(fn: str, args: list) -> exp.Expression:
        arity(fn, args, 2, 2)
        return exp.Paren(this=node(this=args[0], expression=args[1]))
    return rewrite


def _complement(fn: str, args: list) -> exp.Expression:
    arity(fn, args, 1, 1)
    return exp.BitwiseNot(this=exp.Paren(this=args[0]))


REWRITES: dict[str, Rewrite] = {
    "TEXTCAT": renamed("concat", 2, 2), "CONTAINS_STRING": renamed("contains", 2, 2), "ICONTAINS_STRING": _icontains,
    "BTRIM": renamed("trim", 1, 2), "PARSE_LONG": _parse_long,
    "REGEXP_EXTRACT": renamed("regexp_extract", 2, 3), "BITWISE_AND": _operator(exp.BitwiseAnd),
    "BITWISE_OR": _operator(exp.BitwiseOr), "BITWISE_XOR": _operator(exp.BitwiseXor),
    "BITWISE_SHIFT_LEFT": _operator(exp.BitwiseLeftShift), "BITWISE_SHIFT_RIGHT": _operator(exp.BitwiseRightShift),
    "BITWISE_COMPLEMENT": _complement, "JSON_VALUE": _json_value, "JSON_QUERY": _json_query,
}

# The DuckDB macros these rewrites call
MACROS = {
    # JSON_VALUE: a scalar at the path as text; an object or array is null
    "druid_json_value": "(j, p) AS CASE WHEN json_type(j, p) IN ('OBJECT', 'ARRAY') THEN NULL "
                        "ELSE json_extract_string(j, p) END",
}
