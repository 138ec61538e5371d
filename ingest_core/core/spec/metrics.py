"""`dataSchema.metricsSpec`: Druid's aggregators, each checked for what the job can compute."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ingest_core.core import aggregators as A
from ingest_core.core.aggregators import STRING_DEFAULT_MAX_BYTES, operation
from ingest_core.core.binding import BindContext, bind_object, check_range, did_you_mean, join, json_key, spec_field
from ingest_core.core.errors import shown
from ingest_core.core.filters import FilterError, parse_filter
from ingest_core.core.spec.druid import INT32_MAX, TIME_COLUMN


# Per type: the fields it takes beyond type, name and fieldName (the others get a warning); see core.aggregators
_AGG_FIELDS: dict[str, frozenset[str]] = {
    "thetaSketch": frozenset({"size", "isInputThetaSketch", "shouldFinalize", "errorBoundsStdDev"}),
    "HLLSketchBuild": frozenset({"lgK", "tgtHllType", "round", "shouldFinalize", "stringEncoding"}),
    "HLLSketchMerge": frozenset({"lgK", "tgtHllType", "round", "shouldFinalize"}),
    "hyperUnique": frozenset({"isInputHyperUnique", "round"}),
    "cardinality": frozenset({"fields", "byRow", "round"}),
    "quantilesDoublesSketch": frozenset({"k", "maxStreamLength", "shouldFinalize"}),
    "KllDoublesSketch": frozenset({"k", "maxStreamLength", "shouldFinalize"}),
    "KllFloatsSketch": frozenset({"k", "maxStreamLength", "shouldFinalize"}),
    "stringFirst": frozenset({"maxStringBytes", "timeColumn"}),
    "stringLast": frozenset({"maxStringBytes", "timeColumn"}),
    "stringAny": frozenset({"maxStringBytes"}),
    "filtered": frozenset({"filter", "aggregator"}),
}
_TIME_COLUMN_TYPES = ("First", "Last")  # longFirst, ..., stringLast: Druid's timeColumn (default __time)


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

    @classmethod
    def _from_raw(cls, raw: Any, path: str, ctx: BindContext) -> Any:
        if isinstance(raw, dict) and raw.get("type") == "filtered" and "name" not in raw:
            inner = raw.get("aggregator")  # Druid: a filtered aggregator is named as the one it wraps
            if isinstance(inner, dict) and isinstance(inner.get("name"), str):
                raw = {**raw, "name": inner["name"]}
        return bind_object(cls, raw, path, ctx, custom_hook=False)

    # -- what the executors compute (see core.aggregators)

    @property
    def inner(self) -> Aggregator:
        """The aggregator that computes the value: the wrapped one of a filtered aggregator, under this name."""
        if self.type == "filtered" and self.aggregator is not None:
            return dataclasses.replace(self.aggregator.inner, name=self.name)
        return self

    @property
    def op(self) -> str:
        return operation(self.inner.type)[0]

    @property
    def input_kind(self) -> str | None:
        """long, double, float or string: how the input field is read; None for count."""
        return operation(self.inner.type)[1]

    @property
    def input_fields(self) -> list[str]:
        """The input fields: fieldName, or cardinality's `fields` (names or dimension specs)."""
        a = self.inner
        if a.type == "cardinality":
            return [f if isinstance(f, str) else f.get("dimension") if isinstance(f, dict) else None
                    for f in a.fields or []]
        return [a.field_name] if a.field_name else []

    @property
    def sketch(self) -> Any:
        """The `core.aggregators.SketchParams` of a sketch metric, else None."""
        a = self.inner
        op = self.op
        if op == "theta":
            size = a.size or A.THETA_DEFAULT_SIZE
            return A.SketchParams("theta", lg_k=size.bit_length() - 1, from_sketches=a.is_input_theta_sketch)
        if op == "hll":
            unique = a.type in ("hyperUnique", "cardinality")
            return A.SketchParams(
                "hll", lg_k=A.HYPER_UNIQUE_LG_K if unique else a.lg_k or A.HLL_DEFAULT_LG_K,
                tgt_hll_type=a.tgt_hll_type or "HLL_4", from_sketches=a.type == "HLLSketchMerge",
                utf16le=(a.string_encoding or "utf16le") == "utf16le")
        if op == "quantiles":
            return A.SketchParams("quantiles", k=a.k or A.QUANTILES_DEFAULT_K)
        if op == "kll":
            return A.SketchParams("kll", k=a.k or A.KLL_DEFAULT_K, floats=a.type == "KllFloatsSketch")
        return None

    @property
    def hashes_typed_values(self) -> bool:
        """Whether the sketch hashes its input by the value's type, as Druid's does (theta, HLL and hyperUnique
        built from values: a long as a long, each element of a multi-value field): `core.aggregators`."""
        return self.inner.type in ("thetaSketch", "HLLSketchBuild", "hyperUnique") and not (
            self.sketch is not None and self.sketch.from_sketches)

    @property
    def string_bytes(self) -> int:
        """A string aggregator's value is cut to this many UTF-8 bytes (Druid's maxStringBytes)."""
        return self.inner.max_string_bytes or STRING_DEFAULT_MAX_BYTES

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
        raw_keys = {json_key(f) for f in dataclasses.fields(self) if getattr(self, f.name) != f.default}
        own = _AGG_FIELDS.get(self.type, frozenset()) | {"type", "name", "fieldName", "expression"}
        if self.type.endswith(_TIME_COLUMN_TYPES):
            own |= {"timeColumn"}
        for key in sorted(raw_keys - own):
            ctx.warn(join(path, key), f"{key} has no meaning for a {self.type} aggregator: ignored")
        if self.type == "filtered":
            self._validate_filtered(path, ctx)
            return
        # check only what this type uses (the rest was warned about)
        dataclasses.replace(self, **{f.name: f.default for f in dataclasses.fields(self)
                                     if json_key(f) in raw_keys - own})._check_parameters(path, ctx)

    def _check_parameters(self, path: str, ctx: BindContext) -> None:
        if self.expression is not None:
            ctx.error(join(path, "expression"), f"aggregator {self.name!r}: expressions are not supported; "
                      "compute the value with transformSpec.transforms and aggregate its fieldName")
        if self.type == "cardinality":
            if not self.input_fields or not all(isinstance(f, str) and f for f in self.input_fields):
                ctx.error(join(path, "fields"), f"aggregator {self.name!r}: cardinality needs `fields`, the "
                          "dimension names to count distinct values of, e.g. ['user']")
        elif self.type != "count" and not self.field_name and self.expression is None:
            ctx.error(join(path, "fieldName"), f"aggregator {self.name!r} of type {self.type} needs a fieldName")
        if self.time_column not in (None, TIME_COLUMN):
            ctx.error(join(path, "timeColumn"), f"aggregator {self.name!r}: only {TIME_COLUMN} (the default) is "
                      "supported as timeColumn: a row's first/last is by its timestamp")
        check_range(ctx, join(path, "maxStringBytes"), self.max_string_bytes, minimum=1, maximum=INT32_MAX)
        if self.size is not None and (not A.is_power_of_two(self.size) or
                                      not A.THETA_MIN_SIZE <= self.size <= A.THETA_MAX_SIZE):
            ctx.error(join(path, "size"), f"size must be a power of 2 from {A.THETA_MIN_SIZE} to "
                      f"{A.THETA_MAX_SIZE}, got {self.size} (Druid's default: {A.THETA_DEFAULT_SIZE})")
        check_range(ctx, join(path, "lgK"), self.lg_k, minimum=A.HLL_MIN_LG_K, maximum=A.HLL_MAX_LG_K)
        if self.tgt_hll_type is not None and self.tgt_hll_type not in A.HLL_TYPES:
            ctx.error(join(path, "tgtHllType"), f"unknown tgtHllType {self.tgt_hll_type!r}"
                      f"{did_you_mean(self.tgt_hll_type, A.HLL_TYPES)}; use one of {', '.join(A.HLL_TYPES)}")
        if self.string_encoding is not None and self.string_encoding not in A.HLL_STRING_ENCODINGS:
            ctx.error(join(path, "stringEncoding"), f"unknown stringEncoding {self.string_encoding!r}; use "
                      "utf16le (Druid's default) or utf8")
        if self.k is not None:
            if self.type == "quantilesDoublesSketch" and (
                    not A.is_power_of_two(self.k) or not A.QUANTILES_MIN_K <= self.k <= A.QUANTILES_MAX_K):
                ctx.error(join(path, "k"), f"k must be a power of 2 from {A.QUANTILES_MIN_K} to "
                          f"{A.QUANTILES_MAX_K}, got {self.k} (Druid's default: {A.QUANTILES_DEFAULT_K})")
            elif self.type.startswith("Kll"):
                check_range(ctx, join(path, "k"), self.k, minimum=A.KLL_MIN_K, maximum=A.KLL_MAX_K)
        if self.is_input_hyper_unique:
            ctx.error(join(path, "isInputHyperUnique"), "Druid's own hyperUnique bytes cannot be read here: send "
                      "DataSketches HLL sketches (base64) to an HLLSketchMerge aggregator instead")

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
