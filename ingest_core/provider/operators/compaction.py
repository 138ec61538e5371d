"""The compaction DAG's tasks (`<dataSource>.compaction`): the supervisor's compaction steps
(`supervisor.compaction`: search, publish, kill) through the adapter every step shares (`run.airflow_step`);
the jobs' typed inputs (`handover.job_input.CompactionInput`, as JSON) go to XCom."""

from __future__ import annotations

from typing import Any

from ingest_core.core.spec import DatasourceSpec
from ingest_core.provider.operators.run import airflow_step


def search_task(spec: DatasourceSpec, run_id: str) -> list[dict[str, Any]]:
    from ingest_core.supervisor.compaction import search_step  # the steps load as their task runs: see STEPS

    return [j.to_json() for j in airflow_step(lambda: search_step(spec, run_id))]


def publish_task(spec: DatasourceSpec, jobs: list[Any] | None) -> dict[str, Any]:
    """`jobs`: the search's values, as XCom holds them."""
    from ingest_core.supervisor.compaction import compaction_input_of, publish_step

    return airflow_step(lambda: publish_step(spec, [compaction_input_of(j) for j in jobs or []]))


def kill_task(spec: DatasourceSpec) -> dict[str, Any]:
    from ingest_core.supervisor.compaction import kill_step

    return airflow_step(lambda: kill_step(spec))
