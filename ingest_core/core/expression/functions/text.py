"""Druid's string functions (math-expr.md), as registry entries."""

from __future__ import annotations

from ingest_core.core.expression import checks
from ingest_core.core.expression.function import NUMBER, SQL_FUNCTIONS, STRING, Example, Function, Param

TITLE = "String functions"
FUNCTIONS = (
    Function("concat", (), Param("value"), implementation="text.concat"),
    Function("format", (Param("pattern", STRING),), Param("value", optional=True), check=checks.java_format,
             implementation="text.format_"),
    Function("parse_long", (Param("s"), Param("radix", NUMBER, optional=True)), check=checks.in_range(1, 2, 36),
             implementation="text.parse_long"),
    Function("regexp_extract", (Param("s", STRING), Param("pattern", STRING, True), Param("index", NUMBER, True, True)),
             check=checks.regex_group, implementation="text.regexp_extract"),
    Function("regexp_like", (Param("s", STRING), Param("pattern", STRING, True)), check=checks.regex,
             implementation="text.regexp_like"),
    Function("regexp_replace", (Param("s", STRING), Param("pattern", STRING, True), Param("replacement", STRING)),
             check=checks.regex_replace, implementation="text.regexp_replace"),
    Function("contains_string", (Param("s", STRING), Param("search", STRING, True)), check=checks.text_constant(1),
             implementation="text.contains_string"),
    Function("icontains_string", (Param("s", STRING), Param("search", STRING, True)), check=checks.text_constant(1),
             implementation="text.icontains_string"),
    Function("replace", (Param("s", STRING), Param("pattern", STRING, True), Param("replacement", STRING, True)),
             implementation="text.replace"),
    Function("substring", (Param("s", STRING), Param("index", NUMBER, True), Param("length", NUMBER, True, True)),
             check=checks.substring, implementation="text.substring"),
    Function("right", (Param("s", STRING), Param("length", NUMBER)), check=checks.in_range(1, 0, 2 ** 31 - 1),
             implementation="text.right"),
    Function("left", (Param("s", STRING), Param("length", NUMBER)), check=checks.in_range(1, 0, 2 ** 31 - 1),
             implementation="text.left"),
    Function("strlen", (Param("s", STRING),), implementation="text.strlen"),
    Function("strpos", (Param("haystack", STRING), Param("needle", STRING), Param("from", NUMBER, optional=True)),
             check=checks.whole_numbers(2), implementation="text.strpos"),
    Function("trim", (Param("s", STRING), Param("chars", STRING, optional=True)), implementation="text.trim"),
    Function("ltrim", (Param("s", STRING), Param("chars", STRING, optional=True)), implementation="text.ltrim"),
    Function("rtrim", (Param("s", STRING), Param("chars", STRING, optional=True)), implementation="text.rtrim"),
    Function("lower", (Param("s", STRING),), implementation="text.lower"),
    Function("upper", (Param("s", STRING),), implementation="text.upper"),
    Function("reverse", (Param("s", STRING),), implementation="text.reverse"),
    Function("repeat", (Param("s", STRING), Param("times", NUMBER)), check=checks.whole_numbers(1),
             implementation="text.repeat"),
    Function("lpad", (Param("s", STRING), Param("length", NUMBER), Param("chars", STRING)),
             check=checks.whole_numbers(1), implementation="text.lpad"),
    Function("rpad", (Param("s", STRING), Param("length", NUMBER), Param("chars", STRING)),
             check=checks.whole_numbers(1), implementation="text.rpad"),
    Function("decode_base64_utf8", (Param("s", STRING),), implementation="text.decode_base64_utf8",
             examples=(Example("decode_base64_utf8('SGVsbG8gV29ybGQhCg==')", "Hello World!\n", SQL_FUNCTIONS),)),
)
