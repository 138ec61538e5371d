"""Druid specs in the deprecated `parser` form run through the real Spark job, converted, and ingest
what Druid would."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from helpers import T0, ingest_run, iso, rows_of, sqlite_store

from ingest_core.core.spec import parse_spec

pytestmark = pytest.mark.kafka

DRUID = Path(__file__).parents[1] / "data" / "druid_specs"


def test_druid_s_tutorial_spec_and_a_regex_parser_spec_ingest_converted(spark, broker, tmp_path):
    store = sqlite_store(tmp_path)
    # Druid's Kafka tutorial spec, as it was written with a parser: only where its topic is changes
    wiki_topic = broker.create_topic()
    edits = [{"time": iso(T0 + timedelta(seconds=i)), "channel": f"#c{i % 3}", "page": f"P{i}", "user": "u",
              "added": i * 10, "deleted": i, "delta": i * 9, "isRobot": i % 2 == 0} for i in range(24)]
    broker.produce(wiki_topic, [json.dumps(e).encode() for e in edits])
    raw = json.loads((DRUID / "wikipedia-kafka-supervisor.json").read_text())
    raw["ioConfig"].update(topic=wiki_topic, useEarliestOffset=True,
                           consumerProperties={"bootstrap.servers": broker.bootstrap})
    spec = parse_spec(raw, "wikipedia-kafka-supervisor.json")
    assert spec.io_config.input_format.type == "json" and any(w.path == "dataSchema.parser" for w in spec.warnings)
    _, reports, _ = ingest_run(spark, store, spec, "r1", tmp_path.as_uri())
    rows = sorted(rows_of(store, "wikipedia"), key=lambda r: r["__time"])
    assert reports[0].stats.processed == 24 and len(rows) == 24  # rollup: false
    assert rows[5]["page"] == "P5" and rows[5]["channel"] == "#c2" and rows[5]["added"] == 50  # a long dimension
    assert rows[4]["isRobot"] == "true" and rows[0]["__time"] == T0

    # a regex parseSpec (Druid's docs sample, filled in): log lines, one not matching
    log_topic = broker.create_topic()
    lines = [f"{iso(T0 + timedelta(minutes=i))} 10.0.0.{i % 4} /page/{i} {i * 100}" for i in range(12)]
    broker.produce(log_topic, [line.encode() for line in lines] + [b"not a log line"])
    regex_spec = parse_spec({"type": "kafka", "spec": {
        "dataSchema": {"dataSource": "logs", "parser": {"type": "string", "parseSpec": {
            "format": "regex", "timestampSpec": {"column": "timestamp"},
            "dimensionsSpec": {"dimensions": ["ip", "path"]},
            "columns": ["timestamp", "ip", "path", "bytes"], "pattern": r"(\S+) (\S+) (\S+) (\d+)"}},
            "metricsSpec": [{"type": "count", "name": "count"}, {"type": "longSum", "name": "bytes", "fieldName": "bytes"}],
            "granularitySpec": {"segmentGranularity": "DAY", "queryGranularity": "HOUR"}},
        "ioConfig": {"topic": log_topic, "useEarliestOffset": True,
                     "consumerProperties": {"bootstrap.servers": broker.bootstrap}},
        "tuningConfig": {"type": "kafka", "maxParseExceptions": 5}}}, "logs.json")
    _, reports, _ = ingest_run(spark, store, regex_spec, "r1", tmp_path.as_uri())
    assert (reports[0].stats.processed, reports[0].stats.unparseable) == (12, 1)
    by_ip = {}
    for r in rows_of(store, "logs"):
        by_ip.setdefault(r["ip"], []).append(r)
    assert sorted(by_ip) == [f"10.0.0.{k}" for k in range(4)]
    assert sum(r["count"] for r in by_ip["10.0.0.1"]) == 3  # rows 1, 5, 9: each its own path and hour
    assert sum(r["bytes"] for rs in by_ip.values() for r in rs) == sum(i * 100 for i in range(12))
