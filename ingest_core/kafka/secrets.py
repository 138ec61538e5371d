"""Resolving a spec's secret references into values, only where a Kafka client is built (the Airflow task, the
Spark driver). The references themselves and their redaction are `ingest_core.core.secrets`."""

from __future__ import annotations

import os
import sys
from typing import Any, Iterable, Mapping

from ingest_core.core.secrets import (
    ENDPOINT_KEYS,
    REDACTED,
    AirflowConnectionSecret,
    EnvironmentSecret,
    SecretRef,
    SecretUnavailableError,
    is_secret_key,
)


def resolve(ref: SecretRef, key: str, qualified: bool = False) -> str:
    """The value `ref` names, for consumerProperties `key` (named in errors, never the value); `qualified`: `key`
    is a field's whole path (another section's secret, e.g. deepStorage's)."""
    where = key if qualified else f"consumerProperties.{key}"
    if isinstance(ref, EnvironmentSecret):
        return _environment(ref, where)
    return _airflow_connection(ref, where)


def _environment(ref: EnvironmentSecret, where: str) -> str:
    value = os.environ.get(ref.variable)
    if value is None:
        raise SecretUnavailableError(
            f"{where}: environment variable {ref.variable} is not set "
            f"(set it in the environment of the Airflow workers and Spark driver)"
        )
    return value


def _airflow_connection(ref: AirflowConnectionSecret, where: str) -> str:
    try:
        from airflow.sdk import BaseHook
    except ImportError as exc:  # pragma: no cover - airflow is a hard dependency
        raise SecretUnavailableError(f"{where}: Airflow is not importable: {exc}") from None
    try:
        conn = BaseHook.get_connection(ref.conn_id)
    except Exception as exc:
        raise SecretUnavailableError(
            f"{where}: Airflow connection '{ref.conn_id}' could not be read "
            f"({type(exc).__name__}); create it with `airflow connections add {ref.conn_id} ...`"
        ) from None
    if ref.field.startswith("extra."):
        value = conn.extra_dejson.get(ref.field[len("extra."):])
    else:
        value = getattr(conn, ref.field, None)
    if value in (None, ""):
        raise SecretUnavailableError(
            f"{where}: Airflow connection '{ref.conn_id}' has no {ref.field}"
        )
    return str(value)


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
            resolved[key] = resolve(value, key)
        elif isinstance(value, bool):
            resolved[key] = "true" if value else "false"
        else:
            resolved[key] = str(value)
    return resolved


def secret_values(props: Mapping[str, Any], resolved: Mapping[str, str]) -> list[str]:
    """The resolved values that must never be printed: referenced secrets and secret-looking literals.
    (An endpoint taken from the environment, such as bootstrap.servers, is not a secret.)"""
    return [
        resolved[key]
        for key, value in props.items()
        if key in resolved and key not in ENDPOINT_KEYS
        and (isinstance(value, (EnvironmentSecret, AirflowConnectionSecret)) or is_secret_key(key))
        and len(resolved[key]) >= 3
    ]


def mask_in_airflow_logs(values: Iterable[str]) -> None:
    """Hand `values` to Airflow's secrets masker when this process is an Airflow one (a task, the triggerer), so
    that its logs show them as ***. A process without Airflow loaded (a Spark worker) does not import it for this."""
    if "airflow.sdk" not in sys.modules:
        return
    from airflow.sdk.log import mask_secret

    for value in values:
        mask_secret(value)
