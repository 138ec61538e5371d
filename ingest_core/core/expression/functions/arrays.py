"""Druid's array functions (math-expr.md), as registry entries."""

from __future__ import annotations

from ingest_core.core.expression import checks
from ingest_core.core.expression.function import (
    NUMBER,
    STRING,
    Function,
    Param,
    every_argument,
    first_argument,
    second_argument,
)

_ARR = Param("array")

TITLE = "Array functions"
FUNCTIONS = (
    Function("array", (), Param("value"), implementation="arrays.array", whole_values=True),
    Function("array_length", (_ARR,), implementation="arrays.array_length", array_inputs=first_argument,
             whole_values=True),
    Function("array_offset", (_ARR, Param("index", NUMBER)), implementation="arrays.array_offset",
             array_inputs=first_argument, whole_values=True),
    Function("array_ordinal", (_ARR, Param("index", NUMBER)), implementation="arrays.array_ordinal",
             array_inputs=first_argument, whole_values=True),
    Function("array_contains", (_ARR, Param("values")), implementation="arrays.array_contains",
             array_inputs=every_argument, whole_values=True),
    Function("array_overlap", (_ARR, Param("other")), implementation="arrays.array_overlap",
             array_inputs=every_argument, whole_values=True),
    Function("scalar_in_array", (Param("value"), _ARR), implementation="arrays.scalar_in_array",
             array_inputs=second_argument, whole_values=True),
    Function("array_offset_of", (_ARR, Param("value")), implementation="arrays.array_offset_of",
             array_inputs=first_argument, whole_values=True),
    Function("array_ordinal_of", (_ARR, Param("value")), implementation="arrays.array_ordinal_of",
             array_inputs=first_argument, whole_values=True),
    Function("array_prepend", (Param("value"), _ARR), implementation="arrays.array_prepend",
             array_inputs=second_argument, whole_values=True),
    Function("array_append", (_ARR, Param("value")), implementation="arrays.array_append", array_inputs=first_argument,
             whole_values=True),
    Function("array_concat", (_ARR, Param("other")), implementation="arrays.array_concat", array_inputs=every_argument,
             whole_values=True),
    Function("array_set_add", (_ARR, Param("value")), implementation="arrays.array_set_add",
             array_inputs=first_argument, whole_values=True),
    Function("array_set_add_all", (_ARR, Param("other")), implementation="arrays.array_set_add_all",
             array_inputs=every_argument, whole_values=True),
    Function("array_slice", (_ARR, Param("start", NUMBER), Param("end", NUMBER, optional=True)),
             implementation="arrays.array_slice", array_inputs=first_argument, whole_values=True),
    Function("array_to_string", (_ARR, Param("delimiter", STRING)), implementation="arrays.array_to_string",
             array_inputs=first_argument, whole_values=True),
    Function("string_to_array", (Param("s", STRING), Param("pattern", STRING)), check=checks.split_pattern,
             implementation="arrays.string_to_array", whole_values=True),
    Function("array_to_mv", (_ARR,), implementation="arrays.array_to_mv", array_inputs=every_argument,
             whole_values=True),
)
