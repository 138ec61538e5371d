"""`ioConfig.inputFormat`: the formats a record's bytes are read in, their flattenSpec and decoders."""

from __future__ import annotations

import base64
import binascii
import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

from ingest_core.core.avro_schema import AvroBytesDecoder, SchemaRegistryDecoder
from ingest_core.core.binding import (
    MISSING_VALUE,
    BindContext,
    bind_object,
    did_you_mean,
    join,
    json_key,
    spec_field,
    to_raw,
)
from ingest_core.core.errors import shown
from ingest_core.core.json_path import JsonPath, JsonPathError
from ingest_core.core.regex_format import RegexFormatError, compile_pattern


INPUT_FORMAT_TYPES = ("json", "csv", "tsv", "delimited", "regex", "avro_stream", "protobuf", "kafka")


FLATTEN_FIELD_TYPES = ("root", "path", "jq", "tree")


@dataclass(frozen=True)
class FlattenField:
    """A flattenSpec field: `root` (a top-level field), `path` (a JSONPath), `jq` (a jq path such as `.a.b`,
    read as the JSONPath it names) or `tree` (`nodes`, the field names from the root)."""

    type: str
    name: str
    expr: str | None = None
    nodes: list[str] | None = None

    @property
    def json_path(self) -> JsonPath | None:
        """The path a `path`, `jq` or `tree` field follows from the record's root (None for `root`); raises
        JsonPathError for one validation refuses."""
        if self.type == "path":
            return JsonPath.parse(self.expr or "")
        if self.type == "jq":
            return JsonPath.from_jq(self.expr or "")
        if self.type == "tree":
            return JsonPath.from_nodes(list(self.nodes or ()))
        return None

    @classmethod
    def _from_raw(cls, raw: Any, path: str, ctx: BindContext) -> Any:
        if isinstance(raw, dict) and isinstance(raw.get("type"), str):
            raw = {**raw, "type": raw["type"].lower()}  # Druid's JSONPathFieldType reads any case
        return bind_object(cls, raw, path, ctx, custom_hook=False)

    def _validate(self, path: str, ctx: BindContext) -> None:
        if self.type not in FLATTEN_FIELD_TYPES:
            ctx.error(join(path, "type"), f"unknown flattenSpec field type {shown(self.type)}"
                      f"{did_you_mean(self.type, FLATTEN_FIELD_TYPES)}; use {', '.join(FLATTEN_FIELD_TYPES)}")
        elif self.type in ("path", "jq") and not self.expr:
            example = "a JSONPath such as '$.user.name'" if self.type == "path" else "a jq path such as '.user.name'"
            ctx.error(join(path, "expr"), f"a '{self.type}' field needs expr, {example}")
        elif self.type == "tree" and not self.nodes:
            ctx.error(join(path, "nodes"), "a 'tree' field needs nodes, the field names from the root, e.g. "
                      "[user, name]")
        else:
            try:
                self.json_path
            except JsonPathError as exc:
                ctx.error(join(path, "expr"), str(exc))
        if self.nodes is not None and self.type != "tree":
            ctx.error(join(path, "nodes"), f"only 'tree' fields take nodes; a '{self.type}' field reads expr")
        if not self.name.strip():
            ctx.error(join(path, "name"), "a flattenSpec field needs a name: the column it produces")

    def _to_raw(self) -> Any:
        out: dict[str, Any] = {"type": self.type, "name": self.name, "expr": self.expr}
        return out if self.nodes is None else {**out, "nodes": list(self.nodes)}


@dataclass(frozen=True)
class FlattenSpec:
    use_field_discovery: bool = True
    fields: list[FlattenField] = spec_field(default_factory=list)

    def _validate(self, path: str, ctx: BindContext) -> None:
        seen: set[str] = set()
        for i, f in enumerate(self.fields):
            if f.name in seen:
                ctx.error(join(join(path, "fields"), i), f"flattenSpec field {f.name!r} is defined twice: rename "
                          "or remove one")
            seen.add(f.name)


PROTO_DECODER_TYPES = ("file", "inline", "schema_registry")


@dataclass(frozen=True)
class ProtoBytesDecoder:
    """Druid's `protoBytesDecoder`: `file` (a descriptor set compiled by protoc, at a path or URL, and the message
    type in it), `inline` (the same set, base64, in `descriptorString`) or `schema_registry` (Confluent's wire
    format; Druid's default when `type` is left out). A `file` descriptor is read where the spec is staged and
    shipped to the executors inline (`ingest_core.executor.formats.protobuf.inline_descriptors`)."""

    type: str = "schema_registry"
    descriptor: str | None = None
    descriptor_string: str | None = None
    proto_message_type: str | None = None  # short or full name; default: the first message of the set
    url: str | None = None
    urls: list[str] | None = None
    capacity: int | None = None  # Druid's schema cache size: accepted; schemas are cached by id, never evicted
    config: dict[str, Any] | None = None
    headers: dict[str, str] | None = None

    _KEYS_BY_TYPE: ClassVar[dict[str, set[str]]] = {
        "file": {"descriptor", "protoMessageType"},
        "inline": {"descriptorString", "protoMessageType"},
        "schema_registry": {"url", "urls", "capacity", "config", "headers"},
    }

    @classmethod
    def _from_raw(cls, raw: Any, path: str, ctx: BindContext) -> Any:
        if not isinstance(raw, dict):
            ctx.error(path, "expected a protoBytesDecoder object such as {type: file, descriptor: "
                      f"file:///tmp/metrics.desc, protoMessageType: Metrics}}, got {shown(raw)}")
            return MISSING_VALUE
        kind = raw.get("type", "schema_registry")
        if kind not in PROTO_DECODER_TYPES:
            ctx.error(join(path, "type"), f"protoBytesDecoder type {shown(kind)} is not supported"
                      f"{did_you_mean(str(kind), PROTO_DECODER_TYPES)}; supported: {', '.join(PROTO_DECODER_TYPES)}")
            return MISSING_VALUE
        return _bind_typed(cls, raw, path, ctx, cls._KEYS_BY_TYPE[kind], f"{kind} protoBytesDecoder")

    def _check(self, path: str, ctx: BindContext) -> None:
        if self.type == "file" and not (self.descriptor or "").strip():
            ctx.error(join(path, "descriptor"), "a file protoBytesDecoder needs descriptor: the descriptor set "
                      "`protoc -o metrics.desc metrics.proto` wrote, as a path or URL (file:///tmp/metrics.desc)")
        if self.type == "inline":
            try:
                base64.b64decode(self.descriptor_string or "", validate=True)
            except (binascii.Error, ValueError):
                ctx.error(join(path, "descriptorString"), "is not base64: put the descriptor set `protoc -o` "
                          "wrote here base64-encoded (`base64 -w0 metrics.desc`)")
            if not self.descriptor_string:
                ctx.error(join(path, "descriptorString"), "an inline protoBytesDecoder needs descriptorString: "
                          "the descriptor set `protoc -o` wrote, base64-encoded")
        if self.registry is not None:
            self.registry._validate(path, ctx)

    @property
    def registry(self) -> SchemaRegistryDecoder | None:
        """`schema_registry`: the same decoder settings (urls, config, headers, their credentials) as Avro's."""
        if self.type != "schema_registry":
            return None
        return SchemaRegistryDecoder(self.type, self.url, self.urls, self.capacity, dict(self.config or {}),
                                     dict(self.headers or {}))

    @property
    def has_literal_secrets(self) -> bool:
        return self.registry is not None and self.registry.has_literal_secrets

    def _to_raw(self, redact: bool = True) -> Any:
        if self.registry is not None:
            return self.registry._to_raw(redact)
        return _typed_to_raw(self, self._KEYS_BY_TYPE[self.type])


@dataclass(frozen=True)
class InputFormat:
    """`json`, `csv`, `tsv`/`delimited`, `regex`, `avro_stream`, `protobuf`, or `kafka` (which wraps a
    `valueFormat`)."""

    type: str
    # json
    flatten_spec: FlattenSpec | None = None
    feature_spec: dict[str, Any] | None = None
    keep_null_columns: bool | None = None  # None: Druid's default, `keeps_null_columns`
    assume_newline_delimited: bool = False
    use_json_node_reader: bool = False
    # csv / tsv / delimited
    columns: list[str] | None = None
    list_delimiter: str | None = None
    delimiter: str | None = None
    find_columns_from_header: bool | None = None
    skip_header_rows: int = 0
    has_header_row: bool | None = None
    try_parse_numbers: bool = False
    # regex (and columns, listDelimiter)
    pattern: str | None = None
    # avro_stream (and flattenSpec)
    avro_bytes_decoder: AvroBytesDecoder | None = None
    binary_as_string: bool = False
    extract_unions_by_type: bool = False
    # kafka
    value_format: InputFormat | None = None
    key_format: InputFormat | None = None
    header_format: dict[str, Any] | None = None
    header_column_prefix: str = "kafka.header."
    key_column_name: str = "kafka.key"
    timestamp_column_name: str = "kafka.timestamp"
    topic_column_name: str = "kafka.topic"
    # protobuf
    proto_bytes_decoder: ProtoBytesDecoder | None = None

    _KEYS_BY_TYPE: ClassVar[dict[str, set[str]]] = {
        "json": {"flattenSpec", "featureSpec", "keepNullColumns", "assumeNewlineDelimited", "useJsonNodeReader"},
        "csv": {"columns", "listDelimiter", "findColumnsFromHeader", "skipHeaderRows", "hasHeaderRow", "tryParseNumbers"},
        "tsv": {"columns", "listDelimiter", "delimiter", "findColumnsFromHeader", "skipHeaderRows", "hasHeaderRow",
                "tryParseNumbers"},
        "regex": {"pattern", "columns", "listDelimiter"},
        "avro_stream": {"flattenSpec", "avroBytesDecoder", "binaryAsString", "extractUnionsByType"},
        "kafka": {"valueFormat", "keyFormat", "headerFormat", "headerColumnPrefix", "keyColumnName",
                  "timestampColumnName", "topicColumnName"},
        "protobuf": {"flattenSpec", "protoBytesDecoder", "binaryAsString"},
    }

    @classmethod
    def _from_raw(cls, raw: Any, path: str, ctx: BindContext) -> Any:
        if not isinstance(raw, dict):
            ctx.error(path, f"expected an inputFormat object such as {{type: json}}, got {shown(raw)}")
            return MISSING_VALUE
        kind = raw.get("type")
        if kind not in INPUT_FORMAT_TYPES:
            hint = did_you_mean(str(kind), INPUT_FORMAT_TYPES)
            ctx.error(join(path, "type"), f"input format {shown(kind)} is not supported{hint}; supported: "
                      + ", ".join(INPUT_FORMAT_TYPES))
            return MISSING_VALUE
        if kind == "kafka" and "headerLabelPrefix" in raw:
            raw = _renamed(raw, "headerLabelPrefix", "headerColumnPrefix", path, ctx)
        return _bind_typed(cls, raw, path, ctx, cls._KEYS_BY_TYPE["tsv" if kind == "delimited" else kind],
                           f"{kind} input format")

    def _check(self, path: str, ctx: BindContext) -> None:
        if self.type in ("csv", "tsv", "delimited"):
            from_header = self.find_columns_from_header
            if from_header is None:
                from_header = bool(self.has_header_row)
            if not from_header and not self.columns:
                ctx.error(join(path, "columns"), f"a {self.type} input format needs columns, "
                          "or findColumnsFromHeader: true")
            if from_header and self.columns:
                ctx.error(join(path, "columns"), "columns and findColumnsFromHeader: true contradict each other")
        if self.type == "regex":
            if not self.pattern:
                ctx.error(join(path, "pattern"), "a regex input format needs pattern, a regular expression whose "
                          "groups are the columns, matching each line whole, e.g. '(\\S+) (\\S+) (.*)'")
            else:
                try:
                    compile_pattern(self.pattern)
                except RegexFormatError as exc:
                    ctx.error(join(path, "pattern"), str(exc))
        if self.type == "kafka":
            if self.value_format is None:
                ctx.error(join(path, "valueFormat"), "the kafka input format needs a valueFormat, e.g. {type: json}")
            elif self.value_format.type == "kafka":
                ctx.error(join(path, "valueFormat"), "valueFormat cannot itself be of type kafka")
        if self.type == "avro_stream":
            if self.avro_bytes_decoder is None:
                ctx.error(join(path, "avroBytesDecoder"), "an avro_stream input format needs an avroBytesDecoder: "
                          "{type: schema_registry, url: ...}, {type: schema_inline, schema: {...}} or "
                          "{type: multiple_schemas_inline, schemas: {...}}")
            if self.extract_unions_by_type:
                ctx.error(join(path, "extractUnionsByType"), "is not supported: unions read as their value; "
                          "remove it (or set it to false)")

        if self.type in ("avro_stream", "protobuf"):
            what = "Avro" if self.type == "avro_stream" else "Protobuf"
            for i, f in enumerate(self.flatten_spec.fields if self.flatten_spec else ()):
                if f.type in ("jq", "tree"):
                    try:
                        same = f.json_path
                    except JsonPathError:
                        same = None
                    instead = f" (here {{type: path, name: {f.name}, expr: '{same.text}'}})" if same else ""
                    ctx.error(join(join(join(path, "flattenSpec"), "fields"), i), f"{what} takes root and path "
                              f"fields only, as in Druid: write a path field with a JSONPath{instead}")
        if self.type == "protobuf":
            if self.proto_bytes_decoder is None:
                ctx.error(join(path, "protoBytesDecoder"), "the protobuf input format needs protoBytesDecoder, e.g. "
                          "{type: file, descriptor: file:///tmp/metrics.desc, protoMessageType: Metrics}")
            if self.binary_as_string:
                ctx.warn(join(path, "binaryAsString"), "has no effect on protobuf (Druid ignores it too): a bytes "
                         "field reads as its base64 text")

    @property
    def has_literal_secrets(self) -> bool:
        """Whether a redacted copy of this format lacks something the executors need (a registry password)."""
        return any(f is not None and f.has_literal_secrets for f in (self.value_format, self.key_format)) or (
            isinstance(self.avro_bytes_decoder, SchemaRegistryDecoder) and self.avro_bytes_decoder.has_literal_secrets) or (
            self.proto_bytes_decoder is not None and self.proto_bytes_decoder.has_literal_secrets)

    @property
    def effective_delimiter(self) -> str:
        if self.type == "csv":
            return ","
        return self.delimiter if self.delimiter is not None else "\t"

    @property
    def keeps_null_columns(self) -> bool:
        """Whether a field whose value is null is still discovered (a column of nulls when it is null in every
        row). Druid's JsonInputFormat.isKeepNullColumns: `keepNullColumns`, else true with a flattenSpec that
        discovers fields; csv and tsv rows hold every column, whatever its value."""
        if self.type in ("csv", "tsv", "delimited"):
            return True
        if self.type != "json":
            return False
        if self.keep_null_columns is not None:
            return self.keep_null_columns
        return self.flatten_spec is not None and self.flatten_spec.use_field_discovery

    @property
    def columns_from_header(self) -> bool:
        if self.find_columns_from_header is not None:
            return self.find_columns_from_header
        return bool(self.has_header_row)

    def _to_raw(self, redact: bool = True) -> Any:
        """`redact=False`: with the registry credentials, for the executors' secret options only."""
        allowed = self._KEYS_BY_TYPE["tsv" if self.type == "delimited" else self.type]
        out: dict[str, Any] = {"type": self.type}
        for f in dataclasses.fields(self):
            key, value = json_key(f), getattr(self, f.name)
            if key in allowed and value != f.default:
                out[key] = (value._to_raw(redact) if isinstance(value, (InputFormat, AvroBytesDecoder, ProtoBytesDecoder))
                            else to_raw(value))
        return out


def _bind_typed(cls: type, raw: dict[str, Any], path: str, ctx: BindContext, allowed: set[str], what: str) -> Any:
    """An object whose `type` chose its fields (`allowed`): other keys are `ctx.unknown` (a `null` one is left
    out, as Druid does: its export writes other types' fields as null), then its `_check`."""
    allowed = allowed | {"type"}
    for key in raw:
        if key not in allowed and raw[key] is not None:
            ctx.unknown(join(path, key), f"unknown field for a {what}" + did_you_mean(key, allowed))
    obj = bind_object(cls, {k: v for k, v in raw.items() if k in allowed}, path, ctx, custom_hook=False)
    if obj is not MISSING_VALUE:
        obj._check(path, ctx)
    return obj


def _renamed(raw: dict[str, Any], old: str, new: str, path: str, ctx: BindContext) -> dict[str, Any]:
    """`raw` with Druid's older name `old` of field `new` read as `new` (Druid's own tutorials still write the
    older one); both, with different values, is a warning: `new` wins, as in Druid."""
    out = {k: v for k, v in raw.items() if k != old}
    if raw.get(new) is None:
        out[new] = raw[old]
    elif raw[old] is not None and raw[old] != raw[new]:
        ctx.warn(join(path, old), f"ignored: the older name of {new}, which is also set (to {raw[new]!r}) and wins")
    return out


def _typed_to_raw(obj: Any, allowed: set[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"type": obj.type}
    for f in dataclasses.fields(obj):
        key, value = json_key(f), getattr(obj, f.name)
        if key in allowed and value != f.default:
            out[key] = to_raw(value)
    return out
