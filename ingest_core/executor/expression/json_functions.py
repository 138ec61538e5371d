"""Druid's JSON functions on the executors (NestedDataExpressions): json_value, json_query, json_query_array,
json_object, json_keys, json_paths, json_merge, parse_json, try_parse_json, to_json_string.

They read COMPLEX<json> values (`expr_values.Json`: a nested input field, parse_json's result) with Druid's
JSONPath subset (`core.json_path`); any other value is a document of itself (json_value(long, '$') is the long).
"""

from __future__ import annotations

import json
from typing import Any

from ingest_core.core.expression.errors import ExpressionError
from ingest_core.core.expression.patterns import json_path
from ingest_core.core.json_path import JsonPath, JsonPathError
from ingest_core.executor.expr_values import Arr, Json, cast, from_json, to_json_text, to_json_value
from ingest_core.executor.expression.arrays import rowwise

_PATHS: dict[str, JsonPath] = {}


def _path(text: Any) -> JsonPath:
    """A parsed path (cached: a path is usually a constant); ExpressionError for one Druid cannot read."""
    key = str(text)
    found = _PATHS.get(key)
    if found is None:
        try:
            found = _PATHS.setdefault(key, json_path(key))
        except JsonPathError as exc:
            raise ExpressionError(str(exc)) from None
    return found


def _find(doc: Any, path: Any) -> Any:
    if path is None:
        return None
    return _path(path).get(to_json_value(doc))


def _json_value(doc: Any, path: Any, returning: Any = None) -> Any:
    """The scalar (or array of scalars) at `path`; null for an object or an array holding objects."""
    found = from_json(_find(doc, path))
    if isinstance(found, Json):
        return None
    if returning is not None and found is not None:
        to = str(returning).upper()
        if not to.startswith("ARRAY<") and isinstance(found, Arr) and len(found) != 1:
            return None
        return cast(found, to)
    return found


def _json_query(doc: Any, path: Any) -> Json | None:
    found = _find(doc, path)
    return None if found is None else Json(found)


def _json_query_array(doc: Any, path: Any) -> Arr | None:
    found = _find(doc, path)
    if found is None:
        return None
    return Arr("JSON", tuple(found) if isinstance(found, list) else (found,))


def _json_object(*pairs: Any) -> Json:
    doc: dict[str, Any] = {}
    for key, value in zip(pairs[0::2], pairs[1::2]):
        if key is None:
            raise ExpressionError("json_object(): a key is null")
        doc[str(key)] = to_json_value(value)
    return Json(doc)


def _json_keys(doc: Any, path: Any) -> Arr | None:
    found = _find(doc, path)
    if isinstance(found, dict):
        return Arr("STRING", tuple(found))
    if isinstance(found, list):
        return Arr("STRING", tuple(str(i) for i in range(len(found))))
    return None


def _step(name: str) -> str:
    """A field in Druid's normalized JSONPath (NestedPathFinder.toNormalizedJsonPath)."""
    return f"['{name}']" if any(c in name for c in ".'\"[]") else f".{name}"


def _json_paths(doc: Any) -> Arr | None:
    """Every path to a scalar or an array of scalars (Druid's nested columns' fields), depth first."""
    if doc is None:
        return None
    out: list[str] = []

    def walk(value: Any, path: str) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                walk(inner, path + _step(str(key)))
        elif isinstance(value, list) and any(isinstance(x, (dict, list)) for x in value):
            for i, inner in enumerate(value):
                walk(inner, f"{path}[{i}]")
        else:
            out.append(path if path != "$" else "$.")
    walk(to_json_value(doc), "$")
    return Arr("STRING", tuple(out))


def _deep_merge(into: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    for key, value in other.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            into[key] = _deep_merge(dict(into[key]), value)
        else:
            into[key] = value
    return into


def _json_merge(*docs: Any) -> Json | None:
    """json_merge: objects (JSON values or JSON text) merged left to right, the rightmost value winning."""
    merged: dict[str, Any] | None = None
    for i, d in enumerate(docs):
        value = _parse(d, strict=True).value if isinstance(d, str) else to_json_value(d)
        if value is None:
            continue
        if not isinstance(value, dict):
            raise ExpressionError(f"json_merge(): argument {i + 1} is not a JSON object: {to_json_text(value)}")
        merged = _deep_merge(merged if merged is not None else {}, value)
    return None if merged is None else Json(merged)


def _parse(s: Any, strict: bool) -> Json | None:
    if s is None:
        return None
    if isinstance(s, Json):
        return s
    if not isinstance(s, str):
        if strict:
            raise ExpressionError(f"parse_json(): the input must be text, got {to_json_text(s)}")
        return None
    try:
        value = json.loads(s)
    except ValueError as exc:
        if strict:
            raise ExpressionError(f"parse_json(): {s[:200]!r} is not JSON ({exc})") from None
        return None
    return None if value is None else Json(value)


def _to_json_string(v: Any) -> str | None:
    return None if v is None else to_json_text(v)


# the registry's implementations (core.expression.functions names them "json_functions.<name>")
json_value = rowwise(_json_value)
json_query = rowwise(_json_query)
json_query_array = rowwise(_json_query_array)
json_object = rowwise(_json_object)
json_keys = rowwise(_json_keys)
json_paths = rowwise(_json_paths)
json_merge = rowwise(_json_merge)
parse_json = rowwise(lambda s: _parse(s, strict=True))
try_parse_json = rowwise(lambda s: _parse(s, strict=False))
to_json_string = rowwise(_to_json_string)
