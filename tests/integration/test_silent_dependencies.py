"""Every remote dependency, answered by a server that accepts the connection and never says a word:
each call ends in its dependency's typed error, naming the endpoint and the deadline, instead of hanging. The
deadlines are the tests' own short ones. Only the product's deadline can end a wait on a silent server, and the
error says which deadline it was; each call runs under a watchdog (`ends_by_itself`) that fails the test on a hang
and bounds nothing else, so a loaded machine is slow, never wrong. docs/deadlines.md lists the settings these stand
for."""

from __future__ import annotations

import json
import uuid

import pytest
from helpers import SIMPLE, ends_by_itself, spec_from
from silent_server import SilentServer

from ingest_core.core.errors import (
    BrokerUnavailableError,
    DependencyUnavailableError,
    MetadataStoreUnavailableError,
    ObjectStoreUnavailableError,
    SparkConnectUnavailableError,
)
from ingest_core.core.offsets import TopicPartition

@pytest.fixture
def silent():
    with SilentServer() as server:
        yield server


def test_kafka_planning_group_mirror_and_dead_letters_end_in_broker_unavailable(silent):
    from ingest_core.kafka.consumer_group import mirrored_offsets, sync_group
    from ingest_core.kafka.dead_letter_topic import DeadLetterProducer
    from ingest_core.kafka.offset_reader import KafkaOffsetReader

    # the spec's deadline: the Java client's default.api.timeout.ms, as a Druid spec writes it
    spec = spec_from(silent.address, "t", SIMPLE, microbatch={"deadLetter": {"topic": "dlq"}}, io={
        "consumerProperties": {"bootstrap.servers": silent.address, "default.api.timeout.ms": 2000}})
    reader = KafkaOffsetReader.for_spec(spec)
    try:
        with pytest.raises(BrokerUnavailableError) as planning:
            ends_by_itself(lambda: reader.partitions(topic="t"))
    finally:
        reader.close()
    mirrored = ends_by_itself(lambda: sync_group(spec, {TopicPartition("t", 0): 5}))
    with pytest.raises(BrokerUnavailableError) as group_read:
        ends_by_itself(lambda: mirrored_offsets(spec, [TopicPartition("t", 0)]))
    with pytest.raises(BrokerUnavailableError) as dead_letters:
        ends_by_itself(lambda: DeadLetterProducer(spec))
    for error in (planning.value, mirrored.unavailable, group_read.value, dead_letters.value):
        assert isinstance(error, BrokerUnavailableError), mirrored
        assert error.endpoint == silent.address and error.deadline_s == 2.0 and "within 2s" in str(error), error
        assert error.to_json() == {"dependency": "kafka", "endpoint": silent.address, "deadlineSeconds": 2.0}
    assert not mirrored.ok and mirrored.error == str(mirrored.unavailable)  # the mirror never fails a publish


def test_schema_registry_lookup_ends_in_registry_unavailable(silent):
    from ingest_core.executor.formats.schema_registry import RegistryConfig, RegistryUnavailableError, SchemaRegistryClient

    url = f"http://{silent.address}"
    client = SchemaRegistryClient(RegistryConfig.of(url=url), retry_delays=(0.2, 0.2), timeout=1.0, deadline=3.0)
    with pytest.raises(RegistryUnavailableError) as info:
        ends_by_itself(lambda: client.schema(7))
    error = info.value
    assert isinstance(error, ValueError)  # still a bad record to the row parser: unparseable, counted per service
    assert isinstance(error, DependencyUnavailableError) and error.dependency == "schemaRegistry"
    assert error.endpoint == url and error.deadline_s == 3.0 and "lookup deadline 3s" in str(error)
    with pytest.raises(RegistryUnavailableError):  # the same id fails again while it is down
        ends_by_itself(lambda: client.schema(7))


def test_metadata_store_connect_ends_in_metadata_store_unavailable(silent, monkeypatch, capsys):
    from ingest_core.service.cli import main
    from ingest_core.store import engines
    from ingest_core.store.metadata import MetadataStore

    # the default connect_timeout (no ?connect_timeout= in the URL), and connecting again for 3 s, not 60
    monkeypatch.setattr(engines, "METADATA_CONNECT_TIMEOUT_S", 2)
    monkeypatch.setattr(engines, "RETRY_SECONDS", 3.0)
    url = f"postgresql+psycopg2://ingest:s3cret-pw@{silent.address}/metadata"
    with pytest.raises(MetadataStoreUnavailableError) as info:
        ends_by_itself(lambda: MetadataStore(url).check_schema())
    error = info.value
    assert error.dependency == "metadataStore" and error.deadline_s == 3.0
    assert "s3cret-pw" not in str(error) and f"{silent.address}/metadata" in error.endpoint
    assert "timeout expired" in str(error)

    # `ingest status --json` says which dependency did not answer, as JSON, with the password hidden
    code = ends_by_itself(lambda: main(["status", "--json", "--metadata-url", f"{url}?connect_timeout=2"]))
    out = capsys.readouterr().out
    assert code == 1 and "s3cret-pw" not in out
    [down] = json.loads(out)["unavailableDependencies"]
    assert down["dependency"] == "metadataStore" and silent.address in down["endpoint"]


def test_object_store_request_ends_in_object_store_unavailable(silent, monkeypatch):
    from ingest_core.handover import deep_storage, object_store

    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setattr(object_store, "OBJECT_STORE_CONNECT_TIMEOUT_S", 1.0)
    monkeypatch.setattr(object_store, "OBJECT_STORE_REQUEST_TIMEOUT_S", 1.0)
    bucket = f"silent-{uuid.uuid4().hex[:8]}"  # filesystems are kept per bucket: one of this test's own
    uri = f"s3a://{bucket}/deep"
    object_store.register_s3(uri, object_store.S3Access(endpoint=f"http://{silent.address}", region="us-east-1",
                                                        path_style=True, access_key="test", secret_key="test"))
    for call in (deep_storage.list_files, deep_storage.read_json):
        with pytest.raises(ObjectStoreUnavailableError) as info:
            ends_by_itself(call, uri)
        assert info.value.endpoint == uri and info.value.deadline_s == 1.0 and "request timeout 1s" in str(info.value)
    # a filesystem pyarrow made from a URI of its own form gets the deadlines too, unless it has its own
    import pyarrow.fs as pafs

    own = pafs.S3FileSystem(endpoint_override=silent.address, scheme="http", connect_timeout=5, request_timeout=7)
    assert deep_storage.with_deadlines(own).__reduce__()[1][0]["request_timeout"] == 7


def test_status_names_each_dependency_that_did_not_answer(silent, monkeypatch, tmp_path):
    """A running run's progress lives in deep storage, its lag on the broker: with both silent, status still
    reports, and names both."""
    from helpers import plan_next, sqlite_store

    from ingest_core.handover import deep_storage
    from ingest_core.service.status import collect_status

    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://{silent.address}")  # pyarrow's S3 endpoint, as the SDK reads it
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setattr(deep_storage, "OBJECT_STORE_REQUEST_TIMEOUT_S", 1.0)
    store = sqlite_store(tmp_path)
    spec = spec_from(silent.address, "t", SIMPLE, microbatch={"deepStorage": {"uri": "s3a://bucket/deep"}})
    store.datasources.register_spec("ds", spec.to_raw(), spec.fingerprint())
    running = plan_next(store, "scheduled__1", {TopicPartition("t", 0): 10}, ds="ds")
    store.runs.start("ds", running.run_id, None)  # its jobs are reading: status shows their progress
    report = ends_by_itself(lambda: collect_status(store, "ds", spec, kafka_timeout_s=2.0))
    down = {d["dependency"]: d for d in report.to_json()["payload"]["unavailableDependencies"]}
    assert set(down) == {"kafka", "objectStore"}, down
    assert down["kafka"]["endpoint"] == silent.address and down["kafka"]["deadlineSeconds"] == 2.0
    assert down["objectStore"]["endpoint"].startswith("s3a://bucket/deep/ds/")
    assert [r.run_id for r in report.recent_runs] == [running.run_id]
    assert report.active == {} and report.latest is None  # unknown, said why; the rest of the report is there
    assert {e.error_class for e in report.recent_errors} >= {"BrokerUnavailableError", "ObjectStoreUnavailableError"}


def test_spark_connect_session_ends_in_spark_connect_unavailable(silent, monkeypatch):
    from ingest_core.spark.connect import CONNECT_TIMEOUT_VAR, connect_mode, open_session

    monkeypatch.setenv(CONNECT_TIMEOUT_VAR, "2")
    with connect_mode(), pytest.raises(SparkConnectUnavailableError) as info:
        ends_by_itself(lambda: open_session(f"sc://{silent.address}/;token=s3cret-token", "ds"))
    error = info.value
    assert error.dependency == "sparkConnect" and error.deadline_s == 2.0
    assert error.endpoint == f"sc://{silent.address}/" and "s3cret-token" not in str(error)
