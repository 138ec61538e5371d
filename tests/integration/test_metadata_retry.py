"""Transient metadata-store errors are retried with backoff (as Druid's SQL metadata connector does): a PostgreSQL
restart of a few seconds fails neither a publish nor the CLI; a publish whose commit went through but whose
answer was lost is recognised as published; a permanent error fails at once. On a PostgreSQL server of this
module's own, so restarting it disturbs no other test."""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid

import pytest
import sqlalchemy as sa
from helpers import plan_next

from ingest_core.core.errors import MetadataStoreError
from ingest_core.core.offsets import TopicPartition
from ingest_core.dev.embedded import EmbeddedPostgres
from ingest_core.service import cli
from ingest_core.store.metadata import MetadataStore
from ingest_core.store.records import RunStatus
from ingest_core.store.publisher import GroupResult, Publisher, SegmentDescriptor

PARTS = [TopicPartition("edits", p) for p in range(2)]


@pytest.fixture(scope="module")
def server():
    own = EmbeddedPostgres().start()
    yield own
    own.stop()


@pytest.fixture
def store(server):
    name = f"retry_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(f"{server.url}/postgres", isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    s = MetadataStore(f"{server.url}/{name}")
    s.upgrade()
    yield s
    s.dispose()


class Retries(logging.Handler):
    """The retry warnings the store logs; `seen` is set at the first one."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.seen = threading.Event()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())
        self.seen.set()


@contextlib.contextmanager
def retries():
    handler, logger = Retries(), logging.getLogger("ingest_core.store.engines")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


def results_for(plan):
    return [GroupResult(g.group_id, [SegmentDescriptor(plan.created_at, plan.created_at, f"file:///d/{g.group_id}",
                                                       g.records, 1)]) for g in plan.groups if not g.is_empty]


def while_down(server: EmbeddedPostgres, work):
    """Shut the server down, start `work` in a thread, bring the server back once `work` has retried, and
    return what `work` returned (or raise what it raised)."""
    out: dict = {}

    def run():
        try:
            out["value"] = work()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            out["error"] = exc

    server.shut_down()
    with retries() as seen:
        thread = threading.Thread(target=run)
        thread.start()
        try:
            assert seen.seen.wait(120), "no retry was logged while the metadata store was down"
        finally:
            server.start_again()
        thread.join(300)
    assert not thread.is_alive()
    if "error" in out:
        raise out["error"]
    assert any("retrying" in m for m in seen.messages)
    return out["value"]


def test_a_postgres_restart_fails_neither_the_publish_nor_the_cli(server, store, capsys):
    plan = plan_next(store, "r1", {tp: 10 for tp in PARTS})
    store.runs.recent("wiki")  # the pool keeps a connection that the restart kills

    result = while_down(server, lambda: Publisher(store).publish("wiki", "r1", results_for(plan)))
    assert not result.already_published and result.published_groups == (0, 1)
    assert store.runs.require("wiki", "r1").status is RunStatus.PUBLISHED
    assert {tp: k.offset for tp, k in store.offsets.committed("wiki").items()} == {tp: 10 for tp in PARTS}

    assert while_down(server, lambda: cli.main(["--metadata-url", store.url, "segments", "wiki"])) == 0
    assert "2 segments, 20 rows" in capsys.readouterr().out


def test_a_publish_whose_commit_answer_was_lost_is_recognised_as_published(server, store):
    plan = plan_next(store, "r1", {tp: 10 for tp in PARTS})
    admin = sa.create_engine(f"{server.url}/postgres", isolation_level="AUTOCOMMIT")
    lost: list[int] = []

    def commit_then_lose_the_answer(conn):
        if lost:
            return
        dbapi = conn.connection.dbapi_connection
        dbapi.commit()  # the publish commits on the server...
        lost.append(dbapi.get_backend_pid())
        with admin.connect() as c:  # ...and its connection dies before the answer is read
            c.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": lost[0]})
        dbapi.cursor().execute("SELECT 1")  # the server's own error, raised where the commit's answer was awaited

    sa.event.listen(store.engine, "commit", commit_then_lose_the_answer)
    try:
        with retries() as seen:
            result = Publisher(store).publish("wiki", "r1", results_for(plan))
    finally:
        sa.event.remove(store.engine, "commit", commit_then_lose_the_answer)
        admin.dispose()
    assert lost and seen.messages  # the first try committed, failed, and was retried
    assert result.already_published and result.published_groups == (0, 1) and result.rows == 20
    assert len(store.segment_records.of("wiki")) == 2  # once
    assert {tp: k.offset for tp, k in store.offsets.committed("wiki").items()} == {tp: 10 for tp in PARTS}
    assert store.runs.require("wiki", "r1").status is RunStatus.PUBLISHED


@pytest.mark.parametrize("where, says", [("{server}/no_such_database", "does not exist"),
                                         ("postgresql+psycopg2://u@no-such-host.invalid/db", "no-such-host")])
def test_a_permanent_error_fails_at_once_with_what_was_wrong(server, where, says, capsys):
    url = where.format(server=server.url)
    with retries() as seen:
        with pytest.raises(MetadataStoreError, match=says):
            MetadataStore(url).check_schema()
        assert cli.main(["--metadata-url", url, "status"]) == 1
    assert seen.messages == []  # not retried
    assert says in capsys.readouterr().err
