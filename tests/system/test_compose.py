"""docker-compose.yaml cannot run here (no Docker engine). What is checked instead: that what it names exists
(the image's build copies what `pip install` needs, each service's command is one the installed Airflow, `ingest`
CLI and Spark know, the DAG and plugin files it mounts import), that its own references resolve (services,
volumes, configs, every `${VARIABLE}` has a default), and that its configuration names and addresses are the ones
the code and the spec use, so the same DAGs run unchanged. The secured broker and the object store: the
certificate service's script runs here (into a temporary folder) and makes what Kafka and its clients read; Kafka's
own `kafka-storage format` accepts the broker's properties and its SCRAM user; the listener, mechanism, credentials
and CA the clients are given are the ones the broker has; the spec the stack runs is docs/connections.md's recipe
(which tests/system/test_secure_dag.py runs for real). `docker compose config` validates it too where the Docker
client has the compose plugin."""

from __future__ import annotations

import ast
import datetime
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

from doc_pages import with_recipe

from ingest_core.core.secrets import AirflowConnectionSecret, EnvironmentSecret
from ingest_core.core.settings import DEEP_STORAGE_VAR, METADATA_URL_VAR
from ingest_core.core.spec import load_spec
from ingest_core.provider.dag_files import BUNDLE_CONFIG
from ingest_core.provider.preload import LOCAL_SETTINGS
from ingest_core.provider.recovery import recovery_env

ROOT = Path(__file__).resolve().parents[2]
TEXT = (ROOT / "docker-compose.yaml").read_text()
# compose's interpolation: `$$` is a `$`, `${NAME:-default}` the variable or its default; a `$` otherwise is an error
_VARIABLE = re.compile(r"\$(?:(?P<escaped>\$)|\{(?P<braced>[^}]*)\}|(?P<named>[_a-zA-Z][_a-zA-Z0-9]*)|(?P<invalid>))")


def interpolate(text: str, env: dict[str, str] | None = None) -> str:
    def one(match: re.Match) -> str:
        if match["escaped"]:
            return "$"
        inner = match["braced"] if match["braced"] is not None else match["named"]
        assert inner is not None, f"docker compose refuses the lone `$` in {text[max(0, match.start() - 40):][:80]!r}"
        name, sep, default = inner.partition(":-")
        assert sep and re.fullmatch(r"[_A-Z][_A-Z0-9]*", name), f"${{{inner}}}: every variable needs a default"
        return (env or {}).get(name) or default

    return _VARIABLE.sub(one, text)


def _interpolated(node):
    if isinstance(node, str):
        return interpolate(node)
    if isinstance(node, list):
        return [_interpolated(n) for n in node]
    if isinstance(node, dict):
        return {k: _interpolated(v) for k, v in node.items()}
    return node


COMPOSE = _interpolated(yaml.safe_load(TEXT))  # resolves the file's `<<:` merges, then the defaults of `${...}`
SERVICES = COMPOSE["services"]
AIRFLOW = ["airflow-apiserver", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer"]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
KAFKA_PROPERTIES = dict(line.split("=", 1) for line in COMPOSE["configs"]["kafka-server"]["content"].splitlines()
                        if line and not line.startswith("#"))
STACK_SPEC_PATH = "/opt/airflow/dags/datasources/wikipedia.yaml"  # where the Airflow services find the spec they run


def env(service: str) -> dict[str, str]:
    return {k: str(v) for k, v in SERVICES[service].get("environment", {}).items()}


def mounts(service: str) -> dict[str, str]:
    return {m.split(":")[1]: m.split(":")[0] for m in SERVICES[service].get("volumes", [])}


def script_lines(service: str) -> list[str]:
    """The shell command of a service whose entrypoint is `bash -c`."""
    assert SERVICES[service]["entrypoint"] == ["/bin/bash", "-c"], service
    (script,) = SERVICES[service]["command"]
    return script.splitlines()


def stack_spec() -> dict:
    """The spec the Airflow services run (the config mounted over the example's)."""
    (config,) = [c for c in SERVICES["airflow-scheduler"]["configs"] if c["target"] == STACK_SPEC_PATH]
    return yaml.safe_load(COMPOSE["configs"][config["source"]]["content"])


def connection(conn_id: str, service: str = "airflow-scheduler") -> dict:
    return json.loads(env(service)[f"AIRFLOW_CONN_{conn_id.upper()}"])


def test_the_stack_has_every_service_the_issue_names():
    assert set(AIRFLOW + ["kafka", "kafka-tls", "postgres", "s3", "spark-master", "spark-worker"]) <= set(SERVICES)
    roles = KAFKA_PROPERTIES["process.roles"]
    assert "controller" in roles and not any("zookeeper" in k for k in KAFKA_PROPERTIES)  # KRaft
    assert SERVICES["s3"]["image"].startswith("andrewgaul/s3proxy:")  # Apache-2.0, as the tests' EmbeddedS3


def test_every_variable_has_a_default_and_every_dollar_is_escaped():
    raw = TEXT.replace("$$", "")
    variables = re.findall(r"\$\{([^}]*)\}", raw)
    assert variables, "the file reads no variable: the passwords would be fixed in it"
    interpolate(TEXT)  # a variable without a default, or a lone `$`, fails here
    # each password or key the file defaults is one of these variables, and its default says to change it
    defaults = dict(v.split(":-", 1) for v in variables)
    for name in ("INGEST_KAFKA_PASSWORD", "INGEST_S3_SECRET_KEY", "INGEST_S3_ACCESS_KEY"):
        assert "change-me" in defaults[name], name
    assert "CHANGE THEM" in TEXT


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
    reference = env("airflow-scheduler")
    for name in AIRFLOW:
        e = env(name)
        assert e == reference, f"{name} differs from the scheduler"
        assert mounts(name)["/opt/airflow/dags"] == "./dags" and e["AIRFLOW__CORE__DAGS_FOLDER"] == "/opt/airflow/dags"
        assert mounts(name)["/opt/airflow/plugins"] == "./plugins"
        assert e["AIRFLOW__CORE__PLUGINS_FOLDER"] == "/opt/airflow/plugins"
        # the DAG folder as ingest's bundle (a generated DAG file per spec), as `make demo` configures it
        assert json.loads(e["AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST"]) == json.loads(BUNDLE_CONFIG), name
        assert mounts(name)["/opt/airflow/dags/.ingest"] == "generated-dags", name
        assert SERVICES[name]["configs"] == SERVICES["airflow-scheduler"]["configs"], name
    # the Spark connection the DAGs use points at the standalone master
    conn = connection(load_spec(ROOT / "dags" / "datasources" / "wikipedia.yaml").microbatch.spark.conn_id)
    command = " ".join(SERVICES["spark-master"]["command"])
    assert conn["host"] == "spark://spark-master" and f"--port {conn['port']}" in command
    assert f"spark://spark-master:{conn['port']}" in " ".join(SERVICES["spark-worker"]["command"])


def test_the_scheduler_preloads_the_tasks_libraries_as_the_docs_say():
    mounted = {c["target"]: c["source"] for c in SERVICES["airflow-scheduler"]["configs"]}
    source = mounted["/opt/airflow/config/airflow_local_settings.py"]  # $AIRFLOW_HOME/config: on Airflow's sys.path
    assert COMPOSE["configs"][source]["content"] == LOCAL_SETTINGS


def test_long_running_services_come_back_and_dead_tasks_are_noticed_in_seconds():
    # Airflow's scheduler, triggerer and dag-processor exit when their database goes away (issue 46): compose
    # starts them again; one-shot services (made once, then done) must not be
    one_shot = {"airflow-init", "kafka-tls"}
    for name, service in SERVICES.items():
        assert service.get("restart") == (None if name in one_shot else "unless-stopped"), name
    for name in AIRFLOW:  # a task whose worker died fails in seconds: the settings every Airflow home ships
        assert recovery_env().items() <= env(name).items(), name


def test_the_stack_runs_the_recipe_of_the_docs(tmp_path):
    """The spec mounted over the example's is the example with docs/connections.md's recipe, it passes `ingest
    validate --strict`, and every reference it holds is set in the Airflow services: its variables, and its
    Airflow connections with the fields it reads."""
    from ingest_core.kafka.properties import load_checked_spec

    example = ROOT / "dags" / "datasources" / "wikipedia.yaml"
    assert STACK_SPEC_PATH == "/opt/airflow/dags/" + str(example.relative_to(ROOT / "dags"))
    raw = stack_spec()
    assert raw == with_recipe(yaml.safe_load(example.read_text()))
    path = tmp_path / "wikipedia.yaml"
    path.write_text(yaml.safe_dump(raw))
    spec = load_checked_spec(path, strict=True)
    reference = env("airflow-scheduler")
    refs = list(spec.io_config.consumer_properties.values())
    variables = [r.variable for r in refs if isinstance(r, EnvironmentSecret)]
    assert {"INGEST_KAFKA_BOOTSTRAP", "INGEST_KAFKA_CA_LOCATION"} <= set(variables)
    assert all(v in reference for v in variables), variables
    connections = [r for r in refs if isinstance(r, AirflowConnectionSecret)]
    assert connections
    for ref in connections:
        assert connection(ref.conn_id).get(ref.field), f"AIRFLOW_CONN_{ref.conn_id.upper()} has no {ref.field}"
    s3 = connection(spec.microbatch.deep_storage.s3.connection)
    assert s3["conn_type"] == "aws" and s3["login"] and s3["password"]


def test_the_broker_listener_and_the_recipe_clients_agree():
    """The recipe's bootstrap.servers is a listener the broker advertises, with the security protocol, mechanism,
    user and password the clients are given; the broker's security settings are the tests' SecuredKafka's."""
    from ingest_core.dev.embedded import SecuredKafka

    spec = stack_spec()["spec"]["ioConfig"]["consumerProperties"]
    e = env("airflow-scheduler")
    bootstrap = e[spec["bootstrap.servers"]["variable"]]
    advertised = dict(reversed(a.split("://")) for a in KAFKA_PROPERTIES["advertised.listeners"].split(","))
    listener = advertised[bootstrap]
    protocols = dict(p.split(":") for p in KAFKA_PROPERTIES["listener.security.protocol.map"].split(","))
    assert protocols[listener] == spec["security.protocol"] == "SASL_SSL"
    assert f"{listener}://:{bootstrap.split(':')[1]}" in KAFKA_PROPERTIES["listeners"].split(",")
    mechanism = spec["sasl.mechanism"]
    assert mechanism in KAFKA_PROPERTIES["sasl.enabled.mechanisms"].split(",")
    # the SCRAM user the broker is formatted with is the login and password of the clients' connection
    kafka = env("kafka")
    (format_line,) = [ln for ln in script_lines("kafka") if "kafka-storage.sh format" in ln]
    scram = shlex.split(format_line)[shlex.split(format_line).index("--add-scram") + 1]
    assert scram == f"{mechanism}=[name=${{KAFKA_SCRAM_USER}},password=${{KAFKA_SCRAM_PASSWORD}}]"
    conn = connection(spec["sasl.username"]["connId"])
    assert (conn[spec["sasl.username"]["field"]], conn[spec["sasl.password"]["field"]]) == \
        (kafka["KAFKA_SCRAM_USER"], kafka["KAFKA_SCRAM_PASSWORD"])
    # the secured settings are the ones the tests' broker runs with (its listener is named SASL_SSL too)
    tested = SecuredKafka(Path("/nonexistent"), {"u": "p"}, "k")._config()
    for key, value in tested.items():
        if key.startswith(("sasl.", "listener.name.sasl_ssl.")) or key in ("ssl.keystore.type", "ssl.truststore.type"):
            assert KAFKA_PROPERTIES.get(key) == value, key


def test_kafka_storage_format_accepts_the_broker_properties_and_the_scram_user(tmp_path):
    """The kafka service's `kafka-storage.sh format` line, run with Kafka's own StorageTool (the class that script
    runs, from the tests' Kafka jars) on the service's properties with its log dir moved here."""
    from ingest_core.dev.embedded import EmbeddedKafka

    kafka = env("kafka")
    (format_line,) = [ln for ln in script_lines("kafka") if "kafka-storage.sh format" in ln]
    words = shlex.split(format_line.replace("${KAFKA_SCRAM_USER}", kafka["KAFKA_SCRAM_USER"])
                        .replace("${KAFKA_SCRAM_PASSWORD}", kafka["KAFKA_SCRAM_PASSWORD"]))
    assert words[:2] == ["/opt/kafka/bin/kafka-storage.sh", "format"]
    config = words[words.index("--config") + 1]
    (target,) = [c["target"] for c in SERVICES["kafka"]["configs"] if c["source"] == "kafka-server"]
    assert config == target
    (start,) = [ln for ln in script_lines("kafka") if "kafka-server-start.sh" in ln]
    assert start == f"exec /opt/kafka/bin/kafka-server-start.sh {config}"
    data = tmp_path / "data"
    assert mounts("kafka")[KAFKA_PROPERTIES["log.dirs"]] == "kafka-data"
    properties = tmp_path / "server.properties"
    properties.write_text("".join(f"{k}={data if k == 'log.dirs' else v}\n" for k, v in KAFKA_PROPERTIES.items()))
    tool = EmbeddedKafka(tmp_path / "kafka", jvm_options=["-XX:TieredStopAtLevel=1"])
    tool.data_dir.mkdir()
    args = [str(properties) if w == config else w for w in words[2:]]
    done = subprocess.run(tool._java_command("kafka.tools.StorageTool", "format", *args), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and (data / "meta.properties").is_file(), done.stdout + done.stderr


def test_the_certificate_service_makes_what_kafka_and_its_clients_read(tmp_path):
    """kafka-tls's script, run here with its two volumes as temporary folders: the broker's key and certificate
    where Kafka's properties read them (readable by Kafka's own user), for the host the clients connect to, issued
    by the CA the clients are given; run again, it keeps them (the running broker's certificate stays valid)."""
    from cryptography import x509

    tls_mount = mounts("kafka-tls")
    volumes = {volume: tmp_path / volume for volume in tls_mount.values()}
    assert set(volumes) == {"kafka-tls", "kafka-ca"}
    # the image makes the mount points, owned by its user: a new volume takes their owner
    dockerfile = SERVICES["kafka-tls"]["build"]["dockerfile_inline"]
    for target in tls_mount:
        assert re.search(rf"mkdir -p [^&]*{re.escape(target)}\b", dockerfile) and \
            re.search(rf"chown airflow:root [^&]*{re.escape(target)}\b", dockerfile), target
    script = "\n".join(script_lines("kafka-tls"))
    for target, volume in tls_mount.items():
        volumes[volume].mkdir()
        script = script.replace(target, str(volumes[volume]))
    assert "python -m ingest_core.dev.tls" in script
    run_env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
               "PYTHONPATH": str(ROOT)}
    made = []
    for _ in range(2):
        done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=run_env, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        made.append((volumes["kafka-ca"] / "ca.pem").read_bytes())
    assert made[0] == made[1]  # kept, not made again

    # Kafka reads the key and certificate from its mount of kafka-tls, as another user than the one that made them
    kafka_mounts = {volume: target for target, volume in mounts("kafka").items()}
    keystore = KAFKA_PROPERTIES["ssl.keystore.location"]
    assert keystore.startswith(kafka_mounts["kafka-tls"] + "/")
    server_file = volumes["kafka-tls"] / keystore.removeprefix(kafka_mounts["kafka-tls"] + "/")
    assert server_file.stat().st_mode & 0o004 and volumes["kafka-tls"].stat().st_mode & 0o005 == 0o005
    assert "kafka-tls" not in [v for name in AIRFLOW + ["spark-worker"] for v in mounts(name).values()]
    # the clients (Airflow and the Spark executors) read the CA at the path the recipe's reference gives
    ca_location = env("airflow-scheduler")["INGEST_KAFKA_CA_LOCATION"]
    for name in AIRFLOW + ["spark-worker"]:
        assert env(name)["INGEST_KAFKA_CA_LOCATION"] == ca_location, name
        assert mounts(name).get(str(Path(ca_location).parent)) == "kafka-ca", name
    ca = x509.load_pem_x509_certificate((volumes["kafka-ca"] / Path(ca_location).name).read_bytes())
    server = x509.load_pem_x509_certificates(server_file.read_bytes())[0]
    server.verify_directly_issued_by(ca)
    host = env("airflow-scheduler")["INGEST_KAFKA_BOOTSTRAP"].split(":")[0]
    names = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert host in names.get_values_for_type(x509.DNSName)
    assert server.not_valid_after_utc - server.not_valid_before_utc > datetime.timedelta(days=365)


def test_metadata_store_and_deep_storage_are_shared_where_they_must_be():
    e = env("airflow-scheduler")
    url = urlparse(e[METADATA_URL_VAR].replace("postgresql+psycopg2", "postgresql"))
    init = COMPOSE["configs"]["postgres-init"]["content"]
    assert url.hostname == "postgres" and f"CREATE DATABASE {url.path.lstrip('/')} OWNER {url.username}" in init
    assert f"CREATE USER {url.username} WITH PASSWORD '{url.password}'" in init
    airflow_db = urlparse(e["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].replace("postgresql+psycopg2", "postgresql"))
    assert f"CREATE DATABASE {airflow_db.path.lstrip('/')} OWNER {airflow_db.username}" in init
    # deep storage: the bucket the object store makes, reached with the keys it has, at its address
    deep = urlparse(e[DEEP_STORAGE_VAR])
    assert deep.scheme == "s3a"
    s3 = env("s3")
    (command,) = SERVICES["s3"]["command"]
    assert f"mkdir -p {s3['JCLOUDS_FILESYSTEM_BASEDIR']}/{deep.hostname} " in command
    assert mounts("s3")[s3["JCLOUDS_FILESYSTEM_BASEDIR"]] == "s3-data" and s3["JCLOUDS_PROVIDER"] == "filesystem"
    conn = connection(stack_spec()["microbatch"]["deepStorage"]["s3"]["connection"])
    endpoint = urlparse(conn["extra"]["endpoint_url"])
    assert endpoint.hostname == "s3" and endpoint.port == urlparse(s3["S3PROXY_ENDPOINT"]).port
    assert (conn["login"], conn["password"]) == (s3["S3PROXY_IDENTITY"], s3["S3PROXY_CREDENTIAL"])
    # the Spark driver runs in the Airflow worker and the executors on the Spark worker: both reach the same bucket
    for name in AIRFLOW + ["spark-worker"]:
        assert env(name)[DEEP_STORAGE_VAR] == e[DEEP_STORAGE_VAR], name
    # Spark reaches it through Hadoop's S3A: the image puts the jars the tests use on pyspark's classpath
    from ingest_core.dev import jars

    dockerfile = SERVICES["spark-worker"]["build"]["dockerfile_inline"]
    fetched = re.search(r"python -m ingest_core.dev.jars (\S+)", dockerfile)
    assert fetched and fetched.group(1) in jars.SETS and f"/{fetched.group(1)}/*.jar" in dockerfile
