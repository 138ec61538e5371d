"""Calendar arithmetic on epoch milliseconds, vectorized with numpy: whole months added with the day clamped to
the month's last (Howard Hinnant's civil-date algorithms), for timestamp_shift by years and months.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def add_months(millis: Any, months: Any) -> Any:
    """Epoch millis plus whole months on the calendar (the day clamped to the month's last), vectorized with
    Howard Hinnant's civil-date arithmetic."""
    days = np.floor_divide(millis, 86_400_000)
    time_of_day = millis - days * 86_400_000
    year, month, day = _civil_from_days(days)
    total = year * 12 + (month - 1) + months
    year = np.floor_divide(total, 12)
    month = total - year * 12 + 1
    leap = (year % 4 == 0) & ((year % 100 != 0) | (year % 400 == 0))
    last = np.array([0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31])[month] + ((month == 2) & leap)
    return _days_from_civil(year, month, np.minimum(day, last)) * 86_400_000 + time_of_day


def _civil_from_days(days: Any) -> tuple[Any, Any, Any]:
    z = days + 719_468
    era = np.floor_divide(z, 146_097)
    doe = z - era * 146_097
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = np.where(mp < 10, mp + 3, mp - 9)
    return yoe + era * 400 + (month <= 2), month, day


def _days_from_civil(year: Any, month: Any, day: Any) -> Any:
    year = year - (month <= 2)
    era = np.floor_divide(year, 400)
    yoe = year - era * 400
    doy = (153 * ((month + 9) % 12) + 2) // 5 + day - 1
    return era * 146_097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719_468
