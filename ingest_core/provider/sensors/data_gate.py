"""DataGateSensor: a run's first step when the spec has `microbatch.dataGate`; the decision is the supervisor's
(`supervisor.gate.gate_step`), this sensor asks it and waits.

It passes at once when at least `minRecords` new records are there (or the run already has a plan: a clear or
a retry re-executes that plan). Otherwise it defers to `NewRecordsTrigger` and frees its worker slot until
the records arrive or `maxWait` passes. With records (fewer than `minRecords`) the run goes on to plan them.
With nothing new the run ends here (`supervisor.gate.end_idle`: the datasource reads IDLE, no plan): every other
task of the run is skipped at once, whatever its trigger rule (the way `ShortCircuitOperator` skips), so none
starts a process. A broker that did not answer by maxWait is no idle topic: the run plans, and its plan step
records the failed loop.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Mapping

from airflow.sdk import BaseSensorOperator, PokeReturnValue, SkipMixin
from airflow.sdk.exceptions import AirflowFailException, AirflowSensorTimeout, TaskDeferralTimeout

from ingest_core.core.offsets import TopicPartition
from ingest_core.core.spec import DatasourceSpec
from ingest_core.provider.operators.run import RunContext, airflow_step
from ingest_core.provider.triggers.new_records import NewRecordsTrigger

if TYPE_CHECKING:
    from ingest_core.supervisor.gate import GateLook

# the trigger ends itself at maxWait; Airflow's own timeout only catches a triggerer that never ran it
TRIGGER_TIMEOUT_SLACK = timedelta(minutes=5)


class DataGateSensor(BaseSensorOperator, SkipMixin):
    """Looks once; while the gate is closed it waits in the triggerer (`NewRecordsTrigger`), never poking from
    a worker. `poke_interval` is the gate's `pokeInterval`, `timeout` its `maxWait` plus a slack."""

    ui_color = "#e8f4fa"

    ended_idle = False  # set by the run that ended here: the metrics listener then sends the datasource's figures

    def __init__(self, *, spec: DatasourceSpec, **kwargs: Any):
        gate = spec.microbatch.data_gate
        super().__init__(poke_interval=gate.poke_interval.to_timedelta(),
                         timeout=gate.max_wait.to_timedelta() + TRIGGER_TIMEOUT_SLACK, **kwargs)
        self.spec = spec

    def look(self, context: Any) -> GateLook:
        from ingest_core.supervisor.gate import gate_step  # the steps load as their task runs (`operators.run`)

        run_id = RunContext.from_airflow(context).run_id
        return airflow_step(lambda: gate_step(self.spec, run_id))

    def poke(self, context: Any) -> PokeReturnValue:
        look = self.look(context)
        return PokeReturnValue(look.is_open, look.event)

    def execute(self, context: Any) -> dict[str, Any]:
        gate = self.spec.microbatch.data_gate
        look = self.look(context)
        if look.planned:
            self.log.info("run %s already has a plan: the gate does not wait again", context["dag_run"].run_id)
            return look.event
        if look.is_open:
            self.log.info("data gate open: %d new records (minRecords %d)", look.records, gate.min_records)
            return look.event
        self.log.info("data gate: %d of %d new records; deferring for up to %s", look.records, gate.min_records,
                      gate.max_wait.to_timedelta())
        self.defer(trigger=self.trigger(look.starts), method_name="execute_complete",
                   timeout=timedelta(seconds=self.timeout))

    def trigger(self, starts: Mapping[TopicPartition, int]) -> NewRecordsTrigger:
        """Its kwargs are stored in Airflow's database (JSON), and a deferred task resumes with them."""
        gate = self.spec.microbatch.data_gate
        return NewRecordsTrigger(
            spec_path=str(self.spec.source),
            starts=[[tp.topic, tp.partition, offset] for tp, offset in sorted(starts.items())],
            min_records=gate.min_records,
            deadline=(datetime.now(timezone.utc) + gate.max_wait.to_timedelta()).isoformat(),
            poke_interval_s=self.poke_interval)

    def execute_complete(self, context: Any, event: dict[str, Any]) -> dict[str, Any]:
        gate = self.spec.microbatch.data_gate
        if event["status"] == "refused":
            raise AirflowFailException(event["error"])
        if event["status"] == "ready":
            self.log.info("data gate open: %d new records (minRecords %d)", event["records"], gate.min_records)
        elif event.get("records"):
            self.log.info("data gate: maxWait %s passed with %d new records (< minRecords %d): ingesting them",
                          gate.max_wait, event["records"], gate.min_records)
        elif event.get("error"):
            self.log.info("data gate: maxWait %s passed with nothing new and the broker not answering (%s): the "
                          "plan step tries it again", gate.max_wait, event["error"])
        else:
            self.end_idle(context)
        return event

    def end_idle(self, context: Any) -> None:
        """Nothing new by maxWait: the run ends with this task; its other tasks are skipped, none runs."""
        from ingest_core.supervisor.gate import end_idle

        state, _ = airflow_step(lambda: end_idle(self.spec, RunContext.from_airflow(context).run_id))
        self.log.info("data gate: maxWait %s passed with nothing new: the run ends here, the datasource reads %s; "
                      "its other tasks are skipped", self.spec.microbatch.data_gate.max_wait, state.value)
        self.ended_idle = True
        self.skip(context["ti"], context["task"].get_flat_relatives(upstream=False))

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Any) -> Any:
        # Airflow's deferral timeout fires only when no triggerer ran the trigger (it ends itself at maxWait): an
        # outage, so the task fails and Airflow retries it, as before; a sensor's timeout would fail it for good.
        try:
            return super().resume_execution(next_method, next_kwargs, context)
        except AirflowSensorTimeout as exc:
            raise TaskDeferralTimeout(*exc.args) from exc
