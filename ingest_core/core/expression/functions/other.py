"""Druid's other functions (math-expr.md), as registry entries."""

from __future__ import annotations

from ingest_core.core.expression import checks
from ingest_core.core.expression.function import MATH_EXPR, NUMBER, Example, Function, Param

TITLE = "Other functions"
FUNCTIONS = (
    Function("human_readable_binary_byte_format", (Param("value", NUMBER), Param("precision", NUMBER, True, True)),
             check=checks.in_range(1, 0, 3), implementation="numeric.human_readable_binary_byte_format",
             examples=(Example("human_readable_binary_byte_format(1048576)", "1.00 MiB", MATH_EXPR),
                       Example("human_readable_binary_byte_format(1048576, 3)", "1.000 MiB", MATH_EXPR))),
    Function("human_readable_decimal_byte_format", (Param("value", NUMBER), Param("precision", NUMBER, True, True)),
             check=checks.in_range(1, 0, 3), implementation="numeric.human_readable_decimal_byte_format",
             examples=(Example("human_readable_decimal_byte_format(1000000)", "1.00 MB", MATH_EXPR),
                       Example("human_readable_decimal_byte_format(1000000, 3)", "1.000 MB", MATH_EXPR))),
    Function("human_readable_decimal_format", (Param("value", NUMBER), Param("precision", NUMBER, True, True)),
             check=checks.in_range(1, 0, 3), implementation="numeric.human_readable_decimal_format",
             examples=(Example("human_readable_decimal_format(1000000)", "1.00 M", MATH_EXPR),
                       Example("human_readable_decimal_format(1000000, 3)", "1.000 M", MATH_EXPR))),
)
