"""Spark's merge of the partials it cannot add up itself (sketches, variance collectors, expression accumulators):
a group's partials arrive collected as a list (`collect_list`) and leave as one value, combined by the metric's
class (`core.aggregators`), in a mapInArrow. Within a run (`spark.rollup`) and across runs (`spark.compaction`)."""

from __future__ import annotations

from typing import Any, Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ingest_core.executor.evaluator import arrow_type, evaluate


def combine_batches(batches: Iterator[pa.RecordBatch], aggs: dict[str, Any]) -> Iterator[pa.RecordBatch]:
    """mapInArrow: each `aggs` column arrives as the list of a group's partials; it leaves as their combination."""
    for batch in batches:
        columns = []
        for name, column in zip(batch.schema.names, batch.columns):
            a = aggs.get(name)
            columns.append(column if a is None else combine_lists(
                column, lambda parts, a=a: a.type.combine(a.spec, parts, evaluate), stored_arrow_type(a)))
        yield pa.RecordBatch.from_arrays(columns, names=batch.schema.names)


def stored_arrow_type(a: Any) -> pa.DataType:
    """The Arrow type of a value built in Python (`builds_in_python`) of `executor.rollup.Aggregator` `a`: a
    sketch's or variance's bytes, an expression's accumulator."""
    return arrow_type(a.spark_type)


def combine_lists(lists: pa.Array, combine: Callable[[list], Any], out_type: pa.DataType) -> pa.Array:
    """Each list of partials combined; a list of one (a group seen by one split only) is kept as it is, without a
    round trip through Python; an empty or null list gives null."""
    lengths = pc.fill_null(pc.list_value_length(lists), 0).to_numpy(zero_copy_only=False)
    several = np.flatnonzero(lengths > 1)
    single = pc.list_element(pc.if_else(pa.array(lengths == 1), lists, pa.scalar(None, lists.type)), 0) \
        if (lengths == 1).any() else pa.nulls(len(lists), out_type)
    if not len(several):
        return single.cast(out_type)
    merged = pa.array([combine(parts) for parts in lists.take(pa.array(several)).to_pylist()], out_type)
    positions = np.full(len(lists), -1, dtype=np.int64)
    positions[several] = np.arange(len(several))
    from_merge = pa.array(positions >= 0)
    return pc.if_else(from_merge, merged.take(pa.array(np.maximum(positions, 0))), single.cast(out_type))
