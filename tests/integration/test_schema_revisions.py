"""The metadata store's schema under Alembic: a store of every past hand-rolled version upgrades with its rows, the
migrations build exactly the models, and a store of a newer release is refused without a change."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timezone

import pytest
import sqlalchemy as sa

from legacy_stores import HEAD, LEGACY_TABLE, VERSION_TABLE, make_legacy_store, wipe

from ingest_core.core.errors import MetadataStoreError
from ingest_core.service import cli
from ingest_core.store.engines import make_engine
from ingest_core.store.metadata import MetadataStore
from ingest_core.store.migrations import revisions
from ingest_core.store.migrations.history import SchemaUpgrade
from ingest_core.store.records import PublishedFigures
from ingest_core.store.schema import meta

T0 = datetime(2026, 11, 22, 10, tzinfo=timezone.utc)
ALL = tuple(f"{v:04d}" for v in range(1, 9))
def rows_in(url: str, columns: dict[str, list[str]]) -> dict[str, list[tuple]]:
    """The rows of each table, in these columns, in primary-key order."""
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            found = {}
            for name, names in columns.items():
                table = meta.tables[name]
                found[name] = [tuple(r) for r in conn.execute(
                    sa.select(*(table.c[n] for n in names)).order_by(*table.primary_key.columns))]
            return found
    finally:
        engine.dispose()


def legacy_columns(url: str) -> dict[str, list[str]]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            inspector = sa.inspect(conn)
            return {name: [c["name"] for c in inspector.get_columns(name)] for name in meta.tables
                    if inspector.has_table(name) and name != LEGACY_TABLE}
    finally:
        engine.dispose()


def check_agrees_with_the_models(url: str) -> None:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            assert revisions.drift(conn) == []
    finally:
        engine.dispose()


@pytest.fixture(params=["sqlite", "postgres"])
def any_url(request, tmp_path) -> str:
    """An empty database, once on SQLite and once on PostgreSQL (the session's, emptied)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'm.db'}"
    url = request.getfixturevalue("pg_url")
    engine = make_engine(url)
    with engine.begin() as conn:
        wipe(conn)
    engine.dispose()
    return url


@pytest.mark.parametrize("version", range(1, 9))
def test_a_store_of_every_hand_rolled_version_upgrades_with_its_rows(any_url, version, capsys):
    make_legacy_store(any_url, version)
    columns = legacy_columns(any_url)
    before = rows_in(any_url, columns)
    with MetadataStore(any_url) as store:
        if version < 8:
            with pytest.raises(MetadataStoreError, match=f"has schema revision {version:04d}, this release needs {HEAD}"):
                store.check_schema()
        else:
            store.check_schema()  # version 8 is 0008: the store works before its first `ingest db upgrade`
    assert cli.main(["db", "upgrade", "--metadata-url", any_url]) == 0
    applied = [f"{v:04d}" for v in range(version + 1, 9)]
    assert capsys.readouterr().out.strip().endswith(
        f"schema upgraded from revision {version:04d} to {HEAD} ({', '.join(applied)})" if applied
        else f"schema is up to date (revision {HEAD})")

    # every row is there, changed only where a revision says so: 0007 moved the flags and expired runs into the states
    expected = before
    if version < 7:
        state = columns["ingest_datasources"].index("state")
        for i, row in enumerate(expected["ingest_datasources"]):
            moved = {"gone": "TERMINATED", "wiki": "SUSPENDED"}.get(row[0])
            if moved:
                expected["ingest_datasources"][i] = row[:state] + (moved, moved) + row[state + 2:]
        if version >= 3:  # expired_at came with 3
            status = columns["ingest_runs"].index("status")
            expected["ingest_runs"] = [r[:status] + ("EXPIRED",) + r[status + 1:] if r[1] == "lapsed" else r
                                       for r in expected["ingest_runs"]]
    assert rows_in(any_url, columns) == expected
    store = MetadataStore(any_url)
    assert store.runs.require("wiki", "done").published == PublishedFigures(20, 12, 2, 1200)  # 0008's, or kept
    assert store.runs.require("wiki", "old").published is None

    assert store.current_revision() == HEAD
    store.check_schema()
    check_agrees_with_the_models(any_url)
    with store.session() as conn:  # releases before Alembic read the store as their version 8
        assert sorted(conn.execute(sa.text(f"SELECT version FROM {LEGACY_TABLE}")).scalars()) == list(range(1, 9))
        assert conn.execute(sa.text(f"SELECT version_num FROM {VERSION_TABLE}")).scalars().all() == [HEAD]
    store.dispose()


def test_a_store_made_on_a_branch_that_skipped_a_version_gets_the_missing_step(tmp_path):
    """Markers 1-4 and 6 (a branch's 6 before 5 existed): the store is at 0004; 0005 adds the topic ids, 0006 finds
    its column there."""
    url = f"sqlite:///{tmp_path / 'm.db'}"
    make_legacy_store(url, 6)
    engine = make_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text(f"DELETE FROM {LEGACY_TABLE} WHERE version = 5"))
        conn.execute(sa.text("ALTER TABLE ingest_offsets DROP COLUMN topic_id"))
    engine.dispose()
    store = MetadataStore(url)
    assert store.current_revision() == "0004"
    assert store.upgrade().applied == ("0005", "0006", "0007", "0008")
    check_agrees_with_the_models(url)
    assert store.offsets.committed("wiki")  # read with the new column
    store.dispose()


def test_the_migrations_build_exactly_the_models(any_url):
    """An empty database upgraded to the newest revision has the models' tables, columns, types, defaults,
    indexes and constraints (Alembic's compare_metadata finds nothing to change)."""
    store = MetadataStore(any_url)
    assert store.current_revision() is None
    assert store.upgrade() == SchemaUpgrade(None, ALL)
    assert store.upgrade() == SchemaUpgrade(HEAD, ())
    store.dispose()
    check_agrees_with_the_models(any_url)


def test_a_model_the_migrations_do_not_make_is_found(any_url):
    """The comparison sees a column, a table and an index that no revision made (so the test above can fail)."""
    url = any_url
    with MetadataStore(url) as store:
        store.upgrade()
    drifted = sa.MetaData()
    for table in meta.tables.values():
        table.to_metadata(drifted)
    drifted.tables["ingest_runs"].append_column(sa.Column("priority", sa.Integer))
    sa.Table("ingest_quotas", drifted, sa.Column("datasource", sa.String(200), primary_key=True))
    sa.Index("ix_ingest_specs_fingerprint", drifted.tables["ingest_specs"].c.fingerprint)
    engine = make_engine(url)
    with engine.connect() as conn:
        found = revisions.drift(conn, drifted)
    engine.dispose()
    assert sorted(d[0] for d in found) == ["add_column", "add_index", "add_table"], found


def snapshot(url: str) -> dict[str, object]:
    """Every table of the database with its columns and all its rows, in order."""
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            inspector = sa.inspect(conn)
            found = {}
            for name in sorted(inspector.get_table_names()):
                columns = [c["name"] for c in inspector.get_columns(name)]
                rows = conn.execute(sa.text(f'SELECT * FROM "{name}"')).all()
                found[name] = (columns, sorted(map(repr, rows)))
            return found
    finally:
        engine.dispose()


def one_line(capsys) -> str:
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1, err
    return err[0]


@pytest.mark.parametrize("marker", ["alembic", "legacy"])
def test_a_store_of_a_newer_release_is_refused_by_name_and_left_alone(store_url, marker, capsys):
    """A store a newer release upgraded: its revision (or, before Alembic, its version 9) is unknown here.
    `ingest db upgrade` and every other command refuse it in one line naming both revisions; nothing changes."""
    engine = make_engine(store_url)
    with engine.begin() as conn:
        if marker == "alembic":
            conn.execute(sa.text(f"CREATE TABLE IF NOT EXISTS {VERSION_TABLE} (version_num VARCHAR(32) PRIMARY KEY)"))
            conn.execute(sa.text(f"DELETE FROM {VERSION_TABLE}"))
            conn.execute(sa.text(f"INSERT INTO {VERSION_TABLE} VALUES ('f00d0009')"))
            found = "f00d0009"
        else:
            conn.execute(sa.text(f"DROP TABLE IF EXISTS {VERSION_TABLE}"))
            conn.execute(sa.text(f"INSERT INTO {LEGACY_TABLE} (id, version, upgraded_at) VALUES (9, 9, :t)"),
                         {"t": T0})
            found = "0009"
    engine.dispose()
    before = snapshot(store_url)
    assert cli.main(["db", "upgrade", "--metadata-url", store_url]) == 1
    line = one_line(capsys)
    assert f"schema revision {found}, which this release does not know" in line and "its newest is 0008" in line
    assert "nothing was changed" in line
    assert snapshot(store_url) == before
    assert cli.main(["status", "--metadata-url", store_url, "--dags-folder", "/nowhere"]) == 1
    assert one_line(capsys) == line
    with MetadataStore(store_url) as store, pytest.raises(MetadataStoreError, match=f"revision {found}, which this"):
        store.check_schema()
    assert snapshot(store_url) == before


def test_the_shipped_revisions_are_alembics_and_reading_them_needs_no_alembic():
    """`history` lists the revisions by file name, for the schema check of every process; Alembic, reading the
    scripts, sees the same line of revisions and one head. Using the store imports no Alembic (0.2 s a process)."""
    from ingest_core.store.migrations import history

    line = [script.revision for script in revisions.scripts().walk_revisions()][::-1]
    assert tuple(line) == history.shipped() and line[0] == "0001" and history.head() == HEAD
    assert revisions.scripts().get_heads() == [HEAD]
    check = ("import sys, ingest_core.store.metadata, ingest_core.service.cli; "
             "print(sorted(m for m in sys.modules if m.split('.')[0] == 'alembic'))")
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout.strip()) == (0, "[]"), done.stderr


def test_the_store_in_airflows_own_database_leaves_airflows_migrations_alone(tmp_path):
    """Airflow's database (a real `airflow db migrate`, on SQLite) as the store's too: the store keeps its revision
    in its own version table, and every table of Airflow's, its `alembic_version` among them, keeps its rows."""
    from pathlib import Path

    import airflow_db

    from ingest_core.dev.demo import airflow_env

    env = airflow_env(tmp_path, "localhost:9")
    airflow_db.migrate(env)
    url = f"sqlite:///{Path(env['AIRFLOW_HOME']) / 'airflow.db'}"
    before = snapshot(url)
    assert before["alembic_version"][1] and not any(name.startswith("ingest_") for name in before)
    with MetadataStore(url) as store:
        assert store.upgrade().applied == ALL
        assert store.current_revision() == HEAD
    after = snapshot(url)
    assert {name: found for name, found in after.items() if not name.startswith("ingest_")} == before
    check_agrees_with_the_models(url)  # Airflow's tables are not the store's business


def test_an_upgrade_that_fails_midway_says_where_and_changes_nothing(any_url, capsys):
    """A version-1 store whose claims table is there already (a marker lagging its tables) with the very claim that
    revision 0002 derives for a backfill published before: 0002's insert breaks the claims' primary key. The upgrade
    is one transaction: the error names the revision, and the store is as it was."""
    from ingest_core.core.offsets import StartOffset, StartSource, TopicPartition
    from ingest_core.core.planner import PlanRequest, plan_run
    from ingest_core.store.schema import published_ranges, runs

    make_legacy_store(any_url, 1)
    tp = TopicPartition("edits", 3)
    plan = plan_run(PlanRequest(datasource="wiki", run_id="bf", task_count=1, created_at=T0,
                                starts={tp: StartOffset(10, StartSource.BACKFILL)}, latest={tp: 30}))
    engine = make_engine(any_url)
    with engine.begin() as conn:
        conn.execute(runs.insert().values(datasource="wiki", run_id="bf", seq=9, status="PUBLISHED", records=20,
                                          plan=plan.to_json(), created_at=T0, updated_at=T0, published_at=T0))
        published_ranges.create(conn)
        conn.execute(published_ranges.insert().values(datasource="wiki", topic="edits", partition=3, start_offset=10,
                                                      end_offset=30, run_id="bf", backfill=True, updated_at=T0))
    engine.dispose()
    before = snapshot(any_url)
    assert cli.main(["db", "upgrade", "--metadata-url", any_url]) == 1
    line = one_line(capsys)
    assert "schema upgrade from revision 0001 failed at revision 0002 (The offset ranges each publish claimed" in line
    assert line.endswith("; nothing was changed (the upgrade is one transaction)")
    assert snapshot(any_url) == before


def test_a_store_account_that_may_not_create_tables_is_told_so(pg_url, capsys):
    """PostgreSQL: the store's account may connect but not create tables in the schema (a common production
    grant). The upgrade names the revision and the server's reason; the database stays empty."""
    import os

    server = sa.engine.make_url(pg_url)
    name, role = f"ingest_noddl_{os.getpid()}", f"ingest_noddl_{os.getpid()}"
    admin = sa.create_engine(server.set(database="postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
        conn.execute(sa.text(f'CREATE ROLE "{role}" LOGIN'))
    owner = sa.create_engine(server.set(database=name), isolation_level="AUTOCOMMIT")
    try:
        with owner.connect() as conn:
            conn.execute(sa.text("REVOKE CREATE ON SCHEMA public FROM PUBLIC"))  # PostgreSQL 15's default
            conn.execute(sa.text(f'GRANT USAGE ON SCHEMA public TO "{role}"'))
        url = server.set(database=name, username=role).render_as_string(hide_password=False)
        assert cli.main(["db", "upgrade", "--metadata-url", url]) == 1
        line = one_line(capsys)
        assert "schema upgrade from revision none (empty) failed at revision 0001 (The tables of the first" in line
        assert "permission denied for schema public" in line and line.endswith("nothing was changed (the upgrade "
                                                                               "is one transaction)")
        assert snapshot(server.set(database=name).render_as_string(hide_password=False)) == {}
    finally:
        owner.dispose()
        with admin.connect() as conn:
            conn.execute(sa.text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :n "
                                 "AND pid <> pg_backend_pid()"), {"n": name})
            conn.execute(sa.text(f'DROP DATABASE "{name}"'))
            conn.execute(sa.text(f'DROP ROLE "{role}"'))
        admin.dispose()
