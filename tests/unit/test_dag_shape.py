"""The DAGs a spec makes (`provider.dag_factory`): their tasks, and one XCom per task that returns a value."""

from __future__ import annotations

import yaml

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
    assert [t.task_id for t in ingest.topological_sort()] == ["plan", "spark_job", "publish", "report"]
    assert [t.task_id for t in compaction.topological_sort()] == ["search", "compact", "publish", "kill"]
    for dag in (ingest, compaction):
        pushing = [t for t in dag.tasks if hasattr(t, "multiple_outputs")]
        assert pushing and {t.task_id: t.multiple_outputs for t in pushing} == {t.task_id: False for t in pushing}
