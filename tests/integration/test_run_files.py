"""The files a run leaves in deep storage, read back by the DAG's tasks, on a real filesystem (no broker)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from helpers import make_spec

from ingest_core.core.errors import IngestError
from ingest_core.handover import deep_storage
from ingest_core.handover.report import (
    GroupReport,
    GroupState,
    ReportFormatError,
    RowStats,
)
from ingest_core.supervisor import publish
from ingest_core.supervisor.publish import group_reports


def _report_uri(spec, run_id: str, group_id: int, replica: int = 0) -> str:
    group = deep_storage.group_uri(deep_storage.base_for(spec), spec.datasource, run_id, group_id, replica)
    return deep_storage.join(deep_storage.attempt_uri(group, "a1"), "report.json")


def test_a_storage_fault_reading_a_report_is_retried_then_fails_loudly_never_a_failed_group(tmp_path, monkeypatch):
    monkeypatch.setattr(publish, "REPORT_READ_RETRY_S", 0.05)  # retry fast
    spec = make_spec("127.0.0.1:1", topic="t", replicas=2,
                     microbatch={"deepStorage": {"uri": (tmp_path / "deep").as_uri()}})
    good = GroupReport(spec.datasource, "r1", 0, 0, GroupState.SUCCESS, RowStats(), [], [])
    deep_storage.write_json(_report_uri(spec, "r1", 0, 0), good.to_json())
    # no report at all from replica 1 (its job died before writing one): that alone means "no report"
    deep_storage.write_json(_report_uri(spec, "r1", 0, 1).replace("/report.json", "/splits/split-00000.json"), {})
    assert [r.report for r in group_reports(spec, "r1", 0)] == [good]

    # replica 0's report cannot be read (a link to a directory: an I/O error, not "not found")
    path = Path(_report_uri(spec, "r2", 0, 0).removeprefix("file://"))
    path.parent.mkdir(parents=True)
    (tmp_path / "a-directory").mkdir()
    path.symlink_to(tmp_path / "a-directory")
    with pytest.raises(IngestError, match=r"could not read the report of task group 0 \(replica 0, attempt a1\) of run r2"):
        group_reports(spec, "r2", 0)

    # a transient fault: the read succeeds on a retry (the link swapped atomically to the report)
    deep_storage.write_json((tmp_path / "report.json").as_uri(), good.to_json())
    (tmp_path / "healed").symlink_to(tmp_path / "report.json")
    monkeypatch.setattr(publish, "REPORT_READ_ATTEMPTS", 40)
    timer = threading.Timer(0.2, os.replace, (tmp_path / "healed", path))
    timer.start()
    try:
        assert [r.report for r in group_reports(spec, "r2", 0)] == [good]
    finally:
        timer.join()


def test_a_report_that_is_not_one_fails_the_read_naming_its_file(tmp_path):
    spec = make_spec("127.0.0.1:1", topic="t", microbatch={"deepStorage": {"uri": (tmp_path / "deep").as_uri()}})
    uri = _report_uri(spec, "r1", 0)
    deep_storage.write_json(uri, {"groupId": 0, "state": "SUCCESS"})
    with pytest.raises(ReportFormatError, match=r"the report of task group 0 \(replica 0, attempt a1\) of run r1 at "
                                                 rf"{uri} is not a task group report .*it has no 'datasource'"):
        group_reports(spec, "r1", 0)
    Path(uri.removeprefix("file://")).write_text('{"groupId": 0, "sta')
    with pytest.raises(ReportFormatError, match=rf"at {uri} is not a task group report .*\(not JSON: "):
        group_reports(spec, "r1", 0)


SECRET = "l1teral-Pa55word!"


def test_a_literal_secret_reaches_the_jobs_consumer_but_is_never_staged_stored_or_logged(tmp_path, store, caplog):
    import json

    import yaml

    from ingest_core.core.spec import load_spec
    from ingest_core.kafka.config import KafkaClientConfig
    from ingest_core.supervisor.staging import stage_spec
    from ingest_core.spark.job_args import load_job_spec
    from ingest_core.supervisor.planning import Supervisor

    raw = make_spec("127.0.0.1:1", topic="t").to_raw()
    raw["spec"]["ioConfig"]["consumerProperties"].update({"security.protocol": "SASL_SSL", "sasl.password": SECRET})
    spec_file = tmp_path / "dags" / "wiki.yaml"
    spec_file.parent.mkdir()
    spec_file.write_text(yaml.safe_dump(raw))
    spec = load_spec(spec_file)
    folder = (tmp_path / "deep" / "wiki" / "r1").as_uri()

    caplog.set_level("DEBUG")
    staged_at = stage_spec(spec, folder)  # what the plan task stages in each group's input (and the task's log)
    staged = deep_storage.read_text(deep_storage.join(folder, "spec.json"))
    assert SECRET not in staged and SECRET not in json.dumps(staged_at)
    job_spec = load_job_spec(*staged_at)  # what the job's driver does first
    assert KafkaClientConfig.from_properties(job_spec.io_config.consumer_properties).properties["sasl.password"] \
        == SECRET
    assert SECRET not in json.dumps(job_spec.to_raw())  # what the executors get beside the resolved client config

    Supervisor(spec, store).register()
    (registered,) = store.datasources.spec_history("wiki")
    assert SECRET not in json.dumps(registered["spec"], default=str)
    assert SECRET not in caplog.text
