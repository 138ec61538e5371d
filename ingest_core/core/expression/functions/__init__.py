"""The registry of built-in functions: one `Function` entry per function (name, signature, check, implementation,
Druid's documented examples), grouped as Druid's math-expr.md groups them. A new function is one entry in its
section's module and its implementation in `ingest_core.executor.expression`; the parser, the checker, the
evaluator and docs/expressions.md's table all read it from here."""

from __future__ import annotations

from types import ModuleType

from ingest_core.core.expression.function import Function
from ingest_core.core.expression.functions import (
    apply,
    arrays,
    general,
    json_functions,
    network,
    numeric,
    other,
    reduction,
    text,
    times,
)

# in math-expr.md's order
SECTIONS: tuple[ModuleType, ...] = (general, text, times, numeric, arrays, apply, json_functions, reduction, network,
                                    other)

FUNCTIONS: dict[str, Function] = {fn.name: fn for section in SECTIONS for fn in section.FUNCTIONS}

# Druid functions refused by name, with what to do instead
REFUSED: dict[str, str] = {
    "lookup": "query-time lookups are not available to ingestion here; map the values with case_simple(x, "
              "'key1', 'value1', ..., 'default') in a transform, or apply the lookup in Druid at query time",
    "javascript": "JavaScript expressions are not run; write the logic with the expression functions (if, "
                  "case_searched, regexp_replace, ...)",
    "bloom_filter_test": "Druid's bloom filters (the druid-bloom-filter extension) are not read; test membership "
                         "with an `in` filter in transformSpec.filter or case_simple in a transform",
}
