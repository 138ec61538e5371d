"""The spark_job task: the ingest job of one task group x replica, over `spark-submit` or Spark Connect."""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from ingest_core.core.planner import Plan
from ingest_core.core.spec import DatasourceSpec
from ingest_core.executor import deep_storage
from ingest_core.provider.operators.run import final_reason, run_folder, store
from ingest_core.store.schema import utcnow

log = logging.getLogger(__name__)

JOB_SCRIPT = Path(__file__).resolve().parents[3] / "spark_jobs" / "ingest_job.py"
COMPACT_SCRIPT = JOB_SCRIPT.with_name("compact_job.py")


class IngestSparkSubmitOperator(SparkSubmitOperator):
    """The ingest job of one task group: `spark-submit` for a `spark` connection (local, standalone, YARN,
    Kubernetes), with the spec's master override and a Python that has this package; for a `spark_connect`
    connection, a Spark Connect client inside this task (`ingest_core.spark.connect`): no JVM of its own."""

    def __init__(self, *, datasource: str, deep_storage_base: str, master: str | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.datasource = datasource
        self.deep_storage_base = deep_storage_base
        self.master = master
        self._interrupter: Any = None

    def execute(self, context: Any) -> None:
        if not self.application_args:
            self.log.info("nothing to read in this run: no Spark job")
            return None
        run_id = context["dag_run"].run_id
        check_job_wanted(self.datasource, run_id)
        try:
            return self._run(context)
        except Exception:
            self._fail_for_good_if_a_retry_cannot_help(run_id)
            raise

    def _run(self, context: Any) -> None:
        if connection_type(self._conn_id) == "spark_connect":
            return self._execute_over_connect()
        env = dict(self.env_vars or {})
        env.setdefault("PATH", str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
        env.setdefault("PYSPARK_PYTHON", os.environ.get("PYSPARK_PYTHON", sys.executable))
        self.env_vars = env
        return super().execute(context)

    def _fail_for_good_if_a_retry_cannot_help(self, run_id: str) -> None:
        """A job that its own report says would fail the same way on the same records (maxParseExceptions) fails
        its task without Airflow's retries: they would only delay the run's report by retries x retry_delay."""
        from airflow.sdk.exceptions import AirflowFailException

        from ingest_core.provider.operators.publish import read_report

        args = [str(a) for a in self.application_args]
        group, replica = int(args[args.index("--group") + 1]), int(args[args.index("--replica") + 1])
        folder = deep_storage.group_uri(self.deep_storage_base, self.datasource, run_id, group, replica)
        attempts = deep_storage.attempt_folders(folder)  # oldest first: this try's is the last
        report = read_report(deep_storage.join(attempts[-1], "report.json"),
                             f"the report of task group {group} of run {run_id}") if attempts else None
        failure = report.failure if report is not None else None
        if failure is not None and not failure.retry_can_help:
            raise AirflowFailException(f"task group {group} of run {run_id} failed, and a retry would read the "
                                       f"same records: {failure.error_class}: {failure.message}")

    def _execute_over_connect(self) -> None:
        from ingest_core.spark.connect import run_job

        self._over_connect(run_job)

    def _over_connect(self, runner: Any) -> None:
        from ingest_core.provider.hooks.spark_connect import connection_url

        def keep(interrupter: Any) -> None:
            self._interrupter = interrupter

        timeout = self.execution_timeout.total_seconds() if self.execution_timeout else None
        summary = runner(connection_url(self._conn_id), [str(a) for a in self.application_args],
                         timeout_s=timeout, on_session=keep)
        self.log.info("job summary: %s", json.dumps(summary))

    def on_kill(self) -> None:
        if self._interrupter is not None:  # Connect: stop the session's queries on the shared server
            self._interrupter.interrupt()
            return
        super().on_kill()

    def _get_hook(self) -> Any:
        hook = super()._get_hook()
        if self.master:
            hook._connection["master"] = self.master
        return hook


class CompactionSparkOperator(IngestSparkSubmitOperator):
    """The compaction job of one interval (`ingest_core.spark.compaction`), over `spark-submit` or Spark
    Connect as the datasource's jobs run."""

    def execute(self, context: Any) -> None:
        return self._run(context)

    def _execute_over_connect(self) -> None:
        from ingest_core.spark.connect import run_compaction

        self._over_connect(run_compaction)


def operator_settings(spec: DatasourceSpec) -> dict[str, Any]:
    """The settings of a datasource's Spark job operator (the DAG's mapped `spark_job` task, and the jobs of a
    run planned again at its publish)."""
    micro, io = spec.microbatch, spec.io_config
    return dict(datasource=spec.datasource, deep_storage_base=deep_storage.base_for(spec),
                application=str(JOB_SCRIPT), conn_id=micro.spark.conn_id, master=micro.spark.master, deploy_mode=micro.spark.deploy_mode,
                conf=dict(micro.spark.conf),  # the job sets its own defaults and required settings
                driver_memory=micro.spark.driver_memory, executor_memory=micro.spark.executor_memory,
                executor_cores=micro.spark.executor_cores, num_executors=micro.spark.num_executors,
                name=f"ingest-{spec.datasource}", execution_timeout=io.completion_timeout.to_timedelta())


def run_replanned_jobs(spec: DatasourceSpec, plan: Plan, context: Any) -> None:
    """The Spark jobs of a run planned again (`Supervisor.replan`), one per task group (replica 0: the group
    publishes its lowest successful replica), run one after the other inside the publish task. The plan is
    staged where the run's jobs read it, so a cleared run re-executes this plan. A job that fails leaves its
    FAILED report: its group fails, as in the DAG's own jobs."""
    from ingest_core.provider.operators.plan import job_arguments, stage_spec

    folder = run_folder(spec, plan.run_id)
    plan_uri = deep_storage.join(folder, "plan.json")
    deep_storage.write_json(plan_uri, plan.to_json())
    for args in job_arguments(spec, plan, [*stage_spec(spec, folder), "--plan", plan_uri]):
        if args[args.index("--replica") + 1] != "0":
            continue
        operator = IngestSparkSubmitOperator(task_id=f"spark_job_revision_{plan.revision}", application_args=args,
                                             **operator_settings(spec))
        try:
            operator.execute(context)
        except Exception as exc:  # noqa: BLE001 - the group's report says why; the publish decides
            log.warning("run %s (revision %d): the job %s failed: %s", plan.run_id, plan.revision, " ".join(args), exc)


def check_job_wanted(datasource: str, run_id: str) -> None:
    """A job of a run that is published, superseded or expired (a re-executed or late task) does nothing."""
    from airflow.sdk.exceptions import AirflowSkipException

    metadata = store()
    metadata.runs.expire_overdue(datasource, utcnow(), f"a Spark job of run {run_id}")
    record = metadata.runs.get(datasource, run_id)
    reason = final_reason(record) if record is not None else None
    if reason:
        raise AirflowSkipException(f"{reason}: no Spark job")


def connection_type(conn_id: str) -> str | None:
    from airflow.sdk import BaseHook

    return BaseHook.get_connection(conn_id).conn_type
