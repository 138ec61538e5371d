"""The fault soak (benchmarks/fault_soak.py), short: six iterations (five microbatches of the real DAG, `airflow dags
test`, its jobs on a Spark Connect server of the soak's own, a broker and PostgreSQL of its own, and an operator's
commands between two of them), each under a different fault, then clean runs until the lag is 0; every produced
record must be visible exactly once. Connect mode is the default one (the demo's); the full soak in BENCHMARKS.md
ran both modes.

Seed 114 draws, in this order: a published run's spark_job executed again (`airflow tasks test`), the broker
SIGKILLed and restarted once a spark_job task runs, an operator between runs (`ingest reset --to-latest`, `ingest
set-offsets` forward on one partition, `delete_records` of unread records on the other, which the next run's
resetOffsetAutomatically resets past), the Spark Connect server SIGKILLed (and started again) while that next run's
job reads, a partition added (with records) once the run is planned, and the whole `airflow dags test` SIGKILLed
while its job reads (the query it leaves on the server finishes into an attempt folder that nothing publishes).
What the operator moved past is lost on purpose: the store's lost counter must equal it exactly (the reset past the
deleted records counted once, though its first run was killed), and nothing else may be lost. The operator's
iteration starts no run, so the soak takes about as long as with five. Every iteration also produces one hostile
record of every kind (bad JSON, times a segment cannot hold, longs past 2^63, NaN, an object for a number, bytes
that are not UTF-8, non-object payloads), and the spec keeps dead letters. That kill comes last: the run it leaves
in flight holds the next runs back (until it expires), which would otherwise keep later faults from striking; the
heal runs deal with it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from conftest import pg_base

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]

ROOT = Path(__file__).resolve().parents[2]
FAULTS = "kill_spark,kill_airflow,rerun_published,broker_restart,partition_growth,operator"


def fault_soak():
    spec = importlib.util.spec_from_file_location("fault_soak", ROOT / "benchmarks" / "fault_soak.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["fault_soak"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


# a run that waits on a predecessor may take a few completionTimeouts: the soak bounds each run itself
@pytest.mark.timeout(3600)
def test_a_short_fault_soak_loses_nothing_duplicates_nothing_and_heals(tmp_path):
    soak = fault_soak()
    # its own broker and Spark Connect server (it restarts both), its databases on the tests' PostgreSQL; one
    # task group keeps it short, and so does a completionTimeout of 60 s (the killed run expires sooner; a
    # run here takes about 20 s)
    args = soak.parse_args(["--iterations", "6", "--seed", "114", "--faults", FAULTS, "--task-count", "1", "--hostile",
                            "--spark-connect", "--iceberg", "--completion-timeout", "60", "--rate", "5", "--heal-runs", "3",
                            "--postgres", pg_base(), "--out", str(tmp_path / "soak")])
    report, out = soak.run_soak(args)
    summary = report.summary()
    print(summary)
    assert dict(report.faults) == dict(report.fired) == {kind: 1 for kind in FAULTS.split(",")}, summary
    assert report.lost == 0 and report.duplicated == 0 and report.unexpected == 0, f"{summary}\nevidence in {out}"
    assert report.unreadable_segments == [], f"{summary}\n{report.unreadable_segments}\nevidence in {out}"
    assert report.healed, f"{summary}\nevidence in {out}"
    assert report.produced > 0 and report.visible_rows == (report.produced - report.lost_on_purpose
                                                              - report.destroyed), summary
    # the operator's skips, deleted records and reset: each offset counted once by the store, none visible
    assert report.loss_counted_exactly and sum(report.lost_expected.values()) > 0, summary
    # the Iceberg table holds exactly the reader's rows, though runs were killed between publish and its commit
    assert report.iceberg_mismatch == 0 and report.iceberg_files, summary
    # hostile records (--hostile: one of every kind per iteration) never stopped a run, each visible as Druid
    # counts it, and the dead letters hold each failed one exactly once
    assert report.hostile_produced == 6 * len(soak.HOSTILE) and report.hostile_wrong == [], summary
