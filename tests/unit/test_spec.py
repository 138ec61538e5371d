import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ingest_core.core import secrets as credentials
from ingest_core.core.errors import SpecError
from ingest_core.core.spec import load_spec, parse_spec, parse_spec_text
from ingest_core.kafka.config import KafkaClientConfig

DATA = Path(__file__).parents[1] / "data"


def minimal(**io):
    return {
        "type": "kafka",
        "spec": {
            "dataSchema": {"dataSource": "wiki", "timestampSpec": {"column": "ts"}},
            "ioConfig": {"topic": "edits", "inputFormat": {"type": "json"},
                         "consumerProperties": {"bootstrap.servers": "localhost:9092"}, **io},
        },
    }


def problems(raw, source="spec.yaml"):
    with pytest.raises(SpecError) as info:
        parse_spec(raw, source)
    return info.value


def test_seed_001_example_loads_verbatim_with_druid_defaults():
    spec = load_spec(DATA / "seed001_supervisor.json")
    assert spec.datasource == "metrics-kafka"
    assert spec.io_config.topic == "metrics"
    assert spec.io_config.task_count == 1 and spec.io_config.replicas == 1
    assert str(spec.io_config.task_duration) == "PT1H"
    assert str(spec.io_config.completion_timeout) == "PT30M"
    assert spec.io_config.use_earliest_offset is False
    assert spec.io_config.poll_timeout == 100
    assert spec.data_schema.granularity_spec.segment_granularity.name == "HOUR"
    assert spec.data_schema.granularity_spec.query_granularity.name == "NONE"
    assert spec.data_schema.granularity_spec.rollup is True
    assert [m.type for m in spec.data_schema.metrics_spec] == ["count", "doubleSum", "doubleMin", "doubleMax"]
    assert spec.data_schema.dimensions_spec.dimension_exclusions == ["timestamp", "value"]
    assert spec.tuning_config.max_rows_per_segment == 5_000_000
    assert spec.tuning_config.reset_offset_automatically is False
    assert spec.tuning_config.max_parse_exceptions is None  # unlimited
    assert spec.tuning_config.max_saved_parse_exceptions == 0
    assert spec.io_config.isolation_level == "read_committed"
    assert spec.warnings == ()


def test_current_nested_shape_and_yaml_give_the_same_spec():
    flat = load_spec(DATA / "seed001_supervisor.json")
    nested = load_spec(DATA / "druid_docs_nested.json")
    as_yaml = parse_spec_text(yaml.safe_dump(json.loads((DATA / "druid_docs_nested.json").read_text())))
    assert flat.to_raw() == nested.to_raw() == as_yaml.to_raw()
    # the normalized form loads back to the same spec
    assert parse_spec(nested.to_raw()).to_raw() == nested.to_raw()


def test_unknown_key_names_file_path_and_suggestion(tmp_path):
    raw = minimal(taskCout=2)
    path = tmp_path / "wiki.yaml"
    path.write_text(yaml.safe_dump(raw))
    # Druid ignores it: a warning with its path and suggestion; strict mode refuses it
    assert [str(w) for w in load_spec(path).warnings] == [
        "spec.ioConfig.taskCout: unknown field (did you mean 'taskCount'?): ignored, as Druid ignores fields it "
        "does not know (`ingest validate --strict` refuses them)"]
    with pytest.raises(SpecError) as info:
        load_spec(path, strict=True)
    msg = str(info.value)
    assert str(path) in msg
    assert "spec.ioConfig.taskCout: unknown field (did you mean 'taskCount'?)" in msg


def test_flat_shape_paths_have_no_spec_prefix():
    raw = {"type": "kafka", **minimal()["spec"]}
    raw["dataSchema"]["granularitySpec"] = {"segmentGranularty": "HOUR"}
    with pytest.raises(SpecError) as info:
        parse_spec(raw, strict=True)
    assert "dataSchema.granularitySpec.segmentGranularty: unknown field (did you mean 'segmentGranularity'?)" in str(
        info.value)


def test_all_problems_are_reported_at_once():
    raw = minimal(taskCount=0, replicas="two", taskDuration="1 hour")
    raw["spec"]["dataSchema"]["metricsSpec"] = [{"type": "javascript", "name": "users", "fieldName": "user"}]
    err = problems(raw)
    paths = {p.path for p in err.problems}
    assert {"spec.ioConfig.taskCount", "spec.ioConfig.replicas", "spec.ioConfig.taskDuration",
            "spec.dataSchema.metricsSpec[0].type"} <= paths
    text = str(err)
    assert "must be at least 1, got 0" in text
    assert "'1 hour' is not an ISO-8601 period" in text
    assert "aggregator type 'javascript' is not supported" in text


def test_batch_meaningless_fields_load_with_warnings():
    raw = minimal(startDelay="PT10S")
    raw["spec"]["tuningConfig"] = {"type": "kafka", "workerThreads": 4, "chatRetries": 3, "httpTimeout": "PT20S",
                                   "maxBytesInMemory": 1000}
    spec = parse_spec(raw)
    warned = {w.path for w in spec.warnings}
    assert warned == {"spec.ioConfig.startDelay", "spec.tuningConfig.workerThreads", "spec.tuningConfig.chatRetries",
                      "spec.tuningConfig.httpTimeout", "spec.tuningConfig.maxBytesInMemory"}
    assert all("no effect in batch" in w.message for w in spec.warnings)
    assert spec.tuning_config.worker_threads == 4


@pytest.mark.parametrize("io,path,fragment", [
    ({"topicPattern": "edits-.*"}, "spec.ioConfig.topicPattern", "contradict"),
    ({"lateMessageRejectionPeriod": "PT1H", "lateMessageRejectionStartDateTime": "2016-01-01T11:00Z"},
     "spec.ioConfig.lateMessageRejectionPeriod", "contradict"),
    ({"completionTimeout": "-PT1M"}, "spec.ioConfig.completionTimeout", "positive"),
    ({"topicPattern": "("}, "spec.ioConfig.topicPattern", None),
    ({"consumerProperties": {"isolation.level": "serializable", "bootstrap.servers": "x:1"}},
     "spec.ioConfig.consumerProperties.isolation.level", "read_committed"),
    ({"consumerProperties": {"group.id": "g"}}, "spec.ioConfig.consumerProperties", "bootstrap.servers is required"),
    ({"inputFormat": {"type": "avro_ocf"}}, "spec.ioConfig.inputFormat.type", "not supported"),
    ({"inputFormat": {"type": "csv"}}, "spec.ioConfig.inputFormat.columns", "needs columns"),
    ({"inputFormat": {"type": "kafka"}}, "spec.ioConfig.inputFormat.valueFormat", "needs a valueFormat"),
])
def test_contradictions_and_bad_values(io, path, fragment):
    raw = minimal(**io)
    if "topicPattern" in io and io["topicPattern"] == "(":
        del raw["spec"]["ioConfig"]["topic"]
    err = problems(raw)
    hits = [p for p in err.problems if p.path == path]
    assert hits, str(err)
    if fragment:
        assert any(fragment in p.message for p in hits), str(err)


@pytest.mark.parametrize("name", ["", "has space", "../etc", "a/b", "-dash-first", "x" * 201, "trailing."])
def test_invalid_datasource_names(name):
    raw = minimal()
    raw["spec"]["dataSchema"]["dataSource"] = name
    err = problems(raw)
    assert any(p.path == "spec.dataSchema.dataSource" and "DAG id" in p.message for p in err.problems)


def test_granularities_and_aggregators():
    raw = minimal()
    raw["spec"]["dataSchema"]["granularitySpec"] = {"segmentGranularity": "fifteen_minute",
                                                    "queryGranularity": {"type": "period", "period": "PT2M"},
                                                    "rollup": False}
    raw["spec"]["dataSchema"]["metricsSpec"] = [{"type": t, "name": f"m{i}", "fieldName": "v"} for i, t in enumerate(
        ["longSum", "doubleSum", "floatSum", "longMin", "longMax", "doubleMin", "doubleMax", "floatMin", "floatMax",
         "longFirst", "longLast", "doubleFirst", "doubleLast"])] + [{"type": "count", "name": "n"}]
    spec = parse_spec(raw)
    g = spec.data_schema.granularity_spec
    assert g.segment_granularity.name == "FIFTEEN_MINUTE" and str(g.segment_granularity.period) == "PT15M"
    assert str(g.query_granularity.period) == "PT2M" and g.rollup is False
    raw["spec"]["dataSchema"]["granularitySpec"] = {"segmentGranularity": "HOURLY"}
    err = problems(raw)
    assert "did you mean 'HOUR'" in str(err)


@pytest.mark.parametrize("granularity, bucket", [
    ("MINUTE", "hour"), ("FIFTEEN_MINUTE", "hour"), ("HOUR", "hour"), ("SIX_HOUR", "day"), ("DAY", "day"),
    ("WEEK", None), ("MONTH", "month"), ("QUARTER", "year"), ("YEAR", "year"),
    ({"type": "period", "period": "PT90M"}, "day"), ({"type": "period", "period": "PT7H"}, None),
    ({"type": "period", "period": "P2D"}, None), ({"type": "period", "period": "P6M"}, "year"),
    ({"type": "period", "period": "P5M"}, None), ({"type": "period", "period": "P2Y"}, None),
])
def test_the_iceberg_time_partition_holds_whole_segments(granularity, bucket):
    raw = minimal()
    raw["spec"]["dataSchema"]["granularitySpec"] = {"segmentGranularity": granularity}
    assert parse_spec(raw).data_schema.granularity_spec.segment_granularity.calendar_bucket() == bucket


def test_the_iceberg_section():
    raw = minimal()
    assert parse_spec(raw).microbatch.iceberg_on is False
    raw["microbatch"] = {"iceberg": {}}
    on = parse_spec(raw).microbatch
    assert on.iceberg_on and (on.iceberg.namespace, on.iceberg.table) == ("ingest", None)
    raw["microbatch"] = {"iceberg": {"namespace": "a.b", "table": " ", "tabel": "x"}}
    err = str(problems(raw))
    assert "microbatch.iceberg.namespace: must be a non-empty name without '.'" in err
    assert "microbatch.iceberg.table: must be a non-empty name without '.'" in err
    assert "microbatch.iceberg.tabel: unknown field (did you mean 'table'?)" in err


def test_druid_field_types_are_typed():
    raw = minimal(useEarliestOffset=True, taskCount=3, earlyMessageRejectionPeriod="PT2H",
                  lateMessageRejectionStartDateTime="2016-01-01T11:00Z",
                  idleConfig={"enabled": True, "inactiveAfterMillis": 60000},
                  autoScalerConfig={"enableTaskAutoScaler": True, "taskCountMax": 6, "taskCountMin": 2})
    raw["spec"]["tuningConfig"] = {"type": "kafka", "reportParseExceptions": True, "maxSavedParseExceptions": 5,
                                   "maxParseExceptions": 100, "intermediateHandoffPeriod": "PT10M"}
    spec = parse_spec(raw)
    io = spec.io_config
    assert io.use_earliest_offset is True and io.task_count == 3
    assert io.early_message_rejection_period.to_timedelta().total_seconds() == 7200
    assert io.late_message_rejection_start_date_time.isoformat() == "2016-01-01T11:00:00+00:00"
    assert io.idle_config.enabled and io.idle_config.inactive_after_millis == 60000
    assert io.auto_scaler_config.task_count_max == 6
    assert any(w.path == "spec.ioConfig.autoScalerConfig" for w in spec.warnings)
    t = spec.tuning_config
    assert t.effective_max_parse_exceptions == 0 and t.effective_max_saved_parse_exceptions == 1


def test_duplicate_yaml_keys_are_errors():
    text = "type: kafka\ntype: kafka\n"
    with pytest.raises(SpecError, match="duplicate key 'type'"):
        parse_spec_text(text, "dup.yaml")


def test_microbatch_section():
    raw = minimal()
    raw["microbatch"] = {"schedule": "PT5M", "assignment": "balanced", "maxRecordsPerSplit": 1000,
                         "dataGate": {"minRecords": 100, "maxWait": "PT2M"},
                         "spark": {"master": "local[2]", "conf": {"spark.sql.shuffle.partitions": "4"}},
                         "deepStorage": {"uri": "file:///tmp/deep"}}
    spec = parse_spec(raw)
    assert spec.microbatch.assignment == "balanced"
    assert spec.microbatch.data_gate.min_records == 100
    assert spec.microbatch.spark.master == "local[2]"
    raw["microbatch"]["assignment"] = "balance"
    assert "did you mean 'balanced'" in str(problems(raw))


# ------------------------------------------------------------------------------------------------ secrets

SECRET = "s3cr3t-Pa55word!"


def test_secret_from_environment_resolves_only_in_client_config(monkeypatch):
    monkeypatch.setenv("TEST_SASL_PASSWORD", SECRET)
    raw = minimal(consumerProperties={
        "bootstrap.servers": "localhost:9092",
        "sasl.password": {"type": "environment", "variable": "TEST_SASL_PASSWORD"},
        "druid.dynamic.config.provider": {"type": "environment", "variables": {"ssl.key.password": "TEST_SASL_PASSWORD"}},
    })
    spec = parse_spec(raw)
    stored = json.dumps(spec.to_raw())
    assert SECRET not in stored and SECRET not in repr(spec)
    assert '"variable": "TEST_SASL_PASSWORD"' in stored
    conf = KafkaClientConfig.from_properties(spec.io_config.consumer_properties)
    assert conf.properties["sasl.password"] == SECRET
    assert conf.properties["ssl.key.password"] == SECRET
    assert SECRET not in conf.redact(f"auth failed for password {SECRET}")


def test_literal_secrets_are_redacted_when_stored():
    raw = minimal(consumerProperties={"bootstrap.servers": "localhost:9092", "sasl.password": SECRET,
                                      "sasl.jaas.config": f"PlainLoginModule required password='{SECRET}';"})
    spec = parse_spec(raw)
    stored = json.dumps(spec.to_raw())
    assert SECRET not in stored and credentials.REDACTED in stored


def test_secret_values_never_appear_in_errors(monkeypatch):
    monkeypatch.delenv("MISSING_VAR", raising=False)
    raw = minimal(taskCout=1, consumerProperties={"bootstrap.servers": "localhost:9092", "sasl.password": SECRET,
                                                  "ssl.key.password": {"type": "environment", "variable": "MISSING_VAR"},
                                                  "bad.secret": {"type": "vault", "path": SECRET},
                                                  "weird": [SECRET]})
    err = problems(raw)
    assert SECRET not in str(err)
    assert "unknown secret provider type 'vault'" in str(err)
    spec_raw = minimal(consumerProperties={"bootstrap.servers": "x:1",
                                           "ssl.key.password": {"type": "environment", "variable": "MISSING_VAR"}})
    spec = parse_spec(spec_raw)
    with pytest.raises(credentials.SecretUnavailableError, match="environment variable MISSING_VAR is not set"):
        KafkaClientConfig.from_properties(spec.io_config.consumer_properties)


def test_secret_from_airflow_connection(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_PROD", json.dumps({"conn_type": "kafka", "login": "svc", "password": SECRET,
                                                               "extra": {"keypass": "key-password"}}))
    raw = minimal(consumerProperties={
        "bootstrap.servers": "localhost:9092",
        "sasl.username": {"type": "airflowConnection", "connId": "kafka_prod", "field": "login"},
        "sasl.password": {"type": "airflowConnection", "connId": "kafka_prod", "field": "password"},
        "ssl.key.password": {"type": "airflowConnection", "connId": "kafka_prod", "field": "extra.keypass"},
    })
    spec = parse_spec(raw)
    assert SECRET not in json.dumps(spec.to_raw())
    conf = KafkaClientConfig.from_properties(spec.io_config.consumer_properties)
    assert conf.properties["sasl.password"] == SECRET
    assert conf.properties["sasl.username"] == "svc"
    assert conf.properties["ssl.key.password"] == "key-password"


# ------------------------------------------------------------------------------------------------ CLI

def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "ingest_core.service.cli", *args], capture_output=True, text=True, timeout=120)


def test_validate_cli(tmp_path):
    good = DATA / "seed001_supervisor.json"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(minimal(taskCout=2, consumerProperties={"bootstrap.servers": "x:1",
                                                                          "sasl.password": SECRET})))
    ok = run_cli("validate", str(good))
    assert ok.returncode == 0, ok.stderr
    assert "OK" in ok.stdout and "metrics-kafka" in ok.stdout
    res = run_cli("validate", "--strict", str(good), str(bad))
    assert res.returncode == 1
    assert f"{bad}" in res.stderr and "spec.ioConfig.taskCout" in res.stderr and "taskCount" in res.stderr
    assert SECRET not in res.stderr + res.stdout
    # without --strict the typo is pointed at as a warning and the file is OK, as Druid would take it
    lenient = run_cli("validate", str(good), str(bad))
    assert lenient.returncode == 0, lenient.stderr
    assert f"OK    {bad}" in lenient.stdout
    assert "warning: spec.ioConfig.taskCout: unknown field (did you mean 'taskCount'?)" in lenient.stdout
    assert SECRET not in lenient.stderr + lenient.stdout


def test_kafka_input_format_and_typed_dimensions_round_trip():
    raw = minimal(inputFormat={"type": "kafka", "valueFormat": {"type": "csv", "columns": ["a", "b"]},
                               "keyFormat": {"type": "tsv", "findColumnsFromHeader": False, "columns": ["x"]},
                               "headerColumnPrefix": "h."})
    raw["spec"]["dataSchema"]["dimensionsSpec"] = {"dimensions": ["a", {"type": "long", "name": "b"}]}
    spec = parse_spec(raw)
    fmt = spec.io_config.input_format
    assert fmt.value_format.columns == ["a", "b"] and fmt.key_format.effective_delimiter == "\t"
    assert fmt.header_column_prefix == "h." and fmt.key_column_name == "kafka.key"  # Druid's default names
    assert [(d.name, d.type) for d in spec.data_schema.dimensions_spec.dimensions] == [("a", "string"), ("b", "long")]
    assert parse_spec(spec.to_raw()).to_raw() == spec.to_raw()
    raw["spec"]["dataSchema"]["dimensionsSpec"] = {"dimensions": [{"type": "lng", "name": "b"}]}
    # Druid reads a type it does not know as a string dimension: so here, with a word (strict: refused)
    lenient = parse_spec(raw)
    assert lenient.data_schema.dimensions_spec.dimensions[0].type == "string"
    assert "did you mean 'long'" in str(lenient.warnings[0])
    with pytest.raises(SpecError, match="did you mean 'long'"):
        parse_spec(raw, strict=True)


def test_the_redaction_marker_is_never_sent_as_a_secret():
    # a redacted copy (a registered spec, a staged one) cannot stand in for the spec with the literal secret
    spec = parse_spec(minimal(consumerProperties={"bootstrap.servers": "localhost:9092", "sasl.password": SECRET}))
    redacted = parse_spec(spec.to_raw())
    with pytest.raises(credentials.SecretUnavailableError, match="consumerProperties.sasl.password is redacted"):
        KafkaClientConfig.from_properties(redacted.io_config.consumer_properties)
