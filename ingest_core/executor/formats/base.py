"""What every value decoder shares: the `Decoder` protocol, the flattenSpec's `Flattener` over a decoded
document, and how JSON and text values are written. The format modules (`decoders`, `avro`, `protobuf`) stand
on it; `decoders` picks one per `inputFormat` type, so nothing here imports a format."""

from __future__ import annotations

import json
from typing import Any, Callable, Protocol

from ingest_core.core.spec import FlattenSpec

DEFAULT_LIST_DELIMITER = "\u0001"  # Druid's: ctrl-A


class Decoder(Protocol):
    def rows(self, data: bytes) -> list[dict[str, Any]]: ...


def json_text(v: Any) -> str:
    return json.dumps(v, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


class Flattener:
    """A format's `flattenSpec` over a decoded document (nested dicts and lists): the discovered root fields,
    then the root and path fields it names."""

    def __init__(self, flatten_spec: FlattenSpec | None):
        self.paths: list[tuple[str, Callable[[Any], Any]]] = []
        self.fields: list[tuple[str, tuple[str | int, ...]]] = []  # each field's steps from the root
        discovery = True
        if flatten_spec is not None:
            discovery = flatten_spec.use_field_discovery
            for f in flatten_spec.fields:
                if f.type == "root":
                    key = f.expr or f.name
                    self.paths.append((f.name, lambda doc, k=key: doc.get(k) if isinstance(doc, dict) else None))
                    self.fields.append((f.name, (key,)))
                else:  # path, jq and tree fields: the JSONPath validation read them as
                    path = f.json_path
                    assert path is not None
                    self.paths.append((f.name, path.get))
                    self.fields.append((f.name, path.steps))
        self.discovery = discovery

    def columns_wanted(self, needed: set[str]) -> dict[tuple[str, ...], list[str]]:
        """Each needed column's field path (-> the columns' names), as this flattener finds it (its fields win
        over the discovered root fields), for a decoder that reads a chunk into columns; {} when a path takes a
        list index (the per-record path)."""
        by_name: dict[str, tuple[str, ...]] = {}
        if self.discovery:
            by_name = {name: (name,) for name in needed}
        for name, path in self.fields:
            if any(not isinstance(step, str) for step in path):
                return {}
            by_name[name] = path  # type: ignore[assignment]
        wanted: dict[tuple[str, ...], list[str]] = {}
        for name, path in by_name.items():
            if name in needed:
                wanted.setdefault(path, []).append(name)
        return wanted

    def __call__(self, doc: dict[str, Any]) -> dict[str, Any]:
        if not self.paths:
            return doc if self.discovery else {}
        row: dict[str, Any] = {}
        if self.discovery:
            # nested objects too: a dimension named in the spec stores one as its JSON text, and schemaless
            # discovery skips them (`RowParser._discovered`), as Druid's field discovery does
            row.update(doc)
        for name, get in self.paths:
            row[name] = get(doc)
        return row


def text_value(raw: str | None, list_delimiter: str, try_parse_numbers: bool = False) -> Any:
    """One value of a text format: empty is null, a value holding `list_delimiter` a multi-value list."""
    if raw is None or raw == "":
        return None
    if list_delimiter and list_delimiter in raw:
        return [v if v != "" else None for v in raw.split(list_delimiter)]
    if try_parse_numbers and raw.isascii() and "_" not in raw:  # as Java's parsers read numbers
        try:
            return int(raw)
        except ValueError:
            try:
                return float(raw)
            except ValueError:
                return raw
    return raw
