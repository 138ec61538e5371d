"""A DAG run as its tasks see it: its Airflow context, the metadata store, and whether it may still run.

Re-running a run (clear, backfill) re-executes its persisted plan: already published -> nothing to do;
superseded or expired -> skipped with the reason; a suspended or terminated datasource -> skipped.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ingest_core.core.settings import Settings
from ingest_core.core.spec import DatasourceSpec
from ingest_core.executor import deep_storage
from ingest_core.store.metadata import MetadataStore
from ingest_core.store.records import RunRecord, RunStatus

SCHEDULED_RUN_TYPES = ("scheduled", "backfill")


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


def store() -> MetadataStore:
    s = MetadataStore.shared(Settings.from_env().metadata_url)
    s.check_schema()
    return s


def run_folder(spec: DatasourceSpec, run_id: str) -> str:
    return deep_storage.run_uri(deep_storage.base_for(spec), spec.datasource, run_id)


def final_reason(record: RunRecord) -> str | None:
    """Why a run's tasks have nothing left to do (published, superseded, expired); None while it may still run."""
    if record.status is RunStatus.PUBLISHED:
        return f"run {record.run_id} is already published"
    if record.status is RunStatus.SUPERSEDED:
        return (f"run {record.run_id} was superseded by run {record.superseded_by} and is not executed again: "
                f"{record.error or ''}").strip()
    if record.expired:
        return f"run {record.run_id} is not executed again: {record.error}"
    return None


def check_active(metadata: MetadataStore, datasource: str) -> None:
    """A suspended or terminated datasource plans nothing, even for a run created before it was paused."""
    from airflow.sdk.exceptions import AirflowSkipException

    row = metadata.datasources.get(datasource)
    if row is not None and row["terminated"]:
        raise AirflowSkipException(f"datasource {datasource} is terminated: nothing runs until "
                                   f"`ingest resume {datasource}`")
    if row is not None and row["suspended"]:
        raise AirflowSkipException(f"datasource {datasource} is suspended: `ingest resume {datasource}` resumes it")
