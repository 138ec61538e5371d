"""Druid's apply functions (math-expr.md), as registry entries."""

from __future__ import annotations

from ingest_core.core.expression import checks
from ingest_core.core.expression.function import Function, Param

_ARR = Param("array")
_LAMBDA = Param("lambda")

TITLE = "Apply functions"
FUNCTIONS = (
    Function("map", (_LAMBDA, _ARR), check=checks.lambda_count(lambda n: 1), implementation="apply.map_",
             takes_lambda=True),
    Function("cartesian_map", (_LAMBDA, _ARR), Param("more arrays"), check=checks.lambda_count(lambda n: n - 1),
             implementation="apply.cartesian_map", takes_lambda=True),
    Function("filter", (_LAMBDA, _ARR), check=checks.lambda_count(lambda n: 1), implementation="apply.filter_",
             takes_lambda=True),
    Function("fold", (_LAMBDA, _ARR, Param("accumulator")), check=checks.lambda_count(lambda n: 2),
             implementation="apply.fold", takes_lambda=True),
    Function("cartesian_fold", (_LAMBDA, _ARR, Param("arrays, then the accumulator")), Param("more"),
             check=checks.lambda_count(lambda n: n - 1), implementation="apply.cartesian_fold", takes_lambda=True),
    Function("any", (_LAMBDA, _ARR), check=checks.lambda_count(lambda n: 1), implementation="apply.any_",
             takes_lambda=True),
    Function("all", (_LAMBDA, _ARR), check=checks.lambda_count(lambda n: 1), implementation="apply.all_",
             takes_lambda=True),
)
