"""Lenient where Druid is lenient, and more helpful: a field Druid ignores is a warning naming it (an error with
`strict`), what Druid writes when it exports a spec loads without a word, `null` is a field left out, enum-like
values read in any case, and `.json` files are JSON.

tests/data/druid_exported_supervisor.json is the shape of Druid's `GET /druid/indexer/v1/supervisor/<id>` for
the quickstart's wikipedia supervisor (Druid 30/31: the properties of KafkaSupervisorSpec, KafkaSupervisorIOConfig,
SeekableStreamSupervisorIOConfig and KafkaSupervisorTuningConfig as Jackson writes them: Durations as `PT3600S`,
absent Optionals as null, `spec` plus top-level copies of its sections)."""

import copy
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml

from ingest_core.core.errors import SpecError
from ingest_core.core.settings import strict_specs
from ingest_core.core.spec import load_spec, parse_spec, parse_spec_text
from ingest_core.core.states import Event, after_nothing_to_read
from test_spec import minimal

DATA = Path(__file__).parents[1] / "data"
EXPORTED = DATA / "druid_exported_supervisor.json"


def warnings_of(raw) -> dict[str, str]:
    return {w.path: w.message for w in parse_spec(raw).warnings}


def errors_of(raw, strict=False) -> dict[str, str]:
    with pytest.raises(SpecError) as info:
        parse_spec(raw, strict=strict)
    return {p.path: p.message for p in info.value.problems}


# ------------------------------------------------------------------------------------------ Druid's export


def test_a_spec_exported_by_druid_loads_as_is_without_a_word():
    spec = load_spec(EXPORTED)
    assert spec.warnings == ()
    assert load_spec(EXPORTED, strict=True).warnings == ()  # export fields are known, not unknown
    io = spec.io_config
    assert (spec.datasource, io.topic, io.use_earliest_offset) == ("wikipedia", "wikipedia", True)
    assert io.task_duration.to_timedelta() == timedelta(hours=1)
    assert io.completion_timeout.to_timedelta() == timedelta(minutes=30)
    assert spec.tuning_config.max_parse_exceptions == 2**31 - 1  # Druid writes "unlimited" as Integer.MAX_VALUE
    dims = spec.data_schema.dimensions_spec.dimensions
    assert [(d.name, d.type, d.multi_value_handling) for d in dims[2:4]] == [
        ("user", "string", "sorted_array"), ("added", "long", "sorted_array")]
    assert spec.data_schema.granularity_spec.query_granularity.name == "NONE"
    assert spec.data_schema.granularity_spec.rollup is False


def test_the_exported_copies_beside_spec_are_ignored_as_druid_ignores_them():
    raw = json.loads(EXPORTED.read_text())
    raw["ioConfig"] = {**raw["ioConfig"], "topic": "other"}  # Druid reads spec.ioConfig only
    assert load_spec(EXPORTED).io_config.topic == parse_spec(raw).io_config.topic == "wikipedia"
    assert "differs from spec.ioConfig" in warnings_of(raw)["ioConfig"]
    nested = minimal()
    nested["tuningConfig"] = {"type": "kafka", "maxRowsPerSegment": 10}
    assert "move it inside spec" in warnings_of(nested)["tuningConfig"]
    assert parse_spec(nested).tuning_config.max_rows_per_segment == 5_000_000


def test_stream_and_use_earliest_sequence_number_are_the_export_copies_of_topic_and_use_earliest_offset():
    assert warnings_of(minimal(stream="edits", useEarliestSequenceNumber=False)) == {}
    assert warnings_of(minimal(stream="edits", useEarliestOffset=True, useEarliestSequenceNumber="true")) == {}
    pattern = minimal(topicPattern="edits-.*", stream="edits-.*")
    del pattern["spec"]["ioConfig"]["topic"]
    assert warnings_of(pattern) == {}
    assert "but the topic is 'edits'" in errors_of(minimal(stream="other"))["spec.ioConfig.stream"]
    kinesis = minimal(stream="edits")
    del kinesis["spec"]["ioConfig"]["topic"]
    assert "Kafka uses 'topic'" in errors_of(kinesis)["spec.ioConfig.stream"]
    alone = parse_spec(minimal(useEarliestSequenceNumber=True))
    assert alone.io_config.use_earliest_offset is False  # Druid's Kafka ioConfig ignores it too
    assert "rename it" in {w.path: w.message for w in alone.warnings}["spec.ioConfig.useEarliestSequenceNumber"]
    assert "useEarliestOffset (False) is the field" in warnings_of(minimal(
        useEarliestOffset=False, useEarliestSequenceNumber=True))["spec.ioConfig.useEarliestSequenceNumber"]


def test_fields_druid_accepts_and_ignores_load_silently():
    raw = minimal(lagAggregator={"type": "sum"}, multiTopic=False, appendToExisting=True, taskType="index_kafka",
                  autoScalerConfig={"enableTaskAutoScaler": False, "triggerScaleOutThresholdFrequency": 0.3,
                                    "triggerScaleInThresholdFrequency": 0.9})
    raw["id"], raw["context"] = "wiki-supervisor", {"taskLockType": "APPEND"}
    raw["spec"]["tuningConfig"] = {"type": "kafka", "appendableIndexSpec": {"type": "onheap"},
                                   "skipSequenceNumberAvailabilityCheck": True,
                                   "repartitionTransitionDuration": "PT2M", "workerCategory": "c1",
                                   "indexSpec": {"bitmap": {"type": "concise"}}}
    raw["spec"]["dataSchema"]["dimensionsSpec"] = {"dimensions": [
        {"type": "string", "name": "page", "flattenSpec": {"fields": []}}]}
    assert warnings_of(raw) == {}
    # a batch no-op at its Druid default (what an export writes) is no news; set to something else, it is
    assert warnings_of(minimal(startDelay="PT5S", period="PT30S")) == {}
    assert set(warnings_of(minimal(startDelay="PT1M"))) == {"spec.ioConfig.startDelay"}


def test_header_label_prefix_is_the_older_name_of_header_column_prefix():
    fmt = {"type": "kafka", "valueFormat": {"type": "json"}, "headerLabelPrefix": "h."}
    spec = parse_spec(minimal(inputFormat=fmt))
    assert spec.warnings == () and spec.io_config.input_format.header_column_prefix == "h."
    both = parse_spec(minimal(inputFormat={**fmt, "headerColumnPrefix": "hc."}))
    assert both.io_config.input_format.header_column_prefix == "hc."
    assert "headerColumnPrefix" in {w.path: w.message for w in both.warnings}["spec.ioConfig.inputFormat.headerLabelPrefix"]


# ------------------------------------------------------------------------------------------ unknown fields


def _with_typos():
    raw = minimal(taskCout=2, inputFormat={"type": "json", "flattenSpek": {}, "columns": ["a"]})
    raw["spec"]["dataSchema"]["granularitySpec"] = {"segmentGranularty": "HOUR",
                                                    "queryGranularity": {"type": "period", "period": "PT1H",
                                                                         "timezone": "UTC"}}
    raw["spec"]["dataSchema"]["dimensionsSpec"] = {"dimensions": [{"name": "page", "tpye": "long"}]}
    raw["spec"]["tuningConfig"] = {"type": "kafka", "maxRowsPerSegmnt": 10}
    raw["spec"]["ioConfigg"] = {}
    raw["suspend"] = True
    return raw


TYPOS = {
    "suspend": "did you mean 'suspended'?",
    "spec.ioConfigg": "did you mean 'ioConfig'?",
    "spec.ioConfig.taskCout": "did you mean 'taskCount'?",
    "spec.ioConfig.inputFormat.flattenSpek": "did you mean 'flattenSpec'?",
    "spec.ioConfig.inputFormat.columns": "unknown field for a json input format",
    "spec.dataSchema.granularitySpec.segmentGranularty": "did you mean 'segmentGranularity'?",
    "spec.dataSchema.granularitySpec.queryGranularity.timezone": "did you mean 'timeZone'?",
    "spec.dataSchema.dimensionsSpec.dimensions[0].tpye": "did you mean 'type'?",
    "spec.tuningConfig.maxRowsPerSegmnt": "did you mean 'maxRowsPerSegment'?",
}


def test_an_unknown_field_in_druids_sections_is_a_warning_with_its_path_and_a_suggestion():
    spec = parse_spec(_with_typos())
    got = {w.path: w.message for w in spec.warnings}
    assert set(got) == set(TYPOS)
    for path, hint in TYPOS.items():
        assert hint in got[path] and "ignored, as Druid ignores" in got[path], path
    assert spec.io_config.task_count == 1  # ignored, as Druid ignores it


def test_strict_mode_makes_every_unknown_field_an_error():
    got = errors_of(_with_typos(), strict=True)
    assert set(got) == set(TYPOS)
    assert got["spec.ioConfig.taskCout"] == "unknown field (did you mean 'taskCount'?)"


def test_this_systems_own_sections_stay_strict():
    raw = minimal()
    raw["microbatch"] = {"scheduel": "PT1M"}
    raw["compaction"] = {"skipOfset": "P1D"}
    got = errors_of(raw)
    assert got["microbatch.scheduel"] == "unknown field (did you mean 'schedule'?)"
    assert got["compaction.skipOfset"].startswith("unknown field")


def test_decoder_sections_are_druids_too():
    fmt = {"type": "avro_stream", "avroBytesDecoder": {"type": "schema_registry", "url": "http://r:8081",
                                                       "capacitty": 10}}
    assert "did you mean 'capacity'?" in warnings_of(minimal(inputFormat=fmt))[
        "spec.ioConfig.inputFormat.avroBytesDecoder.capacitty"]


def test_wrong_values_stay_errors_with_their_path():
    got = errors_of(minimal(taskCount="two", taskCout=1, replicas=0))
    assert set(got) == {"spec.ioConfig.taskCount", "spec.ioConfig.replicas"}  # the typo alone is a warning


def test_the_environment_switch_for_dag_parsing():
    assert not strict_specs({}) and not strict_specs({"INGEST_STRICT_SPECS": "false"})
    assert strict_specs({"INGEST_STRICT_SPECS": "true"}) and strict_specs({"INGEST_STRICT_SPECS": " 1 "})


# ------------------------------------------------------------------------------------------ null, case


def test_null_is_a_field_left_out():
    raw = minimal(inputFormat={"type": "json", "flattenSpec": None, "columns": None}, taskCount=None,
                  topicPattern=None, idleConfig=None)
    ds = raw["spec"]["dataSchema"]
    ds.update(granularitySpec={"queryGranularity": None, "segmentGranularity": "HOUR"}, transformSpec=None,
              metricsSpec=None, parser=None, dimensionsSpec={"dimensions": None})
    raw["spec"]["tuningConfig"] = None
    raw.update(suspended=None, context=None, microbatch=None)
    spec = parse_spec(raw)
    assert spec.warnings == ()
    assert spec.io_config.task_count == 1 and spec.suspended is False
    assert spec.data_schema.granularity_spec.query_granularity.name == "NONE"
    required = minimal(inputFormat=None)
    assert errors_of(required)["spec.ioConfig.inputFormat"] == "is null, but required"


def test_enum_like_values_read_in_any_case():
    raw = minimal()
    raw["spec"]["dataSchema"]["granularitySpec"] = {"segmentGranularity": "day", "queryGranularity": "minute"}
    raw["spec"]["dataSchema"]["dimensionsSpec"] = {"dimensions": [
        {"type": "string", "name": "tags", "multiValueHandling": "SORTED_SET"}, {"type": "LONG", "name": "n"}]}
    spec = parse_spec(raw)
    gran = spec.data_schema.granularity_spec
    assert (gran.segment_granularity.name, gran.query_granularity.name) == ("DAY", "MINUTE")
    dims = spec.data_schema.dimensions_spec.dimensions
    assert [(d.type, d.multi_value_handling) for d in dims] == [("string", "sorted_set"), ("long", "sorted_array")]
    # Druid would silently make 'LONG' a string dimension (its default type for an unknown name): say so
    assert "read as 'long'" in {w.path: w.message for w in spec.warnings}[
        "spec.dataSchema.dimensionsSpec.dimensions[1].type"]
    raw["spec"]["dataSchema"]["dimensionsSpec"]["dimensions"][0]["multiValueHandling"] = "sorted"
    assert "sorted_array" in errors_of(raw)["spec.dataSchema.dimensionsSpec.dimensions[0].multiValueHandling"]


def test_an_unknown_type_druid_reads_as_its_default_is_read_so_with_a_word():
    raw = minimal(inputFormat={"type": "json", "flattenSpec": {"fields": [
        {"type": "PATH", "name": "lang", "expr": "$.meta.lang"}, {"type": "Root", "name": "page"}]}})
    raw["spec"]["dataSchema"]["granularitySpec"] = {"type": "uniformm", "segmentGranularity": "HOUR"}
    spec = parse_spec(raw)
    assert [f.type for f in spec.io_config.input_format.flatten_spec.fields] == ["path", "root"]
    assert spec.data_schema.granularity_spec.type == "uniform"
    assert "read as 'uniform'" in warnings_of(raw)["spec.dataSchema.granularitySpec.type"]
    assert "did you mean 'uniform'?" in errors_of(raw, strict=True)["spec.dataSchema.granularitySpec.type"]


@pytest.mark.parametrize("query", ["ALL", "all", {"type": "all"}])
def test_query_granularity_all_puts_each_row_at_its_segments_start_as_druid_does(query):
    raw = minimal()
    raw["spec"]["dataSchema"]["granularitySpec"] = {"segmentGranularity": "HOUR", "queryGranularity": query}
    spec = parse_spec(raw)
    assert spec.warnings == ()
    assert spec.data_schema.granularity_spec.query_granularity.name == "HOUR"


def test_segment_granularity_all_is_refused_saying_why():
    raw = minimal()
    raw["spec"]["dataSchema"]["granularitySpec"] = {"segmentGranularity": "all"}
    message = errors_of(raw)["spec.dataSchema.granularitySpec.segmentGranularity"]
    assert "spanning all of time" in message and "YEAR" in message


# ------------------------------------------------------------------------------------------ JSON files


def test_a_json_file_indented_with_tabs_loads(tmp_path):
    path = tmp_path / "wiki.json"
    path.write_text(json.dumps(minimal(), indent="\t"))
    assert load_spec(path).datasource == "wiki"
    with pytest.raises(SpecError, match="not valid YAML"):  # YAML refuses tabs: why .json files are read as JSON
        parse_spec_text(path.read_text())


def test_a_duplicate_key_is_refused_in_json_as_in_yaml(tmp_path):
    text = json.dumps(minimal()).replace('"topic": "edits"', '"topic": "edits", "topic": "other"')
    path = tmp_path / "wiki.json"
    path.write_text(text)
    with pytest.raises(SpecError, match="duplicate key 'topic' in one object"):
        load_spec(path)
    with pytest.raises(SpecError, match="duplicate key 'topic'"):
        parse_spec_text(text)  # the YAML reader, which .yaml files get


def test_broken_json_names_line_and_column(tmp_path):
    path = tmp_path / "wiki.json"
    path.write_text('{\n  "type": "kafka",\n  "spec": {,}\n}\n')
    with pytest.raises(SpecError, match="not valid JSON: .* line 3 column"):
        load_spec(path)
    path.write_text("  \n")
    with pytest.raises(SpecError, match="the file is empty"):
        load_spec(path)


# ------------------------------------------------------------------------------------------ idleConfig

T0 = datetime(2026, 11, 26, 12, tzinfo=timezone.utc)
TEN_MIN = timedelta(minutes=10)


def test_idle_follows_druids_rule_when_idle_config_is_given():
    # enabled: IDLE only once nothing new came for longer than inactiveAfterMillis (Druid: idleTime > inactiveAfter)
    assert after_nothing_to_read(True, TEN_MIN, T0, T0 + TEN_MIN) is Event.NOTHING_NEW
    assert after_nothing_to_read(True, TEN_MIN, T0, T0 + TEN_MIN + timedelta(seconds=1)) is Event.PUBLISHED_NOTHING
    assert after_nothing_to_read(True, TEN_MIN, None, T0) is Event.NOTHING_NEW  # the first look starts the clock
    # disabled: never IDLE; without idleConfig this system's default, IDLE at once
    assert after_nothing_to_read(False, TEN_MIN, T0 - timedelta(days=9), T0) is Event.NOTHING_NEW
    assert after_nothing_to_read(None, timedelta(0), T0, T0) is Event.PUBLISHED_NOTHING


def test_idle_config_is_checked():
    spec = parse_spec(minimal(idleConfig={"enabled": True}))
    assert spec.io_config.idle_config.inactive_after_millis == 600_000  # Druid's cluster default
    assert "at least 1" in errors_of(minimal(idleConfig={"enabled": True, "inactiveAfterMillis": 0}))[
        "spec.ioConfig.idleConfig.inactiveAfterMillis"]


def test_a_copy_of_the_export_with_an_unknown_field_warns_only_about_that_field():
    raw = copy.deepcopy(json.loads(EXPORTED.read_text()))
    raw["spec"]["ioConfig"]["pollTimout"] = raw["ioConfig"]["pollTimout"] = 50
    assert list(warnings_of(raw)) == ["spec.ioConfig.pollTimout"]  # the copy beside spec is never read
    raw["ioConfig"]["pollTimout"] = 60
    assert list(warnings_of(raw)) == ["ioConfig", "spec.ioConfig.pollTimout"]
    assert yaml.safe_load(yaml.safe_dump(raw)) == raw  # the same spec as YAML loads the same way
    assert [w.path for w in parse_spec_text(yaml.safe_dump(raw)).warnings] == ["ioConfig", "spec.ioConfig.pollTimout"]


def test_validate_points_at_the_typo_and_fails_only_when_strict(tmp_path, monkeypatch, capsys):
    from ingest_core.service import cli

    path = tmp_path / "wiki.json"
    path.write_text(json.dumps(minimal(taskCout=2), indent="\t"))
    monkeypatch.delenv("INGEST_STRICT_SPECS", raising=False)
    assert cli.main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    assert "warning: spec.ioConfig.taskCout: unknown field (did you mean 'taskCount'?)" in out
    assert cli.main(["validate", "--strict", str(path)]) == 1
    assert "spec.ioConfig.taskCout: unknown field (did you mean 'taskCount'?)" in capsys.readouterr().err
    monkeypatch.setenv("INGEST_STRICT_SPECS", "true")  # what DAG parsing refuses, validate refuses too
    assert cli.main(["validate", str(path)]) == 1


def test_a_named_granularity_object_with_a_stray_field_is_still_read():
    raw = minimal()
    raw["spec"]["dataSchema"]["granularitySpec"] = {"queryGranularity": {"type": "none", "period": "PT1H"}}
    assert parse_spec(raw).data_schema.granularity_spec.query_granularity.name == "NONE"
    assert "unknown field for a granularity of type none" in warnings_of(raw)[
        "spec.dataSchema.granularitySpec.queryGranularity.period"]
