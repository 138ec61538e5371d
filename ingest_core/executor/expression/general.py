"""Druid's general and reduction functions on the executors: cast, coalesce, if, nvl, case_searched, case_simple,
isnull, notnull, greatest, least.
"""

from __future__ import annotations

from typing import Any, Callable

import pyarrow as pa
import pyarrow.compute as pc

from ingest_core.core.expression.checks import ARRAY_CAST_TYPES
from ingest_core.executor.casts import is_arrow, is_text, to_double, to_long
from ingest_core.executor.expr_values import scalar_view
from ingest_core.executor.expression.arrays import cast_to_array
from ingest_core.executor.expression.operators import compare
from ingest_core.executor.expression.vectors import as_bool, as_text, broadcast, lift, unify, value_type


def nvl(n: int, a: Any, b: Any) -> Any:
    if not is_arrow(a) and not is_arrow(b):
        return b if a is None else a
    a, b = unify(a, b, n)
    return pc.coalesce(a, b)


def if_(n: int, cond: Any, a: Any, b: Any) -> Any:
    c = as_bool(cond, n)
    if not is_arrow(c) and not is_arrow(a) and not is_arrow(b):
        return a if c else b
    a, b = unify(a, b, n)
    return pc.if_else(pc.fill_null(broadcast(c, n), False), a, b)


def case_searched(n: int, *args: Any) -> Any:
    otherwise = args[-1] if len(args) % 2 == 1 else None
    pairs = list(zip(args[0:len(args) - (len(args) % 2):2], args[1::2]))
    result = otherwise
    for cond, value in reversed(pairs):
        result = if_(n, cond, value, result)
    return result


def cast(n: int, v: Any, to: str) -> Any:
    kind = str(to).upper()
    if kind in ARRAY_CAST_TYPES:
        return cast_to_array(n, v, ARRAY_CAST_TYPES[kind])
    v = scalar_view(v)
    if kind == "LONG":
        return to_long(v)
    if kind in ("DOUBLE", "FLOAT"):
        return to_double(v)
    return as_text(v)  # STRING: the core checked the type


def _extreme(fn: Callable[..., Any]) -> Callable[..., Any]:
    """greatest/least: numbers compare as numbers (double if they mix long and double), anything with text
    compares as text, as Druid's; nulls are skipped."""
    def apply(n: int, *args: Any) -> Any:
        args = tuple(a for a in args if a is not None)  # a null constant is skipped like a null row
        if not args:
            return None
        types = [value_type(a) for a in args]
        if any(is_text(t) for t in types):
            args = tuple(as_text(a) for a in args)
        elif any(pa.types.is_floating(t) for t in types):
            args = tuple(to_double(a) for a in args)
        return lift(fn)(*args)
    return apply


def isnull(n: int, x: Any) -> Any:
    return (x is None) if not is_arrow(x) else pc.is_null(x)


def notnull(n: int, x: Any) -> Any:
    return (x is not None) if not is_arrow(x) else pc.is_valid(x)


def coalesce(n: int, *args: Any) -> Any:
    result = args[-1]
    for value in reversed(args[:-1]):
        result = nvl(n, value, result)
    return result


def case_simple(n: int, value: Any, *args: Any) -> Any:
    equal = compare("==")
    pairs = [item for i in range(0, len(args) - 1, 2) for item in (equal(value, args[i]), args[i + 1])]
    return case_searched(n, *pairs, *(args[-1:] if len(args) % 2 == 1 else ()))


# the registry's implementations (core.expression.functions names them "general.<name>")
greatest = _extreme(pc.max_element_wise)
least = _extreme(pc.min_element_wise)
