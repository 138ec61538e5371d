from datetime import datetime, timedelta, timezone

import pytest

from ingest_core.core.periods import (
    Period,
    PeriodError,
    format_datetime,
    parse_datetime,
)


@pytest.mark.parametrize("text,delta", [
    ("PT1H", timedelta(hours=1)), ("PT10M", timedelta(minutes=10)), ("PT0.5S", timedelta(seconds=0.5)),
    ("P1D", timedelta(days=1)), ("P2W", timedelta(weeks=2)), ("P1DT2H3M4S", timedelta(days=1, hours=2, minutes=3, seconds=4)),
    ("pt30s", timedelta(seconds=30)),
])
def test_fixed_periods(text, delta):
    assert Period.parse(text).to_timedelta() == delta


def test_calendar_periods_add_like_joda():
    jan31 = datetime(2024, 1, 31, tzinfo=timezone.utc)
    assert Period.parse("P1M").add_to(jan31) == datetime(2024, 2, 29, tzinfo=timezone.utc)
    assert Period.parse("P1Y").add_to(datetime(2024, 2, 29, tzinfo=timezone.utc)) == datetime(2025, 2, 28, tzinfo=timezone.utc)
    assert Period.parse("P3M").subtract_from(datetime(2024, 5, 15, tzinfo=timezone.utc)) == datetime(2024, 2, 15, tzinfo=timezone.utc)
    with pytest.raises(PeriodError):
        Period.parse("P1M").to_timedelta()


@pytest.mark.parametrize("bad", ["", "P", "PT", "1H", "PT1X", "P1H", 3600, "PT1H30"])
def test_bad_periods(bad):
    with pytest.raises(PeriodError):
        Period.parse(bad)


def test_period_round_trip():
    for text in ("PT1H", "P1Y2M3DT4H5M6S", "PT1.5S", "P2147483647D"):
        assert str(Period.parse(text)) == text


def test_datetimes():
    assert parse_datetime("2016-01-01T11:00Z") == datetime(2016, 1, 1, 11, tzinfo=timezone.utc)
    assert parse_datetime("2016-01-01") == datetime(2016, 1, 1, tzinfo=timezone.utc)
    assert parse_datetime("2016-01-01T11:00:00.123+02:00") == datetime(2016, 1, 1, 9, 0, 0, 123000, tzinfo=timezone.utc)
    assert format_datetime(datetime(2016, 1, 1, 9, 0, 0, 123456, tzinfo=timezone.utc)) == "2016-01-01T09:00:00.123Z"
    for bad in ("2016-13-01", "yesterday", "2016-01-01T25:00Z"):
        with pytest.raises(PeriodError):
            parse_datetime(bad)
