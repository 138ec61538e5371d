"""The fixed-cost benchmark's server warm-up (--warm-jobs): group jobs through the Connect server before the timed
runs, made the way the ingest DAG's tasks make them (plan, one `run_job` per task group, publish) on a datasource
of their own, in a Python of its own. A Connect server that serves runs all day has compiled its hot paths; a
fresh one's JVM takes its first 15 or so jobs to get there (a group job of 500 records, measured: 11-14 s first,
1.1-1.3 s over the next four, 0.5-0.7 s after 16), which a handful of timed runs would otherwise measure.

    python -m harness.fixed_cost_warmup URL SPEC.yaml JOBS RECORDS    (env: airflow_env's)
"""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from harness.fixed_cost_setup import produce


def warm_server(url: str, spec: dict[str, Any], jobs: int, records: int, folder: Path,
                env: dict[str, str]) -> list[float]:
    """Run the warm-up in a fresh Python; returns each group job's seconds (`run_job`, as the task calls it)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "spec.yaml").write_text(yaml.safe_dump(spec))
    env = {**env, "INGEST_METADATA_URL": f"sqlite:///{folder / 'metadata.db'}",
           "INGEST_DEEP_STORAGE": (folder / "deep-storage").as_uri(), "INGEST_HOME": str(folder)}
    done = subprocess.run([sys.executable, "-m", "harness.fixed_cost_warmup", url, str(folder / "spec.yaml"),
                           str(jobs), str(records)], env=env, cwd=Path(__file__).resolve().parents[1],
                          capture_output=True, text=True, timeout=60 + 60 * jobs)
    if done.returncode != 0:
        raise RuntimeError(f"the server warm-up failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    from ingest_core.core.spec import parse_spec
    from ingest_core.spark.connect import run_job
    from ingest_core.store.metadata import MetadataStore
    from ingest_core.supervisor.publish import publish_step
    from ingest_core.supervisor.run import plan_step

    url, spec_path, jobs, records = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    spec = parse_spec(yaml.safe_load(spec_path.read_text()), str(spec_path))
    store = MetadataStore(os.environ["INGEST_METADATA_URL"])
    store.upgrade()
    bootstrap = os.environ["INGEST_KAFKA_BOOTSTRAP"]  # the example spec's bootstrap.servers
    rng = random.Random(35)
    seconds: list[float] = []
    for r in range(math.ceil(jobs / spec.io_config.task_count)):
        produce(bootstrap, spec.io_config.topic, records, rng=rng)
        run_id = f"warm-{r}"
        for job in plan_step(spec, run_id, None, store):
            started = time.monotonic()
            run_job(url, job)
            seconds.append(time.monotonic() - started)
        publish_step(spec, run_id, metadata=store)
    print(json.dumps(seconds))


if __name__ == "__main__":
    main()
