"""Data loss made loud: every move of the main line past records nothing read (retention or
`delete_records` with resetOffsetAutomatically, a hard reset, set-offsets forward) is counted exactly, once, in
the audit log, the run's report, `ingest status` (a counter and a recent error), the REST API and the Ingest tab.
The real broker (`delete_records`), SQLite and PostgreSQL; the publishes carry no Spark job (the accounting is
the publish's and the actions')."""

from __future__ import annotations

import json

import pytest
import yaml
from confluent_kafka import TopicPartition as KTP
from helpers import make_spec
from test_supervisor import fill, publish_all

from ingest_core.core.states import RunEvent
from ingest_core.core.offsets import OffsetRange, StartSource, TopicPartition
from ingest_core.supervisor.report import run_outcome
from ingest_core.service import cli
from ingest_core.supervisor.actions import DatasourceActions
from ingest_core.service.status import collect_status
from ingest_core.store.audit import RECORDS_LOST
from ingest_core.store.main_line import MainLine
from ingest_core.store.publisher import claim_ranges
from ingest_core.supervisor.planning import Supervisor

pytestmark = pytest.mark.kafka


def delete_before(broker, topic: str, partition: int, offset: int) -> None:
    tp = KTP(topic, partition, offset)
    assert broker.admin.delete_records([tp])[tp].result(timeout=30).low_watermark == offset


def lost(store, name: str = "wiki") -> list[dict]:
    return [a.details for a in store.audit_log.records(name, action=RECORDS_LOST)]


@pytest.mark.parametrize("use_earliest", [True, False])
def test_an_automatic_reset_counts_exactly_what_it_skipped_once_when_it_publishes(broker, store, use_earliest):
    topic = broker.create_topic(1)
    fill(broker, topic, 1, 5)
    spec = make_spec(broker.bootstrap, topic=topic, useEarliestOffset=use_earliest,
                     tuning={"resetOffsetAutomatically": True})
    publish_all(store, Supervisor(spec, store).plan("r1"))  # committed 5
    fill(broker, topic, 1, 10)  # offsets 5..14
    delete_before(broker, topic, 0, 8)  # 5..7 removed unread
    # a run that resets and then fails counts nothing: the main line did not move
    r2 = Supervisor(spec, store).plan("r2")
    assert r2.plan.partitions[0].start_source in (StartSource.RESET_EARLIEST, StartSource.RESET_LATEST)
    store.runs.move("wiki", "r2", RunEvent.FAIL, error="its tasks failed")
    assert lost(store) == []
    r3 = Supervisor(spec, store).plan("r3")
    publish_all(store, r3)
    skipped_to = 8 if use_earliest else 15  # useEarliestOffset: false skips the records still there too
    ranges = [{"topic": topic, "partition": 0, "start": 5, "end": skipped_to, "records": skipped_to - 5}]
    assert lost(store) == [{"cause": "resetOffsetAutomatically", "records": skipped_to - 5, "runId": "r3",
                            "ranges": ranges}]
    outcome = run_outcome(store, store.runs.require("wiki", "r3"), None)  # the report task's
    assert outcome.lost_records == skipped_to - 5 and outcome.to_json()["lost"][0]["ranges"] == ranges
    assert run_outcome(store, store.runs.require("wiki", "r1"), None).to_json()["lostRecords"] == 0
    payload = collect_status(store, "wiki", spec).to_json()["payload"]
    assert payload["lostRecords"] == skipped_to - 5 and payload["lostRecordsByPartition"] == {"0": skipped_to - 5}
    [error] = [e for e in payload["recentErrors"] if e["exceptionClass"] == "RecordsLost"]
    assert error["runId"] == "r3" and error["lostRanges"] == ranges and "resetOffsetAutomatically" in error["message"]


def test_a_hard_reset_after_delete_records_counts_the_removed_records_of_that_partition_only(broker, store):
    """The issue's case: `ingest reset` after `delete_records` on one partition (re-reading the others is the
    duplicate count's business); the loss is counted when the first run after it publishes."""
    topic = broker.create_topic(2)
    fill(broker, topic, 2, 20)
    p0, p1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    spec = make_spec(broker.bootstrap, topic=topic, useEarliestOffset=True)
    with MainLine.locked(store, "wiki", planning_lock=False) as line:
        line.move({p0: 10, p1: 10}, by="r0")
    delete_before(broker, topic, 0, 15)  # 10..14 of p0 removed unread
    # from earliest: p1's 0..9 are read again, a number the operator confirms (the offsets' business, not lost)
    DatasourceActions(store, None, "carol", specs={"wiki": spec}).reset("wiki", confirm_duplicates=10)
    assert lost(store) == []  # nothing moved past yet: the next run decides where it starts
    r1 = Supervisor(spec, store).plan("r1")
    assert {p.tp: p.start for p in r1.plan.partitions} == {p0: 15, p1: 0}
    publish_all(store, r1)
    [event] = lost(store)
    assert event["cause"] == "reset" and event["runId"] == "r1" and event["records"] == 5
    assert event["ranges"] == [{"topic": topic, "partition": 0, "start": 10, "end": 15, "records": 5}]
    # counted once: the next publish continues from the committed offsets
    fill(broker, topic, 2, 3)
    publish_all(store, Supervisor(spec, store).plan("r2"))
    assert collect_status(store, "wiki", spec).lost == {p0: 5}


def test_a_hard_reset_to_latest_counts_what_the_main_line_jumps_over(broker, store):
    topic = broker.create_topic(1)
    fill(broker, topic, 1, 12)
    tp = TopicPartition(topic, 0)
    spec = make_spec(broker.bootstrap, topic=topic, useEarliestOffset=False)
    with MainLine.locked(store, "wiki", planning_lock=False) as line:
        line.move({tp: 4}, by="r0")
    DatasourceActions(store, None, "carol", specs={"wiki": spec}).reset("wiki", confirm_skip=8)
    publish_all(store, Supervisor(spec, store).plan("r1"))  # starts at the latest: 12
    assert [(e["cause"], e["records"]) for e in lost(store)] == [("reset", 8)]


def test_set_offsets_forward_counts_what_it_skips_less_what_a_backfill_published_and_the_api_and_tab_show_it(
        broker, store, store_url, tmp_path, monkeypatch, capsys):
    topic = broker.create_topic(2)
    fill(broker, topic, 2, 100)
    p0, p1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    spec = make_spec(broker.bootstrap, topic=topic)
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "wiki.yaml").write_text(yaml.safe_dump(spec.to_raw()))
    with MainLine.locked(store, "wiki", planning_lock=False) as line:
        line.move({p0: 10, p1: 50}, by="r0")
    with store.session() as conn:  # a backfill already published [30, 40) of p0: skipping it loses nothing
        claim_ranges(conn, "wiki", [OffsetRange(p0, 30, 40)], "backfill-1", backfill=True, claims=[])
    assert cli.main(["--metadata-url", store_url, "set-offsets", "wiki", f"{topic}:0=60", f"{topic}:1=20", "--yes",
                     "--confirm-duplicates", "30", "--no-airflow", "--actor", "dave", "--dags-folder", str(dags)]) == 0
    err = capsys.readouterr().err
    assert "40 records lost by set-offsets" in err and "these records are lost" in err
    [event] = lost(store)  # p1 went back (re-read, not lost); p0 skipped [10, 30) and [40, 60)
    assert event["cause"] == "set-offsets" and event["records"] == 40
    assert [(r["start"], r["end"]) for r in event["ranges"]] == [(10, 30), (40, 60)]
    [audit] = store.audit_log.records("wiki", action="set_offsets")
    assert audit.actor == "dave" and audit.details["lostRecords"] == 40
    assert cli.main(["--metadata-url", store_url, "status", "wiki", "--dags-folder", str(dags)]) == 0
    out = capsys.readouterr().out
    assert "LOST RECORDS: 40 in all" in out and "RecordsLost: 40 records lost by set-offsets" in out

    # the REST API's status and the Ingest tab (the routes' own functions; their authentication: test_scheduler)
    from ingest_core.provider.plugins import ui

    monkeypatch.setenv("AIRFLOW__CORE__DAGS_FOLDER", str(dags))
    monkeypatch.setenv("INGEST_METADATA_URL", store_url)
    ui._parsed_specs.cache_clear()
    try:
        from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

        user = SimpleAuthManagerUser(username="dave", role="admin")
        payload = ui.supervisor_status("wiki", user)["payload"]
        page = ui.datasource_page("wiki", user).body.decode()
    finally:
        ui._parsed_specs.cache_clear()
    assert payload["lostRecords"] == 40 and payload["lostRecordsByPartition"] == {"0": 40}
    assert "Lost records: 40" in page and "[10, 30)" in page
    json.dumps(payload)  # the API's JSON as served
