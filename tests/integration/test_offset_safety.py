"""No silent skip, no silent duplicate from offsets, against the real broker and PostgreSQL: a topic deleted and
re-created stops the datasource (its committed offsets carry Kafka's topic id); operator offset moves are checked
against the broker; and every command an error advises is safe to follow. No Spark: a run's publish here has
task groups that wrote no segment, which moves the offsets as any publish does."""

from __future__ import annotations

import asyncio
import json
import os
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
from ingest_core.service import cli
from ingest_core.service.cli_actions import parse_offset_assignments
from ingest_core.service.status import collect_status
from ingest_core.store.audit import RECORDS_LOST
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

    def __call__(self, *args: str, stdin: int = subprocess.DEVNULL) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "ingest_core.service.cli", "--metadata-url", self.url, *args,
                               "--no-airflow", "--dags-folder", str(self.dags)],
                              capture_output=True, text=True, timeout=120, stdin=stdin)

    def on_a_terminal(self, answer: str, *args: str) -> subprocess.CompletedProcess:
        """The command with a terminal (a pseudo-terminal) on stdin, on which the operator typed `answer`."""
        master, slave = os.openpty()
        try:
            os.write(master, f"{answer}\n".encode())
            return self(*args, stdin=slave)
        finally:
            os.close(master)
            os.close(slave)


def datasource(broker, pg_url, tmp_path, name: str, topic: str, io: dict | None = None):
    spec = spec_from(broker.bootstrap, topic, SCHEMA, datasource=name, io=io)
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

    # forced: set to the log's nearer end, as Kafka's kafka-consumer-groups --reset-offsets does, and audited
    done = cli("set-offsets", "chk", f"{topic}:1=12", f"{topic}:0=2", "--yes", "--force", "--confirm-duplicates", "25",
               "--actor", "carol")
    assert done.returncode == 0, done.stderr
    assert "clamped: " in done.stderr and committed(pg_store, "chk") == {0: 5, 1: 10}
    (audit,) = pg_store.audit_log.records("chk", action="set_offsets")
    assert audit.actor == "carol" and "forced" not in audit.details and audit.details["clamped"] == [
        {"topic": topic, "partition": 1, "requested": 12, "offset": 10},
        {"topic": topic, "partition": 0, "requested": 2, "offset": 5}]
    assert (f"clamped: {topic}:0=2: partition {topic}-0 starts at offset 5 (log 5..30); records 2..4 were removed: "
            "set to the log start 5 instead") in done.stderr


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


def test_a_malformed_offset_or_partition_is_a_one_line_usage_error_with_nothing_changed(
        broker, pg_url, pg_store, tmp_path, capsys):
    """`--5`, and digits `str.isdigit()` or `int()` take that are not ASCII (², ٣), are no offset or partition: exit 2
    and one line, never a traceback, nothing changed."""
    topic = broker.create_topic(partitions=1)
    broker.produce(topic, events(10), partition=0)
    spec, ops = datasource(broker, pg_url, tmp_path, "syn", topic)
    run(pg_store, spec, "r1")
    before, audited = committed(pg_store, "syn"), len(pg_store.audit_log.records("syn"))
    for item in (f"{topic}:0=--5", f"{topic}:²=5", f"{topic}:0=²", f"{topic}:0=٣", f"{topic}:٠=5", f"{topic}:0=1_0",
                 f"{topic}:0=+5", f"{topic}:x=5", f"{topic}:0=", f"{topic}:=5", "=5", f"{topic}:0"):
        code = cli.main(["--metadata-url", pg_url, "set-offsets", "syn", item, "--yes", "--no-airflow",
                         "--dags-folder", str(ops.dags)])
        err = capsys.readouterr().err
        assert (code, len(err.splitlines())) == (2, 1), (item, code, err)
        assert err.startswith("error: ") and "is not TOPIC:PARTITION=OFFSET" in err, (item, err)
    assert committed(pg_store, "syn") == before and len(pg_store.audit_log.records("syn")) == audited


def test_a_forced_offset_past_the_log_end_is_clamped_to_it_and_loses_only_records_that_existed(
        broker, pg_url, pg_store, tmp_path):
    """As Kafka's `kafka-consumer-groups --reset-offsets --to-offset` does, `--force` sets an offset past the log
    end to the log end, and says so (before: 10^12 was stored, every run stopped at it, and status counted
    10^12 - 20 lost records in a log of 20)."""
    topic = broker.create_topic(partitions=2)
    broker.produce(topic, events(20), partition=0)
    broker.produce(topic, events(20), partition=1)
    spec, ops = datasource(broker, pg_url, tmp_path, "far", topic)
    run(pg_store, spec, "r1")  # committed {0: 20, 1: 20}
    with MainLine.locked(pg_store, "far", planning_lock=True) as line:  # p1 back at 5: 5..19 unread
        line.move({TopicPartition(topic, 1): 5}, by="test", reason="test")
    far = 10**12
    done = ops("set-offsets", "far", f"{topic}:0={far}", f"{topic}:1={far}", "--force", "--yes", "--actor", "erin")
    assert done.returncode == 0, done.stderr
    assert committed(pg_store, "far") == {0: 20, 1: 20}
    for p in (0, 1):
        assert (f"clamped: {topic}:{p}={far}: partition {topic}-{p} ends at offset 20 (log 0..20); offset {far} "
                f"lies beyond it: set to the log end 20 instead") in done.stderr, done.stderr
    (audit,) = pg_store.audit_log.records("far", action="set_offsets")
    assert audit.actor == "erin" and audit.details["clamped"] == [
        {"topic": topic, "partition": p, "requested": far, "offset": 20} for p in (0, 1)]
    (loss,) = [a.details for a in pg_store.audit_log.records("far", action=RECORDS_LOST)]
    assert loss["records"] == 15 and loss["ranges"] == [{"topic": topic, "partition": 1, "start": 5, "end": 20,
                                                         "records": 15}]
    assert collect_status(pg_store, "far", spec).lost_records == 15
    plan = Supervisor(spec, pg_store).plan("r2").plan  # runs go on from the log end
    assert {p.tp.partition: p.start for p in plan.partitions} == {0: 20, 1: 20}


def test_skipping_records_needs_yes_or_confirm_skip_with_or_without_a_terminal(
        broker, pg_url, pg_store, tmp_path, monkeypatch):
    """A move that skips records runs only with `--yes` or `--confirm-skip N` (N: the records it skips), as one
    that re-reads needs `--confirm-duplicates N`; a typed confirmation on a terminal is not enough, nor is
    `--confirm-duplicates 0` (before: `set-offsets ... =latest --confirm-duplicates 0` skipped 100 records
    unasked). REST: "confirmSkip": N, else 409 with the number."""
    topic = broker.create_topic(partitions=1)
    broker.produce(topic, events(20))
    spec, ops = datasource(broker, pg_url, tmp_path, "skp", topic, io={"useEarliestOffset": False})
    with MainLine.locked(pg_store, "skp", planning_lock=False) as line:
        line.move({TopicPartition(topic, 0): 0}, by="r0")
    run(pg_store, spec, "r1")  # committed 20
    broker.produce(topic, events(100))  # 20..119 unread
    audited = pg_store.audit_log.records("skp")

    def unchanged() -> None:
        assert committed(pg_store, "skp") == {0: 20} and pg_store.audit_log.records("skp") == audited

    latest = f"{topic}:0=latest"
    for refused in (ops("set-offsets", "skp", latest, "--confirm-duplicates", "0"),
                    ops.on_a_terminal("skp", "set-offsets", "skp", latest),
                    ops("set-offsets", "skp", latest, "--confirm-skip", "99"),
                    ops("reset", "skp", "--confirm-duplicates", "0"),
                    ops.on_a_terminal("skp", "reset", "skp")):
        assert refused.returncode == 1 and "Traceback" not in refused.stderr, refused
        assert "would skip 100 records" in refused.stderr and "`--confirm-skip 100`" in refused.stderr, refused.stderr
        assert f"{topic}-0 [20, 120)" in refused.stderr and "nothing was changed" in refused.stderr.lower()
        unchanged()

    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from fastapi import HTTPException
    from starlette.requests import Request

    from ingest_core.provider.plugins import ui

    def post(body: dict):
        async def receive():
            return {"type": "http.request", "body": json.dumps(body).encode(), "more_body": False}
        return Request({"type": "http", "method": "POST", "headers": [(b"content-type", b"application/json")],
                        "path": "/", "query_string": b""}, receive)

    monkeypatch.setenv("AIRFLOW__CORE__DAGS_FOLDER", str(ops.dags))
    monkeypatch.setenv("INGEST_METADATA_URL", pg_url)
    ui._parsed_specs.cache_clear()
    user = SimpleAuthManagerUser(username="fay", role="admin")
    body = {"type": "kafka", "partitions": {"type": "end", "stream": topic, "partitionOffsetMap": {"0": "latest"}}}
    try:
        with pytest.raises(HTTPException) as info:
            asyncio.run(ui.supervisor_reset_offsets("skp", post(body), user))
        assert info.value.status_code == 409 and info.value.detail["skipped"] == 100, info.value.detail
        assert '"confirmSkip": 100' in info.value.detail["message"]
        unchanged()
        done = asyncio.run(ui.supervisor_reset_offsets("skp", post({**body, "confirmSkip": 100}), user))
    finally:
        ui._parsed_specs.cache_clear()
    assert done["lostRecords"] == 100 and committed(pg_store, "skp") == {0: 120}

    with MainLine.locked(pg_store, "skp", planning_lock=True) as line:
        line.move({TopicPartition(topic, 0): 20}, by="test", reason="test")
    done = ops("set-offsets", "skp", latest, "--confirm-skip", "100")
    assert done.returncode == 0, done.stderr
    assert committed(pg_store, "skp") == {0: 120}
    with MainLine.locked(pg_store, "skp", planning_lock=True) as line:
        line.move({TopicPartition(topic, 0): 20}, by="test", reason="test")
    done = ops("set-offsets", "skp", latest, "--yes")  # --yes: whatever it skips (counted, audited)
    assert done.returncode == 0, done.stderr
    assert committed(pg_store, "skp") == {0: 120}
    with MainLine.locked(pg_store, "skp", planning_lock=True) as line:
        line.move({TopicPartition(topic, 0): 20}, by="test", reason="test")
    done = ops("reset", "skp", "--confirm-skip", "100")
    assert done.returncode == 0, done.stderr
    assert committed(pg_store, "skp") == {}
