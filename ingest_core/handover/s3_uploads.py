"""Incomplete multipart uploads under a deep-storage prefix: listed and aborted.

A writer killed in the middle of an upload (a Spark task's Parquet file, a dead-letter file, a report) leaves
no object, but the parts it sent stay in the bucket, unlisted by a plain listing and billed, until the upload
is aborted. pyarrow exposes neither ListMultipartUploads nor AbortMultipartUpload, and no AWS SDK for Python is
installed, so these two requests are made here, signed with AWS Signature Version 4 (the standard library's
hmac and http.client), each with a deadline. Only under a datasource folder whose settings and keys this process
has (`object_store.register_s3`, or the AWS_* environment variables); otherwise an S3 lifecycle rule
(AbortIncompleteMultipartUpload) is what removes them, as docs/s3.md says.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import os
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from datetime import datetime, timezone
from urllib.parse import quote, urlparse

from ingest_core.core.defaults import OBJECT_STORE_REQUEST_TIMEOUT_S
from ingest_core.handover.object_store import S3_SCHEMES, S3Access, s3_access

_NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"
_EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


class ObjectStoreError(OSError):
    """An object-store request failed: its operation, bucket and status, never a credential."""


@dataclass(frozen=True)
class Upload:
    key: str
    upload_id: str
    initiated: str


def _access(uri: str) -> S3Access | None:
    """The settings with keys for `uri`: those registered for its datasource folder, else the AWS_* environment
    variables."""
    access = s3_access(uri)
    if access is not None and access.access_key:
        return access
    key, secret = os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_SECRET_ACCESS_KEY")
    if not (key and secret):
        return None
    base = access or S3Access()
    return S3Access(base.endpoint or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL"),
                    base.region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION"),
                    base.path_style, key, secret, os.environ.get("AWS_SESSION_TOKEN"))


def can_list(uri: str) -> bool:
    """Whether this process holds the keys to list and abort uploads in `uri`'s bucket."""
    return _access(uri) is not None


def incomplete_uploads(uri: str) -> list[Upload]:
    """The incomplete multipart uploads of keys under `uri` (a folder), oldest key first."""
    bucket, prefix = _bucket_prefix(uri)
    out: list[Upload] = []
    markers: dict[str, str] = {}
    while True:
        root = ET.fromstring(_request(uri, "GET", bucket, "", {"uploads": "", "prefix": prefix, **markers}))
        for up in root.iter(f"{_NS}Upload"):
            out.append(Upload(up.findtext(f"{_NS}Key") or "", up.findtext(f"{_NS}UploadId") or "",
                              up.findtext(f"{_NS}Initiated") or ""))
        if (root.findtext(f"{_NS}IsTruncated") or "false").lower() != "true":
            return sorted(out, key=lambda u: (u.key, u.initiated))
        markers = {"key-marker": root.findtext(f"{_NS}NextKeyMarker") or "",
                   "upload-id-marker": root.findtext(f"{_NS}NextUploadIdMarker") or ""}


def abort(uri: str, upload: Upload) -> None:
    bucket, _ = _bucket_prefix(uri)
    _request(uri, "DELETE", bucket, upload.key, {"uploadId": upload.upload_id}, ok=(204, 200, 404))


def abort_all(uri: str) -> list[Upload]:
    """Abort every incomplete upload under `uri`; the ones aborted. Nothing without keys (`can_list`)."""
    if not can_list(uri):
        return []
    uploads = incomplete_uploads(uri)
    for upload in uploads:
        abort(uri, upload)
    return uploads


def folders_with_uploads(uri: str, marker: str) -> list[str]:
    """The folders under `uri` named `<marker>...` (attempt folders) that hold incomplete uploads: a job killed
    before any of its files was complete leaves no object to list, only these. None without keys (`can_list`)."""
    if not can_list(uri):
        return []
    bucket, _ = _bucket_prefix(uri)
    scheme = urlparse(uri.rstrip("/")).scheme
    found = set()
    for upload in incomplete_uploads(uri):
        parts = upload.key.split("/")
        at = next((i for i, p in enumerate(parts) if p.startswith(marker)), None)
        if at is not None:
            found.add(f"{scheme}://{bucket}/{'/'.join(parts[:at + 1])}")
    return sorted(found)


def signed_headers(access: S3Access, region: str, method: str, host: str, path: str, query: str,
                   now: datetime) -> dict[str, str]:
    """The headers of a request with no body, signed with AWS Signature Version 4 (`path` and `query` in their
    canonical, URI-encoded form)."""
    stamp = now.strftime("%Y%m%dT%H%M%SZ")
    headers = {"host": host, "x-amz-content-sha256": _EMPTY_SHA256, "x-amz-date": stamp}
    if access.session_token:
        headers["x-amz-security-token"] = access.session_token
    names = sorted(headers)
    canonical = "\n".join([method, path, query, "".join(f"{n}:{headers[n]}\n" for n in names), ";".join(names),
                           _EMPTY_SHA256])
    scope = f"{stamp[:8]}/{region}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = ("AWS4" + (access.secret_key or "")).encode()
    for part in (stamp[:8], region, "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["authorization"] = (f"AWS4-HMAC-SHA256 Credential={access.access_key}/{scope}, "
                                f"SignedHeaders={';'.join(names)}, Signature={signature}")
    return headers


def _bucket_prefix(uri: str) -> tuple[str, str]:
    parsed = urlparse(uri.rstrip("/"))
    if parsed.scheme not in S3_SCHEMES:
        raise ValueError(f"{uri!r} is not an s3a:// or s3:// URI")
    prefix = parsed.path.lstrip("/")
    return parsed.netloc, (prefix.rstrip("/") + "/") if prefix else ""


def _request(uri: str, method: str, bucket: str, key: str, query: dict[str, str], ok: tuple[int, ...] = (200,),
             now: datetime | None = None) -> bytes:
    access = _access(uri)
    if access is None:
        raise ObjectStoreError(f"no keys for bucket {bucket!r}: set deepStorage.s3 or AWS_ACCESS_KEY_ID")
    region = access.region or "us-east-1"
    if access.endpoint:
        scheme, host = access.scheme, access.host or ""
    else:
        scheme, host = "https", f"s3.{region}.amazonaws.com"
    if access.path_style:
        path = f"/{bucket}/{key}" if key else f"/{bucket}"
    else:  # the bucket in the host name, as AWS wants it
        host, path = f"{bucket}.{host}", f"/{key}"
    signed_path = quote(path, safe="/-_.~")
    canonical_query = "&".join(f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}" for k, v in sorted(query.items()))
    headers = signed_headers(access, region, method, host, signed_path, canonical_query,
                             now or datetime.now(timezone.utc))
    conn_cls = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection
    conn = conn_cls(host, timeout=OBJECT_STORE_REQUEST_TIMEOUT_S)
    try:
        conn.request(method, signed_path + (f"?{canonical_query}" if canonical_query else ""), headers=headers)
        response = conn.getresponse()
        body = response.read()
    except OSError as exc:
        raise ObjectStoreError(f"{method} {'upload' if key else 'uploads'} in bucket {bucket!r} at {host}: "
                               f"{type(exc).__name__}: {exc}") from None
    finally:
        conn.close()
    if response.status not in ok:
        raise ObjectStoreError(f"{method} {'an upload' if key else 'the uploads'} in bucket {bucket!r} at {host}: "
                               f"HTTP {response.status}: {body[:300].decode('utf-8', 'replace')}")
    return body
