"""The cluster shape, proven on one machine: Spark as a standalone cluster (a master and a worker, from the pip
pyspark) that the DAGs reach over Spark Connect and through spark-submit, and Airflow as a cluster runs it
(CeleryExecutor with Redis as Celery's broker, the scheduler, dag-processor, api-server and a Celery worker as
separate processes). Every run ingests each produced record exactly once; the executors ran on the Spark
worker, and the tasks on the Celery worker."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
from conftest import postgres_database
from test_dag import (
    ROOT,
    AirflowHome,
    broker_watermarks,
    edits,
    produce_events,
    write_example_variant,
)
from test_scheduler import Standalone

from ingest_core.dev.celery_airflow import celery_settings, celery_worker
from ingest_core.dev.embedded import EmbeddedRedis
from ingest_core.dev.embedded_spark import EmbeddedSparkConnect, EmbeddedSparkStandalone
from ingest_core.store.metadata import MetadataStore
from ingest_core.store.records import RunStatus

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]

JIT = os.environ.get("SPARK_SUBMIT_OPTS", "")  # conftest holds every test JVM at C1: the executors too
# Each application gets one of the worker's two cores and a small executor, so the module's Connect server
# (an application for as long as it runs) and a spark-submit job share the worker instead of queueing.
APP_CONF = {"spark.cores.max": "1", "spark.executor.memory": "512m", "spark.executor.extraJavaOptions": JIT}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with EmbeddedSparkStandalone(tmp_path_factory.mktemp("spark-standalone"), cores=2, memory="2g",
                                 jvm_options=JIT) as spark:
        yield spark


@pytest.fixture(scope="module")
def cluster_connect(tmp_path_factory, cluster):
    """A Spark Connect server whose executors run on the standalone cluster's worker."""
    with EmbeddedSparkConnect(tmp_path_factory.mktemp("spark-connect-cluster"), master=cluster.url,
                              driver_memory="1g", conf=APP_CONF, warm_up=False) as server:  # the tests' time
        yield server


@pytest.fixture(scope="module")
def metadata_url():
    with postgres_database("ingest_cluster") as url:
        yield url


def airflow_home(root: Path, broker, metadata_url: str, cluster_connect) -> AirflowHome:
    """An Airflow home whose spark_default is the cluster's Connect server (a run may override it)."""
    (root / "dags" / "specs").mkdir(parents=True)
    shutil.copy(ROOT / "dags" / "ingest_datasources.py", root / "dags" / "ingest_datasources.py")
    return AirflowHome(root, root / "dags", broker.bootstrap, metadata_url, cluster_connect.url)


def app(cluster: EmbeddedSparkStandalone, name: str) -> dict:
    """The newest of the cluster's applications (active or completed) whose name has `name` in it."""
    status = cluster.status()
    apps = [a for a in status["activeapps"] + status["completedapps"] if name in a["name"]]
    assert apps, f"no application {name!r} on {cluster.url}: {status}"
    return max(apps, key=lambda a: a["starttime"])


def tasks_run_on_worker(cluster: EmbeddedSparkStandalone, app_id: str) -> int:
    """Spark tasks the worker's executors of that application finished, from their own logs."""
    logs = cluster.worker_dir.glob(f"{app_id}/*/stderr")
    return sum(log.read_text(errors="replace").count("Finished task") for log in logs)


def assert_exactly_once(store: MetadataStore, broker, datasource: str, topic: str, produced: int) -> None:
    assert edits(store, datasource) == produced
    runs = store.runs.recent(datasource)
    assert runs and all(r.status is RunStatus.PUBLISHED for r in runs)
    assert sum(r.plan.records for r in runs) == produced
    committed = {tp.partition: k.offset for tp, k in store.offsets.committed(datasource).items()}
    assert committed == {p: hi for p, (lo, hi) in broker_watermarks(broker, topic).items()}


def a_dag_over_spark_connect_runs_its_executors_on_the_standalone_worker(home, broker, cluster) -> None:
    topic = broker.create_topic(partitions=4)
    write_example_variant(home.dags_folder, "on_cluster_connect", topic)  # two task groups
    server = app(cluster, "ingest Spark Connect server")
    assert server["state"] == "RUNNING" and server["cores"] == 1
    before = tasks_run_on_worker(cluster, server["id"])
    produce_events(broker.bootstrap, topic, 400, seed=11)
    home.dags_test("on_cluster_connect", "2026-01-01T00:00:00+00:00")
    assert_exactly_once(MetadataStore(home.metadata_url), broker, "on_cluster_connect", topic, 400)
    assert tasks_run_on_worker(cluster, server["id"]) > before  # the driver runs none: standalone has no local


def a_dag_through_spark_submit_in_client_mode_runs_on_the_standalone_cluster(home, broker, cluster) -> None:
    topic = broker.create_topic(partitions=2)
    write_example_variant(home.dags_folder, "on_cluster_submit", topic, taskCount=1,
                          microbatch={"spark": {"conf": APP_CONF}})
    produce_events(broker.bootstrap, topic, 250, seed=12)
    spark_submit = {"conn_type": "spark", "host": cluster.url, "extra": {"deploy-mode": "client"}}
    home.dags_test("on_cluster_submit", "2026-01-01T00:00:00+00:00",
                   env={**home.env, "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps(spark_submit)})
    assert_exactly_once(MetadataStore(home.metadata_url), broker, "on_cluster_submit", topic, 250)
    job = app(cluster, "on_cluster_submit")  # the driver ran in the task, the executors on the worker
    assert job["state"] == "FINISHED"
    assert tasks_run_on_worker(cluster, job["id"]) > 0


class CeleryAirflow(Standalone):
    """Airflow as a cluster runs it: the CeleryExecutor with Redis as Celery's broker, and the scheduler,
    dag-processor, api-server (the workers' execution API) and a Celery worker as separate processes, all on
    Airflow's database on PostgreSQL. The worker keeps its task logs in a folder of its own, as on a machine
    of its own: a task's log there was written where the task ran. Polls the REST API (a CLI call costs
    seconds of imports)."""

    EXTRA_DAGS: dict[str, str] = {}

    def __init__(self, root: Path, bootstrap: str, metadata_url: str, airflow_db_url: str, broker_url: str,
                 spark_connect_url: str, specs: dict[str, str] | None = None):
        """`specs`: {name: text} of spec files in the DAG folder from the start (parsed as Airflow starts)."""
        self.worker_logs = root / "worker-logs"
        self.EXTRA_DAGS = {**self.EXTRA_DAGS, **{f"specs/{name}": text for name, text in (specs or {}).items()}}
        super().__init__(
            root, bootstrap, metadata_url, airflow_db_url, spark_connect_url,
            **celery_settings(broker_url, airflow_db_url))

    def processes(self) -> dict[str, tuple[list[str], dict[str, str]]]:
        return {"api-server": (["api-server"], {}), "scheduler": (["scheduler"], {}),
                "dag-processor": (["dag-processor"], {}),
                "celery-worker": celery_worker("ingest-worker", self.worker_logs)}

    def wait_until_ready(self, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        super().wait_until_ready(timeout)
        while " ready." not in (log := self.worker_log()):
            assert self.procs["celery-worker"].poll() is None, f"the Celery worker exited: {log[-3000:]}"
            assert time.monotonic() < deadline, f"the Celery worker was not ready in {timeout}s: {log[-3000:]}"
            time.sleep(1)
        self.api_token = self.token()

    def worker_log(self) -> str:
        return (self.root / "celery-worker.log").read_text(errors="replace")

    def get(self, path: str) -> tuple[int, dict | str]:
        return self.http("GET", f"/api/v2{path}", self.api_token)

    def wait_for_dag(self, dag_id: str, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while (found := self.get(f"/dags/{dag_id}"))[0] != 200:
            assert time.monotonic() < deadline, f"DAG {dag_id} was not parsed in {timeout}s: {found}"
            time.sleep(1)

    def wait_for_run(self, dag_id: str, run_id: str, timeout: float = 480) -> None:
        deadline = time.monotonic() + timeout
        while True:
            _, run = self.get(f"/dags/{dag_id}/dagRuns/{run_id}")
            state = run.get("state") if isinstance(run, dict) else None
            if state == "success":
                return
            assert state != "failed", f"run {run_id} failed: {self.task_instances(dag_id, run_id)}"
            assert time.monotonic() < deadline, f"run {run_id} did not succeed in {timeout}s: {run}"
            time.sleep(2)

    def task_instances(self, dag_id: str, run_id: str) -> list[dict]:
        status, body = self.get(f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances")
        assert status == 200, body
        return body["task_instances"]


WORKLOAD = re.compile(r"Executing workload in Celery: .* log_path='([^']+)' ti=TaskInstanceDTO\(.*? task_id='([^']+)', "
                      r"dag_id='([^']+)', run_id='([^']+)', .*? map_index=(-?\d+),")


@pytest.mark.timeout(1200)  # eight processes to start and three DAG runs: on a loaded 2-core machine, minutes
def test_dags_over_spark_connect_through_spark_submit_and_under_celery_run_on_the_cluster(
        tmp_path, broker, metadata_url, cluster, cluster_connect):
    """Three runs on the cluster: a DAG over Spark Connect and one through spark-submit (`airflow dags test`, an
    Airflow home each, at once: the Connect server and a spark-submit job are applications of their own), while
    the CeleryExecutor's Airflow starts (minutes of processes that mostly wait); then its triggered run, alone on
    the Connect server, so that the worker's tasks it counts are its own."""
    from concurrent.futures import ThreadPoolExecutor

    topic = broker.create_topic(partitions=4)
    produce_events(broker.bootstrap, topic, 300, seed=13)
    # the triggered run's DAG is in the Celery Airflow's folder from its start: parsed while the DAG tests run.
    # Two task groups; starting now, daily: the scheduler starts no run of its own, only the triggered one
    celery_specs = tmp_path / "celery-specs"
    (celery_specs / "specs").mkdir(parents=True)
    now = datetime.now(timezone.utc).replace(microsecond=0).isoformat()
    write_example_variant(celery_specs, "on_celery", topic, {"schedule": "P1D", "startDate": now}, taskCount=2)
    with postgres_database("ingest_celery") as celery_metadata_url, \
            postgres_database("airflow_celery") as airflow_db_url, EmbeddedRedis(tmp_path / "redis") as redis, \
            ThreadPoolExecutor(3) as pool:
        starting = pool.submit(CeleryAirflow, tmp_path / "celery", broker.bootstrap, celery_metadata_url,
                               airflow_db_url, redis.url, cluster_connect.url,
                               {"on_celery.yaml": (celery_specs / "specs" / "on_celery.yaml").read_text()})
        airflow = None
        try:
            scenarios = {"connect": a_dag_over_spark_connect_runs_its_executors_on_the_standalone_worker,
                         "submit": a_dag_through_spark_submit_in_client_mode_runs_on_the_standalone_cluster}
            dag_tests = [pool.submit(scenario, airflow_home(tmp_path / name, broker, metadata_url, cluster_connect),
                                     broker, cluster) for name, scenario in scenarios.items()]
            for dag_test in dag_tests:
                dag_test.result()
            airflow = starting.result()
            instances, runs, server, before = a_triggered_run_under_celery(airflow, cluster)
        finally:
            if airflow is None:
                with contextlib.suppress(Exception):  # (one that did not start stopped itself)
                    airflow = starting.result()
            if airflow is not None:
                airflow.stop()
        assert [r["dag_run_id"] for r in runs] == ["triggered"]
        assert_exactly_once(MetadataStore(celery_metadata_url), broker, "on_celery", topic, 300)

    # (the run continues from no other: the plan task skipped replan and its jobs, which ran nowhere)
    assert sorted((ti["task_id"], ti["map_index"], ti["state"]) for ti in instances) == [
        ("plan", -1, "success"), ("publish", -1, "success"), ("replan", -1, "skipped"),
        ("replanned_job", -1, "skipped"), ("report", -1, "success"), ("spark_job", 0, "success"),
        ("spark_job", 1, "success")]
    ran = [ti for ti in instances if ti["state"] != "skipped"]
    assert all(ti["queue"] == "default" for ti in ran), instances
    # the Celery worker took each task from Redis (every try), ran it and wrote its log in its own log folder;
    # the other Airflow processes ran none
    received = [m.groups() for m in WORKLOAD.finditer(airflow.worker_log())]
    assert {(dag, run) for _, _, dag, run, _ in received} == {("on_celery", "triggered")}
    assert {(task, int(index)) for _, task, _, _, index in received} == {
        (ti["task_id"], ti["map_index"]) for ti in ran}
    assert all((airflow.worker_logs / log_path).is_file() for log_path, *_ in received)
    assert not (Path(airflow.env["AIRFLOW_HOME"]) / "logs" / "dag_id=on_celery").exists()
    # the spark_job tasks ran their Spark jobs on the standalone cluster's worker, through the Connect server
    assert tasks_run_on_worker(cluster, server["id"]) > before


def a_triggered_run_under_celery(airflow: CeleryAirflow, cluster):
    """A run of the DAG on_celery (its spec in the folder since Airflow started), once parsed, triggered through
    the REST API as the UI does (`airflow dags trigger` would add a process of seconds of imports) and waited for:
    (its task instances, the DAG's runs, the Connect server's application, the tasks the worker had run for it
    before)."""
    airflow.wait_for_dag("on_celery")
    server = app(cluster, "ingest Spark Connect server")
    before = tasks_run_on_worker(cluster, server["id"])
    status, body = airflow.http("POST", "/api/v2/dags/on_celery/dagRuns", airflow.api_token,
                                {"dag_run_id": "triggered", "logical_date": None})
    assert status == 200, body
    airflow.wait_for_run("on_celery", "triggered")
    return (airflow.task_instances("on_celery", "triggered"), airflow.get("/dags/on_celery/dagRuns")[1]["dag_runs"],
            server, before)
