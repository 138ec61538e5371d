"""`dataSchema`: the timestamp, the dimensions, the granularities, the transforms and the datasource's name."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

from ingest_core.core.binding import MISSING_VALUE, BindContext, bind_object, did_you_mean, join, spec_field
from ingest_core.core.errors import shown
from ingest_core.core.expression.errors import ExpressionError
from ingest_core.core.expression.parser import parse_expression
from ingest_core.core.filters import FilterError, parse_filter
from ingest_core.core.granularity import Granularity
from ingest_core.core.spec.druid import TIME_COLUMN
from ingest_core.core.spec.metrics import Aggregator
from ingest_core.core.time_formats import timestamp_format_problem


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
            ctx.error(path, f"expected a dimension name or object, got {shown(raw)}")
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
            ctx.warn(join(path, "type"), f"read as {shown(kind)} (Druid would take {obj.type!r} for an unknown type "
                     "and make a string dimension): write it in lower case")
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
            problem = (f"unknown granularitySpec type {shown(self.type)}"
                       f"{did_you_mean(self.type, ('uniform', 'arbitrary'))}")
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
            ctx.error(join(path, "type"), f"unknown transform type {shown(self.type)}; use 'expression'")


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


def compaction_dag_id(datasource: str) -> str:
    return datasource + COMPACTION_DAG_SUFFIX


def datasource_name_problem(name: str) -> str | None:
    """Why `name` cannot be a datasource name (it becomes a DAG id and a storage path), or None."""
    if not _DATASOURCE_RE.match(name) or ".." in name or name.endswith("."):
        return (f"invalid datasource name {shown(name)}: use 1-200 letters, digits, '_', '-' or '.', starting with a "
                "letter or digit, without '..' (it becomes the Airflow DAG id and a storage folder)")
    if name.endswith(COMPACTION_DAG_SUFFIX):
        return (f"invalid datasource name {shown(name)}: the suffix {COMPACTION_DAG_SUFFIX!r} names the compaction DAG "
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
