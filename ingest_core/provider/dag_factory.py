"""One Airflow DAG per datasource spec: [data gate ->] plan -> Spark jobs (one per task group x replica) -> publish -> report.

`load_dags(folder)` reads every spec under `folder` and returns {dag_id: DAG}. The DAG id is the spec's
`dataSource`. A spec that does not load becomes an import error in the Airflow UI (with every problem the
spec has) while the other datasources load normally.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, Asset, task

from ingest_core.core.errors import SpecError, SpecProblem
from ingest_core.core.periods import Period
from ingest_core.core.spec import DatasourceSpec, find_spec_files, load_spec
from ingest_core.provider.operators.plan import plan_task
from ingest_core.provider.operators.publish import publish_task
from ingest_core.provider.operators.report import report_task
from ingest_core.provider.operators.run import RunContext
from ingest_core.provider.operators.spark_job import (
    IngestSparkSubmitOperator,
    operator_settings,
    run_replanned_jobs,
)
from ingest_core.provider.sensors.data_gate import DataGateSensor

DEFAULT_START = datetime(2025, 1, 1, tzinfo=timezone.utc)


def asset_for(datasource: str) -> Asset:
    return Asset(name=datasource, uri=f"ingest://datasources/{datasource}", group="ingest")


def schedule_of(spec: DatasourceSpec) -> Any:
    """Data-interval timetables, so a run for [a, b) knows its b (Airflow 3's default for a timedelta is a
    trigger timetable, whose runs have no interval)."""
    from airflow.sdk.definitions.timetables.interval import (
        CronDataIntervalTimetable,
        DeltaDataIntervalTimetable,
    )
    from dateutil.relativedelta import relativedelta

    text = spec.microbatch.schedule
    if text is not None and not text.upper().startswith(("P", "-P")):
        return CronDataIntervalTimetable(text, timezone="UTC")
    period = Period.parse(text) if text is not None else spec.io_config.task_duration
    if period.is_calendar:  # months and years have no fixed length
        return DeltaDataIntervalTimetable(relativedelta(years=period.years, months=period.months, weeks=period.weeks,
                                                        days=period.days, hours=period.hours, minutes=period.minutes,
                                                        seconds=float(period.seconds)))
    return DeltaDataIntervalTimetable(period.to_timedelta())


def build_dag(spec: DatasourceSpec) -> DAG:
    micro, io = spec.microbatch, spec.io_config
    default_args = {"retries": micro.retries, "retry_delay": micro.retry_delay.to_timedelta(), "owner": "ingest"}
    dag = DAG(
        dag_id=spec.datasource,
        description=f"Kafka -> Parquet segments for {spec.datasource} (spec {spec.source})",
        schedule=schedule_of(spec),
        start_date=micro.start_date or DEFAULT_START,
        catchup=micro.catchup,
        max_active_runs=micro.max_active_runs,
        default_args=default_args,
        is_paused_upon_creation=spec.suspended,
        tags=["ingest", f"topic:{io.topic or io.topic_pattern}"],
        doc_md=f"Datasource `{spec.datasource}` from `{spec.source}`: one run is one supervisor loop.",
    )
    asset = asset_for(spec.datasource)
    with dag:
        @task(task_id="plan")
        def plan(**context: Any) -> list[list[str]]:
            return plan_task(spec, RunContext.from_airflow(context))

        # publish and report run once the plan succeeded, whatever happened to the Spark jobs: groups that
        # succeeded are published, failed ones keep their offsets. A failed plan fails them upstream, no retries.
        @task(task_id="publish", trigger_rule="all_done_min_one_success", outlets=[asset])
        def publish(**context: Any) -> dict:
            summary = publish_task(spec, RunContext.from_airflow(context),
                                   lambda plan: run_replanned_jobs(spec, plan, context))
            context["outlet_events"][asset].extra = {
                "runId": summary["runId"], "rows": summary["rows"], "segments": len(summary["segments"]),
                "endOffsets": summary["endOffsets"]}
            return summary

        # report runs whatever happened, so a run that cannot publish is marked FAILED in the metadata store;
        # it only reads what upstream did, so retrying it would change nothing
        @task(task_id="report", trigger_rule="all_done", retries=0)
        def report(**context: Any) -> dict:
            planned = context["ti"].xcom_pull(task_ids="plan") is not None
            return report_task(spec, RunContext.from_airflow(context), planned)

        jobs = plan()
        if micro.data_gate is not None:
            DataGateSensor(task_id="data_gate", spec=spec) >> jobs
        spark = IngestSparkSubmitOperator.partial(task_id="spark_job", **operator_settings(spec)
                                                  ).expand(application_args=jobs)
        published = publish()
        reported = report()
        [jobs, spark] >> published
        [jobs, published] >> reported
    return dag


def load_dags(folder: str | Path) -> dict[str, DAG]:
    """Every datasource DAG under `folder`, plus a placeholder per spec that does not load."""
    dags: dict[str, DAG] = {}
    for path in find_spec_files(folder):
        try:
            spec = load_spec(path)
        except SpecError as exc:
            dags[f"broken_spec_{path}"] = broken_spec_dag(path, exc)
            continue
        if spec.datasource in dags:
            dags[f"broken_spec_{path}"] = broken_spec_dag(path, SpecError(str(path), [SpecProblem(
                "spec.dataSchema.dataSource", f"{spec.datasource!r} is already defined by another spec")]))
            continue
        dags[spec.datasource] = build_dag(spec)
    return dags


def broken_spec_dag(path: Path, error: Exception) -> DAG:
    """A placeholder for a spec that does not load: Airflow validates each DAG of a file before keeping it,
    and this one's validation raises the spec's error, which the UI lists as an import error of the DAG file.
    Only the placeholder is dropped; the other datasources load."""
    dag = DAG(dag_id=f"broken_spec_{path.stem}"[:200], schedule=None, start_date=DEFAULT_START)

    def validate() -> None:
        raise error
    object.__setattr__(dag, "validate", validate)
    return dag
