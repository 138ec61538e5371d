"""Expression text as tokens (kind, text), and quoted literals unescaped as Druid's parser reads them."""

from __future__ import annotations

import re

from ingest_core.core.errors import shown
from ingest_core.core.expression.errors import ExpressionError

_TOKEN = re.compile(r"""
    \s*(?:
      (?P<atype>ARRAY<(?:LONG|DOUBLE|STRING)>|<(?:LONG|DOUBLE|STRING)>)
     |(?P<num>\d+\.\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|\d+(?:[eE][-+]?\d+)?)
     |(?P<str>'(?:[^'\\]|\\.)*')
     |(?P<qid>"(?:[^"\\]|\\.)*")
     |(?P<id>[A-Za-z_$][A-Za-z0-9_$.]*)
     |(?P<op>->|<=|>=|==|!=|&&|\|\||[-+*/%^<>!(),\[\]])
    )""", re.VERBOSE)


def tokenize(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise ExpressionError(f"cannot read expression {shown(text)} at position {pos}: {text[pos:pos + 10]!r}")
        kind = m.lastgroup
        out.append((kind, m.group(kind)))  # type: ignore[arg-type]
        pos = m.end()
    return out


_JAVA_ESCAPE = re.compile(r"\\(u+[0-9a-fA-F]{4}|[0-3][0-7]{0,2}|[4-7][0-7]?|.)", re.DOTALL)
_JAVA_CONTROL = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


def unescape_java(text: str) -> str:
    """A quoted literal's escapes as Druid reads them (commons-text unescapeJava): \\n \\t \\uXXXX, octal,
    \\\\ and a quote; a backslash before any other character is dropped."""
    def one(m: re.Match[str]) -> str:
        body = m.group(1)
        if body[0] == "u" and len(body) >= 5:
            return chr(int(body[-4:], 16))
        if body[0].isdigit() and body[0] < "8":
            return chr(int(body, 8))
        return _JAVA_CONTROL.get(body, body)
    return _JAVA_ESCAPE.sub(one, text) if "\\" in text else text
