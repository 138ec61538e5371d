"""Secrets in `consumerProperties`: references in the spec, values only inside the Kafka client config.

A spec names where a secret lives, never the secret itself:
  - Druid's environment password provider:  `{"type": "environment", "variable": "SSL_KEY_PASSWORD"}`
  - an Airflow connection field:            `{"type": "airflowConnection", "connId": "kafka_prod", "field": "password"}`
    (`field` is one of login, password, host, port, schema, or `extra.<key>`)
  - Druid's dynamic config provider, for several keys at once:
    `"druid.dynamic.config.provider": {"type": "environment", "variables": {"sasl.jaas.config": "KAFKA_JAAS"}}`
Literal values of secret-looking keys are allowed (Druid allows them) but are redacted wherever the spec is
stored, logged or printed.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from .errors import IngestError

REDACTED = "[REDACTED]"
DYNAMIC_PROVIDER_KEY = "druid.dynamic.config.provider"
_SECRET_KEY_RE = re.compile(r"(password|secret|jaas|token|credential|sasl\.oauthbearer|ssl\.key\.pem|private)", re.I)
_CONNECTION_FIELDS = ("login", "password", "host", "port", "schema")
_ENDPOINT_KEYS = {"bootstrap.servers"}


class SecretUnavailableError(IngestError):
    """A referenced secret could not be resolved. The message names the reference, never a value."""


def is_secret_key(key: str) -> bool:
    return bool(_SECRET_KEY_RE.search(key))


@dataclass(frozen=True)
class EnvironmentSecret:
    variable: str

    def resolve(self, key: str) -> str:
        value = os.environ.get(self.variable)
        if value is None:
            raise SecretUnavailableError(
                f"consumerProperties.{key}: environment variable {self.variable} is not set "
                f"(set it in the environment of the Airflow workers and Spark driver)"
            )
        return value

    def to_raw(self) -> dict[str, str]:
        return {"type": "environment", "variable": self.variable}


@dataclass(frozen=True)
class AirflowConnectionSecret:
    conn_id: str
    field: str = "password"

    def resolve(self, key: str) -> str:
        try:
            from airflow.sdk import BaseHook
        except ImportError as exc:  # pragma: no cover - airflow is a hard dependency
            raise SecretUnavailableError(f"consumerProperties.{key}: Airflow is not importable: {exc}") from None
        try:
            conn = BaseHook.get_connection(self.conn_id)
        except Exception as exc:
            raise SecretUnavailableError(
                f"consumerProperties.{key}: Airflow connection '{self.conn_id}' could not be read "
                f"({type(exc).__name__}); create it with `airflow connections add {self.conn_id} ...`"
            ) from None
        if self.field.startswith("extra."):
            value = conn.extra_dejson.get(self.field[len("extra."):])
        else:
            value = getattr(conn, self.field, None)
        if value in (None, ""):
            raise SecretUnavailableError(
                f"consumerProperties.{key}: Airflow connection '{self.conn_id}' has no {self.field}"
            )
        return str(value)

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
    return None, (
        f"unknown secret provider type {kind!r}: use 'environment' (with 'variable') "
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


def resolve_properties(props: Mapping[str, Any]) -> dict[str, str]:
    """The Kafka client config with every secret reference replaced by its value. Keep it out of logs."""
    resolved: dict[str, str] = {}
    for key, value in props.items():
        if value == REDACTED:  # a stored or staged copy of a spec with a literal secret: never send the marker
            raise SecretUnavailableError(
                f"consumerProperties.{key} is redacted: literal secrets are never stored or staged, so a copy of "
                f"the spec cannot connect; use the spec file itself, or a secret reference (environment, "
                f"airflowConnection)")
        if isinstance(value, (EnvironmentSecret, AirflowConnectionSecret)):
            resolved[key] = value.resolve(key)
        elif isinstance(value, bool):
            resolved[key] = "true" if value else "false"
        else:
            resolved[key] = str(value)
    return resolved


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


def secret_values(props: Mapping[str, Any], resolved: Mapping[str, str]) -> list[str]:
    """The resolved values that must never be printed: referenced secrets and secret-looking literals.
    (An endpoint taken from the environment, such as bootstrap.servers, is not a secret.)"""
    return [
        resolved[key]
        for key, value in props.items()
        if key in resolved and key not in _ENDPOINT_KEYS
        and (isinstance(value, (EnvironmentSecret, AirflowConnectionSecret)) or is_secret_key(key))
        and len(resolved[key]) >= 3
    ]


def redact_text(text: str, values: Iterable[str]) -> str:
    """Remove secret values from `text` (e.g. an exception message from a Kafka client)."""
    for value in sorted(values, key=len, reverse=True):
        text = text.replace(value, REDACTED)
    return text
