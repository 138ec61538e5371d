"""Pure parsing logic, no services: timestamps, filters, transforms, and the row parser's two decode paths."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pyarrow as pa
import pytest

from ingest_core.core.errors import SpecError
from ingest_core.core.spec import Granularity, parse_spec
from ingest_core.core.timeline import visible_segments
from ingest_core.executor import buckets, row_parser
from ingest_core.executor.expressions import (
    ExpressionError,
    compile_expression,
    evaluate_to_array,
)
from ingest_core.executor.filters import FilterError, compile_filter
from ingest_core.executor.row_parser import RecordChunk, RowParser
from ingest_core.executor.timestamps import timestamp_parser

MS_2026 = 1767225600000  # 2026-01-01T00:00:00Z


@pytest.mark.parametrize("fmt,value,expected", [
    ("auto", "2026-01-01T00:00:00Z", MS_2026), ("auto", MS_2026, MS_2026), ("auto", str(MS_2026), MS_2026),
    ("iso", "2026-01-01T01:00:00+01:00", MS_2026), ("iso", "2026-01-01", MS_2026),
    ("iso", "2026-01-01T00:00:00.123456789Z", MS_2026 + 123),
    ("auto", "2026-1-1T0:00:00Z", MS_2026), ("iso", "2026-1-01", MS_2026),  # one-digit fields, as Joda reads them
    ("posix", MS_2026 // 1000, MS_2026), ("millis", MS_2026, MS_2026), ("micro", MS_2026 * 1000 + 999, MS_2026),
    ("nano", MS_2026 * 1_000_000, MS_2026), ("ruby", MS_2026 / 1000 + 0.25, MS_2026 + 250),
    ("yyyy-MM-dd HH:mm:ss.SSS", "2026-01-01 00:00:00.042", MS_2026 + 42),
    ("dd/MMM/yyyy:HH:mm:ss Z", "01/Jan/2026:02:00:00 +0200", MS_2026),
    ("yyyyMMdd'T'HHmm", "20260101T0000", MS_2026),
])
def test_timestamp_formats(fmt, value, expected):
    assert timestamp_parser(fmt)(value) == expected


def test_unparseable_timestamps_raise():
    with pytest.raises(ValueError):
        timestamp_parser("iso")("yesterday")
    with pytest.raises(ValueError):
        timestamp_parser("millis")("soon")


def cols(**arrays):
    return {k: pa.array(v) for k, v in arrays.items()}


@pytest.mark.parametrize("flt,expected", [
    ({"type": "selector", "dimension": "a", "value": "x"}, [True, False, False, False]),
    ({"type": "selector", "dimension": "a", "value": None}, [False, False, False, True]),
    ({"type": "in", "dimension": "n", "values": ["1", 3]}, [True, False, True, False]),
    ({"type": "bound", "dimension": "n", "lower": "2", "ordering": "numeric"}, [False, True, True, False]),
    ({"type": "bound", "dimension": "a", "lower": "x", "upper": "z", "upperStrict": True}, [True, True, False, False]),
    ({"type": "like", "dimension": "a", "pattern": "x%"}, [True, True, False, False]),
    ({"type": "regex", "dimension": "a", "pattern": "y"}, [False, True, False, False]),
    ({"type": "and", "fields": [{"type": "selector", "dimension": "n", "value": 2},
                                {"type": "not", "field": {"type": "selector", "dimension": "a", "value": "x"}}]},
     [False, True, False, False]),
    ({"type": "or", "fields": [{"type": "selector", "dimension": "n", "value": "1"},
                               {"type": "null", "column": "a"}]}, [True, False, False, True]),
    ({"type": "not", "field": {"type": "selector", "dimension": "a", "value": "x"}}, [False, True, True, False]),
])
def test_filters(flt, expected):
    c = cols(a=["x", "xy", "z", None], n=[1, 2, 3, None])
    assert compile_filter(flt)(c, 4).to_pylist() == expected


def test_filter_errors_name_the_problem():
    with pytest.raises(FilterError, match="'search' is not supported.*supported: selector"):
        compile_filter({"type": "search", "dimension": "a"})
    with pytest.raises(FilterError, match=r"filter.fields\[1\]: a selector filter needs 'dimension'"):
        compile_filter({"type": "and", "fields": [{"type": "true"}, {"type": "selector"}]})


@pytest.mark.parametrize("expr,expected", [
    ("a + '!'", ["x!", "y!", None]),
    ("concat(upper(a), '-', n)", ["X-1", "Y-2", None]),
    ("n * 2 + 1", [3, 5, None]),
    ("7 / n", [7, 3, None]),
    ("n > 1 && a == 'y'", [0, 1, None]),
    ("if(n > 1, 'big', 'small')", ["small", "big", "small"]),
    ("nvl(a, 'none')", ["x", "y", "none"]),
    ("timestamp_floor(__time, 'PT1H')", [MS_2026, MS_2026, MS_2026]),
    ("cast(n, 'DOUBLE') / 2", [0.5, 1.0, None]),
    ("strlen(substring(a, 0, 1))", [1, 1, None]),
])
def test_transform_expressions(expr, expected):
    c = cols(a=["x", "y", None], n=[1, 2, None])
    c["__time"] = pa.array([MS_2026 + 5, MS_2026 + 60_000, MS_2026 + 3_599_999])
    assert evaluate_to_array(compile_expression(expr), c, 3).to_pylist() == expected


def test_unsupported_expression_is_named():
    with pytest.raises(ExpressionError, match=r"function bloom_filter_test\(\) is not supported"):
        compile_expression("bloom_filter_test(a, 'AAAA')")


def spec(**overrides):
    data_schema = {"dataSource": "p", "timestampSpec": {"column": "ts", "format": "auto"},
                   "dimensionsSpec": {"dimensions": ["a", {"type": "long", "name": "n"}, {"type": "double", "name": "d"}]},
                   "metricsSpec": [{"type": "count", "name": "c"}, {"type": "longSum", "name": "s", "fieldName": "n"},
                                   {"type": "doubleMax", "name": "m", "fieldName": "n"}],
                   "granularitySpec": {"segmentGranularity": "HOUR"}, **overrides}
    return parse_spec({"type": "kafka", "spec": {"dataSchema": data_schema, "ioConfig": {
        "topic": "t", "inputFormat": {"type": "json"}, "consumerProperties": {"bootstrap.servers": "x:1"}}}})


def test_fast_and_slow_decoding_give_the_same_rows(monkeypatch):
    parser = RowParser(spec(), datetime(2026, 1, 1, tzinfo=timezone.utc))
    # which decoder produced each chunk's columns: the real methods, each call recorded with whether it decoded
    decoded: list[tuple[str, bool]] = []

    def fast_path(values, schema, _real=row_parser.json_columns):
        columns = _real(values, schema)
        decoded.append(("json_columns", columns is not None))
        return columns

    def slow_path(*args, _real=parser._decode_slow):
        columns = _real(*args)
        decoded.append(("_decode_slow", columns is not None))
        return columns
    monkeypatch.setattr(row_parser, "json_columns", fast_path)
    monkeypatch.setattr(parser, "_decode_slow", slow_path)
    values = [json.dumps({"ts": f"2026-01-01T00:00:{i:02d}.5Z", "a": f"v{i}", "n": i, "d": i / 2}).encode()
              for i in range(50)]
    fast = parser.parse(RecordChunk("t", 0, list(range(50)), values))
    assert decoded == [("json_columns", True)]  # pyarrow's JSON reader decoded the whole chunk
    decoded.clear()
    # one record the vectorized path cannot take (a number as text) sends the chunk down the per-record path
    slow = parser.parse(RecordChunk("t", 0, list(range(51)), values + [b'{"ts": "2026-01-01T00:01:00Z", "n": "7"}']))
    assert decoded == [("json_columns", False), ("_decode_slow", True)]
    assert fast.table.num_rows == 50 and fast.table.to_pylist() == slow.table.to_pylist()[:50]
    assert slow.table.to_pylist()[50]["n"] == 7 and slow.stats.processed == 51


def test_row_errors_are_counted_and_saved():
    parser = RowParser(spec(), datetime(2026, 1, 1, tzinfo=timezone.utc), max_saved_exceptions=10)
    values = [b'{"ts": 1767225600000, "a": "ok", "n": 1}', b'{"ts": 1767225600000, "n": "lots"}', b"[1, 2]",
              None, b'{"a": "no time"}']
    out = parser.parse(RecordChunk("t", 3, [10, 11, 12, 13, 14], values))
    assert (out.stats.processed, out.stats.processed_with_error, out.stats.unparseable, out.stats.thrown_away) == (1, 1, 2, 1)
    assert [(e.offset, e.unparseable) for e in out.exceptions] == [(11, False), (12, True), (14, True)]
    assert "could not convert value [lots] to long" in out.exceptions[0].message
    assert "Timestamp[None] is unparseable" in out.exceptions[2].message


def test_missing_value_fills_absent_timestamps():
    parser = RowParser(spec(timestampSpec={"column": "ts", "missingValue": "2026-01-01T00:00:00Z"}),
                       datetime(2026, 1, 1, tzinfo=timezone.utc))
    out = parser.parse(RecordChunk("t", 0, [0], [b'{"a": "x"}']))
    assert out.table.column("__time").to_pylist()[0] == datetime(2026, 1, 1, tzinfo=timezone.utc)


def test_spec_validation_rejects_bad_filters_transforms_and_aggregators():
    with pytest.raises(SpecError) as err:
        spec(transformSpec={"filter": {"type": "spatial", "dimension": "a"},
                            "transforms": [{"type": "expression", "name": "x", "expression": "lookup(a, 'tbl')"}]},
             metricsSpec=[{"type": "expression", "name": "u", "fields": ["a"], "initialValue": "a + 1",
                           "fold": "__acc + a"}])
    text = str(err.value)
    assert "filter type 'spatial' is not supported" in text
    assert "function lookup() is not supported" in text
    assert "metricsSpec[0].initialValue: initialValue must be a constant" in text


@pytest.mark.parametrize("name,when,start,end", [
    ("FIVE_MINUTE", "2026-01-01T10:07:00Z", "2026-01-01T10:05:00Z", "2026-01-01T10:10:00Z"),
    ("SIX_HOUR", "2026-01-01T13:00:00Z", "2026-01-01T12:00:00Z", "2026-01-01T18:00:00Z"),
    ("WEEK", "2026-01-01T13:00:00Z", "2025-12-29T00:00:00Z", "2026-01-05T00:00:00Z"),  # Thursday -> Monday
    ("QUARTER", "2026-05-17T13:00:00Z", "2026-04-01T00:00:00Z", "2026-07-01T00:00:00Z"),
    ("YEAR", "2026-05-17T13:00:00Z", "2026-01-01T00:00:00Z", "2027-01-01T00:00:00Z"),
])
def test_granularity_buckets(name, when, start, end):
    from ingest_core.core.periods import parse_datetime

    got = buckets.bucket(Granularity.named(name), parse_datetime(when))
    assert got == (parse_datetime(start), parse_datetime(end))


def test_timeline_hides_overshadowed_segments():
    from types import SimpleNamespace as S

    from ingest_core.core.periods import parse_datetime as t

    old = S(interval_start=t("2026-01-01T00:00:00Z"), interval_end=t("2026-01-01T01:00:00Z"), version="v1", used=True)
    old_2 = S(interval_start=t("2026-01-01T00:00:00Z"), interval_end=t("2026-01-01T01:00:00Z"), version="v1", used=True)
    day = S(interval_start=t("2026-01-01T00:00:00Z"), interval_end=t("2026-01-02T00:00:00Z"), version="v2", used=True)
    other = S(interval_start=t("2026-01-02T00:00:00Z"), interval_end=t("2026-01-02T01:00:00Z"), version="v1", used=True)
    unused = S(interval_start=t("2026-01-03T00:00:00Z"), interval_end=t("2026-01-03T01:00:00Z"), version="v9", used=False)
    assert visible_segments([old, old_2, other, unused]) == [old, old_2, other]
    assert visible_segments([old, old_2, day, other]) == [day, other]
