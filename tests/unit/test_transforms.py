"""Transforms, the filter and the discovered dimensions as Druid applies them (Transformer/TransformedInputRow,
MapInputRowParser.findDimensions, JsonInputFormat.isKeepNullColumns): every transform reads the row as parsed (a
field of its own name too, and none reads another transform's output), the filter reads the transformed row,
`includeAllDimensions` and `keepNullColumns` add the columns Druid adds."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from ingest_core.core.spec import parse_spec
from ingest_core.executor.row_parser import DIMS_JSON, RecordChunk, RowParser, metric_input_column

CREATED = datetime(2018, 1, 1, tzinfo=timezone.utc)

# Druid's transform tutorial: examples/quickstart/tutorial/transform-data.json and transform-index.json
TUTORIAL_RECORDS = [
    b'{"timestamp":"2018-01-01T07:01:35Z","animal":"octopus",  "location":1, "number":100}',
    b'{"timestamp":"2018-01-01T05:01:35Z","animal":"mongoose", "location":2,"number":200}',
    b'{"timestamp":"2018-01-01T06:01:35Z","animal":"snake", "location":3, "number":300}',
    b'{"timestamp":"2018-01-01T01:01:35Z","animal":"lion", "location":4, "number":300}',
]
TUTORIAL_SCHEMA = {
    "timestampSpec": {"column": "timestamp", "format": "iso"},
    "dimensionsSpec": {"dimensions": ["animal", {"name": "location", "type": "long"}]},
    "metricsSpec": [{"type": "count", "name": "count"},
                    {"type": "longSum", "name": "number", "fieldName": "number"},
                    {"type": "longSum", "name": "triple-number", "fieldName": "triple-number"}],
    "granularitySpec": {"type": "uniform", "segmentGranularity": "week", "queryGranularity": "minute",
                        "rollup": True},
    "transformSpec": {
        "transforms": [{"type": "expression", "name": "animal", "expression": "concat('super-', animal)"},
                       {"type": "expression", "name": "triple-number", "expression": "number * 3"}],
        "filter": {"type": "or", "fields": [
            {"type": "selector", "dimension": "animal", "value": "super-mongoose"},
            {"type": "selector", "dimension": "triple-number", "value": "300"},
            {"type": "selector", "dimension": "location", "value": "3"}]}},
}


def spec(data_schema: dict, input_format: dict | None = None):
    return parse_spec({"type": "kafka", "spec": {
        "dataSchema": {"dataSource": "d", **data_schema},
        "ioConfig": {"topic": "t", "inputFormat": input_format or {"type": "json"},
                     "consumerProperties": {"bootstrap.servers": "x:1"}}}})


def parse(data_schema: dict, records: list[bytes], input_format: dict | None = None) -> list[dict]:
    out = RowParser(spec(data_schema, input_format), CREATED).parse(RecordChunk("t", 0, range(len(records)), records))
    return out.table.to_pylist()


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def test_the_transform_tutorial_reads_the_field_it_replaces_and_filters_the_transformed_row():
    rows = parse(TUTORIAL_SCHEMA, TUTORIAL_RECORDS)
    got = [(r["animal"], r["location"], r[metric_input_column("number", "long")],
            r[metric_input_column("triple-number", "long")]) for r in rows]
    # the lion row is the only one no clause of the filter matches (on the transformed values)
    assert got == [("super-octopus", 1, 100, 300), ("super-mongoose", 2, 200, 600), ("super-snake", 3, 300, 900)]


def test_each_transform_reads_the_input_row_never_another_transforms_output():
    schema = {"timestampSpec": {"column": "ts", "format": "millis"}, "dimensionsSpec": {"dimensions": ["a", "b", "c"]},
              "transformSpec": {"transforms": [
                  {"type": "expression", "name": "a", "expression": "concat(a, '-1')"},
                  {"type": "expression", "name": "b", "expression": "concat(a, '-2')"},   # the input's a
                  {"type": "expression", "name": "c", "expression": "concat(b, '-3')"}]},  # the input's b: null
              "granularitySpec": {"segmentGranularity": "DAY"}}
    rows = parse(schema, [b'{"ts": 0, "a": "x"}', b'{"ts": 0, "a": "y", "b": "z"}'])
    assert [(r["a"], r["b"], r["c"]) for r in rows] == [("x-1", "x-2", None), ("y-1", "y-2", "z-3")]


def test_time_transforms_read_the_parsed_time_and_the_filter_reads_the_new_one():
    t = ms("2018-01-01T00:00:00Z")
    schema = {"timestampSpec": {"column": "ts", "format": "millis"},
              "dimensionsSpec": {"dimensions": [{"name": "was", "type": "long"}]},
              "transformSpec": {
                  "transforms": [{"type": "expression", "name": "__time", "expression": "__time + 3600000"},
                                 {"type": "expression", "name": "was", "expression": "__time"}],
                  # only the row whose new time is 01:00 passes: the filter sees the transformed __time
                  "filter": {"type": "selector", "dimension": "__time", "value": str(t + 3600000)}},
              "granularitySpec": {"segmentGranularity": "DAY"}}
    rows = parse(schema, [json.dumps({"ts": t}).encode(), json.dumps({"ts": t + 1}).encode()])
    assert [(int(r["__time"].timestamp() * 1000), r["was"]) for r in rows] == [(t + 3600000, t)]


def discovered(rows: list[dict]) -> list[dict]:
    return [json.loads(r[DIMS_JSON]) for r in rows]


def test_include_all_dimensions_discovers_the_undeclared_fields_as_strings():
    schema = {"timestampSpec": {"column": "ts", "format": "millis"},
              "dimensionsSpec": {"dimensions": ["page", {"name": "n", "type": "long"}], "includeAllDimensions": True,
                                 "dimensionExclusions": ["secret"]},
              "metricsSpec": [{"type": "longSum", "name": "added_sum", "fieldName": "added"},
                              {"type": "count", "name": "cnt"}],
              "granularitySpec": {"segmentGranularity": "DAY"}}
    rows = parse(schema, [b'{"ts": 0, "page": "p", "n": 3, "user": "u", "flag": true, "secret": "s", "added": 2,'
                          b' "cnt": 9, "nested": {"x": 1}, "deep": [{"x": 1}], "list": [2, 1]}'])
    assert (rows[0]["page"], rows[0]["n"]) == ("p", 3)  # declared: typed as declared, not discovered again
    # the timestamp, exclusions, metric inputs and names, objects and lists of objects are not dimensions
    assert discovered(rows) == [{"user": "u", "flag": "true", "list": '["1","2"]'}]
    without = parse({**schema, "dimensionsSpec": {"dimensions": ["page"]}}, [b'{"ts": 0, "page": "p", "user": "u"}'])
    assert DIMS_JSON not in without[0]


@pytest.mark.parametrize("input_format,kept", [
    ({"type": "json"}, False),  # Druid's default without a flattenSpec
    ({"type": "json", "keepNullColumns": True}, True),
    ({"type": "json", "flattenSpec": {"fields": [{"type": "path", "name": "x", "expr": "$.o.x"}]}}, True),
    ({"type": "json", "keepNullColumns": False, "flattenSpec": {"useFieldDiscovery": True, "fields": []}}, False),
    ({"type": "csv", "columns": ["ts", "a", "empty"]}, True),  # Druid's csv rows hold every column
])
def test_keep_null_columns_makes_a_column_of_a_field_null_in_every_row(input_format, kept):
    schema = {"timestampSpec": {"column": "ts", "format": "millis"}, "dimensionsSpec": {},
              "granularitySpec": {"segmentGranularity": "DAY"}}
    csv = input_format["type"] == "csv"
    records = [b"0,x," if csv else b'{"ts": 0, "a": "x", "empty": null, "o": {"x": 1}}',
               b"0,y," if csv else b'{"ts": 0, "a": "y", "empty": null, "o": {"x": 2}}']
    dims = discovered(parse(schema, records, input_format))
    assert all(("empty" in d) == kept for d in dims) and all(d.get("empty") is None for d in dims)
    assert [d["a"] for d in dims] == ["x", "y"]


def test_a_transform_reading_another_transforms_name_is_a_warning():
    chained = spec({"timestampSpec": {"column": "ts"}, "granularitySpec": {"segmentGranularity": "DAY"},
                    "transformSpec": {"transforms": [
                        {"type": "expression", "name": "page", "expression": "lower(page)"},
                        {"type": "expression", "name": "page_len", "expression": "strlen(page) + 0 * __time"},
                        {"type": "expression", "name": "__time", "expression": "__time + 1"}]}})
    assert [(w.path, w.message) for w in chained.warnings] == [
        ("spec.dataSchema.transformSpec.transforms[1]",
         "transform 'page_len' reads __time, page from the input row, not the output of the transform of that name "
         "(transforms never read each other's outputs, as in Druid): repeat that transform's expression here to "
         "build on it")]
    assert spec(TUTORIAL_SCHEMA).warnings == ()  # a transform reading the field it replaces is Druid's in-place form

