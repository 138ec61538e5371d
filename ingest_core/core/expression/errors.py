"""The one error of the expression language: text that cannot be parsed or checked, or a value a function cannot
take when evaluated."""

from __future__ import annotations

from ingest_core.core.errors import IngestError


class ExpressionError(IngestError, ValueError):
    """An expression that cannot be parsed, uses something unsupported, or cannot be evaluated on a value."""

    code = "INGEST_EXPRESSION_ERROR"
