"""JSON a client sent (a REST body), read within bounds: strict JSON (no bare NaN or Infinity, which Python's
parser takes and Druid's refuses), nested at most `MAX_DEPTH` levels, and never a traceback. The body's size is
bounded where it is read (`provider.plugins.request_body`). Pure: text in, a value or a `JsonInputError` out.

Why a depth bound: Python's parser stops at its recursion limit (about 1,000 levels) with a RecursionError, and
what reads the value afterwards (`repr` in an error, `json.dumps` of a VARCHAR parameter, DuckDB's conversion of
an ARRAY parameter) recurses again. No request of Druid's APIs nests more than a few levels.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ingest_core.core.errors import IngestError

MAX_DEPTH = 32  # arrays and objects within each other; Druid's request bodies use 4 or 5
MAX_BODY_BYTES = 16 * 1024 * 1024  # a resetOffsets of 100,000 partitions is about 2 MB


class JsonInputError(IngestError):
    """A body that is not strict JSON, or nests deeper than `MAX_DEPTH`."""

    code = "INGEST_JSON_INPUT"


class JsonTooDeepError(JsonInputError):
    """JSON nested deeper than the bound (a body may be refused for that alone, whatever else it holds)."""

    code = "INGEST_JSON_TOO_DEEP"


def _constant(name: str) -> Any:
    raise JsonInputError(f"the body is not JSON: a bare {name} is not a JSON value (write it as a string)")


def loads(raw: bytes | str, *, object_pairs_hook: Callable[[list[tuple[str, Any]]], Any] | None = None,
          max_depth: int = MAX_DEPTH) -> Any:
    """The JSON value of `raw` (UTF-8), nested at most `max_depth` levels."""
    try:
        value = json.loads(raw, parse_constant=_constant, object_pairs_hook=object_pairs_hook)
    except RecursionError:
        raise JsonTooDeepError(_too_deep(max_depth)) from None
    except ValueError as exc:  # not JSON, not UTF-8, an integer past Python's digit limit
        raise JsonInputError(f"the body is not JSON: {str(exc).splitlines()[0][:200]}") from None
    if depth(value, max_depth) > max_depth:
        raise JsonTooDeepError(_too_deep(max_depth))
    return value


def depth(value: Any, stop: int) -> int:
    """How deep arrays and objects nest in `value` (a scalar is 0), counted without recursion and only up to one
    past `stop`."""
    deepest, pending = 0, [(value, 1)]
    while pending:
        node, level = pending.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, (list, tuple)) else None
        if children is None:
            continue
        deepest = max(deepest, level)
        if deepest > stop:
            return deepest
        pending.extend((child, level + 1) for child in children)
    return deepest


def _too_deep(max_depth: int) -> str:
    return f"the body nests deeper than {max_depth} levels of arrays and objects: no request needs that many"
