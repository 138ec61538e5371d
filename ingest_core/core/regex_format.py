"""The `regex` input format's pattern and columns, as Druid's RegexInputFormat reads them.

Druid compiles the pattern with java.util.regex and matches each line whole (`Matcher.matches`); validation
and the decoder (`ingest_core.executor.formats.decoders.RegexDecoder`) both compile it here, so what validates
is what runs.
"""

from __future__ import annotations

import re

# Java's named group `(?<name>...)` is Python's `(?P<name>...)`; lookbehinds `(?<=` and `(?<!` are alike in both
_JAVA_NAMED_GROUP = re.compile(r"(?<!\\)\(\?<([A-Za-z][A-Za-z0-9]*)>")


class RegexFormatError(ValueError):
    """A pattern that cannot be compiled; the message says what to fix."""


def compile_pattern(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(_JAVA_NAMED_GROUP.sub(r"(?P<\1>", pattern))
    except re.error as exc:
        raise RegexFormatError(f"pattern {pattern!r} is not a valid regular expression: {exc} (Java-only "
                               "constructs such as \\p{Alpha} or \\Q...\\E are not read: write [A-Za-z] or escape "
                               "each character)") from None


def default_columns(group_count: int) -> list[str]:
    """Druid's names for the groups when `columns` is not given: column_1, column_2, ..."""
    return [f"column_{i}" for i in range(1, group_count + 1)]
