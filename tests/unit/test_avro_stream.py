"""`avro_stream` without services: Druid's documented specs, their validation, the values a record becomes (the
same row as the event sent as JSON), every bad record the decoder's own error, and the columnar path equal to
the per-record one. Records are written with fastavro; hostile bytes are generated (Hypothesis)."""

from __future__ import annotations

import functools
import io
import json
import struct
from datetime import datetime, timezone

import fastavro
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingest_core.core import secrets
from ingest_core.core.errors import SpecError
from ingest_core.core.spec import parse_spec
from ingest_core.executor.formats.decoders import decoder_for
from ingest_core.executor.formats.schema_registry import RegistryConfig, SchemaRegistryClient
from ingest_core.executor.row_parser import RecordChunk, RowParser

CREATED = datetime(2026, 1, 1, tzinfo=timezone.utc)
SETTINGS = settings(max_examples=80, derandomize=True, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# Druid's documented examples (docs/ingestion/data-formats.md, "Avro Stream"), as written there
USER = {"namespace": "org.apache.druid.data", "name": "User", "type": "record",
        "fields": [{"name": "FullName", "type": "string"}, {"name": "Country", "type": "string"}]}
USER_IDENTITY = {"namespace": "org.apache.druid.otherdata", "name": "UserIdentity", "type": "record",
                 "fields": [{"name": "Name", "type": "string"}, {"name": "Location", "type": "string"}]}
DRUID_INLINE = {"type": "avro_stream", "avroBytesDecoder": {"type": "schema_inline", "schema": USER},
                "flattenSpec": {"useFieldDiscovery": True, "fields": [
                    {"type": "path", "name": "someRecord_subInt", "expr": "$.someRecord.subInt"}]},
                "binaryAsString": False}
DRUID_MULTIPLE = {"type": "avro_stream", "avroBytesDecoder": {"type": "multiple_schemas_inline",
                                                              "schemas": {"1": USER, "2": USER_IDENTITY}}}
DRUID_REGISTRY = {"type": "avro_stream", "avroBytesDecoder": {"type": "schema_registry", "url": "http://sr:8081"}}
DRUID_REGISTRIES = {"type": "avro_stream", "avroBytesDecoder": {
    "type": "schema_registry", "urls": ["http://sr1:8081", "http://sr2:8081"],
    "config": {"basic.auth.credentials.source": "USER_INFO", "basic.auth.user.info": "fred:letmein",
               "schema.registry.ssl.truststore.location": "/some/secrets/kafka.client.truststore.jks",
               "schema.registry.ssl.truststore.password": "<password>"},
    "headers": {"traceID": "b29c5de2-0db4-490b-b421", "timeStamp": "1577191871865",
                "druid.dynamic.config.provider": {"type": "mapString", "config": {
                    "registry.header.prop.1": "value.1", "registry.header.prop.2": "value.2"}}}}}

EVENT_SCHEMA = {"type": "record", "name": "Event", "namespace": "test", "fields": [
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "page", "type": "string"},
    {"name": "user", "type": ["null", "string"], "default": None},
    {"name": "added", "type": "long"},
    {"name": "ratio", "type": "double"},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["EDIT", "NEW"]}},
    {"name": "count", "type": ["null", "int"]},
    {"name": "geo", "type": {"type": "record", "name": "Geo", "fields": [{"name": "city", "type": "string"}]}}]}
EVENTS = [{"ts": 1767225600000 + i * 1000, "page": f"Page é{i % 3}", "user": None if i % 4 == 0 else f"u{i}",
           "added": (i * 7919) % 1000 - 500, "ratio": i / 8, "kind": "NEW" if i % 5 == 0 else "EDIT",
           "count": None if i % 3 == 0 else i, "geo": {"city": f"c{i % 2}"}} for i in range(40)]


def spec_with(fmt: dict, dimensions=("page", "user", "kind", "city"), **data_schema) -> object:
    return parse_spec({"type": "kafka", "spec": {
        "dataSchema": {"dataSource": "ds", "timestampSpec": {"column": "ts", "format": "millis"},
                       "dimensionsSpec": {"dimensions": list(dimensions)},
                       "metricsSpec": [{"type": "count", "name": "cnt"},
                                       {"type": "longSum", "name": "added", "fieldName": "added"},
                                       {"type": "doubleSum", "name": "ratio", "fieldName": "ratio"},
                                       {"type": "longSum", "name": "count", "fieldName": "count"}],
                       "granularitySpec": {"segmentGranularity": "HOUR", "queryGranularity": "NONE", "rollup": False},
                       **data_schema},
        "ioConfig": {"topic": "t", "inputFormat": fmt, "consumerProperties": {"bootstrap.servers": "localhost:9092"}}}})


def avro_bytes(schema: dict, record: dict) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


def problems(fmt: dict) -> list[tuple[str, str]]:
    with pytest.raises(SpecError) as err:
        spec_with(fmt)
    return [(p.path, p.message) for p in err.value.problems]


# ------------------------------------------------------------------------------------------ the spec


@pytest.mark.parametrize("fmt", [DRUID_INLINE, DRUID_MULTIPLE, DRUID_REGISTRY, DRUID_REGISTRIES,
                                 {"type": "kafka", "valueFormat": DRUID_REGISTRY, "keyFormat": DRUID_MULTIPLE}])
def test_druids_documented_specs_load_as_they_are(fmt):
    spec = spec_with(fmt)
    again = parse_spec(spec.to_raw())  # the stored form loads again, to the same spec
    assert again.to_raw() == spec.to_raw()


def test_each_mistake_is_named_at_its_path_with_what_to_do():
    base = "spec.ioConfig.inputFormat"
    got = problems({"type": "avro_stream", "avroBytesDecoder": {"type": "schema_inline", "schema": {
        "type": "record", "name": "E", "fields": [{"name": "a", "type": "strng"}]}}})
    assert got[0][0] == f"{base}.avroBytesDecoder.schema" and "UnknownType: strng" in got[0][1]
    got = problems({"type": "avro_stream", "avroBytesDecoder": {
        "subjectAndIdConverter": {"type": "avro_1124", "topic": "t"},
        "schemaRepository": {"type": "avro_1124_rest_client", "url": "http://repo"}}})
    assert got[0][0] == f"{base}.avroBytesDecoder.type" and "schema_repo decoder" in got[0][1]
    assert "use schema_registry" in got[0][1]
    got = problems({"type": "avro_stream", "avroBytesDecoder": {"type": "schema_registy", "url": "http://sr"}})
    assert "did you mean 'schema_registry'" in got[0][1]
    got = problems({"type": "avro_stream", "avroBytesDecoder": {"type": "multiple_schemas_inline",
                                                                "schemas": {"one": USER, "2": {"type": "record"}}}})
    assert [p for p, _ in got] == [f"{base}.avroBytesDecoder.schemas.one", f"{base}.avroBytesDecoder.schemas.2"]
    got = problems({"type": "avro_stream", "avroBytesDecoder": {"type": "schema_inline", "schema": {
        "type": "enum", "name": "E", "symbols": ["A"]}}})
    assert got == [(f"{base}.avroBytesDecoder.schema.type", got[0][1])] and "Avro record" in got[0][1]
    got = problems({"type": "avro_stream"})
    assert got[0][0] == f"{base}.avroBytesDecoder" and "needs an avroBytesDecoder" in got[0][1]
    got = problems({"type": "avro_stream", "avroBytesDecoder": {"type": "schema_registry", "url": "sr:8081",
                                                                "capacity": 0}})
    assert [p for p, _ in got] == [f"{base}.avroBytesDecoder.url", f"{base}.avroBytesDecoder.capacity"]
    got = problems({**DRUID_REGISTRY, "extractUnionsByType": True})
    assert got[0][0] == f"{base}.extractUnionsByType"


def test_registry_credentials_are_redacted_where_stored_and_restored_for_the_job():
    assert secrets.is_secret_key("basic.auth.user.info") and secrets.is_secret_key("schema.registry.basic.auth.user.info")
    spec = spec_with(DRUID_REGISTRIES | {"avroBytesDecoder": {
        **DRUID_REGISTRIES["avroBytesDecoder"],
        "headers": {"Authorization": "Bearer abc", "druid.dynamic.config.provider": {
            "type": "mapString", "config": {"X-Api-Token": "t0k3n", "X-Trace": "yes"}}}}})
    shown = json.dumps(spec.to_raw())
    for literal in ("fred:letmein", "Bearer abc", "t0k3n", "<password>"):
        assert literal not in shown
    assert "X-Trace" in shown and '"yes"' in shown and spec.has_literal_secrets
    decoder = spec.to_raw()["spec"]["ioConfig"]["inputFormat"]["avroBytesDecoder"]
    assert decoder["config"]["basic.auth.user.info"] == secrets.REDACTED
    # a spec stored before the key was known to be secret is redacted when shown (history, status, UI)
    old = {"type": "kafka", "spec": {"ioConfig": {"inputFormat": {"type": "kafka", "valueFormat": DRUID_REGISTRIES}}}}
    assert "fred:letmein" not in json.dumps(secrets.redact_spec_json(old))
    # the job's redacted copy gets the literals back from the spec file, and hands them to the executors
    staged = parse_spec(spec.to_raw())
    restored = staged.with_secrets_from(spec)
    assert restored.io_config.input_format.avro_bytes_decoder.effective_config["basic.auth.user.info"] == "fred:letmein"
    unredacted = json.dumps(restored.io_config.input_format._to_raw(redact=False))
    assert "fred:letmein" in unredacted and "t0k3n" in unredacted


# ------------------------------------------------------------------------------------------ values


def test_values_are_druids_and_a_row_equals_the_same_event_sent_as_json():
    fmt = {"type": "avro_stream", "avroBytesDecoder": {"type": "schema_inline", "schema": EVENT_SCHEMA},
           "flattenSpec": {"fields": [{"type": "path", "name": "city", "expr": "$.geo.city"}]}}
    avro_parser = RowParser(spec_with(fmt), CREATED)
    json_parser = RowParser(spec_with({"type": "json", "flattenSpec": fmt["flattenSpec"]}), CREATED)
    values = [avro_bytes(EVENT_SCHEMA, e) for e in EVENTS]
    got = avro_parser.parse(RecordChunk("t", 0, range(len(values)), values))
    want = json_parser.parse(RecordChunk("t", 0, range(len(EVENTS)), [json.dumps(e).encode() for e in EVENTS]))
    assert got.stats.processed == len(EVENTS) and got.stats.parse_exceptions == 0
    assert got.table.equals(want.table)
    decoder = decoder_for(spec_with(fmt).io_config.input_format)
    assert decoder.rows(values[1]) == [{**EVENTS[1], "city": "c1"}]  # millis stay millis, the enum its symbol


def test_logical_types_are_ignored_and_bytes_are_base64_or_utf8_text():
    schema = {"type": "record", "name": "L", "fields": [
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 5, "scale": 2}},
        {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "raw", "type": "bytes"}, {"name": "code", "type": {"type": "fixed", "name": "Code", "size": 2}}]}
    data = avro_bytes({**schema, "fields": [{**f, "type": f["type"] if not isinstance(f["type"], dict) or
                                             f["type"]["type"] == "fixed" else f["type"]["type"]}
                                            for f in schema["fields"]]},
                      {"day": 20454, "price": b"\x30\x39", "id": "6f1c", "raw": b"h\xc3\xa9", "code": b"ok"})
    fmt = {"type": "avro_stream", "avroBytesDecoder": {"type": "schema_inline", "schema": schema}}
    assert decoder_for(spec_with(fmt).io_config.input_format).rows(data) == [
        {"day": 20454, "price": "MDk=", "id": "6f1c", "raw": "aMOp", "code": "b2s="}]
    assert decoder_for(spec_with({**fmt, "binaryAsString": True}).io_config.input_format).rows(data) == [
        {"day": 20454, "price": "09", "id": "6f1c", "raw": "hé", "code": "ok"}]


def test_the_kafka_wrapper_reads_avro_values_and_the_first_field_of_an_avro_key():
    key_schema = {"type": "record", "name": "K", "fields": [{"name": "id", "type": "string"},
                                                            {"name": "n", "type": "int"}]}
    fmt = {"type": "kafka", "valueFormat": {"type": "avro_stream", "avroBytesDecoder": {
        "type": "schema_inline", "schema": EVENT_SCHEMA}}, "keyFormat": {"type": "avro_stream", "avroBytesDecoder": {
            "type": "multiple_schemas_inline", "schemas": {"9": key_schema}}}}
    parser = RowParser(spec_with(fmt, dimensions=("page", "kafka.key")), CREATED)
    key = b"\x01" + struct.pack(">i", 9) + avro_bytes(key_schema, {"id": "k-1", "n": 3})
    chunk = RecordChunk("t", 0, range(2), [avro_bytes(EVENT_SCHEMA, e) for e in EVENTS[:2]], keys=[key, b"\x07\x00\x00\x00\x09"],
                        timestamps=[1, 2])
    got = parser.parse(chunk)
    assert got.table.column("kafka.key").to_pylist() == ["k-1"]
    assert got.stats.unparseable == 1 and "version byte 7" in got.exceptions[0].message


# ------------------------------------------------------------------------------------------ bad records


def inline_versioned() -> object:
    return decoder_for(spec_with({"type": "avro_stream", "avroBytesDecoder": {
        "type": "multiple_schemas_inline", "schemas": {"3": EVENT_SCHEMA}}}).io_config.input_format)


@pytest.mark.parametrize("data,message", [
    (b"\x01" + struct.pack(">i", 4) + b"\x00", "schema id 4 is not in avroBytesDecoder.schemas (ids [3])"),
    (b"\x00" + struct.pack(">i", 3) + b"\x00", "version byte 0, not 1"),
    (b"\x01\x00\x00", "too short for multiple_schemas_inline"),
    (b"\x01" + struct.pack(">i", 3) + avro_bytes(EVENT_SCHEMA, EVENTS[1])[:-3], "truncated"),
    (b"\x01" + struct.pack(">i", 3) + avro_bytes(EVENT_SCHEMA, EVENTS[1]) + b"\x00", "1 bytes are left"),
    (b"\x01" + struct.pack(">i", 3) + b"\x02\x04\xff\xfe", "does not match schema id 3"),
])
def test_each_bad_record_is_a_value_error_that_says_why(data, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        inline_versioned().rows(data)


def test_a_wrong_magic_byte_and_a_registry_that_does_not_answer_are_each_records_error_and_named_in_the_report():
    fmt = {"type": "avro_stream", "avroBytesDecoder": {"type": "schema_registry", "url": "http://127.0.0.1:9"}}
    parser = RowParser(spec_with(fmt), CREATED)
    # the client as the executors build it, with short retries (nothing listens on port 9: refused at once)
    parser.decoder._registry = SchemaRegistryClient(RegistryConfig.of(url="http://127.0.0.1:9"), retry_delays=(0.01,))
    good = avro_bytes(EVENT_SCHEMA, EVENTS[1])
    values = [b"\x00" + struct.pack(">i", 5) + good, b"\x01" + struct.pack(">i", 5) + good,
              b"\x00" + struct.pack(">i", 5) + good]
    got = parser.parse(RecordChunk("t", 2, range(10, 13), values))
    assert got.table.num_rows == 0 and got.stats.unparseable == 3
    messages = [r.message for r in got.rejections]
    assert "schema registry http://127.0.0.1:9 did not answer for schema id 5" in messages[0]
    assert "magic byte 0 (found 1)" in messages[1] and "[01 00 00 00 05" in messages[1]  # shown in hex
    assert [(p.service, p.url, p.records) for p in got.problems] == [("schemaRegistry", "http://127.0.0.1:9", 2)]


# ------------------------------------------------------------------------------------------ generated records

FLAT_SCHEMA = {"type": "record", "name": "F", "fields": [
    {"name": "ts", "type": "long"}, {"name": "s", "type": "string"}, {"name": "o", "type": ["null", "string"]},
    {"name": "l", "type": "long"}, {"name": "i", "type": ["int", "null"]}, {"name": "d", "type": "double"},
    {"name": "f", "type": "float"}, {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B", "C"]}},
    {"name": "flag", "type": "boolean"}, {"name": "blob", "type": "bytes"},
    {"name": "sub", "type": {"type": "record", "name": "S", "fields": [{"name": "x", "type": "int"}]}},
    {"name": "opt", "type": ["null", {"type": "record", "name": "O", "fields": [
        {"name": "y", "type": ["null", "string"]}, {"name": "z", "type": "double"}]}]}]}
flat_records = st.fixed_dictionaries({
    "ts": st.integers(0, 2 ** 45), "s": st.text(max_size=6), "o": st.none() | st.text(max_size=4),
    "l": st.integers(-(2 ** 63), 2 ** 63 - 1), "i": st.none() | st.integers(-(2 ** 31), 2 ** 31 - 1),
    "d": st.floats(allow_nan=False, allow_infinity=False), "f": st.floats(width=32, allow_nan=False, allow_infinity=False),
    "e": st.sampled_from(["A", "B", "C"]), "flag": st.booleans(), "blob": st.binary(max_size=4),
    "sub": st.fixed_dictionaries({"x": st.integers(-(2 ** 31), 2 ** 31 - 1)}),
    "opt": st.none() | st.fixed_dictionaries({"y": st.none() | st.text(max_size=3), "z": st.floats(-1e9, 1e9)})})
FLAT_FORMAT = {"type": "avro_stream", "avroBytesDecoder": {"type": "schema_registry", "url": "http://127.0.0.1:9"}}


@functools.lru_cache(maxsize=None)  # parsers keep no state between chunks
def flat_parsers(dimensions=("s", "o", "e", "x", "y")) -> tuple[RowParser, RowParser]:
    spec = parse_spec({"type": "kafka", "spec": {
        "dataSchema": {"dataSource": "ds", "timestampSpec": {"column": "ts", "format": "millis"},
                       "dimensionsSpec": {"dimensions": list(dimensions)},
                       "metricsSpec": [{"type": "longSum", "name": "l", "fieldName": "l"},
                                       {"type": "doubleSum", "name": "z", "fieldName": "z"},
                                       {"type": "doubleMax", "name": "d2", "fieldName": "d2"},
                                       {"type": "longSum", "name": "gone", "fieldName": "gone"},
                                       {"type": "longSum", "name": "i", "fieldName": "i"},
                                       {"type": "doubleSum", "name": "d", "fieldName": "d"},
                                       {"type": "doubleSum", "name": "f", "fieldName": "f"}],
                       "granularitySpec": {"segmentGranularity": "HOUR", "queryGranularity": "NONE", "rollup": False}},
        "ioConfig": {"topic": "t", "inputFormat": {"type": "avro_stream", "avroBytesDecoder": {
            "type": "multiple_schemas_inline", "schemas": {"1": FLAT_SCHEMA}}, "flattenSpec": {"fields": [
                {"type": "path", "name": "x", "expr": "$.sub.x"}, {"type": "path", "name": "y", "expr": "$.opt.y"},
                {"type": "path", "name": "z", "expr": "$['opt']['z']"}, {"type": "root", "name": "d2", "expr": "d"},
                {"type": "path", "name": "gone", "expr": "$.sub.nothing"}]}},
            "consumerProperties": {"bootstrap.servers": "localhost:9092"}}}})
    columnar, per_record = RowParser(spec, CREATED), RowParser(spec, CREATED)
    per_record._columnar = None
    return columnar, per_record


def framed(record: dict) -> bytes:
    return b"\x01\x00\x00\x00\x01" + avro_bytes(FLAT_SCHEMA, record)


@SETTINGS
@given(st.lists(flat_records, min_size=1, max_size=12))
def test_the_columnar_path_gives_the_per_record_paths_rows(records):
    columnar, per_record = flat_parsers()
    values = [framed(r) for r in records]
    chunk = RecordChunk("t", 0, range(len(values)), values)
    assert columnar.decoder.columns(values, columnar._columnar) is not None  # the columnar path was taken
    a, b = columnar.parse(chunk), per_record.parse(chunk)
    assert a.table.equals(b.table) and a.stats == b.stats and a.stats.processed == len(records)


hostile = st.one_of(
    st.binary(max_size=40),
    st.builds(lambda r, cut: framed(r)[:cut], flat_records, st.integers(0, 60)),
    st.builds(lambda r, at, byte: (lambda v: v[:at] + bytes([byte]) + v[at + 1:])(framed(r)), flat_records,
              st.integers(0, 60), st.integers(0, 255)),
    st.builds(lambda r, tail: framed(r) + tail, flat_records, st.binary(min_size=1, max_size=4)))


@SETTINGS
@given(st.lists(hostile, min_size=1, max_size=8), st.sampled_from([("s", "o", "e", "y"), ("s", "flag", "blob", "sub")]))
def test_hostile_bytes_are_per_record_errors_never_an_exception_and_both_paths_agree(values, dimensions):
    columnar, per_record = flat_parsers(dimensions)
    for v in values:
        try:
            per_record.decoder.rows(v)
        except ValueError:
            pass  # the record's own error; anything else fails the test
    chunk = RecordChunk("t", 0, range(len(values)), values)
    a, b = columnar.parse(chunk), per_record.parse(chunk)
    assert a.table.equals(b.table) and a.stats == b.stats
    s = a.stats
    assert s.processed + s.unparseable + s.processed_with_error + s.thrown_away == len(values)  # empty: thrown away


def test_a_schema_with_an_array_of_items_that_take_no_bytes_is_refused():
    # a 6-byte record could otherwise declare 10^8 nulls (gigabytes in the executor): found by reading fastavro
    schema = {"type": "record", "name": "Z", "fields": [
        {"name": "ok", "type": {"type": "array", "items": "string"}},
        {"name": "empty", "type": {"type": "record", "name": "Empty", "fields": []}},
        {"name": "many", "type": ["null", {"type": "array", "items": "Empty"}]}]}
    got = problems({"type": "avro_stream", "avroBytesDecoder": {"type": "schema_inline", "schema": schema}})
    assert got[0][0] == "spec.ioConfig.inputFormat.avroBytesDecoder.schema" and "'many' is an array" in got[0][1]
    from ingest_core.executor.formats.avro import ReaderSchema

    with pytest.raises(ValueError, match="schema id 4 is refused: its field 'many'"):
        ReaderSchema.of(json.dumps(schema), "schema id 4")  # as a registry's schema arrives
