"""The publish task: the supervisor's publish step (`supervisor.publish.publish_step`)."""

from __future__ import annotations

from typing import Any

from ingest_core.core.spec import DatasourceSpec
from ingest_core.provider.operators.run import RunContext, airflow_step


def publish_task(spec: DatasourceSpec, run: RunContext, planned: bool) -> dict[str, Any]:
    """The publish's summary (XCom, the Asset event's extra). `planned`: the run's plan task succeeded (the
    publish runs whatever its upstream did: without a plan it ends skipped)."""
    from ingest_core.supervisor.publish import publish_step  # the steps load as their task runs: see STEPS

    return airflow_step(lambda: publish_step(spec, run.run_id, planned=planned))
