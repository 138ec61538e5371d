"""Druid's idleConfig against the metadata store: the idle clock (`last_active`: the latest run that found
records, else the first run) and the state a run that found nothing leaves (`publish.state_event`). The rule
itself is pure: tests/unit/test_spec_leniency.py."""

from datetime import datetime, timedelta, timezone

from helpers import make_spec

from ingest_core.core.offsets import StartOffset, StartSource, TopicPartition
from ingest_core.core.planner import PlanRequest, plan_run
from ingest_core.core.spec import HealthConfig
from ingest_core.core.states import Event
from ingest_core.supervisor.publish import state_event
from ingest_core.service.status import build_status

T0 = datetime(2026, 11, 26, 12, tzinfo=timezone.utc)
P0 = TopicPartition("edits", 0)


def plan(run_id: str, minute: int, start: int, latest: int):
    return plan_run(PlanRequest(datasource="wiki", run_id=run_id, created_at=T0 + timedelta(minutes=minute),
                                starts={P0: StartOffset(start, StartSource.COMMITTED)}, latest={P0: latest},
                                task_count=1))


def test_a_datasource_is_idle_once_nothing_new_came_for_inactive_after_millis(store):
    idle = make_spec("localhost:9", topic="edits", idleConfig={"enabled": True, "inactiveAfterMillis": 600_000})
    disabled = make_spec("localhost:9", topic="edits", idleConfig={"enabled": False})
    default = make_spec("localhost:9", topic="edits")
    assert store.runs.last_active("wiki") is None
    first = plan("r0", 0, 0, 0)  # the topic is empty: the first look starts the clock
    store.runs.insert(first)
    assert store.runs.last_active("wiki") == first.created_at
    assert state_event(idle, first, store.runs.last_active("wiki"), first.created_at) is Event.NOTHING_NEW

    store.runs.insert(plan("r1", 5, 0, 10))  # records: the stream is active
    empty = plan("r2", 15, 10, 10)
    store.runs.insert(empty)
    assert store.runs.last_active("wiki") == T0 + timedelta(minutes=5)
    # 10 minutes with nothing new is not yet more than inactiveAfterMillis; a minute later it is
    assert state_event(idle, empty, store.runs.last_active("wiki"), empty.created_at) is Event.NOTHING_NEW
    assert state_event(idle, empty, store.runs.last_active("wiki"), T0 + timedelta(minutes=16)) is Event.PUBLISHED_NOTHING
    assert state_event(disabled, empty, store.runs.last_active("wiki"), T0 + timedelta(days=1)) is Event.NOTHING_NEW
    assert state_event(default, empty, store.runs.last_active("wiki"), empty.created_at) is Event.PUBLISHED_NOTHING
    assert state_event(idle, plan("r3", 20, 10, 11), None, T0) is Event.PUBLISHED

    # status shows the stored state: IDLE after the idle run, RUNNING while not yet idle
    for event, shown in ((Event.PUBLISHED_NOTHING, "IDLE"), (Event.NOTHING_NEW, "RUNNING")):
        store.datasources.set_state("wiki", event)
        row = store.datasources.get("wiki")
        report = build_status(datasource="wiki", stream="edits", row=row, committed={P0: 10}, latest={P0: 10},
                              offsets_last_updated=T0, runs=[], row_stats={}, loop_errors=[],
                              thresholds=HealthConfig(), now=T0)
        assert (report.state, report.detailed_state) == (shown, shown)
        assert report.to_json()["payload"]["state"] == shown


def test_the_publish_of_a_run_that_found_nothing_leaves_the_idle_config_state(store_url, tmp_path, monkeypatch):
    from ingest_core.store.metadata import MetadataStore
    from ingest_core.store.schema import utcnow
    from ingest_core.supervisor.publish import publish_step

    monkeypatch.setenv("INGEST_METADATA_URL", store_url)
    monkeypatch.setenv("INGEST_DEEP_STORAGE", (tmp_path / "deep").as_uri())
    store = MetadataStore(store_url)
    day_ago = utcnow() - timedelta(days=1)  # far from any threshold below: no race with the clock
    cases = {"no_idle_config": ({}, "IDLE"),  # this system's default: IDLE at once
             "idle_after_an_hour": ({"enabled": True, "inactiveAfterMillis": 3_600_000}, "IDLE"),
             "idle_after_two_days": ({"enabled": True, "inactiveAfterMillis": 172_800_000}, "RUNNING"),
             "idle_disabled": ({"enabled": False}, "RUNNING")}
    for name, (idle, shown) in cases.items():
        spec = make_spec("localhost:9", name, topic="edits", completionTimeout="PT10S",
                         **({"idleConfig": idle} if idle else {}))
        # the first run ever found nothing: the idle clock starts at its planning, a day ago
        empty = plan_run(PlanRequest(datasource=name, run_id="r0", created_at=day_ago,
                                     starts={P0: StartOffset(0, StartSource.EARLIEST)}, latest={P0: 0}, task_count=1))
        store.runs.insert(empty)
        store.datasources.set_state(name, Event.PLANNED)
        publish_step(spec, "r0")
        assert store.datasources.get(name)["state"] == shown, name
    store.dispose()


def test_a_gate_that_ends_its_run_idle_leaves_the_idle_config_state_and_heals_the_health(store):
    """`gate.end_idle`: no run record, yet the state moves as after an empty run (idleConfig's clock from the first
    look at the stream when no run was ever planned), and idle loops count as successful ones for the health
    rules, recorded only while the rules need them."""
    from ingest_core.core.states import LOOP_ERROR, LOOP_IDLE
    from ingest_core.service.status import store_status
    from ingest_core.store.schema import datasources, utcnow
    from ingest_core.supervisor.gate import end_idle

    cases = {"no_idle_config": ({}, "IDLE"), "idle_after_an_hour": ({"enabled": True, "inactiveAfterMillis": 3_600_000},
                                                                      "IDLE"),
             "idle_after_two_days": ({"enabled": True, "inactiveAfterMillis": 172_800_000}, "RUNNING"),
             "idle_disabled": ({"enabled": False}, "RUNNING")}
    for name, (idle, shown) in cases.items():
        spec = make_spec("localhost:9", name, topic="edits", **({"idleConfig": idle} if idle else {}))
        store.datasources.set_state(name, Event.CONNECTING)  # its first look at the stream, a day ago
        with store.session() as conn:
            conn.execute(datasources.update().where(datasources.c.name == name).values(
                created_at=utcnow() - timedelta(days=1)))
        end_idle(spec, "idle-run", store)
        assert store.datasources.get(name)["state"] == shown, name
        assert store.runs.recent(name) == [] and store.audit_log.records(name) == []  # healthy: nothing written

    spec = make_spec("localhost:9", "flaky", topic="edits")
    store.datasources.set_state("flaky", Event.CONNECTING)
    for _ in range(3):  # three failed loops in a row: UNHEALTHY_SUPERVISOR
        store.audit_log.write("flaky", LOOP_ERROR, {"error": "broker down", "detailedState": "LOST_CONTACT_WITH_STREAM"})
    assert store_status(store, "flaky", spec).state == "UNHEALTHY_SUPERVISOR"
    for i in range(2):
        end_idle(spec, f"idle-{i}", store)
    assert store_status(store, "flaky", spec).state == "UNHEALTHY_SUPERVISOR"  # two of healthinessThreshold 3
    end_idle(spec, "idle-2", store)
    report = store_status(store, "flaky", spec)
    assert (report.state, report.healthy) == ("IDLE", True)
    end_idle(spec, "idle-3", store)  # healthy again: no more rows per idle run
    assert [a.details["runId"] for a in store.audit_log.records("flaky", action=LOOP_IDLE)] == [
        "idle-0", "idle-1", "idle-2"]
