"""Druid expression functions that pyarrow has no kernel for, one value at a time, with the semantics of Druid's
Java (java.lang.String.format, Joda-Time's printing and PeriodGranularity, Guava's and inet.ipaddr's IPv4 rules,
HumanReadableBytes). `ingest_core.executor.expression` wraps each once to run over a column."""

from __future__ import annotations

import base64
import calendar
import functools
import ipaddress
import math
import re
from datetime import datetime, timedelta, timezone, tzinfo
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, Callable

from ingest_core.core.expression.errors import ExpressionError
from ingest_core.core.expression.patterns import JAVA_FORMAT
from ingest_core.core.periods import Period
from ingest_core.core.time_formats import joda_tokens
from ingest_core.executor.expr_values import java_double

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
LONG_MIN, LONG_MAX = -(2 ** 63), 2 ** 63 - 1

# The longest text a function may make for one row (repeat, lpad/rpad, format's width): a value past it fails
# its row instead of exhausting the executor's memory (Java would build it, or throw OutOfMemoryError)
MAX_TEXT = 10_000_000


def check_length(length: int) -> None:
    if length > MAX_TEXT:
        raise ExpressionError(f"the result would be {length:,} characters long, more than the {MAX_TEXT:,} "
                              "a value may hold here")


# ------------------------------------------------------------------------------------ Java's text of numbers


def java_text(v: Any) -> str:
    """String.valueOf of an expression value."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return java_double(v)
    return str(v)


# ------------------------------------------------------------------------------------ format()


class _BadFormat(Exception):
    """java.util.IllegalFormatException: Druid then prints the pattern and the arguments."""


def java_format(pattern: str, args: list[Any]) -> str:
    """Druid's format(): String.format(Locale.ENGLISH, ...); a pattern that does not fit its arguments gives
    the pattern followed by '; arg' for each argument, as Druid's StringUtils.nonStrictFormat."""
    if not args:
        return pattern
    try:
        return _format(pattern, args)
    except _BadFormat:
        return pattern + "".join("; " + java_text(a) for a in args)


@functools.lru_cache(maxsize=64)
def _format_pieces(pattern: str) -> tuple[str | tuple[str, str, str | None, str | None, int], ...]:
    """A pattern as literal text and (conversion, flags, width, precision, argument index) pieces, once."""
    out: list[str | tuple[str, str, str | None, str | None, int]] = []
    pos, ordinary = 0, 0
    for m in JAVA_FORMAT.finditer(pattern):
        out.append(pattern[pos:m.start()])
        pos = m.end()
        conv, flags = m.group("conv"), m.group("flags") or ""
        if conv is None:
            raise _BadFormat
        if conv in "%n":
            out.append("%" if conv == "%" else "\n")
            continue
        if m.group("index"):
            i = int(m.group("index")) - 1
        else:
            i, ordinary = ordinary, ordinary + 1
        out.append((conv, flags, m.group("width"), m.group("precision"), i))
    out.append(pattern[pos:])
    return tuple(out)


def _format(pattern: str, args: list[Any]) -> str:
    out = []
    for piece in _format_pieces(pattern):
        if isinstance(piece, str):
            out.append(piece)
            continue
        conv, flags, width, precision, i = piece
        if not 0 <= i < len(args):
            raise _BadFormat  # MissingFormatArgumentException
        out.append(_conversion(conv, flags, width, precision, args[i]))
    return "".join(out)


def _conversion(conv: str, flags: str, width: str | None, precision: str | None, v: Any) -> str:
    lower = conv.lower()
    if lower in "sbc":
        if lower == "b":
            text = "false" if v is None else ("true" if not isinstance(v, bool) else str(v).lower())
        elif lower == "c":
            if v is None:
                text = "null"
            elif isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 0x10FFFF:
                text = chr(v)
            else:
                raise _BadFormat
        else:
            text = java_text(v)
        if precision is not None:
            text = text[:int(precision)]
        text = text.upper() if conv.isupper() else text
        return _pad(text, flags, width, numeric=False)
    if v is None:
        return _pad("null", flags, width, numeric=False)
    if lower in "dxo":
        if not isinstance(v, int) or isinstance(v, bool) or precision is not None:
            raise _BadFormat
        if lower == "d":
            text = format(abs(v), "," if "," in flags else "")
            text = _signed(text, v < 0, flags)
        else:
            text = format(v & 0xFFFFFFFFFFFFFFFF if v < 0 else v, lower)  # two's complement, as for a Java long
            text = ("0x" if lower == "x" else "0") + text if "#" in flags else text
            text = text.upper() if conv == "X" else text
        return _pad(text, flags, width, numeric=True)
    # f e E: a double only (Java refuses a long here)
    if not isinstance(v, float):
        raise _BadFormat
    digits = 6 if precision is None else int(precision)
    if math.isnan(v) or math.isinf(v):
        text = "NaN" if math.isnan(v) else "Infinity"
        return _pad(_signed(text, v < 0, flags) if not math.isnan(v) else text, flags.replace("0", ""), width, True)
    if lower == "f":  # Java rounds the shortest decimal form half up
        text = format(abs(Decimal(repr(v))).quantize(Decimal(1).scaleb(-digits), ROUND_HALF_UP),
                      "," if "," in flags else "")
        if digits and "." not in text:
            text += "." + "0" * digits
    else:
        text = format(abs(v), f".{digits}e")
        text = text.upper() if conv == "E" else text
    return _pad(_signed(text, v < 0 or (v == 0 and math.copysign(1, v) < 0), flags), flags, width, numeric=True)


def _signed(text: str, negative: bool, flags: str) -> str:
    if negative:
        return f"({text})" if "(" in flags else "-" + text
    return ("+" if "+" in flags else " " if " " in flags else "") + text


def _pad(text: str, flags: str, width: str | None, numeric: bool) -> str:
    size = int(width) if width else 0
    check_length(size)
    if len(text) >= size:
        return text
    if "-" in flags:
        return text.ljust(size)
    if numeric and "0" in flags:
        sign = text[0] if text[:1] in "+- (" else ""
        return sign + text[len(sign):].rjust(size - len(sign), "0")
    return text.rjust(size)


# ------------------------------------------------------------------------------------ text


def parse_long(text: Any, radix: Any = 10) -> int | None:
    """Long.parseLong(text, radix) (a leading 0x is dropped in base 16); null when it is not one."""
    if text is None or radix is None:
        return None
    s, base = java_text(text), int(radix)
    if base == 16 and s[:2] in ("0x", "0X"):
        s = s[2:]
    if not 2 <= base <= 36 or not re.fullmatch(r"[-+]?[0-9A-Za-z]+", s):
        return None
    try:
        value = int(s, base)
    except ValueError:
        return None
    return value if LONG_MIN <= value <= LONG_MAX else None


def _utf16(s: str) -> bool:
    """Whether the text has characters past the BMP (Java counts those as two code units)."""
    return any(ord(c) > 0xFFFF for c in s)


def _units(s: str) -> list[str]:
    """Text as Java's UTF-16 code units (characters past the BMP as two surrogates)."""
    if not _utf16(s):
        return list(s)
    data = s.encode("utf-16-le", "surrogatepass")
    return [chr(int.from_bytes(data[i:i + 2], "little")) for i in range(0, len(data), 2)]


def _from_units(units: list[str]) -> str:
    return b"".join(ord(u).to_bytes(2, "little") for u in units).decode("utf-16-le", "replace")


def strpos(haystack: str, needle: str, start: int = 0) -> int:
    """String.indexOf(needle, fromIndex), in UTF-16 code units."""
    if _utf16(haystack) or _utf16(needle):
        h, n = _units(haystack), _units(needle)
        start = max(int(start), 0)
        for i in range(start, len(h) - len(n) + 1):
            if h[i:i + len(n)] == n:
                return i
        return -1
    start = max(int(start), 0)
    if start > len(haystack):
        return len(haystack) if not needle else -1
    return haystack.find(needle, start)


def pad(base: str, length: int, chars: str, left: bool) -> str | None:
    """Druid's StringUtils.lpad/rpad: `length` units of text, padded with `chars` repeated, or cut."""
    if length < 0:
        return ""
    check_length(length)
    if not _utf16(base) and not _utf16(chars):  # every character one UTF-16 unit: plain slicing
        if len(base) >= length or not chars:
            return base[:length]
        padding = (chars * ((length - len(base)) // len(chars) + 1))[:length - len(base)]
        return padding + base if left else base + padding
    units, fill = _units(base), _units(chars)
    if len(units) >= length or not fill:
        return _from_units(units[:length])
    need = length - len(units)
    padding = (fill * (need // len(fill) + 1))[:need]
    return _from_units(padding + units if left else units + padding)


def decode_base64_utf8(text: str) -> str:
    """Base64 (the standard alphabet, padding optional) decoded as UTF-8, bad bytes replaced, as Java's decoder
    and String(bytes, UTF_8); an error when the text is not Base64."""
    body = text.rstrip("=")
    if not re.fullmatch(r"[A-Za-z0-9+/]*", body) or len(body) % 4 == 1 or len(text) - len(body) > 2:
        raise ExpressionError(f"{text[:40]!r} is not Base64")
    return base64.b64decode(body + "=" * (-len(body) % 4)).decode("utf-8", "replace")


# ------------------------------------------------------------------------------------ numbers as text


def human_readable(value: Any, precision: int, system: str) -> str | None:
    """HumanReadableBytes.format: 'binary' (KiB, MiB...), 'decimal_byte' (KB, MB...), 'decimal' (K, M...)."""
    if value is None:
        return None
    n = int(value)  # a double is cast to a long first, as Druid does
    pattern = "{:." + str(int(precision)) + "f} {}{}"
    if system == "binary":
        if -1024 < n < 1024:
            return f"{n} B"
        if n == LONG_MIN:
            return pattern.format(-8.0, "Ei", "B")
        unit = (abs(n).bit_length() - 1) // 10
        units = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
        return pattern.format(_half_up(n / (1 << (unit * 10)), precision), units[unit], "B")
    suffix = "B" if system == "decimal_byte" else ""
    if -1000 < n < 1000:
        return f"{n} {suffix}".strip()
    unit = 0
    while n <= -1_000_000 or n >= 1_000_000:
        n = int(n / 1000)  # Java's long division truncates
        unit += 1
    text = pattern.format(_half_up(n / 1000.0, precision), "KMGTPE"[unit], suffix)
    return text.strip()


def _half_up(x: float, digits: int) -> Decimal:
    """Java's %.Nf rounding: the shortest decimal form of the double, halves up."""
    return Decimal(repr(x)).quantize(Decimal(1).scaleb(-int(digits)), ROUND_HALF_UP)


# ------------------------------------------------------------------------------------ IP addresses

_IPV4 = re.compile(r"^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$")


def ipv4_long(text: str) -> int | None:
    """A dotted-decimal IPv4 address as an unsigned number, None if it is not one."""
    m = _IPV4.match(text)
    if not m or any(int(p) > 255 for p in m.groups()):
        return None
    a, b, c, d = (int(p) for p in m.groups())
    return (a << 24) | (b << 16) | (c << 8) | d


def ipv4_parse(v: Any) -> int | None:
    """Druid's ipv4_parse: dotted-decimal text, or a long that is an unsigned 32-bit number; else null (numeric
    text and doubles too)."""
    if isinstance(v, str):
        return ipv4_long(v)
    if isinstance(v, int) and not isinstance(v, bool):
        return v if 0 <= v <= 0xFFFFFFFF else None
    return None


def ipv4_stringify(v: Any) -> str | None:
    if isinstance(v, str):
        return v if ipv4_long(v) is not None else None
    number = ipv4_parse(v)
    return None if number is None else ".".join(str((number >> shift) & 255) for shift in (24, 16, 8, 0))


def ipv4_matcher(subnet: str) -> Callable[[Any], bool]:
    """Whether an address (as ipv4_parse reads it) is in the subnet's block, network and broadcast included."""
    network = ipaddress.IPv4Network(subnet, strict=False)
    low, high = int(network.network_address), int(network.broadcast_address)

    def match(v: Any) -> bool:
        number = ipv4_parse(v)
        return number is not None and low <= number <= high
    return match


def ipv6_matcher(subnet: str) -> Callable[[Any], bool]:
    network = ipaddress.IPv6Network(subnet, strict=False)

    def match(v: Any) -> bool:
        try:
            return isinstance(v, str) and ipaddress.IPv6Address(v) in network
        except ValueError:
            return False
    return match


# ------------------------------------------------------------------------------------ time


def local(millis: int, zone: tzinfo) -> datetime:
    return (EPOCH + timedelta(milliseconds=millis)).astimezone(zone)


def to_millis(when: datetime) -> int:
    delta = when - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def _utc_of_local(wall: datetime, zone: tzinfo, hint: int | None = None) -> int:
    """A wall-clock time in `zone` as epoch millis. A wall time that repeats (the hour daylight saving gives
    back) takes the offset of `hint` when that is one of its two, else the earlier instant; one in a gap moves
    forward, as Joda's convertLocalToUTC(local, false, hint)."""
    early, late = wall.replace(tzinfo=zone, fold=0), wall.replace(tzinfo=zone, fold=1)
    if hint is not None and (early.utcoffset() or timedelta(0)) > (late.utcoffset() or timedelta(0)):
        if local(hint, zone).utcoffset() == late.utcoffset():
            return to_millis(late)
    return to_millis(early)


def _add_months(wall: datetime, months: int) -> datetime:
    index = wall.month - 1 + months
    year, month = wall.year + index // 12, index % 12 + 1
    return wall.replace(year=year, month=month, day=min(wall.day, calendar.monthrange(year, month)[1]))


def _months_between(a: datetime, b: datetime) -> int:
    """Whole months from a to b (wall times), truncated toward zero, as Joda's getDifference."""
    m = (b.year - a.year) * 12 + b.month - a.month
    if m > 0 and _add_months(a, m) > b:
        m -= 1
    elif m < 0 and _add_months(a, m) < b:
        m += 1
    return m


def _jrem(a: int, b: int) -> int:
    """Java's % (the sign of the dividend)."""
    return a - b * int(a / b) if abs(a) < 2 ** 52 else a - b * (abs(a) // b) * (1 if a >= 0 else -1)


_FIXED_MS = {"weeks": 7 * 86_400_000, "days": 86_400_000, "hours": 3_600_000, "minutes": 60_000, "seconds": 1000,
             "millis": 1}


class PeriodBuckets:
    """Druid's PeriodGranularity(period, origin, timeZone): bucket starts (floor), ends (ceil) and shifts, on
    epoch millis. Years, months, weeks and days count in the zone's wall time; shorter fields are elapsed time."""

    def __init__(self, period: Period, origin: int | None, zone: tzinfo):
        self.period, self.zone = period, zone
        fields = self._fields(period)
        self.single = fields[0] if len(fields) == 1 else None
        self.has_origin = origin is not None
        # no origin: the epoch's wall time in the zone, so multiples align to local midnights
        self.origin = origin if origin is not None else _utc_of_local(datetime(1970, 1, 1), zone)

    @staticmethod
    def _fields(p: Period) -> list[tuple[str, int]]:
        millis = int(p.seconds * 1000)
        parts = [("years", p.years), ("months", p.months), ("weeks", p.weeks), ("days", p.days),
                 ("hours", p.hours), ("minutes", p.minutes), ("millis", millis)]
        return [(f, n) for f, n in parts if n]

    def _add(self, t: int, field: str, amount: int) -> int:
        if field in ("years", "months"):
            wall = local(t, self.zone).replace(tzinfo=None)
            return _utc_of_local(_add_months(wall, amount * (12 if field == "years" else 1)), self.zone, t)
        if field in ("weeks", "days"):
            wall = local(t, self.zone).replace(tzinfo=None)
            return _utc_of_local(wall + timedelta(days=amount * (7 if field == "weeks" else 1)), self.zone, t)
        return t + amount * _FIXED_MS[field]

    def _difference(self, t: int, origin: int, field: str) -> int:
        if field in ("years", "months", "weeks", "days"):
            a = local(origin, self.zone).replace(tzinfo=None)
            b = local(t, self.zone).replace(tzinfo=None)
            if field in ("years", "months"):
                months = _months_between(a, b)
                return int(months / 12) if field == "years" else months
            ms = to_millis(b.replace(tzinfo=timezone.utc)) - to_millis(a.replace(tzinfo=timezone.utc))
            return int(ms / _FIXED_MS[field])
        return int((t - origin) / _FIXED_MS[field])

    def _round_floor(self, t: int, field: str) -> int:
        wall = local(t, self.zone).replace(tzinfo=None)
        if field == "years":
            wall = datetime(wall.year, 1, 1)
        elif field == "months":
            wall = datetime(wall.year, wall.month, 1)
        elif field in ("weeks", "days"):
            wall = datetime(wall.year, wall.month, wall.day)
            if field == "weeks":
                wall -= timedelta(days=wall.weekday())  # Monday
        elif field == "hours":
            wall = wall.replace(minute=0, second=0, microsecond=0)
        elif field == "minutes":
            wall = wall.replace(second=0, microsecond=0)
        else:
            return t - _jrem(t, 1000) if field == "seconds" else t
        return _utc_of_local(wall, self.zone, t)

    def floor(self, t: int) -> int:
        if self.single is None:  # a compound period such as PT1H30M: its standard length from the origin
            step = int(self.period.to_timedelta().total_seconds() * 1000)
            offset = _jrem(t, step) - _jrem(self.origin, step)
            return t - (offset + step if offset < 0 else offset)
        field, n = self.single
        if n == 1 and not self.has_origin:
            return self._round_floor(t, field)
        count = self._difference(t, self.origin, field)
        count -= _jrem(count, n)
        start = self._add(self.origin, field, count)
        return self._add(start, field, -n) if t < start else start

    def ceil(self, t: int) -> int:
        start = self.floor(t)
        return t if start == t else self.shift(start, 1)

    def shift(self, t: int, step: int) -> int:
        """Joda's chronology.add(period, t, step): each field of the period in turn."""
        for field, n in self._fields(self.period):
            t = self._add(t, field, n * step * (-1 if self.period.negative else 1))
        return t


def joda_printer(pattern: str | None, zone: tzinfo) -> Callable[[int], str]:
    """Epoch millis as text in `zone`, by a Joda-Time pattern (ISO-8601 with millis and offset when None)."""
    if pattern is None:
        def iso(t: int) -> str:
            w = local(t, zone)
            return (f"{_year(w.year, 4)}-{w.month:02d}-{w.day:02d}T{w.hour:02d}:{w.minute:02d}:{w.second:02d}."
                    f"{w.microsecond // 1000:03d}{_offset(w, colon=True, zero='Z')}")
        return iso
    tokens = joda_tokens(pattern)

    def print_(t: int) -> str:
        w = local(t, zone)
        return "".join(str(text) if not letter else _field(w, letter, int(text)) for letter, text in tokens)
    return print_


def _year(y: int, count: int) -> str:
    return f"{y % 100:02d}" if count == 2 else (f"-{-y:0{count}d}" if y < 0 else f"{y:0{count}d}")


def _offset(w: datetime, colon: bool, zero: str | None = None) -> str:
    delta = w.utcoffset() or timedelta(0)
    minutes = int(delta.total_seconds() // 60)
    if minutes == 0 and zero:
        return zero
    sign = "-" if minutes < 0 else "+"
    h, m = divmod(abs(minutes), 60)
    return f"{sign}{h:02d}:{m:02d}" if colon else f"{sign}{h:02d}{m:02d}"


def _field(w: datetime, letter: str, count: int) -> str:
    iso_year, iso_week, iso_day = w.isocalendar()
    if letter == "G":
        return "AD"
    if letter == "C":
        return f"{w.year // 100:0{count}d}"
    if letter in "yY":
        return _year(w.year, count)
    if letter == "x":
        return _year(iso_year, count)
    if letter == "w":
        return f"{iso_week:0{count}d}"
    if letter == "e":
        return f"{iso_day:0{count}d}"
    if letter == "E":
        return calendar.day_name[w.weekday()] if count >= 4 else calendar.day_abbr[w.weekday()]
    if letter == "D":
        return f"{w.timetuple().tm_yday:0{count}d}"
    if letter == "M":
        if count >= 4:
            return calendar.month_name[w.month]
        return calendar.month_abbr[w.month] if count == 3 else f"{w.month:0{count}d}"
    if letter == "d":
        return f"{w.day:0{count}d}"
    if letter == "a":
        return "AM" if w.hour < 12 else "PM"
    if letter in "KhHk":
        hour = {"K": w.hour % 12, "h": w.hour % 12 or 12, "H": w.hour, "k": w.hour or 24}[letter]
        return f"{hour:0{count}d}"
    if letter == "m":
        return f"{w.minute:0{count}d}"
    if letter == "s":
        return f"{w.second:0{count}d}"
    if letter == "S":  # the fraction: its digits, trailing zeros dropped down to `count`
        digits = f"{w.microsecond // 1000:03d}".ljust(max(count, 3), "0")
        return digits[:count] if count <= 3 else digits
    if letter == "Z":
        return _offset(w, colon=count == 2) if count < 3 else _zone_id(w)
    if letter == "z":
        return _zone_id(w) if count >= 4 else (w.tzname() or "UTC")
    raise ExpressionError(f"timestamp pattern letter {letter!r} cannot be printed")


def _zone_id(w: datetime) -> str:
    key = getattr(w.tzinfo, "key", None)
    return key or ("UTC" if not w.utcoffset() else _offset(w, colon=True))
