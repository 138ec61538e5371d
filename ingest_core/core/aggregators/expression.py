"""`expression` (Druid's ExpressionLambdaAggregatorFactory): a fold and a combine written in the expression
language, over the values of `fields`.

    {"type": "expression", "name": "expression_sum", "fields": ["column_a"], "initialValue": "0",
     "fold": "__acc + column_a"}

A split folds each group's rows in (time, offset) order: the accumulator (`accumulatorIdentifier`, default `__acc`)
starts at `initialValue` and becomes `fold` of itself and the row's fields. Spark collects a group's partials and
combines them, as does compaction: the accumulator starts at `initialCombineValue` (default `initialValue`) and
becomes `combine` of itself and the partial, named by the aggregator's `name` (without `combine`, a fold over one
field is its combine with the field renamed to `name`, as Druid rewrites it). `isNullUnlessAggregated` (true, as
Druid with SQL-compatible nulls): a group that folded no row is null. `shouldAggregateNullInputs` (true): rows whose
fields are null are folded too; `shouldCombineAggregateNullInputs` (default: the former) likewise for null
partials. `maxSizeBytes` (8192): a string or array accumulator past it fails, as Druid's does. `compare` and
`finalize` are query-time (Druid applies them when a query reads the metric): they are checked and kept.

The stored type is `initialValue`'s (a constant: LONG, DOUBLE, STRING or an array of one), as Druid's
intermediate type. The evaluator is the executor's (`Evaluator`), handed in: this module only parses and checks.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ingest_core.core.aggregators.base import AggregatorType, Evaluator
from ingest_core.core.binding import BindContext, check_range, join
from ingest_core.core.expressions import ArrayLiteral, ExpressionError, Literal, parse_expression

DEFAULT_ACCUMULATOR = "__acc"
DEFAULT_MAX_SIZE_BYTES = 8192
MIN_SIZE_BYTES = 10  # Druid's: a type byte, a null byte and 8 bytes of a number
_SPARK_TYPES = {"LONG": "bigint", "DOUBLE": "double", "STRING": "string"}


@dataclass(frozen=True)
class ExpressionParams:
    fields: list[str] = field(default_factory=list)
    accumulator_identifier: str = DEFAULT_ACCUMULATOR
    fold: str | None = None
    combine: str | None = None
    compare: str | None = None
    finalize: str | None = None
    initial_value: str | None = None
    initial_combine_value: str | None = None
    is_null_unless_aggregated: bool = True
    should_aggregate_null_inputs: bool = True
    should_combine_aggregate_null_inputs: bool | None = None
    max_size_bytes: int = DEFAULT_MAX_SIZE_BYTES


class ExpressionAggregator(AggregatorType):
    op = "expression"
    own_fields = frozenset({"fields", "accumulatorIdentifier", "fold", "combine", "compare", "finalize",
                            "initialValue", "initialCombineValue", "isNullUnlessAggregated",
                            "shouldAggregateNullInputs", "shouldCombineAggregateNullInputs", "maxSizeBytes"})
    params = ExpressionParams
    needs_field_name = False
    builds_in_python = True
    typed_inputs = True  # folded as Druid's parser typed them: a JSON integer as a long, a list as an array

    # -- parse and validation

    def check(self, agg: Any, path: str, ctx: BindContext) -> None:
        p: ExpressionParams = agg.params
        for key, text in (("fold", p.fold), ("initialValue", p.initial_value)):
            if text is None:
                ctx.error(join(path, key), f"expression aggregator {agg.name!r} needs {key}, e.g. "
                          + ("'__acc + x'" if key == "fold" else "'0'"))
        if p.combine is None and len(p.fields) != 1:
            ctx.error(join(path, "combine"), f"expression aggregator {agg.name!r} needs a combine expression "
                      f"(one of the partial {agg.name!r} into the accumulator, e.g. '{p.accumulator_identifier} + "
                      f"{agg.name}'): only a fold over a single field can be its own combine")
        for key, text in (("fold", p.fold), ("combine", p.combine), ("compare", p.compare),
                          ("finalize", p.finalize)):
            if text is not None:
                try:
                    parse_expression(text)
                except ExpressionError as exc:
                    ctx.error(join(path, key), str(exc))
        for key, text in (("initialValue", p.initial_value), ("initialCombineValue", p.initial_combine_value)):
            if text is not None and self._constant_type(text) is None:
                ctx.error(join(path, key), f"{key} must be a constant (a number, a string, an array such as "
                          f"<LONG>[] or null), got {text!r}")
        check_range(ctx, join(path, "maxSizeBytes"), p.max_size_bytes, minimum=MIN_SIZE_BYTES)

    @staticmethod
    def _constant_type(text: str) -> str | None:
        try:
            root = parse_expression(text).root
        except ExpressionError:
            return None
        if isinstance(root, ArrayLiteral):
            return f"array<{_SPARK_TYPES.get(root.element_type, 'string')}>"
        if isinstance(root, Literal):
            value = root.value
            return ("bigint" if isinstance(value, int) else "double" if isinstance(value, float) or value is None
                    else "string")
        return None

    def input_fields(self, agg: Any) -> list[str]:
        return list(agg.params.fields)

    def reads(self, agg: Any) -> str | None:
        return "string" if agg.params.fields else None  # the text beside its kind (`typed_inputs`)

    def stored_type(self, agg: Any) -> str:
        return self._constant_type(agg.params.initial_value or "null") or "double"

    # -- fold and combine

    def build(self, agg: Any, groups: list[list[tuple]], evaluate: Evaluator) -> list[Any]:
        p: ExpressionParams = agg.params
        start = evaluate(p.initial_value, {}, 1)[0]
        acc: list[Any] = [start] * len(groups)
        folded = [False] * len(groups)
        for j in range(max((len(g) for g in groups), default=0)):  # the j-th row of every group at once
            at = [g for g, rows in enumerate(groups) if len(rows) > j
                  and (p.should_aggregate_null_inputs or all(v is not None for v in rows[j]))]
            if not at:
                continue
            columns = {name: [groups[g][j][i] for g in at] for i, name in enumerate(p.fields)}
            columns[p.accumulator_identifier] = [acc[g] for g in at]
            typed = {p.accumulator_identifier: self.stored_type(agg)}
            for g, value in zip(at, evaluate(p.fold, columns, len(at), typed)):
                acc[g] = self._bounded(agg, value)
                folded[g] = True
        return [a if done or not p.is_null_unless_aggregated else None for a, done in zip(acc, folded)]

    def combine(self, agg: Any, parts: list[Any], evaluate: Evaluator) -> Any:
        p: ExpressionParams = agg.params
        with_nulls = (p.should_combine_aggregate_null_inputs if p.should_combine_aggregate_null_inputs is not None
                      else p.should_aggregate_null_inputs)
        text = p.combine if p.combine is not None else _renamed(p.fold or "", p.fields[0], agg.name)
        acc = evaluate(p.initial_combine_value or p.initial_value, {}, 1)[0]
        combined = False
        for part in parts:
            if part is None and not with_nulls:
                continue
            typed = {p.accumulator_identifier: self.stored_type(agg), agg.name: self.stored_type(agg)}
            acc = self._bounded(agg, evaluate(text, {p.accumulator_identifier: [acc], agg.name: [part]}, 1, typed)[0])
            combined = True
        return acc if combined or not p.is_null_unless_aggregated else None

    def _bounded(self, agg: Any, value: Any) -> Any:
        if isinstance(value, (str, list)):
            size = len(value.encode("utf-8")) if isinstance(value, str) else len(json.dumps(value).encode("utf-8"))
            if size > agg.params.max_size_bytes:
                raise ValueError(f"expression aggregator {agg.name!r}: its value grew to {size} bytes, past "
                                 f"maxSizeBytes {agg.params.max_size_bytes}: raise maxSizeBytes")
        return value


def _renamed(fold: str, field_name: str, name: str) -> str:
    """Druid's default combine: the fold with its one field replaced by the aggregator's name (as text)."""
    return fold.replace(field_name, name)

