"""Druid's json functions (math-expr.md), as registry entries."""

from __future__ import annotations

from ingest_core.core.expression import checks
from ingest_core.core.expression.function import STRING, Function, Param, every_argument

TITLE = "JSON functions"
FUNCTIONS = (
    Function("json_value", (Param("json"), Param("path", STRING), Param("type", STRING, True, True)),
             check=checks.json_value, implementation="json_functions.json_value", array_inputs=every_argument,
             whole_values=True),
    Function("json_query", (Param("json"), Param("path", STRING)), check=checks.json_path_at(1),
             implementation="json_functions.json_query", array_inputs=every_argument, whole_values=True),
    Function("json_query_array", (Param("json"), Param("path", STRING)), check=checks.json_path_at(1),
             implementation="json_functions.json_query_array", array_inputs=every_argument, whole_values=True),
    Function("json_object", (Param("key"), Param("value")), Param("more keys and values"), check=checks.json_object,
             implementation="json_functions.json_object", array_inputs=every_argument, whole_values=True),
    Function("json_keys", (Param("json"), Param("path", STRING)), check=checks.json_path_at(1),
             implementation="json_functions.json_keys", array_inputs=every_argument, whole_values=True),
    Function("json_paths", (Param("json"),), implementation="json_functions.json_paths", array_inputs=every_argument,
             whole_values=True),
    Function("json_merge", (Param("json"), Param("other")), Param("more"), implementation="json_functions.json_merge",
             array_inputs=every_argument, whole_values=True),
    Function("parse_json", (Param("s", STRING),), check=checks.parse_json, implementation="json_functions.parse_json",
             array_inputs=every_argument, whole_values=True),
    Function("try_parse_json", (Param("s", STRING),), implementation="json_functions.try_parse_json",
             array_inputs=every_argument, whole_values=True),
    Function("to_json_string", (Param("json"),), implementation="json_functions.to_json_string",
             array_inputs=every_argument, whole_values=True),
)
