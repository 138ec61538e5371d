"""Confluent's Schema Registry as the executors' decoders read it: the wire format, and schemas by id.

A message in Confluent's wire format is a magic byte (0), the schema id (4 bytes, big-endian) and the payload;
Protobuf payloads start with the message indexes (which message of the schema file) as zigzag varints. The
decoders (`avro_stream` / `protobuf` with a `schema_registry` decoder, Druid's fields `url`/`urls`, `config`,
`headers`) look each id up once per process: schemas are immutable, so the cache never expires.

Errors stay per record, as in Druid's decoders: an id the registry does not know is `UnknownSchemaError`; a
registry that does not answer is retried with backoff, then `RegistryUnavailableError` (naming the url), and
that id fails fast for `DOWN_SECONDS` instead of waiting again for every record of the chunk.
Both are ValueErrors, so the row parser counts the record as unparseable. Standard library HTTP only:
executors import no Kafka or Airflow code.
"""

from __future__ import annotations

import base64
import json
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Mapping

from ingest_core.core import defaults
from ingest_core.core.errors import DependencyUnavailableError
from ingest_core.handover.report import ServiceUnavailableError

MAGIC_BYTE = 0
HEADER_SIZE = 5  # magic byte + schema id
RETRY_DELAYS = defaults.SCHEMA_REGISTRY_RETRY_DELAYS_S  # seconds between attempts when the registry does not answer
TIMEOUT_SECONDS = defaults.SCHEMA_REGISTRY_TIMEOUT_S  # each request
DEADLINE_SECONDS = defaults.SCHEMA_REGISTRY_DEADLINE_S  # one lookup, its retries included
DOWN_SECONDS = 30.0  # how long an unanswered lookup fails fast before the registry is asked again


class SchemaRegistryError(ValueError):
    """A record whose schema cannot be had: counted as unparseable, with this message."""


class UnknownSchemaError(SchemaRegistryError):
    pass


class RegistryUnavailableError(SchemaRegistryError, ServiceUnavailableError, DependencyUnavailableError):
    """Named in the run's report and in `status` (`ServiceProblem`), not only in its records' parse exceptions."""

    code = "INGEST_SCHEMA_REGISTRY_UNAVAILABLE"
    dependency = "schemaRegistry"

    def __init__(self, url: str, reason: str, what: str | None = None, deadline_s: float | None = None):
        within = f"; lookup deadline {deadline_s:g}s" if deadline_s is not None else ""
        ServiceUnavailableError.__init__(
            self, f"schema registry {url} did not answer{f' for {what}' if what else ''} ({reason}{within}): check "
                  "that it runs and is reachable from the Spark executors; the records read meanwhile are "
                  "unparseable (dead letters keep them when deadLetter is on)", "schemaRegistry", url)
        self.endpoint, self.deadline_s = url, deadline_s


@dataclass(frozen=True)
class SchemaReference:
    name: str
    subject: str
    version: int


@dataclass(frozen=True)
class RegisteredSchema:
    schema_id: int | None
    schema_type: str  # AVRO, PROTOBUF or JSON (the registry omits it for AVRO)
    schema: str       # the schema text (base64 of a FileDescriptorProto when fetched with format=serialized)
    references: tuple[SchemaReference, ...] = ()


def split_wire_format(data: bytes) -> tuple[int, memoryview]:
    """(schema id, payload) of a message in Confluent's wire format."""
    if len(data) < HEADER_SIZE:
        raise ValueError(f"record of {len(data)} bytes is too short for Confluent's wire format (a magic byte "
                         "and a 4-byte schema id before the payload)")
    if data[0] != MAGIC_BYTE:
        raise ValueError(f"record does not start with Confluent's magic byte 0 (found {data[0]}): it was not "
                         "written by a schema-registry serializer")
    return int.from_bytes(data[1:HEADER_SIZE], "big"), memoryview(data)[HEADER_SIZE:]


def read_message_indexes(payload: memoryview) -> tuple[list[int], memoryview]:
    """The Protobuf message indexes (a zigzag varint count, then each index) and the message bytes after them.
    A single 0 (the first message of the file) is written as the count 0 alone."""
    values, pos = [], 0
    count, pos = _zigzag_varint(payload, pos)
    if count == 0:
        return [0], payload[pos:]
    if count < 0 or count > 100:
        raise ValueError(f"invalid Protobuf message index count {count} in Confluent's wire format")
    for _ in range(count):
        value, pos = _zigzag_varint(payload, pos)
        values.append(value)
    return values, payload[pos:]


def _zigzag_varint(buf: memoryview, pos: int) -> tuple[int, int]:
    result, shift = 0, 0
    while True:
        if pos >= len(buf):
            raise ValueError("record ends inside the Protobuf message indexes (a truncated message)")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise ValueError("malformed varint in the Protobuf message indexes")


@dataclass(frozen=True)
class RegistryConfig:
    """Druid's `schema_registry` decoder fields: `url` or `urls`, `config` (the registry client's settings:
    `basic.auth.credentials.source: USER_INFO` + `basic.auth.user.info`, `ssl.ca.location`) and `headers`."""

    urls: tuple[str, ...]
    config: tuple[tuple[str, str], ...] = ()
    headers: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, url: str | None = None, urls: list[str] | None = None, config: Mapping[str, Any] | None = None,
           headers: Mapping[str, Any] | None = None) -> "RegistryConfig":
        all_urls = tuple(u.rstrip("/") for u in ([url] if url else []) + list(urls or []))
        if not all_urls:
            raise ValueError("a schema_registry decoder needs `url` or `urls`")
        return cls(all_urls, tuple(sorted((str(k), str(v)) for k, v in (config or {}).items())),
                   tuple(sorted((str(k), str(v)) for k, v in (headers or {}).items())))

    @classmethod
    def of_decoder(cls, decoder: Any) -> "RegistryConfig":
        """From a spec's `schema_registry` decoder (`core.avro_schema.SchemaRegistryDecoder`, Avro's or
        Protobuf's), with Druid's `mapString` config provider applied."""
        return cls.of(urls=decoder.all_urls, config=decoder.effective_config, headers=decoder.effective_headers)


@dataclass
class SchemaRegistryClient:
    registry: RegistryConfig
    retry_delays: tuple[float, ...] = RETRY_DELAYS
    timeout: float = TIMEOUT_SECONDS
    deadline: float = DEADLINE_SECONDS
    down_seconds: float = DOWN_SECONDS
    _cache: dict[tuple[Any, ...], RegisteredSchema] = field(default_factory=dict)
    _down: dict[tuple[Any, ...], tuple[float, RegistryUnavailableError]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def schema(self, schema_id: int, fmt: str | None = None) -> RegisteredSchema:
        """The schema registered under `schema_id` (`fmt="serialized"`: Protobuf as a FileDescriptorProto)."""
        query = f"?format={urllib.parse.quote(fmt)}" if fmt else ""
        return self._get(("id", schema_id, fmt), f"/schemas/ids/{schema_id}{query}", schema_id,
                         f"schema id {schema_id}")

    def referenced(self, ref: SchemaReference, fmt: str | None = None) -> RegisteredSchema:
        """A schema another one imports (Protobuf imports, Avro named types), by subject and version."""
        subject = urllib.parse.quote(ref.subject, safe="")
        query = f"?format={urllib.parse.quote(fmt)}" if fmt else ""
        return self._get(("ref", ref.subject, ref.version, fmt), f"/subjects/{subject}/versions/{ref.version}{query}",
                         None, f"subject {ref.subject!r} version {ref.version}")

    def get_json(self, path: str) -> Any:
        """One GET against the registry (retried like the schema lookups); for validation."""
        return self._request(path, path)

    def _get(self, key: tuple[Any, ...], path: str, schema_id: int | None, what: str) -> RegisteredSchema:
        with self._lock:
            hit = self._cache.get(key)
            down = self._down.get(key)
        if hit is not None:
            return hit
        if down is not None and time.monotonic() < down[0]:
            raise down[1]
        try:
            body = self._request(path, what)
        except RegistryUnavailableError as exc:
            with self._lock:
                self._down[key] = (time.monotonic() + self.down_seconds, exc)
            raise
        refs = tuple(SchemaReference(str(r.get("name")), str(r.get("subject")), int(r.get("version", -1)))
                     for r in body.get("references") or ())
        found = RegisteredSchema(schema_id if schema_id is not None else body.get("id"),
                                 str(body.get("schemaType") or "AVRO"), str(body.get("schema", "")), refs)
        with self._lock:
            self._cache[key] = found
        return found

    def _request(self, path: str, what: str) -> Any:
        """One GET (safe to repeat): each url in turn, again after each of `retry_delays`, each request within
        `timeout` and all within `deadline`."""
        last: tuple[str, str] = (self.registry.urls[0], "no attempt")
        deadline = time.monotonic() + self.deadline
        for attempt in range(len(self.retry_delays) + 1):
            if attempt:
                if time.monotonic() + self.retry_delays[attempt - 1] >= deadline:
                    break
                time.sleep(self.retry_delays[attempt - 1])
            for base in self.registry.urls:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                try:
                    with urllib.request.urlopen(self._http_request(base + path), timeout=min(self.timeout, left),
                                                context=self._ssl_context()) as resp:
                        return json.loads(resp.read())
                except urllib.error.HTTPError as exc:
                    if exc.code == 404:
                        raise UnknownSchemaError(f"{what} is not in schema registry {base} (404): the record "
                                                 "was written against another registry, or its schema was "
                                                 "deleted") from None
                    if exc.code in (401, 403):
                        raise SchemaRegistryError(f"schema registry {base} refused {what} ({exc.code}): check "
                                                  "the decoder's config basic.auth.user.info / headers") from None
                    last = (base, f"HTTP {exc.code}")
                except (urllib.error.URLError, OSError, ValueError) as exc:
                    last = (base, str(getattr(exc, "reason", exc)))
        raise RegistryUnavailableError(*last, what, self.deadline)

    def _http_request(self, url: str) -> urllib.request.Request:
        req = urllib.request.Request(url, headers={"Accept": "application/vnd.schemaregistry.v1+json, "
                                                            "application/json"})
        config = dict(self.registry.config)
        parsed = urllib.parse.urlsplit(url)
        user_info = None
        if config.get("basic.auth.credentials.source", "USER_INFO").upper() == "USER_INFO":
            user_info = config.get("basic.auth.user.info")
        if user_info is None and parsed.username is not None:  # credentials in the url itself
            user_info = f"{urllib.parse.unquote(parsed.username)}:{urllib.parse.unquote(parsed.password or '')}"
            req.full_url = urllib.parse.urlunsplit(parsed._replace(netloc=parsed.hostname + (
                f":{parsed.port}" if parsed.port else "")))
        if user_info:
            req.add_header("Authorization", "Basic " + base64.b64encode(user_info.encode()).decode())
        for k, v in self.registry.headers:
            req.add_header(k, v)
        return req

    def _ssl_context(self) -> ssl.SSLContext | None:
        ca = dict(self.registry.config).get("ssl.ca.location")
        return ssl.create_default_context(cafile=ca) if ca else None


_clients: dict[RegistryConfig, SchemaRegistryClient] = {}
_clients_lock = threading.Lock()


def client_for(registry: RegistryConfig) -> SchemaRegistryClient:
    """One client per registry config and process, so every task on an executor shares its schema cache."""
    with _clients_lock:
        client = _clients.get(registry)
        if client is None:
            client = _clients[registry] = SchemaRegistryClient(registry)
        return client
