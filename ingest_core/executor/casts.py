"""Druid's casts of a value or a column to LONG and DOUBLE, as the expression language and the row parser
apply them: text is read as a number (null when it is not one), a LONG past the 64-bit range an error. Values
are Python scalars or pyarrow arrays; the functions take either (`is_arrow`)."""

from __future__ import annotations

import math
import re
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ingest_core.core.column_types import LONG_MAX, LONG_MIN
from ingest_core.core.expression.errors import ExpressionError


def is_arrow(v: Any) -> bool:
    return isinstance(v, (pa.Array, pa.ChunkedArray))


def is_text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def to_long(v: Any) -> Any:
    """Druid's cast to LONG: text is read as a number (null when it is not one; whole numbers exactly),
    fractions truncate toward zero; a value past the long range (or NaN, infinite) is an error, never a
    wrapped number."""
    if not is_arrow(v):
        if v is None or isinstance(v, bool):
            return None if v is None else int(v)
        if isinstance(v, str):
            text = v.strip()
            number = int(text) if re.fullmatch(_WHOLE_TEXT, text) else to_double(text)
        else:
            number = v
        if number is None:
            return None
        if isinstance(number, float) and not math.isfinite(number):
            raise ExpressionError(f"cannot cast {v!r} to LONG")
        out = int(number)
        if not LONG_MIN <= out <= LONG_MAX:
            raise ExpressionError(f"{v!r} is outside the LONG range")
        return out
    try:
        if is_text(v.type):
            whole = pc.match_substring_regex(v, _WHOLE_TEXT)
            exact = pc.cast(pc.if_else(whole, pc.utf8_trim_whitespace(v), pa.scalar(None, pa.string())), pa.int64())
            return pc.coalesce(exact, to_long(to_double(pc.if_else(whole, pa.scalar(None, pa.string()), v))))
        if pa.types.is_floating(v.type):
            return pc.cast(pc.trunc(v), pa.int64())  # a safe cast: NaN, infinities and overflow raise
        return pc.cast(v, pa.int64())
    except pa.ArrowInvalid as exc:
        raise ExpressionError(f"cannot cast to LONG: {exc}") from None


_WHOLE_TEXT = r"^\s*[-+]?\d+\s*$"
_NUMBER_TEXT = r"^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*$"


def to_double(v: Any) -> Any:
    """Druid's cast to DOUBLE: text that is a decimal number is read, anything else (including 'NaN') is null."""
    if not is_arrow(v):
        if v is None:
            return None
        if isinstance(v, str):
            return float(v) if re.match(_NUMBER_TEXT, v) else None
        return float(v)
    if is_text(v.type):
        ok = pc.match_substring_regex(v, _NUMBER_TEXT)
        cleaned = pc.if_else(ok, pc.utf8_trim_whitespace(v), pa.scalar(None, pa.string()))
        return pc.cast(cleaned, pa.float64())
    return pc.cast(v, pa.float64())
