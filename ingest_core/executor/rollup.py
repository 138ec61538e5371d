"""Rollup inside each split, before rows reach Spark: Druid's in-memory incremental index, in pyarrow.

A Druid indexing task rolls rows up as it reads them, holding up to `maxRowsInMemory` rows before it persists.
Each split here does the same: every `maxRowsInMemory` parsed rows are grouped by (queryGranularity bucket,
dimensions) into one partial row per group, and only those cross into the JVM. Spark then merges the partial
rows of every split and batch (`ingest_core.spark.rollup`), so the result is exactly the rollup of the raw
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
(`ingest_core.spark.rollup`): a group whose exact sum fits in a long gets it; one whose sum passes the long
range becomes several rows of the same group whose longSum values add up to the exact sum (each within the
range, the group's other sums and count on its first row, its min/max/first/last on every one), so reading the
segment gives the exact total: Druid's streaming rollup is best-effort, its rows are never wrong.

    <kind>Any        the group's first non-null value            first non-null
    sketches         a serialized sketch of the group's values  union (`executor.combine`)

stringFirst/stringLast/stringAny values are cut to maxStringBytes UTF-8 bytes (never inside a character). A
`filtered` aggregator reads its input where its filter matched (a column of the row parser's verdicts) and null
elsewhere; a filtered count counts the matching rows; a filtered first/last takes the group's first/last row
the filter matched and carries that row's time and offset (`filtered_order_columns`) for Spark's min_by/max_by.

First and Last carry their row's time and offset (FIRST_TIME, FIRST_OFFSET, LAST_TIME, LAST_OFFSET), shared by
every First (or Last) aggregator: one row is the earliest of its group, whatever the value column.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ingest_core.core import aggregators as registry
from ingest_core.core.aggregators import AggregatorType, SketchParams
from ingest_core.core.aggregators.base import typed_value
from ingest_core.core.aggregators.numeric import LongSum
from ingest_core.core.spec import DatasourceSpec
from ingest_core.executor import sketches
from ingest_core.executor.combine import stored_arrow_type
from ingest_core.executor.evaluator import evaluate
from ingest_core.executor.row_parser import (
    OFFSET,
    TIME,
    filter_mask_column,
    metric_input_column,
    value_kind_column,
)

FIRST_TIME, FIRST_OFFSET = "__first_time", "__first_offset"
LAST_TIME, LAST_OFFSET = "__last_time", "__last_offset"

# nulls count as values for First/Last (Spark's min_by/max_by and Druid keep a null first value)
_WITH_NULLS = pc.ScalarAggregateOptions(skip_nulls=False)
_ROWS = "__rows"


@dataclass(frozen=True)
class Aggregator:
    """One metricsSpec entry as a partial aggregation: its `type` (`core.aggregators`) over the input column,
    stored as `name`."""

    name: str
    type: AggregatorType
    kind: str | None   # the input's kind: long, double, float, string; None for count
    input: str | None  # the parsed input column; None for count
    inputs: tuple[str, ...] = ()  # every input column (cardinality and expression read several)
    mask: str | None = None  # filtered: the row parser's column of the filter's verdicts
    sketch: SketchParams | None = None
    max_bytes: int | None = None  # string values: Druid's maxStringBytes
    by_row: bool = False  # cardinality: one value per row (its fields' values together)
    kinds: str | None = None  # typed inputs: the first input's value kinds (`row_parser.value_kind_column`)
    spec: Any = None  # the metricsSpec entry (`spec.Aggregator`), for a type with fields of its own

    @classmethod
    def of(cls, agg_type: str, name: str, field_name: str | None) -> "Aggregator":
        t = registry.of(agg_type)
        if t.input_kind is None:
            return cls(name, t, None, None)
        column = metric_input_column(field_name or "", t.input_kind)
        return cls(name, t, t.input_kind, column, (column,))

    @property
    def op(self) -> str:
        return self.type.op

    @property
    def spark_type(self) -> str:
        """The stored column's Spark SQL type."""
        return self.type.stored_type(self.spec)

    @property
    def merged_type(self) -> str:
        """The Spark type of the merged column before a Python combine (a sketch's: the list of its partials)."""
        return self.type.merged_type(self.spec)


def filtered_order_columns(name: str) -> tuple[str, str]:
    """A filtered first/last `name`'s partial columns: the time and offset of the row its value came from (the
    group's first/last row the filter matched; null when none did)."""
    return f"__time_{name}", f"__offset_{name}"


long_sum_columns = LongSum.columns


def long_sum_value(partial_row: dict, name: str) -> int | None:
    """The exact sum a partial row carries for longSum `name` (a Python int: it may pass the long range)."""
    lo, hi = (partial_row[c] for c in long_sum_columns(name))
    return None if lo is None else (hi << 32) + lo


def aggregators(spec: DatasourceSpec) -> list[Aggregator]:
    out = []
    for a in spec.data_schema.metrics_spec:
        kind = a.input_kind
        inputs = tuple(metric_input_column(f, kind) for f in a.input_fields) if kind else ()
        out.append(Aggregator(a.name, a.kind, kind, inputs[0] if inputs else None, inputs,
                              filter_mask_column(a.name) if a.is_filtered else None, a.sketch,
                              a.string_bytes if kind == "string" else None, a.inner.by_row,
                              value_kind_column(inputs[0]) if a.hashes_typed_values and inputs else None,
                              a.inner))
    return out


def input_values(rows: pa.Table, a: Aggregator) -> pa.Array:
    """The aggregator's input over `rows`: strings cut to maxStringBytes, null where a filter did not match,
    a cardinality's fields joined per row (byRow)."""
    if len(a.inputs) > 1 and a.by_row:
        values = pc.binary_join_element_wise(*[rows.column(c) for c in a.inputs], "\x01",
                                             null_handling="replace", null_replacement="")
    else:
        values = rows.column(a.input)
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if a.max_bytes is not None:
        values = truncate_utf8(values, a.max_bytes)
    if a.mask is not None:
        values = pc.if_else(rows.column(a.mask), values, pa.scalar(None, values.type))
        values = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    return values


def truncate_utf8(values: pa.Array, max_bytes: int) -> pa.Array:
    """Each string cut to at most `max_bytes` UTF-8 bytes, never inside a character (Druid's StringUtils.chop)."""
    long_ones = pc.greater(pc.binary_length(values), max_bytes)
    if not pc.any(long_ones).as_py():
        return values
    def chop(v: str | None) -> str | None:
        return None if v is None else v.encode("utf-8")[:max_bytes].decode("utf-8", "ignore")
    return pa.array([chop(v) for v in values.to_pylist()], values.type)


class PartialRollup:
    """Groups raw parsed rows by `keys` into partial rows (see the module doc)."""

    def __init__(self, keys: list[str], aggs: list[Aggregator]):
        self.keys = keys
        self.aggs = aggs
        orders = {a.type.order for a in aggs}
        self.first, self.last = "first" in orders, "last" in orders

    def schema(self, rows: pa.Schema) -> pa.Schema:
        """The partial rows' schema, given the raw rows' schema."""
        fields = [rows.field(k) for k in self.keys]
        for a in self.aggs:
            t = a.type
            if t.counts_rows:
                fields.append(pa.field(a.name, pa.int64()))
            elif t.builds_in_python:
                fields.append(pa.field(a.name, stored_arrow_type(a)))
            elif t.splits_long_sum:
                fields += [pa.field(c, pa.int64()) for c in long_sum_columns(a.name)]
            elif t.hash_aggregate == "sum":
                typ = rows.field(a.input).type
                fields.append(pa.field(a.name, pa.float64() if pa.types.is_floating(typ) else typ))
            else:
                fields.append(pa.field(a.name, rows.field(a.input).type))
        if self.first:
            fields += [pa.field(FIRST_TIME, rows.field(TIME).type), pa.field(FIRST_OFFSET, pa.int64())]
        if self.last:
            fields += [pa.field(LAST_TIME, rows.field(TIME).type), pa.field(LAST_OFFSET, pa.int64())]
        for a in self.aggs:
            if a.type.order is not None and a.mask is not None:
                at, offset = filtered_order_columns(a.name)
                fields += [pa.field(at, rows.field(TIME).type), pa.field(offset, pa.int64())]
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

        sketched: dict[int, Aggregator] = {}  # output position -> built in Python from the groups' row lists
        picked: dict[int, Aggregator] = {}  # output position -> a filtered first/last, taken from its row below
        numbers = pa.array(np.arange(rows.num_rows, dtype=np.int64))
        for a in self.aggs:
            t = a.type
            if t.counts_rows and a.mask is not None:
                add(pc.cast(rows.column(a.mask), pa.int64()), "sum", a.name)  # the rows the filter matched
            elif t.counts_rows:
                add(None, "count_all", a.name)
            elif t.builds_in_python:
                sketched[len(names)] = a
                names.append(a.name)
            elif t.splits_long_sum:
                values = input_values(rows, a)
                lo, hi = long_sum_columns(a.name)
                add(pc.bit_wise_and(values, 0xFFFFFFFF), "sum", lo)
                add(pc.shift_right(values, 32), "sum", hi)  # arithmetic: the sign stays
            elif t.order is not None and a.mask is not None:
                picked[len(names)] = a  # the group's first (last) row the filter matched, by its row number
                add(pc.if_else(rows.column(a.mask), numbers, pa.scalar(None, pa.int64())), t.order, a.name)
            elif t.order is not None:
                add(input_values(rows, a), t.order, a.name, _WITH_NULLS)
            else:
                add(input_values(rows, a), t.hash_aggregate, a.name)
        if self.first:
            add(TIME, "first", FIRST_TIME)
            add(OFFSET, "first", FIRST_OFFSET)
        if self.last:
            add(TIME, "last", LAST_TIME)
            add(OFFSET, "last", LAST_OFFSET)
        if sketched:  # each group's rows, as row numbers in input order, to build its sketches from
            add(numbers, "list", _ROWS)
        keys = [f"k{i}" for i in range(len(self.keys))]
        grouped = pa.table(columns).group_by(keys, use_threads=False).aggregate(specs)
        # the result holds the keys first, then one column per aggregation, in order
        computed = iter(grouped.columns[len(keys):])
        outputs: list[Any] = []
        if sketched:
            row_lists = grouped.columns[-1].combine_chunks()
            order, offsets = row_lists.flatten(), row_lists.offsets.to_numpy()
            names.pop()
        extra: dict[str, pa.Array] = {}  # filtered first/last: their rows' time and offset, last
        for position in range(len(names)):
            if position in sketched:
                outputs.append(group_values(rows, sketched[position], order, offsets))
                continue
            column = next(computed)
            if position in picked:
                a = picked[position]
                outputs.append(input_values(rows, a).take(column))
                at, offset = filtered_order_columns(a.name)
                extra[at], extra[offset] = rows.column(TIME).take(column), rows.column(OFFSET).take(column)
                continue
            outputs.append(column)
        return pa.Table.from_arrays(grouped.columns[:len(keys)] + outputs + list(extra.values()),
                                    names=self.keys + names + list(extra))


def group_values(rows: pa.Table, a: Aggregator, order: pa.Array, offsets: np.ndarray) -> pa.Array:
    """One stored value per group, built in Python: sketches vectorized (`group_sketches`), any other type by its
    class's `build` over each group's rows (its typed input values, in row order)."""
    if a.sketch is not None:
        return group_sketches(rows, a, order, offsets)
    if a.inputs:
        columns = [input_values(rows, dataclasses.replace(a, input=c, inputs=(c,))).take(order).to_pylist()
                   for c in a.inputs]
        if a.kinds is not None:
            kinds = [rows.column(value_kind_column(c)).take(order).to_pylist() for c in a.inputs]
            columns = [[typed_value(v, k) for v, k in zip(values, ks)] for values, ks in zip(columns, kinds)]
        values = list(zip(*columns))
    else:
        values = [()] * len(order)
    matched = rows.column(a.mask).take(order).to_pylist() if a.mask is not None else None
    groups = [[v for i, v in enumerate(values[offsets[g]:offsets[g + 1]], offsets[g]) if matched is None
               or matched[i]] for g in range(len(offsets) - 1)]  # a filtered one: the rows its filter matched
    return pa.array(a.type.build(a.spec, groups, evaluate), stored_arrow_type(a))


def group_sketches(rows: pa.Table, a: Aggregator, order: pa.Array, offsets: np.ndarray) -> pa.Array:
    """One serialized sketch per group, of each group's input values (cardinality: of each field's)."""
    assert a.sketch is not None
    columns = [a.input] if len(a.inputs) <= 1 or a.by_row else list(a.inputs)
    if len(columns) == 1:
        kinds = rows.column(a.kinds).take(order) if a.kinds is not None else None
        return sketches.build(a.sketch, input_values(rows, a).take(order), offsets, kinds)
    # several fields, each value counted: every field's values of a group, one after the other
    picked = [input_values(rows, dataclasses.replace(a, input=c, inputs=(c,))).take(order) for c in columns]
    n, width = len(order), len(columns)
    group_of = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
    by_group = np.argsort(np.tile(group_of, width), kind="stable")  # positions in the stacked fields
    return sketches.build(a.sketch, pa.concat_arrays(picked).take(pa.array(by_group)), offsets * width)


def row_metrics_schema(rows: pa.Schema, aggs: list[Aggregator]) -> pa.Schema:
    """Without rollup: the raw rows' schema plus each metric's column (`row_metrics`)."""
    for a in aggs:
        typ = (pa.int64() if a.type.counts_rows else stored_arrow_type(a) if a.type.builds_in_python
               else rows.field(a.input).type)
        rows = rows.append(pa.field(a.name, typ))
    return rows


def row_metrics(rows: pa.Table, aggs: list[Aggregator]) -> pa.Table:
    """Without rollup every row keeps its own metrics, as Druid stores them: a count is 1 (a filtered one 1 or
    0), a sketch is the sketch of the row's value, a value is the row's input (null where a filter did not
    match, strings cut to maxStringBytes)."""
    n = rows.num_rows
    columns = []
    for a in aggs:
        if a.type.counts_rows:
            columns.append(pc.cast(rows.column(a.mask), pa.int64()) if a.mask is not None
                           else pa.array(np.ones(n, dtype=np.int64)))
        elif a.type.builds_in_python:
            every_row = np.arange(n + 1, dtype=np.int64)
            columns.append(group_values(rows, a, pa.array(every_row[:-1]), every_row))
        else:
            columns.append(input_values(rows, a))
    for a, column in zip(aggs, columns):
        rows = rows.append_column(a.name, column)
    return rows


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

