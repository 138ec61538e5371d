"""Druid's `expression` aggregator (ExpressionLambdaAggregatorFactory): its fields and defaults, and Druid's
documented examples (docs/querying/aggregations.md: a count, a sum, distinct array elements) folded by the
split's partial rollup and combined by the function Spark's mapInArrow runs, over generated rows split anyhow.
The same through Spark and compaction: tests/integration/test_aggregator_merges.py."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from helpers import metric_problems, metrics_spec

from ingest_core.core.spec import parse_spec
from ingest_core.executor.combine import combine_batches, stored_arrow_type
from ingest_core.executor.rollup import PartialRollup, aggregators
from ingest_core.executor.row_parser import RecordChunk, RowParser

T = 1_767_225_600_000  # 2026-01-01T00:00:00Z

# Druid's documented examples, as written there (the sum's combine is Druid's default: its fold, renamed)
COUNT = {"type": "expression", "name": "expression_count", "fields": [], "initialValue": "0",
         "fold": "__acc + 1", "combine": "__acc + expression_count"}
SUM = {"type": "expression", "name": "expression_sum", "fields": ["column_a"], "initialValue": "0",
       "fold": "__acc + column_a"}
DISTINCT = {"type": "expression", "name": "expression_array_agg_distinct", "fields": ["column_a"],
            "initialValue": "[]", "fold": "array_set_add(__acc, column_a)",
            "combine": "array_set_add_all(__acc, expression_array_agg_distinct)",
            "compare": "if(array_length(o1) > array_length(o2), 1, if (array_length(o1) == array_length(o2), 0, -1))"}


def rolled_up(metrics: list[dict], records: list[dict], cuts: list[int]) -> dict[str, dict]:
    """Each page's metrics: the records parsed and partially rolled up per split (cut at `cuts`), then the
    splits' partials combined by the function Spark runs."""
    spec = parse_spec(metrics_spec(metrics))
    aggs = aggregators(spec)
    parser = RowParser(spec, datetime(2026, 1, 1, tzinfo=timezone.utc), max_saved_exceptions=10)
    rollup = PartialRollup(["page"], aggs)
    partials = []
    bounds = [0, *sorted(cuts), len(records)]
    for start, end in zip(bounds, bounds[1:]):
        chunk = RecordChunk("t", 0, range(start, end), [json.dumps(r).encode() for r in records[start:end]])
        partials += rollup.aggregate(parser.parse(chunk).table).to_pylist()
    by_page: dict[str, dict] = {}
    for p in partials:
        group = by_page.setdefault(p["page"], {a.name: [] for a in aggs})
        for a in aggs:
            group[a.name].append(p[a.name])
    out = {}
    for page, lists in by_page.items():
        batch = pa.record_batch({a.name: pa.array([lists[a.name]], pa.list_(stored_arrow_type(a))) for a in aggs})
        out[page] = next(combine_batches(iter([batch]), {a.name: a for a in aggs})).to_pylist()[0]
    return out


records_strategy = st.lists(st.fixed_dictionaries({
    "page": st.sampled_from(["a", "b"]), "column_a": st.one_of(st.none(), st.integers(-1000, 1000))}),
    min_size=1, max_size=40)


@settings(max_examples=40, deadline=None)
@given(records_strategy, st.lists(st.integers(0, 40), max_size=3))
def test_druids_documented_examples_fold_and_combine_over_any_splits(raw, cuts):
    records = [{"ts": T + i, **r} for i, r in enumerate(raw)]
    got = rolled_up([COUNT, SUM, DISTINCT], records, [c for c in cuts if c <= len(records)])
    for page in {r["page"] for r in records}:
        rows = [r for r in records if r["page"] == page]
        values = [r["column_a"] for r in rows if r["column_a"] is not None]
        assert got[page]["expression_count"] == len(rows)
        # a null input folds too (shouldAggregateNullInputs: true), and a null sum is null
        assert got[page]["expression_sum"] == (None if len(values) < len(rows) else sum(values)), (page, rows)
        # `[]` is an ARRAY<STRING>: array_set_add casts each long to text (`<LONG>[]` keeps longs)
        assert set(got[page]["expression_array_agg_distinct"]) - {None} == {str(v) for v in values}


def test_druid_defaults_and_the_stored_type_of_the_initial_value():
    spec = parse_spec(metrics_spec([SUM, {**COUNT, "name": "d", "initialValue": "0.0", "combine": "__acc + d"},
                                {**DISTINCT, "name": "s", "combine": "array_set_add_all(__acc, s)"}]))
    by = {a.name: a for a in spec.data_schema.metrics_spec}
    p = by["expression_sum"].params
    assert (p.accumulator_identifier, p.max_size_bytes, p.is_null_unless_aggregated, p.should_aggregate_null_inputs,
            p.should_combine_aggregate_null_inputs, p.initial_combine_value) == ("__acc", 8192, True, True, None, None)
    assert [a.kind.stored_type(a) for a in spec.data_schema.metrics_spec] == ["bigint", "double", "array<string>"]
    assert by["expression_sum"].input_fields == ["column_a"]
    assert parse_spec(spec.to_raw()) == spec  # staged and read back by the job: the same fields


@pytest.mark.parametrize("metric,message", [
    ({**SUM, "fold": None}, "metricsSpec[0].fold: expression aggregator 'expression_sum' needs fold"),
    ({**SUM, "initialValue": None}, "metricsSpec[0].initialValue: expression aggregator 'expression_sum' needs"),
    ({**SUM, "fields": ["x", "y"], "fold": "__acc + x + y"}, "metricsSpec[0].combine: expression aggregator"),
    ({**SUM, "initialValue": "column_a + 1"}, "metricsSpec[0].initialValue: initialValue must be a constant"),
    ({**SUM, "fold": "__acc +"}, "metricsSpec[0].fold:"),
    ({**SUM, "maxSizeBytes": 9}, "metricsSpec[0].maxSizeBytes: must be at least 10"),
    ({**SUM, "fields": "column_a"}, "metricsSpec[0].fields: expected"),
])
def test_bad_expression_aggregators_are_refused_at_their_field(metric, message):
    assert message in metric_problems([metric])


def test_the_accumulator_name_initial_combine_value_and_nulls_as_druid_defines_them():
    records = [{"ts": T, "page": "a", "x": 2}, {"ts": T + 1, "page": "a", "x": None},
               {"ts": T + 2, "page": "a", "x": 5},
               {"ts": T + 3, "page": "b", "x": None}]
    metrics = [
        # own accumulator name; combining starts at initialCombineValue (two splits' partials: 100 + 2 + 5)
        {"type": "expression", "name": "s", "fields": ["x"], "accumulatorIdentifier": "acc", "initialValue": "0",
         "initialCombineValue": "100", "fold": "acc + x", "combine": "acc + s", "shouldAggregateNullInputs": False},
        # rows whose input is null are not folded: b folded nothing, so null (isNullUnlessAggregated) ...
        {"type": "expression", "name": "n", "fields": ["x"], "initialValue": "0", "fold": "__acc + 1",
         "combine": "__acc + n", "shouldAggregateNullInputs": False},
        # ... or the initial value when it is false
        {"type": "expression", "name": "z", "fields": ["x"], "initialValue": "7", "fold": "__acc + x",
         "isNullUnlessAggregated": False, "shouldAggregateNullInputs": False},
    ]
    got = rolled_up(metrics, records, [1])
    # z: initialValue seeds each split's fold and (as initialCombineValue) the combine, as in Druid: 7 + 9 + 12
    assert (got["a"]["s"], got["a"]["n"], got["a"]["z"]) == (107, 2, 28)
    assert (got["b"]["s"], got["b"]["n"], got["b"]["z"]) == (None, None, 7)


def test_a_value_growing_past_max_size_bytes_fails_as_druids_does():
    records = [{"ts": T + i, "page": "a", "w": "0123456789"} for i in range(3)]
    metric = {"type": "expression", "name": "c", "fields": ["w"], "initialValue": "''", "fold": "concat(__acc, w)",
              "maxSizeBytes": 25}
    with pytest.raises(ValueError, match="grew to 30 bytes, past maxSizeBytes 25"):
        rolled_up([metric], records, [])
