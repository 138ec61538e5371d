"""The generated DAG files (provider/dag_files.py): one per spec, named after it, whose code no file name can
change; a sync writes what changed and removes what is gone. And what a generated file builds
(`dag_factory.spec_file_dags`): its own spec's DAGs, in a task's process only the task's DAG, its spec's error
as its own."""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path

import pytest
import yaml
from airflow.sdk.definitions._internal.dag_parsing_context import _airflow_parsing_context_manager
from airflow.sdk.definitions.context import _AIRFLOW_PARSING_CONTEXT_DAG_ID, _AIRFLOW_PARSING_CONTEXT_TASK_ID
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest_core.provider.dag_factory import SpecFilesError, spec_file_dags
from ingest_core.provider.dag_files import GENERATED_DIR, SpecFile, plan_dag_files, sync_dag_files

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = yaml.safe_load((ROOT / "dags" / "datasources" / "wikipedia.yaml").read_text())

# path segments as a DAG folder may hold them: quotes, backslashes, newlines, non-ASCII, Python keywords
segment = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="/\x00"), min_size=1,
                  max_size=12).filter(lambda s: s not in (".", ".."))
spec_path = st.builds(lambda parts, suffix: "/".join(parts) + suffix, st.lists(segment, min_size=1, max_size=3),
                      st.sampled_from([".yaml", ".yml", ".json"]))


@settings(max_examples=50)
@given(st.lists(spec_path, unique=True, min_size=1, max_size=8))
def test_each_spec_has_a_file_of_its_own_whose_code_only_names_it(paths):
    files = plan_dag_files([SpecFile(p, 10, 1) for p in paths])
    assert sorted(f.spec for f in files) == sorted(paths)
    assert len({f.name for f in files}) == len(paths)  # `a/b.yaml` and `a__b.yaml` too
    for f in files:
        assert f.name.endswith(".py") and "/" not in f.name
        tree = ast.parse(f.text)  # a file name is data: the code is the template's
        (spec,) = [n.value.value for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "SPEC"]
        assert spec == f.spec
        assert [type(n).__name__ for n in tree.body] == ["Expr", "ImportFrom", "Assign", "Assign", "Expr"]
        assert "airflow" in f.text.lower() and "dag" in f.text.lower()  # Airflow's safe-mode heuristic


def write_spec(path: Path, name: str, **microbatch) -> None:
    raw = json.loads(json.dumps(EXAMPLE))
    raw["spec"]["dataSchema"]["dataSource"] = name
    raw["microbatch"].update(microbatch)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(raw))


def test_a_sync_writes_what_changed_and_removes_what_is_gone(tmp_path):
    write_spec(tmp_path / "a.yaml", "a")
    write_spec(tmp_path / "team" / "b.yaml", "b")
    (tmp_path / ".airflowignore").write_text("drafts/\n")
    write_spec(tmp_path / "drafts" / "c.yaml", "c")
    assert sorted(sync_dag_files(tmp_path).written) == ["a.yaml.py", "team__b.yaml.py"]
    out = tmp_path / GENERATED_DIR
    assert sorted(p.name for p in out.iterdir()) == ["a.yaml.py", "team__b.yaml.py"]
    assert oct(os.stat(out / "a.yaml.py").st_mode & 0o777) == "0o644"
    assert sync_dag_files(tmp_path).written == ()  # nothing changed: nothing written, no mtime moves

    write_spec(tmp_path / "team" / "b.yaml", "b", schedule="*/5 * * * *")  # an edit: its file alone
    (tmp_path / "a.yaml").unlink()
    sync = sync_dag_files(tmp_path)
    assert sync.written == ("team__b.yaml.py",) and sync.removed == ("a.yaml.py",)
    assert [p.name for p in out.iterdir()] == ["team__b.yaml.py"]


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv("INGEST_KAFKA_BOOTSTRAP", "localhost:9")
    for var in (_AIRFLOW_PARSING_CONTEXT_DAG_ID, _AIRFLOW_PARSING_CONTEXT_TASK_ID):
        monkeypatch.delenv(var, raising=False)  # Airflow's context manager leaves what it set
    raw = json.loads(json.dumps(EXAMPLE))
    raw["spec"]["dataSchema"]["dataSource"] = "one"
    raw["compaction"] = {"skipOffsetFromLatest": "PT1H"}
    (tmp_path / "one.yaml").write_text(yaml.safe_dump(raw))
    write_spec(tmp_path / "twin.yaml", "one")
    (tmp_path / "broken.yaml").write_text("type: kafka\nspec: {dataSchema: [\n")
    sync_dag_files(tmp_path)
    return tmp_path


def dag_file(folder: Path, spec: str) -> Path:
    return folder / GENERATED_DIR / f"{spec}.py"


def test_a_generated_file_builds_its_own_specs_dags_and_a_task_only_its_own(folder):
    assert sorted(spec_file_dags(dag_file(folder, "one.yaml"), "one.yaml")) == ["one", "one.compaction"]
    for dag_id in ("one", "one.compaction"):
        with _airflow_parsing_context_manager(dag_id=dag_id, task_id="plan"):
            assert sorted(spec_file_dags(dag_file(folder, "one.yaml"), "one.yaml")) == [dag_id]


def test_a_spec_that_does_not_load_is_its_own_files_error(folder):
    with pytest.raises(SpecFilesError, match="(?s)broken.yaml.*not valid YAML/JSON"):
        spec_file_dags(dag_file(folder, "broken.yaml"), "broken.yaml")
    # the second spec of a datasource: the first (by path) keeps it, and is named
    with pytest.raises(SpecFilesError, match=r"'one' is already defined by another spec \(.*one\.yaml\)"):
        spec_file_dags(dag_file(folder, "twin.yaml"), "twin.yaml")
    (folder / "twin.yaml").unlink()  # gone since its file was written: no DAG, no error
    assert spec_file_dags(dag_file(folder, "twin.yaml"), "twin.yaml") == {}
