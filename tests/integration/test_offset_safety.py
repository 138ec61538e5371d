"""No silent skip, no silent duplicate from offsets, against the real broker and PostgreSQL: a topic deleted and
re-created stops the datasource (its committed offsets carry Kafka's topic id); operator offset moves are checked
against the broker; and every command an error advises is safe to follow. No Spark: a run's publish here has
task groups that wrote no segment, which moves the offsets as any publish does."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import sqlalchemy as sa
import yaml
from confluent_kafka import TopicPartition as KTP
from helpers import group_offsets, recreate_topic, spec_from

from ingest_core.core.errors import IngestError, OffsetOutOfRangeError, TopicRecreatedError
from ingest_core.core.offsets import OffsetRequest, StartSource, TopicPartition
from ingest_core.kafka.offset_reader import KafkaOffsetReader
from ingest_core.service.cli import parse_offset_assignments
from ingest_core.supervisor.actions import DatasourceActions
from ingest_core.store.main_line import MainLine
from ingest_core.store.publisher import GroupResult, Publisher
from ingest_core.store.schema import offsets as offsets_table
from ingest_core.supervisor.planning import Supervisor

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]

SCHEMA = {"timestampSpec": {"column": "ts", "format": "millis"}, "dimensionsSpec": {"dimensions": ["page"]},
          "metricsSpec": [{"type": "count", "name": "n"}],
          "granularitySpec": {"segmentGranularity": "HOUR", "queryGranularity": "NONE", "rollup": False}}


def events(n: int) -> list[bytes]:
    return [json.dumps({"ts": 1_790_000_000_000 + i, "page": "p"}).encode() for i in range(n)]


class Cli:
    def __init__(self, url: str, dags):
        self.url, self.dags = url, dags

    def __call__(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "ingest_core.service.cli", "--metadata-url", self.url, *args,
                               "--no-airflow", "--dags-folder", str(self.dags)],
                              capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


def datasource(broker, pg_url, tmp_path, name: str, topic: str):
    spec = spec_from(broker.bootstrap, topic, SCHEMA, datasource=name)
    dags = tmp_path / "dags"
    dags.mkdir(exist_ok=True)
    (dags / f"{name}.yaml").write_text(yaml.safe_dump(spec.to_raw()))
    return spec, Cli(pg_url, dags)


def run(store, spec, run_id: str):
    """Plan a run and publish it (its groups wrote no segment): the committed offsets move to its ends."""
    supervisor = Supervisor(spec, store)
    supervisor.register()
    plan = supervisor.plan(run_id).plan
    Publisher(store).publish(spec.datasource, run_id, [GroupResult(g.group_id, []) for g in plan.groups])
    return plan


def committed(store, name: str) -> dict[int, int]:
    return {tp.partition: k.offset for tp, k in store.offsets.committed(name).items()}


def topic_id(broker, topic: str) -> str:
    from ingest_core.kafka.config import KafkaClientConfig

    reader = KafkaOffsetReader(KafkaClientConfig.from_properties({"bootstrap.servers": broker.bootstrap}))
    try:
        return reader.topic_ids([topic])[topic]
    finally:
        reader.close()


def test_a_recreated_topic_stops_the_datasource_until_an_operator_chooses(broker, pg_url, pg_store, tmp_path):
    topic = broker.create_topic(partitions=1)
    broker.produce(topic, events(10))
    spec, cli = datasource(broker, pg_url, tmp_path, "re", topic)
    run(pg_store, spec, "r1")
    old = topic_id(broker, topic)
    assert [k.topic_id for k in pg_store.offsets.committed("re").values()] == [old]  # the publish recorded it

    # the new topic holds more records than the committed offset 10: offsets alone would skip its first 10
    recreate_topic(broker, topic, 1)
    broker.produce(topic, events(15))
    new = topic_id(broker, topic)
    with pytest.raises(TopicRecreatedError) as info:
        Supervisor(spec, pg_store).plan("r2")
    message = str(info.value)
    assert f"topic {topic!r} was deleted and re-created" in message and old in message and new in message
    assert f"`ingest set-offsets re {topic}=earliest`" in message and f"`ingest set-offsets re {topic}=latest`" in message
    assert pg_store.runs.get("re", "r2") is None and committed(pg_store, "re") == {0: 10}
    (loop_error,) = pg_store.audit_log.records("re", action="loop_error")  # status shows it among recentErrors
    assert loop_error.details["errorClass"] == "TopicRecreatedError"

    # the operator chooses: start over from the new topic's first record
    done = cli("set-offsets", "re", f"{topic}=earliest", "--yes", "--actor", "alice")
    assert done.returncode == 0, done.stderr
    (audit,) = pg_store.audit_log.records("re", action="set_offsets")
    assert audit.actor == "alice" and audit.details["topicIds"] == {topic: {"from": old, "to": new}}
    assert audit.details["after"] == {topic: {"0": 0}} and audit.details["duplicateRecords"] == 0
    assert {tp.partition: (k.offset, k.topic_id) for tp, k in pg_store.offsets.committed("re").items()} == {0: (0, new)}
    plan = run(pg_store, spec, "r3")
    assert [(p.start, p.end, p.start_source) for p in plan.partitions] == [(0, 15, StartSource.COMMITTED)]

    # or from its end: the records skipped are counted and audited
    recreate_topic(broker, topic, 1)
    broker.produce(topic, events(25))
    with pytest.raises(TopicRecreatedError):
        Supervisor(spec, pg_store).plan("r4")
    done = cli("set-offsets", "re", f"{topic}=latest", "--yes", "--actor", "bob")
    assert done.returncode == 0, done.stderr
    assert "offsets [0, 25) (25 records): these records are lost" in done.stderr
    audit = pg_store.audit_log.records("re", action="set_offsets")[-1]
    assert audit.details["skippedRecords"] == 25 and audit.details["skippedRanges"] == [
        {"topic": topic, "partition": 0, "start": 0, "end": 25}]
    assert committed(pg_store, "re") == {0: 25}

    # an offset stored before topic ids were (NULL) is read as it is, and the next publish records the id
    with pg_store.session() as conn:
        conn.execute(sa.update(offsets_table).where(offsets_table.c.datasource == "re").values(topic_id=None))
    broker.produce(topic, events(5))
    plan = run(pg_store, spec, "r5")
    assert [(p.start, p.end) for p in plan.partitions] == [(25, 30)]
    assert [k.topic_id for k in pg_store.offsets.committed("re").values()] == [topic_id(broker, topic)]


def advised_commands(message: str) -> list[str]:
    return re.findall(r"`(ingest [^`]+)`", message)


def test_every_command_a_truncated_partition_error_advises_touches_only_that_partition(
        broker, pg_url, pg_store, tmp_path):
    """delete_records on one partition: following the advice must not re-read the untouched one (before: the
    error advised `ingest reset`, which re-read every partition)."""
    topic = broker.create_topic(partitions=2)
    broker.produce(topic, events(60), partition=0)
    broker.produce(topic, events(40), partition=1)
    spec, cli = datasource(broker, pg_url, tmp_path, "cut", topic)
    run(pg_store, spec, "r1")
    broker.produce(topic, events(30), partition=0)
    broker.produce(topic, events(20), partition=1)
    tp = KTP(topic, 0, 80)
    broker.admin.delete_records([tp])[tp].result(timeout=30)  # 60..79 of p0 gone unread
    with pytest.raises(OffsetOutOfRangeError) as info:
        Supervisor(spec, pg_store).plan("r2")
    commands = advised_commands(str(info.value))
    assert commands, str(info.value)
    for i, command in enumerate(commands):  # each, from the same state
        done = cli(*command.split()[1:], "--yes")
        assert done.returncode == 0, (command, done.stderr)
        plan = Supervisor(spec, pg_store).plan(f"after-{i}").plan
        starts = {p.tp.partition: p.start for p in plan.partitions}
        assert starts == {0: 80, 1: 40}, (command, starts)  # p1 goes on where it stood: nothing twice
        with MainLine.locked(pg_store, "cut", planning_lock=True) as line:  # back to the state of the error
            line.move({TopicPartition(topic, 0): 60, TopicPartition(topic, 1): 40}, by="test", reason="test")


def test_set_offsets_is_checked_against_the_broker_and_force_is_audited(broker, pg_url, pg_store, tmp_path):
    topic = broker.create_topic(partitions=2)
    other = broker.create_topic(partitions=1)  # another datasource's topic
    broker.produce(topic, events(30), partition=0)
    broker.produce(topic, events(10), partition=1)
    tp = KTP(topic, 0, 5)
    broker.admin.delete_records([tp])[tp].result(timeout=30)  # p0's log: 5..30
    spec, cli = datasource(broker, pg_url, tmp_path, "chk", topic)
    run(pg_store, spec, "r1")  # committed {0: 30, 1: 10}
    before = committed(pg_store, "chk")

    actions = DatasourceActions(pg_store, None, "dave")  # the service check the CLI and REST both call
    for arg, says in (
            (f"{topic}:0=31", f"partition {topic}-0 ends at offset 30 (log 5..30); offset 31 lies beyond it"),
            (f"{topic}:0=2", f"partition {topic}-0 starts at offset 5 (log 5..30); records 2..4 were removed"),
            (f"{topic}:1=-1", "an offset is never negative"),
            (f"{topic}:7=0", f"topic {topic!r} has partitions 0..1, not 7"),
            ("no-such-topic:0=0", "topic 'no-such-topic' does not exist on the broker"),
            (f"{other}:0=0", f"topic {other!r} is not one datasource 'chk' reads")):
        with pytest.raises(IngestError, match="nothing was changed") as info:
            actions.set_offsets("chk", parse_offset_assignments([arg]), spec)
        assert says in str(info.value), (arg, str(info.value))
    with pytest.raises(IngestError, match="never negative"):  # not even with force
        actions.set_offsets("chk", parse_offset_assignments([f"{topic}:1=-1"]), spec, force=True)
    done = cli("set-offsets", "chk", f"{topic}:0=31", "--yes")  # the CLI: one line, no traceback
    assert done.returncode == 1 and "Traceback" not in done.stderr and "--force" in done.stderr
    assert committed(pg_store, "chk") == before and not pg_store.audit_log.records("chk", action="set_offsets")

    # the rare intended case: a partition set ahead of its log end, forced and audited
    done = cli("set-offsets", "chk", f"{topic}:1=12", "--yes", "--force", "--actor", "carol")
    assert done.returncode == 0, done.stderr
    assert "forced: " in done.stderr and committed(pg_store, "chk") == {0: 30, 1: 12}
    (audit,) = pg_store.audit_log.records("chk", action="set_offsets")
    assert audit.actor == "carol" and audit.details["forced"] == [
        f"{topic}:1=12: partition {topic}-1 ends at offset 10 (log 0..10); offset 12 lies beyond it, so runs would "
        "plan nothing and lag would read 0 until the log grows past it"]


def test_operator_input_no_log_can_hold_is_refused_with_nothing_changed(broker, pg_url, pg_store, tmp_path):
    """Typed at the door, nothing changed when refused: offsets past Java's long (even with --force), one partition given two values,
    a stream that is not a topic name, a terminated datasource's offsets, an unknown run's dead letters."""
    topic = broker.create_topic(partitions=1)
    broker.produce(topic, events(10), partition=0)
    spec, cli = datasource(broker, pg_url, tmp_path, "door", topic)
    run(pg_store, spec, "r1")
    before = committed(pg_store, "door")
    for args, says in (
            ([f"{topic}:0=99999999999999999999999", "--force"], "an offset is at most 9223372036854775807"),
            ([f"{topic}:0=1", f"{topic}:0=2"], f"{topic}:0 is given twice ({topic}:0=1, {topic}:0=2)")):
        done = cli("set-offsets", "door", *args, "--yes")
        assert done.returncode == 1 and "Traceback" not in done.stderr and says in done.stderr, done.stderr
    actions = DatasourceActions(pg_store, None, "dave")
    for stream in (None, ["x"], 123, ""):  # REST's `stream`, as a client may send it
        with pytest.raises(IngestError, match="a topic is a non-empty name") as info:
            actions.set_offsets("door", [OffsetRequest(stream, 0, 5)], spec, force=True)
        assert "nothing was changed" in str(info.value)
    assert committed(pg_store, "door") == before and not pg_store.audit_log.records("door", action="set_offsets")

    done = subprocess.run([sys.executable, "-m", "ingest_core.service.cli", "--metadata-url", pg_url, "dead-letters",
                           "door", "--run", "nosuch"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "has no planned run 'nosuch'" in done.stderr, (done.returncode, done.stderr)

    actions.terminate("door")
    for act in (lambda: actions.set_offsets("door", {TopicPartition(topic, 0): 5}, spec),
                lambda: actions.reset("door", spec, confirm_duplicates=10),
                lambda: actions.reset_to_latest("door", spec, backfill=False),
                lambda: actions.skip("door")):
        with pytest.raises(IngestError, match="the datasource is terminated; `ingest resume door` restarts it"):
            act()
    for args in (("set-offsets", "door", f"{topic}:0=5", "--force"), ("reset", "door", "--to-latest"),
                 ("reset", "door", "--confirm-duplicates", "10"), ("skip", "door")):  # the same over the CLI
        done = cli(*args, "--yes")
        assert done.returncode == 1 and "Traceback" not in done.stderr, (args, done.stderr)
        assert "of 'door' refused, nothing was changed: the datasource is terminated" in done.stderr
    assert committed(pg_store, "door") == before and not pg_store.audit_log.records("door", action="set_offsets")
    assert group_offsets(broker, "ingest.door", topic, 1) == {0: -1001}  # what terminate deleted stays deleted
