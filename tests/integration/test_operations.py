"""The `ingest` CLI against real runs (local Spark, the real broker, PostgreSQL): status and lag match the
broker and the metadata store, health follows the thresholds, and every action takes effect and is audited.
(Suspend, resume and terminate with a real Airflow: test_dag.py.)"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
import yaml
from helpers import group_offsets, ingest_run, spec_from

from ingest_core.core.states import RunEvent
from ingest_core.core.errors import BrokerUnavailableError, StaleRunError
from ingest_core.core.offsets import OffsetRange, StartSource, TopicPartition
from ingest_core.kafka.config import KafkaClientConfig
from ingest_core.kafka.offset_reader import KafkaOffsetReader
from ingest_core.service.status import collect_status
from ingest_core.store.main_line import MainLine
from ingest_core.core.states import RunStatus
from ingest_core.store.publisher import Publisher, claim_ranges
from ingest_core.supervisor.planning import Supervisor

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]

SCHEMA = {"timestampSpec": {"column": "ts", "format": "millis"}, "dimensionsSpec": {"dimensions": ["page"]},
          "metricsSpec": [{"type": "count", "name": "n"}],
          "granularitySpec": {"segmentGranularity": "HOUR", "queryGranularity": "NONE", "rollup": False}}


def events(n: int, start: int = 0) -> list[bytes]:
    return [json.dumps({"ts": 1_790_000_000_000 + i, "page": f"p{i % 3}"}).encode() for i in range(start, start + n)]


class Ops:
    def __init__(self, url: str, dags, spec):
        self.url, self.dags, self.spec = url, dags, spec

    def __call__(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "ingest_core.service.cli", "--metadata-url", self.url, *args],
                              capture_output=True, text=True, timeout=120, input=stdin)

    def json(self, *args: str):
        done = self("status", *args, "--json", "--dags-folder", str(self.dags))
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)


@pytest.fixture
def ingested(spark, pg_url, pg_store, broker, tmp_path):
    """Datasource `ops`: 60 + 40 records over two partitions ingested by one run, then 30 more produced."""
    topic = broker.create_topic(partitions=2)
    broker.produce(topic, events(60), partition=0)
    broker.produce(topic, events(40, 60), partition=1)
    spec = spec_from(broker.bootstrap, topic, SCHEMA, datasource="ops")
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "ops.yaml").write_text(yaml.safe_dump(spec.to_raw()))
    ingest_run(spark, pg_store, spec, "r1", (tmp_path / "deep").as_uri())
    broker.produce(topic, events(30, 100), partition=1)
    return Ops(pg_url, dags, spec), topic


def test_status_and_lag_match_the_broker_and_the_metadata_store(ingested, pg_store):
    ops, topic = ingested
    payload = ops.json("ops")["payload"]
    assert payload["dataSource"] == "ops" and payload["stream"] == topic and payload["partitions"] == 2
    assert payload["currentOffsets"] == {"0": 60, "1": 40}
    assert payload["latestOffsets"] == {"0": 60, "1": 70}
    assert payload["minimumLag"] == {"0": 0, "1": 30} and payload["aggregateLag"] == 30
    assert (payload["state"], payload["detailedState"], payload["healthy"]) == ("RUNNING", "RUNNING", True)
    (run,) = payload["recentRuns"]
    assert run["runId"] == "r1" and run["status"] == "PUBLISHED" and run["records"] == 100
    assert run["rowStats"]["processed"] == 100 and run["rowStats"]["unparseable"] == 0
    assert [r["id"] for r in ops.json()] == ["ops"]

    human = ops("status", "ops", "--dags-folder", str(ops.dags))
    assert human.returncode == 0 and "aggregate lag: 30" in human.stdout and f"{topic}-1" in human.stdout
    table = ops("status", "--dags-folder", str(ops.dags))
    assert "ops" in table.stdout and "RUNNING" in table.stdout
    assert ops("health", "ops", "--dags-folder", str(ops.dags)).returncode == 0

    segments = ops("segments", "ops", "--json")
    listed = json.loads(segments.stdout)
    assert sum(s["rows"] for s in listed) == 100
    assert {s["id"] for s in listed} == {s.id for s in pg_store.segment_records.of("ops")}


def test_failed_loops_past_the_threshold_make_health_fail_and_successes_heal_it(ingested, pg_store):
    ops, _ = ingested
    down = KafkaOffsetReader(KafkaClientConfig.from_properties({"bootstrap.servers": "127.0.0.1:9"}), timeout_s=1)
    for i in range(3):
        with pytest.raises(BrokerUnavailableError):
            Supervisor(ops.spec, pg_store, reader=down).plan(f"down-{i}")
    health = ops("health", "ops", "--dags-folder", str(ops.dags))
    assert health.returncode == 1 and "UNHEALTHY (UNHEALTHY_SUPERVISOR / LOST_CONTACT_WITH_STREAM)" in health.stdout
    payload = ops.json("ops")["payload"]
    assert payload["healthy"] is False and len(payload["recentErrors"]) == 3
    assert all(e["streamException"] and "did not answer" in e["message"] for e in payload["recentErrors"])
    for i in range(3):  # three loops that reach the broker again
        Supervisor(ops.spec, pg_store).plan(f"up-{i}")
    assert ops("health", "ops", "--dags-folder", str(ops.dags)).returncode == 0


def test_set_offsets_and_reset_take_effect_supersede_runs_in_flight_and_are_audited(ingested, pg_store):
    ops, topic = ingested
    inflight = Supervisor(ops.spec, pg_store).plan("r2").plan  # planned, not published
    # back over published records: refused unless their number is confirmed (--yes is not enough)
    refused = ops("set-offsets", "ops", f"{topic}:0=10", "--yes", "--actor", "alice", "--no-airflow")
    assert refused.returncode == 1 and "would read 50 records again that were already published" in refused.stderr
    assert f"{topic}-0 [10, 60)" in refused.stderr and "`--confirm-duplicates 50`" in refused.stderr
    assert pg_store.runs.get("ops", "r2").status is RunStatus.PLANNED and not pg_store.audit_log.records("ops", action="set_offsets")
    done = ops("set-offsets", "ops", f"{topic}:0=10", "--confirm-duplicates", "50", "--actor", "alice", "--no-airflow")
    assert done.returncode == 0, done.stderr
    committed = {tp.partition: k.offset for tp, k in pg_store.offsets.committed("ops").items()}
    assert committed == {0: 10, 1: 40}
    assert pg_store.runs.get("ops", "r2").status is RunStatus.SUPERSEDED
    with pytest.raises(StaleRunError):  # its publish is refused: nothing twice
        Publisher(pg_store).publish("ops", "r2", [])
    (audit,) = [a for a in pg_store.audit_log.records("ops") if a.action == "set_offsets"]
    assert audit.actor == "alice" and audit.details["before"] == {topic: {"0": 60}}
    assert audit.details["after"] == {topic: {"0": 10}} and audit.details["supersededRuns"] == ["r2"]
    assert audit.details["duplicateRecords"] == 50
    plan = Supervisor(ops.spec, pg_store).plan("r3").plan  # not continuing from r2's planned ends
    assert {p.tp.partition: (p.start, p.start_source) for p in plan.partitions} == {
        0: (10, StartSource.COMMITTED), 1: (40, StartSource.COMMITTED)}
    assert inflight.start_offsets()[TopicPartition(topic, 1)] == 40

    refused = ops("reset", "ops", "--no-airflow", stdin="")  # no terminal, no --yes: nothing happens
    assert refused.returncode == 1 and "pass --yes" in refused.stderr
    assert len(pg_store.offsets.committed("ops")) == 2
    # from earliest (useEarliestOffset) it re-reads what r1 published: p0 [0, 10) and p1 [0, 40)
    refused = ops("reset", "ops", "--yes", "--actor", "bob", "--no-airflow")
    assert refused.returncode == 1 and "would read 50 records again" in refused.stderr
    assert len(pg_store.offsets.committed("ops")) == 2
    done = ops("reset", "ops", "--confirm-duplicates", "50", "--actor", "bob", "--no-airflow")
    assert done.returncode == 0, done.stderr
    assert pg_store.offsets.committed("ops") == {}
    assert pg_store.runs.get("ops", "r3").status is RunStatus.SUPERSEDED
    (audit,) = [a for a in pg_store.audit_log.records("ops") if a.action == "reset"]
    assert audit.actor == "bob" and audit.details["clearedOffsets"] == {topic: {"0": 10, "1": 40}}
    plan = Supervisor(ops.spec, pg_store).plan("r4").plan  # useEarliestOffset: from the start again
    assert {p.tp.partition: (p.start, p.start_source) for p in plan.partitions} == {
        0: (0, StartSource.EARLIEST), 1: (0, StartSource.EARLIEST)}

    bad = ops("set-offsets", "ops", "nonsense", "--yes", "--no-airflow")
    assert bad.returncode == 2 and "is not TOPIC:PARTITION=OFFSET" in bad.stderr  # a usage error
    unknown = ops("suspend", "nope", "--no-airflow")
    assert unknown.returncode == 2 and unknown.stderr == "error: unknown datasource 'nope': (known: ops)\n"
    typo = ops("segments", "opz")
    assert typo.returncode == 2 and "unknown datasource 'opz': did you mean 'ops'? (known: ops)" in typo.stderr


def test_reset_to_latest_with_backfill_while_a_run_is_in_flight_ingests_every_offset_once(
        ingested, pg_store, spark, broker, tmp_path):
    from ingest_core.handover.deep_storage import group_uri
    from ingest_core.spark.job import GroupJob, run_group
    from ingest_core.store.publisher import GroupResult
    from ingest_core.store.reader import DatasourceReader

    ops, topic = ingested  # run r1 published offsets [0, 60) of p0 and [0, 40) of p1; p1 holds 30 more
    deep = (tmp_path / "deep").as_uri()

    def run_jobs(run_id: str):
        plan = pg_store.runs.require("ops", run_id).plan
        return [GroupResult.from_report(run_group(spark, GroupJob.of_plan(ops.spec, plan, g.group_id, 0, group_uri(
            deep, "ops", run_id, g.group_id)), 30)) for g in plan.groups if not g.is_empty]

    # a run in flight: planned, its Spark job done, not published yet
    Supervisor(ops.spec, pg_store).plan("r2")
    r2_results = run_jobs("r2")
    broker.produce(topic, events(20, 130), partition=0)
    done = ops("reset", "ops", "--to-latest", "--backfill", "--yes", "--actor", "dana", "--no-airflow",
               "--dags-folder", str(ops.dags))
    assert done.returncode == 0, done.stderr
    committed = {tp.partition: k.offset for tp, k in pg_store.offsets.committed("ops").items()}
    assert committed == {0: 80, 1: 70}  # the main line is at the latest offsets
    (backfill,) = [r for r in pg_store.runs.recent("ops") if r.plan.is_backfill]
    assert {p.tp.partition: (p.start, p.end) for p in backfill.plan.partitions} == {0: (60, 80), 1: (40, 70)}
    assert pg_store.runs.get("ops", "r2").status is RunStatus.SUPERSEDED
    (audit,) = [a for a in pg_store.audit_log.records("ops") if a.action == "reset_to_latest"]
    assert audit.actor == "dana" and audit.details["backfillRun"] == backfill.run_id
    assert audit.details["skippedRecords"] == 50 and audit.details["supersededRuns"] == ["r2"]

    with pytest.raises(StaleRunError):  # the in-flight run lost the race: its range is the backfill's
        Publisher(pg_store).publish("ops", "r2", r2_results)
    # the main line goes on from the latest offsets while the backfill runs
    broker.produce(topic, events(10, 150), partition=1)
    ingest_run(spark, pg_store, ops.spec, "r3", deep)
    backfill_results = run_jobs(backfill.run_id)
    result = Publisher(pg_store).publish("ops", backfill.run_id, backfill_results)
    assert result.rows == 50 and result.commit_version is None
    assert {(c.tp.partition, c.start, c.end) for c in pg_store.offsets.claims("ops") if c.backfill} == {
        (0, 60, 80), (1, 40, 70)}  # claimed: no other run publishes these offsets again
    assert {tp.partition: k.offset for tp, k in pg_store.offsets.committed("ops").items()} == {0: 80, 1: 80}
    assert Publisher(pg_store).publish("ops", backfill.run_id, backfill_results).already_published

    times = DatasourceReader(pg_store, "ops").to_arrow().column("__time").cast("int64").to_pylist()
    assert sorted(times) == [1_790_000_000_000 + i for i in range(160)]  # every record once: none lost, none twice


def test_reset_to_latest_gets_past_committed_offsets_that_left_the_log(broker, store_url, store, tmp_path):
    """Druid's reset is for exactly this: offsets removed by retention, a re-created topic."""
    from confluent_kafka import TopicPartition as KTP

    topic = broker.create_topic(partitions=2)
    broker.produce(topic, events(60), partition=0)
    broker.produce(topic, events(5, 60), partition=1)
    p0, p1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    dags = tmp_path / "dags"
    dags.mkdir()
    ops = Ops(store_url, dags, None)
    for name, offsets in (("lost", {p0: 10}), ("recreated", {p0: 10, p1: 20}), ("nothing", {p0: 10, p1: 5})):
        (dags / f"{name}.yaml").write_text(yaml.safe_dump(spec_from(broker.bootstrap, topic, SCHEMA,
                                                                    datasource=name).to_raw()))
        with MainLine.locked(store, name, planning_lock=False) as line:
            line.move(offsets, by="r1")
    with store.session() as conn:  # the main line of the topic's former life published [0, 20) of p1
        claim_ranges(conn, "recreated", [OffsetRange(p1, 0, 20)], "r1", backfill=False, claims=[])
    broker.admin.delete_records([KTP(topic, 0, 50)])[KTP(topic, 0, 50)].result(timeout=30)  # 10..49 unread

    def committed(name):
        return {tp.partition: k.offset for tp, k in store.offsets.committed(name).items()}

    # committed 10, log start 50: the reset that accepts the loss works, and says what was lost
    done = ops("reset", "lost", "--to-latest", "--yes", "--no-airflow", "--dags-folder", str(dags))
    assert done.returncode == 0, done.stderr
    assert committed("lost") == {0: 60, 1: 5}
    assert f"partition {topic}-0: records 10..49 (40 records) were removed" in done.stderr
    (audit,) = store.audit_log.records("lost", action="reset_to_latest")
    assert audit.details["removedBeforeIngestion"] == {topic: {"0": [10, 50]}} and audit.details["removedRecords"] == 40
    # lost, exactly: the 40 removed, and what the jump skipped (p0 [50, 60), p1 never read [0, 5)), counted once
    assert audit.details["lostRecords"] == 55 and "55 records lost by reset --to-latest" in done.stderr
    assert collect_status(store, "lost", None).lost == {p0: 50, p1: 5}
    assert group_offsets(broker, "ingest.lost", topic, 2) == {0: 60, 1: 5}  # Kafka's lag tools agree

    # and p1 committed 20 beyond its log end 5 (the topic re-created): with --backfill, the backfill starts at
    # the log start of p0 and takes nothing of p1
    done = ops("reset", "recreated", "--to-latest", "--backfill", "--yes", "--no-airflow", "--dags-folder", str(dags))
    assert done.returncode == 0, done.stderr
    assert committed("recreated") == {0: 60, 1: 5}
    (backfill,) = [r for r in store.runs.recent("recreated") if r.plan.is_backfill]
    assert {p.tp.partition: (p.start, p.end) for p in backfill.plan.partitions} == {0: (50, 60)}
    assert f"{topic}-1: committed offset 20 is beyond the log end offset 5" in done.stderr
    (audit,) = store.audit_log.records("recreated", action="reset_to_latest")
    assert audit.details["beyondLogEnd"] == {topic: {"1": [20, 5]}} and audit.details["backfillRun"] == backfill.run_id
    assert audit.details["lostRecords"] == 40  # only what was removed: the backfill reads [50, 60)
    # the former log's claim above the new offset is released, or the main line could never publish p1 again
    assert audit.details["releasedRanges"] == [{"topic": topic, "partition": 1, "start": 5, "end": 20, "runId": "r1"}]
    assert [(c.tp, c.start, c.end) for c in store.offsets.claims("recreated")] == [(p1, 0, 5)]

    # everything skipped was removed: nothing can be backfilled, and it says so
    broker.admin.delete_records([KTP(topic, 0, 60)])[KTP(topic, 0, 60)].result(timeout=30)
    done = ops("reset", "nothing", "--to-latest", "--backfill", "--yes", "--no-airflow", "--dags-folder", str(dags))
    assert done.returncode == 0, done.stderr
    assert "nothing to backfill" in done.stderr and committed("nothing") == {0: 60, 1: 5}
    assert collect_status(store, "nothing", None).lost == {p0: 50}
    assert not [r for r in store.runs.recent("nothing") if r.plan.is_backfill]


def test_status_shows_how_far_a_run_in_flight_got(pg_store, spark, broker, tmp_path):
    """Seed 004's hierarchy: each split reports as it reads, the status sums them per task group."""
    import threading

    from ingest_core.handover.deep_storage import group_uri
    from ingest_core.service.status import collect_status
    from ingest_core.spark.job import GroupJob, run_group
    from ingest_core.store.publisher import GroupResult

    topic = broker.create_topic(partitions=2)
    broker.produce(topic, events(3000), partition=0)
    broker.produce(topic, events(1000, 3000), partition=1)
    # small polls make the read slow enough to watch
    spec = spec_from(broker.bootstrap, topic, SCHEMA, datasource="slow", tuning={"maxRecordsPerPoll": 5},
                     microbatch={"deepStorage": {"uri": (tmp_path / "deep").as_uri()}})
    plan = Supervisor(spec, pg_store).plan("r1").plan
    pg_store.runs.move("slow", "r1", RunEvent.START)
    job = GroupJob.of_plan(spec, plan, 0, 0, group_uri((tmp_path / "deep").as_uri(), "slow", "r1", 0),
                   progress_interval_s=0.05)
    done: dict = {}
    runner = threading.Thread(target=lambda: done.setdefault("report", run_group(spark, job, 60)))
    runner.start()
    seen = []
    while runner.is_alive():
        tasks = collect_status(pg_store, "slow", spec).to_json()["payload"]["activeTasks"]
        seen.extend(tasks)
        time.sleep(0.05)
    runner.join()
    assert seen and all(t["id"] == "r1/group=0" and t["plannedRecords"] == 4000 for t in seen)
    assert all(t["records"] + t["lag"] == 4000 for t in seen)  # no offset gaps here: read + left = planned
    midway = [t for t in seen if 0 < t["records"] < 4000]
    assert midway and all(t["recordsPerSecond"] > 0 for t in midway), [(t["records"], t["lag"]) for t in seen]
    assert [t["records"] for t in seen] == sorted(t["records"] for t in seen)  # it only moves forward
    Publisher(pg_store).publish("slow", "r1", [GroupResult.from_report(done["report"])])
    payload = collect_status(pg_store, "slow", spec).to_json()["payload"]
    assert payload["activeTasks"] == [] and payload["aggregateLag"] == 0
