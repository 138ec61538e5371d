"""Benchmarks are code too: each script under benchmarks/ runs to the end at its tiny size (`--tiny`: every part
once, on a few records) as `make bench` would run it, and prints its figures. Only that is checked: each figure
line is there and reads as a number, never what the number is (a tiny run measures nothing, and a loaded machine
would make any time or speed a race). Where a script takes a broker (`--bootstrap`) or a PostgreSQL server
(`--postgres`) it gets the session's; the others start their own, as they do in `make bench`."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import pg_base

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]

ROOT = Path(__file__).resolve().parents[2]
NUMBER = r"(-?[\d,]*\d(?:\.\d+)?)"  # as the scripts print them: 1,234 or 0.48


def run_benchmark(script: str, *args: str, timeout: float) -> str:
    """`python benchmarks/<script> --tiny <args>`: its stdout, once it exited 0."""
    command = [sys.executable, str(ROOT / "benchmarks" / script), "--tiny", *args]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, (f"{' '.join(command[1:])} exited {done.returncode}\nstdout: ...{done.stdout[-4000:]}"
                                  f"\nstderr: ...{done.stderr[-4000:]}")
    return done.stdout


def figures(out: str, lines: dict[str, str]) -> dict[str, list[float]]:
    """{name: the numbers of its line}: each pattern (a regular expression whose groups are numbers) must match a
    line of `out`."""
    found = {}
    for name, pattern in lines.items():
        match = re.search(pattern, out, re.MULTILINE)
        assert match, f"no {name} line (/{pattern}/) in the output:\n{out[-4000:]}"
        found[name] = [float(g.replace(",", "")) for g in match.groups()]
    return found


def test_plan_10k_partitions(broker):
    out = run_benchmark("plan_10k_partitions.py", "--bootstrap", broker.bootstrap, timeout=300)
    got = figures(out, {
        "partitions": rf"^partitions\s+{NUMBER}$",
        "plan time": rf"^plan run, batched \(best / median\)\s+{NUMBER} s / {NUMBER} s",
        "plan CPU": rf"^plan run CPU \(median\)\s+{NUMBER} s in this process",
        "naive time": rf"^offsets one request per partition\s+{NUMBER} s",
        "ratio": rf"^ratio naive / batched\s+{NUMBER}x$",
    })
    assert got["partitions"] == [50]  # --tiny's size, so the run above was the tiny one


def test_ingest_job_throughput(broker):
    out = run_benchmark("ingest_job_throughput.py", "--bootstrap", broker.bootstrap, timeout=600)
    sides = {f"{side} median": rf"^  {side}\s+{NUMBER} rec/s \| CPU\s+{NUMBER} us/record \+ broker\s+{NUMBER}"
             for side in ("raw", "job", "spark-kafka", "jvm-reader")}
    ratios = {name: rf"^  {re.escape(name)}\s+{NUMBER}\s+\(per round: {NUMBER}\)"
              for name in ("job / raw consume", "job / Spark's Kafka source (anchor)", "jvm-reader / job")}
    figures(out, {**sides, **ratios,
                  "outputs agree": rf"outputs agree \(job, spark-kafka, jvm-reader\): {NUMBER} rows kept by the filter",
                  "CPU bound": rf"^  job CPU bound: 2 cores / {NUMBER} us of CPU per record .* = {NUMBER} rec/s"})


def test_ingest_job_throughput_avro(broker):
    # the same events as Avro (avro_stream), the job's side only (the others read the same records as for JSON)
    out = run_benchmark("ingest_job_throughput.py", "--bootstrap", broker.bootstrap, "--value-format", "avro",
                        "--sides", "job", timeout=600)
    assert re.search(r"^value format: avro ", out, re.MULTILINE), out[-4000:]
    figures(out, {"job median": rf"^  job\s+{NUMBER} rec/s \| CPU\s+{NUMBER} us/record",
                  "CPU bound": rf"^  job CPU bound: 2 cores / {NUMBER} us of CPU per record .* = {NUMBER} rec/s"})


def test_row_parser_formats():
    out = run_benchmark("row_parser_formats.py", timeout=300)
    figures(out, {**{f"{f} median": rf"^  {f}\s+{NUMBER} rec/s\s+{NUMBER} us/record$"
                     for f in ("json", "avro", "protobuf")},
                  "ratio": rf"^  avro / json {NUMBER}   target >= 1.0$",
                  "protobuf ratio": rf"^  protobuf / json {NUMBER}$"})


def test_fault_soak(tmp_path):
    # its own broker (a soak restarts it), its databases on the session's PostgreSQL; Connect mode, the cheaper
    out = run_benchmark("fault_soak.py", "--spark-connect", "--postgres", pg_base(), "--out", str(tmp_path / "soak"),
                        timeout=900)
    got = figures(out, {
        "runs": rf"^runs: {NUMBER} \({NUMBER} DAG runs",
        "faults": rf"^faults: clean {NUMBER} \(fired {NUMBER}\)$",
        "produced": rf"^produced: {NUMBER} acknowledged records \({NUMBER} not acknowledged\); visible rows: {NUMBER}",
        "lost": rf"^lost: {NUMBER}$",
        "duplicated": rf"^duplicated: {NUMBER}$",
        "median run time": rf"^median run time: {NUMBER} s$",
    })
    assert got["faults"] == [1, 1] and got["lost"] == got["duplicated"] == [0], out


@pytest.mark.timeout(2400)
def test_microbatch_fixed_cost(tmp_path):
    # its own broker, Spark Connect server and PostgreSQL (it measures their CPU); no large runs: they are the small
    # runs' code on more records, and two more DAG runs
    out = run_benchmark("microbatch_fixed_cost.py", "--skip-large", "--out", str(tmp_path / "fixed-cost"),
                        timeout=2300)
    runs = {f"{label} run": rf"^  {label}\s+run 0 \(cold\)\s*: +{NUMBER} s wall, +{NUMBER} CPU-s"
            for label in ("Spark Connect", "spark-submit", "Airflow alone")}
    triggered = {f"{label} triggered": rf"^  {label}\s+trigger to success {NUMBER} s \(min {NUMBER}, max {NUMBER}\)"
                 for label in ("Spark Connect", "spark-submit")}
    figures(out, {**runs, **triggered,
                  "ratio": rf"^  ratio connect / spark-submit \(warm medians\): wall {NUMBER}, CPU {NUMBER}$",
                  "breakdown": rf"^  whole run \(wall\)\s+{NUMBER} s$",
                  "probe": rf"^  as the task does, create {NUMBER} s, settings {NUMBER} s, artifacts {NUMBER} s",
                  "scheduler ratio": rf"^  ratio connect / spark-submit \(medians\): {NUMBER}$",
                  "target": rf"^Target .*: wall {NUMBER} s \(.*\), CPU {NUMBER}x",
                  "floor": rf"^Airflow's own floor .*: {NUMBER} s and {NUMBER} CPU-s per run"})


def test_compaction(tmp_path):
    # SQLite and a local SparkSession of its own: nothing to share
    out = run_benchmark("compaction.py", "--out", str(tmp_path / "compaction"), timeout=600)
    got = figures(out, {
        "published": rf"^  published {NUMBER} microbatches in {NUMBER} s \(publish median {NUMBER} ms\)$",
        "compacted": rf"^  compacted {NUMBER} intervals in {NUMBER} s \(Spark local\[2\]\); query results identical: yes$",
        "files": rf"^  files\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}x$",
        "query": rf"^  group by channel, the day \(s\)\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}x$",
        "to_arrow": rf"^  to_arrow \(s\)\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}x$",
        "iceberg": rf"^  Iceberg commit per publish \(median of {NUMBER}\): publish {NUMBER} ms, sync {NUMBER} ms, "
                   rf"sync / publish {NUMBER}x$",
    })
    assert got["published"][0] == 20 and got["files"][:2] == [40, 1]  # --tiny's size: one hour, compacted to one
