"""The expression language's public names where other modules have always imported them; the language itself is
the package `ingest_core.core.expression` (tree, lexer, parser, checker, the function registry)."""

from __future__ import annotations

from ingest_core.core.expression.checks import ARRAY_CAST_TYPES, CAST_TYPES, JSON_TYPES, TIME_UNITS
from ingest_core.core.expression.errors import ExpressionError
from ingest_core.core.expression.function import Function, Param
from ingest_core.core.expression.functions import FUNCTIONS, REFUSED, apply, arrays, json_functions
from ingest_core.core.expression.implicit_apply import implicit_apply_candidates, mapped_arguments
from ingest_core.core.expression.lexer import unescape_java
from ingest_core.core.expression.parser import MAX_DEPTH, parse_expression
from ingest_core.core.expression.patterns import (
    JAVA_FORMAT,
    compile_regex,
    java_replacement,
    json_path,
    like_to_regex,
    python_regex,
)
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
    node_columns,
)

# the sections of non-scalar functions, by name (the tests tell scalar functions from these)
ARRAY_FUNCTIONS = {fn.name: fn for fn in arrays.FUNCTIONS}
APPLY_FUNCTIONS = {fn.name: fn for fn in apply.FUNCTIONS}
JSON_FUNCTIONS = {fn.name: fn for fn in json_functions.FUNCTIONS}

__all__ = [
    "APPLY_FUNCTIONS", "ARRAY_CAST_TYPES", "ARRAY_FUNCTIONS", "ArrayLiteral", "Binary", "CAST_TYPES", "Call", "Column",
    "Expression", "ExpressionError", "FUNCTIONS", "Function", "JAVA_FORMAT", "JSON_FUNCTIONS", "JSON_TYPES", "Lambda",
    "Literal", "MAX_DEPTH", "Node", "Param", "REFUSED", "TIME_UNITS", "Unary", "compile_regex",
    "implicit_apply_candidates", "java_replacement", "json_path", "like_to_regex", "mapped_arguments", "node_columns",
    "parse_expression", "python_regex", "unescape_java",
]
