"""count, the sums, min and max: pyarrow's hash aggregations in a split, their own merge in Spark.

A longSum never wraps: a split sums each value's high 32 bits (signed) and low 32 bits (unsigned) apart, Spark
adds both and joins them (`spark.rollup.exact_long_sums`), so the stored sum is exact or split over several rows.
"""

from __future__ import annotations

from typing import Any

from ingest_core.core.aggregators.base import AggregatorType, Orders


class Count(AggregatorType):
    op = "count"
    needs_field_name = False
    counts_rows = True
    additive = True

    def merge_sql(self, agg: Any, column: str, orders: Orders) -> list[tuple[str, str]]:
        return [(agg.name, f"sum({column})")]


class Sum(AggregatorType):
    """longSum, doubleSum, floatSum (a float's partial sums as double)."""

    op = "sum"
    hash_aggregate = "sum"
    additive = True


class LongSum(Sum):
    splits_long_sum = True

    @staticmethod
    def columns(name: str) -> tuple[str, str]:
        """The partial row's columns of a longSum `name`: the sum of its values' low 32 bits, of their high ones."""
        return f"__lo_{name}", f"__hi_{name}"

    def merge_sql(self, agg: Any, column: str, orders: Orders) -> list[tuple[str, str]]:
        return [(c, f"sum(`{c}`)") for c in self.columns(agg.name)]

    def combine_sql(self, agg: Any, column: str, orders: Orders) -> list[tuple[str, str]]:
        lo, hi = self.columns(agg.name)
        return [(lo, f"sum({column} & CAST({(1 << 32) - 1} AS BIGINT))"), (hi, f"sum(shiftright({column}, 32))")]


class Min(AggregatorType):
    op = "min"
    hash_aggregate = "min"


class Max(AggregatorType):
    op = "max"
    hash_aggregate = "max"
