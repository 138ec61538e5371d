"""A spec's warnings (a field Druid would ignore, a batch no-op) are shown where a user looks: `ingest validate`
(tests/unit/test_spec.py), `ingest status` and the Ingest tab, each with the field's path, and the dag-processor's
log."""

import json

import yaml
from helpers import make_spec

from ingest_core.service import cli
from ingest_core.store.metadata import MetadataStore


def test_status_and_the_ingest_tab_show_the_specs_warnings(tmp_path, monkeypatch, capsys, broker):
    from ingest_core.provider.plugins import ui

    url = f"sqlite:///{tmp_path / 'm.db'}"
    store = MetadataStore(url)
    store.upgrade()
    with store.session() as conn:
        store.datasources.lock("wiki", conn=conn)
    store.dispose()
    raw = make_spec(broker.bootstrap, "wiki", topic=broker.create_topic()).to_raw()
    raw["spec"]["ioConfig"]["taskCout"] = 2
    (tmp_path / "wiki.yaml").write_text(yaml.safe_dump(raw))
    said = "spec.ioConfig.taskCout: unknown field (did you mean 'taskCount'?)"

    assert cli.main(["--metadata-url", url, "status", "wiki", "--dags-folder", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "spec warnings" in out and said in out
    assert cli.main(["--metadata-url", url, "status", "wiki", "--json", "--dags-folder", str(tmp_path)]) == 0
    (warning,) = json.loads(capsys.readouterr().out)["payload"]["specWarnings"]
    assert warning.startswith(said)

    monkeypatch.setenv("INGEST_METADATA_URL", url)
    monkeypatch.setenv("AIRFLOW__CORE__DAGS_FOLDER", str(tmp_path))
    ui._parsed_specs.cache_clear()
    try:
        # an admin: the page reads the user only to hide the datasources it may not read (test_permissions.py)
        monkeypatch.setattr(ui, "readable", lambda user, names: list(names))
        page = ui.datasource_page("wiki", None).body.decode()
    finally:
        ui._parsed_specs.cache_clear()
    assert "<h3>Spec warnings</h3>" in page and "<code>spec.ioConfig.taskCout</code>: unknown field" in page


def test_the_dag_parse_warns_of_continuous_runs_without_a_data_gate(tmp_path, monkeypatch):
    """The dag-processor's log says what an idle `@continuous` datasource without a gate costs; the DAG loads, and
    one with a gate parses without that warning."""
    import logging

    from ingest_core.provider.dag_factory import load_specs

    for name, microbatch in (("ungated", {"schedule": "@continuous"}),
                             ("gated", {"schedule": "@continuous", "dataGate": {"minRecords": 1, "maxWait": "PT1M"}})):
        raw = make_spec("localhost:9", name, topic="edits", microbatch=microbatch).to_raw()
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(raw))
    logger, seen = logging.getLogger("ingest_core.provider.dag_factory"), []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: seen.append(record.getMessage())
    # Airflow's logging config, once loaded by an earlier test, disables loggers made before it
    monkeypatch.setattr(logger, "disabled", False)
    logger.addHandler(handler)
    try:
        dags, errors = load_specs(tmp_path)
    finally:
        logger.removeHandler(handler)
    assert sorted(dags) == ["gated", "ungated"] and errors == []
    warned = [message for message in seen if "without a dataGate" in message]
    assert len(warned) == 1 and "ungated.yaml" in warned[0] and "16,000 empty runs a day" in warned[0], seen
