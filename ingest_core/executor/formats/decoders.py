"""Value decoders: one per `inputFormat` type, each turning one Kafka record's bytes into input rows.

A decoder is built once per task from its `InputFormat` and is called per record: `rows(data) -> list of
dicts` (a record may hold several rows). A record it cannot read raises ValueError (or UnicodeError,
csv.Error) with a message that says why; the row parser counts it as unparseable, never failing the task.
Decoders run on Spark executors: pyarrow and decoding libraries only. This module holds JSON's and the text
formats' decoders (csv, tsv, delimited, regex) and the table of every type's decoder; Avro's and Protobuf's
are in their own modules, and what they all share in `base`.
"""

from __future__ import annotations

import csv
import json
from typing import Any, Callable

from ingest_core.core.errors import shown
from ingest_core.core.regex_format import compile_pattern, default_columns
from ingest_core.core.spec import InputFormat
from ingest_core.executor.formats.avro import AvroStreamDecoder
from ingest_core.executor.formats.base import (
    DEFAULT_LIST_DELIMITER,
    Decoder,
    Flattener,
    json_text,
    text_value,
)
from ingest_core.executor.formats.protobuf_decoder import ProtobufDecoder


class JsonDecoder:
    """JSON values; a record may hold several concatenated objects (one row each), like Druid's JsonReader."""

    _decoder = json.JSONDecoder()

    def __init__(self, fmt: InputFormat):
        self._flatten = Flattener(fmt.flatten_spec)
        self.paths = self._flatten.paths
        self.discovery = self._flatten.discovery

    def rows(self, data: bytes) -> list[dict[str, Any]]:
        text = data.decode("utf-8")
        escaped = "\\u" in text  # only an escape can decode to a lone surrogate
        out, pos, n = [], 0, len(text)
        while True:
            while pos < n and text[pos] in " \t\r\n":
                pos += 1
            if pos >= n:
                break
            doc, pos = self._decoder.raw_decode(text, pos)
            if not isinstance(doc, dict):
                raise ValueError(f"expected a JSON object, got {type(doc).__name__}")
            if escaped:
                try:
                    json_text(doc).encode("utf-8")
                except UnicodeEncodeError:
                    raise ValueError("a string holds a lone UTF-16 surrogate escape (such as \\ud800): not "
                                     "valid Unicode text") from None
            out.append(self._flatten(doc))
        if not out:
            raise ValueError("no JSON object in record")
        return out


class TextDecoder:
    """csv / tsv / delimited: each record is a small text file (optional header rows, then rows)."""

    def __init__(self, fmt: InputFormat):
        self.fmt = fmt
        self.delimiter = fmt.effective_delimiter
        self.list_delimiter = fmt.list_delimiter if fmt.list_delimiter is not None else DEFAULT_LIST_DELIMITER
        self.quoted = fmt.type == "csv"

    def _split(self, lines: list[str]) -> list[list[str]]:
        if self.quoted:
            return list(csv.reader(lines, delimiter=self.delimiter, strict=True))
        return [line.split(self.delimiter) for line in lines]

    def rows(self, data: bytes) -> list[dict[str, Any]]:
        lines = [ln for ln in data.decode("utf-8").splitlines() if ln != ""]
        lines = lines[self.fmt.skip_header_rows:]
        columns = self.fmt.columns or []
        if self.fmt.columns_from_header:
            if not lines:
                raise ValueError("record has no header line (findColumnsFromHeader is true)")
            columns = self._split(lines[:1])[0]
            lines = lines[1:]
        out = []
        for values in self._split(lines):
            if len(values) > len(columns):
                raise ValueError(f"found {len(values)} values but only {len(columns)} columns {columns}")
            row: dict[str, Any] = {}
            for name, raw in zip(columns, values):
                row[name] = self._value(raw)
            out.append(row)
        return out

    def _value(self, raw: str) -> Any:
        return text_value(raw, self.list_delimiter, self.fmt.try_parse_numbers)


class RegexDecoder:
    """regex: each line of a record is one row, the pattern's groups its columns (Druid's RegexReader). A line
    the pattern does not match whole (an empty one too) makes the record unparseable; without `columns` the groups
    are column_1, column_2, ...; groups past the named columns are left out, as Druid does."""

    def __init__(self, fmt: InputFormat):
        self.text = fmt.pattern or ""
        self.pattern = compile_pattern(self.text)
        # not `columns`: a decoder's `columns` is its whole-chunk columnar reader (`RowParser._plan_columnar`)
        self.names = fmt.columns or default_columns(self.pattern.groups)
        self.list_delimiter = fmt.list_delimiter if fmt.list_delimiter is not None else DEFAULT_LIST_DELIMITER

    def rows(self, data: bytes) -> list[dict[str, Any]]:
        out = []
        lines = data.decode("utf-8").split("\n")  # Druid's FastLineIterator: LF or CR LF ends a line, CR alone not
        if lines[-1] == "":
            lines.pop()  # a final line break ends the last line; it starts none
        for line in lines:
            line = line.removesuffix("\r")
            m = self.pattern.fullmatch(line)  # an empty line is a line too: unparseable unless the pattern matches it
            if m is None:
                raise ValueError(f"line {shown(line)} does not match the pattern {self.text!r}")
            out.append({name: text_value(value, self.list_delimiter) for name, value in zip(self.names, m.groups())})
        return out


# the decoder class of each inputFormat type (`kafka` wraps one of these for its value and key)
DECODERS: dict[str, Callable[[InputFormat], Decoder]] = {
    "json": JsonDecoder,
    "csv": TextDecoder,
    "tsv": TextDecoder,
    "delimited": TextDecoder,
    "regex": RegexDecoder,
    "avro_stream": AvroStreamDecoder,
    "protobuf": ProtobufDecoder,
}


def decoder_for(fmt: InputFormat) -> Decoder:
    return DECODERS[fmt.type](fmt)
