"""ISO-8601 periods (`PT1H`, `P1D`, `P1Y2M`) and date-times, as Druid specs write them.

A `Period` keeps its calendar fields apart: `P1M` is "one month", not 30 days, so it can be added to a
date-time exactly. Only periods without years or months have a fixed length (`to_timedelta`).
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from decimal import Decimal

from ingest_core.core.errors import shown

_PERIOD_RE = re.compile(
    r"^(?P<sign>[-+])?P"
    r"(?:(?P<years>\d+)Y)?(?:(?P<months>\d+)M)?(?:(?P<weeks>\d+)W)?(?:(?P<days>\d+)D)?"
    r"(?:T(?:(?P<hours>\d+)H)?(?:(?P<minutes>\d+)M)?(?:(?P<seconds>\d+(?:[.,]\d+)?)S)?)?$"
)


class PeriodError(ValueError):
    """A string that is not an ISO-8601 period or date-time."""


@dataclass(frozen=True)
class Period:
    years: int = 0
    months: int = 0
    weeks: int = 0
    days: int = 0
    hours: int = 0
    minutes: int = 0
    seconds: Decimal = Decimal(0)
    negative: bool = False

    @classmethod
    def parse(cls, text: str) -> "Period":
        if not isinstance(text, str):
            raise PeriodError(f"expected an ISO-8601 period string such as 'PT1H', got {shown(text)}")
        m = _PERIOD_RE.match(text.strip().upper())
        if not m or text.strip().upper() in ("P", "PT") or text.strip().upper().endswith("T"):
            raise PeriodError(f"{shown(text)} is not an ISO-8601 period (examples: 'PT10M', 'PT1H', 'P1D', 'P1M')")
        g = m.groupdict()
        return cls(
            years=int(g["years"] or 0),
            months=int(g["months"] or 0),
            weeks=int(g["weeks"] or 0),
            days=int(g["days"] or 0),
            hours=int(g["hours"] or 0),
            minutes=int(g["minutes"] or 0),
            seconds=Decimal((g["seconds"] or "0").replace(",", ".")),
            negative=g["sign"] == "-",
        )

    @property
    def is_calendar(self) -> bool:
        """True when the length depends on where it starts (years or months)."""
        return bool(self.years or self.months)

    @property
    def is_zero(self) -> bool:
        return not (self.years or self.months or self.weeks or self.days or self.hours or self.minutes or self.seconds)

    def to_timedelta(self) -> timedelta:
        if self.is_calendar:
            raise PeriodError(f"{self} has years or months, so it has no fixed length")
        td = timedelta(
            weeks=self.weeks, days=self.days, hours=self.hours, minutes=self.minutes, seconds=float(self.seconds)
        )
        return -td if self.negative else td

    def total_seconds(self) -> float:
        return self.to_timedelta().total_seconds()

    def add_to(self, when: datetime, times: int = 1) -> datetime:
        """`when + times * self`, month arithmetic clamped to the month's last day like Joda-Time."""
        sign = -times if self.negative else times
        months = when.month - 1 + sign * (self.years * 12 + self.months)
        year, month = when.year + months // 12, months % 12 + 1
        day = min(when.day, calendar.monthrange(year, month)[1])
        shifted = when.replace(year=year, month=month, day=day)
        fixed = timedelta(
            weeks=self.weeks, days=self.days, hours=self.hours, minutes=self.minutes, seconds=float(self.seconds)
        )
        return shifted + sign * fixed

    def subtract_from(self, when: datetime) -> datetime:
        return self.add_to(when, times=-1)

    def __str__(self) -> str:
        date = "".join(f"{v}{u}" for v, u in ((self.years, "Y"), (self.months, "M"), (self.weeks, "W"), (self.days, "D")) if v)
        secs = format(self.seconds.normalize(), "f") if self.seconds else 0
        time = "".join(f"{v}{u}" for v, u in ((self.hours, "H"), (self.minutes, "M"), (secs, "S")) if v)
        body = "P" + date + ("T" + time if time else "")
        if body == "P":
            body = "PT0S"
        return ("-" if self.negative else "") + body


_DT_RE = re.compile(
    r"^(?P<date>\d{4}-\d{2}-\d{2})"
    r"(?:[T ](?P<h>\d{2})(?::(?P<m>\d{2})(?::(?P<s>\d{2})(?:[.,](?P<frac>\d+))?)?)?)?"
    r"(?P<tz>Z|[+-]\d{2}(?::?\d{2})?)?$"
)


def parse_datetime(text: str) -> datetime:
    """An ISO-8601 date-time as Druid accepts it (`2016-01-01T11:00Z`, `2016-01-01`), always UTC-aware.

    Without a zone the time is taken as UTC, which is Druid's default time zone.
    """
    if isinstance(text, datetime):
        return text if text.tzinfo else text.replace(tzinfo=timezone.utc)
    if not isinstance(text, str):
        raise PeriodError(f"expected an ISO-8601 date-time string such as '2016-01-01T11:00Z', got {shown(text)}")
    m = _DT_RE.match(text.strip())
    if not m:
        raise PeriodError(f"{shown(text)} is not an ISO-8601 date-time (example: '2016-01-01T11:00Z')")
    g = m.groupdict()
    frac = (g["frac"] or "0")[:6].ljust(6, "0")
    tz = timezone.utc
    if g["tz"] and g["tz"] != "Z":
        raw = g["tz"].replace(":", "")
        minutes = int(raw[1:3]) * 60 + int(raw[3:5] or 0)
        tz = timezone(timedelta(minutes=minutes if raw[0] == "+" else -minutes))
    try:
        y, mo, d = (int(x) for x in g["date"].split("-"))
        value = datetime(y, mo, d, int(g["h"] or 0), int(g["m"] or 0), int(g["s"] or 0), int(frac), tzinfo=tz)
    except ValueError as exc:
        raise PeriodError(f"{shown(text)} is not a valid date-time: {exc}") from None
    return value.astimezone(timezone.utc)


# The date-times a segment interval can hold: Python's datetime ends with year 9999, and an interval of the
# widest segment granularity (a year) starting before MAX_DATETIME still has an end. Row times outside
# [MIN_DATETIME, MAX_DATETIME) are unparseable (the row parser checks them, vectorized).
MIN_DATETIME = datetime(1, 1, 1, tzinfo=timezone.utc)
MAX_DATETIME = datetime(9999, 1, 1, tzinfo=timezone.utc)


def format_datetime(when: datetime) -> str:
    """UTC, millisecond precision, `Z` suffix: the form Druid prints and segment ids use. The year has four
    digits before 1000 too (strftime's %Y drops the zeros there, and `parse_datetime` needs them)."""
    when = when.astimezone(timezone.utc)
    return f"{when.year:04d}-" + when.strftime("%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"
