"""Druid's answers as the oracle: every example of Druid's documentation that prints the rows an ingestion spec
gives, fed the same records (tests/data/druid_docs, from apache/druid) through the real broker, the run's task
code (plan, one Spark job per task group on the session's Spark Connect server, the exactly-once publish; the
DAG's tasks without Airflow around them) and answered by `ingest query`, compared with the rows the
documentation prints.

Each spec is the documented one as a Kafka supervisor spec: the doc's dataSchema as it is (the legacy `parser`
form written as `timestampSpec`/`dimensionsSpec` beside it, as Druid reads it), an ioConfig on the test's topic.
The SQL is the documented query, in Druid SQL as the page writes it. Where our rows differ from the printed ones for a reason
we chose, the test says why (docs/tests.md, "Druid's documented examples").
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from druid_docs import DOCS, ROLLUP_ROWS, ROLLUP_SCHEMA, TRANSFORM_ROWS, TRANSFORM_SCHEMA, records, rows, table

from ingest_core.core.spec import DatasourceSpec, parse_spec
from ingest_core.supervisor import compaction as compaction_task
from ingest_core.supervisor.publish import successful_reports
from ingest_core.supervisor.staging import stage_plan
from ingest_core.service.cli import main
from ingest_core.spark.connect import run_compaction, run_job
from ingest_core.store.metadata import MetadataStore
from ingest_core.store.publisher import GroupResult, Publisher
from ingest_core.supervisor.planning import Supervisor

pytestmark = pytest.mark.kafka

class Docs:
    """One metadata store and deep storage for the module's datasources, on the session's broker and Spark
    Connect server; the metadata URL is the environment's, as the DAG's tasks read it."""

    def __init__(self, root: Path, broker: Any, connect_url: str):
        self.root, self.broker, self.connect_url = root, broker, connect_url
        self.url = f"sqlite:///{root / 'metadata.db'}"
        self.store = MetadataStore(self.url)
        self.store.upgrade()

    def spec(self, topic: str, data_schema: dict, input_format: dict | None = None, **extra: Any) -> DatasourceSpec:
        """The doc's dataSchema in a Kafka supervisor spec reading `topic` from its start."""
        return parse_spec({
            "type": "kafka",
            "spec": {"dataSchema": data_schema,
                     "ioConfig": {"topic": topic, "useEarliestOffset": True,
                                  "inputFormat": input_format or {"type": "json"},
                                  "consumerProperties": {"bootstrap.servers": self.broker.bootstrap}},
                     "tuningConfig": {"type": "kafka"}},
            "microbatch": {"deepStorage": {"uri": (self.root / "deep").as_uri()}},
            **extra}, f"<{data_schema['dataSource']}>")

    def run(self, spec: DatasourceSpec, run_id: str) -> None:
        """One supervisor loop as the DAG's tasks run it: plan, stage, the Spark jobs, publish."""
        supervisor = Supervisor(spec, self.store)
        supervisor.register()
        plan = supervisor.plan(run_id).plan
        for job in stage_plan(spec, plan):
            run_job(self.connect_url, job, timeout_s=300)
        results = [GroupResult.from_report(replicas[0]) for replicas in successful_reports(spec, plan).values()]
        assert len(results) == len([g for g in plan.groups if not g.is_empty]), "a task group failed"
        Publisher(self.store).publish(spec.datasource, run_id, results)

    def compact(self, spec: DatasourceSpec, run_id: str) -> dict:
        """The compaction DAG's tasks: search, the jobs, publish (Druid's reindexing of an interval)."""
        jobs = compaction_task.search_step(spec, run_id)
        for job in jobs:
            run_compaction(self.connect_url, job.to_args(), timeout_s=300)
        return compaction_task.publish_step(spec, jobs)

    def query(self, capsys: Any, sql: str) -> list[dict]:
        """`ingest query --json`'s answer."""
        capsys.readouterr()
        code = main(["--metadata-url", self.url, "query", "--json", sql])
        out = capsys.readouterr()
        assert code == 0, out.err
        return json.loads(out.out)


@pytest.fixture(scope="module")
def docs(tmp_path_factory, broker, spark_connect):
    root = tmp_path_factory.mktemp("druid-docs")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("INGEST_METADATA_URL", f"sqlite:///{root / 'metadata.db'}")  # the compaction tasks' store
        env.setenv("INGEST_DEEP_STORAGE", (root / "deep").as_uri())
        yield Docs(root, broker, spark_connect.url)


def produce(docs: Docs, *files: str, **kwargs: Any) -> str:
    topic = docs.broker.create_topic(partitions=1)
    for name in files:
        docs.broker.produce(topic, records(name), **kwargs)
    return topic


# ------------------------------------------------------------------------------------------ tutorial-rollup.md

def test_rollup_tutorial(docs, capsys):
    docs.run(docs.spec(produce(docs, "rollup-data.json"), ROLLUP_SCHEMA), "rollup-1")
    assert rows(docs.query(capsys, 'select * from "rollup-tutorial"')) == rows(ROLLUP_ROWS)


# ------------------------------------------------------------------------------------------ tutorial-transform-spec.md

def test_transform_tutorial(docs, capsys):
    docs.run(docs.spec(produce(docs, "transform-data.json"), TRANSFORM_SCHEMA), "transform-1")
    assert rows(docs.query(capsys, 'select * from "transform-tutorial"')) == rows(TRANSFORM_ROWS)


# ------------------------------------------------------------------------------------------ tutorial-ingestion-spec.md

INGESTION_SCHEMA = {  # the final spec; its `parser.parseSpec` holds timestampSpec and dimensionsSpec
    "dataSource": "ingestion-tutorial",
    "timestampSpec": {"format": "iso", "column": "ts"},
    "dimensionsSpec": {"dimensions": ["srcIP", {"name": "srcPort", "type": "long"},
                                      {"name": "dstIP", "type": "string"}, {"name": "dstPort", "type": "long"},
                                      {"name": "protocol", "type": "string"}]},
    "metricsSpec": [{"type": "count", "name": "count"},
                    {"type": "longSum", "name": "packets", "fieldName": "packets"},
                    {"type": "longSum", "name": "bytes", "fieldName": "bytes"},
                    {"type": "doubleSum", "name": "cost", "fieldName": "cost"}],
    "granularitySpec": {"type": "uniform", "segmentGranularity": "HOUR", "queryGranularity": "MINUTE",
                        "intervals": ["2018-01-01/2018-01-02"], "rollup": True},
}
INGESTION_ROWS = table(  # dsql> select * from "ingestion-tutorial";
    ("__time", "bytes", "cost", "count", "dstIP", "dstPort", "packets", "protocol", "srcIP", "srcPort"),
    ("2018-01-01T01:01:00.000Z", 6000, 4.9, 3, "2.2.2.2", 3000, 60, "6", "1.1.1.1", 2000),
    ("2018-01-01T01:02:00.000Z", 9000, 18.1, 2, "2.2.2.2", 7000, 90, "6", "1.1.1.1", 5000),
    ("2018-01-01T01:03:00.000Z", 6000, 4.3, 1, "2.2.2.2", 7000, 60, "6", "1.1.1.1", 5000),
    ("2018-01-01T02:33:00.000Z", 30000, 56.9, 2, "8.8.8.8", 5000, 300, "17", "7.7.7.7", 4000),
    ("2018-01-01T02:35:00.000Z", 30000, 46.3, 1, "8.8.8.8", 5000, 300, "17", "7.7.7.7", 4000))


def test_ingestion_spec_tutorial(docs, capsys):
    docs.run(docs.spec(produce(docs, "ingestion-tutorial-data.json"), INGESTION_SCHEMA), "ingestion-1")
    assert rows(docs.query(capsys, 'select * from "ingestion-tutorial"')) == rows(INGESTION_ROWS)


# ------------------------------------------------------------------------------------------ tutorial-update-data.md

UPDATES_SCHEMA = {
    "dataSource": "updates-tutorial",
    "dimensionsSpec": {"dimensions": ["animal"]},
    "timestampSpec": {"column": "timestamp", "format": "iso"},
    "metricsSpec": [{"type": "count", "name": "count"}, {"type": "longSum", "name": "number", "fieldName": "number"}],
    "granularitySpec": {"type": "uniform", "segmentGranularity": "week", "queryGranularity": "minute",
                        "intervals": ["2018-01-01/2018-01-03"], "rollup": True},
}


def test_update_tutorial_as_a_stream_appends(docs, capsys):
    """The tutorial's native tasks as a stream does them. A stream cannot overwrite an interval, so the
    datasource starts where the tutorial's overwrite left it (updates-data2.json is its first run); the
    "combine" task (a reindex of the interval with updates-data3.json) is the next run plus a compaction, which
    rolls the interval up again as the reindex does; the append (updates-data4.json) is the last run."""
    topic = produce(docs, "updates-data2.json")
    docs.run(docs.spec(topic, UPDATES_SCHEMA, compaction={"skipOffsetFromLatest": "PT0S"}), "updates-1")
    select = 'select * from "updates-tutorial"'
    columns = ("__time", "animal", "count", "number")
    assert rows(docs.query(capsys, select)) == rows(table(
        columns,
        ("2018-01-01T01:01:00.000Z", "lion", 1, 100),
        ("2018-01-01T03:01:00.000Z", "aardvark", 1, 9999),
        ("2018-01-01T04:01:00.000Z", "bear", 1, 111)))

    # updates-data3.json names its time `__time` (the reindex read it beside the datasource's own rows)
    docs.broker.produce(topic, records("updates-data3.json"))
    reindex = {**UPDATES_SCHEMA, "timestampSpec": {"column": "__time", "format": "iso"}}
    docs.run(docs.spec(topic, reindex, compaction={"skipOffsetFromLatest": "PT0S"}), "updates-2")
    spec = docs.spec(topic, UPDATES_SCHEMA, compaction={"skipOffsetFromLatest": "PT0S"})
    assert docs.compact(spec, "compact-1")["compacted"]
    combined = table(  # "Note that roll-up occurred for the "lion" row"
        columns,
        ("2018-01-01T01:01:00.000Z", "lion", 2, 400),
        ("2018-01-01T03:01:00.000Z", "aardvark", 1, 9999),
        ("2018-01-01T04:01:00.000Z", "bear", 1, 111),
        ("2018-01-01T05:01:00.000Z", "mongoose", 1, 737),
        ("2018-01-01T06:01:00.000Z", "snake", 1, 1234),
        ("2018-01-01T07:01:00.000Z", "octopus", 1, 115))
    assert rows(docs.query(capsys, select)) == rows(combined)

    # the append: its bear row stays apart from the bear row before it (another segment), until query time
    docs.broker.produce(topic, records("updates-data4.json"))
    docs.run(spec, "updates-3")
    assert rows(docs.query(capsys, select)) == rows(combined + table(
        columns,
        ("2018-01-01T04:01:00.000Z", "bear", 1, 222),
        ("2018-01-01T09:01:00.000Z", "falcon", 1, 1241)))
    grouped = docs.query(capsys, 'select __time, animal, SUM("count"), SUM("number") from "updates-tutorial" '
                                 'group by __time, animal')
    printed = ("__time", "animal", "EXPR$2", "EXPR$3")  # Druid's names of unnamed expressions, as it prints them
    assert rows(grouped) == rows(table(
        printed,
        ("2018-01-01T01:01:00.000Z", "lion", 2, 400),
        ("2018-01-01T03:01:00.000Z", "aardvark", 1, 9999),
        ("2018-01-01T04:01:00.000Z", "bear", 2, 333),
        ("2018-01-01T05:01:00.000Z", "mongoose", 1, 737),
        ("2018-01-01T06:01:00.000Z", "snake", 1, 1234),
        ("2018-01-01T07:01:00.000Z", "octopus", 1, 115),
        ("2018-01-01T09:01:00.000Z", "falcon", 1, 1241)))


# ------------------------------------------------------------------------------------------ nested-columns.md

NESTED_SCHEMA = {
    "granularitySpec": {"segmentGranularity": "day", "queryGranularity": "none", "rollup": False},
    "dataSource": "nested_data_example",
    "timestampSpec": {"column": "time", "format": "auto"},
    "dimensionsSpec": {"dimensions": ["product", "department", {"type": "json", "name": "shipTo"},
                                      {"type": "json", "name": "details"}]},
    "transformSpec": {},
}
NESTED_ANSWERS = ("nested-select-star.json", "nested-json-value.json")
NESTED_TRANSFORM_SCHEMA = {  # nested-columns.md, "Transform data during batch ingestion", as it is
    "granularitySpec": {"segmentGranularity": "day", "queryGranularity": "none", "rollup": False},
    "dataSource": "nested_data_transform_example",
    "timestampSpec": {"column": "time", "format": "auto"},
    "dimensionsSpec": {"dimensions": ["firstName", "lastName", {"type": "json", "name": "address"},
                                      {"type": "json", "name": "productDetails"}]},
    "transformSpec": {"transforms": [
        {"type": "expression", "name": "firstName", "expression": "json_value(shipTo, '$.firstName')"},
        {"type": "expression", "name": "lastName", "expression": "json_value(shipTo, '$.lastName')"},
        {"type": "expression", "name": "address", "expression": "json_query(shipTo, '$.address')"},
        {"type": "expression", "name": "productDetails",
         "expression": "json_object('product', product, 'details', details, 'department', department)"}]},
}


def test_nested_columns(docs, capsys):
    """`json` columns hold JSON text (a string column, read with DuckDB's JSON functions), keys in sorted order:
    compared as JSON values, as the order of an object's keys is not part of its value."""
    docs.run(docs.spec(produce(docs, "nested-example-data.json"), NESTED_SCHEMA), "nested-1")

    def parsed(row: dict) -> dict:
        return {k: json.loads(v) if k in ("details", "shipTo") else v for k, v in row.items()}

    # the answers the page prints: Druid's JSON result format (a header of names, of native types, of SQL types)
    select_star, select_values = (json.loads((DOCS / name).read_text()) for name in NESTED_ANSWERS)
    got = docs.query(capsys, "SELECT * FROM nested_data_example")
    assert rows([parsed(r) for r in got]) == rows([parsed(r) for r in table(*select_star[:1], *select_star[3:])])
    assert got[0]["details"] == select_star[3][2]  # the text itself, where key order agrees
    extracted = docs.query(capsys, "SELECT product, department, "  # as the page writes it, in Druid SQL
                                   "JSON_VALUE(shipTo, '$.address.country') as country, "
                                   "JSON_VALUE(shipTo, '$.phoneNumbers[0].number') as primaryPhone, "
                                   "JSON_VALUE(details, '$.price') as price FROM nested_data_example")
    assert rows(extracted) == rows(table(*select_values[:1], *select_values[3:]))
    grouped = docs.query(capsys, "SELECT product, JSON_VALUE(shipTo, '$.address.country'), "  # as printed
                                 "SUM(JSON_VALUE(details, '$.price' RETURNING BIGINT)) FROM nested_data_example "
                                 "WHERE JSON_VALUE(shipTo, '$.address.country') in ('BL', 'CW') GROUP BY 1,2 "
                                 "ORDER BY 3 DESC")
    assert grouped == [{"product": "Bike", "EXPR$1": "BL", "EXPR$2": 542},  # Druid's names of unnamed expressions
                       {"product": "Mouse", "EXPR$1": "CW", "EXPR$2": 90}]

    # "Transform data during batch ingestion": the page prints no rows for it, so its answer is read from the
    # rows it prints for the same records (SELECT * above): each transform's value out of shipTo and details
    docs.run(docs.spec(produce(docs, "nested-example-data.json"), NESTED_TRANSFORM_SCHEMA), "nested-transform-1")
    got = docs.query(capsys, "SELECT firstName, lastName, address, productDetails FROM nested_data_transform_example")
    expected = []
    for row in table(*select_star[:1], *select_star[3:]):
        ship_to, details = json.loads(row["shipTo"]), json.loads(row["details"])
        expected.append({"firstName": ship_to["firstName"], "lastName": ship_to["lastName"],
                         "address": ship_to["address"], "productDetails": {
                             "product": row["product"], "details": details, "department": row["department"]}})
    assert rows([{**r, "address": json.loads(r["address"]), "productDetails": json.loads(r["productDetails"])}
                 for r in got]) == rows(expected)


# ------------------------------------------------------------------------------------------ data-formats.md, kafka

def test_kafka_input_format_example(docs, capsys):
    """The `kafka` input format's documented message and supervisor spec. Two fixes the printed row needs: the
    spec's `"dimensionsSpec": "dimensionsSpec": {` is a typo for one key, and its timestampSpec `posix` cannot
    read the example's ISO time (Druid would count the record unparseable and print no row): `auto` here. The
    topic is the test's own (the doc's `wiki-edits` would collide on a shared broker)."""
    topic = docs.broker.create_topic(partitions=1)
    payload = (b'{"channel":"#sv.wikipedia","timestamp":"2016-06-27T00:00:11.080Z","page":"Salo Toraut","delta":31,'
               b'"namespace":"Main"}')
    docs.broker.produce(topic, [payload], key=b"wiki-edit", headers=[("env", b"development"), ("zone", b"z1")],
                        timestamp_ms=1680795276351)
    schema = {"dataSource": "wikiticker", "timestampSpec": {"column": "timestamp", "format": "auto"},
              "dimensionsSpec": {"useSchemaDiscovery": True, "includeAllDimensions": True},
              "granularitySpec": {"queryGranularity": "none", "rollup": False, "segmentGranularity": "day"}}
    input_format = {"type": "kafka", "valueFormat": {"type": "json"}, "headerFormat": {"type": "string"},
                    "keyFormat": {"type": "tsv", "findColumnsFromHeader": False, "columns": ["x"]}}
    docs.run(docs.spec(topic, schema, input_format), "kafka-1")
    got = docs.query(capsys, 'SELECT "kafka.header.env", "kafka.key", "kafka.timestamp", "kafka.topic" '
                             'FROM "wikiticker"')
    assert got == [{"kafka.header.env": "development", "kafka.key": "wiki-edit", "kafka.timestamp": 1680795276351,
                    "kafka.topic": topic}]
