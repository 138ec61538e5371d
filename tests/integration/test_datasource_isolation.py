"""Each datasource's job uses its own spec's settings and nothing else: two S3 servers holding a bucket of the
same name, with different keys, and two brokers holding a topic of the same name. The settings of every spec
are known to the process, as they are where the whole DAG file is parsed (the dag-processor, `ingest status`,
the API server), and the jobs share one Spark session, as they share a Spark Connect server; each datasource's
objects must land on its own server only, its rows come from its own broker only, and a datasource whose
endpoint does not answer fails on its own, never reaching another's server."""

from __future__ import annotations

import os
from datetime import timedelta

import pyarrow.fs as pafs
import pytest
from conftest import _started
from helpers import SIMPLE, T0, ingest_run, iso, produce_all, spec_from, sqlite_store

from ingest_core.core.errors import ObjectStoreUnavailableError
from ingest_core.dev.embedded import free_port
from ingest_core.dev.embedded_s3 import EmbeddedS3
from ingest_core.kafka.storage_secrets import use_deep_storage
from ingest_core.store.reader import DatasourceReader

pytestmark = pytest.mark.kafka


@pytest.fixture(scope="module")
def other_object_store(object_store, tmp_path_factory):
    """A second S3Proxy whose bucket has the session store's bucket name, and keys of its own."""
    with _started(EmbeddedS3(tmp_path_factory.mktemp("s3-other"), bucket=object_store.bucket, heap="128m")) as s3:
        yield s3


def server_objects(endpoint: str, key: str, secret: str, bucket: str, prefix: str) -> list[str]:
    """The objects under `prefix` on the server at `endpoint`, asked with its own keys (no settings of ours)."""
    host = endpoint.split("://", 1)[1]
    fs = pafs.S3FileSystem(access_key=key, secret_key=secret, endpoint_override=host, scheme="http",
                           region="us-east-1", force_virtual_addressing=False, connect_timeout=5, request_timeout=20)
    infos = fs.get_file_info(pafs.FileSelector(f"{bucket}/{prefix}", recursive=True, allow_not_found=True))
    return sorted(i.path for i in infos if i.type == pafs.FileType.File)


def s3_settings(endpoint: str, name: str) -> dict:
    return {"endpoint": endpoint, "region": "us-east-1", "pathStyleAccess": True,
            "accessKeyId": {"type": "environment", "variable": f"ISO_{name}_KEY"},
            "secretAccessKey": {"type": "environment", "variable": f"ISO_{name}_SECRET"}}


def test_same_bucket_and_topic_names_each_datasource_uses_its_own_servers(
        spark, broker, secured_broker, object_store, other_object_store, tmp_path, monkeypatch):
    one, two = object_store, other_object_store
    for name, server in (("ONE", one), ("TWO", two)):
        monkeypatch.setenv(f"ISO_{name}_KEY", server.access_key)
        monkeypatch.setenv(f"ISO_{name}_SECRET", server.secret_key)
    monkeypatch.setenv("ISO_DEAD_KEY", one.access_key)  # the first server's keys, at an endpoint that is closed
    monkeypatch.setenv("ISO_DEAD_SECRET", one.secret_key)
    prefix = f"iso-{os.getpid()}"
    base = f"s3a://{one.bucket}/{prefix}"  # one URI, one bucket name: the servers tell the datasources apart
    topic = broker.create_topic(partitions=1)
    secured_broker.create_topic(partitions=1, name=topic)  # the same topic name on the other broker
    produce_all(broker, topic, [{"ts": iso(T0 + timedelta(minutes=i)), "a": "one", "b": str(i)}
                                for i in range(6)], partitions=1)
    produce_all(secured_broker, topic, [{"ts": iso(T0 + timedelta(minutes=i)), "a": "two", "b": str(i)}
                                        for i in range(4)], partitions=1)

    def spec(datasource: str, bootstrap: str, endpoint: str, name: str):
        return spec_from(bootstrap, topic, SIMPLE, datasource=datasource,
                         microbatch={"deepStorage": {"uri": base, "s3": s3_settings(endpoint, name)}})

    dead_endpoint = f"http://127.0.0.1:{free_port()}"
    dead = spec("iso_dead", broker.bootstrap, dead_endpoint, "DEAD")
    first = spec("iso_one", broker.bootstrap, one.endpoint, "ONE")
    second = spec("iso_two", secured_broker.bootstrap, two.endpoint, "TWO")
    for s in (dead, first, second):  # every spec's settings known here, as where the DAG file is parsed
        use_deep_storage(s)
    def on(server) -> list[str]:
        return server_objects(server.endpoint, server.access_key, server.secret_key, server.bucket, prefix)

    store = sqlite_store(tmp_path)
    try:
        _, _, result = ingest_run(spark, store, first, "r1", base)
        assert result.segment_ids and not result.failed_groups
        _, _, result = ingest_run(spark, store, second, "r1", base)
        assert result.segment_ids and not result.failed_groups

        # each datasource's rows from its own broker
        assert sorted(r["a"] for r in DatasourceReader(store, "iso_one").to_arrow().to_pylist()) == ["one"] * 6
        assert sorted(r["a"] for r in DatasourceReader(store, "iso_two").to_arrow().to_pylist()) == ["two"] * 4
        # and read back through Spark, in the session both jobs wrote with, each from its own server
        for name, rows in (("iso_one", ["one"] * 6), ("iso_two", ["two"] * 4), ("iso_one", ["one"] * 6)):
            assert sorted(r["a"] for r in DatasourceReader(store, name).to_spark(spark).collect()) == rows
        # each one's objects (the Spark write's segments, the reports) on its own server only
        on_one, on_two = on(one), on(two)
        assert any("/iso_one/" in p and p.endswith(".parquet") for p in on_one)
        assert any("/iso_two/" in p and p.endswith(".parquet") for p in on_two)
        assert not [p for p in on_one if "/iso_one/" not in p], on_one
        assert not [p for p in on_two if "/iso_two/" not in p], on_two

        # a datasource whose endpoint is closed fails on its own, at once, with every other's settings in this
        # process and the servers of the others warm in Spark's JVM
        with pytest.raises(ObjectStoreUnavailableError) as down:
            ingest_run(spark, store, dead, "r1", base, stall_timeout_s=20)
        assert dead_endpoint in str(down.value) and "\n" not in str(down.value), down.value
        assert (on(one), on(two)) == (on_one, on_two)
        assert not DatasourceReader(store, "iso_dead").segments()
    finally:
        store.dispose()


@pytest.mark.timeout(120)  # Airflow's retries, or Spark's S3A retries, would take minutes
def test_a_refused_s3_key_stops_at_once_with_one_line_naming_the_endpoint_and_bucket(
        spark, broker, object_store, tmp_path, monkeypatch):
    from airflow.sdk.exceptions import AirflowFailException

    from ingest_core.handover import deep_storage
    from ingest_core.provider.operators.run import airflow_step
    from ingest_core.spark.job import GroupJob, run_group
    from ingest_core.supervisor.planning import PlanOptions, Supervisor
    from ingest_core.supervisor.run import plan_step

    base = f"s3a://{object_store.bucket}/refused-{os.getpid()}"
    topic = broker.create_topic(partitions=1)
    produce_all(broker, topic, [{"ts": iso(T0), "a": "x", "b": str(i)} for i in range(3)], partitions=1)
    store = sqlite_store(tmp_path)
    wrong = f"{object_store.secret_key}-wrong"
    # a HEAD request's refusal has no body: S3 says AccessDenied, whatever the reason
    cases = {"a wrong secret": (object_store.access_key, wrong, ("SignatureDoesNotMatch", "AccessDenied")),
             "an unknown access key": (f"{object_store.access_key}-unknown", wrong, ("InvalidAccessKeyId",
                                                                                     "AccessDenied"))}

    def check(message: str, refused: tuple[str, ...]) -> None:
        assert "\n" not in message, message
        assert any(message.startswith(f"the object store at {object_store.endpoint} refused the credentials for "
                                      f"bucket '{object_store.bucket}' ({r}): check microbatch.deepStorage.s3")
                   for r in refused), message
        assert not any(secret in message for secret in (wrong, object_store.secret_key, object_store.access_key))

    try:
        for n, (key, secret, refused) in enumerate(cases.values()):
            monkeypatch.setenv("ISO_REFUSED_KEY", key)
            monkeypatch.setenv("ISO_REFUSED_SECRET", secret)
            spec = spec_from(broker.bootstrap, topic, SIMPLE, datasource=f"refused_{n}", microbatch={
                "deepStorage": {"uri": base, "s3": s3_settings(object_store.endpoint, "REFUSED")}})
            use_deep_storage(spec)
            # the plan task fails for good at its first request, instead of Airflow's retries ending in an OSError
            with pytest.raises(AirflowFailException) as failed:
                airflow_step(lambda: plan_step(spec, "r1", None, metadata=store))
            check(str(failed.value), refused)
            # a Spark job with these settings stops before Spark, instead of spending S3A's retries
            from ingest_core.core.errors import ObjectStoreRefusedError

            plan = Supervisor(spec, store).plan("r1", PlanOptions()).plan
            with pytest.raises(ObjectStoreRefusedError) as refused_job:
                run_group(spark, GroupJob.of_plan(spec, plan, 0, 0, deep_storage.group_uri(base, spec.datasource, "r1", 0)))
            check(str(refused_job.value), refused)
    finally:
        store.dispose()
