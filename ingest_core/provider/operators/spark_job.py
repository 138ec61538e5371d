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
from ingest_core.handover import deep_storage
from ingest_core.provider.hooks.spark_connect import connection_url
from ingest_core.provider.operators.run import airflow_step
from ingest_core.spark.connect import run_compaction, run_job

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
        from ingest_core.supervisor.run import check_job_wanted  # the steps load as their task runs: operators.run

        run_id = context["dag_run"].run_id
        airflow_step(lambda: check_job_wanted(self.datasource, run_id))
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
        """A job that its own report says would fail the same way again (maxParseExceptions on the same records,
        a broker refusing its credentials) fails its task without Airflow's retries: they would only delay the
        run's report by retries x retry_delay (`supervisor.publish.retry_cannot_help`)."""
        from airflow.sdk.exceptions import AirflowFailException

        from ingest_core.supervisor.publish import retry_cannot_help

        why = retry_cannot_help(self.deep_storage_base, self.datasource, run_id,
                                [str(a) for a in self.application_args])
        if why is not None:
            raise AirflowFailException(why)

    def _execute_over_connect(self) -> None:
        self._over_connect(run_job)

    def _over_connect(self, runner: Any) -> None:
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
    from ingest_core.supervisor.run import stage_plan

    for args in stage_plan(spec, plan):
        if args[args.index("--replica") + 1] != "0":
            continue
        operator = IngestSparkSubmitOperator(task_id=f"spark_job_revision_{plan.revision}", application_args=args,
                                             **operator_settings(spec))
        try:
            operator.execute(context)
        except Exception as exc:  # noqa: BLE001 - the group's report says why; the publish decides
            log.warning("run %s (revision %d): the job %s failed: %s", plan.run_id, plan.revision, " ".join(args), exc)


def connection_type(conn_id: str) -> str | None:
    from airflow.sdk import BaseHook

    return BaseHook.get_connection(conn_id).conn_type
