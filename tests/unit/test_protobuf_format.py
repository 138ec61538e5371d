"""The `protobuf` input format in-process: Druid's documented spec loads as-is, messages written by protoc's
generated classes become the rows Druid makes of them (equal to the same events as JSON), the spec's and the
descriptor's mistakes are named where they are, and hostile bytes only ever fail their own record."""

from __future__ import annotations

import base64
import concurrent.futures
import json
import os
import random
from datetime import datetime, timezone

import pytest
from google.protobuf import descriptor_pb2, json_format
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from protobuf_fixtures import (
    ALL_TYPES_PROTO,
    METRICS_PROTO,
    REQUIRED_PROTO,
    WIKI_PROTO,
    compile_proto,
    metrics_events,
    varint,
)

from ingest_core.core.errors import SpecError
from ingest_core.core.spec import load_spec, parse_spec
from ingest_core.executor.formats.decoders import decoder_for
from ingest_core.executor.formats.protobuf import (
    Converter,
    MessageReader,
    RegistryDecoder,
    _RegistrySchema,
)
from ingest_core.executor.formats.protobuf_descriptors import (
    descriptor_problems,
    inline_descriptors,
    pool_of,
    registry_file,
)
from ingest_core.executor.formats.schema_registry import (
    RegisteredSchema,
    RegistryConfig,
    RegistryUnavailableError,
    client_for,
)
from ingest_core.executor.row_parser import RecordChunk, RowParser
from ingest_core.kafka.properties import load_checked_spec
from ingest_core.supervisor.staging import stage_spec

CREATED = datetime(2026, 1, 1, tzinfo=timezone.utc)
SETTINGS = settings(max_examples=80, derandomize=True, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def protos(tmp_path_factory):
    folder = tmp_path_factory.mktemp("protos")
    return {name: compile_proto(folder, name, text) for name, text in [
        ("metrics", METRICS_PROTO), ("wiki", WIKI_PROTO), ("kinds", ALL_TYPES_PROTO), ("req", REQUIRED_PROTO)]}


def druid_example(descriptor: str) -> dict:
    """docs/development/extensions-core/protobuf.md's supervisor spec, as published but for the descriptor."""
    return json.loads("""{
"type": "kafka",
"spec": {
    "dataSchema": {
        "dataSource": "metrics-protobuf",
        "timestampSpec": {"column": "timestamp", "format": "auto"},
        "dimensionsSpec": {
            "dimensions": ["unit", "http_method", "http_code", "page", "metricType", "server"],
            "dimensionExclusions": ["timestamp", "value"]
        },
        "metricsSpec": [
            {"name": "count", "type": "count"},
            {"name": "value_sum", "fieldName": "value", "type": "doubleSum"},
            {"name": "value_min", "fieldName": "value", "type": "doubleMin"},
            {"name": "value_max", "fieldName": "value", "type": "doubleMax"}
        ],
        "granularitySpec": {"type": "uniform", "segmentGranularity": "HOUR", "queryGranularity": "NONE"}
    },
    "tuningConfig": {"type": "kafka", "maxRowsPerSegment": 5000000},
    "ioConfig": {
        "topic": "metrics_pb",
        "consumerProperties": {"bootstrap.servers": "localhost:9092"},
        "inputFormat": {
            "type": "protobuf",
            "protoBytesDecoder": {"type": "file", "descriptor": "DESCRIPTOR", "protoMessageType": "Metrics"},
            "flattenSpec": {"useFieldDiscovery": true},
            "binaryAsString": false
        },
        "taskCount": 1, "replicas": 1, "taskDuration": "PT1H", "type": "kafka"
    }
}
}""".replace("DESCRIPTOR", descriptor))


def parse_all(spec, values: list[bytes], **kw):
    chunk = RecordChunk("t", 0, range(len(values)), values, **kw)
    return RowParser(spec, CREATED, max_saved_exceptions=1000).parse(chunk)


def test_druids_documented_spec_loads_as_is_and_its_rows_equal_the_same_events_as_json(protos, tmp_path):
    desc, metrics_pb2 = protos["metrics"]
    path = tmp_path / "metrics.json"
    path.write_text(json.dumps(druid_example(desc.as_uri())))  # file:///...metrics.desc, as Druid's example
    spec = load_checked_spec(path)
    assert spec.io_config.input_format.proto_bytes_decoder.proto_message_type == "Metrics"
    assert spec.warnings == ()

    # written the way Druid's pb_publisher.py writes them: the generated class, setattr per JSON field
    events = metrics_events(40, int(CREATED.timestamp() * 1000))
    messages = []
    for e in events:
        m = metrics_pb2.Metrics()
        for k, v in e.items():
            setattr(m, k, v)
        messages.append(m)
    got = parse_all(spec, [m.SerializeToString() for m in messages])
    # the same events as JSON, named as protobuf's JSON mapping (and Druid) names the fields
    as_json = dict(druid_example("unused"))
    as_json["spec"]["ioConfig"]["inputFormat"] = {"type": "json"}
    want = parse_all(parse_spec(as_json, "json"), [json_format.MessageToJson(m).encode() for m in messages])
    assert got.stats.processed == want.stats.processed == 40 and got.stats.parse_exceptions == 0
    assert got.table.equals(want.table)
    rows = got.table.to_pylist()
    assert {r["unit"] for r in rows} == {"milliseconds"} and sorted({r["__in_double_value"] for r in rows})[:2] == [10, 11]
    # as in Druid: the field `http_method` is named `httpMethod` (its JSON name), so the documented example's
    # `http_method` and `http_code` dimensions read null there and here
    assert {r["http_method"] for r in rows} == {None} and {r["http_code"] for r in rows} == {None}


def test_each_kind_of_field_reads_as_druids_converter_makes_it(protos):
    desc, kinds = protos["kinds"]
    e = kinds.Event(ts="2026-01-01T00:00:00Z", snake_name="s", i32=-5, i64=2 ** 40, u64=2 ** 64 - 1, s32=-3,
                    f32=0.1, f64=0.25, flag=True, blob=b"\x00\xff", kind=kinds.Event.NEW, tags=["a", "b"],
                    counts={"x": 1}, by_number={3: "c"}, zero=0, right=4, kinds=[1, 2])
    e.user.name = "u"
    e.editors.add(name="v", edits=3)
    e.at.FromJsonString("2026-01-01T00:00:01.5Z")
    e.took.FromJsonString("-1.000000500s")
    e.maybe.value = 7
    e.note.value = ""  # a wrapper holds its default: present, unlike a plain field
    e.extra.update({"k": [1, "two", None, {"z": True}]})
    e.mask.paths.extend(["user.name", "snake_name"])
    fmt = {"type": "protobuf", "protoBytesDecoder": {"type": "file", "descriptor": str(desc),
                                                     "protoMessageType": "kinds.Event"}}
    spec = spec_with(fmt)
    [row] = decoder_for(spec.io_config.input_format).rows(e.SerializeToString())
    assert row == {
        "ts": "2026-01-01T00:00:00Z", "snakeName": "s", "i32": -5, "i64": 2 ** 40, "u64": 2 ** 64 - 1, "s32": -3,
        "f32": 0.1, "f64": 0.25, "flag": True, "blob": "AP8=", "kind": "NEW", "user": {"name": "u"},
        "tags": ["a", "b"], "editors": [{"name": "v", "edits": 3}], "counts": {"x": 1}, "byNumber": {"3": "c"},
        "at": "2026-01-01T00:00:01.500Z", "took": "-1.000000500s", "maybe": 7, "note": "",
        "extra": {"k": [1.0, "two", None, {"z": True}]}, "mask": "user.name,snakeName", "zero": 0, "right": 4,
        "kinds": ["EDIT", "NEW"]}
    # defaults are absent, as Druid's getAllFields() gives them (proto3 without `optional`)
    [empty_ish] = decoder_for(spec.io_config.input_format).rows(kinds.Event(ts="t", i32=0, tags=[]).SerializeToString())
    assert empty_ish == {"ts": "t"}
    # an enum number the schema does not know (a newer producer) reads as the number
    [newer] = decoder_for(spec.io_config.input_format).rows(kinds.Event(ts="t", kind=9).SerializeToString())
    assert newer["kind"] == 9


def spec_with(input_format: dict, dims: list | None = None, source: str = "<test>"):
    return parse_spec({"type": "kafka", "spec": {
        "dataSchema": {"dataSource": "ds", "timestampSpec": {"column": "time", "format": "iso"},
                       "dimensionsSpec": {"dimensions": dims or ["channel", "page"]},
                       "granularitySpec": {"segmentGranularity": "HOUR", "queryGranularity": "NONE",
                                           "rollup": False}},
        "ioConfig": {"topic": "t", "consumerProperties": {"bootstrap.servers": "localhost:9092"},
                     "inputFormat": input_format},
        "tuningConfig": {"type": "kafka"}}}, source)


def test_flatten_spec_paths_over_nested_messages_and_first_message_by_default(protos):
    desc, kinds = protos["kinds"]
    e = kinds.Event(ts="t", i32=3)
    e.user.name = "u"
    e.editors.add(name="first")
    spec = spec_with({"type": "protobuf", "protoBytesDecoder": {"type": "file", "descriptor": str(desc)},
                      "flattenSpec": {"useFieldDiscovery": False, "fields": [
                          {"type": "path", "name": "who", "expr": "$.user.name"},
                          {"type": "path", "name": "editor0", "expr": "$.editors[0].name"},
                          {"type": "root", "name": "i32"}]}})
    assert decoder_for(spec.io_config.input_format).rows(e.SerializeToString()) == [
        {"who": "u", "editor0": "first", "i32": 3}]


def test_required_fields_of_proto2_are_enforced_as_by_javas_parser(protos):
    desc, req = protos["req"]
    decoder = decoder_for(spec_with({"type": "protobuf", "protoBytesDecoder": {
        "type": "file", "descriptor": str(desc), "protoMessageType": "Reading"}}).io_config.input_format)
    assert decoder.rows(req.Reading(ts="t", level=0).SerializeToString()) == [{"ts": "t", "level": 0}]
    with pytest.raises(ValueError, match=r"req.Reading lacks required fields: level"):
        decoder.rows(req.Reading(ts="t").SerializePartialToString())


def test_descriptor_mistakes_are_named_at_their_field_with_what_to_do(protos, tmp_path):
    desc, _ = protos["metrics"]

    def problems(descriptor: str, message_type: str | None = "Metrics") -> list[str]:
        raw = druid_example(descriptor)
        dec = raw["spec"]["ioConfig"]["inputFormat"]["protoBytesDecoder"]
        if message_type is None:
            dec.pop("protoMessageType")
        else:
            dec["protoMessageType"] = message_type
        path = tmp_path / "spec.json"
        path.write_text(json.dumps(raw))
        try:
            load_checked_spec(path)
            return []
        except SpecError as exc:
            return [str(p) for p in exc.problems]

    field = "spec.ioConfig.inputFormat.protoBytesDecoder"
    assert problems(str(desc)) == problems(desc.as_uri()) == problems(str(desc), None) == []
    missing = problems("/nowhere/metrics.desc")
    assert missing == [(f"{field}.descriptor: descriptor '/nowhere/metrics.desc' cannot be read (No such file or "
                        "directory): check the path (relative paths start at the spec file's folder) and that this "
                        "machine can read it")]
    proto_text = tmp_path / "metrics.proto"
    proto_text.write_text(METRICS_PROTO)
    [not_a_set] = problems(str(proto_text))
    assert not_a_set.startswith(f"{field}.descriptor: descriptor '{proto_text}' is not a descriptor set")
    assert "protoc -o metrics.desc metrics.proto" in not_a_set
    [typo] = problems(str(desc), "Metric")
    assert typo == (f"{field}.protoMessageType: protoMessageType 'Metric' is not in descriptor '{desc}' (did you "
                    "mean 'Metrics'?); it defines: Metrics")
    # a relative path starts at the spec file's folder, wherever `ingest validate` runs
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "m.desc").write_bytes(desc.read_bytes())
    assert problems("schemas/m.desc") == []
    # a FIFO would block the DAG file's parse (and every datasource in it) until its writer came: named instead,
    # within a deadline; so is a file far larger than any descriptor set
    os.mkfifo(tmp_path / "pipe.desc")
    pool = concurrent.futures.ThreadPoolExecutor(1)
    read = pool.submit(problems, str(tmp_path / "pipe.desc"))
    try:
        [fifo] = read.result(timeout=10)
    finally:
        if not read.done():  # blocked in open(): a writer that closes at once ends its wait
            os.close(os.open(tmp_path / "pipe.desc", os.O_WRONLY | os.O_NONBLOCK))
        pool.shutdown()
    assert fifo == (f"{field}.descriptor: descriptor '{tmp_path / 'pipe.desc'}' is not a regular file: give the path "
                    "of a descriptor set file (protoc --descriptor_set_out)")
    with open(tmp_path / "huge.desc", "wb") as huge:
        huge.truncate(50 << 20)  # sparse: 50 MB without writing them
    [large] = problems(str(tmp_path / "huge.desc"))
    assert large.endswith("is 52,428,800 bytes, over the 16,777,216 a descriptor set may be: is it the right file?")


def test_the_descriptor_is_read_once_where_the_spec_is_and_shipped_inline(protos, tmp_path):
    desc, metrics_pb2 = protos["metrics"]
    (tmp_path / "m.desc").write_bytes(desc.read_bytes())
    path = tmp_path / "spec.yaml"
    path.write_text(json.dumps(druid_example("m.desc")))
    spec = load_spec(path)
    staged_at = stage_spec(spec, (tmp_path / "run").as_uri())  # what the plan task writes for the run's jobs
    staged = json.loads((tmp_path / "run" / "spec.json").read_text())
    assert staged_at == ((tmp_path / "run" / "spec.json").as_uri(), None)
    assert staged == inline_descriptors(spec).to_raw()  # the job's driver inlines the same way
    dec = staged["spec"]["ioConfig"]["inputFormat"]["protoBytesDecoder"]
    assert dec == {"type": "inline", "descriptorString": base64.b64encode(desc.read_bytes()).decode(),
                   "protoMessageType": "Metrics"}
    (tmp_path / "m.desc").unlink()  # the executors never see the file
    on_executor = parse_spec(staged, "<job spec>")
    assert descriptor_problems(on_executor) == []
    msg = metrics_pb2.Metrics(unit="ms", value=5, timestamp="2026-01-01T00:00:00Z")
    assert decoder_for(on_executor.io_config.input_format).rows(msg.SerializeToString()) == [
        {"unit": "ms", "value": 5, "timestamp": "2026-01-01T00:00:00Z"}]


def test_the_kafka_wrapper_reads_protobuf_values_and_keys(protos):
    desc, wiki = protos["wiki"]
    proto = {"type": "protobuf", "protoBytesDecoder": {"type": "file", "descriptor": str(desc),
                                                       "protoMessageType": "Edit"}}
    spec = spec_with({"type": "kafka", "valueFormat": proto,
                      "keyFormat": {**proto, "protoBytesDecoder": {**proto["protoBytesDecoder"],
                                                                   "protoMessageType": "wiki.Other"}}},
                     dims=["channel", "kafka.key", "kafka.topic"])
    edit = wiki.Edit(time="2026-01-01T00:00:00Z", channel="#en", isRobot=0)
    got = parse_all(spec, [edit.SerializeToString()], keys=[wiki.Other(x="k1").SerializeToString()])
    assert got.table.select(["channel", "kafka.key", "kafka.topic"]).to_pylist() == [
        {"channel": "#en", "kafka.key": "k1", "kafka.topic": "t"}]


# ------------------------------------------------------------------------------------------ bad data


def wiki_spec(desc) -> object:
    return spec_with({"type": "protobuf", "protoBytesDecoder": {"type": "file", "descriptor": str(desc),
                                                                "protoMessageType": "wiki.Edit"}},
                     dims=["channel", "page", {"type": "long", "name": "isRobot"}])


def test_truncated_and_foreign_bytes_fail_only_their_record(protos):
    desc, wiki = protos["wiki"]
    good = wiki.Edit(time="2026-01-01T00:00:00Z", channel="#en", page="P", isRobot=1).SerializeToString()
    got = parse_all(wiki_spec(desc), [good, good[:-3], b'{"time": "2026-01-01T00:00:00Z"}', good])
    assert got.stats.processed == 2 and got.stats.unparseable == 2
    assert [e.offset for e in got.exceptions] == [1, 2]
    assert all("bytes do not parse as Protobuf message wiki.Edit" in e.message for e in got.exceptions)


@st.composite
def wire_fields(draw, depth: int = 0) -> bytes:
    """Well-formed wire format with values of any size for any field number: type confusion, out-of-range
    Timestamps and Durations, unknown enum numbers, nested messages."""
    out = b""
    for _ in range(draw(st.integers(1, 5))):
        number = draw(st.integers(1, 27))
        wire = draw(st.sampled_from([0, 0, 1, 2, 2, 5]))
        out += varint(number << 3 | wire)
        if wire == 0:
            out += varint(draw(st.one_of(st.integers(0, 2 ** 64 - 1), st.sampled_from(
                [0, 1, 2 ** 31, 2 ** 63, 2 ** 64 - 1, 253402300800, 315576000001, 10 ** 9]))))
        elif wire == 1:
            out += draw(st.binary(min_size=8, max_size=8))
        elif wire == 5:
            out += draw(st.binary(min_size=4, max_size=4))
        else:
            inner = draw(wire_fields(depth + 1)) if depth < 2 and draw(st.booleans()) else draw(st.binary(max_size=12))
            out += varint(len(inner)) + inner
    return out


@st.composite
def hostile(draw) -> bytes:
    base = draw(st.sampled_from(SAMPLES))
    kind = draw(st.sampled_from(["random", "truncate", "flip", "splice", "fields", "fields", "time"]))
    if kind == "fields":
        return draw(wire_fields())
    if kind == "time":  # a Timestamp (17) or Duration (18) of any seconds and nanos
        extremes = st.sampled_from([0, 1, 999_999_999, 10 ** 9, 2 ** 31, 2 ** 63, 2 ** 64 - 1, 253402300800,
                                    -62135596801, 315576000001, -315576000001])
        inner = b"\x08" + varint(draw(extremes)) + b"\x10" + varint(draw(extremes))
        return base + varint(draw(st.sampled_from([17, 18])) << 3 | 2) + varint(len(inner)) + inner
    if kind == "random":
        return draw(st.binary(min_size=1, max_size=60))
    if kind == "truncate":
        return base[:draw(st.integers(1, max(1, len(base) - 1)))]
    if kind == "flip":
        data = bytearray(base)
        for _ in range(draw(st.integers(1, 4))):
            data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
        return bytes(data)
    return base + draw(st.binary(min_size=1, max_size=20))


SAMPLES: list[bytes] = []  # valid messages to damage, written by the `samples` fixture


@pytest.fixture(scope="module")
def samples(protos):
    _, kinds = protos["kinds"]
    rnd = random.Random(5)
    for i in range(5):
        e = kinds.Event(ts="2026-01-01T00:00:00Z", i64=rnd.randint(-2 ** 63, 2 ** 63 - 1), f32=rnd.random(),
                        blob=rnd.randbytes(5), kind=i % 3, tags=["a"] * i, counts={"k": i})
        e.at.FromSeconds(rnd.randint(0, 2 ** 33))
        e.took.FromSeconds(rnd.randint(-10 ** 6, 10 ** 6))
        e.extra.update({"n": i, "l": [i, "x"]})
        e.mask.paths.append("a_b")
        SAMPLES.append(e.SerializeToString())
    return SAMPLES


@SETTINGS
@given(records=st.lists(hostile(), min_size=1, max_size=8))
def test_hostile_bytes_never_raise_past_their_record(protos, samples, records):
    desc, _ = protos["kinds"]
    decoder = decoder_for(spec_with({"type": "protobuf", "protoBytesDecoder": {
        "type": "file", "descriptor": str(desc)}}).io_config.input_format)
    for data in records:
        try:
            rows = decoder.rows(data)
        except ValueError as exc:
            assert str(exc)  # says why
        else:
            assert len(rows) == 1 and isinstance(rows[0], dict)
            json.dumps(rows[0])  # plain values only
    spec = spec_with({"type": "protobuf", "protoBytesDecoder": {"type": "file", "descriptor": str(desc)}},
                     dims=["snakeName", {"type": "long", "name": "i64"}, "blob", "tags"])
    spec = parse_spec({**spec.to_raw()}, "<x>")
    got = parse_all(spec, records)
    assert got.stats.processed + got.stats.unparseable + got.stats.thrown_away == len(records)


def test_the_wire_format_is_checked_before_the_registry_is_asked():
    # port 9 (discard) on localhost: nothing answers, so only a record that reaches the lookup says so
    url = "http://127.0.0.1:9"
    client_for(RegistryConfig.of(url=url)).retry_delays = (0.01,)  # this test's registry: no long backoff
    decoder = decoder_for(spec_with({"type": "protobuf", "protoBytesDecoder": {"url": url}}).io_config.input_format)
    with pytest.raises(ValueError, match="does not start with Confluent's magic byte 0 .found 1."):
        decoder.rows(b"\x01\x00\x00\x00\x07\x00rest")
    with pytest.raises(ValueError, match="too short for Confluent's wire format"):
        decoder.rows(b"\x00\x00\x01")
    with pytest.raises(ValueError, match="ends inside the Protobuf message indexes"):
        decoder.rows(b"\x00\x00\x00\x00\x07")
    with pytest.raises(ValueError, match=f"schema registry {url} did not answer .*dead letters keep them"):
        decoder.rows(b"\x00\x00\x00\x00\x07\x00\x0a\x01x")
    # through the row parser: counted and kept per record, never a failed task
    spec = spec_with({"type": "protobuf", "protoBytesDecoder": {"url": url}})
    got = parse_all(spec, [b"\x05junk", b"\x00\x00\x00\x00\x07\x00\x0a\x01x"])
    assert got.stats.unparseable == 2 and got.stats.processed == 0
    assert "magic byte" in got.exceptions[0].message and "did not answer" in got.exceptions[1].message


NESTED_PROTO = """syntax = "proto3";
package nest;
import "google/protobuf/timestamp.proto";
message First { string a = 1; }
message Outer {
  message Inner { message Deepest { string d = 1; google.protobuf.Timestamp at = 2; } string i = 1; }
  string o = 1;
}
"""


def test_a_registered_schema_as_serialized_descriptor_or_proto_text_and_its_message_indexes(tmp_path):
    _, nest = compile_proto(tmp_path, "nest", NESTED_PROTO)
    compiled = descriptor_pb2.FileDescriptorProto.FromString(nest.DESCRIPTOR.serialized_pb)
    def answer(text: str, serialized: str | None = None):
        """registry_file's arguments for a registry whose plain answer is `text`, and `?format=serialized`'s
        `serialized` (None: it fails, as Apicurio 3's does for a schema registered as base64)."""
        def ask_serialized():
            if serialized is None:
                raise RegistryUnavailableError("http://registry", "HTTP 500")
            return RegisteredSchema(1, "PROTOBUF", serialized)
        return RegisteredSchema(1, "PROTOBUF", text), "schema id 1", ask_serialized, dict

    as_base64 = base64.b64encode(compiled.SerializeToString()).decode()
    serialized = registry_file(*answer(as_base64))  # confluent-kafka registers the descriptor itself, base64
    assert registry_file(*answer(NESTED_PROTO, as_base64)) == serialized  # text, and Confluent's serialized form
    raw_as_text = compiled.SerializeToString().decode("latin-1")  # Apicurio 3: the bytes as text, not base64
    from_text = registry_file(*answer(NESTED_PROTO, raw_as_text))  # so protoc compiles the text
    assert [m.name for m in serialized.message_type] == [m.name for m in from_text.message_type] == ["First", "Outer"]
    from_text.name = "nest.proto"
    pool = pool_of([from_text])  # google/protobuf/timestamp.proto from the protobuf package itself
    schema = _RegistrySchema(pool, pool.FindFileByName("nest.proto"), None)
    assert RegistryDecoder._message(schema, [1, 0, 0], 1).full_name == "nest.Outer.Inner.Deepest"
    assert RegistryDecoder._message(schema, [0], 1).full_name == "nest.First"
    with pytest.raises(ValueError, match=r"message index \[1, 1\] does not exist in schema id 1 \(level 1 has 1 "):
        RegistryDecoder._message(schema, [1, 1], 1)
    deepest = nest.Outer.Inner.Deepest(d="x")
    deepest.at.FromSeconds(0)
    reader = MessageReader(RegistryDecoder._message(schema, [1, 0, 0], 1), Converter(pool))
    assert reader.read(deepest.SerializeToString()) == {"d": "x", "at": "1970-01-01T00:00:00Z"}
    with pytest.raises(ValueError, match="schema id 2 is not valid .proto text"):
        registry_file(RegisteredSchema(2, "PROTOBUF", "message {"), "schema id 2", answer("x")[2], dict)
    # text that imports another registered schema: protoc gets the import's text too (the references')
    dep = 'syntax = "proto3";\npackage dep;\nmessage D { string d = 1; }\n'
    main = 'syntax = "proto3";\nimport "dep/d.proto";\nmessage M { dep.D d = 1; }\n'
    fdp = registry_file(RegisteredSchema(3, "PROTOBUF", main), "schema id 3", answer("x")[2],
                        lambda: {"dep/d.proto": dep})
    assert list(fdp.dependency) == ["dep/d.proto"] and fdp.message_type[0].field[0].type_name == ".dep.D"
    with pytest.raises(ValueError, match="imports '../x.proto', a path outside"):
        registry_file(RegisteredSchema(4, "PROTOBUF", main), "schema id 4", answer("x")[2],
                      lambda: {"../x.proto": dep})


def test_registry_credentials_are_redacted_where_stored_and_restored_for_the_job():
    # the same settings as avro_stream's schema_registry decoder: a password never stored or shown
    fmt = {"type": "protobuf", "protoBytesDecoder": {  # no type: Druid's default, schema_registry
        "url": "http://registry:8081", "config": {"basic.auth.credentials.source": "USER_INFO",
                                                  "basic.auth.user.info": "fred:letmein"},
        "headers": {"Authorization": "Bearer abc"}}}
    spec = spec_with(fmt)
    shown = json.dumps(spec.to_raw())
    assert "fred:letmein" not in shown and "Bearer abc" not in shown and spec.has_literal_secrets
    staged = parse_spec(spec.to_raw())
    restored = staged.with_secrets_from(spec).io_config.input_format
    assert restored.proto_bytes_decoder.registry.effective_config["basic.auth.user.info"] == "fred:letmein"
    assert "Bearer abc" in json.dumps(restored._to_raw(redact=False))
    with pytest.raises(SpecError, match="not an http"):
        spec_with({"type": "protobuf", "protoBytesDecoder": {"type": "schema_registry", "url": "registry:8081"}})
