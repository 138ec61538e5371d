"""A DAG run as its tasks see it (run type and interval), and the one adapter from the supervisor's steps to
Airflow: `RunSkipped` -> skipped, `RunFailedForGood` -> failed without retries (`supervisor.run`).

STEPS: the supervisor's steps (`ingest_core.supervisor`) load the metadata store, Kafka's clients and deep storage's
filesystems; the tasks here import the step they run when they run it. Airflow parses the DAG file in every
task's process and, again and again, in its DAG processor: the parse loads the spec, its checks and the DAG's
shape only (tests/unit/test_dag_file_weight.py). A scheduler may load the steps once for all its task processes
(`ingest_core.provider.preload`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Callable, TypeVar

from ingest_core.core.errors import DependencyUnavailableError

SCHEDULED_RUN_TYPES = ("scheduled", "backfill")
T = TypeVar("T")


@dataclass(frozen=True)
class RunContext:
    """What a task needs to know about its DAG run."""

    run_id: str
    run_type: str
    data_interval_end: datetime | None

    @classmethod
    def from_airflow(cls, context: Any) -> "RunContext":
        dag_run = context["dag_run"]
        run_type = getattr(dag_run.run_type, "value", str(dag_run.run_type))
        return cls(dag_run.run_id, run_type, context.get("data_interval_end"))

    @property
    def end_time(self) -> datetime | None:
        """A scheduled or backfill run for [a, b) ingests up to the offsets at time b; a manual one, up to now."""
        return self.data_interval_end if self.run_type in SCHEDULED_RUN_TYPES else None


def run_context(spec: Any, context: Any) -> RunContext:
    """The run as `spec`'s tasks see it: continuous, or readUpTo latest, plans up to the latest offsets when it
    plans, not those at its interval's end (`MicrobatchConfig.reads_to_latest`)."""
    run = RunContext.from_airflow(context)
    return replace(run, data_interval_end=None) if spec.microbatch.reads_to_latest(run.run_type) else run


def airflow_step(step: Callable[[], T]) -> T:
    """Run a supervisor step; its skip and its final failure as Airflow's. A dependency that refused this
    datasource's settings (an object store its keys, a broker its credentials) refuses them on a retry too."""
    from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

    from ingest_core.supervisor.run import RunFailedForGood, RunSkipped

    try:
        return step()
    except RunSkipped as exc:
        raise AirflowSkipException(str(exc)) from None
    except RunFailedForGood as exc:
        raise AirflowFailException(str(exc)) from None
    except DependencyUnavailableError as exc:
        if not exc.refused:
            raise
        raise AirflowFailException(str(exc)) from None
