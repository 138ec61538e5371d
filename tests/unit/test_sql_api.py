"""Druid's SQL API request fields and result formats (`service.sql_api`), against the shapes Druid's documentation
shows (docs/api-reference/sql-api.md, "Query output format")."""

from __future__ import annotations

import json
import math
from datetime import date, datetime, timezone
from decimal import Decimal
from zoneinfo import ZoneInfo

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ingest_core.query.results import TABLE as TEXT_TABLE, ResultFormat, druid_types, write_result
from ingest_core.service.sql_api import SqlApiError, SqlRequest

T = datetime(2015, 9, 12, 0, 47, 53, 259000, tzinfo=timezone.utc)
TABLE = pa.table({"__time": pa.array([T], pa.timestamp("us", tz="UTC")), "user": ["BlueMoon2662"],
                  "added": pa.array([Decimal(14)], pa.decimal128(38, 0)), "ratio": [0.5]})


def request(**fields) -> SqlRequest:
    return SqlRequest.from_body({"query": "SELECT 1", **fields}, max_timeout_s=300)


@pytest.mark.parametrize("types, sql_types, expected", [  # Druid's table, for object, array and csv
    (True, False, {"object": [{"user": {"type": "STRING"}}, {"user": "BlueMoon2662"}],
                   "array": [["user"], ["STRING"], ["BlueMoon2662"]], "csv": "user\nSTRING\nBlueMoon2662\n\n"}),
    (True, True, {"object": [{"user": {"type": "STRING", "sqlType": "VARCHAR"}}, {"user": "BlueMoon2662"}],
                  "array": [["user"], ["STRING"], ["VARCHAR"], ["BlueMoon2662"]],
                  "csv": "user\nSTRING\nVARCHAR\nBlueMoon2662\n\n"}),
    (False, True, {"object": [{"user": {"sqlType": "VARCHAR"}}, {"user": "BlueMoon2662"}],
                   "array": [["user"], ["VARCHAR"], ["BlueMoon2662"]], "csv": "user\nVARCHAR\nBlueMoon2662\n\n"}),
    (False, False, {"object": [{"user": None}, {"user": "BlueMoon2662"}], "array": [["user"], ["BlueMoon2662"]],
                    "csv": "user\nBlueMoon2662\n\n"}),
])
def test_headers_are_druids_for_every_format(types, sql_types, expected):
    table = TABLE.select(["user"])
    for fmt in ("object", "array"):
        r = request(resultFormat=fmt, header=True, typesHeader=types, sqlTypesHeader=sql_types)
        assert json.loads(write_result(table, r.output)) == expected[fmt]
    r = request(resultFormat="csv", header=True, typesHeader=types, sqlTypesHeader=sql_types)
    assert write_result(table, r.output) == expected["csv"]
    # the line formats: the same rows, one JSON document a line, and an empty line at the end
    for fmt, rows in (("objectLines", expected["object"]), ("arrayLines", expected["array"])):
        r = request(resultFormat=fmt, header=True, typesHeader=types, sqlTypesHeader=sql_types)
        assert write_result(table, r.output) == "".join(json.dumps(x) + "\n" for x in rows) + "\n"


def test_values_and_types_as_druid_writes_them():
    r = request(header=True, typesHeader=True, sqlTypesHeader=True)
    header, row = json.loads(write_result(TABLE, r.output))
    assert header == {"__time": {"type": "LONG", "sqlType": "TIMESTAMP"}, "user": {"type": "STRING",
                      "sqlType": "VARCHAR"}, "added": {"type": "LONG", "sqlType": "BIGINT"},
                      "ratio": {"type": "DOUBLE", "sqlType": "DOUBLE"}}
    assert row == {"__time": "2015-09-12T00:47:53.259Z", "user": "BlueMoon2662", "added": 14, "ratio": 0.5}
    assert write_result(TABLE, request().output) == json.dumps([row])  # no header unless asked
    # in the request's sqlTimeZone, with its offset
    la = request(context={"sqlTimeZone": "America/Los_Angeles"})
    assert json.loads(write_result(TABLE, la.output))[0]["__time"] == "2015-09-11T17:47:53.259-07:00"
    assert write_result(pa.table({"a": ["x,y", 'q"t', None], "b": [[1, 2], None, [3]]}),
                        request(resultFormat="csv").output) == '"x,y","[1, 2]"\n"q""t",\n,[3]\n\n'
    assert [druid_types(t) for t in (pa.int32(), pa.float32(), pa.bool_(), pa.date32(), pa.list_(pa.string()),
                                     pa.struct([("a", pa.int64())]), pa.binary())] == [
        ("LONG", "INTEGER"), ("FLOAT", "FLOAT"), ("LONG", "BOOLEAN"), ("LONG", "DATE"), ("ARRAY<STRING>", "ARRAY"),
        ("COMPLEX<json>", "OTHER"), ("COMPLEX", "OTHER")]


@pytest.mark.parametrize("given, read", [("objectlines", "objectLines"), ("OBJECTLINES", "objectLines"),
                                         ("ArrayLines", "arrayLines"), ("CSV", "csv"), ("Object", "object")])
def test_a_result_format_is_read_in_any_case_as_druid_reads_it(given, read):
    assert request(resultFormat=given).result_format == read


def test_parameters_context_and_timeout():
    r = request(parameters=[{"type": "VARCHAR", "value": "bar"}, {"type": "BIGINT", "value": 3},
                            {"type": "DOUBLE", "value": 1}, {"type": "BOOLEAN", "value": "true"},
                            {"type": "TIMESTAMP", "value": "2000-01-01 00:00:00"},
                            {"type": "TIMESTAMP", "value": 946684800000}, {"type": "DATE", "value": "2000-01-02"},
                            {"type": "ARRAY", "value": [999.0, None, 5.5]}, {"type": "varchar", "value": None}],
                context={"sqlQueryId": "request01", "sqlTimeZone": "Europe/Paris", "timeout": 2500,
                         "useApproximateCountDistinct": False})
    midnight = datetime(2000, 1, 1, tzinfo=ZoneInfo("Europe/Paris"))
    assert r.parameters == ("bar", 3, 1.0, True, midnight, datetime(2000, 1, 1, tzinfo=timezone.utc),
                            date(2000, 1, 2), [999.0, None, 5.5], None)
    assert (r.query_id, r.time_zone, r.timeout_s) == ("request01", "Europe/Paris", 2.5)
    assert request(context={"timeout": 3_600_000}).timeout_s == 300  # capped at the server's limit
    assert request().timeout_s == 300 and len(request().query_id) == 36  # a generated id, as Druid's


@pytest.mark.parametrize("body, message", [
    ({"sql": "SELECT 1"}, 'the body is not a JSON object with a "query" string'),
    ([], 'the body is not a JSON object with a "query" string'),
    ({"query": "SELECT 1", "resultFormat": "xml"}, "resultFormat: 'xml' is not one of object, array, objectLines"),
    ({"query": "SELECT 1", "resultFormat": ["csv"]}, "resultFormat: ['csv'] is not one of object, array"),
    ({"query": "SELECT 1", "header": "yes"}, "header: expected true or false, not 'yes'"),
    ({"query": "SELECT 1", "context": {"timeout": -1}}, "context.timeout: expected milliseconds"),
    ({"query": "SELECT 1", "context": []}, "context: expected a JSON object"),
    ({"query": "SELECT 1", "context": {"sqlTimeZone": "Mars/Olympus"}},
     "context.sqlTimeZone: 'Mars/Olympus' is not a time zone name"),
    ({"query": "SELECT 1", "context": {"sqlTimeZone": 5}}, "context.sqlTimeZone: 5 is not a time zone name"),
    ({"query": "SELECT 1", "parameters": [{"type": "BLOB", "value": 1}]}, "parameters[0].type: 'BLOB' is not one of"),
    ({"query": "SELECT 1", "parameters": [{"type": "VARCHAR", "value": "a"}, {"type": "BIGINT", "value": 1.5}]},
     "parameters[1].value: 1.5 is not a BIGINT"),
    ({"query": "SELECT 1", "parameters": [{"value": 1}]}, "parameters[0]: expected {\"type\""),
    ({"query": "SELECT 1", "parameters": [{"type": "TIMESTAMP", "value": "yesterday"}]},
     "parameters[0].value: 'yesterday' is not a TIMESTAMP"),
])
def test_a_bad_request_is_druids_invalid_input_error_naming_the_field(body, message):
    with pytest.raises(SqlApiError) as info:
        SqlRequest.from_body(body, max_timeout_s=300)
    error = info.value
    assert error.status == 400 and message in error.message and "\n" not in error.message
    assert error.to_json() == {"error": "druidException", "errorCode": "invalidInput", "persona": "USER",
                               "category": "INVALID_INPUT", "errorMessage": error.message, "context": {},
                               "errorClass": "org.apache.druid.error.DruidException", "host": None}


def strict_json(text: str):
    """JSON as a strict parser reads it: a bare NaN or Infinity is no JSON."""
    def refuse(constant: str):
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_non_finite_doubles_are_druids_strings_in_every_format():
    table = pa.table({"x": [math.inf], "y": [math.nan], "z": pa.array([-math.inf], pa.float32()),
                      "l": [[1.5, math.nan]], "s": [{"v": math.inf}]})
    expected = {"x": "Infinity", "y": "NaN", "z": "-Infinity", "l": [1.5, "NaN"], "s": {"v": "Infinity"}}
    assert strict_json(write_result(table, request().output)) == [expected]
    assert strict_json(write_result(table, request(resultFormat="array").output)) == [list(expected.values())]
    for fmt in ("objectLines", "arrayLines"):
        assert [strict_json(line) for line in write_result(table, request(resultFormat=fmt).output).split("\n")[:-2]]
    csv = write_result(table.select(["x", "y", "z"]), request(resultFormat="csv").output)
    assert csv == "Infinity,NaN,-Infinity\n\n"


def test_a_duplicate_column_name_is_kept_in_every_format():
    table = pa.Table.from_arrays([pa.array([1]), pa.array([2])], names=["a", "a"])
    assert json.loads(write_result(table, request(resultFormat="array", header=True).output)) == [["a", "a"], [1, 2]]
    assert write_result(table, request(resultFormat="arrayLines").output) == "[1, 2]\n\n"
    assert write_result(table, request(resultFormat="csv", header=True).output) == "a,a\n1,2\n\n"
    # objects: both fields, in order, as Druid's writer writes them (a JSON parser keeps the last)
    assert write_result(table, request().output) == '[{"a": 1, "a": 2}]'
    assert write_result(table, request(resultFormat="objectLines", header=True, typesHeader=True).output) == (
        '{"a": {"type": "LONG"}, "a": {"type": "LONG"}}\n{"a": 1, "a": 2}\n\n')


MS = pa.timestamp("ms", tz="UTC")
FOREVER, BEFORE_TIME = 2**63 - 1, -(2**63 - 1)  # DuckDB's 'infinity' and '-infinity' timestamps
YEAR_10000 = 253402300800000  # 10000-01-01 in milliseconds


@pytest.mark.parametrize("array, zone, expected", [
    (pa.array([YEAR_10000, YEAR_10000 + 1234], MS), "UTC", ["10000-01-01T00:00:00.000Z", "10000-01-01T00:00:01.234Z"]),
    (pa.array([YEAR_10000], MS), "America/Los_Angeles", ["9999-12-31T16:00:00.000-08:00"]),
    (pa.array([-62135596800000 - 86_400_000], MS), "UTC", ["0000-12-31T00:00:00.000Z"]),  # year 0 (1 BC)
    (pa.array([-62135596800000 * 3], MS), "UTC", ["-3937-01-02T00:00:00.000Z"]),
    (pa.array([FOREVER, BEFORE_TIME, None], pa.timestamp("us", tz="UTC")), "UTC", ["infinity", "-infinity", None]),
    (pa.array([FOREVER], pa.timestamp("s")), "UTC", ["infinity"]),
    (pa.array([YEAR_10000 * 1000 + 5], pa.timestamp("us")), "UTC", ["10000-01-01T00:00:00.000005"]),
    (pa.array([2**31 - 1, -(2**31 - 1), 2932897], pa.date32()), "UTC", ["infinity", "-infinity", "10000-01-01"]),
    (pa.array([[YEAR_10000, None], None], pa.list_(MS)), "UTC", [["10000-01-01T00:00:00.000Z", None], None]),
    (pa.array([{"t": YEAR_10000, "n": 1}], pa.struct([("t", MS), ("n", pa.int64())])), "UTC",
     [{"t": "10000-01-01T00:00:00.000Z", "n": 1}]),
])
def test_timestamps_beyond_pythons_range_are_written_as_druid_writes_them(array, zone, expected):
    table = pa.table({"t": array, "n": pa.array(range(len(array)))})
    rows = json.loads(write_result(table.slice(0), request(resultFormat="array", context={"sqlTimeZone": zone}).output))
    assert [r[0] for r in rows] == expected
    # in range, the same column writes as before; and a slice of the column writes its own rows
    assert [r[0] for r in json.loads(write_result(table.slice(1), request(resultFormat="array", context={
        "sqlTimeZone": zone}).output))] == expected[1:]


@pytest.mark.parametrize("kind, value, message", [
    ("BIGINT", 2**70, "parameters[0].value: 1180591620717411303424 is not a BIGINT (from -9223372036854775808 to "
                      "9223372036854775807)"),
    ("BIGINT", 2**63, "is not a BIGINT"),
    ("BIGINT", -(2**63) - 1, "is not a BIGINT"),
    ("INTEGER", 2**31, "is not a INTEGER (from -2147483648 to 2147483647)"),
    ("SMALLINT", -40000, "is not a SMALLINT"),
    ("TINYINT", 128, "is not a TINYINT"),
    ("BIGINT", 1e300, "is not a BIGINT"),
    ("TIMESTAMP", 1e303, "parameters[0].value: 1e+303 is not a TIMESTAMP (milliseconds since 1970 or text such as "
                         "'2000-01-01 00:00:00', from year 1 to 9999)"),
    ("TIMESTAMP", -1e303, "is not a TIMESTAMP"),
    ("TIMESTAMP", 253402300800000, "is not a TIMESTAMP"),
    ("TIMESTAMP", "Infinity", "is not a TIMESTAMP"),
    ("DOUBLE", 10**400, "is not a DOUBLE"),
    ("DATE", "+10000-01-01", "is not a DATE"),
])
def test_a_parameter_outside_its_types_range_is_refused(kind, value, message):
    with pytest.raises(SqlApiError) as info:
        request(parameters=[{"type": kind, "value": value}])
    assert info.value.status == 400 and message in info.value.message and len(info.value.message) < 300


def test_parameters_at_the_edges_of_their_ranges_are_taken():
    r = request(parameters=[{"type": "BIGINT", "value": -(2**63)}, {"type": "BIGINT", "value": 2**63 - 1},
                            {"type": "TINYINT", "value": -128}, {"type": "TIMESTAMP", "value": 253402300799999}])
    assert r.parameters == (-(2**63), 2**63 - 1, -128, datetime(9999, 12, 31, 23, 59, 59, 999000, timezone.utc))


@pytest.mark.parametrize("query_id, says", [
    ("☃-snowman", "'☃' at position 0"),
    ("a\r\nSet-Cookie: x=1", "'\\r' at position 1"),
    ("q\x00", "'\\x00' at position 1"),
    ("x" * 200_000, "200000 characters"),
    (".hidden", "starts with '.'"),
    ("a/b", "'/' at position 1"),
    (" padded", "' ' at position 0"),
    (5, "expected a string, not 5"),
    (["a"], "expected a string"),
])
def test_a_sql_query_id_is_druids_shape_and_never_echoed_whole(query_id, says):
    with pytest.raises(SqlApiError) as info:
        request(context={"sqlQueryId": query_id})
    message = info.value.message
    assert info.value.status == 400 and message.startswith("context.sqlQueryId: ") and says in message, message
    assert len(message) < 400 and "\n" not in message and "\r" not in message


def test_a_sql_query_id_of_druids_shape_is_taken():
    for query_id in ("q-formats", "ui-lx2-ab12cd34", "my query 1", "a.b_c:d=e+f@g~1", "x" * 255):
        assert request(context={"sqlQueryId": query_id}).query_id == query_id
    assert len(request(context={"sqlQueryId": ""}).query_id) == 36  # none given: a generated one
    assert len(request(context={"sqlQueryId": None}).query_id) == 36


def test_ingest_query_writes_the_same_values_and_keeps_both_columns_of_a_name():
    """`ingest query`'s --json and --csv are Druid's object and csv (with the header) of the one writer; its
    table writes the same values."""
    table = pa.Table.from_arrays([pa.array([math.inf]), pa.array([math.nan]), pa.array([YEAR_10000], MS)],
                                 names=["a", "a", "t"])
    as_json = write_result(table, ResultFormat("object"))
    assert as_json == '[{"a": "Infinity", "a": "NaN", "t": "10000-01-01T00:00:00.000Z"}]'
    assert strict_json(as_json) == [{"a": "NaN", "t": "10000-01-01T00:00:00.000Z"}]
    assert write_result(table.slice(0, 0), ResultFormat("object")) == "[]"
    assert write_result(table, ResultFormat("csv", header=True)) == "a,a,t\nInfinity,NaN,10000-01-01T00:00:00.000Z\n\n"
    assert write_result(table, ResultFormat(TEXT_TABLE)).splitlines()[2] == "Infinity  NaN  10000-01-01T00:00:00.000Z"
    with pytest.raises(ValueError, match="no result format 'json'"):
        ResultFormat("json")


def joda(numpy_text: str) -> str:
    """numpy's ISO text with the year as Joda writes it: year -1 is -0001 (numpy: -001)."""
    year, rest = numpy_text.lstrip("-").split("-", 1)
    return f"{'-' if numpy_text.startswith('-') else ''}{year.zfill(4)}-{rest}"


@given(st.lists(st.integers(-(2**31) + 2, 2**31 - 2), min_size=1, max_size=5))
def test_dates_of_any_year_are_written_as_numpy_writes_them(days):
    """Dates as day counts across DuckDB's whole range (years past 5 million either way), Python's and beyond
    it in one column; numpy's calendar (proleptic Gregorian, astronomical years) is the reference."""
    rows = json.loads(write_result(pa.table({"d": pa.array(days + [0], pa.date32())}),
                                   request(resultFormat="array").output))
    assert [r[0] for r in rows] == [joda(str(np.datetime64(d, "D"))) for d in days] + ["1970-01-01"]


@given(st.lists(st.integers(-(2**63) + 2, 2**63 - 2), min_size=1, max_size=5))
def test_timestamps_of_any_year_are_written_as_numpy_writes_them(millis):
    rows = json.loads(write_result(pa.table({"t": pa.array(millis + [0], MS)}), request(resultFormat="array").output))
    assert [r[0] for r in rows] == [joda(str(np.datetime64(m, "ms"))) + "Z" for m in millis] + [
        "1970-01-01T00:00:00.000Z"]
