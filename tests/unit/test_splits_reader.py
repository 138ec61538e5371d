"""The function each Spark task of the ingest job runs (`kafka_source.SplitsReader`, in `mapInArrow`): it crosses
to the task pickled, as Spark sends it, and reads the splits its input rows name. Without a broker: a split of an
unreachable one fails at once, leaving its report where the driver looks for the failure's code."""

from __future__ import annotations

from datetime import datetime, timezone

import pyarrow as pa
import pytest
from helpers import make_spec
from pyspark import cloudpickle

from ingest_core.core.errors import BrokerUnavailableError
from ingest_core.core.offsets import OffsetRange, TopicPartition
from ingest_core.handover.report import latest_split_reports
from ingest_core.spark.kafka_source import ReadJob, SplitsReader

UNREACHABLE = "127.0.0.1:9"


def test_a_task_reads_the_split_its_row_names_and_reports_its_failure_by_code(tmp_path):
    splits = (OffsetRange(TopicPartition("t", 0), 0, 10), OffsetRange(TopicPartition("t", 1), 5, 8))
    job = ReadJob(spec=make_spec(UNREACHABLE, topic="t"), created_at=datetime(2026, 1, 1, tzinfo=timezone.utc),
                  splits=splits, output_uri=tmp_path.as_uri(), stall_timeout_s=1)
    reader = cloudpickle.loads(cloudpickle.dumps(SplitsReader(job, {"bootstrap.servers": UNREACHABLE})))
    row = pa.record_batch([pa.array([1], pa.int64())], names=["id"])  # spark.range's column
    with pytest.raises(BrokerUnavailableError, match="t/1"):
        list(reader(iter([row])))
    reports, done = latest_split_reports(tmp_path.as_uri())
    assert list(reports) == [1] and done == set()  # split 1 only, and it did not finish
    report = reports[1]
    assert (report.topic, report.partition, report.start, report.end, report.records) == ("t", 1, 5, 8, 0)
    assert report.failure is not None and report.failure.code == BrokerUnavailableError.code


def test_the_pickled_reader_holds_the_job_as_text_and_the_secrets_apart():
    """What a task gets: the job's spec in its redacted form (`ReadJob.dumps`), the resolved secrets beside it,
    the unredacted inputFormat put back in place of the redacted one when the reader is made."""
    spec = make_spec(UNREACHABLE, topic="t")
    job = ReadJob(spec=spec, created_at=datetime(2026, 1, 1, tzinfo=timezone.utc),
                  splits=(OffsetRange(TopicPartition("t", 0), 0, 10),), output_uri="file:///o")
    fmt = {"type": "json", "flattenSpec": {"useFieldDiscovery": False}}
    again = cloudpickle.loads(cloudpickle.dumps(SplitsReader(job, {"sasl.password": "p"}, fmt, {"secretKey": "k"})))
    assert ReadJob.loads(again.job_json) == job
    assert (again.consumer_properties, again.deep_storage_access) == ({"sasl.password": "p"}, {"secretKey": "k"})
    assert ReadJob.loads(again.job_json, again.input_format).spec.io_config.input_format.flatten_spec is not None


def test_a_small_group_is_read_by_one_task_a_large_one_by_a_task_per_split():
    """One task reads a small group's splits one after the other, so its rollup needs no shuffle (the plan
    test in tests/integration/test_spark_connect.py); a large group keeps a task per split."""
    from ingest_core.core.defaults import ONE_TASK_MAX_RECORDS
    from ingest_core.core.offsets import StartSource
    from ingest_core.core.planner import PartitionPlan, TaskGroup
    from ingest_core.spark.job import read_tasks

    def group(*sizes: int) -> TaskGroup:
        parts = tuple(PartitionPlan(TopicPartition("t", i), 100, 100 + n, StartSource.COMMITTED)
                      for i, n in enumerate(sizes))
        return TaskGroup(0, parts, tuple(OffsetRange(p.tp, p.start, p.end) for p in parts))

    half = ONE_TASK_MAX_RECORDS // 2
    assert read_tasks(group(half, half)) == 1
    assert read_tasks(group(half, half + 1)) == 2
    assert read_tasks(group(5, 5, 5)) == 1
    assert read_tasks(group(3 * half, 0, 5)) == 3
