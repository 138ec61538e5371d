"""Druid's time functions (math-expr.md), as registry entries."""

from __future__ import annotations

from ingest_core.core.expression import checks
from ingest_core.core.expression.function import NUMBER, STRING, Function, Param

TITLE = "Time functions"
FUNCTIONS = (
    Function("timestamp", (Param("s"), Param("format", STRING, True, True)), check=checks.timestamp_format,
             implementation="times.timestamp"),
    Function("unix_timestamp", (Param("s"), Param("format", STRING, True, True)), check=checks.timestamp_format,
             implementation="times.unix_timestamp"),
    Function("timestamp_ceil",
             (Param("t"), Param("period", STRING, True), Param("origin", constant=True, optional=True),
              Param("timezone", STRING, True, True)),
             check=checks.period, implementation="times.timestamp_ceil"),
    Function("timestamp_floor",
             (Param("t"), Param("period", STRING, True), Param("origin", constant=True, optional=True),
              Param("timezone", STRING, True, True)),
             check=checks.period, implementation="times.timestamp_floor"),
    Function("timestamp_shift",
             (Param("t"), Param("period", STRING, True), Param("step", NUMBER), Param("timezone", STRING, True, True)),
             check=checks.period, implementation="times.timestamp_shift"),
    Function("timestamp_extract", (Param("t"), Param("unit", STRING, True), Param("timezone", STRING, True, True)),
             check=checks.time_unit, implementation="times.timestamp_extract"),
    Function("timestamp_parse",
             (Param("s"), Param("pattern", STRING, True, True), Param("timezone", STRING, True, True)),
             check=checks.timestamp_format, implementation="times.timestamp_parse"),
    Function("timestamp_format",
             (Param("t"), Param("pattern", STRING, True, True), Param("timezone", STRING, True, True)),
             check=checks.print_pattern, implementation="times.timestamp_format"),
)
