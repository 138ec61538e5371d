"""What one Druid aggregator type is, in every layer: the base class of the registry's entries.

A type is computed in three places that may not import each other's libraries (pyproject's import contracts):
the split's row step in pyarrow (`executor.rollup`), Spark's merge of the splits' partial rows within a run
(`spark.rollup`) and compaction's combine across runs (`spark.compaction`); the stored column is then read by
DuckDB (`store.sql`). So a type describes itself, and each layer turns the description into its own objects:

- the row step: `hash_aggregate` (a pyarrow hash aggregation's name) or one of the mechanisms the executor owns
  (`counts_rows`, `splits_long_sum`, `order`, a sketch's `SketchParams`), or, for a value built in Python,
  `build` and `combine` here, over plain Python values, with the expression evaluator handed in (`Evaluator`);
- Spark's merge and combine: Spark SQL aggregate text (`merge_sql`, `combine_sql`) that `spark.rollup` turns
  into Columns with `F.expr` (text crosses the layer, no pyspark import here); a partial Spark cannot merge is
  collected (`collect_list`) and combined by `combine` in a mapInArrow;
- the stored type: `stored_type`, a Spark SQL type name;
- the read side: `read_sql`, DuckDB SQL text over the stored column.

A new type is one module with one subclass and a `register` line in `core/aggregators/__init__.py`.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Protocol

from ingest_core.core.binding import BindContext, bind_object, check_range, join

TIME_COLUMN = "__time"  # Druid's (core.spec.druid imports this package: no import back)
INT32_MAX = 2**31 - 1

# How a typed input value arrived, as Druid's parser would have typed it: Druid hashes a JSON integer as a long, a
# JSON decimal as a double, text as text, and each element of a list (a multi-value field) as text. The row parser
# keeps the value as text beside its kind (`row_parser.value_kinds`).
TEXT, LONG, DOUBLE, LIST = 0, 1, 2, 3
STRING_DEFAULT_MAX_BYTES = 1024


def typed_value(text: str | None, kind: int) -> Any:
    """An input value as Druid's parser typed it (kinds above): a long, a double, a list, else text."""
    if text is None or kind == TEXT:
        return text
    if kind == LONG:
        return int(text)
    if kind == DOUBLE:
        return float(text)
    return json.loads(text)


class Evaluator(Protocol):
    """The expression language's evaluator, handed in by the executor (core may not import it)."""

    def __call__(self, text: str, columns: dict[str, list[Any]], num_rows: int,
                 types: dict[str, str] | None = None) -> list[Any]:
        """`text` evaluated over `columns` (each a list of `num_rows` Python values, of the Spark SQL type
        `types` names, else as inferred): one value per row."""


@dataclass(frozen=True)
class Orders:
    """Spark SQL text of the order a first / last partial is picked by (given by the caller: within a run the
    row's time, partition and offset; across runs the segment's publish order)."""

    first: str
    last: str


@dataclass(frozen=True)
class SerializedInput:
    """Input values that arrive serialized, as base64 text (sketches to merge, variance collectors): `read` gives
    one value's bytes or raises ValueError saying what is wrong; `noun` names such a value in its row's error. The
    row parser checks each value (a bad one is null and its row processedWithError), so no bad value reaches the
    row step or Spark."""

    noun: str
    read: Callable[[str], bytes]


def base64_bytes(text: str, what: str) -> bytes:
    """The bytes of base64 `text`; ValueError naming `what` is sent so."""
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"not base64 text ({what} is sent as base64)") from None


class AggregatorType:
    """One Druid aggregator type (see the module doc). Instances are registered by their Druid type name."""

    op: ClassVar[str] = ""          # the family's short name (count, sum, min, ..., theta): docs and tests only
    own_fields: ClassVar[frozenset[str]] = frozenset()  # JSON keys beyond type, name, fieldName
    params: ClassVar[type | None] = None  # a dataclass of the type's own Druid fields, bound from its entry
    needs_field_name: ClassVar[bool] = True
    counts_rows: ClassVar[bool] = False      # count: the rows of the group, no input
    splits_long_sum: ClassVar[bool] = False  # longSum: high and low 32-bit sums, joined exactly after the merge
    order: ClassVar[str | None] = None       # first / last: the value of the group's first / last row
    hash_aggregate: ClassVar[str | None] = None  # pyarrow's hash aggregation of the input over a group
    additive: ClassVar[bool] = False         # adding the stored values of two rows merges them (count, sums)
    builds_in_python: ClassVar[bool] = False  # `build` and `combine` compute the stored value
    typed_inputs: ClassVar[bool] = False     # the inputs are read with their kinds (TEXT, LONG, DOUBLE, LIST)

    def __init__(self, name: str, input_kind: str | None) -> None:
        self.name = name
        self.input_kind = input_kind  # long, double, float, string; None for count

    def __repr__(self) -> str:
        return f"<aggregator {self.name}>"

    def __reduce__(self) -> tuple:  # pickled into Spark's tasks as the registry's own instance
        return of, (self.name,)

    # -- parse and validation

    def own(self) -> frozenset[str]:
        """The JSON keys it takes beyond type, name and fieldName (the others get a warning)."""
        return self.own_fields

    def check(self, agg: Any, path: str, ctx: BindContext) -> None:
        """Errors in `agg` (a `spec.Aggregator` of this type, fields of other types already warned about)."""
        if self.needs_field_name and not agg.field_name:
            ctx.error(join(path, "fieldName"), f"aggregator {agg.name!r} of type {self.name} needs a fieldName")

    def reads(self, agg: Any) -> str | None:
        """How the input fields are read: long, double, float or string; None for no input (count)."""
        return self.input_kind

    def input_fields(self, agg: Any) -> list[str]:
        return [agg.field_name] if agg.field_name else []

    def sketch(self, agg: Any) -> Any:
        """The `SketchParams` of a sketch type, else None."""
        return None

    def serialized_input(self, agg: Any) -> SerializedInput | None:
        """How its input values are read when they arrive serialized; None for plain values."""
        return None

    def hashes_typed_values(self, agg: Any) -> bool:
        """Whether its inputs are read with their kinds (`typed_inputs`: theta, HLL, hyperUnique, expression)."""
        return self.typed_inputs

    # -- storage

    def stored_type(self, agg: Any) -> str:
        """The stored column's Spark SQL type."""
        return self.input_kind or "long"

    def merged_type(self, agg: Any) -> str:
        """The Spark type of the merged column before any Python combine (a collected list of partials)."""
        return f"array<{self.stored_type(agg)}>" if self.builds_in_python else self.stored_type(agg)

    # -- Spark: merge within a run, combine across runs (Spark SQL aggregate text over `column`, quoted)

    def merge_sql(self, agg: Any, column: str, orders: Orders) -> list[tuple[str, str]]:
        """(output column, aggregate) pairs merging this metric's partial columns."""
        if self.builds_in_python:
            return [(agg.name, f"collect_list({column})")]
        assert self.hash_aggregate is not None, self.name
        return [(agg.name, f"{_SPARK_MERGE[self.hash_aggregate]}({column})")]

    def combine_sql(self, agg: Any, column: str, orders: Orders) -> list[tuple[str, str]]:
        """Compaction: the stored columns of rows of several runs merged (the same as `merge_sql` unless the
        partial is not the stored value)."""
        return self.merge_sql(agg, column, orders)

    def split_row_sql(self, column: str) -> str:
        """The value on a group's extra rows when a longSum past the long range splits it (`spark.rollup`): only
        the first row holds what adding rows up would count twice."""
        if self.additive:
            return f"CAST(0 AS {self.stored_type(None)})"
        if self.builds_in_python:
            return "NULL"
        return column

    # -- a value built in Python (`builds_in_python`)

    def build(self, agg: Any, groups: list[list[tuple]], evaluate: Evaluator) -> list[Any]:
        """One stored value per group, from each group's rows (its input fields' values) in row order."""
        raise NotImplementedError(self.name)

    def combine(self, agg: Any, parts: list[Any], evaluate: Evaluator) -> Any:
        """The stored values of several rows of one group, merged."""
        raise NotImplementedError(self.name)

    # -- the read side

    def read_sql(self, agg: Any, column: str) -> str:
        """DuckDB SQL text reading the stored column as Druid's query returns it (finalized)."""
        return column


REGISTRY: dict[str, AggregatorType] = {}


def register(cls: type[AggregatorType], name: str, input_kind: str | None = None) -> None:
    """Druid's type `name` is computed by `cls` (reading its input as `input_kind`)."""
    REGISTRY[name] = cls(name, input_kind)


def of(name: str) -> AggregatorType:
    """The class of a registered type (KeyError for another name)."""
    return REGISTRY[name]


# Spark's merge of a hash aggregation's partials
_SPARK_MERGE = {"sum": "sum", "min": "min", "max": "max"}


def check_time_column(agg: Any, path: str, ctx: BindContext) -> None:
    if agg.time_column not in (None, TIME_COLUMN):
        ctx.error(join(path, "timeColumn"), f"aggregator {agg.name!r}: only {TIME_COLUMN} (the default) is "
                  "supported as timeColumn: a row's first/last is by its timestamp")


def check_string_bytes(agg: Any, path: str, ctx: BindContext) -> None:
    check_range(ctx, join(path, "maxStringBytes"), agg.max_string_bytes, minimum=1, maximum=INT32_MAX)


def bind_params(cls: type, raw: dict, path: str, ctx: BindContext) -> Any:
    """A type's own fields (its `params` dataclass) out of its metricsSpec entry."""
    keys = {f.metadata.get("key") or _camel(f.name) for f in dataclasses.fields(cls)}
    return bind_object(cls, {k: v for k, v in raw.items() if k in keys}, path, ctx)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)
