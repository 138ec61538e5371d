"""The job's typed input (`handover.job_input`), staged by the plan step (`supervisor.staging`) on a real
filesystem: each job reads its own group's input and nothing else, a run an earlier version planned (argv
naming plan.json) still runs, and the publish reads each report once. No broker: the plans are made by the
pure planner."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest
from helpers import make_spec, plan_next, sqlite_store

from ingest_core.core.offsets import OffsetRange, StartOffset, StartSource, TopicPartition
from ingest_core.core.planner import PlanRequest, plan_run
from ingest_core.handover import deep_storage
from ingest_core.handover.job_input import BadJobInput, CompactionInput, GroupInput, JobInput
from ingest_core.handover.report import GroupReport, SplitReport

T0 = datetime(2026, 11, 22, 10, tzinfo=timezone.utc)


def spec_in(tmp_path, **io):
    return make_spec("127.0.0.1:9", "wiki", topic="edits", microbatch={"deepStorage": {"uri": (tmp_path / "deep")
                                                                                         .as_uri()}}, **io)


def plan_of(partitions: int, task_count: int, run_id: str = "r1"):
    tps = [TopicPartition("edits", p) for p in range(partitions)]
    return plan_run(PlanRequest(datasource="wiki", run_id=run_id, created_at=T0,
                                starts={tp: StartOffset(0, StartSource.EARLIEST) for tp in tps},
                                latest={tp: 10 + tp.partition for tp in tps}, task_count=task_count,
                                topic_ids={"edits": "id-1"}))


class ReadsSeen:
    """Every deep-storage file read, by URI (the real reads still happen)."""

    def __init__(self, monkeypatch):
        self.uris: list[str] = []
        real = deep_storage.read_text

        def read_text(uri: str) -> str:
            self.uris.append(deep_storage.normalize_uri(uri))
            return real(uri)

        monkeypatch.setattr(deep_storage, "read_text", read_text)


def test_each_job_reads_only_its_own_groups_input(tmp_path, monkeypatch):
    from ingest_core.spark.job_args import load_job
    from ingest_core.supervisor.staging import stage_plan

    spec = spec_in(tmp_path, taskCount=4, replicas=2)
    plan = plan_of(40, 4)
    jobs = stage_plan(spec, plan)
    assert sorted((j.group_id, j.replica) for j in jobs) == [(g, r) for g in range(4) for r in range(2)]
    folder = deep_storage.run_uri(deep_storage.base_for(spec), "wiki", "r1")
    assert not deep_storage.list_files(folder, "plan.json")  # the whole plan is staged nowhere
    seen = ReadsSeen(monkeypatch)
    for job in jobs:
        seen.uris.clear()
        # through XCom and spark-submit's argv, as the DAG hands it over
        given = JobInput.from_json(json.loads(json.dumps(job.to_json())))
        loaded = load_job(given)
        assert loaded.group == plan.group(job.group_id) and loaded.replica == job.replica
        assert (loaded.run_id, loaded.input.created_at, dict(loaded.input.topic_ids)) == ("r1", T0, {"edits": "id-1"})
        assert loaded.output_uri == deep_storage.group_uri(deep_storage.base_for(spec), "wiki", "r1", job.group_id,
                                                           job.replica)
        assert seen.uris == [deep_storage.normalize_uri(job.input_uri),
                             deep_storage.normalize_uri(deep_storage.join(folder, "spec.json"))]
        staged = json.loads(deep_storage.read_text(job.input_uri))
        assert {p["partition"] % 4 for p in staged["group"]["partitions"]} == {job.group_id}
    # a job handed another group's number than its input's is refused, naming both
    other = JobInput(jobs[0].input_uri, 3, 0, "")
    with pytest.raises(BadJobInput, match="is task group 0's, not task group 3's"):
        load_job(other)


def test_a_re_plan_stages_new_inputs_beside_the_ones_its_earlier_jobs_read(tmp_path):
    from dataclasses import replace

    from ingest_core.supervisor.staging import stage_plan

    spec = spec_in(tmp_path, taskCount=2)
    first = stage_plan(spec, plan_of(4, 2))
    again = stage_plan(spec, replace(plan_of(4, 2), revision=1))
    assert {j.input_uri for j in first}.isdisjoint(j.input_uri for j in again)
    assert [GroupInput.from_json(deep_storage.read_json(j.input_uri), "x").revision for j in first + again] == [
        0, 0, 1, 1]


def test_an_input_of_an_unknown_version_is_refused_clearly(tmp_path):
    staged = GroupInput.of_plan(plan_of(2, 1), 0, "file:///spec.json").to_json()
    with pytest.raises(BadJobInput, match=r"task group input version 2, this job reads version 1: run the job with "
                                          r"the version of this project that planned the run"):
        GroupInput.from_json({**staged, "version": 2}, "the input")
    with pytest.raises(BadJobInput, match=r"not a task group's input \(KeyError"):
        GroupInput.from_json({k: v for k, v in staged.items() if k != "group"}, "the input")


def test_a_job_of_a_run_an_earlier_version_planned_still_runs_its_own_group(tmp_path, monkeypatch):
    """Upgrading with a run in flight: its spark_job tasks' XCom holds the old argv, naming the whole plan.json.
    The job's input is staged from it once; the job then reads its own group's input like any other."""
    from ingest_core.spark.job_args import load_job
    from ingest_core.supervisor.run import RunFailedForGood, job_input_of
    from ingest_core.supervisor.staging import run_folder, stage_spec

    spec = spec_in(tmp_path, taskCount=2)
    plan = plan_of(6, 2)
    folder = run_folder(spec, "r1")
    # what the earlier version's plan step staged and handed over
    spec_uri, _ = stage_spec(spec, folder)
    plan_uri = deep_storage.join(folder, "plan.json")
    deep_storage.write_json(plan_uri, plan.to_json())
    output = deep_storage.group_uri(deep_storage.base_for(spec), "wiki", "r1", 1, 0)
    old_args = ["--spec", spec_uri, "--plan", plan_uri, "--group", "1", "--replica", "0", "--output", output]

    job = job_input_of(old_args)
    assert (job.group_id, job.replica, job.output_uri) == (1, 0, output)
    seen = ReadsSeen(monkeypatch)
    loaded = load_job(job)
    assert loaded.group == plan.group(1) and loaded.run_id == "r1"
    assert deep_storage.normalize_uri(plan_uri) not in seen.uris  # staged once: the job itself never reads it
    assert job_input_of(old_args) == job  # a retry finds it staged

    with pytest.raises(RunFailedForGood, match="name no plan, spec and task group"):
        job_input_of(["--spec", spec_uri, "--group", "1"])
    with pytest.raises(RunFailedForGood, match="not a Spark job's input"):
        job_input_of({"input": "x"})


def test_a_compaction_job_of_an_earlier_version_keeps_its_input():
    given = CompactionInput("file:///c/spec.json", "file:///c/0/job.json")
    assert CompactionInput.from_json(json.loads(json.dumps(given.to_json()))) == given
    # the search of an earlier version handed its jobs argv: still the same job
    assert CompactionInput.from_json(given.to_args()) == given
    for bad in (["--spec", "s"], {"spec": "s"}, "x"):
        with pytest.raises(BadJobInput, match="not a compaction job's input"):
            CompactionInput.from_json(bad)


def test_the_publish_reads_each_report_once(tmp_path, monkeypatch):
    from ingest_core.supervisor.publish import publish_step

    spec = spec_in(tmp_path, taskCount=2, replicas=2)
    monkeypatch.setenv("INGEST_DEEP_STORAGE", (tmp_path / "deep").as_uri())
    store = sqlite_store(tmp_path)
    try:
        plan = plan_next(store, "r1", {TopicPartition("edits", p): 10 for p in range(4)})
        store.runs.start("wiki", "r1", spec.io_config.completion_timeout.to_timedelta())
        reports = []
        for group in plan.groups:
            for replica in range(2):
                splits = [SplitReport(i, r.tp.topic, r.tp.partition, r.start, r.end)
                          for i, r in enumerate(group.splits)]
                report = GroupReport.merge("wiki", "r1", group.group_id, replica, splits, 10)
                folder = deep_storage.group_uri(deep_storage.base_for(spec), "wiki", "r1", group.group_id, replica)
                uri = deep_storage.join(deep_storage.attempt_uri(folder, "a1"), "report.json")
                deep_storage.write_json(uri, report.to_json())
                reports.append(deep_storage.normalize_uri(uri))
        seen = ReadsSeen(monkeypatch)
        summary = publish_step(spec, "r1", metadata=store)
        assert summary["publishedGroups"] == [0, 1] and not summary["alreadyPublished"]
        assert sorted(seen.uris) == sorted(reports)  # each once
        assert len(store.reports.of("wiki", "r1")) == 4  # both replicas' reports kept
        assert {OffsetRange(p.tp, p.start, p.end) for p in plan.partitions} == {
            p.range for p in store.runs.require("wiki", "r1").plan.partitions}
    finally:
        store.dispose()
