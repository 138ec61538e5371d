"""Druid's deprecated `dataSchema.parser`, rewritten into today's form before the spec is bound.

Older Kafka supervisor specs describe their records with `dataSchema.parser` (`{type: string, parseSpec: {format:
json, timestampSpec, dimensionsSpec, flattenSpec}}`, `avro_stream` with `avroBytesDecoder`, `protobuf` with
`protoBytesDecoder`) where today's have `ioConfig.inputFormat` and `dataSchema.timestampSpec`/`dimensionsSpec`.
`convert_parser(raw)` returns the raw spec in today's form and what it moved; `parse_spec` binds that and warns
once, showing the converted parts, and `ingest convert FILE` prints the whole converted spec.

Druid's rules, kept here:
  - an `ioConfig.inputFormat` that is given wins: Druid's stream task reads the records with it and leaves the
    parser's format unused (`StreamChunkParser`); the parser's timestampSpec/dimensionsSpec still fill what the
    dataSchema leaves out;
  - a `dataSchema.timestampSpec`/`dimensionsSpec` that is given wins over the parseSpec's (`DataSchema.getParser`);
  - `parser: null` is no parser; a parser's `type` defaults to `string`, a parseSpec's `format` to `tsv`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ingest_core.core.binding import did_you_mean, join
from ingest_core.core.errors import SpecProblem, shown
from ingest_core.core.json_path import JsonPath, JsonPathError

PARSER_TYPES = ("string", "avro_stream", "protobuf")
# parsers Druid has that cannot read a Kafka record, with why
_NOT_FOR_STREAMS = {
    "map": "reads rows already in memory, not Kafka records",
    "noop": "reads rows already in memory, not Kafka records",
    "hadoopyString": "is for Hadoop batch ingestion; a Kafka spec's text parser is type: string",
    "avro_hadoop": "is for Hadoop batch ingestion; Avro records from Kafka use type: avro_stream",
    "parquet": "is for Hadoop batch ingestion of Parquet files, not Kafka records",
    "parquet-avro": "is for Hadoop batch ingestion of Parquet files, not Kafka records",
    "orc": "is for Hadoop batch ingestion of ORC files, not Kafka records",
}
TEXT_FORMATS = ("json", "csv", "tsv", "delimited", "regex")
# parseSpec formats refused by name, with what to write instead
_REFUSED_FORMATS = {
    "javascript": "JavaScript parsing is not supported: read the records with format json, csv, tsv or regex and "
                  "compute the rest with transformSpec.transforms (Druid expressions)",
    "jsonLowercase": "jsonLowercase lower-cases every field name, which no inputFormat does: use format json and "
                     "name the fields as the records spell them (or rename them with transformSpec.transforms)",
    "timeAndDims": "timeAndDims names no record format: a string parser needs format json, csv, tsv or regex",
    "avro": "an avro parseSpec goes with parser type avro_stream and its avroBytesDecoder",
    "protobuf": "Protobuf records are read by parser type protobuf (with protoBytesDecoder) and a json parseSpec",
}
_SPEC_PARTS = {"format", "timestampSpec", "dimensionsSpec"}
# each parseSpec format's own keys (besides _SPEC_PARTS), and the inputFormat key each becomes
_FORMAT_KEYS: dict[str, dict[str, str]] = {
    "json": {"flattenSpec": "flattenSpec", "featureSpec": "featureSpec", "keepNullColumns": "keepNullColumns"},
    "csv": {"columns": "columns", "listDelimiter": "listDelimiter", "hasHeaderRow": "findColumnsFromHeader",
            "skipHeaderRows": "skipHeaderRows"},
    "tsv": {"columns": "columns", "listDelimiter": "listDelimiter", "delimiter": "delimiter",
            "hasHeaderRow": "findColumnsFromHeader", "skipHeaderRows": "skipHeaderRows"},
    "regex": {"pattern": "pattern", "columns": "columns", "listDelimiter": "listDelimiter"},
    "avro": {"flattenSpec": "flattenSpec"},
    "protobuf-json": {"flattenSpec": "flattenSpec"},  # a protobuf parser's json parseSpec
}
_PARSER_KEYS = {
    "string": {"type", "parseSpec", "encoding"},
    "avro_stream": {"type", "parseSpec", "avroBytesDecoder", "binaryAsString", "extractUnionsByType"},
    "protobuf": {"type", "parseSpec", "protoBytesDecoder", "descriptor", "protoMessageType"},
}
_MOVED_FROM_PARSER = ("avroBytesDecoder", "binaryAsString", "extractUnionsByType", "protoBytesDecoder")


@dataclass(frozen=True)
class Conversion:
    """A spec whose dataSchema had a `parser` key, in today's form."""

    raw: dict[str, Any]  # the whole spec, the parser replaced
    path: str  # where the parser was, e.g. spec.dataSchema.parser
    converted: dict[str, Any] = field(default_factory=dict)  # field path -> the JSON put there
    notes: tuple[str, ...] = ()  # what Druid's rules left unused
    problems: tuple[SpecProblem, ...] = ()
    unknown: tuple[SpecProblem, ...] = ()  # fields Druid ignores: warnings, errors only in strict mode

    @property
    def warning(self) -> str | None:
        """The one warning a converted spec loads with: the converted parts as today's JSON; None for `parser:
        null` (nothing to convert)."""
        if not self.converted and not self.notes:
            return None
        notes = "".join(f"; {note}" for note in self.notes)
        if not self.converted:
            return f"is Druid's deprecated parser form, and none of it is used{notes}. Remove the parser"
        parts = "; ".join(f"{where}: {_json(value)}" for where, value in self.converted.items())
        return (f"is Druid's deprecated parser form, read as today's form: {parts}{notes}. Write these in place of "
                "the parser (`ingest convert FILE` prints the whole spec converted)")

    def traced(self, problems: list[SpecProblem]) -> list[SpecProblem]:
        """`problems`, those in a converted part saying which part of the parser it came from."""
        out = []
        for p in problems:
            origin = next((self._origin(where) for where in self.converted
                           if p.path == where or p.path.startswith(where + ".") or p.path.startswith(where + "[")),
                          None)
            out.append(SpecProblem(p.path, f"{p.message} (converted from {origin})") if origin else p)
        return out

    def _origin(self, where: str) -> str:
        leaf = where.rsplit(".", 1)[-1]
        return join(join(self.path, "parseSpec"), leaf) if leaf != "inputFormat" else self.path


def convert_parser(raw: Any) -> Conversion | None:
    """`raw` (a parsed spec file) in today's form when its dataSchema has a `parser` key; None otherwise, and
    when the spec's shape is too broken to find one (binding reports that)."""
    if not isinstance(raw, dict):
        return None
    nested = "spec" in raw
    sections = raw.get("spec") if nested else raw
    prefix = "spec" if nested else ""
    if not isinstance(sections, dict) or not isinstance(sections.get("dataSchema"), dict):
        return None
    data_schema: dict[str, Any] = sections["dataSchema"]
    if "parser" not in data_schema:
        return None
    path = join(join(prefix, "dataSchema"), "parser")
    parser = data_schema["parser"]
    schema_out = {k: v for k, v in data_schema.items() if k != "parser"}
    io_raw = sections.get("ioConfig")
    if parser is None:  # Druid: no parser; an `inputFormat: null` beside it stays for binding to report
        return Conversion(_replace(raw, nested, {**sections, "dataSchema": schema_out}), path)

    converter = _Converter(path)
    fmt, spec_parts = converter.parser(parser)
    converted: dict[str, Any] = {}
    notes: list[str] = []
    io_path = join(prefix, "ioConfig")
    given_format = io_raw.get("inputFormat") if isinstance(io_raw, dict) else None
    if given_format is not None:
        notes.append(f"{join(io_path, 'inputFormat')} is given, so it reads the records, as in Druid: the "
                     "parser's record format is unused")
    elif fmt is not None and isinstance(io_raw, dict):
        io_raw = {**io_raw, "inputFormat": fmt}
        converted[join(io_path, "inputFormat")] = fmt
    rebuilt: dict[str, Any] = {}
    for key, value in data_schema.items():
        if key != "parser":
            if not (value is None and key in rebuilt):  # a `timestampSpec: null` after the parser: the parser's
                rebuilt[key] = value
            continue
        for part in ("timestampSpec", "dimensionsSpec"):  # where the parser was, for a readable converted file
            if part not in spec_parts:
                continue
            where = join(join(prefix, "dataSchema"), part)
            if data_schema.get(part) is None:
                rebuilt[part] = spec_parts[part]
                converted[where] = spec_parts[part]
            elif _meaningful(data_schema[part]) != _meaningful(spec_parts[part]):
                notes.append(f"{where} is given, so the parseSpec's {part} is unused, as in Druid")
    sections_out = {**sections, "dataSchema": rebuilt}
    if isinstance(io_raw, dict):
        sections_out["ioConfig"] = io_raw
    return Conversion(_replace(raw, nested, sections_out), path, converted, tuple(notes), tuple(converter.problems),
                      tuple(converter.unknown))


def _meaningful(value: Any) -> Any:
    """`value` without the keys that say nothing (null, [], {}): Druid's own specs repeat the parseSpec's parts in
    the dataSchema with and without `dimensionExclusions: []`."""
    if isinstance(value, dict):
        return {k: v for k, v in value.items() if v not in (None, [], {})}
    return value


def _replace(raw: dict[str, Any], nested: bool, sections: dict[str, Any]) -> dict[str, Any]:
    return {**raw, "spec": sections} if nested else sections


class _Converter:
    """One parser's conversion; problems collect with their field paths."""

    def __init__(self, path: str):
        self.path = path
        self.problems: list[SpecProblem] = []
        self.unknown: list[SpecProblem] = []

    def error(self, path: str, message: str) -> None:
        self.problems.append(SpecProblem(path, message))

    def parser(self, parser: Any) -> tuple[dict[str, Any] | None, dict[str, Any]]:
        """(the inputFormat, the parseSpec's timestampSpec/dimensionsSpec)"""
        if not isinstance(parser, dict):
            self.error(self.path, "expected a parser object such as {type: string, parseSpec: {format: json, "
                       f"timestampSpec: {{...}}, dimensionsSpec: {{...}}}}}}, got {shown(parser)}; or drop parser and "
                       "give ioConfig.inputFormat")
            return None, {}
        kind = parser.get("type", "string")  # Druid's default parser
        if not isinstance(kind, str):
            self.error(join(self.path, "type"), f"expected a parser type such as string, got {shown(kind)}")
            return None, {}
        if kind in _NOT_FOR_STREAMS:
            self.error(join(self.path, "type"), f"parser type {shown(kind)} {_NOT_FOR_STREAMS[kind]}")
            return None, {}
        if kind not in PARSER_TYPES:
            self.error(join(self.path, "type"), f"parser type {shown(kind)} is not supported"
                       f"{did_you_mean(str(kind), PARSER_TYPES)}; a Kafka spec's parser is string, avro_stream or "
                       "protobuf (or give ioConfig.inputFormat)")
            return None, {}
        self._unknown(parser, _PARSER_KEYS[kind], self.path, f"{kind} parser")
        spec_path = join(self.path, "parseSpec")
        parse_spec = parser.get("parseSpec")
        if not isinstance(parse_spec, dict):
            self.error(spec_path, "required: the parseSpec, e.g. {format: json, timestampSpec: {column: "
                       f"timestamp}}, dimensionsSpec: {{dimensions: [page]}}}}" if parse_spec is None else
                       f"expected an object such as {{format: json, ...}}, got {shown(parse_spec)}")
            return None, {}
        spec_parts = {k: parse_spec[k] for k in ("timestampSpec", "dimensionsSpec") if parse_spec.get(k) is not None}
        fmt_name = parse_spec.get("format", "tsv")  # Druid's default parseSpec
        if not isinstance(fmt_name, str):
            self.error(join(spec_path, "format"), f"expected a format such as json, got {shown(fmt_name)}")
            return None, spec_parts
        if kind == "string":
            fmt = self._text(parse_spec, fmt_name, spec_path, parser.get("encoding"))
        elif kind == "avro_stream":
            fmt = self._nested(parse_spec, fmt_name, spec_path, "avro_stream", ("avro", "timeAndDims"), "avro")
        else:
            fmt = self._nested(parse_spec, fmt_name, spec_path, "protobuf", ("json",), "protobuf-json")
        if fmt is None:
            return None, spec_parts
        for key in _MOVED_FROM_PARSER:
            if key in parser:
                fmt[key] = parser[key]
        if kind == "protobuf":
            self._proto_decoder(parser, fmt)
        return fmt, spec_parts

    def _text(self, parse_spec: dict[str, Any], name: Any, path: str, encoding: Any) -> dict[str, Any] | None:
        if encoding is not None and str(encoding).replace("-", "").lower() != "utf8":
            self.error(join(self.path, "encoding"), f"only UTF-8 records are read, not {encoding!r}: remove "
                       "encoding, and have the producers write UTF-8")
        if name in _REFUSED_FORMATS:
            self.error(join(path, "format"), _REFUSED_FORMATS[name])
            return None
        if name not in TEXT_FORMATS:
            self.error(join(path, "format"), f"parseSpec format {shown(name)} is not known"
                       f"{did_you_mean(str(name), TEXT_FORMATS)}; a string parser reads {', '.join(TEXT_FORMATS)}")
            return None
        keys = _FORMAT_KEYS["tsv" if name == "delimited" else name]
        self._unknown(parse_spec, _SPEC_PARTS | set(keys), path, f"{name} parseSpec")
        fmt: dict[str, Any] = {"type": "tsv" if name == "delimited" else name}
        for key, modern in keys.items():
            if parse_spec.get(key) is not None:
                fmt[modern] = parse_spec[key]
        return fmt

    def _nested(self, parse_spec: dict[str, Any], name: Any, path: str, fmt_type: str, accepted: tuple[str, ...],
                keys_of: str) -> dict[str, Any] | None:
        if name not in accepted:
            why = ("Druid's protobuf parser no longer reads it" if name == "timeAndDims" else "")
            self.error(join(path, "format"), f"a {fmt_type} parser takes a parseSpec of format "
                       f"{' or '.join(accepted)}, not {shown(name)}{': ' + why if why else ''}")
            return None
        keys = _FORMAT_KEYS[keys_of] if name != "timeAndDims" else {}
        self._unknown(parse_spec, _SPEC_PARTS | set(keys), path, f"{name} parseSpec")
        fmt: dict[str, Any] = {"type": fmt_type}
        flatten = parse_spec.get("flattenSpec")
        if flatten is not None:
            # Druid's protobuf parser flattened the JSON of the message, so jq and tree fields worked; the
            # protobuf inputFormat takes path fields only: the same paths, as JSONPath
            fmt["flattenSpec"] = _as_path_fields(flatten) if fmt_type == "protobuf" else flatten
        return fmt

    def _proto_decoder(self, parser: dict[str, Any], fmt: dict[str, Any]) -> None:
        """Druid's older protobuf parser named the descriptor file on the parser itself."""
        older = {k: parser[k] for k in ("descriptor", "protoMessageType") if k in parser}
        if older and "protoBytesDecoder" in parser:
            self.error(join(self.path, "descriptor" if "descriptor" in older else "protoMessageType"),
                       "descriptor/protoMessageType and protoBytesDecoder contradict each other: keep "
                       "protoBytesDecoder, e.g. {type: file, descriptor: file:///tmp/metrics.desc, "
                       "protoMessageType: Metrics}")
        elif older:
            fmt["protoBytesDecoder"] = {"type": "file", **older}

    def _unknown(self, obj: dict[str, Any], allowed: set[str], path: str, what: str) -> None:
        for key in obj:
            if key not in allowed:
                self.unknown.append(SpecProblem(join(path, str(key)),
                                                f"unknown field for a {what}" + did_you_mean(str(key), allowed)))


def _as_path_fields(flatten: Any) -> Any:
    if not isinstance(flatten, dict) or not isinstance(flatten.get("fields"), list):
        return flatten
    fields = []
    for f in flatten["fields"]:
        if isinstance(f, dict) and (f.get("type") == "jq" or f.get("type") == "tree" and f.get("nodes")):
            try:
                path = (JsonPath.from_jq(str(f.get("expr") or "")) if f["type"] == "jq"
                        else JsonPath.from_nodes([str(n) for n in f["nodes"]]))
            except (JsonPathError, TypeError):
                fields.append(f)  # left as written: validation refuses it, saying why
                continue
            f = {k: v for k, v in f.items() if k not in ("nodes",)} | {"type": "path", "expr": path.text}
        fields.append(f)
    return {**flatten, "fields": fields}


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)  # YAML reads some values as dates


