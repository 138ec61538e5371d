"""The package boundaries (pyproject.toml's import-linter contracts) and what Spark Connect ships."""

import os
import shutil
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
    """The check is able to fail: a core module that imports the store breaks the layers contract, and so does a
    store module that imports SQL (`query/` stands on the store); a `query/` module that imports Kafka's clients or
    the Spark jobs (below it in the layers) breaks query's own contract.

    The probe goes into a copy of the packages, so the source tree is never written to."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for package in ("ingest_core", "spark_jobs"):
        shutil.copytree(ROOT / package, tmp_path / package, ignore=ignore)
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "ingest_core" / "core" / "_boundary_probe.py").write_text("import ingest_core.store.metadata  # noqa: F401\n")
    (tmp_path / "ingest_core" / "store" / "_query_probe.py").write_text("import ingest_core.query.engine  # noqa: F401\n")
    (tmp_path / "ingest_core" / "query" / "_probe.py").write_text(
        "import ingest_core.kafka.offset_reader  # noqa: F401\nimport ingest_core.spark.connect  # noqa: F401\n")
    lint = Path(sys.executable).parent / "lint-imports"
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run([str(lint), "--no-cache"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode != 0
    assert "ingest_core.core._boundary_probe -> ingest_core.store.metadata" in done.stdout
    assert "ingest_core.store._query_probe -> ingest_core.query.engine" in done.stdout
    assert "ingest_core.query._probe -> ingest_core.kafka.offset_reader" in done.stdout
    assert "ingest_core.query._probe -> ingest_core.spark.connect" in done.stdout
    assert not (ROOT / "ingest_core" / "core" / "_boundary_probe.py").exists()


def test_spark_connect_ships_only_what_executors_import():
    from ingest_core.spark.connect import code_archive

    with zipfile.ZipFile(code_archive()) as z:
        names = z.namelist()
    packages = {n.split("/")[1] for n in names if n.count("/") >= 2}
    assert packages == {"core", "handover", "executor", "kafka", "spark"}, packages
    assert "ingest_core/__init__.py" in names
    assert "ingest_core/spark/kafka_source.py" in names
    assert not [n for n in names if not n.endswith((".py", ".pyc"))]
