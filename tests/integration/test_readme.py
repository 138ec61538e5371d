"""The README stays true: its Python snippets run, its consumerProperties pass `ingest
validate`, and the commands it gives for after `make demo` are the ones the demo prints and they work."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml

from ingest_core.dev import demo
from ingest_core.store.metadata import MetadataStore

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", README, flags=re.S | re.M)


def demo_home(tmp_path, monkeypatch) -> Path:
    """The environment after `make demo`: run from the repository, a SQLite store in demo-data, Kafka gone."""
    home = tmp_path / "demo-data"
    for var in ("INGEST_METADATA_URL", "INGEST_KAFKA_BOOTSTRAP", "AIRFLOW__CORE__DAGS_FOLDER"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("INGEST_HOME", str(home))
    monkeypatch.chdir(ROOT)
    store = MetadataStore(f"sqlite:///{home / 'metadata.db'}")
    store.upgrade()
    with store.session() as conn:
        store.datasources.lock(demo.DATASOURCE, conn=conn)
    store.dispose()
    return home


def test_the_python_snippets_run(tmp_path, monkeypatch, capsys):
    snippets = blocks("python")
    assert snippets and any("DatasourceReader" in s for s in snippets)
    demo_home(tmp_path, monkeypatch)
    for snippet in snippets:
        exec(compile(snippet, "README.md", "exec"), {"__name__": "readme"})
    assert "0 rows, 0 segments" in capsys.readouterr().out


def test_the_consumer_properties_pass_validation(tmp_path):
    from ingest_core.kafka.properties import load_checked_spec

    examples = [yaml.safe_load(b)["consumerProperties"] for b in blocks("yaml") if b.startswith("consumerProperties:")]
    assert len(examples) >= 2 and any(e.get("security.protocol") == "SASL_SSL" for e in examples)
    for i, props in enumerate(examples):
        raw = yaml.safe_load((ROOT / "dags" / "datasources" / "wikipedia.yaml").read_text())
        raw["spec"]["ioConfig"]["consumerProperties"] = props
        (tmp_path / f"{i}.yaml").write_text(yaml.safe_dump(raw))
        load_checked_spec(tmp_path / f"{i}.yaml")  # SpecError with every problem otherwise


def test_the_commands_for_after_the_demo_are_the_demos_and_work(tmp_path, monkeypatch, capsys):
    from ingest_core.service import cli

    venv_ingest = str(Path(sys.executable).parent / "ingest")
    for line in demo.cli_lines(ROOT / "demo-data", ROOT):
        assert line.replace(venv_ingest, ".venv/bin/ingest") + "\n" in README
    demo_home(tmp_path, monkeypatch)
    assert cli.main(["status", demo.DATASOURCE]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"datasource {demo.DATASOURCE} ") and "aggregate lag: unknown" in out
    assert "environment variable INGEST_KAFKA_BOOTSTRAP is not set" in out
    assert cli.main(["segments", demo.DATASOURCE]) == 0
    assert "0 segments, 0 rows" in capsys.readouterr().out

