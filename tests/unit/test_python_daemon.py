"""The warm Python daemon of a Spark Connect server (`spark_jobs.python_daemon`) and the code archive's bytecode:
what makes a session's Python worker start ready."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import zipfile

from ingest_core.spark.connect import PACKAGES, ROOT, code_archive
from spark_jobs.python_daemon import PRELOAD


def module_level_imports(source: str) -> set[str]:
    """The modules a file imports as it loads: its top-level imports, those in a top-level `try` too (not the
    ones under `if TYPE_CHECKING:` or in functions). `from x import y` counts as x."""
    found: set[str] = set()
    for node in ast.parse(source).body:
        for inner in ast.walk(node) if isinstance(node, ast.Try) else [node]:
            if isinstance(inner, ast.Import):
                found.update(alias.name for alias in inner.names)
            elif isinstance(inner, ast.ImportFrom) and inner.level == 0 and inner.module:
                found.add(inner.module)
    return found


def test_the_daemon_preloads_every_library_the_shipped_code_imports_as_it_loads():
    third_party: dict[str, str] = {}
    for package in PACKAGES:
        path = ROOT / package
        for file in (sorted(path.rglob("*.py")) if path.is_dir() else [path]):
            for name in module_level_imports(file.read_text()):
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in ("ingest_core", "__future__"):
                    third_party.setdefault(name, str(file.relative_to(ROOT)))
    missing = {name: where for name, where in third_party.items() if name not in PRELOAD}
    assert not missing, f"add these to spark_jobs.python_daemon.PRELOAD (module: a file importing it): {missing}"


def test_the_daemon_loads_no_module_of_this_project():
    """The workers it forks import `ingest_core` from the session's code archive, never the server's copy."""
    probe = ("import json, sys; import spark_jobs.python_daemon as d; missing = d.preload(); "
             "print(json.dumps([missing, sorted(m for m in sys.modules if m.split('.')[0] == 'ingest_core')]))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    missing, loaded = json.loads(done.stdout.splitlines()[-1])
    assert missing == [] and loaded == []


def test_the_code_archive_carries_bytecode_that_a_worker_imports():
    archive = code_archive()
    with zipfile.ZipFile(archive) as z:
        names = set(z.namelist())
    sources = {n for n in names if n.endswith(".py")}
    assert sources and names == sources | {n + "c" for n in sources}
    # a fresh interpreter with only the archive for this project (as a session's worker has it) loads the
    # split reader's module from the archive's bytecode
    probe = ("import sys; sys.path.insert(0, sys.argv[1]); import ingest_core.spark.kafka_source as k; "
             "print(k.__file__)")
    done = subprocess.run([sys.executable, "-c", probe, str(archive)], cwd=archive.parent, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{archive}/ingest_core/spark/kafka_source.pyc"
