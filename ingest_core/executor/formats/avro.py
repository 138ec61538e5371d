"""`avro_stream`: a Kafka record's bytes -> one row, as Druid's Avro stream reader gives it (fastavro decodes).

Values as Druid's AvroFlattenerMaker gives them: a record is a nested dict (flattenSpec paths reach into it,
a dimension named for it stores its JSON text), a map a dict, an array a list, a union its value, an enum its
symbol; `bytes` and `fixed` are base64 text, or UTF-8 text with `binaryAsString` (Druid's docs). Logical types
are ignored, as Druid ignores them: a `timestamp-millis` is its epoch millis, so the row equals the one of the
same event sent as JSON with a millis timestamp.

Every failure is the record's own (a ValueError naming the schema id and the reason; the row parser counts the
record unparseable and keeps it as a parse exception / dead letter): a wrong header byte, an unknown schema
id, a registry that does not answer (retried with backoff by the registry client, named in the run's report),
a truncated message, bytes that do not match the schema.
"""

from __future__ import annotations

import base64
import io
import json
from dataclasses import dataclass
from typing import Any, Callable

import pyarrow as pa
from fastavro import schemaless_reader

from ingest_core.core.avro_schema import (
    MULTIPLE_SCHEMAS_VERSION,
    InlineSchemaDecoder,
    InlineSchemasDecoder,
    SchemaRegistryDecoder,
    parse_avro_schema,
    zero_width_array,
)
from ingest_core.core.spec import InputFormat
from ingest_core.executor.formats import schema_registry
from ingest_core.executor.formats.avro_columns import ColumnarPlan, same_header
from ingest_core.executor.formats.base import Flattener


@dataclass(frozen=True)
class ReaderSchema:
    """A parsed writer schema and how its decoded values become Druid's."""

    parsed: Any
    what: str  # "schema id 3", "the inline schema": for error messages
    binary: bool  # whether a bytes or fixed value can occur anywhere in it

    @classmethod
    def of(cls, schema: Any, what: str, named: dict[str, Any] | None = None) -> "ReaderSchema":
        parsed = parse_avro_schema(schema, {} if named is None else named)
        field = zero_width_array(parsed)
        if field is not None:
            raise ValueError(f"{what} is refused: its field {field!r} is an array of items that take no bytes, so a "
                             "record of a few bytes could hold billions of them")
        text = json.dumps(parsed)
        return cls(parsed, what, '"bytes"' in text or '"fixed"' in text)


class AvroStreamDecoder:
    """One decoder per task: schemas parsed once (per schema id); records decoded one by one (`rows`), or a
    chunk of one schema into columns at once (`columns`)."""

    def __init__(self, fmt: InputFormat):
        self._flatten = Flattener(fmt.flatten_spec)
        self._text: Callable[[bytes], str] = (
            (lambda b: b.decode("utf-8", "replace")) if fmt.binary_as_string  # Druid's StringUtils.fromUtf8
            else (lambda b: base64.b64encode(b).decode("ascii")))
        self._binary_as_string = fmt.binary_as_string
        self._plans: dict[int, ColumnarPlan | None] = {}  # by id() of a ReaderSchema, which the decoder keeps
        self._wanted: dict[frozenset, dict[tuple[str, ...], list[str]]] = {}
        spec = fmt.avro_bytes_decoder
        self._header_size = 0 if isinstance(spec, InlineSchemaDecoder) else 5
        self._schemas: dict[int, ReaderSchema | ValueError] = {}  # by schema id; a failure is kept too
        self._inline: ReaderSchema | None = None
        self._registry: schema_registry.SchemaRegistryClient | None = None
        if isinstance(spec, InlineSchemaDecoder):
            self._inline = ReaderSchema.of(spec.schema, "the inline schema (avroBytesDecoder.schema)")
            self._split: Callable[[bytes], tuple[ReaderSchema, memoryview | bytes]] = self._split_inline
        elif isinstance(spec, InlineSchemasDecoder):
            self._inline_schemas = spec.by_id
            self._split = self._split_versioned
        elif isinstance(spec, SchemaRegistryDecoder):
            self._registry = schema_registry.client_for(schema_registry.RegistryConfig.of_decoder(spec))
            self._split = self._split_confluent
        else:
            raise TypeError(f"an avro_stream format needs an avroBytesDecoder, got {spec!r}")

    # ------------------------------------------------------------------------------------- the headers

    def _split_inline(self, data: bytes) -> tuple[ReaderSchema, bytes]:
        assert self._inline is not None
        return self._inline, data

    def _split_versioned(self, data: bytes) -> tuple[ReaderSchema, memoryview]:
        if len(data) < 5:
            raise ValueError(f"record of {len(data)} bytes is too short for multiple_schemas_inline (a version "
                             "byte and a 4-byte schema id before the Avro binary)")
        if data[0] != MULTIPLE_SCHEMAS_VERSION:
            raise ValueError(f"record starts with version byte {data[0]}, not {MULTIPLE_SCHEMAS_VERSION}: it was not "
                             "written in multiple_schemas_inline's format (version 1, schema id, Avro binary)")
        schema_id = int.from_bytes(data[1:5], "big")
        return self._schema(schema_id, self._inline_reader), memoryview(data)[5:]

    def _split_confluent(self, data: bytes) -> tuple[ReaderSchema, memoryview]:
        schema_id, payload = schema_registry.split_wire_format(data)
        return self._schema(schema_id, self._registry_reader), payload

    def _schema(self, schema_id: int, load: Callable[[int], ReaderSchema]) -> ReaderSchema:
        found = self._schemas.get(schema_id)
        if found is None:
            try:
                found = load(schema_id)
            except schema_registry.RegistryUnavailableError:
                raise  # not kept: the registry may answer for a later record (the client fails fast meanwhile)
            except ValueError as exc:
                found = exc
            self._schemas[schema_id] = found
        if isinstance(found, ValueError):
            raise found
        return found

    def _inline_reader(self, schema_id: int) -> ReaderSchema:
        schema = self._inline_schemas.get(schema_id)
        if schema is None:
            raise ValueError(f"schema id {schema_id} is not in avroBytesDecoder.schemas (ids "
                             f"{sorted(self._inline_schemas)}): add the schema the producer wrote it with")
        return ReaderSchema.of(schema, f"schema id {schema_id}")

    def _registry_reader(self, schema_id: int) -> ReaderSchema:
        assert self._registry is not None
        found = self._registry.schema(schema_id)
        if found.schema_type.upper() != "AVRO":
            raise ValueError(f"schema id {schema_id} is a {found.schema_type} schema, not Avro: the record was "
                             "written by another serializer than Avro's")
        named: dict[str, Any] = {}
        self._parse_references(found, named, set())
        try:
            return ReaderSchema.of(found.schema, f"schema id {schema_id}", named)
        except ValueError as exc:
            raise ValueError(f"schema id {schema_id} from the registry is {exc}") from None

    def _parse_references(self, found: schema_registry.RegisteredSchema, named: dict[str, Any], seen: set) -> None:
        """The named types a registry schema imports from other subjects, parsed first (depth first)."""
        assert self._registry is not None
        for ref in found.references:
            if (ref.subject, ref.version) in seen:
                continue
            seen.add((ref.subject, ref.version))
            referenced = self._registry.referenced(ref)
            self._parse_references(referenced, named, seen)
            parse_avro_schema(referenced.schema, named)

    # ------------------------------------------------------------------------------------- the rows

    def rows(self, data: bytes) -> list[dict[str, Any]]:
        schema, payload = self._split(data)
        value = self.read(schema, payload)
        if not isinstance(value, dict):
            value = {"value": value}  # a primitive schema (a key's, usually): one column
        return [self._flatten(value)]

    def read(self, schema: ReaderSchema, payload: bytes | memoryview) -> Any:
        """The value of one Avro binary written with `schema`, as Druid gives it."""
        buffer = io.BytesIO(payload)
        try:
            value = schemaless_reader(buffer, schema.parsed, None)
        except EOFError:
            raise ValueError(f"the record is truncated: its {len(payload)} bytes end inside a value of "
                             f"{schema.what}") from None
        except IndexError:
            raise ValueError(f"the record does not match {schema.what}: an enum symbol or union branch index is "
                             "out of range") from None
        except UnicodeDecodeError as exc:
            raise ValueError(f"the record does not match {schema.what}: a string is not UTF-8 ({exc.reason} at "
                             f"byte {exc.start})") from None
        except Exception as exc:  # noqa: BLE001 - fastavro's errors on hostile bytes are many: all the record's own
            raise ValueError(f"the record does not match {schema.what}: {type(exc).__name__}: {exc}") from None
        left = len(payload) - buffer.tell()
        if left:
            raise ValueError(f"the record does not match {schema.what}: {left} bytes are left after the value "
                             "(it was written with another schema)")
        return self._druid(value) if schema.binary else value

    def _druid(self, value: Any) -> Any:
        if isinstance(value, bytes):
            return self._text(value)
        if isinstance(value, dict):
            return {k: self._druid(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._druid(v) for v in value]
        return value

    def columns(self, values: list[bytes], needed: set[str]) -> dict[str, pa.Array] | None:
        """The chunk as Arrow columns (those of `needed`) in one columnar pass, or None: records with different
        schemas or headers, a schema, a record or a flattenSpec path the columnar path does not read. The row
        parser then decodes the chunk record by record (`rows`)."""
        wanted = self._wanted.get(frozenset(needed))
        if wanted is None:
            wanted = self._wanted[frozenset(needed)] = self._flatten.columns_wanted(needed)
        if not wanted:
            return None
        header = same_header(values, self._header_size)
        if header is None:
            return None
        try:
            schema = self._split(header)[0]
        except ValueError:
            return None
        if id(schema) not in self._plans:
            self._plans[id(schema)] = ColumnarPlan.of(schema.parsed)
        plan = self._plans[id(schema)]
        if plan is None:
            return None
        return plan.read(values, wanted, skip=self._header_size, text=self._binary_as_string)

    @staticmethod
    def preview(data: bytes | None, limit: int = 64) -> str:
        """A record as a parse exception shows it: hex (it is binary)."""
        data = data or b""
        return data[:limit].hex(" ") + (f" ... ({len(data)} bytes)" if len(data) > limit else "")
