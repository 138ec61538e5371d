"""S3-compatible object stores as deep storage: the settings each datasource's folder is reached with in this
process (`register_s3`: a spec's `deepStorage.s3` for `<deep storage>/<dataSource>`, resolved lazily, at the first
use; else the AWS SDK's own chain: AWS_* variables, ~/.aws, an instance role), and pyarrow's filesystem for a
bucket and settings, with the object store's deadlines (core.defaults).

Settings are never looked up by bucket name: two datasources may name the same bucket on two servers, each
with its own keys, and a process may know both (the dag-processor, `ingest status`, the API server)."""

from __future__ import annotations

import hashlib
import json
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

    @property
    def hadoop_scheme(self) -> str:
        """The URI scheme Spark reaches the store by with these settings: `s3a-` and a digest of all of them.
        Hadoop caches one filesystem per scheme, bucket and user for the JVM's life, whatever the settings it
        was made with: a Spark Connect server serves every datasource's jobs, so with plain `s3a://` the first
        filesystem made for a bucket name serves every later job on that name, with its endpoint and keys. A
        scheme per settings gives each its own cached filesystem (one per settings, not one per job:
        `fs.s3a.impl.disable.cache` would leave each job's AWS client threads behind, about 40 per write,
        measured), and nothing of the keys can be read back from 64 bits of a SHA-256."""
        digest = hashlib.sha256(json.dumps(self.to_json(), sort_keys=True).encode()).hexdigest()[:16]
        return f"s3a-{digest}"

    def spark_uri(self, uri: str) -> str:
        """`uri` (s3a:// or s3://) as Spark reaches it with these settings (`hadoop_scheme`)."""
        return f"{self.hadoop_scheme}://{uri.split('://', 1)[1]}"

    def hadoop_conf(self, bucket: str) -> dict[str, str]:
        """Hadoop S3A's settings for `bucket` (per-bucket keys: datasources on other buckets keep theirs) and the
        scheme these settings are reached by (`hadoop_scheme`), for Spark's Parquet writer and reader. Spark's UI
        and logs redact `secret.key` and `access.key` (spark.redaction.regex)."""
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
        return {f"fs.{self.hadoop_scheme}.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
                **{prefix + k: v for k, v in conf.items()}}

    @staticmethod
    def from_json(raw: dict[str, Any]) -> "S3Access":
        return S3Access(raw.get("endpoint"), raw.get("region"), bool(raw.get("pathStyle")), raw.get("accessKey"),
                        raw.get("secretKey"), raw.get("sessionToken"))


_s3_lock = threading.Lock()
# root URI (a datasource's own folder, `<deep storage>/<dataSource>`) -> how to get its settings. Never keyed by
# bucket: two datasources may name the same bucket on different servers, with different keys.
_s3_sources: dict[str, Callable[[], S3Access]] = {}
_s3_resolved: dict[str, S3Access] = {}
# one filesystem per settings (the keys included) and bucket: equal settings share it, others never do
_s3_filesystems: dict[tuple[S3Access | None, str], pafs.FileSystem] = {}


def bucket_of(uri: str) -> str | None:
    """The bucket of an s3a:// or s3:// URI (None: not one)."""
    parsed = urlparse(uri)
    return parsed.netloc if parsed.scheme in S3_SCHEMES else None


def _root_key(uri: str) -> str:
    """`uri` as registry key: the scheme's spelling (s3a, s3) does not matter, the folder boundaries do."""
    parsed = urlparse(uri)
    return f"{parsed.netloc}/{parsed.path.strip('/')}".rstrip("/") + "/"


def register_s3(root: str, source: Callable[[], S3Access] | S3Access) -> None:
    """Reach every object under `root` (a datasource's own folder) with these settings in this process; `source`
    may be a function, called at the first use (a secret is resolved only where the store is actually read or
    written). An object is reached with the settings of the longest root it lies under: a datasource's files
    with its own settings, whatever other datasources use the same bucket name."""
    if bucket_of(root) is None:
        raise ValueError(f"{root!r} is not an s3a:// or s3:// URI")
    key = _root_key(root)
    with _s3_lock:
        _s3_sources[key] = source if callable(source) else (lambda: source)
        _s3_resolved.pop(key, None)


def s3_access(uri: str) -> S3Access | None:
    """The settings registered for the longest root that holds `uri`, resolved (None: none registered, the AWS
    SDK's own chain)."""
    if bucket_of(uri) is None:
        return None
    path = _root_key(uri)
    with _s3_lock:
        roots = [root for root in _s3_sources if path.startswith(root)]
        if not roots:
            return None
        root = max(roots, key=len)
        if root not in _s3_resolved:
            _s3_resolved[root] = _s3_sources[root]()
        return _s3_resolved[root]


def use_in_spark(spark: Any, uri: str) -> S3Access | None:
    """Spark (a session: classic or Connect) reaches the object store of `uri` with the settings this process has
    for `uri`'s datasource folder (`register_s3`): Hadoop S3A's per-bucket keys and the scheme of these settings
    (`S3Access.hadoop_scheme`), set in the session (Spark hands a session's settings to Hadoop). The settings, for
    `spark_uri` and the executors' own writes; None: none registered (the session's own S3A settings then)."""
    access = s3_access(uri)
    bucket = bucket_of(uri)
    if access is None or bucket is None:
        return None
    for key, value in access.hadoop_conf(bucket).items():
        spark.conf.set(key, value)
    return access


def spark_uri(access: S3Access | None, uri: str) -> str:
    """`uri` as Spark reads or writes it with `access` (`use_in_spark`): its own filesystem, never one Hadoop
    cached for another datasource on the same bucket name."""
    return access.spark_uri(uri) if access is not None and bucket_of(uri) else uri


def s3_filesystem(bucket: str, access: S3Access | None) -> pafs.FileSystem:
    """pyarrow's filesystem for `bucket` reached with `access` (None: the AWS SDK's own chain)."""
    pafs = pyarrow_fs()
    with _s3_lock:
        fs = _s3_filesystems.get((access, bucket))
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
        _s3_filesystems[(access, bucket)] = fs
    return fs
