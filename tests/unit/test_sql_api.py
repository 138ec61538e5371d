"""Druid's SQL API request fields and result formats (`service.sql_api`), against the shapes Druid's documentation
shows (docs/api-reference/sql-api.md, "Query output format")."""

from __future__ import annotations

import json
from datetime import date, datetime, timezone
from decimal import Decimal
from zoneinfo import ZoneInfo

import pyarrow as pa
import pytest

from ingest_core.service.sql_api import SqlApiError, SqlRequest, druid_types, write_result

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
        assert json.loads(write_result(table, r)) == expected[fmt]
    r = request(resultFormat="csv", header=True, typesHeader=types, sqlTypesHeader=sql_types)
    assert write_result(table, r) == expected["csv"]
    # the line formats: the same rows, one JSON document a line, and an empty line at the end
    for fmt, rows in (("objectLines", expected["object"]), ("arrayLines", expected["array"])):
        r = request(resultFormat=fmt, header=True, typesHeader=types, sqlTypesHeader=sql_types)
        assert write_result(table, r) == "".join(json.dumps(x) + "\n" for x in rows) + "\n"


def test_values_and_types_as_druid_writes_them():
    r = request(header=True, typesHeader=True, sqlTypesHeader=True)
    header, row = json.loads(write_result(TABLE, r))
    assert header == {"__time": {"type": "LONG", "sqlType": "TIMESTAMP"}, "user": {"type": "STRING",
                      "sqlType": "VARCHAR"}, "added": {"type": "LONG", "sqlType": "BIGINT"},
                      "ratio": {"type": "DOUBLE", "sqlType": "DOUBLE"}}
    assert row == {"__time": "2015-09-12T00:47:53.259Z", "user": "BlueMoon2662", "added": 14, "ratio": 0.5}
    assert write_result(TABLE, request()) == json.dumps([row])  # no header unless asked
    # in the request's sqlTimeZone, with its offset
    la = request(context={"sqlTimeZone": "America/Los_Angeles"})
    assert json.loads(write_result(TABLE, la))[0]["__time"] == "2015-09-11T17:47:53.259-07:00"
    assert write_result(pa.table({"a": ["x,y", 'q"t', None], "b": [[1, 2], None, [3]]}),
                        request(resultFormat="csv")) == '"x,y","[1, 2]"\n"q""t",\n,[3]\n\n'
    assert [druid_types(t) for t in (pa.int32(), pa.float32(), pa.bool_(), pa.date32(), pa.list_(pa.string()),
                                     pa.struct([("a", pa.int64())]), pa.binary())] == [
        ("LONG", "INTEGER"), ("FLOAT", "FLOAT"), ("LONG", "BOOLEAN"), ("LONG", "DATE"), ("ARRAY<STRING>", "ARRAY"),
        ("COMPLEX<json>", "OTHER"), ("COMPLEX", "OTHER")]


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
                               "category": "INVALID_INPUT", "errorMessage": error.message, "context": {}}
