"""Druid's general functions (math-expr.md), as registry entries."""

from __future__ import annotations

from ingest_core.core.expression import checks
from ingest_core.core.expression.function import STRING, Function, Param
from ingest_core.core.expression.tree import Node, literal_value


def _cast_inputs(args: tuple[Node, ...]) -> tuple[int, ...]:
    """cast to an array type reads its value as an array."""
    return (0,) if str(literal_value(args, 1)).upper() in checks.ARRAY_CAST_TYPES else ()

TITLE = "General functions"
FUNCTIONS = (
    Function("cast", (Param("value"), Param("type", STRING, True)), check=checks.cast_type,
             implementation="general.cast", array_inputs=_cast_inputs, whole_values=True),
    Function("coalesce", (), Param("value"), implementation="general.coalesce", whole_values=True),
    Function("if", (Param("condition"), Param("then"), Param("else")), implementation="general.if_", whole_values=True),
    Function("nvl", (Param("value"), Param("otherwise")), implementation="general.nvl", whole_values=True),
    Function("case_searched", (Param("condition"), Param("result")), Param("more"),
             implementation="general.case_searched", whole_values=True),
    Function("case_simple", (Param("value"), Param("match"), Param("result")), Param("more"),
             implementation="general.case_simple", whole_values=True),
    Function("isnull", (Param("value"),), implementation="general.isnull"),
    Function("notnull", (Param("value"),), implementation="general.notnull"),
    Function("like", (Param("s", STRING), Param("pattern", STRING, True), Param("escape", STRING, True, True)),
             check=checks.like_escape, implementation="text.like"),
)
