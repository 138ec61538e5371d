"""Validation that validates: what used to pass `ingest validate` and then fail on Airflow or Spark is
refused with its file, field path and what to write instead; a file that is not a spec is a SpecError, never
another exception; `.airflowignore` is read as Airflow reads it."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ingest_core.core.errors import SpecError
from ingest_core.core.ignore_file import unignored_files
from ingest_core.core.json_path import JsonPath, JsonPathError
from ingest_core.core.spec import find_spec_files, load_spec, parse_spec

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = yaml.safe_load((ROOT / "dags" / "datasources" / "wikipedia.yaml").read_text())


def example(**edits) -> dict:
    """The example spec with `edits` applied: {"spec.ioConfig.replicas": 2, ...} (dotted paths; a list index
    is a number)."""
    raw = json.loads(json.dumps(EXAMPLE))
    for dotted, value in edits.items():
        node, *keys = [raw, *dotted.split(".")]
        for key in keys[:-1]:
            node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
        node[keys[-1]] = value
    return raw


def refused(raw) -> dict[str, str]:
    with pytest.raises(SpecError) as info:
        parse_spec(raw, "specs/x.yaml")
    return {p.path: p.message for p in info.value.problems}


# ---------------------------------------------------------------------------------------------- fields

@pytest.mark.parametrize("cron, says", [
    ("61 * * * *", "out of range"),
    ("every ten minutes", "not a valid cron expression"),
    ("0 0 31 2 *", "never fires"),
    ("0 0 * * * *", "has 6 fields"),
    ("@once", "not a cron schedule"),
])
def test_an_invalid_cron_is_refused_with_what_to_write(cron, says):
    found = refused(example(**{"microbatch.schedule": cron}))
    assert says in found["microbatch.schedule"] and "'*/10 * * * *'" in found["microbatch.schedule"]


@pytest.mark.parametrize("cron", ["*/10 * * * *", "@hourly", "0 12 * * MON-FRI", "PT10M", "P1D"])
def test_valid_schedules_load(cron):
    assert parse_spec(example(**{"microbatch.schedule": cron})).microbatch.schedule == cron


def test_a_continuous_schedule_runs_one_run_at_a_time():
    micro = parse_spec(example(**{"microbatch.schedule": "@continuous"})).microbatch
    assert micro.continuous and micro.max_active_runs == 1
    # Airflow's ContinuousTimetable keeps one run active whatever max_active_runs says: refused, saying what to use
    found = refused(example(**{"microbatch.schedule": "@continuous", "microbatch.maxActiveRuns": 2}))
    assert "must be 1 with schedule '@continuous'" in found["microbatch.maxActiveRuns"]
    assert "'PT5S' with maxActiveRuns 2" in found["microbatch.maxActiveRuns"]
    # a misspelt one says what is meant; the compaction DAG's schedule has no continuous form
    assert "'@continuous' for runs back to back" in refused(
        example(**{"microbatch.schedule": "@continous"}))["microbatch.schedule"]
    assert "not a cron schedule" in refused(
        example(**{"compaction": {"schedule": "@continuous"}}))["compaction.schedule"]


def test_continuous_without_a_data_gate_loads_with_a_warning_that_says_why_and_what_to_set(tmp_path, capsys):
    """Runs back to back on an idle topic cost ~16,000 empty runs a day: a warning (a spec that loaded before
    still loads), at `ingest validate` and at DAG parse (the spec's warnings); with a gate, none."""
    from ingest_core.service.cli import main

    spec = parse_spec(example(**{"microbatch.schedule": "@continuous"}))
    (warning,) = [w for w in spec.warnings if w.path == "microbatch.schedule"]
    assert "16,000 empty runs a day" in warning.message and "5 task processes" in warning.message
    assert "dataGate: {minRecords: 1, maxWait: PT1M}" in warning.message
    gated = parse_spec(example(**{"microbatch.schedule": "@continuous",
                                  "microbatch.dataGate": {"minRecords": 1, "maxWait": "PT1M"}}))
    assert not [w for w in gated.warnings if w.path == "microbatch.schedule"]
    assert not [w for w in parse_spec(example()).warnings if w.path == "microbatch.schedule"]  # a period: none

    path = tmp_path / "continuous.yaml"
    path.write_text(yaml.safe_dump(example(**{"microbatch.schedule": "@continuous"})))
    assert main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    assert "warning: microbatch.schedule: '@continuous' without a dataGate" in out, out


def test_read_up_to_picks_where_a_scheduled_run_ends():
    def micro(**fields):
        return parse_spec(example(**{f"microbatch.{k}": v for k, v in fields.items()})).microbatch

    # a period's scheduled run reads its interval's slice unless told to read what is there when it plans
    assert not micro(schedule="PT5S").reads_to_latest("scheduled")
    latest = micro(schedule="PT5S", maxActiveRuns=2, readUpTo="latest")
    assert latest.reads_to_latest("scheduled") and not latest.reads_to_latest("backfill")
    assert not micro(schedule="PT5S", readUpTo="intervalEnd").reads_to_latest("scheduled")
    # a continuous run always reads to the latest offsets; it has no interval end to read to
    assert micro(schedule="@continuous").reads_to_latest("scheduled")
    assert "has no data interval of its own" in refused(example(**{
        "microbatch.schedule": "@continuous", "microbatch.readUpTo": "intervalEnd"}))["microbatch.readUpTo"]
    found = refused(example(**{"microbatch.readUpTo": "latests"}))["microbatch.readUpTo"]
    assert "must be one of intervalEnd, latest (did you mean 'latest'?)" in found


def test_dimension_names_are_checked():
    dims = ["page", "__time", "", "page", {"name": " ", "type": "long"}]
    found = refused(example(**{"spec.dataSchema.dimensionsSpec": {"dimensions": dims}}))
    at = "spec.dataSchema.dimensionsSpec.dimensions"
    assert "__time is the row timestamp" in found[f"{at}[1]"]
    assert "needs a name" in found[f"{at}[2]"] and "needs a name" in found[f"{at}[4]"]
    assert "listed twice" in found[f"{at}[3]"]


def test_transform_names_are_checked():
    transforms = [{"type": "expression", "name": "t", "expression": "added"},
                  {"type": "expression", "name": "t", "expression": "deleted"},
                  {"type": "expression", "name": "", "expression": "deleted"}]
    found = refused(example(**{"spec.dataSchema.transformSpec": {"transforms": transforms}}))
    at = "spec.dataSchema.transformSpec.transforms"
    assert "'t' is defined twice" in found[f"{at}[1].name"]
    assert "needs a name" in found[f"{at}[2].name"]


@pytest.mark.parametrize("field, value, says", [
    ("spec.ioConfig.replicas", 10**30, "does not fit a 64-bit integer"),
    ("spec.ioConfig.replicas", 50, "must be at most 10, got 50 (the range is 1 to 10)"),
    ("spec.ioConfig.taskCount", 100_000, "must be at most 1000"),
    ("spec.ioConfig.pollTimeout", 10**9, "must be at most 3600000"),
    ("spec.tuningConfig.maxRowsPerSegment", 2**40, "must be at most 2147483647"),
    ("spec.tuningConfig.maxRowsInMemory", 0, "must be at least 1"),
    ("spec.tuningConfig.maxSavedParseExceptions", 10**8, "must be at most 10000"),
    ("spec.tuningConfig.maxRecordsPerPoll", 10**12, "must be at most 10000000"),
    ("microbatch.maxActiveRuns", 10**6, "must be at most 100"),
    ("microbatch.spark.executorCores", 0, "must be at least 1"),
    ("microbatch.health.unhealthinessThreshold", 10**7, "must be at most 1000"),
])
def test_numbers_out_of_their_range_are_refused(field, value, says):
    found = refused(example(**{field: value}))
    assert says in found[field], found


@pytest.mark.parametrize("field, value, says", [
    ("microbatch.dataGate", {"minRecords": 1, "pokeInterval": "PT0S"}, "must be a positive period, got PT0S"),
    ("microbatch.dataGate", {"minRecords": 1, "maxWait": "-PT1M"}, "must be a non-negative period"),
    ("microbatch.retryDelay", "P1M", "no fixed length"),
    ("spec.ioConfig.completionTimeout", "P1M", "no fixed length"),
    ("microbatch.schedule", "PT0S", "must be a positive period"),
])
def test_periods_that_make_no_sense_are_refused(field, value, says):
    found = refused(example(**{field: value}))
    assert any(says in message and path.startswith(field) for path, message in found.items()), found


@pytest.mark.parametrize("expr, says", [
    ("$..page", "deep scan"),
    ("$.tags[*]", "wildcard '[*]'"),
    ("$.user.*", "wildcard '.*'"),
    ("$.tags[?(@.x == 1)]", "filter expressions"),
    ("$.tags[-1]", "negative indexes"),
    ("$.tags.length()", "functions such as length()"),
    ("user.name", "must start with '$'"),
])
def test_flatten_paths_the_parser_cannot_follow_are_refused(expr, says):
    fmt = {"type": "json", "flattenSpec": {"fields": [{"type": "path", "name": "f", "expr": expr}]}}
    found = refused(example(**{"spec.ioConfig.inputFormat": fmt}))
    assert says in found["spec.ioConfig.inputFormat.flattenSpec.fields[0].expr"]


def test_the_json_path_the_spec_validates_is_the_one_the_row_parser_follows():
    doc = {"a": {"b c": [10, {"d": "x"}], "it's": 1}}
    assert JsonPath.parse("$.a['b c'][1].d").get(doc) == "x"
    assert JsonPath.parse('$["a"]["b c"][0]').get(doc) == 10
    assert JsonPath.parse(r"$.a['it\'s']").get(doc) == 1  # escapes are undone
    assert JsonPath.parse("$.a.missing[3]").get(doc) is None and JsonPath.parse("$").get(doc) == doc
    with pytest.raises(JsonPathError):
        JsonPath.parse("$.a[")


def test_a_check_that_breaks_is_the_field_s_problem_not_a_crash():
    """A numeric bound filter with a bound that is no number used to raise ValueError out of load_spec."""
    bad = {"type": "bound", "dimension": "added", "lower": "abc", "ordering": "numeric"}
    found = refused(example(**{"spec.dataSchema.transformSpec": {"filter": bad}}))
    assert any(p.startswith("spec.dataSchema.transformSpec") and "abc" in m for p, m in found.items()), found


# ---------------------------------------------------------------------------------------------- files

@pytest.mark.parametrize("content, says", [
    (bytes(range(256)), "not a text file (byte 128 is not UTF-8)"),
    ("dataSource: café\n".encode("latin-1"), "not a text file"),
    (b"type: kafka\x00\n", "is a NUL"),
    (b"", "the file is empty"),
    (b"# only a comment\n", "the file is empty"),
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    (b'{"a": ' * 50_000 + b"1" + b"}" * 50_000, "nested too deeply"),
    (b"type: kafka\nspec: {dataSchema: [\n", "not valid YAML/JSON"),
    (b"- just\n- a list\n", "must be an object"),
])
def test_a_file_that_is_not_a_spec_is_a_spec_error(tmp_path, content, says):
    path = tmp_path / "x.yaml"
    path.write_bytes(content)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert says in str(info.value) and str(path) in str(info.value)


def test_a_folder_is_a_spec_error(tmp_path):
    with pytest.raises(SpecError, match="cannot read file"):
        load_spec(tmp_path)


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "ingest_core.service.cli", *args], capture_output=True, text=True,
                          timeout=120)


def test_validate_never_prints_a_traceback(tmp_path):
    (tmp_path / "good.yaml").write_text(yaml.safe_dump(example()))
    (tmp_path / "binary.yaml").write_bytes(bytes(range(256)) * 8)
    (tmp_path / "latin1.yml").write_bytes("a: \xe9\n".encode("latin-1"))
    (tmp_path / "deep.json").write_bytes(b"[" * 100_000 + b"]" * 100_000)
    (tmp_path / "empty.yaml").write_bytes(b"")
    (tmp_path / "cron.yaml").write_text(yaml.safe_dump(example(**{"microbatch.schedule": "61 * * * *"})))
    (tmp_path / "twin.yaml").write_text(yaml.safe_dump(example()))  # the same datasource again
    done = run_cli("validate", str(tmp_path))
    assert done.returncode == 1
    out = done.stdout + done.stderr
    assert "Traceback" not in out
    assert f"OK    {tmp_path / 'good.yaml'}" in done.stdout
    for name, says in [("binary.yaml", "not a text file"), ("latin1.yml", "not a text file"),
                       ("deep.json", "nested too deeply"), ("empty.yaml", "the file is empty"),
                       ("cron.yaml", "microbatch.schedule: '61 * * * *' is not a valid cron expression"),
                       ("twin.yaml", "'wikipedia' is already defined by")]:
        assert f"ERROR {tmp_path / name}" in done.stderr and says in done.stderr, (name, done.stderr)


# ---------------------------------------------------------------------------------------------- .airflowignore

def tree(root: Path, ignore: str, files: list[str]) -> None:
    for name in files:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("x")
    (root / ".airflowignore").write_text(ignore)


FILES = ["a.yaml", "old/b.yaml", "drafts/c.yaml", "deep/drafts/d.yaml", "deep/e.yaml", "f.draft.yaml", "g.json",
         "keep/old/h.yaml", "x/y/old/i.yml"]


@pytest.mark.parametrize("syntax, ignore", [
    ("glob", "# comments\nold/\ndrafts\n*.draft.yaml\n/keep/old\n!keep\n"),
    ("glob", "**/old/**\n*.json\n"),
    ("regexp", "^old/\ndrafts\n\\.draft\\.\n# a comment\n[invalid\n"),
])
def test_airflowignore_is_read_as_airflow_reads_it(tmp_path, syntax, ignore):
    from airflow._shared.module_loading.file_discovery import find_path_from_directory

    tree(tmp_path, ignore, FILES)
    (tmp_path / "deep" / ".airflowignore").write_text("e.yaml\n" if syntax == "glob" else "e\\.yaml$\n")
    airflow = sorted(Path(p) for p in find_path_from_directory(tmp_path, ".airflowignore", syntax))
    ours = sorted(unignored_files(tmp_path, syntax))
    assert ours == airflow
    assert len(ours) < len(FILES)  # something was ignored: the comparison is not vacuous


def test_spec_discovery_skips_what_airflowignore_lists(tmp_path, monkeypatch):
    tree(tmp_path, "drafts/\n", ["a.yaml", "drafts/b.yaml"])
    assert find_spec_files(tmp_path, "glob") == [tmp_path / "a.yaml"]
    (tmp_path / ".airflowignore").write_text("^drafts/b\n")
    monkeypatch.setenv("AIRFLOW__CORE__DAG_IGNORE_FILE_SYNTAX", "regexp")
    assert find_spec_files(tmp_path) == [tmp_path / "a.yaml"]


def test_validate_skips_what_airflowignore_lists(tmp_path):
    (tmp_path / "good.yaml").write_text(yaml.safe_dump(example()))
    (tmp_path / "scratch").mkdir()
    (tmp_path / "scratch" / "notes.yaml").write_bytes(bytes(range(256)))
    (tmp_path / ".airflowignore").write_text("scratch/\n")
    done = run_cli("validate", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "notes.yaml" not in done.stdout + done.stderr
