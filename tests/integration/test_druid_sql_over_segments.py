"""Druid SQL through `run_sql` and `ingest query` over real Parquet segments with sketch columns (DataSketches'
standard bytes, built here by the `datasketches` package as the job writes them), published by the real publish.
The segment schema reads such a column as bytes once the job's sketch metrics exist (COMPLEX<sketch>);
before that it is taken for text."""

from __future__ import annotations

import base64
import json
import subprocess
from datetime import datetime, timedelta, timezone

import datasketches as dsk
import pyarrow as pa
import pytest
from helpers import publish_segments

from ingest_core.core.offsets import TopicPartition
from ingest_core.service.cli import main
from ingest_core.query.engine import run_sql
from ingest_core.query.errors import SqlError

T0 = datetime(2026, 11, 22, 10, tzinfo=timezone.utc)
TIME = pa.timestamp("ms", tz="UTC")


def theta(users) -> bytes:
    sketch = dsk.update_theta_sketch(14)
    for u in users:
        sketch.update(f"user{u}")
    return sketch.compact().serialize()


def hll(users) -> bytes:
    sketch = dsk.hll_sketch(12, dsk.tgt_hll_type.HLL_4)
    for u in users:
        sketch.update(u)
    return sketch.serialize_compact()


def quantiles(values) -> bytes:
    sketch = dsk.quantiles_doubles_sketch(128)
    for v in values:
        sketch.update(float(v))
    return sketch.serialize()


def segment(rows: list[tuple[int, str, range]]) -> pa.Table:
    """Rolled-up rows: (minute, show, users who watched) with a theta, an HLL and a quantiles metric."""
    return pa.table({
        "__time": pa.array([T0 + timedelta(minutes=m) for m, _, _ in rows], TIME),
        "show": [s for _, s, _ in rows],
        "theta_uid": pa.array([theta(u) for _, _, u in rows], pa.binary()),
        "hll_uid": pa.array([hll(u) for _, _, u in rows], pa.binary()),
        "watch_q": pa.array([quantiles(u) for _, _, u in rows], pa.binary()),
        "meta": [json.dumps({"episode": {"n": i + 1, "title": f"e{i}"}}) for i in range(len(rows))],
    })


@pytest.fixture
def shows(store, tmp_path):
    parts = [TopicPartition("views", p) for p in range(2)]
    publish_segments(store, tmp_path, "r1", {tp: 10 for tp in parts}, [
        segment([(5, "Bridgerton", range(0, 300)), (40, "Sex Education", range(250, 400))]),
        segment([(20, "Bridgerton", range(200, 500)), (50, "Stranger Things", range(0, 50))]),
    ], ds="shows")
    return store


@pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)
def test_druid_sql_over_segments_with_sketch_columns(shows):
    # Druid's theta-sketch tutorial's questions (exact mode)
    (row,) = run_sql(shows, """SELECT
        THETA_SKETCH_ESTIMATE(DS_THETA(theta_uid)) AS all_users,
        APPROX_COUNT_DISTINCT_DS_THETA(theta_uid) FILTER (WHERE show = 'Bridgerton') AS bridgerton,
        THETA_SKETCH_ESTIMATE(THETA_SKETCH_INTERSECT(
            DS_THETA(theta_uid) FILTER (WHERE show = 'Bridgerton'),
            DS_THETA(theta_uid) FILTER (WHERE show = 'Sex Education'))) AS both_shows,
        THETA_SKETCH_ESTIMATE(THETA_SKETCH_NOT(
            DS_THETA(theta_uid) FILTER (WHERE show = 'Bridgerton'),
            DS_THETA(theta_uid) FILTER (WHERE show = 'Sex Education'))) AS bridgerton_only,
        APPROX_COUNT_DISTINCT_DS_HLL(hll_uid) AS hll_users,
        APPROX_QUANTILE_DS(watch_q, 0.5) AS median_user
        FROM shows""").table.to_pylist()
    union = dsk.hll_union(12)
    for users in (range(0, 300), range(250, 400), range(200, 500), range(0, 50)):
        union.update(dsk.hll_sketch.deserialize(hll(users)))
    merged = dsk.quantiles_doubles_sketch(128)
    for users in (range(0, 300), range(250, 400), range(200, 500), range(0, 50)):
        merged.merge(dsk.quantiles_doubles_sketch.deserialize(quantiles(users)))
    median = row.pop("median_user")  # past the sketch's exact mode merging is randomized: within its rank error
    assert abs(merged.get_rank(median, True) - 0.5) <= 2 * merged.normalized_rank_error(False)
    assert row == {"all_users": 500.0, "bridgerton": 500, "both_shows": 150.0, "bridgerton_only": 350.0,
                   "hll_users": round(union.get_result().get_estimate())}
    # time, LATEST and JSON as a dashboard writes them
    by_half_hour = run_sql(shows, """SELECT TIME_FLOOR(__time, 'PT30M') AS t, LATEST(show) AS last_show,
        EARLIEST(JSON_VALUE(meta, '$.episode.title')) AS first_title, COUNT(*) AS n,
        TIME_FORMAT(MAX(__time), 'HH:mm') AS last_at
        FROM shows WHERE TIME_IN_INTERVAL(__time, '2026-11-22T10:00:00Z/PT1H') GROUP BY 1 ORDER BY 1""")
    assert by_half_hour.table.to_pylist() == [
        {"t": T0, "last_show": "Bridgerton", "first_title": "e0", "n": 2, "last_at": "10:20"},
        {"t": T0 + timedelta(minutes=30), "last_show": "Stranger Things", "first_title": "e1", "n": 2,
         "last_at": "10:50"}]
    # a sketch itself comes back as its bytes, which the package reads
    (sketch,) = run_sql(shows, "SELECT DS_THETA(theta_uid) AS s FROM shows").table.column("s").to_pylist()
    assert dsk.compact_theta_sketch.deserialize(sketch).get_estimate() == 500.0


@pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)
def test_ingest_query_speaks_druid_sql_and_refuses_what_it_cannot_in_one_line(shows, store_url, capsys):
    def cli(*args: str) -> subprocess.CompletedProcess:
        code = main(["--metadata-url", store_url, "query", *args])
        out = capsys.readouterr()
        return subprocess.CompletedProcess(args, code, out.out, out.err)

    ok = cli("SELECT FLOOR(__time TO HOUR) AS h, DS_THETA(theta_uid) AS users FROM shows GROUP BY 1", "--json")
    assert ok.returncode == 0, ok.stderr
    (row,) = json.loads(ok.stdout)
    assert row["h"] == "2026-11-22T10:00:00.000Z"
    assert dsk.compact_theta_sketch.deserialize(base64.b64decode(row["users"])).get_estimate() == 500.0
    # --time-zone is Druid's sqlTimeZone: the functions' default zone, the literal's zone, how timestamps print
    india = cli("SELECT TIME_FLOOR(__time, 'P1D') AS d, TIME_FORMAT(MIN(__time), 'HH:mm') AS first, COUNT(*) AS n "
                "FROM shows WHERE __time >= TIMESTAMP '2026-11-22 16:00:00' GROUP BY 1", "--json",
                "--time-zone", "Asia/Kolkata")
    assert india.returncode == 0, india.stderr
    assert json.loads(india.stdout) == [{"d": "2026-11-22T00:00:00.000+05:30", "first": "16:10", "n": 2}]
    for sql, message in [
        ("SELECT APPROX_QUANTILE(watch_q, 0.5) FROM shows", "error: Druid SQL function APPROX_QUANTILE is not "
                                                           "supported here"),
        ("SELECT TIME_FLOOR(__time, 'hourly') FROM shows", "error: TIME_FLOOR: 'hourly' is not an ISO-8601 period"),
        ("SELECT THETA_SKETCH_ESTIMATE(hll_uid) FROM shows", "error: the query failed:"),  # not a theta sketch
        ("SELECT TIME_FLOR(__time, 'PT1H') FROM shows", "error: the query failed: Catalog Error: Scalar Function "
                                                       "with name time_flor does not exist"),
    ]:
        bad = cli(sql)
        assert bad.returncode == 1 and bad.stderr.strip().startswith(message), bad.stderr
        assert len(bad.stderr.strip().splitlines()) == 1 and "Traceback" not in bad.stderr
    with pytest.raises(SqlError, match="DS_HLL: lgK must be from 4 to 21"):
        run_sql(MetadataStoreOf(store_url), "SELECT DS_HLL(hll_uid, 40) FROM shows")


def MetadataStoreOf(url: str):  # noqa: N802 - reads as the class it returns
    from ingest_core.store.metadata import MetadataStore

    return MetadataStore(url)
