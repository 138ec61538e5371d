"""The Kafka clients of the plan and report steps against a secured Apache Kafka (`secured_broker`): SASL_SSL with
SCRAM-SHA-512 and mutual TLS, the credentials given each documented way, and a refused client ending in one
clear error at once. (The Spark job and the whole DAG over the same listeners: tests/system/test_secure_dag.py.)"""

from __future__ import annotations

import json
import logging

import pytest
from helpers import group_offsets

from ingest_core.core.errors import KafkaAuthenticationError
from ingest_core.core.offsets import TopicPartition
from ingest_core.core.spec import parse_spec
from ingest_core.kafka.config import LIBRDKAFKA_LOGGER
from ingest_core.kafka.consumer_group import mirrored_offsets, sync_group
from ingest_core.kafka.offset_reader import KafkaOffsetReader
from ingest_core.kafka.properties import check_spec

pytestmark = pytest.mark.kafka

JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="{}" password="{}";'


def sasl_properties(broker, **credentials) -> dict:
    return {"bootstrap.servers": broker.sasl_bootstrap, "security.protocol": "SASL_SSL",
            "sasl.mechanism": broker.mechanism, "ssl.ca.location": str(broker.tls.ca), **credentials}


def mtls_properties(broker, **key_password) -> dict:
    return {"bootstrap.servers": broker.mtls_bootstrap, "security.protocol": "SSL",
            "ssl.ca.location": str(broker.tls.ca), "ssl.certificate.location": str(broker.tls.client_cert),
            "ssl.key.location": str(broker.tls.client_key), **key_password}


def spec_with(topic: str, name: str, properties: dict):
    raw = {"type": "kafka", "spec": {
        "dataSchema": {"dataSource": name, "timestampSpec": {"column": "ts"},
                       "granularitySpec": {"segmentGranularity": "HOUR"}},
        "ioConfig": {"topic": topic, "inputFormat": {"type": "json"}, "consumerProperties": properties,
                     "useEarliestOffset": True},
        "tuningConfig": {"type": "kafka"}}}
    return check_spec(parse_spec(raw, f"<test spec {name}>"))  # as `ingest validate` and the DAG factory load it


def credential_paths(broker, monkeypatch) -> dict[str, dict]:
    """consumerProperties for each documented way of giving the credentials."""
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_SECURE", f'{{"conn_type": "generic", "login": "{broker.user}", '
                                                    f'"password": "{broker.password}"}}')
    monkeypatch.setenv("SECURE_KAFKA_PASSWORD", broker.password)
    monkeypatch.setenv("SECURE_KAFKA_JAAS", JAAS.format(broker.user, broker.password))
    monkeypatch.setenv("SECURE_KEY_PASSWORD", broker.key_password)
    return {
        "sasl_environment": sasl_properties(
            broker, **{"sasl.username": broker.user,
                       "sasl.password": {"type": "environment", "variable": "SECURE_KAFKA_PASSWORD"}}),
        "sasl_airflow_connection": sasl_properties(
            broker, **{"sasl.username": {"type": "airflowConnection", "connId": "kafka_secure", "field": "login"},
                       "sasl.password": {"type": "airflowConnection", "connId": "kafka_secure"}}),
        "sasl_jaas_literal": sasl_properties(broker, **{"sasl.jaas.config": JAAS.format(broker.user,
                                                                                         broker.password)}),
        "sasl_jaas_dynamic_provider": sasl_properties(broker, **{"druid.dynamic.config.provider": {
            "type": "environment", "variables": {"sasl.jaas.config": "SECURE_KAFKA_JAAS"}}}),
        "mtls": mtls_properties(broker, **{"ssl.key.password": {"type": "environment",
                                                                 "variable": "SECURE_KEY_PASSWORD"}}),
    }


def test_offsets_and_the_consumer_group_mirror_over_sasl_ssl_and_mtls_with_each_credential_path(
        secured_broker, monkeypatch):
    broker = secured_broker
    topic = broker.create_topic(partitions=2)
    broker.produce(topic, [b'{"ts": "2026-01-01T00:00:00Z"}'] * 3, partition=0)
    broker.produce(topic, [b'{"ts": "2026-01-01T00:00:00Z"}'] * 5, partition=1)
    latest = {TopicPartition(topic, 0): 3, TopicPartition(topic, 1): 5}
    for name, properties in credential_paths(broker, monkeypatch).items():
        spec = spec_with(topic, name, properties)
        reader = KafkaOffsetReader.for_spec(spec, timeout_s=30)
        try:
            tps = reader.partitions(topic=topic)
            assert reader.latest(tps) == latest, name
            assert reader.topic_ids([topic]), name  # the admin client too
        finally:
            reader.close()
        done = sync_group(spec, latest, timeout_s=30)
        assert done.ok, (name, done.error)
        assert mirrored_offsets(spec, list(latest), timeout_s=30) == latest, name
        # what Kafka's own tooling sees, asked over the plaintext side door
        assert group_offsets(broker, f"ingest.{name}", topic, 2) == {0: 3, 1: 5}, name


@pytest.mark.timeout(120)  # the reader's own timeout is 600 s: reaching it would mean a retry loop
def test_a_refused_client_is_one_clear_error_at_once_naming_the_listener_and_mechanism(
        secured_broker, monkeypatch, caplog):
    broker = secured_broker
    topic = broker.create_topic()
    wrong = f"{broker.password}-wrong"
    monkeypatch.setenv("SECURE_KAFKA_PASSWORD", wrong)
    cases = {
        "a wrong password": sasl_properties(
            broker, **{"sasl.username": broker.user,
                       "sasl.password": {"type": "environment", "variable": "SECURE_KAFKA_PASSWORD"}}),
        "an unknown user": sasl_properties(broker, **{"sasl.jaas.config": JAAS.format("nobody", wrong)}),
        "no client certificate": {k: v for k, v in mtls_properties(broker).items()
                                  if not k.startswith(("ssl.certificate", "ssl.key"))},
    }
    for why, properties in cases.items():
        caplog.clear()
        reader = KafkaOffsetReader.for_spec(spec_with(topic, "refused", properties), timeout_s=600)
        try:
            with caplog.at_level(logging.WARNING, logger=LIBRDKAFKA_LOGGER.name):
                with pytest.raises(KafkaAuthenticationError) as caught:
                    reader.partitions(topic=topic)
        finally:
            reader.close()
        message = str(caught.value)
        if why == "no client certificate":
            assert message.startswith(f"Kafka listener ssl://{broker.mtls_bootstrap} refused the TLS handshake "
                                      "(security.protocol SSL): "), message
            assert "ssl.certificate.location" in message
        else:
            assert message.startswith(f"Kafka listener sasl_ssl://{broker.sasl_bootstrap} refused the credentials "
                                      f"(security.protocol SASL_SSL, sasl.mechanism {broker.mechanism}): "), message
            assert "invalid credentials" in message and "sasl.password" in message
        assert wrong not in message and broker.password not in message
        # librdkafka logged the refusal (its reconnects in the first second), and no secret with it
        assert any("authentication" in r.getMessage().lower() or "alert" in r.getMessage()
                   for r in caplog.records), why
        assert not any(wrong in r.getMessage() or broker.password in r.getMessage() for r in caplog.records)


@pytest.mark.timeout(120)  # maxWait is an hour: reaching it would mean the gate kept asking
def test_the_data_gate_ends_at_the_first_refusal_instead_of_waiting_out_max_wait(secured_broker, monkeypatch,
                                                                                  tmp_path):
    import asyncio
    import json
    from datetime import datetime, timedelta, timezone

    from ingest_core.provider.triggers.new_records import NewRecordsTrigger

    broker = secured_broker
    topic = broker.create_topic()
    monkeypatch.setenv("SECURE_KAFKA_PASSWORD", f"{broker.password}-wrong")
    spec = spec_with(topic, "gated", sasl_properties(broker, **{
        "sasl.username": broker.user, "sasl.password": {"type": "environment", "variable": "SECURE_KAFKA_PASSWORD"}}))
    path = tmp_path / "gated.json"
    path.write_text(json.dumps(spec.to_raw()))  # references stay references
    trigger = NewRecordsTrigger(str(path), [[topic, 0, 0]], 10,
                                (datetime.now(timezone.utc) + timedelta(hours=1)).isoformat(), poke_interval_s=0.2)

    async def first():
        async for event in trigger.run():
            return event

    event = asyncio.run(first())
    assert event.payload["status"] == "refused"
    assert event.payload["error"].startswith(f"Kafka listener sasl_ssl://{broker.sasl_bootstrap} refused the "
                                             "credentials")


def test_a_spark_job_refused_by_the_broker_fails_for_good_naming_the_listener_and_mechanism(
        spark, secured_broker, monkeypatch, tmp_path):
    """The executors' consumers get the properties the driver resolved: a password changed between the plan and
    the job (rotated, or another in the driver's environment) is refused there, and the job's error says so."""
    from helpers import run_and_publish, sqlite_store

    from ingest_core.handover import deep_storage
    from ingest_core.handover.report import GroupReport
    from ingest_core.supervisor.planning import PlanOptions, Supervisor

    broker, store = secured_broker, sqlite_store(tmp_path)
    topic = broker.create_topic()
    broker.produce(topic, [b'{"ts": "2026-01-01T00:00:00Z"}'] * 5)
    spec = spec_with(topic, "refused_job", sasl_properties(broker, **{
        "sasl.username": broker.user, "sasl.password": {"type": "environment", "variable": "SECURE_KAFKA_PASSWORD"}}))
    monkeypatch.setenv("SECURE_KAFKA_PASSWORD", broker.password)
    supervisor = Supervisor(spec, store)
    supervisor.register()
    plan = supervisor.plan("r1", PlanOptions()).plan
    assert plan.records == 5
    wrong = f"{broker.password}-rotated"
    monkeypatch.setenv("SECURE_KAFKA_PASSWORD", wrong)
    with pytest.raises(KafkaAuthenticationError) as caught:
        run_and_publish(spark, store, spec, plan, (tmp_path / "deep").as_uri(), stall_timeout_s=600)
    assert str(caught.value).startswith(f"Kafka listener sasl_ssl://{broker.sasl_bootstrap} refused the credentials "
                                        f"(security.protocol SASL_SSL, sasl.mechanism {broker.mechanism})")
    assert wrong not in str(caught.value) and broker.password not in str(caught.value)
    deep = (tmp_path / "deep").as_uri()
    (found,) = [f for f in deep_storage.list_files(deep, ".json") if f.path.endswith("/report.json")]
    report = GroupReport.from_json(deep_storage.read_json(deep_storage.to_uri(deep, found.path)), found.path)
    assert report.failure.error_class == "KafkaAuthenticationError" and not report.failure.retry_can_help


@pytest.mark.timeout(120)
def test_status_after_a_refused_login_says_the_broker_refused_naming_the_listener(
        secured_broker, monkeypatch, tmp_path, capsys):
    """The broker answered, by refusing: `ingest status` says so and names where, not that it did not answer."""
    import yaml
    from helpers import sqlite_store

    from ingest_core.service import cli

    broker = secured_broker
    topic = broker.create_topic()
    monkeypatch.setenv("SECURE_KAFKA_PASSWORD", f"{broker.password}-wrong")
    spec = spec_with(topic, "refused_status", sasl_properties(broker, **{
        "sasl.username": broker.user, "sasl.password": {"type": "environment", "variable": "SECURE_KAFKA_PASSWORD"}}))
    store = sqlite_store(tmp_path)
    try:
        store.datasources.register_spec(spec.datasource, spec.to_raw(), spec.fingerprint())
    finally:
        store.dispose()
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "refused_status.yaml").write_text(yaml.safe_dump(spec.to_raw()))
    assert cli.main(["--metadata-url", store.url, "status", "--dags-folder", str(dags), "refused_status"]) == 0
    out = capsys.readouterr().out
    [line] = [line for line in out.splitlines() if "UNAVAILABLE" in line]
    assert line.strip() == f"UNAVAILABLE: kafka at {broker.sasl_bootstrap} refused the credentials", out
    assert broker.password not in out
    assert cli.main(["--metadata-url", store.url, "status", "--json", "--dags-folder", str(dags),
                     "refused_status"]) == 0
    [down] = json.loads(capsys.readouterr().out)["payload"]["unavailableDependencies"]
    assert (down["endpoint"], down["refused"]) == (broker.sasl_bootstrap, "the credentials"), down
