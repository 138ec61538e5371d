"""docker-compose.yaml cannot run here (no Docker engine). What is checked instead: that what it names exists
(the image's build copies what `pip install` needs, each service's command is one the installed Airflow, `ingest`
CLI and Spark know, the DAG and plugin files it mounts import), that its own references resolve (services,
volumes, configs), and that its configuration names and addresses are the ones the code and the example spec
use, so the same DAGs run unchanged. `docker compose config` validates it too where the Docker client has the
compose plugin."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

from ingest_core.core.secrets import EnvironmentSecret
from ingest_core.core.settings import DEEP_STORAGE_VAR, METADATA_URL_VAR
from ingest_core.core.spec import load_spec

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yaml").read_text())  # resolves the file's `<<:` merges
SERVICES = COMPOSE["services"]
AIRFLOW = ["airflow-apiserver", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer"]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def env(service: str) -> dict[str, str]:
    return {k: str(v) for k, v in SERVICES[service].get("environment", {}).items()}


def mounts(service: str) -> dict[str, str]:
    return {m.split(":")[1]: m.split(":")[0] for m in SERVICES[service].get("volumes", [])}


def script_lines(service: str) -> list[str]:
    """The shell command of a service whose entrypoint is `bash -c`."""
    assert SERVICES[service]["entrypoint"] == ["/bin/bash", "-c"], service
    (script,) = SERVICES[service]["command"]
    return script.splitlines()


def test_the_stack_has_every_service_the_issue_names():
    assert set(AIRFLOW + ["kafka", "postgres", "spark-master", "spark-worker"]) <= set(SERVICES)
    kafka = env("kafka")
    assert "controller" in kafka["KAFKA_PROCESS_ROLES"] and not any("ZOOKEEPER" in k for k in kafka)  # KRaft


def test_docker_compose_accepts_the_file():
    docker = shutil.which("docker")
    if docker is None or subprocess.run([docker, "compose", "version"], capture_output=True).returncode != 0:
        pytest.skip("`docker compose config` needs the Docker client's compose plugin, which this machine lacks; "
                    "the other tests here check the file without it")
    done = subprocess.run([docker, "compose", "-f", str(ROOT / "docker-compose.yaml"), "config", "-q"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_the_file_references_only_what_it_declares():
    for name, service in SERVICES.items():
        depends = service.get("depends_on", {})
        for target, how in (depends.items() if isinstance(depends, dict) else ((d, {}) for d in depends)):
            assert target in SERVICES, f"{name} depends on {target}, which is no service"
            if how.get("condition") == "service_healthy":
                assert "healthcheck" in SERVICES[target], f"{name} waits for {target} to be healthy: it has no check"
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (ROOT / source).is_dir(), f"{name} mounts {source}, which is no folder of the repository"
            else:
                assert source in COMPOSE["volumes"], f"{name} mounts the volume {source}, which is not declared"
        for config in service.get("configs", []):
            assert config["source"] in COMPOSE["configs"], f"{name} uses the config {config['source']}"


def test_the_image_build_copies_what_pip_install_needs():
    dockerfile = SERVICES["airflow-scheduler"]["build"]["dockerfile_inline"]
    copied = set()
    for line in dockerfile.splitlines():
        words = line.split()
        if words and words[0] == "COPY":
            sources = [w for w in words[1:-1] if not w.startswith("--")]
            for source in sources:
                assert (ROOT / source).exists(), f"the image copies {source}, which the repository lacks"
            copied.update(sources)
    # pyproject's packages (`packages.find`'s patterns) and its readme: pip install fails without them
    patterns = PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()
                and any(re.fullmatch(pat.replace("*", ".*"), p.name) for pat in patterns)}
    assert packages and packages <= copied, f"packages {sorted(packages - copied)} are not copied into the image"
    assert {"pyproject.toml", PYPROJECT["project"]["readme"]} <= copied
    # the image's Airflow and Python are the ones the project pins
    base = re.search(r"FROM apache/airflow:(\S+)-python(\S+)", dockerfile)
    pinned = next(d for d in PYPROJECT["project"]["dependencies"] if d.startswith("apache-airflow=="))
    assert base and pinned == f"apache-airflow=={base.group(1)}", (base and base.group(0), pinned)
    assert base.group(2) == f"{sys.version_info.major}.{sys.version_info.minor}"


def test_airflow_commands_are_the_installed_airflows(tmp_path):
    commands = [SERVICES[name]["command"].split() for name in AIRFLOW]
    commands += [shlex.split(ln)[1:] for ln in script_lines("airflow-init") if ln.startswith("airflow ")]
    assert ["db", "migrate"] in commands
    # Airflow's own command-line parser, in a Python of its own (Airflow reads its configuration at import)
    check = ("import json, sys\nfrom airflow.cli import cli_parser\nparser = cli_parser.get_parser()\n"
             "for args in json.loads(sys.argv[1]):\n    parser.parse_args(args)\n")
    done = subprocess.run([sys.executable, "-c", check, json.dumps(commands)], capture_output=True, text=True,
                          env={**os.environ, "AIRFLOW_HOME": str(tmp_path)}, timeout=300)
    assert done.returncode == 0, f"Airflow refuses one of {commands}:\n{done.stderr[-3000:]}"


def test_the_init_script_runs_the_ingest_cli_and_python_that_exist():
    from ingest_core.service.cli import build_parser

    checked = 0
    python: list[str] | None = None  # the lines of a `python - <<'EOF'` document being read
    for line in script_lines("airflow-init"):
        if python is not None:
            if line.strip() == "EOF":
                assert_imports_resolve("\n".join(python), "airflow-init's Python")
                python, checked = None, checked + 1
            else:
                python.append(line)
        elif line.startswith("ingest "):
            assert PYPROJECT["project"]["scripts"]["ingest"] == "ingest_core.service.cli:main"
            try:
                build_parser().parse_args(shlex.split(line)[1:])
            except SystemExit:
                pytest.fail(f"airflow-init runs {line!r}, which the ingest CLI refuses")
            checked += 1
        elif line == "python - <<'EOF'":
            python = []
        else:
            assert line in ("", "set -e") or line.startswith("airflow "), f"airflow-init runs {line!r}: check it here"
    assert checked == 2 and python is None


def test_spark_services_run_classes_pyspark_ships():
    jars = list((Path(importlib.import_module("pyspark").__file__).parent / "jars").glob("*.jar"))
    classes = set()
    for jar in jars:
        with zipfile.ZipFile(jar) as z:
            classes.update(n for n in z.namelist() if n.startswith("org/apache/spark/deploy/"))
    for name in ("spark-master", "spark-worker"):
        (script,) = SERVICES[name]["command"]
        words = shlex.split(script)
        assert words[:2] == ["exec", "spark-class"], script
        # pip installs pyspark's launcher beside the interpreter (the image's PATH)
        assert (Path(sys.executable).parent / "spark-class").exists(), "pyspark installs no spark-class"
        assert words[2].replace(".", "/") + ".class" in classes, f"{name}: pyspark ships no {words[2]}"


def assert_imports_resolve(source: str, where: str) -> None:
    """Every module `source` imports exists, and every name it imports from one is there."""
    tree = ast.parse(source)
    imports = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert imports, f"{where} imports nothing: nothing was checked"
    for node in imports:
        if isinstance(node, ast.Import):
            for alias in node.names:
                importlib.import_module(alias.name)
            continue
        module = importlib.import_module(node.module)
        for alias in node.names:
            assert hasattr(module, alias.name) or importlib.util.find_spec(f"{node.module}.{alias.name}"), \
                f"{where}: `from {node.module} import {alias.name}`: {node.module} has no {alias.name}"


@pytest.mark.parametrize("service_path", ["/opt/airflow/dags", "/opt/airflow/plugins"])
def test_the_dag_and_plugin_files_mounted_import(service_path):
    folder = ROOT / mounts("airflow-scheduler")[service_path]
    files = sorted(folder.glob("*.py"))
    assert files, f"{folder} holds no Python file"
    for path in files:
        assert_imports_resolve(path.read_text(), str(path.relative_to(ROOT)))


def test_airflow_services_share_the_configuration_the_code_reads():
    example = load_spec(ROOT / "dags" / "datasources" / "wikipedia.yaml")
    reference = env("airflow-scheduler")
    for name in AIRFLOW:
        e = env(name)
        assert e == reference, f"{name} differs from the scheduler"
        assert mounts(name)["/opt/airflow/dags"] == "./dags" and e["AIRFLOW__CORE__DAGS_FOLDER"] == "/opt/airflow/dags"
        assert mounts(name)["/opt/airflow/plugins"] == "./plugins"
        assert e["AIRFLOW__CORE__PLUGINS_FOLDER"] == "/opt/airflow/plugins"
    # the example spec's environment references are all set
    refs = [v.variable for v in example.io_config.consumer_properties.values() if isinstance(v, EnvironmentSecret)]
    assert refs and all(r in reference for r in refs)
    bootstrap = reference["INGEST_KAFKA_BOOTSTRAP"]
    assert f"PLAINTEXT://{bootstrap}" in env("kafka")["KAFKA_ADVERTISED_LISTENERS"]
    # the Spark connection the DAGs use points at the standalone master
    conn = json.loads(reference[f"AIRFLOW_CONN_{example.microbatch.spark.conn_id.upper()}"])
    command = " ".join(SERVICES["spark-master"]["command"])
    assert conn["host"] == "spark://spark-master" and f"--port {conn['port']}" in command
    assert f"spark://spark-master:{conn['port']}" in " ".join(SERVICES["spark-worker"]["command"])


def test_metadata_store_and_deep_storage_are_shared_where_they_must_be():
    e = env("airflow-scheduler")
    url = urlparse(e[METADATA_URL_VAR].replace("postgresql+psycopg2", "postgresql"))
    init = COMPOSE["configs"]["postgres-init"]["content"]
    assert url.hostname == "postgres" and f"CREATE DATABASE {url.path.lstrip('/')} OWNER {url.username}" in init
    assert f"CREATE USER {url.username} WITH PASSWORD '{url.password}'" in init
    airflow_db = urlparse(e["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].replace("postgresql+psycopg2", "postgresql"))
    assert f"CREATE DATABASE {airflow_db.path.lstrip('/')} OWNER {airflow_db.username}" in init
    deep = urlparse(e[DEEP_STORAGE_VAR])
    assert deep.scheme == "file"
    # the Spark driver runs in the Airflow worker and the executors on the Spark worker: both see the same files
    for name in AIRFLOW + ["spark-worker"]:
        assert mounts(name).get(deep.path) == "deep-storage", name
        assert env(name)[DEEP_STORAGE_VAR] == e[DEEP_STORAGE_VAR], name
