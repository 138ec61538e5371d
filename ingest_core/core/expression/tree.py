"""The expression tree: small frozen value objects the parser builds, the checker reads and the evaluator compiles.
Nothing here knows a function's name or meaning."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union


@dataclass(frozen=True)
class Literal:
    value: int | float | str | None


@dataclass(frozen=True)
class Column:
    name: str


@dataclass(frozen=True)
class Unary:
    op: str  # "-" or "!"
    operand: "Node"


@dataclass(frozen=True)
class Binary:
    op: str
    left: "Node"
    right: "Node"


@dataclass(frozen=True)
class Call:
    name: str  # lower case, a name of the function registry
    args: tuple["Node", ...]


@dataclass(frozen=True)
class ArrayLiteral:
    """`[1, 2]`, `<STRING>[]`: constant elements of one type (LONG, DOUBLE or STRING), nulls allowed."""

    element_type: str
    items: tuple[int | float | str | None, ...]


@dataclass(frozen=True)
class Lambda:
    """`(x, y) -> body`: only as the first argument of an apply function (map, filter, fold...). Its
    parameters hide columns of the same name inside the body; other names in the body are columns."""

    params: tuple[str, ...]
    body: "Node"


Node = Union[Literal, Column, Unary, Binary, Call, ArrayLiteral, Lambda]


@dataclass(frozen=True)
class Expression:
    """A parsed, checked expression: its text, its tree and the columns it reads."""

    text: str
    root: Node
    columns: frozenset[str]



def node_columns(node: Node) -> set[str]:
    """Every column name `node` reads (a lambda's parameters among them, where its body uses them)."""
    if isinstance(node, Column):
        return {node.name}
    if isinstance(node, Unary):
        return node_columns(node.operand)
    if isinstance(node, Binary):
        return node_columns(node.left) | node_columns(node.right)
    if isinstance(node, Lambda):
        return node_columns(node.body)
    if isinstance(node, Call):
        return set().union(*(node_columns(a) for a in node.args))
    return set()


def literal_value(args: tuple[Node, ...], index: int) -> int | float | str | None:
    """Argument `index`'s value when it is a literal (a constant argument), else None."""
    arg = args[index] if index < len(args) else None
    return arg.value if isinstance(arg, Literal) else None
