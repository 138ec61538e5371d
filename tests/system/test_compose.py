"""docker-compose.yaml cannot run here (no Docker engine): what can be checked is that its configuration
names and addresses are the ones the code and the example spec use, so the same DAGs run unchanged."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from urllib.parse import urlparse

import yaml

from ingest_core.core.secrets import EnvironmentSecret
from ingest_core.core.settings import DEEP_STORAGE_VAR, METADATA_URL_VAR
from ingest_core.core.spec import load_spec

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yaml").read_text())
SERVICES = COMPOSE["services"]
AIRFLOW = ["airflow-apiserver", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer"]


def env(service: str) -> dict[str, str]:
    return {k: str(v) for k, v in SERVICES[service].get("environment", {}).items()}


def mounts(service: str) -> dict[str, str]:
    return {m.split(":")[1]: m.split(":")[0] for m in SERVICES[service].get("volumes", [])}


def test_the_stack_has_every_service_the_issue_names():
    assert set(AIRFLOW + ["kafka", "postgres", "spark-master", "spark-worker"]) <= set(SERVICES)
    kafka = env("kafka")
    assert "controller" in kafka["KAFKA_PROCESS_ROLES"] and not any("ZOOKEEPER" in k for k in kafka)  # KRaft
    for name in AIRFLOW:
        assert SERVICES[name]["command"] in ("api-server", "scheduler", "dag-processor", "triggerer")
    # `docker compose config` where the Docker client has the compose plugin (this machine's has not)
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0:
        done = subprocess.run([docker, "compose", "-f", str(ROOT / "docker-compose.yaml"), "config", "-q"],
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr


def test_airflow_services_share_the_configuration_the_code_reads():
    example = load_spec(ROOT / "dags" / "datasources" / "wikipedia.yaml")
    reference = env("airflow-scheduler")
    for name in AIRFLOW:
        e = env(name)
        assert e == reference, f"{name} differs from the scheduler"
        assert mounts(name)["/opt/airflow/dags"] == "./dags" and e["AIRFLOW__CORE__DAGS_FOLDER"] == "/opt/airflow/dags"
        assert mounts(name)["/opt/airflow/plugins"] == "./plugins"
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
