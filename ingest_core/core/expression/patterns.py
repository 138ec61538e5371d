"""The small languages inside an expression's constant arguments, read as Druid's Java reads them: regular
expressions (in the dialect RE2 and Python share), SQL LIKE patterns, java.util.regex replacements, Java's
String.format conversions and the JSONPath subset of Druid's nested functions."""

from __future__ import annotations

import re

from ingest_core.core.errors import shown
from ingest_core.core.expression.errors import ExpressionError
from ingest_core.core.json_path import JsonPath, JsonPathError

# Regular-expression syntax Python's `re` accepts but RE2 (pyarrow's engine, used for like/regexp_like and
# filters) refuses; both engines must read a pattern the same way.
_RE2_UNSUPPORTED = [
    (re.compile(r"\(\?<?[=!]"), "lookaround assertions ((?=...), (?!...), (?<=...), (?<!...))"),
    (re.compile(r"(?<!\\)(?:\\\\)*\\[1-9]"), "backreferences (\\1 ...)"),
    (re.compile(r"\(\?P="), "named backreferences ((?P=name))"),
    (re.compile(r"\(\?>"), "atomic groups ((?>...))"),
    (re.compile(r"[*+?}]\+"), "possessive quantifiers (*+, ++, ?+)"),
]


def python_regex(pattern: str) -> str:
    """Java's named groups `(?<name>...)` in Python's spelling `(?P<name>...)` (RE2 reads both)."""
    return re.sub(r"(?<!\\)\(\?<(?=[A-Za-z])", "(?P<", pattern)


def compile_regex(pattern: str, re2: bool = True) -> re.Pattern[str]:
    """A pattern both regex engines here read alike (RE2 for vectorized matching, Python for extraction), or
    with `re2=False` one only Python runs (regexp_replace: lookarounds and backreferences allowed, as Java's);
    ExpressionError naming what is wrong otherwise."""
    pattern = python_regex(pattern)
    for rx, what in _RE2_UNSUPPORTED if re2 else ():
        if rx.search(pattern):
            raise ExpressionError(f"the regular expression {pattern!r} uses {what}, which are not supported")
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ExpressionError(f"{pattern!r} is not a valid regular expression: {exc}") from None


def like_to_regex(pattern: str, escape: str | None = None) -> str:
    """SQL LIKE (`%` any run, `_` one character, `escape` quoting the next) as an anchored regex."""
    out, i = [], 0
    while i < len(pattern):
        ch = pattern[i]
        if escape and ch == escape and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        out.append(".*" if ch == "%" else "." if ch == "_" else re.escape(ch))
        i += 1
    return "^" + "".join(out) + "$"


# Java's String.format conversions that format() supports (flags - + space 0 , ( #; width; precision)
JAVA_FORMAT = re.compile(r"%(?:(?P<index>\d+)\$)?(?P<flags>[-#+ 0,(]*)(?P<width>\d+)?(?:\.(?P<precision>\d+))?"
                         r"(?:(?P<conv>[sSdxXofeEbBcn%])|.?)")


def java_replacement(text: str) -> list[str | tuple[int | str]]:
    """A java.util.regex replacement (`$1`, `${name}`, `\\$`) as literal pieces and (group,) references;
    ExpressionError for a `$` that names no group."""
    out: list[str | tuple[int | str]] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            out.append(text[i + 1])
            i += 2
        elif ch == "$":
            m = re.match(r"\{(\w+)\}|(\d)", text[i + 1:])
            if not m:
                raise ExpressionError(f"regexp_replace(): illegal group reference in the replacement {shown(text)} "
                                      "(write \\$ for a dollar sign)")
            out.append((m.group(1) if m.group(1) else int(m.group(2)),))
            i += 1 + m.end()
        else:
            out.append(ch)
            i += 1
    return out


def json_path(text: str) -> JsonPath:
    """A JSON function's path, read as Druid's NestedPathFinder.parseJsonPath reads it: `$` (or `$.`) the root,
    `.name` a field (any character but `.` and `[`), `['name']` a field, `[0]` a list element. JsonPathError
    says what is wrong, as flattenSpec's paths (`core.json_path`, which evaluates both)."""
    def bad(why: str) -> JsonPathError:
        return JsonPathError(f"JSONPath {shown(text)}: {why}; write e.g. $.a.b, $.a[0] or $['a b']")

    if not text.startswith("$"):
        raise bad("it must start with '$'")
    steps: list[str | int] = []
    i = 1
    while i < len(text):
        if text[i] == ".":
            end = min((j for j in (text.find(".", i + 1), text.find("[", i + 1)) if j >= 0), default=len(text))
            if end == i + 1 and end < len(text):
                raise bad(f"an empty name at position {i + 1}")
            if end > i + 1:
                steps.append(text[i + 1:end])
            i = end
        elif text.startswith("['", i):
            end = text.find("']", i + 2)
            if end < 0:
                raise bad("an unterminated ['")
            steps.append(text[i + 2:end])
            i = end + 2
        elif text[i] == "[":
            end = text.find("]", i)
            index = text[i + 1:end] if end > 0 else ""
            if not index.isdigit():
                raise bad(f"[{index}] is not a list index (0, 1, ...; a name is written ['name'])")
            steps.append(int(index))
            i = end + 1
        else:
            raise bad(f"path parts must be separated with '.' (position {i})")
    return JsonPath(text, tuple(steps))
