"""The report step of a run: how the run ended, from the metadata store. It runs whatever happened upstream: it ends
a run that will not publish (FAILED, or expired past its deadline), so a run pipelined from it stops waiting
for it and its partitions are planned again from the committed offsets; removes the job output of a final
run that nothing was published from; mirrors the committed offsets to the Kafka consumer group; produces the
published runs' dead letters to the spec's dead-letter topic (exactly once per run: `kafka.dead_letter_topic`);
brings the datasource's Iceberg table level (`store.iceberg`); and fails the Airflow run when a group failed or nothing was published."""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator

from ingest_core.core.errors import IngestError
from ingest_core.core.loss import RecordsLost
from ingest_core.core.spec import DatasourceSpec
from ingest_core.handover.report import GroupReport
from ingest_core.kafka.config import KafkaClientConfig
from ingest_core.kafka.consumer_group import mirror_offsets
from ingest_core.store.audit import RECORDS_LOST, losses
from ingest_core.store.cleanup import find_orphans, remove_orphans
from ingest_core.core.states import GroupStatus, RunStatus
from ingest_core.store.metadata import MetadataStore
from ingest_core.store.records import RunRecord
from ingest_core.store.records import PublishedFigures
from ingest_core.supervisor.planning import Supervisor
from ingest_core.supervisor.publish import plan_reports
from ingest_core.supervisor.run import RunSkipped, check_active, open_store

if TYPE_CHECKING:
    from ingest_core.kafka.dead_letter_topic import PublishedDeadLetters
    from ingest_core.store import iceberg

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunOutcome:
    """What a run did (the report task's XCom and log line)."""

    run_id: str
    status: RunStatus
    records: int  # planned
    row_stats: dict[str, int]  # each group's published replica, summed
    segments: int
    rows: int
    failed_groups: list[int]
    error: str | None
    offsets_mirrored_to: str | None  # the Kafka consumer group, when this report mirrored the offsets
    dead_letters_produced: list[str] | None = None  # the runs whose dead letters this report produced to the topic
    iceberg_snapshot: int | None = None  # the Iceberg table's snapshot after this report's sync
    lost: tuple[RecordsLost, ...] = ()  # what its publish moved past unread (resetOffsetAutomatically, a reset)

    @property
    def lost_records(self) -> int:
        return sum(e.records for e in self.lost)

    def to_json(self) -> dict[str, Any]:
        return {"runId": self.run_id, "status": self.status.value, "records": self.records,
                "rowStats": self.row_stats, "segments": self.segments, "rows": self.rows,
                "failedGroups": self.failed_groups, "error": self.error,
                "offsetsMirroredTo": self.offsets_mirrored_to, "deadLettersProduced": self.dead_letters_produced,
                "icebergSnapshot": self.iceberg_snapshot, "lostRecords": self.lost_records,
                "lost": [e.to_json() for e in self.lost]}

    def check(self) -> None:
        """Fail the Airflow run when a group failed or the run did not publish."""
        if self.failed_groups:
            raise IngestError(f"run {self.run_id}: task groups {self.failed_groups} failed; their partitions keep "
                              "their committed offsets and the next run reads them again")
        if self.status is not RunStatus.PUBLISHED:
            raise IngestError(f"run {self.run_id} ended {self.status.value}: {self.error or 'not published'}")


def report_step(spec: DatasourceSpec, run_id: str, planned: bool,
                metadata: MetadataStore | None = None) -> dict[str, Any]:
    """`planned`: this attempt's plan step succeeded. Skips when a re-run found the run superseded."""
    metadata = metadata or open_store()
    record = end_in_flight(metadata, spec, planned_run(metadata, spec, run_id, planned))
    try:
        keep_failure_reports(metadata, spec, record)  # before the job output that holds them is removed
        kept = True
    except Exception as exc:  # noqa: BLE001 - deep storage or the store: the run's outcome stands either way
        log.warning("run %s: why its groups failed was not kept (its job output stays for it): %s", record.run_id,
                    exc)
        kept = False
    if record.is_final and kept:
        remove_unpublished_attempts(metadata, spec, record.run_id)
    mirrored = mirror_committed_offsets(metadata, spec) if record.status is RunStatus.PUBLISHED else None
    produced = produce_dead_letters(metadata, spec)
    synced = sync_iceberg_table(metadata, spec)
    outcome = dataclasses.replace(run_outcome(metadata, record, mirrored), dead_letters_produced=produced,
                                  iceberg_snapshot=synced.snapshot_id if synced else None)
    log.info("run report: %s", json.dumps(outcome.to_json(), default=str))
    for event in outcome.lost:  # loud in the Airflow log too
        log.warning("run %s: %s", record.run_id, event.describe())
    for failed in metadata.reports.of(spec.datasource, record.run_id):
        if failed.failure is not None:  # which records, and why, in the Airflow log too
            log.error("task group %d failed: %s: %s; records: %s", failed.group_id, failed.failure.title,
                      failed.failure.message, failed.failure.describe_records())
    outcome.check()
    return outcome.to_json()


def planned_run(metadata: MetadataStore, spec: DatasourceSpec, run_id: str, planned: bool) -> RunRecord:
    """The run's record. None means a step before planning failed (or skipped the run: a suspended or terminated
    datasource, not a failure); a run superseded before this attempt planned it is skipped."""
    record = metadata.runs.get(spec.datasource, run_id)
    if record is None:
        check_active(metadata, spec.datasource)
        raise IngestError(f"run {run_id} has no plan: a step before planning failed (see the plan task's log)")
    if record.status is RunStatus.SUPERSEDED and not planned:
        raise RunSkipped(f"run {run_id} was superseded by run {record.superseded_by}: "
                         f"{record.error or ''}".strip())
    return record


def end_in_flight(metadata: MetadataStore, spec: DatasourceSpec, record: RunRecord) -> RunRecord:
    """A run still in flight when its report runs will not publish: it is marked FAILED, or expires when it is
    past its deadline. Returns the run's record as it ends."""
    if not record.status.in_flight:
        return record
    supervisor = Supervisor(spec, metadata)
    supervisor.expire_overdue(f"the report of run {record.run_id}")
    supervisor.mark_failed(record.run_id, "its tasks failed before publishing (see the plan, spark_job and "
                                          "publish logs)")  # unless it just expired
    return metadata.runs.require(spec.datasource, record.run_id)


def keep_failure_reports(metadata: MetadataStore, spec: DatasourceSpec, record: RunRecord) -> list[GroupReport]:
    """Each task group that failed (none of its attempts succeeded, in a run that failed or published without
    it) keeps why in the store, once: its latest failed attempt's report, or a `lost` one when its job died
    before writing any. `ingest status` shows them as recent errors (which records, and why), and `ingest skip`
    offers exactly their ranges. Returns the reports kept now."""
    if not (record.status.failed or (record.status is RunStatus.PUBLISHED and record.error)):
        return []
    name, run_id = spec.datasource, record.run_id
    statuses = metadata.runs.group_statuses(name, run_id)
    known = {r.group_id for r in metadata.reports.of(name, run_id) if not r.succeeded}
    kept = []
    for group in record.plan.groups:
        if group.is_empty or group.group_id in known or statuses.get(group.group_id) in (
                GroupStatus.PUBLISHED, GroupStatus.EMPTY):
            continue
        attempts = plan_reports(spec, record.plan, group.group_id)
        if any(a.report.succeeded for a in attempts):
            continue  # this group's job did its part: the run failed for another reason (see its error)
        failed = max(attempts, key=lambda a: a.attempt, default=None)
        report = failed.report if failed is not None else GroupReport.lost(
            name, run_id, group.group_id, [p.range for p in group.partitions])
        metadata.reports.add(report)
        kept.append(report)
    return kept


def remove_unpublished_attempts(metadata: MetadataStore, spec: DatasourceSpec, run_id: str) -> None:
    """A final run's job output that nothing was published from (other replicas, failed attempts) goes. A
    failure here fails nothing: `ingest cleanup` removes it later."""
    try:
        remove_orphans(metadata, spec.datasource, find_orphans(metadata, spec, [run_id]), f"report of run {run_id}")
    except Exception as exc:  # noqa: BLE001 - deep storage or the store: the run's outcome stands either way
        log.warning("run %s: its unpublished job output stays for `ingest cleanup`: %s", run_id, exc)


def mirror_committed_offsets(metadata: MetadataStore, spec: DatasourceSpec) -> str | None:
    """All the committed offsets, not this run's: a run whose report never ran mirrored nothing. Returns the
    consumer group mirrored to (None: mirroring is off or failed, which fails nothing)."""
    committed = {tp: k.offset for tp, k in metadata.offsets.committed(spec.datasource).items()}
    return mirror_offsets(spec, committed)


def produce_dead_letters(metadata: MetadataStore, spec: DatasourceSpec) -> list[str] | None:
    """Every published run's dead letters not produced yet (this run's and any an earlier report failed to
    produce), to `microbatch.deadLetter.topic`; the runs produced, None when there is no topic. A failure
    fails nothing and only warns: the next run's report produces them."""
    if spec.microbatch.dead_letter_topic is None:
        return None
    # pyarrow's Parquet and Kafka's producer: only a datasource with a dead-letter topic loads them
    from ingest_core.handover.dead_letters import read_files
    from ingest_core.kafka.dead_letter_topic import PublishedDeadLetters, produce_pending

    def pending(after_seq: int) -> Iterator[PublishedDeadLetters]:
        files = metadata.dead_letter_files.of(spec.datasource, after_seq=after_seq)
        for seq in sorted({f.publish_seq for f in files}):
            mine = [f for f in files if f.publish_seq == seq]
            yield PublishedDeadLetters(seq, mine[0].run_id, read_files([f.location for f in mine]))

    try:
        return produce_pending(spec, pending)
    except Exception as exc:  # noqa: BLE001 - the publish stands; the next report produces them
        try:  # never log a secret the client's error may quote
            text = KafkaClientConfig.from_properties(spec.io_config.consumer_properties).redact(str(exc))
        except Exception:  # noqa: BLE001 - the secrets cannot be resolved: name the error's type only
            text = type(exc).__name__
        log.warning("dead letters of %s were not produced to topic %r (the ingestion is not affected; the next "
                    "run's report produces them): %s", spec.datasource, spec.microbatch.dead_letter_topic, text)
        return None


def sync_iceberg_table(metadata: MetadataStore, spec: DatasourceSpec) -> iceberg.IcebergSync | None:
    """With `microbatch.iceberg`: bring the datasource's Iceberg table level with what is published (this run's
    publish and any an earlier report did not sync). A failure fails nothing and only warns: the table lags
    until the next report (or `ingest iceberg-sync`) brings it level."""
    if not spec.microbatch.iceberg_on:
        return None
    import ingest_core.store.iceberg as iceberg  # pyarrow and pyiceberg: only a datasource with an Iceberg table

    try:
        return iceberg.sync(metadata, spec)
    except Exception as exc:  # noqa: BLE001 - the publish stands; the next report syncs
        log.warning("the Iceberg table of %s was not synced (the ingestion is not affected; the next run's report "
                    "syncs it, or `ingest iceberg-sync %s`): %s", spec.datasource, spec.datasource, exc)
        return None


def run_outcome(metadata: MetadataStore, record: RunRecord, mirrored: str | None) -> RunOutcome:
    datasource, run_id = record.datasource, record.run_id
    published = record.published or PublishedFigures(0, 0, 0, 0)  # as its publish recorded them
    failed = sorted(g for g, s in metadata.runs.group_statuses(datasource, run_id).items() if s is GroupStatus.FAILED)
    lost = tuple(e for e in losses(metadata.audit_log.records(datasource, action=RECORDS_LOST)) if e.run_id == run_id)
    return RunOutcome(run_id, record.status, record.plan.records, metadata.reports.row_stats(datasource, run_id),
                      published.segments, published.rows, failed, record.error, mirrored, lost=lost)
