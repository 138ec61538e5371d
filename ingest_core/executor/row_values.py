"""A row's values converted to its columns' types, as Druid converts them: a dimension's or an aggregator
input's value to string, long, float or double, a mixed column's Python values, and the kinds a hashed sketch
input keeps beside its text. A value that cannot be converted is null and its row processedWithError; numbers
are never wrapped, clamped or made infinite (docs/spark-job.md's value -> outcome table)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ingest_core.core.aggregators import DOUBLE, LIST, LONG, TEXT, SerializedInput
from ingest_core.executor.expr_values import concat_arrays
from ingest_core.executor.formats.base import json_text

DIM_TYPES = {"string": pa.string(), "long": pa.int64(), "float": pa.float32(), "double": pa.float64(),
             "json": pa.string(), "auto": pa.string()}
METRIC_INPUT_TYPES = {"long": pa.int64(), "double": pa.float64(), "float": pa.float32(), "string": pa.string()}
LONG_MIN, LONG_MAX = -(2 ** 63), 2 ** 63 - 1
FLOAT_MAX = 3.4028234663852886e38  # the largest finite float32


def to_string_value(v: Any, multi: str) -> str | None:
    if v is None:
        return None
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        items = [to_string_value(x, multi) for x in v]
        items = [x for x in items if x is not None]
        if not items:
            return None
        if multi in ("sorted_array", "sorted_set", "SORTED_ARRAY", "SORTED_SET"):
            items = sorted(set(items)) if multi.lower() == "sorted_set" else sorted(items)
        # Parquet has no multi-value strings: a multi-value dimension is stored as a JSON array
        return items[0] if len(items) == 1 else json_text(items)
    if isinstance(v, dict):
        return json_text(v)
    if isinstance(v, float) and v.is_integer():
        return repr(v)
    return str(v)


def numeric_text(v: str) -> str:
    """Text that may be read as a number: ASCII, without the underscores Python's int() and float() accept
    (`1_000`) and Java's parsers do not."""
    text = v.strip()
    if not text.isascii() or "_" in text:
        raise ValueError(f"{short(v)!r} is not a number")
    return text


def to_long_value(v: Any) -> int | None:
    """Druid's long conversion: a fraction is truncated; a value past the int64 range, NaN or an infinity
    raises (the row is processedWithError), never wraps."""
    if v is None:
        return None
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, float):
        if not -2.0 ** 63 <= v < 2.0 ** 63:  # NaN compares false too
            raise ValueError(f"{v!r} is outside the long range [-2^63, 2^63)")
        return int(v)
    if not isinstance(v, int):
        if not isinstance(v, str):
            raise ValueError(f"a JSON {type(v).__name__} is not a number")
        text = numeric_text(v)
        try:
            v = int(text)
        except ValueError:
            return to_long_value(float(text))
    if not LONG_MIN <= v <= LONG_MAX:
        raise ValueError(f"{v} is outside the long range [-2^63, 2^63)")
    return v


def to_double_value(v: Any, limit: float = sys.float_info.max) -> float | None:
    """A finite double (for `float` columns, `limit` is float32's largest); NaN, infinities and values past
    the limit raise (the row is processedWithError), never become infinite."""
    if v is None:
        return None
    if isinstance(v, (list, dict)):
        raise ValueError(f"a JSON {type(v).__name__} is not a number")
    out = float(numeric_text(v) if isinstance(v, str) else v)
    if not abs(out) <= limit:  # NaN compares false too
        raise ValueError(f"{out!r} is not a finite number" if limit == sys.float_info.max
                         else f"{out!r} is outside the float range (|v| <= {FLOAT_MAX})")
    return out


CONVERTERS: dict[str, Callable[[Any], Any]] = {"long": to_long_value, "double": to_double_value,
                                                "float": lambda v: to_double_value(v, FLOAT_MAX)}


@dataclass(frozen=True)
class Target:
    """An output column: a dimension or an aggregator's input field, with its type."""

    column: str
    source: str
    kind: str  # string, long, float, double (json dimensions are stored as string; auto ones in AUTO_JSON)
    is_metric_input: bool


def typed_column(t: Target, raw: Any, n: int, with_error: dict[int, str], multi: str = "sorted_array") -> pa.Array:
    """`raw` (an array, or the Python values of a mixed column) as the target's type; a value that does not
    convert is null and its row is listed in `with_error` (processedWithError)."""
    target_type = DIM_TYPES[t.kind] if not t.is_metric_input else METRIC_INPUT_TYPES[t.kind]
    if raw is None:
        return pa.nulls(n, target_type)
    what = "metric input" if t.is_metric_input else "dimension"
    raw_values = raw if isinstance(raw, list) else None
    if raw_values is None:
        if isinstance(raw, pa.ChunkedArray):
            raw = raw.combine_chunks()
        if t.kind == "string":
            if raw.type == target_type:
                return raw
            if pa.types.is_integer(raw.type) or pa.types.is_string(raw.type):
                return pc.cast(raw, pa.string())
        elif pa.types.is_integer(raw.type) or pa.types.is_floating(raw.type) or pa.types.is_null(raw.type):
            typed = numeric_column(t, raw, target_type, with_error, what)
            if typed is not None:
                return typed
    if t.kind == "string":
        return pa.array([to_string_value(v, multi) for v in (raw_values or raw.to_pylist())], pa.string())
    convert = CONVERTERS[t.kind]
    values: list[Any] = []
    for row, v in enumerate(raw_values if raw_values is not None else raw.to_pylist()):
        try:
            values.append(convert(v))
        except (ValueError, TypeError, OverflowError) as exc:
            values.append(None)
            with_error.setdefault(row, f"could not convert value [{short(v)}] to {t.kind} for {what} "
                                       f"'{t.source}' ({exc}); stored as null")
    return pa.array(values, target_type)


def numeric_column(t: Target, raw: pa.Array, target_type: pa.DataType, with_error: dict[int, str],
                   what: str) -> pa.Array | None:
    """A numeric array as the target's type, vectorized: floats past the long range (or float32's), NaN and
    infinities are null and listed in `with_error`, never wrapped or made infinite. None: take the per-value
    path (an unsigned value past the long range)."""
    if pa.types.is_null(raw.type):
        return pa.nulls(len(raw), target_type)
    if pa.types.is_integer(raw.type):
        if t.kind != "long":
            return pc.cast(raw, target_type, safe=False)  # the nearest double (float), as Druid stores it
        try:
            return pc.cast(raw, pa.int64())
        except pa.ArrowInvalid:
            return None
    if t.kind == "long":
        ok = pc.and_(pc.greater_equal(raw, -(2.0 ** 63)), pc.less(raw, 2.0 ** 63))  # NaN compares false
    elif t.kind == "float":
        ok = pc.less_equal(pc.abs(raw), FLOAT_MAX)
    else:
        ok = pc.is_finite(raw)
    wrong = pc.invert(pc.fill_null(ok, True))
    if pc.any(wrong).as_py():
        for row in pc.indices_nonzero(wrong).to_pylist():
            with_error.setdefault(row, f"could not convert value [{raw[row].as_py()!r}] to {t.kind} for {what} "
                                       f"'{t.source}' (outside the {t.kind} range, or not a finite number); "
                                       "stored as null")
        raw = pc.if_else(ok, raw, pa.scalar(None, raw.type))
    if t.kind == "long":
        return pc.cast(pc.trunc(raw), pa.int64(), safe=False)  # in range: truncated like Druid's (long) cast
    return raw if raw.type == target_type else pc.cast(raw, target_type, safe=False)


def as_text(columns: dict[str, pa.Array]) -> dict[str, pa.Array]:
    """Columns for the filter: a transform's array or JSON result as the text its dimension stores (the filter
    reads input lists and objects as that text too)."""
    nested = [k for k, v in columns.items() if pa.types.is_list(v.type) or isinstance(v.type, pa.ExtensionType)]
    if not nested:
        return columns
    return {**columns, **{k: pa.array([to_string_value(x, "sorted_array") for x in columns[k].to_pylist()],
                                      pa.string()) for k in nested}}


def plain_array(values: list[Any]) -> pa.Array | None:
    """The decoded values as a flat pyarrow array, or None when they mix types or nest."""
    try:
        arr = pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        return None
    if pa.types.is_struct(arr.type) or pa.types.is_list(arr.type) or pa.types.is_boolean(arr.type):
        return None
    return arr


def value_kinds(raw: Any, n: int) -> pa.Array:
    """Each value's kind (`core.aggregators`: TEXT, LONG, DOUBLE, LIST) as Druid's parser would type it: a
    JSON (or Avro, ...) integer is a long, a decimal a double, a list of several values a multi-value."""
    if raw is None:
        return pa.array(np.zeros(n, dtype=np.int8))
    if not isinstance(raw, list):
        if isinstance(raw, pa.ChunkedArray):
            raw = raw.combine_chunks()
        kind = LONG if pa.types.is_integer(raw.type) else DOUBLE if pa.types.is_floating(raw.type) else TEXT
        return pa.array(np.full(n, kind, dtype=np.int8))

    def kind(v: Any) -> int:
        if isinstance(v, bool):
            return TEXT
        if isinstance(v, int):
            return LONG
        if isinstance(v, float):
            return DOUBLE
        if isinstance(v, list) and sum(x is not None for x in v) > 1:
            return LIST
        return TEXT
    return pa.array([kind(v) for v in raw], pa.int8())


def checked_inputs(values: pa.Array, serialized: SerializedInput, column: str, with_error: dict[int, str]
                   ) -> pa.Array:
    """Serialized inputs (base64 text: sketches, variance collectors) that `serialized` reads; any other value is
    null and its row processedWithError, as Druid's parse exception for a value it cannot read."""
    out = values.to_pylist()
    for row, text in enumerate(out):
        if text is None:
            continue
        try:
            serialized.read(text)
        except ValueError as exc:
            out[row] = None
            with_error.setdefault(row, f"could not read {serialized.noun} from [{short(text)}] for metric input "
                                       f"'{column.split('_', 4)[-1]}': {exc}; stored as null")
    return pa.array(out, pa.string())


def type_groups(columns: list[list[Any]], n: int) -> list[np.ndarray]:
    """Row numbers grouped by the types of their values in `columns` (mixed columns as decoded), in row order
    within each group. A null joins the first group that agrees on the other columns: a column of numbers
    with nulls is still numbers."""
    def kind(v: Any) -> str | None:
        if v is None:
            return None
        if isinstance(v, int) and not isinstance(v, bool):
            return "int" if LONG_MIN <= v <= LONG_MAX else "big"
        if isinstance(v, list):  # a list's type is its elements' (an array's element type)
            return "list[" + ",".join(sorted({str(kind(x)) for x in v if x is not None})) + "]"
        return type(v).__name__

    keys = [tuple(kind(col[row]) for col in columns) for row in range(n)]
    full = list(dict.fromkeys(k for k in keys if None not in k))
    groups: dict[tuple, list[int]] = {k: [] for k in full}
    for row, key in enumerate(keys):
        if None in key:
            key = next((f for f in full if all(a is None or a == b for a, b in zip(key, f))), key)
        groups.setdefault(key, []).append(row)
    return [np.array(rows, dtype=np.int64) for rows in groups.values() if rows]


def concat_pieces(pieces: list[pa.Array]) -> pa.Array:
    """Arrays evaluated on consecutive slices as one array: one type for all (a slice of nulls only, or of
    whole numbers only, may have evaluated to a narrower type)."""
    pieces = [p.combine_chunks() if isinstance(p, pa.ChunkedArray) else p for p in pieces]
    types = {p.type for p in pieces if not pa.types.is_null(p.type)}
    if any(pa.types.is_list(t) or isinstance(t, pa.ExtensionType) for t in types):
        return concat_arrays(pieces)  # arrays or JSON values: their common expression type
    if not types:
        return pa.concat_arrays(pieces) if len(pieces) > 1 else pieces[0]
    if len(types) == 1:
        target = types.pop()
    elif all(pa.types.is_integer(t) or pa.types.is_floating(t) for t in types):
        target = pa.float64() if any(pa.types.is_floating(t) for t in types) else pa.int64()
    else:
        target = pa.string()
    return pa.concat_arrays([p if p.type == target else pc.cast(p, target) for p in pieces])


def short(value: Any, limit: int = 200) -> str:
    text = str(value)
    return text if len(text) <= limit else text[:limit] + "..."


def py_value(value: Any) -> Any:
    v = value.as_py()
    return short(v) if isinstance(v, (str, bytes, list, dict)) else v


def is_flat(value: Any) -> bool:
    """Whether field discovery takes a value: not an object, nor a list holding objects or lists."""
    if isinstance(value, dict):
        return False
    return not isinstance(value, list) or not any(isinstance(v, (dict, list)) for v in value)
