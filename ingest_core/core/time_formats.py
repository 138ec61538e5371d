"""`timestampSpec.format` and `timestamp(s, format)`: Druid's named formats and Joda-Time patterns, checked and
translated to strptime directives here (pure), applied to values by `ingest_core.executor.timestamps`."""

from __future__ import annotations

import re

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
                   for text, letter in joda_tokens(pattern, [t for t, _ in _JODA_TOKENS]))


def joda_tokens(pattern: str, letters: list[str]) -> list[tuple[str, bool]]:
    """A Joda-Time pattern as its pieces: (token, True) for a run of pattern letters out of `letters` (longest
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
