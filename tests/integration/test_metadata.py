"""Schema management and the CLI over the real stores."""

import json
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml
from helpers import make_spec
from legacy_stores import make_legacy_store

from ingest_core.core.states import RunEvent
from ingest_core.core.errors import MetadataStoreError
from ingest_core.core.offsets import KnownOffset, TopicPartition
from ingest_core.core.planner import Plan
from ingest_core.core.states import RunStatus
from ingest_core.store.metadata import MetadataStore
from ingest_core.store.migrations.history import VERSION_TABLE, head
from ingest_core.store.records import PublishedFigures

DATA = Path(__file__).parents[1] / "data"
T0 = datetime(2026, 11, 22, 10, tzinfo=timezone.utc)


def cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "ingest_core.service.cli", *args], capture_output=True, text=True,
                          timeout=120, env=env)


def test_upgrade_is_idempotent_and_required(tmp_path):
    url = f"sqlite:///{tmp_path / 'm.db'}"
    store = MetadataStore(url)
    with pytest.raises(MetadataStoreError, match="run `ingest db upgrade`"):
        store.offsets.committed("wiki")
    assert store.upgrade().after == head()
    assert store.upgrade().applied == ()
    assert store.current_revision() == head()
    assert store.offsets.committed("wiki") == {}


@pytest.fixture(params=["sqlite", "postgres"])
def v1_store_url(request, tmp_path) -> str:
    """A metadata store as release 1 left it (schema version 1), with a run in flight (`legacy_stores`)."""
    url = f"sqlite:///{tmp_path / 'v1.db'}" if request.param == "sqlite" else request.getfixturevalue("pg_url")
    make_legacy_store(url, 1)
    return url


def test_a_v1_store_upgrades_to_run_deadlines(v1_store_url):
    from datetime import timedelta

    import sqlalchemy as sa

    store = MetadataStore(v1_store_url)
    with pytest.raises(MetadataStoreError, match=f"schema revision 0001, this release needs {head()}"):
        store.check_schema()
    assert store.upgrade().applied == ("0002", "0003", "0004", "0005", "0006", "0007", "0008")
    assert store.upgrade().applied == ()
    with store.session() as conn:
        assert sa.inspect(conn).has_table("ingest_dead_letter_files")  # v4
    # v5: an offset committed before topic ids is read as it was, without one (the next publish records it)
    assert store.offsets.committed("wiki") == {TopicPartition("edits", 0): KnownOffset(40, "done", None)}
    old = store.runs.require("wiki", "old")  # planned before v2: no deadline yet, so it does not expire
    assert (old.status, old.running_since, old.deadline_at, old.expired_at) == (RunStatus.RUNNING, None, None, None)
    assert store.runs.expire_overdue("wiki", T0 + timedelta(days=999), "test") == []
    assert store.runs.set_missing_deadlines("wiki", T0 + timedelta(minutes=30)) == ["old"]  # a planner gives it one
    assert store.runs.expire_overdue("wiki", T0 + timedelta(minutes=30), "test") == ["old"]
    assert store.runs.require("wiki", "old").expired
    # v7: the flags became states; v8: the published run's figures from its segment records, used or not
    assert [(r["name"], r["state"], r["detailed_state"]) for r in store.datasources.all()] == [
        ("gone", "TERMINATED", "TERMINATED"), ("live", "RUNNING", "RUNNING"), ("wiki", "SUSPENDED", "SUSPENDED")]
    assert store.runs.require("wiki", "done").published == PublishedFigures(20, 12, 2, 1200)
    assert store.runs.require("wiki", "old").published is None
    store.dispose()


def test_db_upgrade_cli_on_postgres(pg_url):
    MetadataStore(pg_url).engine.dispose()
    first = cli("--metadata-url", pg_url, "db", "upgrade")
    assert first.returncode == 0, first.stderr
    second = cli("--metadata-url", pg_url, "db", "upgrade")
    assert second.returncode == 0 and "up to date" in second.stdout


def test_unreachable_metadata_store_is_a_clear_error(monkeypatch):
    from ingest_core.store import engines

    # a refused connection looks like a server restarting: retried (INGEST_METADATA_RETRY_SECONDS), then named
    monkeypatch.setattr(engines, "RETRY_SECONDS", 0.5)
    store = MetadataStore("postgresql+psycopg2://nobody@127.0.0.1:1/none")
    with pytest.raises(MetadataStoreError, match=r"127\.0\.0\.1:1.*(unreachable|still failed after \d+ tries)"):
        store.check_schema()


def test_plan_cli_persists_and_shows_the_plan(broker, store_url, tmp_path):
    topic = broker.create_topic(3)
    for p in range(3):
        broker.produce(topic, [b'{"ts": 1}'] * (p + 1), partition=p)
    spec_file = tmp_path / "wiki.yaml"
    spec_file.write_text(yaml.safe_dump(make_spec(broker.bootstrap, topic=topic, useEarliestOffset=True,
                                                  taskCount=2).to_raw()))
    res = cli("--metadata-url", store_url, "plan", str(spec_file), "--run-id", "manual-1", "--json")
    assert res.returncode == 0, res.stderr
    plan = json.loads(res.stdout)
    assert plan["runId"] == "manual-1" and sum(len(g["partitions"]) for g in plan["groups"]) == 3
    broker.produce(topic, [b'{"ts": 1}'] * 5, partition=0)
    again = cli("--metadata-url", store_url, "plan", str(spec_file), "--run-id", "manual-1", "--json")
    assert json.loads(again.stdout) == plan  # the persisted plan, not a new one
    human = cli("--metadata-url", store_url, "plan", str(spec_file), "--run-id", "manual-1")
    assert "6 records" in human.stdout and "from earliest" in human.stdout


def test_plan_cli_reports_an_unreachable_broker(tmp_path):
    url = f"sqlite:///{tmp_path / 'm.db'}"
    MetadataStore(url).upgrade()
    spec_file = tmp_path / "wiki.yaml"
    # the spec's own deadline for a call to the brokers (default 15 s): nothing answers there anyway
    spec_file.write_text(yaml.safe_dump(make_spec("127.0.0.1:1", topic="x", consumerProperties={
        "bootstrap.servers": "127.0.0.1:1", "default.api.timeout.ms": "3000"}).to_raw()))
    res = cli("--metadata-url", url, "plan", str(spec_file), "--run-id", "r1")
    assert res.returncode == 1
    # one line: librdkafka's own (one per failed reconnect, ~200 here) go through logging, shown with -v
    (line,) = res.stderr.splitlines()
    assert line.startswith("error: Kafka at '127.0.0.1:1' did not answer") and "within 3s" in line
    assert "Check that the brokers are up" in line
    (error,) = [a for a in MetadataStore(url).audit_log.records("wiki") if a.action == "loop_error"]
    assert error.details["detailedState"] == "UNABLE_TO_CONNECT_TO_STREAM" and error.details["streamException"]
    assert MetadataStore(url).runs.get("wiki", "r1") is None


def test_run_row_stats_count_each_group_once_whatever_its_replicas(store):
    from ingest_core.handover.report import GroupReport, GroupState, RowStats

    def report(run_id, group_id, replica, processed):
        return GroupReport("wiki", run_id, group_id, replica, GroupState.SUCCESS,
                           RowStats(processed=processed, unparseable=1), [], [])

    store.reports.add(report("r1", 0, 1, 100))
    store.reports.add(report("r1", 0, 0, 100))
    store.reports.add(report("r1", 1, 2, 40))  # the only replica of group 1 that succeeded
    store.reports.add(report("r2", 0, 0, 7))
    assert store.reports.of("wiki", "r1") == [report("r1", 0, 1, 100), report("r1", 0, 0, 100),
                                                report("r1", 1, 2, 40)]
    assert store.reports.row_stats("wiki", "r1") == RowStats(processed=140, unparseable=2).to_json()
    assert store.reports.row_stats("wiki", "r2") == RowStats(processed=7, unparseable=1).to_json()
    assert store.reports.row_stats("wiki", "r3") == {}


def test_upgrade_to_v2_claims_the_ranges_of_the_backfills_published_before(store):
    from datetime import datetime, timezone

    import sqlalchemy as sa

    from ingest_core.core.offsets import (
        PublishedRange,
        StartOffset,
        StartSource,
        TopicPartition,
    )
    from ingest_core.core.planner import PlanRequest, plan_run
    from ingest_core.store.schema import published_ranges, schema_version

    tp = TopicPartition("edits", 0)

    def run(run_id, start, end, source):
        store.runs.insert(plan_run(PlanRequest(datasource="wiki", run_id=run_id, task_count=1,
                                              created_at=datetime(2026, 11, 22, tzinfo=timezone.utc),
                                              starts={tp: StartOffset(start, source)}, latest={tp: end})))
        store.runs.move("wiki", run_id, RunEvent.PUBLISH)

    # a v1 store: published runs, no claims (two backfills even published the same offsets)
    with store.transaction() as conn:
        published_ranges.drop(conn)
        conn.execute(schema_version.delete().where(schema_version.c.version >= 2))
        conn.execute(sa.text(f"DROP TABLE {VERSION_TABLE}"))
    store._schema_checked = True  # write the v1 store's runs with this release's code
    run("r1", 0, 10, StartSource.EARLIEST)
    run("bf1", 10, 30, StartSource.BACKFILL)
    run("bf2", 20, 30, StartSource.BACKFILL)
    assert store.upgrade().applied == ("0002", "0003", "0004", "0005", "0006", "0007", "0008")  # 0003-8: done
    with store.session() as conn:
        assert sa.inspect(conn).has_table("ingest_published_ranges")
    assert store.offsets.claims("wiki") == [PublishedRange(tp, 10, 30, "bf1", True)]


def test_a_run_is_past_its_deadline_only_while_in_flight():
    """Pure: explicit times, no store."""
    from dataclasses import replace
    from datetime import timedelta

    from ingest_core.store.records import RunRecord

    plan = Plan("wiki", "r1", T0, (), "modulo")
    running = RunRecord("wiki", "r1", 1, RunStatus.RUNNING, plan, T0, None, None, None,
                        running_since=T0 + timedelta(minutes=2), deadline_at=T0 + timedelta(minutes=12))
    assert not running.past_deadline(T0 + timedelta(minutes=12) - timedelta(microseconds=1))
    assert running.past_deadline(T0 + timedelta(minutes=12)) and not running.is_final
    assert running.expiry_reason(T0 + timedelta(minutes=13)) == (
        "expired: run r1 was RUNNING since 2026-11-22T10:02:00.000Z, past completionTimeout (600s, deadline "
        "2026-11-22T10:12:00.000Z) at 2026-11-22T10:13:00.000Z; it will not publish and its partitions go back "
        "to the committed offsets")
    never_started = replace(running, status=RunStatus.PLANNED, running_since=None, deadline_at=T0 + timedelta(minutes=10))
    assert never_started.past_deadline(T0 + timedelta(minutes=10))
    assert "PLANNED at 2026-11-22T10:00:00.000Z and its jobs never started, past completionTimeout (600s" in \
        never_started.expiry_reason(T0 + timedelta(minutes=10))
    late = T0 + timedelta(days=1)
    for status in (RunStatus.PUBLISHED, RunStatus.SUPERSEDED, RunStatus.FAILED):
        assert not replace(running, status=status).past_deadline(late)
    assert not replace(running, deadline_at=None).past_deadline(late)  # a backfill, or planned before v2
    assert [replace(running, status=s).is_final for s in RunStatus] == [False, False, True, False, True, True]
    assert replace(running, status=RunStatus.EXPIRED, expired_at=late).is_final  # expired: no retry revives it
