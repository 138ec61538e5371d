"""Druid's deprecated `dataSchema.parser` read as today's form, the `regex` input format and flattenSpec
`jq`/`tree` fields. The specs are Druid's own (tests/data/druid_specs/README.md says where each came from)."""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest_core.core.errors import SpecError
from ingest_core.core.json_path import JsonPath, JsonPathError
from ingest_core.core.legacy_parser import convert_parser
from ingest_core.core.spec import FlattenSpec, InputFormat, parse_spec
from ingest_core.executor.formats.decoders import decoder_for
from ingest_core.executor.row_parser import RecordChunk, RowParser
from ingest_core.service.cli import main

DRUID = Path(__file__).parents[1] / "data" / "druid_specs"
BOOTSTRAP = {"bootstrap.servers": "localhost:9092"}
REGISTRY = "http://localhost:8081"
DESCRIPTOR = "file:///shared/wikiticker-it/wikipedia.desc"  # as Druid's protobuf input_format.json names it


def fill(text: str, **values: str) -> str:
    """Druid's placeholders filled as its integration tests fill them (plain text replacement)."""
    for key, value in values.items():
        text = text.replace(f"%%{key}%%", value)
    return text


def druid(name: str, **values: str) -> str:
    return fill((DRUID / name).read_text(), SCHEMA_REGISTRY_HOST=REGISTRY, PROTOBUF_DESC_FILE=DESCRIPTOR, **values)


def stream_spec(parser: str, input_format: str) -> dict:
    """Druid's stream supervisor template, with a parser or an input format (the other one null), as Druid's
    AbstractStreamIndexingTest fills it for Kafka."""
    return json.loads(druid("stream/supervisor_spec_template.json", STREAM_TYPE="kafka", DATASOURCE="wiki",
                            PARSER=parser, INPUT_FORMAT=input_format, TOPIC_KEY="topic", TOPIC_VALUE="wiki",
                            STREAM_PROPERTIES_KEY="consumerProperties", STREAM_PROPERTIES_VALUE=json.dumps(BOOTSTRAP),
                            USE_EARLIEST_KEY="useEarliestOffset"))


def parser_warnings(spec) -> list[str]:
    return [w.message for w in spec.warnings if w.path.endswith("dataSchema.parser")]


def refused(raw, strict: bool = False) -> dict[str, str]:
    with pytest.raises(SpecError) as info:
        parse_spec(raw, "specs/x.json", strict=strict)
    return {p.path: p.message for p in info.value.problems}


def with_parser(parser, *, io: dict | None = None, **data_schema) -> dict:
    """A minimal flat (Druid's older shape) Kafka spec whose dataSchema has `parser`."""
    return {"type": "kafka",
            "dataSchema": {"dataSource": "legacy", "parser": parser, **data_schema},
            "ioConfig": {"topic": "t", "consumerProperties": BOOTSTRAP, **(io or {})}}


def string_parser(**parse_spec_fields) -> dict:
    return {"type": "string", "parseSpec": {"timestampSpec": {"column": "ts"}, **parse_spec_fields}}


def same_format(fmt: InputFormat) -> InputFormat:
    """`fmt` with a flattenSpec that changes nothing (field discovery, no fields) left out: Druid's default."""
    return dataclasses.replace(fmt, flatten_spec=None) if fmt.flatten_spec == FlattenSpec() else fmt


# ------------------------------------------------------------------------------------------ hostile specs first


def test_a_parse_spec_of_an_unknown_format_is_refused_by_name():
    found = refused(with_parser(string_parser(format="xml")))
    assert "parseSpec format 'xml' is not known" in found["dataSchema.parser.parseSpec.format"]
    assert "json, csv, tsv, delimited, regex" in found["dataSchema.parser.parseSpec.format"]
    assert "did you mean 'json'" in refused(with_parser(string_parser(format="jsn")))[
        "dataSchema.parser.parseSpec.format"]


def test_a_regex_that_does_not_compile_is_refused_at_the_field_it_came_from():
    found = refused(with_parser(string_parser(format="regex", pattern="(unclosed")))
    message = found["ioConfig.inputFormat.pattern"]
    assert "is not a valid regular expression" in message and "converted from dataSchema.parser" in message
    modern = refused({"type": "kafka", "dataSchema": {"dataSource": "d"}, "ioConfig": {
        "topic": "t", "consumerProperties": BOOTSTRAP, "inputFormat": {"type": "regex", "pattern": "a[b"}}})
    assert "is not a valid regular expression" in modern["ioConfig.inputFormat.pattern"]
    assert "needs pattern" in refused({"type": "kafka", "dataSchema": {"dataSource": "d"}, "ioConfig": {
        "topic": "t", "consumerProperties": BOOTSTRAP, "inputFormat": {"type": "regex"}}})["ioConfig.inputFormat.pattern"]


def test_with_both_parser_and_input_format_the_input_format_reads_the_records_as_in_druid():
    raw = with_parser(string_parser(format="csv", columns=["ts", "a"], dimensionsSpec={"dimensions": ["a"]}),
                      io={"inputFormat": {"type": "json"}})
    spec = parse_spec(raw)
    assert spec.io_config.input_format == parse_spec(with_parser(None, io={"inputFormat": {"type": "json"}})
                                                     ).io_config.input_format
    # the parseSpec still gives what the dataSchema leaves out (Druid's DataSchema.getTimestampSpec)
    assert spec.data_schema.timestamp_spec.column == "ts"
    assert [d.name for d in spec.data_schema.dimensions_spec.dimensions] == ["a"]
    (warning,) = parser_warnings(spec)
    assert "ioConfig.inputFormat is given, so it reads the records" in warning
    assert "ioConfig.inputFormat:" not in warning.split(";")[0]  # nothing was converted into it
    # Druid's own stream template gives the dataSchema's parts too: nothing of the parser is used
    unused = parse_spec(stream_spec(druid("stream/csv/input_row_parser.json"), druid("stream/json/input_format.json")))
    assert unused.io_config.input_format.type == "json"
    assert parser_warnings(unused) == ["is Druid's deprecated parser form, and none of it is used; ioConfig.inputFormat "
                                       "is given, so it reads the records, as in Druid: the parser's record format is "
                                       "unused. Remove the parser"]
    # a broken parser is still an error, inputFormat or not
    found = refused(with_parser({"type": "string", "parseSpec": {"format": "javascript"}},
                                io={"inputFormat": {"type": "json"}}))
    assert "JavaScript parsing is not supported" in found["dataSchema.parser.parseSpec.format"]


@pytest.mark.parametrize("parser", ["string", ["string"], 7, True])
def test_a_parser_that_is_not_an_object_is_refused(parser):
    found = refused(with_parser(parser, io={"inputFormat": {"type": "json"}}))
    assert "expected a parser object such as {type: string, parseSpec:" in found["dataSchema.parser"]


def test_parser_null_is_no_parser():
    spec = parse_spec(with_parser(None, io={"inputFormat": {"type": "json"}}))
    assert parser_warnings(spec) == [] and spec.io_config.input_format.type == "json"
    assert "is null, but required" in refused(with_parser(None, io={"inputFormat": None}))["ioConfig.inputFormat"]


@pytest.mark.parametrize("parse_spec_fields, path, says", [
    ({"format": "javascript", "function": "function(s) {}"}, "parseSpec.format", "transformSpec.transforms"),
    ({"format": "jsonLowercase"}, "parseSpec.format", "lower-cases every field name"),
    ({"format": "timeAndDims"}, "parseSpec.format", "names no record format"),
    ({"format": "avro"}, "parseSpec.format", "goes with parser type avro_stream"),
])
def test_parse_specs_druid_cannot_be_followed_in_are_refused_saying_what_to_write(parse_spec_fields, path, says):
    found = refused(with_parser(string_parser(**parse_spec_fields)))
    assert says in found[f"dataSchema.parser.{path}"], found


@pytest.mark.parametrize("parse_spec_fields, path, says", [
    ({"format": "json", "flattenSpc": {}}, "parseSpec.flattenSpc", "did you mean 'flattenSpec'"),
    ({"format": "csv", "columns": ["ts"], "delimiter": ";"}, "parseSpec.delimiter", "unknown field for a csv parseSpec"),
    ({"format": "json"}, "parseSpecs", "did you mean 'parseSpec'"),
])
def test_unknown_parse_spec_fields_are_warnings_as_druid_ignores_them_and_errors_when_strict(parse_spec_fields, path,
                                                                                              says):
    raw = with_parser({**string_parser(**parse_spec_fields), "parseSpecs": {}} if path == "parseSpecs"
                      else string_parser(**parse_spec_fields))
    warned = {w.path: w.message for w in parse_spec(raw).warnings}
    assert says in warned[f"dataSchema.parser.{path}"] and "--strict" in warned[f"dataSchema.parser.{path}"]
    assert says in refused(raw, strict=True)[f"dataSchema.parser.{path}"]


@pytest.mark.parametrize("parser, path, says", [
    ({"type": "thrift", "parseSpec": {}}, "type", "a Kafka spec's parser is string, avro_stream or protobuf"),
    ({"type": "strng", "parseSpec": {}}, "type", "did you mean 'string'"),
    ({"type": "hadoopyString", "parseSpec": {}}, "type", "Hadoop batch ingestion"),
    ({"type": "map", "parseSpec": {}}, "type", "not Kafka records"),
    ({"type": "string"}, "parseSpec", "required: the parseSpec"),
    ({"type": "string", "parseSpec": "json"}, "parseSpec", "expected an object"),
    ({**string_parser(format="json"), "encoding": "UTF-16"}, "encoding", "only UTF-8 records are read"),
    ({"type": "protobuf", "descriptor": "file:///x.desc", "protoBytesDecoder": {"type": "file", "descriptor": "y"},
      "parseSpec": {"format": "json"}}, "descriptor", "contradict each other"),
    ({"type": "protobuf", "protoBytesDecoder": {"type": "file", "descriptor": "y"},
      "parseSpec": {"format": "timeAndDims"}}, "parseSpec.format", "protobuf parser no longer reads it"),
    ({"type": "avro_stream", "avroBytesDecoder": {"type": "schema_registry", "url": REGISTRY},
      "parseSpec": {"format": "json"}}, "parseSpec.format", "takes a parseSpec of format avro or timeAndDims"),
])
def test_parsers_that_cannot_read_kafka_records_are_refused_by_name(parser, path, says):
    found = refused(with_parser(parser))
    assert says in found[f"dataSchema.parser.{path}"], found


def test_a_problem_in_a_converted_part_names_the_parser_it_came_from():
    found = refused(with_parser(string_parser(format="csv"), io={}))
    assert "needs columns" in found["ioConfig.inputFormat.columns"]
    assert found["ioConfig.inputFormat.columns"].endswith("(converted from dataSchema.parser)")
    nested = refused({"type": "kafka", "spec": with_parser(
        {"type": "string", "parseSpec": {"format": "json", "timestampSpec": {"column": "ts", "format": "yyyy-QQ"}}})})
    assert nested["spec.dataSchema.timestampSpec.format"].endswith(
        "(converted from spec.dataSchema.parser.parseSpec.timestampSpec)")


@pytest.mark.parametrize("before", [True, False])
def test_a_null_timestamp_spec_beside_the_parser_is_no_timestamp_spec(before):
    parser = string_parser(format="json", timestampSpec={"column": "when"})
    data_schema = ({"dataSource": "d", "timestampSpec": None, "parser": parser} if before else
                   {"dataSource": "d", "parser": parser, "timestampSpec": None})
    spec = parse_spec({"type": "kafka", "dataSchema": data_schema,
                       "ioConfig": {"topic": "t", "consumerProperties": BOOTSTRAP}})
    assert spec.data_schema.timestamp_spec.column == "when"


def test_missing_parser_type_and_format_take_druid_s_defaults_string_and_tsv():
    spec = parse_spec(with_parser({"parseSpec": {"columns": ["ts", "a"], "timestampSpec": {"column": "ts"}}}))
    assert spec.io_config.input_format.type == "tsv" and spec.io_config.input_format.columns == ["ts", "a"]


_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from(
    ["", "string", "json", "csv", "tsv", "regex", "avro", "protobuf", "avro_stream", "timeAndDims", "(", ".a", "$.a"]))
_KEYS = st.sampled_from(["type", "parseSpec", "format", "columns", "pattern", "flattenSpec", "fields", "expr",
                         "nodes", "timestampSpec", "dimensionsSpec", "column", "protoBytesDecoder", "descriptor",
                         "avroBytesDecoder", "listDelimiter", "encoding", "hasHeaderRow", "name"])
_VALUES = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEYS, inner, max_size=4),
                       max_leaves=12)


@settings(max_examples=300, derandomize=True, deadline=None, database=None)
@given(parser=_VALUES, input_format=st.one_of(st.none(), st.just({"type": "json"})))
def test_any_parser_loads_or_is_refused_with_its_problems_never_a_crash(parser, input_format):
    raw = with_parser(parser, io={"inputFormat": input_format} if input_format else {})
    try:
        spec = parse_spec(raw)
    except SpecError as exc:
        assert exc.problems and all(p.message for p in exc.problems)
    else:
        assert len(parser_warnings(spec)) <= 1


# ------------------------------------------------------------------------------------------ Druid's own specs


@pytest.mark.parametrize("fmt", ["json", "csv", "tsv", "avro_schema_registry", "protobuf"])
def test_druid_s_legacy_parser_specs_convert_to_druid_s_input_format_specs_for_the_same_data(fmt):
    """Druid's stream integration tests read the same data with a parser and with an inputFormat: the parser,
    converted, is that inputFormat."""
    legacy = parse_spec(stream_spec(druid(f"stream/{fmt}/input_row_parser.json"), "null"))
    modern = parse_spec(stream_spec("null", druid(f"stream/{fmt}/input_format.json")))
    assert same_format(legacy.io_config.input_format) == same_format(modern.io_config.input_format)
    assert legacy.data_schema == modern.data_schema
    assert len(parser_warnings(legacy)) == 1 and parser_warnings(modern) == []
    (warning,) = parser_warnings(legacy)
    start = warning.index("ioConfig.inputFormat: ") + len("ioConfig.inputFormat: ")
    converted, _ = json.JSONDecoder().raw_decode(warning, start)
    assert same_format(parse_spec(stream_spec("null", json.dumps(converted))).io_config.input_format) == \
        same_format(modern.io_config.input_format)  # the warning's JSON is the converted format itself


def test_druid_s_avro_and_schema_registry_protobuf_parser_specs_convert():
    avro = parse_spec(stream_spec(druid("stream/avro/input_row_parser.json"), "null"))
    fmt = avro.io_config.input_format
    assert fmt.type == "avro_stream" and fmt.avro_bytes_decoder.type == "schema_inline" and fmt.flatten_spec is None
    proto = parse_spec(stream_spec(druid("stream/protobuf_schema_registry/input_row_parser.json"), "null"))
    assert proto.io_config.input_format.proto_bytes_decoder.type == "schema_registry"
    assert proto.io_config.input_format.proto_bytes_decoder.url == REGISTRY
    assert len(parser_warnings(avro)) == 1 and len(parser_warnings(proto)) == 1


def test_druid_s_tutorial_spec_loads_converted_with_one_warning_showing_the_modern_json():
    raw = json.loads(druid("wikipedia-kafka-supervisor.json"))
    spec = parse_spec(raw, "wikipedia-kafka-supervisor.json")
    assert spec.io_config.input_format.type == "json" and spec.io_config.input_format.flatten_spec is None
    assert (spec.data_schema.timestamp_spec.column, spec.data_schema.timestamp_spec.format) == ("time", "auto")
    dims = spec.data_schema.dimensions_spec.dimensions
    assert len(dims) == 19 and dims[0].name == "channel" and (dims[-1].name, dims[-1].type) == ("delta", "long")
    (warning,) = parser_warnings(spec)
    assert 'ioConfig.inputFormat: {"type": "json"}' in warning
    assert 'dataSchema.timestampSpec: {"column": "time", "format": "auto"}' in warning
    assert '{"name": "added", "type": "long"}' in warning and "ingest convert FILE" in warning
    conversion = convert_parser(raw)
    assert "parser" not in conversion.raw["dataSchema"] and raw["dataSchema"]["parser"]  # the input is untouched
    modern = parse_spec(conversion.raw)
    assert parser_warnings(modern) == [] and modern.fingerprint() == spec.fingerprint()


def test_druid_s_kafka_integration_test_parser_spec_converts():
    raw = json.loads(druid("kafka_supervisor_spec_legacy_parser.json", DATASOURCE="wiki_it", TOPIC="wiki",
                           CONSUMER_PROPERTIES=json.dumps(BOOTSTRAP)))
    spec = parse_spec(raw)
    assert spec.io_config.input_format.type == "json" and spec.data_schema.timestamp_spec.column == "timestamp"
    assert [d.name for d in spec.data_schema.dimensions_spec.dimensions][:3] == ["page", "language", "user"]
    assert len(parser_warnings(spec)) == 1


def test_druid_s_protobuf_docs_spec_with_the_older_parser_level_descriptor_converts():
    spec = parse_spec(json.loads(druid("docs/protobuf-kafka-supervisor.json")))
    decoder = spec.io_config.input_format.proto_bytes_decoder
    assert (decoder.type, decoder.descriptor, decoder.proto_message_type) == ("file", "file:///tmp/metrics.desc",
                                                                              "Metrics")
    assert spec.data_schema.dimensions_spec.dimension_exclusions == ["timestamp", "value"]
    (warning,) = parser_warnings(spec)
    assert '"protoBytesDecoder": {"type": "file", "descriptor": "file:///tmp/metrics.desc"' in warning
    docs_parser = parse_spec(with_parser(json.loads(druid("docs/parser-protobuf.json"))))
    assert docs_parser.io_config.input_format == spec.io_config.input_format


def test_druid_s_docs_parse_spec_samples():
    csv = parse_spec(with_parser({"type": "string", "parseSpec": json.loads(druid("docs/parseSpec-csv.json"))}))
    assert csv.io_config.input_format.type == "csv" and len(csv.io_config.input_format.columns) == 16
    tsv = parse_spec(with_parser({"type": "string", "parseSpec": json.loads(druid("docs/parseSpec-tsv.json"))}))
    assert tsv.io_config.input_format.effective_delimiter == "|"
    # the docs' JSON sample spells dimensionSpec: Druid ignores it (and discovers the dimensions); named, with the
    # spelling that works, as a warning (an error with --strict)
    docs_json = with_parser({"type": "string", "parseSpec": json.loads(druid("docs/parseSpec-json.json"))})
    warned = {w.path: w.message for w in parse_spec(docs_json).warnings}
    assert "did you mean 'dimensionsSpec'" in warned["dataSchema.parser.parseSpec.dimensionSpec"]
    found = refused(docs_json, strict=True)
    assert "did you mean 'dimensionsSpec'" in found["dataSchema.parser.parseSpec.dimensionSpec"]
    found = refused(with_parser({"type": "string", "parseSpec": json.loads(druid("docs/parseSpec-javascript.json"))}))
    assert "JavaScript parsing is not supported" in found["dataSchema.parser.parseSpec.format"]
    regex_text = (DRUID / "docs/parseSpec-regex.json").read_text().replace(
        "<your_list_of_dimensions>", '"ip", "path"').replace("<your_columns_here>", '"timestamp", "ip", "path"').replace(
        "<regex pattern for partitioning data>", json.dumps(r"(\S+) (\S+) (\S+)"))
    regex = parse_spec(with_parser({"type": "string", "parseSpec": json.loads(regex_text)}))
    assert regex.io_config.input_format._to_raw() == {"type": "regex", "columns": ["timestamp", "ip", "path"],
                                                      "pattern": r"(\S+) (\S+) (\S+)"}
    rows = decoder_for(regex.io_config.input_format).rows(b"2026-01-01T00:00:00Z 10.0.0.1 /index.html")
    assert rows == [{"timestamp": "2026-01-01T00:00:00Z", "ip": "10.0.0.1", "path": "/index.html"}]


# ------------------------------------------------------------------------------------------ jq and tree fields


def test_druid_s_docs_flatten_spec_with_root_path_tree_and_jq_fields_reads_what_druid_reads():
    flatten = json.loads(druid("docs/flattenSpec.json"))
    spec = parse_spec(with_parser(string_parser(format="json", flattenSpec=flatten)))
    assert spec.io_config.input_format.flatten_spec.fields[3].type == "jq"  # kept as written: JSON reads jq
    doc = {"ts": "2026-01-01T00:00:00Z", "baz": 1, "foo": {"bar": 2, "other": {"bar": 3}},
           "thing": {"food": ["a", "b"]}}
    (row,) = decoder_for(spec.io_config.input_format).rows(json.dumps(doc).encode())
    assert (row["baz"], row["foo_bar"], row["foo_other_bar"], row["first_food"]) == (1, 2, 3, "b")
    # Avro and Protobuf take root and path fields only, as in Druid: the path to write is named
    found = refused(with_parser(None, io={"inputFormat": {
        "type": "avro_stream", "avroBytesDecoder": {"type": "schema_registry", "url": REGISTRY}, "flattenSpec": flatten}}))
    assert "write a path field with a JSONPath (here {type: path, name: first_food, expr: '$.thing.food[1]'})" in \
        found["ioConfig.inputFormat.flattenSpec.fields[3]"]
    assert "expr: '$.foo.other.bar'" in found["ioConfig.inputFormat.flattenSpec.fields[2]"]
    # Druid's protobuf parser flattened the message's JSON, jq included: converted, the fields are paths
    proto = parse_spec(with_parser({"type": "protobuf", "protoBytesDecoder": {"type": "file", "descriptor": "x.desc"},
                                    "parseSpec": {"format": "json", "flattenSpec": flatten}}))
    fields = proto.io_config.input_format.flatten_spec.fields
    assert [(f.type, f.expr) for f in fields[2:]] == [("path", "$.foo.other.bar"), ("path", "$.thing.food[1]")]


@pytest.mark.parametrize("jq, json_path, steps", [
    (".a.b", "$.a.b", ("a", "b")),
    (".a[0]", "$.a[0]", ("a", 0)),
    ('.["x y"]', "$['x y']", ("x y",)),
    ('."x y".z', "$['x y'].z", ("x y", "z")),
    ('.a["it\'s"][2].b', "$.a['it\\'s'][2].b", ("a", "it's", 2, "b")),
    (".[1]", "$[1]", (1,)),
    (".", "$", ()),
    ('.["\\u00e9t\\u00e9"]', "$['été']", ("été",)),
])
def test_jq_paths_read_as_the_json_path_they_name(jq, json_path, steps):
    path = JsonPath.from_jq(jq)
    assert (path.text, path.steps) == (json_path, steps)
    assert JsonPath.parse(path.text).steps == steps  # the text shown is a path the parser reads back the same


@pytest.mark.parametrize("jq, says", [
    (".a | .b", "pipes '|'"),
    (".a[]", "iterating '.[]'"),
    ("..a", "recursive descent"),
    (".a[-1]", "negative indexes"),
    (".a[1:2]", "slices"),
    (".a?", "optional operator"),
    ("a.b", "must be a path starting with '.'"),
    ("select(.a > 1)", "must be a path starting with '.'"),
    (".a | length", "pipes"),
])
def test_the_rest_of_jq_is_refused_saying_to_write_a_path_field(jq, says):
    with pytest.raises(JsonPathError) as info:
        JsonPath.from_jq(jq)
    assert says in str(info.value)
    found = refused(with_parser(None, io={"inputFormat": {"type": "json", "flattenSpec": {"fields": [
        {"type": "jq", "name": "f", "expr": jq}]}}}))
    assert says in found["ioConfig.inputFormat.flattenSpec.fields[0].expr"]


def test_flatten_field_shapes_are_checked():
    def field_problems(f):
        return refused(with_parser(None, io={"inputFormat": {"type": "json", "flattenSpec": {"fields": [f]}}}))

    assert "needs nodes" in field_problems({"type": "tree", "name": "t"})["ioConfig.inputFormat.flattenSpec.fields[0].nodes"]
    assert "only 'tree' fields take nodes" in field_problems({"type": "path", "name": "p", "expr": "$.a", "nodes": ["a"]})[
        "ioConfig.inputFormat.flattenSpec.fields[0].nodes"]
    assert "needs expr, a jq path" in field_problems({"type": "jq", "name": "j"})[
        "ioConfig.inputFormat.flattenSpec.fields[0].expr"]
    assert "did you mean 'tree'" in field_problems({"type": "tre", "name": "x"})[
        "ioConfig.inputFormat.flattenSpec.fields[0].type"]


# ------------------------------------------------------------------------------------------ the regex format


def regex_format(**fields) -> InputFormat:
    spec = parse_spec(with_parser(None, io={"inputFormat": {"type": "regex", **fields}}))
    return spec.io_config.input_format


def test_regex_reads_each_line_whole_its_groups_the_columns_as_druid_s_regex_reader():
    decoder = decoder_for(regex_format(pattern=r"(?<host>\S+) \[([^\]]*)\] (\w*)(?: (.*))?", listDelimiter=","))
    rows = decoder.rows(b"h1 [2026-01-01] GET a,b\r\nh2 [x] \nh3 [y] POST only\n")
    # no columns: Druid's names column_1..; an empty group is null, an unmatched optional one too
    assert rows == [{"column_1": "h1", "column_2": "2026-01-01", "column_3": "GET", "column_4": ["a", "b"]},
                    {"column_1": "h2", "column_2": "x", "column_3": None, "column_4": None},
                    {"column_1": "h3", "column_2": "y", "column_3": "POST", "column_4": "only"}]
    with pytest.raises(ValueError, match=r"line 'h4 x' does not match the pattern"):
        decoder.rows(b"h1 [t] GET\nh4 x")  # not a whole-line match: the record is unparseable
    with pytest.raises(ValueError, match=r"line '' does not match"):
        decoder.rows(b"h1 [t] GET\n\nh2 [t] GET")  # an empty line is a line, as Druid's line iterator reads it
    with pytest.raises(ValueError, match=r"does not match"):
        decoder.rows(b"h1 [t] GET\rh2 [t] GET")  # CR alone ends no line: one line, which does not match
    # named columns: groups past them are left out, as Druid's zipMapPartial does
    named = decoder_for(regex_format(pattern=r"(\w+)-(\w+)-(\w+)", columns=["a", "b"]))
    assert named.rows(b"x-y-z") == [{"a": "x", "b": "y"}]
    assert named.rows(b"") == []


def test_regex_as_the_value_format_through_the_row_parser():
    raw = {"type": "kafka", "spec": {
        "dataSchema": {"dataSource": "logs", "timestampSpec": {"column": "ts", "format": "iso"},
                       "dimensionsSpec": {"dimensions": ["level"]}},
        "ioConfig": {"topic": "t", "consumerProperties": BOOTSTRAP, "inputFormat": {
            "type": "regex", "pattern": r"(\S+) (\w+)", "columns": ["ts", "level"]}}}}
    parser = RowParser(parse_spec(raw), datetime(2026, 1, 1, tzinfo=timezone.utc))
    out = parser.parse(RecordChunk("t", 0, [0, 1], [b"2026-01-01T00:00:01Z INFO", b"2026-01-01T00:00:02Z WARN"]))
    assert out.table.column("level").to_pylist() == ["INFO", "WARN"] and out.stats.processed == 2


def test_regex_as_a_kafka_value_and_key_format_through_the_row_parser():
    raw = {"type": "kafka", "spec": {
        "dataSchema": {"dataSource": "logs", "timestampSpec": {"column": "ts", "format": "iso"},
                       "dimensionsSpec": {"dimensions": ["level", "msg", "kafka.key"]}},
        "ioConfig": {"topic": "t", "consumerProperties": BOOTSTRAP, "inputFormat": {
            "type": "kafka", "valueFormat": {"type": "regex", "pattern": r"(\S+) (\w+) (.*)",
                                             "columns": ["ts", "level", "msg"]},
            "keyFormat": {"type": "regex", "pattern": r"user-(\d+)", "columns": ["id"]}}},
        "tuningConfig": {"type": "kafka", "maxSavedParseExceptions": 5}}}
    parser = RowParser(parse_spec(raw), datetime(2026, 1, 1, tzinfo=timezone.utc))
    values = [b"2026-01-01T00:00:01Z INFO started up", b"garbage", b"2026-01-01T00:00:02Z WARN disk 91%"]
    out = parser.parse(RecordChunk("t", 0, [0, 1, 2], values, keys=[b"user-7", b"user-8", None]))
    assert (out.stats.processed, out.stats.unparseable) == (2, 1)
    assert "does not match the pattern" in out.exceptions[0].message and out.exceptions[0].offset == 1
    rows = out.table.to_pylist()
    assert [(r["level"], r["msg"], r["kafka.key"]) for r in rows] == [("INFO", "started up", "7"),
                                                                      ("WARN", "disk 91%", None)]


# ------------------------------------------------------------------------------------------ ingest convert


def test_ingest_convert_prints_the_whole_spec_in_today_s_form_as_the_file_s_kind(tmp_path, capsys):
    raw = json.loads(druid("wikipedia-kafka-supervisor.json"))
    as_json = tmp_path / "wikipedia.json"
    as_json.write_text(json.dumps(raw))
    assert main(["convert", str(as_json)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == convert_parser(raw).raw and "parser" not in printed["dataSchema"]
    assert list(printed["dataSchema"])[:3] == ["dataSource", "timestampSpec", "dimensionsSpec"]  # where parser was
    assert printed["ioConfig"]["inputFormat"] == {"type": "json"}

    as_yaml = tmp_path / "wikipedia.yaml"
    as_yaml.write_text(yaml.safe_dump(raw))
    assert main(["convert", str(as_yaml)]) == 0
    out = capsys.readouterr().out
    assert not out.lstrip().startswith("{") and yaml.safe_load(out) == printed
    again = tmp_path / "again.yaml"
    again.write_text(out)
    converted = parse_spec(yaml.safe_load(again.read_text()))
    assert parser_warnings(converted) == [] and converted.fingerprint() == parse_spec(raw).fingerprint()

    assert main(["convert", str(again)]) == 0  # already today's form: printed as it is, said so
    captured = capsys.readouterr()
    assert yaml.safe_load(captured.out) == printed and "already in today's form" in captured.err


def test_ingest_convert_refuses_a_spec_that_does_not_load(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(with_parser(string_parser(format="javascript"))))
    assert main(["convert", str(bad)]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and "JavaScript parsing is not supported" in captured.err
