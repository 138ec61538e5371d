"""Druid SQL's aggregates DuckDB spells otherwise (LATEST / EARLIEST to `arg_max_null` / `arg_min_null` over
`__time`, ANY_VALUE), the DataSketches aggregates (to `list(x)` finished by a UDF of `sketch_functions`) and the
functions on sketches (THETA_SKETCH_*, HLL_SKETCH_*, DS_*): each checked as Druid checks its literal arguments."""

from __future__ import annotations

from sqlglot import exp

from ingest_core.query import sketch_functions as sk
from ingest_core.query.arguments import Rewrite, arity, call, number_arg, renamed, sql_number, sql_string, string_arg
from ingest_core.query.errors import DruidSqlError


def _list(arg: exp.Expression) -> exp.Expression:
    return call("list", arg)


def _latest(fn: str, args: list) -> exp.Expression:
    by = fn.endswith("_BY")
    arity(fn, args, 2 if by else 1, 3 if by else 2)  # maxBytesPerString: strings are not truncated here
    time = args[1] if by else exp.column("__time")
    return call("arg_max_null" if fn.startswith("LATEST") else "arg_min_null", args[0], time)


def _any_value(fn: str, args: list) -> exp.Expression:
    arity(fn, args, 1, 2)
    return call("any_value", args[0])


def _theta_size(fn: str, arg: exp.Expression | None) -> exp.Expression:
    size = int(number_arg(fn, arg, "size", sk.THETA_SIZE))
    if size < 16 or size & (size - 1):
        raise DruidSqlError(f"{fn}: the size must be a power of 2 of at least 16, not {size}")
    return sql_number(size)


def _hll_params(fn: str, lg_k: exp.Expression | None, tgt: exp.Expression | None) -> list[exp.Expression]:
    k = int(number_arg(fn, lg_k, "lgK", sk.HLL_LG_K))
    if not 4 <= k <= 21:
        raise DruidSqlError(f"{fn}: lgK must be from 4 to 21, not {k}")
    kind = (string_arg(fn, tgt, "tgtHllType", sk.HLL_TYPE) or sk.HLL_TYPE).upper()
    if kind not in ("HLL_4", "HLL_6", "HLL_8"):
        raise DruidSqlError(f"{fn}: tgtHllType must be HLL_4, HLL_6 or HLL_8, not {kind!r}")
    return [sql_number(k), sql_string(kind)]


def _quantiles_k(fn: str, arg: exp.Expression | None) -> exp.Expression:
    k = int(number_arg(fn, arg, "k", sk.QUANTILES_K))
    if k < 2 or k > 32768 or k & (k - 1):
        raise DruidSqlError(f"{fn}: k must be a power of 2 from 2 to 32768, not {k}")
    return sql_number(k)


def _ds_theta(fn: str, args: list) -> exp.Expression:
    arity(fn, args, 1, 2)
    name = "druid_ds_theta" if fn == "DS_THETA" else "druid_ds_theta_count"
    return call(name, _list(args[0]), _theta_size(fn, args[1] if len(args) > 1 else None))


def _ds_hll(fn: str, args: list) -> exp.Expression:
    arity(fn, args, 1, 1 if fn == "APPROX_COUNT_DISTINCT" else 3)
    name = "druid_ds_hll" if fn == "DS_HLL" else "druid_ds_hll_count"
    return call(name, _list(args[0]), *_hll_params(fn, *(args[1:] + [None, None])[:2]))


def _ds_quantiles(fn: str, args: list) -> exp.Expression:
    arity(fn, args, 1, 2)
    return call("druid_ds_quantiles", _list(args[0]), _quantiles_k(fn, args[1] if len(args) > 1 else None))


def _approx_quantile_ds(fn: str, args: list) -> exp.Expression:
    arity(fn, args, 2, 3)
    return call("druid_quantile_ds", _list(args[0]), args[1], _quantiles_k(fn, args[2] if len(args) > 2 else None))



def _theta_bounds(fn: str, args: list) -> exp.Expression:
    arity(fn, args, 2, 2)
    std = int(number_arg(fn, args[1], "errorBoundsStdDev", 1))
    if std not in (1, 2, 3):
        raise DruidSqlError(f"{fn}: errorBoundsStdDev must be 1, 2 or 3, not {std}")
    return call("druid_theta_estimate_bounds", args[0], sql_number(std))


def _theta_set_op(fn: str, args: list) -> exp.Expression:
    size = None
    if args and isinstance(args[0], exp.Literal) and not args[0].is_string:
        size, args = args[0], args[1:]
    if not args:
        raise DruidSqlError(f"{fn} takes at least one sketch")
    op = {"THETA_SKETCH_UNION": "union", "THETA_SKETCH_INTERSECT": "intersect", "THETA_SKETCH_NOT": "not"}[fn]
    return call("druid_theta_set_op", exp.Array(expressions=args), sql_string(op), _theta_size(fn, size))


def _hll_estimate(fn: str, args: list) -> exp.Expression:
    arity(fn, args, 1, 2)
    estimate = call("druid_hll_estimate", args[0])
    rounded = len(args) > 1 and isinstance(args[1], exp.Boolean) and args[1].this
    return call("round", estimate) if rounded else estimate


def _hll_bounds(fn: str, args: list) -> exp.Expression:
    arity(fn, args, 1, 2)
    std = int(number_arg(fn, args[1] if len(args) > 1 else None, "numStdDev", 1))
    if std not in (1, 2, 3):
        raise DruidSqlError(f"{fn}: numStdDev must be 1, 2 or 3, not {std}")
    return call("druid_hll_estimate_bounds", args[0], sql_number(std))


def _hll_union(fn: str, args: list) -> exp.Expression:
    params = [None, None]
    if len(args) > 2 and isinstance(args[0], exp.Literal) and not args[0].is_string:
        params, args = args[:2], args[2:]
    if not args:
        raise DruidSqlError(f"{fn} takes at least one sketch")
    return call("druid_hll_union", exp.Array(expressions=args), *_hll_params(fn, *params))


def _with_list(name: str) -> Rewrite:
    def rewrite(fn: str, args: list) -> exp.Expression:
        if len(args) < 2:
            raise DruidSqlError(f"{fn} takes a sketch and at least one number")
        return call(name, args[0], exp.Array(expressions=args[1:]))
    return rewrite


# aggregates: under FILTER or OVER, the rewrite keeps them (`druid_sql`)
AGGREGATES = {"LATEST", "EARLIEST", "LATEST_BY", "EARLIEST_BY", "ANY_VALUE", "APPROX_COUNT_DISTINCT",
               "APPROX_COUNT_DISTINCT_BUILTIN", "APPROX_COUNT_DISTINCT_DS_HLL", "DS_HLL",
               "APPROX_COUNT_DISTINCT_DS_THETA", "DS_THETA", "DS_QUANTILES_SKETCH", "APPROX_QUANTILE_DS"}
REWRITES: dict[str, Rewrite] = {
    "LATEST": _latest, "EARLIEST": _latest, "LATEST_BY": _latest, "EARLIEST_BY": _latest,
    "ANY_VALUE": _any_value,
    "APPROX_COUNT_DISTINCT": _ds_hll, "APPROX_COUNT_DISTINCT_BUILTIN": _ds_hll,
    "APPROX_COUNT_DISTINCT_DS_HLL": _ds_hll, "DS_HLL": _ds_hll,
    "APPROX_COUNT_DISTINCT_DS_THETA": _ds_theta, "DS_THETA": _ds_theta,
    "DS_QUANTILES_SKETCH": _ds_quantiles, "APPROX_QUANTILE_DS": _approx_quantile_ds,
    "THETA_SKETCH_ESTIMATE": renamed("druid_theta_estimate", 1, 1),
    "THETA_SKETCH_ESTIMATE_WITH_ERROR_BOUNDS": _theta_bounds,
    "THETA_SKETCH_UNION": _theta_set_op, "THETA_SKETCH_INTERSECT": _theta_set_op, "THETA_SKETCH_NOT": _theta_set_op,
    "HLL_SKETCH_ESTIMATE": _hll_estimate, "HLL_SKETCH_ESTIMATE_WITH_ERROR_BOUNDS": _hll_bounds,
    "HLL_SKETCH_UNION": _hll_union,
    "DS_GET_QUANTILE": renamed("druid_ds_get_quantile", 2, 2), "DS_GET_QUANTILES": _with_list("druid_ds_get_quantiles"),
    "DS_RANK": renamed("druid_ds_rank", 2, 2), "DS_CDF": _with_list("druid_ds_cdf"),
    "DS_HISTOGRAM": _with_list("druid_ds_histogram"), "DS_QUANTILE_SUMMARY": renamed("druid_ds_quantile_summary", 1, 1),
}
