"""Spark servers for tests, benchmarks and the demo (see `embedded`): `EmbeddedSparkConnect`, the pip pyspark's
Spark Connect server (local[N], or against a cluster's master); `EmbeddedSparkStandalone`, a Spark standalone
cluster (a master and one worker) from the pip pyspark."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from ingest_core.dev import jars
from ingest_core.dev.embedded import EmbeddedServer, free_port, stop_group


def _spark_script(name: str) -> str:
    """A script of the pip pyspark (`spark-submit`, `spark-class`): the one beside this interpreter first."""
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else name


class EmbeddedSparkConnect(EmbeddedServer):
    """A local Spark Connect server (the pip pyspark's own, local[N]) on a free port: the warm Spark that
    microbatches connect to instead of starting a JVM each. Its Python workers run this interpreter, so they
    import this project as the client does."""

    term_wait = 30
    MAIN_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"

    def __init__(self, work_dir: str | Path, port: int | None = None, master: str = "local[2]",
                 driver_memory: str = "2g", conf: dict[str, str] | None = None, jar_sets: tuple[str, ...] = (), warm_up: bool = True):
        self.work_dir = Path(work_dir)
        self.jar_sets = jar_sets  # `ingest_core.dev.jars` sets on the server's classpath, e.g. "spark-s3"
        self.port = port or free_port()
        self.master = master
        self.driver_memory = driver_memory
        self.conf = dict(conf or {})
        self.url = f"sc://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.warm_up = warm_up
        self.up_s: float | None = None  # the last start's seconds until the server accepted sessions
        self.warmed_s: float | None = None  # then its warm-up's (None: none, or it failed)

    @property
    def log_path(self) -> Path:
        return self.work_dir / "spark-connect.log"

    def command(self) -> list[str]:
        conf = {"spark.connect.grpc.binding.address": "127.0.0.1", "spark.connect.grpc.binding.port": str(self.port),
                "spark.sql.session.timeZone": "UTC", "spark.ui.enabled": "false",
                "spark.local.dir": str(self.work_dir / "tmp"),
                # a datasource's session must outlive the pause between its runs: a closed one cannot be reopened,
                # and the Python workers Spark started for it stay behind (SPARK-54055)
                "spark.connect.session.manager.defaultSessionTimeout": "7d",
                # workers fork from a daemon that has the job's libraries loaded (docs/spark-connect.md)
                "spark.python.daemon.module": "spark_jobs.python_daemon",
                # a static setting the clients read: no Python call site recorded per DataFrame call
                "spark.python.sql.dataFrameDebugging.enabled": "false", **self.conf}
        args = [_spark_script("spark-submit"), "--class", self.MAIN_CLASS,
                "--name", "ingest Spark Connect server", "--master", self.master, "--driver-memory", self.driver_memory]
        for key, value in conf.items():
            args += ["--conf", f"{key}={value}"]
        if self.jar_sets:
            args += ["--jars", ",".join(str(p) for name in self.jar_sets for p in jars.ensure(name))]
        return [*args, "spark-internal"]

    def start(self, timeout: float = 180) -> "EmbeddedSparkConnect":
        self.work_dir.mkdir(parents=True, exist_ok=True)
        # SPARK_LOCAL_IP: the driver's and block manager's ports on this machine only, like the Connect port
        env = {**os.environ, "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
               "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1")}
        # the Connect client's mode (pyspark's flag in this process's environment while a remote session runs,
        # `spark.connect.connect_mode`) is not the server's: its Python workers run classic pyspark
        env.pop("SPARK_CONNECT_MODE_ENABLED", None)
        with open(self.log_path, "ab") as out:
            logged = out.tell()  # a restart appends: only what this start logs tells it is up
            self.proc = subprocess.Popen(self.command(), stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with open(self.log_path, "rb") as f:
                f.seek(logged)
                started = b"Spark Connect server started at" in f.read()
            if self.proc.poll() is not None:
                self.proc = None
                raise RuntimeError(f"the Spark Connect server exited at start: {self.log_path.read_text()[-3000:]}")
            if started:
                self.up_s = timeout - (deadline - time.monotonic())
                if self.warm_up:
                    self._warm_up(max(deadline - time.monotonic(), 60))
                return self
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"the Spark Connect server on port {self.port} did not start in {timeout}s "
                           f"(log: {self.log_path})")

    def _warm_up(self, timeout: float) -> None:
        """The warm-up job (`ingest_core.spark.warmup`), in a Python of its own as a deployment runs it: a Connect
        client switches pyspark's mode for its whole process. It only saves the first job's time: one that fails
        or is still running at `timeout` leaves the server as it is (serving), said in the server's log folder."""
        env = {k: v for k, v in os.environ.items() if k != "SPARK_CONNECT_MODE_ENABLED"}
        started, self.warmed_s = time.monotonic(), None
        with open(self.work_dir / "warm-up.log", "ab") as out:
            proc = subprocess.Popen([sys.executable, "-m", "ingest_core.spark.warmup", self.url, "--timeout", "60"],
                                    stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        try:
            if proc.wait(timeout) == 0:
                self.warmed_s = time.monotonic() - started
                return
            why = f"it failed (exit {proc.returncode})"
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            why = f"it did not end in {timeout:.0f} s"
        print(f"the Spark Connect server on port {self.port} serves without its warm-up: {why}; see "
              f"{self.work_dir / 'warm-up.log'}", file=sys.stderr)

    def kill(self) -> None:
        """A crash: SIGKILL the server's whole process group (the JVM and its Python workers at once)."""
        stop_group(self.proc, 5, signal.SIGKILL)
        self.proc = None


class EmbeddedSparkStandalone(EmbeddedServer):
    """A Spark standalone cluster from the pip pyspark: a master and one worker (`spark-class ...Master` and
    `...Worker`) on free ports of 127.0.0.1, their logs and the worker's work dir under `work_dir`. `url` is the
    master (`spark://127.0.0.1:P`) to give Spark Connect or spark-submit; `status()` is the master's view of
    workers and applications. The worker launches each application's executors in its work dir
    (`worker/app-*/<executor id>/stderr`), in its own process group, so `stop()` ends them too. They inherit
    this environment (PYTHONPATH; PYSPARK_PYTHON, this interpreter unless set), so their Python workers import
    this project as the driver does."""

    MASTER = "org.apache.spark.deploy.master.Master"
    WORKER = "org.apache.spark.deploy.worker.Worker"

    def __init__(self, work_dir: str | Path, cores: int = 1, memory: str = "1g", daemon_memory: str = "256m",
                 jvm_options: str | None = None):
        self.work_dir = Path(work_dir)
        self.cores, self.memory, self.daemon_memory = cores, memory, daemon_memory
        self.jvm_options = jvm_options  # the master's and worker's (SPARK_DAEMON_JAVA_OPTS), not the executors'
        self.port, self.webui_port = free_port(), free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.web_url = f"http://127.0.0.1:{self.webui_port}"
        self.master: subprocess.Popen | None = None
        self.worker: subprocess.Popen | None = None

    @property
    def worker_dir(self) -> Path:
        return self.work_dir / "worker"

    def _start(self, name: str, *args: str) -> subprocess.Popen:
        env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_DAEMON_MEMORY": self.daemon_memory,
               "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable)}
        if self.jvm_options:
            env["SPARK_DAEMON_JAVA_OPTS"] = self.jvm_options
        with open(self.work_dir / f"{name}.log", "ab") as out:
            return subprocess.Popen([_spark_script("spark-class"), *args], stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=env, cwd=self.work_dir, start_new_session=True)

    def status(self) -> dict:
        """The master's JSON: its workers, active and completed applications."""
        with urllib.request.urlopen(f"{self.web_url}/json", timeout=5) as r:
            return json.load(r)

    def start(self, timeout: float = 120) -> "EmbeddedSparkStandalone":
        self.worker_dir.mkdir(parents=True, exist_ok=True)
        self.master = self._start("master", self.MASTER, "--host", "127.0.0.1", "--port", str(self.port),
                                  "--webui-port", str(self.webui_port))
        self.worker = self._start("worker", self.WORKER, self.url, "--host", "127.0.0.1",
                                  "--port", str(free_port()), "--webui-port", str(free_port()),
                                  "--cores", str(self.cores), "--memory", self.memory,
                                  "--work-dir", str(self.worker_dir))
        deadline, last = time.monotonic() + timeout, None
        while time.monotonic() < deadline:
            for name, proc in (("master", self.master), ("worker", self.worker)):
                if proc.poll() is not None:
                    log = (self.work_dir / f"{name}.log").read_text(errors="replace")[-3000:]
                    self.stop()
                    raise RuntimeError(f"the Spark standalone {name} exited at start: {log}")
            try:
                if any(w.get("state") == "ALIVE" for w in self.status().get("workers", [])):
                    return self
            except OSError as exc:  # the master's web UI is not up yet
                last = exc
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"no Spark worker registered with the master {self.url} in {timeout}s ({last}); "
                           f"logs in {self.work_dir}")

    def stop(self) -> None:
        """The worker first (with the executors it launched), then the master."""
        stop_group(self.worker, 30)
        stop_group(self.master, 30)
        self.worker = self.master = None
