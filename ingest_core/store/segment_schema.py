"""A datasource's schema over its segments: each segment's column types, the merged schema (every column of every
segment, widened: `core.column_types.merge_types`), and a segment's rows brought to it (`executor.discovery.conform`).

Segments of different runs can differ (schema discovery, a spec that gained a dimension): a column an older
segment lacks reads as null there, and one typed LONG in old segments and DOUBLE in new ones reads as DOUBLE. The
reader, SQL, compaction and the Iceberg table all read segments through here, so they agree.

A segment's types are in its record (`payload.types`, written by the job and by compaction); a segment recorded
before that has them read from its Parquet footer (a string column there is STRING).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ingest_core.core.column_types import merge_types
from ingest_core.executor.discovery import conform, schema_types
from ingest_core.handover import deep_storage
from ingest_core.store.records import SegmentRecord


def recorded_types(seg: SegmentRecord) -> dict[str, str] | None:
    """The segment's column types as its record keeps them; None for a record of before."""
    types = (seg.payload or {}).get("types")
    return dict(types) if types else None


def segment_types(seg: SegmentRecord, schema: pa.Schema | None = None) -> dict[str, str]:
    """The segment's column types: recorded, else from `schema` (its file's, when the caller read it) or its
    Parquet footer."""
    recorded = recorded_types(seg)
    if recorded is not None:
        return recorded
    if schema is None:
        fs, path = deep_storage.filesystem(seg.location)
        schema = pq.read_schema(path, filesystem=fs)
    return schema_types(schema)


def merged_types(segments: Iterable[SegmentRecord]) -> dict[str, str]:
    """Every column of `segments`, widened, in the order of first appearance (segments in publish order)."""
    return typed(list(segments))[1]


def typed(segments: Sequence[SegmentRecord]) -> tuple[list[dict[str, str]], dict[str, str]]:
    """Each segment's types (in the order given) and their merged schema."""
    owns = [segment_types(s) for s in segments]
    order = sorted(range(len(segments)), key=lambda i: (segments[i].created_at, segments[i].interval_start,
                                                         segments[i].partition_num))
    return owns, merge_types(owns[i] for i in order)


def read_segment(seg: SegmentRecord, columns: Sequence[str] | None = None) -> tuple[pa.Table, dict[str, str]]:
    """A segment's rows (only `columns` of them, those it has) and its column types."""
    fs, path = deep_storage.filesystem(seg.location)
    if columns is not None:
        have = set(pq.read_schema(path, filesystem=fs).names)
        columns = [c for c in columns if c in have]
    table = pq.read_table(path, filesystem=fs, columns=columns)
    return table, segment_types(seg, table.schema)


def read_conformed(segments: Sequence[SegmentRecord], columns: Sequence[str] | None = None) -> pa.Table | None:
    """The rows of `segments` as one table of their merged schema (None: no segments)."""
    parts = [read_segment(s, columns) for s in segments]
    if not parts:
        return None
    ordered = sorted(range(len(segments)), key=lambda i: (segments[i].created_at, segments[i].interval_start,
                                                           segments[i].partition_num))
    target = merge_types(parts[i][1] for i in ordered)
    if columns is not None:
        target = {c: target[c] for c in columns if c in target}
    return pa.concat_tables([conform(table, own, target) for table, own in parts], promote_options="permissive")


def new_columns(segments: Iterable[SegmentRecord], run_id: str) -> dict[str, str]:
    """The columns first seen in run `run_id` (in its segments, in no segment of another run the store still
    records, used or not), with their types there; none for the first run (every column is new then). Only the
    run's own segments recorded before types were are read (their footers)."""
    mine: list[dict[str, str]] = []
    others: set[str] = set()
    earlier = False
    for s in segments:
        if s.run_id == run_id:
            try:
                mine.append(segment_types(s))
            except (OSError, pa.ArrowInvalid):  # a file gone or unreadable: status shows what the others say
                continue
        else:
            earlier = True
            others.update(_column_names(s))
    return {n: t for n, t in merge_types(mine).items() if n not in others} if earlier else {}


def _column_names(seg: SegmentRecord) -> list[str]:
    payload: dict[str, Any] = seg.payload or {}
    return list(payload.get("types") or payload.get("columns") or [])
