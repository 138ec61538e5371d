"""Secrets in `consumerProperties`: references in the spec, values only inside the Kafka client config.

A spec names where a secret lives, never the secret itself:
  - Druid's environment password provider:  `{"type": "environment", "variable": "SSL_KEY_PASSWORD"}`
  - an Airflow connection field:            `{"type": "airflowConnection", "connId": "kafka_prod", "field": "password"}`
    (`field` is one of login, password, host, port, schema, or `extra.<key>`)
  - Druid's dynamic config provider, for several keys at once:
    `"druid.dynamic.config.provider": {"type": "environment", "variables": {"sasl.jaas.config": "KAFKA_JAAS"}}`
Literal values of secret-looking keys are allowed (Druid allows them) but are redacted wherever the spec is
stored, logged or printed. This module is the references and redaction (pure); `ingest_core.kafka.secrets`
resolves them, only where a Kafka client is built.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from ingest_core.core.errors import IngestError, shown

REDACTED = "[REDACTED]"
DYNAMIC_PROVIDER_KEY = "druid.dynamic.config.provider"
# The names Airflow's secrets masker hides (DEFAULT_SENSITIVE_FIELDS of airflow._shared.secrets_masker; core may not
# import Airflow, so a copy: tests/unit/test_secret_properties.py checks it against the installed Airflow). A key
# is sensitive when, lower-cased with non-word runs as "_", it contains one, as the masker decides.
AIRFLOW_SENSITIVE_FIELDS = frozenset({
    "access_key", "access_token", "api_key", "apikey", "auth_header", "authorization", "bearer", "connection_string",
    "dsn", "passphrase", "passwd", "password", "private_key", "proxy", "proxy_password", "proxies", "secret",
    "service_account", "service_key", "token", "keyfile_dict", "webhook_url",
})
# Kafka's own: JAAS strings, SASL/OAUTHBEARER settings, credentials, and private keys by value (librdkafka's
# ssl.key.pem and ssl_key, Java's ssl.keystore.key); a key *file's* path (ssl.key.location) is not a secret.
# Schema registry clients' `basic.auth.user.info` (user:password) too.
_KAFKA_SECRET_RE = re.compile(r"(jaas|credential|sasl\.oauthbearer|private|user[._]info|(^|[._])key([._]pem)?$)",
                              re.I)
_CONNECTION_FIELDS = ("login", "password", "host", "port", "schema")
ENDPOINT_KEYS = {"bootstrap.servers"}


class SecretUnavailableError(IngestError):
    """A referenced secret could not be resolved. The message names the reference, never a value."""

    code = "INGEST_SECRET_UNAVAILABLE"


def is_secret_key(key: str) -> bool:
    """Whether a consumerProperties key holds a secret: its value is redacted wherever it is stored or shown."""
    normalized = re.sub(r"\W+", "_", key.strip().lower())
    return any(field in normalized for field in AIRFLOW_SENSITIVE_FIELDS) or bool(_KAFKA_SECRET_RE.search(key))


@dataclass(frozen=True)
class EnvironmentSecret:
    variable: str

    def to_raw(self) -> dict[str, str]:
        return {"type": "environment", "variable": self.variable}


@dataclass(frozen=True)
class AirflowConnectionSecret:
    conn_id: str
    field: str = "password"

    def to_raw(self) -> dict[str, str]:
        return {"type": "airflowConnection", "connId": self.conn_id, "field": self.field}


SecretRef = EnvironmentSecret | AirflowConnectionSecret


def parse_secret_ref(raw: Mapping[str, Any]) -> tuple[SecretRef | None, str | None]:
    """(reference, None) for a recognised secret reference object, else (None, problem)."""
    kind = raw.get("type")
    if kind == "environment":
        extra = set(raw) - {"type", "variable"}
        if not isinstance(raw.get("variable"), str) or not raw["variable"]:
            return None, "an environment secret needs 'variable': the name of the environment variable"
        if extra:
            return None, f"unknown field(s) {sorted(extra)} in environment secret"
        return EnvironmentSecret(raw["variable"]), None
    if kind == "airflowConnection":
        extra = set(raw) - {"type", "connId", "field"}
        conn_id, field = raw.get("connId"), raw.get("field", "password")
        if not isinstance(conn_id, str) or not conn_id:
            return None, "an airflowConnection secret needs 'connId'"
        if extra:
            return None, f"unknown field(s) {sorted(extra)} in airflowConnection secret"
        if field not in _CONNECTION_FIELDS and not (isinstance(field, str) and field.startswith("extra.")):
            return None, f"field must be one of {', '.join(_CONNECTION_FIELDS)} or 'extra.<key>', got {field!r}"
        return AirflowConnectionSecret(conn_id, field), None
    if kind == "default":  # Druid's DefaultPasswordProvider: the password itself, in the spec
        return None, ("Druid's default password provider is not supported: reference the secret instead, "
                      "{type: environment, variable: NAME} or {type: airflowConnection, connId: ID, field: password} "
                      "(or write the password as the property's value: it is redacted wherever the spec is shown)")
    return None, (
        f"unknown secret provider type {shown(kind)}: use 'environment' (with 'variable') "
        f"or 'airflowConnection' (with 'connId' and 'field')"
    )


def expand_dynamic_provider(props: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Turn Druid's `druid.dynamic.config.provider` entry into per-key secret references."""
    out = {k: v for k, v in props.items() if k != DYNAMIC_PROVIDER_KEY}
    problems: list[str] = []
    provider = props.get(DYNAMIC_PROVIDER_KEY)
    if provider is None:
        return out, problems
    if not isinstance(provider, Mapping) or provider.get("type") != "environment":
        problems.append("only the 'environment' dynamic config provider is supported")
        return out, problems
    variables = provider.get("variables")
    if not isinstance(variables, Mapping):
        problems.append("the environment dynamic config provider needs 'variables': {property: ENV_VAR}")
        return out, problems
    for key, var in variables.items():
        out[str(key)] = EnvironmentSecret(str(var))
    return out, problems


def redact_properties(props: Mapping[str, Any]) -> dict[str, Any]:
    """What may be stored or shown: references as references, secret-looking literals redacted."""
    out: dict[str, Any] = {}
    for key, value in props.items():
        if isinstance(value, (EnvironmentSecret, AirflowConnectionSecret)):
            out[key] = value.to_raw()
        elif is_secret_key(key):
            out[key] = REDACTED
        else:
            out[key] = value
    return out


def redact_spec_json(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A stored spec (JSON, either shape) as it may be shown: its consumerProperties and its schema registry
    decoders' config and headers redacted again under today's rules, so that a spec stored by an older version
    (before a key was known to be secret) shows no literal."""
    out = dict(raw)
    holder = out
    if isinstance(out.get("spec"), Mapping):  # the nested shape; else the flat one
        holder = out["spec"] = dict(out["spec"])
    io = holder.get("ioConfig")
    if isinstance(io, Mapping) and isinstance(io.get("consumerProperties"), Mapping):
        props = {k: (parse_secret_ref(v)[0] or v) if isinstance(v, Mapping) else v
                 for k, v in io["consumerProperties"].items()}
        io = holder["ioConfig"] = {**io, "consumerProperties": redact_properties(props)}
    if isinstance(io, Mapping) and isinstance(io.get("inputFormat"), Mapping):
        holder["ioConfig"] = {**io, "inputFormat": _redact_input_format(io["inputFormat"])}
    return out


def _redact_input_format(fmt: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(fmt)
    for key, value in fmt.items():
        if key in ("valueFormat", "keyFormat") and isinstance(value, Mapping):
            out[key] = _redact_input_format(value)
        elif key.endswith("BytesDecoder") and isinstance(value, Mapping):  # avroBytesDecoder, protoBytesDecoder
            out[key] = {k: redact_map(v) if k in ("config", "headers") and isinstance(v, Mapping) else v
                        for k, v in value.items()}
    return out


def redact_map(values: Mapping[str, Any]) -> dict[str, Any]:
    """A schema registry decoder's `config` / `headers` as they may be stored or shown: secret-looking values
    (`basic.auth.user.info`, an `Authorization` header) redacted, in a `mapString` dynamic provider too."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if key == DYNAMIC_PROVIDER_KEY and isinstance(value, Mapping) and isinstance(value.get("config"), Mapping):
            out[key] = {**value, "config": redact_map(value["config"])}
        else:
            out[key] = REDACTED if is_secret_key(key) else value
    return out


def restore_literals(props: Mapping[str, Any], original: Mapping[str, Any], source: str) -> dict[str, Any]:
    """`props` (redacted) with each redacted literal taken from `original`, the consumerProperties it came from."""
    out = dict(props)
    for key, value in props.items():
        if value != REDACTED:
            continue
        literal = original.get(key)
        if literal is None or literal == REDACTED or isinstance(literal, (EnvironmentSecret, AirflowConnectionSecret)):
            raise SecretUnavailableError(f"consumerProperties.{key} is redacted and {source} has no literal "
                                         f"value for it")
        out[key] = literal
    return out


def redact_text(text: str, values: Iterable[str]) -> str:
    """Remove secret values from `text` (e.g. an exception message from a Kafka client)."""
    for value in sorted(values, key=len, reverse=True):
        text = text.replace(value, REDACTED)
    return text
