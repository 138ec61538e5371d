from __future__ import annotations

from ingest_core.spec import DatasourceSpec, parse_spec


def make_spec(bootstrap: str, datasource: str = "wiki", *, topic: str | None = None, topic_pattern: str | None = None,
              tuning: dict | None = None, microbatch: dict | None = None, **io) -> DatasourceSpec:
    io_config = {"inputFormat": {"type": "json"}, "consumerProperties": {"bootstrap.servers": bootstrap}, **io}
    if topic is not None:
        io_config["topic"] = topic
    if topic_pattern is not None:
        io_config["topicPattern"] = topic_pattern
    raw = {
        "type": "kafka",
        "spec": {
            "dataSchema": {"dataSource": datasource, "timestampSpec": {"column": "ts"},
                           "granularitySpec": {"segmentGranularity": "HOUR"}},
            "ioConfig": io_config,
            "tuningConfig": {"type": "kafka", **(tuning or {})},
        },
    }
    if microbatch:
        raw["microbatch"] = microbatch
    return parse_spec(raw, f"<test spec {datasource}>")
