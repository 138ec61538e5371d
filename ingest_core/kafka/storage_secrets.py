"""A spec's `deepStorage.s3` resolved into the settings the object store is reached with, in this process.

Beside the Kafka secrets resolver (`ingest_core.kafka.secrets`, whose references it shares): the two places
below the provider that may read an Airflow connection. `use_deep_storage(spec)` registers the datasource's own
folder (`<deep storage>/<dataSource>`, never the bucket: another datasource may name the same bucket on another
server) with `ingest_core.handover.object_store` and resolves nothing yet: the references are read at the first request
to the store, so a process that never touches it (the DAG processor) needs none of its secrets. Resolved values
go to Airflow's secrets masker and nowhere else: never a stored spec, a log line, XCom or a command line.
"""

from __future__ import annotations

from typing import Any

from ingest_core.core.secrets import SecretUnavailableError, parse_secret_ref
from ingest_core.core.spec import DatasourceSpec, S3Config
from ingest_core.handover import deep_storage, object_store
from ingest_core.handover.object_store import S3Access
from ingest_core.kafka.secrets import mask_in_airflow_logs, resolve

PATH = "microbatch.deepStorage.s3"


def resolve_s3(settings: S3Config) -> S3Access:
    """The settings' values: explicit fields first, then the Airflow connection's (login, password, extra
    `endpoint_url`, `region_name`, `aws_session_token`), as Airflow's `aws` connection type keeps them."""
    endpoint, region = settings.endpoint, settings.region
    key = secret = token = None
    if settings.connection:
        conn = _connection(settings.connection)
        extra = conn.extra_dejson or {}
        endpoint = endpoint or extra.get("endpoint_url") or None
        region = region or extra.get("region_name") or None
        key, secret, token = conn.login or None, conn.password or None, extra.get("aws_session_token") or None
        if not (key and secret):
            raise SecretUnavailableError(f"{PATH}.connection: Airflow connection '{settings.connection}' has no "
                                         "login (the access key id) and password (the secret access key)")
    refs = {name: parse_secret_ref(raw)[0] for name, raw in settings.references().items()}
    if "accessKeyId" in refs:
        key, secret = _value(refs["accessKeyId"], "accessKeyId"), _value(refs["secretAccessKey"], "secretAccessKey")
    if "sessionToken" in refs:
        token = _value(refs["sessionToken"], "sessionToken")
    mask_in_airflow_logs(v for v in (key, secret, token) if v and len(v) >= 3)
    path_style = settings.path_style_access if settings.path_style_access is not None else endpoint is not None
    return S3Access(endpoint.rstrip("/") if endpoint else None, region, path_style, key, secret, token)


def use_deep_storage(spec: DatasourceSpec) -> None:
    """Reach the datasource's folder of its deep storage with its `deepStorage.s3` settings in this process
    (resolved at first use). Nothing for another kind of deep storage, or without settings (the AWS SDK's own
    chain then)."""
    settings = spec.microbatch.deep_storage.s3
    base = deep_storage.base_for(spec)
    if settings is None or not deep_storage.is_object_store(base):
        return
    object_store.register_s3(deep_storage.datasource_uri(spec), lambda: resolve_s3(settings))


def _value(ref: Any, name: str) -> str:
    if ref is None:  # refused when the spec was bound; a reference object stored by hand may still arrive here
        raise SecretUnavailableError(f"{PATH}.{name}: not a secret reference")
    return resolve(ref, f"{PATH}.{name}", qualified=True)


def _connection(conn_id: str) -> Any:
    try:
        from airflow.sdk import BaseHook
    except ImportError as exc:  # pragma: no cover - airflow is a hard dependency
        raise SecretUnavailableError(f"{PATH}.connection: Airflow is not importable: {exc}") from None
    try:
        return BaseHook.get_connection(conn_id)
    except Exception as exc:
        raise SecretUnavailableError(
            f"{PATH}.connection: Airflow connection '{conn_id}' could not be read ({type(exc).__name__}); create "
            f"it with `airflow connections add {conn_id} --conn-type aws --conn-login KEY_ID --conn-password SECRET "
            f"--conn-extra '{{\"endpoint_url\": \"http://host:port\"}}'`") from None

