"""Druid's sketch, string, any, filtered and hyperUnique/cardinality aggregators through the real job (Kafka,
Spark, publish), checked against the `datasketches` package (DataSketches' C++ library, independent of Spark's
Java one) and read back by every reader: Arrow, Spark's own sketch functions, `ingest query`, Iceberg; merged
across runs by compaction. One ingest run carries every aggregator, to keep the suite fast."""

from __future__ import annotations

import base64
import random
from collections import defaultdict
from datetime import datetime, timedelta
from pathlib import Path

import datasketches as ds
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import T0, ingest_run, iso, produce_all, spec_from, sqlite_store

from ingest_core.store.reader import DatasourceReader
from ingest_core.query.engine import run_sql

pytestmark = pytest.mark.kafka

METRICS = [
    {"type": "count", "name": "cnt"},
    {"type": "thetaSketch", "name": "th", "fieldName": "user"},
    {"type": "thetaSketch", "name": "th_small", "fieldName": "user", "size": 32, "shouldFinalize": False},
    {"type": "thetaSketch", "name": "th_in", "fieldName": "theta_in", "isInputThetaSketch": True},
    {"type": "thetaSketch", "name": "th_num", "fieldName": "uid"},  # a JSON integer: hashed as a long
    {"type": "HLLSketchBuild", "name": "hll", "fieldName": "user"},
    {"type": "HLLSketchBuild", "name": "hll8", "fieldName": "user", "lgK": 14, "tgtHllType": "HLL_8",
     "stringEncoding": "utf8", "round": True},
    {"type": "HLLSketchMerge", "name": "hll_in", "fieldName": "hll_in"},
    {"type": "hyperUnique", "name": "hu", "fieldName": "user"},
    {"type": "cardinality", "name": "card", "fields": ["user", "tag"]},
    {"type": "quantilesDoublesSketch", "name": "q", "fieldName": "v", "k": 64},
    {"type": "KllDoublesSketch", "name": "kd", "fieldName": "v"},
    {"type": "KllFloatsSketch", "name": "kf", "fieldName": "v", "k": 100},
    {"type": "stringFirst", "name": "s_first", "fieldName": "user", "maxStringBytes": 4},
    {"type": "stringLast", "name": "s_last", "fieldName": "user"},
    {"type": "longAny", "name": "l_any", "fieldName": "l"},
    {"type": "doubleAny", "name": "d_any", "fieldName": "v"},
    {"type": "floatAny", "name": "f_any", "fieldName": "v"},
    {"type": "stringAny", "name": "s_any", "fieldName": "user"},
    {"type": "filtered", "filter": {"type": "selector", "dimension": "tag", "value": "y"},
     "aggregator": {"type": "count", "name": "cnt_y"}},
    {"type": "filtered", "name": "th_y", "filter": {"type": "in", "dimension": "tag", "values": ["y"]},
     "aggregator": {"type": "thetaSketch", "name": "ignored", "fieldName": "user"}},
    {"type": "filtered", "filter": {"type": "bound", "dimension": "l", "lower": "0", "ordering": "numeric"},
     "aggregator": {"type": "longSum", "name": "l_pos", "fieldName": "l"}},
    {"type": "filtered", "filter": {"type": "selector", "dimension": "tag", "value": "y"},
     "aggregator": {"type": "stringFirst", "name": "s_first_y", "fieldName": "user"}},
    {"type": "filtered", "filter": {"type": "selector", "dimension": "tag", "value": "n"},
     "aggregator": {"type": "longLast", "name": "l_last_n", "fieldName": "l"}},
]


def theta_of(items) -> ds.compact_theta_sketch:
    sk = ds.update_theta_sketch(14)
    for item in items:
        sk.update(item)
    return sk.compact()


def hll_of(items, lg_k=12, tgt=ds.tgt_hll_type.HLL_4) -> ds.hll_sketch:
    sk = ds.hll_sketch(lg_k, tgt)
    for item in items:
        sk.update(item)
    return sk


def utf16le(text: str) -> str:
    """What the `datasketches` package must be given to hash `text` as Java's char[] (ASCII only)."""
    return text.encode("utf-16-le").decode("ascii")


def make_events(n: int, seed: int) -> list[dict]:
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        number = rnd.randint(0, 150)
        user = f"user-{number}"
        event = {"ts": iso(T0 + timedelta(seconds=i * 7)), "page": rnd.choice(["A", "B", "C"]), "user": user,
                 "uid": number,
                 "tag": rnd.choice(["y", "n", None]), "v": rnd.randint(-500, 500) / 8, "l": rnd.randint(-20, 20),
                 "theta_in": base64.b64encode(theta_of([user, "extra-" + user[-1]]).serialize()).decode(),
                 "hll_in": base64.b64encode(hll_of([user]).serialize_compact()).decode()}
        if i % 37 == 0:
            event["v"] = None  # a null skipped by the sketches
        out.append(event)
    return out


def spec(bootstrap: str, topic: str, *, rollup: bool = True, datasource: str = "ds", metrics=None, **microbatch):
    return spec_from(bootstrap, topic, {
        "timestampSpec": {"column": "ts", "format": "iso"},
        "dimensionsSpec": {"dimensions": ["page"]},
        "metricsSpec": metrics or METRICS,
        "granularitySpec": {"segmentGranularity": "DAY", "queryGranularity": "HOUR" if rollup else "NONE",
                            "rollup": rollup}},
        tuning={"maxRowsInMemory": 50, "maxSavedParseExceptions": 5}, datasource=datasource,
        microbatch={"minSplitsPerGroup": 4, **microbatch})  # many partial sketches per group, merged by Spark


def check_row(row: dict, events: list[dict]) -> None:
    """One rolled-up row's metrics against the events of its group, computed here with `datasketches`."""
    users = [e["user"] for e in events]
    values = [e["v"] for e in events if e["v"] is not None]
    distinct = len(set(users))
    assert row["cnt"] == len(events)
    theta = ds.compact_theta_sketch.deserialize(row["th"])
    assert not theta.is_estimation_mode() and theta.get_estimate() == distinct == theta_of(users).get_estimate()
    assert row["th_num"] == theta_of(sorted({e["uid"] for e in events})).serialize()  # ints: update(long)
    small = ds.compact_theta_sketch.deserialize(row["th_small"])  # size 32: estimation mode, within bounds
    assert small.is_estimation_mode() and small.get_lower_bound(3) <= distinct <= small.get_upper_bound(3)
    with_input = [e["user"] for e in events if e["theta_in"] is not None]  # one record's were unreadable
    merged_in = ds.compact_theta_sketch.deserialize(row["th_in"])
    assert merged_in.get_estimate() == len(set(with_input) | {"extra-" + u[-1] for u in with_input})
    hll = ds.hll_sketch.deserialize(row["hll"])  # Druid's default: lgK 12, HLL_4, strings as UTF-16LE
    assert (hll.lg_config_k, hll.tgt_type) == (12, ds.tgt_hll_type.HLL_4)
    assert hll.get_estimate() == hll_of(utf16le(u) for u in users).get_estimate()
    assert round(hll.get_estimate()) == distinct
    hll8 = ds.hll_sketch.deserialize(row["hll8"])
    assert (hll8.lg_config_k, hll8.tgt_type) == (14, ds.tgt_hll_type.HLL_8)
    assert hll8.get_estimate() == hll_of(users, 14, ds.tgt_hll_type.HLL_8).get_estimate()
    assert ds.hll_sketch.deserialize(row["hll_in"]).get_estimate() == hll_of(with_input).get_estimate()
    hu = ds.hll_sketch.deserialize(row["hu"])
    assert hu.lg_config_k == 11 and round(hu.get_estimate()) == distinct
    tags = {e["tag"] for e in events if e["tag"] is not None}
    assert round(ds.hll_sketch.deserialize(row["card"]).get_estimate()) == len(set(users) | tags)
    q = ds.quantiles_doubles_sketch.deserialize(row["q"])
    assert (q.k, q.n, q.get_min_value(), q.get_max_value()) == (64, len(values), min(values), max(values))
    kd = ds.kll_doubles_sketch.deserialize(row["kd"])
    assert (kd.k, kd.n, kd.get_min_value(), kd.get_max_value()) == (200, len(values), min(values), max(values))
    exact = ds.kll_doubles_sketch(200)
    exact.update(np.array(values))
    assert not kd.is_estimation_mode() and kd.get_quantile(0.5) == exact.get_quantile(0.5)  # exact mode
    kf = ds.kll_floats_sketch.deserialize(row["kf"])
    assert (kf.k, kf.n, kf.get_max_value()) == (100, len(values), max(values))
    in_order = sorted(events, key=lambda e: e["ts"])
    assert row["s_first"] == in_order[0]["user"][:4] and row["s_last"] == in_order[-1]["user"]
    assert row["l_any"] in {e["l"] for e in events} and row["s_any"] in set(users)
    assert row["d_any"] in set(values) and row["f_any"] == pytest.approx(row["d_any"])
    chosen = [e for e in events if e["tag"] == "y"]
    assert row["cnt_y"] == len(chosen)
    assert ds.compact_theta_sketch.deserialize(row["th_y"]).get_estimate() == len({e["user"] for e in chosen})
    assert row["l_pos"] == sum(e["l"] for e in events if e["l"] >= 0)
    tagged = {tag: [e for e in in_order if e["tag"] == tag] for tag in ("y", "n")}
    assert row["s_first_y"] == (tagged["y"][0]["user"] if tagged["y"] else None)
    assert row["l_last_n"] == (tagged["n"][-1]["l"] if tagged["n"] else None)


def test_every_aggregator_through_the_job_read_back_everywhere_and_compacted(spark, broker, tmp_path):
    from pyspark.sql import functions as F

    from ingest_core.core.compaction import CompactionJob
    from ingest_core.spark.compaction import compact
    from ingest_core.store import iceberg
    from ingest_core.store.segment_schema import segment_types

    store = sqlite_store(tmp_path)
    topic = broker.create_topic(partitions=3)
    events = make_events(900, seed=32)
    bad = dict(events[1], theta_in="not a sketch!", hll_in=base64.b64encode(b"\x01\x02").decode())
    produce_all(broker, topic, events + [bad], partitions=3)
    s = spec(broker.bootstrap, topic, iceberg={}, deepStorage={"uri": tmp_path.as_uri()})
    _, reports, _ = ingest_run(spark, store, s, "r1", tmp_path.as_uri())
    stats = reports[0].stats
    assert (stats.processed, stats.processed_with_error) == (900, 1)  # a sketch it cannot read: null, row kept
    message = reports[0].saved_exceptions[-1].message
    assert "could not read a sketch from [not a sketch!] for metric input 'theta_in'" in message
    events = events + [dict(bad, theta_in=None, hll_in=None)]

    groups: dict[tuple, list[dict]] = defaultdict(list)
    for e in events:
        groups[(int(e["ts"][11:13]), e["page"])].append(e)
    table = DatasourceReader(store, "ds").to_arrow()
    assert table.schema.field("th").type == pa.binary() and table.schema.field("cnt_y").type == pa.int64()
    assert table.num_rows == len(groups)
    for row in table.to_pylist():
        check_row(row, groups[(row["__time"].hour, row["page"])])
    all_users = {e["user"] for e in events}

    # Spark's own DataSketches functions (the Java library) read the stored bytes and union them
    df = DatasourceReader(store, "ds").to_spark(spark)
    got = df.agg(F.theta_sketch_estimate(F.theta_union_agg("th")).alias("theta"),
                 F.hll_sketch_estimate(F.hll_union_agg("hll8")).alias("hll8"),
                 F.kll_sketch_get_n_double(F.kll_merge_agg_double("kd")).alias("kll_n"),
                 F.kll_sketch_get_n_float(F.kll_merge_agg_float("kf")).alias("kll_f_n"),
                 F.theta_sketch_estimate(F.theta_union_agg("th_y")).alias("theta_y")).collect()[0]
    assert got["theta"] == len(all_users) and got["hll8"] == len(all_users)
    assert got["kll_n"] == got["kll_f_n"] == sum(1 for e in events if e["v"] is not None)
    assert got["theta_y"] == len({e["user"] for e in events if e["tag"] == "y"})
    # the same users hashed by Spark's Java sketches: unions count each user once, so hashes agree; HLL's
    # default (utf16le) agrees with Java's sketch of the UTF-16LE bytes, which is what Druid hashes
    users = spark.createDataFrame([(u,) for u in sorted(all_users)], "user string")
    numbers = spark.createDataFrame([(e["uid"],) for e in events], "uid bigint")  # Java's update(long)
    java = users.agg(F.theta_sketch_agg("user").alias("t"),
                     F.hll_sketch_agg(F.encode("user", "UTF-16LE"), 12).alias("h")).collect()[0]
    java_numbers = numbers.agg(F.theta_sketch_agg("uid").alias("n")).collect()[0]
    both = (df.select("th", "hll", "th_num")
            .unionByName(spark.createDataFrame([(java["t"], java["h"], java_numbers["n"])],
                                               "th binary, hll binary, th_num binary"))
            .agg(F.theta_sketch_estimate(F.theta_union_agg("th")).alias("t"),
                 F.hll_sketch_estimate(F.hll_union_agg("hll")).alias("h"),
                 F.theta_sketch_estimate(F.theta_union_agg("th_num")).alias("n")).collect()[0])
    assert both["t"] == len(all_users) and both["h"] == len(all_users) and both["n"] == len(all_users)

    # ingest query: the binary columns come through as bytes
    sql = run_sql(store, "SELECT page, th, q FROM ds ORDER BY __time, page LIMIT 3").table
    assert sql.schema.field("th").type in (pa.binary(), pa.large_binary())
    first = sql.to_pylist()[0]
    assert ds.compact_theta_sketch.deserialize(first["th"]).get_estimate() >= 1
    assert ds.quantiles_doubles_sketch.deserialize(first["q"]).n >= 1

    # the Iceberg table: binary columns
    assert iceberg.sync(store, s).added == 1
    cat = iceberg.catalog(store)
    try:
        ice = cat.load_table(iceberg.table_identifier(s))
        assert str(ice.schema().find_field("th").field_type) == "binary"
        scanned = ice.scan().to_arrow()
        union = ds.theta_union(14)
        for b in scanned.column("th").to_pylist():
            union.update(ds.compact_theta_sketch.deserialize(b))
        assert union.get_result().get_estimate() == len(all_users)
    finally:
        cat.engine.dispose()

    # a second run over the same hours, then compaction merges each hour's sketches across the runs
    more = make_events(300, seed=33)
    produce_all(broker, topic, more, partitions=3)
    ingest_run(spark, store, s, "r2", tmp_path.as_uri())
    r1, r2 = sorted(DatasourceReader(store, "ds").segments(), key=lambda x: x.run_id)
    job = CompactionJob("ds", "compact-1", r1.interval_start, r1.interval_end, (r1.id, r2.id),
                        (r1.location, r2.location), 100_000, 1, (tmp_path / "compacted").as_uri(),
                        (segment_types(r1), segment_types(r2)))
    (compacted,) = compact(spark, s, job)
    assert compacted.types["th"] == "COMPLEX<sketch>"
    rows = pq.read_table(compacted.location.removeprefix("file://")).to_pylist()
    assert len(rows) == len(groups)  # both runs' rows of an (hour, page) are one row
    every = events + more
    merged: dict[tuple, list[dict]] = defaultdict(list)
    for e in every:
        merged[(int(e["ts"][11:13]), e["page"])].append(e)
    for row in rows:
        group = merged[(row["__time"].hour, row["page"])]
        users = {e["user"] for e in group}
        assert ds.compact_theta_sketch.deserialize(row["th"]).get_estimate() == len(users)
        assert round(ds.hll_sketch.deserialize(row["hll"]).get_estimate()) == len(users)
        assert ds.kll_doubles_sketch.deserialize(row["kd"]).n == sum(1 for e in group if e["v"] is not None)
        assert ds.quantiles_doubles_sketch.deserialize(row["q"]).n == sum(1 for e in group if e["v"] is not None)
        assert row["cnt"] == len(group) and row["cnt_y"] == sum(1 for e in group if e["tag"] == "y")



# ------------------------------------------------------------------------------------------ Druid's tutorial

TUTORIAL = Path(__file__).parents[1] / "data" / "druid_tutorial_sketches_theta.csv"


def test_druid_theta_sketch_tutorial_answers_exactly(spark, broker, tmp_path):
    """Druid's theta-sketch tutorial (docs/tutorials/tutorial-sketches-theta.md): its CSV through Kafka, rolled up
    by day with a thetaSketch on uid (uid itself not kept), then its questions answered from the stored sketches
    with DataSketches' set operations, exactly (exact mode), as its Druid SQL does:
        THETA_SKETCH_ESTIMATE(DS_THETA(theta_uid)) ... GROUP BY date, show, episode / show, episode
        DS_THETA(theta_uid) FILTER (WHERE show = 'Bridgerton')
        THETA_SKETCH_INTERSECT / THETA_SKETCH_UNION / THETA_SKETCH_NOT of the two Bridgerton episodes' sketches.
    and then in Druid SQL as the tutorial writes it, over the job's segments."""
    lines = [line for line in TUTORIAL.read_text().splitlines() if not line.startswith("#")]
    header, rows = lines[0].split(","), [dict(zip(lines[0].split(","), line.split(","))) for line in lines[1:]]
    store = sqlite_store(tmp_path)
    topic = broker.create_topic(partitions=2)
    for i, line in enumerate(lines[1:]):
        broker.produce(topic, [line.encode()], partition=i % 2)
    s = spec_from(broker.bootstrap, topic, {
        "timestampSpec": {"column": "date", "format": "auto"},
        "dimensionsSpec": {"dimensions": ["show", "episode"]},
        "metricsSpec": [{"type": "count", "name": "count"}, {"type": "thetaSketch", "name": "theta_uid", "fieldName": "uid"}],
        "granularitySpec": {"segmentGranularity": "DAY", "queryGranularity": "DAY", "rollup": True}},
        io={"inputFormat": {"type": "csv", "columns": header}}, datasource="ts_tutorial")
    _, reports, _ = ingest_run(spark, store, s, "r1", tmp_path.as_uri())
    assert sum(r.stats.processed for r in reports) == len(rows) == 19
    stored = DatasourceReader(store, "ts_tutorial").to_arrow()
    assert "uid" not in stored.column_names  # rolled up: only the sketch keeps the users

    def sketches(where=lambda r: True):
        return [ds.compact_theta_sketch.deserialize(r["theta_uid"]) for r in stored.to_pylist() if where(r)]

    def union(parts) -> ds.compact_theta_sketch:  # DS_THETA: the union of the rows' sketches
        u = ds.theta_union(14)
        for p in parts:
            u.update(p)
        return u.get_result()

    def users(where) -> set[str]:
        return {r["uid"] for r in rows if where(r)}

    # by date, show, episode; and by show, episode: THETA_SKETCH_ESTIMATE(DS_THETA(theta_uid))
    for key in (lambda r: (r["__time"].date().isoformat(), r["show"], r["episode"]),
                lambda r: (r["show"], r["episode"])):
        groups: dict[tuple, list[dict]] = defaultdict(list)
        for r in stored.to_pylist():
            groups[key(r)].append(r)
        assert len(groups) > 1
        for k, group in groups.items():
            estimate = union(ds.compact_theta_sketch.deserialize(r["theta_uid"]) for r in group).get_estimate()
            want = users(lambda r: key({**r, "__time": datetime.fromisoformat(r["date"])}) == k)
            assert estimate == len(want), (k, estimate, want)
    e1 = union(sketches(lambda r: r["show"] == "Bridgerton" and r["episode"] == "S1E1"))
    e2 = union(sketches(lambda r: r["show"] == "Bridgerton" and r["episode"] == "S1E2"))
    bridgerton = union(sketches(lambda r: r["show"] == "Bridgerton"))  # a filtered DS_THETA
    assert bridgerton.get_estimate() == len(users(lambda r: r["show"] == "Bridgerton")) == 5
    both = ds.theta_intersection()
    both.update(e1)
    both.update(e2)
    assert both.get_result().get_estimate() == 1  # carol watched both episodes
    assert union([e1, e2]).get_estimate() == 5  # alice, bob, carol, dan, erin watched either
    assert ds.theta_a_not_b().compute(e1, e2).get_estimate() == 3  # alice, bob, dan: episode 1, not 2
    assert not bridgerton.is_estimation_mode()

    # the same questions in Druid SQL, as the tutorial writes them, over the job's segments
    def sql(text: str) -> list[tuple]:
        return [tuple(r.values()) for r in run_sql(store, text).table.to_pylist()]

    per_group = sql("""SELECT __time,
       "show",
       "episode",
       APPROX_COUNT_DISTINCT_DS_THETA(theta_uid) AS users
FROM   ts_tutorial
GROUP  BY 1, 2, 3""")
    want = defaultdict(set)
    for r in rows:
        want[(r["date"], r["show"], r["episode"])].add(r["uid"])
    assert sorted((t.date().isoformat(), s_, e, n) for t, s_, e, n in per_group) == sorted(
        (*k, len(v)) for k, v in want.items())
    assert sql("""SELECT THETA_SKETCH_ESTIMATE(
         DS_THETA(theta_uid) FILTER(WHERE "show" = 'Bridgerton')
       ) AS users
FROM ts_tutorial""") == [(5.0,)]
    for op, answer in (("INTERSECT", 1.0), ("UNION", 5.0), ("NOT", 3.0)):
        assert sql(f"""SELECT THETA_SKETCH_ESTIMATE(
         THETA_SKETCH_{op}(
           DS_THETA(theta_uid) FILTER(WHERE "show" = 'Bridgerton' AND "episode" = 'S1E1'),
           DS_THETA(theta_uid) FILTER(WHERE "show" = 'Bridgerton' AND "episode" = 'S1E2')
         )
       ) AS users
FROM ts_tutorial""") == [(answer,)], op
