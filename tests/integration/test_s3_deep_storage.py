"""Deep storage on an S3-compatible object store (S3Proxy, or INGEST_TEST_S3): the whole
path in one run, to keep the suite fast: the Spark job's segments and dead letters written through Hadoop's S3A
and pyarrow, the publish, the reader, `ingest query` (a command of its own, which finds the store's settings in
the spec), the Iceberg table's files, compaction's rewrite, publish and kill; then what a killed job leaves (an
object and an incomplete multipart upload, no listing shows the latter) removed by cleanup. The keys are
references to environment variables in the spec, never in a stored spec, a report or an audit record."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta

import pyarrow.fs as pafs
import pytest
import yaml
from helpers import SIMPLE, T0, ingest_run, iso, produce_all, spec_from, sqlite_store

from ingest_core.core.spec import parse_spec
from ingest_core.handover import deep_storage, s3_uploads
from ingest_core.kafka.storage_secrets import use_deep_storage
from ingest_core.store.reader import DatasourceReader

pytestmark = pytest.mark.kafka

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def objects(uri: str) -> list[str]:
    """The objects under a folder."""
    fs, path = deep_storage.filesystem(uri)
    infos = fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
    return sorted(i.path for i in infos if i.type == pafs.FileType.File)


def exists(uri: str) -> bool:
    fs, path = deep_storage.filesystem(uri)
    return fs.get_file_info(path).type == pafs.FileType.File


def test_the_ingest_path_end_to_end_on_an_object_store(spark, broker, object_store, tmp_path, monkeypatch):
    from ingest_core.supervisor import compaction as steps
    from ingest_core.spark.compaction import argument_parser, compact, load
    from ingest_core.store import iceberg
    from ingest_core.store.cleanup import find_orphans, remove_orphans
    from ingest_core.query.engine import run_sql

    object_store.keys_in_env(monkeypatch)
    base = f"{object_store.uri}/e2e-{os.getpid()}"
    topic = broker.create_topic(partitions=2)
    events = [{"ts": iso(T0 + timedelta(minutes=i)), "a": f"a{i % 3}", "b": str(i)} for i in range(40)]
    produce_all(broker, topic, events, partitions=2)
    broker.produce(topic, [b"{not json", b"[1, 2]"], partition=0)  # two dead letters
    spec = spec_from(broker.bootstrap, topic, SIMPLE, tuning={"maxParseExceptions": 10}, microbatch={
        "deepStorage": {"uri": base, "s3": object_store.spec_settings()},
        "deadLetter": {}, "iceberg": {}},
        datasource="s3ds")
    spec = parse_spec({**spec.to_raw(), "compaction": {"skipOffsetFromLatest": "PT0S",
                                                       "kill": {"bufferPeriod": "PT0S"}}})
    use_deep_storage(spec)
    store = sqlite_store(tmp_path)
    monkeypatch.setenv("INGEST_METADATA_URL", store.url)

    # the job (segments through S3A, reports and dead letters through pyarrow) and the publish
    _, reports, result = ingest_run(spark, store, spec, "r1", base)
    assert result.segment_ids and not result.failed_groups and sum(r.stats.processed for r in reports) == 40
    segments = DatasourceReader(store, "s3ds").segments()
    assert segments and all(s.location.startswith(base + "/s3ds/r1/") for s in segments)
    assert sorted(r["b"] for r in DatasourceReader(store, "s3ds").to_arrow().to_pylist()) == sorted(
        str(i) for i in range(40))
    letters = store.dead_letter_files.of("s3ds")
    assert letters and all(f.location.startswith(base) for f in letters) and sum(f.records for f in letters) == 2
    assert run_sql(store, "SELECT count(*) AS n FROM s3ds").table.to_pylist() == [{"n": 40}]

    # the stored spec holds the references, never a key
    stored = json.dumps(store.datasources.spec_history("s3ds"), default=str)
    assert object_store.secret_key not in stored and "INGEST_TEST_S3_SECRET" in stored

    # `ingest query` in a process of its own: the store's settings come from the spec in the DAG folder
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "s3ds.yaml").write_text(yaml.safe_dump(spec.to_raw()))
    env = {**os.environ, "INGEST_METADATA_URL": store.url, "AIRFLOW__CORE__DAGS_FOLDER": str(dags), "PYTHONPATH": ROOT}
    env.pop("AWS_ACCESS_KEY_ID", None)
    query = subprocess.run([sys.executable, "-m", "ingest_core.service.cli", "query", "--json",
                            "SELECT a, count(*) AS n FROM s3ds GROUP BY a ORDER BY a"],
                           capture_output=True, text=True, env=env, timeout=120)
    assert query.returncode == 0, query.stderr
    assert [r["n"] for r in json.loads(query.stdout)] == [14, 13, 13]
    assert object_store.secret_key not in query.stdout + query.stderr

    # the Iceberg table: its metadata and data on the object store, read back by pyiceberg
    assert iceberg.sync(store, spec).added == len(segments)
    cat = iceberg.catalog(store, spec)
    try:
        table = cat.load_table(iceberg.table_identifier(spec))
        assert table.location().startswith(base) and table.scan().to_arrow().num_rows == 40
    finally:
        cat.engine.dispose()

    # a second run into the same hours, then compaction (search, the Spark rewrite, publish) and kill
    produce_all(broker, topic, [{"ts": iso(T0 + timedelta(minutes=i)), "a": "late", "b": f"x{i}"}
                                for i in range(6)], partitions=2)
    ingest_run(spark, store, spec, "r2", base)
    before = DatasourceReader(store, "s3ds").segments()
    jobs = steps.search_step(spec, "c1")
    assert jobs
    for given in jobs:
        job_spec, job = load(argument_parser().parse_args(given.to_args()))
        compact(spark, job_spec, job)
    outcome = steps.publish_step(spec, jobs)
    assert outcome["compacted"] and not outcome["conflicts"]
    after = DatasourceReader(store, "s3ds").segments()
    assert len(after) < len(before) and DatasourceReader(store, "s3ds").to_arrow().num_rows == 46
    replaced = [s for s in store.segment_records.of("s3ds", used_only=False) if not s.used]
    assert replaced and all(exists(s.location) for s in replaced)
    killed = steps.kill_step(spec)
    assert sorted(killed["segments"]) == sorted(s.id for s in replaced)
    assert not any(exists(s.location) for s in replaced)  # gone from the bucket
    assert DatasourceReader(store, "s3ds").to_arrow().num_rows == 46

    # a job killed mid-write: an attempt with a report written and a Parquet upload never completed, and an
    # attempt with nothing but an unfinished upload (no object any listing shows)
    run = deep_storage.run_uri(base, "s3ds", "r1")
    dead = deep_storage.attempt_uri(deep_storage.join(run, "group=0", "replica=0"), "20260101T000000Z-dead0001")
    ghost = deep_storage.attempt_uri(deep_storage.join(run, "group=1", "replica=0"), "20260101T000000Z-dead0002")
    deep_storage.write_json(deep_storage.join(dead, "splits", "split-00000.json"), {"killed": True})
    for attempt in (dead, ghost):
        key = deep_storage.join(attempt, "segments", "part-0.parquet").split("/", 3)[3]
        s3_uploads._request(attempt, "POST", object_store.bucket, key, {"uploads": ""})
    assert len(s3_uploads.incomplete_uploads(run)) == 2
    orphans = find_orphans(store, spec, ["r1"])
    assert sorted(o.uri for o in orphans) == sorted([dead, ghost])
    remove_orphans(store, "s3ds", orphans, "test")
    assert s3_uploads.incomplete_uploads(run) == [] and objects(dead) == [] and find_orphans(store, spec, ["r1"]) == []
    assert DatasourceReader(store, "s3ds").to_arrow().num_rows == 46  # the published attempts untouched

