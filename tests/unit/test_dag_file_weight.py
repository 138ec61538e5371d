"""What Airflow's parse of the DAG file loads. Airflow parses it in every task's process (and again and again in
its DAG processor), so the parse loads the spec, its checks and the DAG's shape, never what only running a task
needs: the metadata store, the supervisor's steps, deep storage's filesystems (pyarrow, numpy), pyspark. Those are
loaded by the task that runs them (or once by a preloading scheduler: `ingest_core.provider.preload`)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import sys
from pathlib import Path
from ingest_core.provider.dag_factory import load_dags

dags = load_dags(Path({folder!r}))
assert sorted(dags) == {dag_ids!r}, sorted(dags)
heavy = ["pyarrow", "numpy", "pandas", "pyspark", "ingest_core.store.metadata", "ingest_core.supervisor.run",
         "ingest_core.supervisor.planning", "ingest_core.supervisor.publish", "ingest_core.supervisor.report",
         "ingest_core.supervisor.compaction", "ingest_core.supervisor.replan", "ingest_core.supervisor.gate",
         "ingest_core.supervisor.staging", "ingest_core.spark.job"]
print(sorted(m for m in heavy if m in sys.modules))
"""


def parse_loads(folder: Path, dag_ids: list[str], tmp_path: Path) -> list[str]:
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path / "airflow"), "INGEST_KAFKA_BOOTSTRAP": "127.0.0.1:9"}
    done = subprocess.run([sys.executable, "-c", PROBE.format(folder=str(folder), dag_ids=dag_ids)], env=env,
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return ast.literal_eval(done.stdout.strip().splitlines()[-1])  # the probe prints a list of names


def test_the_parse_of_the_example_dags_loads_no_task_machinery(tmp_path):
    assert parse_loads(ROOT / "dags", ["wikipedia"], tmp_path) == []


def test_a_compaction_dag_and_a_data_gate_parse_without_it_too(tmp_path):
    folder = tmp_path / "dags"
    folder.mkdir()
    spec = (ROOT / "dags" / "datasources" / "wikipedia.yaml").read_text()
    spec = spec.replace("microbatch:",
                        "compaction:\n  skipOffsetFromLatest: PT1H\nmicrobatch:\n  dataGate: {minRecords: 10}\n", 1)
    (folder / "gated.yaml").write_text(spec)
    assert parse_loads(folder, ["wikipedia", "wikipedia.compaction"], tmp_path) == []
