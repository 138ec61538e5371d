"""Reading fixed Kafka offset ranges in Spark's tasks (Spark's KafkaBatch, in Python).

Each split of a task group's plan, [start, end) of one topic partition, is one Spark task: the job's rows are
`spark.range(n, numPartitions=n).mapInArrow(SplitsReader(...), schema)` (`ingest_core.spark.job`), one row per
split, one split per partition, no shuffle, and `SplitsReader` reads the split its task's row names. The read
consumes the range with confluent-kafka, parses the records into typed rows (`ingest_core.executor.row_parser`),
adds each row's query-granularity bucket, rolls every `maxRowsInMemory` rows up into partial rows when the spec
rolls up (`ingest_core.executor.rollup`), and yields Arrow batches with each row's segment interval. When the split
is done it writes its row stats to deep storage (`splits/split-<i>.json`), which the job merges into the group
report.

A split ends when the consumer's position reaches `end`, never by waiting for the record at `end - 1`:
transaction markers, aborted transactions and compaction leave holes in the offsets.

Why not a Spark Python data source (this module was one): Spark runs a data source's `schema()` and
`partitions()` in planner workers that it forks from pyspark's own daemon, whatever `spark.python.daemon.module`
says, each importing pyarrow and this code again (about 0.5 CPU-s each, two or more per job). `mapInArrow`'s
workers fork from the server's daemon (`spark_jobs.python_daemon`, libraries loaded), and the schema is known on
the driver (`output_arrow_schema`).

The reader carries the job as JSON (`ReadJob.dumps`: the spec redacted) and, apart, what must stay secret: the
resolved Kafka client properties, the unredacted inputFormat when it holds schema registry credentials, and the
settings of deep storage on an object store reached with a spec's settings. They travel pickled with the plan;
Spark shows a Python function by its name only (`SplitsReader`), in plans, the UI and Spark Connect's
statements (which abbreviate a function's bytes to their first few).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Iterator

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from ingest_core.core.defaults import PROGRESS_INTERVAL_S, STALL_TIMEOUT_S
from ingest_core.core.errors import BrokerUnavailableError, OffsetOutOfRangeError, TopicNotFoundError
from ingest_core.core.offsets import OffsetRange
from ingest_core.core.periods import format_datetime, parse_datetime
from ingest_core.core.spec import DatasourceSpec, parse_spec
from ingest_core.executor import buckets
from ingest_core.executor.discovery import AUTO_JSON
from ingest_core.executor.rollup import PartialRollup, RollupBuffer, aggregators, row_metrics, row_metrics_schema
from ingest_core.executor.row_parser import DIMS_JSON, PARTITION, TIME, TIME_TYPE, RecordChunk, RowParser
from ingest_core.handover import dead_letters, deep_storage, object_store
from ingest_core.handover.dead_letters import RawRecords
from ingest_core.handover.report import (
    ParseExceptionLimitError,
    ServiceProblem,
    SplitFailure,
    SplitReport,
    limit_exceeded_message,
)
from ingest_core.kafka.config import KafkaClientConfig, list_topics

log = logging.getLogger(__name__)

BUCKET = "__bucket"    # the row's time truncated to queryGranularity
SEGMENT = "__segment"  # the start of its segmentGranularity interval, epoch ms
SPARK_TIME = pa.timestamp("us", tz="UTC")  # what Spark's TimestampType expects from Arrow

# librdkafka errors that mean the broker cannot be used right now (as opposed to bad data)
_FATAL_ERROR_NAMES = {"_ALL_BROKERS_DOWN", "_TRANSPORT", "_RESOLVE", "_AUTHENTICATION", "SASL_AUTHENTICATION_FAILED",
                      "TOPIC_AUTHORIZATION_FAILED", "_SSL"}


@dataclass(frozen=True)
class SplitPartition:
    """One split, one Spark task: [start, end) of one topic partition; `index`: its place in the group's splits
    (its reports' name)."""

    index: int
    topic: str
    partition: int
    start: int
    end: int


@dataclass(frozen=True)
class ReadJob:
    """Everything a split reader needs; built on the driver, carried to the tasks as JSON (`dumps`/`loads`: the
    spec goes as its redacted raw form; the secrets travel apart, see `SplitsReader`)."""

    spec: DatasourceSpec
    created_at: datetime  # the plan's creation time: the default timestamp of rows without one
    splits: tuple[OffsetRange, ...]
    output_uri: str
    poll_timeout_s: float = 1.0
    stall_timeout_s: float = STALL_TIMEOUT_S
    batch_records: int = 20_000
    progress_interval_s: float = PROGRESS_INTERVAL_S

    def dumps(self) -> str:
        return json.dumps({"spec": self.spec.to_raw(), "source": self.spec.source,
                           "createdAt": format_datetime(self.created_at),
                           "splits": [s.to_json() for s in self.splits], "outputUri": self.output_uri,
                           "pollTimeoutS": self.poll_timeout_s, "stallTimeoutS": self.stall_timeout_s,
                           "batchRecords": self.batch_records, "progressIntervalS": self.progress_interval_s})

    @classmethod
    def loads(cls, text: str, input_format: dict | None = None) -> ReadJob:
        """`input_format`: the unredacted inputFormat (registry credentials) in place of the job spec's redacted
        one."""
        d = json.loads(text)
        raw = d["spec"]
        if input_format:
            io_config = {**raw["spec"]["ioConfig"], "inputFormat": input_format}
            raw = {**raw, "spec": {**raw["spec"], "ioConfig": io_config}}
        return cls(parse_spec(raw, d["source"]), parse_datetime(d["createdAt"]),
                   tuple(OffsetRange.from_json(s) for s in d["splits"]), d["outputUri"], d["pollTimeoutS"],
                   d["stallTimeoutS"], d["batchRecords"], d["progressIntervalS"])


def split_parser(job: ReadJob) -> RowParser:
    """The row parser of each split: it keeps the rows the filter throws away when the spec's dead letters ask."""
    spec = job.spec
    dead_letter = spec.microbatch.dead_letter
    keep = spec.microbatch.dead_letters_on and dead_letter is not None and dead_letter.include_thrown_away
    return RowParser(spec, job.created_at, keep_thrown_away=keep)


def split_rollup(parser: RowParser) -> PartialRollup | None:
    """The partial rollup each split applies before handing rows to Spark, or None without rollup."""
    if not parser.spec.data_schema.granularity_spec.rollup:
        return None
    dims = ([t.column for t in parser.targets if not t.is_metric_input] + ([DIMS_JSON] if parser.schemaless else [])
            + ([AUTO_JSON] if parser.typed_discovery else []))
    return PartialRollup([BUCKET, *dims, PARTITION], aggregators(parser.spec))


def output_arrow_schema(parser: RowParser) -> pa.Schema:
    """The rows a split yields: the parser's columns plus the bucket (partial rows with rollup: see
    `ingest_core.executor.rollup`), then the segment; timestamps as Spark expects them."""
    rows = parser.output_schema.append(pa.field(BUCKET, TIME_TYPE))
    rollup = split_rollup(parser)
    if rollup is not None:
        rows = rollup.schema(rows)
    else:
        rows = row_metrics_schema(rows, aggregators(parser.spec))
    fields = [pa.field(f.name, SPARK_TIME) if pa.types.is_timestamp(f.type) else f for f in rows]
    return pa.schema(fields + [pa.field(SEGMENT, pa.int64())])


class SplitsReader:
    """The function `mapInArrow` runs in each Spark task: it reads the splits whose indexes its input batches hold
    (one: a row per split, a partition per row). Picklable, holding only text and plain values; the reader and its
    parsed spec are made in the task."""

    def __init__(self, job: ReadJob, consumer_properties: dict[str, Any], input_format: dict | None = None,
                 deep_storage_access: dict | None = None):
        """`input_format`: the unredacted inputFormat (registry credentials), None when the job's is complete;
        `deep_storage_access`: `object_store.S3Access.to_json()` of the attempt's folder, None without one."""
        self.job_json = job.dumps()
        self.consumer_properties = dict(consumer_properties)
        self.input_format = input_format
        self.deep_storage_access = deep_storage_access

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        reader = self.range_reader(ReadJob.loads(self.job_json, self.input_format))
        for batch in batches:
            for index in batch.column(0).to_pylist():
                yield from reader.read(reader.split(index))

    def range_reader(self, job: ReadJob) -> KafkaRangeReader:
        """The reader of each split (`warmup`'s reads no broker)."""
        return KafkaRangeReader(job, self.consumer_properties, self.deep_storage_access)


class KafkaRangeReader:
    """Reads one split at a time (`read`) into Arrow batches of `output_arrow_schema`, with its reports."""

    def __init__(self, job: ReadJob, consumer_properties: dict[str, Any], deep_storage_access: dict | None = None):
        self.job = job
        self.consumer_properties = consumer_properties
        # reports and dead letters go where the driver writes, with the job's own settings: a Python worker may
        # serve jobs of other datasources on the same bucket name
        self.access = object_store.S3Access.from_json(deep_storage_access) if deep_storage_access else None

    def consumer(self, partition: SplitPartition, raw: bool) -> SplitConsumer:
        """Where the split's records come from: its partition of the topic (`warmup` gives its own)."""
        return SplitConsumer(self.consumer_properties, partition, self.job, raw=raw)

    def split(self, index: int) -> SplitPartition:
        s = self.job.splits[index]
        return SplitPartition(index, s.tp.topic, s.tp.partition, s.start, s.end)

    def read(self, partition: SplitPartition) -> Iterator[pa.RecordBatch]:
        report = SplitReport(partition.index, partition.topic, partition.partition, partition.start, partition.end,
                             started_at=time.time())
        started = time.monotonic()
        progress_uri = deep_storage.join(self.job.output_uri, "progress", f"split-{partition.index:05d}.json")
        try:
            yield from self._read(partition, report, started, progress_uri)
        except Exception as exc:
            # Spark hands the driver only this exception's text: its code goes into the split's report
            report.failure = SplitFailure.of(exc)
            report.seconds = time.monotonic() - started
            try:
                deep_storage.write_json(progress_uri, report.to_json(), self.access)
            except Exception as unwritten:  # noqa: BLE001 - the split's own error is the one to raise
                log.warning("split %d: its failure could not be reported at %s: %s", partition.index, progress_uri,
                            unwritten)
            raise

    def _read(self, partition: SplitPartition, report: SplitReport, started: float,
              progress_uri: str) -> Iterator[pa.RecordBatch]:
        spec, parser = self.job.spec, split_parser(self.job)
        gran = spec.data_schema.granularity_spec
        schema = output_arrow_schema(parser)
        rollup = split_rollup(parser)
        buffer = RollupBuffer(rollup, spec.tuning_config.max_rows_in_memory) if rollup is not None else None
        metrics = aggregators(spec)
        limit = spec.tuning_config.effective_max_parse_exceptions
        last_progress = started - self.job.progress_interval_s  # the first chunk reports at once

        def batches(rows: pa.Table) -> Iterator[pa.RecordBatch]:
            segment = buckets.floor(gran.segment_granularity, rows.column(BUCKET))
            cols = [pc.cast(c, SPARK_TIME) if pa.types.is_timestamp(c.type) else c for c in rows.columns]
            cols.append(pc.cast(pc.cast(segment, pa.timestamp("ms", tz="UTC")), pa.int64()))
            yield from pa.Table.from_arrays(cols, schema=schema).to_batches()

        # dead letters cost nothing when they are off: no writer, and the consumer keeps no keys or timestamps
        writer = (dead_letters.DeadLetterWriter(dead_letters.file_uri(self.job.output_uri, partition.index),
                                                 access=self.access)
                  if spec.microbatch.dead_letters_on else None)
        consumer = self.consumer(partition, raw=writer is not None)
        for chunk, raw in consumer.records():
            parsed = parser.parse(chunk)
            if writer is not None and parsed.rejections:
                writer.add(dead_letters.dead_letter_table(chunk, parsed.rejections, raw))
            report.records += len(chunk)
            report.last_offset = chunk.offsets[-1]
            report.stats.add(parsed.stats)
            if parsed.problems:
                ServiceProblem.merge(report.problems, parsed.problems)
            if parser.max_saved and parsed.exceptions:
                report.saved_exceptions = (report.saved_exceptions + parsed.exceptions)[-parser.max_saved:]
            if limit is not None and report.stats.parse_exceptions > limit:
                last = parsed.exceptions[-1] if parsed.exceptions else None
                # the split's count and the exception that stopped it, for the group's FAILED report
                if last is not None:  # kept even with maxSavedParseExceptions 0
                    kept = [e for e in report.saved_exceptions if e != last]
                    report.saved_exceptions = kept[len(kept) - max(parser.max_saved - 1, 0):] + [last]
                raise ParseExceptionLimitError(limit_exceeded_message(
                    limit, report.stats.parse_exceptions,
                    f"split {partition.index} ({partition.topic}/{partition.partition} "
                    f"[{partition.start}, {partition.end}))", last))
            if time.monotonic() - last_progress >= self.job.progress_interval_s:  # progress while it runs, not only at the end
                report.seconds = time.monotonic() - started
                deep_storage.write_json(progress_uri, report.to_json(), self.access)
                last_progress = time.monotonic()
            table = parsed.table
            if table.num_rows == 0:
                continue
            table = table.append_column(BUCKET, buckets.floor(gran.query_granularity, table.column(TIME)))
            if buffer is None:
                yield from batches(row_metrics(table, metrics))
            elif (partial := buffer.add(table)) is not None:
                yield from batches(partial)
        if buffer is not None and (partial := buffer.flush()) is not None:
            yield from batches(partial)
        report.seconds = time.monotonic() - started
        report.dead_letters = writer.close() if writer is not None else None
        deep_storage.write_json(deep_storage.join(self.job.output_uri, "splits", f"split-{partition.index:05d}.json"),
                                report.to_json(), self.access)


class SplitConsumer:
    """Reads exactly [start, end) of one partition, in chunks, with bounded waits."""

    def __init__(self, properties: dict[str, Any], split: SplitPartition, job: ReadJob, *, raw: bool = False):
        """`raw`: `records()` also hands on each record's key, timestamp and headers (for dead letters)."""
        self.properties = properties
        self.split = split
        self.job = job
        self.kafka_format = job.spec.io_config.input_format.type == "kafka"
        self.datasource = job.spec.datasource  # for the commands its errors advise
        self.raw = raw
        self.errors: list[str] = []
        self.kafka = KafkaClientConfig(properties, ())  # resolved on the driver already: no secrets to find

    def _on_error(self, err: KafkaError) -> None:
        self.errors.append(str(err))
        self.kafka.refusals.record(err)

    def config(self) -> dict[str, Any]:
        """The consumer's librdkafka configuration: the spec's consumerProperties, then what a bounded read
        needs."""
        conf = self.kafka.consumer(**{
            "enable.auto.offset.store": False, "enable.partition.eof": True, "error_cb": self._on_error})
        conf.setdefault("log_level", 2)  # connection errors reach error_cb and the split's error message
        # librdkafka pre-fetches in the background until its queue holds queued.min.messages (100,000) records
        # or queued.max.messages.kbytes (64 MB): a split of 100 records would pull up to 64 MB of the partition
        # past its end, and every split ends with such an overshoot. Keep no more records queued than the range
        # holds, and at most 16 MB (librdkafka lowers fetch.max.bytes to match): a split of 1M records still
        # fetches 1 MB responses (max.partition.fetch.bytes) back to back. A full queue postpones the next fetch
        # by fetch.queue.backoff.ms (1 s), long enough to drain it and leave the reader waiting: look again
        # soon. consumerProperties win.
        conf.setdefault("queued.min.messages", max(1, min(100_000, self.split.end - self.split.start)))
        conf.setdefault("queued.max.messages.kbytes", 16_384)
        conf.setdefault("fetch.queue.backoff.ms", 10)
        return conf

    def chunks(self) -> Iterator[Any]:
        for chunk, _ in self.records():
            yield chunk

    def records(self) -> Iterator[tuple[Any, Any]]:
        """(RecordChunk, RawRecords or None): the raw parts only with `raw`."""
        s = self.split
        conf = self.config()
        consumer = Consumer(conf)
        # The topic's metadata is asked for only once a poll brings nothing: a librdkafka metadata request before
        # the first fetch costs about 50 ms, most of a small split's read, and a healthy read never needs it.
        checked = False
        try:
            consumer.assign([TopicPartition(s.topic, s.partition, s.start)])
            position = s.start
            delivered = s.start  # below it every record was handed on (position may run ahead: EOF, markers)
            last_progress = time.monotonic()
            while position < s.end:
                msgs = consumer.consume(num_messages=min(self.job.batch_records, max(1, s.end - position)),
                                        timeout=self.job.poll_timeout_s)
                # per-message passes are the loop's cost: map over the method descriptors, no lambdas
                errors = [m for m in msgs if m.error() is not None] if any(map(Message.error, msgs)) else []
                data = msgs if not errors else [m for m in msgs if m.error() is None]
                for m in errors:
                    err = m.error()
                    if err.code() == KafkaError._PARTITION_EOF:
                        # everything below the end of the log was delivered or is a hole
                        position = max(position, m.offset())
                        if position < s.end:
                            self._check_truncated(consumer, position)
                    else:
                        self._raise_for(err, consumer, position)
                if data and data[-1].offset() >= s.end:
                    data = [m for m in data if m.offset() < s.end]
                if data and data[0].offset() < delivered:  # a re-fetch after a reconnect must not count twice
                    data = [m for m in data if m.offset() >= delivered]
                if data:
                    first, last = data[0].offset(), data[-1].offset()
                    position = max(position, last + 1)
                    delivered = last + 1
                    last_progress = time.monotonic()
                    # offsets only grow, so n records spanning n offsets are exactly that range
                    offsets = (range(first, last + 1) if last - first + 1 == len(data)
                               else list(map(Message.offset, data)))
                    full = self.kafka_format or self.raw
                    keys = list(map(Message.key, data)) if full else None
                    timestamps = [m.timestamp()[1] for m in data] if full else None
                    headers = list(map(Message.headers, data)) if full else None
                    chunk = RecordChunk(s.topic, s.partition, offsets, list(map(Message.value, data)),
                                        keys=keys if self.kafka_format else None,
                                        timestamps=timestamps if self.kafka_format else None,
                                        headers=headers if self.kafka_format else None)
                    yield chunk, (RawRecords(keys, timestamps, headers) if self.raw else None)  # type: ignore[arg-type]
                    continue
                moved = self._position(consumer)
                if moved > position:  # skipped transaction markers or aborted records
                    position = moved
                    last_progress = time.monotonic()
                    continue
                if not checked:  # a missing topic or partition, a refused login: named now, not at the stall
                    self._check_topic(consumer, conf)
                    checked = True
                if time.monotonic() - last_progress > self.job.stall_timeout_s:
                    self._stalled(consumer, position)
        finally:
            consumer.close()

    def _check_topic(self, consumer: Consumer, conf: dict[str, Any]) -> None:
        s = self.split
        try:  # a refused login or certificate raises KafkaAuthenticationError at once
            md = list_topics(consumer, self.kafka, min(self.job.stall_timeout_s, 30), s.topic)
        except KafkaException as exc:
            raise BrokerUnavailableError(
                f"cannot reach Kafka at {conf.get('bootstrap.servers')} to read {s.topic}/{s.partition}: {exc}. "
                "Check that the brokers are up and reachable from the Spark executors.") from None
        topic_md = md.topics.get(s.topic)
        if topic_md is None or topic_md.error is not None or s.partition not in topic_md.partitions:
            raise TopicNotFoundError(f"{s.topic}/{s.partition} does not exist on {conf.get('bootstrap.servers')}: "
                                     "the topic was deleted or re-created after the run was planned")

    def _position(self, consumer: Consumer) -> int:
        pos = consumer.position([TopicPartition(self.split.topic, self.split.partition)])[0].offset
        return pos if pos >= 0 else -1

    def _watermarks(self, consumer: Consumer) -> tuple[int, int] | None:
        try:
            return consumer.get_watermark_offsets(TopicPartition(self.split.topic, self.split.partition), timeout=10)
        except Exception:  # noqa: BLE001 - the caller reports the broker as unreachable
            return None

    def _check_truncated(self, consumer: Consumer, position: int) -> None:
        marks = self._watermarks(consumer)
        if marks is not None and marks[1] < self.split.end:
            self._fail_range(position, marks)

    def _fail_range(self, position: int, marks: tuple[int, int]) -> None:
        s = self.split
        earliest, latest = marks
        # The advice touches this partition only: a reset of the datasource would re-read every other one.
        if position < earliest:
            why = (f"offset {position} is below the log start {earliest}: the records were deleted "
                   f"(retention or delete-records) before this run read them. Nothing was committed. To accept the "
                   f"loss of records {position}..{earliest - 1}, move only this partition to its log start: "
                   f"`ingest set-offsets {self.datasource} {s.topic}:{s.partition}=earliest` (audited; the next run "
                   f"plans from there), or set tuningConfig.resetOffsetAutomatically")
        else:
            why = (f"the partition now ends at {latest}, before the planned end {s.end}: the topic was "
                   f"truncated or re-created. Nothing was committed. The next run's plan checks the topic's id "
                   f"and names the commands if it was re-created; if only this partition lost its tail, continue "
                   f"from its end: `ingest set-offsets {self.datasource} {s.topic}:{s.partition}=latest`")
        raise OffsetOutOfRangeError(
            f"cannot read {s.topic}/{s.partition} [{s.start}, {s.end}): {why}.",
            topic=s.topic, partition=s.partition, offset=position, earliest=earliest, latest=latest)

    def _raise_for(self, err: KafkaError, consumer: Consumer, position: int) -> None:
        if err.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
            marks = self._watermarks(consumer) or (position + 1, position + 1)
            self._fail_range(position, marks)
        if err.name() in _FATAL_ERROR_NAMES or err.fatal():
            raise BrokerUnavailableError(f"Kafka error while reading {self.split.topic}/{self.split.partition} at "
                                         f"offset {position}: {err.str()}")
        raise RuntimeError(f"Kafka error while reading {self.split.topic}/{self.split.partition} at offset "
                           f"{position}: {err.str()}")

    def _stalled(self, consumer: Consumer, position: int) -> None:
        s = self.split
        if (refused := self.kafka.refusal()) is not None:
            raise refused
        marks = self._watermarks(consumer)
        if marks is None:
            recent = "; ".join(self.errors[-3:]) or "no answer"
            raise BrokerUnavailableError(
                f"no data from Kafka for {self.job.stall_timeout_s:.0f}s while reading {s.topic}/{s.partition} at "
                f"offset {position} (planned end {s.end}), and the broker does not answer: {recent}. Check that "
                f"{self.properties.get('bootstrap.servers')} is reachable from the Spark executors.")
        if marks[0] > position or marks[1] < s.end:
            self._fail_range(position, marks)
        raise BrokerUnavailableError(
            f"no progress for {self.job.stall_timeout_s:.0f}s reading {s.topic}/{s.partition} at offset {position} "
            f"(planned end {s.end}, log {marks[0]}..{marks[1]}); recent client errors: "
            f"{'; '.join(self.errors[-3:]) or 'none'}")
