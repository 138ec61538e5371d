"""`avro_stream` end to end: Druid's documented inputFormats (adapted only in the registry url), records written
by the real serializers (fastavro; confluent-kafka's AvroSerializer with its SchemaRegistryClient against the
session's schema registry) into the real broker, ingested by the Spark job: row for row the rows of the same
events sent as JSON. Bad records are counted, kept as dead letters, and never fail the run; a registry that does
not answer is named in `status`."""

from __future__ import annotations

import io
import json
import struct

import fastavro
import pytest
from confluent_kafka import Producer
from confluent_kafka.serialization import MessageField, SerializationContext
from helpers import avro_serializer, ingest_run, registry_client, rows_of, spec_from, sqlite_store

from ingest_core.dev.embedded import free_port
from ingest_core.service.status import collect_status
from ingest_core.store.reader import DatasourceReader

pytestmark = pytest.mark.kafka

# Druid's documented examples (docs/ingestion/data-formats.md, "Avro Stream" and "Avro Bytes Decoder")
USER = {"namespace": "org.apache.druid.data", "name": "User", "type": "record",
        "fields": [{"name": "FullName", "type": "string"}, {"name": "Country", "type": "string"}]}
USER_IDENTITY = {"namespace": "org.apache.druid.otherdata", "name": "UserIdentity", "type": "record",
                 "fields": [{"name": "Name", "type": "string"}, {"name": "Location", "type": "string"}]}
FLATTEN = {"useFieldDiscovery": True, "fields": [{"type": "path", "name": "someRecord_subInt",
                                                  "expr": "$.someRecord.subInt"}]}
DRUID_INLINE = {"type": "avro_stream", "avroBytesDecoder": {"type": "schema_inline", "schema": USER},
                "flattenSpec": FLATTEN, "binaryAsString": False}
DRUID_MULTIPLE = {"type": "avro_stream", "avroBytesDecoder": {"type": "multiple_schemas_inline",
                                                              "schemas": {"1": USER, "2": USER_IDENTITY}}}

# wiki edits with a millis timestamp (timestamp-millis in Avro), a union, an enum and a nested record
EDIT = {"type": "record", "name": "Edit", "namespace": "avrotest", "fields": [
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "page", "type": "string"}, {"name": "user", "type": ["null", "string"], "default": None},
    {"name": "added", "type": "long"}, {"name": "kind", "type": {"type": "enum", "name": "Kind",
                                                                 "symbols": ["EDIT", "NEW"]}},
    {"name": "geo", "type": {"type": "record", "name": "Geo", "fields": [{"name": "city", "type": "string"}]}}]}
T_MS = 1772445600000  # 2026-03-02T10:00:00Z
EDITS = [{"ts": T_MS + i * 61_000, "page": f"Page é{i % 4}", "user": None if i % 5 == 0 else f"u{i % 7}",
          "added": i * 13 - 100, "kind": "NEW" if i % 3 == 0 else "EDIT", "geo": {"city": f"c{i % 2}"}}
         for i in range(30)]
USERS = [{"FullName": f"Name {i}", "Country": ["FR", "JP", "BR"][i % 3]} for i in range(6)]
IDENTITIES = [{"Name": f"n{i}", "Location": f"L{i}"} for i in range(4)]

DATA_SCHEMA = {"timestampSpec": {"column": "ts", "format": "millis", "missingValue": "2026-03-02T09:00:00Z"},
               "dimensionsSpec": {"dimensions": ["page", "user", "kind", "city", "FullName", "Country", "Name",
                                                 "Location", "someRecord_subInt"]},
               "metricsSpec": [{"type": "count", "name": "cnt"}, {"type": "longSum", "name": "added",
                                                                  "fieldName": "added"}],
               "granularitySpec": {"segmentGranularity": "DAY", "queryGranularity": "NONE", "rollup": False}}
EDIT_FLATTEN = {"fields": [{"type": "path", "name": "city", "expr": "$.geo.city"}]}


def avro(schema: dict, record: dict) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


def produce(broker, topic: str, values: list[bytes]) -> None:
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for v in values:
        p.produce(topic, v)
    assert p.flush(30) == 0


def ingest(spark, broker, tmp_path, name: str, fmt: dict, values: list[bytes], **microbatch):
    topic = broker.create_topic()
    produce(broker, topic, values)
    store = sqlite_store(tmp_path / name)
    spec = spec_from(broker.bootstrap, topic, DATA_SCHEMA, io={"inputFormat": fmt},
                     tuning={"maxParseExceptions": 100, "maxSavedParseExceptions": 10}, microbatch=microbatch,
                     datasource=name)
    plan, reports, _ = ingest_run(spark, store, spec, "r1", (tmp_path / name / "deep").as_uri())
    return spec, store, reports


def sorted_rows(store, name: str) -> list[dict]:
    return sorted(rows_of(store, name), key=lambda r: json.dumps(r, sort_keys=True, default=str))


def test_druids_avro_specs_ingest_the_rows_of_the_same_events_sent_as_json(spark, broker, schema_registry_url,
                                                                            tmp_path):
    registry = registry_client(schema_registry_url)
    serialize = avro_serializer(registry, json.dumps(EDIT))  # registers the schema under <topic>-value
    topic_probe = broker.create_topic()
    confluent = [serialize(e, SerializationContext(topic_probe, MessageField.VALUE)) for e in EDITS]
    edit_id = struct.unpack(">i", confluent[0][1:5])[0]
    bad = [b"\x00" + struct.pack(">i", 987654) + confluent[0][5:],  # an id the registry does not know
           confluent[1][:-4],                                      # truncated
           b"\x01" + confluent[2][1:],                             # not Confluent's magic byte
           b"\x00" + struct.pack(">i", edit_id) + b"\x02\xff\xff"]  # does not match its schema
    # Druid's schema_registry example, its url adapted; flattenSpec for the nested city
    registry_fmt = {"type": "avro_stream", "avroBytesDecoder": {"type": "schema_registry", "url": schema_registry_url},
                    "flattenSpec": EDIT_FLATTEN}
    _, registry_store, reports = ingest(spark, broker, tmp_path, "registry", registry_fmt, confluent[:15] + bad
                                        + confluent[15:], deadLetter={})
    stats = reports[0].stats
    assert (stats.processed, stats.unparseable) == (len(EDITS), len(bad))
    messages = " | ".join(e.message for e in reports[0].saved_exceptions)
    for why in ("schema id 987654 is not in schema registry", "truncated", "magic byte 0 (found 1)",
                f"does not match schema id {edit_id}"):
        assert why in messages, messages
    letters = DatasourceReader(registry_store, "registry").dead_letters()
    assert sorted(letters.column("value").to_pylist()) == sorted(bad)

    _, inline_store, _ = ingest(spark, broker, tmp_path, "inline", DRUID_INLINE, [avro(USER, u) for u in USERS])
    _, multiple_store, _ = ingest(spark, broker, tmp_path, "multiple", DRUID_MULTIPLE,
                                  [b"\x01" + struct.pack(">i", 1) + avro(USER, u) for u in USERS]
                                  + [b"\x01" + struct.pack(">i", 2) + avro(USER_IDENTITY, u) for u in IDENTITIES])
    # the same events as JSON, read with the same flattenSpecs
    json_fmt = {"type": "json", "flattenSpec": {"fields": EDIT_FLATTEN["fields"] + FLATTEN["fields"]}}
    _, json_store, _ = ingest(spark, broker, tmp_path, "json", json_fmt,
                              [json.dumps(e).encode() for e in EDITS + USERS + USERS + IDENTITIES])
    got = sorted(rows_of(registry_store, "registry") + rows_of(inline_store, "inline")
                 + rows_of(multiple_store, "multiple"), key=lambda r: json.dumps(r, sort_keys=True, default=str))
    want = sorted_rows(json_store, "json")
    assert len(got) == len(EDITS) + 2 * len(USERS) + len(IDENTITIES) and got == want


def test_a_registry_that_does_not_answer_leaves_its_records_unparseable_and_is_named_in_status(
        spark, broker, tmp_path):
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    fmt = {"type": "avro_stream", "avroBytesDecoder": {"type": "schema_registry", "url": dead}}
    values = [b"\x00" + struct.pack(">i", 3) + avro(EDIT, e) for e in EDITS[:5]]
    spec, store, reports = ingest(spark, broker, tmp_path, "down", fmt, values)
    assert reports[0].succeeded and reports[0].stats.unparseable == len(values)  # the run went on
    (problem,) = reports[0].problems
    assert (problem.service, problem.url, problem.records) == ("schemaRegistry", dead, len(values))
    errors = collect_status(store, "down", spec).to_json()["payload"]["recentErrors"]
    named = [e for e in errors if e["exceptionClass"] == "ServiceUnavailable"]
    assert named and named[0]["url"] == dead and named[0]["unparseableRecords"] == len(values)
    assert f"schema registry {dead} did not answer for schema id 3" in named[0]["message"]


def test_the_decoder_reads_registry_schemas_with_references_and_names_an_unknown_id(schema_registry_url):
    from confluent_kafka.schema_registry import Schema, SchemaReference

    from ingest_core.core.spec import parse_spec
    from ingest_core.executor.formats.decoders import decoder_for

    client = registry_client(schema_registry_url)
    topic = broker_free_topic()
    geo = {"type": "record", "name": "Geo", "namespace": "avrotest.ref", "fields": [{"name": "city", "type": "string"}]}
    client.register_schema(f"{topic}-geo", Schema(json.dumps(geo), "AVRO"))
    edit = {"type": "record", "name": "RefEdit", "namespace": "avrotest.ref", "fields": [
        {"name": "page", "type": "string"}, {"name": "geo", "type": "avrotest.ref.Geo"}]}
    schema = Schema(json.dumps(edit), "AVRO", [SchemaReference("avrotest.ref.Geo", f"{topic}-geo", 1)])
    serialize = avro_serializer(client, schema, **{"auto.register.schemas": True})
    data = serialize({"page": "P", "geo": {"city": "Lyon"}}, SerializationContext(topic, MessageField.VALUE))
    fmt = {"type": "avro_stream", "avroBytesDecoder": {"type": "schema_registry", "url": schema_registry_url}}
    spec = parse_spec({"type": "kafka", "spec": {
        "dataSchema": {"dataSource": "ds", "timestampSpec": {"column": "ts"}, "granularitySpec": {}},
        "ioConfig": {"topic": topic, "inputFormat": fmt, "consumerProperties": {"bootstrap.servers": "x:9092"}}}})
    decoder = decoder_for(spec.io_config.input_format)
    assert decoder.rows(data) == [{"page": "P", "geo": {"city": "Lyon"}}]
    with pytest.raises(ValueError, match="schema id 2147483000 is not in schema registry"):
        decoder.rows(b"\x00" + struct.pack(">i", 2147483000) + data[5:])


def broker_free_topic() -> str:
    import uuid

    return f"avro-ref-{uuid.uuid4().hex[:8]}"
