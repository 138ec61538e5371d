"""The bounded Spark ingest job: one task group of one run, Kafka offsets -> Parquet segments + a report.

    spark-submit spark_jobs/ingest_job.py --input GROUP_INPUT [--group N] [--replica R] [--output URI]

GROUP_INPUT is the task group's input as the plan step staged it (`handover.job_input.GroupInput`: its offset
ranges and splits, the staged spec); the job reads that and nothing of the other groups (`spark.job_args`). It
reads exactly the group's offset ranges (one Spark task per split), parses, filters and rolls up the rows, and
writes one Parquet file per segment: per segmentGranularity interval, in files (shards) of at most
maxRowsPerSegment rows, each sorted by time. The group's report (row stats, parse exceptions, segments with
their rows, bytes, time range, columns and offset ranges) goes to <output>/attempt=<id>/report.json and its path
is printed as the last line of stdout. Every attempt writes a new folder and deletes nothing: a retry or a
re-executed task never touches a published segment. Its Spark settings: `spark.settings`; why it failed, as its
report keeps it: `spark.job_errors`.

It never touches committed offsets or the metadata store: the publisher alone makes segments visible.
Exit codes: 0 success, 2 bad input (its group input, spec), 3 the group failed (report written, state FAILED).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from datetime import datetime, timezone
from functools import partial
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql.pandas.types import from_arrow_schema

from ingest_core.core.aggregators import SKETCH_OPS
from ingest_core.core.defaults import ONE_TASK_MAX_RECORDS, STALL_TIMEOUT_S
from ingest_core.core.errors import IngestError, ObjectStoreUnavailableError
from ingest_core.core.offsets import check_planned_topic_ids
from ingest_core.core.planner import TaskGroup
from ingest_core.core.spec import DatasourceSpec
from ingest_core.executor import buckets, discovery
from ingest_core.executor.formats.protobuf_descriptors import inline_descriptors
from ingest_core.executor.rollup import (
    FIRST_OFFSET,
    FIRST_TIME,
    LAST_OFFSET,
    LAST_TIME,
    aggregators,
    filtered_order_columns,
    long_sum_columns,
)
from ingest_core.executor.row_parser import DIMS_JSON, PARTITION, TIME, discovers_strings
from ingest_core.executor.sketches import merge_batches
from ingest_core.handover import deep_storage, object_store
from ingest_core.handover.report import (
    GroupFailure,
    GroupReport,
    GroupState,
    ParseExceptionLimitError,
    SplitReport,
    StagedSegment,
    latest_split_reports,
    limit_exceeded_message,
)
from ingest_core.kafka.config import KafkaClientConfig
from ingest_core.kafka.offset_reader import KafkaOffsetReader
from ingest_core.handover.job_input import BadJobInput
from ingest_core.spark.job_args import GroupJob, argument_parser, job_input, load_job
from ingest_core.spark.job_errors import job_error
from ingest_core.spark.kafka_source import (
    BUCKET,
    SEGMENT,
    ReadJob,
    SplitsReader,
    output_arrow_schema,
    split_parser,
)
from ingest_core.spark.settings import spark_session_builder, sql_settings, submitted_conf

log = logging.getLogger("ingest_core.spark.job")

def sql_functions(df: Any) -> Any:
    """Spark's functions for `df`'s kind of session. `pyspark.sql.functions` builds classic or Spark Connect
    columns by the process's environment, not by the session, and a process may hold both (the tests)."""
    from pyspark.sql.connect.dataframe import DataFrame as ConnectDataFrame

    if isinstance(df, ConnectDataFrame):
        from pyspark.sql.connect import functions as F
    else:
        from pyspark.sql import functions as F
    return F


def col(F: Any, name: str) -> Any:
    """A column by its exact name: Druid's default names hold dots (`kafka.key`), which Spark would read as
    struct access."""
    return F.col("`" + name.replace("`", "``") + "`")


def run_group(spark: Any, job: GroupJob, stall_timeout_s: float = STALL_TIMEOUT_S) -> GroupReport:
    """Run one task group; returns its report (state SUCCESS) or raises, after writing a FAILED report."""
    spec, group = job.spec, job.group
    started, started_at = time.monotonic(), time.time()
    report = GroupReport.merge(spec.datasource, job.run_id, job.group_id, job.replica, [],
                               spec.tuning_config.effective_max_saved_parse_exceptions)
    try:
        if not group.is_empty:
            report = _ingest(spark, job, stall_timeout_s)
            _check_topic_ids(job)
            report.marks = {"started": started_at, **report.marks, "ended": time.time()}
    except ObjectStoreUnavailableError:  # no report can be written where the store does not answer or refuses
        raise
    except Exception as exc:
        error, error_class = job_error(exc, job.attempt_uri)
        report = failed_report(job, error, error_class)
        report.seconds = time.monotonic() - started
        deep_storage.write_json(deep_storage.join(job.attempt_uri, "report.json"), report.to_json())
        if error is exc:
            raise
        raise error from exc
    report.seconds = time.monotonic() - started
    deep_storage.write_json(deep_storage.join(job.attempt_uri, "report.json"), report.to_json())
    return report


def _check_topic_ids(job: GroupJob) -> None:
    """After the read: a topic deleted and re-created since the run was planned was read from another log (its
    offsets name other records). Kafka never gives an id twice, so the planned id still there now means the
    planned topic was there throughout the read."""
    topics = {p.tp.topic for p in job.group.partitions if p.tp.topic in job.input.topic_ids}
    if not topics:
        return  # planned before topic ids were
    reader = KafkaOffsetReader.for_spec(job.spec)
    try:
        now = reader.topic_ids(topics)
    finally:
        reader.close()
    check_planned_topic_ids(job.spec.datasource, job.run_id, {t: job.input.topic_ids[t] for t in topics}, now)


def failed_report(job: GroupJob, error: IngestError, error_class: str) -> GroupReport:
    """The FAILED report of an attempt: why (typed: `GroupFailure`, with the error's code and `error_class`, the
    name of the exception type that stopped it), which offset ranges, and what its splits had read (their last
    reports: a split stopped by maxParseExceptions leaves its count and last exception)."""
    spec = job.spec
    splits, _ = latest_split_reports(job.attempt_uri)
    max_saved = spec.tuning_config.effective_max_saved_parse_exceptions
    report = GroupReport.merge(spec.datasource, job.run_id, job.group_id, job.replica, splits.values(),
                               max(max_saved, 1))  # the last exception is kept even with maxSaved 0
    last = report.saved_exceptions[-1] if report.saved_exceptions else None
    report.saved_exceptions = report.saved_exceptions[-max_saved:] if max_saved else []
    limit = spec.tuning_config.effective_max_parse_exceptions
    stopped = error.code == ParseExceptionLimitError.code
    report.state, report.error = GroupState.FAILED, str(error)
    report.failure = GroupFailure(error.code, error_class, str(error), tuple(p.range for p in job.group.partitions),
                                  limit if stopped else None, report.stats.parse_exceptions if stopped else None,
                                  last if stopped else None)
    return report


def read_splits(spark: Any, job: ReadJob, consumer_properties: dict[str, Any], input_format: dict | None = None,
                deep_storage_access: dict | None = None, tasks: int | None = None) -> Any:
    """The group's rows, one Spark task per split (or `tasks` tasks): a range of one row per split in as many
    partitions, each task reading the splits its rows name (`kafka_source.SplitsReader`, in `mapInArrow`). The
    schema is computed here, so Spark asks no Python worker before the tasks run; the secrets ride in the
    reader (see `kafka_source`), never in a plan's text."""
    n = len(job.splits)
    schema = from_arrow_schema(output_arrow_schema(split_parser(job)))
    reader = SplitsReader(job, consumer_properties, input_format, deep_storage_access)
    return spark.range(0, n, 1, tasks or n).mapInArrow(reader, schema)


def read_tasks(group: TaskGroup) -> int:
    """How many Spark tasks read the group: one per split, but one for a small group, whatever its splits
    (`minSplitsPerGroup` asks for parallel reads of big partitions): Spark then sees a single partition and rolls
    it up without a shuffle, one stage instead of two, and one task reads that much in about a stage's time."""
    return 1 if group.records <= ONE_TASK_MAX_RECORDS else len(group.splits)


def _ingest(spark: Any, job: GroupJob, stall_timeout_s: float) -> GroupReport:
    spec, group = job.spec, job.group
    kafka = KafkaClientConfig.from_properties(spec.io_config.consumer_properties)
    # a protobuf descriptor file travels with the job: the executors need no access to its path
    read_job = ReadJob(
        spec=inline_descriptors(spec), created_at=job.input.created_at, splits=group.splits, output_uri=job.attempt_uri,
        poll_timeout_s=max(spec.io_config.poll_timeout, 100) / 1000 * 10, stall_timeout_s=stall_timeout_s,
        batch_records=spec.tuning_config.max_records_per_poll or ReadJob.batch_records,
        progress_interval_s=job.progress_interval_s)
    input_format = spec.io_config.input_format
    deep_storage.reach(job.attempt_uri)  # a store that refuses the keys or is down: one line now, not Spark's retries
    access = object_store.use_in_spark(spark, job.attempt_uri)
    # the splits' consumers add the defaults (isolation.level, ...): KafkaClientConfig.consumer; the job's spec
    # has the schema registry's credentials redacted
    rows = read_splits(spark, read_job, dict(kafka.properties),
                       input_format._to_raw(redact=False) if input_format.has_literal_secrets else None,
                       access.to_json() if access is not None else None, read_tasks(group))
    types: dict[str, str] = {}
    if discovery.type_aware(spec.data_schema.dimensions_spec):
        rows = rows.persist()
        typed, dims, types = discover(rows, spec)
        rolled, dims, metrics = rollup(typed, spec, dims)
    else:
        rolled, dims, metrics = rollup(rows, spec)
        if DIMS_JSON in dims:
            rolled, dims = _expand_discovered(rolled, dims)
    F = sql_functions(rows)
    out = rolled.select(SEGMENT, TIME, *[col(F, c) for c in dims + metrics])
    # Each Spark task writes its rows of an interval as time-sorted files of at most maxRowsPerSegment rows:
    # Druid's dynamic partitioning (segments fill up as rows come), with no extra shuffle. The attempt's
    # folder is new: Spark must not delete anything ("error", i.e. error-if-exists: the one spelling Spark
    # Connect knows too; never "overwrite").
    write_started = time.time()
    (out.sortWithinPartitions(SEGMENT, TIME, *[col(F, d) for d in dims])
     .write.mode("error").option("maxRecordsPerFile", spec.tuning_config.max_rows_per_segment)
     .partitionBy(SEGMENT).parquet(object_store.spark_uri(access, deep_storage.join(job.attempt_uri, "segments"))))
    write_ended = time.time()
    if types:
        rows.unpersist()  # a Spark Connect session outlives the job

    splits = [SplitReport.from_json(deep_storage.read_json(deep_storage.to_uri(job.attempt_uri, f.path)))
              for f in deep_storage.list_files(deep_storage.join(job.attempt_uri, "splits"), ".json")]
    report = GroupReport.merge(spec.datasource, job.run_id, job.group_id, job.replica, splits,
                               spec.tuning_config.effective_max_saved_parse_exceptions)
    missing = {s.index for s in splits} ^ set(range(len(group.splits)))
    if missing:
        raise IngestError(f"split reports missing for splits {sorted(missing)}: the job output at "
                          f"{job.attempt_uri} is incomplete")
    limit = spec.tuning_config.effective_max_parse_exceptions
    if limit is not None and report.stats.parse_exceptions > limit:
        last = report.saved_exceptions[-1] if report.saved_exceptions else None
        raise ParseExceptionLimitError(limit_exceeded_message(
            limit, report.stats.parse_exceptions, f"task group {job.group_id} of run {job.run_id}", last))
    report.segments = describe_segments(job, dims, metrics, types)
    report.marks = {"writeStarted": write_started, "writeEnded": write_ended}
    return report


def rollup(rows: Any, spec: DatasourceSpec, dims: list[str] | None = None) -> tuple[Any, list[str], list[str]]:
    """Druid's rollup: group by (queryGranularity bucket, dimensions) and aggregate; without rollup, every row
    stays a row with its metrics computed from itself. `__time` becomes the bucket in both cases.

    With rollup the splits hand over partial rows (`ingest_core.executor.rollup`): this merges them. A longSum
    arrives as two sums (high and low 32 bits) that add up without overflow; a group whose exact sum passes the
    long range is written as several rows whose values add up to it (`exact_long_sums`), never wrapped, and
    never an overflow error (Spark's ANSI mode raises on one). `dims`: the dimensions, when the spec does not
    list them all (type-aware discovery)."""
    F = sql_functions(rows)
    schema = spec.data_schema
    if dims is None:
        dims = ([d.name for d in schema.dimensions_spec.dimensions]
                + ([DIMS_JSON] if discovers_strings(schema.dimensions_spec) else []))
    metrics = [a.name for a in schema.metrics_spec]
    if not schema.granularity_spec.rollup:  # the splits computed each row's metrics (`rollup.row_metrics`)
        cols = [col(F, BUCKET).alias(TIME), col(F, SEGMENT), *[col(F, d) for d in dims]]
        return rows.select(*cols, *[col(F, m) for m in metrics]), dims, metrics
    first = F.struct(col(F, FIRST_TIME), col(F, PARTITION), col(F, FIRST_OFFSET))  # ties go to the lower partition
    last = F.struct(col(F, LAST_TIME), col(F, PARTITION), col(F, LAST_OFFSET))
    merge = merge_functions(F, lambda c: F.min_by(c, first), lambda c: F.max_by(c, last))
    aggs, long_sums = [], []
    for a in aggregators(spec):
        if a.op == "sum" and a.kind == "long":
            long_sums.append(a.name)
            aggs += [F.sum(col(F, c)).alias(c) for c in long_sum_columns(a.name)]
        elif a.op in ("first", "last") and a.mask is not None:
            # by the time of the row the filter matched; a split where none did has a null order, which
            # min_by/max_by pass over
            at, offset = (col(F, c) for c in filtered_order_columns(a.name))
            order = F.when(at.isNull(), F.lit(None)).otherwise(F.struct(at, col(F, PARTITION), offset))
            by = F.min_by if a.op == "first" else F.max_by
            aggs.append(by(col(F, a.name), order).cast(merged_type(a)).alias(a.name))
        else:
            aggs.append(merge[a.op](col(F, a.name)).cast(merged_type(a)).alias(a.name))
    if not aggs:
        aggs = [F.count(F.lit(1)).alias("__count")]
    keys = [TIME, SEGMENT, *dims]
    rolled = rows.groupBy(col(F, BUCKET).alias(TIME), col(F, SEGMENT), *[col(F, d) for d in dims]).agg(*aggs)
    rolled = merge_sketches(rolled, aggregators(spec))
    if long_sums:
        rolled = exact_long_sums(F, rolled, keys, [a for a in aggregators(spec)], long_sums)
    return rolled, dims, metrics


def merge_functions(F: Any, first: Any, last: Any) -> dict[str, Any]:
    """Spark's merge of each partial aggregation (see `executor.rollup`); a sketch's partials are collected
    and merged by `merge_sketches`."""
    return {"count": F.sum, "sum": F.sum, "min": F.min, "max": F.max, "first": first, "last": last,
            "any": lambda c: F.first(c, ignorenulls=True),
            **{op: F.collect_list for op in SKETCH_OPS}}


def merged_type(a: Any) -> str:
    """The Spark type of an aggregator's merged column (a sketch's: the list of its partials)."""
    return "array<binary>" if a.sketch is not None else a.spark_type


def merge_sketches(rolled: Any, aggs: list[Any]) -> Any:
    """The sketch columns, each a group's list of partial sketches, merged into one serialized sketch per row
    by the `datasketches` package (`executor.sketches.merge_batches`), in the executors."""
    from pyspark.sql.types import BinaryType, StructField, StructType

    params = {a.name: a.sketch for a in aggs if a.sketch is not None}
    if not params:
        return rolled
    schema = StructType([StructField(f.name, BinaryType(), True) if f.name in params else f
                         for f in rolled.schema.fields])
    return rolled.mapInArrow(partial(merge_batches, sketches=params), schema)


_HALF = 32  # a longSum's value = high * 2^32 + low (low unsigned), as the splits sum them
_PART = 1 << 30  # the high part one output row holds when a sum passes the long range: |value| < 2^62 + 2^32


def exact_long_sums(F: Any, rolled: Any, keys: list[str], aggs: list[Any], long_sums: list[str]) -> Any:
    """Join each longSum's high and low sums into one long. A group whose sum fits (always, in practice) keeps
    one row. One whose sum passes the long range is exploded into as many rows as its largest sum needs: row j
    holds the j-th slice of 2^30 * 2^32 of each longSum (the low part on row 0), row 0 also holds the other
    sums and the count, and every row holds the min/max/first/last; summing the rows gives each exact value."""
    low_mask = F.lit((1 << _HALF) - 1).cast("long")
    high: dict[str, Any] = {}
    low: dict[str, Any] = {}
    for name in long_sums:
        lo, hi = (col(F, c) for c in long_sum_columns(name))
        high[name] = hi + F.shiftright(lo, _HALF)  # the low sum's carry; no overflow below 2^31 rows per group
        low[name] = lo.bitwiseAND(low_mask)
    # a null sum (every value null) fits: explode(sequence(0, null)) would drop the group's row
    fits = {name: F.coalesce(high[name].between(-(1 << 31), (1 << 31) - 1), F.lit(True)) for name in long_sums}
    slices = {name: F.when(fits[name], F.lit(1)).otherwise(F.ceil(F.abs(high[name]) / _PART).cast("long"))
              for name in long_sums}
    count = slices[long_sums[0]] if len(long_sums) == 1 else F.greatest(*slices.values())
    part = F.explode(F.sequence(F.lit(0).cast("long"), count - 1)).alias("__part")
    staged = rolled.select("*", *[high[n].alias(f"__high_{n}") for n in long_sums],
                           *[low[n].alias(f"__low_{n}") for n in long_sums], part)
    j = col(F, "__part")
    first_row = j == 0
    out = [col(F, k) for k in keys]
    for a in aggs:
        if a.op == "sum" and a.kind == "long":
            h, lo = col(F, f"__high_{a.name}"), col(F, f"__low_{a.name}")
            exact = F.shiftleft(h, _HALF).bitwiseOR(lo)
            taken = F.greatest(F.least(F.abs(h) - j * _PART, F.lit(_PART)), F.lit(0))
            sliced = F.shiftleft(F.signum(h).cast("long") * taken, _HALF) + F.when(first_row, lo).otherwise(0)
            value = F.when(F.coalesce(h.between(-(1 << 31), (1 << 31) - 1), F.lit(True)),
                           F.when(first_row, exact).otherwise(0)).otherwise(sliced)
            out.append(F.when(lo.isNull(), F.lit(None)).otherwise(value).cast("long").alias(a.name))
        elif a.op in ("count", "sum"):
            out.append(F.when(first_row, col(F, a.name)).otherwise(F.lit(0).cast(a.kind or "long")).alias(a.name))
        elif a.sketch is not None:  # on the first row only: a quantiles sketch counted twice would be wrong
            out.append(F.when(first_row, col(F, a.name)).otherwise(F.lit(None).cast("binary")).alias(a.name))
        else:
            out.append(col(F, a.name))
    return staged.select(*out)


def _expand_discovered(rolled: Any, dims: list[str]) -> tuple[Any, list[str]]:
    """Schemaless or includeAllDimensions: turn the discovered-dimensions JSON into string columns, sorted by
    name, after the listed dimensions."""
    F = sql_functions(rolled)
    rolled = rolled.withColumn(DIMS_JSON, F.from_json(col(F, DIMS_JSON), "map<string,string>")).persist()
    names = sorted(r[0] for r in rolled.select(F.explode(F.map_keys(col(F, DIMS_JSON)))).distinct().collect())
    expanded = rolled.select("*", *[col(F, DIMS_JSON).getItem(n).alias(n) for n in names]).drop(DIMS_JSON)
    return expanded, [d for d in dims if d != DIMS_JSON] + names


def discover(rows: Any, spec: DatasourceSpec) -> tuple[Any, list[str], dict[str, str]]:
    """Type-aware discovery (`executor.discovery`): the rows with AUTO_JSON replaced by typed columns, the
    dimensions (listed ones in the spec's order, then the discovered ones by name) and the discovered columns'
    types. One small pass over the (persisted) rows collects each column's value types first."""
    from pyspark.sql.types import StructType

    F = sql_functions(rows)
    listed = spec.data_schema.dimensions_spec.dimensions
    pairs = (rows.select(col(F, discovery.AUTO_JSON))
             .mapInArrow(discovery.type_batches, "name string, type string").collect())
    found = discovery.column_types(((r[0], r[1]) for r in pairs), [d.name for d in listed if d.type == "auto"])
    names = [d.name for d in listed if d.type != "auto" or d.name in found]
    order = [n for n in names if n in found] + sorted(n for n in found if n not in names)
    types = {n: found[n] for n in order}
    check_case_clashes(spec, [*names, *order, *(a.name for a in spec.data_schema.metrics_spec)])
    log.info("discovered columns: %s", ", ".join(f"{n} {t}" for n, t in types.items()) or "none")
    fields = from_arrow_schema(pa.schema([(n, discovery.arrow_type(t)) for n, t in types.items()])).fields
    schema = StructType([f for f in rows.schema.fields if f.name != discovery.AUTO_JSON] + fields)
    typed = rows.mapInArrow(partial(discovery.expand_batches, types=types), schema)
    return typed, names + [n for n in order if n not in names], types


def check_case_clashes(spec: DatasourceSpec, columns: list[str]) -> None:
    """Spark (and SQL) tell no column names apart by case alone: say which fields clash and what to do, rather
    than Spark's ambiguous reference."""
    seen: dict[str, str] = {}
    for name in columns:
        other = seen.setdefault(name.lower(), name)
        if other != name:
            raise IngestError(f"datasource {spec.datasource!r}: the discovered field {name!r} and the column "
                              f"{other!r} differ only in case, which Spark and SQL cannot tell apart: add one to "
                              "dimensionsSpec.dimensionExclusions, or rename it with a transform")


def describe_segments(job: GroupJob, dims: list[str], metrics: list[str],
                      discovered: dict[str, str] | None = None) -> list[StagedSegment]:
    """Each written segment's metadata, read from its Parquet footer; `discovered`: the discovered columns'
    types (what a footer cannot tell: COMPLEX<json>, NULL)."""
    gran = job.spec.data_schema.granularity_spec.segment_granularity
    ranges = tuple(sorted(p.range for p in job.group.partitions))
    fs, _ = deep_storage.filesystem(job.attempt_uri)
    out = []
    shards: dict[str, int] = {}
    for info in deep_storage.list_files(deep_storage.join(job.attempt_uri, "segments"), ".parquet"):
        folder = next(p for p in info.path.split("/") if p.startswith(f"{SEGMENT}="))
        shard = shards[folder] = shards.get(folder, -1) + 1
        start = datetime.fromtimestamp(int(folder.split("=", 1)[1]) / 1000, tz=timezone.utc)
        interval_start, interval_end = buckets.bucket(gran, start)
        with fs.open_input_file(info.path) as f:
            meta = pq.ParquetFile(f).metadata
        tmin, tmax = _time_range(meta)
        arrow = meta.schema.to_arrow_schema()  # its names: a list column's Parquet leaf is named `element`
        out.append(StagedSegment(
            interval_start, interval_end, shard, deep_storage.to_uri(job.attempt_uri, info.path),
            meta.num_rows, info.size, tmin, tmax, tuple(arrow.names), tuple(dims), tuple(metrics), ranges,
            discovery.schema_types(arrow, discovered)))
    return sorted(out, key=lambda s: (s.interval_start, s.shard))


def _time_range(meta: Any) -> tuple[datetime | None, datetime | None]:
    idx = next(i for i in range(meta.num_columns) if meta.schema.column(i).path == TIME)
    lows, highs = [], []
    for rg in range(meta.num_row_groups):
        stats = meta.row_group(rg).column(idx).statistics
        if stats is not None and stats.has_min_max:
            lows.append(stats.min)
            highs.append(stats.max)
    def utc(v: datetime) -> datetime:  # millisecond precision, as the report keeps it
        v = v if v.tzinfo else v.replace(tzinfo=timezone.utc)
        return v.replace(microsecond=v.microsecond // 1000 * 1000)
    return (utc(min(lows)) if lows else None), (utc(max(highs)) if highs else None)


# ------------------------------------------------------------------------------------------------ entry point


def summary(job: GroupJob, report: GroupReport) -> dict[str, Any]:
    """The job's last line of stdout (spark-submit) or the Connect runner's result."""
    return {"report": deep_storage.join(job.attempt_uri, "report.json"), "rows": report.stats.processed,
            "segments": len(report.segments), "rowStats": report.stats.to_json()}


def main(argv: list[str] | None = None) -> int:
    args = argument_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)  # it logs to stdout, where the summary goes
    try:
        job = load_job(job_input(args))
    except BadJobInput as exc:
        print(f"ingest_job: {exc}", file=sys.stderr)
        return 2
    spark = spark_session_builder(f"ingest {job.spec.datasource} {job.run_id} group {job.group_id}",
                                  submitted_conf()).getOrCreate()
    log.info("Spark SQL settings: %s", ", ".join(f"{k}={spark.conf.get(k)}" for k in sql_settings()))
    log.info("attempt %s writes to %s", job.attempt, job.attempt_uri)
    try:
        report = run_group(spark, job, args.stall_timeout)
    except IngestError as exc:
        print(f"ingest_job: task group {job.group_id} of run {job.run_id} failed: {exc}", file=sys.stderr)
        return 3
    finally:
        spark.stop()
    print(json.dumps(summary(job, report)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
