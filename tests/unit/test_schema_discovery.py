"""Type-aware schema discovery (`useSchemaDiscovery`, `type: auto`), in-process: Druid's value types and widening
(core.column_types), the RowParser's discovered column, its expansion into typed columns (what the Spark job
runs in mapInArrow), and segments of differing schemas brought to their merged one. Hypothesis generates
documents that mix types in every column; their types must not depend on record order or chunking."""

from __future__ import annotations

import json
import math
import uuid
from datetime import datetime, timezone
from decimal import Decimal

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ingest_core.core.column_types import (
    DOUBLE,
    JSON,
    LONG,
    NULL,
    STRING,
    UNTYPED_ARRAY,
    canonical,
    coerce,
    column_type,
    merge_types,
    value_type,
    widen,
)
from ingest_core.core.spec import parse_spec
from ingest_core.executor import discovery
from ingest_core.executor.discovery import AUTO_JSON
from ingest_core.executor.rollup import PartialRollup, aggregators
from ingest_core.executor.row_parser import DIMS_JSON, RecordChunk, RowParser

CREATED = datetime(2026, 1, 1, tzinfo=timezone.utc)
TS = "2026-01-01T00:00:00Z"
SETTINGS = settings(max_examples=80, derandomize=True, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def spec(dimensions_spec: dict, metrics: list | None = None, rollup: bool = True):
    return parse_spec({"type": "kafka", "spec": {"dataSchema": {
        "dataSource": "d", "timestampSpec": {"column": "ts"}, "dimensionsSpec": dimensions_spec,
        "metricsSpec": metrics if metrics is not None else [{"type": "count", "name": "cnt"}],
        "granularitySpec": {"segmentGranularity": "DAY", "queryGranularity": "HOUR", "rollup": rollup}},
        "ioConfig": {"topic": "t", "inputFormat": {"type": "json"},
                     "consumerProperties": {"bootstrap.servers": "x:1"}}}})


DISCOVER = spec({"useSchemaDiscovery": True})


def parse(s, docs: list[dict], chunk: int | None = None):
    """Parse `docs` as JSON records in chunks of `chunk`; the parsed tables."""
    parser = RowParser(s, CREATED)
    values = [json.dumps({"ts": TS, **d}).encode() for d in docs]
    size = chunk or max(len(values), 1)
    out = []
    for start in range(0, len(values), size):
        part = values[start:start + size]
        out.append(parser.parse(RecordChunk("t", 0, range(start, start + len(part)), part)))
    return out


def discovered(tables: list[pa.Table], listed: list[str] = ()) -> dict[str, str]:
    """What the job does on the driver: (column, value type) pairs of every row, widened."""
    pairs = []
    for t in tables:
        for batch in discovery.type_batches(iter(t.to_batches())):
            pairs += zip(batch.column(0).to_pylist(), batch.column(1).to_pylist())
    return discovery.column_types(pairs, listed)


def ingest(s, docs, chunk=None, listed=()):
    parsed = parse(s, docs, chunk)
    tables = [p.table for p in parsed]
    types = discovered(tables, listed)
    return types, pa.concat_tables([discovery.expand(t, types) for t in tables]), parsed


# ------------------------------------------------------------------------------------------ Druid's rules


@pytest.mark.parametrize("values,expected", [
    ([1, 2], LONG), ([1, 2.5], DOUBLE), ([1, "a"], STRING), ([1.5, "a", 2], STRING), ([True, 3], LONG),
    ([None, None], STRING), ([], STRING), ([[1, 2], [3]], "ARRAY<LONG>"), ([[1], [2.5]], "ARRAY<DOUBLE>"),
    ([["a", 1]], "ARRAY<STRING>"), ([[1], "a"], "ARRAY<STRING>"), ([5, [1.5]], "ARRAY<DOUBLE>"),
    ([[]], "ARRAY<LONG>"), ([[None]], "ARRAY<LONG>"), ([[], "x"], "ARRAY<STRING>"), ([[], [2.5]], "ARRAY<DOUBLE>"),
    ([{"a": 1}], JSON), ([{"a": 1}, 1, "x", [1]], JSON), ([[{"a": 1}]], JSON), ([[[1]]], JSON), ([{}], JSON),
    ([2 ** 64], DOUBLE), ([b"\x00\xff"], STRING), ([Decimal("1.25")], DOUBLE), ([uuid.UUID(int=1)], STRING),
    ([datetime(2026, 1, 1, tzinfo=timezone.utc)], STRING),
])
def test_a_column_is_the_least_restrictive_type_of_its_values(values, expected):
    assert column_type(value_type(canonical(v)) for v in values) == expected


def test_values_as_discovery_keeps_them_whatever_the_input_format():
    # Avro and Protobuf decoders hand these Python values to the same discovery as JSON's
    assert canonical(True) == 1 and canonical([True, None, 2]) == [1, None, 2]
    assert canonical({"k": [True, b"\x01"]}) == {"k": [True, "AQ=="]}  # nested: booleans stay, bytes as base64
    assert canonical(b"\x00\xff") == "AP8=" and canonical(Decimal("2.5")) == 2.5
    assert canonical(datetime(2026, 1, 1, tzinfo=timezone.utc)) == "2026-01-01T00:00:00+00:00"
    assert canonical((1, 2)) == [1, 2] and canonical({1: "a"}) == {"1": "a"}
    for bad in (math.nan, math.inf, -math.inf, 10 ** 400, Decimal("NaN"), [1.0, math.inf], {"a": math.nan}):
        with pytest.raises(ValueError):
            canonical(bad)


@pytest.mark.parametrize("value,target,expected", [
    (1, DOUBLE, 1.0), (1, STRING, "1"), (2.5, STRING, "2.5"), ("x", STRING, "x"), (3, "ARRAY<LONG>", [3]),
    ([1, None], "ARRAY<DOUBLE>", [1.0, None]), ([1, "a"], "ARRAY<STRING>", ["1", "a"]), ("x", JSON, '"x"'),
    ({"b": 1, "a": [True]}, JSON, '{"a":[true],"b":1}'), (1.5, JSON, "1.5"), (None, LONG, None),
])
def test_a_value_coerced_to_its_column_type(value, target, expected):
    assert coerce(value, target) == expected


types = st.sampled_from([None, NULL, STRING, LONG, DOUBLE, JSON, UNTYPED_ARRAY, "ARRAY<STRING>", "ARRAY<LONG>",
                         "ARRAY<DOUBLE>"])


@SETTINGS
@given(types, types, types)
def test_widening_is_commutative_and_associative(a, b, c):
    assert widen(a, b) == widen(b, a)
    assert widen(widen(a, b), c) == widen(a, widen(b, c))
    assert widen(a, widen(a, b)) == widen(a, b)  # the result holds both


def test_segment_schemas_merge_by_the_same_rules():
    old = {"__time": "TIMESTAMP", "a": LONG, "b": STRING, "c": "ARRAY<LONG>"}
    new = {"__time": "TIMESTAMP", "a": DOUBLE, "c": "ARRAY<DOUBLE>", "d": JSON, "b": JSON}
    assert merge_types([old, new]) == {"__time": "TIMESTAMP", "a": DOUBLE, "b": JSON, "c": "ARRAY<DOUBLE>", "d": JSON}
    # a run whose field held nulls only does not narrow it; alone, such a column is STRING
    assert merge_types([{"a": DOUBLE}, {"a": NULL, "z": NULL}]) == {"a": DOUBLE, "z": STRING}


# ------------------------------------------------------------------------------------------ the parser


def test_every_field_is_ingested_with_the_type_seen():
    docs = [{"l": 1, "d": 1.5, "s": "x", "b": True, "al": [1, 2], "ad": [1.5], "as": ["a"], "o": {"k": {"z": [1]}},
             "m": [1, {"x": 1}], "e": [], "n": None},
            {"l": 2, "d": 2, "s": "y", "b": False, "al": [3], "ad": [2], "as": ["b", "c"], "o": {"k": 1}, "e": []}]
    types, table, parsed = ingest(DISCOVER, docs)
    assert types == {"al": "ARRAY<LONG>", "ad": "ARRAY<DOUBLE>", "as": "ARRAY<STRING>", "b": LONG, "d": DOUBLE,
                     "e": "ARRAY<LONG>", "l": LONG, "m": JSON, "n": NULL, "o": JSON, "s": STRING}
    rows = table.to_pylist()
    assert [(r["l"], r["d"], r["s"], r["b"], r["al"], r["ad"], r["as"], r["o"], r["m"], r["e"], r["n"]) for r in rows] == [
        (1, 1.5, "x", 1, [1, 2], [1.5], ["a"], '{"k":{"z":[1]}}', '[1,{"x":1}]', [], None),
        (2, 2.0, "y", 0, [3], [2.0], ["b", "c"], '{"k":1}', None, [], None)]
    assert table.schema.field("ad").type == pa.list_(pa.float64()) and table.schema.field("o").type == pa.string()
    assert parsed[0].stats.processed == 2 and parsed[0].stats.processed_with_error == 0


def test_types_widen_across_records_and_chunks():
    docs = [{"x": 1}, {"x": 2}, {"x": 2.5}, {"y": 1}, {"y": "one"}, {"z": 7}, {"z": [8]}, {"w": [1]}, {"w": {"a": 1}}]
    for chunk in (1, 2, 4, None):  # the same types however the records were chunked (splits, polls)
        types, table, _ = ingest(DISCOVER, docs, chunk)
        assert types == {"w": JSON, "x": DOUBLE, "y": STRING, "z": "ARRAY<LONG>"}
        rows = table.to_pylist()
        assert [r["x"] for r in rows[:3]] == [1.0, 2.0, 2.5]
        assert [r["y"] for r in rows[3:5]] == ["1", "one"]
        assert [r["z"] for r in rows[5:7]] == [[7], [8]]
        assert [r["w"] for r in rows[7:9]] == ["[1]", '{"a":1}']


def test_listed_dimensions_keep_their_types_and_the_rest_is_discovered():
    s = spec({"useSchemaDiscovery": True, "dimensions": ["s", {"type": "long", "name": "l"}],
              "dimensionExclusions": ["skip"]}, [{"type": "longSum", "name": "v_sum", "fieldName": "v"}])
    types, table, _ = ingest(s, [{"s": 1, "l": "2", "skip": 1, "v": 3, "new": 1.5, "__own": 1, "v_sum": 9}])
    assert types == {"new": DOUBLE}  # not the listed, excluded or metric fields, nor `__` names
    row = table.to_pylist()[0]
    assert (row["s"], row["l"], row["new"]) == ("1", 2, 1.5)


def test_a_type_auto_dimension_is_discovered_alone():
    s = spec({"dimensions": ["s", {"type": "auto", "name": "a"}, {"type": "auto", "name": "never"}]})
    docs = [{"s": "x", "a": 1, "other": 5}, {"s": "y", "a": [2.5], "other": 6}]
    types, table, _ = ingest(s, docs, listed=["a", "never"])
    assert types == {"a": "ARRAY<DOUBLE>", "never": NULL}  # a listed column of nulls only: stored as STRING
    assert [(r["s"], r["a"], r["never"]) for r in table.to_pylist()] == [("x", [1.0], None), ("y", [2.5], None)]
    assert "other" not in table.column_names


def test_transformed_fields_are_discovered_with_their_type():
    s = parse_spec({"type": "kafka", "spec": {"dataSchema": {
        "dataSource": "d", "timestampSpec": {"column": "ts"}, "dimensionsSpec": {"useSchemaDiscovery": True},
        "transformSpec": {"transforms": [{"type": "expression", "name": "twice", "expression": "n * 2"},
                                         {"type": "expression", "name": "n", "expression": "n + 0.5"}]},
        "metricsSpec": [], "granularitySpec": {"segmentGranularity": "DAY"}},
        "ioConfig": {"topic": "t", "inputFormat": {"type": "json"}, "consumerProperties": {"bootstrap.servers": "x:1"}}}})
    types, table, _ = ingest(s, [{"n": 2}])
    assert types == {"n": DOUBLE, "twice": LONG}
    assert table.select(["n", "twice"]).to_pylist() == [{"n": 2.5, "twice": 4}]


def test_a_value_that_cannot_be_kept_is_null_and_its_row_processed_with_error():
    parser = RowParser(DISCOVER, CREATED)
    out = parser.parse(RecordChunk("t", 3, range(7, 9), [b'{"ts": "%s", "x": NaN, "y": 1}' % TS.encode(),
                                                          b'{"ts": "%s", "x": 1.5}' % TS.encode()]))
    assert (out.stats.processed, out.stats.processed_with_error) == (1, 1)
    assert "discovered dimension 'x'" in out.exceptions[0].message and out.exceptions[0].offset == 7
    types = discovered([out.table])
    assert types == {"x": DOUBLE, "y": LONG}
    assert discovery.expand(out.table, types).select(["x", "y"]).to_pylist() == [{"x": None, "y": 1},
                                                                               {"x": 1.5, "y": None}]


def test_without_use_schema_discovery_the_legacy_string_discovery_is_unchanged():
    parsed = parse(spec({}), [{"x": 1, "o": {"a": 1}, "l": [2, 1]}])[0]
    assert AUTO_JSON not in parsed.table.column_names
    assert json.loads(parsed.table.column(DIMS_JSON)[0].as_py()) == {"l": '["1","2"]', "x": "1"}


def test_rollup_groups_equal_lists_and_objects_whatever_their_key_order():
    s = spec({"useSchemaDiscovery": True})
    docs = [{"o": {"a": 1, "b": [1, 2]}, "l": [1, 2]}, {"o": {"b": [1, 2], "a": 1}, "l": [1, 2]},
            {"o": {"a": 1, "b": [2, 1]}, "l": [1, 2]}, {"o": {"a": 1, "b": [1, 2]}, "l": [2, 1]}]
    parser = RowParser(s, CREATED)
    table = parser.parse(RecordChunk("t", 0, range(4), [json.dumps({"ts": TS, **d}).encode() for d in docs])).table
    table = table.append_column("__bucket", table.column("__time"))
    partial = PartialRollup(["__bucket", AUTO_JSON], aggregators(s)).aggregate(table)
    # same object (keys in another order) and same list: one group; array order matters (Druid's arrays)
    assert sorted(partial.column("cnt").to_pylist()) == [1, 1, 2]


# ------------------------------------------------------------------------------------------ generated documents

scalar = st.one_of(st.integers(-(2 ** 70), 2 ** 70), st.floats(allow_nan=False, allow_infinity=False),
                   st.text(max_size=4), st.booleans(), st.none())
value = st.recursive(scalar, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                     st.dictionaries(st.text(max_size=2), inner, max_size=2)),
                     max_leaves=5)
documents = st.lists(st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), value, max_size=4), min_size=1, max_size=8)


@SETTINGS
@given(documents, st.integers(1, 4), st.randoms(use_true_random=False))
def test_generated_documents_type_alike_in_any_order_and_keep_every_value(docs, chunk, rnd):
    types, table, parsed = ingest(DISCOVER, docs)
    shuffled = docs[:]
    rnd.shuffle(shuffled)
    assert ingest(DISCOVER, shuffled, chunk)[0] == types  # order and chunking never change a type
    assert sum(p.stats.processed for p in parsed) == len(docs)
    rows = table.to_pylist()
    for doc, row in zip(docs, rows):
        for name, v in doc.items():
            t = types[name]
            assert widen(value_type(canonical(v)), t) == t  # the column holds the value's type
            want = coerce(canonical(v), t)
            got = row[name]
            if t == JSON and got is not None:
                got, want = json.loads(got), json.loads(want)
            assert got == want, (name, v, t)
        for name in types.keys() - doc.keys():
            assert row[name] is None  # a field a record lacks is null there


# ------------------------------------------------------------------------------------------ segments of other schemas


def test_a_segment_is_brought_to_the_merged_schema():
    old = pa.table({"a": pa.array([1, 2], pa.int64()), "s": pa.array(["x", None]), "n": pa.array([3, 4], pa.int64()),
                    "k": pa.array([[1], None], pa.list_(pa.int64()))})
    own = {"a": LONG, "s": STRING, "n": LONG, "k": "ARRAY<LONG>"}
    target = merge_types([own, {"a": DOUBLE, "s": JSON, "n": "ARRAY<LONG>", "k": "ARRAY<STRING>", "new": LONG}])
    out = discovery.conform(old, own, target)
    assert out.column_names == ["a", "s", "n", "k", "new"]
    assert out.to_pylist() == [{"a": 1.0, "s": '"x"', "n": [3], "k": ["1"], "new": None},
                               {"a": 2.0, "s": None, "n": [4], "k": None, "new": None}]
    assert out.schema.field("a").type == pa.float64() and out.schema.field("n").type == pa.list_(pa.int64())


flat = st.one_of(st.integers(-(2 ** 70), 2 ** 70), st.floats(allow_nan=False, allow_infinity=False), st.none(),
                 st.lists(st.one_of(st.integers(-9, 9), st.floats(-1e20, 1e20), st.none()), max_size=2))


@SETTINGS
@given(st.lists(st.one_of(flat, flat, value), min_size=1, max_size=4),
       st.lists(st.one_of(scalar, flat, value), min_size=1, max_size=4))
@example(old=[0.5, 1], new=["a"]).via("a double read as text: Python's repr, not Arrow's `1`")
@example(old=[[1.0]], new=[["x"]])
@example(old=["x"], new=[{"a": 1}])
def test_a_segment_read_in_a_wider_schema_holds_its_values_as_the_wider_type(old, new):
    """Two runs' values of one column: the first run's segment, conformed to the merged type, holds each stored
    value coerced to it, whether Arrow's cast or the Python coercion converts it (Arrow writes the double 1.0
    as `1`: not for text)."""
    old_types, old_table, _ = ingest(DISCOVER, [{"c": v} for v in old])
    new_types, _, _ = ingest(DISCOVER, [{"c": v} for v in new])
    own = old_types["c"]
    merged = merge_types([{"c": own}, {"c": new_types["c"]}])
    got = discovery.conform(old_table.select(["c"]), {"c": own}, merged).column("c").to_pylist()
    stored = [coerce(canonical(v), own) for v in old]
    want = [coerce(json.loads(v) if own == JSON and v is not None else v, merged["c"]) for v in stored]
    if merged["c"] == JSON:
        got = [None if g is None else json.loads(g) for g in got]
        want = [None if w is None else json.loads(w) for w in want]
    assert got == want


def test_fields_that_differ_only_in_case_are_a_clear_error_not_spark_s_ambiguous_reference():
    from ingest_core.core.errors import IngestError
    from ingest_core.spark.job import check_case_clashes

    check_case_clashes(DISCOVER, ["page", "user", "page"])  # a listed dimension that is also found: one column
    with pytest.raises(IngestError, match="'Page' and the column 'page' differ only in case.*dimensionExclusions"):
        check_case_clashes(DISCOVER, ["page", "user", "Page"])
