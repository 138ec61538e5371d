"""The evaluator: a checked tree (`ingest_core.core.expression`) compiled to vectorized code over a chunk's columns.

A compiled expression maps (columns, row count) to a pyarrow array or a Python scalar (a constant). Operators are
`operators`'; a call runs its registry entry's implementation (`Function.implementation`, "module.attribute" of
this package, resolved once), apply functions compile their lambda (`apply`), and Druid's implicit apply maps an
expression over multi-value columns. A long arithmetic overflow, a long division by zero, a cast that cannot hold
the value or a function Druid throws in is an `ExpressionError`, which the row parser turns into that row's parse
exception; never a raw pyarrow error.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import cache
from typing import Any, Callable

import pyarrow as pa
import pyarrow.compute as pc

from ingest_core.core.expression.errors import ExpressionError
from ingest_core.core.expression.functions import FUNCTIONS
from ingest_core.core.expression.parser import parse_expression
from ingest_core.core.expression.tree import (
    ArrayLiteral,
    Binary,
    Call,
    Column,
    Expression,
    Lambda,
    Literal,
    Node,
    Unary,
)
from ingest_core.executor.expr_values import scalar_view
from ingest_core.executor.expression.apply import compile_apply, compile_arguments, with_implicit_apply
from ingest_core.executor.expression.arrays import compile_array_literal
from ingest_core.executor.expression.operators import arith, compare, logic
from ingest_core.executor.expression.vectors import (
    Columns,
    Compiled,
    as_bool,
    as_long,
    broadcast,
    lift,
    numeric,
    value_type,
)


_PACKAGE = __name__.rpartition(".")[0]


@cache
def implementation(name: str) -> Callable[..., Any]:
    """The code of the registry's function `name`: its entry's "module.attribute" in this package."""
    module, _, attribute = FUNCTIONS[name].implementation.rpartition(".")
    return getattr(importlib.import_module(f"{_PACKAGE}.{module}"), attribute)  # type: ignore[no-any-return]


@dataclass(frozen=True)
class CompiledExpression:
    """A checked expression and its vectorized evaluator."""

    expression: Expression
    evaluate: Compiled

    @property
    def text(self) -> str:
        return self.expression.text

    @property
    def columns(self) -> frozenset[str]:
        return self.expression.columns

    def __call__(self, columns: Columns, num_rows: int) -> Any:
        try:
            return self.evaluate(columns, num_rows)
        except ExpressionError:
            raise
        except (TypeError, IndexError, ValueError, OverflowError, ZeroDivisionError, pa.ArrowException) as exc:
            # a value an operator cannot take: say which expression, never a raw pyarrow error
            raise ExpressionError(f"in expression {self.text!r}: {exc}") from None


def _compile(node: Node, text: str) -> Compiled:
    if isinstance(node, Literal):
        value = node.value
        return lambda cols, n: value
    if isinstance(node, Column):
        name = node.name
        return lambda cols, n: cols[name] if name in cols else pa.nulls(n)
    if isinstance(node, Unary):
        inner = _compile(node.operand, text)
        if node.op == "-":
            def negate(cols: Columns, n: int) -> Any:
                v = numeric(scalar_view(inner(cols, n)))
                return lift(pc.negate_checked if pa.types.is_integer(value_type(v)) else pc.negate)(v)
            return negate
        return lambda cols, n: as_long(lift(pc.invert)(as_bool(scalar_view(inner(cols, n)), n)))
    if isinstance(node, Binary):
        left, right = _compile(node.left, text), _compile(node.right, text)
        if node.op in ("&&", "||"):
            op = logic(node.op)
        elif node.op in ("<", "<=", ">", ">=", "==", "!="):
            cmp = compare(node.op)
            op = lambda a, b: as_long(cmp(a, b))  # noqa: E731 - comparisons yield 1 or 0
        else:
            op = arith(node.op)
        return lambda cols, n: op(scalar_view(left(cols, n)), scalar_view(right(cols, n)))
    if isinstance(node, ArrayLiteral):
        return compile_array_literal(node)
    if isinstance(node, Lambda):
        raise ExpressionError(f"in expression {text!r}: a lambda is only an apply function's first argument")
    assert isinstance(node, Call)
    entry, fn = FUNCTIONS[node.name], implementation(node.name)
    if entry.takes_lambda:
        return compile_apply(node, text, _compile, fn)
    name = node.name
    args = compile_arguments(node, text, _compile)
    constant = [a.value if isinstance(a, Literal) else None for a in node.args]
    is_constant = [isinstance(a, Literal) for a in node.args]
    view = (lambda v: v) if entry.whole_values else scalar_view

    def apply(cols: Columns, n: int) -> Any:
        values = [c if k else view(a(cols, n)) for a, c, k in zip(args, constant, is_constant)]
        try:
            return fn(n, *values)
        except ExpressionError as exc:
            raise ExpressionError(f"in expression {text!r}: {name}(): {exc}") from None
        except (TypeError, IndexError, ValueError, OverflowError, ZeroDivisionError, pa.ArrowException) as exc:
            # a value the function cannot take: say which call
            raise ExpressionError(f"in expression {text!r}: {name}(): {exc}") from None
    return apply


def compile_expression(source: str | Expression) -> CompiledExpression:
    """Compile an expression (its text, checked first, or an already checked tree)."""
    expression = parse_expression(source) if isinstance(source, str) else source
    return CompiledExpression(expression, with_implicit_apply(expression.root,
                                                              _compile(expression.root, expression.text)))


def evaluate_to_array(expr: CompiledExpression, columns: Columns, num_rows: int) -> pa.Array:
    """Evaluate and always return an array of `num_rows` (constants are broadcast, booleans become 1/0)."""
    value = as_long(expr(columns, num_rows))
    arr = broadcast(value, num_rows)
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    return arr
