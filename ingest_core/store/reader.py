"""Reading a datasource: the rows of its visible segments (published, used, not overshadowed), as an Arrow
table or a Spark DataFrame. Unpublished job output in deep storage is never read.

    reader = DatasourceReader(MetadataStore(url), "wikipedia")
    table = reader.to_arrow()                 # pyarrow.Table, sorted by __time
    df = reader.to_spark(spark)               # pyspark DataFrame over the same files
    reader.to_arrow(interval=(start, end))    # only segments overlapping [start, end)
    reader.dead_letters(run_id=None)          # the published runs' dead letters (handover.dead_letters)
"""

from __future__ import annotations

from datetime import datetime
from functools import partial, reduce
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ingest_core.core.timeline import visible_segments
from ingest_core.executor.discovery import arrow_schema, conform_batches, needs_conversion
from ingest_core.handover import dead_letters, object_store
from ingest_core.store.metadata import MetadataStore
from ingest_core.store.records import SegmentRecord
from ingest_core.store.segment_schema import merged_types, read_conformed, typed


class DatasourceReader:
    def __init__(self, store: MetadataStore, datasource: str):
        self.store = store
        self.datasource = datasource

    def segments(self, interval: tuple[datetime, datetime] | None = None) -> list[SegmentRecord]:
        visible = visible_segments(self.store.segment_records.of(self.datasource, used_only=True))
        if interval is not None:
            lo, hi = interval
            visible = [s for s in visible if s.interval_start < hi and lo < s.interval_end]
        return visible

    def to_arrow(self, interval: tuple[datetime, datetime] | None = None, columns: list[str] | None = None) -> pa.Table:
        """The rows of the visible segments, in their merged schema (`store.segment_schema`): a column a segment
        lacks is null there, a column typed LONG in one and DOUBLE in another is DOUBLE."""
        table = read_conformed(self.segments(interval), columns)
        if table is None:
            return pa.table({"__time": pa.array([], pa.timestamp("ms", tz="UTC"))})
        if interval is not None:
            t = table.column("__time")
            lo, hi = (pa.scalar(x, t.type) for x in interval)
            table = table.filter(pc.and_(pc.greater_equal(t, lo), pc.less(t, hi)))
        return table.sort_by("__time") if "__time" in table.column_names else table

    def schema(self) -> dict[str, str]:
        """The merged schema of the visible segments: column -> type (`core.column_types`)."""
        return merged_types(self.segments())

    def to_spark(self, spark: Any, interval: tuple[datetime, datetime] | None = None) -> Any:
        from pyspark.sql.pandas.types import from_arrow_schema

        segments = self.segments(interval)
        if not segments:
            return spark.createDataFrame([], "__time timestamp")
        owns, target = typed(segments)
        schema = from_arrow_schema(arrow_schema(target))
        # the datasource's own object store settings (one deep storage per datasource), never the session's
        # filesystem cached for another datasource on the same bucket name
        access = object_store.use_in_spark(spark, segments[0].location)
        by_types: dict[tuple, tuple[dict[str, str], list[str]]] = {}
        for s, own in zip(segments, owns):
            by_types.setdefault(tuple(own.items()), (own, []))[1].append(s.location)
        frames = []
        for own, locations in by_types.values():  # the files of one schema; a narrower one widened, in Python
            frame = spark.read.parquet(*(object_store.spark_uri(access, location) for location in locations))
            if needs_conversion(own, target):
                frame = frame.mapInArrow(partial(conform_batches, own=own, target=target), schema)
            frames.append(frame)
        df = reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), frames)
        if interval is not None:
            from pyspark.sql import functions as F

            df = df.where((F.col("__time") >= F.lit(interval[0])) & (F.col("__time") < F.lit(interval[1])))
        return df


    def dead_letters(self, run_id: str | None = None) -> pa.Table:
        """The dead letters of the datasource's published runs (or of `run_id`), in publish and offset order:
        `run_id` then `handover.dead_letters.SCHEMA`'s columns. A run that did not publish has none."""
        files = self.store.dead_letter_files.of(self.datasource, run_id=run_id)
        parts = []
        for f in files:
            table = dead_letters.read_files([f.location])
            parts.append(table.add_column(0, "run_id", pa.array([f.run_id] * table.num_rows, pa.string())))
        if not parts:
            empty = dead_letters.SCHEMA.empty_table()
            return empty.add_column(0, "run_id", pa.array([], pa.string()))
        return pa.concat_tables(parts)
