"""consumerProperties checked by the installed librdkafka itself (no broker: the check never builds a client),
Java-client names answered with their librdkafka equivalent, and sasl.jaas.config translated, its password
redacted like every secret."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Consumer, KafkaException

from ingest_core.core.errors import SpecError
from ingest_core.core.spec import parse_spec
from ingest_core.kafka.config import KafkaClientConfig
from ingest_core.kafka.properties import (
    JaasError,
    check_spec,
    check_with_librdkafka,
    load_checked_spec,
)

PASSWORD = "pw-3xample-S3cret"
PLAIN = f'org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" password="{PASSWORD}";'
SCRAM = f'org.apache.kafka.common.security.scram.ScramLoginModule required username="bob" password="{PASSWORD}";'


def spec_with(**props):
    return parse_spec({"type": "kafka", "spec": {
        "dataSchema": {"dataSource": "wiki", "timestampSpec": {"column": "ts"}},
        "ioConfig": {"topic": "edits", "inputFormat": {"type": "json"},
                     "consumerProperties": {"bootstrap.servers": "localhost:9092", **props}}}}, "specs/wiki.yaml")


def refused(**props) -> dict[str, str]:
    with pytest.raises(SpecError) as info:
        check_spec(spec_with(**props))
    assert info.value.source == "specs/wiki.yaml"
    return {p.path.removeprefix("spec.ioConfig.consumerProperties."): p.message for p in info.value.problems}


def test_names_and_values_librdkafka_refuses_are_refused_each_at_its_path():
    found = refused(**{"fetch.min.byte": "1", "fetch.min.bytes": "lots", "session.timeout.ms": "6000",
                       "ssl.endpoint.identification.algorithm": ""})
    assert "not a librdkafka consumer property" in found["fetch.min.byte"]
    assert "librdkafka refuses it" in found["fetch.min.bytes"]
    assert "cannot be set to empty value" in found["ssl.endpoint.identification.algorithm"]
    assert "session.timeout.ms" not in found  # a valid librdkafka property passes
    # the same properties really are refused by a consumer: the check asks librdkafka, it keeps no list
    for key, value in [("fetch.min.byte", "1"), ("fetch.min.bytes", "lots")]:
        with pytest.raises(KafkaException):
            Consumer({"group.id": "g", key: value})


def test_java_client_names_are_answered_with_the_librdkafka_equivalent():
    found = refused(**{"ssl.truststore.location": "/etc/kafka/truststore.jks", "ssl.truststore.password": "x",
                       "ssl.keystore.type": "JKS", "send.buffer.bytes": "1000"})
    assert "use ssl.ca.location" in found["ssl.truststore.location"]
    assert "remove it" in found["ssl.truststore.password"]
    assert "PKCS#12" in found["ssl.keystore.type"]
    assert "use socket.send.buffer.bytes" in found["send.buffer.bytes"]
    # ssl.keystore.location is librdkafka's too (a PKCS#12 file): accepted
    assert check_spec(spec_with(**{"ssl.keystore.location": "/etc/kafka/client.p12"})).io_config


def test_a_secret_reference_is_checked_by_name_only():
    ok = spec_with(**{"ssl.key.password": {"type": "environment", "variable": "KEY_PASSWORD"},
                      "fetch.wait.max.ms": {"type": "environment", "variable": "WAIT"}})
    assert check_spec(ok) is ok  # "x" stands in for the values, which librdkafka may refuse: not their fault
    assert "not a librdkafka consumer property" in refused(**{"ssl.key.passwrd": {
        "type": "environment", "variable": "KEY_PASSWORD"}})["ssl.key.passwrd"]


def test_deserializers_are_dropped_with_a_warning():
    spec = check_spec(spec_with(**{"key.deserializer": "org.apache.kafka...ByteArrayDeserializer"}))
    assert any("key.deserializer" in w.path and "ignored" in w.message for w in spec.warnings)
    assert "key.deserializer" not in KafkaClientConfig.from_properties(spec.io_config.consumer_properties).properties


def test_the_check_never_builds_a_client():
    """Values that only fail when a client is created (a missing CA file) pass: nothing is opened or connected."""
    assert check_with_librdkafka({"ssl.ca.location": "/nonexistent/ca.pem", "security.protocol": "SSL"}) == {}
    with pytest.raises(KafkaException):  # ...which building the client does
        Consumer({"group.id": "g", "ssl.ca.location": "/nonexistent/ca.pem", "security.protocol": "SSL"})


@pytest.mark.parametrize("jaas, mechanism, expected", [
    (PLAIN, None, {"sasl.username": "alice", "sasl.password": PASSWORD, "sasl.mechanism": "PLAIN"}),
    (SCRAM, "SCRAM-SHA-512", {"sasl.username": "bob", "sasl.password": PASSWORD, "sasl.mechanism": "SCRAM-SHA-512"}),
    ('com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true keyTab="/k/kafka.keytab" '
     'principal="kafka/host@REALM";', "GSSAPI",
     {"sasl.kerberos.keytab": "/k/kafka.keytab", "sasl.kerberos.principal": "kafka/host@REALM",
      "sasl.mechanism": "GSSAPI"}),
])
def test_sasl_jaas_config_is_translated_for_librdkafka(jaas, mechanism, expected):
    props = {"sasl.jaas.config": jaas, "security.protocol": "SASL_SSL"}
    if mechanism:
        props["sasl.mechanism"] = mechanism
    spec = check_spec(spec_with(**props))
    conf = KafkaClientConfig.from_properties(spec.io_config.consumer_properties)
    assert "sasl.jaas.config" not in conf.properties
    assert {k: conf.properties[k] for k in expected} == expected
    assert check_with_librdkafka(dict(conf.properties)) == {}  # what the consumer gets, librdkafka takes


def test_a_jaas_password_is_redacted_like_every_secret(monkeypatch):
    monkeypatch.setenv("KAFKA_JAAS", PLAIN)
    spec = check_spec(spec_with(**{"sasl.jaas.config": {"type": "environment", "variable": "KAFKA_JAAS"}}))
    conf = KafkaClientConfig.from_properties(spec.io_config.consumer_properties)
    assert conf.properties["sasl.password"] == PASSWORD
    assert PASSWORD not in conf.redact(f"auth failed for alice with {PASSWORD}")
    literal = spec_with(**{"sasl.jaas.config": PLAIN})
    assert PASSWORD not in json.dumps(literal.to_raw())


@pytest.mark.parametrize("jaas, mechanism, says", [
    ("org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;", None, "sasl.oauthbearer"),
    ("software.amazon.msk.auth.iam.IAMLoginModule required;", None, "no librdkafka equivalent"),
    (SCRAM, None, "needs sasl.mechanism SCRAM-SHA-256 or SCRAM-SHA-512"),
    ('org.apache.kafka.common.security.plain.PlainLoginModule required username="a";', None, "needs password"),
    ("username=alice", None, "not a JAAS entry"),
])
def test_a_jaas_entry_without_translation_is_refused_without_its_value(jaas, mechanism, says):
    props = {"sasl.jaas.config": jaas, **({"sasl.mechanism": mechanism} if mechanism else {})}
    found = refused(**props)
    assert says in found["sasl.jaas.config"] and PASSWORD not in found["sasl.jaas.config"]


def test_a_referenced_jaas_entry_that_cannot_be_translated_fails_when_the_client_is_built(monkeypatch):
    monkeypatch.setenv("KAFKA_JAAS", "software.amazon.msk.auth.iam.IAMLoginModule required;")
    spec = check_spec(spec_with(**{"sasl.jaas.config": {"type": "environment", "variable": "KAFKA_JAAS"}}))
    with pytest.raises(JaasError, match="IAMLoginModule has no librdkafka equivalent"):
        KafkaClientConfig.from_properties(spec.io_config.consumer_properties)


def test_jaas_and_explicit_credentials_together_are_refused():
    assert "both set" in refused(**{"sasl.jaas.config": PLAIN, "sasl.username": "x"})["sasl.jaas.config"]


def test_load_checked_spec_names_the_file(tmp_path):
    path = tmp_path / "wiki.json"
    path.write_text(json.dumps({"type": "kafka", "spec": {
        "dataSchema": {"dataSource": "wiki", "timestampSpec": {"column": "ts"}},
        "ioConfig": {"topic": "edits", "inputFormat": {"type": "json"},
                     "consumerProperties": {"bootstrap.servers": "b:1", "max.poll.recrds": "5"}}}}))
    with pytest.raises(SpecError) as info:
        load_checked_spec(path)
    assert str(info.value).startswith(f"{path}: 1 problem")
    assert "spec.ioConfig.consumerProperties.max.poll.recrds: not a librdkafka consumer property" in str(info.value)


def test_druid_s_default_password_provider_gets_an_answer():
    with pytest.raises(SpecError) as info:
        spec_with(**{"ssl.key.password": {"type": "default", "password": PASSWORD}})
    (problem,) = info.value.problems
    assert problem.path == "spec.ioConfig.consumerProperties.ssl.key.password"
    assert "{type: environment, variable: NAME}" in problem.message and PASSWORD not in str(info.value)


def test_default_api_timeout_ms_is_the_deadline_of_each_call_to_the_broker():
    from ingest_core.core.defaults import KAFKA_CALL_TIMEOUT_S
    from ingest_core.kafka.properties import call_timeout_s

    spec = check_spec(spec_with(**{"default.api.timeout.ms": "2500"}))
    props = spec.io_config.consumer_properties
    assert call_timeout_s(props) == 2.5 and not spec.warnings
    # read here, never given to librdkafka (which knows no such setting)
    assert "default.api.timeout.ms" not in KafkaClientConfig.from_properties(props).properties
    assert call_timeout_s(spec_with().io_config.consumer_properties) == KAFKA_CALL_TIMEOUT_S
    assert "whole number of milliseconds" in refused(**{"default.api.timeout.ms": "soon"})["default.api.timeout.ms"]
    assert "at least 1" in refused(**{"default.api.timeout.ms": 0})["default.api.timeout.ms"]
