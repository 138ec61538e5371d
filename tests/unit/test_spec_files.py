"""Spec files as text: YAML's merge keys, aliases expanded within a bound, a size limit, and errors that never
echo a whole value (issue 44: a 2 KB alias bomb took `ingest validate` to minutes and 2.2 GB)."""

from __future__ import annotations

import json
import tracemalloc

import pytest
import yaml

from ingest_core.core.errors import SHOWN_CHARS, SpecError
from ingest_core.core.spec import MAX_SPEC_BYTES, load_spec, parse_spec_text
from ingest_core.service.cli import main

IO = "{topic: t, inputFormat: {type: json}, consumerProperties: {bootstrap.servers: 'localhost:9092'}}"


def spec_text(io: str = IO, before: str = "", tuning: str = "") -> str:
    return (f"type: kafka\n{before}spec:\n  dataSchema:\n    dataSource: d\n    timestampSpec: {{column: ts}}\n"
            f"    dimensionsSpec: {{dimensions: [a]}}\n  ioConfig: {io}\n{tuning}")


def alias_bomb(levels: int = 9) -> str:
    """The "billion laughs" of YAML: 9 levels of 9 aliases each, about 600 bytes, 9^9 strings expanded."""
    lines = ['l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"l{i}: &l{i} [" + ",".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return "x-laughs:\n  " + "\n  ".join(lines) + "\n"


def test_an_alias_bomb_is_refused_before_it_is_expanded():
    # The value an error echoes in full on the old code: taskDuration's message printed 9^7 strings (1.3 GB).
    text = spec_text(io=IO.replace("topic: t,", "topic: t, taskDuration: *l8,"), before=alias_bomb())
    assert len(text) < 2048
    tracemalloc.start()
    try:
        with pytest.raises(SpecError) as refused:
            parse_spec_text(text, "bomb.yaml")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "expand to more than 100,000 values" in str(refused.value)
    assert peak < 20 * 2**20, f"{peak:,} bytes to refuse a 1 KB file"  # the old code: over 1 GB


def test_an_alias_inside_its_own_anchor_is_refused():
    with pytest.raises(SpecError, match="refers to a value that contains it"):
        parse_spec_text(spec_text(before="x-loop: &loop [1, *loop]\n"), "loop.yaml")


def test_aliases_within_the_bound_still_load():
    text = spec_text(io="&io " + IO, before="", tuning="x-again: *io\n")
    assert parse_spec_text(text, "reuse.yaml").io_config.topic == "t"


def test_yaml_merge_keys_load_and_a_written_key_wins_over_a_merged_one():
    text = spec_text(before="x-defaults: &defaults\n  type: kafka\n  maxRowsInMemory: 1000\n  maxRowsPerSegment: 7\n"
                     "x-more: &more {maxRowsPerSegment: 9, reportParseExceptions: false}\n",
                     tuning="  tuningConfig:\n    <<: [*defaults, *more]\n    maxRowsInMemory: 2000\n")
    tuning = parse_spec_text(text, "merge.yaml").tuning_config
    assert tuning.max_rows_in_memory == 2000  # written here: wins over the merge
    plain = yaml.safe_load(text)["spec"]["tuningConfig"]  # what plain YAML (PyYAML's safe loader) makes of it
    assert (tuning.max_rows_per_segment, tuning.report_parse_exceptions) == (plain["maxRowsPerSegment"], False)


def test_a_key_written_twice_is_still_refused_beside_a_merge():
    text = spec_text(before="x-defaults: &defaults {maxRowsInMemory: 1000}\n",
                     tuning="  tuningConfig:\n    <<: *defaults\n    type: kafka\n    type: kafka\n")
    with pytest.raises(SpecError, match="duplicate key 'type'"):
        parse_spec_text(text, "twice.yaml")


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_a_spec_file_over_the_limit_is_refused_naming_the_limit(tmp_path, suffix):
    path = tmp_path / f"big{suffix}"
    if suffix == ".json":
        raw = yaml.safe_load(spec_text())
        raw["spec"]["dataSchema"]["padding"] = "x" * MAX_SPEC_BYTES
        path.write_text(json.dumps(raw))
    else:
        path.write_text(spec_text() + "# " + "x" * MAX_SPEC_BYTES + "\n")
    with pytest.raises(SpecError) as refused:
        load_spec(path)
    message = str(refused.value)
    assert f"at most {MAX_SPEC_BYTES:,} bytes" in message and len(message) < 400


def test_errors_echo_at_most_a_short_prefix_of_a_value():
    long_list = json.dumps(["PT1H"] * 10_000)
    for io, field in [(IO.replace("topic: t,", f"topic: t, taskDuration: {long_list},"), "taskDuration"),
                      (IO.replace("topic: t,", f"topic: t, taskDuration: '{'P' * 100_000}',"), "taskDuration"),
                      (IO.replace("{type: json}", f"{{type: {'j' * 50_000}}}"), "inputFormat")]:
        with pytest.raises(SpecError) as refused:
            parse_spec_text(spec_text(io=io), "long.yaml")
        (problem,) = refused.value.problems
        assert field in problem.path and "..." in problem.message
        assert len(problem.message) < SHOWN_CHARS + 200, problem.message


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_a_number_past_pythons_digit_limit_is_one_spec_error(tmp_path, suffix):
    path = tmp_path / f"digits{suffix}"
    raw = yaml.safe_load(spec_text())
    raw["spec"]["ioConfig"]["taskCount"] = 1
    path.write_text(json.dumps(raw).replace('"taskCount": 1', '"taskCount": ' + "9" * 5000))
    with pytest.raises(SpecError, match="a number of more than"):
        load_spec(path)


def test_ingest_convert_reads_a_tab_indented_json_spec_that_validate_accepts(tmp_path, capsys):
    raw = yaml.safe_load(spec_text())
    path = tmp_path / "tabs.json"
    path.write_text(json.dumps(raw, indent="\t"))
    assert main(["validate", str(path)]) == 0
    capsys.readouterr()
    assert main(["convert", str(path)]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out) == raw and "Traceback" not in captured.err
