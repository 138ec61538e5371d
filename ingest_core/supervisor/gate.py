"""The data gate's decision (`microbatch.dataGate`, seed 002's DelayedFetch: min records or max wait), a run's
first step when the spec has one: open when the run already has a plan (a clear or a retry re-executes it) or
when at least `minRecords` new records are there; else waiting, from the start offsets the next plan would use.
The Airflow sensor (`provider.sensors.data_gate`) only asks this and, while it waits, defers to its trigger."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Mapping

from ingest_core.core.errors import KafkaAuthenticationError
from ingest_core.core.offsets import TopicPartition
from ingest_core.core.spec import DatasourceSpec
from ingest_core.store.metadata import MetadataStore
from ingest_core.supervisor.planning import Supervisor
from ingest_core.supervisor.run import RunFailedForGood, check_active, open_store


class GateStatus(str, enum.Enum):
    PLANNED = "planned"  # the run has a plan already: a clear or a retry re-executes it
    READY = "ready"  # minRecords new records are there
    WAITING = "waiting"


@dataclass(frozen=True)
class GateLook:
    """What one look at the gate found, with the start offsets the new records are counted from."""

    status: GateStatus
    records: int = 0
    starts: Mapping[TopicPartition, int] = field(default_factory=dict)

    @property
    def planned(self) -> bool:
        return self.status is GateStatus.PLANNED

    @property
    def is_open(self) -> bool:
        return self.status is not GateStatus.WAITING

    @property
    def event(self) -> dict[str, Any]:
        """The task's result (XCom), in the form of the trigger's events."""
        if self.status is GateStatus.PLANNED:
            return {"status": self.status.value}
        return {"status": self.status.value, "records": self.records}


def gate_step(spec: DatasourceSpec, run_id: str, metadata: MetadataStore | None = None) -> GateLook:
    """One look at the gate of `spec`'s run `run_id`. A suspended or terminated datasource: `RunSkipped`;
    credentials the broker refuses: `RunFailedForGood` (a retry is refused too)."""
    gate = spec.microbatch.data_gate
    assert gate is not None, "a data gate step of a spec without microbatch.dataGate"
    metadata = metadata or open_store()
    check_active(metadata, spec.datasource)
    if metadata.runs.get(spec.datasource, run_id) is not None:
        return GateLook(GateStatus.PLANNED)
    try:
        starts, records = Supervisor(spec, metadata).pending()
    except KafkaAuthenticationError as exc:
        raise RunFailedForGood(str(exc)) from None
    return GateLook(GateStatus.READY if records >= gate.min_records else GateStatus.WAITING, records, starts)
