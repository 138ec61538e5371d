"""Druid granularities (always UTC): a named one (`HOUR`) or `{type: period, period: PT2H}`, and the bucket
arithmetic that is pure (`floor_unit`). Flooring timestamps is `ingest_core.executor.buckets` (pyarrow)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ingest_core.core.binding import (
    MISSING_VALUE,
    BindContext,
    bind_value,
    did_you_mean,
    join,
)
from ingest_core.core.errors import shown
from ingest_core.core.periods import Period

GRANULARITY_PERIODS: dict[str, str | None] = {
    "NONE": None,  # keep the timestamp as ingested (millisecond precision)
    "SECOND": "PT1S",
    "MINUTE": "PT1M",
    "FIVE_MINUTE": "PT5M",
    "TEN_MINUTE": "PT10M",
    "FIFTEEN_MINUTE": "PT15M",
    "THIRTY_MINUTE": "PT30M",
    "HOUR": "PT1H",
    "SIX_HOUR": "PT6H",
    "EIGHT_HOUR": "PT8H",
    "DAY": "P1D",
    "WEEK": "P1W",
    "MONTH": "P1M",
    "QUARTER": "P3M",
    "YEAR": "P1Y",
    "ALL": None,  # one bucket for all time
}


@dataclass(frozen=True)
class Granularity:
    """A Druid granularity, always in UTC: a named one (`HOUR`) or `{type: period, period: PT2H}`."""

    name: str
    period: Period | None

    @classmethod
    def named(cls, name: str) -> "Granularity":
        p = GRANULARITY_PERIODS[name]
        return cls(name, Period.parse(p) if p else None)

    @classmethod
    def _from_raw(cls, raw: Any, path: str, ctx: BindContext) -> Any:
        if isinstance(raw, dict):
            kind = str(raw.get("type", "")).lower()
            if kind in ("none", "all"):
                for key in sorted(k for k in raw if k != "type" and raw[k] is not None):
                    ctx.unknown(join(path, key), "unknown field for a granularity of type " + kind)
                return cls.named(kind.upper())
            if kind in ("period", "duration"):
                allowed = {"type", "period", "timeZone", "origin"} if kind == "period" else {"type", "duration", "origin"}
                for key in sorted(set(raw) - allowed):
                    ctx.unknown(join(path, key), "unknown field" + did_you_mean(key, allowed))
                if raw.get("timeZone") not in (None, "UTC", "Etc/UTC"):
                    ctx.error(join(path, "timeZone"), "only UTC is supported")
                if raw.get("origin") is not None:
                    ctx.error(join(path, "origin"), "granularity origins are not supported; buckets align to the epoch")
                if kind == "duration":
                    ms = raw.get("duration")
                    if not isinstance(ms, int) or ms <= 0:
                        ctx.error(join(path, "duration"), "expected a positive number of milliseconds")
                        return MISSING_VALUE
                    return cls(f"PT{ms / 1000:g}S", Period.parse(f"PT{ms / 1000:g}S"))
                period = bind_value(Period, raw.get("period"), join(path, "period"), ctx)
                if period is MISSING_VALUE:
                    return MISSING_VALUE
                return cls(str(period), period)
            ctx.error(join(path, "type"), f"unknown granularity type {raw.get('type')!r}; use none, all, period or duration")
            return MISSING_VALUE
        if isinstance(raw, str):
            name = raw.upper()
            if name in GRANULARITY_PERIODS:
                return cls.named(name)
            ctx.error(path, f"unknown granularity {shown(raw)}{did_you_mean(name, GRANULARITY_PERIODS)}; one of "
                            + ", ".join(GRANULARITY_PERIODS))
            return MISSING_VALUE
        ctx.error(path, f"expected a granularity name such as 'HOUR', got {shown(raw)}")
        return MISSING_VALUE

    def _to_raw(self) -> Any:
        return self.name if self.name in GRANULARITY_PERIODS else {"type": "period", "period": self.name}

    def floor_unit(self) -> tuple[int, str]:
        """(multiple, unit) for pyarrow's floor_temporal: buckets align to the epoch, weeks start on Monday."""
        p = self.period
        assert p is not None
        parts = [(p.years, "year"), (p.months, "month"), (p.weeks, "week"), (p.days, "day"), (p.hours, "hour"),
                 (p.minutes, "minute")]
        nonzero = [(n, u) for n, u in parts if n]
        if p.seconds:
            nonzero.append((int(p.seconds * 1000), "millisecond"))
        if len(nonzero) != 1:  # a mixed period such as PT1H30M: count it in milliseconds
            if p.is_calendar:
                raise ValueError(f"granularity {self.name}: mixed calendar periods are not supported")
            return int(p.total_seconds * 1000), "millisecond"
        n, unit = nonzero[0]
        if unit == "year":
            n, unit = n * 12, "month"
        return n, unit

    def calendar_bucket(self) -> str | None:
        """The smallest of hour, day, month and year whose buckets each hold whole buckets of this granularity
        (an Iceberg table's time partition: one segment, one partition), or None when none does (weeks cross
        months, ALL spans everything)."""
        if self.period is None:
            return None
        n, unit = self.floor_unit()
        if unit == "week":
            return None
        if unit == "month":
            return "month" if n == 1 else "year" if 12 % n == 0 else None
        millis = _millis(n, unit)
        if 3_600_000 % millis == 0:
            return "hour"
        return "day" if 86_400_000 % millis == 0 else None

    def holds(self, other: "Granularity") -> bool:
        """Whether each bucket of this granularity is made of whole buckets of `other`: HOUR holds FIFTEEN_MINUTE
        and DAY holds SIX_HOUR; MONTH holds DAY, but not WEEK (weeks cross months); ALL holds everything."""
        if self.period is None or other.period is None:
            return self.period is None  # ALL holds everything
        n, unit = self.floor_unit()
        m, other_unit = other.floor_unit()
        day = 86_400_000
        if unit in ("month", "week"):
            if other_unit == unit:
                return n % m == 0
            return other_unit not in ("month", "week") and day % _millis(m, other_unit) == 0
        if other_unit in ("month", "week"):
            return False
        return _millis(n, unit) % _millis(m, other_unit) == 0


def _millis(n: int, unit: str) -> int:
    return n * {"millisecond": 1, "minute": 60_000, "hour": 3_600_000, "day": 86_400_000}[unit]
