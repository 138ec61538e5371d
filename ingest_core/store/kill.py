"""Kill: deleting what compaction made unused, for good (Druid's kill task), once nobody can be reading it.

A segment compaction replaced is marked unused at that moment (`used_status_last_updated`). A reader that
listed the visible segments just before (`DatasourceReader`, a SQL query, an Iceberg snapshot) may still read
its file. So kill waits `bufferPeriod` after a segment became unused (Druid's `kill.bufferPeriod`), then
deletes its file and its record, in that order: a crash between leaves a record of a file that is gone, which
the next kill removes. A compaction output that no segment record points into (a rewrite the publish refused,
or whose job failed) goes after the same period. An attempt folder left empty of segments is then the
ordinary cleanup's (`store.cleanup`).

With an Iceberg table, kill first expires its snapshots older than the buffer, and never deletes a file the
table's current snapshot still holds (a sync that has not caught up). Every deletion is audited.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Sequence

import pyarrow.fs as pafs
import sqlalchemy as sa

from ingest_core.core.spec import DatasourceSpec
from ingest_core.handover import deep_storage
from ingest_core.store import iceberg
from ingest_core.store.cleanup import unreferenced
from ingest_core.store.metadata import MetadataStore
from ingest_core.store.schema import segments

log = logging.getLogger(__name__)

KILL = "kill"  # the audit action


@dataclass(frozen=True)
class KillResult:
    segments: tuple[str, ...]  # ids whose file and record were deleted
    folders: tuple[str, ...]  # unpublished compaction outputs deleted
    kept_for_iceberg: tuple[str, ...]  # unused, past the buffer, but still in the Iceberg table's snapshot

    def to_json(self) -> dict:
        return {"segments": list(self.segments), "folders": list(self.folders),
                "keptForIceberg": list(self.kept_for_iceberg)}


def kill(store: MetadataStore, spec: DatasourceSpec, buffer: timedelta, now: datetime,
         compaction_folders: Sequence[str] = (), actor: str = "compaction") -> KillResult:
    """Delete the unused segments of `spec`'s datasource that became unused at least `buffer` before `now`,
    and the `compaction_folders` (outputs of compaction jobs) nothing points into."""
    name = spec.datasource
    cutoff = now - buffer
    every = store.segment_records.of(name, used_only=False)
    due = [s for s in every if not s.used and s.used_status_last_updated is not None
           and s.used_status_last_updated <= cutoff]
    in_iceberg = _iceberg_files(store, spec, cutoff) if spec.microbatch.iceberg_on else set()
    kept = [s for s in due if deep_storage.normalize_uri(s.location) in in_iceberg]
    kept_ids = {s.id for s in kept}
    killed = []
    for s in due:
        if s.id in kept_ids:
            continue
        fs, path = deep_storage.filesystem(s.location)
        try:
            fs.delete_file(path)
        except FileNotFoundError:
            pass  # an earlier kill deleted it and stopped before the record
        with store.session() as conn:
            conn.execute(segments.delete().where((segments.c.datasource == name) & (segments.c.id == s.id)
                                                 & (segments.c.used == sa.false())))
        killed.append(s.id)
    locations = [s.location for s in every if s.id not in killed]
    folders = [f for f in unreferenced(compaction_folders, locations) if _older_than(f, cutoff)]
    for folder in folders:
        deep_storage.delete_dir(folder)
    result = KillResult(tuple(killed), tuple(folders), tuple(s.id for s in kept))
    if killed or folders:
        store.audit_log.write(name, KILL, {**result.to_json(), "bufferPeriod": str(buffer),
                                           "unusedBefore": cutoff.isoformat()}, actor)
        log.info("kill of %s: %d unused segments and %d compaction outputs deleted", name, len(killed), len(folders))
    if kept:
        log.warning("kill of %s: %d unused segments are still in the Iceberg table's current snapshot (a sync has "
                    "not caught up): kept until it does", name, len(kept))
    return result


def _older_than(folder: str, cutoff: datetime) -> bool:
    """Whether everything in `folder` was last written before `cutoff` (a job may still be writing a new one)."""
    fs, path = deep_storage.filesystem(folder)

    infos = fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
    times = [i.mtime for i in infos if i.mtime is not None]
    return all(t.timestamp() <= cutoff.timestamp() for t in times)


def _iceberg_files(store: MetadataStore, spec: DatasourceSpec, cutoff: datetime) -> set[str]:
    """Expire the Iceberg table's snapshots older than `cutoff`; the files its current snapshot holds."""
    from pyiceberg.exceptions import NoSuchTableError

    cat = iceberg.catalog(store, spec)
    try:
        try:
            table = cat.load_table(iceberg.table_identifier(spec))
        except NoSuchTableError:
            return set()
        if table.current_snapshot() is None:
            return set()
        older = [s.snapshot_id for s in table.snapshots()
                 if s.timestamp_ms < cutoff.timestamp() * 1000 and s.snapshot_id != table.current_snapshot().snapshot_id]
        if older:
            table.maintenance.expire_snapshots().by_ids(older).commit()
        return {deep_storage.normalize_uri(t.file.file_path) for t in table.scan().plan_files()}
    finally:
        cat.engine.dispose()
