"""The persistent embedded S3 store (`EmbeddedS3(persistent=True)`), the one the scheduler soak restarts: its objects
outlive a crash of S3Proxy, and a folder marker's DELETE while the folder still holds objects answers as S3 does
(the objects stay) within the client's deadline, where jclouds' own filesystem backend spent 10 s retrying the
folder's removal. Requests are signed (SigV2) by hand: pyarrow deletes a folder's objects before its marker,
Hadoop S3A (a Spark commit's `_temporary` tree) deletes in listing order, parents first."""

from __future__ import annotations

import base64
import email.utils
import hashlib
import hmac
import os
import urllib.error
import urllib.request

import pyarrow.fs as pafs
import pytest
from conftest import _started
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingest_core.dev.embedded_s3 import EmbeddedS3

DEADLINE_S = 9.0  # each request's; jclouds' retries of one folder took 10 s


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    with _started(EmbeddedS3(tmp_path_factory.mktemp("s3"), persistent=True)) as s3:
        yield s3


def filesystem(s3: EmbeddedS3) -> pafs.S3FileSystem:
    # as the product's own filesystems (handover/object_store.py): S3Proxy refuses the SDK's checksum trailer
    os.environ.setdefault("AWS_REQUEST_CHECKSUM_CALCULATION", "when_required")
    os.environ.setdefault("AWS_RESPONSE_CHECKSUM_VALIDATION", "when_required")
    return pafs.S3FileSystem(access_key=s3.access_key, secret_key=s3.secret_key, region="us-east-1", scheme="http",
                             endpoint_override=s3.endpoint.removeprefix("http://"), connect_timeout=5,
                             request_timeout=DEADLINE_S)


def delete(s3: EmbeddedS3, key: str) -> int:
    """DELETE of one key, signed with AWS's signature version 2; the answer's status."""
    date = email.utils.formatdate(usegmt=True)
    resource = f"/{s3.bucket}/{key}"
    signature = base64.b64encode(hmac.new(s3.secret_key.encode(), f"DELETE\n\n\n{date}\n{resource}".encode(),
                                          hashlib.sha1).digest()).decode()
    request = urllib.request.Request(s3.endpoint + resource, method="DELETE", headers={
        "Date": date, "Authorization": f"AWS {s3.access_key}:{signature}"})
    try:
        with urllib.request.urlopen(request, timeout=DEADLINE_S) as answer:
            return answer.status
    except urllib.error.HTTPError as exc:
        return exc.code


names = st.text(st.characters(codec="ascii", categories=("L", "N")), min_size=1, max_size=8)
trees = st.dictionaries(st.lists(names, min_size=2, max_size=4).map("/".join), st.binary(max_size=64),
                        min_size=1, max_size=4)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tree=trees, run=st.uuids())
def test_a_folder_markers_delete_parents_first_keeps_the_objects_under_it(store, tree, run):
    """As a Spark commit's cleanup: the folders' markers made (mkdirs), then every key of the listing deleted in
    its order, parents first. Each marker's DELETE answers (204) and the objects under it are still whole."""
    fs, root = filesystem(store), f"{store.bucket}/{run}"
    for key, data in tree.items():
        with fs.open_output_stream(f"{root}/{key}") as out:
            out.write(data)
    folders = sorted({f"{run}/{key}".rsplit("/", k)[0] for key in tree for k in range(1, key.count("/") + 1)})
    folders = [f for f in folders if not any(f == f"{run}/{key}" for key in tree)]  # a key may also be a folder
    for folder in folders:
        fs.create_dir(f"{store.bucket}/{folder}")
    for folder in folders:
        assert delete(store, folder + "/") == 204, folder
    for key, data in tree.items():
        if not any(other.startswith(key + "/") for other in tree):  # (a key that is also a folder is the folder)
            with fs.open_input_stream(f"{root}/{key}") as f:
                assert f.read() == data, key


def test_the_objects_outlive_a_crash_of_the_store(store):
    """SIGKILL of S3Proxy and a start at the same endpoint with the same keys: every object is there, and the store
    takes new ones."""
    fs = filesystem(store)
    objects = {f"{store.bucket}/crash/{i}/part-{i}.parquet": bytes([i]) * (i + 1) for i in range(5)}
    for path, data in objects.items():
        with fs.open_output_stream(path) as out:
            out.write(data)
    store.restart(graceful=False)
    fs = filesystem(store)
    for path, data in objects.items():
        with fs.open_input_stream(path) as f:
            assert f.read() == data, path
    with fs.open_output_stream(f"{store.bucket}/crash/after") as out:
        out.write(b"after")
    found = fs.get_file_info(pafs.FileSelector(f"{store.bucket}/crash", recursive=True))
    assert {i.path for i in found if i.type == pafs.FileType.File} == {*objects, f"{store.bucket}/crash/after"}
