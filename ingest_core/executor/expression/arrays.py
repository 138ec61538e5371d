"""Druid's array functions on the executors (array, array_length, array_contains, ..., string_to_array), and
array literals and casts to array types.

They run row by row on Python values (`expr_values`), with Druid's semantics (Function.java): a null array gives
null, a scalar where an array is expected is a one-element array, an added element is cast to the array's element
type; array_length of a list column runs on Arrow.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Mapping

import pyarrow as pa
import pyarrow.compute as pc

from ingest_core.core.expression.errors import ExpressionError
from ingest_core.core.expression.patterns import compile_regex
from ingest_core.core.expression.tree import ArrayLiteral
from ingest_core.executor.expr_values import (
    Arr,
    as_array,
    build,
    cast,
    cast_element,
    from_values,
    to_long,
    to_string,
    to_values,
    type_of,
)

Columns = Mapping[str, Any]
Compiled = Callable[[Columns, int], Any]


def rowwise(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A function of Python values, applied to each row of its (array or constant) arguments."""
    def apply(n: int, *args: Any) -> pa.Array:
        columns = [to_values(a, n) for a in args]
        return from_values([fn(*row) for row in zip(*columns)] if columns else [fn() for _ in range(n)], n)
    return apply


# ------------------------------------------------------------------------------------------ array functions


def _array(*values: Any) -> Arr:
    """array(...): the type of the first (non-null) argument, the others cast to it."""
    element = next((type_of(v) for v in values if v is not None), "STRING") or "STRING"
    return Arr(element, tuple(cast_element(v, element) for v in values))


def _length(arr: Any) -> int | None:
    a = as_array(arr)
    return None if a is None else len(a)


def _offset(arr: Any, index: Any, base: int = 0) -> Any:
    a, i = as_array(arr), to_long(index)
    if a is None or i is None:
        return None
    i -= base
    return a.items[i] if 0 <= i < len(a) else None


def _element_of_array(a: Arr, value: Any, name: str) -> Any:
    if isinstance(value, Arr):
        raise ExpressionError(f"{name}(): the second argument must be a scalar, got an array")
    return cast_element(value, a.element)


def _offset_of(arr: Any, value: Any, base: int = 0, name: str = "array_offset_of") -> int | None:
    a = as_array(arr)
    if a is None:
        return None
    wanted = _element_of_array(a, value, name)
    for i, x in enumerate(a.items):
        if x == wanted and (x is not None or wanted is None):
            return i + base
    return None


def _members(items: tuple[Any, ...]) -> Any:
    """`items` for `in` tests: a set, or the tuple itself when they are JSON objects or lists (unhashable)."""
    try:
        return set(items)
    except TypeError:
        return items


def _contains(arr: Any, values: Any) -> int | None:
    """array_contains: every element of `values` (or the one scalar; null is an element too) is in `arr`."""
    a = as_array(arr)
    if a is None:
        return None
    wanted = as_array(values) if values is not None else Arr(a.element, (None,))
    have = _members(a.items)
    return int(all(cast_element(x, a.element) in have for x in wanted.items))  # type: ignore[union-attr]


def _overlap(arr: Any, other: Any) -> int | None:
    a, b = as_array(arr), as_array(other)
    if a is None:
        return None
    if b is None:
        return 0
    have = _members(a.items)
    return int(any(cast_element(x, a.element) in have for x in b.items))


def _scalar_in_array(value: Any, arr: Any) -> int | None:
    """scalar_in_array: null for a null value; else 1 when the array holds it, 0 when not (or no array)."""
    if value is None:
        return None
    a = as_array(arr)
    if a is None:
        return 0
    return int(_element_of_array(a, value, "scalar_in_array") in _members(a.items))


def _append(arr: Any, value: Any) -> Arr | None:
    a = as_array(arr)
    return None if a is None else Arr(a.element, a.items + (cast_element(value, a.element),))


def _prepend(value: Any, arr: Any) -> Arr | None:
    a = as_array(arr)
    return None if a is None else Arr(a.element, (cast_element(value, a.element),) + a.items)


def _merge(arr: Any, other: Any) -> tuple[Arr, Arr] | None:
    a, b = as_array(arr), as_array(other)
    if a is None or b is None:
        return None
    return a, cast(b, f"ARRAY<{a.element}>")


def _concat(arr: Any, other: Any) -> Arr | None:
    pair = _merge(arr, other)
    return None if pair is None else Arr(pair[0].element, pair[0].items + pair[1].items)


def _sorted_set(element: str, items: tuple[Any, ...]) -> Arr:
    """Druid's TreeSet of the element type's order, nulls first (JSON values and arrays by their text)."""
    by_text = element == "JSON" or element.startswith("ARRAY")
    unique = {(to_string(x) if by_text else x): x for x in items if x is not None}
    ordered = tuple(unique[k] for k in sorted(unique))
    return Arr(element, ((None,) if None in items else ()) + ordered)


def _set_add(arr: Any, value: Any) -> Arr | None:
    a = _append(arr, value)
    return None if a is None else _sorted_set(a.element, a.items)


def _set_add_all(arr: Any, other: Any) -> Arr | None:
    pair = _merge(arr, other)
    return None if pair is None else _sorted_set(pair[0].element, pair[0].items + pair[1].items)


def _slice(arr: Any, start: Any, end: Any = None) -> Arr | None:
    """array_slice: null when start is negative, past the end or after `end`; an `end` past the array pads with
    nulls (Java's Arrays.copyOfRange)."""
    a, s = as_array(arr), to_long(start)
    if a is None or s is None:
        return None
    e = len(a) if end is None else to_long(end)
    if e is None or s < 0 or s > len(a) or s > e:
        return None
    items = a.items[s:e]
    return Arr(a.element, items + (None,) * (e - s - len(items)))


def _array_to_string(arr: Any, delimiter: Any) -> str | None:
    a = as_array(arr)
    if a is None or a.items == (None,):
        return None
    return ("" if delimiter is None else str(delimiter)).join("null" if x is None else str(to_string(x))
                                                             for x in a.items)


_PATTERNS: dict[str, re.Pattern[str]] = {}


def java_split(text: str, pattern: str) -> list[str]:
    """Java's String.split(regex): no leading empty piece for a zero-width match at the start, trailing empty
    pieces removed."""
    rx = _PATTERNS.get(pattern)
    if rx is None:
        rx = _PATTERNS.setdefault(pattern, compile_regex(pattern))
    if text == "":
        return [""]
    pieces, last = [], 0
    for m in rx.finditer(text):
        if m.end() == 0:
            continue  # a zero-width match at the start gives no leading empty piece
        if m.start() == m.end() and m.start() >= len(text):
            break
        pieces.append(text[last:m.start()])
        last = m.end()
    pieces.append(text[last:])
    while len(pieces) > 1 and pieces[-1] == "":
        pieces.pop()
    return pieces if pieces != [""] or text == "" else [text]


def _string_to_array(s: Any, pattern: Any) -> Arr | None:
    if s is None or isinstance(s, Arr):
        return None if s is None else cast(s, "ARRAY<STRING>")
    return Arr("STRING", tuple(java_split(str(to_string(s)), "" if pattern is None else str(pattern))))


def array_length(n: int, arr: Any) -> Any:
    if isinstance(arr, (pa.Array, pa.ChunkedArray)) and pa.types.is_list(arr.type):
        return pc.cast(pc.list_value_length(arr), pa.int64())  # a list column: vectorized
    return rowwise(_length)(n, arr)



# the registry's implementations (core.expression.functions names them "arrays.<name>")
array = rowwise(_array)
array_offset = rowwise(_offset)
array_ordinal = rowwise(lambda arr, index: _offset(arr, index, 1))
array_contains = rowwise(_contains)
array_overlap = rowwise(_overlap)
scalar_in_array = rowwise(_scalar_in_array)
array_offset_of = rowwise(_offset_of)
array_ordinal_of = rowwise(lambda arr, value: _offset_of(arr, value, 1, "array_ordinal_of"))
array_prepend = rowwise(_prepend)
array_append = rowwise(_append)
array_concat = rowwise(_concat)
array_set_add = rowwise(_set_add)
array_set_add_all = rowwise(_set_add_all)
array_slice = rowwise(_slice)
array_to_string = rowwise(_array_to_string)
string_to_array = rowwise(_string_to_array)
array_to_mv = rowwise(lambda arr: cast(as_array(arr), "ARRAY<STRING>"))


def cast_to_array(n: int, v: Any, element: str) -> pa.Array:
    """cast(x, 'ARRAY<LONG>') (or LONG_ARRAY...): each element cast; a scalar is a one-element array."""
    return build([cast(x, f"ARRAY<{element}>") for x in to_values(v, n)], f"ARRAY<{element}>")


def compile_array_literal(node: ArrayLiteral) -> Compiled:
    value = Arr(node.element_type, node.items)
    return lambda cols, n: build([value] * n, f"ARRAY<{node.element_type}>")

