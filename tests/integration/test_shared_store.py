"""One SQLAlchemy engine per metadata store URL and process (`store.engines`), on real SQLite and PostgreSQL:
reused by every store the operators and the API open, disposed at exit, never shared with a forked child."""

import gc
import os
import subprocess
import sys
import textwrap

import pytest
from helpers import store_connections, wait_for_children

from ingest_core.store.engines import dispose_shared
from ingest_core.store.metadata import MetadataStore


@pytest.fixture
def shared_url(store_url):
    dispose_shared()  # other tests of this session may have opened the shared engine of the same URL
    # SQLite closes a connection's file only when no other connection of the process holds a lock on it: let
    # the fixtures' dropped stores go first
    gc.collect()
    yield store_url
    dispose_shared()


def test_stores_opened_per_call_share_one_engine_and_its_connection(shared_url):
    before = store_connections(shared_url)
    for _ in range(3):  # as the operators' tasks and the API's requests open the store
        MetadataStore.shared(shared_url).datasources.all()
    assert len(store_connections(shared_url) - before) == 1  # one pooled connection, reused
    assert MetadataStore.shared(shared_url).engine is MetadataStore.shared(shared_url).engine
    assert MetadataStore(shared_url).engine is not MetadataStore.shared(shared_url).engine
    dispose_shared()
    assert not store_connections(shared_url) - before


def test_the_supervisors_steps_and_the_api_open_the_shared_store(shared_url, monkeypatch):
    from ingest_core.provider.plugins import ui
    from ingest_core.supervisor.run import open_store

    monkeypatch.setenv("INGEST_METADATA_URL", shared_url)
    engine = MetadataStore.shared(shared_url).engine
    assert open_store().engine is engine and ui.shared_store().engine is engine


def test_shared_engines_are_disposed_when_the_process_exits(shared_url):
    # atexit runs its handlers last-registered first: the check, registered before the store module is
    # imported, runs after the store's dispose
    script = textwrap.dedent(f"""
        import atexit
        from helpers import store_connections

        url = {shared_url!r}
        atexit.register(lambda: print("open at exit:", len(store_connections(url))))
        from ingest_core.store.metadata import MetadataStore

        MetadataStore.shared(url).datasources.all()
        print("open before exit:", len(store_connections(url)))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["open before exit: 1", "open at exit: 0"]


@pytest.mark.postgres
def test_a_forked_child_opens_connections_of_its_own(pg_url):
    import multiprocessing

    import sqlalchemy as sa

    dispose_shared()
    try:
        with MetadataStore.shared(pg_url).engine.connect() as conn:  # pooled when it closes
            parent_backend = conn.execute(sa.text("SELECT pg_backend_pid()")).scalar()
        ctx = multiprocessing.get_context("fork")
        result = ctx.Queue()
        child = ctx.Process(target=_backend_pid_in_child, args=(pg_url, result))
        child.start()
        (child_backend,) = wait_for_children([child], result)
        assert child_backend != parent_backend  # a connection is never used by two processes
        with MetadataStore.shared(pg_url).engine.connect() as conn:  # and the parent's still works, pooled
            assert conn.execute(sa.text("SELECT pg_backend_pid()")).scalar() == parent_backend
    finally:
        dispose_shared()


def _backend_pid_in_child(url, result):
    import sqlalchemy as sa

    with MetadataStore.shared(url).engine.connect() as conn:
        result.put(conn.execute(sa.text("SELECT pg_backend_pid()")).scalar())
