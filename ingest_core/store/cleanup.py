"""Removing job output that nothing was published from (Druid's kill task: only unused data goes).

Every job attempt writes a folder of its own (`deep_storage`), and a publish points segment records into one
attempt per task group. The other attempts (failed or killed ones, other replicas, a task re-executed after
its run published, every attempt of a superseded or expired run) are orphans once their run is final:
published, superseded or expired, states no run ever leaves, so its segment records never change again.
A run that may still publish (in flight, or failed and retryable) keeps all its files. A folder that any
segment record, used or unused, or a published dead-letter file points into is never an orphan (a published
attempt whose records were all bad has dead letters and no segment).
"""

from __future__ import annotations

import bisect
import logging
from dataclasses import dataclass
from typing import Iterable, Sequence

from ingest_core.core.spec import DatasourceSpec
from ingest_core.handover import deep_storage, s3_uploads
from ingest_core.store.metadata import MetadataStore

log = logging.getLogger(__name__)

CLEANUP = "cleanup"  # the audit action


@dataclass(frozen=True)
class Orphan:
    run_id: str
    uri: str  # an attempt folder


def unreferenced(folders: Iterable[str], locations: Iterable[str]) -> list[str]:
    """The folders that no location lies under (pure)."""
    refs = sorted(deep_storage.normalize_uri(loc) for loc in locations)
    out = []
    for folder in folders:
        prefix = deep_storage.normalize_uri(folder) + "/"
        i = bisect.bisect_left(refs, prefix)  # the first location at or after the prefix, if any is under it
        if not (i < len(refs) and refs[i].startswith(prefix)):
            out.append(folder)
    return out


def referenced_locations(store: MetadataStore, name: str) -> list[str]:
    """What a datasource's segment records (used or unused) and published dead-letter files point at."""
    locations = [s.location for s in store.segment_records.of(name, used_only=False)]
    return locations + [f.location for f in store.dead_letter_files.of(name)]


def find_orphans(store: MetadataStore, spec: DatasourceSpec, run_ids: Sequence[str] | None = None, *,
                 locations: list[str] | None = None, done: bool = False) -> list[Orphan]:
    """The attempt folders of final runs (all, or those of `run_ids`) that no segment record or published
    dead-letter file points into (`locations`: `referenced_locations`, when the caller has it). `done`: the
    caller knows that `run_ids` never publish (a retention's failed runs that a later run published past)."""
    name, base = spec.datasource, deep_storage.base_for(spec)
    statuses = store.runs.statuses(name, run_ids)
    if locations is None:
        locations = referenced_locations(store, name)
    folder_runs: dict[str, str] = {}
    for run_id in (run_ids if run_ids is not None else sorted(statuses)):
        if run_id in statuses and (statuses[run_id].is_final or done):
            run_folder = deep_storage.run_uri(base, name, run_id)
            folders = deep_storage.attempt_folders(run_folder, recursive=True)
            if deep_storage.is_object_store(run_folder):  # a killed job's unfinished uploads: no object lists them
                uploading = s3_uploads.folders_with_uploads(run_folder, deep_storage.ATTEMPT)
                folders = sorted(set(folders) | set(uploading))
            folder_runs.update(dict.fromkeys(folders, run_id))
    return [Orphan(folder_runs[uri], uri) for uri in unreferenced(list(folder_runs), locations)]


def remove_orphans(store: MetadataStore, datasource: str, orphans: Sequence[Orphan], actor: str) -> None:
    """Delete them and write one audit record."""
    for orphan in orphans:
        deep_storage.delete_dir(orphan.uri)
        log.info("removed %s (run %s: nothing was published from it)", orphan.uri, orphan.run_id)
    if orphans:
        store.audit_log.write(datasource, CLEANUP, {"removed": [o.uri for o in orphans],
                                          "runs": sorted({o.run_id for o in orphans})}, actor)
