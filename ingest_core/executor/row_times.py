"""Each row's time, as Druid's TimestampSpec reads it, and the message rejection window: epoch millis, within
what a segment interval can hold (core.periods' MIN_DATETIME..MAX_DATETIME); a row without a usable time is
unparseable."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ingest_core.core.periods import MAX_DATETIME, MIN_DATETIME
from ingest_core.core.spec import DatasourceSpec
from ingest_core.executor.row_values import to_long_value
from ingest_core.executor.timestamps import timestamp_parser

TIME_TYPE = pa.timestamp("ms", tz="UTC")
_EPOCH = datetime(1970, 1, 1, tzinfo=MIN_DATETIME.tzinfo)
MIN_TIME_MS = (MIN_DATETIME - _EPOCH) // timedelta(milliseconds=1)  # row times a segment interval can hold
MAX_TIME_MS = (MAX_DATETIME - _EPOCH) // timedelta(milliseconds=1)  # (exclusive); see core.periods


class RowTimes:
    """A spec's timestampSpec (`format`, `missingValue`), applied to a chunk's column of raw times."""

    def __init__(self, spec: DatasourceSpec) -> None:
        self.ts_spec = spec.data_schema.timestamp_spec
        self.parse_ts = timestamp_parser(self.ts_spec.format)
        self.missing_ts = (int(self.ts_spec.missing_value.timestamp() * 1000)
                           if self.ts_spec.missing_value is not None else None)
        self.transformed = bool(spec.data_schema.transform_spec.transforms)  # a transform may set __time

    def read(self, raw: Any, n: int) -> tuple[pa.Array, list[tuple[int, str]]]:
        """Epoch millis per row (null where unreadable) and the rows that could not be read."""
        if raw is None:
            raw = pa.nulls(n)
        fmt = self.ts_spec.format.lower()
        fast: pa.Array | None = None
        values = raw if isinstance(raw, list) else None
        try:
            if values is None and (raw.null_count == 0 or self.missing_ts is None):
                if pa.types.is_string(raw.type) and fmt in ("iso", "auto"):
                    # via nanoseconds, so finer fractions than milliseconds truncate as Druid does
                    nanos = pc.cast(raw, pa.timestamp("ns", tz="UTC"))
                    fast = pc.cast(pc.cast(nanos, TIME_TYPE, safe=False), pa.int64())
                elif pa.types.is_integer(raw.type) and fmt in ("millis", "auto"):
                    fast = pc.cast(raw, pa.int64())
                elif pa.types.is_integer(raw.type) and fmt == "posix":
                    fast = pc.multiply_checked(pc.cast(raw, pa.int64()), 1000)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            fast = None
        if fast is not None and fast.null_count == 0:
            return fast, []
        bad: list[tuple[int, str]] = []
        out: list[int | None] = []
        for row, value in enumerate(values if values is not None else raw.to_pylist()):
            if value is None and self.missing_ts is not None:
                out.append(self.missing_ts)
                continue
            try:
                if value is None:
                    raise ValueError("missing")
                millis = self.parse_ts(value)
                if not MIN_TIME_MS <= millis < MAX_TIME_MS:
                    raise ValueError(f"outside the times a segment can hold: [{MIN_DATETIME.isoformat()}, "
                                     f"{MAX_DATETIME.isoformat()})")
                out.append(millis)
            except (ValueError, TypeError, OverflowError, ArithmeticError) as exc:
                out.append(None)
                bad.append((row, f"Timestamp[{value}] is unparseable! (timestampSpec column "
                                 f"{self.ts_spec.column!r}, format {self.ts_spec.format!r}: {exc})"))
        return pa.array(out, pa.int64()), bad

    def check(self, raw: pa.Array, n: int, bad: dict[int, str]) -> pa.Array:
        """Epoch millis of each row's `__time` (after the transforms); a row whose time is null, not a
        timestamp, or outside what a segment interval can hold (MIN_TIME_MS..MAX_TIME_MS) is unparseable."""
        if isinstance(raw, pa.ChunkedArray):
            raw = raw.combine_chunks()
        try:
            if pa.types.is_timestamp(raw.type):  # a transform's timestamp: milliseconds, finer digits dropped
                raw = pc.cast(raw, TIME_TYPE, safe=False)
            millis = pc.cast(raw, pa.int64())  # a fraction or a number past the long range: per value, below
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            values = []
            for v in raw.to_pylist():
                try:
                    values.append(to_long_value(v))
                except (ValueError, TypeError, OverflowError):
                    values.append(None)
            millis = pa.array(values, pa.int64())
        valid = pc.fill_null(pc.and_(pc.greater_equal(millis, MIN_TIME_MS), pc.less(millis, MAX_TIME_MS)), False)
        if not pc.all(valid).as_py():
            for row in pc.indices_nonzero(pc.invert(valid)).to_pylist():
                if row not in bad:
                    value = raw[row].as_py()
                    why = "null" if value is None else "outside the times a segment interval can hold"
                    bad[row] = (f"Timestamp[{value}] is unparseable! (__time is {why}: [{MIN_DATETIME.isoformat()}, "
                                f"{MAX_DATETIME.isoformat()}); set by timestampSpec column {self.ts_spec.column!r}"
                                f"{' or a transform' if self.transformed else ''})")
        return millis


def message_time_window(spec: DatasourceSpec, created_at: datetime) -> tuple[int | None, int | None]:
    """Druid's message rejection window, in epoch millis, relative to the task group's creation time:
    rows before `lateMessageRejectionStartDateTime` (or creation - lateMessageRejectionPeriod) and rows after
    creation + taskDuration + earlyMessageRejectionPeriod are thrown away."""
    io = spec.io_config
    lo = hi = None
    if io.late_message_rejection_start_date_time is not None:
        lo = io.late_message_rejection_start_date_time
    elif io.late_message_rejection_period is not None:
        lo = io.late_message_rejection_period.subtract_from(created_at)
    if io.early_message_rejection_period is not None:
        hi = io.early_message_rejection_period.add_to(io.task_duration.add_to(created_at))

    def ms(d: datetime | None) -> int | None:
        return None if d is None else int((d - datetime(1970, 1, 1, tzinfo=d.tzinfo)) / timedelta(milliseconds=1))
    return ms(lo), ms(hi)
