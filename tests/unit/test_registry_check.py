"""Which decoders of a raw inputFormat `ingest validate --connect` asks a schema registry about (no registry)."""

from __future__ import annotations

from ingest_core.service.registry_check import check_registries, registry_decoders

REGISTRY = {"type": "schema_registry", "url": "http://registry:8081"}


def test_each_schema_registry_decoder_is_found_with_its_place_and_subject_part():
    fmt = {"type": "kafka",
           "valueFormat": {"type": "protobuf", "protoBytesDecoder": REGISTRY},
           "keyFormat": {"type": "avro_stream", "avroBytesDecoder": {**REGISTRY, "urls": ["http://b:8081"]}}}
    found = [(d.path, d.format_type, d.part, d.schema_type) for d in registry_decoders(fmt)]
    assert found == [
        ("spec.ioConfig.inputFormat.valueFormat.protoBytesDecoder", "protobuf", "value", "PROTOBUF"),
        ("spec.ioConfig.inputFormat.keyFormat.avroBytesDecoder", "avro_stream", "key", "AVRO"),
    ]
    assert [d.path for d in registry_decoders({"type": "avro_stream", "avroBytesDecoder": REGISTRY})] == [
        "spec.ioConfig.inputFormat.avroBytesDecoder"]


def test_formats_and_decoders_that_need_no_registry_are_not_checked():
    for fmt in ({"type": "json"}, None, {"type": "kafka", "valueFormat": {"type": "csv", "columns": ["a"]}},
                {"type": "avro_stream", "avroBytesDecoder": {"type": "schema_inline", "schema": {}}},
                {"type": "protobuf", "protoBytesDecoder": {"type": "file", "descriptor": "file:///d.desc"}},
                {"type": "avro_stream", "avroBytesDecoder": "schema_registry"}):
        assert registry_decoders(fmt) == []


def test_a_registry_decoder_without_url_is_an_error_naming_its_place():
    decoders = registry_decoders({"type": "avro_stream", "avroBytesDecoder": {"type": "schema_registry"}})
    check = check_registries(decoders, "edits", None)
    assert check.errors == [("spec.ioConfig.inputFormat.avroBytesDecoder: a schema_registry decoder needs `url` "
                             "or `urls`")]
