"""DAG runs the soak starts (`airflow dags test` in a process group of its own), watched for milestones and killed."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from datetime import timedelta
from typing import TYPE_CHECKING

import psutil

from harness.soak_constants import AIRFLOW, BASE_LOGICAL_DATE, DATASOURCE, log
from harness.soak_report import RunResult
from ingest_core.store.records import RunStatus

if TYPE_CHECKING:  # the soak starts the runs
    from harness.soak import Soak


# The REST API's `PATCH /api/v2/dags/{dag}/dagRuns/{run} {"state": "failed"}`, its own service function, run
# against Airflow's database in this Airflow home (no api-server runs beside `airflow dags test`). It imports
# Airflow first and says "ready", then marks the run it reads from stdin, only while that run is running.
MARK_FAILED = """
import sys
from sqlalchemy import select
from airflow.api_fastapi.core_api.datamodels.dag_run import DagRunMutableStates
from airflow.api_fastapi.core_api.services.public.dag_run import patch_dag_run_state
from airflow.models.dagbag import DBDagBag
from airflow.models.dagrun import DagRun
from airflow.utils.session import create_session

print("ready", flush=True)
dag_id, run_id = sys.stdin.readline().split()
with create_session() as session:
    dag_run = session.scalar(select(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id))
    if dag_run is None or dag_run.state != "running":
        print("not marked: the run is", dag_run and dag_run.state, flush=True)
        sys.exit(3)
    dag = DBDagBag().get_dag_for_run(dag_run, session=session)
    patch_dag_run_state(dag=dag, dag_run=dag_run, state=DagRunMutableStates.FAILED, session=session)
    print("marked failed while running", flush=True)
"""


# ------------------------------------------------------------------------------------------------ a DAG run

class DagTest:
    """One `airflow dags test` in its own process group. Milestones are observed in its output (its task
    starts), in the metadata store (its plan, its publish) and in its process tree (Spark)."""

    RUN_ID = re.compile(r"<TaskInstance: \S+ (manual__\S+)")

    def __init__(self, soak: "Soak", label: str, iteration: int | None, fault: str):
        self.soak, self.label, self.iteration, self.fault = soak, label, iteration, fault
        soak.logical_dates += 1
        self.logical_date = BASE_LOGICAL_DATE + timedelta(minutes=soak.logical_dates)
        self.log_path = soak.out / "logs" / f"{soak.logical_dates:03d}-{label.replace(' ', '-')}.log"
        self.run_id: str | None = None
        self.events: set[str] = {"started"}
        self.killed = False
        self.started = time.monotonic()
        self.proc = subprocess.Popen([AIRFLOW, "dags", "test", DATASOURCE, self.logical_date.isoformat()],
                                     env=soak.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     start_new_session=True, text=True, errors="replace")
        soak.processes.append(self.proc)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        with open(self.log_path, "w") as out:
            for line in self.proc.stdout:
                out.write(line)
                out.flush()
                if self.run_id is None and (m := self.RUN_ID.search(line)):
                    self.run_id = m.group(1)
                if "[DAG TEST] starting task_id=publish" in line:
                    self.events.add("publish")
                if "[DAG TEST] starting task_id=spark_job" in line and self.soak.connect is not None:
                    self.events.add("spark")

    def _spark_tree(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.Error:
            return []

    @staticmethod
    def _cmdline(p: psutil.Process) -> str:
        try:
            return " ".join(p.cmdline())
        except psutil.Error:
            return ""

    def spark_jvms(self) -> list[psutil.Process]:
        return [p for p in self._spark_tree() if "org.apache.spark.deploy.SparkSubmit" in self._cmdline(p)]

    def reached(self, milestone: str) -> bool:
        if milestone in self.events:
            return True
        if milestone in ("planned", "published") and self.run_id:
            run = self.soak.store.runs.get(DATASOURCE, self.run_id)
            if run is not None and (milestone == "planned" or run.status is RunStatus.PUBLISHED):
                self.events.add(milestone)
        elif milestone == "spark" and self.spark_jvms():
            self.events.add(milestone)
        elif milestone == "reading" and self.soak.connect is not None and self.run_id:
            if self.soak.progress_reported(self.run_id):
                self.events.add(milestone)
        elif milestone == "reading" and any("pyspark.daemon" in self._cmdline(p) or "pyspark.worker" in
                                            self._cmdline(p) for p in self._spark_tree()):
            self.events.add(milestone)
        return milestone in self.events

    def wait_for(self, milestone: str, timeout: float) -> bool:
        """True once the run reached `milestone`; False when it ended (or the timeout passed) first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.reached(milestone):
                return True
            if self.proc.poll() is not None:
                return self.reached(milestone)
            time.sleep(0.1)
        return False

    def kill(self) -> None:
        """SIGKILL the whole process group: `airflow dags test`, its task runners, spark-submit and Spark."""
        self.killed = True
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(30)

    def wait(self, timeout: float) -> RunResult:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            log(f"  {self.label} still running after {timeout:.0f}s: killed")
            self.kill()
            self.killed = False  # not a fault the soak injected: a run that did not end
        self._reader.join(30)
        result = RunResult(self.label, self.iteration, self.fault, self.run_id, self.proc.returncode,
                           round(time.monotonic() - self.started, 1), self.killed, str(self.log_path))
        self.soak.report.runs.append(result)
        return result


def kill_tree(root: psutil.Process) -> int:
    """SIGKILL a process and everything under it, all at once (no parent left to notice and respawn)."""
    procs = [root]
    try:
        procs += root.children(recursive=True)
    except psutil.Error:
        pass
    for p in procs:
        try:
            p.send_signal(signal.SIGKILL)
        except psutil.Error:
            pass
    return len(procs)
