"""The ingest path end to end over a secured Apache Kafka (`secured_broker`): the real DAG (`airflow dags test`), the
Spark job over the session's Spark Connect server, the offset reader, the consumer-group mirror and the dead-letter
topic, over SASL_SSL (SCRAM-SHA-512) with the credentials given each documented way, and over mutual TLS. One of
the SASL_SSL DAGs is docs/connections.md's recipe, its spec parts read from that page: the login from an Airflow
connection, deep storage on the object store (`object_store`) through an Airflow `aws` connection, the metadata
store on the tests' PostgreSQL. Then the secrets (the Kafka passwords and the object store's secret key) are
looked for wherever they must not be: task logs, Airflow's database (rendered template fields, XCom, serialized
DAGs), the metadata store (stored specs, runs, reports, audit), deep storage (the staged spec, plans, reports,
on disk and in the bucket), the Spark Connect server's log and the UI's pages and JSON."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pyarrow.fs as pafs
import pytest
import sqlalchemy as sa
from conftest import postgres_database
from doc_pages import recipe
from helpers import group_offsets, topic_records
from test_dag import (  # noqa: F401 - own_dags is a fixture
    AirflowHome,
    broker_watermarks,
    edits,
    ingest,
    own_dags,
    produce_events,
    task_tries,
    write_example_variant,
)

from ingest_core.core.spec import load_spec
from ingest_core.core.states import RunStatus
from ingest_core.handover import deep_storage
from ingest_core.handover.object_store import S3Access, s3_access
from ingest_core.kafka.storage_secrets import use_deep_storage
from ingest_core.store.metadata import MetadataStore
from ingest_core.store.reader import DatasourceReader

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


def bucket_objects(uri: str, access: S3Access | None = None) -> dict[str, bytes]:
    """Every object under `uri` in the object store (reached with `access`), by path, with its bytes."""
    fs, path = deep_storage.filesystem(uri, access)
    infos = fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
    paths = [i.path for i in infos if i.type == pafs.FileType.File]
    found = {}
    for path in paths:
        try:
            with fs.open_input_stream(path) as f:
                found[path] = f.read()
        except FileNotFoundError:
            # S3Proxy's filesystem backend (INGEST_TEST_S3 may name one) lists a folder (a file's parent) as an object
            # that cannot be read
            if not any(other.startswith(path + "/") for other in paths):
                raise
    return found


def recipe_environment(broker, object_store, base: str) -> dict[str, str]:
    """What docs/connections.md's recipe asks of the environment, for the secured broker and the object store:
    the Airflow connections kafka_prod and s3_prod, the CA's path, deep storage at `base` in the bucket (the
    bootstrap, INGEST_KAFKA_BOOTSTRAP, is the AirflowHome's)."""
    return {
        "AIRFLOW_CONN_KAFKA_PROD": json.dumps({"conn_type": "generic", "login": broker.user,
                                               "password": broker.password}),
        "AIRFLOW_CONN_S3_PROD": json.dumps({"conn_type": "aws", "login": object_store.access_key,
                                            "password": object_store.secret_key,
                                            "extra": {"endpoint_url": object_store.endpoint,
                                                      "region_name": "us-east-1"}}),
        "INGEST_KAFKA_CA_LOCATION": str(broker.tls.ca),
        "INGEST_DEEP_STORAGE": base,
    }


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


@pytest.mark.timeout(1200)  # four DAG runs at once on a loaded 2-core machine
def test_the_dag_over_sasl_ssl_each_credential_path_a_wrong_password_and_mutual_tls_and_no_secret_anywhere(
        tmp_path, own_dags, secured_broker, object_store, metadata_url, spark_connect, monkeypatch):
    """The SASL_SSL DAGs and the mutual-TLS one run at once (independent datasources, an Airflow home each)."""
    broker = secured_broker
    topic, dlq = broker.create_topic(partitions=2), broker.create_topic(partitions=2)
    produce_stream(broker, topic)
    wrong = f"{broker.password}-wrong"
    # docs/connections.md's recipe, as that page gives it: consumerProperties with the login from the Airflow
    # connection kafka_prod, deep storage through the Airflow connection s3_prod, the bucket from the environment
    parts = recipe()
    specs = {
        "sasl_recipe": parts["spec"]["ioConfig"]["consumerProperties"],
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
        microbatch = {"deadLetter": {"topic": dlq}}
        if name == "sasl_recipe":
            microbatch["deepStorage"] = parts["microbatch"]["deepStorage"]
        write_example_variant(own_dags, name, topic, microbatch, taskCount=1, consumerProperties=properties)
    homes = {name: AirflowHome(tmp_path / name, own_dags, broker.sasl_bootstrap, metadata_url, spark_connect.url)
             for name in specs}
    # mutual TLS: a client certificate whose key's password comes from the environment
    mtls_topic, mtls_dlq = broker.create_topic(partitions=2), broker.create_topic(partitions=2)
    produce_stream(broker, mtls_topic)
    write_example_variant(own_dags, "mtls", mtls_topic, {"deadLetter": {"topic": mtls_dlq}}, taskCount=2,
                          consumerProperties=mtls_properties(broker))
    homes["mtls"] = AirflowHome(tmp_path / "mtls", own_dags, broker.mtls_bootstrap, metadata_url, spark_connect.url)
    base = f"{object_store.uri}/secure-{uuid.uuid4().hex[:8]}"
    recipe_env = recipe_environment(broker, object_store, base)
    homes["sasl_recipe"].env.update(recipe_env)
    for home in homes.values():
        home.env["SECURE_KAFKA_WRONG_PASSWORD"] = wrong
        home.env["SECURE_KEY_PASSWORD"] = broker.key_password
    outputs: list[str] = []
    done = run_dags(homes, outputs)
    for name in ("sasl_recipe", "sasl_jaas_literal", "mtls"):
        assert done[name][0] == 0, done[name][1][-4000:]
    check_ingested(metadata_url, broker, "mtls", mtls_topic, mtls_dlq)

    # the recipe's segments are in the bucket: this process reads them with the recipe's settings, as `ingest`
    # and the UI do
    for key, value in recipe_env.items():
        monkeypatch.setenv(key, value)
    recipe_spec = load_spec(own_dags / "specs" / "sasl_recipe.yaml")
    use_deep_storage(recipe_spec)
    access = s3_access(deep_storage.datasource_uri(recipe_spec))
    for name in ("sasl_recipe", "sasl_jaas_literal"):
        check_ingested(metadata_url, broker, name, topic, dlq)
    with MetadataStore(metadata_url) as store:
        segments = DatasourceReader(store, "sasl_recipe").segments()
    objects = bucket_objects(base, access)  # the whole test's folder: the recipe's settings reach the bucket
    assert segments and all(s.location.startswith(f"{base}/sasl_recipe/") for s in segments)
    for segment in segments:  # each published segment is Parquet in the bucket (the object, or the ones under it)
        where = segment.location.removeprefix("s3a://").rstrip("/")
        files = [data for path, data in objects.items() if path == where or path.startswith(where + "/")]
        assert any(data[:4] == b"PAR1" for data in files), (segment.location, sorted(objects))
    assert any(path.endswith("/spec.json") for path in objects)  # the staged spec went to the bucket too

    # the wrong password: the plan task fails once (no retries, no reconnect loop), saying which listener and
    # mechanism refused; `ingest status` says the same
    code, output = done["sasl_wrong_password"]
    assert code != 0
    refused = (f"Kafka listener sasl_ssl://{broker.sasl_bootstrap} refused the credentials (security.protocol "
               f"SASL_SSL, sasl.mechanism {broker.mechanism})")
    assert refused in output
    home = homes["sasl_wrong_password"]
    assert task_tries(home, "sasl_wrong_password", "plan") == [(1, "failed")]
    status = ingest(home, "status", "sasl_wrong_password", "--json", "--dags-folder", str(own_dags))
    outputs.append(status.stdout + status.stderr)
    payload = json.loads(status.stdout)["payload"]
    assert any(e["exceptionClass"] == "KafkaAuthenticationError" and refused in e["message"]
               for e in payload["recentErrors"]), payload["recentErrors"]

    assert_no_secret_anywhere([broker.password, wrong, object_store.secret_key, broker.key_password],
                              [*homes.values()], own_dags, outputs, spark_connect, monkeypatch, [*specs, "mtls"],
                              objects)


def mtls_properties(broker) -> dict:
    return {"bootstrap.servers": broker.mtls_bootstrap, "security.protocol": "SSL",
            "ssl.ca.location": str(broker.tls.ca), "ssl.certificate.location": str(broker.tls.client_cert),
            "ssl.key.location": str(broker.tls.client_key),
            "ssl.key.password": {"type": "environment", "variable": "SECURE_KEY_PASSWORD"}}


# ------------------------------------------------------------------------------------------ where secrets must not be

def assert_no_secret_anywhere(secrets: list[str], homes: list[AirflowHome], dags_folder: Path, outputs: list[str],
                              spark_connect, monkeypatch, datasources: list[str],
                              objects: dict[str, bytes] | None = None) -> None:
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
    for path, data in (objects or {}).items():  # deep storage in the object store
        leaks(f"the object {path}", data.decode("utf-8", "replace"))
    if hasattr(spark_connect, "log_path"):  # the session's own server (not an external one)
        leaks("the Spark Connect server's log", spark_connect.log_path.read_text(errors="replace"))

    # Airflow's database, table by table: rendered template fields, XCom, serialized DAGs, task instances
    rendered = 0
    for home in homes:
        with home.db() as db:
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

    for key in ("AIRFLOW_CONN_KAFKA_PROD", "AIRFLOW_CONN_S3_PROD", "SECURE_KAFKA_WRONG_PASSWORD",
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
