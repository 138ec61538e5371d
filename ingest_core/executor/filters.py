"""`transformSpec.filter` on the executors: the checked filter tree (`ingest_core.core.filters`) compiled to a
vectorized pyarrow predicate.

A row whose value is null matches only `selector` with `value: null` and `null`; `not` of an unknown (null)
comparison does not match (Druid's SQL-compatible null handling). Numeric comparisons read text values as
numbers; text that is not a number compares as null (no match).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import pyarrow as pa
import pyarrow.compute as pc

from ingest_core.core.filters import (
    Bound,
    Constant,
    Equals,
    Filter,
    FilterError,
    In,
    IsNull,
    Logic,
    Matches,
    Not,
    parse_filter,
)
from ingest_core.executor.casts import to_double

Columns = Mapping[str, pa.Array]
Predicate = Callable[[Columns, int], pa.Array]

__all__ = ["FilterError", "Predicate", "compile_filter"]


def _column(cols: Columns, name: str, n: int) -> pa.Array:
    col = cols.get(name)
    return col if col is not None else pa.nulls(n, pa.string())


def _as_string(arr: pa.Array) -> pa.Array:
    if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
        return arr
    if pa.types.is_boolean(arr.type):
        return pc.if_else(arr, "true", "false")
    if pa.types.is_timestamp(arr.type):
        arr = pc.cast(pc.cast(arr, pa.timestamp("ms", tz="UTC")), pa.int64())
    return pc.cast(arr, pa.string())


def _as_double(arr: pa.Array) -> pa.Array:
    if pa.types.is_timestamp(arr.type):
        arr = pc.cast(pc.cast(arr, pa.timestamp("ms", tz="UTC")), pa.int64())
    return to_double(arr)


def compile_filter(spec: Filter | Any, path: str = "filter") -> Predicate:
    """Compile a filter (its tree, or Druid's JSON, checked first); the predicate returns a boolean array
    without nulls (null means no match)."""
    inner = _compile(spec if isinstance(spec, (Logic, Not, Constant, IsNull, Equals, In, Bound, Matches))
                     else parse_filter(spec, path))

    def predicate(cols: Columns, n: int) -> pa.Array:
        out = inner(cols, n)
        if isinstance(out, pa.ChunkedArray):
            out = out.combine_chunks()
        return pc.fill_null(out, False)
    return predicate


def _compile(f: Filter) -> Predicate:
    if isinstance(f, Logic):
        parts = [_compile(x) for x in f.fields]
        combine = pc.and_kleene if f.kind == "and" else pc.or_kleene

        def logic(cols: Columns, n: int) -> pa.Array:
            out = parts[0](cols, n)
            for p in parts[1:]:
                out = combine(out, p(cols, n))
            return out
        return logic
    if isinstance(f, Not):
        part = _compile(f.field)
        return lambda cols, n: pc.invert(part(cols, n))
    if isinstance(f, Constant):
        return lambda cols, n: pa.array([f.value] * n, pa.bool_())
    column = f.column
    if isinstance(f, IsNull):
        return lambda cols, n: pc.is_null(_column(cols, column, n))
    if isinstance(f, Equals):
        if isinstance(f.value, float):
            target = f.value
            return lambda cols, n: pc.equal(_as_double(_column(cols, column, n)), target)
        text = f.value
        return lambda cols, n: pc.equal(_as_string(_column(cols, column, n)), text)
    if isinstance(f, In):
        wanted = pa.array(list(f.values), pa.string())
        on_null = pa.scalar(True if f.match_null else None, pa.bool_())

        def is_in(cols: Columns, n: int) -> pa.Array:
            col = _as_string(_column(cols, column, n))
            return pc.if_else(pc.is_null(col), on_null, pc.is_in(col, value_set=wanted))
        return is_in
    if isinstance(f, Bound):
        return _bound(f)
    pattern = f.pattern  # Matches
    return lambda cols, n: pc.match_substring_regex(_as_string(_column(cols, column, n)), pattern)


def _bound(f: Bound) -> Predicate:
    lower_op = pc.greater if f.lower_strict else pc.greater_equal
    upper_op = pc.less if f.upper_strict else pc.less_equal

    def bound(cols: Columns, n: int) -> pa.Array:
        raw = _column(cols, f.column, n)
        col = _as_double(raw) if f.numeric else _as_string(raw)
        out = pa.array([True] * n, pa.bool_())
        if f.lower is not None:
            out = pc.and_kleene(out, lower_op(col, f.lower))
        if f.upper is not None:
            out = pc.and_kleene(out, upper_op(col, f.upper))
        return out
    return bound
