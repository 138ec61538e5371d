"""The parser: expression text -> a checked tree (`Expression`), every problem found before any record is read.
It runs in the core, with no I/O library, so that `ingest validate` and DAG parsing refuse what the Spark job
could not run; `ingest_core.executor.expression` evaluates the tree.

  literals     123, 1.5, 1e3, NaN, Infinity, 'text' (Java escapes: \\n, \\u00e9, \\'), null
  arrays       [1, 2], [1.5, null], ['a', 'b'], typed <LONG>[], <DOUBLE>[1], <STRING>['a', 1], ARRAY<LONG>[1]
  lambdas      (x) -> x + 1, x -> x, (x, acc) -> x + acc, () -> 1: only as the first argument of map, filter...
  columns      name, "quoted name"; `__time` is the row timestamp in epoch milliseconds
  operators    unary - and !, ^, * / %, + -, < <= > >= == !=, &&, ||  (Druid's precedence)
  functions    the registry's (`core.expression.functions`), each call checked by `core.expression.checker`
"""

from __future__ import annotations

import math
from typing import Any, Callable

from ingest_core.core.errors import shown
from ingest_core.core.expression.checker import check_call, function_named
from ingest_core.core.expression.errors import ExpressionError
from ingest_core.core.expression.lexer import tokenize, unescape_java
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


# An expression nested deeper than this is refused: the parser recurses (about ten frames a level), and no
# real transform nests so far.
MAX_DEPTH = 40


class Parser:
    """Recursive descent in Druid's precedence (`or_` down to `primary`); each call is checked as it is read."""

    def __init__(self, text: str):
        self.text = text
        self.tokens = tokenize(text)
        self.i = 0
        self.depth = 0
        self.columns: set[str] = set()
        self.scopes: list[tuple[str, ...]] = []  # the parameters of the lambdas being read
        self.past_long = 0  # whole-number literals of 2^63, legal only negated (-9223372036854775808)

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, value: str | None = None) -> tuple[str, str]:
        tok = self.peek()
        if tok is None or (value is not None and tok[1] != value):
            found = "the end" if tok is None else repr(tok[1])
            raise ExpressionError(f"in expression {shown(self.text)}: expected {value or 'more input'}, found {found}")
        self.i += 1
        return tok

    def at(self, *values: str) -> bool:
        tok = self.peek()
        return tok is not None and tok[0] == "op" and tok[1] in values

    def parse(self) -> Node:
        if not self.tokens:
            raise ExpressionError("the expression is empty")
        node = self.or_()
        if self.peek() is not None:
            raise ExpressionError(  # type: ignore[index]
                f"in expression {shown(self.text)}: unexpected {self.peek()[1]!r}")
        if self.past_long:
            raise ExpressionError(f"in expression {shown(self.text)}: the number 9223372036854775808 is outside the "
                                  "LONG range; write it with a '.' for a DOUBLE")
        return node

    def _binary(self, sub: Callable[[], Node], ops: tuple[str, ...]) -> Node:
        left = sub()
        while self.at(*ops):
            op = self.take()[1]
            left = Binary(op, left, sub())
        return left

    def or_(self) -> Node:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ExpressionError(f"expression {self.text[:60]!r}... nests deeper than {MAX_DEPTH} levels")
        try:
            return self._binary(lambda: self._binary(self.comparison, ("&&",)), ("||",))
        finally:
            self.depth -= 1

    def comparison(self) -> Node:
        left = self.additive()
        if self.at("<", "<=", ">", ">=", "==", "!="):
            op = self.take()[1]
            return Binary(op, left, self.additive())
        return left

    def additive(self) -> Node:
        return self._binary(self.multiplicative, ("+", "-"))

    def multiplicative(self) -> Node:
        return self._binary(self.unary, ("*", "/", "%"))

    def unary(self) -> Node:
        if self.at("-", "!"):
            op = self.take()[1]
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise ExpressionError(f"expression {self.text[:60]!r}... nests deeper than {MAX_DEPTH} levels")
            try:
                operand = self.unary()
            finally:
                self.depth -= 1
            if op == "-" and isinstance(operand, Literal) and isinstance(operand.value, (int, float)):
                if isinstance(operand.value, int):  # 2^63 fits once negated, and no longer if negated again
                    self.past_long += (-operand.value == 2 ** 63) - (operand.value == 2 ** 63)
                return Literal(-operand.value)  # a negative constant, so constant arguments may be negative
            return Unary(op, operand)
        base = self.primary()
        if self.at("^"):
            self.take()
            return Binary("^", base, self.unary())
        return base

    def primary(self) -> Node:
        kind, value = self.take()
        if kind == "num":
            if any(c in value for c in ".eE"):
                return Literal(float(value))
            if int(value) > 2 ** 63:
                raise ExpressionError(f"in expression {shown(self.text)}: the number {value} is outside the LONG "
                                      "range; write it with a '.' for a DOUBLE")
            self.past_long += int(value) == 2 ** 63
            return Literal(int(value))
        if kind == "str":
            return Literal(unescape_java(value[1:-1]))
        if kind == "op" and value == "(":
            inner = self.or_()
            self.take(")")
            return inner
        if kind == "atype" or (kind == "op" and value == "["):
            return self.array(kind == "atype" and value or None)
        if kind in ("id", "qid"):
            name = unescape_java(value[1:-1]) if kind == "qid" else value
            if kind == "id" and name == "null":
                return Literal(None)
            if kind == "id" and name in _SPECIAL_DOUBLES:
                return Literal(_SPECIAL_DOUBLES[name])
            if kind == "id" and self.at("("):
                return self.call(name)
            if not any(name in params for params in self.scopes):
                self.columns.add(name)
            return Column(name)
        raise ExpressionError(f"in expression {shown(self.text)}: unexpected {shown(value)}")

    def array(self, typed: str | None) -> ArrayLiteral:
        """An array literal, after its `[` (or its type, `<LONG>` / `ARRAY<LONG>`)."""
        if typed is not None:
            self.take("[")
        items: list[Node] = []
        if not self.at("]"):
            items.append(self.or_())
            while self.at(","):
                self.take()
                items.append(self.or_())
        self.take("]")
        if any(not isinstance(item, Literal) for item in items):
            raise ExpressionError(f"in expression {shown(self.text)}: array literal elements must be constants "
                                  "(numbers, 'text' or null); build an array of other values with array(...)")
        values = [item.value for item in items]  # type: ignore[union-attr]
        element = typed.strip("<>").removeprefix("ARRAY<") if typed else _literal_element_type(values)
        try:
            return ArrayLiteral(element, tuple(_array_element(v, element, typed is not None) for v in values))
        except (TypeError, ValueError) as exc:
            raise ExpressionError(f"in expression {shown(self.text)}: {exc}") from None

    def lambda_ahead(self) -> bool:
        """Whether the tokens ahead are a lambda's parameters and `->`: `x ->`, `() ->`, `(x, y) ->`."""
        toks = self.tokens[self.i:self.i + 2]
        if len(toks) == 2 and toks[0][0] in ("id", "qid") and toks[1] == ("op", "->"):
            return True
        if not toks or toks[0] != ("op", "("):
            return False
        j = self.i + 1
        while j < len(self.tokens) and self.tokens[j][0] in ("id", "qid"):
            j += 1
            if j < len(self.tokens) and self.tokens[j] == ("op", ","):
                j += 1
        return self.tokens[j:j + 2] == [("op", ")"), ("op", "->")]

    def lambda_(self) -> Lambda:
        params: list[str] = []
        parenthesized = self.at("(")
        if parenthesized:
            self.take("(")
        while self.peek() is not None and self.peek()[0] in ("id", "qid"):  # type: ignore[index]
            kind, value = self.take()
            params.append(unescape_java(value[1:-1]) if kind == "qid" else value)
            if parenthesized and self.at(","):
                self.take()
        if parenthesized:
            self.take(")")
        self.take("->")
        if len(set(params)) != len(params):
            raise ExpressionError(f"in expression {shown(self.text)}: a lambda names a parameter twice: {params}")
        self.scopes.append(tuple(params))
        try:
            body = self.or_()
        finally:
            self.scopes.pop()
        return Lambda(tuple(params), body)

    def call(self, name: str) -> Node:
        fn = function_named(name, self.text)
        self.take("(")
        args: list[Node] = []
        if not self.at(")"):
            args.append(self.lambda_() if self.lambda_ahead() else self.or_())
            while self.at(","):
                self.take()
                args.append(self.or_())
        self.take(")")
        check_call(fn, tuple(args), self.text, name)
        return Call(fn.name, tuple(args))


_SPECIAL_DOUBLES = {"NaN": math.nan, "Infinity": math.inf}


def _literal_element_type(values: list[Any]) -> str:
    """An untyped array literal's element type, as Druid's grammar gives it: text (or only nulls, or nothing)
    is STRING, whole numbers LONG, numbers with a fraction DOUBLE; text and numbers together are an error."""
    kinds = {type(v) for v in values if v is not None}
    if not kinds or kinds == {str}:
        return "STRING"
    if str in kinds:
        raise ExpressionError(f"an array literal mixes text and numbers: {values}; write <STRING>[...] for text")
    return "LONG" if kinds == {int} else "DOUBLE"


def _array_element(value: Any, element: str, typed: bool) -> int | float | str | None:
    if value is None:
        return None
    if element == "STRING":
        return value if isinstance(value, str) else (repr(value) if isinstance(value, float) else str(value))
    if isinstance(value, str) and not typed:
        raise ValueError(f"{shown(value)} is not a number")
    number = float(value) if isinstance(value, str) else value
    if element == "LONG":
        if isinstance(number, float) and not math.isfinite(number):
            raise ValueError(f"{shown(value)} is not a LONG")
        return int(number)
    return float(number)


def parse_expression(text: str) -> Expression:
    """Parse and check `text`; ExpressionError says what is wrong and where."""
    if not isinstance(text, str):
        raise ExpressionError(f"an expression is text, got {type(text).__name__}")
    parser = Parser(text)
    root = parser.parse()
    return Expression(text, root, frozenset(parser.columns))
