"""Every consumerProperties key that holds a secret is redacted wherever a spec is stored or shown, and its value
wherever an error is printed. Which keys hold secrets is read from data, not retyped here: the installed
librdkafka's own property table (its CONFIGURATION.md, printed by `rd_kafka_conf_properties_show`), the Java
names this project maps to librdkafka ones, and the names Airflow's secrets masker hides."""

from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass
from pathlib import Path

import confluent_kafka
import pytest
from airflow._shared.secrets_masker.secrets_masker import DEFAULT_SENSITIVE_FIELDS, SecretsMasker

from ingest_core.core import secrets as credentials
from ingest_core.core.spec import parse_spec
from ingest_core.kafka.config import KafkaClientConfig
from ingest_core.kafka.properties import JAAS_KEY, JAVA_EQUIVALENTS, translate_jaas


@dataclass(frozen=True)
class LibrdkafkaProperty:
    name: str
    type: str
    description: str


def librdkafka_properties(tmp_path: Path) -> list[LibrdkafkaProperty]:
    """The installed librdkafka's property table, as it prints it (the table of its CONFIGURATION.md)."""
    libs = Path(confluent_kafka.__file__).parent.parent / "confluent_kafka.libs"
    found = sorted(libs.glob("librdkafka*"))
    lib = ctypes.CDLL(str(found[0]) if found else "librdkafka.so.1")
    libc = ctypes.CDLL(None)
    libc.fopen.restype, libc.fopen.argtypes = ctypes.c_void_p, [ctypes.c_char_p, ctypes.c_char_p]
    libc.fclose.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_conf_properties_show.argtypes = [ctypes.c_void_p]
    out = tmp_path / "CONFIGURATION.md"
    fp = libc.fopen(str(out).encode(), b"w")
    lib.rd_kafka_conf_properties_show(fp)
    libc.fclose(fp)
    table = []
    for line in out.read_text().splitlines():
        cells = [c.strip() for c in line.split("|")]
        kind = re.search(r"\*Type: ([^*]+)\*", line)
        if len(cells) >= 6 and kind:
            table.append(LibrdkafkaProperty(cells[0], kind.group(1), cells[-1]))
    return table


# How librdkafka's own descriptions say a value is a secret (a path to a file holding one is not: the file is
# protected where it lives)
_SECRET_WORDS = re.compile(r"password|passphrase|secret|private key|credential", re.I)


def holds_secret(prop: LibrdkafkaProperty) -> bool:
    return (prop.type in ("string", "see dedicated API") and bool(_SECRET_WORDS.search(prop.description))
            and not prop.description.lower().startswith("path to"))


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> list[LibrdkafkaProperty]:
    props = librdkafka_properties(tmp_path_factory.mktemp("librdkafka"))
    assert len(props) > 150 and any(p.name == "sasl.password" for p in props), props[:5]
    return props


def secret_names(table: list[LibrdkafkaProperty]) -> set[str]:
    """Every name holding a secret: librdkafka's (by its descriptions), the Java names whose librdkafka
    equivalent holds one ("use ssl.key.pem (the same PEM text)"), sasl.jaas.config (it translates to one), and
    every name Airflow's masker would hide."""
    by_name = {p.name: p for p in table}
    names = {p.name for p in table if holds_secret(p)}
    for java, advice in JAVA_EQUIVALENTS.items():
        same = re.match(r"use ([\w.]+) \(the same", advice)
        if same and same.group(1) in names:
            names.add(java)
    jaas = translate_jaas('x.PlainLoginModule required username="u" password="p";', None)
    if any(holds_secret(by_name[k]) for k in jaas):
        names.add(JAAS_KEY)
    masker = SecretsMasker()
    masker.sensitive_variables_fields = list(DEFAULT_SENSITIVE_FIELDS)
    candidates = {p.name for p in table} | set(JAVA_EQUIVALENTS) | {f"custom.{f}" for f in DEFAULT_SENSITIVE_FIELDS}
    return names | {n for n in candidates if masker.should_hide_value_for_key(n)}


def test_the_walk_finds_the_secrets_an_operator_would_name(table):
    # a guard on the rules above: the walk must not come back (nearly) empty
    names = secret_names(table)
    assert {"sasl.password", "ssl.key.password", "ssl.key.pem", "ssl.keystore.password", "ssl_key",
            "sasl.oauthbearer.client.secret", "ssl.keystore.key", "sasl.jaas.config", "ssl.truststore.password",
            "sasl.oauthbearer.assertion.private.key.pem"} <= names
    assert not names & {"bootstrap.servers", "ssl.key.location", "sasl.username", "ssl.ca.location"}


def test_every_secret_bearing_property_is_a_secret_key(table):
    missed = sorted(n for n in secret_names(table) if not credentials.is_secret_key(n))
    assert not missed, f"secret-bearing properties that would be shown: {missed}"


def test_the_settings_that_carry_a_secret_in_a_format_of_their_own_are_secret_keys():
    # JAAS-like strings and SASL/OAUTHBEARER configs hold credentials their descriptions do not call secrets
    assert all(map(credentials.is_secret_key, ("sasl.oauthbearer.config", "sasl.jaas.config",
                                                "sasl.oauthbearer.client.credentials.client.id")))
    # public material and paths stay readable: a certificate, a CA, where a key file lives
    assert not any(map(credentials.is_secret_key, ("ssl.certificate.pem", "ssl.ca.pem", "ssl.key.location",
                                                    "ssl.keystore.location", "sasl.username")))


def test_airflows_sensitive_names_are_all_in_the_copy_core_keeps():
    assert DEFAULT_SENSITIVE_FIELDS <= credentials.AIRFLOW_SENSITIVE_FIELDS


def test_no_literal_secret_survives_storing_showing_or_an_error_message(table):
    literals = {name: f"LiteralSecret-{i}-of-{name}" for i, name in enumerate(sorted(secret_names(table)))}
    raw = {"type": "kafka", "spec": {
        "dataSchema": {"dataSource": "wiki", "timestampSpec": {"column": "ts"}},
        "ioConfig": {"topic": "edits", "inputFormat": {"type": "json"},
                     "consumerProperties": {"bootstrap.servers": "localhost:9092", **literals}}}}
    stored = repr(parse_spec(raw, "specs/wiki.yaml").to_raw())
    shown = repr(credentials.redact_spec_json(raw))  # a spec stored by an older version, shown today
    # a JAAS literal is translated when the client is built (its password redacted: test_kafka_properties.py)
    client = KafkaClientConfig.from_properties({k: v for k, v in literals.items() if k != JAAS_KEY})
    error = client.redact("the broker said: " + " ".join(literals.values()))
    for name, literal in literals.items():
        assert literal not in stored, f"{name} is stored"
        assert literal not in shown, f"{name} is shown from an old stored spec"
        assert name == JAAS_KEY or literal not in error, f"{name} is printed in an error"
    assert "localhost:9092" in stored and "localhost:9092" in shown


def test_a_secret_reference_stays_a_reference_when_shown_again():
    ref = {"type": "environment", "variable": "KAFKA_PASSWORD"}
    raw = {"ioConfig": {"consumerProperties": {"sasl.password": ref, "ssl.keystore.key": "-----BEGIN"}}}
    props = credentials.redact_spec_json(raw)["ioConfig"]["consumerProperties"]
    assert props == {"sasl.password": ref, "ssl.keystore.key": credentials.REDACTED}


def test_an_airflow_process_masks_the_secrets_of_every_kafka_client_it_builds(table):
    import airflow.sdk.log  # an Airflow task or triggerer has it loaded
    from airflow.sdk._shared.secrets_masker import redact

    literals = {name: f"TaskLogSecret-{i}" for i, name in enumerate(sorted(secret_names(table))) if name != JAAS_KEY}
    KafkaClientConfig.from_properties({"bootstrap.servers": "localhost:9092", **literals})
    logged = redact(f"a task log line: {' '.join(literals.values())} at localhost:9092")
    assert not [v for v in literals.values() if v in logged], logged
    assert "localhost:9092" in logged and airflow.sdk.log
