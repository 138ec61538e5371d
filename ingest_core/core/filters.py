"""`transformSpec.filter`: Druid's filter JSON read into small value objects and checked (pure), so that a
spec with a filter the job cannot apply is refused when it is validated. `ingest_core.executor.filters`
compiles the tree to a vectorized pyarrow predicate.

Supported types: selector, equals, in, bound, range, like, regex, null, true, false, and, or, not. Values are
compared as strings (selector, in, like, regex, lexicographic bound) or as numbers (numeric bound, range and
equals with a numeric matchValueType), as Druid does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Union

from ingest_core.core.binding import did_you_mean
from ingest_core.core.errors import IngestError, shown
from ingest_core.core.expression.errors import ExpressionError
from ingest_core.core.expression.patterns import compile_regex, like_to_regex

FILTER_TYPES = ("selector", "equals", "in", "bound", "range", "like", "regex", "null", "true", "false",
                "and", "or", "not")
NUMERIC_TYPES = ("LONG", "DOUBLE", "FLOAT")
MAX_DEPTH = 100


class FilterError(IngestError, ValueError):
    """A filter that cannot be used; the message names the path inside the filter."""

    code = "INGEST_FILTER_INVALID"


@dataclass(frozen=True)
class Logic:
    kind: str  # "and" or "or"
    fields: tuple["Filter", ...]


@dataclass(frozen=True)
class Not:
    field: "Filter"


@dataclass(frozen=True)
class Constant:
    value: bool


@dataclass(frozen=True)
class IsNull:
    column: str


@dataclass(frozen=True)
class Equals:
    """A value compared as text (selector, equals on strings) or as a number (equals on LONG/DOUBLE/FLOAT)."""

    column: str
    value: str | float


@dataclass(frozen=True)
class In:
    column: str
    values: tuple[str, ...]
    match_null: bool


@dataclass(frozen=True)
class Bound:
    column: str
    lower: str | float | None
    upper: str | float | None
    lower_strict: bool
    upper_strict: bool
    numeric: bool


@dataclass(frozen=True)
class Matches:
    """A regular expression found anywhere in the value (Java's Matcher.find()); like filters are anchored."""

    column: str
    pattern: str


Filter = Union[Logic, Not, Constant, IsNull, Equals, In, Bound, Matches]


def filter_columns(f: Filter) -> frozenset[str]:
    """The columns a filter reads."""
    if isinstance(f, Logic):
        return frozenset().union(*(filter_columns(x) for x in f.fields))
    if isinstance(f, Not):
        return filter_columns(f.field)
    if isinstance(f, Constant):
        return frozenset()
    return frozenset((f.column,))


def _need(spec: Mapping, key: str, path: str) -> Any:
    if key not in spec:
        raise FilterError(f"{path}: a {spec.get('type')} filter needs {key!r}")
    return spec[key]


def _text(v: Any) -> str | None:
    if v is None:
        return None
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _number(v: Any, path: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        raise FilterError(f"{path}: expected a number, got {shown(v)}")
    try:
        out = float(v)
    except ValueError:
        raise FilterError(f"{path}: {shown(v)} is not a number; a numeric comparison needs one (or use "
                          "ordering: lexicographic / matchValueType: STRING to compare text)") from None
    if math.isnan(out):
        raise FilterError(f"{path}: NaN matches nothing; write a number")
    return out


def parse_filter(spec: Any, path: str = "filter") -> Filter:
    """Read and check a Druid filter; FilterError names the path of the first problem."""
    return _parse(spec, path, 0)


def _parse(spec: Any, path: str, depth: int) -> Filter:
    if depth > MAX_DEPTH:
        raise FilterError(f"{path}: filters nest deeper than {MAX_DEPTH} levels")
    if not isinstance(spec, Mapping) or "type" not in spec:
        raise FilterError(f"{path}: expected a filter object with a type, got {shown(spec)}")
    kind = spec["type"]
    if kind not in FILTER_TYPES:
        raise FilterError(f"{path}: filter type {shown(kind)} is not supported{did_you_mean(str(kind), FILTER_TYPES)}; "
                          f"supported: {', '.join(FILTER_TYPES)}")
    if spec.get("extractionFn") is not None:
        raise FilterError(f"{path}: extractionFn is not supported; compute the value with a transform instead")

    if kind in ("and", "or"):
        fields = _need(spec, "fields", path)
        if not isinstance(fields, list) or not fields:
            raise FilterError(f"{path}.fields: expected a non-empty list of filters")
        return Logic(kind, tuple(_parse(f, f"{path}.fields[{i}]", depth + 1) for i, f in enumerate(fields)))
    if kind == "not":
        return Not(_parse(_need(spec, "field", path), f"{path}.field", depth + 1))
    if kind in ("true", "false"):
        return Constant(kind == "true")

    column = spec.get("dimension", spec.get("column"))
    if not isinstance(column, str) or not column:
        raise FilterError(f"{path}: a {kind} filter needs 'dimension' (or 'column')")
    if kind == "null":
        return IsNull(column)
    if kind == "selector":
        value = _text(spec.get("value"))
        return IsNull(column) if value is None else Equals(column, value)
    if kind == "equals":
        value = _need(spec, "matchValue", path)
        value_type = str(spec.get("matchValueType", "STRING")).upper()
        if value_type in NUMERIC_TYPES:
            return Equals(column, _number(value, f"{path}.matchValue"))
        if value_type != "STRING":
            raise FilterError(f"{path}.matchValueType: {spec.get('matchValueType')!r} is not supported; use "
                              f"STRING, {', '.join(NUMERIC_TYPES)}")
        text = _text(value)
        if text is None:
            raise FilterError(f"{path}.matchValue: equals needs a value; use a null filter to match nulls")
        return Equals(column, text)
    if kind == "in":
        values = _need(spec, "values", path)
        if not isinstance(values, list):
            raise FilterError(f"{path}.values: expected a list")
        texts = [_text(v) for v in values]
        return In(column, tuple(t for t in texts if t is not None), any(t is None for t in texts))
    if kind in ("bound", "range"):
        return _bound(spec, kind, column, path)
    if kind == "like":
        pattern = _need(spec, "pattern", path)
        escape = spec.get("escape")
        if escape is not None and len(str(escape)) != 1:
            raise FilterError(f"{path}.escape: the escape must be one character, got {shown(escape)}")
        return Matches(column, like_to_regex(str(pattern), None if escape is None else str(escape)))
    pattern = str(_need(spec, "pattern", path))  # regex
    try:
        compile_regex(pattern)
    except ExpressionError as exc:
        raise FilterError(f"{path}.pattern: {exc}") from None
    return Matches(column, pattern)


def _bound(spec: Mapping, kind: str, column: str, path: str) -> Bound:
    lower, upper = spec.get("lower"), spec.get("upper")
    if kind == "bound":
        lower_strict, upper_strict = bool(spec.get("lowerStrict")), bool(spec.get("upperStrict"))
        ordering = str(spec.get("ordering", "lexicographic")).lower()
        if ordering not in ("lexicographic", "numeric"):
            raise FilterError(f"{path}.ordering: {ordering!r} is not supported; use lexicographic or numeric")
        numeric = ordering == "numeric"
    else:
        lower_strict, upper_strict = bool(spec.get("lowerOpen")), bool(spec.get("upperOpen"))
        value_type = str(spec.get("matchValueType", "STRING")).upper()
        if value_type not in NUMERIC_TYPES + ("STRING",):
            raise FilterError(f"{path}.matchValueType: {spec.get('matchValueType')!r} is not supported; use "
                              f"STRING, {', '.join(NUMERIC_TYPES)}")
        numeric = value_type in NUMERIC_TYPES
    if lower is None and upper is None:
        raise FilterError(f"{path}: a {kind} filter needs lower, upper or both")
    if numeric:
        lo = _number(lower, f"{path}.lower") if lower is not None else None
        hi = _number(upper, f"{path}.upper") if upper is not None else None
    else:
        lo, hi = _text(lower), _text(upper)
    return Bound(column, lo, hi, lower_strict, upper_strict, numeric)
