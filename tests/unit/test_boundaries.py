"""The package boundaries (pyproject.toml's import-linter contracts) and the old import paths people use."""

import importlib
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_import_linter_contracts_hold():
    lint = Path(sys.executable).parent / "lint-imports"
    done = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


def test_a_broken_contract_fails_the_check(tmp_path):
    """The check is able to fail: a core module that imports the store breaks the layers contract."""
    bad = ROOT / "ingest_core" / "core" / "_boundary_probe.py"
    bad.write_text("import ingest_core.store.metadata  # noqa: F401\n")
    try:
        lint = Path(sys.executable).parent / "lint-imports"
        done = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    finally:
        bad.unlink()
    assert done.returncode != 0
    assert "ingest_core.core._boundary_probe -> ingest_core.store.metadata" in done.stdout


def test_old_import_paths_are_the_same_modules():
    """Airflow's database stores the data gate trigger's classpath; code imports metadata and reader."""
    pairs = {"ingest_core.triggers": "ingest_core.provider.triggers.new_records",
             "ingest_core.metadata": "ingest_core.store.metadata",
             "ingest_core.reader": "ingest_core.store.reader"}
    for old, new in pairs.items():
        assert importlib.import_module(old) is importlib.import_module(new)
    from airflow._shared.module_loading import import_string  # what the triggerer uses

    trigger = import_string("ingest_core.triggers.NewRecordsTrigger")
    from ingest_core.provider.triggers.new_records import NewRecordsTrigger

    assert trigger is NewRecordsTrigger


def test_spark_connect_ships_only_what_executors_import():
    from ingest_core.spark.connect import code_archive

    with zipfile.ZipFile(code_archive()) as z:
        names = z.namelist()
    packages = {n.split("/")[1] for n in names if n.count("/") >= 2}
    assert packages == {"core", "handover", "executor", "kafka", "spark"}, packages
    assert "ingest_core/__init__.py" in names
    assert "ingest_core/spark/kafka_source.py" in names
    assert not [n for n in names if not n.endswith(".py")]
