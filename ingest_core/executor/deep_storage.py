"""Deep storage: where Spark jobs stage segments and reports, addressed by Hadoop-style URIs.

Spark writes through Hadoop's filesystems; Python code (split reports, segment footers, the reader) uses
pyarrow's: `file://` (and plain paths), `hdfs://`, and `s3a://` (read as `s3://`).

An S3 bucket is reached with the settings registered for it in this process (`register_s3`: a spec's
`deepStorage.s3`, resolved lazily, at the first use), else with the AWS SDK's own chain (AWS_* variables,
~/.aws, an instance role). Nothing here relies on a rename or on a listing to decide what is visible: an
object appears whole when its upload completes, and the metadata store's segment records name the published
files.

Layout under a datasource's deep storage URI:
  <uri>/<datasource>/<run id, encoded by safe_name>/group=<g>/replica=<r>/attempt=<id>/
      segments/__segment=<interval start ms>/part-*.parquet   one Parquet file per segment (shard)
      splits/split-<i>.json                                                 one row-stats report per split
      progress/split-<i>.json                                               the same, every few seconds while it reads
      report.json                                                           the task group's report
Each job attempt writes a folder of its own and deletes nothing, so a published segment's file never changes:
a retried or re-executed job cannot touch it. Attempts nothing was published from are removed by
`ingest_core.store.cleanup` once their run is final.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import threading
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlparse

import pyarrow.fs as pafs


def base_for(spec: Any) -> str:
    """A datasource's deep storage: `microbatch.deepStorage.uri`, else $INGEST_DEEP_STORAGE."""
    from ingest_core.core.settings import Settings

    return spec.microbatch.deep_storage.uri or Settings.from_env().deep_storage


def normalize_uri(uri: str) -> str:
    """Plain paths become file:// URIs; URIs lose a trailing slash."""
    if "://" not in uri:
        return "file://" + str(Path(uri).resolve())
    return uri.rstrip("/")


S3_SCHEMES = ("s3a", "s3")
# deadlines of every object-store request (seconds): a store that accepts and never answers costs this much
S3_CONNECT_TIMEOUT_S = 10.0
S3_REQUEST_TIMEOUT_S = 60.0


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
        """For the job's executors only (a Spark data source's secret option), as the Kafka secrets travel."""
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
    parsed = urlparse(normalize_uri(uri))
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


def _s3_filesystem(bucket: str) -> pafs.FileSystem:
    access = s3_access(f"s3://{bucket}")
    with _s3_lock:
        fs = _s3_filesystems.get(bucket)
        if fs is not None:
            return fs
    kwargs: dict[str, Any] = {"connect_timeout": S3_CONNECT_TIMEOUT_S, "request_timeout": S3_REQUEST_TIMEOUT_S}
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


def filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    uri = normalize_uri(uri)
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        return pafs.LocalFileSystem(), parsed.path
    if parsed.scheme in S3_SCHEMES:  # pyarrow's S3 paths: bucket/key
        return _s3_filesystem(parsed.netloc), f"{parsed.netloc}{parsed.path}".rstrip("/")
    fs, path = pafs.FileSystem.from_uri(uri)
    return fs, path


def is_object_store(uri: str) -> bool:
    return bucket_of(uri) is not None


def join(uri: str, *parts: str) -> str:
    return posixpath.join(normalize_uri(uri), *parts)


def run_uri(base: str, datasource: str, run_id: str) -> str:
    from ingest_core.core.spec import datasource_name_problem

    problem = datasource_name_problem(datasource)
    if problem:  # a name is a path segment here: never one that leaves the deep-storage base
        raise ValueError(f"datasource name {datasource!r}: {problem}")
    return join(base, datasource, safe_name(run_id))


def group_uri(base: str, datasource: str, run_id: str, group_id: int, replica: int = 0) -> str:
    return join(run_uri(base, datasource, run_id), f"group={group_id}", f"replica={replica}")


ATTEMPT = "attempt="


def new_attempt_id(now: datetime | None = None) -> str:
    """Unique per job attempt, and in the order attempts started: `20260122T101500Z-1a2b3c4d`."""
    return f"{(now or datetime.now(timezone.utc)).strftime('%Y%m%dT%H%M%SZ')}-{uuid.uuid4().hex[:8]}"


def attempt_uri(group: str, attempt_id: str) -> str:
    return join(group, f"{ATTEMPT}{attempt_id}")


def attempt_folders(uri: str, recursive: bool = False) -> list[str]:
    """The attempt folders in `uri` (a replica's folder), oldest first; `recursive`: anywhere below it."""
    fs, path = filesystem(uri)
    if fs.get_file_info(path).type == pafs.FileType.NotFound:
        return []
    found = fs.get_file_info(pafs.FileSelector(path, recursive=recursive))
    return sorted(to_uri(uri, f.path) for f in found
                  if f.type == pafs.FileType.Directory and posixpath.basename(f.path).startswith(ATTEMPT))


def attempt_id(folder: str) -> str:
    return posixpath.basename(normalize_uri(folder))[len(ATTEMPT):]


def safe_name(run_id: str) -> str:
    """A run id as one path segment: whoever triggers a run chooses its id (`dags trigger --run-id`), so it is
    data, never a path. ASCII letters, digits, '-', '_' and inner dots stay (ids stay readable); every other
    byte, a leading dot ('..' would be the parent folder) and '~' itself become ~HH: one id, one folder."""
    out = []
    for i, ch in enumerate(run_id):
        if (ch.isascii() and ch.isalnum()) or ch in "-_" or (ch == "." and i > 0):
            out.append(ch)
        else:
            out.extend(f"~{b:02x}" for b in ch.encode("utf-8", "surrogatepass"))
    return "".join(out) or "~"


def staging_path(uri: str) -> tuple[pafs.FileSystem, str, str]:
    """(filesystem, where to write, where the file belongs) for a file that a reader must see whole or not at
    all: on a filesystem a name aside (its folder made), then `settle` moves it in place; on an object store the
    place itself, where an object appears whole when its upload completes (a rename there is a copy and a
    delete: no safer, and two requests more)."""
    fs, path = filesystem(uri)
    if is_object_store(uri):
        return fs, path, path
    fs.create_dir(posixpath.dirname(path), recursive=True)
    return fs, f"{path}.{uuid.uuid4().hex[:8]}.tmp", path


def settle(fs: pafs.FileSystem, written: str, path: str) -> None:
    """The file written at `staging_path`'s place, now at its own."""
    if written != path:
        fs.move(written, path)


def write_json(uri: str, obj: Any) -> None:
    """Written whole or not at all (`staging_path`): a reader (status, while a split rewrites its progress)
    never sees half a file."""
    fs, written, path = staging_path(uri)
    with fs.open_output_stream(written) as out:
        out.write(json.dumps(obj, indent=1, sort_keys=True).encode())
    settle(fs, written, path)


def read_text(uri: str) -> str:
    """A file by URI or plain path."""
    fs, path = filesystem(uri)
    with fs.open_input_stream(path) as f:
        return f.read().decode("utf-8")


def read_json(uri: str) -> Any:
    return json.loads(read_text(uri))


def list_files(uri: str, suffix: str = "") -> list[pafs.FileInfo]:
    fs, path = filesystem(uri)
    info = fs.get_file_info(path)
    if info.type == pafs.FileType.NotFound:
        return []
    found = fs.get_file_info(pafs.FileSelector(path, recursive=True))
    return sorted((f for f in found if f.type == pafs.FileType.File and f.path.endswith(suffix)),
                  key=lambda f: f.path)


def delete_dir(uri: str) -> None:
    """The folder and everything in it; on an object store also the incomplete multipart uploads under it
    (a writer killed mid-upload leaves parts no listing shows)."""
    fs, path = filesystem(uri)
    if fs.get_file_info(path).type != pafs.FileType.NotFound:
        fs.delete_dir(path)
    if is_object_store(uri):
        from ingest_core.executor import s3_uploads

        try:
            s3_uploads.abort_all(uri)
        except OSError as exc:  # the objects are gone; the parts stay for a lifecycle rule (docs/s3.md)
            logging.getLogger(__name__).warning("incomplete uploads under %s not aborted: %s", uri, exc)


def to_uri(uri_base: str, fs_path: str) -> str:
    """A URI for a path that `filesystem(uri_base)` listed."""
    parsed = urlparse(normalize_uri(uri_base))
    if parsed.scheme == "file":
        return "file://" + fs_path  # unquoted: Spark's partition folders hold '='
    if parsed.scheme in ("s3a", "s3", "gs", "gcs"):  # pyarrow's object-store paths start with the bucket
        return f"{parsed.scheme}://{fs_path.lstrip('/')}"
    return f"{parsed.scheme}://{parsed.netloc}/{fs_path.lstrip('/')}"
