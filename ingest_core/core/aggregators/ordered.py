"""longFirst ... stringLast: the value of the group's first / last row by time (ties: partition, then offset).

A split keeps the value of its group's first (last) row, nulls included, with that row's time and offset; Spark
takes the partial of the earliest (latest) such row (`min_by` / `max_by` over the caller's order). Strings are cut
to maxStringBytes UTF-8 bytes.
"""

from __future__ import annotations

from typing import Any

from ingest_core.core.aggregators.base import (
    AggregatorType,
    Orders,
    check_string_bytes,
    check_time_column,
)


class First(AggregatorType):
    op = "first"
    order = "first"

    def own(self) -> frozenset[str]:
        return frozenset({"timeColumn"} | ({"maxStringBytes"} if self.input_kind == "string" else set()))

    def check(self, agg: Any, path: str, ctx: Any) -> None:
        super().check(agg, path, ctx)
        check_time_column(agg, path, ctx)
        check_string_bytes(agg, path, ctx)

    def merge_sql(self, agg: Any, column: str, orders: Orders) -> list[tuple[str, str]]:
        return [(agg.name, f"min_by({column}, {orders.first})")]


class Last(First):
    op = "last"
    order = "last"

    def merge_sql(self, agg: Any, column: str, orders: Orders) -> list[tuple[str, str]]:
        return [(agg.name, f"max_by({column}, {orders.last})")]


class AnyValue(AggregatorType):
    """longAny ... stringAny: a non-null value of the group when there is one."""

    op = "any"
    hash_aggregate = "first"  # pyarrow's `first` skips nulls

    def own(self) -> frozenset[str]:
        return frozenset({"maxStringBytes"} if self.input_kind == "string" else set())

    def check(self, agg: Any, path: str, ctx: Any) -> None:
        super().check(agg, path, ctx)
        check_string_bytes(agg, path, ctx)

    def merge_sql(self, agg: Any, column: str, orders: Orders) -> list[tuple[str, str]]:
        return [(agg.name, f"first({column}, true)")]
