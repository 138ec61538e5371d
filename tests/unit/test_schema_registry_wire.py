"""Confluent's wire format as confluent-kafka's own serializers write it, read by the executors' client."""

from __future__ import annotations

import http.server
import json
import threading

import pytest
from confluent_kafka.schema_registry.common.serde import SchemaId
from hypothesis import given
from hypothesis import strategies as st

from ingest_core.executor.formats.schema_registry import (
    RegistryConfig,
    RegistryUnavailableError,
    SchemaRegistryClient,
    UnknownSchemaError,
    read_message_indexes,
    split_wire_format,
)


@given(schema_id=st.integers(0, 2**32 - 1),
       indexes=st.lists(st.integers(0, 2**20), min_size=1, max_size=5),
       payload=st.binary(max_size=20))
def test_the_header_and_message_indexes_that_confluent_kafka_writes_read_back(schema_id, indexes, payload):
    data = SchemaId("PROTOBUF", schema_id, message_indexes=indexes).id_to_bytes() + payload
    got_id, rest = split_wire_format(data)
    assert got_id == schema_id
    got_indexes, message = read_message_indexes(rest)
    assert got_indexes == indexes
    assert bytes(message) == payload


@pytest.mark.parametrize("data, why", [
    (b"", "too short"), (b"\x00\x00\x01", "too short"), (b"{\"a\":1}", "magic byte 0"),
    (b"\x01" + bytes(20), "magic byte 0"),
])
def test_a_record_not_in_the_wire_format_is_a_value_error_that_says_why(data, why):
    with pytest.raises(ValueError, match=why):
        split_wire_format(data)


def test_message_indexes_cut_short_are_a_value_error():
    data = SchemaId("PROTOBUF", 7, message_indexes=[3, 300]).id_to_bytes()
    _, rest = split_wire_format(data[:-1])
    with pytest.raises(ValueError, match="truncated"):
        read_message_indexes(rest)


class _Registry(http.server.BaseHTTPRequestHandler):
    """The two answers that matter to the client: a schema, and 404 (the real registry is tested in
    tests/integration)."""

    seen: list[tuple[str, str | None]] = []

    def do_GET(self):  # noqa: N802
        _Registry.seen.append((self.path, self.headers.get("Authorization")))
        if self.path.startswith("/schemas/ids/1"):
            body = json.dumps({"schema": '"string"'}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)
        else:
            self.send_response(404)
            self.end_headers()

    def log_message(self, *args):
        pass


def test_the_client_caches_by_id_sends_basic_auth_and_reports_404_and_a_dead_registry():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Registry)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        client = SchemaRegistryClient(RegistryConfig.of(urls=[url], config={
            "basic.auth.credentials.source": "USER_INFO", "basic.auth.user.info": "me:secret"}))
        first = client.schema(1)
        assert (first.schema_id, first.schema_type, first.schema) == (1, "AVRO", '"string"')
        assert client.schema(1) is first
        assert [p for p, _ in _Registry.seen] == ["/schemas/ids/1"]  # cached
        assert _Registry.seen[0][1] == "Basic bWU6c2VjcmV0"
        with pytest.raises(UnknownSchemaError, match="schema id 2 is not in schema registry"):
            client.schema(2)
    finally:
        server.shutdown()
        server.server_close()
    dead = SchemaRegistryClient(RegistryConfig.of(url=url), retry_delays=(0.0, 0.0), down_seconds=3600)
    with pytest.raises(RegistryUnavailableError, match=f"schema registry {url} did not answer") as caught:
        dead.schema(1)
    calls = len(_Registry.seen)
    with pytest.raises(RegistryUnavailableError) as again:  # fails fast: no new attempt
        dead.schema(1)
    assert again.value is caught.value and len(_Registry.seen) == calls
