"""The report task: the supervisor's report step (`supervisor.report.report_step`)."""

from __future__ import annotations

from typing import Any

from ingest_core.core.spec import DatasourceSpec
from ingest_core.provider.operators.run import RunContext, airflow_step


def report_task(spec: DatasourceSpec, run: RunContext, planned: bool) -> dict[str, Any]:
    """`planned`: this attempt's plan step succeeded. Skips when a re-run found the run superseded."""
    from ingest_core.supervisor.report import report_step  # the steps load as their task runs: see STEPS

    return airflow_step(lambda: report_step(spec, run.run_id, planned))
