"""Errors an operator meets, each one line that says what was wrong and what to do, never a traceback:
a malformed metadata URL, global options after the subcommand, a closed stdout, a SQLite path that is
not there, and an unknown datasource, handled alike by every CLI command (exit 2) and REST route (HTTP 404)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest
from fastapi import HTTPException

from ingest_core.service import cli
from ingest_core.store.metadata import MetadataStore


def add_datasource(url: str, name: str) -> None:
    """A datasource row without a spec (so status asks no broker)."""
    store = MetadataStore(url)
    with store.session() as conn:
        store.datasources.lock(name, conn=conn)
    store.dispose()


def err_lines(capsys) -> list[str]:
    return capsys.readouterr().err.splitlines()


@pytest.mark.parametrize("url, says", [
    ("nonsense://", "SQLAlchemy knows no database 'nonsense'"),
    ("postgresql+psycopg2://u:s3cr3t@h:notaport/db", "port 'notaport' is not a number"),
    ("not a url", "it is not a URL"),
])
def test_a_malformed_metadata_url_is_one_line_naming_the_problem_exit_2(url, says, capsys):
    assert cli.main(["--metadata-url", url, "status"]) == 2
    (line,) = err_lines(capsys)
    assert line.startswith("error: metadata store URL ") and says in line and "e.g. postgresql+psycopg2://" in line
    assert "s3cr3t" not in line


def test_global_options_go_before_or_after_the_subcommand(store_url, capsys):
    add_datasource(store_url, "wiki")
    for argv in (["--metadata-url", store_url, "status", "--dags-folder", "/nowhere"],
                 ["status", "--metadata-url", store_url, "--dags-folder", "/nowhere"],
                 ["status", "-v", "--dags-folder", "/nowhere", "--metadata-url", store_url],
                 ["-v", "status", "wiki", "--dags-folder", "/nowhere", "--metadata-url", store_url]):
        assert cli.main(argv) == 0, argv
        assert "wiki" in capsys.readouterr().out
    assert cli.main(["db", "upgrade", "--metadata-url", store_url]) == 0  # a nested subcommand too
    assert "schema is up to date" in capsys.readouterr().out
    args = cli.build_parser().parse_args(["--metadata-url", "before", "status"])
    assert args.metadata_url == "before"  # the subcommand's copy of the option does not overwrite it


def test_a_closed_stdout_ends_quietly_as_unix_tools_do(tmp_path):
    url = f"sqlite:///{tmp_path / 'm.db'}"
    MetadataStore(url).upgrade()
    add_datasource(url, "wiki")
    read, write = os.pipe()
    os.close(read)  # `ingest status | head` after head has exited: every write fails with EPIPE
    try:
        done = subprocess.run([sys.executable, "-m", "ingest_core.service.cli", "status", "--metadata-url", url,
                               "--dags-folder", str(tmp_path)], stdout=write, stderr=subprocess.PIPE, text=True,
                              timeout=120)
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (cli.EXIT_BROKEN_PIPE, "")


def test_a_sqlite_path_that_is_not_there_says_so_and_where_it_came_from(tmp_path, monkeypatch, capsys):
    typo = tmp_path / "typo" / "metadata.db"
    assert cli.main(["--metadata-url", f"sqlite:///{typo}", "status"]) == 1
    (line,) = err_lines(capsys)
    assert f"no metadata store at {typo}: the folder {typo.parent} does not exist (from --metadata-url)" in line
    assert "`ingest db upgrade`" in line and "INGEST_HOME=demo-data" in line
    assert not typo.parent.exists()  # a read creates nothing

    monkeypatch.delenv("INGEST_METADATA_URL", raising=False)
    monkeypatch.setenv("INGEST_HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    assert cli.main(["segments", "wiki"]) == 1
    (line,) = err_lines(capsys)
    assert f"the file {tmp_path / 'home' / 'metadata.db'} does not exist" in line
    assert f"the default $INGEST_HOME/metadata.db, INGEST_HOME='{tmp_path / 'home'}'" in line

    assert cli.main(["--metadata-url", f"sqlite:///{tmp_path}", "status"]) == 1
    assert f"{tmp_path} is a folder, not a SQLite database file" in err_lines(capsys)[0]
    assert cli.main(["db", "upgrade"]) == 0  # the one command that creates it
    assert cli.main(["status"]) == 0


ACTIONS = ["suspend", "resume", "terminate", "reset", "set-offsets", "skip"]
UNKNOWN_CLI = [["status", "wikj"], ["health", "wikj"], ["segments", "wikj"], ["dead-letters", "wikj"],
               ["suspend", "wikj"], ["resume", "wikj"], ["terminate", "wikj", "--yes"], ["reset", "wikj", "--yes"],
               ["reset", "wikj", "--to-latest", "--yes"], ["set-offsets", "wikj", "t:0=1", "--yes"],
               ["skip", "wikj", "--yes"], ["cleanup", "wikj"], ["iceberg-sync", "wikj"], ["sync-group", "wikj"]]
assert {argv[0] for argv in UNKNOWN_CLI} == {name for name in cli.build_parser()._subparsers._group_actions[0].choices
                                            if name not in ("validate", "convert", "db", "plan", "query")}  # every one that takes one


def test_an_unknown_datasource_is_exit_2_with_a_did_you_mean_in_every_command(store_url, capsys):
    add_datasource(store_url, "wiki")
    add_datasource(store_url, "news")
    for argv in UNKNOWN_CLI:
        no_airflow = ["--no-airflow"] if argv[0] in ACTIONS else []
        assert cli.main(["--metadata-url", store_url, *argv, *no_airflow]) == 2, argv
        assert err_lines(capsys) == ["error: unknown datasource 'wikj': did you mean 'wiki'? (known: news, wiki)"], argv
    assert MetadataStore(store_url).audit_log.records("wiki") == []  # nothing was done to another datasource


@pytest.fixture
def ui(tmp_path, monkeypatch):
    """The plugin's REST routes over a SQLite store with datasources `wiki` and `news`."""
    from ingest_core.provider.plugins import ui

    url = f"sqlite:///{tmp_path / 'm.db'}"
    MetadataStore(url).upgrade()
    add_datasource(url, "wiki")
    add_datasource(url, "news")
    monkeypatch.setenv("INGEST_METADATA_URL", url)
    monkeypatch.setenv("AIRFLOW__CORE__DAGS_FOLDER", str(tmp_path))
    # an admin, who may read every datasource: the auth manager needs Airflow's database, which is not here
    # (tests/system/test_permissions.py has the real one, and a reader's 404 that names no hidden datasource)
    monkeypatch.setattr(ui, "readable", lambda user, names: list(names))
    ui._parsed_specs.cache_clear()
    yield ui
    ui._parsed_specs.cache_clear()


def post(body: bytes):
    """A POST request with this body, as the api-server hands it to a route."""
    from starlette.requests import Request

    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}

    return Request({"type": "http", "method": "POST", "headers": [(b"content-type", b"application/json")],
                    "path": "/", "query_string": b""}, receive)


def http_error(call) -> tuple[int, str]:
    with pytest.raises(HTTPException) as caught:
        result = call()
        if asyncio.iscoroutine(result):
            asyncio.run(result)
    return caught.value.status_code, caught.value.detail


def test_every_rest_route_answers_an_unknown_datasource_with_404_and_a_did_you_mean(ui):
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    user = SimpleAuthManagerUser(username="alice", role="admin")
    body = b'{"type": "kafka", "partitions": {"type": "end", "stream": "t", "partitionOffsetMap": {"0": 1}}}'
    said = "unknown datasource 'wikj': did you mean 'wiki'? (known: news, wiki)"
    routes = [lambda: ui.supervisor_status("wikj", user), lambda: ui.supervisor_health("wikj", user),
              lambda: ui.datasource_page("wikj", user), lambda: ui.supervisor_reset_offsets("wikj", post(body), user)]
    routes += [lambda a=a: ui.supervisor_action("wikj", a, user) for a in ("suspend", "resume", "terminate", "reset")]
    for route in routes:
        assert http_error(route) == (404, said)


@pytest.mark.parametrize("body", [b"{not json", b"\xff\xfe", b"", b"[1, 2]", b'"text"', b"null"])
def test_reset_offsets_with_a_body_that_is_not_a_json_object_is_400(ui, body):
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    status, detail = http_error(lambda: ui.supervisor_reset_offsets("wiki", post(body),
                                                                    SimpleAuthManagerUser(username="alice", role="admin")))
    assert status == 400 and detail.startswith("the body is not a JSON object: expected {\"type\": \"kafka\"")


def test_reset_offsets_naming_a_partition_twice_is_400_not_the_last_value_kept(ui):
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    body = b'{"type": "kafka", "partitions": {"type": "end", "stream": "t", "partitionOffsetMap": {"0": 1, "0": 2}}}'
    status, detail = http_error(lambda: ui.supervisor_reset_offsets("wiki", post(body),
                                                                    SimpleAuthManagerUser(username="alice", role="admin")))
    assert (status, detail) == (400, "'0' is given twice in the body (1, 2): give it once; nothing was changed")
