"""Partial rollup inside a split (pure pyarrow), against plain Python: every aggregator, nulls, time ties broken
by offset, and partial rows merged by the rules Spark applies (`ingest_core.spark.job.rollup`)."""

from __future__ import annotations

import random
from collections import defaultdict
from datetime import datetime, timedelta, timezone

import pyarrow as pa

from ingest_core.executor.rollup import (
    FIRST_OFFSET,
    FIRST_TIME,
    LAST_OFFSET,
    LAST_TIME,
    Aggregator,
    PartialRollup,
    RollupBuffer,
    long_sum_value,
)
from ingest_core.executor.row_parser import OFFSET, PARTITION, TIME, TIME_TYPE

BUCKET = "__bucket"
T0 = datetime(2026, 3, 2, 10, 0, tzinfo=timezone.utc)
AGGS = [Aggregator.of("count", "cnt", None),
        Aggregator.of("longSum", "l_sum", "l"), Aggregator.of("longSum", "l_sum2", "l"),  # one input, twice
        Aggregator.of("doubleSum", "d_sum", "d"), Aggregator.of("floatSum", "f_sum", "f"),
        Aggregator.of("longMin", "l_min", "l"), Aggregator.of("longMax", "l_max", "l"),
        Aggregator.of("doubleMin", "d_min", "d"), Aggregator.of("floatMax", "f_max", "f"),
        Aggregator.of("longFirst", "l_first", "l"), Aggregator.of("longLast", "l_last", "l"),
        Aggregator.of("doubleFirst", "d_first", "d"), Aggregator.of("floatLast", "f_last", "f")]
KEYS = [BUCKET, "channel", PARTITION]


def raw_rows(n: int, seed: int, partition: int = 0) -> list[dict]:
    rnd = random.Random(seed)
    rows = []
    for offset in range(n):
        t = T0 + timedelta(seconds=rnd.randrange(0, 600))  # many rows share a second: ties go by offset
        rows.append({TIME: t, BUCKET: t.replace(second=0), "channel": rnd.choice(["#en", "#fr", None]),
                     "__in_long_l": rnd.choice([rnd.randint(-50, 50), None]),
                     "__in_double_d": rnd.choice([rnd.randint(-40, 40) / 4, None]),
                     "__in_float_f": rnd.randint(-40, 40) / 8, PARTITION: partition, OFFSET: 1000 + offset})
    return rows


def table(rows: list[dict]) -> pa.Table:
    schema = pa.schema([(TIME, TIME_TYPE), (BUCKET, TIME_TYPE), ("channel", pa.string()),
                        ("__in_long_l", pa.int64()), ("__in_double_d", pa.float64()), ("__in_float_f", pa.float32()),
                        (PARTITION, pa.int32()), (OFFSET, pa.int64())])
    return pa.Table.from_pylist(rows, schema=schema)


def plain_rollup(rows: list[dict]) -> dict[tuple, dict]:
    """Druid's rollup of raw rows, written out by hand."""
    groups = defaultdict(list)
    for r in rows:
        groups[tuple(r[k] for k in KEYS)].append(r)
    out = {}
    for key, items in groups.items():
        items.sort(key=lambda r: (r[TIME], r[PARTITION], r[OFFSET]))
        def vals(c):
            return [r[c] for r in items if r[c] is not None]
        out[key] = {"cnt": len(items), "l_sum": sum(vals("__in_long_l")) if vals("__in_long_l") else None,
                    "d_sum": sum(vals("__in_double_d")) if vals("__in_double_d") else None,
                    "f_sum": sum(vals("__in_float_f")),
                    "l_min": min(vals("__in_long_l"), default=None), "l_max": max(vals("__in_long_l"), default=None),
                    "d_min": min(vals("__in_double_d"), default=None), "f_max": max(vals("__in_float_f")),
                    # the earliest / latest row's value, null included
                    "l_first": items[0]["__in_long_l"], "l_last": items[-1]["__in_long_l"],
                    "d_first": items[0]["__in_double_d"], "f_last": items[-1]["__in_float_f"]}
        out[key]["l_sum2"] = out[key]["l_sum"]
    return out


def merge(partials: list[dict]) -> dict[tuple, dict]:
    """Spark's merge of partial rows (sum, min, max, min_by/max_by over (time, partition, offset))."""
    groups = defaultdict(list)
    for p in partials:
        groups[tuple(p[k] for k in KEYS)].append(p)
    out = {}
    for key, items in groups.items():
        first = min(items, key=lambda p: (p[FIRST_TIME], p[PARTITION], p[FIRST_OFFSET]))
        last = max(items, key=lambda p: (p[LAST_TIME], p[PARTITION], p[LAST_OFFSET]))
        def agg(name, fn):
            vals = [p[name] for p in items if p[name] is not None]
            return fn(vals) if vals else None

        def long_sum(name):  # the partial rows carry a longSum as two sums (high and low 32 bits)
            vals = [v for p in items if (v := long_sum_value(p, name)) is not None]
            return sum(vals) if vals else None
        out[key] = {"cnt": sum(p["cnt"] for p in items), "l_sum": long_sum("l_sum"), "l_sum2": long_sum("l_sum2"),
                    "d_sum": agg("d_sum", sum), "f_sum": agg("f_sum", sum), "l_min": agg("l_min", min),
                    "l_max": agg("l_max", max), "d_min": agg("d_min", min), "f_max": agg("f_max", max),
                    "l_first": first["l_first"], "d_first": first["d_first"], "l_last": last["l_last"],
                    "f_last": last["f_last"]}
    return out


def assert_same(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for key, w in want.items():
        for name, value in w.items():
            if isinstance(value, float):
                assert abs(got[key][name] - value) < 1e-6, (key, name)
            else:
                assert got[key][name] == value, (key, name, got[key], w)


def test_partial_rows_of_one_batch_are_the_rollup():
    rows = raw_rows(2_000, seed=1)
    rollup = PartialRollup(KEYS, AGGS)
    random.Random(2).shuffle(rows)  # input order must not matter: first/last follow (time, offset)
    partial = rollup.aggregate(table(rows))
    assert partial.schema == rollup.schema(table(rows).schema)
    assert partial.num_rows == len({tuple(r[k] for k in KEYS) for r in rows}) < len(rows)
    assert_same(merge(partial.to_pylist()), plain_rollup(rows))
    assert partial.schema.field("f_sum").type == pa.float64()  # float sums accumulate as double, as Spark's sum


def test_buffers_of_several_splits_merge_to_the_rollup_of_all_rows():
    rows = raw_rows(1_500, seed=3, partition=0) + raw_rows(1_500, seed=4, partition=1)
    rollup = PartialRollup(KEYS, AGGS)
    partials = []
    for partition in (0, 1):
        buffer = RollupBuffer(rollup, max_rows=200)  # maxRowsInMemory: many flushes per split
        mine = [r for r in rows if r[PARTITION] == partition]
        for start in range(0, len(mine), 64):
            if (out := buffer.add(table(mine[start:start + 64]))) is not None:
                partials.append(out)
        if (out := buffer.flush()) is not None:
            partials.append(out)
    assert len(partials) > 10
    assert all(p.num_rows for p in partials)
    merged = merge([row for p in partials for row in p.to_pylist()])
    assert_same(merged, plain_rollup(rows))
    # with the same key in both partitions, a time tie between them goes to the lower partition
    assert any(key[2] == 0 for key in merged) and any(key[2] == 1 for key in merged)


def test_buffer_holds_rows_until_max_rows_and_ignores_empty_tables():
    rollup = PartialRollup(KEYS, [Aggregator.of("count", "cnt", None)])
    buffer = RollupBuffer(rollup, max_rows=100)
    rows = raw_rows(60, seed=5)
    assert buffer.add(table(rows)) is None
    assert buffer.add(table([])) is None
    out = buffer.add(table(rows))
    assert out is not None and sum(out.column("cnt").to_pylist()) == 120
    assert buffer.flush() is None
