"""JVM artifacts fetched from Maven Central with the ordinary `mvn` client, once, into a local cache.

Sets, each a small pom under `ingest_core/dev/maven/`:
- `kafka`: Apache Kafka itself (`kafka_2.13`, KRaft) plus a log4j2 binding: the embedded broker of the tests,
  the demo and the benchmarks (`ingest_core.dev.embedded`);
- `spark-kafka`: Spark's own Kafka source (`spark-sql-kafka-0-10`) for the pinned pyspark, with the jars it
  needs beyond those pip's pyspark ships: the anchor of the job's benchmark;
- `apicurio`: Apicurio Registry, the schema registry of the tests (`ingest_core.dev.schema_registry`): the
  release's runnable Quarkus distribution (a `.tar.gz` on Maven Central), unpacked;
- `s3proxy`: S3Proxy (its in-memory `transient` backend), the tests' S3-compatible object store (`EmbeddedS3`);
- `spark-s3`: Hadoop's S3A (`hadoop-aws`) and the AWS SDK modules it uses, for Spark's writes to an object store.

The cache is `$INGEST_JARS_DIR/<set>` (default `.jars/<set>` in the checkout); a set is fetched again when its
pom changes. `python -m ingest_core.dev.jars [SET...]` fetches ahead of time (the Makefile's install step does).
Spark's `--packages` (Ivy) is not used: here only the Maven client is known to reach Maven Central.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
POMS = Path(__file__).resolve().parent / "maven"
SETS = ("kafka", "spark-kafka", "apicurio", "s3proxy", "spark-s3")


def cache_dir() -> Path:
    return Path(os.environ.get("INGEST_JARS_DIR") or ROOT / ".jars")


def ensure(name: str) -> list[Path]:
    """The jars of set `name`, fetched first when missing or when its pom changed."""
    pom = POMS / f"{name}.pom.xml"
    if not pom.is_file():
        raise ValueError(f"unknown jar set {name!r}: one of {', '.join(SETS)}")
    digest = hashlib.sha256(pom.read_bytes()).hexdigest()[:16]
    target = cache_dir() / name
    marker = target / ".pom-sha256"
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(cache_dir() / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a demo and a test session may start at once
        if not (marker.is_file() and marker.read_text() == digest):
            _fetch(pom, target)
            marker.write_text(digest)
    return sorted(target.glob("*.jar"))


def location(name: str) -> Path:
    """The folder of set `name`, fetched first when missing or when its pom changed."""
    ensure(name)
    return cache_dir() / name


def classpath(name: str) -> str:
    return os.pathsep.join(str(p) for p in ensure(name))


def _fetch(pom: Path, target: Path) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError(f"Maven (`mvn`) is needed once to fetch the jars of {pom.name} from Maven Central: "
                           "install it (`apt-get install maven`) or set INGEST_JARS_DIR to a folder that has them")
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    proc = subprocess.run(
        [mvn, "-q", "-B", "-f", str(pom), "dependency:copy-dependencies", f"-DoutputDirectory={staging}",
         "-DincludeScope=runtime"],
        capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"fetching the jars of {pom.name} with Maven failed (exit {proc.returncode}):\n"
                           f"{(proc.stdout + proc.stderr)[-3000:]}")
    for archive in staging.glob("*.tar.gz"):  # a distribution: Python's tarfile, as Maven's reads long names wrong
        with tarfile.open(archive) as tar:
            tar.extractall(staging, filter="data")
        archive.unlink()
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)


def main(argv: list[str]) -> int:
    for name in argv or SETS:
        jars = ensure(name)
        print(f"{name}: {len(jars)} jars in {cache_dir() / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
