"""Benchmark: what a Spark Connect server's restart costs a datasource (issue 46): the server's start (its JVM, to
accepting sessions), then the group jobs that follow on it, the first (on a cold JVM) against the next ones (warm).

For each mode of --modes the benchmark starts a server of its own (`EmbeddedSparkConnect`, local[2], 1 GB, with the
S3A jars when --s3), runs --jobs group jobs on it, and kills it (SIGKILL, as the soak's fault does):

- `cold`: the server as it was before issue 46 (no warm-up);
- `warm`: the server warms itself up as it starts (`ingest_core.spark.warmup`, what `EmbeddedSparkConnect.start()`
  does now), timed apart.

The jobs are the ingest job itself, as a `spark_job` task runs it: a planned task group of the example spec (the
`wikipedia` datasource, --records records produced before each), `run_job` over Spark Connect in a Python that has
the tasks' libraries loaded (as the scheduler's preload gives its task processes), deep storage on an S3 store of
the benchmark's own with --s3, the datasource's shared session (the same one before and after a restart, as a
datasource's is). Each job's seconds: opening the session, the job's Spark work (the read, rollup and write:
the report's marks) and the whole `run_job`.

    PYTHONPATH=$PWD python benchmarks/connect_restart.py [--modes cold warm] [--jobs 4] [--records 500] [--s3]
    PYTHONPATH=$PWD python benchmarks/connect_restart.py --tiny     # one job of 50 records per mode: that it runs
        [--bootstrap HOST:PORT]   # a broker already running (topics of its own)

The `cold` mode is the server as a deployment without the warm-up has it; `make bench` runs both.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import yaml
from confluent_kafka.admin import AdminClient, NewTopic

BENCHMARKS = Path(__file__).resolve().parent
if str(BENCHMARKS) not in sys.path:  # its harness, also when the script is imported by path
    sys.path.insert(0, str(BENCHMARKS))

from harness import ROOT  # noqa: E402
from harness.fixed_cost_setup import PARTITIONS, example_spec, produce  # noqa: E402
from ingest_core.dev.embedded import EmbeddedKafka  # noqa: E402
from ingest_core.dev.embedded_s3 import EmbeddedS3, s3_spec_settings  # noqa: E402
from ingest_core.dev.embedded_spark import EmbeddedSparkConnect  # noqa: E402

MODES = ("cold", "warm")


def run_jobs(url: str, spec: dict[str, Any], jobs: int, records: int, folder: Path, env: dict[str, str]) -> list[dict]:
    """`jobs` group jobs in a Python of their own (`--job-runner`); each job's seconds."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "spec.yaml").write_text(yaml.safe_dump(spec))
    env = {**env, "INGEST_METADATA_URL": f"sqlite:///{folder / 'metadata.db'}",
           "INGEST_DEEP_STORAGE": (folder / "deep-storage").as_uri(), "INGEST_HOME": str(folder)}
    done = subprocess.run([sys.executable, __file__, "--job-runner", url, str(folder / "spec.yaml"), str(jobs),
                           str(records)], env=env, cwd=BENCHMARKS, capture_output=True, text=True,
                          timeout=300 + 120 * jobs)
    if done.returncode != 0:
        raise RuntimeError(f"the jobs failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def job_runner(url: str, spec_path: Path, jobs: int, records: int) -> None:
    """The `--job-runner` side: plan, run_job, publish, as the DAG's tasks do, timed."""
    from ingest_core.provider.preload import preload_task_libraries

    preload_task_libraries()  # as a task process forked by the scheduler has them
    from ingest_core.core.spec import parse_spec
    from ingest_core.handover import deep_storage
    from ingest_core.spark import connect
    from ingest_core.store.metadata import MetadataStore
    from ingest_core.supervisor.publish import publish_step
    from ingest_core.supervisor.run import plan_step

    from ingest_core.kafka.storage_secrets import use_deep_storage

    spec = parse_spec(yaml.safe_load(spec_path.read_text()), str(spec_path))
    use_deep_storage(spec)  # its S3 store's endpoint and keys, as the DAG's tasks take them from the spec
    store = MetadataStore(os.environ["INGEST_METADATA_URL"])
    store.upgrade()
    opened: list[float] = []
    real_open = connect.open_session

    def timed_open(*args: Any, **kwargs: Any) -> Any:
        t = time.monotonic()
        try:
            return real_open(*args, **kwargs)
        finally:
            opened.append(time.monotonic() - t)
    connect.open_session = timed_open
    rng, out = random.Random(46), []
    for r in range(jobs):
        produce(os.environ["INGEST_KAFKA_BOOTSTRAP"], spec.io_config.topic, records, rng=rng)
        run_id = f"restart-{r}"
        for job in plan_step(spec, run_id, None, store):
            started = time.monotonic()
            summary = connect.run_job(url, job)
            whole = time.monotonic() - started
            marks = deep_storage.read_json(summary["report"]).get("marks", {})
            out.append({"run_job": whole, "session": opened[-1],
                        "spark": marks.get("writeEnded", 0) - marks.get("started", 0), "rows": summary["rows"]})
        publish_step(spec, run_id, metadata=store)
    print(json.dumps(out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--jobs", type=int, default=4, help="group jobs per server start")
    parser.add_argument("--records", type=int, default=500, help="records produced before each job")
    parser.add_argument("--s3", action="store_true", help="deep storage on an S3 store of the benchmark's own")
    parser.add_argument("--tiny", action="store_true", help="one job per mode of 50 records: measures nothing")
    parser.add_argument("--bootstrap", help="a running Kafka broker (topics of its own)")
    parser.add_argument("--out", help="keep everything here")
    if len(sys.argv) > 1 and sys.argv[1] == "--job-runner":
        job_runner(sys.argv[2], Path(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
        return
    args = parser.parse_args()
    if args.tiny:
        args.jobs, args.records = 1, 50
    out = Path(args.out or tempfile.mkdtemp(prefix="connect-restart-"))
    out.mkdir(parents=True, exist_ok=True)
    cleanups: list = []
    try:
        bootstrap = args.bootstrap
        if not bootstrap:
            kafka = EmbeddedKafka(out / "kafka").start()
            cleanups.append(kafka.stop)
            bootstrap = kafka.bootstrap
        env = {**os.environ, "INGEST_KAFKA_BOOTSTRAP": bootstrap, "PYSPARK_PYTHON": sys.executable,
               "PYTHONPATH": os.pathsep.join([str(ROOT), str(BENCHMARKS), os.environ.get("PYTHONPATH", "")])}
        s3 = None
        if args.s3:
            s3 = EmbeddedS3(out / "s3").start()
            cleanups.append(s3.stop)
            env.update(INGEST_BENCH_S3_KEY=s3.access_key, INGEST_BENCH_S3_SECRET=s3.secret_key)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        results = {}
        for mode in args.modes:
            name = f"cr_{mode}_{uuid.uuid4().hex[:6]}"
            admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(timeout=60)
            spec = example_spec(name, name, 1)
            if s3 is not None:
                spec["microbatch"]["deepStorage"] = {"uri": f"{s3.uri}/{name}", "s3": s3_spec_settings(
                    s3.endpoint, "INGEST_BENCH_S3_KEY", "INGEST_BENCH_S3_SECRET")}
            server = EmbeddedSparkConnect(out / f"spark-connect-{mode}", driver_memory="1g",
                                          jar_sets=("spark-s3",) if args.s3 else (), warm_up=mode == "warm")
            cleanups.append(server.stop)
            server.start()
            jobs = run_jobs(server.url, spec, args.jobs, args.records, out / mode, env)
            server.kill()
            results[mode] = {"start": server.up_s, "warm_up": server.warmed_s, "jobs": jobs}
            warm = jobs[1:]
            first = jobs[0]
            print(f"{mode}: server up in {server.up_s:.1f} s, warm-up {server.warmed_s or 0:.1f} s; "
                  f"first job {first['run_job']:.1f} s (session {first['session']:.1f} s, Spark {first['spark']:.1f} "
                  f"s, {first['rows']:,} rows); "
                  + (f"the next {len(warm)}: median {statistics.median(j['run_job'] for j in warm):.1f} s "
                     f"(Spark {statistics.median(j['spark'] for j in warm):.1f} s)" if warm else "no next jobs")
                  + f"; load {' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
        (out / "results.json").write_text(json.dumps(results, indent=1))
        print(f"results in {out / 'results.json'}")
    finally:
        for cleanup in reversed(cleanups):
            cleanup()


if __name__ == "__main__":
    main()
