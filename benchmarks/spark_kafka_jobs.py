"""The Spark jobs that `ingest_job_throughput.py` measures our job against, both reading through Spark's own Kafka
source (`spark-sql-kafka-0-10` and its jars, `ingest_core.dev.jars.ensure("spark-kafka")`, given to Spark as files
with `spark.jars`, never `--packages`):

- `anchor_job`: the job a user would write instead of ours, the ordinary way: `spark.read.format("kafka")` over
  the same offset ranges, `from_json` on the value with the spec's columns, the spec's filter, the time floored
  to queryGranularity, rollup (groupBy + the spec's aggregators), Parquet partitioned by segment interval. None
  of Druid's bookkeeping: no row stats, no parse exceptions, no reports, no progress.
- `jvm_reader_job`: our job with Spark's Kafka source as its reader, to measure a JVM reader against ours: the JVM's consumer
  (`kafka.isolation.level` = the spec's, read_committed by default) reads the same ranges, and each Spark task
  parses its records with our parser (`ingest_core.executor.row_parser`, pyarrow) in `mapInArrow`, rolls them up per
  `maxRowsInMemory` rows, keeps per-split row stats, parse exceptions and progress reports as our reader does,
  then the same merge, Parquet writing and group report as `ingest_core.spark.job`. Built only to measure it;
  see BENCHMARKS.md for what it would take to make it the product's reader.
"""

from __future__ import annotations

import json
import time
from functools import reduce
from typing import Any, Iterator

from ingest_core.core.errors import IngestError
from ingest_core.core.spec import DatasourceSpec
from ingest_core.executor import buckets
from ingest_core.handover import deep_storage
from ingest_core.handover.report import (
    GroupReport,
    ParseExceptionLimitError,
    SplitReport,
    limit_exceeded_message,
)
from ingest_core.spark.job import (
    GroupJob,
    _expand_discovered,
    col,
    describe_segments,
    rollup,
    sql_functions,
)
from ingest_core.spark.job_errors import job_error as _job_error
from ingest_core.spark.kafka_source import BUCKET, SEGMENT, SPARK_TIME, ReadJob

# Spark's date_trunc units for Druid's named granularities (the anchor handles these only)
_TRUNC = {"SECOND": "second", "MINUTE": "minute", "HOUR": "hour", "DAY": "day", "WEEK": "week", "MONTH": "month",
          "QUARTER": "quarter", "YEAR": "year"}
_DDL = {"string": "STRING", "long": "BIGINT", "float": "FLOAT", "double": "DOUBLE"}


def spark_kafka_jars() -> list[str]:
    """Spark's Kafka source and what it needs beyond pip's pyspark, as files for `spark.jars`."""
    from ingest_core.dev import jars

    return [str(p) for p in jars.ensure("spark-kafka")]


def kafka_source_options(bootstrap: str, ranges: dict[tuple[str, int], tuple[int, int]],
                         client: dict[str, Any] | None = None) -> dict[str, str]:
    """Options of Spark's Kafka source reading exactly `ranges` ({(topic, partition): (start, end)})."""
    assign: dict[str, list[int]] = {}
    starting: dict[str, dict[str, int]] = {}
    ending: dict[str, dict[str, int]] = {}
    for (topic, partition), (start, end) in sorted(ranges.items()):
        assign.setdefault(topic, []).append(partition)
        starting.setdefault(topic, {})[str(partition)] = start
        ending.setdefault(topic, {})[str(partition)] = end
    opts = {"kafka.bootstrap.servers": bootstrap, "assign": json.dumps(assign),
            "startingOffsets": json.dumps(starting), "endingOffsets": json.dumps(ending)}
    opts.update({f"kafka.{k}": str(v) for k, v in (client or {}).items()})
    return opts


# ------------------------------------------------------------------------------------------------ the anchor


def spark_filter(f: dict[str, Any]) -> Any:
    """A Druid filter as a Spark column (the types the benchmark uses; values compared as strings, as Druid's
    selector and in do; a null comparison does not match, as in Druid's SQL-compatible mode)."""
    from pyspark.sql import functions as F

    kind = f["type"]
    if kind == "selector":
        c = F.col(f["dimension"])
        return c.isNull() if f.get("value") is None else c.cast("string") == str(f["value"])
    if kind == "in":
        return F.col(f["dimension"]).cast("string").isin([str(v) for v in f["values"]])
    if kind == "not":
        return ~spark_filter(f["field"])
    if kind in ("and", "or"):
        parts = [spark_filter(x) for x in f["fields"]]
        return reduce(lambda a, b: (a & b) if kind == "and" else (a | b), parts)
    raise NotImplementedError(f"the anchor job does not translate {kind!r} filters")


def anchor_job(spark: Any, spec: DatasourceSpec, bootstrap: str, ranges: dict[tuple[str, int], tuple[int, int]],
               output_path: str) -> None:
    """The ordinary PySpark batch job for this spec (see the module doc). Works for json input, named
    granularities, count/sum/min/max aggregators: what the benchmark's spec uses."""
    from pyspark.sql import functions as F

    schema = spec.data_schema
    ts = schema.timestamp_spec
    fields = {ts.column: "BIGINT" if ts.format.lower() in ("millis", "posix") else "STRING"}
    for d in schema.dimensions_spec.dimensions:
        fields[d.name] = _DDL.get(d.type, "STRING")
    for a in schema.metrics_spec:
        if a.field_name:
            fields[a.field_name] = "DOUBLE" if a.type.startswith(("double", "float")) else "BIGINT"
    ddl = ", ".join(f"`{name}` {typ}" for name, typ in fields.items())

    records = spark.read.format("kafka").options(**kafka_source_options(bootstrap, ranges)).load()
    rows = records.select(F.from_json(F.col("value").cast("string"), ddl).alias("r")).select("r.*")
    if ts.format.lower() == "millis":
        t = F.timestamp_millis(F.col(ts.column))
    elif ts.format.lower() == "posix":
        t = F.timestamp_seconds(F.col(ts.column))
    else:
        t = F.to_timestamp(F.col(ts.column))
    rows = rows.withColumn("__time", t).where(F.col("__time").isNotNull())
    if schema.transform_spec.filter:
        rows = rows.where(spark_filter(schema.transform_spec.filter))
    gran = schema.granularity_spec
    rows = (rows.withColumn("__time", F.date_trunc(_TRUNC[gran.query_granularity.name], "__time"))
            .withColumn("__segment", F.unix_millis(F.date_trunc(_TRUNC[gran.segment_granularity.name], "__time"))))
    aggs = []
    for a in schema.metrics_spec:
        if a.type == "count":
            aggs.append(F.count(F.lit(1)).alias(a.name))
            continue
        kind = "long" if a.type.startswith("long") else "double"
        ops = {"Sum": F.sum, "Min": F.min, "Max": F.max}
        suffix = a.type[-3:]
        if suffix not in ops:
            raise NotImplementedError(f"the anchor job does not compute {a.type} aggregators")
        op = ops[suffix]
        aggs.append(op(F.col(a.field_name)).cast(kind).alias(a.name))
    dims = [d.name for d in schema.dimensions_spec.dimensions]
    rolled = rows.groupBy("__time", "__segment", *dims).agg(*aggs)
    rolled.write.mode("overwrite").partitionBy("__segment").parquet(output_path)


# ------------------------------------------------------------------------------------- the JVM-reader variant


def _parse_in_tasks(job_text: str, kafka_format: bool):
    """The function `mapInArrow` runs in each Spark task: Spark's Kafka records (one topic partition per task)
    -> our parser -> partial rollup -> Arrow batches of the same schema as our reader's. Keeps, per split of the
    plan, the same report our reader writes (records, last offset, row stats, parse exceptions, progress)."""

    def parse(batches: Iterator[Any]) -> Iterator[Any]:
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        from ingest_core.executor.rollup import RollupBuffer
        from ingest_core.executor.row_parser import TIME, RecordChunk
        from ingest_core.spark.kafka_source import (
            output_arrow_schema,
            split_parser,
            split_rollup,
        )

        job = ReadJob.loads(job_text)
        spec, parser = job.spec, split_parser(job)
        gran = spec.data_schema.granularity_spec
        schema = output_arrow_schema(parser)
        partial = split_rollup(parser)
        buffer = RollupBuffer(partial, spec.tuning_config.max_rows_in_memory) if partial is not None else None
        limit = spec.tuning_config.effective_max_parse_exceptions
        splits: dict[tuple[str, int], list[tuple[int, int, int]]] = {}
        for i, s in enumerate(job.splits):
            splits.setdefault((s.tp.topic, s.tp.partition), []).append((i, s.start, s.end))
        reports: dict[int, SplitReport] = {}
        last_progress: dict[int, float] = {}
        started = time.monotonic()

        def out(rows: pa.Table) -> Iterator[pa.RecordBatch]:
            segment = buckets.floor(gran.segment_granularity, rows.column(BUCKET))
            cols = [pc.cast(c, SPARK_TIME) if pa.types.is_timestamp(c.type) else c for c in rows.columns]
            cols.append(pc.cast(pc.cast(segment, pa.timestamp("ms", tz="UTC")), pa.int64()))
            yield from pa.Table.from_arrays(cols, schema=schema).to_batches()

        def chunk_of(topic: str, partition: int, part: pa.RecordBatch, offsets: np.ndarray) -> RecordChunk:
            first, last = int(offsets[0]), int(offsets[-1])
            rng = range(first, last + 1) if last - first + 1 == len(offsets) else offsets.tolist()
            keys = timestamps = headers = None
            if kafka_format:
                keys = part.column("key").to_pylist()
                ts = part.column("timestamp")
                timestamps = pc.cast(pc.cast(ts, pa.timestamp("ms", tz="UTC")), pa.int64()).to_pylist()
                headers = [None if h is None else [(x["key"], x["value"]) for x in h]
                           for h in part.column("headers").to_pylist()]
            return RecordChunk(topic, partition, rng, part.column("value").to_pylist(), keys=keys,
                               timestamps=timestamps, headers=headers)

        for batch in batches:
            if batch.num_rows == 0:
                continue
            partitions = batch.column("partition")
            topics = batch.column("topic")
            if pc.min_max(partitions).as_py()["min"] != pc.min_max(partitions).as_py()["max"] or \
                    len(pc.unique(topics)) != 1:
                raise IngestError("a Spark task of the Kafka source read more than one topic partition")
            topic, partition = topics[0].as_py(), partitions[0].as_py()
            offsets = batch.column("offset").to_numpy()
            for index, start, end in splits.get((topic, partition), ()):
                lo, hi = np.searchsorted(offsets, start), np.searchsorted(offsets, end)
                if hi <= lo:
                    continue
                chunk = chunk_of(topic, partition, batch.slice(lo, hi - lo), offsets[lo:hi])
                report = reports.get(index)
                if report is None:
                    report = reports[index] = SplitReport(index, topic, partition, start, end)
                    last_progress[index] = started - job.progress_interval_s
                parsed = parser.parse(chunk)
                report.records += len(chunk)
                report.last_offset = int(offsets[hi - 1])
                report.stats.add(parsed.stats)
                if parser.max_saved and parsed.exceptions:
                    report.saved_exceptions = (report.saved_exceptions + parsed.exceptions)[-parser.max_saved:]
                if limit is not None and report.stats.parse_exceptions > limit:
                    last = parsed.exceptions[-1] if parsed.exceptions else None
                    raise ParseExceptionLimitError(limit_exceeded_message(
                        limit, report.stats.parse_exceptions, f"split {index} ({topic}/{partition} [{start}, {end}))",
                        last))
                if time.monotonic() - last_progress[index] >= job.progress_interval_s:
                    report.seconds = time.monotonic() - started
                    deep_storage.write_json(deep_storage.join(job.output_uri, "progress", f"split-{index:05d}.json"),
                                            report.to_json())
                    last_progress[index] = time.monotonic()
                table = parsed.table
                if table.num_rows == 0:
                    continue
                table = table.append_column(BUCKET, buckets.floor(gran.query_granularity, table.column(TIME)))
                if buffer is None:
                    yield from out(table)
                elif (rolled := buffer.add(table)) is not None:
                    yield from out(rolled)
        if buffer is not None and (rolled := buffer.flush()) is not None:
            yield from out(rolled)
        for index, report in reports.items():
            report.seconds = time.monotonic() - started
            deep_storage.write_json(deep_storage.join(job.output_uri, "splits", f"split-{index:05d}.json"),
                                    report.to_json())

    return parse


def jvm_reader_job(spark: Any, job: GroupJob, bootstrap: str) -> GroupReport:
    """`ingest_core.spark.job.run_group` with Spark's Kafka source as the reader (see the module doc)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    from ingest_core.spark.kafka_source import output_arrow_schema, split_parser

    spec, group = job.spec, job.group
    started = time.monotonic()
    # as our job does: each attempt writes a folder of its own (`job.attempt_uri`), where `describe_segments`
    # reads the segments
    read_job = ReadJob(spec=spec, created_at=job.input.created_at, splits=group.splits, output_uri=job.attempt_uri,
                       batch_records=spec.tuning_config.max_records_per_poll or ReadJob.batch_records,
                       progress_interval_s=job.progress_interval_s)
    kafka_format = spec.io_config.input_format.type == "kafka"
    ranges = {(p.tp.topic, p.tp.partition): (p.start, p.end) for p in group.partitions if p.end > p.start}
    source = (spark.read.format("kafka")
              .options(**kafka_source_options(bootstrap, ranges,
                                              {"isolation.level": spec.io_config.isolation_level}))
              .option("includeHeaders", str(kafka_format).lower()).load())
    columns = ["topic", "partition", "offset", "value"] + (["key", "timestamp", "headers"] if kafka_format else [])
    schema = from_arrow_schema(output_arrow_schema(split_parser(read_job)))
    # Arrow batches of our reader's chunk size (Spark's default is 10,000 records)
    previous = spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(read_job.batch_records))
    try:
        rows = source.select(*columns).mapInArrow(_parse_in_tasks(read_job.dumps(), kafka_format), schema)
        rolled, dims, metrics = rollup(rows, spec)
        if not spec.data_schema.dimensions_spec.dimensions:
            rolled, dims = _expand_discovered(rolled, dims)
        F = sql_functions(rows)
        out = rolled.select(SEGMENT, "__time", *[col(F, c) for c in dims + metrics])
        (out.sortWithinPartitions(SEGMENT, "__time", *[col(F, d) for d in dims])
         .write.mode("error").option("maxRecordsPerFile", spec.tuning_config.max_rows_per_segment)
         .partitionBy(SEGMENT).parquet(deep_storage.join(job.attempt_uri, "segments")))
    except Exception as exc:
        raise _job_error(exc, job.attempt_uri)[0] from exc
    finally:
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", previous)
    found = {r.index: r for r in (
        SplitReport.from_json(deep_storage.read_json(deep_storage.to_uri(job.attempt_uri, f.path)))
        for f in deep_storage.list_files(deep_storage.join(job.attempt_uri, "splits"), ".json"))}
    # A split whose range held no record (only transaction markers or aborted records) reaches no task here:
    # Spark's source gives a task no way to say which range it read when it read nothing.
    for i, s in enumerate(group.splits):
        found.setdefault(i, SplitReport(i, s.tp.topic, s.tp.partition, s.start, s.end))
    report = GroupReport.merge(spec.datasource, job.run_id, job.group_id, job.replica, found.values(),
                               spec.tuning_config.effective_max_saved_parse_exceptions)
    limit = spec.tuning_config.effective_max_parse_exceptions
    if limit is not None and report.stats.parse_exceptions > limit:
        last = report.saved_exceptions[-1] if report.saved_exceptions else None
        raise ParseExceptionLimitError(limit_exceeded_message(
            limit, report.stats.parse_exceptions, f"task group {job.group_id} of run {job.run_id}", last))
    report.segments = describe_segments(job, dims, metrics)
    report.seconds = time.monotonic() - started
    return report
