"""A local Kafka broker for tests, benchmarks and the demo: noida-db's broker (a dev dependency) on a free
port with its own data dir. Development tooling only; nothing in the ingestion path depends on it, and
every test can point at a real Apache Kafka instead (INGEST_TEST_KAFKA=host:port)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _group_gone(proc: subprocess.Popen, timeout: float) -> bool:
    """Wait for every process of `proc`'s group to exit (reaping the launcher)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        proc.poll()
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


class EmbeddedKafka:
    def __init__(self, data_dir: str | Path, port: int | None = None):
        self.data_dir = Path(data_dir)
        self.port = port or free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    @property
    def log_path(self) -> Path:
        return self.data_dir / "noida.log"

    def start(self, timeout: float = 60) -> "EmbeddedKafka":
        exe = shutil.which("noida-db", path=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
        if not exe:
            raise RuntimeError("noida-db is not installed: `pip install -e '.[dev]'`, or use a real Kafka")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                [exe, "start", "--only", "kafka", "--kafka-port", str(self.port), "--data-dir", str(self.data_dir)],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        deadline, last = time.monotonic() + timeout, None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"noida-db exited with {self.proc.returncode}: {self.log_path.read_text()[-2000:]}")
            try:
                AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0}).list_topics(timeout=2)
                return self
            except Exception as exc:  # noqa: BLE001 - poll until the deadline
                last = exc
                time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"embedded Kafka at {self.bootstrap} did not come up in {timeout}s: {last}")

    def stop(self) -> None:
        """Stop the broker's whole process group: `noida-db` is a launcher whose broker is a child process,
        which would outlive a signal to the launcher alone."""
        if self.proc is None:
            return
        for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 5)):
            try:
                os.killpg(self.proc.pid, sig)  # its own session (start_new_session), so its own group
            except ProcessLookupError:
                break
            if _group_gone(self.proc, wait):
                break
        self.proc = None

    def __enter__(self) -> "EmbeddedKafka":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
