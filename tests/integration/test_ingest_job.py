"""The Spark ingest job against the real broker and local Spark, read back through DatasourceReader."""

from __future__ import annotations

import json
import random
from collections import defaultdict
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from confluent_kafka import Producer
from helpers import (
    SIMPLE,
    T0,
    ends_by_itself,
    ingest_run,
    iso,
    produce_all,
    rows_of,
    spec_from,
    sqlite_store,
)

from ingest_core.core.errors import BrokerUnavailableError
from ingest_core.handover.job_input import GroupInput
from ingest_core.handover.report import ParseExceptionLimitError
from ingest_core.store.metadata import MetadataStore
from ingest_core.store.reader import DatasourceReader

pytestmark = pytest.mark.kafka


@pytest.fixture
def store(tmp_path) -> MetadataStore:
    with sqlite_store(tmp_path) as s:
        yield s


# ------------------------------------------------------------------------------------------ rollup oracle


def floor_time(dt: datetime, gran: str) -> datetime:
    """An independent bucket computation in plain datetime arithmetic."""
    if gran == "NONE":
        return dt.replace(microsecond=dt.microsecond // 1000 * 1000)
    if gran == "WEEK":
        day = dt.replace(hour=0, minute=0, second=0, microsecond=0)
        return day - timedelta(days=day.weekday())
    if gran == "MONTH":
        return dt.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    seconds = {"MINUTE": 60, "FIVE_MINUTE": 300, "FIFTEEN_MINUTE": 900, "HOUR": 3600, "SIX_HOUR": 21600,
               "DAY": 86400}[gran]
    epoch = int(dt.timestamp())
    return datetime.fromtimestamp(epoch - epoch % seconds, tz=timezone.utc)


AGGREGATORS = [
    {"type": "count", "name": "cnt"},
    {"type": "longSum", "name": "l_sum", "fieldName": "l"}, {"type": "doubleSum", "name": "d_sum", "fieldName": "d"},
    {"type": "floatSum", "name": "f_sum", "fieldName": "d"},
    {"type": "longMin", "name": "l_min", "fieldName": "l"}, {"type": "longMax", "name": "l_max", "fieldName": "l"},
    {"type": "doubleMin", "name": "d_min", "fieldName": "d"}, {"type": "doubleMax", "name": "d_max", "fieldName": "d"},
    {"type": "floatMin", "name": "f_min", "fieldName": "d"}, {"type": "floatMax", "name": "f_max", "fieldName": "d"},
    {"type": "longFirst", "name": "l_first", "fieldName": "l"}, {"type": "longLast", "name": "l_last", "fieldName": "l"},
    {"type": "doubleFirst", "name": "d_first", "fieldName": "d"},
    {"type": "doubleLast", "name": "d_last", "fieldName": "d"},
    {"type": "floatFirst", "name": "f_first", "fieldName": "d"}, {"type": "floatLast", "name": "f_last", "fieldName": "d"},
]


def expected_rollup(events, query_gran: str, rollup: bool):
    groups = defaultdict(list)
    for i, e in enumerate(events):
        t = datetime.fromisoformat(e["ts"].replace("Z", "+00:00"))
        key = (floor_time(t, query_gran), e.get("channel"), e.get("robot"))
        groups[key if rollup else (key, i)].append((t, e))
    out = []
    for key, items in groups.items():
        bucket, channel, robot = key if rollup else key[0]
        items.sort(key=lambda x: x[0])  # timestamps are distinct, so first/last are well defined
        ls = [e["l"] for _, e in items]
        ds = [e["d"] for _, e in items]
        out.append({"__time": bucket, "channel": channel, "robot": robot, "cnt": len(items),
                    "l_sum": sum(ls), "d_sum": sum(ds), "f_sum": sum(ds), "l_min": min(ls), "l_max": max(ls),
                    "d_min": min(ds), "d_max": max(ds), "f_min": min(ds), "f_max": max(ds),
                    "l_first": ls[0], "l_last": ls[-1], "d_first": ds[0], "d_last": ds[-1],
                    "f_first": ds[0], "f_last": ds[-1]})
    return sorted(out, key=lambda r: (r["__time"], str(r["channel"]), str(r["robot"]), r["l_first"]))


def make_events(n: int, seed: int, spread_s: int):
    rnd = random.Random(seed)
    times = rnd.sample(range(spread_s * 10), n)  # distinct tenths of a second
    return [{"ts": iso(T0 + timedelta(milliseconds=100 * t)), "channel": rnd.choice(["#en", "#fr", "#de", None]),
             "robot": rnd.choice([0, 1]), "l": rnd.randint(-1000, 1000), "d": rnd.randint(-400, 400) / 4}
            for t in times]


@pytest.mark.parametrize("query_gran,segment_gran,rollup,in_memory", [
    ("MINUTE", "HOUR", True, 7),  # splits hand Spark many small partial rollups, which it merges
    ("FIFTEEN_MINUTE", "DAY", True, None),
    ("HOUR", "WEEK", True, None),
    ("DAY", "MONTH", True, None),
    ("NONE", "HOUR", False, None),
])
def test_rollup_matches_plain_python(spark, broker, store, tmp_path, query_gran, segment_gran, rollup, in_memory):
    topic = broker.create_topic(partitions=3)
    events = make_events(600, seed=hash(query_gran) % 1000, spread_s=3 * 86400 if query_gran == "DAY" else 7200)
    produce_all(broker, topic, events, partitions=3)
    spec = spec_from(broker.bootstrap, topic, {
        "timestampSpec": {"column": "ts", "format": "iso"},
        "dimensionsSpec": {"dimensions": ["channel", {"type": "long", "name": "robot"}]},
        "metricsSpec": AGGREGATORS,
        "granularitySpec": {"segmentGranularity": segment_gran, "queryGranularity": query_gran, "rollup": rollup},
    }, tuning={"maxRowsInMemory": in_memory} if in_memory else None,
       microbatch={"minSplitsPerGroup": 4})  # one group (perfect rollup), read by several Spark tasks
    plan, reports, result = ingest_run(spark, store, spec, "r1", tmp_path.as_uri())
    assert len(plan.groups[0].splits) >= 4
    assert sum(r.stats.processed for r in reports) == len(events)
    got = sorted(rows_of(store), key=lambda r: (r["__time"], str(r["channel"]), str(r["robot"]), r["l_first"]))
    want = expected_rollup(events, query_gran, rollup)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g["__time"] == w["__time"]
        for k in w:
            if k.startswith("f_"):
                assert g[k] == pytest.approx(w[k], rel=1e-6), k
            else:
                assert g[k] == w[k], (k, g, w)
    # segments: one set per segmentGranularity interval, each sorted by time
    for seg in DatasourceReader(store, "ds").segments():
        assert seg.payload["rows"] == seg.num_rows > 0
        assert floor_time(seg.interval_start, segment_gran) == seg.interval_start


# ------------------------------------------------------------------------------------------ input formats


def test_json_with_flatten_spec_and_several_rows_per_record(spark, broker, store, tmp_path):
    topic = broker.create_topic(partitions=2)
    records = [json.dumps({"ts": iso(T0 + timedelta(seconds=i)), "user": {"name": f"u{i}", "tags": ["x", f"t{i}"]},
                           "b": i}).encode() for i in range(40)]
    records.append(b'{"ts": "2026-03-02T10:30:00Z", "user": {"name": "m1"}, "b": 1}\n'
                   b'{"ts": "2026-03-02T10:30:01Z", "user": {"name": "m2"}, "b": 2}')  # two rows in one record
    broker.produce(topic, records[:20], partition=0)
    broker.produce(topic, records[20:], partition=1)
    spec = spec_from(broker.bootstrap, topic, {**SIMPLE, "dimensionsSpec": {"dimensions": ["a", "b", "tag1"]}},
                     io={"inputFormat": {"type": "json", "flattenSpec": {"useFieldDiscovery": True, "fields": [
                         {"type": "path", "name": "a", "expr": "$.user.name"},
                         {"type": "path", "name": "tag1", "expr": "$.user.tags[1]"}]}}})
    _, reports, _ = ingest_run(spark, store, spec, "r1", tmp_path.as_uri())
    rows = rows_of(store)
    assert len(rows) == 42 and reports[0].stats.processed == 42
    assert {r["a"] for r in rows} == {f"u{i}" for i in range(40)} | {"m1", "m2"}
    assert sorted((r["a"], r["tag1"]) for r in rows if r["a"] in ("u3", "m1")) == [("m1", None), ("u3", "t3")]
    assert {r["b"] for r in rows} >= {"0", "39"}  # a number read into a string dimension


def test_csv_and_tsv_with_header_list_delimiter_and_skipped_rows(spark, broker, store, tmp_path):
    topic = broker.create_topic()
    csv_records = [f'{iso(T0 + timedelta(seconds=i))},"x,{i}",p|q{i}'.encode() for i in range(30)]
    broker.produce(topic, csv_records)
    spec = spec_from(broker.bootstrap, topic, {**SIMPLE, "dimensionsSpec": {"dimensions": ["a", "b"]}},
                     io={"inputFormat": {"type": "csv", "columns": ["ts", "a", "b"], "listDelimiter": "|"}})
    _, reports, _ = ingest_run(spark, store, spec, "r1", tmp_path.as_uri())
    rows = sorted(rows_of(store), key=lambda r: r["__time"])
    assert len(rows) == 30 and reports[0].stats.processed == 30
    assert rows[7]["a"] == "x,7" and rows[7]["b"] == '["p","q7"]'  # quoted comma; multi-value, sorted

    topic2 = broker.create_topic()
    tsv_records = [f"skip me\nts;a;b\n{iso(T0 + timedelta(seconds=i))};{i};\n{iso(T0 + timedelta(seconds=i, milliseconds=5))};y;z".encode()
                   for i in range(10)]
    broker.produce(topic2, tsv_records)
    spec2 = spec_from(broker.bootstrap, topic2, SIMPLE, datasource="tsv", io={"inputFormat": {
        "type": "tsv", "delimiter": ";", "findColumnsFromHeader": True, "skipHeaderRows": 1}})
    _, reports2, _ = ingest_run(spark, store, spec2, "r1", tmp_path.as_uri())
    rows2 = rows_of(store, "tsv")
    assert len(rows2) == 20 and reports2[0].stats.processed == 20 and reports2[0].records == 10
    assert sum(1 for r in rows2 if r["b"] is None) == 10  # an empty value is null


def test_kafka_format_adds_key_headers_timestamp_and_topic(spark, broker, store, tmp_path):
    topic = broker.create_topic()
    recent = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(minutes=5)  # inside topic retention
    kafka_ts = int(recent.timestamp() * 1000)
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(25):
        p.produce(topic, value=json.dumps({"a": f"v{i}", "kafka.topic": "value wins"}).encode(), key=f"k{i % 5}".encode(),
                  headers=[("env", b"prod"), ("trace", f"t{i}".encode())], timestamp=kafka_ts + i)
    assert p.flush(30) == 0
    spec = spec_from(broker.bootstrap, topic, {
        **SIMPLE, "timestampSpec": {"column": "kafka.timestamp", "format": "millis"},
        "dimensionsSpec": {"dimensions": ["a", "kafka.key", "kafka.header.env", "hdr.trace", "kafka.topic"]}},
        io={"inputFormat": {"type": "kafka", "valueFormat": {"type": "json"}, "headerColumnPrefix": "hdr.",
                            "headerFormat": {"type": "string"}}})
    _, reports, _ = ingest_run(spark, store, spec, "r1", tmp_path.as_uri())
    rows = sorted(rows_of(store), key=lambda r: r["__time"])
    assert len(rows) == 25 and reports[0].stats.processed == 25
    assert rows[0]["__time"] == recent
    assert {r["kafka.key"] for r in rows} == {f"k{i}" for i in range(5)}
    assert rows[3]["hdr.trace"] == "t3" and rows[3]["kafka.header.env"] is None  # custom prefix
    assert {r["kafka.topic"] for r in rows} == {"value wins"}  # the value's field wins a name clash


def test_schemaless_dimensions_are_discovered(spark, broker, store, tmp_path):
    topic = broker.create_topic()
    broker.produce(topic, [json.dumps({"ts": iso(T0), "x": 1, "y": "a", "skip": "no", "n": 5}).encode(),
                           json.dumps({"ts": iso(T0), "z": True, "y": "b", "n": 7}).encode()])
    spec = spec_from(broker.bootstrap, topic, {
        "timestampSpec": {"column": "ts"}, "dimensionsSpec": {"dimensionExclusions": ["skip"]},
        "metricsSpec": [{"type": "longSum", "name": "n_sum", "fieldName": "n"}],
        "granularitySpec": {"segmentGranularity": "DAY", "queryGranularity": "HOUR"}})
    ingest_run(spark, store, spec, "r1", tmp_path.as_uri())
    rows = sorted(rows_of(store), key=lambda r: r["y"])
    assert [(r["x"], r["y"], r["z"], r["n_sum"]) for r in rows] == [("1", "a", None, 5), (None, "b", "true", 7)]
    assert "skip" not in rows[0] and "n" not in rows[0]


def test_include_all_dimensions_and_keep_null_columns(spark, broker, store, tmp_path):
    """The listed dimensions first, typed as listed, then the discovered ones as strings by name; a field null in
    every row is a column of nulls (keepNullColumns); a transform reads the field it replaces."""
    topic = broker.create_topic()
    broker.produce(topic, [json.dumps({"ts": iso(T0), "page": "p", "n": 1, "user": "u", "gone": None}).encode(),
                           json.dumps({"ts": iso(T0), "page": "q", "n": 2, "city": "c", "gone": None}).encode()])
    spec = spec_from(broker.bootstrap, topic, {
        "timestampSpec": {"column": "ts"},
        "dimensionsSpec": {"dimensions": ["page", {"type": "long", "name": "n"}], "includeAllDimensions": True},
        "transformSpec": {"transforms": [{"type": "expression", "name": "page", "expression": "upper(page)"}]},
        "metricsSpec": [{"type": "count", "name": "cnt"}],
        "granularitySpec": {"segmentGranularity": "DAY", "queryGranularity": "HOUR"}},
        io={"inputFormat": {"type": "json", "keepNullColumns": True}})
    _, reports, _ = ingest_run(spark, store, spec, "r1", tmp_path.as_uri())
    assert list(reports[0].segments[0].dimensions) == ["page", "n", "city", "gone", "user"]
    rows = sorted(rows_of(store), key=lambda r: r["page"])
    assert [(r["page"], r["n"], r["city"], r["gone"], r["user"]) for r in rows] == [
        ("P", 1, None, None, "u"), ("Q", 2, "c", None, None)]


def test_schema_discovery_types_every_field_and_widens_across_runs(spark, broker, store, tmp_path):
    """useSchemaDiscovery over two runs whose fields change: run 1 has n long, an array of longs and a nested
    object; run 2 makes n a double, adds a field and an array of doubles. Every field reads back with its type
    (n DOUBLE in old segments too, the new field null there) through the reader, SQL, to_spark, compaction of
    both runs' segments and the Iceberg table; rows equal after typing (3 and 3.0, one object's keys in two
    orders) roll up into one."""
    from ingest_core.core.compaction import CompactionJob
    from ingest_core.service.status import new_columns
    from ingest_core.spark.compaction import compact
    from ingest_core.store import iceberg
    from ingest_core.store.segment_schema import segment_types
    from ingest_core.query.engine import run_sql

    topic = broker.create_topic()
    spec = spec_from(broker.bootstrap, topic, {
        "timestampSpec": {"column": "ts"}, "dimensionsSpec": {"useSchemaDiscovery": True},
        "metricsSpec": [{"type": "count", "name": "cnt"}],
        "granularitySpec": {"segmentGranularity": "DAY", "queryGranularity": "HOUR"}},
        microbatch={"iceberg": {}, "deepStorage": {"uri": tmp_path.as_uri()}})
    first = [{"ts": iso(T0), "n": 1, "s": "a", "arr": [1, 2], "obj": {"k": 1, "deep": {"x": [1]}}, "flag": True},
             {"ts": iso(T0), "n": 2, "s": "b", "arr": [], "obj": {"k": 2}}]
    broker.produce(topic, [json.dumps(e).encode() for e in first])
    ingest_run(spark, store, spec, "r1", tmp_path.as_uri())
    iceberg.sync(store, spec)
    second = [{"ts": iso(T0), "n": 2.5, "s": "c", "arr": [0.5], "obj": {"k": 3}, "extra": "new"},
              {"ts": iso(T0), "n": 3, "s": "d", "obj": {"k": 4, "z": 0}},
              {"ts": iso(T0), "n": 3.0, "s": "d", "obj": {"z": 0, "k": 4}}]
    broker.produce(topic, [json.dumps(e).encode() for e in second])
    _, reports, _ = ingest_run(spark, store, spec, "r2", tmp_path.as_uri())
    assert reports[0].stats.processed == 3

    reader = DatasourceReader(store, "ds")
    r1, r2 = sorted(reader.segments(), key=lambda s: s.run_id)
    assert {k: segment_types(r1)[k] for k in ("n", "s", "arr", "obj", "flag")} == {
        "n": "LONG", "s": "STRING", "arr": "ARRAY<LONG>", "obj": "COMPLEX<json>", "flag": "LONG"}
    assert {k: segment_types(r2)[k] for k in ("n", "arr", "extra")} == {
        "n": "DOUBLE", "arr": "ARRAY<DOUBLE>", "extra": "STRING"}
    merged = reader.schema()
    assert {k: merged[k] for k in ("n", "s", "arr", "obj", "flag", "extra", "cnt")} == {
        "n": "DOUBLE", "s": "STRING", "arr": "ARRAY<DOUBLE>", "obj": "COMPLEX<json>", "flag": "LONG",
        "extra": "STRING", "cnt": "LONG"}
    assert new_columns(store, "ds", store.runs.recent("ds")).columns == {"extra": "STRING"}

    def typed(rows):
        return sorted(((r["s"], r["n"], r["arr"], json.loads(r["obj"]), r["flag"], r["extra"], r["cnt"])
                       for r in rows), key=lambda r: r[0])

    want = [("a", 1.0, [1.0, 2.0], {"k": 1, "deep": {"x": [1]}}, 1, None, 1),
            ("b", 2.0, [], {"k": 2}, None, None, 1),
            ("c", 2.5, [0.5], {"k": 3}, None, "new", 1),
            ("d", 3.0, None, {"k": 4, "z": 0}, None, None, 2)]  # 3 and 3.0, and the object's two key orders
    table = reader.to_arrow()
    assert table.schema.field("n").type == pa.float64() and table.schema.field("arr").type == pa.list_(pa.float64())
    assert typed(table.to_pylist()) == want
    assert typed(r.asDict() for r in reader.to_spark(spark).collect()) == want
    sql = run_sql(store, "SELECT s, n, arr, obj, flag, extra, cnt, json_extract(obj, '$.k')::BIGINT AS k FROM ds")
    assert typed(sql.table.to_pylist()) == want and sorted(r["k"] for r in sql.table.to_pylist()) == [1, 2, 3, 4]

    job = CompactionJob("ds", "compact-1", r1.interval_start, r1.interval_end, (r1.id, r2.id),
                        (r1.location, r2.location), 1000, 1, (tmp_path / "compacted").as_uri(),
                        (segment_types(r1), segment_types(r2)))
    (compacted,) = compact(spark, spec, job)
    assert {k: compacted.types[k] for k in ("n", "arr", "obj", "extra")} == {
        "n": "DOUBLE", "arr": "ARRAY<DOUBLE>", "obj": "COMPLEX<json>", "extra": "STRING"}
    assert typed(pq.read_table(compacted.location.removeprefix("file://")).to_pylist()) == want

    assert iceberg.sync(store, spec).added == 2  # r2's file, and r1's widened to the merged schema
    cat = iceberg.catalog(store)
    try:
        ice = cat.load_table(iceberg.table_identifier(spec))
        assert typed(ice.scan().to_arrow().to_pylist()) == want
        assert str(ice.schema().find_field("n").field_type) == "double"
    finally:
        cat.engine.dispose()
    assert not iceberg.sync(store, spec).changed  # level: nothing again


# ------------------------------------------------------------------------------------------ offsets and errors


def test_malformed_rows_under_and_over_the_limit(spark, broker, store, tmp_path):
    topic = broker.create_topic()
    good = [json.dumps({"ts": iso(T0 + timedelta(seconds=i)), "a": "x", "n": i}).encode() for i in range(20)]
    bad = [b"{not json", json.dumps({"ts": "yesterday", "a": "x"}).encode(),
           json.dumps({"ts": iso(T0), "a": "x", "n": "many"}).encode()]
    broker.produce(topic, good[:10] + bad + good[10:])
    schema = {**SIMPLE, "dimensionsSpec": {"dimensions": ["a"]},
              "metricsSpec": [{"type": "count", "name": "cnt"}, {"type": "longSum", "name": "n", "fieldName": "n"}]}
    spec = spec_from(broker.bootstrap, topic, schema, tuning={"maxParseExceptions": 3, "maxSavedParseExceptions": 2})
    _, reports, _ = ingest_run(spark, store, spec, "r1", tmp_path.as_uri())
    stats = reports[0].stats
    assert (stats.processed, stats.unparseable, stats.processed_with_error) == (20, 2, 1)
    assert len(rows_of(store)) == 21  # the row with an unreadable metric is kept, with null there
    saved = reports[0].saved_exceptions
    assert len(saved) == 2 and [e.offset for e in saved] == [11, 12] and "many" in saved[-1].message

    spec_over = spec_from(broker.bootstrap, topic, schema, datasource="over", tuning={"maxParseExceptions": 2})
    with pytest.raises(ParseExceptionLimitError, match=r"Max parse exceptions \[2\] exceeded.*maxParseExceptions"):
        ingest_run(spark, store, spec_over, "r1", tmp_path.as_uri())
    assert rows_of(store, "over") == []  # nothing was published


def test_late_and_early_messages_are_thrown_away(spark, broker, store, tmp_path):
    from ingest_core.supervisor.planning import PlanOptions

    topic = broker.create_topic()
    now = datetime.now(timezone.utc).replace(microsecond=0)
    offsets_h = [-3, -1.5, -0.5, 0, 0.5, 1.5, 2.5, 3.5]  # hours from the plan's creation time
    broker.produce(topic, [json.dumps({"ts": iso(now + timedelta(hours=h)), "a": str(h)}).encode() for h in offsets_h])
    spec = spec_from(broker.bootstrap, topic, SIMPLE, io={
        "lateMessageRejectionPeriod": "PT2H", "earlyMessageRejectionPeriod": "PT1H", "taskDuration": "PT1H"})
    _, reports, _ = ingest_run(spark, store, spec, "r1", tmp_path.as_uri(), options=PlanOptions(now=now))
    # kept: creation - 2h <= t <= creation + taskDuration (1h) + 1h
    assert sorted(float(r["a"]) for r in rows_of(store)) == [-1.5, -0.5, 0, 0.5, 1.5]
    assert reports[0].stats.thrown_away == 3 and reports[0].stats.processed == 5


def test_max_rows_per_segment_splits_an_interval_into_time_ordered_shards(spark, broker, store, tmp_path):
    import pyarrow.parquet as pq

    from ingest_core.handover import deep_storage

    topic = broker.create_topic(partitions=2)
    events = [{"ts": iso(T0 + timedelta(seconds=i)), "a": str(i % 3)} for i in range(50)]
    produce_all(broker, topic, events, partitions=2)
    spec = spec_from(broker.bootstrap, topic, SIMPLE, tuning={"maxRowsPerSegment": 20})
    ingest_run(spark, store, spec, "r1", tmp_path.as_uri())
    segments = DatasourceReader(store, "ds").segments()
    assert sum(s.num_rows for s in segments) == 50 and len(segments) >= 3
    assert all(s.num_rows <= 20 for s in segments)
    assert len({(s.interval_start, s.version) for s in segments}) == 1  # one interval, one version, n partitions
    assert sorted(s.partition_num for s in segments) == list(range(len(segments)))
    for seg in segments:
        fs, path = deep_storage.filesystem(seg.location)
        times = pq.read_table(path, filesystem=fs).column("__time").to_pylist()
        assert times == sorted(times) and len(times) == seg.num_rows
    df = DatasourceReader(store, "ds").to_spark(spark)
    assert df.count() == 50 and sorted(r["a"] for r in df.select("a").collect()) == sorted(e["a"] for e in events)


def test_empty_range_publishes_no_segments(spark, broker, store, tmp_path):
    topic = broker.create_topic()
    spec = spec_from(broker.bootstrap, topic, SIMPLE)
    plan, reports, result = ingest_run(spark, store, spec, "r1", tmp_path.as_uri())
    assert plan.is_empty and reports[0].segments == [] and reports[0].records == 0
    assert result.segment_ids == () and rows_of(store) == []


def test_unreachable_broker_fails_by_its_own_deadline(spark, store, tmp_path):
    """Only the job's own deadline (Kafka's metadata wait, bounded by the stall timeout) ends a read of a broker
    that is not there; a watchdog fails the test on a hang instead of timing it."""
    from ingest_core.core.offsets import OffsetRange, StartSource, TopicPartition
    from ingest_core.core.planner import PartitionPlan, Plan, TaskGroup
    from ingest_core.dev.embedded import free_port
    from ingest_core.spark.job import GroupJob, run_group

    spec = spec_from(f"127.0.0.1:{free_port()}", "gone", SIMPLE)
    tp = TopicPartition("gone", 0)
    plan = Plan("ds", "r1", T0, (TaskGroup(0, (PartitionPlan(tp, 0, 10, StartSource.EARLIEST),),
                                          (OffsetRange(tp, 0, 10),)),), "modulo")
    job = GroupJob.of_plan(spec, plan, 0, 0, (tmp_path / "out").as_uri())
    with pytest.raises(BrokerUnavailableError, match="cannot reach Kafka"):
        ends_by_itself(run_group, spark, job, stall_timeout_s=5)
    from ingest_core.handover import deep_storage
    report = deep_storage.read_json(deep_storage.join(job.attempt_uri, "report.json"))
    assert report["state"] == "FAILED" and "cannot reach Kafka" in report["error"]


def test_spark_submit_entry_point(broker, store, tmp_path):
    """The job as Airflow runs it: spark-submit of spark_jobs/ingest_job.py with the spec and plan as files."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    import yaml

    from ingest_core.handover import deep_storage
    from ingest_core.supervisor.planning import Supervisor

    topic = broker.create_topic(partitions=2)
    produce_all(broker, topic, [{"ts": iso(T0 + timedelta(seconds=i)), "a": str(i % 4)} for i in range(40)], 2)
    spec = spec_from(broker.bootstrap, topic, SIMPLE, io={"taskCount": 2})
    plan = Supervisor(spec, store).plan("manual__1").plan
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(yaml.safe_dump(spec.to_raw()))
    for group in plan.groups:  # each group's input, as the plan step stages it
        (tmp_path / f"group={group.group_id}.json").write_text(json.dumps(
            GroupInput.of_plan(plan, group.group_id, str(spec_file)).to_json()))
    job = Path(__file__).resolve().parents[2] / "spark_jobs" / "ingest_job.py"
    submit = Path(sys.executable).parent / "spark-submit"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "INGEST_DEEP_STORAGE": tmp_path.as_uri()}
    base = [str(submit), "--master", "local[2]", "--conf", "spark.ui.enabled=false",
            "--conf", "spark.sql.shuffle.partitions=3", "--conf", "spark.sql.session.timeZone=Europe/Paris", str(job),
            "--input"]
    done = subprocess.run(base + [str(tmp_path / "group=1.json")], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    # a submitted setting (a spec's microbatch.spark.conf) wins over the job's defaults, not over what it needs
    assert "spark.sql.session.timeZone=UTC, spark.sql.shuffle.partitions=3" in done.stdout + done.stderr
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    report = deep_storage.read_json(summary["report"])
    assert summary["report"].startswith(deep_storage.group_uri(tmp_path.as_uri(), "ds", "manual__1", 1))
    assert report["state"] == "SUCCESS" and report["rowStats"]["processed"] == 20 == summary["rows"]

    bad = subprocess.run(base + [str(tmp_path / "group=1.json"), "--group", "7"], capture_output=True, text=True,
                         env=env, timeout=300)
    assert bad.returncode == 2 and "is task group 1's, not task group 7's" in bad.stdout + bad.stderr  # merged
