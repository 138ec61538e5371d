"""Runs under a real scheduler (`airflow standalone`'s components), triggered and timed to success."""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from pathlib import Path
from typing import Any

from harness.fixed_cost_setup import AIRFLOW, bench_env, check_run, to_epoch, tree_cpu, write_dags
from ingest_core.dev.embedded import free_port, stop_group
from ingest_core.dev.embedded_spark import EmbeddedSparkConnect
from ingest_core.provider.preload import write_local_settings
from ingest_core.store.metadata import MetadataStore


class Standalone:
    """`airflow standalone` (LocalExecutor) with its DB on PostgreSQL, as tests/system/test_scheduler.py's harness
    (not imported: that module needs pytest and the tests' conftest)."""

    SPEC_BUNDLE = False  # True: the product's bundle (a DAG file per spec), not Airflow's plain folder

    def __init__(self, root: Path, bootstrap: str, connect: EmbeddedSparkConnect, topics: dict[str, str],
                 task_count: int, airflow_db_url: str, metadata_url: str, preload: bool = True):
        self.dag_ids = write_dags(root / "dags", "fs", topics, task_count)
        self.start(root, bootstrap, root / "dags", connect.url, airflow_db_url, metadata_url, preload=preload)

    def start(self, root: Path, bootstrap: str, dags: Path, connect_url: str, airflow_db_url: str,
              metadata_url: str, preload: bool = True, **airflow_conf: str) -> None:
        """`airflow standalone` over the DAG folder `dags` (benchmarks/freshness.py brings its own); `airflow_conf`:
        more AIRFLOW__SECTION__KEY settings, over these. `preload`: the scheduler loads the tasks' libraries before
        it forks their processes, as docs/spark-connect.md recommends."""
        import sqlalchemy as sa

        port = free_port()
        self.root = root
        self.base = f"http://localhost:{port}"
        self.env = bench_env(
            root, bootstrap, dags, connect_url, spec_bundle=self.SPEC_BUNDLE, metadata_url=metadata_url, **{
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": airflow_db_url, "AIRFLOW__CORE__PARALLELISM": "4",
                "AIRFLOW__API__PORT": str(port), "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.base}/execution/",
                # the scheduler's and triggerer's log servers on ports of their own: another Airflow on this machine
                # holds the defaults (8793, 8794)
                "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
                "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
                "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1", "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "3",
                "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "3",
                # a task's supervisor gives up on the api-server after 5 s by default: a loaded machine exceeds that
                "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "60", "BENCH_TRIGGERED_ONLY": "1", **airflow_conf})
        if preload:
            write_local_settings(Path(self.env["AIRFLOW_HOME"]))
        # pre-ping: a connection the database dropped (a restart) is replaced, not handed out
        self.db = sa.create_engine(airflow_db_url.replace("+asyncpg", ""), pool_pre_ping=True)
        self.store = MetadataStore(metadata_url)
        self.store.upgrade()
        self.airflow("db", "migrate")
        self.launch()

    def launch(self) -> None:
        """Airflow's components: `airflow standalone`, all four in one process (benchmarks/harness/
        scheduler_soak.py runs each on its own, started again when it exits)."""
        self.log = open(self.root / "standalone.log", "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen([AIRFLOW, "standalone"], env=self.env, stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def exited(self) -> bool:
        return self.proc.poll() is not None

    def cpu(self) -> float:
        """CPU-s so far of Airflow's side: the standalone process tree (scheduler, dag-processor, triggerer,
        api-server and every task process the executor ran, with what its exited children used)."""
        return tree_cpu(self.proc.pid)

    def wait_healthy(self, timeout: float = 300) -> None:
        import urllib.request

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError, ValueError):
                with urllib.request.urlopen(f"{self.base}/api/v2/monitor/health", timeout=5) as r:
                    health = json.load(r)
                if all(health.get(k, {}).get("status") == "healthy" for k in ("scheduler", "dag_processor")):
                    return
            if self.exited():
                break
            time.sleep(1)
        raise SystemExit(f"airflow standalone did not become healthy; see {self.root / 'standalone.log'}")

    def airflow(self, *args: str) -> None:
        done = subprocess.run([AIRFLOW, *args], env=self.env, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise SystemExit(f"airflow {' '.join(args)}: {done.stdout[-3000:]}{done.stderr[-3000:]}")

    def query(self, sql: str, **params: Any) -> list[Any]:
        import sqlalchemy as sa

        with self.db.connect() as conn:
            return list(conn.execute(sa.text(sql), params))

    def wait_parsed(self, dag_ids: list[str], timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if set(dag_ids) <= {r[0] for r in self.query("SELECT dag_id FROM dag")}:
                return
            time.sleep(1)
        raise SystemExit(f"the DAGs were not parsed in {timeout}s; see {self.root / 'standalone.log'}")

    def wait_idle(self, timeout: float = 600) -> None:
        """Until the DAGs are parsed and no run is queued or running (the benchmark's DAG file gives the ingest
        DAGs no schedule under the scheduler: every run is one it triggers)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            parsed = {r[0] for r in self.query("SELECT dag_id FROM dag")}
            runs = self.query("SELECT dag_id, state FROM dag_run")
            if set(self.dag_ids.values()) <= parsed and not any(s in ("queued", "running") for _, s in runs):
                return
            time.sleep(1)
        raise SystemExit(f"the DAGs did not settle in {timeout}s; see {self.root / 'standalone.log'}")

    def trigger(self, mode: str, name: str, records: int, timeout: float = 900) -> dict[str, Any]:
        """`airflow dags trigger` with a run id, then poll Airflow's DB until that run succeeds."""
        dag_id = self.dag_ids[mode]
        t0, cpu0 = time.time(), self.cpu()
        self.airflow("dags", "trigger", dag_id, "--run-id", name)
        t_cli = time.time()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            rows = self.query("SELECT state, queued_at, start_date, end_date FROM dag_run "
                              "WHERE dag_id = :d AND run_id = :r", d=dag_id, r=name)
            if rows and rows[0][0] == "success":
                t_seen, cpu = time.time(), self.cpu() - cpu0
                break
            if rows and rows[0][0] == "failed":
                raise SystemExit(f"scheduler run {name} of {dag_id} failed; see {self.root}")
            time.sleep(0.2)
        else:
            raise SystemExit(f"scheduler run {name} of {dag_id} did not finish in {timeout}s")
        _, queued, start, end = rows[0]
        tasks = self.query("SELECT task_id, map_index, start_date, end_date FROM task_instance "
                           "WHERE dag_id = :d AND run_id = :r AND state != 'skipped' ORDER BY start_date",
                           d=dag_id, r=name)
        if mode != "floor":
            check_run(self.store, dag_id, name, records)
        end_e = to_epoch(end)
        return {"mode": mode, "name": name, "wall": end_e - t0, "polled": t_seen - t0, "cli": t_cli - t0,
                "queued_to_start": to_epoch(start) - to_epoch(queued), "run": end_e - to_epoch(start),
                "tasks": {f"{t}" if m < 0 else f"{t}[{m}]": to_epoch(e) - to_epoch(s) for t, m, s, e in tasks},
                # the task processes the run started (a skipped task starts none) and Airflow's CPU over the run
                "processes": len(tasks), "airflow_cpu": cpu}

    def stop(self) -> None:
        stop_group(self.proc, 60)
        self.log.close()
        self.db.dispose()
