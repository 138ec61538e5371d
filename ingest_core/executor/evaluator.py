"""The expression language's evaluator over Python values, as `core.aggregators` takes it (`Evaluator`): an
aggregator's fold or combine evaluated for a batch of groups at once, through the vectorized compiler's public
entry points (`executor.expressions`)."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import pyarrow as pa

from ingest_core.executor.expressions import CompiledExpression, compile_expression, evaluate_to_array


@lru_cache(maxsize=256)
def compiled(text: str) -> CompiledExpression:
    return compile_expression(text)


def evaluate(text: str, columns: dict[str, list[Any]], num_rows: int,
             types: dict[str, str] | None = None) -> list[Any]:
    """`text` over `columns` (lists of Python values, of the Spark SQL type `types` gives, else typed as pyarrow
    infers them; values of mixed types read as text): one Python value per row."""
    types = types or {}
    arrays = {name: pa.array(values, arrow_type(types[name])) if name in types else _array(values)
              for name, values in columns.items()}
    return evaluate_to_array(compiled(text), arrays, num_rows).to_pylist()


def arrow_type(spark_type: str) -> pa.DataType:
    """The Arrow type of a stored column's Spark SQL type (`AggregatorType.stored_type`)."""
    if spark_type.startswith("array<"):
        return pa.list_(arrow_type(spark_type[6:-1]))
    return _ARROW_TYPES[spark_type]


_ARROW_TYPES = {"binary": pa.binary(), "bigint": pa.int64(), "long": pa.int64(), "double": pa.float64(),
                "float": pa.float32(), "string": pa.string()}


def _array(values: list[Any]) -> pa.Array:
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array([None if v is None else str(v) for v in values], pa.string())
