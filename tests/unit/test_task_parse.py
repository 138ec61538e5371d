"""A task's process parses the DAG file for one DAG: with Airflow's parsing context naming it (set by Airflow's
task runner, `_airflow_parsing_context_manager`, around its parse), `load_dags` builds that DAG alone and leaves
every other datasource's spec unparsed; the dag-processor (no context) builds them all."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import yaml
from airflow.sdk.definitions._internal.dag_parsing_context import _airflow_parsing_context_manager
from airflow.sdk.definitions.context import _AIRFLOW_PARSING_CONTEXT_DAG_ID, _AIRFLOW_PARSING_CONTEXT_TASK_ID

from ingest_core.provider.dag_factory import load_dags

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = yaml.safe_load((ROOT / "dags" / "datasources" / "wikipedia.yaml").read_text())
# a spec whose parse raises (a YAML tag a safe loader refuses): reported when parsed, so parsing it shows
BROKEN = "type: kafka\nspec: !!python/object:os.system {}\n"


def variant(name: str, **extra) -> dict:
    raw = json.loads(json.dumps(EXAMPLE))
    raw["spec"]["dataSchema"]["dataSource"] = name
    raw.update(extra)
    return raw


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv("INGEST_KAFKA_BOOTSTRAP", "localhost:9")
    for var in (_AIRFLOW_PARSING_CONTEXT_DAG_ID, _AIRFLOW_PARSING_CONTEXT_TASK_ID):
        monkeypatch.delenv(var, raising=False)  # Airflow's context manager leaves what it set
    (tmp_path / "one.yaml").write_text(yaml.safe_dump(variant("one", compaction={"skipOffsetFromLatest": "PT1H"})))
    (tmp_path / "two.yaml").write_text(yaml.safe_dump(variant("two")))
    # the datasource's name in a file that is not its spec: the one read is the one that defines it
    (tmp_path / "mentions_one.yaml").write_text("# one, one.compaction\n" + BROKEN)
    (tmp_path / "broken.yaml").write_text(BROKEN)
    return tmp_path


def parsed(caplog) -> set[str]:
    """The spec files whose parse failed, from load_dags' warnings."""
    return {Path(r.getMessage().split(": ")[1]).name for r in caplog.records
            if r.getMessage().startswith("datasource spec skipped")}


def test_the_dag_processor_builds_every_datasource(folder, caplog):
    with caplog.at_level(logging.WARNING):
        dags = load_dags(folder)
    assert sorted(dags) == ["one", "one.compaction", "two"]
    assert parsed(caplog) == {"broken.yaml", "mentions_one.yaml"}


@pytest.mark.parametrize("dag_id", ["one", "one.compaction", "two"])
def test_a_task_process_builds_only_its_own_dag(folder, caplog, dag_id):
    with caplog.at_level(logging.WARNING), _airflow_parsing_context_manager(dag_id=dag_id, task_id="plan"):
        dags = load_dags(folder)
    assert sorted(dags) == [dag_id]
    # the broken spec is never parsed; one that merely mentions the name may be, and is not taken for it
    assert "broken.yaml" not in parsed(caplog)


def test_a_dag_id_no_spec_defines_builds_nothing_after_reading_every_spec(folder, caplog):
    with caplog.at_level(logging.WARNING), _airflow_parsing_context_manager(dag_id="elsewhere"):
        assert load_dags(folder) == {}
