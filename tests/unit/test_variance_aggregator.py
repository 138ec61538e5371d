"""Druid's `variance` aggregator (druid-stats): its fields and defaults, Druid's stored bytes, its test values
(VarianceAggregatorTest: 1.1, 2.7, 3.5, 1.3 as floats), exact merges over any splits, and its read side in DuckDB.
The same through Spark and compaction: tests/integration/test_aggregator_merges.py."""

from __future__ import annotations

import json
import struct
from datetime import datetime, timezone
from fractions import Fraction

import duckdb
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from helpers import metrics_spec

from ingest_core.core import aggregators as A
from ingest_core.core.errors import SpecError
from ingest_core.core.spec import parse_spec
from ingest_core.executor.combine import combine_batches
from ingest_core.executor.rollup import PartialRollup, aggregators
from ingest_core.executor.row_parser import RecordChunk, RowParser

T = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def rolled_up(metric: dict, values: list, cuts: list[int], reverse: bool = False) -> bytes:
    """One group's stored collector: the values parsed and rolled up per split, the partials combined by the
    function Spark runs (in the order given, or reversed)."""
    spec = parse_spec(metrics_spec([metric]))
    (agg,) = aggregators(spec)
    parser = RowParser(spec, datetime(2026, 1, 1, tzinfo=timezone.utc), max_saved_exceptions=10)
    rollup = PartialRollup(["page"], [agg])
    records = [{"ts": T + i, "page": "p", "v": v} for i, v in enumerate(values)]
    bounds = [0, *sorted(c for c in cuts if c <= len(records)), len(records)]
    partials = []
    for start, end in zip(bounds, bounds[1:]):
        chunk = RecordChunk("t", 0, range(start, end), [json.dumps(r).encode() for r in records[start:end]])
        partials += [row[agg.name] for row in rollup.aggregate(parser.parse(chunk).table).to_pylist()]
    batch = pa.record_batch({agg.name: pa.array([partials[::-1] if reverse else partials], pa.list_(pa.binary()))})
    return next(combine_batches(iter([batch]), {agg.name: agg})).column(0)[0].as_py()


def collector(data: bytes) -> tuple[int, float, float]:
    return struct.unpack(">qdd", data)  # Druid's VarianceAggregatorCollector.toByteArray


def test_druids_own_test_values_as_floats_by_default():
    values = [1.1, 2.7, 3.5, 1.3]
    floats = [struct.unpack("f", struct.pack("f", v))[0] for v in values]  # inputType float (Druid's default)
    mean = sum(floats) / 4
    pop = sum((v - mean) ** 2 for v in floats) / 4  # Druid's test computes it in two passes
    for cuts in ([], [2], [1, 3]):
        count, total, nvariance = collector(rolled_up({"type": "variance", "name": "billy", "fieldName": "v"},
                                                      values, cuts))
        assert count == 4 and total == pytest.approx(sum(floats), abs=1e-12)
        assert nvariance / 4 == pytest.approx(pop, rel=1e-12) and nvariance / 3 == pytest.approx(pop * 4 / 3, rel=1e-12)


def test_the_standard_examples_read_back_through_duckdb():
    """1, 2, 3, 4: VAR_SAMP 1.6666666666666667, VAR_POP 1.25; a group of one value: 0; of none: null."""
    spec = parse_spec(metrics_spec([{"type": "variance", "name": "v", "fieldName": "v", "inputType": "long"},
                                {"type": "variance", "name": "p", "fieldName": "v", "estimator": "population"}]))
    by = {a.name: a for a in spec.data_schema.metrics_spec}
    parts = [rolled_up({"type": "variance", "name": "v", "fieldName": "v", "inputType": "long"}, vs, [])
             for vs in ([1, 2], [3], [4])]
    con = duckdb.connect()
    con.register("t", pa.table({"g": ["a", "a", "a"], "x": parts}))
    sample, population = (con.execute(f"SELECT {by[n].kind.read_sql(by[n], 'x')} FROM t").fetchall()[0][0]
                          for n in ("v", "p"))
    assert sample == pytest.approx(5 / 3, rel=1e-15) and population == pytest.approx(1.25, rel=1e-15)
    one = rolled_up({"type": "variance", "name": "v", "fieldName": "v"}, [7.5], [])
    con.register("o", pa.table({"x": [one]}))
    assert con.execute(f"SELECT {by['v'].kind.read_sql(by['v'], 'x')} FROM o").fetchall()[0][0] == 0.0
    assert con.execute(f"SELECT {by['v'].kind.read_sql(by['v'], 'x')} FROM o WHERE false").fetchall()[0][0] is None


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.none(), st.integers(-10**6, 10**6)), min_size=1, max_size=60),
       st.lists(st.integers(0, 60), max_size=4), st.booleans())
def test_any_splits_merged_in_any_order_give_the_exact_count_and_sum_and_the_variance(values, cuts, reverse):
    data = rolled_up({"type": "variance", "name": "v", "fieldName": "v", "inputType": "long"}, values, cuts, reverse)
    count, total, nvariance = collector(data)
    present = [v for v in values if v is not None]  # nulls are skipped
    assert count == len(present) and total == sum(present)
    if present:
        mean = Fraction(sum(present), len(present))
        exact = sum((v - mean) ** 2 for v in present)
        assert nvariance == pytest.approx(float(exact), rel=1e-9, abs=1e-6)


def test_collectors_sent_as_input_merge():
    parts = [A.of("variance").combine(None, [], None)]  # an empty collector: count 0
    parts += [rolled_up({"type": "variance", "name": "v", "fieldName": "v", "inputType": "long"}, vs, [])
              for vs in ([1, 2], [3, 4])]
    import base64

    merged = rolled_up({"type": "variance", "name": "v", "fieldName": "v", "inputType": "variance"},
                       [base64.b64encode(p).decode() for p in parts], [1])
    assert collector(merged) == pytest.approx((4, 10.0, 5.0))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.text(max_size=40), st.binary(max_size=30).map(
    lambda b: __import__("base64").b64encode(b).decode())), min_size=1, max_size=6))
def test_a_bad_collector_sent_as_input_is_its_rows_error_alone(bad):
    """A value that is not a serialized collector (any text, any base64 of other than 24 bytes) is null and its row
    processedWithError, as a bad input sketch is: the job goes on and the good rows merge."""
    import base64

    good = base64.b64encode(rolled_up({"type": "variance", "name": "v", "fieldName": "v", "inputType": "long"},
                                      [1, 2, 3], [])).decode()
    bad = [b for b in bad if not _is_collector(b)]
    spec = parse_spec(metrics_spec([{"type": "variance", "name": "v", "fieldName": "v", "inputType": "variance"}]))
    parser = RowParser(spec, datetime(2026, 1, 1, tzinfo=timezone.utc), max_saved_exceptions=10)
    records = [{"ts": T, "page": "p", "v": good}] + [{"ts": T + 1 + i, "page": "p", "v": b} for i, b in enumerate(bad)]
    parsed = parser.parse(RecordChunk("t", 0, range(len(records)), [json.dumps(r).encode() for r in records]))
    assert (parsed.stats.processed, parsed.stats.processed_with_error) == (1, len(bad))
    assert all("could not read a variance collector from" in e.message and "for metric input 'v'" in e.message
               for e in parsed.exceptions)
    (agg,) = aggregators(spec)
    (row,) = PartialRollup(["page"], [agg]).aggregate(parsed.table).to_pylist()
    assert collector(row["v"]) == pytest.approx((3, 6.0, 2.0))


def _is_collector(text: str) -> bool:
    import base64
    import binascii

    try:
        return len(base64.b64decode(text, validate=True)) == 24
    except (binascii.Error, ValueError):
        return False


def test_druid_defaults_and_bad_fields():
    spec = parse_spec(metrics_spec([{"type": "variance", "name": "v", "fieldName": "x"}]))
    (a,) = spec.data_schema.metrics_spec
    assert (a.params.input_type, a.params.estimator, a.input_kind, a.kind.stored_type(a)) == (
        "float", None, "double", "binary")
    assert parse_spec(spec.to_raw()) == spec
    with pytest.raises(SpecError) as info:
        parse_spec(metrics_spec([{"type": "variance", "name": "v", "fieldName": "x", "inputType": "int"},
                             {"type": "variance", "name": "w"}]))
    text = str(info.value)
    assert "metricsSpec[0].inputType: unknown inputType 'int': use one of float, double, long, variance" in text
    assert "metricsSpec[1].fieldName: aggregator 'w' of type variance needs a fieldName" in text
