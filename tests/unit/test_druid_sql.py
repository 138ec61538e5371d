"""Druid SQL read and run by DuckDB (`query.druid_sql`): each sketch and approximation function against known values,
sketches built by the `datasketches` package and estimates compared with the package's own. An in-memory DuckDB
with the macros and UDFs registered, as `query.engine` sets it up, over an Arrow table named `t`."""

from __future__ import annotations

import json
import math
from datetime import datetime, timedelta, timezone

import datasketches as dsk
import duckdb
import numpy as np
import pyarrow as pa
import pytest
from doc_pages import DOCS, blocks

from ingest_core.query import druid_sql
from ingest_core.query.druid_sql import to_duckdb
from ingest_core.query.errors import DruidSqlError

UTC = timezone.utc
T = datetime(2026, 11, 22, 10, 47, 31, 250000, tzinfo=UTC)  # a Sunday
TIME = pa.timestamp("ms", tz="UTC")


@pytest.fixture(scope="module", autouse=True)
def con():
    """One connection for the module (registering the UDFs and macros takes a while), set up as `query.engine` does."""
    connection = duckdb.connect(":memory:")
    connection.execute("SET TimeZone = 'UTC'")
    druid_sql.register(connection, " ".join([*druid_sql.MACROS, *druid_sql.sk.FUNCTIONS,
                                             *druid_sql.stats_functions.FUNCTIONS]))  # all of them
    _CON.append(connection)
    yield connection
    _CON.clear()
    connection.close()


_CON: list = []


def run(sql: str, table: pa.Table | None = None) -> list[tuple]:
    (connection,) = _CON
    connection.register("t", table if table is not None else pa.table({"__time": pa.array([T], TIME)}))
    try:
        return connection.sql(to_duckdb(sql)).fetchall()
    finally:
        connection.unregister("t")


def one(sql: str, table: pa.Table | None = None):
    (row,) = run(sql, table)
    return row[0] if len(row) == 1 else row


def at(*args) -> datetime:
    return datetime(*args, tzinfo=UTC)


# ------------------------------------------------------------------------------------------ time


@pytest.mark.parametrize("expr, expected", [
    ("TIME_FLOOR(__time, 'PT1H')", at(2026, 11, 22, 10)),
    ("TIME_FLOOR(__time, 'PT15M')", at(2026, 11, 22, 10, 45)),
    ("TIME_FLOOR(__time, 'P1D')", at(2026, 11, 22)),
    ("TIME_FLOOR(__time, 'P1W')", at(2026, 11, 16)),  # weeks start on Monday
    ("TIME_FLOOR(__time, 'P1M')", at(2026, 11, 1)),
    ("TIME_FLOOR(__time, 'P3M')", at(2026, 10, 1)),  # quarters: 3-month buckets from 1970-01
    ("TIME_FLOOR(__time, 'P1Y')", at(2026, 1, 1)),
    ("TIME_FLOOR(__time, 'PT1H', TIMESTAMP '2016-06-27 00:30:00')", at(2026, 11, 22, 10, 30)),
    ("TIME_FLOOR(__time, 'P1D', NULL, 'America/Los_Angeles')", at(2026, 11, 22, 8)),  # PST midnight in UTC
    ("TIME_FLOOR(__time, 'P1D', NULL, '+05:30')", at(2026, 11, 21, 18, 30)),
    ("TIME_CEIL(__time, 'PT1H')", at(2026, 11, 22, 11)),
    ("TIME_CEIL(TIMESTAMP '2026-11-22 10:00:00', 'PT1H')", at(2026, 11, 22, 10)),  # on a boundary: itself
    ("TIME_CEIL(__time, 'P1M')", at(2026, 12, 1)),
    ("TIME_SHIFT(__time, 'PT1H', 2)", T + timedelta(hours=2)),
    ("TIME_SHIFT(__time, 'P1M', -1)", at(2026, 10, 22, 10, 47, 31, 250000)),
    ("TIME_SHIFT(TIMESTAMP '2026-01-31 00:00:00', 'P1M', 1)", at(2026, 2, 28)),
    ("MILLIS_TO_TIMESTAMP(1795344451250)", at(2026, 11, 22, 10, 47, 31, 250000)),
    ("FLOOR(__time TO HOUR)", at(2026, 11, 22, 10)),
    ("FLOOR(__time TO WEEK)", at(2026, 11, 16)),
    ("FLOOR(__time TO QUARTER)", at(2026, 10, 1)),
    ("CEIL(__time TO DAY)", at(2026, 11, 23)),
    ("CEIL(TIMESTAMP '2026-11-22 00:00:00' TO DAY)", at(2026, 11, 22)),
    ("TIMESTAMPADD(HOUR, 3, __time)", T + timedelta(hours=3)),
    ("TIMESTAMPADD(MONTH, 1, TIMESTAMP '2026-01-31 00:00:00')", at(2026, 2, 28)),
    ("TIME_PARSE('2000-01-02T03:04:05Z')", at(2000, 1, 2, 3, 4, 5)),
    ("TIME_PARSE('2000-01-02T03:04:05.678+02:00')", at(2000, 1, 2, 1, 4, 5, 678000)),
    ("TIME_PARSE('2000-01-02')", at(2000, 1, 2)),
    ("TIME_PARSE('2000-01-02T03:04:05', NULL, 'America/New_York')", at(2000, 1, 2, 8, 4, 5)),
    ("TIME_PARSE('22/11/2026 10:47', 'dd/MM/yyyy HH:mm')", at(2026, 11, 22, 10, 47)),
    ("TIME_PARSE('22/11/2026 10:47', 'dd/MM/yyyy HH:mm', 'Asia/Tokyo')", at(2026, 11, 22, 1, 47)),
    ("TIME_PARSE('2026-11-22 10:47:31 +0100', 'yyyy-MM-dd HH:mm:ss Z')", at(2026, 11, 22, 9, 47, 31)),
    ("TIME_PARSE('Nov 5 2026', 'MMM d yyyy')", at(2026, 11, 5)),
])
def test_time_functions_return_druids_timestamps(expr, expected):
    assert one(f"SELECT {expr} FROM t") == expected


@pytest.mark.parametrize("expr, expected", [
    ("TIMESTAMP_TO_MILLIS(__time)", 1795344451250),
    ("TIMESTAMP_TO_MILLIS(MILLIS_TO_TIMESTAMP(0))", 0),
    ("TIME_EXTRACT(__time, 'EPOCH')", 1795344451),
    ("TIME_EXTRACT(__time, 'MILLISECOND')", 250),
    ("TIME_EXTRACT(__time, 'SECOND')", 31),
    ("TIME_EXTRACT(__time, 'MINUTE')", 47),
    ("TIME_EXTRACT(__time, 'HOUR')", 10),
    ("TIME_EXTRACT(__time, 'HOUR', 'America/Los_Angeles')", 2),
    ("TIME_EXTRACT(__time, 'DAY')", 22),
    ("TIME_EXTRACT(__time, 'DOW')", 7),  # Joda: Monday 1 .. Sunday 7
    ("TIME_EXTRACT(__time, 'DOY')", 326),
    ("TIME_EXTRACT(__time, 'WEEK')", 47),
    ("TIME_EXTRACT(__time, 'MONTH')", 11),
    ("TIME_EXTRACT(__time, 'QUARTER')", 4),
    ("TIME_EXTRACT(__time, 'YEAR')", 2026),
    ("TIMESTAMPDIFF(HOUR, TIMESTAMP '2026-11-22 00:00:00', __time)", 10),
    ("TIMESTAMPDIFF(DAY, __time, TIMESTAMP '2026-11-25 00:00:00')", 2),  # whole days, not boundaries
    ("TIMESTAMPDIFF(MONTH, TIMESTAMP '2026-01-15 00:00:00', __time)", 10),
    ("TIME_FORMAT(__time)", "2026-11-22T10:47:31.250Z"),
    ("TIME_FORMAT(__time, NULL, 'America/New_York')", "2026-11-22T05:47:31.250-05:00"),
    ("TIME_FORMAT(__time, 'yyyy-MM-dd HH:mm')", "2026-11-22 10:47"),
    ("TIME_FORMAT(__time, 'd MMM yyyy, EEEE', 'Asia/Kolkata')", "22 Nov 2026, Sunday"),
    ("TIME_FORMAT(__time, 'yyyy-MM-dd''T''HH:mm:ss.SSS Z ZZ', 'Asia/Kolkata')",
     "2026-11-22T16:17:31.250 +0530 +05:30"),
    ("TIME_FORMAT(__time, 'h:mm a')", "10:47 AM"),
    ("TIME_IN_INTERVAL(__time, '2026-11-22/P1D')", True),
    ("TIME_IN_INTERVAL(__time, '2026-11-22T11:00:00Z/2026-11-23')", False),
    ("TIME_IN_INTERVAL(__time, 'PT1H/2026-11-22T11:00:00Z')", True),
])
def test_time_functions_return_druids_values(expr, expected):
    assert one(f"SELECT {expr} FROM t") == expected


# Druid's sqlTimeZone: the default zone of every time function and how a TIMESTAMP literal reads. T is
# 02:47:31.250 PST; 2026-11-01 is the day Los Angeles leaves summer time (a day of 25 hours).
LA = "America/Los_Angeles"


@pytest.mark.parametrize("expr, expected", [
    ("TIME_FLOOR(__time, 'P1D')", at(2026, 11, 22, 8)),  # midnight in Los Angeles
    ("TIME_FLOOR(__time, 'PT6H')", at(2026, 11, 22, 8)),  # 6-hour buckets from local midnight, not UTC's
    ("TIME_FLOOR(__time, 'PT1H', NULL, 'UTC')", at(2026, 11, 22, 10)),  # a zone given wins
    ("TIME_CEIL(__time, 'P1D')", at(2026, 11, 23, 8)),
    ("FLOOR(__time TO DAY)", at(2026, 11, 22, 8)),
    ("CEIL(__time TO DAY)", at(2026, 11, 23, 8)),
    ("TIMESTAMP '2026-11-22 02:00:00'", at(2026, 11, 22, 10)),  # a literal is wall-clock time in the zone
    ("TIME_SHIFT(TIMESTAMP '2026-10-31 12:00:00', 'P1D', 1)", at(2026, 11, 1, 20)),  # a calendar day: 25 hours
    ("TIMESTAMPADD(MONTH, 1, TIMESTAMP '2026-10-15 12:00:00')", at(2026, 11, 15, 20)),
    ("TIMESTAMPADD(DAY, 1, TIMESTAMP '2026-10-31 12:00:00')", at(2026, 11, 1, 19)),  # Druid adds 24 hours
    ("TIME_PARSE('2026-11-22 02:00:00')", at(2026, 11, 22, 10)),
    ("TIME_PARSE('2026-11-22', 'yyyy-MM-dd')", at(2026, 11, 22, 8)),
    ("TIME_PARSE('2026-11-22T02:00:00Z')", at(2026, 11, 22, 2)),  # an offset in the text wins
    ("TIME_PARSE('2026-11-22 02:00', 'yyyy-MM-dd HH:mm', 'UTC')", at(2026, 11, 22, 2)),
])
def test_sql_time_zone_is_the_default_zone_of_time_functions(expr, expected):
    assert one_in(LA, f"SELECT {expr} FROM t") == expected


@pytest.mark.parametrize("expr, expected", [
    ("TIME_FORMAT(__time)", "2026-11-22T02:47:31.250-08:00"),
    ("TIME_FORMAT(__time, 'yyyy-MM-dd HH:mm Z')", "2026-11-22 02:47 -0800"),
    ("TIME_FORMAT(__time, 'yyyy-MM-dd HH:mm', 'UTC')", "2026-11-22 10:47"),
    ("TIME_FORMAT(__time, NULL, 'UTC')", "2026-11-22T10:47:31.250Z"),
    ("TIME_EXTRACT(__time, 'HOUR')", 2),
    ("TIME_EXTRACT(__time, 'HOUR', 'UTC')", 10),
    ("TIME_EXTRACT(__time, 'EPOCH')", 1795344451),
    ("EXTRACT(HOUR FROM __time)", 2),
    ("TIME_IN_INTERVAL(__time, '2026-11-22T00:00/2026-11-22T10:00')", True),  # 08:00Z to 18:00Z
    ("TIME_IN_INTERVAL(__time, '2026-11-22T00:00Z/2026-11-22T10:00Z')", False),
    ("TIME_IN_INTERVAL(__time, '2026-11-22/P1D')", True),
])
def test_sql_time_zone_values(expr, expected):
    assert one_in(LA, f"SELECT {expr} FROM t") == expected


def one_in(zone: str, sql: str):
    """`sql` run as a query with `sqlTimeZone` `zone`: translated for it, on a connection in it (as `query.engine`)."""
    (connection,) = _CON
    connection.register("t", pa.table({"__time": pa.array([T], TIME)}))
    connection.execute(f"SET TimeZone = '{zone}'")
    try:
        ((value,),) = connection.sql(to_duckdb(sql, zone)).fetchall()
    finally:
        connection.execute("SET TimeZone = 'UTC'")
        connection.unregister("t")
    return value.astimezone(UTC) if isinstance(value, datetime) else value


def test_time_floor_groups_rows_as_druid_buckets():
    times = [at(2026, 11, 22, h, m) for h in (9, 10) for m in (0, 14, 15, 59)]
    table = pa.table({"__time": pa.array(times, TIME), "added": list(range(8))})
    rows = run("SELECT TIME_FLOOR(__time, 'PT30M') AS b, SUM(added) AS s, COUNT(*) AS n FROM t "
               "GROUP BY 1 ORDER BY 1", table)
    assert rows == [(at(2026, 11, 22, 9), 3, 3), (at(2026, 11, 22, 9, 30), 3, 1),
                    (at(2026, 11, 22, 10), 15, 3), (at(2026, 11, 22, 10, 30), 7, 1)]


def test_time_parse_of_text_that_is_no_timestamp_is_null():
    assert run("SELECT TIME_PARSE('yesterday'), TIME_PARSE('13/13/2026', 'dd/MM/yyyy') FROM t") == [(None, None)]


# ------------------------------------------------------------------------------------------ aggregation


EDITS = pa.table({
    "__time": pa.array([at(2026, 11, 22, 10, m) for m in (5, 1, 9, 3, 7)], TIME),
    "page": ["b", "a", "c", "a", None],
    "added": [2, 1, 3, 4, 5],
    "at": pa.array([at(2026, 1, d) for d in (3, 5, 1, 2, 4)], TIME),
    "team": ["x", "x", "y", "y", "y"],
})


def test_latest_and_earliest_follow_time_not_row_order():
    row = run("SELECT LATEST(page), EARLIEST(page), LATEST(added), EARLIEST(added, 100), LATEST(page, 1024), "
              "LATEST_BY(page, at), EARLIEST_BY(added, at), LATEST_BY(page, at, 16) FROM t", EDITS)
    assert row == [("c", "a", 3, 1, "c", "a", 3, "a")]
    # the latest row's value even when it is null (Druid: the row of the latest timestamp), per group
    by_team = run("SELECT team, LATEST_BY(page, __time), EARLIEST(added) FROM t GROUP BY 1 ORDER BY 1", EDITS)
    assert by_team == [("x", "b", 1), ("y", "c", 4)]
    filtered = run("SELECT LATEST(added) FILTER (WHERE page = 'a') FROM t", EDITS)
    assert filtered == [(4,)]


def test_any_value_and_approx_count_distinct():
    value = one("SELECT ANY_VALUE(page, 10) FROM t WHERE team = 'x'", EDITS)
    assert value in ("a", "b")
    values = pa.table({"u": [f"user{i % 1000}" for i in range(5000)]})
    hll = dsk.hll_sketch(12, dsk.tgt_hll_type.HLL_4)
    for i in range(1000):
        hll.update("".join(ch + "\x00" for ch in f"user{i}"))  # Druid's utf16le hashing of ASCII text
    expected = round(hll.get_estimate())
    assert one("SELECT APPROX_COUNT_DISTINCT(u) FROM t", values) == expected
    assert one("SELECT APPROX_COUNT_DISTINCT_DS_HLL(u) FROM t", values) == expected
    assert abs(expected - 1000) <= 1000 * 3 * 1.04 / math.sqrt(4096)


# ------------------------------------------------------------------------------------------ sketches


def theta_bytes(values, lg_k: int = 14) -> bytes:
    sketch = dsk.update_theta_sketch(lg_k)
    for v in values:
        sketch.update(v)
    return sketch.compact().serialize()


def theta_union_of(parts: list[bytes], lg_k: int = 14):
    union = dsk.theta_union(lg_k)
    for p in parts:
        union.update(dsk.compact_theta_sketch.deserialize(p))
    return union.get_result()


@pytest.fixture
def theta_rows() -> pa.Table:
    """Rolled-up rows as compaction leaves them: per show and day, a theta sketch of the users who watched
    (Druid's theta-sketch tutorial: exact mode, below 16384 entries)."""
    shows = {("Bridgerton", 1): range(0, 3000), ("Bridgerton", 2): range(2000, 5000),
             ("Sex Education", 1): range(4000, 4500), ("Sex Education", 2): range(100, 200)}
    return pa.table({
        "__time": pa.array([at(2026, 11, day) for _, day in shows], TIME),
        "show": [show for show, _ in shows],
        "theta_uid": pa.array([theta_bytes(f"u{i}" for i in users) for users in shows.values()], pa.binary()),
        "uid_count": [len(users) for users in shows.values()],
    })


def test_theta_sketch_queries_as_druids_tutorial_writes_them(theta_rows):
    rows = run("SELECT show, THETA_SKETCH_ESTIMATE(DS_THETA(theta_uid)) AS users, "
               "APPROX_COUNT_DISTINCT_DS_THETA(theta_uid) AS approx FROM t GROUP BY 1 ORDER BY 1", theta_rows)
    assert rows == [("Bridgerton", 5000.0, 5000), ("Sex Education", 600.0, 600)]
    # the tutorial's union, intersection and difference (exact mode: exact)
    sets = run("""SELECT
        THETA_SKETCH_ESTIMATE(THETA_SKETCH_UNION(DS_THETA(theta_uid) FILTER (WHERE show = 'Bridgerton'),
                                                 DS_THETA(theta_uid) FILTER (WHERE show = 'Sex Education'))),
        THETA_SKETCH_ESTIMATE(THETA_SKETCH_INTERSECT(DS_THETA(theta_uid) FILTER (WHERE show = 'Bridgerton'),
                                                     DS_THETA(theta_uid) FILTER (WHERE show = 'Sex Education'))),
        THETA_SKETCH_ESTIMATE(THETA_SKETCH_NOT(DS_THETA(theta_uid) FILTER (WHERE show = 'Bridgerton'),
                                               DS_THETA(theta_uid) FILTER (WHERE show = 'Sex Education'))),
        THETA_SKETCH_ESTIMATE(THETA_SKETCH_UNION(32, DS_THETA(theta_uid)))
        FROM t""", theta_rows)
    expected_union = len(set(range(0, 5000)) | set(range(4000, 4500)) | set(range(100, 200)))
    exact_32 = theta_union_of(list(theta_rows["theta_uid"].to_pylist()), 5).get_estimate()
    assert sets == [(float(expected_union), 500.0 + 100.0, 5000.0 - 600.0, exact_32)]
    bounds = one("SELECT THETA_SKETCH_ESTIMATE_WITH_ERROR_BOUNDS(DS_THETA(theta_uid), 2) FROM t", theta_rows)
    assert bounds == {"estimate": 5000.0, "highBound": 5000.0, "lowBound": 5000.0, "numStdDev": 2}


# Druid's theta-sketch tutorial (apache/druid docs/tutorials/tutorial-sketches-theta.md, Apache-2.0): its data
TUTORIAL_CSV = """date,uid,show,episode
2022-05-19,alice,Game of Thrones,S1E1
2022-05-19,alice,Game of Thrones,S1E2
2022-05-19,alice,Game of Thrones,S1E1
2022-05-19,bob,Bridgerton,S1E1
2022-05-20,alice,Game of Thrones,S1E1
2022-05-20,carol,Bridgerton,S1E2
2022-05-20,dan,Bridgerton,S1E1
2022-05-21,alice,Game of Thrones,S1E1
2022-05-21,carol,Bridgerton,S1E1
2022-05-21,erin,Game of Thrones,S1E1
2022-05-21,alice,Bridgerton,S1E1
2022-05-22,bob,Game of Thrones,S1E1
2022-05-22,bob,Bridgerton,S1E1
2022-05-22,carol,Bridgerton,S1E2
2022-05-22,bob,Bridgerton,S1E1
2022-05-22,erin,Game of Thrones,S1E1
2022-05-22,erin,Bridgerton,S1E2
2022-05-23,erin,Game of Thrones,S1E1
2022-05-23,alice,Game of Thrones,S1E1"""


def test_druids_theta_tutorial_queries_as_it_writes_them():
    """Its rollup (day, show, episode; a thetaSketch of uid) built here with the package, then its queries, verbatim,
    give its answers: exact, as sketches of a few users are."""
    groups: dict[tuple, list[str]] = {}
    for line in TUTORIAL_CSV.splitlines()[1:]:
        day, uid, show, episode = line.split(",")
        groups.setdefault((day, show, episode), []).append(uid)
    table = pa.table({"__time": pa.array([datetime.fromisoformat(d).replace(tzinfo=UTC) for d, _, _ in groups], TIME),
                      "show": [s for _, s, _ in groups], "episode": [e for _, _, e in groups],
                      "theta_uid": pa.array([theta_bytes(uids) for uids in groups.values()], pa.binary())})
    per_group = run("""SELECT __time,
       "show",
       "episode",
       APPROX_COUNT_DISTINCT_DS_THETA(theta_uid) AS users
FROM   t
GROUP  BY 1, 2, 3""", table)
    assert sorted(per_group) == sorted((at(*map(int, d.split("-"))), s, e, len(set(u)))
                                       for (d, s, e), u in groups.items())
    assert one("""SELECT THETA_SKETCH_ESTIMATE(
         DS_THETA(theta_uid) FILTER(WHERE "show" = 'Bridgerton')
       ) AS users
FROM t""", table) == 5.0
    for op, users in (("INTERSECT", 1.0), ("UNION", 5.0), ("NOT", 3.0)):
        assert one(f"""SELECT THETA_SKETCH_ESTIMATE(
         THETA_SKETCH_{op}(
           DS_THETA(theta_uid) FILTER(WHERE "show" = 'Bridgerton' AND "episode" = 'S1E1'),
           DS_THETA(theta_uid) FILTER(WHERE "show" = 'Bridgerton' AND "episode" = 'S1E2')
         )
       ) AS users
FROM t""", table) == users, op


def test_theta_over_raw_values_and_estimation_mode_match_the_package():
    values = [f"user-{i}" for i in range(60_000)]
    table = pa.table({"u": values, "n": list(range(60_000))})
    sketch = dsk.update_theta_sketch(14)
    for v in values:
        sketch.update(v)
    union = dsk.theta_union(14)
    union.update(sketch)
    expected = union.get_result()
    assert expected.is_estimation_mode()
    got = one("SELECT DS_THETA(u) FROM t", table)
    assert dsk.compact_theta_sketch.deserialize(got).get_estimate() == expected.get_estimate()
    assert one("SELECT APPROX_COUNT_DISTINCT_DS_THETA(u) FROM t", table) == math.floor(expected.get_estimate() + .5)
    small = dsk.update_theta_sketch(10)
    for i in range(60_000):
        small.update(i)  # longs hash as longs
    u2 = dsk.theta_union(10)
    u2.update(small)
    assert one("SELECT THETA_SKETCH_ESTIMATE(DS_THETA(n, 1024)) FROM t", table) == u2.get_result().get_estimate()
    # empty input: an empty sketch, a count of 0
    assert run("SELECT THETA_SKETCH_ESTIMATE(DS_THETA(u)), APPROX_COUNT_DISTINCT_DS_THETA(u) FROM t "
               "WHERE n < 0", table) == [(0.0, 0)]


def test_hll_sketch_columns_and_raw_values_match_the_package():
    parts, raw = [], []
    for day in range(3):
        sketch = dsk.hll_sketch(12, dsk.tgt_hll_type.HLL_4)
        for i in range(day * 500, day * 500 + 2000):
            sketch.update(i)
            raw.append(i)
        parts.append(sketch.serialize_compact())
    table = pa.table({"hll": pa.array(parts, pa.binary())})
    union = dsk.hll_union(12)
    for p in parts:
        union.update(dsk.hll_sketch.deserialize(p))
    expected = union.get_result(dsk.tgt_hll_type.HLL_4)
    row = run("SELECT HLL_SKETCH_ESTIMATE(DS_HLL(hll)), HLL_SKETCH_ESTIMATE(DS_HLL(hll), true), "
              "APPROX_COUNT_DISTINCT_DS_HLL(hll), APPROX_COUNT_DISTINCT(hll), "
              "HLL_SKETCH_ESTIMATE_WITH_ERROR_BOUNDS(DS_HLL(hll), 2) FROM t", table)
    estimate = expected.get_estimate()
    assert row == [(estimate, round(estimate), round(estimate), round(estimate),
                    [estimate, expected.get_lower_bound(2), expected.get_upper_bound(2)])]
    assert abs(estimate - 3000) <= 3000 * 2 * 1.04 / math.sqrt(4096)
    # raw longs, a larger lgK and HLL_8; and HLL_SKETCH_UNION of sketches
    built = dsk.hll_sketch(14, dsk.tgt_hll_type.HLL_8)
    for i in raw:
        built.update(i)
    raw_table = pa.table({"v": raw})
    got = one("SELECT DS_HLL(v, 14, 'HLL_8') FROM t", raw_table)
    assert dsk.hll_sketch.deserialize(got).get_estimate() == built.get_estimate()
    assert one("SELECT HLL_SKETCH_ESTIMATE(HLL_SKETCH_UNION(DS_HLL(hll), DS_HLL(hll))) FROM t", table) == estimate


def test_quantiles_sketches_match_the_package():
    # exact mode (n <= 2k: every value kept), where merging is deterministic and must give the package's answers
    parts, whole = [], dsk.quantiles_doubles_sketch(128)
    for chunk in range(4):
        sketch = dsk.quantiles_doubles_sketch(128)
        for i in range(chunk * 50, (chunk + 1) * 50):
            sketch.update(float(i))
            whole.update(float(i))
        parts.append(sketch.serialize())
    table = pa.table({"q": pa.array(parts, pa.binary())})
    row = run("SELECT APPROX_QUANTILE_DS(q, 0.95), DS_GET_QUANTILE(DS_QUANTILES_SKETCH(q), 0.5), "
              "DS_GET_QUANTILES(DS_QUANTILES_SKETCH(q), 0.1, 0.9), DS_RANK(DS_QUANTILES_SKETCH(q), 100), "
              "DS_CDF(DS_QUANTILES_SKETCH(q), 50, 150), DS_HISTOGRAM(DS_QUANTILES_SKETCH(q), 100) FROM t", table)
    assert row == [(whole.get_quantile(0.95, True), whole.get_quantile(0.5, True),
                    [whole.get_quantile(0.1, True), whole.get_quantile(0.9, True)],
                    whole.get_rank(100, True), list(whole.get_cdf([50, 150], True)),
                    [p * whole.n for p in whole.get_pmf([100], True)])]
    assert row[0][:2] == (189.0, 99.0)  # the inclusive criteria, the Java library's default (Druid's)
    assert "Quantiles" in one("SELECT DS_QUANTILE_SUMMARY(DS_QUANTILES_SKETCH(q)) FROM t", table)
    # estimation mode (compaction is randomized): the merged sketch holds every value, its quantiles within the
    # sketch's documented rank error
    big = []
    for chunk in range(4):
        sketch = dsk.quantiles_doubles_sketch(128)
        sketch.update(np.arange(chunk * 2500, (chunk + 1) * 2500, dtype=np.float64))
        big.append(sketch.serialize())
    merged = dsk.quantiles_doubles_sketch.deserialize(
        one("SELECT DS_QUANTILES_SKETCH(q) FROM t", pa.table({"q": pa.array(big, pa.binary())})))
    assert merged.n == 10_000 and merged.get_min_value() == 0 and merged.get_max_value() == 9999
    error = merged.normalized_rank_error(False)
    assert abs(merged.get_rank(5000, True) - 0.5) <= error
    # raw numbers and k
    raw = pa.table({"v": [float(i) for i in range(1000)]})
    sketch = dsk.quantiles_doubles_sketch(64)
    sketch.update(np.arange(1000, dtype=np.float64))
    p95 = one("SELECT APPROX_QUANTILE_DS(v, 0.95, 64) FROM t", raw)
    assert abs(p95 - sketch.get_quantile(0.95, True)) <= 1000 * 2 * sketch.normalized_rank_error(False)


def test_sketch_aggregates_per_group_with_filter_and_in_a_subquery(theta_rows):
    rows = run("SELECT TIME_FLOOR(__time, 'P1D') AS day, APPROX_COUNT_DISTINCT_DS_THETA(theta_uid) "
               "FILTER (WHERE show = 'Bridgerton') AS b FROM t GROUP BY 1 ORDER BY 1", theta_rows)
    assert rows == [(at(2026, 11, 1), 3000), (at(2026, 11, 2), 3000)]
    nested = run("SELECT THETA_SKETCH_ESTIMATE(THETA_SKETCH_INTERSECT(s1, s2)) FROM ("
                 "SELECT DS_THETA(theta_uid) FILTER (WHERE TIME_EXTRACT(__time, 'DAY') = 1) AS s1, "
                 "DS_THETA(theta_uid) FILTER (WHERE TIME_EXTRACT(__time, 'DAY') = 2) AS s2 FROM t)", theta_rows)
    # who watched on both days: 2000-2999 (Bridgerton both days), 4000-4499 (Sex Education on day 1, Bridgerton
    # on day 2), 100-199 (Bridgerton on day 1, Sex Education on day 2)
    assert nested == [(1600.0,)]


# ------------------------------------------------------------------------------------------ JSON


def test_variance_and_stddev_over_numbers_and_over_a_variance_metrics_collectors():
    """druid-stats' SQL functions read numbers, and a `variance` metric's stored collectors merged as Druid merges
    them: the variance of a rolled-up column is that of the rows it was built from. One value gives 0, none
    null (Druid's); FILTER and GROUP BY apply as to any aggregate."""
    import statistics

    from ingest_core.core.aggregators.variance import Collector

    values = {"a": [1.0, 2.0, 4.0, 8.0, 16.5], "b": [3.0], "c": []}
    numbers = pa.table({"g": [g for g, vs in values.items() for _ in vs], "x": [v for vs in values.values() for v in vs]})
    collectors = []  # each group's values rolled up in splits of two rows, as segments store them
    for g, vs in values.items():
        for i in range(0, len(vs), 2):
            c = Collector()
            for v in vs[i:i + 2]:
                c = c.add(v)
            collectors.append((g, c.to_bytes()))
    stored = pa.table({"g": [g for g, _ in collectors], "x": pa.array([b for _, b in collectors], pa.binary())})
    a = values["a"]
    for table in (numbers, stored):
        got = dict(((g, (v, vp, s, sp)) for g, v, vp, s, sp in run(
            "SELECT g, VARIANCE(x), VAR_POP(x), STDDEV(x), STDDEV_POP(x) FROM t GROUP BY g", table)))
        assert got["a"] == pytest.approx((statistics.variance(a), statistics.pvariance(a), statistics.stdev(a),
                                          statistics.pstdev(a)), rel=1e-12)
        assert got["b"] == (0.0, 0.0, 0.0, 0.0) and "c" not in got
        assert one("SELECT VAR_SAMP(x) FILTER (WHERE g = 'a') FROM t", table) == pytest.approx(statistics.variance(a))
        assert one("SELECT STDDEV_SAMP(x) FROM t WHERE g = 'zzz'", table) is None
    with pytest.raises(duckdb.Error, match="a variance metric's collectors"):
        one("SELECT VARIANCE(x) FROM t", pa.table({"x": pa.array([b"not one"], pa.binary())}))


def test_json_value_and_json_query_on_a_json_column():
    table = pa.table({"obj": [json.dumps({"a": {"b": 7, "c": "x"}, "l": [1, 2]}), json.dumps({"a": None})]})
    rows = run("SELECT JSON_VALUE(obj, '$.a.b'), JSON_VALUE(obj, '$.a.b' RETURNING BIGINT), "
               "JSON_VALUE(obj, '$.a.c'), JSON_VALUE(obj, '$.a'), JSON_QUERY(obj, '$.a'), JSON_QUERY(obj, '$.l') "
               "FROM t", table)
    assert rows[0][:4] == ("7", 7, "x", None)
    assert json.loads(rows[0][4]) == {"b": 7, "c": "x"} and json.loads(rows[0][5]) == [1, 2]
    assert rows[1][:4] == (None, None, None, None)


@pytest.mark.parametrize("expr, expected", [
    ("TEXTCAT('ab', 'cd')", "abcd"), ("CONTAINS_STRING('Wikipedia', 'pedia')", True),
    ("CONTAINS_STRING('Wikipedia', 'PEDIA')", False), ("ICONTAINS_STRING('Wikipedia', 'PEDIA')", True),
    ("BTRIM('  a  ')", "a"), ("BTRIM('xxaxx', 'x')", "a"), ("PARSE_LONG('42')", 42), ("PARSE_LONG('4x')", None),
    ("REGEXP_EXTRACT('page-17', 'page-(\\d+)', 1)", "17"), ("REGEXP_EXTRACT('page-17', 'page-(\\d+)')", "page-17"),
    ("BITWISE_AND(6, 3)", 2), ("BITWISE_OR(6, 3)", 7), ("BITWISE_XOR(6, 3)", 5), ("BITWISE_SHIFT_LEFT(1, 4)", 16),
    ("BITWISE_SHIFT_RIGHT(16, 2)", 4), ("BITWISE_COMPLEMENT(0)", -1), ("NVL(NULL, 3)", 3),
    ("SAFE_DIVIDE(1, 0)", None), ("TRUNCATE(1.256, 2)", 1.25), ("REGEXP_LIKE('page-17', '\\d$')", True),
])
def test_druids_string_and_number_functions_that_duckdb_spells_otherwise(expr, expected):
    assert one(f"SELECT {expr} FROM t") == expected
    assert one(f"SELECT {expr}, TIME_FLOOR(__time, 'P1D') FROM t")[0] == expected  # beside other Druid SQL


# ------------------------------------------------------------------------------------------ what is passed, refused


@pytest.mark.parametrize("sql", [
    "SELECT count(*) FROM wiki WHERE __time >= TIMESTAMPTZ '2026-01-01 00:00:00+00'",
    "SELECT * EXCLUDE (page) FROM wiki",
    "SELECT json_extract(obj, '$.k')::INT FROM wiki",
    "SELECT 1; SELECT 2",
    "SELEC 1",
])
def test_duckdb_sql_without_druid_functions_is_passed_on_as_written(sql):
    assert to_duckdb(sql) == sql


@pytest.mark.parametrize("sql, message", [
    ("SELECT APPROX_QUANTILE(x, 0.5) FROM t", "Druid SQL function APPROX_QUANTILE is not supported here"),
    ("SELECT MV_CONTAINS(tags, 'a') FROM t", "Druid SQL function MV_CONTAINS is not supported here"),
    ("SELECT LOOKUP(x, 'names') FROM t", "Druid SQL function LOOKUP is not supported here"),
    ("SELECT TIME_FLOOR(__time, 'hourly') FROM t", "TIME_FLOOR: 'hourly' is not an ISO-8601 period"),
    ("SELECT TIME_FLOOR(__time, p) FROM t", "TIME_FLOOR: the period must be a string literal, not p"),
    ("SELECT TIME_FLOOR(__time, 'P1M1D') FROM t", "TIME_FLOOR: a period of both months and days"),
    ("SELECT TIME_EXTRACT(__time, 'FORTNIGHT') FROM t", "TIME_EXTRACT: unknown unit 'FORTNIGHT'"),
    ("SELECT TIME_FORMAT(__time, 'yyyy-QQ') FROM t", "TIME_FORMAT: timestamp pattern letter 'Q'"),
    ("SELECT DS_THETA(x, 1000) FROM t", "DS_THETA: the size must be a power of 2"),
    ("SELECT DS_HLL(x, 30) FROM t", "DS_HLL: lgK must be from 4 to 21, not 30"),
    ("SELECT FLOOR(__time TO FORTNIGHT) FROM t", "FLOOR: unknown time unit 'FORTNIGHT'"),
    ("SELECT LATEST() FROM t", "LATEST takes 1 to 2 arguments, not 0"),
    ("SELECT TIME_FLOOR(__time, 'PT1H') FROM t WHERE x ==== 3",
     "the query calls Druid SQL's TIME_FLOOR but does not read as Druid SQL: "),
])
def test_druid_sql_outside_what_runs_here_is_refused_in_one_line(sql, message):
    with pytest.raises(DruidSqlError) as info:
        to_duckdb(sql)
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


def test_an_unknown_function_is_named_by_duckdb_in_one_line():
    with pytest.raises(duckdb.CatalogException, match="(?i)time_floorr"):
        run("SELECT TIME_FLOORR(__time, 'PT1H') FROM t")


def test_a_connection_gets_the_macros_and_functions_its_query_calls_and_no_others():
    def druid_functions(sql: str) -> tuple[list[str], list]:
        connection = duckdb.connect(":memory:")
        try:
            connection.execute("SET TimeZone = 'UTC'")
            druid_sql.register(connection, sql)
            connection.register("t", pa.table({"__time": pa.array([T], TIME), "u": ["a"]}))
            names = sorted(r[0] for r in connection.execute(
                "SELECT DISTINCT function_name FROM duckdb_functions() WHERE function_name LIKE 'druid_%'").fetchall())
            return names, connection.sql(sql).fetchall()
        finally:
            connection.close()

    assert druid_functions("SELECT count(*) FROM t") == ([], [(1,)])
    names, rows = druid_functions(to_duckdb("SELECT TIME_FORMAT(__time, NULL, 'Asia/Tokyo'), DS_THETA(u) FROM t "
                                            "GROUP BY __time"))
    assert names == ["druid_ds_theta", "druid_offset", "druid_offset_seconds"]  # druid_offset calls the other
    assert rows[0][0] == "2026-11-22T19:47:31.250+09:00"


def test_the_docs_druid_sql_example_reads_as_druid_sql():
    (example,) = [text for _, text in blocks("sql", DOCS / "sql.md") if "APPROX_COUNT_DISTINCT_DS_THETA" in text]
    duck = to_duckdb(example)
    assert "druid_ds_theta_count(list(theta_uid)" in duck.lower() and "TIME_FLOOR" not in duck


def nested(depth: int, inner: str = "1") -> str:
    return "(" * depth + inner + ")" * depth


def test_deeply_nested_sql_is_passed_on_or_refused_in_one_line_never_a_recursion_error():
    # sqlglot's parser recurses per parenthesis: past Python's limit the query goes on to DuckDB as one sqlglot
    # cannot read does (DuckDB bounds its own nesting) ...
    sql = f"SELECT {nested(3000)} AS x"
    assert to_duckdb(sql) == sql
    # ... unless it calls a Druid function, which DuckDB does not have: then a one-line error saying why
    with pytest.raises(DruidSqlError) as info:
        to_duckdb(f"SELECT TIME_FLOOR(__time, 'PT1H'), {nested(3000)} FROM t")
    assert "nests too deeply" in str(info.value) and "\n" not in str(info.value)


def test_explain_plan_for_is_refused_saying_it_is_not_supported():
    for sql in ("EXPLAIN PLAN FOR SELECT 1", "explain plan for\nSELECT TIME_FLOOR(__time, 'PT1H') FROM t",
                "  EXPLAIN  PLAN  WITH IMPLEMENTATION FOR SELECT 1"):
        with pytest.raises(DruidSqlError) as info:
            to_duckdb(sql)
        assert str(info.value).startswith("EXPLAIN PLAN FOR is not supported here"), sql
    assert to_duckdb("SELECT 'EXPLAIN PLAN FOR' AS x") == "SELECT 'EXPLAIN PLAN FOR' AS x"


def test_the_sql_parser_writes_no_warnings(capfd, caplog):
    import logging

    caplog.set_level(logging.DEBUG)
    for sql in ("SET x = 1", "PIVOT t ON a USING sum(b)", "SELECT 1 FROM t WINDOW w AS (foo bar)",
                "EXPLAIN SELECT 1", "SELECT {'a': 1} AS s"):
        try:
            to_duckdb(sql)
        except DruidSqlError:
            pass
    assert [r for r in caplog.records if r.name.startswith("sqlglot") and r.levelno >= logging.WARNING] == []
    assert capfd.readouterr().err == ""
