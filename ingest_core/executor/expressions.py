"""The evaluator's public names where other modules have always imported them; the evaluator itself is the package
`ingest_core.executor.expression`."""

from __future__ import annotations

from ingest_core.core.expression.errors import ExpressionError
from ingest_core.executor.expression.evaluator import (
    CompiledExpression,
    compile_expression,
    evaluate_to_array,
    implementation,
)
from ingest_core.executor.expression.vectors import Columns, Compiled

__all__ = ["Columns", "Compiled", "CompiledExpression", "ExpressionError", "compile_expression", "evaluate_to_array",
           "implementation"]
