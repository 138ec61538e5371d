"""`avro_stream`'s `avroBytesDecoder`, as Druid documents it: how a record's bytes find their Avro schema.

  - `schema_inline`: one schema for every record; the record is the Avro binary itself, no header;
  - `multiple_schemas_inline`: `schemas` maps ids to schemas; a record is a version byte (1), the schema id
    (4 bytes, big-endian) and the Avro binary;
  - `schema_registry`: Confluent's wire format (a magic byte 0, the schema id, the Avro binary), the schema
    fetched by id from a schema registry (`url` or `urls`, `config`, `headers`).
Druid's `schema_repo` (the default when `type` is left out) is not supported: the spec says so by name.

Pure: schemas are parsed here (fastavro's `parse_schema`, no I/O) so `ingest validate` refuses a schema the
executors could not read; the executors decode with the same parsed form (`ingest_core.executor.formats.avro`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar

import fastavro

from ingest_core.core import secrets as credentials
from ingest_core.core.binding import MISSING_VALUE, BindContext, bind_object, did_you_mean, join, spec_field
from ingest_core.core.errors import shown

MULTIPLE_SCHEMAS_VERSION = 1  # Druid's InlineSchemasAvroBytesDecoder: the first byte of every record
DYNAMIC_PROVIDER_KEY = credentials.DYNAMIC_PROVIDER_KEY
# registry client settings the executors' client applies (`ingest_core.executor.formats.schema_registry`)
REGISTRY_CONFIG_KEYS = ("basic.auth.credentials.source", "basic.auth.user.info", "ssl.ca.location")


def without_logical_types(schema: Any) -> Any:
    """The schema with every `logicalType` dropped: Druid ignores Avro's logical types and reads each field as
    its underlying type (a `timestamp-millis` stays epoch millis, a `decimal` stays bytes), so a row reads as
    the same event sent as JSON would."""
    if isinstance(schema, list):
        return [without_logical_types(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key == "logicalType":
            continue
        # a field's default is a value, not a schema: keep it as written
        out[key] = value if key == "default" else without_logical_types(value)
    return out


def parse_avro_schema(schema: Any, named: dict[str, Any] | None = None) -> Any:
    """fastavro's parsed form of a schema (a JSON object, or its text), logical types dropped; ValueError
    (with fastavro's reason) when it is not a valid Avro schema. `named`: named types already parsed (another
    schema's, for a registry schema's references), extended with this one's."""
    if isinstance(schema, (str, bytes)):
        try:
            schema = json.loads(schema)
        except ValueError:
            schema = schema if isinstance(schema, str) else schema.decode("utf-8", "replace")  # e.g. "string"
    try:
        # parsed with fastavro's marks (named types included), so its readers do not parse it again per record
        return fastavro.parse_schema(without_logical_types(schema), named_schemas=named)
    except Exception as exc:  # noqa: BLE001 - fastavro raises several types for a bad schema: all mean "invalid"
        raise ValueError(f"not a valid Avro schema: {type(exc).__name__}: {exc}") from None


def zero_width_array(parsed: Any) -> str | None:
    """The name of an array field whose items take no bytes (null, an empty record, fixed of size 0), or None.
    A record of a few bytes could declare billions of them: the decoders refuse such a schema."""
    named: dict[str, Any] = {}

    def width_zero(schema: Any, seen: frozenset) -> bool:
        if isinstance(schema, str):
            if schema == "null":
                return True
            if schema in named and schema not in seen:
                return width_zero(named[schema], seen | {schema})
            return False
        if isinstance(schema, dict):
            kind = schema.get("type")
            if kind == "record":
                return all(width_zero(f["type"], seen) for f in schema.get("fields", []))
            if kind == "fixed":
                return int(schema.get("size", 1)) == 0
            return kind == "null"
        return False  # a union writes its branch index: at least a byte

    def walk(schema: Any, at: str) -> str | None:
        if isinstance(schema, list):
            return next((found for s in schema if (found := walk(s, at))), None)
        if not isinstance(schema, dict):
            return None
        if schema.get("name"):
            named[schema["name"]] = schema
        kind = schema.get("type")
        if kind == "array":
            if width_zero(schema.get("items"), frozenset()):
                return at or "(the top level)"
            return walk(schema.get("items"), at)
        if kind == "map":
            return walk(schema.get("values"), at)
        if kind == "record":
            return next((found for f in schema.get("fields", []) if (found := walk(f["type"], f["name"]))), None)
        return walk(kind, at) if isinstance(kind, (dict, list)) else None

    return walk(parsed, "")


def _check_schema(schema: Any, path: str, ctx: BindContext) -> None:
    if not isinstance(schema, dict):
        ctx.error(path, "expected an Avro schema object such as {type: record, name: Event, fields: [{name: ts, "
                        "type: long}]}")
        return
    try:
        parsed = parse_avro_schema(schema, {})
    except ValueError as exc:
        ctx.error(path, f"{exc}; fix the schema (https://avro.apache.org/docs/current/specification/)")
        return
    field = zero_width_array(parsed)
    if field is not None:
        ctx.error(path, f"field {field!r} is an array of items that take no bytes (null, an empty record): a "
                        "record of a few bytes could hold billions of them; give the items a type with content")
    if schema.get("type") != "record":
        ctx.error(join(path, "type"), f"the schema is of type {schema.get('type')!r}; a row is read from an Avro "
                                      "record: use {type: record, fields: [...]}")


@dataclass(frozen=True)
class AvroBytesDecoder:
    """The base of the decoder types; binding dispatches on `type`."""

    TYPES: ClassVar[tuple[str, ...]] = ("schema_inline", "multiple_schemas_inline", "schema_registry")

    @classmethod
    def _from_raw(cls, raw: Any, path: str, ctx: BindContext) -> Any:
        if not isinstance(raw, dict):
            ctx.error(path, "expected an avroBytesDecoder object such as {type: schema_registry, url: "
                            "'http://registry:8081'}")
            return MISSING_VALUE
        kind = raw.get("type")
        if kind is None or kind == "schema_repo":
            ctx.error(join(path, "type"), (
                "Druid's schema_repo decoder (the default when type is left out: AVRO-1124 schema repositories) "
                "is not supported: use schema_registry (Confluent's wire format), schema_inline or "
                "multiple_schemas_inline"))
            return MISSING_VALUE
        decoder_cls = _DECODER_TYPES.get(str(kind))
        if decoder_cls is None:
            ctx.error(join(path, "type"), f"unknown avroBytesDecoder type {shown(kind)}"
                                          f"{did_you_mean(str(kind), cls.TYPES)}; supported: {', '.join(cls.TYPES)}")
            return MISSING_VALUE
        return bind_object(decoder_cls, raw, path, ctx)

    def _to_raw(self, redact: bool = True) -> dict[str, Any]:
        raise NotImplementedError


@dataclass(frozen=True)
class InlineSchemaDecoder(AvroBytesDecoder):
    """`schema_inline`: every record is the Avro binary of `schema`, with no header."""

    type: str
    schema: dict[str, Any]

    def _validate(self, path: str, ctx: BindContext) -> None:
        _check_schema(self.schema, join(path, "schema"), ctx)

    def _to_raw(self, redact: bool = True) -> dict[str, Any]:
        return {"type": self.type, "schema": self.schema}


@dataclass(frozen=True)
class InlineSchemasDecoder(AvroBytesDecoder):
    """`multiple_schemas_inline`: a version byte (1), a 4-byte big-endian schema id, the Avro binary."""

    type: str
    schemas: dict[str, Any]

    def _validate(self, path: str, ctx: BindContext) -> None:
        at = join(path, "schemas")
        if not self.schemas:
            ctx.error(at, "needs at least one schema: {\"1\": {type: record, ...}}")
        for key, schema in self.schemas.items():
            if not key.strip().lstrip("-").isdigit() or not 0 <= int(key) < 2 ** 31:
                ctx.error(join(at, key), f"schema id {key!r} is not an integer id (0 to 2^31-1): the record header "
                                         "carries the id as a 4-byte integer")
                continue
            _check_schema(schema, join(at, key), ctx)

    @property
    def by_id(self) -> dict[int, Any]:
        return {int(k): v for k, v in self.schemas.items()}

    def _to_raw(self, redact: bool = True) -> dict[str, Any]:
        return {"type": self.type, "schemas": self.schemas}


@dataclass(frozen=True)
class SchemaRegistryDecoder(AvroBytesDecoder):
    """`schema_registry`: Confluent's wire format; schemas by id from the registry at `url` (or any of `urls`).
    `config` and `headers` may hold credentials: they are redacted wherever the spec is stored or shown, and
    reach the executors in the job's secret options only (`with_secrets_from`)."""

    type: str
    url: str | None = None
    urls: list[str] | None = None
    capacity: int | None = None
    config: dict[str, Any] = spec_field(default_factory=dict)
    headers: dict[str, Any] = spec_field(default_factory=dict)

    def _validate(self, path: str, ctx: BindContext) -> None:
        urls = ([self.url] if self.url else []) + list(self.urls or [])
        if not urls:
            ctx.error(join(path, "url"), "a schema_registry decoder needs url (or urls): the schema registry's "
                                         "address, e.g. http://schema-registry:8081")
        for i, u in enumerate(urls):
            if not u.startswith(("http://", "https://")):
                ctx.error(join(path, "url" if self.url and i == 0 else f"urls[{i - bool(self.url)}]"),
                          f"{u!r} is not an http(s) URL, e.g. http://schema-registry:8081")
        if self.capacity is not None and self.capacity < 1:
            ctx.error(join(path, "capacity"), "must be at least 1 (the schemas cached; leave it out for no limit)")
        for name in ("config", "headers"):
            values, problems = expand_map_provider(getattr(self, name))
            for problem in problems:
                ctx.error(join(join(path, name), DYNAMIC_PROVIDER_KEY), problem)
            for key, value in values.items():
                if not isinstance(value, (str, int, float, bool)):
                    ctx.error(join(join(path, name), key), "expected a string, number or boolean")
            if name == "config":
                for key in values:
                    if key not in REGISTRY_CONFIG_KEYS:
                        ctx.warn(join(join(path, name), key), "accepted but not applied: the executors' registry "
                                 f"client reads {', '.join(REGISTRY_CONFIG_KEYS)} (Java keystores do not apply)")

    @property
    def all_urls(self) -> list[str]:
        return ([self.url] if self.url else []) + list(self.urls or [])

    @property
    def effective_config(self) -> dict[str, str]:
        return {k: str(v) for k, v in expand_map_provider(self.config)[0].items()}

    @property
    def effective_headers(self) -> dict[str, str]:
        return {k: str(v) for k, v in expand_map_provider(self.headers)[0].items()}

    @property
    def has_literal_secrets(self) -> bool:
        return any(credentials.is_secret_key(k) for m in (self.effective_config, self.effective_headers) for k in m)

    def _to_raw(self, redact: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type}
        if self.url is not None:
            out["url"] = self.url
        if self.urls is not None:
            out["urls"] = list(self.urls)
        if self.capacity is not None:
            out["capacity"] = self.capacity
        for name in ("config", "headers"):
            values = getattr(self, name)
            if values:
                out[name] = credentials.redact_map(values) if redact else dict(values)
        return out


_DECODER_TYPES: dict[str, type] = {"schema_inline": InlineSchemaDecoder,
                                   "multiple_schemas_inline": InlineSchemasDecoder,
                                   "schema_registry": SchemaRegistryDecoder}


def expand_map_provider(values: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """`config` / `headers` with Druid's `druid.dynamic.config.provider` of type `mapString` merged in (its
    `config` map); other providers are problems."""
    out = {k: v for k, v in values.items() if k != DYNAMIC_PROVIDER_KEY}
    provider = values.get(DYNAMIC_PROVIDER_KEY)
    if provider is None:
        return out, []
    if not isinstance(provider, dict) or provider.get("type") != "mapString" or not isinstance(
            provider.get("config"), dict):
        return out, ["only Druid's mapString provider is supported here: {type: mapString, config: {key: value}}"]
    return {**out, **provider["config"]}, []
