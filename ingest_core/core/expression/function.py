"""One built-in function of the expression language, as the registry (`core.expression.functions`) holds it:
its name, its signature, the check of its constant arguments, where it is implemented, and Druid's documented
examples. The parser and checker read the signature and check; the evaluator (`ingest_core.executor.expression`,
which may use pyarrow) runs `implementation`; docs/expressions.md's table is printed from the examples and
signatures (`python -m ingest_core.dev.expression_docs`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable

from ingest_core.core.expression.tree import Node

# what a constant argument must be
STRING, NUMBER, ANY = "string", "number", "any"

Check = Callable[[str, tuple[Node, ...]], None]  # (name, arguments): ExpressionError for a bad constant argument
ArrayInputs = Callable[[tuple[Node, ...]], Iterable[int]]  # the arguments a function reads as arrays


@dataclass(frozen=True)
class Param:
    name: str
    kind: str = ANY          # ANY, STRING, NUMBER: what a constant argument must be
    constant: bool = False   # must be a literal (a pattern, a period, a type name...)
    optional: bool = False


@dataclass(frozen=True)
class Example:
    """An expression and the value Druid's documentation gives for it; every one runs as a test
    (tests/unit/test_expression_registry.py) and is printed in docs/expressions.md."""

    text: str
    result: Any
    source: str  # the Druid documentation page it is taken from


@dataclass(frozen=True)
class Function:
    """A built-in function. `implementation` is "module.attribute" of `ingest_core.executor.expression`: the core
    imports no pyarrow, so the entry names its code instead of holding it (as Airflow's provider.yaml names hook
    classes); the evaluator resolves it once."""

    name: str
    params: tuple[Param, ...]
    variadic: Param | None = None  # repeated after params; at least one when there are no params
    check: Check | None = None  # constant arguments beyond their kind
    implementation: str = ""
    examples: tuple[Example, ...] = ()
    # Druid's getArrayInputs: the arguments read as arrays, which its implicit apply of multi-value columns maps on
    # their own (None: every argument is a scalar)
    array_inputs: ArrayInputs | None = None
    whole_values: bool = False  # takes arrays and JSON values as they are (others read them as scalars)
    takes_lambda: bool = False  # an apply function: its first argument is a lambda

    def arity(self) -> str:
        required = sum(1 for p in self.params if not p.optional)
        if self.variadic is not None:
            return f"{max(required, 1)} or more arguments"
        most = len(self.params)
        if required == most:
            return f"{most} argument{'s' if most != 1 else ''}"
        return f"{required} to {most} arguments"

    def accepts(self, count: int) -> bool:
        required = sum(1 for p in self.params if not p.optional)
        if self.variadic is not None:
            return count >= max(required, 1)
        return required <= count <= len(self.params)

    def param(self, index: int) -> Param:
        return self.params[index] if index < len(self.params) else self.variadic  # type: ignore[return-value]

    def synopsis(self) -> str:
        """The call as the docs write it: `substring(s, index[, length])`, `concat(value...)`."""
        out = ""
        for i, p in enumerate(self.params):
            sep = ", " if i else ""
            out += f"[{sep}{p.name}]" if p.optional else f"{sep}{p.name}"
        out = out.replace("][", "")  # consecutive optional parameters: [, a, b] rather than [, a][, b]
        if self.variadic is not None:
            out += f"{', ' if self.params else ''}{self.variadic.name}..."
        return f"{self.name}({out})"


def every_argument(args: tuple[Node, ...]) -> range:
    return range(len(args))


def first_argument(args: tuple[Node, ...]) -> tuple[int, ...]:
    return (0,)


def second_argument(args: tuple[Node, ...]) -> tuple[int, ...]:
    return (1,)


# the pages of Druid's documentation examples are taken from
MATH_EXPR = "math-expr.md"
SQL_FUNCTIONS = "sql-functions.md"
