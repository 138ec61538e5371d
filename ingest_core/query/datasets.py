"""A datasource's visible segments as one Arrow dataset for DuckDB to read: the files where they are (any deep
storage), of the segments' merged schema (`store.segment_schema`)."""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.dataset as ds

from ingest_core.executor.discovery import arrow_schema, castable, conform
from ingest_core.handover import deep_storage
from ingest_core.query.columns import SpecColumns, in_druid_order
from ingest_core.store.records import SegmentRecord
from ingest_core.store.segment_schema import read_segment, typed

EMPTY = pa.schema([("__time", pa.timestamp("ms", tz="UTC"))])  # a datasource with nothing published yet


def segments_dataset(segments: list[SegmentRecord], spec: SpecColumns = SpecColumns()) -> ds.Dataset:
    """The segments as one Arrow dataset of their merged schema (`store.segment_schema`), its columns in Druid's
    order for `spec` (`SELECT *`'s). Files are read where they are, Arrow casting what widens by a cast (LONG to
    DOUBLE, a number to STRING); the rare segment that needs more (STRING to COMPLEX<json>, a scalar to an array)
    is read and brought to the schema first."""
    if not segments:
        return ds.dataset(EMPTY.empty_table())
    owns, merged = typed(segments)
    target = in_druid_order(merged, spec)
    schema = arrow_schema(target)
    files, tables = [], []
    for seg, own in zip(segments, owns):
        if all(t == target[n] or castable(t, target[n]) for n, t in own.items()):
            files.append(seg.location)
        else:
            tables.append(conform(read_segment(seg)[0], own, target).cast(schema))
    datasets = [ds.FileSystemDatasetFactory(fs, paths, ds.ParquetFileFormat()).finish(schema)
                for paths, fs in _by_filesystem(files)]
    if tables:
        datasets.append(ds.dataset(pa.concat_tables(tables)))
    return datasets[0] if len(datasets) == 1 else ds.dataset(datasets)


def _by_filesystem(locations: Iterable[str]) -> list[tuple[list[str], object]]:
    """Locations grouped by the filesystem that reads them (one per scheme and host)."""
    groups: dict[tuple[str, str], tuple[list[str], object]] = {}
    for location in locations:
        uri = deep_storage.normalize_uri(location)
        key = (urlsplit(uri).scheme, urlsplit(uri).netloc)
        fs, path = deep_storage.filesystem(uri)
        groups.setdefault(key, ([], fs))[0].append(path)
    return list(groups.values())
