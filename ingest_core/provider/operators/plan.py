"""The plan task (`PlanOperator`: the data gate, then the supervisor's plan step `supervisor.run.plan_step`) and
the replan task (the re-plan step `supervisor.replan.replan_step`); their jobs' typed inputs
(`handover.job_input.JobInput`, as JSON) go to XCom for the mapped Spark job tasks (`spark_job`, `replanned_job`).

With `microbatch.dataGate` the plan task first asks the gate (`supervisor.gate.gate_step`): open (or the run
already has a plan: a clear or a retry re-executes it) -> it plans at once; closed -> it defers to
`NewRecordsTrigger` and frees its worker slot until the records arrive or maxWait passes. On resume: records ->
it plans them (fewer than minRecords too); nothing new -> the run ends here (`supervisor.gate.end_idle`: the
datasource reads IDLE, no plan) and every other task of the run is skipped at once, whatever its trigger rule
(as `ShortCircuitOperator` skips), so none starts a process; a broker that did not answer by maxWait is no idle
topic -> it plans, and the plan step records the failed loop; credentials refused -> it fails without retries.

A run with nothing to read hands `spark_job` no job (the mapped task is skipped: no process), and a plan that
continues from no run that may still fail (`supervisor.replan.replan_wanted`) skips `replan` and `replanned_job`
itself: a normal run is plan, its Spark jobs, publish and report. publish and replan run whatever their upstream
did (trigger rule `all_done`) and end skipped when the plan did not succeed (`planned`)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Mapping

import structlog
from airflow.sdk import BaseOperator, SkipMixin

from ingest_core.core.offsets import TopicPartition
from ingest_core.core.spec import DatasourceSpec
from ingest_core.provider.operators.run import airflow_step, run_context
from ingest_core.provider.triggers.new_records import NewRecordsTrigger

if TYPE_CHECKING:
    from ingest_core.supervisor.gate import GateLook

PLAN_TASK, REPLAN_TASKS = "plan", ("replan", "replanned_job")  # (provider.dag_factory's task ids)
# the trigger ends itself at maxWait; Airflow's own timeout only catches a triggerer that never ran it
TRIGGER_TIMEOUT_SLACK = timedelta(minutes=5)

# The one Spark job of a run with nothing to read, as runs planned before this version handed it (their XCom
# may still be in flight across an upgrade): it succeeds at once.
NO_JOB: dict[str, Any] = {}


class PlanOperator(BaseOperator, SkipMixin):
    """The run's first task: its data gate (when the spec has one), then its plan. Its result (XCom) is the job
    list `spark_job` expands over. A deferral's timeout (no triggerer ran the trigger: an outage) fails the try
    and Airflow retries it (BaseOperator's `resume_execution`), as the gate's sensor did."""

    ui_color = "#e8f4fa"

    ended_idle = False  # set by the run that ended here: the metrics listener then sends the datasource's figures

    def __init__(self, *, spec: DatasourceSpec, **kwargs: Any):
        super().__init__(**kwargs)
        self.spec = spec

    def execute(self, context: Any) -> list[dict[str, Any]] | None:
        gate = self.spec.microbatch.data_gate
        if gate is not None:
            look = self.look(context)
            if look.planned:
                self.log.info("run %s already has a plan: the gate does not wait again", context["dag_run"].run_id)
            elif look.is_open:
                self.log.info("data gate open: %d new records (minRecords %d)", look.records, gate.min_records)
            else:
                self.log.info("data gate: %d of %d new records; deferring for up to %s", look.records,
                              gate.min_records, gate.max_wait.to_timedelta())
                self.defer(trigger=self.trigger(look.starts), method_name="execute_complete",
                           timeout=gate.max_wait.to_timedelta() + TRIGGER_TIMEOUT_SLACK)
        return self.plan(context)

    def execute_complete(self, context: Any, event: dict[str, Any]) -> list[dict[str, Any]] | None:
        from airflow.sdk.exceptions import AirflowFailException

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
            return self.end_idle(context)
        return self.plan(context)

    def look(self, context: Any) -> GateLook:
        from ingest_core.supervisor.gate import gate_step  # the steps load as their task runs (`operators.run`)

        run_id = context["dag_run"].run_id
        return airflow_step(lambda: gate_step(self.spec, run_id))

    def trigger(self, starts: Mapping[TopicPartition, int]) -> NewRecordsTrigger:
        """Its kwargs are stored in Airflow's database (JSON), and a deferred task resumes with them."""
        gate = self.spec.microbatch.data_gate
        return NewRecordsTrigger(
            spec_path=str(self.spec.source),
            starts=[[tp.topic, tp.partition, offset] for tp, offset in sorted(starts.items())],
            min_records=gate.min_records,
            deadline=(datetime.now(timezone.utc) + gate.max_wait.to_timedelta()).isoformat(),
            poke_interval_s=gate.poke_interval.to_timedelta().total_seconds())

    def end_idle(self, context: Any) -> None:
        """Nothing new by maxWait: the run ends with this task (a success with no result); its other tasks are
        skipped, none runs. (`skip` raises: Airflow's task runner skips them and ends this task.)"""
        from ingest_core.supervisor.gate import end_idle

        state, _ = airflow_step(lambda: end_idle(self.spec, context["dag_run"].run_id))
        self.log.info("data gate: maxWait %s passed with nothing new: the run ends here, the datasource reads %s; "
                      "its other tasks are skipped", self.spec.microbatch.data_gate.max_wait, state.value)
        self.ended_idle = True
        self.skip(context["ti"], context["task"].get_flat_relatives(upstream=False))

    def plan(self, context: Any) -> list[dict[str, Any]]:
        """The job list; when the run can never be planned again, `replan` and `replanned_job` are skipped."""
        from ingest_core.supervisor.replan import replan_wanted

        run = run_context(self.spec, context)
        jobs = plan_task(self.spec, run)
        if airflow_step(lambda: replan_wanted(self.spec, run.run_id)):
            return jobs
        self.log.info("run %s continues from no run that may still fail: nothing can plan it again (%s skipped)",
                      run.run_id, " and ".join(REPLAN_TASKS))
        dag = context["task"].dag
        push_result(context["ti"], jobs)
        self.skip(context["ti"], [dag.get_task(t) for t in REPLAN_TASKS])
        return jobs  # (not reached: `skip` raises)


def push_result(ti: Any, result: Any) -> None:
    """Push the task's result (XCom) as Airflow's task runner does after `execute` returns, with the length the
    mapped `spark_job` expands by: `SkipMixin.skip` ends the task by raising, before the runner would push it."""
    from airflow.sdk.execution_time.task_runner import _push_xcom_if_needed  # Airflow 3.3's own push

    _push_xcom_if_needed(result, ti, structlog.get_logger(__name__))


def plan_task(spec: DatasourceSpec, run: Any) -> list[dict[str, Any]]:
    """One job input per task group x replica; none when there is nothing to read (`spark_job` is then skipped)."""
    from ingest_core.supervisor.run import plan_step  # the steps load as their task runs: see STEPS

    check_spark_connection(spec.microbatch.spark.conn_id)
    return [j.to_json() for j in airflow_step(lambda: plan_step(spec, run.run_id, run.end_time))]


def replan_task(spec: DatasourceSpec, run: Any, planned: bool) -> list[dict[str, Any]]:
    """The jobs of the run planned again (`supervisor.replan.replan_step`); none when nothing is (`replanned_job`
    is then skipped). `planned`: the run's plan task succeeded."""
    from ingest_core.supervisor.replan import replan_step

    return [j.to_json() for j in airflow_step(lambda: replan_step(spec, run.run_id, planned=planned))]


def plan_succeeded(context: Any) -> bool:
    """Whether this run's plan task succeeded: its result (XCom) is there. A task of a run with nothing to read
    finds [] there; a plan that failed, was skipped or ended the run idle left none (a new try clears it)."""
    return context["ti"].xcom_pull(task_ids=PLAN_TASK) is not None


def check_spark_connection(conn_id: str) -> None:
    """Without the connection the Spark provider silently submits to YARN: fail clearly instead."""
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowFailException

    try:
        BaseHook.get_connection(conn_id)
    except Exception as exc:  # noqa: BLE001 - Airflow raises AirflowNotFoundException, varying by version
        # configuration, not a transient failure: fail without retries
        raise AirflowFailException(
            f"the Spark connection {conn_id!r} does not exist ({exc}). Create it, e.g. "
            f"AIRFLOW_CONN_{conn_id.upper()}='{{\"conn_type\": \"spark\", \"host\": \"local[*]\"}}' for local mode "
            "or host spark://master:7077 for a standalone cluster, or set microbatch.spark.connId in the spec."
        ) from None
