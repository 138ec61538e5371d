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
import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ingest_core.core.column_types import canonical
from ingest_core.core.spec import DatasourceSpec, DimensionsSpec
from ingest_core.executor import discovery
from ingest_core.executor.discovery import AUTO_JSON, encode
from ingest_core.executor.expression.evaluator import compile_expression, evaluate_to_array
from ingest_core.executor.filters import compile_filter
from ingest_core.executor.formats.base import json_text
from ingest_core.executor.formats.decoders import decoder_for
from ingest_core.executor.formats.json_columns import json_columns
from ingest_core.executor.row_evaluation import per_row
from ingest_core.executor.row_times import TIME_TYPE, RowTimes, message_time_window
from ingest_core.executor.row_values import (
    DIM_TYPES,
    METRIC_INPUT_TYPES,
    Target,
    as_text,
    checked_inputs,
    is_flat,
    plain_array,
    short,
    to_string_value,
    typed_column,
    value_kinds,
)
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

    @property
    def source(self) -> str:
        return f"{self.chunk.topic}/{self.chunk.partition}"


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
        self.times = RowTimes(spec)
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
        # serialized inputs (isInputThetaSketch, HLLSketchMerge, a variance collector): checked per row, a bad
        # one is null
        self.serialized_inputs = {metric_input_column(f, "string"): a.serialized_input for a in schema.metrics_spec
                                  if a.serialized_input is not None for f in a.input_fields}
        # hashed sketch inputs: each value's kind beside its text, so a sketch hashes it as Druid would
        self.hashed_inputs = sorted({metric_input_column(f, "string") for a in schema.metrics_spec
                                     if a.hashes_typed_values for f in a.input_fields})
        # filtered aggregators: each filter's verdict per row, a boolean column the rollup reads
        self.metric_filters = [(filter_mask_column(a.name), compile_filter(a.filter), a.filter)
                               for a in schema.metrics_spec if a.is_filtered]

        self.min_time, self.max_time = message_time_window(spec, created_at)
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
        values = chunk.values if len(live) == len(chunk.values) else [chunk.values[i] for i in live]
        if self._fast_schema is not None and live:
            columns = json_columns(values, self._fast_schema)
        elif self._columnar is not None and live:
            columns = self.decoder.columns(values, self._columnar)  # type: ignore[attr-defined]
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
        ts_millis, bad_ts = self.times.read(p.pyvalues.get(ts_column, p.columns.get(ts_column)), p.n)
        p.bad.update(bad_ts)
        p.columns[TIME] = ts_millis

    def _transform(self, p: _ChunkParse) -> None:
        """4. The transforms, as Druid's TransformedInputRow evaluates them: each on the row as parsed (a field of
        its own name too, `__time` the parsed timestamp), none on another's output; they may replace __time. A
        transform that fails fails its rows (Druid's Transformer throws a ParseException), never the chunk."""
        parsed = dict(p.columns)
        outputs = {name: per_row(lambda cols, m, e=expr: evaluate_to_array(e, cols, m), parsed, p.n, p.bad,
                                 p.source, p.offsets, f"transform {name!r} ({expr.text})", expr.columns,
                                 p.pyvalues, nested=True)
                   for name, expr in self.transforms}
        p.columns.update(outputs)
        p.raw_values = {k: v for k, v in p.pyvalues.items() if k not in outputs}  # mixed columns no transform replaced
        p.columns[TIME] = self.times.check(p.columns[TIME], p.n, p.bad)  # the filter reads the transformed time

    def _filter(self, p: _ChunkParse) -> tuple[pa.Array, dict[str, pa.Array]]:
        """5. The rows kept: the filter, then the late/early rejection window; each aggregator's filter as a mask
        column. The unparseable rows are reported here, once every step has had its say."""
        n, bad, time_col = p.n, p.bad, p.columns[TIME]
        mask = _keep_mask(n, bad)
        if self.filter is not None:
            flt = self.filter
            passed = per_row(lambda cols, m: flt(as_text(cols), m), p.columns, n, bad, p.source, p.offsets,
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
            verdict = per_row(metric_filter, p.columns, n, bad, p.source, p.offsets,
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
            out[t.column] = typed_column(t, source, n, with_error, self.multi_value.get(t.source, "sorted_array"))
            if t.is_metric_input and t.column in self.hashed_inputs:
                out[value_kind_column(t.column)] = value_kinds(source, n)
        for column, serialized in self.serialized_inputs.items():
            out[column] = checked_inputs(out[column], serialized, column, with_error)
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
            arr = plain_array(values)
            if arr is None:  # mixed or nested: text for transforms and filters, values for typing
                pyvalues[name] = values
                arr = pa.array([to_string_value(v, "sorted_array") for v in values], pa.string())
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

    def _discovered(self, rows: list[dict[str, Any]], columns: dict[str, Any], n: int) -> pa.Array:
        """DIMS_JSON: each row's discovered fields as strings. As Druid's field discovery: not objects nor lists
        holding objects or lists; a null only with `keepNullColumns` (then the field is a column, of nulls if
        need be). A transform of an input field's name gives its value; one of a new name is discovered too
        when it is not null (Druid leaves it out: apache/druid#7952)."""
        transformed = {name: columns[name].to_pylist() for name, _ in self.transforms if name not in self.excluded}
        out = []
        for i, r in enumerate(rows):
            dims = {k: to_string_value(transformed[k][i] if k in transformed else v, "sorted_array")
                    for k, v in r.items()
                    if k not in self.excluded and (v is not None or self.keep_nulls) and is_flat(v)}
            for name, values in transformed.items():
                if name not in r and values[i] is not None:
                    dims[name] = to_string_value(values[i], "sorted_array")
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
                    with_error.setdefault(i, f"could not ingest value [{short(value)}] of discovered dimension "
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


def _keep_mask(n: int, bad: dict[int, str]) -> pa.Array:
    """True for the rows not in `bad`."""
    if not bad:
        return pa.repeat(pa.scalar(True), n)
    keep = np.ones(n, dtype=bool)
    keep[list(bad)] = False
    return pa.array(keep)


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

