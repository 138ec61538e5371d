"""The ingest path end to end over a secured Apache Kafka (`secured_broker`): the real DAG (`airflow dags test`), the
Spark job over the session's Spark Connect server, the offset reader, the consumer-group mirror and the dead-letter
topic, over SASL_SSL (SCRAM-SHA-512) with the credentials given each documented way, and over mutual TLS. Then
the secrets are looked for wherever they must not be: task logs, Airflow's database (rendered template fields,
XCom, serialized DAGs), the metadata store (stored specs, runs, reports, audit), deep storage (the staged spec,
plans, reports), the Spark Connect server's log and the UI's pages and JSON."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from conftest import postgres_database
from helpers import group_offsets, topic_records
from test_dag import (  # noqa: F401 - own_dags is a fixture
    AirflowHome,
    broker_watermarks,
    edits,
    own_dags,
    produce_events,
    task_tries,
    write_example_variant,
)

from ingest_core.core.states import RunStatus

from ingest_core.store.metadata import MetadataStore

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]

JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="{}" password="{}";'
GOOD, BAD = 150, 3  # events, and records that are not JSON (dead letters)


@pytest.fixture(scope="module")
def metadata_url():
    with postgres_database("ingest_secure") as url:
        yield url


def produce_stream(broker, topic: str) -> None:
    """GOOD wiki events, then BAD records that are not JSON, over the plaintext side door."""
    produce_events(broker.bootstrap, topic, GOOD, seed=17)
    broker.produce(topic, [f"not json {i}".encode() for i in range(BAD)], partition=0)


def sasl(broker, **credentials) -> dict:
    return {"bootstrap.servers": broker.sasl_bootstrap, "security.protocol": "SASL_SSL",
            "sasl.mechanism": broker.mechanism, "ssl.ca.location": str(broker.tls.ca), **credentials}


def check_ingested(metadata_url: str, broker, name: str, topic: str, dead_letter_topic: str | None) -> None:
    """Every event once, the committed offsets at the log's end and mirrored to the consumer group, and each bad
    record once in the dead-letter topic."""
    store = MetadataStore(metadata_url)
    assert edits(store, name) == GOOD, name
    (run,) = store.runs.recent(name)
    assert run.status is RunStatus.PUBLISHED and run.plan.records == GOOD + BAD, name
    latest = {p: hi for p, (lo, hi) in broker_watermarks(broker, topic).items()}
    assert {tp.partition: k.offset for tp, k in store.offsets.committed(name).items()} == latest, name
    assert group_offsets(broker, f"ingest.{name}", topic, len(latest)) == latest, name
    if dead_letter_topic is not None:
        letters = [m for m in topic_records(broker, dead_letter_topic)
                   if dict(m.headers() or []).get("__ingest.errors.datasource") == name.encode()]
        assert sorted(m.value() for m in letters) == [f"not json {i}".encode() for i in range(BAD)], name


def run_dags(homes: dict[str, AirflowHome], outputs: list[str]) -> dict[str, tuple[int, str]]:
    """`airflow dags test` of each DAG in its Airflow home (a SQLite database each), all at once: independent
    datasources, and most of a run's time is Airflow waiting, not working. {name: (exit code, output)}."""
    from test_dag import AIRFLOW

    procs = {name: subprocess.Popen([AIRFLOW, "dags", "test", name, "2026-01-01T00:00:00+00:00"], env=home.env,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for name, home in homes.items()}
    done = {}
    try:
        for name, proc in procs.items():
            output, _ = proc.communicate(timeout=900)
            outputs.append(output)
            done[name] = (proc.returncode, output)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
    return done


@pytest.mark.timeout(1200)  # three DAG runs at once on a loaded 2-core machine
def test_the_dag_over_sasl_ssl_with_each_credential_path_a_wrong_password_and_no_secret_anywhere(
        tmp_path, own_dags, secured_broker, metadata_url, spark_connect, monkeypatch):
    broker = secured_broker
    topic, dlq = broker.create_topic(partitions=2), broker.create_topic(partitions=2)
    produce_stream(broker, topic)
    wrong = f"{broker.password}-wrong"
    specs = {
        # an Airflow connection's login and password
        "sasl_connection": sasl(broker, **{
            "sasl.username": {"type": "airflowConnection", "connId": "kafka_secure", "field": "login"},
            "sasl.password": {"type": "airflowConnection", "connId": "kafka_secure", "field": "password"}}),
        # sasl.jaas.config in the spec file, as Druid's docs write it (the job's driver reads it from the spec
        # file; from the environment, Druid's dynamic config provider, it travels as the connection's password
        # does: tests/integration/test_secure_kafka.py has the plan's and report's clients for each way)
        "sasl_jaas_literal": sasl(broker, **{"sasl.jaas.config": JAAS.format(broker.user, broker.password)}),
        # a password from the environment that the broker refuses
        "sasl_wrong_password": sasl(broker, **{
            "sasl.username": broker.user,
            "sasl.password": {"type": "environment", "variable": "SECURE_KAFKA_WRONG_PASSWORD"}}),
    }
    for name, properties in specs.items():
        write_example_variant(own_dags, name, topic, {"deadLetter": {"topic": dlq}}, taskCount=1,
                              consumerProperties=properties)
    homes = {name: AirflowHome(tmp_path / name, own_dags, broker.sasl_bootstrap, metadata_url, spark_connect.url)
             for name in specs}
    for home in homes.values():
        home.env.update({
            "AIRFLOW_CONN_KAFKA_SECURE": json.dumps({"conn_type": "generic", "login": broker.user,
                                                     "password": broker.password}),
            "SECURE_KAFKA_WRONG_PASSWORD": wrong})
    outputs: list[str] = []
    done = run_dags(homes, outputs)
    for name in ("sasl_connection", "sasl_jaas_literal"):
        assert done[name][0] == 0, done[name][1][-4000:]
        check_ingested(metadata_url, broker, name, topic, dlq)

    # the wrong password: the plan task fails once (no retries, no reconnect loop), saying which listener and
    # mechanism refused; `ingest status` says the same
    code, output = done["sasl_wrong_password"]
    assert code != 0
    refused = (f"Kafka listener sasl_ssl://{broker.sasl_bootstrap} refused the credentials (security.protocol "
               f"SASL_SSL, sasl.mechanism {broker.mechanism})")
    assert refused in output
    home = homes["sasl_wrong_password"]
    assert task_tries(home, "sasl_wrong_password", "plan") == [(1, "failed")]
    status = subprocess.run([sys.executable, "-m", "ingest_core.service.cli", "status", "sasl_wrong_password",
                             "--json", "--dags-folder", str(own_dags)], env=home.env, capture_output=True, text=True,
                            timeout=300)
    outputs.append(status.stdout + status.stderr)
    payload = json.loads(status.stdout)["payload"]
    assert any(e["exceptionClass"] == "KafkaAuthenticationError" and refused in e["message"]
               for e in payload["recentErrors"]), payload["recentErrors"]

    assert_no_secret_anywhere([broker.password, wrong], [*homes.values()], own_dags, outputs, spark_connect,
                              monkeypatch, [*specs])


def test_the_dag_over_mutual_tls_and_no_secret_anywhere(tmp_path, own_dags, secured_broker, metadata_url,
                                                        spark_connect, monkeypatch):
    broker = secured_broker
    topic, dlq = broker.create_topic(partitions=2), broker.create_topic(partitions=2)
    produce_stream(broker, topic)
    properties = {"bootstrap.servers": broker.mtls_bootstrap, "security.protocol": "SSL",
                  "ssl.ca.location": str(broker.tls.ca), "ssl.certificate.location": str(broker.tls.client_cert),
                  "ssl.key.location": str(broker.tls.client_key),
                  "ssl.key.password": {"type": "environment", "variable": "SECURE_KEY_PASSWORD"}}
    write_example_variant(own_dags, "mtls", topic, {"deadLetter": {"topic": dlq}}, taskCount=2,
                          consumerProperties=properties)
    home = AirflowHome(tmp_path, own_dags, broker.mtls_bootstrap, metadata_url, spark_connect.url)
    home.env["SECURE_KEY_PASSWORD"] = broker.key_password
    outputs: list[str] = []
    (code, output), = run_dags({"mtls": home}, outputs).values()
    assert code == 0, output[-4000:]
    check_ingested(metadata_url, broker, "mtls", topic, dlq)
    assert_no_secret_anywhere([broker.key_password], [home], own_dags, outputs, spark_connect, monkeypatch, ["mtls"])


# ------------------------------------------------------------------------------------------ where secrets must not be

def assert_no_secret_anywhere(secrets: list[str], homes: list[AirflowHome], dags_folder: Path, outputs: list[str],
                              spark_connect, monkeypatch, datasources: list[str]) -> None:
    def leaks(where: str, text: str) -> None:
        found = [s for s in secrets if s in text]
        assert not found, f"a secret is in {where}"

    for i, text in enumerate(outputs):  # what `airflow dags test` printed: every task's log lines
        leaks(f"command output #{i}", text)
    # every file of the Airflow home, the ingest home and deep storage (not the DAG folder: a spec file may hold
    # a literal sasl.jaas.config, as Druid's do)
    files = [p for home in homes for p in home.root.rglob("*") if p.is_file() and dags_folder not in p.parents]
    assert any(p.name == "spec.json" for p in files)  # the staged spec the Spark jobs read
    for path in files:
        leaks(str(path), path.read_bytes().decode("utf-8", "replace"))
    if hasattr(spark_connect, "log_path"):  # the session's own server (not an external one)
        leaks("the Spark Connect server's log", spark_connect.log_path.read_text(errors="replace"))

    # Airflow's database, table by table: rendered template fields, XCom, serialized DAGs, task instances
    rendered = 0
    for home in homes:
        with contextlib.closing(sqlite3.connect(home.root / "airflow" / "airflow.db")) as db:
            tables = [t for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            rendered += db.execute("SELECT count(*) FROM rendered_task_instance_fields").fetchone()[0]
            for table in tables:
                leaks(f"Airflow's table {table}", repr(db.execute(f'SELECT * FROM "{table}"').fetchall()))
    assert rendered > 0

    # the metadata store: stored specs, runs and their plans, task reports, audit records
    engine = sa.create_engine(homes[0].metadata_url)
    try:
        tables = sa.MetaData()
        tables.reflect(engine)
        with engine.connect() as conn:
            for table in tables.sorted_tables:
                leaks(f"the metadata store's table {table.name}", repr(conn.execute(table.select()).fetchall()))
    finally:
        engine.dispose()

    # the UI plugin's pages and its REST API's JSON, with the secrets' sources in this process's environment,
    # as the api-server has them
    from ingest_core.provider.plugins import ui

    for key in ("AIRFLOW_CONN_KAFKA_SECURE", "SECURE_KAFKA_WRONG_PASSWORD",
                "SECURE_KEY_PASSWORD", "INGEST_METADATA_URL", "AIRFLOW__CORE__DAGS_FOLDER"):
        if key in homes[0].env:
            monkeypatch.setenv(key, homes[0].env[key])
    monkeypatch.setattr(ui, "readable", lambda user, names: list(names))
    ui._parsed_specs.cache_clear()
    try:
        leaks("the Datasources page", ui.datasources_page(None).body.decode())
        leaks("the REST list of supervisors", json.dumps(ui.list_supervisors(None, full=True), default=str))
        for name in datasources:
            leaks(f"the page of {name}", ui.datasource_page(name, None).body.decode())
            leaks(f"the REST status of {name}", json.dumps(ui.supervisor_status(name, None), default=str))
    finally:
        ui._parsed_specs.cache_clear()
