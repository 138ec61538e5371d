"""The JSONPath subset flattenSpec `path` fields use: `$.a.b`, `$.a[0]`, `$['a b']`, `$["a"]`.

Parsed once, here, so the spec rejects a path the row parser could not follow (`ingest validate`, DAG parsing)
and the row parser (`ingest_core.executor.row_parser`) evaluates exactly what was validated.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from ingest_core.core.errors import shown

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
            raise JsonPathError(f"JSONPath {shown(text)} must start with '$' (e.g. $.{text.lstrip('.') or 'name'}); "
                                f"supported: {SUPPORTED}")
        steps: list[str | int] = []
        pos = 1
        while pos < len(text):
            m = _STEP.match(text, pos)
            if not m:
                rest = text[pos:]
                hint = next((why for token, why in _UNSUPPORTED if token in rest), f"supported: {SUPPORTED}")
                raise JsonPathError(f"JSONPath {shown(text)}: cannot read {rest!r}; {hint}")
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

    @classmethod
    def from_steps(cls, steps: tuple[str | int, ...]) -> "JsonPath":
        """The path of `steps`, its text the JSONPath that names them (`$.a['b c'][0]`)."""
        text = "$" + "".join(f"[{s}]" if isinstance(s, int) else f".{s}" if _PLAIN_NAME.fullmatch(s)
                             else "['" + s.replace("\\", "\\\\").replace("'", "\\'") + "']" for s in steps)
        return cls(text, steps)

    @classmethod
    def from_jq(cls, expr: str) -> "JsonPath":
        """A flattenSpec `jq` field's expression (Druid reads it with jackson-jq), when it is a plain path:
        `.a.b`, `.a[0]`, `.["x y"]`, `."x y"`, `.` (the whole record). The rest of jq is refused, saying what to
        write instead (a `path` field)."""
        text = expr.strip()
        if not text.startswith("."):
            raise JsonPathError(f"jq {expr!r}: a jq field must be a path starting with '.', such as .a.b or "
                                f".a[0]; {_JQ_INSTEAD}")
        steps: list[str | int] = []
        pos = 0 if text != "." else 1
        while pos < len(text):
            m = _JQ_STEP.match(text, pos)
            if not m:
                rest = text[pos:]
                hint = next((why for token, why in _JQ_UNSUPPORTED if token in rest), _JQ_INSTEAD)
                raise JsonPathError(f"jq {expr!r}: cannot read {rest!r}; {hint}")
            name, index = m.group("name"), m.group("index")
            quoted = m.group("quoted") or m.group("bracketed")
            if index is not None:
                steps.append(int(index))
            elif name is not None:
                steps.append(name)
            else:
                try:
                    steps.append(json.loads(quoted))
                except ValueError:
                    raise JsonPathError(f"jq {expr!r}: {quoted} is not a valid string; {_JQ_INSTEAD}") from None
            pos = m.end()
        return cls.from_steps(tuple(steps))

    @classmethod
    def from_nodes(cls, nodes: list[str]) -> "JsonPath":
        """A flattenSpec `tree` field: the field names from the root, each in the object the one before found."""
        return cls.from_steps(tuple(nodes))


_PLAIN_NAME = re.compile(r"[A-Za-z_$][\w$-]*")
# jq path steps: .name, ."quoted", .["quoted"], ["quoted"], .[0], [0]
_JQ_STRING = r'"(?:[^"\\]|\\.)*"'
_JQ_STEP = re.compile(rf"\.(?P<name>[A-Za-z_][A-Za-z0-9_]*)|\.(?P<quoted>{_JQ_STRING})"
                      rf"|\.?\[\s*(?P<bracketed>{_JQ_STRING})\s*\]|\.?\[\s*(?P<index>\d+)\s*\]")
_JQ_INSTEAD = ("only jq paths such as .a.b, .a[0] or .[\"x y\"] are read: write a `path` field with a JSONPath "
               "(e.g. {type: path, expr: '$.a.b'}) or compute the value in transformSpec.transforms")
_JQ_UNSUPPORTED = (
    ("|", "pipes '|' are not supported; " + _JQ_INSTEAD),
    ("[]", "iterating '.[]' is not supported: pick one element, e.g. .a[0], or keep the whole list with .a"),
    ("..", "recursive descent '..' is not supported: name each level, e.g. .a.b"),
    ("[-", "negative indexes are not supported: count from the start, e.g. .a[0]"),
    (":", "slices are not supported: pick one element, e.g. .a[0]"),
    ("?", "the optional operator '?' is not supported: a missing field is null anyway; drop the '?'"),
)
