"""Values as the evaluator passes them: a pyarrow array (a column, a result) or a Python scalar (a constant), and
the rules Druid's Java applies to them: a value as a condition (`as_bool`), as a number for an operator (`numeric`:
text read as a number, null when it is none), as text (`as_text`: doubles as Java's Double.toString), math
functions' argument types (`math_args`, Function.java's Univariate/BivariateMathFunction), Java's (long) cast
(`java_long`). `per_value` runs a Python function on each row, `on_numpy` a numpy one on whole columns.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ingest_core.core.expression.errors import ExpressionError
from ingest_core.executor import value_functions
from ingest_core.executor.casts import LONG_MAX, is_arrow, is_text, to_double


Columns = Mapping[str, pa.Array]
Compiled = Callable[[Columns, int], Any]  # (columns, row count) -> pa.Array or a Python scalar


def broadcast(v: Any, n: int) -> pa.Array:
    if isinstance(v, (pa.Array, pa.ChunkedArray)):
        return v
    return pa.array([v] * n) if v is not None else pa.nulls(n)


def lift(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Apply a pyarrow compute function to arrays or Python scalars."""
    def call(*args: Any) -> Any:
        if not any(is_arrow(a) for a in args):
            if any(a is None for a in args):
                return None
            return fn(*[pa.scalar(a) for a in args]).as_py()
        return fn(*[a if is_arrow(a) else (pa.scalar(a) if a is not None else pa.scalar(None, pa.null()))
                    for a in args])
    return call


def value_type(v: Any) -> pa.DataType:
    if is_arrow(v):
        return v.type
    if isinstance(v, bool):
        return pa.bool_()
    if isinstance(v, int):
        return pa.int64()
    if isinstance(v, float):
        return pa.float64()
    if v is None:
        return pa.null()
    return pa.string()


def is_numeric_type(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t)


def as_bool(v: Any, n: int) -> Any:
    t = value_type(v)
    if pa.types.is_boolean(t):
        return v
    if is_numeric_type(t):
        return lift(pc.greater)(v, 0)
    if is_text(t):
        return lift(pc.equal)(lift(pc.utf8_lower)(v), "true")
    if pa.types.is_null(t):
        return v
    raise ExpressionError(f"cannot use a value of type {t} as a condition")


def as_long(v: Any) -> Any:
    t = value_type(v)
    if pa.types.is_boolean(t):
        return int(v) if not is_arrow(v) else pc.cast(v, pa.int64())
    return v


def numeric(v: Any) -> Any:
    """A value for a numeric operator: text read as a number (null when it is not one), as Druid does."""
    v = as_long(v)
    return to_double(v) if is_text(value_type(v)) else v


def as_text(v: Any) -> Any:
    """A value as Druid's asString: doubles as Java's Double.toString ('1.0', '1.0E7', 'NaN')."""
    if not is_arrow(v):
        if isinstance(v, float):
            return value_functions.java_double(v)
        return None if v is None else (str(v).lower() if isinstance(v, bool) else str(v))
    if pa.types.is_string(v.type):
        return v
    if not pa.types.is_floating(v.type):
        return pc.cast(v, pa.string())
    v = pc.cast(v, pa.float64())
    text = pc.cast(v, pa.string())
    magnitude = pc.abs(v)
    plain = pc.or_(pc.and_(pc.greater_equal(magnitude, 1e-3), pc.less(magnitude, 1e7)), pc.equal(v, 0.0))
    text = pc.if_else(pc.and_(plain, pc.equal(v, pc.trunc(v))), pc.binary_join_element_wise(text, ".0", ""), text)
    other = pc.fill_null(pc.invert(plain), False)  # exponents, NaN, infinities: Java's own spelling, per value
    if pc.any(other).as_py():
        rows = np.flatnonzero(other.to_numpy(zero_copy_only=False))
        values = text.to_pylist()
        for row, x in zip(rows, v.take(pa.array(rows)).to_pylist()):
            values[row] = value_functions.java_double(x)
        text = pa.array(values, pa.string())
    return text


def unify(a: Any, b: Any, n: int) -> tuple[pa.Array, pa.Array]:
    """Two values as arrays of one type: text if either is text, else double if they differ."""
    ta, tb = value_type(a), value_type(b)
    if ta != tb and not pa.types.is_null(ta) and not pa.types.is_null(tb):
        if is_text(ta) or is_text(tb):
            a, b = as_text(a), as_text(b)
        else:
            a, b = to_double(a), to_double(b)
    aa, bb = broadcast(a, n), broadcast(b, n)
    if pa.types.is_null(aa.type):
        aa = pa.nulls(n, bb.type)
    if pa.types.is_null(bb.type):
        bb = pa.nulls(n, aa.type)
    return aa, bb


def per_value(fn: Callable[..., Any], out_type: pa.DataType, nulls: bool = True) -> Callable[..., Any]:
    """A function of Python values applied to each row (arrays or constants in, an array out); with `nulls`, a
    row with a null argument is null without calling it. It raises ExpressionError for a row it cannot take,
    which fails that row only (the row parser finds it)."""
    def apply(n: int, *args: Any) -> Any:
        if not any(is_arrow(a) for a in args):
            return None if nulls and any(a is None for a in args) else fn(*args)
        columns = [a.to_pylist() if is_arrow(a) else [a] * n for a in args]
        out = [None if nulls and any(v is None for v in row) else fn(*row) for row in zip(*columns)]
        return pa.array(out, out_type)
    return apply


def on_numpy(fn: Callable[..., Any], args: list[Any], n: int, out_type: pa.DataType) -> Any:
    """`fn` over numpy arrays of the arguments (numbers of one kind each, nulls masked), vectorized."""
    if not any(is_arrow(a) for a in args):
        if any(a is None for a in args):
            return None
        with np.errstate(all="ignore"):
            value = fn(*[np.asarray([a]) for a in args])[0]
        return value.item()
    mask = None
    values = []
    for a in args:
        if a is None:
            return pa.nulls(n, out_type)
        if is_arrow(a):
            a = a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a
            if a.null_count:
                nulls = pc.is_null(a).to_numpy(zero_copy_only=False)
                mask = nulls if mask is None else mask | nulls
                a = pc.fill_null(a, pa.scalar(0, a.type))
            values.append(a.to_numpy(zero_copy_only=False))
        else:
            values.append(np.asarray(a))
    with np.errstate(all="ignore"):
        result = np.broadcast_to(fn(*values), (n,))
    return pa.array(result, out_type, mask=mask)


def math_args(*args: Any) -> list[Any]:
    """Druid's math functions' arguments: a lone argument that is text is null (UnivariateMathFunction, even
    '3'); of two, both text give null and one text is read as a number (BivariateMathFunction's autoDetect)."""
    args = tuple(as_long(a) for a in args)
    texts = [is_text(value_type(a)) for a in args]
    if all(texts):
        return [None] * len(args)
    return [to_double(a) if text else a for a, text in zip(args, texts)]


def number_only(v: Any) -> Any:
    """round's and the size formats' first argument: a number; text is null, or an error when it holds a
    number (Druid: 'first argument should be a LONG or DOUBLE but got STRING')."""
    v = as_long(v)
    if not is_text(value_type(v)):
        return v
    numbers = to_double(v)
    if (numbers is not None) if not is_arrow(numbers) else numbers.null_count < len(numbers):
        raise ExpressionError("first argument should be a LONG or DOUBLE but got STRING instead")
    return None


def doubles(*args: Any) -> list[Any]:
    return [to_double(a) for a in math_args(*args)]


def java_long(d: Any, checked: bool = False) -> Any:
    """Java's (long) cast of doubles: toward zero, NaN as 0, saturated at the long range (an error instead when
    `checked`, as Druid's UnivariateMathFunction does for a double past the long range)."""
    d = np.asarray(d, dtype=np.float64)
    if checked and np.any((d < -2.0 ** 63) | (d > 2.0 ** 63)):
        raise ExpressionError("possible data truncation: the value is out of the LONG range")
    out = np.where(np.isnan(d), 0.0, np.trunc(d))
    result = np.clip(out, -2.0 ** 63, 2.0 ** 63 - 1024).astype(np.int64)  # the largest double below 2**63
    return np.where(out >= 2.0 ** 63, LONG_MAX, result)


def longs(*args: Any, checked: bool = False) -> list[Any]:
    """Arguments as longs: doubles cast as Java casts them, text read as a number first."""
    out = []
    for a in args:
        a = numeric(a)
        if pa.types.is_floating(value_type(a)):
            if is_arrow(a):
                a = a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a
                a = pa.array(java_long(pc.fill_null(a, 0.0).to_numpy(zero_copy_only=False), checked), pa.int64(),
                             mask=pc.is_null(a).to_numpy(zero_copy_only=False) if a.null_count else None)
            else:
                a = int(java_long(a, checked))
        out.append(a)
    return out


def both_longs(x: Any, y: Any) -> bool:
    return pa.types.is_integer(value_type(x)) and pa.types.is_integer(value_type(y))
