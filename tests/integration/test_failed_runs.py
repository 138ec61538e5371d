"""A failed run explains itself: which records failed and why, in `ingest status`, `ingest
health` and the REST API's JSON; a run whose groups all failed never shows as published; `ingest skip` moves
past exactly the ranges that failed, audited and counted as lost. Real SQLite and PostgreSQL, real Kafka and
Spark for the jobs that fail."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from helpers import SIMPLE, T0, iso, make_spec, plan_next, spec_from

from ingest_core.core.states import RunEvent
from ingest_core.core.errors import IngestError, NothingSucceededError
from ingest_core.core.offsets import OffsetRange, TopicPartition
from ingest_core.handover import deep_storage
from ingest_core.handover.report import SplitFailure, latest_split_reports
from ingest_core.supervisor.publish import read_report
from ingest_core.supervisor.report import keep_failure_reports
from ingest_core.service import cli
from ingest_core.supervisor.actions import DatasourceActions
from ingest_core.service.status import collect_status
from ingest_core.store.audit import SKIP
from ingest_core.core.states import RunStatus
from ingest_core.store.publisher import GroupResult, Publisher, SegmentDescriptor

PARTS = [TopicPartition("edits", p) for p in range(2)]


def seg(tag: str, rows: int) -> SegmentDescriptor:
    return SegmentDescriptor(T0, T0 + timedelta(hours=1), f"file:///deep/wiki/{tag}.parquet", rows, rows * 10)


def publish_whole(store, plan) -> None:
    Publisher(store).publish("wiki", plan.run_id, [GroupResult(g.group_id, [seg(f"{plan.run_id}-{g.group_id}", 1)])
                                                  for g in plan.groups if not g.is_empty])


def fail(store, spec, run_id: str) -> None:
    """What a failed run's report task does: FAILED, and its failed groups' reports kept."""
    store.runs.move("wiki", run_id, RunEvent.FAIL, error="its tasks failed before publishing")
    keep_failure_reports(store, spec, store.runs.require("wiki", run_id))


def offline_spec(tmp_path):
    """A spec of `wiki` whose broker is never asked (status reports it unreachable, which changes nothing here)."""
    return make_spec("127.0.0.1:9", "wiki", topic="edits", microbatch={"deepStorage": {"uri": tmp_path.as_uri()}})


def attempt_of(tmp_path, spec, run_id: str) -> str:
    """The one attempt folder of task group 0 of `run_id` (where `run_failing_group` ran it)."""
    [attempt] = deep_storage.attempt_folders(deep_storage.group_uri(tmp_path.as_uri(), spec.datasource, run_id, 0))
    return attempt


def committed(store) -> dict[TopicPartition, int]:
    return {tp: k.offset for tp, k in store.offsets.committed("wiki").items()}


def test_a_run_whose_groups_all_failed_is_never_published(store):
    plan = plan_next(store, "r1", {tp: 10 for tp in PARTS}, task_count=2)
    with pytest.raises(NothingSucceededError, match=r"every task group with records failed \(\[0, 1\]\)"):
        Publisher(store).publish("wiki", "r1", [])
    run = store.runs.require("wiki", "r1")
    assert run.status is RunStatus.PLANNED and run.published_at is None  # its report task marks it FAILED
    assert store.segment_records.of("wiki") == [] and committed(store) == {}
    assert plan.records == 20
    report = collect_status(store, "wiki", None).to_json()["payload"]
    assert [r["status"] for r in report["recentRuns"]] == ["PLANNED"] and report["currentOffsets"] == {}
    # one group of two failing still publishes the other (its partitions advance, the failed one's stay)
    publish = Publisher(store).publish("wiki", "r1", [GroupResult(0, [seg("r1-0", 10)])])
    assert publish.failed_groups == (1,) and committed(store) == {PARTS[0]: 10}


def test_a_group_that_left_no_report_is_shown_with_its_records_and_skip_moves_past_exactly_them(
        store, store_url, tmp_path, capsys):
    spec = offline_spec(tmp_path)
    publish_whole(store, plan_next(store, "r0", {tp: 10 for tp in PARTS}, task_count=1))
    plan_next(store, "r1", {tp: 25 for tp in PARTS}, task_count=1)
    fail(store, spec, "r1")

    status = collect_status(store, "wiki", None)
    errors = [e for e in status.to_json()["payload"]["recentErrors"] if e.get("taskGroup") is not None]
    assert errors == [{
        "timestamp": errors[0]["timestamp"], "exceptionClass": "JobLostError", "code": "INGEST_JOB_LOST",
        "streamException": False,
        "runId": "r1", "taskGroup": 0, "message": errors[0]["message"],
        "partitions": [{"topic": "edits", "partition": p, "start": 10, "end": 25} for p in (0, 1)]}]
    assert "left no report" in errors[0]["message"] and "spark_job task log" in errors[0]["message"]
    assert cli.main(["--metadata-url", store_url, "health", "wiki", "--dags-folder", str(tmp_path / "none")]) in (0, 1)
    out = capsys.readouterr().out
    assert "last failure: [INGEST_JOB_LOST] JobLostError" in out
    assert "records: edits:0 [10, 25), edits:1 [10, 25)" in out

    # a run planned after the failure, still in flight, reads the same offsets: skip supersedes it
    plan_next(store, "r2", {tp: 30 for tp in PARTS}, task_count=1)
    actions = DatasourceActions(store, None, "alice")
    offered = actions.failed_ranges("wiki")
    assert [(f.range, f.run_id) for f in offered] == [(OffsetRange(tp, 10, 25), "r1") for tp in PARTS]
    assert cli.main(["--metadata-url", store_url, "skip", "wiki", "--yes", "--no-airflow", "--actor", "alice"]) == 0
    captured = capsys.readouterr()
    assert "would skip partition edits-0 offsets [10, 25) (15 records) of run r1" in captured.out
    assert "these records are lost" in captured.err
    assert committed(store) == {tp: 25 for tp in PARTS}
    assert store.runs.require("wiki", "r2").status is RunStatus.SUPERSEDED
    [audit] = store.audit_log.records("wiki", action=SKIP)
    assert audit.actor == "alice" and audit.details["skippedRecords"] == 30 and audit.details["supersededRuns"] == ["r2"]
    payload = collect_status(store, "wiki", None).to_json()["payload"]
    assert payload["skippedRecords"] == {"0": 15, "1": 15}
    assert payload["lostRecords"] == 30 and payload["lostRecordsByPartition"] == {"0": 15, "1": 15}
    [lost] = [e for e in payload["recentErrors"] if e["exceptionClass"] == "RecordsLost"]
    assert lost["cause"] == "skip" and [(r["start"], r["end"]) for r in lost["lostRanges"]] == [(10, 25), (10, 25)]

    # nothing failed starts where the main line now stands: nothing more is offered
    assert actions.failed_ranges("wiki") == []
    with pytest.raises(IngestError, match="has nothing to skip"):
        actions.skip("wiki")


def test_skip_offers_only_ranges_where_the_main_line_stands_and_refuses_what_was_not_shown(store, tmp_path):
    spec = offline_spec(tmp_path)
    plan_next(store, "r1", {tp: 10 for tp in PARTS}, task_count=2)
    fail(store, spec, "r1")
    actions = DatasourceActions(store, None, "bob")
    shown = actions.failed_ranges("wiki")
    assert [f.range for f in shown] == [OffsetRange(tp, 0, 10) for tp in PARTS]  # first starts: nothing committed
    # partition 0 is read again and published by the next run: only partition 1's failed range is left
    plan = plan_next(store, "r2", {PARTS[0]: 12}, task_count=1)
    publish_whole(store, plan)
    assert [f.range for f in actions.failed_ranges("wiki")] == [OffsetRange(PARTS[1], 0, 10)]
    with pytest.raises(IngestError, match="changed since they were shown"):
        actions.skip("wiki", expect=shown)
    assert committed(store) == {PARTS[0]: 12}
    assert actions.skip("wiki").details["skippedRanges"] == [
        {"topic": "edits", "partition": 1, "start": 0, "end": 10, "runId": "r1"}]
    assert committed(store) == {PARTS[0]: 12, PARTS[1]: 10}


# ---------------------------------------------------------------------------------------- real Spark jobs


def run_failing_group(spark, store, spec, run_id: str, tmp_path):
    """Plan a run, run its one group's Spark job (which fails), and end the run as its report task does."""
    from ingest_core.handover import deep_storage
    from ingest_core.spark.job import GroupJob, run_group
    from ingest_core.supervisor.planning import Supervisor

    supervisor = Supervisor(spec, store)
    supervisor.register()
    plan = supervisor.plan(run_id).plan
    out = deep_storage.group_uri(tmp_path.as_uri(), spec.datasource, run_id, 0)
    with pytest.raises(IngestError) as failure:
        run_group(spark, GroupJob.of_plan(spec, plan, 0, 0, out), 30)
    supervisor.mark_failed(run_id, "its tasks failed before publishing")
    keep_failure_reports(store, spec, store.runs.require(spec.datasource, run_id))
    return plan, failure.value


def test_max_parse_exceptions_stopping_a_run_shows_the_limit_the_count_and_the_last_exception(
        spark, broker, store, tmp_path, capsys):
    topic = broker.create_topic()
    good = [json.dumps({"ts": iso(T0), "a": str(i)}).encode() for i in range(6)]
    broker.produce(topic, good[:3] + [b"{not json", b"{nor this"] + good[3:])
    spec = spec_from(broker.bootstrap, topic, SIMPLE, tuning={"maxParseExceptions": 1},
                     microbatch={"deepStorage": {"uri": tmp_path.as_uri()}})
    plan, error = run_failing_group(spark, store, spec, "r1", tmp_path)
    assert type(error).__name__ == "ParseExceptionLimitError" and error.code == "INGEST_PARSE_EXCEPTION_LIMIT"
    # the split stopped on its executor: its report, not Spark's trace text, told the driver which error
    [split] = [r for r in latest_split_reports(attempt_of(tmp_path, spec, "r1"))[0].values() if r.failure]
    assert split.failure == SplitFailure("INGEST_PARSE_EXCEPTION_LIMIT", "ParseExceptionLimitError", str(error))

    payload = collect_status(store, "ds", spec).to_json()["payload"]
    [failed] = [e for e in payload["recentErrors"] if e.get("taskGroup") is not None]
    assert failed["exceptionClass"] == "ParseExceptionLimitError" and failed["runId"] == "r1"
    assert failed["code"] == "INGEST_PARSE_EXCEPTION_LIMIT"
    assert failed["partitions"] == [{"topic": topic, "partition": 0, "start": 0, "end": 8}]
    assert failed["maxParseExceptions"] == 1 and failed["parseExceptions"] == 2
    assert failed["lastParseException"]["offset"] == 4 and failed["lastParseException"]["partition"] == 0
    assert "Max parse exceptions [1] exceeded" in failed["message"]
    assert payload["recentRuns"][0]["status"] == "FAILED"

    assert cli.main(["--metadata-url", store.url, "status", "ds", "--dags-folder", str(tmp_path / "none")]) == 0
    out = capsys.readouterr().out
    assert "[INGEST_PARSE_EXCEPTION_LIMIT] ParseExceptionLimitError: run r1 task group 0: Max parse" in out
    assert f"records: {topic}:0 [0, 8); 2 parse exceptions, maxParseExceptions 1; last: unparseable row at " \
           f"{topic}/0 offset 4" in out


def test_a_job_that_fails_on_the_broker_names_its_error_type_and_records(spark, broker, store, tmp_path):
    topic = broker.create_topic()
    broker.produce(topic, [json.dumps({"ts": iso(T0), "a": str(i)}).encode() for i in range(10)])
    spec = spec_from(broker.bootstrap, topic, SIMPLE, microbatch={"deepStorage": {"uri": tmp_path.as_uri()}})
    from ingest_core.supervisor.planning import Supervisor

    Supervisor(spec, store).plan("r1")
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    # the records are deleted after planning and before the job reads them
    broker.admin.delete_records([KafkaTopicPartition(topic, 0, 6)])[KafkaTopicPartition(topic, 0, 6)].result(30)
    _, error = run_failing_group(spark, store, spec, "r1", tmp_path)
    [failed] = [e for e in collect_status(store, "ds", spec).recent_errors if e.failure is not None]
    assert failed.error_class == type(error).__name__ == "OffsetOutOfRangeError"
    assert failed.code == error.code == failed.failure.code == "INGEST_KAFKA_OFFSET_OUT_OF_RANGE"
    # the FAILED report the publish reads carries the code
    report = read_report(deep_storage.join(attempt_of(tmp_path, spec, "r1"), "report.json"), "the report")
    assert report.failure.code == "INGEST_KAFKA_OFFSET_OUT_OF_RANGE" and report.failure.retry_can_help
    assert failed.failure.ranges == (OffsetRange(TopicPartition(topic, 0), 0, 10),)


def run_jobs(spark, spec, plan) -> None:
    """Every task group's Spark job of `plan`, in this session, writing where the DAG's jobs write."""
    from ingest_core.handover import deep_storage
    from ingest_core.spark.job import GroupJob, run_group

    for group in plan.groups:
        if not group.is_empty:
            out = deep_storage.group_uri(deep_storage.base_for(spec), spec.datasource, plan.run_id, group.group_id, 0)
            run_group(spark, GroupJob.of_plan(spec, plan, group.group_id, 0, out), 30)


def test_a_run_pipelined_behind_a_killed_run_plans_again_and_publishes_every_record_once(
        spark, broker, store, tmp_path):
    from helpers import rows_of

    from ingest_core.spark.job import run_group
    from ingest_core.spark.job_args import load_job
    from ingest_core.store.schema import utcnow
    from ingest_core.supervisor.planning import PlanOptions, Supervisor
    from ingest_core.supervisor.publish import publish_step
    from ingest_core.supervisor.replan import replan_step

    topic = broker.create_topic(partitions=2)
    for p in range(2):
        broker.produce(topic, [json.dumps({"ts": iso(T0), "a": f"{p}-{i}"}).encode() for i in range(10)], partition=p)
    spec = spec_from(broker.bootstrap, topic, SIMPLE, io={"taskCount": 1},
                     microbatch={"deepStorage": {"uri": tmp_path.as_uri()}})
    supervisor = Supervisor(spec, store)
    r1 = supervisor.plan("r1", PlanOptions(max_records=8)).plan
    r2 = supervisor.plan("r2").plan  # pipelined from r1's planned ends
    assert r2.start_offsets() == r1.end_offsets() and {p.after_run for p in r2.partitions} == {"r1"}
    store.runs.start("ds", "r1", timedelta(minutes=1), now=utcnow() - timedelta(hours=1))  # killed long ago
    store.runs.start("ds", "r2", timedelta(minutes=10))
    run_jobs(spark, spec, r2)  # r2's jobs read r1's end onwards

    # the DAG's replan step: r1 is past its deadline, so it expires and r2 plans again from the committed offsets;
    # its jobs (the replanned_job tasks) read the new plan's group inputs
    jobs = replan_step(spec, "r2", metadata=store, poll_s=60)
    assert store.runs.require("ds", "r1").expired and [(j.group_id, j.replica) for j in jobs] == [(0, 0)]
    for job in jobs:
        run_group(spark, load_job(job), 30)
    assert replan_step(spec, "r2", metadata=store, poll_s=60) == []  # a retry of the step: nothing left to run
    # the publish step only publishes: the re-plan's reports, not those of r2's first jobs beside them
    summary = publish_step(spec, "r2", metadata=store)
    assert not summary["alreadyPublished"]
    record = store.runs.require("ds", "r2")
    assert record.status is RunStatus.PUBLISHED and record.plan.revision == 1
    assert record.plan.start_offsets() == {TopicPartition(topic, p): 0 for p in range(2)}
    assert sorted(r["a"] for r in rows_of(store, "ds")) == sorted(f"{p}-{i}" for p in range(2) for i in range(10))
    assert committed_of(store, "ds") == {TopicPartition(topic, p): 10 for p in range(2)}


def committed_of(store, name: str) -> dict[TopicPartition, int]:
    return {tp: k.offset for tp, k in store.offsets.committed(name).items()}


def test_the_exception_that_failed_a_spark_task_is_named_not_sparks_wrapper(spark, tmp_path):
    """A failure no split's report explains (here a UDF's): JobFailedError, named after the exception Spark
    wrapped, for people to read."""
    from pyspark.sql.functions import udf

    from ingest_core.spark.job_errors import job_error as _job_error

    def overflow(value):
        raise OverflowError(f"value {value} too large")

    with pytest.raises(Exception) as raised:
        spark.range(1).select(udf(overflow)("id")).collect()
    error, name = _job_error(raised.value, tmp_path.as_uri())
    assert error.code == "INGEST_JOB_FAILED" and name == "OverflowError"
    assert str(error).endswith("(OverflowError: value 0 too large)")
    assert type(raised.value).__name__ != "OverflowError"  # Spark's wrapper


def test_a_spark_error_is_named_by_its_condition_not_read_from_its_text(spark, tmp_path):
    """Spark gives its errors a condition (`getCondition()`): the failure is named by it, as callers of Spark's
    Kafka connector match on conditions, never on message text."""
    from ingest_core.spark.job_errors import job_error

    spark.conf.set("spark.sql.ansi.enabled", "true")
    try:
        for sql, condition in (("SELECT no_such_column", "UNRESOLVED_COLUMN.WITHOUT_SUGGESTION"),
                               ("SELECT 1 / 0", "DIVIDE_BY_ZERO")):
            with pytest.raises(Exception) as raised:
                spark.sql(sql).collect()
            error, name = job_error(raised.value, tmp_path.as_uri())
            assert (error.code, name) == ("INGEST_JOB_FAILED", condition)
            assert str(error).startswith(f"the Spark job failed: [{condition}]")
    finally:
        spark.conf.unset("spark.sql.ansi.enabled")
