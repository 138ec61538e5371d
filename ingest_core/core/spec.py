"""Datasource specs: Druid's Kafka supervisor spec, typed, with Druid's defaults, plus this system's `microbatch`.

Accepted shapes (JSON is YAML, so a Druid supervisor JSON loads as-is):
  - current: `{type: kafka, spec: {dataSchema, ioConfig, tuningConfig}, suspended, microbatch}`
  - older flat shape: `{type: kafka, dataSchema, ioConfig, tuningConfig, microbatch}`

`load_spec(path)` returns a `DatasourceSpec` or raises `SpecError` listing every problem with its field path.
Leniency follows Druid's: a field Druid does not know is ignored there, so here it is a warning with its path and a
did-you-mean (`spec.ioConfig.taskCout: unknown field (did you mean 'taskCount'?)`), and an error with
`strict=True` and in this system's own sections (`microbatch`, `compaction`). Fields Druid writes when it exports
a spec load without a word (`_IGNORED`, `_export_aliases`, `_exported_copies`); Druid fields that mean nothing
to a bounded batch job load with a warning when set (`DatasourceSpec.warnings`). An explicit `null` is the field
left out. A `.json` file is read as JSON, others as YAML; both refuse a key given twice.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

import yaml

from ingest_core.core import aggregators as A
from ingest_core.core import defaults
from ingest_core.core import secrets as credentials
from ingest_core.core.aggregators import STRING_DEFAULT_MAX_BYTES, operation
from ingest_core.core.avro_schema import AvroBytesDecoder, SchemaRegistryDecoder
from ingest_core.core.binding import (
    MISSING_VALUE,
    BindContext,
    bind_object,
    bind_value,
    check_period,
    check_range,
    did_you_mean,
    join,
    json_key,
    spec_field,
    to_raw,
)
from ingest_core.core.cron import CONTINUOUS, cron_problem
from ingest_core.core.errors import SpecError, SpecProblem
from ingest_core.core.expressions import ExpressionError, parse_expression
from ingest_core.core.filters import FilterError, parse_filter
from ingest_core.core.granularity import GRANULARITY_PERIODS, Granularity  # noqa: F401 (re-exported)
from ingest_core.core.ignore_file import ignore_syntax_from_env, unignored_files
from ingest_core.core.json_path import JsonPath, JsonPathError
from ingest_core.core.legacy_parser import convert_parser
from ingest_core.core.periods import Period
from ingest_core.core.planner import ASSIGNMENTS, MODULO
from ingest_core.core.regex_format import RegexFormatError, compile_pattern
from ingest_core.core.time_formats import timestamp_format_problem

# ---------------------------------------------------------------------------------------------- dataSchema


@dataclass(frozen=True)
class TimestampSpec:
    column: str = "timestamp"
    format: str = "auto"
    missing_value: datetime | None = None

    def _validate(self, path: str, ctx: BindContext) -> None:
        problem = timestamp_format_problem(self.format)
        if problem:
            ctx.error(join(path, "format"), problem)


DIMENSION_TYPES = ("string", "long", "float", "double", "json", "auto")
TIME_COLUMN = "__time"
INT32_MAX = 2**31 - 1  # Druid's int settings (Integer.MAX_VALUE): the largest value they take


MULTI_VALUE_HANDLING = ("sorted_array", "sorted_set", "array")


@dataclass(frozen=True)
class Dimension:
    name: str
    type: str = "string"
    create_bitmap_index: bool = True  # Parquet segments have no bitmap indexes; Druid exports false for numbers
    multi_value_handling: str = "sorted_array"

    # Druid's export writes a dimension's column format; a flattenSpec inside a dimension is ignored by Druid too
    _IGNORED: ClassVar[frozenset[str]] = frozenset({"flattenSpec", "columnFormat"})

    @classmethod
    def _from_raw(cls, raw: Any, path: str, ctx: BindContext) -> Any:
        if isinstance(raw, str):
            return cls(raw)
        if not isinstance(raw, dict):
            ctx.error(path, f"expected a dimension name or object, got {raw!r}")
            return MISSING_VALUE
        obj = bind_object(cls, raw, path, ctx, custom_hook=False)
        if obj is MISSING_VALUE:
            return MISSING_VALUE
        kind = obj.type.lower()
        if kind not in DIMENSION_TYPES:
            # Druid reads a dimension type it does not know as a string dimension (DimensionSchema's defaultImpl)
            problem = f"unknown dimension type {obj.type!r}{did_you_mean(obj.type, DIMENSION_TYPES)}"
            if ctx.strict:
                ctx.error(join(path, "type"), problem)
            else:
                ctx.warn(join(path, "type"), f"{problem}: read as a string dimension, as Druid reads it")
            kind = "string"
        elif kind != obj.type:
            # Druid's type names are lower case; an unknown one silently becomes a string dimension there
            ctx.warn(join(path, "type"), f"read as {kind!r} (Druid would take {obj.type!r} for an unknown type and "
                     "make a string dimension): write it in lower case")
        handling = obj.multi_value_handling.lower()  # Druid reads the enum in any case (SORTED_ARRAY on export)
        if handling not in MULTI_VALUE_HANDLING:
            ctx.error(join(path, "multiValueHandling"), f"must be one of {', '.join(MULTI_VALUE_HANDLING)}, got "
                      f"{obj.multi_value_handling!r}{did_you_mean(handling, MULTI_VALUE_HANDLING)}")
        return dataclasses.replace(obj, type=kind, multi_value_handling=handling)

    def _to_raw(self) -> Any:
        return self.name if self.type == "string" else {"type": self.type, "name": self.name}


@dataclass(frozen=True)
class DimensionsSpec:
    dimensions: list[Dimension] = spec_field(default_factory=list)
    dimension_exclusions: list[str] = spec_field(default_factory=list)
    spatial_dimensions: list[Any] = spec_field(default_factory=list)
    include_all_dimensions: bool = False
    use_schema_discovery: bool = False
    force_segment_sort_by_time: bool = True

    def _validate(self, path: str, ctx: BindContext) -> None:
        seen: set[str] = set()
        for i, d in enumerate(self.dimensions):
            at = join(join(path, "dimensions"), i)
            if not d.name.strip():
                ctx.error(at, "a dimension needs a name: give it the input field's name, e.g. 'page'")
            elif d.name == TIME_COLUMN:
                ctx.error(at, f"{TIME_COLUMN} is the row timestamp (set by timestampSpec), not a dimension: remove "
                          "it, or keep the input field under another name with a transform, e.g. "
                          "{name: event_time, expression: '__time'}")
            elif d.name in seen:
                ctx.error(at, f"dimension {d.name!r} is listed twice: remove one")
            seen.add(d.name)
        if self.spatial_dimensions:
            ctx.error(join(path, "spatialDimensions"), "spatial dimensions are not supported")


# ---------------------------------------------------------------------------------------------- aggregators

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
            ctx.error(join(path, "type"), f"aggregator type {self.type!r} is not supported: "
                      f"{A.REFUSED_AGGREGATORS[self.type]}")
            return
        if self.type not in A.SUPPORTED_AGGREGATORS:
            hint = did_you_mean(self.type, A.SUPPORTED_AGGREGATORS + tuple(A.REFUSED_AGGREGATORS))
            ctx.error(join(path, "type"), f"aggregator type {self.type!r} is not supported{hint}; supported: "
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


SEGMENT_ALL = ("Druid makes one segment spanning all of time (-146136543-09-08 to 146140482-04-24) for ALL; "
               "segments here are time buckets of dates in years 1 to 9999 (deep storage folders, Iceberg "
               "partitions), which such a span does not fit: use a coarse granularity such as YEAR")


@dataclass(frozen=True)
class GranularitySpec:
    type: str = "uniform"
    segment_granularity: Granularity = spec_field(default_factory=lambda: Granularity.named("DAY"))
    query_granularity: Granularity = spec_field(default_factory=lambda: Granularity.named("NONE"))
    rollup: bool = True
    intervals: list[str] | None = spec_field(None, ignored_in_batch="a stream has no fixed intervals")

    @classmethod
    def _from_raw(cls, raw: Any, path: str, ctx: BindContext) -> Any:
        obj = bind_object(cls, raw, path, ctx, custom_hook=False)
        if obj is not MISSING_VALUE and obj.type not in ("uniform", "arbitrary"):
            obj = dataclasses.replace(obj, type="uniform")  # as Druid reads it (warned in _validate)
        if obj is not MISSING_VALUE and obj.query_granularity.name == "ALL" and obj.segment_granularity.period:
            # Druid truncates a row's time by ALL to the start of all time, then raises it to its segment's
            # start (IncrementalIndex: max(bucketStart, minTimestamp)): every row is at its segment's start
            return dataclasses.replace(obj, query_granularity=obj.segment_granularity)
        return obj

    def _validate(self, path: str, ctx: BindContext) -> None:
        if self.type not in ("uniform", "arbitrary"):
            # Druid reads a granularitySpec type it does not know as uniform (GranularitySpec's defaultImpl)
            problem = f"unknown granularitySpec type {self.type!r}{did_you_mean(self.type, ('uniform', 'arbitrary'))}"
            if ctx.strict:
                ctx.error(join(path, "type"), f"{problem}; use 'uniform'")
            else:
                ctx.warn(join(path, "type"), f"{problem}: read as 'uniform', as Druid reads it")
        if self.segment_granularity.name in ("NONE",):
            ctx.error(join(path, "segmentGranularity"), "segmentGranularity cannot be NONE; use e.g. HOUR or DAY")
        for key, gran in (("segmentGranularity", self.segment_granularity), ("queryGranularity", self.query_granularity)):
            if gran.name == "ALL":
                if key == "segmentGranularity":
                    ctx.error(join(path, key), f"ALL is not supported: {SEGMENT_ALL}")
            elif gran.period is not None:
                try:
                    gran.floor_unit()
                except ValueError as exc:
                    ctx.error(join(path, key), str(exc))


@dataclass(frozen=True)
class Transform:
    name: str
    expression: str
    type: str = "expression"

    def _validate(self, path: str, ctx: BindContext) -> None:
        if self.type != "expression":
            ctx.error(join(path, "type"), f"unknown transform type {self.type!r}; use 'expression'")


@dataclass(frozen=True)
class TransformSpec:
    filter: dict[str, Any] | None = None
    transforms: list[Transform] = spec_field(default_factory=list)

    def _validate(self, path: str, ctx: BindContext) -> None:
        if self.filter is not None:
            try:
                parse_filter(self.filter)
            except FilterError as exc:
                ctx.error(join(path, "filter"), str(exc))
        names = {t.name for t in self.transforms}
        for i, t in enumerate(self.transforms):
            try:
                read = parse_expression(t.expression).columns
            except ExpressionError as exc:
                ctx.error(join(join(path, "transforms"), i), f"transform {t.name!r}: {exc}")
                continue
            # Druid evaluates every transform on the input row: a chain of transforms reads the input's field
            others = sorted(read & names - {t.name})
            if others:
                ctx.warn(join(join(path, "transforms"), i),
                         f"transform {t.name!r} reads {', '.join(others)} from the input row, not the output of the "
                         f"transform of that name (transforms never read each other's outputs, as in Druid): "
                         "repeat that transform's expression here to build on it")


_DATASOURCE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,199}$")


COMPACTION_DAG_SUFFIX = ".compaction"  # `<dataSource>.compaction` is a datasource's compaction DAG


def datasource_name_problem(name: str) -> str | None:
    """Why `name` cannot be a datasource name (it becomes a DAG id and a storage path), or None."""
    if not _DATASOURCE_RE.match(name) or ".." in name or name.endswith("."):
        return (f"invalid datasource name {name!r}: use 1-200 letters, digits, '_', '-' or '.', starting with a "
                "letter or digit, without '..' (it becomes the Airflow DAG id and a storage folder)")
    if name.endswith(COMPACTION_DAG_SUFFIX):
        return (f"invalid datasource name {name!r}: the suffix {COMPACTION_DAG_SUFFIX!r} names the compaction DAG "
                f"of the datasource {name[:-len(COMPACTION_DAG_SUFFIX)]!r}")
    return None


@dataclass(frozen=True)
class DataSchema:
    data_source: str
    timestamp_spec: TimestampSpec = spec_field(default_factory=TimestampSpec)
    dimensions_spec: DimensionsSpec = spec_field(default_factory=DimensionsSpec)
    metrics_spec: list[Aggregator] = spec_field(default_factory=list)
    granularity_spec: GranularitySpec = spec_field(default_factory=GranularitySpec)
    transform_spec: TransformSpec = spec_field(default_factory=TransformSpec)

    def _validate(self, path: str, ctx: BindContext) -> None:
        problem = datasource_name_problem(self.data_source)
        if problem:
            ctx.error(join(path, "dataSource"), problem)
        names: dict[str, str] = {}
        for i, agg in enumerate(self.metrics_spec):
            if agg.name in names:
                ctx.error(join(join(path, "metricsSpec"), i), f"metric name {agg.name!r} is used twice")
            names[agg.name] = "metric"
        for d in self.dimensions_spec.dimensions:
            if d.name in names:
                ctx.error(join(path, "dimensionsSpec.dimensions"), f"{d.name!r} is both a dimension and a metric")
        for i, agg in enumerate(self.metrics_spec):
            if not agg.name.strip() or agg.name == TIME_COLUMN:
                ctx.error(join(join(path, "metricsSpec"), i), f"metric name {agg.name!r} is not allowed: give the "
                          "metric its own non-empty name other than __time")
        transforms: set[str] = set()
        for i, t in enumerate(self.transform_spec.transforms):
            at = join(join(path, "transformSpec.transforms"), i)
            if not t.name.strip():
                ctx.error(join(at, "name"), "a transform needs a name: the column it produces, e.g. 'page_upper'")
            elif t.name in transforms:
                ctx.error(join(at, "name"), f"transform {t.name!r} is defined twice: the second would silently "
                          "replace the first; rename or remove one")
            transforms.add(t.name)


# ---------------------------------------------------------------------------------------------- inputFormat

INPUT_FORMAT_TYPES = ("json", "csv", "tsv", "delimited", "regex", "avro_stream", "protobuf", "kafka")


FLATTEN_FIELD_TYPES = ("root", "path", "jq", "tree")


@dataclass(frozen=True)
class FlattenField:
    """A flattenSpec field: `root` (a top-level field), `path` (a JSONPath), `jq` (a jq path such as `.a.b`,
    read as the JSONPath it names) or `tree` (`nodes`, the field names from the root)."""

    type: str
    name: str
    expr: str | None = None
    nodes: list[str] | None = None

    @property
    def json_path(self) -> JsonPath | None:
        """The path a `path`, `jq` or `tree` field follows from the record's root (None for `root`); raises
        JsonPathError for one validation refuses."""
        if self.type == "path":
            return JsonPath.parse(self.expr or "")
        if self.type == "jq":
            return JsonPath.from_jq(self.expr or "")
        if self.type == "tree":
            return JsonPath.from_nodes(list(self.nodes or ()))
        return None

    @classmethod
    def _from_raw(cls, raw: Any, path: str, ctx: BindContext) -> Any:
        if isinstance(raw, dict) and isinstance(raw.get("type"), str):
            raw = {**raw, "type": raw["type"].lower()}  # Druid's JSONPathFieldType reads any case
        return bind_object(cls, raw, path, ctx, custom_hook=False)

    def _validate(self, path: str, ctx: BindContext) -> None:
        if self.type not in FLATTEN_FIELD_TYPES:
            ctx.error(join(path, "type"), f"unknown flattenSpec field type {self.type!r}"
                      f"{did_you_mean(self.type, FLATTEN_FIELD_TYPES)}; use {', '.join(FLATTEN_FIELD_TYPES)}")
        elif self.type in ("path", "jq") and not self.expr:
            example = "a JSONPath such as '$.user.name'" if self.type == "path" else "a jq path such as '.user.name'"
            ctx.error(join(path, "expr"), f"a '{self.type}' field needs expr, {example}")
        elif self.type == "tree" and not self.nodes:
            ctx.error(join(path, "nodes"), "a 'tree' field needs nodes, the field names from the root, e.g. "
                      "[user, name]")
        else:
            try:
                self.json_path
            except JsonPathError as exc:
                ctx.error(join(path, "expr"), str(exc))
        if self.nodes is not None and self.type != "tree":
            ctx.error(join(path, "nodes"), f"only 'tree' fields take nodes; a '{self.type}' field reads expr")
        if not self.name.strip():
            ctx.error(join(path, "name"), "a flattenSpec field needs a name: the column it produces")

    def _to_raw(self) -> Any:
        out: dict[str, Any] = {"type": self.type, "name": self.name, "expr": self.expr}
        return out if self.nodes is None else {**out, "nodes": list(self.nodes)}


@dataclass(frozen=True)
class FlattenSpec:
    use_field_discovery: bool = True
    fields: list[FlattenField] = spec_field(default_factory=list)

    def _validate(self, path: str, ctx: BindContext) -> None:
        seen: set[str] = set()
        for i, f in enumerate(self.fields):
            if f.name in seen:
                ctx.error(join(join(path, "fields"), i), f"flattenSpec field {f.name!r} is defined twice: rename "
                          "or remove one")
            seen.add(f.name)


PROTO_DECODER_TYPES = ("file", "inline", "schema_registry")


@dataclass(frozen=True)
class ProtoBytesDecoder:
    """Druid's `protoBytesDecoder`: `file` (a descriptor set compiled by protoc, at a path or URL, and the message
    type in it), `inline` (the same set, base64, in `descriptorString`) or `schema_registry` (Confluent's wire
    format; Druid's default when `type` is left out). A `file` descriptor is read where the spec is staged and
    shipped to the executors inline (`ingest_core.executor.formats.protobuf.inline_descriptors`)."""

    type: str = "schema_registry"
    descriptor: str | None = None
    descriptor_string: str | None = None
    proto_message_type: str | None = None  # short or full name; default: the first message of the set
    url: str | None = None
    urls: list[str] | None = None
    capacity: int | None = None  # Druid's schema cache size: accepted; schemas are cached by id, never evicted
    config: dict[str, Any] | None = None
    headers: dict[str, str] | None = None

    _KEYS_BY_TYPE: ClassVar[dict[str, set[str]]] = {
        "file": {"descriptor", "protoMessageType"},
        "inline": {"descriptorString", "protoMessageType"},
        "schema_registry": {"url", "urls", "capacity", "config", "headers"},
    }

    @classmethod
    def _from_raw(cls, raw: Any, path: str, ctx: BindContext) -> Any:
        if not isinstance(raw, dict):
            ctx.error(path, "expected a protoBytesDecoder object such as {type: file, descriptor: "
                      f"file:///tmp/metrics.desc, protoMessageType: Metrics}}, got {raw!r}")
            return MISSING_VALUE
        kind = raw.get("type", "schema_registry")
        if kind not in PROTO_DECODER_TYPES:
            ctx.error(join(path, "type"), f"protoBytesDecoder type {kind!r} is not supported"
                      f"{did_you_mean(str(kind), PROTO_DECODER_TYPES)}; supported: {', '.join(PROTO_DECODER_TYPES)}")
            return MISSING_VALUE
        return _bind_typed(cls, raw, path, ctx, cls._KEYS_BY_TYPE[kind], f"{kind} protoBytesDecoder")

    def _check(self, path: str, ctx: BindContext) -> None:
        if self.type == "file" and not (self.descriptor or "").strip():
            ctx.error(join(path, "descriptor"), "a file protoBytesDecoder needs descriptor: the descriptor set "
                      "`protoc -o metrics.desc metrics.proto` wrote, as a path or URL (file:///tmp/metrics.desc)")
        if self.type == "inline":
            try:
                base64.b64decode(self.descriptor_string or "", validate=True)
            except (binascii.Error, ValueError):
                ctx.error(join(path, "descriptorString"), "is not base64: put the descriptor set `protoc -o` "
                          "wrote here base64-encoded (`base64 -w0 metrics.desc`)")
            if not self.descriptor_string:
                ctx.error(join(path, "descriptorString"), "an inline protoBytesDecoder needs descriptorString: "
                          "the descriptor set `protoc -o` wrote, base64-encoded")
        if self.registry is not None:
            self.registry._validate(path, ctx)

    @property
    def registry(self) -> SchemaRegistryDecoder | None:
        """`schema_registry`: the same decoder settings (urls, config, headers, their credentials) as Avro's."""
        if self.type != "schema_registry":
            return None
        return SchemaRegistryDecoder(self.type, self.url, self.urls, self.capacity, dict(self.config or {}),
                                     dict(self.headers or {}))

    @property
    def has_literal_secrets(self) -> bool:
        return self.registry is not None and self.registry.has_literal_secrets

    def _to_raw(self, redact: bool = True) -> Any:
        if self.registry is not None:
            return self.registry._to_raw(redact)
        return _typed_to_raw(self, self._KEYS_BY_TYPE[self.type])


@dataclass(frozen=True)
class InputFormat:
    """`json`, `csv`, `tsv`/`delimited`, `regex`, `avro_stream`, `protobuf`, or `kafka` (which wraps a
    `valueFormat`)."""

    type: str
    # json
    flatten_spec: FlattenSpec | None = None
    feature_spec: dict[str, Any] | None = None
    keep_null_columns: bool | None = None  # None: Druid's default, `keeps_null_columns`
    assume_newline_delimited: bool = False
    use_json_node_reader: bool = False
    # csv / tsv / delimited
    columns: list[str] | None = None
    list_delimiter: str | None = None
    delimiter: str | None = None
    find_columns_from_header: bool | None = None
    skip_header_rows: int = 0
    has_header_row: bool | None = None
    try_parse_numbers: bool = False
    # regex (and columns, listDelimiter)
    pattern: str | None = None
    # avro_stream (and flattenSpec)
    avro_bytes_decoder: AvroBytesDecoder | None = None
    binary_as_string: bool = False
    extract_unions_by_type: bool = False
    # kafka
    value_format: InputFormat | None = None
    key_format: InputFormat | None = None
    header_format: dict[str, Any] | None = None
    header_column_prefix: str = "kafka.header."
    key_column_name: str = "kafka.key"
    timestamp_column_name: str = "kafka.timestamp"
    topic_column_name: str = "kafka.topic"
    # protobuf
    proto_bytes_decoder: ProtoBytesDecoder | None = None

    _KEYS_BY_TYPE: ClassVar[dict[str, set[str]]] = {
        "json": {"flattenSpec", "featureSpec", "keepNullColumns", "assumeNewlineDelimited", "useJsonNodeReader"},
        "csv": {"columns", "listDelimiter", "findColumnsFromHeader", "skipHeaderRows", "hasHeaderRow", "tryParseNumbers"},
        "tsv": {"columns", "listDelimiter", "delimiter", "findColumnsFromHeader", "skipHeaderRows", "hasHeaderRow",
                "tryParseNumbers"},
        "regex": {"pattern", "columns", "listDelimiter"},
        "avro_stream": {"flattenSpec", "avroBytesDecoder", "binaryAsString", "extractUnionsByType"},
        "kafka": {"valueFormat", "keyFormat", "headerFormat", "headerColumnPrefix", "keyColumnName",
                  "timestampColumnName", "topicColumnName"},
        "protobuf": {"flattenSpec", "protoBytesDecoder", "binaryAsString"},
    }

    @classmethod
    def _from_raw(cls, raw: Any, path: str, ctx: BindContext) -> Any:
        if not isinstance(raw, dict):
            ctx.error(path, f"expected an inputFormat object such as {{type: json}}, got {raw!r}")
            return MISSING_VALUE
        kind = raw.get("type")
        if kind not in INPUT_FORMAT_TYPES:
            hint = did_you_mean(str(kind), INPUT_FORMAT_TYPES)
            ctx.error(join(path, "type"), f"input format {kind!r} is not supported{hint}; supported: "
                      + ", ".join(INPUT_FORMAT_TYPES))
            return MISSING_VALUE
        if kind == "kafka" and "headerLabelPrefix" in raw:
            raw = _renamed(raw, "headerLabelPrefix", "headerColumnPrefix", path, ctx)
        return _bind_typed(cls, raw, path, ctx, cls._KEYS_BY_TYPE["tsv" if kind == "delimited" else kind],
                           f"{kind} input format")

    def _check(self, path: str, ctx: BindContext) -> None:
        if self.type in ("csv", "tsv", "delimited"):
            from_header = self.find_columns_from_header
            if from_header is None:
                from_header = bool(self.has_header_row)
            if not from_header and not self.columns:
                ctx.error(join(path, "columns"), f"a {self.type} input format needs columns, "
                          "or findColumnsFromHeader: true")
            if from_header and self.columns:
                ctx.error(join(path, "columns"), "columns and findColumnsFromHeader: true contradict each other")
        if self.type == "regex":
            if not self.pattern:
                ctx.error(join(path, "pattern"), "a regex input format needs pattern, a regular expression whose "
                          "groups are the columns, matching each line whole, e.g. '(\\S+) (\\S+) (.*)'")
            else:
                try:
                    compile_pattern(self.pattern)
                except RegexFormatError as exc:
                    ctx.error(join(path, "pattern"), str(exc))
        if self.type == "kafka":
            if self.value_format is None:
                ctx.error(join(path, "valueFormat"), "the kafka input format needs a valueFormat, e.g. {type: json}")
            elif self.value_format.type == "kafka":
                ctx.error(join(path, "valueFormat"), "valueFormat cannot itself be of type kafka")
        if self.type == "avro_stream":
            if self.avro_bytes_decoder is None:
                ctx.error(join(path, "avroBytesDecoder"), "an avro_stream input format needs an avroBytesDecoder: "
                          "{type: schema_registry, url: ...}, {type: schema_inline, schema: {...}} or "
                          "{type: multiple_schemas_inline, schemas: {...}}")
            if self.extract_unions_by_type:
                ctx.error(join(path, "extractUnionsByType"), "is not supported: unions read as their value; "
                          "remove it (or set it to false)")

        if self.type in ("avro_stream", "protobuf"):
            what = "Avro" if self.type == "avro_stream" else "Protobuf"
            for i, f in enumerate(self.flatten_spec.fields if self.flatten_spec else ()):
                if f.type in ("jq", "tree"):
                    try:
                        same = f.json_path
                    except JsonPathError:
                        same = None
                    instead = f" (here {{type: path, name: {f.name}, expr: '{same.text}'}})" if same else ""
                    ctx.error(join(join(join(path, "flattenSpec"), "fields"), i), f"{what} takes root and path "
                              f"fields only, as in Druid: write a path field with a JSONPath{instead}")
        if self.type == "protobuf":
            if self.proto_bytes_decoder is None:
                ctx.error(join(path, "protoBytesDecoder"), "the protobuf input format needs protoBytesDecoder, e.g. "
                          "{type: file, descriptor: file:///tmp/metrics.desc, protoMessageType: Metrics}")
            if self.binary_as_string:
                ctx.warn(join(path, "binaryAsString"), "has no effect on protobuf (Druid ignores it too): a bytes "
                         "field reads as its base64 text")

    @property
    def has_literal_secrets(self) -> bool:
        """Whether a redacted copy of this format lacks something the executors need (a registry password)."""
        return any(f is not None and f.has_literal_secrets for f in (self.value_format, self.key_format)) or (
            isinstance(self.avro_bytes_decoder, SchemaRegistryDecoder) and self.avro_bytes_decoder.has_literal_secrets) or (
            self.proto_bytes_decoder is not None and self.proto_bytes_decoder.has_literal_secrets)

    @property
    def effective_delimiter(self) -> str:
        if self.type == "csv":
            return ","
        return self.delimiter if self.delimiter is not None else "\t"

    @property
    def keeps_null_columns(self) -> bool:
        """Whether a field whose value is null is still discovered (a column of nulls when it is null in every
        row). Druid's JsonInputFormat.isKeepNullColumns: `keepNullColumns`, else true with a flattenSpec that
        discovers fields; csv and tsv rows hold every column, whatever its value."""
        if self.type in ("csv", "tsv", "delimited"):
            return True
        if self.type != "json":
            return False
        if self.keep_null_columns is not None:
            return self.keep_null_columns
        return self.flatten_spec is not None and self.flatten_spec.use_field_discovery

    @property
    def columns_from_header(self) -> bool:
        if self.find_columns_from_header is not None:
            return self.find_columns_from_header
        return bool(self.has_header_row)

    def _to_raw(self, redact: bool = True) -> Any:
        """`redact=False`: with the registry credentials, for the executors' secret options only."""
        allowed = self._KEYS_BY_TYPE["tsv" if self.type == "delimited" else self.type]
        out: dict[str, Any] = {"type": self.type}
        for f in dataclasses.fields(self):
            key, value = json_key(f), getattr(self, f.name)
            if key in allowed and value != f.default:
                out[key] = (value._to_raw(redact) if isinstance(value, (InputFormat, AvroBytesDecoder, ProtoBytesDecoder))
                            else to_raw(value))
        return out


def _bind_typed(cls: type, raw: dict[str, Any], path: str, ctx: BindContext, allowed: set[str], what: str) -> Any:
    """An object whose `type` chose its fields (`allowed`): other keys are `ctx.unknown` (a `null` one is left
    out, as Druid does: its export writes other types' fields as null), then its `_check`."""
    allowed = allowed | {"type"}
    for key in raw:
        if key not in allowed and raw[key] is not None:
            ctx.unknown(join(path, key), f"unknown field for a {what}" + did_you_mean(key, allowed))
    obj = bind_object(cls, {k: v for k, v in raw.items() if k in allowed}, path, ctx, custom_hook=False)
    if obj is not MISSING_VALUE:
        obj._check(path, ctx)
    return obj


def _renamed(raw: dict[str, Any], old: str, new: str, path: str, ctx: BindContext) -> dict[str, Any]:
    """`raw` with Druid's older name `old` of field `new` read as `new` (Druid's own tutorials still write the
    older one); both, with different values, is a warning: `new` wins, as in Druid."""
    out = {k: v for k, v in raw.items() if k != old}
    if raw.get(new) is None:
        out[new] = raw[old]
    elif raw[old] is not None and raw[old] != raw[new]:
        ctx.warn(join(path, old), f"ignored: the older name of {new}, which is also set (to {raw[new]!r}) and wins")
    return out


def _typed_to_raw(obj: Any, allowed: set[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"type": obj.type}
    for f in dataclasses.fields(obj):
        key, value = json_key(f), getattr(obj, f.name)
        if key in allowed and value != f.default:
            out[key] = to_raw(value)
    return out


# ---------------------------------------------------------------------------------------------- ioConfig


@dataclass(frozen=True)
class IdleConfig:
    """Druid's idle supervisor: with `enabled`, a datasource whose stream has had nothing new for longer than
    `inactiveAfterMillis` reads IDLE (`states.after_nothing_to_read`); a run that finds records makes it RUNNING."""

    enabled: bool = False
    inactive_after_millis: int = 600_000  # Druid's druid.supervisor.idleConfig.inactiveAfterMillis default

    def _validate(self, path: str, ctx: BindContext) -> None:
        check_range(ctx, join(path, "inactiveAfterMillis"), self.inactive_after_millis, minimum=1)


@dataclass(frozen=True)
class AutoScalerConfig:
    enable_task_auto_scaler: bool = False
    task_count_max: int | None = None
    task_count_min: int | None = None
    task_count_start: int | None = None
    min_trigger_scale_action_frequency_millis: int = 600_000
    auto_scaler_strategy: str = "lagBased"
    lag_collection_interval_millis: int = 30_000
    lag_collection_range_millis: int = 600_000
    scale_out_threshold: int = 6_000_000
    trigger_scale_out_fraction_threshold: float = 0.3
    scale_in_threshold: int = 1_000_000
    trigger_scale_in_fraction_threshold: float = 0.9
    scale_action_start_delay_millis: int = 300_000
    scale_action_period_millis: int = 60_000
    scale_in_step: int = 1
    scale_out_step: int = 2
    lag_aggregate: str = "SUM"
    stop_task_count_ratio: float | None = None

    # the older names of the trigger fractions (triggerScale*FractionThreshold), read by older Druid only
    _IGNORED: ClassVar[frozenset[str]] = frozenset({"triggerScaleOutThresholdFrequency",
                                                    "triggerScaleInThresholdFrequency"})

    def _validate(self, path: str, ctx: BindContext) -> None:
        if self.enable_task_auto_scaler:
            if self.task_count_max is None or self.task_count_min is None:
                ctx.error(path, "taskCountMax and taskCountMin are required when enableTaskAutoScaler is true")
            elif self.task_count_min > self.task_count_max:
                ctx.error(join(path, "taskCountMin"), "taskCountMin must not exceed taskCountMax")
            ctx.warn(path, "the lag-based autoscaler is not applied: each run uses taskCount groups; set "
                     "microbatch.assignment: balanced to spread lag across groups")


_NO_BATCH = "there is no long-running supervisor process in batch ingestion"
MAX_TASK_COUNT = 1000
MAX_REPLICAS = 10
MAX_POLL_TIMEOUT_MS = 3_600_000  # an hour


@dataclass(frozen=True)
class IOConfig:
    input_format: InputFormat
    consumer_properties: dict[str, Any] = spec_field(secret_map=True)
    type: str = "kafka"
    topic: str | None = None
    topic_pattern: str | None = None
    poll_timeout: int = 100
    replicas: int = 1
    task_count: int = 1
    task_duration: Period = spec_field(default_factory=lambda: Period.parse("PT1H"))
    start_delay: Period = spec_field(default_factory=lambda: Period.parse("PT5S"), ignored_in_batch=_NO_BATCH)
    period: Period = spec_field(default_factory=lambda: Period.parse("PT30S"), ignored_in_batch=_NO_BATCH)
    use_earliest_offset: bool = False
    completion_timeout: Period = spec_field(default_factory=lambda: Period.parse("PT30M"))
    late_message_rejection_start_date_time: datetime | None = None
    late_message_rejection_period: Period | None = None
    early_message_rejection_period: Period | None = None
    idle_config: IdleConfig | None = None
    auto_scaler_config: AutoScalerConfig | None = None
    stop_task_count: int | None = spec_field(None, ignored_in_batch=_NO_BATCH)
    config_overrides: dict[str, Any] | None = spec_field(None, ignored_in_batch="no task overrides in Spark jobs")
    emit_time_lag_metrics: bool = spec_field(False, ignored_in_batch="lag is reported by `ingest status`")
    server_priority_to_replicas: dict[str, Any] | None = spec_field(None, ignored_in_batch="no Druid servers")

    # Druid writes these when it exports a spec, or reads and ignores them (a batch ioConfig's appendToExisting);
    # `stream` and `useEarliestSequenceNumber`, its export copies of topic and useEarliestOffset: _export_aliases
    _IGNORED: ClassVar[frozenset[str]] = frozenset({"multiTopic", "lagAggregator", "appendToExisting", "taskType",
                                                    "autoScalerEnabled"})

    def reads_topic(self, name: str) -> bool:
        """Whether this datasource reads topic `name`: its `topic`, or a whole-name match of `topicPattern`
        (Druid's rule, as the offset reader discovers topics)."""
        if self.topic_pattern is not None:
            return re.fullmatch(self.topic_pattern, name) is not None
        return name == self.topic

    def _validate(self, path: str, ctx: BindContext) -> None:
        if self.type != "kafka":
            ctx.error(join(path, "type"), f"only kafka is supported, got {self.type!r}")
        if self.topic and self.topic_pattern:
            ctx.error(join(path, "topicPattern"), "topic and topicPattern contradict each other: set only one")
        elif not self.topic and not self.topic_pattern:
            ctx.error(join(path, "topic"), "one of topic or topicPattern is required")
        if self.topic_pattern:
            try:
                re.compile(self.topic_pattern)
            except re.error as exc:
                ctx.error(join(path, "topicPattern"), f"not a valid regular expression: {exc}")
        if self.late_message_rejection_start_date_time and self.late_message_rejection_period:
            ctx.error(join(path, "lateMessageRejectionPeriod"),
                      "lateMessageRejectionStartDateTime and lateMessageRejectionPeriod contradict each other: "
                      "set only one")
        # each task group x replica is a Spark job per run: thousands of them is a typo, not a plan
        check_range(ctx, join(path, "taskCount"), self.task_count, minimum=1, maximum=MAX_TASK_COUNT)
        check_range(ctx, join(path, "replicas"), self.replicas, minimum=1, maximum=MAX_REPLICAS)
        check_range(ctx, join(path, "pollTimeout"), self.poll_timeout, minimum=1, maximum=MAX_POLL_TIMEOUT_MS)
        check_period(ctx, join(path, "taskDuration"), self.task_duration, allow_calendar=True)
        check_period(ctx, join(path, "completionTimeout"), self.completion_timeout)  # a timeout has a fixed length
        for name, key in (("late_message_rejection_period", "lateMessageRejectionPeriod"),
                          ("early_message_rejection_period", "earlyMessageRejectionPeriod")):
            p = getattr(self, name)
            if p is not None and (p.negative or p.is_zero):
                ctx.error(join(path, key), f"must be a positive period, got {p}")
        props_path = join(path, "consumerProperties")
        if "bootstrap.servers" not in self.consumer_properties:
            ctx.error(props_path, "bootstrap.servers is required (host:port of your Kafka brokers)")
        for key in ("enable.auto.commit", "auto.offset.reset"):
            if key in self.consumer_properties:
                ctx.warn(join(props_path, key), "ignored: offsets are tracked in the metadata store, not by Kafka")
        if self.isolation_level not in defaults.ISOLATION_LEVELS:
            ctx.error(join(props_path, "isolation.level"), f"must be {' or '.join(defaults.ISOLATION_LEVELS)}")

    @property
    def isolation_level(self) -> str:
        return str(self.consumer_properties.get("isolation.level", defaults.ISOLATION_LEVEL))


# ---------------------------------------------------------------------------------------------- tuningConfig

MAX_SAVED_PARSE_EXCEPTIONS = 10_000  # kept in the task report and the metadata store
MAX_RECORDS_PER_POLL = 10_000_000  # one parsed chunk is held in memory
_NO_PERSIST = "Spark writes each segment once; there are no intermediate persists or handoffs"
_NO_CHAT = "there are no indexing tasks to talk to; Airflow and Spark handle task communication"


@dataclass(frozen=True)
class TuningConfig:
    type: str = "kafka"
    max_rows_in_memory: int = 150_000  # rows a split rolls up in memory before handing them to Spark
    max_bytes_in_memory: int = spec_field(0, ignored_in_batch="Spark manages memory")
    skip_bytes_in_memory_overhead_check: bool = spec_field(False, ignored_in_batch="Spark manages memory")
    max_rows_per_segment: int = 5_000_000
    max_total_rows: int | None = spec_field(20_000_000, ignored_in_batch=_NO_PERSIST)
    intermediate_handoff_period: Period = spec_field(default_factory=lambda: Period.parse("P2147483647D"),
                                                     ignored_in_batch=_NO_PERSIST)
    intermediate_persist_period: Period = spec_field(default_factory=lambda: Period.parse("PT10M"),
                                                     ignored_in_batch=_NO_PERSIST)
    max_pending_persists: int = spec_field(0, ignored_in_batch=_NO_PERSIST)
    # Druid's segment format settings, written on every export: segments here are Parquet files (no warning)
    index_spec: dict[str, Any] | None = None
    index_spec_for_intermediate_persists: dict[str, Any] | None = None
    report_parse_exceptions: bool = False
    handoff_condition_timeout: int = spec_field(900_000, ignored_in_batch="segments are visible once published")
    reset_offset_automatically: bool = False
    worker_threads: int | None = spec_field(None, ignored_in_batch=_NO_CHAT)
    chat_threads: int | None = spec_field(None, ignored_in_batch=_NO_CHAT)
    chat_async: bool | None = spec_field(None, ignored_in_batch=_NO_CHAT)
    chat_retries: int = spec_field(8, ignored_in_batch=_NO_CHAT)
    http_timeout: Period = spec_field(default_factory=lambda: Period.parse("PT10S"), ignored_in_batch=_NO_CHAT)
    shutdown_timeout: Period = spec_field(default_factory=lambda: Period.parse("PT80S"), ignored_in_batch=_NO_CHAT)
    offset_fetch_period: Period = spec_field(default_factory=lambda: Period.parse("PT30S"),
                                             ignored_in_batch="offsets are read when a run is planned and by `ingest status`")
    segment_write_out_medium_factory: dict[str, Any] | None = None  # as indexSpec: segments are Parquet files
    num_persist_threads: int = spec_field(1, ignored_in_batch=_NO_PERSIST)
    max_columns_to_merge: int = spec_field(-1, ignored_in_batch=_NO_PERSIST)
    base_persist_directory: str | None = spec_field(None, ignored_in_batch=_NO_PERSIST)
    build_v9_directly: bool = spec_field(True, ignored_in_batch="segments are Parquet files")
    log_parse_exceptions: bool = False
    max_parse_exceptions: int | None = None  # unlimited
    max_saved_parse_exceptions: int = 0
    partitions_spec: dict[str, Any] | None = spec_field(None, ignored_in_batch="segments split by maxRowsPerSegment")
    max_records_per_poll: int | None = None  # records per consumer poll, one parsed chunk; default 20,000

    # Druid writes these when it exports a spec (appendableIndexSpec, Kinesis' skipSequenceNumberAvailabilityCheck
    # and repartitionTransitionDuration on every seekable-stream tuningConfig) or reads and ignores them
    _IGNORED: ClassVar[frozenset[str]] = frozenset({"appendableIndexSpec", "skipSequenceNumberAvailabilityCheck",
                                                    "repartitionTransitionDuration", "workerCategory"})

    def _validate(self, path: str, ctx: BindContext) -> None:
        if self.type != "kafka":
            ctx.error(join(path, "type"), f"only kafka is supported, got {self.type!r}")
        check_range(ctx, join(path, "maxRowsPerSegment"), self.max_rows_per_segment, minimum=1, maximum=INT32_MAX)
        check_range(ctx, join(path, "maxRowsInMemory"), self.max_rows_in_memory, minimum=1, maximum=INT32_MAX)
        check_range(ctx, join(path, "maxParseExceptions"), self.max_parse_exceptions, minimum=0, maximum=INT32_MAX)
        check_range(ctx, join(path, "maxSavedParseExceptions"), self.max_saved_parse_exceptions, minimum=0,
                    maximum=MAX_SAVED_PARSE_EXCEPTIONS)
        check_range(ctx, join(path, "maxRecordsPerPoll"), self.max_records_per_poll, minimum=1,
                    maximum=MAX_RECORDS_PER_POLL)

    @property
    def effective_max_parse_exceptions(self) -> int | None:
        """Druid: reportParseExceptions overrides maxParseExceptions with 0."""
        return 0 if self.report_parse_exceptions else self.max_parse_exceptions

    @property
    def effective_max_saved_parse_exceptions(self) -> int:
        return min(self.max_saved_parse_exceptions, 1) if self.report_parse_exceptions else self.max_saved_parse_exceptions


# ---------------------------------------------------------------------------------------------- microbatch


@dataclass(frozen=True)
class DataGate:
    """Seed 002's DelayedFetch: wait until `minRecords` new records exist or `maxWait` passes."""

    min_records: int
    max_wait: Period = spec_field(default_factory=lambda: Period.parse("PT10M"))
    poke_interval: Period = spec_field(default_factory=lambda: Period.parse("PT10S"))

    def _validate(self, path: str, ctx: BindContext) -> None:
        check_range(ctx, join(path, "minRecords"), self.min_records, minimum=1)
        check_period(ctx, join(path, "maxWait"), self.max_wait, allow_zero=True)
        check_period(ctx, join(path, "pokeInterval"), self.poke_interval)


@dataclass(frozen=True)
class HealthConfig:
    """Druid's supervisor health thresholds (cluster properties there, per datasource here)."""

    unhealthiness_threshold: int = 3  # failed loops (plan steps) in a row -> UNHEALTHY_SUPERVISOR
    healthiness_threshold: int = 3  # successful loops in a row to be healthy again
    task_unhealthiness_threshold: int = 3  # failed runs in a row -> UNHEALTHY_TASKS
    task_healthiness_threshold: int = 3

    def _validate(self, path: str, ctx: BindContext) -> None:
        for name in ("unhealthinessThreshold", "healthinessThreshold", "taskUnhealthinessThreshold",
                     "taskHealthinessThreshold"):
            attr = "".join("_" + c.lower() if c.isupper() else c for c in name)
            check_range(ctx, join(path, name), getattr(self, attr), minimum=1, maximum=1000)


@dataclass(frozen=True)
class SparkConfig:
    conn_id: str = "spark_default"
    master: str | None = None  # overrides the connection's host
    deploy_mode: str | None = None
    conf: dict[str, str] = spec_field(default_factory=dict)
    driver_memory: str | None = None
    executor_memory: str | None = None
    executor_cores: int | None = None
    num_executors: int | None = None

    def _validate(self, path: str, ctx: BindContext) -> None:
        check_range(ctx, join(path, "executorCores"), self.executor_cores, minimum=1, maximum=1024)
        check_range(ctx, join(path, "numExecutors"), self.num_executors, minimum=1, maximum=10_000)


@dataclass(frozen=True)
class S3Access:
    """How to reach an S3 or S3-compatible deep storage (`deepStorage.s3`); left out, the AWS SDKs' own chain
    (AWS_* environment variables, ~/.aws, an instance role) and AWS's endpoints apply. Credentials are only ever
    references, never values: an Airflow connection (`connection`: login = access key id, password = secret
    access key, extra `endpoint_url` / `region_name`, as Airflow's `aws` connection type has them) or secret
    references (`{type: environment, variable: NAME}`, `{type: airflowConnection, connId: ID, field: F}`)."""

    endpoint: str | None = None  # http(s)://host:port of an S3-compatible store; none: AWS S3
    region: str | None = None
    path_style_access: bool | None = None  # bucket in the path, not the host name; default: true with an endpoint
    connection: str | None = None  # an Airflow connection id
    # secret references; typed Any so that a key written as a value is refused by `_validate` without echoing it
    access_key_id: Any = None
    secret_access_key: Any = None
    session_token: Any = None  # temporary credentials

    def _validate(self, path: str, ctx: BindContext) -> None:
        if self.endpoint is not None and not re.fullmatch(r"https?://[^/\s]+/?", self.endpoint):
            ctx.error(join(path, "endpoint"), f"expected http(s)://host:port, got {self.endpoint!r}")
        for name, ref in self.references().items():
            problem = (credentials.parse_secret_ref(ref)[1] if isinstance(ref, dict)
                       else "a value was given")  # never echoed: it may be the key itself
            if problem is not None:
                ctx.error(join(path, name), "expected a secret reference, {type: environment, variable: NAME} or "
                          "{type: airflowConnection, connId: ID, field: password}: a key is never written into "
                          f"a spec ({problem})")
        if (self.access_key_id is None) != (self.secret_access_key is None):
            ctx.error(path, "accessKeyId and secretAccessKey go together: set both, or neither")
        if self.connection is not None and self.access_key_id is not None:
            ctx.error(path, "credentials from either `connection` or accessKeyId/secretAccessKey, not both")

    def references(self) -> dict[str, Any]:
        """The secret references set, by their JSON key."""
        refs = {"accessKeyId": self.access_key_id, "secretAccessKey": self.secret_access_key,
                "sessionToken": self.session_token}
        return {k: v for k, v in refs.items() if v is not None}


@dataclass(frozen=True)
class DeepStorage:
    # A Hadoop-compatible URI (file://, hdfs://, s3a://, ...); default: $INGEST_HOME/deep-storage.
    uri: str | None = None
    s3: S3Access | None = None  # for an s3a:// (or s3://) uri: endpoint, region, credentials

    def _validate(self, path: str, ctx: BindContext) -> None:
        if self.s3 is not None and self.uri is not None and not self.uri.startswith(("s3a://", "s3://")):
            ctx.error(join(path, "s3"), f"only for an s3a:// uri, and uri is {self.uri!r}")


# librdkafka settings the dead-letter producer owns: its exactly-once delivery depends on them
DEAD_LETTER_RESERVED = ("transactional.id", "enable.idempotence", "acks", "transaction.timeout.ms")


@dataclass(frozen=True)
class DeadLetter:
    """Dead letters: every record that failed (and with `includeThrownAway`, every one the filter, the rejection
    window or a tombstone dropped) is kept, raw, as Parquet with the run, visible once it publishes; with a
    `topic`, each published run's dead letters are also produced there exactly once."""

    enabled: bool = True
    include_thrown_away: bool = False
    topic: str | None = None
    # over the consumerProperties' connection settings (bootstrap.servers, security), for the dead-letter topic
    producer_properties: dict[str, Any] = spec_field(default_factory=dict)

    def _validate(self, path: str, ctx: BindContext) -> None:
        if self.topic is not None and not self.topic.strip():
            ctx.error(join(path, "topic"), "must not be empty (leave it out to keep dead letters in deep storage only)")
        props = join(path, "producerProperties")
        for key, value in self.producer_properties.items():
            if key in DEAD_LETTER_RESERVED:
                ctx.error(join(props, key), "set by the dead-letter producer for exactly-once delivery: remove it")
            elif credentials.is_secret_key(key):
                ctx.error(join(props, key), "secrets are not accepted here: the producer uses ioConfig."
                          "consumerProperties' connection and credentials (secret references included)")
            elif not isinstance(value, (str, int, float, bool)):
                ctx.error(join(props, key), "expected a string, number or boolean")
        if self.producer_properties and self.topic is None:
            ctx.error(props, "only used with a topic: set topic, or remove producerProperties")


@dataclass(frozen=True)
class IcebergTable:
    """An Iceberg table of the datasource's visible segments (`store.iceberg`), in pyiceberg's SQL catalog kept
    in the metadata database: `namespace.table` (default `ingest.<dataSource>`)."""

    enabled: bool = True
    namespace: str = "ingest"
    table: str | None = None  # default: the dataSource

    def _validate(self, path: str, ctx: BindContext) -> None:
        for key, value in (("namespace", self.namespace), ("table", self.table)):
            if value is not None and (not value.strip() or "." in value):
                ctx.error(join(path, key), "must be a non-empty name without '.'")


@dataclass(frozen=True)
class Microbatch:
    """This system's own section: scheduling, planning, Spark and deep storage."""

    schedule: str | None = None  # ISO period, cron or "@continuous"; default ioConfig.taskDuration
    start_date: datetime | None = None
    catchup: bool = False
    max_active_runs: int = 1
    retries: int = 2
    retry_delay: Period = spec_field(default_factory=lambda: Period.parse("PT1M"))
    assignment: str = MODULO
    max_records_per_split: int = defaults.MAX_RECORDS_PER_SPLIT
    min_splits_per_group: int = defaults.MIN_SPLITS_PER_GROUP
    max_records_per_run: int | None = None
    data_gate: DataGate | None = None
    health: HealthConfig = spec_field(default_factory=HealthConfig)
    spark: SparkConfig = spec_field(default_factory=SparkConfig)
    deep_storage: DeepStorage = spec_field(default_factory=DeepStorage)
    # the committed offsets, copied to this Kafka consumer group after each publish (lag in Kafka's tooling)
    mirror_offsets: bool = True
    consumer_group: str | None = None  # default: ingest.<dataSource>
    dead_letter: DeadLetter | None = None
    iceberg: IcebergTable | None = None

    @property
    def iceberg_on(self) -> bool:
        return self.iceberg is not None and self.iceberg.enabled

    @property
    def dead_letters_on(self) -> bool:
        return self.dead_letter is not None and self.dead_letter.enabled

    @property
    def dead_letter_topic(self) -> str | None:
        """The topic dead letters are produced to, when they are kept and one is named."""
        return self.dead_letter.topic if self.dead_letters_on and self.dead_letter else None

    def _validate(self, path: str, ctx: BindContext) -> None:
        if self.consumer_group is not None and not self.consumer_group.strip():
            ctx.error(join(path, "consumerGroup"), "must not be empty (set mirrorOffsets: false to mirror nothing)")
        if self.assignment not in ASSIGNMENTS:
            ctx.error(join(path, "assignment"), f"must be one of {', '.join(ASSIGNMENTS)}"
                      + did_you_mean(self.assignment, ASSIGNMENTS))
        check_range(ctx, join(path, "maxActiveRuns"), self.max_active_runs, minimum=1, maximum=100)
        check_range(ctx, join(path, "retries"), self.retries, minimum=0, maximum=100)
        check_range(ctx, join(path, "maxRecordsPerSplit"), self.max_records_per_split, minimum=1)
        check_range(ctx, join(path, "minSplitsPerGroup"), self.min_splits_per_group, minimum=1, maximum=10_000)
        check_range(ctx, join(path, "maxRecordsPerRun"), self.max_records_per_run, minimum=1)
        check_period(ctx, join(path, "retryDelay"), self.retry_delay, allow_zero=True)
        if self.schedule is not None and self.schedule.upper().startswith(("P", "-P")):
            try:
                check_period(ctx, join(path, "schedule"), Period.parse(self.schedule), allow_calendar=True)
            except ValueError as exc:
                ctx.error(join(path, "schedule"), str(exc))
        elif self.continuous:
            if self.max_active_runs != 1:
                # Airflow's ContinuousTimetable holds a DAG to one active run (active_runs_limit = 1)
                ctx.error(join(path, "maxActiveRuns"),
                          f"must be 1 with schedule {CONTINUOUS!r}: Airflow runs a continuous DAG one run at a "
                          "time (for runs that overlap, use a short period such as 'PT5S' with maxActiveRuns 2)")
        elif self.schedule is not None:
            problem = cron_problem(self.schedule)
            if problem:
                ctx.error(join(path, "schedule"), f"{problem}; or {CONTINUOUS!r} for runs back to back")

    @property
    def continuous(self) -> bool:
        """Runs back to back: the next starts as soon as the previous one ends."""
        return self.schedule is not None and self.schedule.strip().lower() == CONTINUOUS


@dataclass(frozen=True)
class PartitionsSpec:
    type: str = "dynamic"
    max_rows_per_segment: int = defaults.COMPACTION_MAX_ROWS_PER_SEGMENT
    max_total_rows: int | None = spec_field(None, ignored_in_batch="a compaction run writes each interval apart")

    def _validate(self, path: str, ctx: BindContext) -> None:
        if self.type != "dynamic":
            ctx.error(join(path, "type"), f"partitionsSpec type {self.type!r} is not supported; use dynamic "
                      "(segments of at most maxRowsPerSegment rows)")
        check_range(ctx, join(path, "maxRowsPerSegment"), self.max_rows_per_segment, minimum=1)


@dataclass(frozen=True)
class CompactionTuning:
    partitions_spec: PartitionsSpec = spec_field(default_factory=PartitionsSpec)


@dataclass(frozen=True)
class CompactionGranularity:
    segment_granularity: Granularity | None = None  # default: the datasource's


@dataclass(frozen=True)
class Kill:
    """Deleting the segments compaction made unused (Druid's kill), `bufferPeriod` after they became unused:
    long enough for any reader that listed them before (a query, an Iceberg snapshot) to be done."""

    enabled: bool = True
    buffer_period: Period = spec_field(default_factory=lambda: Period.parse(defaults.KILL_BUFFER_PERIOD))

    def _validate(self, path: str, ctx: BindContext) -> None:
        check_period(ctx, join(path, "bufferPeriod"), self.buffer_period, allow_zero=True)


@dataclass(frozen=True)
class Compaction:
    """Druid's auto-compaction, per datasource (its compaction config's field names): the visible segments of
    each interval older than `skipOffsetFromLatest` are rewritten, rolled up again, into as few segments of at
    most `maxRowsPerSegment` rows as they need, optionally of a coarser `segmentGranularity`, as a new version
    that overshadows them. `schedule` (this system's own) is the compaction DAG's."""

    enabled: bool = True
    data_source: str | None = None  # Druid's config names it; here it must be the spec's, if given
    skip_offset_from_latest: Period = spec_field(default_factory=lambda: Period.parse(defaults.COMPACTION_SKIP_OFFSET))
    tuning_config: CompactionTuning = spec_field(default_factory=CompactionTuning)
    granularity_spec: CompactionGranularity = spec_field(default_factory=CompactionGranularity)
    max_rows_per_segment: int | None = None  # Druid's older top-level spelling of partitionsSpec's
    schedule: str = defaults.COMPACTION_SCHEDULE
    kill: Kill = spec_field(default_factory=Kill)
    task_priority: int | None = spec_field(None, ignored_in_batch="compaction runs as its own Airflow DAG")
    input_segment_size_bytes: int | None = spec_field(None, ignored_in_batch="each interval is compacted whole")
    task_context: dict[str, Any] | None = spec_field(None, ignored_in_batch="no Druid task context")

    @property
    def target_rows(self) -> int:
        return self.max_rows_per_segment or self.tuning_config.partitions_spec.max_rows_per_segment

    def _validate(self, path: str, ctx: BindContext) -> None:
        check_period(ctx, join(path, "skipOffsetFromLatest"), self.skip_offset_from_latest, allow_zero=True,
                     allow_calendar=True)
        check_range(ctx, join(path, "maxRowsPerSegment"), self.max_rows_per_segment, minimum=1)
        if self.schedule.upper().startswith(("P", "-P")):
            try:
                check_period(ctx, join(path, "schedule"), Period.parse(self.schedule), allow_calendar=True)
            except ValueError as exc:
                ctx.error(join(path, "schedule"), str(exc))
        else:
            problem = cron_problem(self.schedule)
            if problem:
                ctx.error(join(path, "schedule"), problem)
        target = self.granularity_spec.segment_granularity
        if target is not None and target.period is None:
            ctx.error(join(join(path, "granularitySpec"), "segmentGranularity"),
                      f"{target.name} is not supported: segments need a time bucket; use e.g. YEAR")


# ---------------------------------------------------------------------------------------------- the spec


@dataclass(frozen=True)
class DatasourceSpec:
    data_schema: DataSchema
    io_config: IOConfig
    tuning_config: TuningConfig = field(default_factory=TuningConfig)
    microbatch: Microbatch = field(default_factory=Microbatch)
    compaction: Compaction | None = None
    suspended: bool = False
    source: str = "<spec>"
    warnings: tuple[SpecProblem, ...] = ()

    @property
    def datasource(self) -> str:
        return self.data_schema.data_source

    def to_raw(self) -> dict[str, Any]:
        """The normalized spec in the current nested shape, secrets redacted (safe to store and show)."""
        io = to_raw(self.io_config)
        io["consumerProperties"] = credentials.redact_properties(self.io_config.consumer_properties)
        return {
            "type": "kafka",
            "spec": {"dataSchema": to_raw(self.data_schema), "ioConfig": io, "tuningConfig": to_raw(self.tuning_config)},
            "suspended": self.suspended,
            "microbatch": to_raw(self.microbatch),
            **({"compaction": to_raw(self.compaction)} if self.compaction is not None else {}),
        }

    @property
    def has_literal_secrets(self) -> bool:
        return (credentials.REDACTED in self.to_raw()["spec"]["ioConfig"]["consumerProperties"].values()
                or self.io_config.input_format.has_literal_secrets)

    def with_secrets_from(self, original: "DatasourceSpec") -> "DatasourceSpec":
        """This spec (a redacted copy, e.g. staged for a Spark job) with the literal secrets of `original`, the
        spec file it was made from: only for building a Kafka client, never for storing or printing."""
        if original.datasource != self.datasource:
            raise SpecError(original.source, [SpecProblem("spec.dataSchema.dataSource", (
                f"is {original.datasource!r}, not {self.datasource!r}: not the spec this copy was made from"))])
        props = credentials.restore_literals(self.io_config.consumer_properties,
                                             original.io_config.consumer_properties, original.source)
        fmt = self.io_config.input_format
        if original.io_config.input_format._to_raw() == fmt._to_raw():  # the same format, its credentials redacted
            fmt = original.io_config.input_format
        return dataclasses.replace(self, io_config=dataclasses.replace(self.io_config, consumer_properties=props,
                                                                       input_format=fmt))

    def fingerprint(self) -> str:
        return hashlib.sha256(json.dumps(self.to_raw(), sort_keys=True).encode()).hexdigest()[:16]


_TOP_KEYS = {"type", "spec", "suspended", "microbatch", "compaction", "context", "id"}  # context, id: no effect
_SECTION_KEYS = {"dataSchema", "ioConfig", "tuningConfig"}


def parse_spec(raw: Any, source: str = "<spec>", *, strict: bool = False) -> DatasourceSpec:
    """Bind a raw supervisor spec (already parsed from JSON/YAML). Raises SpecError with every problem.
    `strict`: unknown fields are errors in Druid's sections too (they are warnings there otherwise)."""
    ctx = BindContext(strict)
    if not isinstance(raw, dict):
        raise SpecError(source, [SpecProblem("", "a datasource spec must be an object with type: kafka and spec")])
    legacy = convert_parser(raw)  # Druid's deprecated dataSchema.parser, in today's form
    if legacy is not None:
        raw = legacy.raw
        ctx.errors.extend(legacy.problems)
        for unknown in legacy.unknown:
            ctx.unknown(unknown.path, unknown.message)
        if legacy.warning:
            ctx.warn(legacy.path, legacy.warning)
    kind = raw.get("type")
    if kind != "kafka":
        ctx.error("type", f"supervisor type must be 'kafka', got {kind!r}")
    if raw.get("spec") is not None:
        prefix = "spec"
        sections = raw["spec"]
        if not isinstance(sections, dict):
            raise SpecError(source, [SpecProblem("spec", "expected an object with dataSchema, ioConfig, tuningConfig")])
        for key in sections:
            if key not in _SECTION_KEYS and sections[key] is not None:
                ctx.unknown(join("spec", str(key)), "unknown field" + did_you_mean(str(key), _SECTION_KEYS))
        _exported_copies(raw, sections, ctx)
    else:
        prefix, sections = "", raw
    for key in raw:
        if key not in _TOP_KEYS and key not in _SECTION_KEYS and raw[key] is not None:
            ctx.unknown(str(key), "unknown field" + did_you_mean(str(key), _TOP_KEYS | _SECTION_KEYS))

    data_schema = _bind_section(DataSchema, sections, "dataSchema", prefix, ctx)
    io_raw = sections.get("ioConfig")
    if isinstance(io_raw, dict):
        io_path = join(prefix, "ioConfig")
        props = _bind_consumer_properties(io_raw.get("consumerProperties"), join(io_path, "consumerProperties"), ctx)
        # Secret references are bound above; a failure there is already reported, so bind the rest with a
        # placeholder to report the other fields' problems too.
        io_raw = {**_export_aliases(io_raw, io_path, ctx),
                  "consumerProperties": props if props is not MISSING_VALUE else {"bootstrap.servers": ""}}
    io_config = _bind_section(IOConfig, {**sections, "ioConfig": io_raw}, "ioConfig", prefix, ctx)
    tuning = _bind_section(TuningConfig, sections, "tuningConfig", prefix, ctx, required=False) or TuningConfig()
    with ctx.own_section():  # this system's own sections: nothing in them is Druid's to ignore
        micro = Microbatch()
        if raw.get("microbatch") is not None:
            micro = bind_object(Microbatch, raw["microbatch"], "microbatch", ctx)
        compaction = None
        if raw.get("compaction") is not None:
            compaction = bind_object(Compaction, raw["compaction"], "compaction", ctx)
    if compaction is not None:
        if (compaction is not MISSING_VALUE and data_schema is not MISSING_VALUE and compaction.data_source
                not in (None, data_schema.data_source)):
            ctx.error("compaction.dataSource", f"is {compaction.data_source!r}, but this spec's dataSource is "
                      f"{data_schema.data_source!r}: a spec's compaction is its own datasource's")
        target = compaction.granularity_spec.segment_granularity if compaction is not MISSING_VALUE else None
        source_granularity = (data_schema.granularity_spec.segment_granularity
                              if data_schema is not MISSING_VALUE else None)
        if target is not None and target.period is not None and source_granularity is not None and not target.holds(
                source_granularity):
            ctx.error("compaction.granularitySpec.segmentGranularity",
                      f"{target.name} does not hold whole {source_granularity.name} segments (the spec's "
                      "segmentGranularity): compaction only coarsens, e.g. HOUR into DAY, DAY into MONTH")
    suspended = bind_value(bool, False if raw.get("suspended") is None else raw["suspended"], "suspended", ctx)

    if ctx.errors or MISSING_VALUE in (data_schema, io_config, tuning, micro, compaction, suspended):
        if not ctx.errors:  # pragma: no cover - a binder failure always records an error
            ctx.error("", "spec could not be bound")
        raise SpecError(source, legacy.traced(ctx.errors) if legacy is not None else ctx.errors)
    return DatasourceSpec(
        data_schema=data_schema,
        io_config=io_config,
        tuning_config=tuning,
        microbatch=micro,
        compaction=compaction,
        suspended=suspended,
        source=source,
        warnings=tuple(ctx.warnings),
    )


def _exported_copies(raw: dict[str, Any], sections: dict[str, Any], ctx: BindContext) -> None:
    """Druid's `GET /druid/indexer/v1/supervisor/<id>` writes dataSchema, ioConfig and tuningConfig twice: inside
    `spec` and beside it. With `spec` present Druid reads only spec's (KafkaSupervisorSpec), so an equal copy is
    nothing to mention and a different one is ignored, with a word."""
    for key in sorted(_SECTION_KEYS & set(raw)):
        if raw[key] is None or raw[key] == sections.get(key):
            continue
        if key in sections:
            ctx.warn(key, f"ignored: differs from spec.{key}, which is the one Druid reads (an exported spec holds "
                     "two equal copies): remove this one")
        else:
            ctx.warn(key, f"ignored: with `spec` present Druid reads spec.{key} only: move it inside spec (or drop "
                     "'spec' and use the flat shape)")


def _export_aliases(io_raw: dict[str, Any], path: str, ctx: BindContext) -> dict[str, Any]:
    """ioConfig without the copies Druid's export writes beside the Kafka fields: `stream` (the topic, or the
    topicPattern) and `useEarliestSequenceNumber` (useEarliestOffset). An equal copy loads without a word; a
    `stream` that names another topic is an error (which one was meant?)."""
    out = {k: v for k, v in io_raw.items() if k not in ("stream", "useEarliestSequenceNumber")}
    stream = io_raw.get("stream")
    named = io_raw.get("topic") if io_raw.get("topic") is not None else io_raw.get("topicPattern")
    if stream is not None and named is None:
        ctx.error(join(path, "stream"), "this is a Kinesis field; Kafka uses 'topic'")
    elif stream is not None and stream != named:
        ctx.error(join(path, "stream"), f"is {stream!r}, but the topic is {named!r}: Druid writes stream as a copy of "
                  "topic (or topicPattern) when it exports a spec; remove it, or make it the topic")
    alias = io_raw.get("useEarliestSequenceNumber")
    given = io_raw.get("useEarliestOffset")
    if alias is not None and str(alias).lower() != str(False if given is None else given).lower():
        if given is None:
            ctx.warn(join(path, "useEarliestSequenceNumber"), "ignored: Kafka's field is useEarliestOffset (Druid "
                     "ignores useEarliestSequenceNumber for Kafka too): rename it")
        else:
            ctx.warn(join(path, "useEarliestSequenceNumber"), f"ignored: useEarliestOffset ({given}) is the field "
                     "Kafka reads; an exported spec holds two equal copies")
    return out


def _bind_section(cls: type, sections: dict, key: str, prefix: str, ctx: BindContext, required: bool = True) -> Any:
    path = join(prefix, key)
    if key not in sections or sections[key] is None:
        if required:
            ctx.error(path, "required section is missing")
            return MISSING_VALUE
        return None
    return bind_object(cls, sections[key], path, ctx)


def _bind_consumer_properties(raw: Any, path: str, ctx: BindContext) -> Any:
    if raw is None:
        ctx.error(path, "required field is missing (it needs at least bootstrap.servers)")
        return MISSING_VALUE
    if not isinstance(raw, dict):
        ctx.error(path, "expected an object of Kafka consumer properties")
        return MISSING_VALUE
    props, problems = credentials.expand_dynamic_provider(raw)
    for problem in problems:
        ctx.error(join(path, credentials.DYNAMIC_PROVIDER_KEY), problem)
    out: dict[str, Any] = {}
    for key, value in props.items():
        if isinstance(value, dict):
            ref, problem = credentials.parse_secret_ref(value)
            if problem:
                ctx.error(join(path, key), problem)
            else:
                out[key] = ref
        elif isinstance(value, (str, int, float, bool)):
            out[key] = value
        elif isinstance(value, credentials.EnvironmentSecret):  # from druid.dynamic.config.provider
            out[key] = value
        else:
            # never echo the value: it may be a secret
            ctx.error(join(path, key), "expected a string, number, boolean or secret reference")
    return out


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML loader that rejects duplicate keys (a silent overwrite hides typos)."""


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    mapping: dict = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in mapping:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark)
        mapping[key] = loader.construct_object(value_node, deep=deep)
    return mapping


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object, refusing a key given twice (a silent overwrite hides typos; Druid keeps the last)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


class _DuplicateKey(ValueError):
    pass


def parse_spec_text(text: str, source: str = "<spec>", *, strict: bool = False, is_json: bool = False
                    ) -> DatasourceSpec:
    """`is_json`: read `text` as JSON (a `.json` file: JSON allows what YAML refuses, such as tab indentation),
    else as YAML, which reads JSON too. Either refuses a key given twice in one object."""
    try:
        if is_json:
            raw = json.loads(text, object_pairs_hook=_unique_keys)
        else:
            raw = yaml.load(text, Loader=_UniqueKeyLoader)
    except _DuplicateKey as exc:
        raise SpecError(source, [SpecProblem("", f"duplicate key {exc.args[0]!r} in one object: remove one (Druid "
                                             "would silently keep the last)")]) from None
    except json.JSONDecodeError as exc:
        if not exc.doc.strip():
            raw = None
        else:
            raise SpecError(source, [SpecProblem("", f"not valid JSON: {exc.msg} at line {exc.lineno} column "
                                                 f"{exc.colno}")]) from None
    except yaml.YAMLError as exc:
        raise SpecError(source, [SpecProblem("", f"not valid YAML/JSON: {exc}")]) from None
    except RecursionError:
        raise SpecError(source, [SpecProblem("", _TOO_DEEP)]) from None
    if raw is None:
        raise SpecError(source, [SpecProblem("", "the file is empty: a spec needs at least type: kafka and spec "
                                             "(see dags/datasources/wikipedia.yaml)")])
    try:
        return parse_spec(raw, source, strict=strict)
    except RecursionError:
        raise SpecError(source, [SpecProblem("", _TOO_DEEP)]) from None


_TOO_DEEP = ("nested too deeply to read (a spec is a dozen levels deep at most): look for unbalanced or "
             "runaway brackets")


def load_spec(path: str | Path, *, strict: bool = False) -> DatasourceSpec:
    """The spec in file `path` (a `.json` file read as JSON, others as YAML); any file that is not one (binary,
    not UTF-8, empty, unreadable) is a SpecError naming the file and what to do, never another exception.
    `strict`: unknown fields are errors everywhere (`parse_spec`)."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise SpecError(str(p), [SpecProblem("", f"cannot read file: {exc.strerror or exc}")]) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(str(p), [SpecProblem("", _NOT_TEXT.format(
            what=f"byte {exc.start} is not UTF-8", name=p.name))]) from None
    if "\x00" in text:
        raise SpecError(str(p), [SpecProblem("", _NOT_TEXT.format(
            what=f"byte {text.index(chr(0))} is a NUL", name=p.name))]) from None
    return parse_spec_text(text.removeprefix("\ufeff"), str(p), strict=strict, is_json=p.suffix.lower() == ".json")


_NOT_TEXT = ("not a text file ({what}): a spec is YAML or JSON saved as UTF-8; if {name} is not a spec, move "
             "it out of the DAG folder or list it in .airflowignore")

SPEC_SUFFIXES = (".yaml", ".yml", ".json")


def find_spec_files(folder: str | Path, ignore_syntax: str | None = None) -> list[Path]:
    """Every .yaml/.yml/.json file under `folder` that its `.airflowignore` files do not exclude, sorted.
    `ignore_syntax` is Airflow's `[core] dag_ignore_file_syntax` (glob or regexp; default: the environment's)."""
    syntax = ignore_syntax or ignore_syntax_from_env()
    return sorted(p for p in unignored_files(folder, syntax) if p.suffix in SPEC_SUFFIXES and p.is_file())
