"""The committed offsets mirrored to a Kafka consumer group (ingest_core.kafka.consumer_group), on the real broker: what
Kafka's tooling then shows, and mirrors that cannot be made."""

from __future__ import annotations

import dataclasses
import logging
import time

import pytest
from confluent_kafka import Consumer
from helpers import SIMPLE, group_offsets, spec_from

from ingest_core.core.states import RunEvent
from ingest_core.core.offsets import TopicPartition
from ingest_core.dev.embedded import free_port
from ingest_core.kafka.consumer_group import mirror_group, mirror_offsets

pytestmark = pytest.mark.kafka


def test_the_committed_offsets_become_the_consumer_group_s_so_kafka_shows_the_lag(broker):
    topic = broker.create_topic(partitions=2)
    broker.produce(topic, [b"x"] * 5, partition=0)
    broker.produce(topic, [b"y"] * 3, partition=1)
    spec = spec_from(broker.bootstrap, topic, SIMPLE, datasource="mirrored")
    assert mirror_group(spec) == "ingest.mirrored"
    assert mirror_offsets(spec, {TopicPartition(topic, 0): 4, TopicPartition(topic, 1): 3})
    assert group_offsets(broker, "ingest.mirrored", topic, 2) == {0: 4, 1: 3}  # lag 1 and 0 in Kafka's tooling
    assert mirror_offsets(spec, {TopicPartition(topic, 0): 5, TopicPartition(topic, 1): 3})  # the next publish
    assert group_offsets(broker, "ingest.mirrored", topic, 2) == {0: 5, 1: 3}
    named = spec_from(broker.bootstrap, topic, SIMPLE, datasource="mirrored", microbatch={"consumerGroup": "team.x"})
    assert mirror_group(named) == "team.x" and mirror_offsets(named, {TopicPartition(topic, 0): 2})
    assert group_offsets(broker, "team.x", topic, 1) == {0: 2}


def test_a_mirror_that_cannot_be_made_logs_and_fails_nothing(broker, caplog):
    topic = broker.create_topic(partitions=1)
    offsets = {TopicPartition(topic, 0): 0}
    off = spec_from(broker.bootstrap, topic, SIMPLE, datasource="quiet", microbatch={"mirrorOffsets": False})
    assert mirror_group(off) is None and not mirror_offsets(off, offsets)
    # a group that someone consumes with: Kafka moves no offsets of a group with members
    busy = spec_from(broker.bootstrap, topic, SIMPLE, datasource="busy")
    member = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "ingest.busy", "auto.offset.reset": "earliest"})
    try:
        member.subscribe([topic])
        deadline = time.monotonic() + 60
        while not member.assignment():
            assert time.monotonic() < deadline, "the member got no partition"
            member.poll(0.5)
        with caplog.at_level(logging.WARNING, logger="ingest_core.kafka.consumer_group"):
            assert not mirror_offsets(busy, offsets)
        assert "not mirrored to consumer group 'ingest.busy'" in caplog.text
    finally:
        member.close()
    # a broker that does not answer
    caplog.clear()
    dead = dataclasses.replace(busy, io_config=dataclasses.replace(
        busy.io_config, consumer_properties={"bootstrap.servers": f"127.0.0.1:{free_port()}"}))
    with caplog.at_level(logging.WARNING, logger="ingest_core.kafka.consumer_group"):
        assert not mirror_offsets(dead, offsets, timeout_s=2)
    assert "not mirrored" in caplog.text


def test_an_empty_consumer_group_name_is_a_spec_error(broker):
    from ingest_core.core.errors import SpecError

    with pytest.raises(SpecError, match="microbatch.consumerGroup: must not be empty"):
        spec_from(broker.bootstrap, "t", SIMPLE, microbatch={"consumerGroup": " "})


# ------------------------------------------------------------------- the group follows every offset action


def test_the_group_follows_every_offset_action_and_a_broker_down_is_a_warning_naming_the_re_sync(broker, pg_store,
                                                                                                  pg_url, tmp_path):
    """After set-offsets, skip, reset --to-latest, reset, terminate and resume, Kafka's
    tooling shows what the metadata store holds (nothing at all after a hard reset or a terminate)."""
    import uuid

    import yaml
    from helpers import plan_next

    from ingest_core.service import cli
    from ingest_core.supervisor.actions import DatasourceActions
    from ingest_core.store.main_line import MainLine

    topic = broker.create_topic(partitions=2)
    broker.produce(topic, [b"x"] * 30, partition=0)
    broker.produce(topic, [b"y"] * 20, partition=1)
    p0, p1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    name = f"follow_{uuid.uuid4().hex[:6]}"
    group = f"ingest.{name}"
    spec = spec_from(broker.bootstrap, topic, SIMPLE, datasource=name)
    actions = DatasourceActions(pg_store, None, "erin", specs={name: spec})
    with MainLine.locked(pg_store, name, planning_lock=False) as line:
        line.move({p0: 5, p1: 5}, by="r0")

    def shown() -> dict[int, int]:
        return group_offsets(broker, group, topic, 2)

    result = actions.set_offsets(name, {p0: 12}, confirm_skip=7)
    assert shown() == {0: 12, 1: 5} and result.details["consumerGroup"]["synced"]
    assert not [w for w in result.warnings if "consumer group" in w]
    # a run that failed over [12, 20) of p0 and [5, 9) of p1: skip moves past exactly it
    plan_next(pg_store, "r1", {p0: 20, p1: 9}, task_count=1, ds=name)
    pg_store.runs.move(name, "r1", RunEvent.FAIL, error="its tasks failed")
    actions.skip(name)
    assert shown() == {0: 20, 1: 9}
    actions.reset_to_latest(name, spec, backfill=False)
    assert shown() == {0: 30, 1: 20}
    result = actions.reset(name, confirm_duplicates=50)  # from earliest: re-reads 50; the group goes
    assert result.details["consumerGroup"]["deleted"] and shown() == {0: -1001, 1: -1001}
    with MainLine.locked(pg_store, name, planning_lock=False) as line:
        line.move({p0: 30, p1: 20}, by="r2")
    result = actions.terminate(name)  # nothing consumes for it any more: the group goes, and says so
    assert result.details["consumerGroup"]["deleted"] and shown() == {0: -1001, 1: -1001}
    actions.resume(name)
    assert shown() == {0: 30, 1: 20}

    # the broker down: the action is done (the metadata store is the truth), the warning names the re-sync
    down = dataclasses.replace(spec, io_config=dataclasses.replace(
        spec.io_config, consumer_properties={"bootstrap.servers": f"127.0.0.1:{free_port()}"}))
    # (an action that needs no broker itself: set-offsets checks its offsets against the broker first)
    with MainLine.locked(pg_store, name, planning_lock=False) as line:
        line.move({p1: 25}, by="r3")
    result = DatasourceActions(pg_store, None, "erin", specs={name: down}, group_timeout_s=2).resume(name)
    assert {tp: k.offset for tp, k in pg_store.offsets.committed(name).items()} == {p0: 30, p1: 25}
    [warning] = [w for w in result.warnings if "consumer group" in w]
    assert f"`ingest sync-group {name}`" in warning and "was not updated" in warning
    assert result.details["consumerGroup"]["synced"] is False and shown() == {0: 30, 1: 20}
    # ... which brings the group in step once the broker answers
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / f"{name}.yaml").write_text(yaml.safe_dump(spec.to_raw()))
    assert cli.main(["--metadata-url", pg_url, "sync-group", name, "--dags-folder", str(dags)]) == 0
    assert shown() == {0: 30, 1: 25}
