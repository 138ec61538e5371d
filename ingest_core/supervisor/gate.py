"""The data gate's decision (`microbatch.dataGate`, seed 002's DelayedFetch: min records or max wait), a run's
first step when the spec has one: open when the run already has a plan (a clear or a retry re-executes it) or
when at least `minRecords` new records are there; else waiting, from the start offsets the next plan would use.
The DAG's plan task (`provider.operators.plan.PlanOperator`) asks this first and, while it waits, defers to its
trigger.

A gate that reaches maxWait with nothing new ends the run there (`end_idle`): no plan, no run record, the run's
other tasks skipped. It leaves what an empty run's publish left: the state a loop that read nothing leaves (IDLE,
or not yet by ioConfig.idleConfig), and a successful loop for the health rules."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Mapping

from ingest_core.core.errors import KafkaAuthenticationError
from ingest_core.core.offsets import TopicPartition
from ingest_core.core.spec import DatasourceSpec
from ingest_core.core.states import LOOP_ERROR, LOOP_IDLE, Stored
from ingest_core.store.metadata import MetadataStore
from ingest_core.store.schema import as_utc
from ingest_core.supervisor.planning import Supervisor
from ingest_core.supervisor.publish import nothing_new_event
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


def end_idle(spec: DatasourceSpec, run_id: str, metadata: MetadataStore | None = None) -> Stored:
    """The gate of `spec`'s run `run_id` reached maxWait with nothing new: the run ends without a plan. The spec is
    registered (as a plan step does: status and metrics read it there); the datasource moves as after an empty run
    (`nothing_new_event`, idleConfig's clock from the latest run that found records, else from its first look at
    the stream), and the loop counts as a successful one while the health rules need it (`heals_health`). Returns
    the state it leaves; a suspended or terminated datasource: `RunSkipped`, nothing moved."""
    metadata = metadata or open_store()
    check_active(metadata, spec.datasource)
    name = spec.datasource
    Supervisor(spec, metadata).register()
    last_active = metadata.runs.last_active(name)
    if last_active is None:  # no run yet: its first look at the stream created its row
        row = metadata.datasources.get(name)
        last_active = as_utc(row["created_at"]) if row else None
    state = metadata.datasources.set_state(name, nothing_new_event(spec, last_active))
    if heals_health(metadata, name, spec.microbatch.health.healthiness_threshold):
        metadata.audit_log.write(name, LOOP_IDLE, {"runId": run_id})
    return state


def heals_health(metadata: MetadataStore, name: str, healthy_after: int) -> bool:
    """Whether an idle loop must be recorded for the health rules (`service.status`): only when one of the last
    `healthy_after` loops failed, so an idle datasource writes nothing per run once it is healthy."""
    errors = metadata.audit_log.records(name, action=LOOP_ERROR, limit=1)
    if not errors:
        return False
    successes = sorted([r.created_at for r in metadata.runs.recent(name, limit=healthy_after)]
                       + [a.created_at for a in metadata.audit_log.records(name, action=LOOP_IDLE,
                                                                           limit=healthy_after)], reverse=True)
    return len(successes) < healthy_after or as_utc(successes[healthy_after - 1]) < as_utc(errors[-1].created_at)
