"""The compaction DAG's steps (`<dataSource>.compaction`, for a spec with a `compaction` section): search ->
one Spark job per interval (`CompactionSparkOperator`) -> publish -> kill.

The search finds the intervals to compact (`core.compaction`) among the visible segments, at most
MAX_INTERVALS_PER_RUN of them, oldest first, and stages each one's job under
`<deep storage>/<dataSource>/.compaction/<run>/<n>/`. The publish swaps each rewrite in
(`store.compaction.publish_compaction`); an interval that an append changed meanwhile is refused, its output
removed, and compacted by a later run. Then the datasource's Iceberg table follows, when it has one. Kill
deletes what compaction made unused `kill.bufferPeriod` ago (`store.kill`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import pyarrow.fs as pafs

from ingest_core.core.commit_rules import CompactionConflictError
from ingest_core.core.compaction import CompactionJob, find_candidates
from ingest_core.core.spec import DatasourceSpec
from ingest_core.executor import buckets
from ingest_core.handover import deep_storage
from ingest_core.handover.job_input import BadJobInput, CompactionInput
from ingest_core.store.compaction import publish_compaction
from ingest_core.store.kill import kill
from ingest_core.store.publisher import SegmentDescriptor
from ingest_core.store.reader import DatasourceReader
from ingest_core.store.schema import utcnow
from ingest_core.store.segment_schema import segment_types
from ingest_core.supervisor.report import sync_iceberg_table
from ingest_core.supervisor.run import RunFailedForGood, open_store

log = logging.getLogger(__name__)

MAX_INTERVALS_PER_RUN = 10
def compaction_root(spec: DatasourceSpec) -> str:
    # a leading dot: no ingestion run's folder can be named so (deep_storage.safe_name)
    return deep_storage.join(deep_storage.base_for(spec), spec.datasource, ".compaction")


def run_folder(spec: DatasourceSpec, run_id: str) -> str:
    return deep_storage.join(compaction_root(spec), deep_storage.safe_name(run_id))


def job_folders(spec: DatasourceSpec) -> list[str]:
    """Every compaction job's output folder (`.compaction/<run>/<n>`)."""
    root = compaction_root(spec)
    fs, path = deep_storage.filesystem(root)
    infos = fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
    depth = path.rstrip("/").count("/") + 2
    return sorted(deep_storage.to_uri(root, i.path) for i in infos
                  if i.type == pafs.FileType.Directory and i.path.rstrip("/").count("/") == depth)


def search_step(spec: DatasourceSpec, run_id: str) -> list[CompactionInput]:
    """Stage the jobs of the intervals to compact; returns each job's input."""
    compaction = spec.compaction
    assert compaction is not None
    visible = DatasourceReader(open_store(), spec.datasource).segments()
    granularity = (compaction.granularity_spec.segment_granularity
                   or spec.data_schema.granularity_spec.segment_granularity)
    found = find_candidates(visible, granularity=granularity, target_rows=compaction.target_rows,
                            skip_offset=compaction.skip_offset_from_latest, bucket=buckets.bucket)
    chosen = found.candidates[:MAX_INTERVALS_PER_RUN]
    log.info("compaction of %s: %d intervals to compact (%d this run), %d already compacted, %d segments newer "
             "than the horizon %s left alone", spec.datasource, len(found.candidates), len(chosen), found.compacted,
             found.skipped_recent, found.horizon)
    if not chosen:
        return []
    folder = run_folder(spec, run_id)
    spec_uri = deep_storage.join(folder, "spec.json")
    deep_storage.write_json(spec_uri, spec.to_raw())
    by_id = {s.id: s for s in visible}
    out = []
    for n, candidate in enumerate(chosen):
        members = sorted((by_id[i] for i in candidate.segment_ids),
                         key=lambda s: (s.created_at, s.version, s.partition_num))  # publish order
        job = CompactionJob(spec.datasource, f"compact-{deep_storage.safe_name(run_id)}-{n}", candidate.interval_start,
                            candidate.interval_end, candidate.segment_ids, tuple(s.location for s in members),
                            compaction.target_rows, candidate.target_segments,
                            deep_storage.join(folder, str(n)), tuple(segment_types(s) for s in members))
        job_uri = deep_storage.join(job.output_uri, "job.json")
        deep_storage.write_json(job_uri, job.to_json())
        out.append(CompactionInput(spec_uri, job_uri))
    return out


@dataclass(frozen=True)
class CompactionOutcome:
    compacted: list[str]  # intervals
    conflicts: list[str]  # changed by an append meanwhile: for a later run
    failed: list[str]  # their job left no report
    segments_before: int
    segments_after: int

    def to_json(self) -> dict[str, Any]:
        return {"compacted": self.compacted, "conflicts": self.conflicts, "failed": self.failed,
                "segmentsBefore": self.segments_before, "segmentsAfter": self.segments_after}


def compaction_input_of(value: dict | list) -> CompactionInput:
    """The typed input of a compact task (its XCom value; a list: an earlier version's argv). One that names no
    job fails its task for good."""
    try:
        return CompactionInput.from_json(value)
    except BadJobInput as exc:
        raise RunFailedForGood(str(exc)) from None


def publish_step(spec: DatasourceSpec, jobs: list[CompactionInput]) -> dict[str, Any]:
    from ingest_core.spark.compaction import read_report

    metadata = open_store()
    compacted, conflicts, failed, before, after = [], [], [], 0, 0
    for given in jobs:
        job = CompactionJob.from_json(deep_storage.read_json(given.job_uri))
        interval = f"{job.interval_start.isoformat()}/{job.interval_end.isoformat()}"
        try:
            files = read_report(job.output_uri)
        except FileNotFoundError:
            failed.append(interval)
            continue
        rewritten = [SegmentDescriptor(job.interval_start, job.interval_end, f.location, f.rows, f.bytes,
                                       {"compaction": job.task_id, **({"types": f.types} if f.types else {})})
                     for f in files]
        try:
            result = publish_compaction(metadata, spec.datasource, (job.interval_start, job.interval_end),
                                        job.segment_ids, rewritten, job.task_id)
        except CompactionConflictError as exc:
            log.warning("%s", exc)
            conflicts.append(interval)
            _remove_unpublished(metadata, spec.datasource, job.output_uri)
            continue
        compacted.append(interval)
        before += len(result.replaced)
        after += len(result.segment_ids)
    if compacted and spec.microbatch.iceberg_on:
        sync_iceberg_table(metadata, spec)
    outcome = CompactionOutcome(compacted, conflicts, failed, before, after)
    log.info("compaction of %s: %s", spec.datasource, outcome.to_json())
    return outcome.to_json()


def _remove_unpublished(metadata: Any, datasource: str, output_uri: str) -> None:
    """A refused rewrite's files go, unless a segment record points into them (never delete what is published)."""
    prefix = deep_storage.normalize_uri(output_uri).rstrip("/") + "/"
    if any(deep_storage.normalize_uri(s.location).startswith(prefix)
           for s in metadata.segment_records.of(datasource, used_only=False)):
        return
    try:
        deep_storage.delete_dir(output_uri)
    except OSError as exc:
        log.warning("the refused compaction output %s stays (kill removes it later): %s", output_uri, exc)


def kill_step(spec: DatasourceSpec) -> dict[str, Any]:
    compaction = spec.compaction
    assert compaction is not None
    if not compaction.kill.enabled:
        return {"kill": "off"}
    result = kill(open_store(), spec, compaction.kill.buffer_period.to_timedelta(), utcnow(), job_folders(spec))
    return result.to_json()
