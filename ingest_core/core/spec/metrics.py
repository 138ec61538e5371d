"""`dataSchema.metricsSpec`: Druid's aggregators, each checked for what the job can compute."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ingest_core.core import aggregators as A
from ingest_core.core.aggregators.base import bind_params
from ingest_core.core.binding import BindContext, bind_object, did_you_mean, join, json_key, spec_field, to_raw
from ingest_core.core.errors import shown
from ingest_core.core.filters import FilterError, parse_filter

_FILTERED_FIELDS = frozenset({"filter", "aggregator"})


@dataclass(frozen=True)
class Aggregator:
    """One metricsSpec entry, with Druid's parameters and defaults (`core.aggregators` lists what each type
    computes and how it is stored). A `filtered` aggregator wraps another (`aggregator`) and feeds it the rows
    its `filter` matches; it takes the wrapped aggregator's name unless it has its own."""

    type: str
    name: str
    field_name: str | None = None
    expression: str | None = None
    time_column: str | None = None
    max_string_bytes: int | None = None
    # sketches
    size: int | None = None
    is_input_theta_sketch: bool = False
    should_finalize: bool | None = spec_field(None, ignored_in_batch="query-time: whether a query returns the "
                                                                     "estimate or the sketch")
    error_bounds_std_dev: int | None = spec_field(None, ignored_in_batch="query-time: the bounds a query returns")
    lg_k: int | None = None
    tgt_hll_type: str | None = None
    round: bool = spec_field(False, ignored_in_batch="query-time: whether a query rounds the estimate")
    string_encoding: str | None = None
    k: int | None = None
    max_stream_length: int | None = spec_field(None, ignored_in_batch="query-time: sizes Druid's merge buffers")
    # hyperUnique / cardinality
    is_input_hyper_unique: bool = False
    fields: list[Any] | None = None
    by_row: bool = False
    # filtered
    filter: dict[str, Any] | None = None
    aggregator: Aggregator | None = None
    # the type's own fields, when its class declares them (`AggregatorType.params`)
    params: Any = dataclasses.field(default=None, metadata={"key": "__params"})

    @classmethod
    def _from_raw(cls, raw: Any, path: str, ctx: BindContext) -> Any:
        if isinstance(raw, dict) and raw.get("type") == "filtered" and "name" not in raw:
            inner = raw.get("aggregator")  # Druid: a filtered aggregator is named as the one it wraps
            if isinstance(inner, dict) and isinstance(inner.get("name"), str):
                raw = {**raw, "name": inner["name"]}
        kind = A.REGISTRY.get(raw.get("type")) if isinstance(raw, dict) else None
        if kind is None or kind.params is None:
            return bind_object(cls, raw, path, ctx, custom_hook=False)
        own = {k for k in raw if k in kind.own()}
        bound = bind_object(cls, {k: v for k, v in raw.items() if k not in own}, path, ctx, custom_hook=False)
        params = bind_params(kind.params, raw, path, ctx)
        if not isinstance(bound, cls) or not dataclasses.is_dataclass(params):
            return bound
        agg = dataclasses.replace(bound, params=params)
        kind.check(agg, path, ctx)
        return agg

    def _to_raw(self) -> dict[str, Any]:
        raw = {json_key(f): to_raw(getattr(self, f.name)) for f in dataclasses.fields(self) if f.name != "params"}
        return {**raw, **(to_raw(self.params) if self.params is not None else {})}

    # -- what the executors compute (see core.aggregators)

    @property
    def is_filtered(self) -> bool:
        return self.type == "filtered"

    @property
    def inner(self) -> Aggregator:
        """The aggregator that computes the value: the wrapped one of a filtered aggregator, under this name."""
        if self.type == "filtered" and self.aggregator is not None:
            return dataclasses.replace(self.aggregator.inner, name=self.name)
        return self

    @property
    def kind(self) -> A.AggregatorType:
        """The class that computes this metric (`core.aggregators`), the wrapped one's for a filtered one."""
        return A.of(self.inner.type)

    @property
    def op(self) -> str:
        return self.kind.op

    @property
    def input_kind(self) -> str | None:
        """long, double, float or string: how the input field is read; None for count."""
        return self.kind.reads(self.inner)

    @property
    def input_fields(self) -> list[str]:
        """The input fields: fieldName, or cardinality's / expression's `fields`."""
        return self.kind.input_fields(self.inner)

    @property
    def sketch(self) -> Any:
        """The `core.aggregators.SketchParams` of a sketch metric, else None."""
        return self.kind.sketch(self.inner)

    @property
    def serialized_input(self) -> Any:
        """The `core.aggregators.SerializedInput` of a metric whose inputs arrive serialized, else None."""
        return self.kind.serialized_input(self.inner)

    @property
    def hashes_typed_values(self) -> bool:
        """Whether the inputs are read with each value's kind, as Druid's parser typed it (`core.aggregators`):
        theta, HLL and hyperUnique built from values hash a long as a long; an expression folds typed values."""
        return self.kind.hashes_typed_values(self.inner)

    @property
    def string_bytes(self) -> int:
        """A string aggregator's value is cut to this many UTF-8 bytes (Druid's maxStringBytes)."""
        return self.inner.max_string_bytes or A.STRING_DEFAULT_MAX_BYTES

    # -- checks

    def _validate(self, path: str, ctx: BindContext) -> None:
        if self.type in A.REFUSED_AGGREGATORS:
            ctx.error(join(path, "type"), f"aggregator type {shown(self.type)} is not supported: "
                      f"{A.REFUSED_AGGREGATORS[self.type]}")
            return
        if self.type not in A.SUPPORTED_AGGREGATORS:
            hint = did_you_mean(self.type, A.SUPPORTED_AGGREGATORS + tuple(A.REFUSED_AGGREGATORS))
            ctx.error(join(path, "type"), f"aggregator type {shown(self.type)} is not supported{hint}; supported: "
                      + ", ".join(A.SUPPORTED_AGGREGATORS))
            return
        raw_keys = {json_key(f) for f in dataclasses.fields(self)
                    if f.name != "params" and getattr(self, f.name) != f.default}
        kind = A.REGISTRY.get(self.type)
        own = (kind.own() if kind is not None else _FILTERED_FIELDS) | {"type", "name", "fieldName", "expression"}
        for key in sorted(raw_keys - own):
            ctx.warn(join(path, key), f"{key} has no meaning for a {self.type} aggregator: ignored")
        if kind is None:
            self._validate_filtered(path, ctx)
            return
        if self.expression is not None:
            ctx.error(join(path, "expression"), f"aggregator {self.name!r}: an {self.type} aggregator takes no "
                      "expression: compute the value with transformSpec.transforms and aggregate its fieldName")
        if kind.params is None:  # a type with its own fields is checked once they are bound (`_from_raw`)
            # check only what this type uses (the rest was warned about)
            kind.check(dataclasses.replace(self, **{f.name: f.default for f in dataclasses.fields(self)
                                                    if json_key(f) in raw_keys - own}), path, ctx)

    def _validate_filtered(self, path: str, ctx: BindContext) -> None:
        if self.filter is None:
            ctx.error(join(path, "filter"), f"filtered aggregator {self.name!r} needs a filter: the rows it "
                      "aggregates, as in transformSpec.filter, e.g. {type: selector, dimension: page, value: x}")
        else:
            try:
                parse_filter(self.filter)
            except FilterError as exc:
                ctx.error(join(path, "filter"), str(exc))
        inner = self.aggregator
        if inner is None:
            ctx.error(join(path, "aggregator"), f"filtered aggregator {self.name!r} needs the aggregator it "
                      "filters, e.g. {type: count, name: edits}")
        elif inner.type not in A.SUPPORTED_AGGREGATORS:
            return  # reported where it is bound
        elif inner.type == "filtered":
            ctx.error(join(path, "aggregator.type"), "a filtered aggregator cannot wrap another: combine the two "
                      "filters with an `and` filter")
