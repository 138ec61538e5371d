"""Druid's reduction functions (math-expr.md), as registry entries."""

from __future__ import annotations

from ingest_core.core.expression.function import Function, Param

TITLE = "Reduction functions"
FUNCTIONS = (
    Function("greatest", (), Param("value"), implementation="general.greatest"),
    Function("least", (), Param("value"), implementation="general.least"),
)
