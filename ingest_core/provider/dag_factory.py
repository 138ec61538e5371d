"""One Airflow DAG per datasource spec: plan (with its data gate) -> Spark jobs (one per task group x replica) ->
replan -> the re-planned run's Spark jobs -> publish -> report. Each task is a few lines over the supervisor's
step (`ingest_core.supervisor`, through `operators.run.airflow_step`); the Spark job tasks are handed typed
inputs. A normal run starts four task processes: plan, its Spark jobs, publish, report. A run with nothing to
read has no Spark job task, and one that continues from no run that may still fail skips replan and its jobs
(`provider.operators.plan`). A data gate that reaches maxWait with nothing new ends the run in the plan task: it
skips every task after it whatever their trigger rules, so an idle datasource's run is the plan task alone.

Airflow's DAG folder holds a generated DAG file per spec (provider/dag_files.py, under `.ingest/`), each calling
`spec_file_dags` for its own spec: the dag-processor parses each in a process of its own, with its own import
timeout, so a bad, slow or hostile spec is the import error of its own file and hides nothing else (Airflow
marks stale only the DAGs *of the file* with an import error). `load_dags(folder)` builds every spec under
`folder` in one process (skipping what `.airflowignore` lists, in Airflow's `[core] dag_ignore_file_syntax`);
`raise_spec_errors(folder)` raises one error listing every spec that does not load, each with its file, field
path and what to write instead.
"""

from __future__ import annotations

import dataclasses
import logging
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, Asset, get_parsing_context, task
from dateutil.relativedelta import relativedelta

from ingest_core.core.errors import IngestError, SpecError, SpecProblem
from ingest_core.core.periods import Period
from ingest_core.core.settings import strict_specs
from ingest_core.core.spec import (
    COMPACTION_DAG_SUFFIX,
    MAX_SPEC_BYTES,
    DatasourceSpec,
    compaction_dag_id,
    find_spec_files,
)
from ingest_core.kafka.properties import load_checked_spec
from ingest_core.kafka.storage_secrets import use_deep_storage
from ingest_core.provider.operators import compaction as compaction_tasks
from ingest_core.provider.operators.plan import PLAN_TASK, PlanOperator, plan_succeeded, replan_task
from ingest_core.provider.operators.publish import publish_task
from ingest_core.provider.operators.report import report_task
from ingest_core.provider.operators.run import run_context
from ingest_core.provider.operators.spark_job import (
    COMPACT_SCRIPT,
    CompactionSparkOperator,
    IngestSparkSubmitOperator,
    operator_settings,
)

DEFAULT_START = datetime(2025, 1, 1, tzinfo=timezone.utc)
RUN_MARGIN = timedelta(minutes=1)  # the plan step before the run's deadline starts, the report after it
log = logging.getLogger(__name__)


def asset_for(datasource: str) -> Asset:
    return Asset(name=datasource, uri=f"ingest://datasources/{datasource}", group="ingest")


def schedule_of(spec: DatasourceSpec) -> Any:
    """Data-interval timetables, so a run for [a, b) knows its b (Airflow 3's default for a timedelta is a
    trigger timetable, whose runs have no interval)."""
    from airflow.sdk.definitions.timetables.interval import (
        CronDataIntervalTimetable,
        DeltaDataIntervalTimetable,
    )

    text = spec.microbatch.schedule
    if spec.microbatch.continuous:
        from airflow.sdk.definitions.timetables.simple import ContinuousTimetable

        return ContinuousTimetable()
    if text is not None and not text.upper().startswith(("P", "-P")):
        return CronDataIntervalTimetable(text, timezone="UTC")
    period = Period.parse(text) if text is not None else spec.io_config.task_duration
    if period.is_calendar:  # months and years have no fixed length
        return DeltaDataIntervalTimetable(relativedelta(years=period.years, months=period.months, weeks=period.weeks,
                                                        days=period.days, hours=period.hours, minutes=period.minutes,
                                                        seconds=float(period.seconds)))
    return DeltaDataIntervalTimetable(period.to_timedelta())


def run_timeout(spec: DatasourceSpec) -> timedelta:
    """How long an Airflow run of `spec` may take (its `dagrun_timeout`): the data gate's wait, then the run's own
    deadline (completionTimeout from its plan on; past it the run never publishes, and expires). A run whose task
    died without a word would otherwise stay running, and with one run at a time nothing else could start."""
    gate = spec.microbatch.data_gate
    wait = gate.max_wait.to_timedelta() if gate is not None else timedelta(0)
    return wait + spec.io_config.completion_timeout.to_timedelta() + RUN_MARGIN


def build_dag(spec: DatasourceSpec) -> DAG:
    use_deep_storage(spec)  # its tasks, run in this process, reach the deep storage with the spec's settings
    micro, io = spec.microbatch, spec.io_config
    default_args = {"retries": micro.retries, "retry_delay": micro.retry_delay.to_timedelta(), "owner": "ingest"}
    dag = DAG(
        dag_id=spec.datasource,
        description=f"Kafka -> Parquet segments for {spec.datasource} (spec {spec.source})",
        schedule=schedule_of(spec),
        start_date=micro.start_date or DEFAULT_START,
        catchup=micro.catchup,
        max_active_runs=micro.max_active_runs,
        dagrun_timeout=run_timeout(spec),
        default_args=default_args,
        is_paused_upon_creation=spec.suspended,
        tags=["ingest", f"topic:{io.topic or io.topic_pattern}"],
        doc_md=f"Datasource `{spec.datasource}` from `{spec.source}`: one run is one supervisor loop.",
        # the spec's generated DAG file defines it (by its globals); `raise_spec_errors` builds it only to check it
        auto_register=False,
    )
    asset = asset_for(spec.datasource)

    # multiple_outputs=False: a task annotated `-> dict` would push each key as an XCom of its own besides the
    # whole, a write each (0.2-0.4 s per task); nothing reads them apart
    with dag:
        # the data gate (a deferral in the triggerer) and the plan; it skips replan and replanned_job itself when
        # the plan continues from no run that may still fail, and every task after it when the gate ends idle
        jobs = PlanOperator(task_id=PLAN_TASK, spec=spec)

        # once the plan succeeded, whatever happened to the Spark jobs: a run pipelined from one that will never
        # publish is planned again here (its jobs: replanned_job; none: skipped). Without a plan it ends skipped
        @task(task_id="replan", trigger_rule="all_done")
        def replan(**context: Any) -> list[dict]:
            return replan_task(spec, run_context(spec, context), plan_succeeded(context))

        # publish and report run whatever happened upstream (a Spark job, replan or replanned_job that failed or
        # was skipped): groups that succeeded are published, failed ones keep their offsets. Without a plan the
        # publish ends skipped, changing nothing
        @task(task_id="publish", trigger_rule="all_done", outlets=[asset], multiple_outputs=False)
        def publish(**context: Any) -> dict:
            summary = publish_task(spec, run_context(spec, context), plan_succeeded(context))
            context["outlet_events"][asset].extra = {
                "runId": summary["runId"], "rows": summary["rows"], "segments": len(summary["segments"]),
                "endOffsets": summary["endOffsets"]}
            return summary

        # report runs whatever happened, so a run that cannot publish is marked FAILED in the metadata store;
        # it only reads what upstream did, so retrying it would change nothing. A gate that ended the run idle
        # skipped it (there is no plan to report on)
        @task(task_id="report", trigger_rule="all_done", retries=0, multiple_outputs=False)
        def report(**context: Any) -> dict:
            return report_task(spec, run_context(spec, context), plan_succeeded(context))

        spark = IngestSparkSubmitOperator.partial(task_id="spark_job", **operator_settings(spec)
                                                  ).expand(job=jobs.output)
        again = replan()
        replanned = IngestSparkSubmitOperator.partial(task_id="replanned_job", **operator_settings(spec)
                                                      ).expand(job=again)
        published = publish()
        reported = report()
        [jobs, spark] >> again
        [jobs, spark, again, replanned] >> published
        [jobs, published] >> reported
    return dag


def build_compaction_dag(spec: DatasourceSpec) -> DAG:
    """`<dataSource>.compaction`: search -> one Spark job per interval to compact -> publish -> kill
    (`supervisor.compaction`), on the compaction section's schedule."""
    assert spec.compaction is not None
    micro = spec.microbatch
    # the compaction's own schedule, read as the microbatch's is
    schedule = schedule_of(dataclasses.replace(spec, microbatch=dataclasses.replace(
        micro, schedule=spec.compaction.schedule)))
    dag = DAG(
        dag_id=compaction_dag_id(spec.datasource),
        description=f"Compaction of {spec.datasource}'s segments (spec {spec.source})",
        schedule=schedule,
        start_date=micro.start_date or DEFAULT_START,
        catchup=False,
        max_active_runs=1,  # two runs would rewrite the same intervals; the publish would refuse one anyway
        default_args={"retries": micro.retries, "retry_delay": micro.retry_delay.to_timedelta(), "owner": "ingest"},
        is_paused_upon_creation=spec.suspended,
        tags=["ingest", "compaction"],
        doc_md=f"Druid's auto-compaction for datasource `{spec.datasource}` (its spec's `compaction` section).",
        auto_register=False,
    )
    with dag:
        @task(task_id="search")
        def search(**context: Any) -> list[dict]:
            return compaction_tasks.search_task(spec, context["dag_run"].run_id)

        # publish what succeeded whatever happened to the other intervals' jobs
        @task(task_id="publish", trigger_rule="all_done", multiple_outputs=False)
        def publish(jobs: list[Any]) -> dict:
            return compaction_tasks.publish_task(spec, jobs)

        # kill runs whatever the compaction did: it deletes only what became unused bufferPeriod ago
        @task(task_id="kill", trigger_rule="all_done", multiple_outputs=False)
        def kill() -> dict:
            return compaction_tasks.kill_task(spec)

        jobs = search()
        settings = {**operator_settings(spec), "application": str(COMPACT_SCRIPT),
                    "name": f"ingest-compact-{spec.datasource}"}
        compact = CompactionSparkOperator.partial(task_id="compact", **settings).expand(job=jobs)
        compact >> publish(jobs) >> kill()
    return dag


class SpecFilesError(IngestError):
    """Datasource specs of the DAG folder that do not load: the import error of each one's generated DAG file."""

    code = "INGEST_SPEC_FILES_INVALID"

    def __init__(self, errors: list[SpecError]):
        self.errors = errors
        noun = "spec does" if len(errors) == 1 else "specs do"
        super().__init__(f"{len(errors)} datasource {noun} not load (every other datasource's DAG is loaded; "
                         "fix the fields below, `ingest validate FILE` checks a file):\n"
                         + "\n".join(str(e) for e in errors))


def load_specs(folder: str | Path, dag_id: str | None = None, only: Path | None = None
               ) -> tuple[dict[str, DAG], list[SpecError]]:
    """Each spec under `folder` on its own: ({dag_id: DAG} of those that load, the SpecError of each that does
    not). Nothing a spec holds can make this raise, so one spec never takes the others down. Unknown fields are
    warnings (logged), errors with INGEST_STRICT_SPECS=true. `dag_id`: only that DAG, from the spec that defines
    it (`spec_files_for`). `only`: that spec file alone (its generated DAG file's, `spec_file_dags`)."""
    strict = strict_specs()
    dags: dict[str, DAG] = {}
    errors: list[SpecError] = []
    for path in [only] if only is not None else spec_files_for(folder, dag_id):
        try:
            spec = load_checked_spec(path, strict=strict)
            # (a task's process skips it: the dag-processor kept this file's DAG, so no earlier spec defines it,
            # and no other spec is read)
            first = _defined_before(folder, only, spec.datasource) if only is not None and dag_id is None else None
            if spec.datasource in dags or first is not None:
                raise SpecError(str(path), [SpecProblem("spec.dataSchema.dataSource", (
                    f"{spec.datasource!r} is already defined by another spec{f' ({first})' if first else ''}: "
                    "each datasource has one spec"))])
            if dag_id is not None and dag_id not in (spec.datasource, compaction_dag_id(spec.datasource)):
                continue  # a file that only mentions the name
            dag = build_dag(spec) if dag_id in (None, spec.datasource) else None
            if dag is not None:
                dag.validate()  # what Airflow checks before keeping a DAG: fail here, for this file only
        except SpecError as exc:
            errors.append(exc)
            continue
        except Exception as exc:  # anything else a spec can cause is still this spec's problem alone
            errors.append(SpecError(str(path), [SpecProblem("", f"the DAG cannot be built: {type(exc).__name__}: "
                                                                f"{exc}")]))
            continue
        if dag is not None:
            dags[spec.datasource] = dag
        for warning in spec.warnings:  # the DAG processor's log; `ingest validate` and `ingest status` show them too
            log.warning("%s: %s", path, warning)
        if spec.compaction is not None and spec.compaction.enabled and dag_id in (None, compaction_dag_id(
                spec.datasource)):
            try:
                compaction = build_compaction_dag(spec)
                compaction.validate()
            except Exception as exc:  # noqa: BLE001 - this spec's problem alone
                errors.append(SpecError(str(path), [SpecProblem("compaction", (
                    f"the compaction DAG cannot be built: {type(exc).__name__}: {exc}"))]))
                continue
            dags[compaction.dag_id] = compaction
        if dag_id is not None and dags:
            break  # a datasource has one spec: the rest are other datasources'
    return dags, errors


def spec_files_for(folder: str | Path, dag_id: str | None) -> list[Path]:
    """The spec files to parse for `dag_id` (None: all). A spec that defines a datasource holds its name, so
    only the files whose text holds it are parsed (usually one; the caller keeps the one that defines it); no
    other spec is parsed, and none of what another holds (its settings, a hostile value) reaches this
    process. A spec that spells the name otherwise (a YAML escape): every file, as for None."""
    files = find_spec_files(folder, _ignore_syntax())
    if dag_id is None:
        return files
    names = {dag_id, dag_id.removesuffix(COMPACTION_DAG_SUFFIX)}
    wanted = [p for p in files if any(name.encode() in _content(p) for name in names)]
    return wanted + [p for p in files if p not in wanted]


def _defined_before(folder: str | Path, path: Path, datasource: str) -> Path | None:
    """The spec sorting before `path` that defines `datasource` too, if any: that one keeps it, as when one
    process read them all in order. Only specs whose text holds the name are parsed (usually none)."""
    for other in find_spec_files(folder, _ignore_syntax()):
        if other >= path:
            return None
        if datasource.encode() in _content(other):
            try:
                if load_checked_spec(other).datasource == datasource:
                    return other
            except Exception:  # noqa: BLE001 - that spec's error is its own file's
                continue
    return None


def _content(path: Path) -> bytes:
    """The bytes of a spec to search for a name; none of a file past MAX_SPEC_BYTES (it defines nothing), so a
    50 MB file is read once, by its own DAG file, not by every other's search."""
    try:
        with path.open("rb") as f:
            data = f.read(MAX_SPEC_BYTES + 1)
    except OSError:  # reported when the spec is parsed, if it is
        return b""
    return data if len(data) <= MAX_SPEC_BYTES else b""


def load_dags(folder: str | Path) -> dict[str, DAG]:
    """Every datasource DAG under `folder` whose spec loads (the others: `raise_spec_errors`). In a task's
    process only the task's DAG: Airflow's task runner names it in the parsing context (`get_parsing_context`)
    while it parses the DAG file, so a task reads its own datasource's spec alone and builds nothing of another
    (its settings, its credentials). The dag-processor parses without a context and builds every DAG."""
    dags, errors = load_specs(folder, get_parsing_context().dag_id)
    for error in errors:
        log.warning("datasource spec skipped (its own DAG file reports it): %s", error)
    return dags


def spec_file_dags(dag_file: str | Path, spec: str) -> dict[str, DAG]:
    """The DAGs of spec `spec` (a path under the DAG folder), for its generated DAG file `dag_file`
    (provider/dag_files.py, in `<DAG folder>/.ingest/`): raises its SpecFilesError, the import error of that
    file alone. In a task's process only the task's DAG (`get_parsing_context`, as `load_dags`). A spec gone
    since its file was written: no DAG (its file goes at the next sync)."""
    folder = Path(dag_file).resolve().parent.parent
    path = folder / spec
    if not path.is_file():
        return {}
    dags, errors = load_specs(folder, get_parsing_context().dag_id, only=path)
    if errors:
        raise SpecFilesError(errors)
    return dags


def raise_spec_errors(folder: str | Path) -> None:
    """Raise SpecFilesError naming every spec under `folder` that does not load (see the module docstring)."""
    _, errors = load_specs(folder)
    if errors:
        raise SpecFilesError(errors)


def _ignore_syntax() -> str:
    from airflow.configuration import conf

    return conf.get("core", "dag_ignore_file_syntax", fallback="glob").strip().lower() or "glob"
