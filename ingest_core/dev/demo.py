"""`make demo`: the main job on embedded defaults, nothing to start by hand.

1. starts an embedded Apache Kafka (KRaft, `ingest_core.dev.embedded`) and creates the `wikipedia` topic;
2. produces a wiki-edit-like stream (a time field, dimensions, numeric metrics);
3. starts a local Spark Connect server (one warm Spark for every microbatch; `--spark-submit`: a spark-submit
   per task group instead) and runs the example datasource's Airflow DAG (`dags/datasources/wikipedia.yaml`)
   for several microbatches with `airflow dags test` (no scheduler needed): plan -> Spark jobs -> publish ->
   report, with a SQLite metadata store;
4. prints what was ingested: runs, segments, rows, committed offsets and lag, and checks that every produced
   event was ingested exactly once.

Everything lives in one folder, $INGEST_HOME (default ./demo-data): the broker's data, the Airflow home, the
metadata store, deep storage and the runs' logs. Rerunning continues from there.

    python -m ingest_core.dev.demo          # the demo
    python -m ingest_core.dev.demo --ui     # the same broker and DAG in the Airflow UI, on 127.0.0.1:8080
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from ingest_core.core.spec import load_spec
from ingest_core.dev.embedded import EmbeddedKafka
from ingest_core.dev.embedded_spark import EmbeddedSparkConnect
from ingest_core.kafka.consumer_group import mirror_group, mirrored_offsets
from ingest_core.kafka.offset_reader import KafkaOffsetReader
from ingest_core.provider.dag_files import BUNDLE_CONFIG
from ingest_core.provider.preload import write_local_settings
from ingest_core.provider.recovery import recovery_env
from ingest_core.store.metadata import MetadataStore
from ingest_core.store.reader import DatasourceReader

ROOT = Path(__file__).resolve().parents[2]
TOPIC, PARTITIONS, DATASOURCE = "wikipedia", 4, "wikipedia"
CHANNELS = ["#en.wikipedia", "#de.wikipedia", "#fr.wikipedia", "#ja.wikipedia"]
PAGES = ["Apache Druid", "Apache Kafka", "Apache Spark", "Apache Airflow", "Parquet", "Exactly-once"]


def wiki_events(n: int, rng: random.Random):
    now = datetime.now(timezone.utc)
    for _ in range(n):
        added = rng.randint(0, 500)
        deleted = rng.randint(0, 200)
        yield {"time": now.isoformat().replace("+00:00", "Z"), "channel": rng.choice(CHANNELS),
               "page": rng.choice(PAGES), "user": f"user{rng.randint(1, 50)}", "namespace": "Main",
               "isRobot": int(rng.random() < 0.1), "added": added, "deleted": deleted, "delta": added - deleted}


def produce(bootstrap: str, n: int, rng: random.Random) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for event in wiki_events(n, rng):
        producer.produce(TOPIC, json.dumps(event).encode(), key=event["page"].encode())
    producer.flush(60)


def spark_connection(spark_connect_url: str | None) -> dict[str, Any]:
    """The `spark_default` connection: a Spark Connect server (`sc://host:port`), else spark-submit in local mode."""
    if spark_connect_url is None:
        return {"conn_type": "spark", "host": "local[2]"}
    host, port = spark_connect_url.removeprefix("sc://").split("/")[0].split(":")
    return {"conn_type": "spark_connect", "host": host, "port": int(port)}


def airflow_env(home: Path, bootstrap: str, *, dags_folder: Path = ROOT / "dags", metadata_url: str | None = None,
                spark_connect_url: str | None = None, **extra: str) -> dict[str, str]:
    """The environment a DAG runs in: everything under `home`, Spark local (over Spark Connect when a server
    is given), SQLite metadata by default. Tests use it too, with their own DAG folder and PostgreSQL."""
    bin_dir = str(Path(sys.executable).parent)
    return {
        **os.environ,
        "AIRFLOW_HOME": str(home / "airflow"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
        # a generated DAG file per spec, kept in step before Airflow lists files (provider/dag_files.py)
        "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": BUNDLE_CONFIG,
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps(spark_connection(spark_connect_url)),
        "INGEST_HOME": str(home / "ingest") if metadata_url else str(home),
        "INGEST_METADATA_URL": metadata_url or f"sqlite:///{home / 'metadata.db'}",
        "INGEST_DEEP_STORAGE": (home / "deep-storage").as_uri(),
        "INGEST_KAFKA_BOOTSTRAP": bootstrap,
        "PYSPARK_PYTHON": sys.executable,
        "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
        **recovery_env(),  # a task whose worker died is failed and retried in seconds (provider/recovery.py)
        # a run's lineage once a transport is set (docs/lineage.md); without one the provider stays off
        "AIRFLOW__OPENLINEAGE__EXTRACTORS": "ingest_core.provider.plugins.lineage.IngestPublishExtractor",
        **extra,
    }


def prepare(home: Path, kafka: EmbeddedKafka, spark_connect_url: str | None) -> tuple[dict[str, str], MetadataStore]:
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    if TOPIC not in admin.list_topics(timeout=10).topics:
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(timeout=30)
    env = airflow_env(home, kafka.bootstrap, spark_connect_url=spark_connect_url)
    # --ui's scheduler loads the tasks' libraries before it forks their processes (docs/spark-connect.md)
    write_local_settings(Path(env["AIRFLOW_HOME"]))
    store = MetadataStore(env["INGEST_METADATA_URL"])
    store.upgrade()
    (home / "logs").mkdir(parents=True, exist_ok=True)
    with open(home / "logs" / "airflow-db-migrate.log", "wb") as out:
        subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"], env=env, stdout=out,
                       stderr=subprocess.STDOUT, check=True)
    return env, store


def run_dag(env: dict[str, str], log_path: Path) -> float:
    started = time.monotonic()
    with open(log_path, "wb") as out:
        done = subprocess.run([str(Path(sys.executable).parent / "airflow"), "dags", "test", DATASOURCE], env=env,
                              stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        tail = log_path.read_text(errors="replace")[-3000:]
        raise SystemExit(f"the DAG run failed (exit {done.returncode}); log: {log_path}\n...{tail}")
    return time.monotonic() - started


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m ingest_core.dev.demo", description="the one-command demo")
    ap.add_argument("--runs", type=int, default=3, help="microbatches to run")
    ap.add_argument("--ui", action="store_true", help="run Airflow's components (what `airflow standalone` runs) on "
                    "the demo's broker and DAG, with the UI on http://HOST:8080")
    ap.add_argument("--host", default="127.0.0.1", help="the address the UI listens on with --ui (default "
                    "127.0.0.1: this machine only; 0.0.0.0 opens it to the network)")
    ap.add_argument("--spark-submit", action="store_true",
                    help="one spark-submit per task group instead of a local Spark Connect server")
    args = ap.parse_args(argv)
    home = Path(os.environ.get("INGEST_HOME", "demo-data")).resolve()
    home.mkdir(parents=True, exist_ok=True)
    rng = random.Random()
    with contextlib.ExitStack() as services:
        kafka = services.enter_context(EmbeddedKafka(home / "kafka"))
        connect = None if args.spark_submit else services.enter_context(EmbeddedSparkConnect(home / "spark-connect"))
        env, store = prepare(home, kafka, connect.url if connect else None)
        spark = f"Spark Connect {connect.url}" if connect else "spark-submit (local[2])"
        print(f"broker {kafka.bootstrap}; {spark}; metadata {store.safe_url}; Airflow home {env['AIRFLOW_HOME']}")
        if args.ui:
            run_ui(env, args.host, home)
            return
        os.environ["INGEST_KAFKA_BOOTSTRAP"] = kafka.bootstrap  # the example spec's bootstrap.servers
        spec = load_spec(ROOT / "dags" / "datasources" / "wikipedia.yaml")
        produced_before = _edits(store)
        produced = 0
        for i in range(args.runs):
            n = 2000 + 500 * i
            produce(kafka.bootstrap, n, rng)
            produced += n
            log_path = home / "logs" / f"run-{datetime.now(timezone.utc):%Y%m%dT%H%M%S}-{i}.log"
            seconds = run_dag(env, log_path)
            run = store.runs.recent(DATASOURCE, limit=1)[0]
            print(f"run {run.run_id}: {run.status.value}, {run.plan.records} records in {len(run.plan.groups)} "
                  f"task groups, {seconds:.0f}s (log {log_path.relative_to(home)})")
        _summary(spec, store, home, produced, produced_before)


UI_PORT = 8080


def ui_commands(host: str) -> dict[str, list[str]]:
    """What `--ui` runs: the four components `airflow standalone` runs, the api-server bound to `host`. The
    scheduler's and triggerer's log servers are left out: Airflow binds them to every interface and has no setting
    for it, and the api-server reads the task logs from this machine's files without them."""
    return {
        "api-server": ["api-server", "--host", host, "--port", str(UI_PORT)],
        "scheduler": ["scheduler", "--skip-serve-logs"],
        "dag-processor": ["dag-processor"],
        "triggerer": ["triggerer", "--skip-serve-logs"],
    }


def ui_env(env: dict[str, str], host: str) -> dict[str, str]:
    """`airflow standalone`'s settings (LocalExecutor, the simple auth manager with a generated admin password)."""
    return {**env, "AIRFLOW__CORE__EXECUTOR": "LocalExecutor", "AIRFLOW__API__HOST": host,
            "AIRFLOW__CORE__AUTH_MANAGER": "airflow.api_fastapi.auth.managers.simple.simple_auth_manager."
                                           "SimpleAuthManager"}


def run_ui(env: dict[str, str], host: str, home: Path) -> None:
    """Airflow's components until Ctrl-C, each logging to `home/logs/<component>.log`."""
    airflow = str(Path(sys.executable).parent / "airflow")
    shown = "localhost" if host == "127.0.0.1" else host
    print(f"Airflow UI: http://{shown}:{UI_PORT} (user admin, password in "
          f"{env['AIRFLOW_HOME']}/simple_auth_manager_passwords.json.generated), listening on {host} only"
          if host != "0.0.0.0" else f"Airflow UI: http://<this machine>:{UI_PORT}, open to the network")
    print(f"running: {', '.join(ui_commands(host))} (LocalExecutor; logs in {home / 'logs'}). The scheduler runs "
          f"the {DATASOURCE} DAG on its schedule: suspend it with `ingest suspend {DATASOURCE}` or pause it in the UI. "
          "Ctrl-C stops everything.")
    procs: list[subprocess.Popen] = []
    try:
        for name, args in ui_commands(host).items():
            log = open(home / "logs" / f"{name}.log", "ab")  # noqa: SIM115 - held open for the process's life
            procs.append(subprocess.Popen([airflow, *args], env=ui_env(env, host), stdout=log,
                                          stderr=subprocess.STDOUT))
        while all(p.poll() is None for p in procs):
            time.sleep(1)
        failed = [name for name, p in zip(ui_commands(host), procs) if p.poll() is not None]
        raise SystemExit(f"Airflow's {', '.join(failed)} exited; see {home / 'logs'}")
    except KeyboardInterrupt:
        pass
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()


def cli_lines(home: Path, cwd: Path) -> list[str]:
    """The `ingest` commands that look at the demo's data afterwards, paths as short as they can be from `cwd`
    (the README shows them for the default: run from the repository, INGEST_HOME=demo-data)."""
    def short(path: Path) -> str:
        return str(path.relative_to(cwd)) if path.is_relative_to(cwd) else str(path)

    ingest = short(Path(sys.executable).parent / "ingest")
    return [f"INGEST_HOME={short(home)} {ingest} {command} {DATASOURCE}" for command in ("status", "segments")]


def _edits(store: MetadataStore) -> int:
    table = DatasourceReader(store, DATASOURCE).to_arrow()
    return sum(v for v in table.column("edits").to_pylist() if v) if "edits" in table.column_names else 0


def _summary(spec, store: MetadataStore, home: Path, produced: int, before: int) -> None:
    segments = DatasourceReader(store, DATASOURCE).segments()
    table = DatasourceReader(store, DATASOURCE).to_arrow()
    edits = _edits(store)
    reader = KafkaOffsetReader.for_spec(spec)
    try:
        latest = reader.latest(reader.partitions(topic=TOPIC))
    finally:
        reader.close()
    committed = store.offsets.committed(DATASOURCE)
    lag = {tp: off - (committed[tp].offset if tp in committed else 0) for tp, off in latest.items()}
    print(f"\nsegments: {len(segments)} visible, {sum(s.num_rows for s in segments)} rows "
          f"({len({s.interval_start for s in segments})} hourly intervals)")
    for s in segments[-4:]:
        print(f"  {s.id}: {s.num_rows} rows, {s.size_bytes} bytes")
    print(f"rows: {table.num_rows} rolled-up rows holding {edits} edits")
    print("offsets: " + ", ".join(f"{tp}: committed {committed[tp].offset if tp in committed else '-'}, "
                                  f"lag {lag[tp]}" for tp in sorted(latest)))
    print(f"aggregate lag {sum(lag.values())}")
    group = mirror_group(spec)
    if group is not None:
        same = mirrored_offsets(spec, sorted(latest)) == {tp: k.offset for tp, k in committed.items()}
        print(f"Kafka consumer group {group}: " + ("the committed offsets (kafka-consumer-groups.sh --describe "
                                                   f"--group {group} shows this lag)" if same else "not mirrored yet"))
    ingested = edits - before
    verdict = "exactly once" if ingested == produced else "MISMATCH"
    print(f"this demo produced {produced} events and ingested {ingested}: {verdict}")
    print(f"data in {home}; the ingest CLI reads it with INGEST_HOME set (its default is ./.ingest-home):")
    for line in cli_lines(home, Path.cwd()):
        print(f"  {line}")
    if ingested != produced:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
