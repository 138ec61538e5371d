"""An Iceberg table per datasource (`microbatch.iceberg`): the files of its visible segments, committed through
pyiceberg's SQL catalog, whose tables live in the metadata database next to ours.

The metadata store stays the truth and the table follows it. `sync` makes the table's data files exactly the
visible segments' files, in one Iceberg commit. Its snapshot summary carries the datasource's `commit_version`
and committed offsets, read in the same store transaction as the segments (under the datasource's lock, so no
publish falls between them). A reader of the table therefore never sees a file whose offsets are not committed:
only published segments are ever added.

A sync adds the files the table lacks and removes the ones no longer visible, so it is idempotent:
  - After a crash between a publish and its sync, the next sync brings the table level, every file once.
  - Two syncs at once are kept apart by the catalog's optimistic commit (a compare-and-swap on the table's
    metadata location); the loser reads again and finds the table level.
The table is loaded before the store is read: a sync that read an older state than a commit it did not see
cannot win that compare-and-swap, so the table never moves back.

Data files are the segments' own Parquet files, added where they are (no copy). The Iceberg metadata lives in
`<deep storage>/<dataSource>/.iceberg/<table>` (a leading dot: no run id's folder can be named so). The table is
partitioned by the smallest of hour, day, month and year that holds whole segments
(`Granularity.calendar_bucket`). Its schema is the segments' columns, widened by name as the spec gains
columns.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
import sqlalchemy as sa

from ingest_core.core.column_types import DOUBLE, FLOAT
from ingest_core.core.errors import IngestError
from ingest_core.core.offsets import offsets_to_json
from ingest_core.core.timeline import visible_segments
from ingest_core.executor.discovery import arrow_schema, arrow_type, conform, needs_conversion
from ingest_core.core.defaults import OBJECT_STORE_CONNECT_TIMEOUT_S, OBJECT_STORE_REQUEST_TIMEOUT_S
from ingest_core.handover import deep_storage, object_store
from ingest_core.store.main_line import MainLine
from ingest_core.store.records import SegmentRecord
from ingest_core.store.segment_schema import typed

if TYPE_CHECKING:
    from ingest_core.core.spec import DatasourceSpec
    from ingest_core.store.metadata import MetadataStore

log = logging.getLogger(__name__)

CATALOG = "ingest"
COMMIT_VERSION = "ingest.commit-version"
COMMITTED_OFFSETS = "ingest.committed-offsets"
VISIBLE_SEGMENTS = "ingest.visible-segments"
COMMIT_ATTEMPTS = 5


@dataclass(frozen=True)
class IcebergSync:
    """What one sync did."""

    table: str  # namespace.table
    added: int  # data files
    removed: int
    snapshot_id: int | None  # the table's current snapshot (None: no table yet, nothing was published)
    commit_version: int  # the store's, that the table now reflects

    @property
    def changed(self) -> bool:
        return bool(self.added or self.removed)


@dataclass(frozen=True)
class PublishedState:
    """A datasource's published state, read in one locked transaction."""

    commit_version: int
    committed: dict[str, dict[str, int]]  # offsets_to_json
    files: dict[str, SegmentRecord]  # the visible segments by their file's normalized URI


def published_state(store: MetadataStore, name: str) -> PublishedState:
    with MainLine.locked(store, name, planning_lock=False) as line:
        visible = visible_segments(store.segment_records.of(name, conn=line.conn))
        committed = {tp: k.offset for tp, k in line.committed().items()}
        return PublishedState(line.commit_version, offsets_to_json(committed),
                              {deep_storage.normalize_uri(s.location): s for s in visible})


def table_identifier(spec: DatasourceSpec) -> tuple[str, str]:
    cfg = spec.microbatch.iceberg
    if cfg is None:
        raise IngestError(f"datasource {spec.datasource!r} has no Iceberg table: set microbatch.iceberg in its spec")
    return cfg.namespace, cfg.table or spec.datasource


def table_location(spec: DatasourceSpec) -> str:
    return deep_storage.join(deep_storage.datasource_uri(spec), ".iceberg", table_identifier(spec)[1])


def catalog(store: MetadataStore, spec: DatasourceSpec | None = None) -> Any:
    """pyiceberg's SQL catalog in the metadata database (its own tables: iceberg_tables and
    iceberg_namespace_properties), its files reached as `spec`'s deep storage is (`file_io_properties`).
    Dispose of its engine (`.engine.dispose()`) when done."""
    from pyiceberg.catalog.sql import SqlCatalog

    props = file_io_properties(deep_storage.datasource_uri(spec)) if spec is not None else {}
    for attempt in range(1, 4):
        try:
            return SqlCatalog(CATALOG, uri=store.url, **props)
        except sa.exc.DBAPIError:
            # another process created one of the catalog's two tables at the same moment (pyiceberg checks, then
            # creates): it exists now; each attempt can lose that race only once per table
            if attempt == 3:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def file_io_properties(uri: str) -> dict[str, str]:
    """pyiceberg's FileIO settings for an object store reached with registered settings
    (`object_store.register_s3`); none for a filesystem or the AWS SDK's own chain."""
    access = object_store.s3_access(uri)
    if access is None:
        return {}
    props = {"s3.force-virtual-addressing": "false" if access.path_style else "true",
             "s3.connect-timeout": str(OBJECT_STORE_CONNECT_TIMEOUT_S),
             "s3.request-timeout": str(OBJECT_STORE_REQUEST_TIMEOUT_S)}
    if access.endpoint:
        deep_storage.filesystem(uri)  # the same AWS SDK settings as this process's own files (checksums)
        props["s3.endpoint"] = access.endpoint
    if access.region:
        props["s3.region"] = access.region
    if access.access_key:
        props.update({"s3.access-key-id": access.access_key, "s3.secret-access-key": access.secret_key or ""})
        if access.session_token:
            props["s3.session-token"] = access.session_token
    return props


def sync(store: MetadataStore, spec: DatasourceSpec) -> IcebergSync:
    """Bring the datasource's Iceberg table level with its visible segments (see the module docstring)."""
    from pyiceberg.exceptions import (
        CommitFailedException,
        NoSuchTableError,
        TableAlreadyExistsError,
    )

    identifier = table_identifier(spec)
    name = ".".join(identifier)
    cat = catalog(store, spec)
    try:
        for attempt in range(1, COMMIT_ATTEMPTS + 1):
            try:
                table = cat.load_table(identifier)  # before the store: see the module docstring
            except NoSuchTableError:
                table = None
            state = published_state(store, spec.datasource)
            if table is None:
                if not state.files:
                    return IcebergSync(name, 0, 0, None, state.commit_version)
                try:
                    _create(cat, identifier, spec, next(iter(state.files)))
                except (TableAlreadyExistsError, CommitFailedException):
                    pass  # another sync made it: load it
                continue
            try:
                return _commit(table, name, state)
            except CommitFailedException as exc:
                log.info("Iceberg table %s changed during sync attempt %d (%s): reading it again", name, attempt, exc)
        raise IngestError(f"Iceberg table {name} of datasource {spec.datasource!r} kept changing during "
                          f"{COMMIT_ATTEMPTS} sync attempts; the next run's report syncs it again")
    finally:
        cat.engine.dispose()


def _create(cat: Any, identifier: tuple[str, str], spec: DatasourceSpec, first_file: str) -> None:
    from pyiceberg.exceptions import NamespaceAlreadyExistsError

    try:
        cat.create_namespace(identifier[0])
    except (NamespaceAlreadyExistsError, sa.exc.IntegrityError):  # made meanwhile (pyiceberg checks, then inserts)
        if not cat.namespace_exists(identifier[0]):
            raise
    schema = _file_schema(first_file)
    # a coarser compaction makes coarser segments: partition by what holds those too
    coarser = spec.compaction.granularity_spec.segment_granularity if spec.compaction is not None else None
    bucket = (coarser or spec.data_schema.granularity_spec.segment_granularity).calendar_bucket()
    # pyiceberg's own retry would re-apply an append on top of a concurrent one (each file twice): a conflict
    # goes back to `sync`, which reads the table and the store again
    with cat.create_table_transaction(identifier, schema=schema, location=table_location(spec),
                                      properties={"commit.retry.num-retries": "0"}) as tx:
        if bucket is not None and "__time" in schema.names:  # created partitioned, in one commit
            from pyiceberg.transforms import (
                DayTransform,
                HourTransform,
                MonthTransform,
                YearTransform,
            )

            transform = {"hour": HourTransform, "day": DayTransform, "month": MonthTransform,
                         "year": YearTransform}[bucket]
            with tx.update_spec() as update:
                update.add_field("__time", transform(), f"__time_{bucket}")


def _table_file(table: Any, uri: str, own: dict[str, str], target: dict[str, str]) -> str:
    """The file the table holds for the segment file `uri`: that file, when Iceberg reads its columns as the
    merged schema types them (the same, or FLOAT as DOUBLE); else a copy brought to that schema
    (`executor.discovery.conform`), under the table's `data/`, named for the file and the schema."""
    if not needs_conversion({n: t for n, t in own.items() if (t, target[n]) != (FLOAT, DOUBLE)}, target):
        return uri
    key = hashlib.sha256(json.dumps([uri, target], sort_keys=True).encode()).hexdigest()[:32]
    return deep_storage.normalize_uri(deep_storage.join(table.location(), "data", f"widened-{key}.parquet"))


def _write_converted(uri: str, source: str, own: dict[str, str], target: dict[str, str]) -> None:
    fs, path = deep_storage.filesystem(source)
    converted = conform(pq.read_table(path, filesystem=fs), own, target)
    fs, written, path = deep_storage.staging_path(uri)
    pq.write_table(converted, written, filesystem=fs)
    deep_storage.settle(fs, written, path)  # whole or not at all: a sync that died midway left no half file


def _changed_types(schema: Any, target: dict[str, str]) -> list[str]:
    """The table's columns whose type the merged schema changes in a way Iceberg cannot promote."""
    have = {f.name: f.field_type for f in schema.fields}
    changed = []
    for name, t in target.items():
        if name in have:
            have_type, want = str(have[name]), str(_iceberg_type(arrow_type(t)))  # `list<long>`: no field ids
            if have_type != want and (have_type, want) != ("float", "double"):
                changed.append(name)
    return changed


def _iceberg_type(t: pa.DataType) -> Any:
    from pyiceberg.io.pyarrow import _ConvertToIcebergWithoutIDs, visit_pyarrow

    return visit_pyarrow(pa.schema([("c", t)]), _ConvertToIcebergWithoutIDs()).fields[0].field_type


def _file_schema(uri: str) -> pa.Schema:
    fs, path = deep_storage.filesystem(uri)
    return pq.read_schema(path, filesystem=fs)


def _commit(table: Any, name: str, state: PublishedState) -> IcebergSync:
    from pyiceberg.io.pyarrow import parquet_files_to_data_files
    from pyiceberg.table import TableProperties

    snapshot = table.current_snapshot()
    current = {deep_storage.normalize_uri(task.file.file_path): task.file
               for task in table.scan().plan_files()} if snapshot is not None else {}
    owns, target = typed(list(state.files.values()))
    wanted = {_table_file(table, uri, own, target): (uri, own) for uri, own in zip(state.files, owns)}
    add = [uri for uri in wanted if uri not in current]
    remove = [f for uri, f in current.items() if uri not in wanted]
    recorded = snapshot.summary.additional_properties.get(COMMIT_VERSION) if snapshot is not None else None
    if not add and not remove and (recorded == str(state.commit_version) or snapshot is None):
        return IcebergSync(name, 0, 0, snapshot.snapshot_id if snapshot else None, state.commit_version)
    properties = {COMMIT_VERSION: str(state.commit_version), COMMITTED_OFFSETS: json.dumps(state.committed),
                  VISIBLE_SEGMENTS: str(len(state.files))}
    for uri in add:
        if uri not in state.files:  # a segment converted to the table's schema (`_table_file`)
            _write_converted(uri, *wanted[uri], target)
    with table.transaction() as tx:
        if add:
            changed = _changed_types(table.schema(), target)
            if changed:  # Iceberg cannot promote these (LONG to DOUBLE, ...): the column is made anew
                with tx.update_schema() as update:
                    for column in changed:
                        update.delete_column(column)
            with tx.update_schema() as update:
                update.union_by_name(arrow_schema(target))
            # files without Iceberg field ids are read by name: the mapping must know every column
            tx.set_properties(**{TableProperties.DEFAULT_NAME_MAPPING:
                                 tx.table_metadata.schema().name_mapping.model_dump_json()})
        producer = tx.update_snapshot(snapshot_properties=properties)
        with (producer.overwrite() if remove else producer.fast_append()) as files:
            for data_file in remove:
                files.delete_data_file(data_file)
            for data_file in parquet_files_to_data_files(table.io, tx.table_metadata, iter(add)):
                files.append_data_file(data_file)
    table.refresh()
    log.info("Iceberg table %s: %d files added, %d removed (commit version %d)", name, len(add), len(remove),
             state.commit_version)
    return IcebergSync(name, len(add), len(remove), table.current_snapshot().snapshot_id, state.commit_version)
