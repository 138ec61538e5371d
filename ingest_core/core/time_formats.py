"""`timestampSpec.format` and `timestamp(s, format)`: Druid's named formats and Joda-Time patterns, checked and
translated to strptime directives here (pure), applied to values by `ingest_core.executor.timestamps`."""

from __future__ import annotations

import re
from datetime import timedelta, timezone, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ingest_core.core.errors import shown

NAMED_FORMATS = ("auto", "iso", "posix", "millis", "micro", "nano", "ruby")

# Joda-Time pattern letters -> strptime directives. Longest tokens first.
_JODA_TOKENS = [
    ("yyyy", "%Y"), ("YYYY", "%Y"), ("xxxx", "%Y"), ("yy", "%y"), ("YY", "%y"),
    ("MMMM", "%B"), ("MMM", "%b"), ("MM", "%m"), ("M", "%m"),
    ("dd", "%d"), ("d", "%d"), ("DDD", "%j"),
    ("EEEE", "%A"), ("EEE", "%a"),
    ("HH", "%H"), ("H", "%H"), ("hh", "%I"), ("h", "%I"), ("a", "%p"),
    ("mm", "%M"), ("m", "%M"), ("ss", "%S"), ("s", "%S"),
    ("SSSSSSSSS", "%f"), ("SSSSSS", "%f"), ("SSS", "%f"), ("SS", "%f"), ("S", "%f"),
    ("ZZZ", "%Z"), ("ZZ", "%z"), ("Z", "%z"),
]
_STRFTIME = re.compile(r"%[A-Za-z]")
_STRFTIME_TO_JODA = {"%Y": "yyyy", "%y": "yy", "%m": "MM", "%d": "dd", "%H": "HH", "%I": "hh", "%M": "mm",
                     "%S": "ss", "%f": "SSS", "%z": "Z", "%Z": "ZZZ", "%b": "MMM", "%B": "MMMM", "%j": "DDD",
                     "%p": "a", "%a": "EEE", "%A": "EEEE"}


def joda_to_strptime(pattern: str) -> str:
    """Translate a Joda-Time pattern; ValueError naming the letter it cannot translate."""
    return "".join(dict(_JODA_TOKENS)[text] if letter else text.replace("%", "%%")
                   for text, letter in joda_parse_tokens(pattern, [t for t, _ in _JODA_TOKENS]))


def joda_parse_tokens(pattern: str, letters: list[str]) -> list[tuple[str, bool]]:
    """A Joda-Time pattern as a parser reads it (`joda_tokens` is how a printer reads it): (token, True) for a run of pattern letters out of `letters` (longest
    tokens first), (text, False) for literal text ('quoted' or not a letter). ValueError naming the letter that is
    not in `letters`."""
    if not pattern.strip():
        raise ValueError("the timestamp pattern is empty")
    if _STRFTIME.search(pattern):
        joda = _STRFTIME.sub(lambda m: _STRFTIME_TO_JODA.get(m.group(0), m.group(0)), pattern)
        raise ValueError(f"{pattern!r} is a strftime pattern; timestamp patterns are Joda-Time patterns, as in "
                         f"Druid: write {joda!r}")
    out: list[tuple[str, bool]] = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "'":
            end = pattern.find("'", i + 1)
            if end < 0:
                raise ValueError(f"unterminated quote in timestamp pattern {pattern!r}")
            out.append(("'" if end == i + 1 else pattern[i + 1:end], False))
            i = end + 1
            continue
        if ch.isalpha():
            for token in letters:
                if pattern.startswith(token, i):
                    out.append((token, True))
                    i += len(token)
                    break
            else:
                raise ValueError(f"timestamp pattern letter {ch!r} in {pattern!r} is not supported; supported: "
                                 f"{' '.join(letters)}, text in 'quotes'")
            continue
        out.append((ch, False))
        i += 1
    if not any(letter for _, letter in out):
        raise ValueError(f"timestamp pattern {pattern!r} holds no date or time letters")
    return out


def timestamp_format_problem(fmt: str) -> str | None:
    """What is wrong with a timestamp format (a named one or a Joda-Time pattern), or None."""
    if fmt.lower() in NAMED_FORMATS:
        return None
    try:
        joda_to_strptime(fmt)
    except ValueError as exc:
        return f"{exc} (or use one of the named formats {', '.join(NAMED_FORMATS)})"
    return None


# ------------------------------------------------------------------------------------ time zones and printing

_OFFSET = re.compile(r"^(?:UTC|GMT)?([+-])(\d{1,2})(?::?(\d{2}))?$")


def time_zone(text: str) -> tzinfo:
    """A time zone as Druid's expressions take it: a name ('America/Los_Angeles', 'UTC') or an offset
    ('-08:00', '+0530'); ValueError saying what is accepted otherwise."""
    name = str(text).strip()
    if name.upper() in ("", "UTC", "Z", "GMT", "ETC/UTC"):  # '' is UTC, as Joda's forTimeZone gives GMT
        return timezone.utc
    m = _OFFSET.match(name)
    if m:
        hours, minutes = int(m.group(2)), int(m.group(3) or 0)
        if hours > 23 or minutes > 59:
            raise ValueError(f"time zone offset {shown(text)} is out of range")
        delta = timedelta(hours=hours, minutes=minutes)
        return timezone(-delta if m.group(1) == "-" else delta)
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ValueError(f"{shown(text)} is not a time zone: write a name such as 'America/Los_Angeles' or an offset "
                         "such as '-08:00'") from None


# Joda-Time pattern letters that timestamp_format prints (all of Joda's but the half-day-of-era oddities)
JODA_PRINT_LETTERS = "GCYxweEyDMdaKhHkmsSzZ"


def joda_tokens(pattern: str) -> list[tuple[str, int | str]]:
    """A Joda-Time pattern as (letter, count) for fields and ('', text) for literal text; ValueError for a
    letter Joda does not print or an unterminated quote."""
    out: list[tuple[str, int | str]] = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "'":
            end = pattern.find("'", i + 1)
            while end >= 0 and end + 1 < len(pattern) and pattern[end + 1] == "'":  # '' inside quotes: a quote
                end = pattern.find("'", end + 2)
            if end < 0:
                raise ValueError(f"unterminated quote in timestamp pattern {pattern!r}")
            out.append(("", "'" if end == i + 1 else pattern[i + 1:end].replace("''", "'")))
            i = end + 1
        elif ch.isascii() and ch.isalpha():
            j = i
            while j < len(pattern) and pattern[j] == ch:
                j += 1
            if ch not in JODA_PRINT_LETTERS:
                raise ValueError(f"timestamp pattern letter {ch!r} in {pattern!r} is not a Joda-Time field; "
                                 f"the letters are {' '.join(JODA_PRINT_LETTERS)}, text goes in 'quotes'")
            out.append((ch, j - i))
            i = j
        else:
            out.append(("", ch))
            i += 1
    return out
