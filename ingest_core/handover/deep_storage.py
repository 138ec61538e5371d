"""Deep storage: where Spark jobs stage segments and reports, addressed by Hadoop-style URIs.

Spark writes through Hadoop's filesystems; Python code (split reports, segment footers, the reader) uses
pyarrow's: `file://` (and plain paths), `hdfs://`, and `s3a://` (read as `s3://`).

An object store is reached with the settings registered for the datasource folder a URI lies in
(`object_store.register_s3`: a spec's `deepStorage.s3`, resolved lazily, at the first use), or with those a caller
passes (`access`: a Spark task, which carries its job's), else with the AWS SDK's own chain (AWS_* variables,
~/.aws, an instance role); never with another datasource's, whatever bucket name they share. Nothing here
relies on a rename or on a listing to decide what is visible: an object appears whole when its upload
completes, and the metadata store's segment records name the published files.

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

import logging
import posixpath
import uuid
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator
from urllib.parse import urlparse

from ingest_core.core import json_text
from ingest_core.core.defaults import OBJECT_STORE_CONNECT_TIMEOUT_S, OBJECT_STORE_REQUEST_TIMEOUT_S
from ingest_core.core.errors import ObjectStoreRefusedError, ObjectStoreUnavailableError
from ingest_core.core.settings import Settings
from ingest_core.core.spec import datasource_name_problem
from ingest_core.handover import object_store, s3_uploads
from ingest_core.handover.object_store import S3Access, pyarrow_fs

if TYPE_CHECKING:
    import pyarrow.fs as pafs


def base_for(spec: Any) -> str:
    """A datasource's deep storage: `microbatch.deepStorage.uri`, else $INGEST_DEEP_STORAGE."""
    return spec.microbatch.deep_storage.uri or Settings.from_env().deep_storage


def datasource_uri(spec: Any) -> str:
    """The datasource's own folder of its deep storage: every file of its runs, segments and Iceberg table lies
    under it, and its object-store settings are registered for it (never for its bucket)."""
    return join(base_for(spec), spec.datasource)


def normalize_uri(uri: str) -> str:
    """Plain paths become file:// URIs; URIs lose a trailing slash."""
    if "://" not in uri:
        return "file://" + str(Path(uri).resolve())
    return uri.rstrip("/")


def filesystem(uri: str, access: S3Access | None = None) -> tuple[pafs.FileSystem, str]:
    """The filesystem that reaches `uri` and its path there; on an object store with `access` if given, else
    with the settings registered for `uri`'s folder (`object_store.s3_access`)."""
    pafs = pyarrow_fs()
    uri = normalize_uri(uri)
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        return pafs.LocalFileSystem(), parsed.path
    if parsed.scheme in object_store.S3_SCHEMES:  # pyarrow's S3 paths: bucket/key
        fs = object_store.s3_filesystem(parsed.netloc, access or object_store.s3_access(uri))
        return fs, f"{parsed.netloc}{parsed.path}".rstrip("/")
    fs, path = pafs.FileSystem.from_uri(uri)
    return with_deadlines(fs), path


def with_deadlines(fs: pafs.FileSystem) -> pafs.FileSystem:
    """An S3 filesystem with the object store's deadlines (core.defaults) where it has none of its own: pyarrow's
    default leaves a request to a silent endpoint to the AWS SDK's and the OS's patience."""
    pafs = pyarrow_fs()
    if not isinstance(fs, pafs.S3FileSystem):
        return fs
    options = fs.__reduce__()[1][0]  # its constructor's arguments, as pickling rebuilds it
    if options["connect_timeout"] > 0 and options["request_timeout"] > 0:
        return fs
    if options["connect_timeout"] <= 0:
        options["connect_timeout"] = OBJECT_STORE_CONNECT_TIMEOUT_S
    if options["request_timeout"] <= 0:
        options["request_timeout"] = OBJECT_STORE_REQUEST_TIMEOUT_S
    return pafs.S3FileSystem(**options)


# what the AWS SDK says of a request that got no answer in time, or no connection (pyarrow raises OSError)
_UNANSWERED = ("NETWORK_CONNECTION", "curlCode: 28", "curlCode: 7,", "Timeout was reached", "REQUEST_TIMEOUT",
               "Couldn't connect to server")


# what the AWS SDK says of a request the store refused for its credentials (403): they are the same on a retry
_REFUSED = {"INVALID_ACCESS_KEY_ID": "InvalidAccessKeyId", "SIGNATURE_DOES_NOT_MATCH": "SignatureDoesNotMatch",
            "ACCESS_DENIED": "AccessDenied"}


@contextmanager
def deadline(uri: str, fs: pafs.FileSystem) -> Iterator[None]:
    """An object store that did not answer, as `ObjectStoreUnavailableError` naming the URI and the deadline;
    one that refused the credentials, as `ObjectStoreRefusedError` naming the endpoint and the bucket (never a
    key); other errors (a missing key) pass unchanged."""
    pafs = pyarrow_fs()
    try:
        yield
    except OSError as exc:
        text = str(exc)
        options = fs.__reduce__()[1][0] if isinstance(fs, pafs.S3FileSystem) else {}
        refused = next((name for marker, name in _REFUSED.items() if f"AWS Error {marker} " in text), None)
        if refused is not None:
            raise refused_error(uri, options, refused) from None
        if not any(marker in text for marker in _UNANSWERED):
            raise
        timeout = options.get("request_timeout")
        within = f" (request timeout {timeout:g}s, retried by the AWS SDK)" if timeout and timeout > 0 else ""
        at = f" at {_endpoint(options)}" if options.get("endpoint_override") else ""
        raise ObjectStoreUnavailableError(
            f"deep storage {uri}{at} did not answer{within}: {text.splitlines()[0]}. Check that the object store is "
            "up and reachable from here", endpoint=uri, deadline_s=timeout) from None


def _endpoint(options: dict[str, Any]) -> str:
    """Where a pyarrow S3FileSystem made with `options` sends its requests."""
    host = options.get("endpoint_override")
    return f"{options.get('scheme') or 'https'}://{host}" if host else "AWS S3"


def refused_error(uri: str, options: dict[str, Any], refused: str) -> ObjectStoreRefusedError:
    """The one-line error of a request the store refused (`refused`: its S3 error code), for `uri` reached with
    a pyarrow S3FileSystem's `options`."""
    endpoint = _endpoint(options)
    bucket = urlparse(normalize_uri(uri)).netloc
    return ObjectStoreRefusedError(
        f"the object store at {endpoint} refused the credentials for bucket {bucket!r} ({refused}): check "
        "microbatch.deepStorage.s3's accessKeyId and secretAccessKey (or its Airflow connection's login and "
        "password) and that they may use this bucket on this endpoint; asking again cannot help until they are "
        "fixed", endpoint=endpoint)


def reach(uri: str, access: S3Access | None = None) -> None:
    """One request for `uri`'s status: an object store that does not answer, or refuses the credentials, raises
    here (`deadline`), before a Spark job spends its own retries on it."""
    fs, path = filesystem(uri, access)
    with deadline(uri, fs):
        fs.get_file_info(path)


def is_object_store(uri: str) -> bool:
    return object_store.bucket_of(uri) is not None


def join(uri: str, *parts: str) -> str:
    return posixpath.join(normalize_uri(uri), *parts)


def run_uri(base: str, datasource: str, run_id: str) -> str:
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
    pafs = pyarrow_fs()
    fs, path = filesystem(uri)
    with deadline(uri, fs):
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


def staging_path(uri: str, access: S3Access | None = None) -> tuple[pafs.FileSystem, str, str]:
    """(filesystem, where to write, where the file belongs) for a file that a reader must see whole or not at
    all: on a filesystem a name aside (its folder made), then `settle` moves it in place; on an object store the
    place itself, where an object appears whole when its upload completes (a rename there is a copy and a
    delete: no safer, and two requests more)."""
    fs, path = filesystem(uri, access)
    if is_object_store(uri):
        return fs, path, path
    with deadline(uri, fs):
        fs.create_dir(posixpath.dirname(path), recursive=True)
    return fs, f"{path}.{uuid.uuid4().hex[:8]}.tmp", path


def settle(fs: pafs.FileSystem, written: str, path: str) -> None:
    """The file written at `staging_path`'s place, now at its own."""
    if written != path:
        fs.move(written, path)


def write_json(uri: str, obj: Any, access: S3Access | None = None) -> None:
    """Written whole or not at all (`staging_path`): a reader (status, while a split rewrites its progress)
    never sees half a file."""
    fs, written, path = staging_path(uri, access)
    with deadline(uri, fs):
        with fs.open_output_stream(written) as out:
            out.write(json_text.dumps_readable(obj))
        settle(fs, written, path)


def read_text(uri: str) -> str:
    """A file by URI or plain path."""
    fs, path = filesystem(uri)
    with deadline(uri, fs), fs.open_input_stream(path) as f:
        return f.read().decode("utf-8")


def read_json(uri: str) -> Any:
    return json_text.loads(read_text(uri))


def list_files(uri: str, suffix: str = "") -> list[pafs.FileInfo]:
    pafs = pyarrow_fs()
    fs, path = filesystem(uri)
    with deadline(uri, fs):
        if fs.get_file_info(path).type == pafs.FileType.NotFound:
            return []
        found = fs.get_file_info(pafs.FileSelector(path, recursive=True))
    return sorted((f for f in found if f.type == pafs.FileType.File and f.path.endswith(suffix)),
                  key=lambda f: f.path)


def delete_dir(uri: str) -> None:
    """The folder and everything in it; on an object store also the incomplete multipart uploads under it
    (a writer killed mid-upload leaves parts no listing shows)."""
    pafs = pyarrow_fs()
    fs, path = filesystem(uri)
    with deadline(uri, fs):
        if fs.get_file_info(path).type != pafs.FileType.NotFound:
            fs.delete_dir(path)
    if is_object_store(uri):
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
