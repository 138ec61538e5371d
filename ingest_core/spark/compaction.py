"""The compaction job: one interval's visible segments rewritten into as few segments as `maxRowsPerSegment`
allows, rolled up again (Druid's compaction task, as a bounded Spark job).

Rows with the same `__time` and dimensions merge with the metrics' combining aggregators: count and sums add
(a longSum exactly: high and low 32 bits apart, as ingestion does, `job.exact_long_sums`), min and max keep
theirs, sketches are merged (unions, `job.merge_sketches`), any keeps a non-null value, first and last take the
value of the segment published first / last (segments hold no event times for them; publish order follows offset
order). Without rollup in the spec, rows are kept as they are. Columns
a segment lacks read as null; the output is sorted by time within each file.

The job writes Parquet under its own folder and a `report.json` listing the files with their rows and sizes;
nothing is visible until the compaction's publish (`store.compaction`) swaps them in. The same code runs in a
spark-submit driver (`spark_jobs/compact_job.py`) and over Spark Connect (`ingest_core.spark.connect`).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from functools import partial, reduce
from typing import Any

import pyarrow.parquet as pq

from ingest_core.core.column_types import merge_types
from ingest_core.core.compaction import CompactedFile, CompactionJob
from ingest_core.core.errors import IngestError
from ingest_core.core.spec import DatasourceSpec, parse_spec_text
from ingest_core.executor.discovery import (
    arrow_schema,
    conform_batches,
    needs_conversion,
    schema_types,
)
from ingest_core.executor.rollup import aggregators
from ingest_core.executor.row_parser import TIME
from ingest_core.handover import deep_storage, object_store
from ingest_core.kafka.storage_secrets import use_deep_storage
from ingest_core.spark.rollup import combine_metrics, quoted, sql_functions
from ingest_core.spark.settings import spark_session_builder, submitted_conf

log = logging.getLogger(__name__)

ORDER = "__segment_order"
REPORT = "report.json"


def compact(spark: Any, spec: DatasourceSpec, job: CompactionJob) -> list[CompactedFile]:
    """Rewrite the job's segments; returns the files written (also in `report.json` under the output). Segments
    of differing schemas are read in their merged one (`executor.discovery.conform`: LONG and DOUBLE as DOUBLE,
    a column a segment lacks as null)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    access = object_store.use_in_spark(spark, job.output_uri)  # the segments' and the output's: one deep storage
    target = merge_types(job.types) if job.types else {}
    frames = []
    for order, location in enumerate(job.locations):
        frame = spark.read.parquet(object_store.spark_uri(access, location))
        own = job.types[order] if job.types else {}
        if needs_conversion(own, target):
            frame = frame.mapInArrow(partial(conform_batches, own=own, target=target),
                                     from_arrow_schema(arrow_schema(target)))
        frames.append(frame.withColumn(ORDER, sql_functions(frame).lit(order)))
    rows = reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), frames)
    rolled = combine(rows, spec) if spec.data_schema.granularity_spec.rollup else rows.drop(ORDER)
    folder = deep_storage.join(job.output_uri, "segments")
    (rolled.repartition(job.target_segments).sortWithinPartitions(TIME)
     .write.option("maxRecordsPerFile", job.target_rows).parquet(object_store.spark_uri(access, folder)))
    files = describe(folder, target)
    deep_storage.write_json(deep_storage.join(job.output_uri, REPORT),
                            {"job": job.to_json(), "files": [f.to_json() for f in files]})
    return files


def combine(rows: Any, spec: DatasourceSpec) -> Any:
    """Rows with the same time and dimensions merged with the metrics' combining aggregators."""
    present = set(rows.columns)
    aggs = [a for a in aggregators(spec) if a.name in present]
    metric_names = {a.name for a in aggregators(spec)}
    dims = [c for c in rows.columns if c not in metric_names and c not in (TIME, ORDER)]
    return combine_metrics(rows, [TIME, *dims], aggs, quoted(ORDER))


def describe(folder: str, types: dict[str, str] | None = None) -> list[CompactedFile]:
    """The Parquet files a write left in `folder`, with their rows and column types (from the footer, and
    `types` for what a footer cannot tell: COMPLEX<json>) and sizes."""
    fs, _ = deep_storage.filesystem(folder)
    out = []
    for info in deep_storage.list_files(folder, ".parquet"):
        with fs.open_input_file(info.path) as f:
            meta = pq.ParquetFile(f).metadata
        if meta.num_rows:
            out.append(CompactedFile(deep_storage.to_uri(folder, info.path), meta.num_rows, info.size,
                                     schema_types(meta.schema.to_arrow_schema(), types)))
    return sorted(out, key=lambda f: f.location)


def read_report(output_uri: str) -> list[CompactedFile]:
    raw = deep_storage.read_json(deep_storage.join(output_uri, REPORT))
    return [CompactedFile.from_json(f) for f in raw["files"]]


# ------------------------------------------------------------------------------------------------ entry point


def argument_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="compact_job", description=__doc__.split("\n\n")[0])
    ap.add_argument("--spec", required=True, help="the datasource's staged spec (JSON file or URI)")
    ap.add_argument("--job", required=True, help="the compaction job (JSON file or URI)")
    return ap


def load(args: argparse.Namespace) -> tuple[DatasourceSpec, CompactionJob]:
    try:
        spec = parse_spec_text(deep_storage.read_text(args.spec), args.spec)
        use_deep_storage(spec)
        job = CompactionJob.from_json(deep_storage.read_json(args.job))
    except (IngestError, KeyError, ValueError, OSError) as exc:
        raise IngestError(f"compact_job: {exc}") from None
    if job.datasource != spec.datasource:
        raise IngestError(f"compact_job: the job is for {job.datasource!r}, the spec for {spec.datasource!r}")
    return spec, job


def main(argv: list[str] | None = None) -> int:
    args = argument_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)  # it logs to stdout, where the summary goes
    try:
        spec, job = load(args)
    except IngestError as exc:
        print(exc, file=sys.stderr)
        return 2
    spark = spark_session_builder(f"compact {job.datasource} {job.task_id}", submitted_conf()).getOrCreate()
    try:
        files = compact(spark, spec, job)
    finally:
        spark.stop()
    print(json.dumps({"files": len(files), "rows": sum(f.rows for f in files)}))
    return 0
