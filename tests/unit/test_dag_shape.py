"""The DAGs a spec makes (`provider.dag_factory`): their tasks, and one XCom per task that returns a value."""

from __future__ import annotations

from datetime import timedelta

import yaml
from hypothesis import given, settings, strategies as st

from ingest_core.core.spec import parse_spec


def test_each_task_pushes_its_result_as_one_xcom(monkeypatch):
    # Airflow reads a task annotated `-> dict` as multiple_outputs: an XCom per key besides the whole, a write
    # to Airflow's database each, 0.2-0.4 s per task of a run
    monkeypatch.setenv("INGEST_KAFKA_BOOTSTRAP", "127.0.0.1:9")
    from ingest_core.provider.dag_factory import build_compaction_dag, build_dag

    with open("dags/datasources/wikipedia.yaml") as f:
        raw = yaml.safe_load(f)
    spec = parse_spec({**raw, "compaction": {"schedule": "PT1H"}}, "wikipedia.yaml")
    ingest, compaction = build_dag(spec), build_compaction_dag(spec)
    assert [t.task_id for t in ingest.topological_sort()] == ["plan", "spark_job", "replan", "replanned_job",
                                                              "publish", "report"]
    assert [t.task_id for t in compaction.topological_sort()] == ["search", "compact", "publish", "kill"]
    for dag in (ingest, compaction):
        pushing = [t for t in dag.tasks if hasattr(t, "multiple_outputs")]
        assert pushing and {t.task_id: t.multiple_outputs for t in pushing} == {t.task_id: False for t in pushing}


@given(completion_s=st.integers(1, 86_400), gate_s=st.none() | st.integers(0, 86_400))
@settings(max_examples=40, deadline=None)
def test_an_airflow_run_ends_at_the_projects_deadline(completion_s, gate_s):
    # a run whose task died without a word stayed RUNNING in Airflow long past completionTimeout, and with one run
    # at a time nothing else could start (issue 46): the run's own deadline (its data gate's maxWait, then
    # completionTimeout from its plan on) ends it, by Airflow's dagrun_timeout, with a minute for plan and report
    import os

    os.environ.setdefault("INGEST_KAFKA_BOOTSTRAP", "127.0.0.1:9")
    from ingest_core.provider.dag_factory import RUN_MARGIN, build_dag

    with open("dags/datasources/wikipedia.yaml") as f:
        raw = yaml.safe_load(f)
    raw["spec"]["ioConfig"]["completionTimeout"] = f"PT{completion_s}S"
    micro = {k: v for k, v in raw.get("microbatch", {}).items() if k != "dataGate"}
    if gate_s is not None:
        micro["dataGate"] = {"minRecords": 1, "maxWait": f"PT{gate_s}S"}
    dag = build_dag(parse_spec({**raw, "microbatch": micro}, "wikipedia.yaml"))
    deadline = timedelta(seconds=completion_s + (gate_s or 0))
    assert dag.dagrun_timeout == deadline + RUN_MARGIN
    assert RUN_MARGIN <= timedelta(minutes=1)


def test_a_re_plan_is_a_step_of_its_own_and_the_jobs_are_the_only_tasks_that_run_spark(monkeypatch):
    """The publish used to plan a run again and run its Spark jobs inside its own task (`run_replanned_jobs`): a
    re-plan is the `replan` task, its jobs the mapped `replanned_job` tasks, and publish waits for both. Every
    Spark job task is handed the typed input its upstream step returns (XCom), not argv. No task is a no-op: a
    run with nothing to read maps `spark_job` over no job, one with nothing to plan again `replanned_job`, and the
    plan task skips replan and its jobs when the run continues from no run that may still fail; replan and
    publish tolerate a skipped upstream (`all_done`) and end skipped themselves without a plan
    (tests/system/test_dag.py)."""
    monkeypatch.setenv("INGEST_KAFKA_BOOTSTRAP", "127.0.0.1:9")
    from ingest_core.provider.dag_factory import build_dag
    from ingest_core.provider.operators.plan import REPLAN_TASKS, PlanOperator
    from ingest_core.provider.operators.spark_job import IngestSparkSubmitOperator

    with open("dags/datasources/wikipedia.yaml") as f:
        dag = build_dag(parse_spec(yaml.safe_load(f), "wikipedia.yaml"))
    spark = {t.task_id for t in dag.tasks if issubclass(t.operator_class, IngestSparkSubmitOperator)
             or t.operator_class is IngestSparkSubmitOperator}
    assert spark == {"spark_job", "replanned_job"}
    assert isinstance(dag.get_task("plan"), PlanOperator) and dag.get_task("plan").upstream_task_ids == set()
    assert dag.get_task("replanned_job").upstream_task_ids == {"replan"}
    assert dag.get_task("replan").upstream_task_ids == {"plan", "spark_job"}
    assert dag.get_task("publish").upstream_task_ids == {"plan", "spark_job", "replan", "replanned_job"}
    assert {t: dag.get_task(t).trigger_rule for t in ("replan", "publish", "report")} == dict.fromkeys(
        ("replan", "publish", "report"), "all_done")
    assert set(REPLAN_TASKS) <= {t.task_id for t in dag.tasks}
    for task_id in ("spark_job", "replanned_job"):
        assert set(dag.get_task(task_id).expand_input.value) == {"job"}  # the typed input, from XCom
