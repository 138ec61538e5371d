"""Hostile records through the real RowParser and PartialRollup: every bad value fails its row
only, is counted as Druid counts it, is listed as a Rejection, and never changes a number; the written segment
reads back. The value -> outcome table of docs/spark-job.md ("Bad data") is what these tests pin."""

from __future__ import annotations

import io
import json
import math
from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ingest_core.core.periods import format_datetime, parse_datetime
from ingest_core.core.spec import parse_spec
from ingest_core.executor.rollup import PartialRollup, aggregators, long_sum_value
from ingest_core.executor.row_parser import OFFSET, TIME, RecordChunk, RowParser
from ingest_core.handover.report import Outcome

CREATED = datetime(2026, 1, 1, tzinfo=timezone.utc)
T0 = "2026-01-01T00:00:00Z"


def spec(metrics=None, dimensions=None, transforms=None, flt=None, rollup=True, input_format=None, **schema):
    data_schema = {
        "dataSource": "h", "timestampSpec": {"column": "ts", "format": "auto"},
        "dimensionsSpec": {"dimensions": dimensions if dimensions is not None else
                           ["a", {"type": "long", "name": "dl"}, {"type": "double", "name": "dd"}]},
        "metricsSpec": metrics if metrics is not None else [
            {"type": "count", "name": "c"}, {"type": "longSum", "name": "ls", "fieldName": "n"},
            {"type": "doubleSum", "name": "ds", "fieldName": "x"}, {"type": "floatMax", "name": "fm", "fieldName": "f"}],
        "granularitySpec": {"segmentGranularity": "HOUR", "queryGranularity": "NONE", "rollup": rollup},
        **schema}
    if transforms is not None or flt is not None:
        data_schema["transformSpec"] = {"transforms": transforms or [], **({"filter": flt} if flt else {})}
    return parse_spec({"type": "kafka", "spec": {"dataSchema": data_schema, "ioConfig": {
        "topic": "t", "inputFormat": input_format or {"type": "json"},
        "consumerProperties": {"bootstrap.servers": "x:1"}}}})


def parse(values, sp=None, **kw):
    parser = RowParser(sp or spec(), CREATED, max_saved_exceptions=100, **kw)
    raw = [v if isinstance(v, bytes) or v is None else (v if isinstance(v, str) else json.dumps(v)).encode()
           for v in values]
    return parser.parse(RecordChunk("t", 2, range(100, 100 + len(raw)), raw))


def outcomes(out):
    return {r.offset - 100: r.outcome for r in out.rejections}


def counts(out):
    s = out.stats
    return s.processed, s.processed_with_error, s.unparseable, s.thrown_away


def reads_back(table: pa.Table) -> list[dict]:
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return pq.read_table(io.BytesIO(buf.getvalue())).to_pylist()


# ------------------------------------------------------------------------------------------ timestamps


@pytest.mark.parametrize("ts", ["9999-06-01T00:00:00Z", "9999-12-31T23:59:59.999Z", 253402300800000,
                                4611686018427387904, -62135596800001, "-0001-01-01T00:00:00Z"])
def test_timestamps_a_segment_interval_cannot_hold_are_unparseable(ts):
    out = parse([{"ts": T0, "a": "ok", "n": 1}, {"ts": ts, "a": "far", "n": 2}])
    assert counts(out) == (1, 0, 1, 0)
    assert outcomes(out) == {1: Outcome.UNPARSEABLE}
    assert "offset 101" in out.exceptions[0].describe() and "t/2" in out.exceptions[0].describe()
    assert [r["a"] for r in reads_back(out.table)] == ["ok"]


def test_year_1_is_representable_and_its_interval_formats_and_parses_back():
    out = parse([{"ts": "0001-01-01T00:30:00Z", "a": "old", "n": 1}])
    assert counts(out) == (1, 0, 0, 0)
    start = out.table.column(TIME)[0].as_py()
    assert parse_datetime(format_datetime(start)) == start  # the publish formats and parses the interval


def test_a_transform_moving_time_out_of_range_fails_that_row_only():
    sp = spec(transforms=[{"type": "expression", "name": "__time", "expression": "__time + n"}])
    out = parse([{"ts": T0, "a": "ok", "n": 1}, {"ts": T0, "a": "far", "n": 9_000_000_000_000_000}], sp)
    assert counts(out) == (1, 0, 1, 0) and outcomes(out) == {1: Outcome.UNPARSEABLE}


# ------------------------------------------------------------------------------------------ transforms


def test_a_transform_that_raises_fails_only_the_rows_at_fault():
    expression = "n / d"  # long division by zero is an error (Druid's Transformer: a ParseException)
    sp = spec(dimensions=["a", {"type": "long", "name": "t2"}],
              transforms=[{"type": "expression", "name": "t2", "expression": expression}])
    values = [{"ts": T0, "a": f"v{i}", "n": 10 * i, "d": 0 if i == 3 else i + 1} for i in range(5)]
    out = parse(values, sp)
    assert counts(out) == (4, 0, 1, 0) and outcomes(out) == {3: Outcome.UNPARSEABLE}
    message = out.exceptions[0].message
    assert "t2" in message and expression in message and "offset 103" in message and "'d': 0" in message
    assert [(r["a"], r["t2"]) for r in out.table.to_pylist()] == [("v0", 0), ("v1", 5), ("v2", 6), ("v4", 8)]


def test_a_transform_failing_in_vectorized_evaluation_keeps_the_other_rows_exact():
    sp = spec(dimensions=["a", {"type": "long", "name": "t2"}],
              transforms=[{"type": "expression", "name": "t2", "expression": "n / d + n * 2"}])
    good = [{"ts": T0, "a": f"v{i}", "n": 7 * i, "d": i + 1} for i in range(9)]
    ref = parse(good, sp).table.to_pylist()
    out = parse(good[:2] + [{"ts": T0, "a": "bad", "n": 1, "d": 0}] + good[2:], sp)
    assert counts(out) == (9, 0, 1, 0) and outcomes(out) == {2: Outcome.UNPARSEABLE}
    assert out.table.to_pylist() == [
        {**r, "__offset": r["__offset"] + (1 if i >= 2 else 0)} for i, r in enumerate(ref)]


def test_a_rows_transform_value_does_not_depend_on_what_its_neighbours_sent():
    # `n` mixes numbers and text in this chunk (decoded as text for the chunk): each row is still evaluated as
    # in a chunk of its own kind, so the long division by zero fails its row, and 84 / 2 stays a long
    sp = spec(dimensions=["a", {"type": "long", "name": "t2"}],
              transforms=[{"type": "expression", "name": "t2", "expression": "n / d"}])
    mixed = [{"ts": T0, "a": "z", "n": 1, "d": 0}, {"ts": T0, "a": "l", "n": 84, "d": 2},
             {"ts": T0, "a": "t", "n": "7", "d": 7}, {"ts": T0, "a": "f", "n": 1e300, "d": 1}]
    out = parse(mixed, sp)
    assert outcomes(out)[0] is Outcome.UNPARSEABLE and "offset 100" in out.exceptions[0].message
    alone = {v["a"]: parse([v], sp).table.to_pylist() for v in mixed[1:]}
    for r in out.table.to_pylist():
        (want,) = alone[r["a"]]
        assert (r["a"], r["t2"]) == (want["a"], want["t2"])
    assert [r["t2"] for r in out.table.to_pylist() if r["a"] == "l"] == [42]


@pytest.mark.parametrize("expression", ["n / d", "cast(a, 'LONG') * 2", "n * 1000000000000000000"])
def test_expression_errors_never_fail_the_chunk(expression):
    # whatever Druid's rule for the value (null, or an error), it holds for that row only
    sp = spec(dimensions=["a", "t2"], transforms=[{"type": "expression", "name": "t2", "expression": expression}])
    values = [{"ts": T0, "a": f"v{i}", "n": 10 if i else 100, "d": i} for i in range(4)]
    out = parse(values, sp)
    assert counts(out)[0] + counts(out)[2] == 4
    alone = parse(values[1:], sp).table.column("t2").to_pylist()
    kept = out.table.to_pylist()
    assert [r["t2"] for r in kept if r["__offset"] > 100] == alone


# ------------------------------------------------------------------------------------------ numbers


@pytest.mark.parametrize("value", [1e300, 1e20, -1e30, 9223372036854775808, -9223372036854775809, 2 ** 70,
                                   "1e300", "NaN", "Infinity", "-Infinity", "9223372036854775808"])
def test_an_out_of_range_long_is_an_error_never_a_wrapped_number(value):
    out = parse([{"ts": T0, "a": "ok", "n": 5}, {"ts": T0, "a": "big", "n": value}])
    assert counts(out) == (1, 1, 0, 0)
    assert outcomes(out) == {1: Outcome.PROCESSED_WITH_ERROR}
    rows = reads_back(out.table)
    assert [r["__in_long_n"] for r in rows] == [5, None]


@pytest.mark.parametrize("text", ["1_000", "\u0663", "1e_3"])
def test_numeric_text_is_read_as_java_reads_it(text):
    out = parse([{"ts": T0, "a": "u", "n": text, "x": text}])
    assert counts(out) == (0, 1, 0, 0)
    assert [(r["__in_long_n"], r["__in_double_x"]) for r in out.table.to_pylist()] == [(None, None)]


def test_thrown_away_by_the_rejection_window_are_listed_when_asked():
    raw = {"type": "kafka", "spec": {"dataSchema": {
        "dataSource": "h", "timestampSpec": {"column": "ts"}, "dimensionsSpec": {"dimensions": ["a"]},
        "granularitySpec": {"segmentGranularity": "HOUR"}},
        "ioConfig": {"topic": "t", "inputFormat": {"type": "json"}, "consumerProperties": {"bootstrap.servers": "x:1"},
                     "lateMessageRejectionPeriod": "PT1H"}}}
    values = [{"ts": T0, "a": "now"}, {"ts": "2025-12-31T22:00:00Z", "a": "late"}]
    loud = parse(values, parse_spec(raw), keep_thrown_away=True)
    assert counts(loud) == (1, 0, 0, 1) and outcomes(loud) == {1: Outcome.THROWN_AWAY}
    assert "rejection window" in loud.rejections[0].message


def test_nan_and_infinity_json_tokens_into_long_and_double_columns():
    values = [b'{"ts": "2026-01-01T00:00:00Z", "a": "nan", "n": NaN, "x": NaN, "f": NaN}',
              b'{"ts": "2026-01-01T00:00:00Z", "a": "inf", "n": Infinity, "x": -Infinity, "f": Infinity}',
              b'{"ts": "2026-01-01T00:00:00Z", "a": "ovf", "n": 1e400, "x": 1e400, "f": 1e300}',
              b'{"ts": "2026-01-01T00:00:00Z", "a": "ok", "n": 3, "x": 1.5, "f": 2.5}']
    out = parse(values)
    assert counts(out) == (1, 3, 0, 0)
    rows = reads_back(out.table)
    assert [(r["__in_long_n"], r["__in_double_x"], r["__in_float_f"]) for r in rows] == [
        (None, None, None), (None, None, None), (None, None, None), (3, 1.5, 2.5)]


def test_a_field_mixing_huge_numbers_and_numeric_text():
    out = parse([{"ts": T0, "a": "a", "n": 1e300}, {"ts": T0, "a": "b", "n": "7"}, {"ts": T0, "a": "c", "n": 7}])
    assert counts(out) == (2, 1, 0, 0) and outcomes(out) == {0: Outcome.PROCESSED_WITH_ERROR}
    assert [r["__in_long_n"] for r in reads_back(out.table)] == [None, 7, 7]


def test_fast_path_doubles_out_of_long_range_are_errors():
    # every record well-formed, so pyarrow's reader decodes them: the range check must be vectorized there too
    values = [{"ts": T0, "a": "x", "n": 1, "dl": v} for v in (1.5, 9.3e18, -9.3e18, 4.0)]
    out = parse(values)
    assert [r["dl"] for r in out.table.to_pylist()] == [1, None, None, 4]
    assert outcomes(out) == {1: Outcome.PROCESSED_WITH_ERROR, 2: Outcome.PROCESSED_WITH_ERROR}


def test_a_json_object_where_a_string_dimension_is_expected_is_stored_as_its_json_text():
    out = parse([{"ts": T0, "a": {"k": [1, 2]}, "n": 1}, {"ts": T0, "a": [], "n": 1}])
    assert [r["a"] for r in out.table.to_pylist()] == ['{"k":[1,2]}', None]
    assert counts(out) == (2, 0, 0, 0)


def test_objects_and_arrays_into_numeric_columns_are_processed_with_error():
    out = parse([{"ts": T0, "a": "o", "n": {"k": 1}}, {"ts": T0, "a": "l", "n": [1]}, {"ts": T0, "a": "b", "n": True}])
    assert counts(out)[1] == 2 and outcomes(out) == {0: Outcome.PROCESSED_WITH_ERROR, 1: Outcome.PROCESSED_WITH_ERROR}


# ------------------------------------------------------------------------------------------ text


def test_invalid_utf8_inside_valid_json_is_unparseable_on_the_fast_path_too():
    values = [b'{"ts": "2026-01-01T00:00:00Z", "a": "ok", "n": 1}', b'{"ts": "2026-01-01T00:00:00Z", "a": "x\xff\xfe", "n": 2}']
    out = parse(values)
    assert counts(out) == (1, 0, 1, 0) and outcomes(out) == {1: Outcome.UNPARSEABLE}
    assert [r["a"] for r in reads_back(out.table)] == ["ok"]


def test_lone_surrogates_are_unparseable_and_nul_is_kept():
    values = [b'{"ts": "2026-01-01T00:00:00Z", "a": "\\ud800", "n": 1}',
              b'{"ts": "2026-01-01T00:00:00Z", "a": "nul\\u0000here", "n": 2}',
              b'{"ts": "2026-01-01T00:00:00Z", "a": "pair \\ud83d\\ude00", "n": 3}']
    out = parse(values)
    assert outcomes(out) == {0: Outcome.UNPARSEABLE}
    assert [r["a"] for r in reads_back(out.table)] == ["nul\x00here", "pair \U0001F600"]


def test_parse_exception_messages_hold_no_nul_or_surrogate():
    # the store (PostgreSQL text) cannot hold NUL: messages escape it
    out = parse([b'{"ts": "nope\\u0000", "a": "x"}', b'{"ts": "\\udfff"}'])
    assert out.stats.unparseable == 2
    for e in out.exceptions:
        e.message.encode("utf-8")
        assert "\x00" not in e.message
    for r in out.rejections:
        assert "\x00" not in r.message


# ------------------------------------------------------------------------------------------ thrown away


def test_thrown_away_rows_are_listed_only_when_asked():
    sp = spec(flt={"type": "selector", "dimension": "a", "value": "keep"})
    values = [{"ts": T0, "a": "keep", "n": 1}, {"ts": T0, "a": "drop", "n": 1}, None, b"",
              {"ts": "2000-01-01T00:00:00Z", "a": "keep", "n": 1}]
    quiet = parse(values, sp)
    assert counts(quiet) == (2, 0, 0, 3) and quiet.rejections == []
    loud = parse(values, sp, keep_thrown_away=True)
    assert counts(loud) == counts(quiet)
    assert outcomes(loud) == {1: Outcome.THROWN_AWAY, 2: Outcome.THROWN_AWAY, 3: Outcome.THROWN_AWAY}


# ------------------------------------------------------------------------------------------ rollup


def test_partial_rollup_of_a_long_sum_past_int64_keeps_it_exact():
    sp = spec(dimensions=["a"], metrics=[{"type": "count", "name": "c"},
                                         {"type": "longSum", "name": "ls", "fieldName": "n"}])
    big = 2 ** 62
    values = [{"ts": T0, "a": "g", "n": big}] * 3 + [{"ts": T0, "a": "h", "n": 1}] * 2 + [
        {"ts": T0, "a": "m", "n": -(2 ** 63)}] * 2 + [{"ts": T0, "a": "h", "n": -7}]
    out = parse(values, sp)
    assert counts(out) == (8, 0, 0, 0)
    table = out.table.append_column("__bucket", out.table.column(TIME))
    rollup = PartialRollup(["__bucket", "a"], aggregators(sp))
    partial = rollup.aggregate(table)
    assert partial.schema == rollup.schema(table.schema)
    # the partial rows carry each longSum as two sums (low and high 32 bits) that Spark adds without overflow
    exact = {r["a"]: long_sum_value(r, "ls") for r in partial.to_pylist()}
    assert exact == {"g": 3 * big, "h": -5, "m": -(2 ** 64)}
    assert {r["a"]: r["c"] for r in partial.to_pylist()} == {"g": 3, "h": 3, "m": 2}


def test_floats_are_never_stored_as_infinity():
    out = parse([{"ts": T0, "a": "x", "n": 1, "f": 3.5e38}, {"ts": T0, "a": "y", "n": 1, "f": -1e39}])
    assert [r["__in_float_f"] for r in out.table.to_pylist()] == [None, None]
    assert all(not (isinstance(v, float) and math.isinf(v)) for r in out.table.to_pylist() for v in r.values())


def test_rows_keep_their_own_offsets_when_a_tombstone_and_a_two_object_record_even_out_the_count():
    """Found by the Hypothesis test: 4 records (a tombstone, one object, one object, two objects) give 4 rows, and
    a row count equal to the record count was taken to mean one row per record: every row got its neighbour's
    offset."""
    sp = spec(dimensions=["a"])
    t = T0.encode()
    payloads = [None, b'{"ts": "%s", "a": "one"}' % t, b'{"ts": "%s", "a": "two"}' % t,
                b'{"ts": "%s", "a": "three"} {"ts": "%s", "a": "four"}' % (t, t)]
    chunk = RecordChunk("t", 1, range(500, 504), payloads)
    out = RowParser(sp, CREATED, keep_thrown_away=True).parse(chunk)
    assert sorted((r["a"], r[OFFSET]) for r in out.table.to_pylist()) == \
        [("four", 503), ("one", 501), ("three", 503), ("two", 502)]
    assert [(r.offset, r.outcome) for r in out.rejections] == [(500, Outcome.THROWN_AWAY)]


@pytest.mark.parametrize("first", [b"null", b"[1, 2]", b"42", b'"text"', b' {"ts": "2026-01-01T00:00:00Z", "a": "x"}'])
def test_a_record_that_is_not_an_object_never_reaches_the_vectorized_reader(first):
    """pyarrow 26's JSON reader crashes the process (SIGSEGV) on a first line `null` with an explicit schema
    (found by the Hypothesis test): records that do not start as an object take the per-record path."""
    out = parse([first, {"ts": T0, "a": "ok"}])
    assert [r["a"] for r in out.table.to_pylist()] == (["x", "ok"] if first.startswith(b" ") else ["ok"])


def test_a_record_that_is_a_json_array_of_objects_is_unparseable_and_concatenated_objects_are_rows():
    """The table of docs/spark-job.md: a record is one JSON object or several one after another (one row each); a
    JSON array, even of objects, is not unpacked into rows."""
    out = parse([b'[{"ts": "%s", "a": "x"}, {"ts": "%s", "a": "y"}]' % (T0.encode(), T0.encode()),
                 b'{"ts": "%s", "a": "p"}\n{"ts": "%s", "a": "q"}' % (T0.encode(), T0.encode())])
    assert counts(out) == (2, 0, 1, 0) and outcomes(out) == {0: Outcome.UNPARSEABLE}
    assert sorted(r["a"] for r in out.table.to_pylist()) == ["p", "q"]
    (exception,) = out.exceptions
    assert exception.offset == 100 and "expected a JSON object, got list" in exception.message
