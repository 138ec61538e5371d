"""Test harness: real services only.

- Kafka: Apache Kafka (KRaft) on free ports with its own data dir (started once per session,
  `ingest_core.dev.embedded`), or the broker at INGEST_TEST_KAFKA=host:port (e.g. the Kafka of docker-compose.yaml).
- PostgreSQL: a private server started for the session (Debian's binaries, trust auth on 127.0.0.1), or the
  server at INGEST_TEST_POSTGRES=postgresql+psycopg2://user@host:port; each test module's databases are
  created and dropped here. SQLite: a file per test.
- Schema registry: Apicurio Registry (Confluent's API at /apis/ccompat/v7, storage in memory), started the
  first time a test asks for `schema_registry_url` (`ingest_core.dev.schema_registry`), or the registry at
  INGEST_TEST_SCHEMA_REGISTRY=url.
- Spark: one local SparkSession (local[2]) for the session, started before any Kafka client exists: forking
  the JVM launcher from a process that holds librdkafka threads can crash the child.
- Object store (deep storage on S3): S3Proxy (objects in its memory), started the first time a test asks for
  `object_store` (`ingest_core.dev.embedded_s3.EmbeddedS3`), or the store at
  INGEST_TEST_S3=http(s)://KEY:SECRET@host:port/bucket (keys URL-quoted).
A missing broker or PostgreSQL fails the run; nothing is skipped.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import os
import time
import traceback
import uuid
import weakref
from pathlib import Path

import pytest
import sqlalchemy as sa
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from ingest_core.dev.embedded import EmbeddedKafka, EmbeddedPostgres
from ingest_core.store.database import Database
from ingest_core.store.metadata import MetadataStore
from ingest_core.store.migrations.history import VERSION_TABLE
from ingest_core.store.schema import meta

_private_postgres: EmbeddedPostgres | None = None


def _reproducible_hypothesis() -> None:
    """Generated data is the same on every run of one commit, whatever tests are selected: derandomized, no
    example database, no deadline (a loaded CI machine is slow, not wrong). Hypothesis (6.131+) also draws
    constants from whichever of the project's modules happen to be imported, which the test selection decides:
    that pool stays empty, the strategies name their edge values themselves."""
    from hypothesis import settings

    settings.register_profile("ingest", derandomize=True, database=None, deadline=None)
    settings.load_profile("ingest")
    with contextlib.suppress(ImportError, AttributeError):
        from hypothesis.internal.conjecture import providers

        empty = type(providers._local_constants)()
        providers._get_local_constants = lambda: empty


_reproducible_hypothesis()


def pg_base() -> str:
    """The PostgreSQL server of the tests (no database): INGEST_TEST_POSTGRES, else a private one, started
    the first time a test needs it and stopped when the session ends."""
    global _private_postgres
    if external := os.environ.get("INGEST_TEST_POSTGRES"):
        return external.rstrip("/")
    if _private_postgres is None:
        try:
            _private_postgres = EmbeddedPostgres().start()
        except RuntimeError as exc:
            pytest.fail(f"PostgreSQL is required for the tests: {exc}")
    return _private_postgres.url


@pytest.fixture(scope="session", autouse=True)
def _stop_private_postgres():
    yield
    if _private_postgres is not None:
        _private_postgres.stop()

# Every JVM the tests start (the session's SparkSession, each spark-submit, also under Airflow) lives seconds on
# tiny inputs: C2's compilations cost more CPU than they save there. Only the JIT tier changes, not what runs;
# the benchmarks keep the JVM's defaults. An outer SPARK_SUBMIT_OPTS wins.
os.environ.setdefault("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1")


def _wait_for_broker(bootstrap: str, timeout: float = 30) -> None:
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        try:
            AdminClient({"bootstrap.servers": bootstrap, "log_level": 0}).list_topics(timeout=2)
            return
        except Exception as exc:  # noqa: BLE001 - keep polling until the deadline
            last = exc
            time.sleep(0.3)
    pytest.fail(f"Kafka at {bootstrap} did not answer in {timeout}s: {last}")


class Broker:
    def __init__(self, bootstrap: str):
        self.bootstrap = bootstrap
        self.admin = AdminClient({"bootstrap.servers": bootstrap})

    def create_topic(self, partitions: int = 1, name: str | None = None, config: dict[str, str] | None = None) -> str:
        name = name or f"t-{uuid.uuid4().hex[:10]}"
        fut = self.admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])[name]
        fut.result(timeout=30)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # metadata propagates asynchronously on a real cluster
            md = self.admin.list_topics(name, timeout=5)
            if name in md.topics and md.topics[name].error is None and len(md.topics[name].partitions) == partitions:
                return name
            time.sleep(0.1)
        raise AssertionError(f"topic {name} did not appear")

    def produce(self, topic: str, values, partition: int | None = None, key: bytes | None = None,
                headers=None, timestamp_ms: int | None = None) -> None:
        p = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5, "batch.num.messages": 10000})
        for v in values:
            kwargs = {}
            if partition is not None:
                kwargs["partition"] = partition
            if timestamp_ms is not None:
                kwargs["timestamp"] = timestamp_ms
            p.produce(topic, value=v, key=key, headers=headers, **kwargs)
        assert p.flush(30) == 0


@pytest.fixture(scope="session")
def spark():
    import logging

    from ingest_core.spark.settings import spark_session_builder

    logging.getLogger("py4j").setLevel(logging.WARNING)  # its INFO line at exit hits pytest's closed streams
    from ingest_core.dev import jars

    session = (spark_session_builder("ingest-tests").master("local[2]").config("spark.driver.memory", "1g")
               .config("spark.jars", ",".join(str(p) for p in jars.ensure("spark-s3")))  # Hadoop's S3A
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def _connect_server_starting(tmp_path_factory):
    """The session's own Spark Connect server, its start begun in a thread: (server, its start's future), or None
    with INGEST_TEST_SPARK_CONNECT. `spark_connect` waits for it."""
    from concurrent.futures import ThreadPoolExecutor

    from ingest_core.dev.embedded_spark import EmbeddedSparkConnect

    if os.environ.get("INGEST_TEST_SPARK_CONNECT"):
        yield None
        return
    # with Hadoop's S3A: the object-store tests write through this server too. No warm-up (its first job pays for
    # the cold JVM instead): the suite's time stays where it was, test_benchmarks' connect_restart runs the warm-up
    server = EmbeddedSparkConnect(tmp_path_factory.mktemp("spark-connect"), driver_memory="1g",
                                  jar_sets=("spark-s3",), warm_up=False)
    pool = ThreadPoolExecutor(1)
    started = pool.submit(server.start)
    try:
        yield server, started
    finally:
        pool.shutdown(wait=True)  # a start still under way ends by its own deadline
        server.stop()


@pytest.fixture(scope="session")
def spark_connect(_connect_server_starting):
    """A local Spark Connect server for the session (`INGEST_TEST_SPARK_CONNECT=sc://host:port`: another)."""
    if _connect_server_starting is None:
        return type("External", (), {"url": os.environ["INGEST_TEST_SPARK_CONNECT"]})()
    server, started = _connect_server_starting
    try:
        started.result()
    except RuntimeError as exc:
        pytest.fail(str(exc))
    return server


@pytest.fixture(scope="session", autouse=True)
def _spark_before_kafka(request):
    """Start Spark first when any selected test needs it (see the module docstring): the Connect server's start
    is begun before the local session's, so that the two JVMs start at once."""
    def needed(name: str) -> bool:
        return any(name in getattr(item, "fixturenames", ()) for item in request.session.items)

    if needed("spark_connect"):
        request.getfixturevalue("_connect_server_starting")
    for name in ("spark", "spark_connect"):
        if needed(name):
            request.getfixturevalue(name)


@dataclasses.dataclass(frozen=True)
class ObjectStore:
    """An S3-compatible store with one bucket for the tests' deep storage."""

    endpoint: str
    bucket: str
    access_key: str
    secret_key: str

    @property
    def uri(self) -> str:
        return f"s3a://{self.bucket}"

    def spec_settings(self, key_variable: str = "INGEST_TEST_S3_KEY",
                      secret_variable: str = "INGEST_TEST_S3_SECRET") -> dict:
        """A spec's `deepStorage.s3`, its keys referenced in these environment variables (`keys_in_env`)."""
        from ingest_core.dev.embedded_s3 import s3_spec_settings

        return s3_spec_settings(self.endpoint, key_variable, secret_variable)

    def keys_in_env(self, monkeypatch, key_variable: str = "INGEST_TEST_S3_KEY",
                    secret_variable: str = "INGEST_TEST_S3_SECRET") -> None:
        monkeypatch.setenv(key_variable, self.access_key)
        monkeypatch.setenv(secret_variable, self.secret_key)


@pytest.fixture(scope="session")
def object_store(tmp_path_factory) -> ObjectStore:
    from urllib.parse import unquote, urlparse

    from ingest_core.dev.embedded_s3 import EmbeddedS3

    external = os.environ.get("INGEST_TEST_S3")
    if external:
        url = urlparse(external)
        if not (url.username and url.password and url.path.strip("/")):
            pytest.fail("INGEST_TEST_S3 must be http(s)://KEY:SECRET@host:port/bucket")
        yield ObjectStore(f"{url.scheme}://{url.hostname}:{url.port or (443 if url.scheme == 'https' else 80)}",
                          url.path.strip("/"), unquote(url.username), unquote(url.password))
        return
    with _started(EmbeddedS3(tmp_path_factory.mktemp("s3"))) as s3:
        yield ObjectStore(s3.endpoint, s3.bucket, s3.access_key, s3.secret_key)


@pytest.fixture(scope="session")
def broker(tmp_path_factory) -> Broker:
    external = os.environ.get("INGEST_TEST_KAFKA")
    if external:
        _wait_for_broker(external)
        yield Broker(external)
        return
    with _started(EmbeddedKafka(tmp_path_factory.mktemp("kafka"))) as kafka:
        yield Broker(kafka.bootstrap)


class SecuredBroker(Broker):
    """The session's secured Apache Kafka (`SecuredKafka`): `admin` and `produce` use its PLAINTEXT listener, the
    tests' own side door; what is tested connects to `sasl_bootstrap` (SASL_SSL, SCRAM-SHA-512, user `user`) or
    `mtls_bootstrap` (client certificate required). The password and the client key's password are new each
    session, so that a test can look for them wherever they must not be."""

    def __init__(self, kafka):
        super().__init__(kafka.bootstrap)
        self.kafka = kafka
        self.sasl_bootstrap, self.mtls_bootstrap, self.tls = kafka.sasl_bootstrap, kafka.mtls_bootstrap, kafka.tls
        self.mechanism = kafka.MECHANISM
        (self.user, self.password), = kafka.users.items()
        self.key_password = kafka.client_key_password


@pytest.fixture(scope="session")
def secured_broker(tmp_path_factory) -> SecuredBroker:
    """Started the first time a test asks for it (always embedded: INGEST_TEST_KAFKA names a plaintext broker)."""
    from ingest_core.dev.embedded import SecuredKafka

    users = {"ingest": f"scram-{uuid.uuid4().hex}"}
    kafka = SecuredKafka(tmp_path_factory.mktemp("secured-kafka"), users, f"keypass-{uuid.uuid4().hex}",
                         jvm_options=["-XX:TieredStopAtLevel=1"])
    with _started(kafka):
        yield SecuredBroker(kafka)


@contextlib.contextmanager
def _started(server):
    """An embedded server, started (a failed start fails the test with its reason) and stopped afterwards."""
    try:
        server.start()
    except RuntimeError as exc:
        pytest.fail(str(exc))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def schema_registry_url(tmp_path_factory) -> str:
    """The base url of Confluent's Schema Registry API for the session (the `url` of a `schema_registry`
    decoder, and of confluent-kafka's SchemaRegistryClient)."""
    from ingest_core.dev.schema_registry import EmbeddedSchemaRegistry, registry_answers

    external = os.environ.get("INGEST_TEST_SCHEMA_REGISTRY")
    if external:
        deadline = time.monotonic() + 30
        while not registry_answers(external):
            if time.monotonic() > deadline:
                pytest.fail(f"the schema registry at INGEST_TEST_SCHEMA_REGISTRY={external} does not answer "
                            "GET /subjects: give the base of its Confluent-compatible API")
            time.sleep(0.3)
        yield external.rstrip("/")
        return
    with _started(EmbeddedSchemaRegistry(tmp_path_factory.mktemp("schema-registry"))) as registry:
        yield registry.url


@contextlib.contextmanager
def postgres_database(prefix: str = "ingest_test"):
    """A PostgreSQL database created for the caller and dropped afterwards; yields its URL."""
    base = pg_base()
    admin_url = f"{base}/postgres"
    name = f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    engine = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    except sa.exc.OperationalError as exc:
        pytest.fail(f"PostgreSQL at {base} is required for the tests and is unreachable: {exc.orig}")
    try:
        yield f"{base}/{name}"
    finally:
        with engine.connect() as conn:
            conn.execute(sa.text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :n AND pid <> pg_backend_pid()"
            ), {"n": name})
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}"'))
        engine.dispose()


@pytest.fixture(scope="session")
def pg_url() -> str:
    """A PostgreSQL database of the test session's own."""
    with postgres_database() as url:
        yield url


def _fresh_postgres(url: str) -> MetadataStore:
    store = MetadataStore(url)
    with store.engine.begin() as conn:
        meta.drop_all(conn)
        # Alembic's version table; pyiceberg's catalog (store.iceberg)
        for table in (VERSION_TABLE, "iceberg_tables", "iceberg_namespace_properties"):
            conn.execute(sa.text(f"DROP TABLE IF EXISTS {table}"))
    store.upgrade()
    return store


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request, tmp_path) -> str:
    """A freshly upgraded metadata store, once on SQLite and once on PostgreSQL."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'metadata.db'}"
        MetadataStore(url).upgrade()
        return url
    url = request.getfixturevalue("pg_url")
    _fresh_postgres(url).dispose()
    return url


@pytest.fixture
def store(store_url) -> MetadataStore:
    s = MetadataStore(store_url)
    yield s
    s.dispose()


@pytest.fixture
def pg_store(pg_url) -> MetadataStore:
    s = _fresh_postgres(pg_url)
    yield s
    s.dispose()


# ------------------------------------------------------------------------------------------ stores left open


@contextlib.contextmanager
def stores_closed():
    """Fails (AssertionError) if a metadata store opened inside is still open at the end: each `Database` made
    with an engine of its own (a shared one is the process's, disposed at exit) and neither disposed nor dropped
    (a dropped store is closed with its engine once collected). The leaked ones are disposed first."""
    opened: list[tuple[weakref.ref, str]] = []
    disposed: weakref.WeakSet = weakref.WeakSet()
    init, dispose = Database.__init__, Database.dispose

    def tracking_init(self, url, engine=None):
        init(self, url, engine)
        if engine is None:
            frames = [f"{Path(f.filename).name}:{f.lineno}" for f in traceback.extract_stack()[:-1]
                      if "/tests/" in f.filename]
            where = " <- ".join(reversed(frames[-3:])) or "outside the tests"  # the innermost test code first
            opened.append((weakref.ref(self), where))

    def tracking_dispose(self):
        disposed.add(self)
        dispose(self)

    def left_open() -> list[tuple[Database, str]]:
        return [(db, where) for ref, where in opened if (db := ref()) is not None and db not in disposed]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Database, "__init__", tracking_init)
        patch.setattr(Database, "dispose", tracking_dispose)
        yield
    if left_open():
        gc.collect()  # only when a store may be left: collecting takes time
    leaked = left_open()
    for db, _ in leaked:
        db.dispose()
    assert not leaked, ("metadata stores left open by the test: close each (`with MetadataStore(url) as store:`, "
                        "`store.dispose()` or the store fixtures); opened at " + ", ".join(w for _, w in leaked))


@pytest.fixture(autouse=True)
def _every_store_is_closed():
    """A test that keeps a metadata store open past its end fails (its SQLite file or PostgreSQL connections
    would stay open for the rest of the session)."""
    with stores_closed():
        yield
