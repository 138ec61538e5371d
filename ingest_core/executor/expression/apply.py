"""Druid's apply functions on the executors (map, cartesian_map, filter, fold, cartesian_fold, any, all), and its
implicit apply of multi-value columns.

An apply function evaluates its lambda's body with the evaluator's vectorized code: over every element of every
row at once (map, filter, any, all, cartesian_map), or one element position at a time across the rows (fold,
cartesian_fold, whose accumulator is sequential); map, filter, any and all of a list column with Arrow alone (its
elements flattened). The body sees the lambda's parameters as columns, over the row's other columns of the same
names. Multi-value (list) columns read as scalars are mapped as Druid's Parser rewrites them
(`with_implicit_apply`, `compile_arguments`; which columns and arguments: `core.expression.implicit_apply`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ingest_core.core.expression.errors import ExpressionError
from ingest_core.core.expression.implicit_apply import implicit_apply_candidates, mapped_arguments
from ingest_core.core.expression.tree import ArrayLiteral, Call, Column, Lambda, Literal, Node, node_columns
from ingest_core.executor.expr_values import (
    Arr,
    as_array,
    build,
    cast,
    cast_element,
    common_type,
    from_values,
    to_values,
    truthy,
    type_of,
)

Columns = Mapping[str, Any]
Compiled = Callable[[Columns, int], Any]
CompileNode = Callable[[Node, str], Compiled]


@dataclass(frozen=True)
class Apply:
    """How an apply function runs: `run` over rows of arrays, `fast` on a list column's flattened elements (Arrow
    alone). Where the lambda's body reads multi-value columns as scalars, Druid lifts them into the function:
    `maps` (map, cartesian_map) gives cartesian_map's result, `folds` (fold, cartesian_fold) folds over the product
    before the accumulator, the others apply to cartesian_map's results."""

    run: Callable[..., pa.Array]
    fast: Callable[..., pa.Array] | None = None
    maps: bool = False
    folds: bool = False




def _evaluate(body: Compiled, outer: Columns, reads: set[str], rows: list[int],
              bound: dict[str, pa.Array]) -> list[Any]:
    """The body over len(rows) evaluations: evaluation k sees row rows[k] of the outer columns and element k of
    each bound parameter."""
    index = pa.array(rows, pa.int64())
    cols: dict[str, Any] = {name: outer[name].take(index) for name in reads if name in outer and name not in bound}
    cols.update(bound)
    return to_values(body(cols, len(rows)), len(rows))


def compile_arguments(node: Call, text: str, compile_node: CompileNode) -> list[Compiled]:
    """A call's arguments compiled (a lambda left out). Those Druid's implicit apply rewrites on their own
    (`mapped_arguments`: `concat(tags, '!')` in `array_to_string(concat(tags, '!'), ',')`) are mapped over their
    own multi-value columns."""
    mapped = mapped_arguments(node)
    out: list[Compiled] = []
    for i, arg in enumerate(node.args):
        if isinstance(arg, Lambda):  # compiled by compile_apply
            continue
        compiled = compile_node(arg, text)
        own = i in mapped and not isinstance(arg, (Column, Literal, ArrayLiteral))
        out.append(with_implicit_apply(arg, compiled) if own else compiled)
    return out


def compile_apply(node: Call, text: str, compile_node: CompileNode, how: Apply) -> Compiled:
    """An apply function's call: its lambda's body compiled once, applied to the arrays' elements. A multi-value
    column the body reads as a scalar is lifted into the function, as Druid's liftApplyLambda: map(x -> x + y, x)
    runs as cartesian_map((x, y) -> x + y, x, y)."""
    lam = node.args[0]
    assert isinstance(lam, Lambda)
    body = compile_node(lam.body, text)
    args = compile_arguments(node, text, compile_node)
    reads = node_columns(lam.body)
    lift = implicit_apply_candidates(lam.body, lam.params)
    run, fast = how.run, how.fast

    def apply(cols: Columns, n: int) -> Any:
        raw = [a(cols, n) for a in args]
        lifted = tuple(c for c in lift if c in cols and _is_list(cols[c]))
        try:
            if lifted:
                return _lifted(how, lam.params, lifted, body, cols, reads, raw, n)
            if fast is not None and _is_list(raw[0]):
                return fast(lam.params[0], body, cols, reads, _whole(raw[0]))
            return run(lam.params, body, cols, reads, [to_values(r, n) for r in raw], n)
        except ExpressionError as exc:
            if str(exc).startswith("in expression"):
                raise
            raise ExpressionError(f"in expression {text!r}: {node.name}(): {exc}") from None
    return apply


def _lifted(how: Apply, params: tuple[str, ...], lifted: tuple[str, ...], body: Compiled, cols: Columns,
            reads: set[str], raw: list[Any], n: int) -> pa.Array:
    """An apply function whose body reads multi-value columns `lifted` as scalars, as Druid rewrites it: map and
    cartesian_map take them as more arrays (cartesian_map); fold and cartesian_fold too, before the accumulator
    (cartesian_fold); filter, any and all apply to cartesian_map's results with an identity lambda, as Druid's
    rewrite does (filter then keeps the true results, not the elements)."""
    extra = [to_values(cols[c], n) for c in lifted]
    values = [to_values(r, n) for r in raw]
    if how.folds:
        return _cartesian_fold(params[:-1] + lifted + params[-1:], body, cols, reads,
                               values[:-1] + extra + values[-1:], n)
    mapped = _cartesian_map(params + lifted, body, cols, reads, values + extra, n)
    if how.maps:
        return mapped
    identity: Compiled = lambda c, m: c["_"]  # noqa: E731 - Druid's `_ -> _`
    return how.run(("_",), identity, {}, set(), [to_values(mapped, n)], n)


def _flatten(arrays: list[Arr | None]) -> tuple[list[int], list[Any], str]:
    rows: list[int] = []
    items: list[Any] = []
    for i, a in enumerate(arrays):
        if a is not None:
            rows.extend([i] * len(a))
            items.extend(a.items)
    element = common_type(a.element for a in arrays if a is not None and a.element != "?") or "STRING"
    return rows, items, element


def _map_results(arrays: list[Arr | None], rows: list[int], out: list[Any], empty: Callable[[Arr], Any]) -> pa.Array:
    """Per row: null for a null array, `empty(array)` for an empty one, else its elements' results."""
    element = common_type(type_of(v) for v in out) or "STRING"
    grouped: list[list[Any]] = [[] for _ in arrays]
    for row, value in zip(rows, out):
        grouped[row].append(value)
    result = [None if a is None else
              (empty(a) if len(a) == 0 else Arr(element, tuple(cast_element(v, element) for v in g)))
              for a, g in zip(arrays, grouped)]
    return from_values(result, len(arrays))


def _map(params: tuple[str, ...], body: Compiled, cols: Columns, reads: set[str], values: list[list[Any]],
         n: int) -> pa.Array:
    arrays = [as_array(v) for v in values[0]]
    rows, items, element = _flatten(arrays)
    out = _evaluate(body, cols, reads, rows, {params[0]: build(items, element)}) if rows else []
    return _map_results(arrays, rows, out, lambda a: a)


def _product(values: list[list[Any]], n: int) -> tuple[list[Arr | None], list[list[tuple[Any, ...]]], list[str]]:
    """Per row: the cartesian product of its arrays (null when one is null, empty when one is empty)."""
    products: list[list[tuple[Any, ...]]] = []
    marks: list[Arr | None] = []
    elements = ["STRING"] * len(values)
    for row in range(n):
        arrays = [as_array(v[row]) for v in values]
        if any(a is None for a in arrays):
            marks.append(None)
            products.append([])
            continue
        for k, a in enumerate(arrays):
            if a is not None and a.element != "?":
                elements[k] = a.element
        combos = list(itertools.product(*(a.items for a in arrays)))  # type: ignore[union-attr]
        marks.append(Arr("STRING", tuple(range(len(combos)))))  # a stand-in of the right length
        products.append(combos)
    return marks, products, elements


def _cartesian_map(params: tuple[str, ...], body: Compiled, cols: Columns, reads: set[str],
                   values: list[list[Any]], n: int) -> pa.Array:
    marks, products, elements = _product(values, n)
    rows = [row for row, combos in enumerate(products) for _ in combos]
    flat = [combo for combos in products for combo in combos]
    bound = {p: build([c[k] for c in flat], elements[k]) for k, p in enumerate(params)}
    out = _evaluate(body, cols, reads, rows, bound) if rows else []
    return _map_results(marks, rows, out, lambda a: Arr("STRING", ()))


def _filter(params: tuple[str, ...], body: Compiled, cols: Columns, reads: set[str], values: list[list[Any]],
            n: int) -> pa.Array:
    """filter: the elements the lambda holds true for; null when none do (or the array is null)."""
    arrays = [as_array(v) for v in values[0]]
    rows, items, element = _flatten(arrays)
    out = _evaluate(body, cols, reads, rows, {params[0]: build(items, element)}) if rows else []
    kept: list[list[Any]] = [[] for _ in arrays]
    for row, item, keep in zip(rows, items, out):
        if truthy(keep):
            kept[row].append(item)
    return from_values([Arr(a.element, tuple(k)) if a is not None and k else None for a, k in zip(arrays, kept)], n)


def _match(every: bool) -> Callable[..., pa.Array]:
    """any / all: 1 or 0; a null array is 0 for both, as Druid's."""
    def run(params: tuple[str, ...], body: Compiled, cols: Columns, reads: set[str], values: list[list[Any]],
            n: int) -> pa.Array:
        arrays = [as_array(v) for v in values[0]]
        rows, items, element = _flatten(arrays)
        out = _evaluate(body, cols, reads, rows, {params[0]: build(items, element)}) if rows else []
        result = [0 if a is None else int(every) for a in arrays]
        for row, value in zip(rows, out):
            if truthy(value) != every:
                result[row] = int(not every)
        return pa.array(result, pa.int64())
    return run


def _fold_steps(params: tuple[str, ...], body: Compiled, cols: Columns, reads: set[str],
                steps: list[list[tuple[Any, ...]] | None], elements: list[str], initial: list[Any], n: int) -> pa.Array:
    """Fold each row's steps (tuples of lambda arguments) into its accumulator, position by position across the
    rows; the accumulator is read as its initial value's type at each step and in the result (Druid's)."""
    acc_type = [type_of(v) or "STRING" for v in initial]
    acc = list(initial)
    longest = max((len(s) for s in steps if s is not None), default=0)
    for k in range(longest):
        active = [row for row, s in enumerate(steps) if s is not None and len(s) > k]
        bound = {p: build([steps[row][k][j] for row in active], elements[j])  # type: ignore[index]
                 for j, p in enumerate(params[:-1])}
        bound[params[-1]] = from_values([cast(acc[row], acc_type[row]) for row in active], len(active))
        for row, value in zip(active, _evaluate(body, cols, reads, active, bound)):
            acc[row] = value
    return from_values([None if s is None else cast(a, t) for s, a, t in zip(steps, acc, acc_type)], n)


def _fold(params: tuple[str, ...], body: Compiled, cols: Columns, reads: set[str], values: list[list[Any]],
          n: int) -> pa.Array:
    arrays = [as_array(v) for v in values[0]]
    element = common_type(a.element for a in arrays if a is not None and a.element != "?") or "STRING"
    steps = [None if a is None else [(x,) for x in a.items] for a in arrays]
    return _fold_steps(params, body, cols, reads, steps, [element], values[1], n)


def _cartesian_fold(params: tuple[str, ...], body: Compiled, cols: Columns, reads: set[str],
                    values: list[list[Any]], n: int) -> pa.Array:
    marks, products, elements = _product(values[:-1], n)
    # an empty input array gives an empty array (not the accumulator), as Druid's cartesian_fold
    empty = [m is not None and not p for m, p in zip(marks, products)]
    folded = _fold_steps(params, body, cols, reads, [None if m is None or e else p for m, p, e in
                                                     zip(marks, products, empty)], elements, values[-1], n)
    if not any(empty):
        return folded
    out = to_values(folded, n)
    return from_values([Arr("STRING", ()) if e else v for v, e in zip(out, empty)], n)


# ------------------------------------------------------------------------------------------ list arrays, vectorized
# map, filter, any and all of a list column (the usual case): the body over the flattened elements at once, the
# results put back in the lists' shape with Arrow, no Python value per element. Same results as the paths above.


def _is_list(v: Any) -> bool:
    return isinstance(v, (pa.Array, pa.ChunkedArray)) and pa.types.is_list(v.type)


def _whole(v: Any) -> pa.ListArray:
    return v.combine_chunks() if isinstance(v, pa.ChunkedArray) else v


def _flat_body(param: str, body: Compiled, cols: Columns, reads: set[str], arr: pa.ListArray) -> tuple[pa.Array, Any]:
    """The body over every element of `arr`; its result as an array (constants broadcast, null type as text)."""
    flat = arr.flatten()
    parents = pc.list_parent_indices(arr)
    bound = {name: cols[name].take(parents) for name in reads if name in cols and name != param}
    bound[param] = flat
    out = body(bound, len(flat))
    if isinstance(out, pa.ChunkedArray):
        out = out.combine_chunks()
    if not isinstance(out, pa.Array):
        out = build([out] * len(flat), type_of(out) or "STRING")
    if pa.types.is_boolean(out.type):
        out = pc.cast(out, pa.int64())
    if pa.types.is_null(out.type):
        out = pa.nulls(len(out), pa.string())
    return out, parents


def _lists(lengths: np.ndarray, values: pa.Array, nulls: pa.Array) -> pa.ListArray:
    offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), values, mask=nulls)


def _fast_map(param: str, body: Compiled, cols: Columns, reads: set[str], arr: pa.ListArray) -> pa.Array:
    out, _ = _flat_body(param, body, cols, reads, arr)
    lengths = pc.fill_null(pc.list_value_length(arr), 0).to_numpy(zero_copy_only=False)
    return _lists(lengths, out, arr.is_null())


def _truthy(out: pa.Array) -> np.ndarray:
    """Druid's asBoolean of each result: a number is true when positive, text when it is 'true'."""
    if pa.types.is_integer(out.type) or pa.types.is_floating(out.type):
        mask = pc.greater(out, 0)
    elif pa.types.is_string(out.type) or pa.types.is_large_string(out.type):
        mask = pc.equal(pc.utf8_lower(out), "true")
    else:
        mask = pa.array([truthy(v) for v in to_values(out, len(out))])
    return pc.fill_null(mask, False).to_numpy(zero_copy_only=False)


def _fast_filter(param: str, body: Compiled, cols: Columns, reads: set[str], arr: pa.ListArray) -> pa.Array:
    out, parents = _flat_body(param, body, cols, reads, arr)
    keep = _truthy(out)
    kept = np.bincount(parents.to_numpy(zero_copy_only=False)[keep], minlength=len(arr))
    return _lists(kept, arr.flatten().filter(pa.array(keep)), pa.array(kept == 0))  # none kept: null


def _fast_match(every: bool) -> Callable[..., pa.Array]:
    def run(param: str, body: Compiled, cols: Columns, reads: set[str], arr: pa.ListArray) -> pa.Array:
        out, parents = _flat_body(param, body, cols, reads, arr)
        hits = np.bincount(parents.to_numpy(zero_copy_only=False)[_truthy(out)], minlength=len(arr))
        lengths = pc.fill_null(pc.list_value_length(arr), 0).to_numpy(zero_copy_only=False)
        result = (hits == lengths) if every else (hits > 0)
        return pa.array(np.where(arr.is_null().to_numpy(zero_copy_only=False), 0, result.astype(np.int64)))
    return run


# the registry's implementations (core.expression.functions names them "apply.<name>")
map_ = Apply(_map, fast=_fast_map, maps=True)
cartesian_map = Apply(_cartesian_map, maps=True)
filter_ = Apply(_filter, fast=_fast_filter)
fold = Apply(_fold, folds=True)
cartesian_fold = Apply(_cartesian_fold, folds=True)
any_ = Apply(_match(False), fast=_fast_match(False))
all_ = Apply(_match(True), fast=_fast_match(True))


# ------------------------------------------------------------------------------------------ multi-value columns


def with_implicit_apply(root: Node, evaluate: Compiled) -> Compiled:
    """Druid's implicit apply: an expression that reads a multi-value (list) column as a scalar is mapped over its
    values, `upper(tags)` as `map((tags) -> upper(tags), tags)`; over two such columns, their cartesian product
    (cartesian_map). Which columns are lists is known per chunk, so it is decided when evaluating."""
    candidates = implicit_apply_candidates(root)
    if not candidates:
        return evaluate
    reads = node_columns(root)

    def run(cols: Columns, n: int) -> Any:
        multi = tuple(c for c in candidates if c in cols and _is_list(cols[c]))
        if not multi:
            return evaluate(cols, n)
        if len(multi) == 1:
            return _fast_map(multi[0], evaluate, cols, reads, _whole(cols[multi[0]]))
        return _cartesian_map(multi, evaluate, cols, reads, [to_values(cols[c], n) for c in multi], n)
    return run
