"""The `expression` and `variance` aggregators through Spark: the splits' partial rows merged by the job's rollup
(`spark.rollup.rollup`), the rows of two runs combined by the compaction job (`spark.compaction.compact`); the
stored values are those of all the rows (Druid's documented expression examples, the variance of every value)."""

from __future__ import annotations

import struct
from datetime import datetime, timedelta, timezone
from fractions import Fraction

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

T0 = datetime(2026, 3, 2, 10, 0, tzinfo=timezone.utc)
METRICS = [
    {"type": "count", "name": "rows"},
    {"type": "expression", "name": "expression_count", "fields": [], "initialValue": "0", "fold": "__acc + 1",
     "combine": "__acc + expression_count"},
    {"type": "expression", "name": "expression_sum", "fields": ["column_a"], "initialValue": "0",
     "fold": "__acc + column_a"},
    {"type": "expression", "name": "distinct", "fields": ["column_a"], "initialValue": "<LONG>[]",
     "fold": "array_set_add(__acc, column_a)", "combine": "array_set_add_all(__acc, distinct)"},
    {"type": "variance", "name": "var", "fieldName": "column_a", "inputType": "long"},
    {"type": "longSum", "name": "total", "fieldName": "column_a"},
]


def spec_of():
    from ingest_core.core.spec import parse_spec

    return parse_spec({"type": "kafka", "spec": {"dataSchema": {
        "dataSource": "m", "timestampSpec": {"column": "ts"}, "dimensionsSpec": {"dimensions": ["page"]},
        "metricsSpec": METRICS, "granularitySpec": {"segmentGranularity": "HOUR", "queryGranularity": "HOUR"}},
        "ioConfig": {"topic": "t", "inputFormat": {"type": "json"},
                     "consumerProperties": {"bootstrap.servers": "x:1"}}}})


def merged_run(spark, spec, values_by_split: list[dict[str, list[int]]]):
    """One run: each split's rows (page -> values of column_a) partially rolled up, then Spark's rollup."""
    from pyspark.sql.pandas.types import from_arrow_schema

    from ingest_core.core.aggregators import LONG
    from ingest_core.executor.rollup import PartialRollup, aggregators
    from ingest_core.executor.row_parser import OFFSET, PARTITION, TIME, TIME_TYPE
    from ingest_core.spark.kafka_source import BUCKET, SEGMENT
    from ingest_core.spark.rollup import rollup

    partial_rollup = PartialRollup([BUCKET, "page", PARTITION], aggregators(spec))
    partials = []
    for split, by_page in enumerate(values_by_split):
        rows = [(page, v) for page, vs in by_page.items() for v in vs]
        n = len(rows)
        t = pa.table({TIME: pa.array([T0] * n, TIME_TYPE), "page": [r[0] for r in rows],
                      "__in_long_column_a": pa.array([r[1] for r in rows], pa.int64()),
                      "__in_string_column_a": pa.array([str(r[1]) for r in rows]),
                      "__in_string_column_a__kind": pa.array([LONG] * n, pa.int8()),
                      PARTITION: pa.array([split] * n, pa.int32()), OFFSET: pa.array(range(n), pa.int64()),
                      BUCKET: pa.array([T0] * n, TIME_TYPE)})
        p = partial_rollup.aggregate(t)
        partials.append(p.append_column(SEGMENT, pa.array([int(T0.timestamp() * 1000)] * p.num_rows, pa.int64())))
    table = pa.concat_tables(partials)
    df = spark.createDataFrame(table.to_pylist(), schema=from_arrow_schema(table.schema))
    rolled, dims, metrics = rollup(df, spec)
    return rolled.select(TIME, *dims, *metrics)


def check(rows: list[dict], values: dict[str, list[int]]) -> None:
    for page, vs in values.items():
        (row,) = [r for r in rows if r["page"] == page]
        assert (row["rows"], row["expression_count"], row["expression_sum"], row["total"]) == (
            len(vs), len(vs), sum(vs), sum(vs))
        assert sorted(row["distinct"]) == sorted(set(vs))
        count, total, nvariance = struct.unpack(">qdd", row["var"])
        mean = Fraction(sum(vs), len(vs))
        assert (count, total) == (len(vs), sum(vs))
        assert nvariance == pytest.approx(float(sum((v - mean) ** 2 for v in vs)), rel=1e-12)


def test_spark_merges_and_compaction_combines_expression_and_variance_partials(spark, tmp_path):
    from ingest_core.core.compaction import CompactionJob
    from ingest_core.spark.compaction import compact

    spec = spec_of()
    run1 = [{"a": [1, 2, 2], "b": [10]}, {"a": [5, -7], "b": [10, 3]}]
    run2 = [{"a": [100], "b": [4, 4]}, {"a": [2]}]
    locations = []
    for i, run in enumerate((run1, run2)):
        rolled = merged_run(spark, spec, run)
        table = pa.Table.from_pylist([r.asDict() for r in rolled.collect()])
        check(table.to_pylist(), {p: sum((s.get(p, []) for s in run), []) for p in ("a", "b")})
        path = tmp_path / f"run{i}.parquet"
        pq.write_table(table, path)
        locations.append(path.as_uri())
    job = CompactionJob("m", "compact-1", T0, T0 + timedelta(hours=1), ("r1", "r2"), tuple(locations), 1000, 1,
                        (tmp_path / "out").as_uri())
    files = compact(spark, spec, job)
    rows = pa.concat_tables(pq.read_table(f.location.removeprefix("file://")) for f in files).to_pylist()
    everything = {p: sum((s.get(p, []) for s in run1 + run2), []) for p in ("a", "b")}
    check(rows, everything)
