"""DataGateSensor: a run's first step when the spec has `microbatch.dataGate`.

It passes at once when at least `minRecords` new records are there (or the run already has a plan: a clear or
a retry re-executes that plan). Otherwise it defers to `NewRecordsTrigger` and frees its worker slot until
the records arrive or `maxWait` passes. Either way the run goes on to plan what there is: with nothing new
the plan is empty, no Spark job runs, nothing is published and the datasource reads IDLE.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from airflow.sdk import BaseOperator

from ingest_core.core.spec import DatasourceSpec
from ingest_core.provider.triggers.new_records import NewRecordsTrigger

# the trigger ends itself at maxWait; Airflow's own timeout only catches a triggerer that never ran it
TRIGGER_TIMEOUT_SLACK = timedelta(minutes=5)


class DataGateSensor(BaseOperator):
    ui_color = "#e8f4fa"

    def __init__(self, *, spec: DatasourceSpec, **kwargs: Any):
        super().__init__(**kwargs)
        self.spec = spec

    def execute(self, context: Any) -> dict[str, Any]:
        from ingest_core.provider.operators.run import RunContext, check_active, store
        from ingest_core.supervisor.planning import Supervisor

        gate = self.spec.microbatch.data_gate
        run = RunContext.from_airflow(context)
        metadata = store()
        check_active(metadata, self.spec.datasource)
        if metadata.get_run(self.spec.datasource, run.run_id) is not None:
            self.log.info("run %s already has a plan: the gate does not wait again", run.run_id)
            return {"status": "planned"}
        starts, records = Supervisor(self.spec, metadata).pending()
        if records >= gate.min_records:
            self.log.info("data gate open: %d new records (minRecords %d)", records, gate.min_records)
            return {"status": "ready", "records": records}
        max_wait = gate.max_wait.to_timedelta()
        self.log.info("data gate: %d of %d new records; deferring for up to %s", records, gate.min_records, max_wait)
        self.defer(
            trigger=NewRecordsTrigger(
                spec_path=str(self.spec.source),
                starts=[[tp.topic, tp.partition, offset] for tp, offset in sorted(starts.items())],
                min_records=gate.min_records,
                deadline=(datetime.now(timezone.utc) + max_wait).isoformat(),
                poke_interval_s=gate.poke_interval.to_timedelta().total_seconds()),
            method_name="execute_complete",
            timeout=max_wait + TRIGGER_TIMEOUT_SLACK,
        )

    def execute_complete(self, context: Any, event: dict[str, Any]) -> dict[str, Any]:
        gate = self.spec.microbatch.data_gate
        if event["status"] == "ready":
            self.log.info("data gate open: %d new records (minRecords %d)", event["records"], gate.min_records)
        elif event.get("records"):
            self.log.info("data gate: maxWait %s passed with %d new records (< minRecords %d): ingesting them",
                          gate.max_wait, event["records"], gate.min_records)
        else:
            self.log.info("data gate: maxWait %s passed with nothing new: the run ends IDLE%s", gate.max_wait,
                          f" (last error: {event['error']})" if event.get("error") else "")
        return event
