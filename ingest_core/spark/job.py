"""The bounded Spark ingest job: one task group of one run, Kafka offsets -> Parquet segments + a report.

    spark-submit spark_jobs/ingest_job.py --spec SPEC --plan PLAN --group N [--replica R] [--output URI]
        [--secrets-from SPEC_FILE]

SPEC is a datasource spec (YAML or JSON file or URI); PLAN is the run's persisted plan (JSON, as written by
`ingest plan --json` or the DAG's plan task). The job reads exactly the group's offset ranges (one Spark task
per split), parses, filters and rolls up the rows, and writes one Parquet file per segment: per
segmentGranularity interval, in files (shards) of at most maxRowsPerSegment rows, each sorted by time. The group's
report (row stats, parse exceptions, segments with their rows, bytes, time range, columns and offset ranges)
goes to <output>/attempt=<id>/report.json and its path is printed as the last line of stdout. Every attempt
writes a new folder and deletes nothing: a retry or a re-executed task never touches a published segment.

It never touches committed offsets or the metadata store: the publisher alone makes segments visible.
Exit codes: 0 success, 2 bad input (spec, plan, group), 3 the group failed (report written, state FAILED).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import partial
from typing import Any, Collection

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql.pandas.types import from_arrow_schema

from ingest_core.core.defaults import ONE_TASK_MAX_RECORDS, PROGRESS_INTERVAL_S, STALL_TIMEOUT_S
from ingest_core.core.errors import IngestError, JobFailedError, ObjectStoreUnavailableError, error_for_code
from ingest_core.core.offsets import check_planned_topic_ids
from ingest_core.core.planner import Plan, TaskGroup
from ingest_core.core.spec import DatasourceSpec, load_spec, parse_spec_text
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
from ingest_core.kafka.config import KafkaClientConfig
from ingest_core.kafka.offset_reader import KafkaOffsetReader
from ingest_core.kafka.storage_secrets import use_deep_storage
from ingest_core.spark.rollup import col, rollup, sql_functions
from ingest_core.spark.kafka_source import (
    SEGMENT,
    ReadJob,
    SplitsReader,
    output_arrow_schema,
    split_parser,
)

log = logging.getLogger("ingest_core.spark.job")

@dataclass(frozen=True)
class GroupJob:
    spec: DatasourceSpec
    plan: Plan
    group_id: int
    replica: int
    output_uri: str  # the replica's folder; this attempt writes under it, in a folder of its own
    progress_interval_s: float = PROGRESS_INTERVAL_S
    # new per attempt: the plan's job arguments are shared by every retry of a task
    attempt: str = field(default_factory=deep_storage.new_attempt_id)

    @property
    def group(self) -> TaskGroup:
        return self.plan.group(self.group_id)

    @property
    def attempt_uri(self) -> str:
        return deep_storage.attempt_uri(self.output_uri, self.attempt)


# Settings the job's output depends on: always these, whatever was submitted.
REQUIRED_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MILLIS",
}


def default_conf() -> dict[str, str]:
    """Defaults that a spec's `microbatch.spark.conf` (spark-submit's --conf) may change."""
    # pyspark's DataFrame debugging records each DataFrame call's Python call site for Spark's error messages: a
    # stack walk and a failed IPython import per call, and the calls are ours. A static setting: a Spark Connect
    # server needs it at its start (docs/spark-connect.md), where the Connect client skips it
    return {"spark.sql.shuffle.partitions": os.environ.get("INGEST_SPARK_SHUFFLE_PARTITIONS", "4"),
            "spark.ui.showConsoleProgress": "false", "spark.python.sql.dataFrameDebugging.enabled": "false"}


def spark_session_builder(app_name: str, submitted: Collection[str] = ()):
    """Settings every run of this job needs, whatever the master. `submitted`: the settings spark-submit
    was given (`submitted_conf()`); a builder's settings would replace them, so the defaults leave them be."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    for key, value in default_conf().items():
        if key not in submitted:
            builder = builder.config(key, value)
    return builder.config(map=REQUIRED_CONF)


def submitted_conf() -> set[str]:
    """The settings spark-submit gave this driver (--conf, spark-defaults.conf); none outside spark-submit."""
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        return set()
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()  # joins spark-submit's JVM, whose system properties hold them
    return {key for key, _ in SparkConf().getAll()}


def run_group(spark: Any, job: GroupJob, stall_timeout_s: float = STALL_TIMEOUT_S) -> GroupReport:
    """Run one task group; returns its report (state SUCCESS) or raises, after writing a FAILED report."""
    spec, group = job.spec, job.group
    started, started_at = time.monotonic(), time.time()
    report = GroupReport.merge(spec.datasource, job.plan.run_id, job.group_id, job.replica, [],
                               spec.tuning_config.effective_max_saved_parse_exceptions)
    try:
        if not group.is_empty:
            report = _ingest(spark, job, stall_timeout_s)
            _check_topic_ids(job)
            report.marks = {"started": started_at, **report.marks, "ended": time.time()}
    except ObjectStoreUnavailableError:  # no report can be written where the store does not answer or refuses
        raise
    except Exception as exc:
        error, error_class = _job_error(exc, job.attempt_uri)
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
    topics = {p.tp.topic for p in job.group.partitions if p.tp.topic in job.plan.topic_ids}
    if not topics:
        return  # planned before topic ids were
    reader = KafkaOffsetReader.for_spec(job.spec)
    try:
        now = reader.topic_ids(topics)
    finally:
        reader.close()
    check_planned_topic_ids(job.spec.datasource, job.plan.run_id, {t: job.plan.topic_ids[t] for t in topics}, now)


def failed_report(job: GroupJob, error: IngestError, error_class: str) -> GroupReport:
    """The FAILED report of an attempt: why (typed: `GroupFailure`, with the error's code and `error_class`, the
    name of the exception type that stopped it), which offset ranges, and what its splits had read (their last
    reports: a split stopped by maxParseExceptions leaves its count and last exception)."""
    spec = job.spec
    splits, _ = latest_split_reports(job.attempt_uri)
    max_saved = spec.tuning_config.effective_max_saved_parse_exceptions
    report = GroupReport.merge(spec.datasource, job.plan.run_id, job.group_id, job.replica, splits.values(),
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


# "SomeError: message" lines of a Spark error's text: Python's and the JVM's exceptions (for people to read)
_EXCEPTION_LINE = re.compile(r"^\s*(?:[a-z_][\w]*\.)*([A-Z]\w*(?:Error|Exception|Exit|Interrupt)): ")


def _spark_cause(exc: BaseException) -> tuple[str, str]:
    """A failure no split's report explains (an executor lost, a Spark error), as people read it: out of the
    text Spark wraps it in, the last exception a Python traceback raised (e.g. OverflowError), else the first
    exception named (e.g. SparkException for a lost executor), else the wrapper's own type; and the message,
    Spark's first line ending with that exception's own line. Only shown: nothing decides on it."""
    text = str(exc).strip()
    first = f"the Spark job failed: {text.splitlines()[0] if text else type(exc).__name__}"
    lines = text.splitlines()
    traceback_at = max((i for i, line in enumerate(lines) if "Traceback (most recent call last)" in line),
                       default=None)
    named = [(i, m.group(1), line.strip()) for i, line in enumerate(lines) if (m := _EXCEPTION_LINE.match(line))]
    after = [(name, line) for i, name, line in named if traceback_at is not None and i > traceback_at]
    root = after[-1] if after else (named[0][1:] if named else None)
    if root is None:
        return type(exc).__name__, first
    return root[0], first if root[1] in first else f"{first} ({root[1]})"


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


def _job_error(exc: BaseException, attempt_uri: str) -> tuple[IngestError, str]:
    """The error that failed a job and the name of its type: an error of this system raised here as it is;
    else the one a split recorded in its report as it stopped (`SplitFailure`: Spark hands the driver only the
    exception's text, the report keeps its code), raised again from its code; else `JobFailedError`, with
    Spark's account of it."""
    if isinstance(exc, IngestError):
        return exc, type(exc).__name__
    splits, _ = latest_split_reports(attempt_uri)
    failures = [report.failure for _, report in sorted(splits.items()) if report.failure is not None]
    if failures:
        return error_for_code(failures[0].code, failures[0].message), failures[0].error_class
    error_class, message = _spark_cause(exc)
    return JobFailedError(message), error_class


def _ingest(spark: Any, job: GroupJob, stall_timeout_s: float) -> GroupReport:
    spec, group = job.spec, job.group
    kafka = KafkaClientConfig.from_properties(spec.io_config.consumer_properties)
    # a protobuf descriptor file travels with the job: the executors need no access to its path
    read_job = ReadJob(
        spec=inline_descriptors(spec), created_at=job.plan.created_at, splits=group.splits, output_uri=job.attempt_uri,
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
    report = GroupReport.merge(spec.datasource, job.plan.run_id, job.group_id, job.replica, splits,
                               spec.tuning_config.effective_max_saved_parse_exceptions)
    missing = {s.index for s in splits} ^ set(range(len(group.splits)))
    if missing:
        raise IngestError(f"split reports missing for splits {sorted(missing)}: the job output at "
                          f"{job.attempt_uri} is incomplete")
    limit = spec.tuning_config.effective_max_parse_exceptions
    if limit is not None and report.stats.parse_exceptions > limit:
        last = report.saved_exceptions[-1] if report.saved_exceptions else None
        raise ParseExceptionLimitError(limit_exceeded_message(
            limit, report.stats.parse_exceptions, f"task group {job.group_id} of run {job.plan.run_id}", last))
    report.segments = describe_segments(job, dims, metrics, types)
    report.marks = {"writeStarted": write_started, "writeEnded": write_ended}
    return report


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


def load_job_spec(spec_uri: str, secrets_from: str | None = None) -> DatasourceSpec:
    """The job's spec. A staged spec is redacted; literal secrets come from the spec file it was staged from,
    here on the driver, which resolves them into the Kafka client config only (`_ingest`)."""
    original = load_spec(secrets_from) if secrets_from else None
    if original is not None:
        use_deep_storage(original)  # the staged copy may be on the object store those settings reach
    spec = parse_spec_text(deep_storage.read_text(spec_uri), spec_uri)
    use_deep_storage(spec)
    return spec.with_secrets_from(original) if original is not None else spec


class BadJobInput(IngestError):
    """The job's arguments do not name a usable spec, plan and group (exit code 2)."""

    code = "INGEST_JOB_INPUT_INVALID"


def argument_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="ingest_job", description=__doc__.split("\n\n")[0])
    ap.add_argument("--spec", required=True, help="datasource spec file or URI (YAML/JSON)")
    ap.add_argument("--plan", required=True, help="the run's plan (JSON file or URI)")
    ap.add_argument("--group", type=int, required=True, help="task group id")
    ap.add_argument("--replica", type=int, default=0)
    ap.add_argument("--output", help="where to stage segments and the report (default: deep storage layout)")
    ap.add_argument("--secrets-from", help="the spec file SPEC was staged from: its literal consumerProperties "
                                           "secrets (redacted in SPEC) are read there")
    ap.add_argument("--stall-timeout", type=float, default=STALL_TIMEOUT_S,
                    help="seconds without progress before a split fails (unreachable broker)")
    return ap


def load_job(args: argparse.Namespace) -> GroupJob:
    """The group job the arguments name, read from deep storage; `BadJobInput` when they name none. The
    spark-submit entry point and the Spark Connect runner (`ingest_core.spark.connect`) share it."""
    try:
        spec = load_job_spec(args.spec, args.secrets_from)
        plan = Plan.from_json(deep_storage.read_json(args.plan))
        plan.group(args.group)
    except (IngestError, KeyError, ValueError, OSError) as exc:
        raise BadJobInput(str(exc)) from None
    if plan.datasource != spec.datasource:
        raise BadJobInput(f"the plan is for {plan.datasource!r}, the spec for {spec.datasource!r}")
    output = args.output or deep_storage.group_uri(deep_storage.base_for(spec), spec.datasource, plan.run_id, args.group, args.replica)
    return GroupJob(spec, plan, args.group, args.replica, output)


def summary(job: GroupJob, report: GroupReport) -> dict[str, Any]:
    """The job's last line of stdout (spark-submit) or the Connect runner's result."""
    return {"report": deep_storage.join(job.attempt_uri, "report.json"), "rows": report.stats.processed,
            "segments": len(report.segments), "rowStats": report.stats.to_json()}


def main(argv: list[str] | None = None) -> int:
    args = argument_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)  # it logs to stdout, where the summary goes
    try:
        job = load_job(args)
    except BadJobInput as exc:
        print(f"ingest_job: {exc}", file=sys.stderr)
        return 2
    spark = spark_session_builder(f"ingest {job.spec.datasource} {job.plan.run_id} group {job.group_id}",
                                  submitted_conf()).getOrCreate()
    sql_keys = sorted(k for k in {**default_conf(), **REQUIRED_CONF} if k.startswith("spark.sql."))
    log.info("Spark SQL settings: %s", ", ".join(f"{k}={spark.conf.get(k)}" for k in sql_keys))
    log.info("attempt %s writes to %s", job.attempt, job.attempt_uri)
    try:
        report = run_group(spark, job, args.stall_timeout)
    except IngestError as exc:
        print(f"ingest_job: task group {job.group_id} of run {job.plan.run_id} failed: {exc}", file=sys.stderr)
        return 3
    finally:
        spark.stop()
    print(json.dumps(summary(job, report)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
