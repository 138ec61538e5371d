"""From Kafka records to typed input rows, columnar: Druid's InputFormat + TimestampSpec + TransformSpec +
DimensionsSpec, applied to a chunk of records at a time.

Steps, in Druid's order:
  1. decode each record's value with `inputFormat` (json with flattenSpec, csv, tsv/delimited; `kafka` adds
     the key, headers, Kafka timestamp and topic as columns; value fields win on a name clash);
  2. read the row timestamp (`timestampSpec`, `missingValue`);
  3. apply `transforms`, each to the row as parsed, never to another's output (they may rewrite `__time` or any
     field, one they read too);
  4. drop rows the `filter` (which reads the transformed row) rejects, and late or early rows
     (lateMessageRejection*/earlyMessageRejectionPeriod, relative to the task group's creation time);
  5. type the dimensions and the aggregators' input fields.

Well-formed JSON chunks decode in one vectorized pass (pyarrow's JSON reader). Anything unusual (a malformed
record, a type that does not match, several rows in one record, flattenSpec paths) falls back to decoding
that chunk record by record, which finds the exact rows at fault. Both paths give the same rows.

A row whose timestamp or value cannot be read is `unparseable` and dropped; a row with a dimension or metric
value that cannot be converted is kept with null there and counted as `processedWithError`. Every step fails
for its rows only: a transform (or the filter) that raises is evaluated again on halves of the chunk until the
rows at fault are found; they are unparseable, the others keep exactly the values the whole chunk gives. The
value -> outcome table of docs/spark-job.md lists each case; numbers are never wrapped, clamped or made infinite.
"""

from __future__ import annotations

import csv
import io
import logging
import sys
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from ingest_core.core.aggregators import DOUBLE, LIST, LONG, TEXT
from ingest_core.core.column_types import canonical
from ingest_core.core.periods import MAX_DATETIME, MIN_DATETIME
from ingest_core.core.spec import DatasourceSpec, DimensionsSpec
from ingest_core.executor import discovery
from ingest_core.executor.discovery import AUTO_JSON, encode
from ingest_core.executor.expr_values import concat_arrays, expression_input
from ingest_core.executor.expressions import compile_expression, evaluate_to_array
from ingest_core.executor.filters import compile_filter
from ingest_core.executor.formats.base import json_text
from ingest_core.executor.formats.decoders import decoder_for
from ingest_core.executor.sketches import input_sketch_bytes
from ingest_core.executor.timestamps import timestamp_parser
from ingest_core.handover.report import (
    Outcome,
    ParseExceptionRecord,
    Rejection,
    RowStats,
    ServiceProblem,
    ServiceUnavailableError,
)

log = logging.getLogger(__name__)

TIME = "__time"          # the row timestamp, timestamp[ms, UTC]
PARTITION = "__partition"
OFFSET = "__offset"
DIMS_JSON = "__dims"     # schemaless: the discovered dimensions as canonical JSON text

TIME_TYPE = pa.timestamp("ms", tz="UTC")
DIM_TYPES = {"string": pa.string(), "long": pa.int64(), "float": pa.float32(), "double": pa.float64(),
             "json": pa.string(), "auto": pa.string()}
METRIC_INPUT_TYPES = {"long": pa.int64(), "double": pa.float64(), "float": pa.float32(), "string": pa.string()}

_EPOCH = datetime(1970, 1, 1, tzinfo=MIN_DATETIME.tzinfo)
MIN_TIME_MS = (MIN_DATETIME - _EPOCH) // timedelta(milliseconds=1)  # row times a segment interval can hold
MAX_TIME_MS = (MAX_DATETIME - _EPOCH) // timedelta(milliseconds=1)  # (exclusive); see core.periods
LONG_MIN, LONG_MAX = -(2 ** 63), 2 ** 63 - 1
FLOAT_MAX = 3.4028234663852886e38  # the largest finite float32


def metric_input_column(field_name: str, kind: str) -> str:
    return f"__in_{kind}_{field_name}"


def value_kind_column(input_column: str) -> str:
    """A hashed sketch input's companion column: each value's kind (`core.aggregators` TEXT, LONG, DOUBLE, LIST)."""
    return f"{input_column}__kind"


def filter_mask_column(metric: str) -> str:
    """The column of a filtered aggregator's filter: true where the row feeds the metric."""
    return f"__filter_{metric}"


@dataclass
class RecordChunk:
    """Consecutive records of one partition, as read from Kafka."""

    topic: str
    partition: int
    offsets: Sequence[int]  # a range when contiguous, as it usually is
    values: list[bytes | None]
    keys: list[bytes | None] | None = None
    timestamps: list[int] | None = None  # Kafka record timestamps, epoch ms
    headers: list[Any] | None = None  # per record: list of (name, bytes) or None

    def __len__(self) -> int:
        return len(self.offsets)


@dataclass
class ParsedChunk:
    table: pa.Table
    stats: RowStats
    exceptions: list[ParseExceptionRecord] = field(default_factory=list)  # the last max(maxSaved, 1)
    rejections: list[Rejection] = field(default_factory=list)  # every row not ingested as sent, in offset order
    problems: list[ServiceProblem] = field(default_factory=list)  # services a decoder needed that did not answer


@dataclass
class _ChunkParse:
    """One chunk's parse as it goes through `RowParser.parse`'s steps: what they count and the columns they
    build, row by row (`n` rows, `offsets` the record each came from, `bad` why a row is unparseable)."""

    chunk: RecordChunk
    stats: RowStats = field(default_factory=RowStats)
    exceptions: list[ParseExceptionRecord] = field(default_factory=list)
    rejections: list[Rejection] = field(default_factory=list)
    columns: dict[str, pa.Array] = field(default_factory=dict)
    rows: list[dict[str, Any]] = field(default_factory=list)  # decoded rows, by the per-record path only
    pyvalues: dict[str, list[Any]] = field(default_factory=dict)  # columns of mixed or nested values, as decoded
    raw_values: dict[str, list[Any]] = field(default_factory=dict)  # of those, the ones no transform replaced
    offsets: pa.Array = field(default_factory=lambda: pa.array([], pa.int64()))
    n: int = 0
    bad: dict[int, str] = field(default_factory=dict)  # row -> why it is unparseable (its first reason)


class _Rows:
    """Decoded rows as columns of Python values, with the record each row came from."""

    def __init__(self) -> None:
        self.records: list[int] = []
        self.fields: list[dict[str, Any]] = []


# ------------------------------------------------------------------------------------------ conversions


def _to_string_value(v: Any, multi: str) -> str | None:
    if v is None:
        return None
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        items = [_to_string_value(x, multi) for x in v]
        items = [x for x in items if x is not None]
        if not items:
            return None
        if multi in ("sorted_array", "sorted_set", "SORTED_ARRAY", "SORTED_SET"):
            items = sorted(set(items)) if multi.lower() == "sorted_set" else sorted(items)
        # Parquet has no multi-value strings: a multi-value dimension is stored as a JSON array
        return items[0] if len(items) == 1 else json_text(items)
    if isinstance(v, dict):
        return json_text(v)
    if isinstance(v, float) and v.is_integer():
        return repr(v)
    return str(v)


def _numeric_text(v: str) -> str:
    """Text that may be read as a number: ASCII, without the underscores Python's int() and float() accept
    (`1_000`) and Java's parsers do not."""
    text = v.strip()
    if not text.isascii() or "_" in text:
        raise ValueError(f"{_short(v)!r} is not a number")
    return text


def _to_long_value(v: Any) -> int | None:
    """Druid's long conversion: a fraction is truncated; a value past the int64 range, NaN or an infinity
    raises (the row is processedWithError), never wraps."""
    if v is None:
        return None
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, float):
        if not -2.0 ** 63 <= v < 2.0 ** 63:  # NaN compares false too
            raise ValueError(f"{v!r} is outside the long range [-2^63, 2^63)")
        return int(v)
    if not isinstance(v, int):
        if not isinstance(v, str):
            raise ValueError(f"a JSON {type(v).__name__} is not a number")
        text = _numeric_text(v)
        try:
            v = int(text)
        except ValueError:
            return _to_long_value(float(text))
    if not LONG_MIN <= v <= LONG_MAX:
        raise ValueError(f"{v} is outside the long range [-2^63, 2^63)")
    return v


def _to_double_value(v: Any, limit: float = sys.float_info.max) -> float | None:
    """A finite double (for `float` columns, `limit` is float32's largest); NaN, infinities and values past
    the limit raise (the row is processedWithError), never become infinite."""
    if v is None:
        return None
    if isinstance(v, (list, dict)):
        raise ValueError(f"a JSON {type(v).__name__} is not a number")
    out = float(_numeric_text(v) if isinstance(v, str) else v)
    if not abs(out) <= limit:  # NaN compares false too
        raise ValueError(f"{out!r} is not a finite number" if limit == sys.float_info.max
                         else f"{out!r} is outside the float range (|v| <= {FLOAT_MAX})")
    return out


_CONVERTERS: dict[str, Callable[[Any], Any]] = {"long": _to_long_value, "double": _to_double_value,
                                                "float": lambda v: _to_double_value(v, FLOAT_MAX)}


# ------------------------------------------------------------------------------------------ the parser


@dataclass(frozen=True)
class Target:
    """An output column: a dimension or an aggregator's input field, with its type."""

    column: str
    source: str
    kind: str  # string, long, float, double (json dimensions are stored as string; auto ones in AUTO_JSON)
    is_metric_input: bool


class RowParser:
    def __init__(self, spec: DatasourceSpec, created_at: datetime, *, log_parse_exceptions: bool | None = None,
                 max_saved_exceptions: int | None = None, keep_thrown_away: bool = False):
        """`keep_thrown_away`: list the rows the filter or the rejection window threw away (and tombstones) in
        `ParsedChunk.rejections` too, for dead letters that keep them; off, they are only counted."""
        self.spec = spec
        self.keep_thrown_away = keep_thrown_away
        schema = spec.data_schema
        io = spec.io_config
        tuning = spec.tuning_config
        self.fmt = io.input_format
        self.value_fmt = self.fmt.value_format if self.fmt.type == "kafka" else self.fmt
        assert self.value_fmt is not None
        self.decoder = decoder_for(self.value_fmt)
        self.key_decoder = decoder_for(self.fmt.key_format) if self.fmt.type == "kafka" and self.fmt.key_format else None
        self.ts_spec = schema.timestamp_spec
        self.parse_ts = timestamp_parser(self.ts_spec.format)
        self.missing_ts = (int(self.ts_spec.missing_value.timestamp() * 1000)
                           if self.ts_spec.missing_value is not None else None)
        self.transforms = [(t.name, compile_expression(t.expression)) for t in schema.transform_spec.transforms]
        self.filter = compile_filter(schema.transform_spec.filter) if schema.transform_spec.filter else None
        self.log_parse_exceptions = tuning.log_parse_exceptions if log_parse_exceptions is None else log_parse_exceptions
        self.max_saved = (tuning.effective_max_saved_parse_exceptions if max_saved_exceptions is None
                          else max_saved_exceptions)

        dims = schema.dimensions_spec
        # type-aware discovery (`useSchemaDiscovery`, `type: auto`): values with their types in AUTO_JSON;
        # without it, and without dimensions or with includeAllDimensions, the legacy string discovery (DIMS_JSON)
        self.auto_names = [d.name for d in dims.dimensions if d.type == "auto"]
        # includeAllDimensions beside `type: auto` dimensions: the others are discovered with their types too
        self.discover_all = dims.use_schema_discovery or (dims.include_all_dimensions and bool(self.auto_names))
        self.typed_discovery = self.discover_all or bool(self.auto_names)
        self.schemaless = discovers_strings(dims)
        self.keep_nulls = self.value_fmt.keeps_null_columns
        self.multi_value = {d.name: d.multi_value_handling for d in dims.dimensions}
        metric_fields = {f for a in schema.metrics_spec for f in a.input_fields}
        # Druid's schemaless exclusions (ingestion-spec.md, "Inclusions and exclusions"); the listed dimensions,
        # which includeAllDimensions puts first, are not discovered again
        self.excluded = (set(dims.dimension_exclusions) | metric_fields | {a.name for a in schema.metrics_spec}
                         | {d.name for d in dims.dimensions} | {self.ts_spec.column, TIME})
        self._discoverable: dict[str, bool] = {name: True for name in self.auto_names}
        targets: list[Target] = []
        for d in dims.dimensions:
            if d.type == "auto":
                continue  # typed by discovery
            targets.append(Target(d.name, d.name, d.type if d.type in ("long", "float", "double") else "string", False))
        seen: set[str] = set()
        for a in schema.metrics_spec:
            kind = a.input_kind
            for field_name in a.input_fields if kind else ():
                col = metric_input_column(field_name, kind)
                if col not in seen:
                    seen.add(col)
                    targets.append(Target(col, field_name, kind, True))
        self.targets = targets
        # sketches sent as input (isInputThetaSketch, HLLSketchMerge): checked per row, a bad one is null
        self.sketch_inputs = {metric_input_column(f, "string"): a.sketch for a in schema.metrics_spec
                              if a.sketch is not None and a.sketch.from_sketches for f in a.input_fields}
        # hashed sketch inputs: each value's kind beside its text, so a sketch hashes it as Druid would
        self.hashed_inputs = sorted({metric_input_column(f, "string") for a in schema.metrics_spec
                                     if a.hashes_typed_values for f in a.input_fields})
        # filtered aggregators: each filter's verdict per row, a boolean column the rollup reads
        self.metric_filters = [(filter_mask_column(a.name), compile_filter(a.filter), a.filter)
                               for a in schema.metrics_spec if a.is_filtered]

        self.min_time, self.max_time = _message_time_window(spec, created_at)
        self.output_schema = pa.schema(
            [(TIME, TIME_TYPE)]
            + [(t.column, DIM_TYPES[t.kind] if not t.is_metric_input else METRIC_INPUT_TYPES[t.kind]) for t in targets]
            + ([(DIMS_JSON, pa.string())] if self.schemaless else [])
            + ([(AUTO_JSON, pa.string())] if self.typed_discovery else [])
            + [(column, pa.bool_()) for column, _, _ in self.metric_filters]
            + [(value_kind_column(column), pa.int8()) for column in self.hashed_inputs]
            + [(PARTITION, pa.int32()), (OFFSET, pa.int64())])
        self._fast_schema = self._plan_fast_path()
        self._columnar = self._plan_columnar()
        self._problems: list[ServiceProblem] = []  # the current chunk's (`parse`)

    # ---------------------------------------------------------------------------------------- fast path

    def _plan_fast_path(self) -> pa.Schema | None:
        """The explicit schema for pyarrow's JSON reader, or None when this spec always decodes per record."""
        if (self.value_fmt.type != "json" or self.fmt.type == "kafka" or self.schemaless or self.typed_discovery
                or self.decoder.paths):
            return None
        ts_kind = self.ts_spec.format.lower()
        ts_type = pa.int64() if ts_kind in ("millis", "micro", "nano", "posix") else pa.string()
        fields: dict[str, pa.DataType] = {self.ts_spec.column: ts_type}
        transform_names = {name for name, _ in self.transforms}
        # transforms read the input's fields (one of their own name too); the filter reads transformed ones
        needed = {c for _, e in self.transforms for c in e.columns}
        needed |= self._filter_inputs() - transform_names
        for t in self.targets:
            typ = {"string": pa.string(), "long": pa.int64(), "float": pa.float64(), "double": pa.float64()}[t.kind]
            if t.source in transform_names:
                continue
            have = fields.get(t.source, typ)
            if have != typ:
                if pa.string() in (have, typ):
                    return None  # read as text and as a number: decode per record
                typ = pa.int64()  # long and double inputs: exact longs; a fractional value falls back
            fields[t.source] = typ
        if needed - set(fields) - {TIME}:
            return None  # columns of unknown type for transforms or the filter
        return pa.schema(list(fields.items()))

    def _plan_columnar(self) -> set[str] | None:
        """The input columns to ask of a decoder that reads a whole chunk into typed columns itself (`columns`:
        Avro, whose schema types them), or None when this spec decodes per record."""
        if self.fmt.type == "kafka" or self.schemaless or not hasattr(self.decoder, "columns"):
            return None
        transform_names = {name for name, _ in self.transforms}
        needed = {self.ts_spec.column} | {t.source for t in self.targets if t.source not in transform_names}
        needed |= {c for _, e in self.transforms for c in e.columns}
        return needed | self._filter_inputs()

    def _filter_inputs(self) -> set[str]:
        """The input columns transformSpec.filter and the filtered aggregators' filters read."""
        out = _filter_columns(self.spec.data_schema.transform_spec.filter)
        for _, _, raw in self.metric_filters:
            out |= _filter_columns(raw)
        return out

    def _decode_fast(self, chunk: RecordChunk, indexes: list[int]) -> dict[str, pa.Array] | None:
        assert self._fast_schema is not None
        values = chunk.values if len(indexes) == len(chunk.values) else [chunk.values[i] for i in indexes]
        data = b"\n".join(values)  # type: ignore[arg-type]
        if data.count(b"\n") != len(values) - 1:
            return None  # a record holds a newline (several rows, or pretty-printed JSON)
        if not data.startswith(b"{") or data.count(b"\n{") != len(values) - 1:
            # a record that does not start as an object (`null`, `[1]`, `42`, leading blanks): the per-record path
            # says why; pyarrow 26's reader even crashes the process on a first line `null`
            return None
        if not data.isascii():
            try:  # pyarrow's reader keeps bytes that are not UTF-8: the per-record path finds those records
                data.decode("utf-8")
            except UnicodeDecodeError:
                return None
        try:
            table = pa_json.read_json(
                io.BytesIO(data),
                read_options=pa_json.ReadOptions(use_threads=False, block_size=max(1 << 20, len(data) + 1)),
                parse_options=pa_json.ParseOptions(explicit_schema=self._fast_schema,
                                                   unexpected_field_behavior="ignore"))
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            return None
        if table.num_rows != len(indexes):
            return None
        return {name: table.column(name).combine_chunks() for name in table.column_names}

    # ---------------------------------------------------------------------------------------- entry point

    def parse(self, chunk: RecordChunk) -> ParsedChunk:
        """A chunk's records -> typed rows, in Druid's order: decode, timestamp, transforms, filter and the
        rejection window, typed columns. A bad record or row fails itself only, counted as Druid counts it."""
        self._problems = []
        p = _ChunkParse(chunk)
        self._decode(p, self._live_records(p))
        self._parse_timestamps(p)
        self._transform(p)
        mask, masks = self._filter(p)
        return self._typed_table(p, mask, masks)

    # ---------------------------------------------------------------------------------------- parse's steps

    def _live_records(self, p: _ChunkParse) -> list[int]:
        """1. The records that carry a row: a tombstone or an empty record is thrown away."""
        values = p.chunk.values
        if None not in values and b"" not in values:  # the usual case, checked without a Python loop
            live: list[int] = list(range(len(values)))
            p.stats.processed_bytes = sum(map(len, values))  # type: ignore[arg-type]
        else:
            live = []
            for i, v in enumerate(values):
                if v is None or v == b"":
                    p.stats.thrown_away += 1  # a tombstone or empty record carries no row
                    if self.keep_thrown_away:
                        p.rejections.append(Rejection(p.chunk.offsets[i], Outcome.THROWN_AWAY,
                                                      "a tombstone (null value)" if v is None else "an empty record"))
                else:
                    p.stats.processed_bytes += len(v)
                    live.append(i)
        if p.chunk.keys is not None:
            p.stats.processed_bytes += sum(len(k) for k in p.chunk.keys if k is not None)
        return live

    def _decode(self, p: _ChunkParse, live: list[int]) -> None:
        """2. The live records decoded into columns (Arrow at once where the format allows, else record by
        record), with the offset of the record each row came from."""
        chunk = p.chunk
        columns: dict[str, pa.Array] | None = None
        row_record: list[int] = live
        if self._fast_schema is not None and live:
            columns = self._decode_fast(chunk, live)
        elif self._columnar is not None and live:
            columns = self.decoder.columns(  # type: ignore[attr-defined]
                chunk.values if len(live) == len(chunk.values) else [chunk.values[i] for i in live], self._columnar)
        if columns is None:
            columns, row_record, p.rows, p.pyvalues = self._decode_slow(chunk, live, p.stats, p.exceptions,
                                                                         p.rejections)
        p.columns, p.n = columns, len(row_record)
        p.offsets = _offsets_array(chunk.offsets)
        one_row_each = (row_record is live and len(live) == len(chunk)) or row_record == list(range(len(chunk)))
        if not one_row_each:  # rows of other records than one each, in order (a count can match by chance)
            p.offsets = pc.take(p.offsets, pa.array(row_record, pa.int64()))

    def _parse_timestamps(self, p: _ChunkParse) -> None:
        """3. Each row's timestamp, epoch millis; a row without a usable one is unparseable."""
        ts_column = self.ts_spec.column
        ts_millis, bad_ts = self._timestamps(p.pyvalues.get(ts_column, p.columns.get(ts_column)), p.n)
        p.bad.update(bad_ts)
        p.columns[TIME] = ts_millis

    def _transform(self, p: _ChunkParse) -> None:
        """4. The transforms, as Druid's TransformedInputRow evaluates them: each on the row as parsed (a field of
        its own name too, `__time` the parsed timestamp), none on another's output; they may replace __time. A
        transform that fails fails its rows (Druid's Transformer throws a ParseException), never the chunk."""
        parsed = dict(p.columns)
        outputs = {name: self._per_row(lambda cols, m, e=expr: evaluate_to_array(e, cols, m), parsed, p.n, p.bad,
                                       p.chunk, p.offsets, f"transform {name!r} ({expr.text})", expr.columns,
                                       p.pyvalues, nested=True)
                   for name, expr in self.transforms}
        p.columns.update(outputs)
        p.raw_values = {k: v for k, v in p.pyvalues.items() if k not in outputs}  # mixed columns no transform replaced
        p.columns[TIME] = self._row_times(p.columns[TIME], p.n, p.bad)  # the filter reads the transformed time

    def _filter(self, p: _ChunkParse) -> tuple[pa.Array, dict[str, pa.Array]]:
        """5. The rows kept: the filter, then the late/early rejection window; each aggregator's filter as a mask
        column. The unparseable rows are reported here, once every step has had its say."""
        n, bad, time_col = p.n, p.bad, p.columns[TIME]
        mask = _keep_mask(n, bad)
        if self.filter is not None:
            flt = self.filter
            passed = self._per_row(lambda cols, m: flt(_as_text(cols), m), p.columns, n, bad, p.chunk, p.offsets,
                                   "transformSpec.filter", _filter_columns(self.spec.data_schema.transform_spec.filter),
                                   p.raw_values)
            if bad:
                mask = _keep_mask(n, bad)
            passed = pc.fill_null(passed, False)
            self._throw_away(pc.and_(mask, pc.invert(passed)), p.stats, p.rejections, p.offsets,
                             "thrown away by transformSpec.filter")
            mask = pc.and_(mask, passed)
        if self.min_time is not None or self.max_time is not None:
            window = pa.repeat(pa.scalar(True), n)
            if self.min_time is not None:
                window = pc.and_(window, pc.greater_equal(time_col, self.min_time))
            if self.max_time is not None:
                window = pc.and_(window, pc.less_equal(time_col, self.max_time))
            window = pc.fill_null(window, False)
            self._throw_away(pc.and_(mask, pc.invert(window)), p.stats, p.rejections, p.offsets,
                             "event time outside the message rejection window (late/earlyMessageRejection*)")
            mask = pc.and_(mask, window)
        masks: dict[str, pa.Array] = {}
        for column, metric_filter, raw_filter in self.metric_filters:
            name = column[len(filter_mask_column("")):]
            verdict = self._per_row(metric_filter, p.columns, n, bad, p.chunk, p.offsets,
                                    f"the filter of aggregator {name!r}", _filter_columns(raw_filter), p.raw_values)
            masks[column] = pc.fill_null(verdict, False)
        if masks and bad:
            mask = pc.and_(mask, _keep_mask(n, bad))
        for row in sorted(bad):
            self._exception(p.exceptions, p.rejections, p.stats, p.chunk, p.offsets, row, bad[row], unparseable=True)
        return mask, masks

    def _typed_table(self, p: _ChunkParse, mask: pa.Array, masks: dict[str, pa.Array]) -> ParsedChunk:
        """6. The typed output columns of the kept rows; a value that does not fit its column is a null and its
        row is processedWithError."""
        n, columns = p.n, p.columns
        transformed = {name for name, _ in self.transforms}
        with_error: dict[int, str] = {}
        out: dict[str, pa.Array] = {TIME: pc.cast(columns[TIME], TIME_TYPE)}
        for t in self.targets:
            source = (columns.get(t.source) if t.source in transformed
                      else p.pyvalues.get(t.source, columns.get(t.source)))
            out[t.column] = self._typed(t, source, n, with_error)
            if t.is_metric_input and t.column in self.hashed_inputs:
                out[value_kind_column(t.column)] = value_kinds(source, n)
        for column, params in self.sketch_inputs.items():
            out[column] = _checked_sketches(out[column], params, column, with_error)
        if self.schemaless:
            out[DIMS_JSON] = self._discovered(p.rows, columns, n)
        if self.typed_discovery:
            out[AUTO_JSON] = self._discovered_typed(p.rows, columns, with_error)
        out.update(masks)
        out[PARTITION] = pa.repeat(pa.scalar(p.chunk.partition, pa.int32()), n)
        out[OFFSET] = p.offsets
        table = pa.Table.from_pydict(out, schema=self.output_schema)
        if (pc.sum(mask).as_py() or 0) != n:  # a row was rejected (false or null)
            table = table.filter(mask)

        kept = mask.to_pylist() if with_error else []
        for row, message in sorted(with_error.items()):
            if kept[row]:
                self._exception(p.exceptions, p.rejections, p.stats, p.chunk, p.offsets, row, message,
                                unparseable=False)
        p.stats.processed += table.num_rows - sum(1 for row in with_error if kept[row])
        p.exceptions.sort(key=lambda e: e.offset)
        p.rejections.sort(key=lambda r: r.offset)
        return ParsedChunk(table, p.stats, p.exceptions[-max(self.max_saved, 1):], p.rejections, self._problems)

    # ---------------------------------------------------------------------------------------- pieces

    def _per_row(self, evaluate: Callable[[dict[str, pa.Array], int], pa.Array], columns: dict[str, pa.Array],
                 n: int, bad: dict[int, str], chunk: RecordChunk, offsets: pa.Array, what: str,
                 inputs: Any, raw_values: dict[str, list[Any]], nested: bool = False) -> pa.Array:
        """`evaluate(columns, n)` over the chunk, vectorized, such that each row gets the value it gets in a
        chunk of its own kind, whatever its neighbours:
        - an input column that mixes types in the chunk (text for the whole chunk) is evaluated per group of
          rows whose values have one type, each typed from its values (a number stays a number, and is not
          read as text because another record sent text there); with `nested` (transforms), a list is an
          array and an object a JSON value, as Druid's ExpressionTransform reads them, else they are text;
        - when an evaluation raises, its rows are halved and evaluated again until the rows at fault are found
          (a few evaluations per bad row); those rows are null and unparseable in `bad`."""
        mixed = sorted(set(inputs or ()) & raw_values.keys())
        if not mixed:
            try:
                return evaluate(columns, n)
            except Exception:  # noqa: BLE001 - any error of an expression fails its rows, not the job
                pass
        pieces: list[pa.Array] = []
        order: list[np.ndarray] = []

        def walk(rows: np.ndarray, part: dict[str, pa.Array]) -> None:
            for c in mixed:
                values = [raw_values[c][r] for r in rows]
                typed = _plain_array(values)
                if typed is None and nested:
                    typed = expression_input(values)
                if typed is not None:
                    part[c] = typed
            try:
                pieces.append(evaluate(part, len(rows)))
                order.append(rows)
                return
            except Exception as exc:  # noqa: BLE001 - see above
                if len(rows) == 1:
                    row = int(rows[0])
                    given = {c: _py(part[c][0]) for c in sorted(inputs or ()) if c in part}
                    bad.setdefault(row, f"{what} failed at {chunk.topic}/{chunk.partition} offset "
                                        f"{offsets[row].as_py()} on {given}: {type(exc).__name__}: {exc}")
                    pieces.append(pa.nulls(1))
                    order.append(rows)
                    return
            mid = len(rows) // 2
            walk(rows[:mid], {k: v.slice(0, mid) for k, v in part.items()})
            walk(rows[mid:], {k: v.slice(mid) for k, v in part.items()})

        groups = _type_groups([raw_values[c] for c in mixed], n) if mixed else [np.arange(n)]
        for rows in groups:
            walk(rows, dict(columns) if len(groups) == 1 else
                 {k: v.take(pa.array(rows)) for k, v in columns.items()})
        result = _concat(pieces)
        if len(groups) == 1:
            return result  # the halves came back in row order
        inverse = np.empty(n, dtype=np.int64)
        inverse[np.concatenate(order)] = np.arange(n)
        return result.take(pa.array(inverse))

    def _row_times(self, raw: pa.Array, n: int, bad: dict[int, str]) -> pa.Array:
        """Epoch millis of each row's `__time` (after the transforms); a row whose time is null, not a
        timestamp, or outside what a segment interval can hold (MIN_TIME_MS..MAX_TIME_MS) is unparseable."""
        if isinstance(raw, pa.ChunkedArray):
            raw = raw.combine_chunks()
        try:
            if pa.types.is_timestamp(raw.type):  # a transform's timestamp: milliseconds, finer digits dropped
                raw = pc.cast(raw, TIME_TYPE, safe=False)
            millis = pc.cast(raw, pa.int64())  # a fraction or a number past the long range: per value, below
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            values = []
            for v in raw.to_pylist():
                try:
                    values.append(_to_long_value(v))
                except (ValueError, TypeError, OverflowError):
                    values.append(None)
            millis = pa.array(values, pa.int64())
        valid = pc.fill_null(pc.and_(pc.greater_equal(millis, MIN_TIME_MS), pc.less(millis, MAX_TIME_MS)), False)
        if not pc.all(valid).as_py():
            for row in pc.indices_nonzero(pc.invert(valid)).to_pylist():
                if row not in bad:
                    value = raw[row].as_py()
                    why = "null" if value is None else "outside the times a segment interval can hold"
                    bad[row] = (f"Timestamp[{value}] is unparseable! (__time is {why}: [{MIN_DATETIME.isoformat()}, "
                                f"{MAX_DATETIME.isoformat()}); set by timestampSpec column {self.ts_spec.column!r}"
                                f"{' or a transform' if self.transforms else ''})")
        return millis

    def _throw_away(self, rows: pa.Array, stats: RowStats, rejections: list[Rejection], offsets: pa.Array,
                    why: str) -> None:
        thrown = pc.sum(rows).as_py() or 0
        stats.thrown_away += thrown
        if thrown and self.keep_thrown_away:
            for offset in pc.take(offsets, pc.indices_nonzero(rows)).to_pylist():
                rejections.append(Rejection(offset, Outcome.THROWN_AWAY, why))

    def _decode_slow(self, chunk: RecordChunk, live: Sequence[int], stats: RowStats,
                     exceptions: list[ParseExceptionRecord], rejections: list[Rejection]
                     ) -> tuple[dict[str, pa.Array], list[int], list[dict[str, Any]], dict[str, list[Any]]]:
        rows: list[dict[str, Any]] = []
        row_record: list[int] = []
        kafka = self.fmt.type == "kafka"
        for i in live:
            try:
                decoded = self.decoder.rows(chunk.values[i])  # type: ignore[arg-type]
                if kafka:
                    extra = self._kafka_columns(chunk, i)
                    decoded = [{**extra, **r} for r in decoded]  # the value's fields win
            except (ValueError, UnicodeError, csv.Error, RecursionError, TypeError) as exc:
                if isinstance(exc, ServiceUnavailableError):
                    ServiceProblem.merge(self._problems, [ServiceProblem(exc.service, exc.url, str(exc), 1)])
                preview = getattr(self.decoder, "preview", _preview)  # binary formats show hex
                self._exception(exceptions, rejections, stats, chunk, pa.array([chunk.offsets[i]], pa.int64()), 0,
                                f"Unable to parse row [{preview(chunk.values[i])}]: {exc}", unparseable=True)
                continue
            rows.extend(decoded)
            row_record.extend([i] * len(decoded))
        names: dict[str, None] = {}
        for r in rows:
            for k in r:
                names.setdefault(k, None)
        columns: dict[str, pa.Array] = {}
        pyvalues: dict[str, list[Any]] = {}
        for name in names:
            values = [r.get(name) for r in rows]
            arr = _plain_array(values)
            if arr is None:  # mixed or nested: text for transforms and filters, values for typing
                pyvalues[name] = values
                arr = pa.array([_to_string_value(v, "sorted_array") for v in values], pa.string())
            columns[name] = arr
        return columns, row_record, rows, pyvalues

    def _kafka_columns(self, chunk: RecordChunk, i: int) -> dict[str, Any]:
        fmt = self.fmt
        out: dict[str, Any] = {fmt.topic_column_name: chunk.topic}
        if chunk.timestamps is not None:
            out[fmt.timestamp_column_name] = chunk.timestamps[i]
        key = chunk.keys[i] if chunk.keys is not None else None
        if key is not None:
            if self.key_decoder is not None:
                key_rows = self.key_decoder.rows(key)
                first = next(iter(key_rows[0].values()), None) if key_rows and key_rows[0] else None
                out[fmt.key_column_name] = first
            else:
                out[fmt.key_column_name] = key.decode("utf-8", errors="replace")
        headers = chunk.headers[i] if chunk.headers is not None else None
        encoding = str((fmt.header_format or {}).get("encoding", "UTF-8"))
        for name, value in headers or ():
            out[fmt.header_column_prefix + name] = value.decode(encoding, errors="replace") if value is not None else None
        return out

    def _timestamps(self, raw: Any, n: int) -> tuple[pa.Array, list[tuple[int, str]]]:
        """Epoch millis per row (null where unreadable) and the rows that could not be read."""
        if raw is None:
            raw = pa.nulls(n)
        fmt = self.ts_spec.format.lower()
        fast: pa.Array | None = None
        values = raw if isinstance(raw, list) else None
        try:
            if values is None and (raw.null_count == 0 or self.missing_ts is None):
                if pa.types.is_string(raw.type) and fmt in ("iso", "auto"):
                    # via nanoseconds, so finer fractions than milliseconds truncate as Druid does
                    nanos = pc.cast(raw, pa.timestamp("ns", tz="UTC"))
                    fast = pc.cast(pc.cast(nanos, TIME_TYPE, safe=False), pa.int64())
                elif pa.types.is_integer(raw.type) and fmt in ("millis", "auto"):
                    fast = pc.cast(raw, pa.int64())
                elif pa.types.is_integer(raw.type) and fmt == "posix":
                    fast = pc.multiply_checked(pc.cast(raw, pa.int64()), 1000)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            fast = None
        if fast is not None and fast.null_count == 0:
            return fast, []
        bad: list[tuple[int, str]] = []
        out: list[int | None] = []
        for row, value in enumerate(values if values is not None else raw.to_pylist()):
            if value is None and self.missing_ts is not None:
                out.append(self.missing_ts)
                continue
            try:
                if value is None:
                    raise ValueError("missing")
                millis = self.parse_ts(value)
                if not MIN_TIME_MS <= millis < MAX_TIME_MS:
                    raise ValueError(f"outside the times a segment can hold: [{MIN_DATETIME.isoformat()}, "
                                     f"{MAX_DATETIME.isoformat()})")
                out.append(millis)
            except (ValueError, TypeError, OverflowError, ArithmeticError) as exc:
                out.append(None)
                bad.append((row, f"Timestamp[{value}] is unparseable! (timestampSpec column "
                                 f"{self.ts_spec.column!r}, format {self.ts_spec.format!r}: {exc})"))
        return pa.array(out, pa.int64()), bad

    def _typed(self, t: Target, raw: Any, n: int, with_error: dict[int, str]) -> pa.Array:
        target_type = DIM_TYPES[t.kind] if not t.is_metric_input else METRIC_INPUT_TYPES[t.kind]
        if raw is None:
            return pa.nulls(n, target_type)
        what = "metric input" if t.is_metric_input else "dimension"
        raw_values = raw if isinstance(raw, list) else None
        if raw_values is None:
            if isinstance(raw, pa.ChunkedArray):
                raw = raw.combine_chunks()
            if t.kind == "string":
                if raw.type == target_type:
                    return raw
                if pa.types.is_integer(raw.type) or pa.types.is_string(raw.type):
                    return pc.cast(raw, pa.string())
            elif pa.types.is_integer(raw.type) or pa.types.is_floating(raw.type) or pa.types.is_null(raw.type):
                typed = _numeric(t, raw, target_type, with_error, what)
                if typed is not None:
                    return typed
        if t.kind == "string":
            multi = self.multi_value.get(t.source, "sorted_array")
            return pa.array([_to_string_value(v, multi) for v in (raw_values or raw.to_pylist())], pa.string())
        convert = _CONVERTERS[t.kind]
        values: list[Any] = []
        for row, v in enumerate(raw_values if raw_values is not None else raw.to_pylist()):
            try:
                values.append(convert(v))
            except (ValueError, TypeError, OverflowError) as exc:
                values.append(None)
                with_error.setdefault(row, f"could not convert value [{_short(v)}] to {t.kind} for {what} "
                                           f"'{t.source}' ({exc}); stored as null")
        return pa.array(values, target_type)

    def _discovered(self, rows: list[dict[str, Any]], columns: dict[str, Any], n: int) -> pa.Array:
        """DIMS_JSON: each row's discovered fields as strings. As Druid's field discovery: not objects nor lists
        holding objects or lists; a null only with `keepNullColumns` (then the field is a column, of nulls if
        need be). A transform of an input field's name gives its value; one of a new name is discovered too
        when it is not null (Druid leaves it out: apache/druid#7952)."""
        transformed = {name: columns[name].to_pylist() for name, _ in self.transforms if name not in self.excluded}
        out = []
        for i, r in enumerate(rows):
            dims = {k: _to_string_value(transformed[k][i] if k in transformed else v, "sorted_array")
                    for k, v in r.items()
                    if k not in self.excluded and (v is not None or self.keep_nulls) and _flat(v)}
            for name, values in transformed.items():
                if name not in r and values[i] is not None:
                    dims[name] = _to_string_value(values[i], "sorted_array")
            out.append(json_text(dims))
        return pa.array(out, pa.string())

    def is_discovered(self, name: str) -> bool:
        """Whether type-aware discovery ingests field `name`."""
        known = self._discoverable.get(name)
        if known is None:
            known = self._discoverable[name] = (self.discover_all and name not in self.excluded
                                                and not name.startswith("__"))  # `__`: our own columns
        return known

    def _discovered_typed(self, rows: list[dict[str, Any]], columns: dict[str, Any],
                          with_error: dict[int, str]) -> pa.Array:
        """AUTO_JSON: each row's discovered fields with their values (`core.column_types.canonical`); a value
        that cannot be kept (a number that is not finite) is null and its row processedWithError."""
        transformed = {name: (columns[name].to_pylist() if hasattr(columns[name], "to_pylist") else columns[name])
                       for name, _ in self.transforms if self.is_discovered(name)}
        out = []
        for i, r in enumerate(rows):
            found: dict[str, Any] = {}
            for name, value in r.items():
                if name not in transformed and self.is_discovered(name):
                    found[name] = value
            for name, values in transformed.items():
                found[name] = values[i]
            for name, value in found.items():
                try:
                    found[name] = canonical(value)
                except ValueError as exc:
                    found[name] = None
                    with_error.setdefault(i, f"could not ingest value [{_short(value)}] of discovered dimension "
                                             f"'{name}' ({exc}); stored as null")
            out.append(found)
        return encode(out)

    def _exception(self, exceptions: list[ParseExceptionRecord], rejections: list[Rejection], stats: RowStats,
                   chunk: RecordChunk,
                   offsets: pa.Array, row: int, message: str, *, unparseable: bool) -> None:
        offset = int(offsets[row].as_py())
        message = _printable(message)
        if unparseable:
            stats.unparseable += 1
        else:
            stats.processed_with_error += 1
        record = ParseExceptionRecord(chunk.topic, chunk.partition, offset, message, unparseable)
        rejections.append(Rejection(offset, Outcome.UNPARSEABLE if unparseable else Outcome.PROCESSED_WITH_ERROR,
                                    message))
        if self.log_parse_exceptions:
            log.warning("parse exception: %s", record.describe())
        # keep at least the last one, so an exceeded limit can name it even when none are saved
        keep = max(self.max_saved, 1)
        exceptions.append(record)
        if len(exceptions) > keep * 2:
            del exceptions[:-keep]


def discovers_strings(dimensions_spec: DimensionsSpec) -> bool:
    """Whether a spec discovers string dimensions (DIMS_JSON): none listed (schemaless) or includeAllDimensions,
    and no type-aware discovery (`useSchemaDiscovery`, `type: auto`), which types what it discovers instead."""
    return ((not dimensions_spec.dimensions or dimensions_spec.include_all_dimensions)
            and not discovery.type_aware(dimensions_spec))


def _flat(value: Any) -> bool:
    """Whether field discovery takes a value: not an object, nor a list holding objects or lists."""
    if isinstance(value, dict):
        return False
    return not isinstance(value, list) or not any(isinstance(v, (dict, list)) for v in value)


def _offsets_array(offsets: Sequence[int]) -> pa.Array:
    """A chunk's offsets as an array; a contiguous run (the consumer passes a range) without a Python loop."""
    if isinstance(offsets, range):
        return pa.array(np.arange(offsets.start, offsets.stop, offsets.step, dtype=np.int64))
    return pa.array(offsets, pa.int64())


def _preview(value: bytes | None, limit: int = 200) -> str:
    text = (value or b"").decode("utf-8", errors="replace")
    return text if len(text) <= limit else text[:limit] + "..."


def _printable(text: str) -> str:
    """`text` as the store can keep it: PostgreSQL text holds no NUL, UTF-8 no lone surrogate."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")


def _short(value: Any, limit: int = 200) -> str:
    text = str(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _py(value: Any) -> Any:
    v = value.as_py()
    return _short(v) if isinstance(v, (str, bytes, list, dict)) else v


def _type_groups(columns: list[list[Any]], n: int) -> list[np.ndarray]:
    """Row numbers grouped by the types of their values in `columns` (mixed columns as decoded), in row order
    within each group. A null joins the first group that agrees on the other columns: a column of numbers
    with nulls is still numbers."""
    def kind(v: Any) -> str | None:
        if v is None:
            return None
        if isinstance(v, int) and not isinstance(v, bool):
            return "int" if LONG_MIN <= v <= LONG_MAX else "big"
        if isinstance(v, list):  # a list's type is its elements' (an array's element type)
            return "list[" + ",".join(sorted({str(kind(x)) for x in v if x is not None})) + "]"
        return type(v).__name__

    keys = [tuple(kind(col[row]) for col in columns) for row in range(n)]
    full = list(dict.fromkeys(k for k in keys if None not in k))
    groups: dict[tuple, list[int]] = {k: [] for k in full}
    for row, key in enumerate(keys):
        if None in key:
            key = next((f for f in full if all(a is None or a == b for a, b in zip(key, f))), key)
        groups.setdefault(key, []).append(row)
    return [np.array(rows, dtype=np.int64) for rows in groups.values() if rows]


def _keep_mask(n: int, bad: dict[int, str]) -> pa.Array:
    """True for the rows not in `bad`."""
    if not bad:
        return pa.repeat(pa.scalar(True), n)
    keep = np.ones(n, dtype=bool)
    keep[list(bad)] = False
    return pa.array(keep)


def _concat(pieces: list[pa.Array]) -> pa.Array:
    """Arrays evaluated on consecutive slices as one array: one type for all (a slice of nulls only, or of
    whole numbers only, may have evaluated to a narrower type)."""
    pieces = [p.combine_chunks() if isinstance(p, pa.ChunkedArray) else p for p in pieces]
    types = {p.type for p in pieces if not pa.types.is_null(p.type)}
    if any(pa.types.is_list(t) or isinstance(t, pa.ExtensionType) for t in types):
        return concat_arrays(pieces)  # arrays or JSON values: their common expression type
    if not types:
        return pa.concat_arrays(pieces) if len(pieces) > 1 else pieces[0]
    if len(types) == 1:
        target = types.pop()
    elif all(pa.types.is_integer(t) or pa.types.is_floating(t) for t in types):
        target = pa.float64() if any(pa.types.is_floating(t) for t in types) else pa.int64()
    else:
        target = pa.string()
    return pa.concat_arrays([p if p.type == target else pc.cast(p, target) for p in pieces])


def _numeric(t: Target, raw: pa.Array, target_type: pa.DataType, with_error: dict[int, str],
             what: str) -> pa.Array | None:
    """A numeric array as the target's type, vectorized: floats past the long range (or float32's), NaN and
    infinities are null and listed in `with_error`, never wrapped or made infinite. None: take the per-value
    path (an unsigned value past the long range)."""
    if pa.types.is_null(raw.type):
        return pa.nulls(len(raw), target_type)
    if pa.types.is_integer(raw.type):
        if t.kind != "long":
            return pc.cast(raw, target_type, safe=False)  # the nearest double (float), as Druid stores it
        try:
            return pc.cast(raw, pa.int64())
        except pa.ArrowInvalid:
            return None
    if t.kind == "long":
        ok = pc.and_(pc.greater_equal(raw, -(2.0 ** 63)), pc.less(raw, 2.0 ** 63))  # NaN compares false
    elif t.kind == "float":
        ok = pc.less_equal(pc.abs(raw), FLOAT_MAX)
    else:
        ok = pc.is_finite(raw)
    wrong = pc.invert(pc.fill_null(ok, True))
    if pc.any(wrong).as_py():
        for row in pc.indices_nonzero(wrong).to_pylist():
            with_error.setdefault(row, f"could not convert value [{raw[row].as_py()!r}] to {t.kind} for {what} "
                                       f"'{t.source}' (outside the {t.kind} range, or not a finite number); "
                                       "stored as null")
        raw = pc.if_else(ok, raw, pa.scalar(None, raw.type))
    if t.kind == "long":
        return pc.cast(pc.trunc(raw), pa.int64(), safe=False)  # in range: truncated like Druid's (long) cast
    return raw if raw.type == target_type else pc.cast(raw, target_type, safe=False)


def _as_text(columns: dict[str, pa.Array]) -> dict[str, pa.Array]:
    """Columns for the filter: a transform's array or JSON result as the text its dimension stores (the filter
    reads input lists and objects as that text too)."""
    nested = [k for k, v in columns.items() if pa.types.is_list(v.type) or isinstance(v.type, pa.ExtensionType)]
    if not nested:
        return columns
    return {**columns, **{k: pa.array([_to_string_value(x, "sorted_array") for x in columns[k].to_pylist()],
                                      pa.string()) for k in nested}}


def _plain_array(values: list[Any]) -> pa.Array | None:
    """The decoded values as a flat pyarrow array, or None when they mix types or nest."""
    try:
        arr = pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        return None
    if pa.types.is_struct(arr.type) or pa.types.is_list(arr.type) or pa.types.is_boolean(arr.type):
        return None
    return arr


def value_kinds(raw: Any, n: int) -> pa.Array:
    """Each value's kind (`core.aggregators`: TEXT, LONG, DOUBLE, LIST) as Druid's parser would type it: a
    JSON (or Avro, ...) integer is a long, a decimal a double, a list of several values a multi-value."""
    if raw is None:
        return pa.array(np.zeros(n, dtype=np.int8))
    if not isinstance(raw, list):
        if isinstance(raw, pa.ChunkedArray):
            raw = raw.combine_chunks()
        kind = LONG if pa.types.is_integer(raw.type) else DOUBLE if pa.types.is_floating(raw.type) else TEXT
        return pa.array(np.full(n, kind, dtype=np.int8))

    def kind(v: Any) -> int:
        if isinstance(v, bool):
            return TEXT
        if isinstance(v, int):
            return LONG
        if isinstance(v, float):
            return DOUBLE
        if isinstance(v, list) and sum(x is not None for x in v) > 1:
            return LIST
        return TEXT
    return pa.array([kind(v) for v in raw], pa.int8())


def _checked_sketches(values: pa.Array, params: Any, column: str, with_error: dict[int, str]) -> pa.Array:
    """Input sketches (base64 text) that DataSketches reads; any other value is null and its row
    processedWithError, as Druid's parse exception for a sketch it cannot read."""
    out = values.to_pylist()
    for row, text in enumerate(out):
        if text is None:
            continue
        try:
            input_sketch_bytes(params, text)
        except ValueError as exc:
            out[row] = None
            with_error.setdefault(row, f"could not read a sketch from [{_short(text)}] for metric input "
                                       f"'{column.split('_', 4)[-1]}': {exc}; stored as null")
    return pa.array(out, pa.string())


def _filter_columns(spec: Any) -> set[str]:
    out: set[str] = set()
    if isinstance(spec, dict):
        for key in ("dimension", "column"):
            if isinstance(spec.get(key), str):
                out.add(spec[key])
        for f in spec.get("fields") or []:
            out |= _filter_columns(f)
        if spec.get("field"):
            out |= _filter_columns(spec["field"])
    return out


def _message_time_window(spec: DatasourceSpec, created_at: datetime) -> tuple[int | None, int | None]:
    """Druid's message rejection window, in epoch millis, relative to the task group's creation time:
    rows before `lateMessageRejectionStartDateTime` (or creation - lateMessageRejectionPeriod) and rows after
    creation + taskDuration + earlyMessageRejectionPeriod are thrown away."""
    io = spec.io_config
    lo = hi = None
    if io.late_message_rejection_start_date_time is not None:
        lo = io.late_message_rejection_start_date_time
    elif io.late_message_rejection_period is not None:
        lo = io.late_message_rejection_period.subtract_from(created_at)
    if io.early_message_rejection_period is not None:
        hi = io.early_message_rejection_period.add_to(io.task_duration.add_to(created_at))

    def ms(d: datetime | None) -> int | None:
        return None if d is None else int((d - datetime(1970, 1, 1, tzinfo=d.tzinfo)) / timedelta(milliseconds=1))
    return ms(lo), ms(hi)
