"""Rollup inside each split, before rows reach Spark: Druid's in-memory incremental index, in pyarrow.

A Druid indexing task rolls rows up as it reads them, holding up to `maxRowsInMemory` rows before it persists.
Each split here does the same: every `maxRowsInMemory` parsed rows are grouped by (queryGranularity bucket,
dimensions) into one partial row per group, and only those cross into the JVM. Spark then merges the partial
rows of every split and batch (`ingest_core.spark.job.rollup`), so the result is exactly the rollup of the raw
rows; when the data rolls up well, the JVM sees a fraction of them.

Partial state per aggregator, and how Spark merges it:

    count            rows in the group                          sum
    <kind>Sum        the sum (float inputs summed as double)    sum
    <kind>Min/Max    the minimum / maximum                      min / max
    <kind>First      the value of the group's earliest row      min_by (time, partition, offset)
    <kind>Last       the value of the group's latest row        max_by (time, partition, offset)

A longSum never wraps and never fails the job: each row's value is split into its high 32 bits (signed) and
low 32 bits (unsigned), and the partial rows carry the two sums (`long_sum_columns`), which neither pyarrow's
hash_sum nor Spark's sum can overflow (below 2^31 rows per group). Spark adds both and joins them
(`ingest_core.spark.job.rollup`): a group whose exact sum fits in a long gets it; one whose sum passes the long
range becomes several rows of the same group whose longSum values add up to the exact sum (each within the
range, the group's other sums and count on its first row, its min/max/first/last on every one), so reading the
segment gives the exact total: Druid's streaming rollup is best-effort, its rows are never wrong.

First and Last carry their row's time and offset (FIRST_TIME, FIRST_OFFSET, LAST_TIME, LAST_OFFSET), shared by
every First (or Last) aggregator: one row is the earliest of its group, whatever the value column.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from ingest_core.core.spec import DatasourceSpec
from ingest_core.executor.row_parser import (
    OFFSET,
    TIME,
    metric_input_column,
    metric_kind,
)

FIRST_TIME, FIRST_OFFSET = "__first_time", "__first_offset"
LAST_TIME, LAST_OFFSET = "__last_time", "__last_offset"

# nulls count as values for First/Last (Spark's min_by/max_by and Druid keep a null first value)
_WITH_NULLS = pc.ScalarAggregateOptions(skip_nulls=False)


@dataclass(frozen=True)
class Aggregator:
    """One metricsSpec entry as a partial aggregation: `op` over the input column, stored as `name`."""

    name: str
    op: str            # count, sum, min, max, first, last
    kind: str | None   # long, double, float; None for count
    input: str | None  # the parsed input column; None for count

    @classmethod
    def of(cls, agg_type: str, name: str, field_name: str | None) -> "Aggregator":
        kind = metric_kind(agg_type)
        if kind is None:
            return cls(name, "count", None, None)
        return cls(name, agg_type[len(kind):].lower(), kind, metric_input_column(field_name or "", kind))


def long_sum_columns(name: str) -> tuple[str, str]:
    """The partial row's columns of a longSum `name`: the sum of its values' low 32 bits, of their high ones."""
    return f"__lo_{name}", f"__hi_{name}"


def long_sum_value(partial_row: dict, name: str) -> int | None:
    """The exact sum a partial row carries for longSum `name` (a Python int: it may pass the long range)."""
    lo, hi = (partial_row[c] for c in long_sum_columns(name))
    return None if lo is None else (hi << 32) + lo


def aggregators(spec: DatasourceSpec) -> list[Aggregator]:
    return [Aggregator.of(a.type, a.name, a.field_name) for a in spec.data_schema.metrics_spec]


class PartialRollup:
    """Groups raw parsed rows by `keys` into partial rows (see the module doc)."""

    def __init__(self, keys: list[str], aggs: list[Aggregator]):
        self.keys = keys
        self.aggs = aggs
        ops = {a.op for a in aggs}
        self.first, self.last = "first" in ops, "last" in ops

    def schema(self, rows: pa.Schema) -> pa.Schema:
        """The partial rows' schema, given the raw rows' schema."""
        fields = [rows.field(k) for k in self.keys]
        for a in self.aggs:
            if a.op == "count":
                fields.append(pa.field(a.name, pa.int64()))
            elif a.op == "sum" and a.kind == "long":
                fields += [pa.field(c, pa.int64()) for c in long_sum_columns(a.name)]
            elif a.op == "sum":
                typ = rows.field(a.input).type
                fields.append(pa.field(a.name, pa.float64() if pa.types.is_floating(typ) else typ))
            else:
                fields.append(pa.field(a.name, rows.field(a.input).type))
        if self.first:
            fields += [pa.field(FIRST_TIME, rows.field(TIME).type), pa.field(FIRST_OFFSET, pa.int64())]
        if self.last:
            fields += [pa.field(LAST_TIME, rows.field(TIME).type), pa.field(LAST_OFFSET, pa.int64())]
        return pa.schema(fields)

    def aggregate(self, rows: pa.Table) -> pa.Table:
        """One partial row per group of `rows` (raw parsed rows of one partition)."""
        if self.first or self.last:
            # ordered aggregations take rows in input order: put them in (time, offset) order, no threads
            rows = rows.take(pc.sort_indices(rows, [(TIME, "ascending"), (OFFSET, "ascending")]))
        # positional names (k0.., v0..) so two aggregators over one column, or a dimension named like an
        # aggregate's output, cannot collide
        columns = {f"k{i}": rows.column(k) for i, k in enumerate(self.keys)}
        specs: list[tuple] = []
        names: list[str] = []

        def add(column: str | pa.Array | None, op: str, name: str, options: pc.FunctionOptions | None = None) -> None:
            if column is None:
                specs.append(([], op))
            else:
                v = f"v{len(specs)}"
                columns[v] = rows.column(column) if isinstance(column, str) else column
                specs.append((v, op, options) if options is not None else (v, op))
            names.append(name)

        for a in self.aggs:
            if a.op == "count":
                add(None, "count_all", a.name)
            elif a.op == "sum" and a.kind == "long":
                values = rows.column(a.input)
                lo, hi = long_sum_columns(a.name)
                add(pc.bit_wise_and(values, 0xFFFFFFFF), "sum", lo)
                add(pc.shift_right(values, 32), "sum", hi)  # arithmetic: the sign stays
            elif a.op in ("first", "last"):
                add(a.input, a.op, a.name, _WITH_NULLS)
            else:
                add(a.input, a.op, a.name)
        if self.first:
            add(TIME, "first", FIRST_TIME)
            add(OFFSET, "first", FIRST_OFFSET)
        if self.last:
            add(TIME, "last", LAST_TIME)
            add(OFFSET, "last", LAST_OFFSET)
        keys = [f"k{i}" for i in range(len(self.keys))]
        grouped = pa.table(columns).group_by(keys, use_threads=False).aggregate(specs)
        # the result holds the keys first, then one column per aggregation, in order
        return pa.Table.from_arrays(grouped.columns, names=self.keys + names)


class RollupBuffer:
    """Collects a split's parsed rows and rolls them up every `max_rows` rows (maxRowsInMemory), which bounds
    what a split holds whatever the length of its range."""

    def __init__(self, rollup: PartialRollup, max_rows: int):
        self.rollup = rollup
        self.max_rows = max(1, max_rows)
        self._tables: list[pa.Table] = []
        self._rows = 0

    def add(self, rows: pa.Table) -> pa.Table | None:
        """Buffer `rows`; the partial rows of the buffer once it holds max_rows rows, else None."""
        if rows.num_rows:
            self._tables.append(rows)
            self._rows += rows.num_rows
        return self.flush() if self._rows >= self.max_rows else None

    def flush(self) -> pa.Table | None:
        if not self._tables:
            return None
        rows = pa.concat_tables(self._tables) if len(self._tables) > 1 else self._tables[0]
        self._tables, self._rows = [], 0
        return self.rollup.aggregate(rows)

