"""The plugin's REST API and pages under a real per-DAG permission model: Airflow's api-server with the FAB auth
manager (apache-airflow-providers-fab), users and roles made with FAB's own security manager, every request over
HTTP. One user may read one datasource's DAG only, another may also edit it: lists show only what each may read
whatever the query string says (`?dag_id=` once unlocked every datasource), every route with a datasource in its
path checks that datasource, and every refused action is in the audit log. The same server shows that a literal
secret in a spec (or in a spec history row stored before a key was known to be secret) is never in a response."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from confluent_kafka.admin import AdminClient, NewTopic
from conftest import postgres_database
from helpers import http_json

from ingest_core.core.spec import load_spec
from ingest_core.dev.demo import airflow_env
from ingest_core.dev.embedded import free_port
from ingest_core.provider.plugins.permissions import REFUSED
from ingest_core.store.metadata import MetadataStore
from ingest_core.store.schema import specs, utcnow
from ingest_core.supervisor.planning import Supervisor

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
FAB = "airflow.providers.fab.auth_manager.fab_auth_manager.FabAuthManager"
API = "/ingest/api/v1/supervisor"
SHOWN, HIDDEN = "team_a_edits", "team_b_payroll"
ACTIONS = ("suspend", "resume", "terminate", "reset", "resetOffsets")
# literal secrets in SHOWN's spec file (librdkafka takes them; PLAINTEXT uses none of them)...
LITERALS = {"sasl.password": "Lit-sasl-pw-41", "ssl.key.password": "Lit-key-pw-42",
            "ssl.keystore.password": "Lit-ks-pw-43", "sasl.oauthbearer.client.secret": "Lit-oidc-44"}
# ...and in a spec history row stored by an older version, which redacted neither (issue 23)
OLD_ROW_LITERALS = {"ssl.keystore.key": "-----BEGIN PRIVATE KEY-----Lit-ks-key-45", "ssl_key": "Lit-ssl-key-46"}
PASSWORD = "Perm-test-pw-1"
USERS = textwrap.dedent(f"""
    from airflow.providers.fab.auth_manager.cli_commands.utils import get_application_builder
    with get_application_builder() as appbuilder:
        sm = appbuilder.sm
        for user, resource, actions in (("admin", "DAGs", ["can_read", "can_edit"]),  # every DAG
                                        ("reader", "DAG:{SHOWN}", ["can_read"]),
                                        ("editor", "DAG:{SHOWN}", ["can_read", "can_edit"])):
            role = sm.add_role(f"{{user}}_role")
            for action in actions:
                sm.add_permission_to_role(role, sm.create_permission(action, resource))
            sm.add_user(user, user, user, f"{{user}}@example.com", role, "{PASSWORD}")
""")


class FabApiServer:
    """`airflow api-server` with the FAB auth manager; Airflow's database and the ingestion metadata on
    PostgreSQL; no scheduler (nothing here runs a DAG)."""

    def __init__(self, root: Path, bootstrap: str, metadata_url: str, airflow_db_url: str):
        port = free_port()
        self.root, self.base, self.metadata_url = root, f"http://localhost:{port}", metadata_url
        self.dags = root / "dags"
        self.dags.mkdir()
        # FAB's built-in roles are not synced (seconds each time): the users script makes the three roles used
        self.env = airflow_env(root, bootstrap, dags_folder=self.dags, metadata_url=metadata_url,
                               AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=airflow_db_url, AIRFLOW__CORE__AUTH_MANAGER=FAB,
                               AIRFLOW__API__PORT=str(port), AIRFLOW__API__WORKERS="1",
                               AIRFLOW__FAB__UPDATE_FAB_PERMS="False")
        done = subprocess.run([str(BIN / "airflow"), "db", "migrate"], env=self.env, capture_output=True, text=True,
                              timeout=600)  # with FAB's tables (the auth manager's database manager)
        assert done.returncode == 0, f"airflow db migrate: {done.stdout[-3000:]}{done.stderr[-3000:]}"
        MetadataStore(metadata_url).upgrade()
        self.tokens: dict[str, str] = {}
        with open(root / "users.log", "wb") as log:
            users = subprocess.Popen([str(BIN / "python"), "-c", USERS], env=self.env, stdout=log,
                                     stderr=subprocess.STDOUT)
        with open(root / "api-server.log", "wb") as log:
            self.proc = subprocess.Popen([str(BIN / "airflow"), "api-server", "--port", str(port)], env=self.env,
                                         stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            assert users.wait(timeout=600) == 0, f"creating the users failed; see {root / 'users.log'}"
            self.wait_until_ready()
        except BaseException:
            users.kill()
            self.stop()
            raise

    def wait_until_ready(self, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"the api-server exited; see {self.root / 'api-server.log'}"
            try:
                with urllib.request.urlopen(f"{self.base}/api/v2/monitor/health", timeout=5):
                    return
            except OSError:
                time.sleep(1)
        raise AssertionError(f"the api-server did not answer in {timeout}s; see {self.root / 'api-server.log'}")

    def token(self, user: str) -> str:
        """A JWT from FAB's login endpoint."""
        if user not in self.tokens:
            status, body = self.http("POST", "/auth/token", None, {"username": user, "password": PASSWORD})
            assert status in (200, 201), (user, status, body)
            self.tokens[user] = body["access_token"]
        return self.tokens[user]

    def http(self, method: str, path: str, user: str | None, body: dict | None = None) -> tuple[int, object]:
        token = self.token(user) if user and path != "/auth/token" else None
        return http_json(self.base, method, path, token, body)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)


def write_spec(folder: Path, name: str, bootstrap: str, **literals: str) -> Path:
    raw = yaml.safe_load((ROOT / "dags" / "datasources" / "wikipedia.yaml").read_text())
    raw["spec"]["dataSchema"]["dataSource"] = name
    raw["spec"]["ioConfig"].update(topic=name, taskCount=1)
    raw["spec"]["ioConfig"]["consumerProperties"] = {"bootstrap.servers": bootstrap, **literals}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def create_topics(bootstrap: str, *names: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(n, 1, 1) for n in names]).values():
        future.result(timeout=30)


@pytest.fixture(scope="module")
def server(tmp_path_factory, broker):
    create_topics(broker.bootstrap, SHOWN, HIDDEN)
    with postgres_database("ingest_perm") as url, postgres_database("airflow_perm") as airflow_db_url:
        s = FabApiServer(tmp_path_factory.mktemp("fab"), broker.bootstrap, url, airflow_db_url)
        try:
            store = MetadataStore(url)
            for name, literals in ((SHOWN, LITERALS), (HIDDEN, {})):
                Supervisor(load_spec(write_spec(s.dags, name, broker.bootstrap, **literals)), store).register()
            old = store.spec_history(SHOWN)[-1]["spec"]  # a row as an older version stored it
            old["spec"]["ioConfig"]["consumerProperties"].update(OLD_ROW_LITERALS)
            with store.engine.begin() as conn:
                conn.execute(specs.insert().values(datasource=SHOWN, version=2, fingerprint="old", spec=old,
                                                   source="old", created_at=utcnow()))
            yield s
        finally:
            s.stop()


def names_in(status_and_body) -> set[str]:
    status, body = status_and_body
    assert status == 200, body
    if isinstance(body, str):  # a page
        return {n for n in (SHOWN, HIDDEN) if n in body}
    return {x if isinstance(x, str) else x["id"] for x in body}


def test_lists_show_only_the_datasources_a_user_may_read_whatever_the_query_says(server):
    assert names_in(server.http("GET", API, "admin")) == {SHOWN, HIDDEN}
    for query in ("", "?full=true", f"?dag_id={SHOWN}", f"?full=true&dag_id={SHOWN}", f"?dag_id={HIDDEN}",
                  f"?full=true&dag_id={HIDDEN}", "?dag_id=~"):
        for user in ("reader", "editor"):
            assert names_in(server.http("GET", API + query, user)) == {SHOWN}, (user, query)
            assert names_in(server.http("GET", "/ingest/ui/datasources" + query, user)) == {SHOWN}, (user, query)
    assert names_in(server.http("GET", "/ingest/ui/datasources", "admin")) == {SHOWN, HIDDEN}
    for path in (API, f"{API}?dag_id={SHOWN}", "/ingest/ui/datasources", f"{API}/{SHOWN}/status"):
        assert server.http("GET", path, None)[0] == 401, path


def test_a_datasource_in_the_path_is_checked_not_the_query(server):
    for path in (f"{API}/{{}}/status", f"{API}/{{}}/health", "/ingest/ui/datasources/{}"):
        for query in ("", f"?dag_id={SHOWN}"):
            status, body = server.http("GET", path.format(HIDDEN) + query, "reader")
            assert status == 403 and "read permission on DAG 'team_b_payroll'" in str(body), (path, query, body)
            assert server.http("GET", path.format(SHOWN) + f"?dag_id={HIDDEN}", "reader")[0] in (200, 503)
            assert server.http("GET", path.format(HIDDEN) + query, "admin")[0] in (200, 503)


def test_every_refused_action_is_refused_and_audited(server):
    store = MetadataStore(server.metadata_url)
    body = {"type": "kafka", "partitions": {"type": "end", "stream": HIDDEN, "partitionOffsetMap": {"0": 0}}}
    refusals = [("reader", SHOWN), ("reader", HIDDEN), ("editor", HIDDEN)]
    for user, name in refusals:
        for action in ACTIONS:
            for query in ("", f"?dag_id={SHOWN}"):
                status, answer = server.http("POST", f"{API}/{name}/{action}{query}", user,
                                             body if action == "resetOffsets" else None)
                assert status == 403 and f"{user} may not {action}" in str(answer), (user, name, action, answer)
    for name in (SHOWN, HIDDEN):
        assert store.datasource_row(name)["state"] != "SUSPENDED" and not store.datasource_row(name)["terminated"]
    audited = [(a.actor, a.datasource, a.details["action"]) for n in (SHOWN, HIDDEN)
               for a in store.audit_records(n, action=REFUSED)]
    assert sorted(audited) == sorted((u, n, a) for u, n in refusals for a in ACTIONS for _ in range(2))

    # the editor may act on the DAG it may edit, and only that one
    status, result = server.http("POST", f"{API}/{SHOWN}/suspend?dag_id={HIDDEN}", "editor")
    assert status == 200 and result["state"] == "SUSPENDED", result
    assert server.http("POST", f"{API}/{SHOWN}/resume", "editor")[1]["state"] == "RUNNING"
    assert [(a.actor, a.action) for a in store.audit_records(SHOWN) if a.action in ("suspend", "resume")] == [
        ("editor", "suspend"), ("editor", "resume")]


def test_a_literal_secret_in_a_spec_is_never_in_a_response(server):
    history = MetadataStore(server.metadata_url).spec_history(SHOWN)
    assert len(history) == 2  # the file's spec, and the row stored with literals by an older version
    responses = [server.http("GET", path, user) for user in ("admin", "reader") for path in (
        API, f"{API}?full=true", f"{API}/{SHOWN}/status", f"{API}/{SHOWN}/health", "/ingest/ui/datasources",
        f"/ingest/ui/datasources/{SHOWN}")]
    assert all(status in (200, 503) for status, _ in responses), responses
    text = "\n".join(json.dumps(body) if not isinstance(body, str) else body for _, body in responses)
    assert "ssl.keystore.key" in text and "[REDACTED]" in text  # the page shows the latest spec, redacted
    leaked = [v for v in {**LITERALS, **OLD_ROW_LITERALS}.values() if v in text or json.dumps(v)[1:-1] in text]
    assert not leaked, f"literal secrets in responses: {leaked}"


def test_sql_reads_only_the_datasources_a_user_may_read(server):
    sql = "/ingest/api/v1/sql"

    def query(user, text, **extra):
        return server.http("POST", sql, user, {"query": text, **extra})

    assert query("reader", f"SELECT count(*) AS n FROM {SHOWN}") == (200, [{"n": 0}])
    assert query("reader", f"SELECT count(*) AS n FROM {SHOWN}", resultFormat="array", header=True) == (
        200, [["n"], [0]])
    for text in (f"SELECT * FROM {HIDDEN}", f"SELECT * FROM {SHOWN} JOIN {HIDDEN} USING (__time)",
                 f"WITH x AS (SELECT * FROM {HIDDEN}) SELECT count(*) FROM x"):
        status, body = query("reader", text)
        assert status == 403 and f"you may not read datasource '{HIDDEN}'" in str(body), (text, body)
    assert query("admin", f"SELECT count(*) AS n FROM {HIDDEN}") == (200, [{"n": 0}])
    assert query(None, f"SELECT count(*) FROM {SHOWN}")[0] == 401
    assert query("reader", f"DELETE FROM {SHOWN}")[0] == 400
    assert server.http("POST", sql, "reader", {"sql": "SELECT 1"})[0] == 400
