"""Druid's rollup in Spark: the splits' partial rows merged within a run (`rollup`), and the stored rows of several
runs combined by compaction (`combine_metrics`, called by `spark.compaction`).

Each metric's class (`core.aggregators`) gives its merge as Spark SQL aggregate text, turned into Columns here with
`F.expr`; what Spark cannot merge (sketches, variance, expression accumulators) is collected and combined in a
mapInArrow (`executor.combine`). A longSum arrives as two sums (high and low 32 bits) that add up without overflow;
a group whose exact sum passes the long range is written as several rows whose values add up to it
(`exact_long_sums`), never wrapped, and never an overflow error (Spark's ANSI mode raises on one).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from pyspark.sql.pandas.types import from_arrow_type
from pyspark.sql.types import StructField, StructType

from ingest_core.core.aggregators import Orders
from ingest_core.core.spec import DatasourceSpec
from ingest_core.executor.combine import combine_batches, stored_arrow_type
from ingest_core.executor.rollup import (
    FIRST_OFFSET,
    FIRST_TIME,
    LAST_OFFSET,
    LAST_TIME,
    Aggregator,
    aggregators,
    filtered_order_columns,
    long_sum_columns,
)
from ingest_core.executor.row_parser import DIMS_JSON, PARTITION, TIME, discovers_strings
from ingest_core.spark.kafka_source import BUCKET, SEGMENT


def sql_functions(df: Any) -> Any:
    """Spark's functions for `df`'s kind of session. `pyspark.sql.functions` builds classic or Spark Connect
    columns by the process's environment, not by the session, and a process may hold both (the tests)."""
    from pyspark.sql.connect.dataframe import DataFrame as ConnectDataFrame

    if isinstance(df, ConnectDataFrame):
        from pyspark.sql.connect import functions as F
    else:
        from pyspark.sql import functions as F
    return F


def col(F: Any, name: str) -> Any:
    """A column by its exact name: Druid's default names hold dots (`kafka.key`), which Spark would read as
    struct access."""
    return F.col(quoted(name))


def quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def rollup(rows: Any, spec: DatasourceSpec, dims: list[str] | None = None) -> tuple[Any, list[str], list[str]]:
    """Druid's rollup: group by (queryGranularity bucket, dimensions) and aggregate; without rollup, every row
    stays a row with its metrics computed from itself. `__time` becomes the bucket in both cases. `dims`: the
    dimensions, when the spec does not list them all (type-aware discovery)."""
    F = sql_functions(rows)
    schema = spec.data_schema
    if dims is None:
        dims = ([d.name for d in schema.dimensions_spec.dimensions]
                + ([DIMS_JSON] if discovers_strings(schema.dimensions_spec) else []))
    metrics = [a.name for a in schema.metrics_spec]
    if not schema.granularity_spec.rollup:  # the splits computed each row's metrics (`rollup.row_metrics`)
        cols = [col(F, BUCKET).alias(TIME), col(F, SEGMENT), *[col(F, d) for d in dims]]
        return rows.select(*cols, *[col(F, m) for m in metrics]), dims, metrics
    # ties go to the lower partition
    first, last = (f"struct({quoted(t)}, {quoted(PARTITION)}, {quoted(o)})"
                   for t, o in ((FIRST_TIME, FIRST_OFFSET), (LAST_TIME, LAST_OFFSET)))
    aggs = aggregators(spec)
    parts = []
    for a in aggs:
        orders = Orders(first, last)
        if a.type.order is not None and a.mask is not None:
            # by the time of the row the filter matched; a split where none did has a null order, which
            # min_by/max_by pass over
            at, offset = (quoted(c) for c in filtered_order_columns(a.name))
            order = f"CASE WHEN {at} IS NULL THEN NULL ELSE struct({at}, {quoted(PARTITION)}, {offset}) END"
            orders = Orders(order, order)
        parts += _columns(F, a, a.type.merge_sql(a.spec, quoted(a.name), orders))
    if not parts:
        parts = [F.count(F.lit(1)).alias("__count")]
    keys = [TIME, SEGMENT, *dims]
    rolled = rows.groupBy(col(F, BUCKET).alias(TIME), col(F, SEGMENT), *[col(F, d) for d in dims]).agg(*parts)
    return finish(F, rolled, keys, aggs), dims, metrics


def combine_metrics(rows: Any, keys: list[str], aggs: list[Aggregator], order: str) -> Any:
    """Compaction: rows with the same `keys` merged with their metrics' combining aggregators; first / last by
    `order` (the segment's publish order: segments hold no event times for them)."""
    F = sql_functions(rows)
    parts = []
    for a in aggs:
        c = quoted(a.name)
        if a.type.order is not None and a.mask is not None:
            # a segment whose rows the filter never matched holds null: the first/last segment that has a value
            filtered = f"CASE WHEN {c} IS NOT NULL THEN {order} END"
            orders = Orders(filtered, filtered)
        else:
            orders = Orders(order, order)
        parts += _columns(F, a, a.type.combine_sql(a.spec, c, orders))
    if not parts:  # no metrics: identical rows are one row
        return rows.select(*[col(F, k) for k in keys]).distinct()
    return finish(F, rows.groupBy(*[col(F, k) for k in keys]).agg(*parts), keys, aggs)


def _columns(F: Any, a: Aggregator, merges: list[tuple[str, str]]) -> list[Any]:
    """Spark's aggregate Columns of a metric's (output, SQL text) pairs; its own column cast to its merged type."""
    return [F.expr(text).cast(a.merged_type).alias(name) if name == a.name else F.expr(text).alias(name)
            for name, text in merges]


def finish(F: Any, rolled: Any, keys: list[str], aggs: list[Aggregator]) -> Any:
    """The merged columns Spark could not finish: collected partials combined, longSums joined."""
    collected = {a.name: a for a in aggs if a.type.builds_in_python}
    if collected:
        schema = StructType([f if f.name not in collected else
                             StructField(f.name, from_arrow_type(stored_arrow_type(collected[f.name])), True)
                             for f in rolled.schema.fields])
        rolled = rolled.mapInArrow(partial(combine_batches, aggs=collected), schema)
    long_sums = [a.name for a in aggs if a.type.splits_long_sum]
    if long_sums:
        rolled = exact_long_sums(F, rolled, keys, aggs, long_sums)
    return rolled


_HALF = 32  # a longSum's value = high * 2^32 + low (low unsigned), as the splits sum them
_PART = 1 << 30  # the high part one output row holds when a sum passes the long range: |value| < 2^62 + 2^32


def exact_long_sums(F: Any, rolled: Any, keys: list[str], aggs: list[Aggregator], long_sums: list[str]) -> Any:
    """Join each longSum's high and low sums into one long. A group whose sum fits (always, in practice) keeps
    one row. One whose sum passes the long range is exploded into as many rows as its largest sum needs: row j
    holds the j-th slice of 2^30 * 2^32 of each longSum (the low part on row 0), row 0 also holds what adding the
    rows would count twice (the other sums, the count, sketches: `split_row_sql`), and every row holds the
    min/max/first/last; summing the rows gives each exact value."""
    low_mask = F.lit((1 << _HALF) - 1).cast("long")
    high: dict[str, Any] = {}
    low: dict[str, Any] = {}
    for name in long_sums:
        lo, hi = (col(F, c) for c in long_sum_columns(name))
        high[name] = hi + F.shiftright(lo, _HALF)  # the low sum's carry; no overflow below 2^31 rows per group
        low[name] = lo.bitwiseAND(low_mask)
    # a null sum (every value null) fits: explode(sequence(0, null)) would drop the group's row
    fits = {name: F.coalesce(high[name].between(-(1 << 31), (1 << 31) - 1), F.lit(True)) for name in long_sums}
    slices = {name: F.when(fits[name], F.lit(1)).otherwise(F.ceil(F.abs(high[name]) / _PART).cast("long"))
              for name in long_sums}
    count = slices[long_sums[0]] if len(long_sums) == 1 else F.greatest(*slices.values())
    part = F.explode(F.sequence(F.lit(0).cast("long"), count - 1)).alias("__part")
    staged = rolled.select("*", *[high[n].alias(f"__high_{n}") for n in long_sums],
                           *[low[n].alias(f"__low_{n}") for n in long_sums], part)
    j = col(F, "__part")
    first_row = j == 0
    out = [col(F, k) for k in keys]
    for a in aggs:
        if a.type.splits_long_sum:
            h, lo = col(F, f"__high_{a.name}"), col(F, f"__low_{a.name}")
            exact = F.shiftleft(h, _HALF).bitwiseOR(lo)
            taken = F.greatest(F.least(F.abs(h) - j * _PART, F.lit(_PART)), F.lit(0))
            sliced = F.shiftleft(F.signum(h).cast("long") * taken, _HALF) + F.when(first_row, lo).otherwise(0)
            value = F.when(F.coalesce(h.between(-(1 << 31), (1 << 31) - 1), F.lit(True)),
                           F.when(first_row, exact).otherwise(0)).otherwise(sliced)
            out.append(F.when(lo.isNull(), F.lit(None)).otherwise(value).cast("long").alias(a.name))
        else:
            other = F.expr(a.type.split_row_sql(quoted(a.name))).cast(a.spark_type)
            out.append(F.when(first_row, col(F, a.name)).otherwise(other).alias(a.name))
    return staged.select(*out)
