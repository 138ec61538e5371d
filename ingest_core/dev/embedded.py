"""Local servers for tests, benchmarks and the demo, each on free ports with its own data dir, stopped with its
whole process tree. Development tooling only: nothing in the ingestion path depends on it.

- `EmbeddedKafka`: Apache Kafka itself (KRaft, one combined broker + controller) from Maven Central's jars
  (`ingest_core.dev.jars`). Every test can point at another Kafka instead (INGEST_TEST_KAFKA=host:port).
  `SecuredKafka`: the same broker with SASL_SSL (SCRAM-SHA-512) and mutual-TLS listeners besides.
- `EmbeddedPostgres`: a private PostgreSQL server (Debian's `postgresql` binaries) with trust auth on
  127.0.0.1, for the tests when INGEST_TEST_POSTGRES names none.
- `EmbeddedSparkConnect`, `EmbeddedSparkStandalone` (`embedded_spark`): Spark Connect, a Spark standalone cluster.
- `EmbeddedRedis`: a Redis server (Debian's `redis-server`), the Celery broker of the CeleryExecutor tests.
- `EmbeddedS3` (`embedded_s3`): S3Proxy, an S3-compatible object store for deep storage on S3.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Self

from confluent_kafka.admin import AdminClient

from ingest_core.dev import jars
from ingest_core.dev.tls import TlsFiles, make_tls_files


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the JVM's listeners do: TIME_WAIT is free
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


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


def stop_group(proc: subprocess.Popen | None, term_wait: float, sig: int = signal.SIGTERM) -> None:
    """Stop a process started in a session of its own, and everything it started: `sig`, then SIGKILL after
    `term_wait` seconds."""
    if proc is None:
        return
    for sig, wait in ((sig, term_wait), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)  # its own session (start_new_session), so its own group
        except ProcessLookupError:
            break
        if _group_gone(proc, wait):
            break


class EmbeddedServer:
    """A server process this process starts (in a session of its own) and stops: `with` starts it and stops it.
    Each server says how it starts and when it serves; stopping is SIGTERM to its process group, then SIGKILL after
    `term_wait` seconds, unless it knows better."""

    proc: subprocess.Popen | None = None
    term_wait: float = 10

    def start(self, timeout: float = 60) -> Self:
        raise NotImplementedError

    def stop(self) -> None:
        stop_group(self.proc, self.term_wait)
        self.proc = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    exe = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not exe or not os.path.exists(exe):
        raise RuntimeError("Apache Kafka needs Java 17+: install a JDK or set JAVA_HOME")
    return exe


_LOG4J2 = """\
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.file.ref = FILE
logger.server.name = kafka.server.KafkaRaftServer
logger.server.level = INFO
"""


class EmbeddedKafka(EmbeddedServer):
    """Apache Kafka in KRaft mode: one process that is broker and controller, replication factor 1.

    The ports are chosen once and kept in the data dir, so a restart (`stop()` then `start()`, or the demo run
    again) brings the same broker back at the same address with its log intact."""

    def __init__(self, data_dir: str | Path, port: int | None = None, heap: str = "512m",
                 broker_config: dict[str, str] | None = None, jvm_options: list[str] | None = None,
                 cluster_id: str | None = None):
        self.data_dir = Path(data_dir)
        self.heap = heap
        # the id its log dir is formatted with (default: a new one); brokers joining this node's controller
        # share it (benchmarks/plan_partitions.py runs a cluster of several)
        self.cluster_id = cluster_id or uuid.uuid4().hex[:22]
        self.broker_config = dict(broker_config or {})
        self.jvm_options = list(jvm_options or [])  # e.g. -XX:TieredStopAtLevel=1: starts twice as fast
        saved = self.data_dir / "ports.json"
        ports = self._saved_ports = json.loads(saved.read_text()) if saved.is_file() else {}
        self.port = port or ports.get("broker") or free_port()
        self.controller_port = ports.get("controller") or free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    @property
    def log_path(self) -> Path:
        return self.data_dir / "kafka.log"

    @property
    def _log_dir(self) -> Path:
        return self.data_dir / "log"

    def _ports(self) -> dict[str, int]:
        return {"broker": self.port, "controller": self.controller_port}

    def _format_args(self) -> list[str]:
        """Extra arguments of `kafka-storage format` (the log dir is formatted once, at the first start)."""
        return []

    def _config(self) -> dict[str, str]:
        return {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self._log_dir),
            "num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "4",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            # the log cleaner looks for work every second, so compacted topics compact within a test's wait
            "log.cleaner.backoff.ms": "1000",
            **self.broker_config,
        }

    def _properties(self) -> str:
        return "".join(f"{k}={v}\n" for k, v in self._config().items())

    def _java_command(self, main: str, *args: str) -> list[str]:
        return [_java(), "-Xms64m", f"-Xmx{self.heap}", "-XX:+UseSerialGC", "-Djava.awt.headless=true",
                *self.jvm_options,
                f"-Dlog4j2.configurationFile={self.data_dir / 'log4j2.properties'}",
                "-cp", jars.classpath("kafka"), main, *args]

    def start(self, timeout: float = 90) -> "EmbeddedKafka":
        self.data_dir.mkdir(parents=True, exist_ok=True)
        for p in self._ports().values():
            if not _port_free(p):
                raise RuntimeError(f"port {p} of the embedded Kafka in {self.data_dir} is taken: stop what uses it, "
                                   f"or remove {self.data_dir / 'ports.json'} to pick new ports")
        (self.data_dir / "ports.json").write_text(json.dumps(self._ports()))
        (self.data_dir / "log4j2.properties").write_text(_LOG4J2.format(log=self.log_path))
        props = self.data_dir / "server.properties"
        props.write_text(self._properties())
        if not (self._log_dir / "meta.properties").is_file():
            fmt = subprocess.run(self._java_command("kafka.tools.StorageTool", "format", "-t", self.cluster_id,
                                                    "-c", str(props), "--ignore-formatted",
                                                    *self._format_args()),
                                 capture_output=True, text=True)
            if fmt.returncode != 0:
                raise RuntimeError(f"formatting Kafka's log dir {self._log_dir} failed: {fmt.stdout}{fmt.stderr}")
        with open(self.data_dir / "kafka.out", "ab") as out:
            self.proc = subprocess.Popen(self._java_command("kafka.Kafka", str(props)), stdout=out,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        deadline, last = time.monotonic() + timeout, None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = self.log_path.read_text()[-2000:] if self.log_path.is_file() else ""
                out_tail = (self.data_dir / "kafka.out").read_text()[-2000:]
                self.proc = None
                raise RuntimeError(f"Apache Kafka exited at start (see {self.data_dir}): {out_tail}{tail}")
            try:
                md = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0}).list_topics(timeout=2)
                if md.brokers:
                    return self
            except Exception as exc:  # noqa: BLE001 - poll until the deadline
                last = exc
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"embedded Kafka at {self.bootstrap} did not come up in {timeout}s: {last}")

    def stop(self, graceful: bool = True) -> None:
        """Stop the broker's whole process group: a controlled shutdown, or a SIGKILL (a crash) when not
        `graceful`."""
        stop_group(self.proc, 30 if graceful else 0)
        self.proc = None

    def restart(self, graceful: bool = True) -> "EmbeddedKafka":
        self.stop(graceful)
        return self.start()


class SecuredKafka(EmbeddedKafka):
    """`EmbeddedKafka` with two secured listeners beside its PLAINTEXT one (kept for the tests' own admin):
    SASL_SSL with SCRAM-SHA-512 (`sasl_bootstrap`), and SSL with client certificates required, mutual TLS
    (`mtls_bootstrap`). The certificates (`tls`, `ingest_core.dev.tls`) are made at each start in the data dir's
    private `tls/` folder; the SCRAM users are created by Kafka's own tooling when the log dir is formatted
    (`kafka-storage format --add-scram`), so they exist before the broker first answers."""

    MECHANISM = "SCRAM-SHA-512"

    def __init__(self, data_dir: str | Path, users: dict[str, str], client_key_password: str, **kwargs):
        super().__init__(data_dir, **kwargs)
        self.users = dict(users)
        self.client_key_password = client_key_password
        self.sasl_port = self._saved_ports.get("sasl_ssl") or free_port()
        self.mtls_port = self._saved_ports.get("mtls") or free_port()
        self.sasl_bootstrap = f"127.0.0.1:{self.sasl_port}"
        self.mtls_bootstrap = f"127.0.0.1:{self.mtls_port}"
        # absolute paths: clients elsewhere (a Spark executor's working dir) read the same files
        self.tls = TlsFiles(self.data_dir.resolve() / "tls", client_key_password)

    def _ports(self) -> dict[str, int]:
        return {**super()._ports(), "sasl_ssl": self.sasl_port, "mtls": self.mtls_port}

    def _format_args(self) -> list[str]:
        for name, password in self.users.items():
            if not re.fullmatch(r"[\w.-]+", name + password):  # the tool's own `[name=...,password=...]` syntax
                raise ValueError("SCRAM user names and passwords here are letters, digits, '_', '.', '-'")
        return [arg for name, password in self.users.items()
                for arg in ("--add-scram", f"{self.MECHANISM}=[name={name},password={password}]")]

    def _config(self) -> dict[str, str]:
        conf = super()._config()
        plain = f"PLAINTEXT://127.0.0.1:{self.port}"
        secured = f"SASL_SSL://127.0.0.1:{self.sasl_port},MTLS://127.0.0.1:{self.mtls_port}"
        mechanism = self.MECHANISM.lower()
        return {
            **conf,
            "listeners": f"{plain},CONTROLLER://127.0.0.1:{self.controller_port},{secured}",
            "advertised.listeners": f"{plain},{secured}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL,MTLS:SSL",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.tls.server),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.tls.ca),
            "listener.name.mtls.ssl.client.auth": "required",
            "sasl.enabled.mechanisms": self.MECHANISM,
            "listener.name.sasl_ssl.sasl.enabled.mechanisms": self.MECHANISM,
            f"listener.name.sasl_ssl.{mechanism}.sasl.jaas.config":
                "org.apache.kafka.common.security.scram.ScramLoginModule required;",
            **self.broker_config,
        }

    def start(self, timeout: float = 90) -> "SecuredKafka":
        make_tls_files(self.tls.folder, self.client_key_password)
        super().start(timeout)
        return self

    def sasl_client(self, user: str, password: str | None = None) -> dict[str, str]:
        """librdkafka properties for the SASL_SSL listener as `user` (`password`: another than the user's)."""
        return {"bootstrap.servers": self.sasl_bootstrap, "security.protocol": "SASL_SSL",
                "sasl.mechanism": self.MECHANISM, "sasl.username": user,
                "sasl.password": self.users[user] if password is None else password,
                "ssl.ca.location": str(self.tls.ca)}

    def mtls_client(self) -> dict[str, str]:
        """librdkafka properties for the mutual-TLS listener, with the client certificate."""
        return {"bootstrap.servers": self.mtls_bootstrap, "security.protocol": "SSL",
                "ssl.ca.location": str(self.tls.ca), "ssl.certificate.location": str(self.tls.client_cert),
                "ssl.key.location": str(self.tls.client_key), "ssl.key.password": self.client_key_password}


def _postgres_bin() -> Path:
    explicit = os.environ.get("INGEST_POSTGRES_BIN")
    candidates = [explicit] if explicit else sorted(glob.glob("/usr/lib/postgresql/*/bin"),
                                                    key=lambda p: int(Path(p).parent.name), reverse=True)
    if not explicit and (initdb := shutil.which("initdb")):
        candidates.insert(0, str(Path(initdb).parent))
    for c in candidates:
        if c and (Path(c) / "initdb").is_file() and (Path(c) / "postgres").is_file():
            return Path(c)
    raise RuntimeError("PostgreSQL's server binaries (initdb, postgres) are not installed: `apt-get install "
                       "postgresql` (`make test` does it when run as root), set INGEST_POSTGRES_BIN to their folder, "
                       "or point INGEST_TEST_POSTGRES at a running server")


class EmbeddedPostgres(EmbeddedServer):
    """A throwaway PostgreSQL server: its own cluster in a temp dir, trust auth on 127.0.0.1, fsync off.

    PostgreSQL refuses to run as root; as root the cluster belongs to the `postgres` account that Debian's
    package creates, and the server runs as it."""

    def __init__(self, port: int | None = None, user: str = "postgres"):
        self.port = port or free_port()
        self.user = user
        self.url = f"postgresql+psycopg2://{user}@127.0.0.1:{self.port}"
        self.data_dir: Path | None = None
        self.proc: subprocess.Popen | None = None

    def _as_owner(self, cmd: list[str]) -> list[str]:
        if os.geteuid() != 0:
            return cmd
        runuser = shutil.which("runuser")
        if runuser is None:
            raise RuntimeError("running PostgreSQL as root needs `runuser` to drop to the postgres account")
        return [runuser, "-u", "postgres", "--", *cmd]

    def start(self, timeout: float = 60) -> "EmbeddedPostgres":
        bindir = _postgres_bin()
        self.data_dir = Path(tempfile.mkdtemp(prefix="ingest-postgres-"))
        if os.geteuid() == 0:
            shutil.chown(self.data_dir, "postgres", "postgres")
        pgdata = self.data_dir / "data"
        init = subprocess.run(self._as_owner([str(bindir / "initdb"), "-D", str(pgdata), "-U", self.user,
                                              "--auth=trust", "-E", "UTF8", "--no-sync"]),
                              capture_output=True, text=True)
        if init.returncode != 0:
            raise RuntimeError(f"initdb failed: {init.stdout}{init.stderr}")
        return self._launch(timeout)

    def shut_down(self) -> None:
        """Stop the server and keep its cluster: `start_again` brings it back (a restart, in two halves)."""
        stop_group(self.proc, 20, signal.SIGINT)
        self.proc = None

    def start_again(self, timeout: float = 60) -> "EmbeddedPostgres":
        return self._launch(timeout)

    def _launch(self, timeout: float) -> "EmbeddedPostgres":
        import psycopg2

        assert self.data_dir is not None, "start() creates the cluster first"
        bindir, pgdata = _postgres_bin(), self.data_dir / "data"
        log = open(self.data_dir / "postgres.log", "ab")  # noqa: SIM115 - the server writes to it until stop()
        if os.geteuid() == 0:
            shutil.chown(self.data_dir / "postgres.log", "postgres", "postgres")
        self.proc = subprocess.Popen(
            self._as_owner([str(bindir / "postgres"), "-D", str(pgdata), "-p", str(self.port),
                            "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={self.data_dir}",
                            "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
                            "-c", "max_connections=300"]),
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        deadline, last = time.monotonic() + timeout, None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"PostgreSQL exited at start: {(self.data_dir / 'postgres.log').read_text()[-2000:]}")
            try:
                psycopg2.connect(host="127.0.0.1", port=self.port, user=self.user, dbname="postgres").close()
                return self
            except psycopg2.OperationalError as exc:
                last = exc
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"PostgreSQL on port {self.port} did not come up in {timeout}s: {last}")

    def stop(self) -> None:
        stop_group(self.proc, 20, signal.SIGINT)  # SIGINT: PostgreSQL's fast shutdown, open sessions or not
        self.proc = None
        if self.data_dir is not None:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            self.data_dir = None


class EmbeddedRedis(EmbeddedServer):
    """A throwaway Redis server (Debian's `redis-server`, not the system service) on a free port of 127.0.0.1,
    in its own dir, without persistence: the Celery broker of the CeleryExecutor tests."""

    def __init__(self, work_dir: str | Path, port: int | None = None):
        self.work_dir = Path(work_dir)
        self.port = port or free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 30) -> "EmbeddedRedis":
        exe = shutil.which("redis-server") or "/usr/bin/redis-server"
        if not os.path.exists(exe):
            raise RuntimeError("Redis is not installed: `apt-get install redis-server` (`make test` does it when "
                               "run as root)")
        self.work_dir.mkdir(parents=True, exist_ok=True)
        with open(self.work_dir / "redis.log", "ab") as out:
            self.proc = subprocess.Popen([exe, "--port", str(self.port), "--bind", "127.0.0.1", "--dir",
                                          str(self.work_dir), "--save", "", "--appendonly", "no",
                                          "--daemonize", "no", "--protected-mode", "yes"],
                                         stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.proc = None
                raise RuntimeError(f"redis-server exited at start: {(self.work_dir / 'redis.log').read_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(64).startswith(b"+PONG"):
                        return self
            except OSError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"redis-server on port {self.port} did not answer in {timeout}s")
