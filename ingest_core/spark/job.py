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

from ingest_core.core.defaults import ONE_TASK_MAX_RECORDS, STALL_TIMEOUT_S
from ingest_core.core.errors import IngestError, ObjectStoreUnavailableError
from ingest_core.core.offsets import check_planned_topic_ids
from ingest_core.core.planner import TaskGroup
from ingest_core.core.spec import DatasourceSpec
from ingest_core.executor import buckets, discovery
from ingest_core.executor.formats.protobuf_descriptors import inline_descriptors
from ingest_core.executor.row_parser import DIMS_JSON, TIME
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
from ingest_core.handover.job_input import BadJobInput
from ingest_core.kafka.config import KafkaClientConfig
from ingest_core.kafka.offset_reader import KafkaOffsetReader
from ingest_core.spark.job_args import GroupJob, argument_parser, job_input, load_job
from ingest_core.spark.job_errors import job_error
from ingest_core.spark.rollup import col, rollup, sql_functions
from ingest_core.spark.kafka_source import (
    SEGMENT,
    ReadJob,
    SplitsReader,
    output_arrow_schema,
    split_parser,
)
from ingest_core.spark.settings import spark_session_builder, sql_settings, submitted_conf

log = logging.getLogger("ingest_core.spark.job")

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
                deep_storage_access: dict | None = None, tasks: int | None = None,
                reader_class: type[SplitsReader] = SplitsReader) -> Any:
    """The group's rows, one Spark task per split (or `tasks` tasks): a range of one row per split in as many
    partitions, each task reading the splits its rows name (`kafka_source.SplitsReader`, in `mapInArrow`). The
    schema is computed here, so Spark asks no Python worker before the tasks run; the secrets ride in the
    reader (see `kafka_source`), never in a plan's text."""
    n = len(job.splits)
    schema = from_arrow_schema(output_arrow_schema(split_parser(job)))
    reader = reader_class(job, consumer_properties, input_format, deep_storage_access)
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
    write_started = time.time()
    write_segments(rolled, dims, metrics, spec,
                   object_store.spark_uri(access, deep_storage.join(job.attempt_uri, "segments")))
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


def write_segments(rolled: Any, dims: list[str], metrics: list[str], spec: DatasourceSpec, target: str,
                   mode: str = "error") -> None:
    """Write the rolled-up rows under `target` (a Spark URI), a folder per segment interval. Each Spark task
    writes its rows of an interval as time-sorted files of at most maxRowsPerSegment rows: Druid's dynamic
    partitioning (segments fill up as rows come), with no extra shuffle. An attempt's folder is new: Spark must
    not delete anything (`mode` "error", i.e. error-if-exists: the one spelling Spark Connect knows too; never
    "overwrite" there)."""
    F = sql_functions(rolled)
    out = rolled.select(SEGMENT, TIME, *[col(F, c) for c in dims + metrics])
    (out.sortWithinPartitions(SEGMENT, TIME, *[col(F, d) for d in dims])
     .write.mode(mode).option("maxRecordsPerFile", spec.tuning_config.max_rows_per_segment)
     .partitionBy(SEGMENT).parquet(target))


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
