"""Time buckets on Arrow arrays: the segment interval or query-granularity bucket of each timestamp (UTC)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ingest_core.core.granularity import Granularity


def floor(granularity: Granularity, ts: Any) -> Any:
    """Bucket starts of a pyarrow timestamp array (UTC). NONE keeps milliseconds."""
    if granularity.period is None:
        return pc.floor_temporal(ts, 1, "millisecond")
    n, unit = granularity.floor_unit()
    if unit == "month" or (unit == "week" and n == 1):
        return pc.floor_temporal(ts, n, unit, week_starts_monday=True)
    # fixed-length buckets counted from the epoch, on integer millis (several weeks too: Druid's
    # PeriodGranularity counts them from its origin, the epoch, a Thursday; only one week starts on Monday)
    step = {"week": 7 * 86_400_000, "day": 86_400_000, "hour": 3_600_000, "minute": 60_000, "millisecond": 1}[unit] * n
    millis = pc.cast(pc.cast(ts, pa.timestamp("ms", tz="UTC")), pa.int64())
    floored = pc.subtract(millis, _pmod(millis, step))
    return pc.cast(pc.cast(floored, pa.timestamp("ms", tz="UTC")), ts.type)


def bucket(granularity: Granularity, when: datetime) -> tuple[datetime, datetime]:
    """The [start, end) bucket holding `when` (UTC)."""
    start = floor(granularity, pa.array([when], pa.timestamp("ms", tz="UTC")))[0].as_py()
    if granularity.period is None:
        return start, start + timedelta(milliseconds=1)
    return start, granularity.period.add_to(start)


def _pmod(values: Any, step: int) -> Any:
    """Floor modulo (non-negative remainder), so times before the epoch floor downwards too."""
    rem = pc.subtract(values, pc.multiply(pc.divide(values, step), step))
    return pc.if_else(pc.less(rem, 0), pc.add(rem, step), rem)
