"""Published output is immutable: every job attempt writes a folder of its own, nothing deletes a folder a
segment points into, and only attempts of final runs that nothing was published from are removed."""

from __future__ import annotations

import json
import subprocess
import sys

from helpers import ingest_run, spec_from

from ingest_core.handover import deep_storage
from ingest_core.store.cleanup import find_orphans, unreferenced
from ingest_core.store.reader import DatasourceReader

SCHEMA = {"timestampSpec": {"column": "ts", "format": "millis"}, "dimensionsSpec": {"dimensions": ["page"]},
          "granularitySpec": {"segmentGranularity": "HOUR", "queryGranularity": "NONE", "rollup": False}}


def test_a_folder_is_unreferenced_when_no_location_lies_under_it():
    base = "file:///deep/ds/r1/group=0/replica=0"
    folders = [f"{base}/attempt=1", f"{base}/attempt=10", f"{base}/attempt=2", f"{base}/attempt=3/"]
    locations = [f"{base}/attempt=1/segments/__segment=0/part-0.parquet",  # not under attempt=10
                 f"{base}/attempt=3/segments/__segment=0/part-1.parquet", "file:///deep/ds/r0/legacy.parquet"]
    assert unreferenced(folders, locations) == [f"{base}/attempt=10", f"{base}/attempt=2"]
    assert unreferenced(folders, []) == folders


def test_a_re_executed_job_of_a_published_run_changes_nothing_and_cleanup_removes_only_its_output(
        spark, broker, store, tmp_path):
    from ingest_core.spark.job import GroupJob, run_group
    from ingest_core.supervisor.planning import Supervisor

    topic = broker.create_topic(partitions=2)
    for p in range(2):
        broker.produce(topic, [json.dumps({"ts": 1_790_000_000_000 + i, "page": f"p{i % 3}"}).encode()
                               for i in range(p * 100, p * 100 + 50)], partition=p)
    deep = (tmp_path / "deep").as_uri()
    spec = spec_from(broker.bootstrap, topic, SCHEMA, io={"taskCount": 1},
                     microbatch={"deepStorage": {"uri": deep}})
    plan, _, _ = ingest_run(spark, store, spec, "r1", deep)

    def times() -> list[int]:
        return sorted(DatasourceReader(store, "ds").to_arrow().column("__time").cast("int64").to_pylist())

    expected = sorted(1_790_000_000_000 + i for p in range(2) for i in range(p * 100, p * 100 + 50))
    assert times() == expected
    # what clearing one spark_job task of the published run re-executes: the same arguments, the same folder
    group = deep_storage.group_uri(deep, "ds", "r1", 0)
    job = GroupJob.of_plan(spec, plan, 0, 0, group)
    assert run_group(spark, job, 30).succeeded and len(deep_storage.attempt_folders(group)) == 2
    assert times() == expected  # every row once: the published files are untouched, the new ones unpublished

    # a run in flight keeps all its output, even before it publishes
    broker.produce(topic, [json.dumps({"ts": 1_790_000_001_000, "page": "p"}).encode()], partition=0)
    r2 = Supervisor(spec, store).plan("r2").plan
    run_group(spark, GroupJob.of_plan(spec, r2, 0, 0, deep_storage.group_uri(deep, "ds", "r2", 0)), 30)
    (orphan,) = find_orphans(store, spec)
    assert (orphan.run_id, orphan.uri) == ("r1", job.attempt_uri)

    def cleanup(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "ingest_core.service.cli", "--metadata-url", store.url, "cleanup", "ds",
                               "--dags-folder", str(tmp_path), *args], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert cleanup().splitlines() == [f"would remove {job.attempt_uri} (run r1)",  # a dry run by default
                                      "1 attempt folders of final runs hold nothing published; --yes removes them"]
    assert len(deep_storage.attempt_folders(group)) == 2
    assert f"remove {job.attempt_uri} (run r1)" in cleanup("--yes", "--actor", "tester")
    (published,) = deep_storage.attempt_folders(group)
    assert all(s.location.startswith(published + "/") for s in store.segment_records.of("ds", used_only=False))
    assert times() == expected and find_orphans(store, spec) == []
    (audit,) = store.audit_log.records("ds", action="cleanup")
    assert audit.actor == "tester" and audit.details == {"removed": [job.attempt_uri], "runs": ["r1"]}
