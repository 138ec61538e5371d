"""A spec's warnings (a field Druid would ignore, a batch no-op) are shown where a user looks: `ingest validate`
(tests/unit/test_spec.py), `ingest status` and the Ingest tab, each with the field's path."""

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
