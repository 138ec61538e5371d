"""Druid's documented Protobuf supervisor spec, as published (topic, broker and descriptor adapted), through the
Spark job against the real broker: messages written by protoc's generated classes (`file`) and by confluent-kafka's
ProtobufSerializer with the tests' schema registry (`schema_registry`) ingest row-for-row as the same events sent
as JSON; every kind of bad record stays a parse exception of its own, never a failed run."""

from __future__ import annotations

import json
import struct

import pytest
from confluent_kafka.schema_registry import (
    Schema,
    SchemaReference,
)
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import json_format
from helpers import T0, avro_serializer, ingest_run, protobuf_serializer, registry_client, rows_of, sqlite_store
from protobuf_fixtures import METRICS_PROTO, compile_proto, metrics_events

from ingest_core.core.spec import InputFormat, ProtoBytesDecoder, parse_spec
from ingest_core.executor.formats.decoders import decoder_for

pytestmark = pytest.mark.kafka

N = 60


def druid_spec(datasource: str, topic: str, bootstrap: str, input_format: dict) -> dict:
    """docs/development/extensions-core/protobuf.md's supervisor spec; useEarliestOffset added (a new topic)."""
    return {"type": "kafka", "spec": {
        "dataSchema": {
            "dataSource": datasource,
            "timestampSpec": {"column": "timestamp", "format": "auto"},
            "dimensionsSpec": {"dimensions": ["unit", "http_method", "http_code", "page", "metricType", "server"],
                               "dimensionExclusions": ["timestamp", "value"]},
            "metricsSpec": [{"name": "count", "type": "count"},
                            {"name": "value_sum", "fieldName": "value", "type": "doubleSum"},
                            {"name": "value_min", "fieldName": "value", "type": "doubleMin"},
                            {"name": "value_max", "fieldName": "value", "type": "doubleMax"}],
            "granularitySpec": {"type": "uniform", "segmentGranularity": "HOUR", "queryGranularity": "NONE"}},
        "tuningConfig": {"type": "kafka", "maxRowsPerSegment": 5000000},
        "ioConfig": {"topic": topic, "consumerProperties": {"bootstrap.servers": bootstrap},
                     "inputFormat": input_format, "taskCount": 1, "replicas": 1, "taskDuration": "PT1H",
                     "type": "kafka", "useEarliestOffset": True}}}


@pytest.fixture(scope="module")
def metrics(tmp_path_factory, broker):
    """The example's events as the generated class writes them, and the same events ingested from JSON
    (named as protobuf's JSON mapping names them, as Druid reads a message): the rows to match."""
    folder = tmp_path_factory.mktemp("metrics-proto")
    desc, metrics_pb2 = compile_proto(folder, "metrics", METRICS_PROTO)
    messages = []
    for e in metrics_events(N, int(T0.timestamp() * 1000)):
        m = metrics_pb2.Metrics()
        for k, v in e.items():
            setattr(m, k, v)
        messages.append(m)
    return desc, metrics_pb2, messages


@pytest.fixture(scope="module")
def json_rows(spark, broker, metrics, tmp_path_factory):
    _, _, messages = metrics
    tmp = tmp_path_factory.mktemp("metrics-json")
    store = sqlite_store(tmp)
    topic = broker.create_topic(partitions=2)
    broker.produce(topic, [json_format.MessageToJson(m).encode() for m in messages[::2]], partition=0)
    broker.produce(topic, [json_format.MessageToJson(m).encode() for m in messages[1::2]], partition=1)
    spec = parse_spec(druid_spec("metrics-json", topic, broker.bootstrap, {"type": "json"}), "<json>")
    ingest_run(spark, store, spec, "r1", tmp.as_uri())
    return _sorted(rows_of(store, "metrics-json"))


def _sorted(rows: list[dict]) -> list[dict]:
    return sorted(rows, key=lambda r: (r["__time"], r["page"], r["server"]))


def test_the_documented_file_spec_ingests_what_generated_classes_write_as_json_would(
        spark, broker, metrics, json_rows, tmp_path):
    desc, _, messages = metrics
    store = sqlite_store(tmp_path)
    topic = broker.create_topic(partitions=2)
    broker.produce(topic, [m.SerializeToString() for m in messages[::2]], partition=0)
    broker.produce(topic, [m.SerializeToString() for m in messages[1::2]], partition=1)
    spec = parse_spec(druid_spec("metrics-protobuf", topic, broker.bootstrap, {
        "type": "protobuf",
        "protoBytesDecoder": {"type": "file", "descriptor": desc.as_uri(), "protoMessageType": "Metrics"},
        "flattenSpec": {"useFieldDiscovery": True},
        "binaryAsString": False}), "<protobuf>")
    _, reports, _ = ingest_run(spark, store, spec, "r1", tmp_path.as_uri())
    assert sum(r.stats.processed for r in reports) == N and sum(r.stats.parse_exceptions for r in reports) == 0
    rows = _sorted(rows_of(store, "metrics-protobuf"))
    assert len(rows) == len(json_rows) == N and rows == json_rows
    assert {r["metricType"] for r in rows} == {"request/latency"}
    # as in Druid: `http_method` reads as `httpMethod` (protobuf's JSON name), so these dimensions are null
    assert {r["http_method"] for r in rows} == {None}


def test_the_documented_schema_registry_decoder_ingests_confluents_wire_format_and_keeps_bad_records_apart(
        spark, broker, metrics, json_rows, schema_registry_url, tmp_path):
    _, metrics_pb2, messages = metrics
    client = registry_client(schema_registry_url)
    topic = broker.create_topic()
    ctx = SerializationContext(topic, MessageField.VALUE)
    serialize = protobuf_serializer(metrics_pb2.Metrics, client)
    good = [serialize(m, ctx) for m in messages]
    schema_id = struct.unpack(">I", good[0][1:5])[0]
    avro_record = avro_serializer(client, json.dumps({"type": "record", "name": "M", "fields": [
        {"name": "unit", "type": "string"}]}))({"unit": "ms"}, SerializationContext(topic + "-avro", MessageField.VALUE))
    avro_id = struct.unpack(">I", avro_record[1:5])[0]
    body = good[0][6:]  # after the magic byte, the id and the message indexes [0]
    bad = {
        "does not start with Confluent's magic byte 0 (found 1)": b"\x01" + good[0][1:],
        f"schema id {schema_id + 100000} is not in schema registry": (
            b"\x00" + struct.pack(">I", schema_id + 100000) + b"\x00" + body),
        "bytes do not parse as Protobuf message Metrics (schema id": good[1][:good[1].index(b"2026-") + 5],
        f"message index [3] does not exist in schema id {schema_id}": (
            b"\x00" + struct.pack(">I", schema_id) + b"\x02\x06" + body),
        f"Protobuf message Metrics (schema id {schema_id})": (
            b"\x00" + struct.pack(">I", schema_id) + b"\x00" + b"\xff\xff\xff\xff"),
        f"schema id {avro_id} is an AVRO schema, not Protobuf": b"\x00" + struct.pack(">I", avro_id) + b"\x00" + body,
    }
    broker.produce(topic, good[:N // 2] + list(bad.values()) + good[N // 2:])
    store = sqlite_store(tmp_path)
    raw = druid_spec("metrics-registry", topic, broker.bootstrap, {
        "type": "protobuf",  # Druid's documented schema_registry decoder
        "protoBytesDecoder": {"urls": [schema_registry_url], "type": "schema_registry", "capacity": 100,
                              "headers": {"traceID": "b29c5de2-0db4-490b-b421"}}})
    raw["spec"]["tuningConfig"]["maxSavedParseExceptions"] = 10  # Druid's default keeps none to look at
    spec = parse_spec(raw, "<registry>")
    _, reports, _ = ingest_run(spark, store, spec, "r1", tmp_path.as_uri())
    [report] = reports
    assert report.stats.processed == N and report.stats.unparseable == len(bad)
    assert _sorted(rows_of(store, "metrics-registry")) == json_rows
    saved = {e.offset: e.message for e in report.saved_exceptions}
    for offset, reason in enumerate(bad, start=N // 2):
        assert reason in saved[offset], (offset, saved.get(offset))


DEP_PROTO = 'syntax = "proto3";\npackage dep;\nmessage D { string d = 1; }\n'
WITHDEP_PROTO = """syntax = "proto3";
package withdep;
import "dep.proto";
import "google/protobuf/timestamp.proto";
message Outer {
  message Inner { dep.D d = 1; google.protobuf.Timestamp at = 2; }
  string o = 1;
}
"""


def test_imports_nested_messages_and_java_style_text_schemas_of_the_registry(schema_registry_url, tmp_path):
    """No Spark: the executors' decoder against the real registry, as confluent-kafka's serializer registers a
    schema (the descriptor, base64, its imports as references) and as Java's does (.proto text)."""
    compile_proto(tmp_path, "dep", DEP_PROTO)
    _, withdep = compile_proto(tmp_path, "withdep", WITHDEP_PROTO)
    inner = withdep.Outer.Inner(d={"d": "x"})
    inner.at.FromSeconds(86400)
    want = [{"d": {"d": "x"}, "at": "1970-01-02T00:00:00Z"}]
    client = registry_client(schema_registry_url)
    topic = f"withdep-{tmp_path.name}"
    data = protobuf_serializer(withdep.Outer.Inner, client)(
        inner, SerializationContext(topic, MessageField.VALUE))
    assert data[5:7] == b"\x04\x00"  # message indexes [0, 0]: a nested message
    decoder = decoder_for(InputFormat(type="protobuf", proto_bytes_decoder=ProtoBytesDecoder(url=schema_registry_url)))
    assert decoder.rows(data) == want
    # Java's serializer registers the .proto text, an import as a reference to another subject
    client.register_schema(f"{topic}-dep", Schema(DEP_PROTO, "PROTOBUF"))
    text_id = client.register_schema(f"{topic}-text", Schema(WITHDEP_PROTO, "PROTOBUF", [
        SchemaReference("dep.proto", f"{topic}-dep", 1)]))
    assert decoder.rows(b"\x00" + struct.pack(">I", text_id) + b"\x04\x00\x00" + inner.SerializeToString()) == want
