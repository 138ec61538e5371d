"""The Spark ingest job against the real broker and local Spark, read back through DatasourceReader."""

from __future__ import annotations

import json
import random
from collections import defaultdict
from datetime import datetime, timedelta, timezone

import pytest
from confluent_kafka import Producer

from helpers import ingest_run, spec_from
from ingest_core.errors import BrokerUnavailableError, IngestError, OffsetOutOfRangeError
from ingest_core.metadata import MetadataStore
from ingest_core.reader import DatasourceReader
from ingest_core.report import ParseExceptionLimitError

pytestmark = pytest.mark.kafka

T0 = datetime(2026, 3, 2, 10, 0, tzinfo=timezone.utc)  # a Monday


@pytest.fixture
def store(tmp_path) -> MetadataStore:
    s = MetadataStore(f"sqlite:///{tmp_path / 'md.db'}")
    s.upgrade()
    return s


def iso(dt: datetime) -> str:
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


def rows_of(store, datasource="ds"):
    return DatasourceReader(store, datasource).to_arrow().to_pylist()


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
                    "l_first": ls[0], "l_last": ls[-1], "d_first": ds[0], "d_last": ds[-1]})
    return sorted(out, key=lambda r: (r["__time"], str(r["channel"]), str(r["robot"]), r["l_first"]))


def make_events(n: int, seed: int, spread_s: int):
    rnd = random.Random(seed)
    times = rnd.sample(range(spread_s * 10), n)  # distinct tenths of a second
    return [{"ts": iso(T0 + timedelta(milliseconds=100 * t)), "channel": rnd.choice(["#en", "#fr", "#de", None]),
             "robot": rnd.choice([0, 1]), "l": rnd.randint(-1000, 1000), "d": rnd.randint(-400, 400) / 4}
            for t in times]


@pytest.mark.parametrize("query_gran,segment_gran,rollup", [
    ("MINUTE", "HOUR", True),
    ("FIFTEEN_MINUTE", "DAY", True),
    ("HOUR", "WEEK", True),
    ("DAY", "MONTH", True),
    ("NONE", "HOUR", False),
])
def test_rollup_matches_plain_python(spark, broker, store, tmp_path, query_gran, segment_gran, rollup):
    topic = broker.create_topic(partitions=3)
    events = make_events(600, seed=hash(query_gran) % 1000, spread_s=3 * 86400 if query_gran == "DAY" else 7200)
    _produce_all(broker, topic, events, partitions=3)
    spec = spec_from(broker.bootstrap, topic, {
        "timestampSpec": {"column": "ts", "format": "iso"},
        "dimensionsSpec": {"dimensions": ["channel", {"type": "long", "name": "robot"}]},
        "metricsSpec": AGGREGATORS,
        "granularitySpec": {"segmentGranularity": segment_gran, "queryGranularity": query_gran, "rollup": rollup},
    }, microbatch={"minSplitsPerGroup": 4})  # one group (perfect rollup), read by several Spark tasks
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


def _produce_all(broker, topic, events, partitions):
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i, e in enumerate(events):
        p.produce(topic, json.dumps(e).encode(), partition=i % partitions)
    assert p.flush(30) == 0
