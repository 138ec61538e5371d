"""The REST API's specs (`provider/plugins/ui.py`): the DAG folder's spec files are parsed again only when one
changed, came or went, not on every request."""

import pytest
import yaml
from helpers import make_spec


@pytest.fixture
def ui(tmp_path, monkeypatch):
    from ingest_core.provider.plugins import ui

    monkeypatch.setenv("AIRFLOW__CORE__DAGS_FOLDER", str(tmp_path))
    ui._parsed_specs.cache_clear()
    yield ui
    ui._parsed_specs.cache_clear()


def write_spec(path, datasource: str, **io) -> None:
    path.write_text(yaml.safe_dump(make_spec("127.0.0.1:9092", datasource, topic="edits", **io).to_raw()))


def test_specs_are_parsed_again_only_when_a_file_changed(ui, tmp_path):
    write_spec(tmp_path / "wiki.yaml", "wiki", taskCount=1)
    first = ui._specs()
    assert ui._specs()["wiki"] is first["wiki"]  # the same parsed spec: nothing changed
    write_spec(tmp_path / "wiki.yaml", "wiki", taskCount=2)  # the same file, its content changed
    changed = ui._specs()
    assert changed["wiki"] is not first["wiki"] and changed["wiki"].io_config.task_count == 2
    write_spec(tmp_path / "news.yaml", "news")
    assert set(ui._specs()) == {"wiki", "news"}
    (tmp_path / "news.yaml").unlink()
    assert set(ui._specs()) == {"wiki"}
