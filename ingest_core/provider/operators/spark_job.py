"""The Spark job tasks: the ingest job of one task group x replica (`spark_job`, and `replanned_job` for a run
planned again) and the compaction job of one interval (`compact`), over `spark-submit` or Spark Connect. Each is
handed a typed input (`handover.job_input`, from XCom) and turns it into spark-submit's argv only at that edge."""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from ingest_core.core.spec import DatasourceSpec
from ingest_core.handover.job_input import CompactionInput, JobInput
from ingest_core.provider.hooks.spark_connect import connection_url
from ingest_core.provider.operators.run import airflow_step
from ingest_core.spark.connect import run_compaction, run_job

log = logging.getLogger(__name__)

JOB_SCRIPT = Path(__file__).resolve().parents[3] / "spark_jobs" / "ingest_job.py"
COMPACT_SCRIPT = JOB_SCRIPT.with_name("compact_job.py")


class IngestSparkSubmitOperator(SparkSubmitOperator):
    """The ingest job of one task group: `spark-submit` for a `spark` connection (local, standalone, YARN,
    Kubernetes), with the spec's master override and a Python that has this package; for a `spark_connect`
    connection, a Spark Connect client inside this task (`ingest_core.spark.connect`): no JVM of its own.
    `job`: its `JobInput` as JSON, or the argv of a run an earlier version planned ({}: the no-op job an earlier
    version handed a run with nothing to read, `operators.plan.NO_JOB`)."""

    def __init__(self, *, datasource: str, job: dict | list | None = None, master: str | None = None,
                 **kwargs: Any):
        super().__init__(**kwargs)
        self.datasource = datasource
        self.job = job
        self.master = master
        self._interrupter: Any = None

    def execute(self, context: Any) -> None:
        if not self.job:
            self.log.info("nothing to read in this run: no Spark job")
            return None
        # the steps load as their task runs: operators.run
        from ingest_core.supervisor.run import check_job_wanted, job_input_of

        run_id = context["dag_run"].run_id
        airflow_step(lambda: check_job_wanted(self.datasource, run_id))
        job = airflow_step(lambda: job_input_of(self.job))
        self.application_args = job.to_args()
        try:
            return self._run(context, job)
        except Exception:
            self._fail_for_good_if_a_retry_cannot_help(job, run_id)
            raise

    def _run(self, context: Any, job: Any) -> None:
        if connection_type(self._conn_id) == "spark_connect":
            return self._over_connect(lambda url, **kw: self._connect_runner(url, job, **kw))
        env = dict(self.env_vars or {})
        env.setdefault("PATH", str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
        env.setdefault("PYSPARK_PYTHON", os.environ.get("PYSPARK_PYTHON", sys.executable))
        self.env_vars = env
        return super().execute(context)

    def _connect_runner(self, url: str, job: JobInput, **kwargs: Any) -> dict[str, Any]:
        return run_job(url, job, **kwargs)

    def _fail_for_good_if_a_retry_cannot_help(self, job: JobInput, run_id: str) -> None:
        """A job that its own report says would fail the same way again (maxParseExceptions on the same records,
        a broker refusing its credentials) fails its task without Airflow's retries: they would only delay the
        run's report by retries x retry_delay (`supervisor.publish.retry_cannot_help`)."""
        from airflow.sdk.exceptions import AirflowFailException

        from ingest_core.supervisor.publish import retry_cannot_help

        why = retry_cannot_help(job, run_id)
        if why is not None:
            raise AirflowFailException(why)

    def _over_connect(self, runner: Any) -> None:
        def keep(interrupter: Any) -> None:
            self._interrupter = interrupter

        timeout = self.execution_timeout.total_seconds() if self.execution_timeout else None
        summary = runner(connection_url(self._conn_id), timeout_s=timeout, on_session=keep)
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
    Connect as the datasource's jobs run. `job`: its `CompactionInput` as JSON (or an earlier version's argv)."""

    def execute(self, context: Any) -> None:
        from ingest_core.supervisor.compaction import compaction_input_of

        job = airflow_step(lambda: compaction_input_of(self.job))
        self.application_args = job.to_args()
        return self._run(context, job)

    def _connect_runner(self, url: str, job: CompactionInput, **kwargs: Any) -> dict[str, Any]:  # type: ignore[override]
        return run_compaction(url, job.to_args(), **kwargs)


def operator_settings(spec: DatasourceSpec) -> dict[str, Any]:
    """The settings of a datasource's Spark job operators (the DAG's mapped `spark_job`, `replanned_job` and
    `compact` tasks)."""
    micro, io = spec.microbatch, spec.io_config
    return dict(datasource=spec.datasource, application=str(JOB_SCRIPT), conn_id=micro.spark.conn_id,
                master=micro.spark.master, deploy_mode=micro.spark.deploy_mode,
                conf=dict(micro.spark.conf),  # the job sets its own defaults and required settings
                driver_memory=micro.spark.driver_memory, executor_memory=micro.spark.executor_memory,
                executor_cores=micro.spark.executor_cores, num_executors=micro.spark.num_executors,
                name=f"ingest-{spec.datasource}", execution_timeout=io.completion_timeout.to_timedelta())


def connection_type(conn_id: str) -> str | None:
    from airflow.sdk import BaseHook

    return BaseHook.get_connection(conn_id).conn_type
