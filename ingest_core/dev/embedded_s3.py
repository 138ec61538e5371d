"""`EmbeddedS3`: S3Proxy (Maven Central's jar, Apache-2.0), in memory or over a private folder (`persistent`), for
tests, benchmarks and the demo (see `embedded`): an S3-compatible object store for deep storage on S3 (the tests,
the fault soak's `--s3`). Tests can point at another store instead (INGEST_TEST_S3=http://KEY:SECRET@host:port/bucket)."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pyarrow.fs as pafs

from ingest_core.dev import jars
from ingest_core.dev.embedded import EmbeddedServer, _java, free_port, stop_group


def s3_spec_settings(endpoint: str, key_variable: str, secret_variable: str) -> dict[str, object]:
    """A spec's `deepStorage.s3` for an S3-compatible store at `endpoint`, its keys read from those environment
    variables."""
    return {"endpoint": endpoint, "region": "us-east-1", "pathStyleAccess": True,
            "accessKeyId": {"type": "environment", "variable": key_variable},
            "secretAccessKey": {"type": "environment", "variable": secret_variable}}


def _marker_safe_provider() -> Path:
    """The folder holding the jclouds provider "ingest-filesystem" (`s3proxy/MarkerSafeFilesystem.java`), compiled
    against S3Proxy's jar the first time (javac, beside the JDK that runs Kafka and S3Proxy) and kept in the jar
    cache under a digest of its source and that jar."""
    source = Path(__file__).resolve().parent / "s3proxy" / "MarkerSafeFilesystem.java"
    jar = next(iter(jars.ensure("s3proxy")))
    digest = hashlib.sha256(source.read_bytes() + jar.name.encode()).hexdigest()[:16]
    target = jars.cache_dir() / "s3proxy-provider" / digest
    if (target / "META-INF").is_dir():
        return target
    javac = Path(_java()).resolve().with_name("javac")
    if not javac.exists():
        raise RuntimeError(f"the persistent S3 store compiles a jclouds provider: it needs a JDK's javac (not at "
                           f"{javac}); install a JDK (apt-get install openjdk-17-jdk-headless) or set JAVA_HOME")
    staging = Path(tempfile.mkdtemp(prefix=f".{digest}-", dir=_made(target.parent)))
    done = subprocess.run([str(javac), "--release", "17", "-nowarn", "-cp", str(jar), "-d", str(staging),
                           str(source)], capture_output=True, text=True)
    if done.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise RuntimeError(f"compiling {source.name} failed: {done.stdout}{done.stderr}")
    services = staging / "META-INF" / "services"
    services.mkdir(parents=True)
    (services / "org.jclouds.apis.ApiMetadata").write_text("ingest.s3proxy.MarkerSafeFilesystem\n")
    try:
        staging.rename(target)  # whole or not at all: another process may have made it meanwhile
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _made(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return folder


class EmbeddedS3(EmbeddedServer):
    """S3Proxy; one bucket made at start; signed requests only (SigV2 or SigV4) with `access_key`/`secret_key`.

    By default jclouds' `transient` backend: the objects live in its memory (`heap`), gone when it stops. With
    `persistent`, a folder per bucket under `data_dir/objects`, kept across `restart()` (the fault soak restarts
    the store): jclouds' `filesystem` backend, with one change (`_marker_safe_provider`). That backend maps a
    folder's marker object ("a/b/") to the folder itself, and lists every folder as such a marker; a DELETE of one
    while the folder still holds objects retried the folder's removal for 10 s (jclouds' `Utils.delete`: ten tries
    a second apart) before it answered, having dropped only the marker. Hadoop S3A deletes a job's `_temporary`
    tree in listing order, parents first: 10 s for each folder above a file, at every commit of a Spark write.
    The provider here drops the marker and answers at once, as S3 does (the keys under it stay)."""

    def __init__(self, data_dir: str | Path, port: int | None = None, bucket: str = "deep-storage",
                 access_key: str | None = None, secret_key: str | None = None, heap: str = "256m",
                 persistent: bool = False):
        self.data_dir = Path(data_dir)
        self.port = port or free_port()
        self.bucket = bucket
        self.access_key = access_key or f"test-{uuid.uuid4().hex[:8]}"
        self.secret_key = secret_key or uuid.uuid4().hex
        self.heap = heap
        self.persistent = persistent
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    @property
    def log_path(self) -> Path:
        return self.data_dir / "s3proxy.log"

    @property
    def uri(self) -> str:
        """The bucket as deep storage."""
        return f"s3a://{self.bucket}"

    def _backend(self) -> tuple[list[str], list[str]]:
        """(the properties naming the backend, the JVM's classpath and main class)."""
        jar = str(next(iter(jars.ensure("s3proxy"))))
        if not self.persistent:
            return ["jclouds.provider=transient"], ["-jar", jar]
        objects = _made(self.data_dir / "objects")
        # a provider not built into S3Proxy must name an identity, which a local folder does not use
        return (["jclouds.provider=ingest-filesystem", f"jclouds.filesystem.basedir={objects}",
                 "jclouds.identity=local", "jclouds.credential=local"],
                ["-cp", os.pathsep.join([str(_marker_safe_provider()), jar]), "org.gaul.s3proxy.Main"])

    def start(self, timeout: float = 60) -> "EmbeddedS3":
        self.data_dir.mkdir(parents=True, exist_ok=True)
        backend, main = self._backend()
        props = self.data_dir / "s3proxy.properties"
        props.write_text("\n".join([
            f"s3proxy.endpoint={self.endpoint}", "s3proxy.authorization=aws-v2-or-v4",
            f"s3proxy.identity={self.access_key}", f"s3proxy.credential={self.secret_key}", *backend, ""]))
        props.chmod(0o600)
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen([_java(), "-Xms32m", f"-Xmx{self.heap}", "-XX:+UseSerialGC",
                                          "-XX:TieredStopAtLevel=1", *main, "--properties", str(props)],
                                         stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.proc = None
                raise RuntimeError(f"S3Proxy exited at start: {self.log_path.read_text()[-3000:]}")
            try:  # unsigned: any HTTP answer (403) means it serves
                urllib.request.urlopen(self.endpoint + "/", timeout=2)
            except urllib.error.HTTPError:
                pass
            except OSError:
                time.sleep(0.3)
                continue
            try:
                self._make_bucket()
            except OSError as exc:
                self.stop()
                raise RuntimeError(f"S3Proxy at {self.endpoint} did not create bucket {self.bucket}: {exc}") from exc
            return self
        self.stop()
        raise RuntimeError(f"S3Proxy at {self.endpoint} did not answer in {timeout}s (log: {self.log_path})")

    def restart(self, graceful: bool = True, down: float = 0) -> "EmbeddedS3":
        """Stopped (SIGTERM, or SIGKILL when not `graceful`), `down` seconds without it, and started again at the
        same endpoint with the same keys; a `persistent` store keeps its objects."""
        if graceful:
            stop_group(self.proc, self.term_wait)
        else:
            stop_group(self.proc, 0, signal.SIGKILL)
        self.proc = None
        time.sleep(down)
        return self.start()

    def _make_bucket(self) -> None:
        fs = pafs.S3FileSystem(access_key=self.access_key, secret_key=self.secret_key, region="us-east-1",
                               endpoint_override=self.endpoint.removeprefix("http://"), scheme="http",
                               allow_bucket_creation=True, connect_timeout=10, request_timeout=30)
        fs.create_dir(self.bucket)
