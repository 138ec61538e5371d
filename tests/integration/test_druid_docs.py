"""Druid's answers as the oracle: every example of Druid's documentation that prints the rows an ingestion spec
gives, fed the same records (tests/data/druid_docs, from apache/druid) through the real broker, the run's task
code (plan, one Spark job per task group on the session's Spark Connect server, the exactly-once publish; the
DAG's tasks without Airflow around them) and answered by `ingest query`, compared with the rows the
documentation prints.

Each spec is the documented one as a Kafka supervisor spec: the doc's dataSchema as it is (the legacy `parser`
form written as `timestampSpec`/`dimensionsSpec` beside it, as Druid reads it), an ioConfig on the test's topic.
The SQL is the documented query in DuckDB's dialect. Where our rows differ from the printed ones for a reason
we chose, the test says why (README, "Druid's documented examples").
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from ingest_core.core.spec import DatasourceSpec, parse_spec
from ingest_core.executor import deep_storage
from ingest_core.provider.operators import compaction as compaction_task
from ingest_core.provider.operators.plan import job_arguments, stage_spec
from ingest_core.provider.operators.publish import results_of
from ingest_core.provider.operators.run import run_folder
from ingest_core.service.cli import main
from ingest_core.spark.connect import run_compaction, run_job
from ingest_core.store.metadata import MetadataStore
from ingest_core.store.publisher import Publisher
from ingest_core.supervisor.planning import Supervisor

pytestmark = pytest.mark.kafka

DOCS = Path(__file__).resolve().parents[1] / "data" / "druid_docs"


def records(name: str) -> list[bytes]:
    """An example's records, one per line, byte for byte as Druid ships them."""
    return [line.encode() for line in (DOCS / name).read_text().splitlines() if line.strip()]


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
        folder = run_folder(spec, run_id)
        plan_uri = deep_storage.join(folder, "plan.json")
        deep_storage.write_json(plan_uri, plan.to_json())
        for args in job_arguments(spec, plan, [*stage_spec(spec, folder), "--plan", plan_uri]):
            run_job(self.connect_url, args, timeout_s=300)
        results = results_of(spec, plan)
        assert len(results) == len([g for g in plan.groups if not g.is_empty]), "a task group failed"
        Publisher(self.store).publish(spec.datasource, run_id, results)

    def compact(self, spec: DatasourceSpec, run_id: str) -> dict:
        """The compaction DAG's tasks: search, the jobs, publish (Druid's reindexing of an interval)."""
        jobs = compaction_task.search_task(spec, run_id)
        for args in jobs:
            run_compaction(self.connect_url, args, timeout_s=300)
        return compaction_task.publish_task(spec, jobs)

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


def same(value: Any) -> Any:
    """A value as compared: doubles to 12 significant digits (a sum's last bit depends on its order)."""
    if isinstance(value, float):
        return float(f"{value:.12g}") if math.isfinite(value) else value
    return value


def rows(answer: list[dict], *, ordered: bool = False) -> list[dict]:
    """The answer's rows (`SELECT *` has no order in SQL: compared as a multiset unless the query orders)."""
    out = [{k: same(v) for k, v in r.items()} for r in answer]
    return out if ordered else sorted(out, key=lambda r: json.dumps(r, sort_keys=True))


# ------------------------------------------------------------------------------------------ tutorial-rollup.md

ROLLUP_SCHEMA = {
    "dataSource": "rollup-tutorial",
    "dimensionsSpec": {"dimensions": ["srcIP", "dstIP"]},
    "timestampSpec": {"column": "timestamp", "format": "iso"},
    "metricsSpec": [{"type": "count", "name": "count"},
                    {"type": "longSum", "name": "packets", "fieldName": "packets"},
                    {"type": "longSum", "name": "bytes", "fieldName": "bytes"}],
    "granularitySpec": {"type": "uniform", "segmentGranularity": "week", "queryGranularity": "minute",
                        "intervals": ["2018-01-01/2018-01-03"], "rollup": True},
}
ROLLUP_ROWS = [  # dsql> select * from "rollup-tutorial";
    {"__time": "2018-01-01T01:01:00.000Z", "bytes": 35937, "count": 3, "dstIP": "2.2.2.2", "packets": 286, "srcIP": "1.1.1.1"},
    {"__time": "2018-01-01T01:02:00.000Z", "bytes": 366260, "count": 2, "dstIP": "2.2.2.2", "packets": 415, "srcIP": "1.1.1.1"},
    {"__time": "2018-01-01T01:03:00.000Z", "bytes": 10204, "count": 1, "dstIP": "2.2.2.2", "packets": 49, "srcIP": "1.1.1.1"},
    {"__time": "2018-01-02T21:33:00.000Z", "bytes": 100288, "count": 2, "dstIP": "8.8.8.8", "packets": 161, "srcIP": "7.7.7.7"},
    {"__time": "2018-01-02T21:35:00.000Z", "bytes": 2818, "count": 1, "dstIP": "8.8.8.8", "packets": 12, "srcIP": "7.7.7.7"},
]


def test_rollup_tutorial(docs, capsys):
    docs.run(docs.spec(produce(docs, "rollup-data.json"), ROLLUP_SCHEMA), "rollup-1")
    assert rows(docs.query(capsys, 'select * from "rollup-tutorial"')) == rows(ROLLUP_ROWS)


# ------------------------------------------------------------------------------------------ tutorial-transform-spec.md

TRANSFORM_SCHEMA = {
    "dataSource": "transform-tutorial",
    "timestampSpec": {"column": "timestamp", "format": "iso"},
    "dimensionsSpec": {"dimensions": ["animal", {"name": "location", "type": "long"}]},
    "metricsSpec": [{"type": "count", "name": "count"},
                    {"type": "longSum", "name": "number", "fieldName": "number"},
                    {"type": "longSum", "name": "triple-number", "fieldName": "triple-number"}],
    "granularitySpec": {"type": "uniform", "segmentGranularity": "week", "queryGranularity": "minute",
                        "intervals": ["2018-01-01/2018-01-03"], "rollup": True},
    "transformSpec": {
        "transforms": [{"type": "expression", "name": "animal", "expression": "concat('super-', animal)"},
                       {"type": "expression", "name": "triple-number", "expression": "number * 3"}],
        "filter": {"type": "or", "fields": [
            {"type": "selector", "dimension": "animal", "value": "super-mongoose"},
            {"type": "selector", "dimension": "triple-number", "value": "300"},
            {"type": "selector", "dimension": "location", "value": "3"}]}},
}
TRANSFORM_ROWS = [  # dsql> select * from "transform-tutorial";
    {"__time": "2018-01-01T05:01:00.000Z", "animal": "super-mongoose", "count": 1, "location": 2, "number": 200, "triple-number": 600},
    {"__time": "2018-01-01T06:01:00.000Z", "animal": "super-snake", "count": 1, "location": 3, "number": 300, "triple-number": 900},
    {"__time": "2018-01-01T07:01:00.000Z", "animal": "super-octopus", "count": 1, "location": 1, "number": 100, "triple-number": 300},
]


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
INGESTION_ROWS = [  # dsql> select * from "ingestion-tutorial";
    {"__time": "2018-01-01T01:01:00.000Z", "bytes": 6000, "cost": 4.9, "count": 3, "dstIP": "2.2.2.2", "dstPort": 3000, "packets": 60, "protocol": "6", "srcIP": "1.1.1.1", "srcPort": 2000},
    {"__time": "2018-01-01T01:02:00.000Z", "bytes": 9000, "cost": 18.1, "count": 2, "dstIP": "2.2.2.2", "dstPort": 7000, "packets": 90, "protocol": "6", "srcIP": "1.1.1.1", "srcPort": 5000},
    {"__time": "2018-01-01T01:03:00.000Z", "bytes": 6000, "cost": 4.3, "count": 1, "dstIP": "2.2.2.2", "dstPort": 7000, "packets": 60, "protocol": "6", "srcIP": "1.1.1.1", "srcPort": 5000},
    {"__time": "2018-01-01T02:33:00.000Z", "bytes": 30000, "cost": 56.9, "count": 2, "dstIP": "8.8.8.8", "dstPort": 5000, "packets": 300, "protocol": "17", "srcIP": "7.7.7.7", "srcPort": 4000},
    {"__time": "2018-01-01T02:35:00.000Z", "bytes": 30000, "cost": 46.3, "count": 1, "dstIP": "8.8.8.8", "dstPort": 5000, "packets": 300, "protocol": "17", "srcIP": "7.7.7.7", "srcPort": 4000},
]


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
    assert rows(docs.query(capsys, select)) == rows([
        {"__time": "2018-01-01T01:01:00.000Z", "animal": "lion", "count": 1, "number": 100},
        {"__time": "2018-01-01T03:01:00.000Z", "animal": "aardvark", "count": 1, "number": 9999},
        {"__time": "2018-01-01T04:01:00.000Z", "animal": "bear", "count": 1, "number": 111}])

    # updates-data3.json names its time `__time` (the reindex read it beside the datasource's own rows)
    docs.broker.produce(topic, records("updates-data3.json"))
    reindex = {**UPDATES_SCHEMA, "timestampSpec": {"column": "__time", "format": "iso"}}
    docs.run(docs.spec(topic, reindex, compaction={"skipOffsetFromLatest": "PT0S"}), "updates-2")
    spec = docs.spec(topic, UPDATES_SCHEMA, compaction={"skipOffsetFromLatest": "PT0S"})
    assert docs.compact(spec, "compact-1")["compacted"]
    combined = [  # "Note that roll-up occurred for the "lion" row"
        {"__time": "2018-01-01T01:01:00.000Z", "animal": "lion", "count": 2, "number": 400},
        {"__time": "2018-01-01T03:01:00.000Z", "animal": "aardvark", "count": 1, "number": 9999},
        {"__time": "2018-01-01T04:01:00.000Z", "animal": "bear", "count": 1, "number": 111},
        {"__time": "2018-01-01T05:01:00.000Z", "animal": "mongoose", "count": 1, "number": 737},
        {"__time": "2018-01-01T06:01:00.000Z", "animal": "snake", "count": 1, "number": 1234},
        {"__time": "2018-01-01T07:01:00.000Z", "animal": "octopus", "count": 1, "number": 115}]
    assert rows(docs.query(capsys, select)) == rows(combined)

    # the append: its bear row stays apart from the bear row before it (another segment), until query time
    docs.broker.produce(topic, records("updates-data4.json"))
    docs.run(spec, "updates-3")
    assert rows(docs.query(capsys, select)) == rows(combined + [
        {"__time": "2018-01-01T04:01:00.000Z", "animal": "bear", "count": 1, "number": 222},
        {"__time": "2018-01-01T09:01:00.000Z", "animal": "falcon", "count": 1, "number": 1241}])
    grouped = docs.query(capsys, 'select __time, animal, SUM("count"), SUM("number") from "updates-tutorial" '
                                 'group by __time, animal')
    assert rows([dict(zip(("__time", "animal", "EXPR$2", "EXPR$3"), r.values())) for r in grouped]) == rows([
        {"__time": t, "animal": a, "EXPR$2": c, "EXPR$3": n} for t, a, c, n in [
            ("2018-01-01T01:01:00.000Z", "lion", 2, 400), ("2018-01-01T03:01:00.000Z", "aardvark", 1, 9999),
            ("2018-01-01T04:01:00.000Z", "bear", 2, 333), ("2018-01-01T05:01:00.000Z", "mongoose", 1, 737),
            ("2018-01-01T06:01:00.000Z", "snake", 1, 1234), ("2018-01-01T07:01:00.000Z", "octopus", 1, 115),
            ("2018-01-01T09:01:00.000Z", "falcon", 1, 1241)]])


# ------------------------------------------------------------------------------------------ nested-columns.md

NESTED_SCHEMA = {
    "granularitySpec": {"segmentGranularity": "day", "queryGranularity": "none", "rollup": False},
    "dataSource": "nested_data_example",
    "timestampSpec": {"column": "time", "format": "auto"},
    "dimensionsSpec": {"dimensions": ["product", "department", {"type": "json", "name": "shipTo"},
                                      {"type": "json", "name": "details"}]},
    "transformSpec": {},
}


def test_nested_columns(docs, capsys):
    """`json` columns hold JSON text (a string column, read with DuckDB's JSON functions), keys in sorted order:
    compared as JSON values, as the order of an object's keys is not part of its value."""
    docs.run(docs.spec(produce(docs, "nested-example-data.json"), NESTED_SCHEMA), "nested-1")
    printed = [  # SELECT * FROM nested_data_example (its JSON answer, shipTo and details as JSON text)
        ["2022-06-13T07:52:29.000Z", "Sports", "{\"color\":\"sky blue\",\"price\":542.0}", "Bike", "{\"firstName\":\"Russ\",\"lastName\":\"Cole\",\"address\":{\"street\":\"77173 Rusty Station\",\"city\":\"South Yeseniabury\",\"state\":\"WA\",\"country\":\"BL\",\"postalCode\":\"01893\"},\"phoneNumbers\":[{\"type\":\"primary\",\"number\":\"891-374-6188 x74568\"},{\"type\":\"secondary\",\"number\":\"1-248-998-4426 x33037\"}]}"],
        ["2022-06-13T10:10:35.000Z", "Sports", "{\"color\":\"ivory\",\"price\":955.0}", "Bike", "{\"firstName\":\"Henry\",\"lastName\":\"Wuckert\",\"address\":{\"street\":\"5643 Jan Walk\",\"city\":\"Lake Bridget\",\"state\":\"HI\",\"country\":\"ME\",\"postalCode\":\"70204-2939\"},\"phoneNumbers\":[{\"type\":\"primary\",\"number\":\"593.475.0449 x86733\"},{\"type\":\"secondary\",\"number\":\"638-372-1210\"}]}"],
        ["2022-06-13T13:57:38.000Z", "Grocery", "{\"price\":8.0}", "Sausages", "{\"firstName\":\"Forrest\",\"lastName\":\"Brekke\",\"address\":{\"street\":\"41548 Collier Divide\",\"city\":\"Wintheiserborough\",\"state\":\"WA\",\"country\":\"AD\",\"postalCode\":\"27577-6784\"},\"phoneNumbers\":[{\"type\":\"primary\",\"number\":\"(904) 890-0696 x581\"},{\"type\":\"secondary\",\"number\":\"676.895.6759\"}]}"],
        ["2022-06-13T21:37:06.000Z", "Computers", "{\"color\":\"olive\",\"price\":90.0}", "Mouse", "{\"firstName\":\"Rickey\",\"lastName\":\"Rempel\",\"address\":{\"street\":\"6232 Green Glens\",\"city\":\"New Fermin\",\"state\":\"HI\",\"country\":\"CW\",\"postalCode\":\"98912-1195\"},\"phoneNumbers\":[{\"type\":\"primary\",\"number\":\"(689) 766-4272 x60778\"},{\"type\":\"secondary\",\"number\":\"375.662.4737 x24707\"}]}"],
        ["2022-06-14T10:32:08.000Z", "Computers", "{\"color\":\"plum\",\"price\":40.0}", "Keyboard", "{\"firstName\":\"Sandra\",\"lastName\":\"Beatty\",\"address\":{\"street\":\"293 Grant Well\",\"city\":\"Loischester\",\"state\":\"FL\",\"country\":\"TV\",\"postalCode\":\"88845-0066\"},\"phoneNumbers\":[{\"type\":\"primary\",\"number\":\"1-788-771-7028 x8627\"},{\"type\":\"secondary\",\"number\":\"1-460-496-4884 x887\"}]}"],
    ]
    columns = ["__time", "department", "details", "product", "shipTo"]

    def parsed(row: dict) -> dict:
        return {k: json.loads(v) if k in ("details", "shipTo") else v for k, v in row.items()}

    got = docs.query(capsys, "SELECT * FROM nested_data_example")
    assert rows([parsed(r) for r in got]) == rows([parsed(dict(zip(columns, r))) for r in printed])
    assert got[0]["details"] == printed[0][2]  # the text itself where key order agrees
    extracted = docs.query(capsys, "SELECT product, department, "  # JSON_VALUE(x, path) is json_extract_string
                                   "json_extract_string(shipTo, '$.address.country') as country, "
                                   "json_extract_string(shipTo, '$.phoneNumbers[0].number') as primaryPhone, "
                                   "json_extract_string(details, '$.price') as price FROM nested_data_example")
    assert rows(extracted) == rows([dict(zip(["product", "department", "country", "primaryPhone", "price"], r)) for r in [
        ["Bike", "Sports", "BL", "891-374-6188 x74568", "542.0"], ["Bike", "Sports", "ME", "593.475.0449 x86733", "955.0"],
        ["Sausages", "Grocery", "AD", "(904) 890-0696 x581", "8.0"], ["Mouse", "Computers", "CW", "(689) 766-4272 x60778", "90.0"],
        ["Keyboard", "Computers", "TV", "1-788-771-7028 x8627", "40.0"]]])


# ------------------------------------------------------------------------------------------ data-formats.md, kafka

def test_kafka_input_format_example(docs, capsys):
    """The `kafka` input format's documented message and supervisor spec. Two fixes the printed row needs: the
    spec's `"dimensionsSpec": "dimensionsSpec": {` is a typo for one key, and its timestampSpec `posix` cannot
    read the example's ISO time (Druid would count the record unparseable and print no row): `auto` here. The
    topic is the test's own (the doc's `wiki-edits` would collide on a shared broker)."""
    topic = docs.broker.create_topic(partitions=1)
    payload = b'{"channel":"#sv.wikipedia","timestamp":"2016-06-27T00:00:11.080Z","page":"Salo Toraut","delta":31,"namespace":"Main"}'
    docs.broker.produce(topic, [payload], key=b"wiki-edit", headers=[("env", b"development"), ("zone", b"z1")],
                        timestamp_ms=1680795276351)
    schema = {"dataSource": "wikiticker", "timestampSpec": {"column": "timestamp", "format": "auto"},
              "dimensionsSpec": {"useSchemaDiscovery": True, "includeAllDimensions": True},
              "granularitySpec": {"queryGranularity": "none", "rollup": False, "segmentGranularity": "day"}}
    input_format = {"type": "kafka", "valueFormat": {"type": "json"}, "headerFormat": {"type": "string"},
                    "keyFormat": {"type": "tsv", "findColumnsFromHeader": False, "columns": ["x"]}}
    docs.run(docs.spec(topic, schema, input_format), "kafka-1")
    got = docs.query(capsys, 'SELECT "kafka.header.env", "kafka.key", "kafka.timestamp", "kafka.topic" FROM "wikiticker"')
    assert got == [{"kafka.header.env": "development", "kafka.key": "wiki-edit", "kafka.timestamp": 1680795276351,
                    "kafka.topic": topic}]
