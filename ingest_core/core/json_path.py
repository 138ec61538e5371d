"""The JSONPath subset flattenSpec `path` fields use: `$.a.b`, `$.a[0]`, `$['a b']`, `$["a"]`.

Parsed once, here, so the spec rejects a path the row parser could not follow (`ingest validate`, DAG parsing)
and the row parser (`ingest_core.executor.row_parser`) evaluates exactly what was validated.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

_STEP = re.compile(r"\.([A-Za-z_$][\w$-]*)|\[(\d+)\]|\['((?:[^'\\]|\\.)*)'\]|\[\"((?:[^\"\\]|\\.)*)\"\]")
_UNESCAPE = re.compile(r"\\(.)")
SUPPORTED = "$.name, $.a.b, $.a[0], $['name with spaces']"

# JSONPath constructs Jayway (Druid's library) has and this parser does not, with what to write instead.
_UNSUPPORTED = (
    ("..", "deep scan '..' is not supported: name each level, e.g. $.a.b"),
    ("[*]", "wildcard '[*]' is not supported: pick one element, e.g. $.a[0], or keep the whole list with $.a"),
    (".*", "wildcard '.*' is not supported: name the field, e.g. $.a.b"),
    ("[?", "filter expressions '[?(...)]' are not supported: use transformSpec for conditions"),
    ("[-", "negative indexes are not supported: count from the start, e.g. $.a[0]"),
    ("[:", "slices are not supported: pick one element, e.g. $.a[0]"),
    ("()", "functions such as length() are not supported: compute it in transformSpec.transforms"),
)


class JsonPathError(ValueError):
    """A JSONPath the row parser cannot follow; the message says what to write instead."""


@dataclass(frozen=True)
class JsonPath:
    """A parsed path: field names (str) and list indexes (int), applied in order from the document root."""

    text: str
    steps: tuple[str | int, ...]

    @classmethod
    def parse(cls, text: str) -> "JsonPath":
        if not text.startswith("$"):
            raise JsonPathError(f"JSONPath {text!r} must start with '$' (e.g. $.{text.lstrip('.') or 'name'}); "
                                f"supported: {SUPPORTED}")
        steps: list[str | int] = []
        pos = 1
        while pos < len(text):
            m = _STEP.match(text, pos)
            if not m:
                rest = text[pos:]
                hint = next((why for token, why in _UNSUPPORTED if token in rest), f"supported: {SUPPORTED}")
                raise JsonPathError(f"JSONPath {text!r}: cannot read {rest!r}; {hint}")
            name, index, quoted, dquoted = m.groups()
            if index is not None:
                steps.append(int(index))
            else:
                steps.append(name if name is not None else _UNESCAPE.sub(r"\1", quoted if quoted is not None
                                                                         else dquoted))
            pos = m.end()
        return cls(text, tuple(steps))

    def get(self, doc: Any) -> Any:
        """The value at this path in `doc`, or None where the document has no such field or element."""
        cur = doc
        for step in self.steps:
            if isinstance(step, int):
                if not isinstance(cur, list) or step >= len(cur):
                    return None
                cur = cur[step]
            else:
                if not isinstance(cur, dict):
                    return None
                cur = cur.get(step)
            if cur is None:
                return None
        return cur
