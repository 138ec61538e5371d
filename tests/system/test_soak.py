"""The fault soak (benchmarks/fault_soak.py), short: five iterations (four microbatches of the real DAG, `airflow dags
test`, its jobs on a Spark Connect server of the soak's own, a broker and PostgreSQL of its own, and an operator's
commands between two of them), each under a different fault, then clean runs until the lag is 0; every produced
record must be visible exactly once. Connect mode is the default one (the demo's); the full soak in BENCHMARKS.md
ran both modes. It runs through the script's own command line at its tiny size (`--tiny`, with the soak's faults
and iterations given): this is also the benchmark's never-rots run (tests/system/test_benchmarks.py), and what it
checks are the figures the script prints.

Seed 135479 draws, in this order: the broker SIGKILLed and restarted once a spark_job task runs, an operator between
runs (`ingest reset --to-latest`, `ingest set-offsets` forward on one partition, `delete_records` of unread records
on the other, which the next run's resetOffsetAutomatically resets past), the Spark Connect server SIGKILLed (and
started again) while that next run's job reads, a partition added (with records) once the run is planned, and the
whole `airflow dags test` SIGKILLed while its job reads (the query it leaves on the server finishes into an attempt
folder that nothing publishes). What the operator moved past is lost on purpose: the store's lost counter must
equal it exactly (the reset past the deleted records counted once, though its first run was killed), and nothing
else may be lost. The operator's iteration starts no run. Every iteration also produces one hostile record of every
kind (bad JSON, times a segment cannot hold, longs past 2^63, NaN, an object for a number, bytes that are not
UTF-8, non-object payloads), and the spec keeps dead letters. That kill comes last: the run it leaves in flight holds
the next runs back (until it expires), which would otherwise keep later faults from striking; the heal runs deal
with it. A published run's tasks executed again (the soak's rerun_published) is not drawn here, for time: through
the DAG, tests/system/test_dag.py re-executes spark_job of a published and of an expired run (each does nothing);
tests/integration/test_publisher.py publishes a run again and twice at once (published once)."""

from __future__ import annotations

import importlib.util
import re
import sys

import pytest
from bench_cli import NUMBER, ROOT, figures, run_benchmark
from conftest import pg_base

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]

FAULTS = "kill_spark,kill_airflow,broker_restart,partition_growth,operator"
ITERATIONS = 5
SEED = 135479


def hostile_kinds() -> int:
    spec = importlib.util.spec_from_file_location("fault_soak", ROOT / "benchmarks" / "fault_soak.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["fault_soak"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return len(sys.modules["harness.soak"].HOSTILE)  # the soak's hostile records, in the script's harness


# a run that waits on a predecessor may take a few completionTimeouts: the soak bounds each run itself
@pytest.mark.timeout(3600)
def test_a_short_fault_soak_loses_nothing_duplicates_nothing_and_heals(tmp_path):
    # its own broker and Spark Connect server (it restarts both), its databases on the tests' PostgreSQL; --tiny's
    # one task group, completionTimeout of 60 s (the killed run expires sooner; a run here takes about 20 s) and
    # 5 background records/s keep it short. It exits 0 only when nothing was lost (but what the operator skipped,
    # counted exactly), duplicated or unexpected, every segment reads, every hostile record is as Druid counts
    # it, the Iceberg table holds exactly the reader's rows and the datasource healed.
    out = run_benchmark("fault_soak.py", "--iterations", str(ITERATIONS), "--seed", str(SEED), "--faults", FAULTS,
                        "--hostile", "--spark-connect", "--iceberg", "--heal-runs", "3", "--postgres", pg_base(),
                        "--out", str(tmp_path / "soak"), timeout=3500)
    got = figures(out, {
        "runs": rf"^runs: {NUMBER} \({NUMBER} DAG runs, {NUMBER} task re-executions\)$",
        "heal": rf"^runs to heal: {NUMBER}$",
        "produced": rf"^produced: {NUMBER} acknowledged records \({NUMBER} not acknowledged\); visible rows: {NUMBER}$",
        "lost": rf"^lost: {NUMBER}$",
        # the operator's skips, deleted records and reset: each offset counted once by the store, none visible
        "lost on purpose": rf"^lost on purpose \(operator\): {NUMBER} offsets .*\({NUMBER} acknowledged records, "
                           rf"{NUMBER} of them good\); the store counted .*: exact",
        "duplicated": rf"^duplicated: {NUMBER}$",
        # the Iceberg table holds exactly the reader's rows, though runs were killed between publish and its commit
        "iceberg": rf"^iceberg: {NUMBER} files, rows other than the reader's: {NUMBER}$",
        "unexpected": rf"^unexpected: {NUMBER}, unreadable segments: {NUMBER}$",
        # hostile records (one of every kind per iteration) never stopped a run, each visible as Druid counts it,
        # and the dead letters hold each failed one exactly once
        "hostile": rf"^hostile records: {NUMBER} produced, {NUMBER} not as Druid counts them$",
        "median run time": rf"^median run time: {NUMBER} s$",
    })
    summary = out[out.rindex(f"\nseed {SEED}"):]
    faults = re.search(r"^faults: (.*)$", out, re.MULTILINE).group(1)
    assert {kind: (int(n), int(fired)) for kind, n, fired in re.findall(r"(\w+) (\d+) \(fired (\d+)\)", faults)} \
        == {kind: (1, 1) for kind in FAULTS.split(",")}, summary
    assert got["lost"] == got["duplicated"] == [0] and got["unexpected"] == [0, 0], summary
    offsets_skipped, _, lost_on_purpose = got["lost on purpose"]
    destroyed = re.search(rf"; {NUMBER} unread records deleted with the re-created topic", out)
    produced, _, visible = got["produced"]
    assert offsets_skipped > 0 and produced > 0, summary
    assert visible == produced - lost_on_purpose - (float(destroyed.group(1)) if destroyed else 0), summary
    assert got["iceberg"][0] > 0 and got["iceberg"][1] == 0, summary
    assert got["hostile"] == [ITERATIONS * hostile_kinds(), 0], summary
