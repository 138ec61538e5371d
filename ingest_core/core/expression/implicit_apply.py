"""Druid's implicit apply, as its Parser plans it (math-expr.md: a multi-value column read as a scalar maps the
expression over its values): which columns are mapped, and which arguments are rewritten on their own. It needs
to know which arguments each function reads as arrays: its registry entry's `array_inputs` (Druid's
getArrayInputs); an apply function's arguments are all rewritten on their own."""

from __future__ import annotations

from ingest_core.core.expression.functions import FUNCTIONS
from ingest_core.core.expression.tree import Binary, Call, Column, Lambda, Node, Unary, node_columns


def mapped_arguments(node: Call) -> tuple[int, ...]:
    """The arguments of `node` that Druid's implicit apply rewrites on their own (Parser's
    rewriteUnappliedSubExpressions): an expression (not a bare column) where an array function takes an array,
    and every argument of an apply function."""
    fn = FUNCTIONS[node.name]
    if fn.takes_lambda:
        return tuple(range(1, len(node.args)))
    if fn.array_inputs is not None:
        return tuple(i for i in fn.array_inputs(node.args) if i < len(node.args))
    return ()


def implicit_apply_candidates(root: Node, params: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The columns Druid maps `root` over when they hold multi-value (list) values (Parser.applyUnappliedBindings):
    those read as scalars (an operand, a scalar function's argument) and nowhere as arrays: not as an array
    function's array, nor inside an argument mapped on its own (`mapped_arguments`), nor in a lambda's body (Druid
    lifts those into the apply function). `params`: a lambda's parameters, when `root` is its body."""
    scalar: dict[str, None] = {}  # in the order they appear, the order of a cartesian product
    array: set[str] = set()

    def walk(node: Node) -> None:
        if isinstance(node, Column):
            scalar.setdefault(node.name)
        elif isinstance(node, Unary):
            walk(node.operand)
        elif isinstance(node, Binary):
            walk(node.left)
            walk(node.right)
        elif isinstance(node, Call):
            mapped = mapped_arguments(node)
            for i, arg in enumerate(node.args):
                if i in mapped or isinstance(arg, Lambda):
                    array.update(node_columns(arg))
                else:
                    walk(arg)
    walk(root)
    return tuple(name for name in scalar if name not in array and name not in params)
