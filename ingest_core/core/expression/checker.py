"""The checker: each call the parser reads is looked up in the registry and checked against its entry (the
function exists and is not refused, its arity, its constant arguments' kinds, then the entry's own `check`), so
that `ingest validate` and DAG parsing refuse what the Spark job could not run."""

from __future__ import annotations

from ingest_core.core.binding import did_you_mean
from ingest_core.core.errors import shown
from ingest_core.core.expression.errors import ExpressionError
from ingest_core.core.expression.function import NUMBER, Function
from ingest_core.core.expression.functions import FUNCTIONS, REFUSED
from ingest_core.core.expression.tree import Lambda, Literal, Node


def function_named(name: str, text: str) -> Function:
    """The registry's entry for `name` (any case); ExpressionError for a refused or unknown function."""
    key = name.lower()
    if key in REFUSED:
        raise ExpressionError(f"in expression {shown(text)}: function {name}() is not supported: {REFUSED[key]}")
    if key not in FUNCTIONS:
        raise ExpressionError(f"function {name}() is not supported in transforms{did_you_mean(key, FUNCTIONS)}; "
                              f"supported: {', '.join(sorted(FUNCTIONS))}")
    return FUNCTIONS[key]


def _is_number_text(value: str) -> bool:
    try:
        float(value.strip())
        return True
    except ValueError:
        return False


def check_call(fn: Function, args: tuple[Node, ...], text: str, written: str = "") -> None:
    """A call's arity and constant arguments; ExpressionError naming the call otherwise (`written`: the name as
    the text spells it)."""
    name = fn.name
    if not fn.accepts(len(args)):
        raise ExpressionError(f"in expression {shown(text)}: {name}() takes {fn.arity()}, got {len(args)}")
    for i, arg in enumerate(args):
        param = fn.param(i)
        if param.constant and not isinstance(arg, Literal):
            raise ExpressionError(f"in expression {shown(text)}: {name}(): argument {i + 1} ({param.name}) must be "
                                  "a constant")
        if isinstance(arg, Literal) and arg.value is not None:
            value = arg.value
            if param.kind == NUMBER and isinstance(value, str) and not _is_number_text(value):
                raise ExpressionError(f"in expression {shown(text)}: {name}(): argument {i + 1} ({param.name}) is a "
                                      f"number, got the text {shown(value)}")
        elif isinstance(arg, Literal) and param.constant and not param.optional:
            raise ExpressionError(f"in expression {shown(text)}: {name}(): argument {i + 1} ({param.name}) cannot "
                                  "be null")
    if fn.check is not None:
        try:
            fn.check(name, args)
        except ExpressionError as exc:
            raise ExpressionError(f"in expression {shown(text)}: {exc}") from None
    if args and isinstance(args[0], Lambda) and not fn.takes_lambda:
        apply = sorted(f.name for f in FUNCTIONS.values() if f.takes_lambda)
        raise ExpressionError(f"in expression {shown(text)}: {written or name}() takes no lambda; only "
                              f"{', '.join(apply)} do")
