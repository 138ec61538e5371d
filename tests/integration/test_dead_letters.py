"""Dead letters through the real broker, Spark and metadata store: kept raw with the run, visible exactly when
and where the run publishes, produced to a Kafka topic once per published run."""

from __future__ import annotations

import base64
import json
from datetime import timedelta

import pytest
from helpers import SIMPLE, T0, iso, rows_of, spec_from, topic_records

from ingest_core.core.states import RunEvent
from ingest_core.handover import deep_storage
from ingest_core.handover.report import ParseExceptionLimitError
from ingest_core.spark.job import GroupJob, run_group
from ingest_core.store.publisher import GroupResult, Publisher
from ingest_core.store.reader import DatasourceReader
from ingest_core.supervisor.planning import PlanOptions, Supervisor

pytestmark = pytest.mark.kafka

SCHEMA = {**SIMPLE, "dimensionsSpec": {"dimensions": ["a"]},
          "metricsSpec": [{"type": "count", "name": "cnt"}, {"type": "longSum", "name": "n", "fieldName": "n"}]}
# per partition: (value, outcome) of each bad record; good records around them
BAD = [(b"{not json", "unparseable"), (json.dumps({"ts": "yesterday", "a": "x"}).encode(), "unparseable"),
       (json.dumps({"ts": iso(T0), "a": "x", "n": "many"}).encode(), "processedWithError"),
       (b"\xff\xfe not utf-8", "unparseable")]


# `store`: tests/conftest.py's, on SQLite and on PostgreSQL


def good(p: int, i: int) -> bytes:
    return json.dumps({"ts": iso(T0 + timedelta(seconds=i)), "a": f"p{p}", "n": i}).encode()


def produce_stream(broker, partitions: int = 2) -> tuple[str, dict[tuple[int, int], tuple[bytes, str]]]:
    """Per partition: 5 good records, the bad ones (keyed, with a header), 5 good. Returns the topic and the bad
    records by (partition, offset)."""
    topic = broker.create_topic(partitions)
    expected = {}
    for p in range(partitions):
        broker.produce(topic, [good(p, i) for i in range(5)], partition=p)
        for k, (value, outcome) in enumerate(BAD):
            broker.produce(topic, [value], partition=p, key=f"key-{p}-{k}".encode(), headers=[("h", b"v")],
                           timestamp_ms=1_700_000_000_000 + k)
            expected[(p, 5 + k)] = (value, outcome)
        broker.produce(topic, [good(p, i) for i in range(5, 10)], partition=p)
    return topic, expected


def dl_spec(broker, topic: str, tmp_path, *, datasource: str = "ds", tuning: dict | None = None,
            dead_letter: dict | None = None, replicas: int = 1):
    return spec_from(broker.bootstrap, topic, SCHEMA, datasource=datasource, io={"replicas": replicas},
                     tuning=tuning, microbatch={"deadLetter": dead_letter if dead_letter is not None else {},
                                                "deepStorage": {"uri": tmp_path.as_uri()}})


def plan_run(spec, store, run_id: str):
    supervisor = Supervisor(spec, store)
    supervisor.register()
    return supervisor.plan(run_id, PlanOptions()).plan


def run_attempt(spark, spec, plan, group_id: int = 0, replica: int = 0):
    out = deep_storage.group_uri(deep_storage.base_for(spec), spec.datasource, plan.run_id, group_id, replica)
    return run_group(spark, GroupJob.of_plan(spec, plan, group_id, replica, out), 30)


def publish(store, spec, plan):
    """As the publish task does: each group's published replica (`successful_reports`)."""
    from ingest_core.supervisor.publish import successful_reports

    chosen = successful_reports(spec, plan)
    return Publisher(store).publish(spec.datasource, plan.run_id, [GroupResult.from_report(r[0]) for r in chosen.values()])


def as_letters(table) -> dict[tuple[int, int], tuple[bytes, str]]:
    rows = table.to_pylist()
    keys = [(r["partition"], r["offset"]) for r in rows]
    assert len(keys) == len(set(keys)), f"a dead letter is listed twice: {sorted(keys)}"
    return {(r["partition"], r["offset"]): (r["value"], r["outcome"]) for r in rows}


def test_published_dead_letters_hold_each_bad_record_once_and_never_a_failed_attempt_or_another_replica(
        spark, broker, store, tmp_path):
    topic, expected = produce_stream(broker)
    spec = dl_spec(broker, topic, tmp_path, replicas=2)
    plan = plan_run(spec, store, "r1")
    assert len(plan.groups) == 1 and len(plan.group(0).splits) == 2

    # a failed attempt first: each split stays under the limit and writes its dead letters, the group goes over
    strict = dl_spec(broker, topic, tmp_path, replicas=2, tuning={"maxParseExceptions": 5})
    with pytest.raises(ParseExceptionLimitError, match=r"Max parse exceptions \[5\] exceeded in task group 0"):
        run_attempt(spark, strict, plan)
    failed_folder = deep_storage.attempt_folders(
        deep_storage.group_uri(tmp_path.as_uri(), "ds", "r1", 0, 0))[0]
    assert len(deep_storage.list_files(deep_storage.join(failed_folder, "dead-letters"), ".parquet")) == 2

    report = run_attempt(spark, spec, plan)          # replica 0: published
    other = run_attempt(spark, spec, plan, replica=1)  # replica 1: the same records, never shown
    assert sum(f.records for f in report.dead_letters) == len(expected) == sum(f.records for f in other.dead_letters)
    reader = DatasourceReader(store, "ds")
    assert reader.dead_letters().num_rows == 0  # written, not published: invisible

    publish(store, spec, plan)
    letters = reader.dead_letters()
    assert as_letters(letters) == expected
    assert set(letters.column("run_id").to_pylist()) == {"r1"}
    row = next(r for r in letters.to_pylist() if (r["partition"], r["offset"]) == (1, 5))
    assert (row["topic"], row["key"], row["headers"]) == (topic, b"key-1-0", [{"key": "h", "value": b"v"}])
    assert row["timestamp"].timestamp() * 1000 == 1_700_000_000_000 and row["error"]
    assert all(f.location.startswith(report_folder(report)) for f in store.dead_letter_files.of("ds"))
    assert len(rows_of(store)) == 2 * 10 + 2  # the good rows, and the processedWithError ones with a null

    # a second publish of the same run (a retried publish task) records nothing twice
    publish(store, spec, plan)
    assert as_letters(reader.dead_letters()) == expected and reader.dead_letters("other-run").num_rows == 0


def report_folder(report) -> str:
    return report.dead_letters[0].location.rsplit("/dead-letters/", 1)[0]


def test_a_run_that_does_not_publish_shows_no_dead_letters_and_off_writes_none(spark, broker, store, tmp_path):
    topic, expected = produce_stream(broker, partitions=1)
    spec = dl_spec(broker, topic, tmp_path)
    plan = plan_run(spec, store, "r1")
    report = run_attempt(spark, spec, plan)
    assert sum(f.records for f in report.dead_letters) == len(expected)
    store.runs.move("ds", "r1", RunEvent.FAIL)
    assert DatasourceReader(store, "ds").dead_letters().num_rows == 0
    assert store.dead_letter_files.of("ds") == []

    off = spec_from(broker.bootstrap, topic, SCHEMA, datasource="off",
                    microbatch={"deepStorage": {"uri": tmp_path.as_uri()}})
    plan_off = plan_run(off, store, "r1")
    report_off = run_attempt(spark, off, plan_off)
    assert report_off.stats.unparseable == 3 and report_off.dead_letters == []
    assert deep_storage.list_files(deep_storage.join(tmp_path.as_uri(), "off"), ".parquet")  # its segments
    assert not [f for f in deep_storage.list_files(deep_storage.join(tmp_path.as_uri(), "off"))
                if "/dead-letters/" in f.path]


def report(spec, store, run_id: str) -> dict:
    """The report step, as the report task runs it (and re-runs it)."""
    from ingest_core.supervisor.report import report_step

    return report_step(spec, run_id, planned=True)


def test_dead_letters_are_produced_to_the_topic_once_per_published_run(spark, broker, store, tmp_path, monkeypatch):
    from ingest_core.kafka.dead_letter_topic import DeadLetterProducer

    monkeypatch.setenv("INGEST_METADATA_URL", store.url)
    topic, expected = produce_stream(broker)
    dlq = broker.create_topic(2)
    spec = dl_spec(broker, topic, tmp_path, dead_letter={"topic": dlq})
    plan = plan_run(spec, store, "r1")
    run_attempt(spark, spec, plan)
    publish(store, spec, plan)

    # a report task that died mid-produce: its open transaction holds every record, uncommitted
    crashed = DeadLetterProducer(spec)
    crashed.producer.begin_transaction()
    for letter in DatasourceReader(store, "ds").dead_letters().to_pylist():
        crashed.producer.produce(dlq, value=letter["value"], key=letter["key"])
    crashed.producer.flush(30)
    assert topic_records(broker, dlq) == []  # uncommitted: read_committed consumers see nothing

    assert report(spec, store, "r1")["deadLettersProduced"] == ["r1"]  # fences it and produces the run
    records = topic_records(broker, dlq)
    got = {}
    for m in records:
        headers = dict(m.headers())
        where = (int(headers["__ingest.errors.partition"]), int(headers["__ingest.errors.offset"]))
        assert where not in got, f"dead letter {where} produced twice"
        got[where] = (m.value(), headers["__ingest.errors.outcome"].decode())
        assert headers["__ingest.errors.topic"].decode() == topic and headers["__ingest.errors.run"] == b"r1"
        assert headers["__ingest.errors.message"] and headers["h"] == b"v"
        assert m.key() == f"key-{where[0]}-{where[1] - 5}".encode()
        assert m.timestamp()[1] == 1_700_000_000_000 + where[1] - 5
    assert got == expected

    # the report task again (an Airflow retry or a cleared task): the marker says r1 is delivered
    assert report(spec, store, "r1")["deadLettersProduced"] == []
    assert len(topic_records(broker, dlq)) == len(expected)

    # r2 publishes but its report never runs (or fails to produce): r3's report produces r2's, then r3's, once
    for run_id in ("r2", "r3"):
        broker.produce(topic, [f"{{{run_id} is not json".encode()], partition=0)
        later = plan_run(spec, store, run_id)
        run_attempt(spark, spec, later)
        publish(store, spec, later)
    assert report(spec, store, "r3")["deadLettersProduced"] == ["r2", "r3"]
    assert report(spec, store, "r3")["deadLettersProduced"] == []
    records = topic_records(broker, dlq)
    assert len(records) == len(expected) + 2
    assert sorted(m.value() for m in records if m.value().startswith(b"{r")) == [b"{r2 is not json", b"{r3 is not json"]


def test_ingest_dead_letters_lists_them(spark, broker, store, tmp_path, capsys):
    from ingest_core.service.cli import main

    topic, expected = produce_stream(broker, partitions=1)
    spec = dl_spec(broker, topic, tmp_path)
    plan = plan_run(spec, store, "r1")
    run_attempt(spark, spec, plan)
    publish(store, spec, plan)

    assert main(["--metadata-url", store.url, "dead-letters", "ds"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(expected) + 1 and lines[-1] == f"{len(expected)} dead letters"
    assert lines[0].startswith(f"r1  {topic}/0@5  unparseable  ") and lines[0].endswith("value: {not json")
    assert lines[3].endswith("value: \\xff\\xfe not utf-8")

    assert main(["--metadata-url", store.url, "dead-letters", "ds", "--json", "--limit", "2", "--run", "r1"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [(d["offset"], d["outcome"]) for d in shown] == [(7, "processedWithError"), (8, "unparseable")]
    assert base64.b64decode(shown[1]["valueBase64"]) == b"\xff\xfe not utf-8"

    # a run the datasource never planned is a usage error, not "0 dead letters"
    assert main(["--metadata-url", store.url, "dead-letters", "ds", "--run", "nope"]) == 2
    assert "datasource 'ds' has no planned run 'nope'" in capsys.readouterr().err
    assert main(["--metadata-url", store.url, "dead-letters", "missing"]) == 2  # an unknown datasource: a usage error
    assert "unknown datasource 'missing'" in capsys.readouterr().err


def test_cleanup_keeps_a_published_attempt_that_has_dead_letters_and_no_segment(spark, broker, store, tmp_path):
    from ingest_core.store.cleanup import find_orphans, remove_orphans

    topic = broker.create_topic()
    broker.produce(topic, [b"{bad", b"not json either"])
    spec = dl_spec(broker, topic, tmp_path)
    plan = plan_run(spec, store, "r1")
    report = run_attempt(spark, spec, plan)
    assert report.segments == [] and sum(f.records for f in report.dead_letters) == 2
    publish(store, spec, plan)
    remove_orphans(store, "ds", find_orphans(store, spec), "test")
    assert DatasourceReader(store, "ds").dead_letters().column("value").to_pylist() == [b"{bad", b"not json either"]
