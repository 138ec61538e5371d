"""S3-compatible object stores as deep storage: the settings each bucket is reached with in this process
(`register_s3`: a spec's `deepStorage.s3`, resolved lazily, at the first use; else the AWS SDK's own chain:
AWS_* variables, ~/.aws, an instance role), and pyarrow's filesystem for a bucket, with the object store's
deadlines (core.defaults)."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable
from urllib.parse import urlparse

from ingest_core.core.defaults import OBJECT_STORE_CONNECT_TIMEOUT_S, OBJECT_STORE_REQUEST_TIMEOUT_S

if TYPE_CHECKING:
    import pyarrow.fs as pafs

S3_SCHEMES = ("s3a", "s3")


def pyarrow_fs() -> ModuleType:
    """`pyarrow.fs`, loaded where a filesystem is first made: with pyarrow and numpy it takes 0.15-0.2 s, and
    Airflow's parse of the DAG file, in every task's process, reads no data (tests/unit/test_dag_file_weight.py)."""
    import pyarrow.fs

    return pyarrow.fs


@dataclass(frozen=True)
class S3Access:
    """Resolved settings for one bucket: values, secrets included. Never logged, stored or put in a repr."""

    endpoint: str | None = None  # http(s)://host:port; None: AWS
    region: str | None = None
    path_style: bool = False
    access_key: str | None = None
    secret_key: str | None = None
    session_token: str | None = None

    def __repr__(self) -> str:  # a traceback or a log line must not carry the keys
        return f"S3Access(endpoint={self.endpoint!r}, region={self.region!r}, path_style={self.path_style})"

    @property
    def scheme(self) -> str:
        return urlparse(self.endpoint).scheme if self.endpoint else "https"

    @property
    def host(self) -> str | None:
        return urlparse(self.endpoint).netloc if self.endpoint else None

    def to_json(self) -> dict[str, Any]:
        """For the job's executors only (pickled with the reader that `mapInArrow` runs, never in a plan's text), as the Kafka secrets travel."""
        return {"endpoint": self.endpoint, "region": self.region, "pathStyle": self.path_style,
                "accessKey": self.access_key, "secretKey": self.secret_key, "sessionToken": self.session_token}

    def hadoop_conf(self, bucket: str) -> dict[str, str]:
        """Hadoop S3A's settings for `bucket` (per-bucket keys: datasources on other buckets keep theirs), for
        Spark's Parquet writer. Spark's UI and logs redact `secret.key` and `access.key` (spark.redaction.regex)."""
        prefix = f"fs.s3a.bucket.{bucket}."
        conf = {"path.style.access": "true" if self.path_style else "false"}
        if self.endpoint:
            # A store other than AWS: S3A's bulk delete (DeleteObjects, which Spark's commit uses on its
            # temporary files) sends a checksum header that S3-compatible stores often refuse: one DELETE each.
            conf.update({"endpoint": self.endpoint, "multiobjectdelete.enable": "false"})
        if self.region:
            conf["endpoint.region"] = self.region
        if self.access_key:
            conf.update({"access.key": self.access_key, "secret.key": self.secret_key or ""})
            if self.session_token:
                conf.update({"session.token": self.session_token, "aws.credentials.provider":
                             "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"})
        return {prefix + k: v for k, v in conf.items()}

    @staticmethod
    def from_json(raw: dict[str, Any]) -> "S3Access":
        return S3Access(raw.get("endpoint"), raw.get("region"), bool(raw.get("pathStyle")), raw.get("accessKey"),
                        raw.get("secretKey"), raw.get("sessionToken"))


_s3_lock = threading.Lock()
_s3_sources: dict[str, Callable[[], S3Access]] = {}  # bucket -> how to get its settings
_s3_resolved: dict[str, S3Access] = {}
_s3_filesystems: dict[str, pafs.FileSystem] = {}


def bucket_of(uri: str) -> str | None:
    """The bucket of an s3a:// or s3:// URI (None: not one)."""
    parsed = urlparse(uri)
    return parsed.netloc if parsed.scheme in S3_SCHEMES else None


def register_s3(uri: str, source: Callable[[], S3Access] | S3Access) -> None:
    """Reach the bucket of `uri` with these settings in this process; `source` may be a function, called at the
    first use (a secret is resolved only where the store is actually read or written)."""
    bucket = bucket_of(uri)
    if bucket is None:
        raise ValueError(f"{uri!r} is not an s3a:// or s3:// URI")
    with _s3_lock:
        _s3_sources[bucket] = source if callable(source) else (lambda: source)
        _s3_resolved.pop(bucket, None)
        _s3_filesystems.pop(bucket, None)


def s3_access(uri: str) -> S3Access | None:
    """The settings registered for the bucket of `uri`, resolved (None: none registered, the SDK's chain)."""
    bucket = bucket_of(uri)
    with _s3_lock:
        source = _s3_sources.get(bucket) if bucket else None
        if source is None:
            return None
        if bucket not in _s3_resolved:
            _s3_resolved[bucket] = source()
        return _s3_resolved[bucket]


def s3_filesystem(bucket: str) -> pafs.FileSystem:
    pafs = pyarrow_fs()
    access = s3_access(f"s3://{bucket}")
    with _s3_lock:
        fs = _s3_filesystems.get(bucket)
        if fs is not None:
            return fs
    kwargs: dict[str, Any] = {"connect_timeout": OBJECT_STORE_CONNECT_TIMEOUT_S,
                              "request_timeout": OBJECT_STORE_REQUEST_TIMEOUT_S}
    if access is not None:
        if access.endpoint:
            # The AWS SDKs' default since 2025 (a CRC checksum trailer on every upload) is refused by many
            # S3-compatible stores (S3Proxy among them): with another endpoint, checksums only where S3 asks.
            os.environ.setdefault("AWS_REQUEST_CHECKSUM_CALCULATION", "when_required")
            os.environ.setdefault("AWS_RESPONSE_CHECKSUM_VALIDATION", "when_required")
            kwargs.update(endpoint_override=access.host, scheme=access.scheme)
            # pyarrow addresses a bucket by path with an endpoint; a store that wants it in the host name says so
            kwargs["force_virtual_addressing"] = not access.path_style
        if access.region:
            kwargs["region"] = access.region
        if access.access_key:
            kwargs.update(access_key=access.access_key, secret_key=access.secret_key,
                          session_token=access.session_token)
    if "region" not in kwargs and not (access and access.endpoint):
        try:  # an AWS bucket in another region than the SDK's default answers nothing but a redirect
            kwargs["region"] = pafs.resolve_s3_region(bucket)
        except OSError:
            pass  # the SDK's default region, as pyarrow's own from_uri would leave it
    fs = pafs.S3FileSystem(**kwargs)
    with _s3_lock:
        _s3_filesystems[bucket] = fs
    return fs
