"""`transformSpec.filter`: Druid's filter JSON compiled to a vectorized pyarrow predicate.

Supported types: selector, equals, in, bound, range, like, regex, null, true, false, and, or, not. Values are
compared as strings (selector, in, like, regex, lexicographic bound) or as numbers (numeric bound, range with a
numeric matchValueType), as Druid does. A row whose value is null matches only `selector` with `value: null`
and `null`; `not` of an unknown (null) comparison does not match (Druid's SQL-compatible null handling).
"""

from __future__ import annotations

import re
from typing import Any, Callable, Mapping

import pyarrow as pa
import pyarrow.compute as pc

from ingest_core.executor.expressions import _like_to_regex

Columns = Mapping[str, pa.Array]
Predicate = Callable[[Columns, int], pa.Array]

FILTER_TYPES = ("selector", "equals", "in", "bound", "range", "like", "regex", "null", "true", "false",
                "and", "or", "not")


class FilterError(ValueError):
    """A filter that cannot be compiled; the message names the path inside the filter."""


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
    from ingest_core.executor.expressions import _to_double

    if pa.types.is_timestamp(arr.type):
        arr = pc.cast(pc.cast(arr, pa.timestamp("ms", tz="UTC")), pa.int64())
    return _to_double(arr)


def _need(spec: Mapping, key: str, path: str) -> Any:
    if key not in spec:
        raise FilterError(f"{path}: a {spec.get('type')} filter needs {key!r}")
    return spec[key]


def _value_string(v: Any) -> str | None:
    if v is None:
        return None
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def compile_filter(spec: Any, path: str = "filter") -> Predicate:
    """Compile a filter; the predicate returns a boolean array without nulls (null means no match)."""
    inner = _compile(spec, path)

    def predicate(cols: Columns, n: int) -> pa.Array:
        out = inner(cols, n)
        if isinstance(out, pa.ChunkedArray):
            out = out.combine_chunks()
        return pc.fill_null(out, False)
    return predicate


def _compile(spec: Any, path: str) -> Predicate:
    if not isinstance(spec, Mapping) or "type" not in spec:
        raise FilterError(f"{path}: expected a filter object with a type, got {spec!r}")
    kind = spec["type"]
    if kind not in FILTER_TYPES:
        from ingest_core.core.binding import did_you_mean
        raise FilterError(f"{path}: filter type {kind!r} is not supported{did_you_mean(str(kind), FILTER_TYPES)}; "
                          f"supported: {', '.join(FILTER_TYPES)}")
    if spec.get("extractionFn") is not None:
        raise FilterError(f"{path}: extractionFn is not supported; compute the value with a transform instead")

    if kind in ("and", "or"):
        fields = _need(spec, "fields", path)
        if not isinstance(fields, list) or not fields:
            raise FilterError(f"{path}.fields: expected a non-empty list of filters")
        parts = [_compile(f, f"{path}.fields[{i}]") for i, f in enumerate(fields)]
        combine = pc.and_kleene if kind == "and" else pc.or_kleene

        def logic(cols: Columns, n: int) -> pa.Array:
            out = parts[0](cols, n)
            for p in parts[1:]:
                out = combine(out, p(cols, n))
            return out
        return logic
    if kind == "not":
        part = _compile(_need(spec, "field", path), f"{path}.field")
        return lambda cols, n: pc.invert(part(cols, n))
    if kind in ("true", "false"):
        value = kind == "true"
        return lambda cols, n: pa.array([value] * n, pa.bool_())

    column = spec.get("dimension", spec.get("column"))
    if not isinstance(column, str):
        raise FilterError(f"{path}: a {kind} filter needs 'dimension' (or 'column')")

    if kind == "null":
        return lambda cols, n: pc.is_null(_column(cols, column, n))
    if kind in ("selector", "equals"):
        value = spec.get("value") if kind == "selector" else _need(spec, "matchValue", path)
        if kind == "equals" and str(spec.get("matchValueType", "STRING")).upper() in ("LONG", "DOUBLE", "FLOAT"):
            target = float(value)
            return lambda cols, n: pc.equal(_as_double(_column(cols, column, n)), target)
        text = _value_string(value)
        if text is None:
            return lambda cols, n: pc.is_null(_column(cols, column, n))
        return lambda cols, n: pc.equal(_as_string(_column(cols, column, n)), text)
    if kind == "in":
        values = _need(spec, "values", path)
        if not isinstance(values, list):
            raise FilterError(f"{path}.values: expected a list")
        texts = [_value_string(v) for v in values]
        wanted = pa.array([t for t in texts if t is not None], pa.string())
        match_null = any(t is None for t in texts)

        def is_in(cols: Columns, n: int) -> pa.Array:
            col = _as_string(_column(cols, column, n))
            hit = pc.is_in(col, value_set=wanted)
            hit = pc.if_else(pc.is_null(col), pa.scalar(True if match_null else None, pa.bool_()), hit)
            return hit
        return is_in
    if kind in ("bound", "range"):
        return _compile_bound(spec, kind, column, path)
    if kind == "like":
        rx = _like_to_regex(str(_need(spec, "pattern", path)), spec.get("escape"))
        return lambda cols, n: pc.match_substring_regex(_as_string(_column(cols, column, n)), rx)
    if kind == "regex":
        pattern = str(_need(spec, "pattern", path))
        try:
            re.compile(pattern)
        except re.error as exc:
            raise FilterError(f"{path}.pattern: not a valid regular expression: {exc}") from None
        # Java's Matcher.find(): the pattern may match anywhere in the value
        return lambda cols, n: pc.match_substring_regex(_as_string(_column(cols, column, n)), pattern)
    raise FilterError(f"{path}: filter type {kind!r} is not supported")  # pragma: no cover - FILTER_TYPES guards


def _compile_bound(spec: Mapping, kind: str, column: str, path: str) -> Predicate:
    if kind == "bound":
        lower, upper = spec.get("lower"), spec.get("upper")
        lower_strict, upper_strict = bool(spec.get("lowerStrict")), bool(spec.get("upperStrict"))
        ordering = str(spec.get("ordering", "lexicographic")).lower()
        if ordering not in ("lexicographic", "numeric"):
            raise FilterError(f"{path}.ordering: {ordering!r} is not supported; use lexicographic or numeric")
        numeric = ordering == "numeric"
    else:
        lower, upper = spec.get("lower"), spec.get("upper")
        lower_strict, upper_strict = bool(spec.get("lowerOpen")), bool(spec.get("upperOpen"))
        numeric = str(spec.get("matchValueType", "STRING")).upper() in ("LONG", "DOUBLE", "FLOAT")
    if lower is None and upper is None:
        raise FilterError(f"{path}: a {kind} filter needs lower, upper or both")
    convert: Callable[[Any], Any] = float if numeric else _value_string
    lo = convert(lower) if lower is not None else None
    hi = convert(upper) if upper is not None else None

    def bound(cols: Columns, n: int) -> pa.Array:
        raw = _column(cols, column, n)
        col = _as_double(raw) if numeric else _as_string(raw)
        out = pa.array([True] * n, pa.bool_())
        if lo is not None:
            out = pc.and_kleene(out, (pc.greater if lower_strict else pc.greater_equal)(col, lo))
        if hi is not None:
            out = pc.and_kleene(out, (pc.less if upper_strict else pc.less_equal)(col, hi))
        return out
    return bound
