"""The status report and Druid's health rules are pure: every state is reached here from plain inputs.
Against real runs, the broker and the CLI: test_operations.py."""

from datetime import datetime, timedelta, timezone

from ingest_core.core.offsets import StartOffset, StartSource, TopicPartition
from ingest_core.core.planner import PlanRequest, plan_run
from ingest_core.core.spec import HealthConfig
from ingest_core.service.status import LOOP_ERROR, Outcome, build_status, is_healthy
from ingest_core.store.records import AuditRecord, RunRecord, RunStatus

T0 = datetime(2026, 11, 22, 10, tzinfo=timezone.utc)
P0, P1 = TopicPartition("edits", 0), TopicPartition("edits", 1)


def outcomes(pattern: str) -> list[Outcome]:
    return [Outcome(T0 + timedelta(minutes=i), c == "+") for i, c in enumerate(pattern)]


def test_health_has_druids_hysteresis():
    assert is_healthy(outcomes(""), 3, 3)
    assert is_healthy(outcomes("+--"), 3, 3)  # below the threshold: still healthy
    assert not is_healthy(outcomes("+---"), 3, 3)
    assert not is_healthy(outcomes("---++"), 3, 3)  # not yet healthy again
    assert is_healthy(outcomes("---+++"), 3, 3)
    assert is_healthy(outcomes("--+--+"), 3, 3)  # failures must be consecutive
    assert not is_healthy(outcomes("-"), 1, 1) and is_healthy(outcomes("-+"), 1, 1)


def run(i: int, status: RunStatus, error: str | None = None) -> RunRecord:
    plan = plan_run(PlanRequest(datasource="wiki", run_id=f"r{i}", created_at=T0,
                                starts={P0: StartOffset(0, StartSource.EARLIEST)}, latest={P0: 10}, task_count=1))
    at = T0 + timedelta(minutes=10 * i)
    return RunRecord("wiki", f"r{i}", i, status, plan, at, at if status is RunStatus.PUBLISHED else None, None, error)


def loop_error(minute: int, detailed: str = "LOST_CONTACT_WITH_STREAM") -> AuditRecord:
    return AuditRecord("wiki", LOOP_ERROR, "system", {"error": "Kafka did not answer", "errorClass":
                       "BrokerUnavailableError", "streamException": True, "detailedState": detailed},
                       T0 + timedelta(minutes=minute))


ROW = {"state": "RUNNING", "detailed_state": "RUNNING", "suspended": False, "terminated": False}


def status(row=ROW, runs=(), loop_errors=(), latest=None, committed=None, thresholds=HealthConfig()):
    return build_status(datasource="wiki", stream="edits", row=row, committed=committed or {P0: 5, P1: 7},
                        latest=latest if latest is not None else {P0: 10, P1: 7}, offsets_last_updated=T0,
                        runs=list(runs), row_stats={}, loop_errors=list(loop_errors), thresholds=thresholds,
                        now=T0)


def test_lag_per_partition_and_aggregate_in_druids_shape():
    s = status(committed={P0: 5}, latest={P0: 10, P1: 7})  # p1 never committed: all of it is lag
    assert s.lag == {P0: 5, P1: 7} and s.aggregate_lag == 12
    payload = s.to_json()["payload"]
    assert payload["latestOffsets"] == {"0": 10, "1": 7} and payload["minimumLag"] == {"0": 5, "1": 7}
    assert payload["currentOffsets"] == {"0": 5} and payload["aggregateLag"] == 12
    assert (payload["state"], payload["detailedState"], payload["healthy"]) == ("RUNNING", "RUNNING", True)
    many = status(committed={P0: 1, TopicPartition("other", 0): 2}, latest={P0: 1, TopicPartition("other", 0): 4})
    assert many.to_json()["payload"]["minimumLag"] == {"edits:0": 0, "other:0": 2}
    unknown = status(latest={})
    assert unknown.aggregate_lag == 0
    down = build_status(datasource="wiki", stream="edits", row=ROW, committed={P0: 1}, latest=None,
                        offsets_last_updated=None, runs=[], row_stats={}, loop_errors=[], thresholds=HealthConfig(),
                        broker_error="Kafka at 'x' did not answer", now=T0)
    assert down.aggregate_lag is None and down.to_json()["payload"]["latestOffsets"] is None
    assert down.recent_errors[0].stream_exception and "did not answer" in down.recent_errors[0].message


def test_failed_loops_make_an_unhealthy_supervisor_only_past_the_threshold():
    runs = [run(0, RunStatus.PUBLISHED)]
    two = status(runs=runs, loop_errors=[loop_error(1), loop_error(2)])
    assert (two.state, two.healthy) == ("RUNNING", True) and len(two.recent_errors) == 2
    three = status(runs=runs, loop_errors=[loop_error(1), loop_error(2), loop_error(3)])
    assert (three.state, three.detailed_state, three.healthy) == (
        "UNHEALTHY_SUPERVISOR", "LOST_CONTACT_WITH_STREAM", False)
    assert three.recent_errors[0].timestamp == T0 + timedelta(minutes=3)  # newest first
    never = status(runs=[], loop_errors=[loop_error(i, "UNABLE_TO_CONNECT_TO_STREAM") for i in range(3)])
    assert never.detailed_state == "UNABLE_TO_CONNECT_TO_STREAM"
    strict = status(runs=runs, loop_errors=[loop_error(1)], thresholds=HealthConfig(unhealthiness_threshold=1))
    assert strict.state == "UNHEALTHY_SUPERVISOR"
    recovered = status(runs=runs + [run(i, RunStatus.PUBLISHED) for i in (4, 5, 6)],
                       loop_errors=[loop_error(1), loop_error(2), loop_error(3)])
    assert (recovered.state, recovered.healthy) == ("RUNNING", True)


def test_failed_runs_make_unhealthy_tasks_and_successes_heal_them():
    failing = [run(0, RunStatus.PUBLISHED)] + [run(i, RunStatus.FAILED, "spark job failed") for i in (1, 2, 3)]
    s = status(runs=failing)
    assert (s.state, s.healthy) == ("UNHEALTHY_TASKS", False)
    assert [e.error_class for e in s.recent_errors] == ["RunFailed"] * 3
    partly = failing[:3] + [run(3, RunStatus.PUBLISHED, "task groups [1] failed; their partitions keep their offsets")]
    assert status(runs=partly).state == "UNHEALTHY_TASKS"  # a publish with failed groups is a task failure
    superseded = failing[:3] + [run(3, RunStatus.SUPERSEDED)]
    assert status(runs=superseded).healthy  # superseded by an operator's reset: not the tasks' failure
    healed = failing + [run(i, RunStatus.PUBLISHED) for i in (4, 5, 6)]
    assert status(runs=healed).state == "RUNNING"


def test_an_expired_run_shows_in_recent_errors_and_runs():
    from dataclasses import replace

    dead = replace(run(1, RunStatus.EXPIRED, "expired: run r1 was RUNNING since ..., past completionTimeout (60s, ...)"),
                   running_since=T0, deadline_at=T0 + timedelta(minutes=1), expired_at=T0 + timedelta(minutes=5))
    payload = status(runs=[run(0, RunStatus.PUBLISHED), dead]).to_json()["payload"]
    (error,) = payload["recentErrors"]
    assert error["exceptionClass"] == "RunExpired" and error["message"].startswith("run r1: expired: ")
    assert error["timestamp"] == "2026-11-22T10:05:00.000Z" and error["runId"] == "r1"
    assert error["partitions"] == [{"topic": P0.topic, "partition": P0.partition, "start": 0, "end": 10}]
    assert payload["recentRuns"][1] | {"rowStats": {}} == {
        "runId": "r1", "status": "EXPIRED", "records": 10, "createdAt": "2026-11-22T10:10:00.000Z",
        "publishedAt": None, "deadline": "2026-11-22T10:01:00.000Z", "expiredAt": "2026-11-22T10:05:00.000Z",
        "published": None, "rowStats": {}, "error": dead.error}


def test_suspended_and_terminated_win_over_everything():
    errors = [loop_error(i) for i in range(5)]
    s = status(row={**ROW, "suspended": True, "state": "SUSPENDED", "detailed_state": "SUSPENDED"}, loop_errors=errors)
    assert (s.state, s.detailed_state, s.suspended) == ("SUSPENDED", "SUSPENDED", True)
    t = status(row={**ROW, "terminated": True, "state": "TERMINATED", "detailed_state": "TERMINATED"})
    assert (t.state, t.healthy) == ("TERMINATED", False)
    idle = status(row={**ROW, "state": "IDLE", "detailed_state": "IDLE"})
    assert (idle.state, idle.detailed_state) == ("IDLE", "IDLE")


def test_a_status_read_expires_runs_past_their_deadline(store):
    """Nobody plans, nobody publishes: `ingest status` still shows the dead run for what it is."""
    from ingest_core.service.status import collect_status

    store.runs.insert(run(1, RunStatus.PLANNED).plan)
    store.runs.start("wiki", "r1", timedelta(minutes=1), now=T0)  # its jobs started in 2026 and died
    report = collect_status(store, "wiki", None)
    assert report.recent_runs[0].expired_at is not None and report.recent_runs[0].status == "EXPIRED"
    assert "RunExpired" in [e.error_class for e in report.recent_errors]  # beside "no spec: lag unknown"
    assert [a.details["detectedBy"] for a in store.audit_log.records("wiki", action="run_expired")] == ["a status read"]



def test_a_service_that_did_not_answer_is_named_in_recent_errors_though_its_run_published():
    from ingest_core.handover.report import GroupReport, ServiceProblem, SplitReport

    problem = ServiceProblem("schemaRegistry", "http://sr:8081", "schema registry http://sr:8081 did not answer", 3)
    split = SplitReport(0, "edits", 0, 0, 10, problems=[problem])
    report = GroupReport.merge("wiki", "r0", 0, 0, [split, SplitReport.from_json(split.to_json())], 0)
    stored = GroupReport.from_json(report.to_json(), "test")
    assert [(p.url, p.records) for p in stored.problems] == [("http://sr:8081", 6)]  # both splits' records
    s = build_status(datasource="wiki", stream="edits", row=ROW, committed={P0: 10}, latest={P0: 10},
                     offsets_last_updated=T0, runs=[run(0, RunStatus.PUBLISHED)], row_stats={}, loop_errors=[],
                     thresholds=HealthConfig(), now=T0, problems={"r0": stored.problems})
    (error,) = s.to_json()["payload"]["recentErrors"]
    assert error["exceptionClass"] == "ServiceUnavailable" and error["runId"] == "r0"
    assert (error["service"], error["url"], error["unparseableRecords"]) == ("schemaRegistry", "http://sr:8081", 6)
    assert error["message"].startswith("run r0: schemaRegistry http://sr:8081 did not answer; 6 records unparseable")
    assert s.healthy  # the run published: the records are parse exceptions, not a failed task
