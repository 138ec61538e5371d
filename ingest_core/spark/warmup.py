"""A Spark Connect server's warm-up: one small job shaped like the ingest job, run once as the server starts, so
that the first group job after a start or a restart does not pay for a cold JVM.

A fresh server's first group job took 49 s against 4 s for the next ones (benchmarks/connect_restart.py, load
10-14): its JVM loads and compiles the classes of every step as it first meets them (the Python UDF runner, Arrow,
the aggregate's and sort's generated code, the Parquet writer, the file commit). The warm-up meets them first:
in a session of its own (with this project's code, and the Python check that a job's session makes), a
`mapInArrow` over two splits whose Python workers fork from the server's daemon
(`spark.python.daemon.module=spark_jobs.python_daemon`) and run the split reader and the row parser on records it
makes up (`WarmUpRangeReader`: no broker), then the job's rollup and its partitioned Parquet write
(`job.write_segments`), into a folder of the server's own (`spark.local.dir`/ingest-warm-up/<port>, replaced at
each warm-up). What stays for the first job is its own session's: its Python daemon's start.

    python -m ingest_core.spark.warmup sc://HOST:PORT [--timeout SECONDS]

waits up to --timeout seconds for the server to accept a session (it may still be starting), then warms it up;
exit code 0, or 1 with one line saying why. `EmbeddedSparkConnect.start()` runs it; a server of your own runs it
after each start (docs/spark-connect.md)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Iterator
from urllib.parse import urlparse

from ingest_core.core.errors import IngestError
from ingest_core.core.offsets import OffsetRange, TopicPartition
from ingest_core.core.spec import parse_spec
from ingest_core.executor.row_parser import RecordChunk
from ingest_core.spark.connect import connect_mode, open_session
from ingest_core.spark.job import read_splits, write_segments
from ingest_core.spark.kafka_source import KafkaRangeReader, ReadJob, SplitPartition, SplitsReader
from ingest_core.spark.rollup import rollup

TOPIC = "ingest-warm-up"
SPLITS, RECORDS = 2, 500  # records per split
CREATED_AT = datetime(2026, 1, 1, tzinfo=timezone.utc)
SPEC = {
    "type": "kafka",
    "spec": {
        "dataSchema": {
            "dataSource": "ingest_warm_up",
            "timestampSpec": {"column": "time", "format": "millis"},
            "dimensionsSpec": {"dimensions": ["channel", "page", {"type": "long", "name": "robot"}]},
            "metricsSpec": [{"type": "count", "name": "edits"}, {"type": "longSum", "name": "added", "fieldName": "added"},
                            {"type": "longMax", "name": "max_added", "fieldName": "added"}],
            "granularitySpec": {"segmentGranularity": "HOUR", "queryGranularity": "MINUTE", "rollup": True},
        },
        "ioConfig": {"topic": TOPIC, "inputFormat": {"type": "json"},
                     "consumerProperties": {"bootstrap.servers": "127.0.0.1:9"}},
    },
}


class WarmUpRangeReader(KafkaRangeReader):
    """The job's split reader, with made-up records in place of its topic's: every step after the consumer (the
    parse, the partial rollup, the Arrow batches, the split's report) is the job's own."""

    def consumer(self, partition: SplitPartition, raw: bool) -> Any:
        return MadeUpRecords(partition)


class MadeUpRecords:
    """A split's records: JSON edits two hours long, in two chunks."""

    def __init__(self, partition: SplitPartition):
        self.partition = partition

    def records(self) -> Iterator[tuple[RecordChunk, None]]:
        p, start_ms = self.partition, int(CREATED_AT.timestamp() * 1000)
        offsets = range(p.start, p.end)
        values = [json.dumps({"time": start_ms + 7_000 * o, "channel": f"#c{o % 7}", "page": f"p{o % 31}",
                              "robot": o % 2, "added": o}).encode() for o in offsets]
        half = len(values) // 2
        for part in (slice(0, half), slice(half, None)):
            yield RecordChunk(p.topic, p.partition, offsets[part], values[part]), None


class WarmUpSplitsReader(SplitsReader):
    def range_reader(self, job: ReadJob) -> KafkaRangeReader:
        return WarmUpRangeReader(job, self.consumer_properties, self.deep_storage_access)


@dataclass
class WarmUp:
    seconds: float
    s3a: str  # what the S3A step found: "warmed", or why not


def warm_up(url: str, timeout_s: float | None = None) -> WarmUp:
    """Warm up the Spark Connect server at `url` (waiting up to `timeout_s` for it to accept a session, default
    `connect.connect_timeout_s()`)."""
    started = time.monotonic()
    spec = parse_spec(SPEC, "warm-up")
    with connect_mode():
        spark = open_session(url, timeout_s=timeout_s)  # a session of its own, released below
        try:
            s3a = warm_s3a(spark)
            folder = f"{spark.conf.get('spark.local.dir', '/tmp').split(',')[0]}/ingest-warm-up/{_port(url)}"
            splits = tuple(OffsetRange(TopicPartition(TOPIC, i), 0, RECORDS) for i in range(SPLITS))
            job = ReadJob(spec, CREATED_AT, splits, f"file://{folder}")
            rows = read_splits(spark, job, {}, tasks=SPLITS, reader_class=WarmUpSplitsReader)
            rolled, dims, metrics = rollup(rows, spec)
            write_segments(rolled, dims, metrics, spec, f"file://{folder}/segments", mode="overwrite")
        finally:
            try:
                spark.stop()
            except Exception:  # noqa: BLE001 - a server that died meanwhile has nothing to release
                pass
    return WarmUp(time.monotonic() - started, s3a)


# Hadoop's S3A connector (deep storage on S3) against an endpoint that refuses at once, asked once: its first use
# in a JVM builds the AWS SDK's client, 10.4 s on a cold server (load 13), 0.2 s after
S3A_SCHEME, S3A_BUCKET = "s3a-warm-up", "ingest-warm-up"
S3A_CONF = {"endpoint": "http://127.0.0.1:9", "endpoint.region": "us-east-1", "path.style.access": "true",
            "access.key": "warm-up", "secret.key": "warm-up", "attempts.maximum": "0", "retry.limit": "0",
            "connection.establish.timeout": "2s"}


def warm_s3a(spark: Any) -> str:
    """Load the S3A connector's classes (a listing that fails to connect) if the server has it."""
    spark.conf.set(f"fs.{S3A_SCHEME}.impl", "org.apache.hadoop.fs.s3a.S3AFileSystem")
    for key, value in S3A_CONF.items():
        spark.conf.set(f"fs.s3a.bucket.{S3A_BUCKET}.{key}", value)
    try:
        spark.read.parquet(f"{S3A_SCHEME}://{S3A_BUCKET}/none").schema
    except Exception as exc:  # noqa: BLE001 - the expected end: nothing answers there
        text = str(exc)
        if "S3AFileSystem" in text and ("ClassNotFound" in text or "not found" in text):
            return "not on the server's classpath"
        return "warmed"
    return "warmed"


def _port(url: str) -> int:
    return urlparse(url.split(";")[0].replace("sc://", "http://", 1)).port or 15002


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ingest_core.spark.warmup", description=__doc__.splitlines()[0])
    parser.add_argument("url", help="the Spark Connect server, sc://HOST:PORT[/;params]")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="seconds to wait for the server to accept a session (it may still be starting)")
    args = parser.parse_args(argv)
    if not args.url.startswith("sc://"):
        print(f"warm-up: {args.url!r} is not a Spark Connect URL (sc://HOST:PORT)", file=sys.stderr)
        return 1
    try:
        done = warm_up(args.url, args.timeout)
    except IngestError as exc:
        print(f"warm-up: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - Spark's and gRPC's: one line, the server's log has the rest
        text = str(exc).strip()
        print(f"warm-up: the server at {args.url.split(';')[0]} failed the warm-up job: "
              f"{text.splitlines()[0] if text else type(exc).__name__}", file=sys.stderr)
        return 1
    print(f"warm-up: {args.url.split(';')[0]} warmed up in {done.seconds:.1f} s (S3A: {done.s3a})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
