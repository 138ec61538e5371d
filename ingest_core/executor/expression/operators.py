"""The operators: `+ - * / % ^` (long arithmetic checked for overflow, long division by zero an error, `+` with text
concatenating), comparisons (numbers against text compare as doubles) and `&& ||` (SQL's three-valued logic on
Druid's truth: a number is true when positive, text when it is 'true').
"""

from __future__ import annotations

from typing import Any, Callable

import pyarrow as pa
import pyarrow.compute as pc

from ingest_core.core.expression.errors import ExpressionError
from ingest_core.executor.casts import is_arrow, is_text, to_double
from ingest_core.executor.expression.vectors import (
    as_bool,
    as_long,
    as_text,
    is_numeric_type,
    lift,
    numeric,
    value_type,
)


_CHECKED = {"+": pc.add_checked, "-": pc.subtract_checked, "*": pc.multiply_checked}


def arith(name: str) -> Callable[[Any, Any], Any]:
    def op(a: Any, b: Any) -> Any:
        a, b = as_long(a), as_long(b)
        if name == "+" and (is_text(value_type(a)) or is_text(value_type(b))):
            return lift(pc.binary_join_element_wise)(as_text(a), as_text(b), "")
        a, b = numeric(a), numeric(b)
        ta, tb = value_type(a), value_type(b)
        longs = pa.types.is_integer(ta) and pa.types.is_integer(tb)
        if name in ("/", "%") and longs:
            no_zero_divisor(b)
            q = lift(pc.divide)(a, b)  # integer division truncates toward zero, as in Java
            return q if name == "/" else lift(pc.subtract)(a, lift(pc.multiply)(q, b))  # sign of the dividend
        if name == "%":
            a, b = to_double(a), to_double(b)
            q = lift(pc.trunc)(lift(pc.divide)(a, b))
            return lift(pc.subtract)(a, lift(pc.multiply)(q, b))
        if name == "/":
            return lift(pc.divide)(to_double(a) if not longs and pa.types.is_integer(ta) else a,
                                    to_double(b) if not longs and pa.types.is_integer(tb) else b)
        if name == "^":
            return lift(pc.power)(to_double(a), to_double(b))
        return lift(_CHECKED[name] if longs else {"+": pc.add, "-": pc.subtract, "*": pc.multiply}[name])(a, b)
    return op


def no_zero_divisor(b: Any) -> None:
    if (b == 0) if not is_arrow(b) else (pc.any(pc.equal(b, 0)).as_py() or False):
        raise ExpressionError("long division by zero")


def compare(name: str) -> Callable[[Any, Any], Any]:
    fn = {"<": pc.less, "<=": pc.less_equal, ">": pc.greater, ">=": pc.greater_equal,
          "==": pc.equal, "!=": pc.not_equal}[name]

    def op(a: Any, b: Any) -> Any:
        a, b = as_long(a), as_long(b)
        ta, tb = value_type(a), value_type(b)
        if is_numeric_type(ta) != is_numeric_type(tb) and not (pa.types.is_null(ta) or pa.types.is_null(tb)):
            a, b = to_double(a), to_double(b)
        return lift(fn)(a, b)
    return op


def logic(name: str) -> Callable[[Any, Any], Any]:
    fn = pc.or_kleene if name == "||" else pc.and_kleene
    return lambda a, b: as_long(lift(fn)(as_bool(a, 0), as_bool(b, 0)))
