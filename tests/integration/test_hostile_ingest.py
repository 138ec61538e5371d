"""A stream mixed with hostile records of every kind through the real broker, Spark and the publish:
the run publishes, every good row is exact, every bad one is counted, and the segments read back with pyarrow
and with Spark."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from helpers import T0, ingest_run, iso, rows_of, spec_from, sqlite_store

from ingest_core.store.reader import DatasourceReader

pytestmark = pytest.mark.kafka

BIG = 2 ** 62


def record(a, ts=None, **fields) -> bytes:
    return json.dumps({"ts": ts or iso(T0), "a": a, **fields}).encode()


def raw(text: str) -> bytes:
    return text.replace("TS", iso(T0)).encode()


def test_a_hostile_stream_publishes_exact_rows_and_counts_every_bad_one(spark, broker, tmp_path):
    store = sqlite_store(tmp_path)
    topic = broker.create_topic()
    good = [record(f"g{i % 3}", iso(T0 + timedelta(seconds=i)), n=i, x=i / 4) for i in range(20)]
    # (record, rows it gives, unparseable, processedWithError, thrownAway)
    hostile = [
        (record("big", n=BIG), 1, 0, 0, 0), (record("big", n=BIG), 1, 0, 0, 0), (record("big", n=BIG), 1, 0, 0, 0),
        (record("far", "9999-06-01T00:00:00Z", n=1), 0, 1, 0, 0),
        (record("old", "0001-01-01T00:30:00Z", n=1), 1, 0, 0, 0),
        (record("ovf1", n=1e300), 1, 0, 1, 0), (record("ovf2", n=1e20), 1, 0, 1, 0),
        (record("ovf3", n=-1e30), 1, 0, 1, 0), (record("ovf4", n=2 ** 63), 1, 0, 1, 0),
        (record("text7", n="7"), 1, 0, 0, 0),
        (raw('{"ts": "TS", "a": "nan", "n": NaN, "x": NaN}'), 1, 0, 1, 0),
        (raw('{"ts": "TS", "a": "inf", "n": 1, "x": Infinity}'), 1, 0, 1, 0),
        (record({"k": [1, 2]}, n=1), 1, 0, 0, 0),
        (b'{"ts": "' + iso(T0).encode() + b'", "a": "bad\xff\xfe", "n": 1}', 0, 1, 0, 0),  # not UTF-8
        (raw('{"ts": "TS", "a": "\\ud800", "n": 1}'), 0, 1, 0, 0),
        (raw('{"ts": "TS", "a": "nul\\u0000here", "n": 1}'), 1, 0, 0, 0),
        (record("tf", n=1, m=0), 0, 1, 0, 0),  # the transform n / m: long division by zero
        (record("tf2", n=84, m=2), 1, 0, 0, 0),
        (None, 0, 0, 0, 1), (b"", 0, 0, 0, 1),
        (b"[1, 2]", 0, 1, 0, 0), (b"42", 0, 1, 0, 0), (b"{not json", 0, 1, 0, 0),
        (raw('{"ts": "TS", "a": "two1", "n": 1} {"ts": "TS", "a": "two2", "n": 2}'), 2, 0, 0, 0),
        (raw('{"ts": "TS", "a": "deep", "n": 1, "z": ' + "[" * 100_000 + "]" * 100_000 + "}"), 0, 1, 0, 0),
    ]
    records = good[:10] + [h[0] for h in hostile] + good[10:]
    broker.produce(topic, records)
    spec = spec_from(broker.bootstrap, topic, {
        "timestampSpec": {"column": "ts", "format": "iso"},
        "dimensionsSpec": {"dimensions": ["a", {"type": "long", "name": "t"}]},
        "transformSpec": {"transforms": [{"type": "expression", "name": "t", "expression": "n / m"}]},
        "metricsSpec": [{"type": "count", "name": "cnt"}, {"type": "longSum", "name": "ls", "fieldName": "n"},
                        {"type": "doubleSum", "name": "ds", "fieldName": "x"},
                        {"type": "longMax", "name": "lmax", "fieldName": "n"}],
        "granularitySpec": {"segmentGranularity": "HOUR", "queryGranularity": "HOUR", "rollup": True},
    }, tuning={"maxParseExceptions": 1000, "maxSavedParseExceptions": 100})
    _, reports, _ = ingest_run(spark, store, spec, "r1", tmp_path.as_uri())

    stats = reports[0].stats
    rows = 20 + sum(h[1] for h in hostile)
    assert stats.unparseable == sum(h[2] for h in hostile)
    assert stats.processed_with_error == sum(h[3] for h in hostile)
    assert stats.thrown_away == sum(h[4] for h in hostile)
    assert stats.processed + stats.processed_with_error == rows
    saved = {e.offset: e for e in reports[0].saved_exceptions}
    assert len(saved) == stats.unparseable + stats.processed_with_error
    assert all(e.topic == topic and e.partition == 0 and "\x00" not in e.message for e in saved.values())

    got = rows_of(store)
    by_a: dict = {}
    for r in got:
        by_a.setdefault(r["a"], []).append(r)
    # good rows, rolled up per (hour, a): exact
    for g in range(3):
        ns = [i for i in range(20) if i % 3 == g]
        (row,) = by_a[f"g{g}"]
        assert (row["cnt"], row["ls"], row["ds"], row["lmax"]) == (len(ns), sum(ns), sum(i / 4 for i in ns), max(ns))
    # a group whose longSum passes the long range: rows that add up to the exact sum, never a wrapped number
    big = by_a["big"]
    assert len(big) > 1 and all(-(2 ** 63) <= r["ls"] < 2 ** 63 for r in big)
    assert sum(r["ls"] for r in big) == 3 * BIG and sum(r["cnt"] for r in big) == 3
    assert all(r["lmax"] == BIG for r in big)
    assert by_a["old"][0]["__time"] == datetime(1, 1, 1, tzinfo=timezone.utc)
    for a in ("ovf1", "ovf2", "ovf3", "ovf4"):
        assert by_a[a][0]["ls"] is None and by_a[a][0]["cnt"] == 1
    assert by_a["text7"][0]["ls"] == 7
    assert by_a["nan"][0]["ds"] is None and by_a["inf"][0]["ds"] is None
    assert by_a['{"k":[1,2]}'][0]["ls"] == 1
    assert by_a["nul\x00here"][0]["ls"] == 1
    assert by_a["tf2"][0]["t"] == 42 and "tf" not in by_a and by_a["g1"][0]["t"] is None
    assert {"two1", "two2"} <= by_a.keys() and "far" not in by_a and "deep" not in by_a

    # every published segment reads back with Spark too
    segments = DatasourceReader(store, "ds").segments()
    assert {s.interval_start.year for s in segments} == {1, 2026}
    df = DatasourceReader(store, "ds").to_spark(spark)
    assert df.count() == len(got)
    assert sorted(r["a"] for r in df.select("a").collect()) == sorted(r["a"] for r in got)


def test_spark_merges_long_sums_past_the_long_range_exactly(spark):
    """`job.rollup` on the partial rows of several splits: every group's longSums add up to the exact sums, at
    and past both ends of the long range, with one longSum overflowing and the other not, and with nulls."""
    import datasketches
    import pyarrow as pa

    from ingest_core.core.spec import parse_spec
    from ingest_core.executor.rollup import PartialRollup, aggregators
    from ingest_core.executor.row_parser import OFFSET, PARTITION, TIME, TIME_TYPE
    from ingest_core.spark.job import rollup
    from ingest_core.spark.kafka_source import BUCKET, SEGMENT

    top, bottom = 2 ** 63 - 1, -(2 ** 63)
    groups = {  # a -> (values of n, values of m)
        "fits_top": ([top // 2, top - top // 2], [1, 2]), "fits_bottom": ([bottom // 2, bottom // 2], [0, 0]),
        "just_over": ([top, 1], [5, None]), "just_under": ([bottom, -1], [None, None]),
        "far_over": ([top] * 7, [3] * 7), "far_under": ([bottom] * 9, [top] * 9),
        "nulls": ([None, None], [None, None]), "small": ([1, -2, 3], [4, 5, 6]),
    }
    spec = parse_spec({"type": "kafka", "spec": {"dataSchema": {
        "dataSource": "o", "timestampSpec": {"column": "ts"}, "dimensionsSpec": {"dimensions": ["a"]},
        "metricsSpec": [{"type": "count", "name": "c"}, {"type": "longSum", "name": "sn", "fieldName": "n"},
                        {"type": "longSum", "name": "sm", "fieldName": "m"}, {"type": "longMax", "name": "xn", "fieldName": "n"},
                        {"type": "doubleSum", "name": "dn", "fieldName": "d"},
                        {"type": "quantilesDoublesSketch", "name": "qd", "fieldName": "d"}],
        "granularitySpec": {"segmentGranularity": "HOUR", "queryGranularity": "HOUR"}},
        "ioConfig": {"topic": "t", "inputFormat": {"type": "json"}, "consumerProperties": {"bootstrap.servers": "x:1"}}}})
    partial_rollup = PartialRollup([BUCKET, "a", PARTITION], aggregators(spec))
    partials = []
    for split in range(2):  # each group's rows spread over two splits (partitions), merged by Spark
        rows = [(a, n, m) for a, (ns, ms) in groups.items() for i, (n, m) in enumerate(zip(ns, ms)) if i % 2 == split]
        t = pa.table({TIME: pa.array([T0] * len(rows), TIME_TYPE), "a": [r[0] for r in rows],
                      "__in_long_n": pa.array([r[1] for r in rows], pa.int64()),
                      "__in_long_m": pa.array([r[2] for r in rows], pa.int64()),
                      "__in_double_d": pa.array([1.0] * len(rows)),
                      PARTITION: pa.array([split] * len(rows), pa.int32()),
                      OFFSET: pa.array(range(len(rows)), pa.int64()),
                      BUCKET: pa.array([T0] * len(rows), TIME_TYPE)})
        p = partial_rollup.aggregate(t)
        partials.append(p.append_column(SEGMENT, pa.array([int(T0.timestamp() * 1000)] * p.num_rows, pa.int64())))
    from pyspark.sql.pandas.types import from_arrow_schema

    table = pa.concat_tables(partials)
    df = spark.createDataFrame(table.to_pylist(), schema=from_arrow_schema(table.schema))
    rolled, _, metrics = rollup(df, spec)
    out: dict = {}
    for r in rolled.collect():
        out.setdefault(r["a"], []).append(r.asDict())
    for a, (ns, ms) in groups.items():
        got = out[a]
        for name, values in (("sn", ns), ("sm", ms)):
            present = [v for v in values if v is not None]
            sums = [r[name] for r in got if r[name] is not None]
            assert all(bottom <= v <= top for v in sums), (a, name)
            assert (sum(sums) if sums else None) == (sum(present) if present else None), (a, name, got)
        assert sum(r["c"] for r in got) == len(ns) and sum(r["dn"] for r in got) == len(ns)
        # a sketch is on the group's first row only: summing the rows' counts and merging their sketches agree
        assert sum(datasketches.quantiles_doubles_sketch.deserialize(r["qd"]).n for r in got
                   if r["qd"] is not None) == len(ns)
        assert sum(r["qd"] is not None for r in got) == 1
        assert {r["xn"] for r in got} == {max((v for v in ns if v is not None), default=None)}
        fits = all(bottom <= sum(v for v in vs if v is not None) <= top for vs in (ns, ms))
        assert (len(got) == 1) == fits, (a, got)
