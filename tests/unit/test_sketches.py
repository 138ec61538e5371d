"""Druid's sketch and other aggregators without services: spec binding (parameters, defaults, ranges, refused
types), the split's partial rollup and Spark's merge function on their own, and each sketch's accuracy over a
known stream (1M values) against DataSketches' documented error bounds, exact below the exact-mode threshold.

The accuracy tests run the executor's real rollup path (`PartialRollup` per split, then `combine_batches`, the
function Spark's mapInArrow runs) on Arrow tables: the same code the job runs, without Kafka."""

from __future__ import annotations

import base64
import json
from datetime import datetime, timezone

import datasketches as ds
import numpy as np
import pyarrow as pa
import pytest
from helpers import metric_problems, metrics_spec

from ingest_core.core.aggregators import SketchParams
from ingest_core.core.spec import parse_spec
from ingest_core.executor import sketches
from ingest_core.executor.combine import combine_batches
from ingest_core.executor.rollup import PartialRollup, aggregators, row_metrics, truncate_utf8
from ingest_core.executor.row_parser import OFFSET, TIME, RecordChunk, RowParser


# ------------------------------------------------------------------------------------------ spec binding


def test_druid_defaults_and_parameters_bind_as_typed_fields():
    spec = parse_spec(metrics_spec([
        {"type": "thetaSketch", "name": "t", "fieldName": "u"},
        {"type": "thetaSketch", "name": "t2", "fieldName": "u", "size": "1024", "isInputThetaSketch": "true"},
        {"type": "HLLSketchBuild", "name": "h", "fieldName": "u"},
        {"type": "HLLSketchMerge", "name": "h2", "fieldName": "u", "lgK": 21, "tgtHllType": "HLL_6"},
        {"type": "quantilesDoublesSketch", "name": "q", "fieldName": "v"},
        {"type": "KllDoublesSketch", "name": "kd", "fieldName": "v"},
        {"type": "KllFloatsSketch", "name": "kf", "fieldName": "v", "k": 8},
        {"type": "stringFirst", "name": "sf", "fieldName": "u"},
        {"type": "stringLast", "name": "sl", "fieldName": "u", "maxStringBytes": 16, "timeColumn": "__time"},
        {"type": "hyperUnique", "name": "hu", "fieldName": "u"},
        {"type": "cardinality", "name": "c", "fields": ["u", {"type": "default", "dimension": "page"}]},
        {"type": "doubleAny", "name": "da", "fieldName": "v"},
    ]))
    by = {a.name: a for a in spec.data_schema.metrics_spec}
    assert (by["t"].sketch.lg_k, by["t"].sketch.from_sketches) == (14, False)  # size 16384
    assert (by["t2"].sketch.lg_k, by["t2"].sketch.from_sketches) == (10, True)
    assert (by["h"].sketch.lg_k, by["h"].sketch.tgt_hll_type, by["h"].sketch.utf16le) == (12, "HLL_4", True)
    assert (by["h2"].sketch.lg_k, by["h2"].sketch.tgt_hll_type, by["h2"].sketch.from_sketches) == (21, "HLL_6", True)
    assert by["q"].sketch.k == 128 and by["kd"].sketch.k == 200 and by["kf"].sketch == by["kf"].sketch.__class__(
        "kll", k=8, floats=True)
    assert by["sf"].string_bytes == 1024 and by["sl"].string_bytes == 16
    assert by["hu"].sketch.lg_k == 11 and by["c"].input_fields == ["u", "page"]
    assert (by["da"].op, by["da"].input_kind) == ("any", "double")


@pytest.mark.parametrize("metric, message", [
    ({"type": "thetaSketch", "name": "x", "fieldName": "u", "size": 1000},
     "metricsSpec[0].size: size must be a power of 2 from 16 to 67108864, got 1000 (Druid's default: 16384)"),
    ({"type": "thetaSketch", "name": "x", "fieldName": "u", "size": 8}, "size must be a power of 2 from 16"),
    ({"type": "HLLSketchBuild", "name": "x", "fieldName": "u", "lgK": 3}, "metricsSpec[0].lgK: must be at least 4"),
    ({"type": "HLLSketchMerge", "name": "x", "fieldName": "u", "lgK": 22}, "lgK: must be at most 21"),
    ({"type": "HLLSketchBuild", "name": "x", "fieldName": "u", "tgtHllType": "hll_4"},
     "unknown tgtHllType 'hll_4' (did you mean 'HLL_4'?)"),
    ({"type": "HLLSketchBuild", "name": "x", "fieldName": "u", "stringEncoding": "latin1"}, "unknown stringEncoding"),
    ({"type": "quantilesDoublesSketch", "name": "x", "fieldName": "v", "k": 100}, "k must be a power of 2 from 2"),
    ({"type": "KllDoublesSketch", "name": "x", "fieldName": "v", "k": 7}, "metricsSpec[0].k: must be at least 8"),
    ({"type": "KllFloatsSketch", "name": "x", "fieldName": "v", "k": 65536}, "must be at most 65535"),
    ({"type": "KllFloatsSketch", "name": "x", "fieldName": "v", "k": "big"}, "k: expected an integer"),
    ({"type": "stringFirst", "name": "x", "fieldName": "u", "maxStringBytes": 0}, "maxStringBytes: must be at least 1"),
    ({"type": "stringLast", "name": "x", "fieldName": "u", "timeColumn": "t"}, "only __time (the default)"),
    ({"type": "expression", "name": "x", "fields": ["u"], "initialValue": "0"},
     "metricsSpec[0].fold: expression aggregator 'x' needs fold"),
    ({"type": "javascript", "name": "x", "fieldNames": ["u"]}, "aggregator type 'javascript' is not supported: "),
    ({"type": "ThetaSketch", "name": "x", "fieldName": "u"}, "(did you mean 'thetaSketch'?)"),
    ({"type": "hyperUnique", "name": "x", "fieldName": "u", "isInputHyperUnique": True}, "HLLSketchMerge"),
    ({"type": "cardinality", "name": "x"}, "metricsSpec[0].fields: aggregator 'x': cardinality needs `fields`"),
    ({"type": "cardinality", "name": "x", "fields": ["a", 3]}, "cardinality needs `fields`, the dimension names"),
    ({"type": "thetaSketch", "name": "x"}, "metricsSpec[0].fieldName: aggregator 'x' of type thetaSketch needs"),
    ({"type": "filtered", "name": "x", "aggregator": {"type": "count", "name": "c"}}, "metricsSpec[0].filter: "),
    ({"type": "filtered", "filter": {"type": "spatial", "dimension": "a"}, "aggregator": {"type": "count", "name": "c"}},
     "filter type 'spatial' is not supported"),
    ({"type": "filtered", "filter": {"type": "true"}, "aggregator": {"type": "bogus", "name": "c"}},
     "metricsSpec[0].aggregator.type: aggregator type 'bogus' is not supported"),
])
def test_bad_parameters_are_refused_with_their_field_path(metric, message):
    assert message in metric_problems([metric])


def test_a_supported_name_is_never_its_own_suggestion_and_misplaced_parameters_warn():
    spec = parse_spec(metrics_spec([{"type": "thetaSketch", "name": "t", "fieldName": "u"},
                                {"type": "longSum", "name": "s", "fieldName": "v", "lgK": 99}]))
    assert [(w.path, w.message) for w in spec.warnings] == [
        ("spec.dataSchema.metricsSpec[1].lgK", "lgK has no meaning for a longSum aggregator: ignored")]


def test_filtered_aggregator_takes_the_wrapped_name_unless_it_has_its_own():
    spec = parse_spec(metrics_spec([
        {"type": "filtered", "filter": {"type": "selector", "dimension": "page", "value": "a"},
         "aggregator": {"type": "count", "name": "a_rows"}},
        {"type": "filtered", "name": "a_users", "filter": {"type": "selector", "dimension": "page", "value": "a"},
         "aggregator": {"type": "thetaSketch", "name": "inner", "fieldName": "u", "size": 64}}]))
    a, b = spec.data_schema.metrics_spec
    assert (a.name, a.op, b.name, b.op, b.sketch.lg_k, b.input_fields) == ("a_rows", "count", "a_users", "theta", 6,
                                                                          ["u"])
    assert "metric name 'a_rows' is used twice" in metric_problems([
        {"type": "count", "name": "a_rows"},
        {"type": "filtered", "filter": {"type": "true"}, "aggregator": {"type": "count", "name": "a_rows"}}])


# ------------------------------------------------------------------------------------------ executor paths

T = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def parse(metrics: list[dict], records: list[dict], *, rollup: bool = True):
    spec = parse_spec(metrics_spec(metrics, rollup))
    parser = RowParser(spec, datetime(2026, 1, 1, tzinfo=timezone.utc), max_saved_exceptions=10)
    chunk = RecordChunk("t", 0, range(len(records)), [json.dumps(r).encode() for r in records])
    return spec, parser.parse(chunk)


def test_input_sketches_are_checked_per_row_and_merged():
    good = ds.update_theta_sketch(14)
    for u in ("a", "b", "c"):
        good.update(u)
    text = base64.b64encode(good.compact().serialize()).decode()
    spec, parsed = parse([{"type": "thetaSketch", "name": "t", "fieldName": "in", "isInputThetaSketch": True}],
                         [{"ts": T, "page": "p", "in": text}, {"ts": T + 1, "page": "p", "in": "bm90IGEgc2tldGNo"},
                         {"ts": T + 2, "page": "p", "in": "!!"}, {"ts": T + 3, "page": "p"}])
    assert (parsed.stats.processed, parsed.stats.processed_with_error) == (2, 2)
    messages = [e.message for e in parsed.exceptions]
    assert "could not read a sketch from [bm90IGEgc2tldGNo] for metric input 'in': not a serialized DataSketches " \
           "theta sketch" in messages[0]
    assert "[!!] for metric input 'in': not base64 text" in messages[1]
    partial = PartialRollup(["page"], aggregators(spec)).aggregate(parsed.table)
    assert ds.compact_theta_sketch.deserialize(partial.column("t")[0].as_py()).get_estimate() == 3


def test_filtered_strings_and_any_in_the_partial_rollup_and_without_rollup():
    metrics = [{"type": "filtered", "filter": {"type": "selector", "dimension": "tag", "value": "y"},
                "aggregator": {"type": "count", "name": "n_y"}},
               {"type": "filtered", "name": "v_y", "filter": {"type": "selector", "dimension": "tag", "value": "y"},
                "aggregator": {"type": "doubleSum", "name": "x", "fieldName": "v"}},
               {"type": "stringFirst", "name": "first", "fieldName": "u", "maxStringBytes": 3},
               {"type": "stringLast", "name": "last", "fieldName": "u"},
               {"type": "stringAny", "name": "any", "fieldName": "u"},
               {"type": "quantilesDoublesSketch", "name": "q", "fieldName": "v"}]
    records = [{"ts": T + 5, "page": "p", "u": "héllo", "tag": "y", "v": 1.5},
               {"ts": T + 1, "page": "p", "u": "zed", "tag": "n", "v": 2.0},
               {"ts": T + 9, "page": "p", "u": "last", "tag": "y", "v": None}]
    spec, parsed = parse(metrics, records)
    (row,) = PartialRollup(["page"], aggregators(spec)).aggregate(parsed.table).to_pylist()
    assert (row["n_y"], row["v_y"], row["first"], row["last"]) == (2, 1.5, "zed", "last")
    assert row["any"] in {"héllo", "zed", "last"}
    assert ds.quantiles_doubles_sketch.deserialize(row["q"]).n == 2
    spec, parsed = parse(metrics, records, rollup=False)
    rows = row_metrics(parsed.table, aggregators(spec)).to_pylist()
    assert [(r["n_y"], r["v_y"], r["first"]) for r in rows] == [(1, 1.5, "hé"), (0, None, "zed"), (1, None, "las")]
    assert [ds.quantiles_doubles_sketch.deserialize(r["q"]).n for r in rows] == [1, 1, 0]


def test_a_filtered_first_or_last_is_the_first_or_last_matching_row():
    metrics = [{"type": "filtered", "filter": {"type": "selector", "dimension": "tag", "value": "y"},
                "aggregator": {"type": "stringFirst", "name": "first_y", "fieldName": "u"}},
               {"type": "filtered", "filter": {"type": "selector", "dimension": "tag", "value": "y"},
                "aggregator": {"type": "longLast", "name": "last_y", "fieldName": "l"}},
               {"type": "filtered", "filter": {"type": "selector", "dimension": "tag", "value": "nope"},
                "aggregator": {"type": "longLast", "name": "none", "fieldName": "l"}},
               {"type": "longFirst", "name": "first", "fieldName": "l"}]
    records = [{"ts": T + 5, "page": "p", "u": "b", "tag": "y", "l": 1}, {"ts": T + 1, "page": "p", "u": "a", "l": 2},
               {"ts": T + 9, "page": "p", "u": "c", "tag": "y", "l": None}, {"ts": T + 7, "page": "p", "u": "d",
                                                                          "tag": "n", "l": 4}]
    spec, parsed = parse(metrics, records)
    (row,) = PartialRollup(["page"], aggregators(spec)).aggregate(parsed.table).to_pylist()
    assert (row["first_y"], row["last_y"], row["none"], row["first"]) == ("b", None, None, 2)  # a null last: kept
    assert (row["__time_first_y"].timestamp() * 1000, row["__offset_first_y"]) == (T + 5, 0)
    assert (row["__time_last_y"].timestamp() * 1000, row["__offset_last_y"]) == (T + 9, 2)
    assert row["__time_none"] is None and row["__offset_none"] is None


def test_values_are_hashed_by_their_type_and_lists_by_element_as_druid_does():
    # Druid hashes a JSON integer with update(long), a decimal with update(double), text as text, and each
    # element of a multi-value field as text; the `datasketches` package does the same given int, float, str
    records = [{"ts": T, "page": "p", "u": 123}, {"ts": T, "page": "p", "u": "123"}, {"ts": T, "page": "p", "u": 1.5},
               {"ts": T, "page": "p", "u": ["a", "b", "a"]}, {"ts": T, "page": "p", "u": ["c"]},
               {"ts": T, "page": "p", "u": None}, {"ts": T, "page": "p", "u": True}]
    metrics = [{"type": "thetaSketch", "name": "t", "fieldName": "u"},
               {"type": "HLLSketchBuild", "name": "h", "fieldName": "u", "stringEncoding": "utf8"}]
    spec, parsed = parse(metrics, records)
    (row,) = PartialRollup(["page"], aggregators(spec)).aggregate(parsed.table).to_pylist()
    theta, hll = ds.update_theta_sketch(14), ds.hll_sketch(12, ds.tgt_hll_type.HLL_4)
    for item in (123, "123", 1.5, "a", "b", "c", "true"):
        theta.update(item)
        hll.update(item)
    assert row["t"] == theta.compact().serialize()  # 7 distinct: 123 and "123" are two values, as in Druid
    assert ds.compact_theta_sketch.deserialize(row["t"]).get_estimate() == 7
    assert row["h"] == hll.serialize_compact()
    _, without = parse(metrics, records, rollup=False)
    per_row = row_metrics(without.table, aggregators(spec)).to_pylist()
    assert [ds.compact_theta_sketch.deserialize(r["t"]).get_estimate() for r in per_row] == [1, 1, 1, 2, 1, 0, 1]


def test_strings_are_cut_to_max_bytes_never_inside_a_character():
    assert truncate_utf8(pa.array(["abcdef", "é€x", None, "ab"]), 3).to_pylist() == ["abc", "é", None, "ab"]


def test_cardinality_counts_each_field_value_or_each_row():
    records = [{"ts": T, "page": "p", "a": "x", "b": "y"}, {"ts": T, "page": "p", "a": "y", "b": "x"},
               {"ts": T, "page": "p", "a": "x", "b": "y"}]
    for by_row, want in ((False, 2), (True, 2)):
        spec, parsed = parse([{"type": "cardinality", "name": "c", "fields": ["a", "b"], "byRow": by_row}], records)
        (row,) = PartialRollup(["page"], aggregators(spec)).aggregate(parsed.table).to_pylist()
        assert round(ds.hll_sketch.deserialize(row["c"]).get_estimate()) == want


@pytest.mark.parametrize("params", [SketchParams("theta", lg_k=14), SketchParams("hll", lg_k=12, utf16le=True),
                                    SketchParams("quantiles", k=128), SketchParams("kll", k=200, floats=True)])
def test_groups_of_one_value_get_the_same_sketch_as_built_one_by_one(params):
    # `build` shares one sketch among the groups of one value (most groups, when dimensions barely roll up)
    rng = np.random.default_rng(5)
    sizes = rng.choice([0, 1, 1, 1, 1, 2, 5], size=3000)
    offsets = np.concatenate(([0], np.cumsum(sizes)))
    raw = [None if rng.random() < 0.1 else int(rng.integers(0, 300)) for _ in range(offsets[-1])]
    values = pa.array([v if v is None else f"v{v}" for v in raw] if params.op in ("theta", "hll")
                      else [v if v is None else float(v) for v in raw])
    kept = np.concatenate(([0], np.cumsum(values.is_valid().to_numpy(zero_copy_only=False))))
    one_by_one = []
    for g in range(len(sizes)):
        group = values.filter(values.is_valid()).slice(kept[offsets[g]], kept[offsets[g + 1]] - kept[offsets[g]])
        one_by_one.append(sketches.build(params, group, np.array([0, len(group)])))
    assert sketches.build(params, values, offsets).equals(pa.concat_arrays(one_by_one))


def test_merging_lists_keeps_single_partials_and_unions_the_others():
    params = SketchParams("theta", lg_k=14)
    parts = sketches.build(params, pa.array(["a", "b", "c", "a"]), np.array([0, 1, 2, 4]))
    lists = pa.array([[parts[0].as_py()], [parts[1].as_py(), parts[2].as_py()], [], None], pa.list_(pa.binary()))
    merged = sketches.merge_lists(params, lists).to_pylist()
    assert merged[0] == parts[0].as_py() and merged[2:] == [None, None]
    assert ds.compact_theta_sketch.deserialize(merged[1]).get_estimate() == 3


# ------------------------------------------------------------------------------------------ accuracy

N = 1_000_000
SPLITS = 4  # partial rollups of 250k rows each, merged as Spark merges them


def rolled_up(metric: dict, values: pa.Array) -> bytes:
    """The one sketch the job stores for a stream of `values` in one rollup group: built per split by the
    split's partial rollup, then merged by the function Spark runs."""
    spec = parse_spec(metrics_spec([metric]))
    aggs = aggregators(spec)
    column = aggs[0].input
    n = len(values)
    table = pa.table({"page": pa.array(np.zeros(n, dtype=np.int64)), column: values,
                      TIME: pa.array(np.zeros(n, dtype=np.int64)).cast(pa.timestamp("ms", tz="UTC")),
                      OFFSET: pa.array(np.arange(n, dtype=np.int64))})
    if aggs[0].kinds is not None:  # text values, as the row parser marks them
        table = table.append_column(aggs[0].kinds, pa.array(np.zeros(n, dtype=np.int8)))
    rollup = PartialRollup(["page"], aggs)
    step = -(-n // SPLITS)
    partials = [rollup.aggregate(table.slice(i, step)).column(aggs[0].name)[0].as_py() for i in range(0, n, step)]
    merged = next(combine_batches(iter([pa.record_batch({aggs[0].name: pa.array([partials], pa.list_(pa.binary()))})]),
                                  {aggs[0].name: aggs[0]}))
    return merged.column(0)[0].as_py()


def distinct_ids(n: int) -> pa.Array:
    return pa.array([f"user-{i}" for i in range(n)] * 2)[: 2 * n]  # every value twice: n distinct


@pytest.mark.parametrize("size", [16384, 4096])
def test_theta_estimate_within_its_bounds_and_exact_below_size(size):
    sketch = ds.compact_theta_sketch.deserialize(
        rolled_up({"type": "thetaSketch", "name": "m", "fieldName": "u", "size": size}, distinct_ids(N // 2)))
    assert sketch.is_estimation_mode()
    assert sketch.get_lower_bound(3) <= N // 2 <= sketch.get_upper_bound(3)
    assert abs(sketch.get_estimate() / (N // 2) - 1) <= 3 / np.sqrt(size)  # RSE 1/sqrt(k), at 3 sigma
    exact = ds.compact_theta_sketch.deserialize(
        rolled_up({"type": "thetaSketch", "name": "m", "fieldName": "u", "size": size}, distinct_ids(size - 1)))
    assert not exact.is_estimation_mode() and exact.get_estimate() == size - 1


@pytest.mark.parametrize("lg_k, tgt", [(12, "HLL_4"), (16, "HLL_8")])
def test_hll_estimate_within_its_bounds_and_exact_for_few_values(lg_k, tgt):
    metric = {"type": "HLLSketchBuild", "name": "m", "fieldName": "u", "lgK": lg_k, "tgtHllType": tgt}
    sketch = ds.hll_sketch.deserialize(rolled_up(metric, distinct_ids(N // 2)))
    assert (sketch.lg_config_k, str(sketch.tgt_type).split(".")[-1]) == (lg_k, tgt)
    assert sketch.get_lower_bound(3) <= N // 2 <= sketch.get_upper_bound(3)
    assert abs(sketch.get_estimate() / (N // 2) - 1) <= 3 * 1.04 / np.sqrt(2 ** lg_k)  # HLL's RSE 1.04/sqrt(K)
    few = ds.hll_sketch.deserialize(rolled_up(metric, distinct_ids(100)))  # list/set mode: exact after rounding
    assert round(few.get_estimate()) == 100


def check_ranks(sketch, values: np.ndarray, eps: float) -> None:
    """Every quantile the sketch gives has a true rank within the sketch's normalized rank error (DataSketches'
    documented bound, at 99% confidence) of the one asked."""
    ordered = np.sort(values)
    for q in (0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99):
        true_rank = np.searchsorted(ordered, sketch.get_quantile(q), side="right") / len(values)
        assert abs(true_rank - q) <= eps, (q, true_rank, eps)


@pytest.mark.parametrize("metric, reader", [
    ({"type": "quantilesDoublesSketch", "name": "m", "fieldName": "v"}, ds.quantiles_doubles_sketch),
    ({"type": "quantilesDoublesSketch", "name": "m", "fieldName": "v", "k": 1024}, ds.quantiles_doubles_sketch),
    ({"type": "KllDoublesSketch", "name": "m", "fieldName": "v"}, ds.kll_doubles_sketch),
    ({"type": "KllFloatsSketch", "name": "m", "fieldName": "v", "k": 400}, ds.kll_floats_sketch),
])
def test_quantiles_within_the_rank_error_and_exact_below_k(metric, reader):
    rng = np.random.default_rng(32)
    values = rng.lognormal(3, 1, N)
    if reader is ds.kll_floats_sketch:
        values = values.astype(np.float32)
    sketch = reader.deserialize(rolled_up(metric, pa.array(values)))
    assert sketch.n == N and sketch.get_min_value() == values.min() and sketch.get_max_value() == values.max()
    check_ranks(sketch, values, sketch.normalized_rank_error(False))
    few = values[: sketch.k - 1]
    exact = reader.deserialize(rolled_up(metric, pa.array(few)))
    assert not exact.is_estimation_mode()
    ordered = np.sort(few)
    assert [exact.get_quantile(q, True) for q in (0.0, 0.5, 1.0)] == [
        ordered[0], ordered[int(np.ceil(0.5 * len(few))) - 1], ordered[-1]]
