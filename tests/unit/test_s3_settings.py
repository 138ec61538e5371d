"""`deepStorage.s3`: the spec's checks, resolution of its references, what Spark and the requests signed here are
given, and that no key reaches a stored spec or a repr. No object store needed (that is
tests/integration/test_s3_deep_storage.py)."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from ingest_core.core.errors import SpecError
from ingest_core.core.secrets import SecretUnavailableError
from ingest_core.core.spec import parse_spec
from ingest_core.handover import deep_storage, object_store
from ingest_core.handover.object_store import S3Access
from ingest_core.handover.s3_uploads import signed_headers
from ingest_core.kafka.storage_secrets import resolve_s3, use_deep_storage

KEY, SECRET = "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"  # AWS's documentation examples


def spec_with(deep: dict, datasource: str = "ds"):
    return parse_spec({"type": "kafka", "spec": {
        "dataSchema": {"dataSource": datasource, "timestampSpec": {"column": "ts"}, "dimensionsSpec": {"dimensions": []},
                       "granularitySpec": {"segmentGranularity": "HOUR"}},
        "ioConfig": {"topic": "t", "inputFormat": {"type": "json"},
                     "consumerProperties": {"bootstrap.servers": "localhost:9092"}}},
        "microbatch": {"deepStorage": deep}})


def env_keys(**extra):
    return {"endpoint": "http://127.0.0.1:9000", "accessKeyId": {"type": "environment", "variable": "T_S3_KEY"},
            "secretAccessKey": {"type": "environment", "variable": "T_S3_SECRET"}, **extra}


@pytest.mark.parametrize("s3,path,fragment", [
    ({"accessKeyId": KEY, "secretAccessKey": {"type": "environment", "variable": "X"}}, "s3.accessKeyId",
     "a key is never written into a spec"),
    ({"accessKeyId": {"type": "environment", "variable": "X"}}, "deepStorage.s3", "go together"),
    ({"connection": "c", **env_keys()}, "deepStorage.s3", "not both"),
    ({"endpoint": "127.0.0.1:9000"}, "s3.endpoint", "http(s)://host:port"),
    ({"pathStyle": True}, "s3.pathStyle", "did you mean 'pathStyleAccess'"),
])
def test_bad_settings_are_refused_with_their_field(s3, path, fragment):
    with pytest.raises(SpecError) as err:
        spec_with({"uri": "s3a://b/x", "s3": s3})
    assert path in str(err.value) and fragment in str(err.value) and KEY not in str(err.value)


def test_s3_settings_only_for_an_s3_uri():
    with pytest.raises(SpecError, match="only for an s3a:// uri"):
        spec_with({"uri": "file:///tmp/x", "s3": {"region": "us-east-1"}})


def test_the_stored_spec_holds_references_and_resolution_names_the_field(monkeypatch):
    spec = spec_with({"uri": "s3a://b/x", "s3": env_keys()})
    stored = json.dumps(spec.to_raw())
    assert "T_S3_SECRET" in stored and SECRET not in stored
    with pytest.raises(SecretUnavailableError, match=r"microbatch.deepStorage.s3.accessKeyId: environment "
                                                     r"variable T_S3_KEY is not set"):
        resolve_s3(spec.microbatch.deep_storage.s3)
    monkeypatch.setenv("T_S3_KEY", KEY)
    monkeypatch.setenv("T_S3_SECRET", SECRET)
    access = resolve_s3(spec.microbatch.deep_storage.s3)
    assert (access.endpoint, access.path_style, access.access_key, access.secret_key) == (
        "http://127.0.0.1:9000", True, KEY, SECRET)
    assert SECRET not in repr(access) and KEY not in repr(access)
    # without an endpoint (AWS), buckets are addressed by host name unless the spec says otherwise
    assert not resolve_s3(spec_with({"uri": "s3a://b/x", "s3": {"region": "eu-west-1"}})
                          .microbatch.deep_storage.s3).path_style


def test_registration_resolves_at_the_first_use_only(monkeypatch):
    spec = spec_with({"uri": "s3a://lazy-bucket/x", "s3": env_keys()})
    use_deep_storage(spec)  # the keys are not in the environment: nothing is read yet
    monkeypatch.setenv("T_S3_KEY", KEY)
    monkeypatch.setenv("T_S3_SECRET", SECRET)
    assert object_store.s3_access("s3a://lazy-bucket/x/ds/run").secret_key == SECRET
    assert object_store.s3_access("s3a://other-bucket/x") is None  # another bucket: the AWS chain
    fs, path = deep_storage.filesystem("s3a://lazy-bucket/x/ds/file.json")
    assert path == "lazy-bucket/x/ds/file.json" and fs.type_name == "s3"


def test_two_datasources_on_one_bucket_name_each_get_their_own_settings_and_filesystem(monkeypatch):
    monkeypatch.setenv("T_S3_KEY", KEY)
    monkeypatch.setenv("T_S3_SECRET", SECRET)
    settings = [{"uri": "s3a://shared/x", "s3": {**env_keys(), "endpoint": f"http://127.0.0.1:{port}"}}
                for port in (9001, 9002)]
    for name, deep in zip(("ds_a", "ds_b"), settings):
        use_deep_storage(spec_with(deep, name))
    a, b = (object_store.s3_access(f"s3a://shared/x/{name}/run/f.json") for name in ("ds_a", "ds_b"))
    assert (a.endpoint, b.endpoint) == ("http://127.0.0.1:9001", "http://127.0.0.1:9002")
    assert object_store.s3_access("s3a://shared/x/ds_ab/run") is None  # a folder boundary, not a text prefix
    fs_a, _ = deep_storage.filesystem("s3a://shared/x/ds_a/f.json")
    fs_b, _ = deep_storage.filesystem("s3a://shared/x/ds_b/f.json")
    assert fs_a is not fs_b and fs_a is deep_storage.filesystem("s3a://shared/x/ds_a/other")[0]


def test_spark_gets_per_bucket_hadoop_settings_under_a_scheme_of_their_own():
    access = S3Access("http://127.0.0.1:9000", "us-east-1", True, KEY, SECRET)
    scheme = access.hadoop_scheme
    assert access.hadoop_conf("b1") == {
        f"fs.{scheme}.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem", "fs.s3a.bucket.b1.path.style.access": "true",
        "fs.s3a.bucket.b1.endpoint": "http://127.0.0.1:9000", "fs.s3a.bucket.b1.multiobjectdelete.enable": "false",
        "fs.s3a.bucket.b1.endpoint.region": "us-east-1", "fs.s3a.bucket.b1.access.key": KEY,
        "fs.s3a.bucket.b1.secret.key": SECRET}
    assert access.spark_uri("s3a://b1/x/y") == f"{scheme}://b1/x/y" and access.spark_uri("s3://b1/x") == f"{scheme}://b1/x"
    # one scheme per settings: the same settings share Hadoop's cached filesystem, others (a key) never do
    assert S3Access("http://127.0.0.1:9000", "us-east-1", True, KEY, SECRET).hadoop_scheme == scheme
    assert S3Access("http://127.0.0.1:9000", "us-east-1", True, KEY, SECRET + "x").hadoop_scheme != scheme
    assert KEY not in scheme and SECRET not in scheme
    aws = S3Access(None, "eu-west-1")  # AWS with its own chain: no keys, bulk deletes kept
    assert aws.hadoop_conf("b2") == {f"fs.{aws.hadoop_scheme}.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
                                     "fs.s3a.bucket.b2.path.style.access": "false",
                                     "fs.s3a.bucket.b2.endpoint.region": "eu-west-1"}
    assert S3Access.from_json(S3Access("http://h:1", None, True, KEY, SECRET, "tok").to_json()).session_token == "tok"


@pytest.mark.parametrize("query,signature", [
    # AWS's documented examples of Signature Version 4 ("Signature calculations for the Authorization header:
    # transferring payload in a single chunk"): GET Bucket lifecycle and GET Bucket (list objects)
    ("lifecycle=", "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543"),
    ("max-keys=2&prefix=J", "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7"),
])
def test_requests_are_signed_as_aws_documents_it(query, signature):
    headers = signed_headers(S3Access(None, "us-east-1", False, KEY, SECRET), "us-east-1", "GET",
                             "examplebucket.s3.amazonaws.com", "/", query, datetime(2013, 5, 24, tzinfo=timezone.utc))
    assert headers["authorization"] == (
        f"AWS4-HMAC-SHA256 Credential={KEY}/20130524/us-east-1/s3/aws4_request, "
        f"SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature={signature}")


def test_an_airflow_connection_gives_keys_endpoint_and_region_and_the_spec_wins(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_MY_S3", json.dumps({
        "conn_type": "aws", "login": KEY, "password": SECRET,
        "extra": {"endpoint_url": "http://s3.internal:9000", "region_name": "eu-west-1"}}))
    spec = spec_with({"uri": "s3a://b/x", "s3": {"connection": "my_s3", "region": "us-east-1"}})
    assert SECRET not in json.dumps(spec.to_raw())
    access = resolve_s3(spec.microbatch.deep_storage.s3)
    assert (access.endpoint, access.region, access.path_style, access.access_key, access.secret_key) == (
        "http://s3.internal:9000", "us-east-1", True, KEY, SECRET)
    monkeypatch.setenv("AIRFLOW_CONN_NO_KEYS", json.dumps({"conn_type": "aws"}))
    with pytest.raises(SecretUnavailableError, match="'no_keys' has no login"):
        resolve_s3(spec_with({"uri": "s3a://b/x", "s3": {"connection": "no_keys"}}).microbatch.deep_storage.s3)
