"""Benchmarks are code too: each script under benchmarks/ runs to the end at its tiny size (`--tiny`: every part
once, on a few records) as `make bench` would run it, and prints its figures (a test that leaves a part out or
joins two runs into one says which and why). Only that is checked: each figure line is there and is sane: rates,
times and ratios above zero, counts exactly what the tiny size makes, outputs that must agree agreeing. Never how
fast (a tiny run measures nothing, and a loaded machine would make any bound on a time or speed a race). Where a
script takes a broker (`--bootstrap`), a Spark Connect server (`--spark-connect URL`) or a PostgreSQL server
(`--postgres`) it gets the session's; the others start their own, as they do in `make bench`. fault_soak.py's tiny
run is tests/system/test_soak.py's: the short soak, through the same command line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from bench_cli import NUMBER, Benchmark, assert_positive, figures, run_benchmark, start_benchmark
from conftest import pg_base

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]


# The benchmarks that mostly wait (an `airflow standalone` each, its scheduler's loop, a producer's seconds) start
# with the module, in the background, and the others run meanwhile: a tiny run measures nothing, so sharing the
# cores changes no figure that is checked. Their tests come last and wait for them; they name the servers they get,
# so that the session starts Spark Connect before any Kafka client (conftest's `_spark_before_kafka`).
def _fixed_cost(request, out: Path) -> Benchmark:
    spark_connect, broker = request.getfixturevalue("spark_connect"), request.getfixturevalue("broker")
    return start_benchmark("microbatch_fixed_cost.py", "--skip-large", "--skip-submit", "--out", str(out),
                           "--bootstrap", broker.bootstrap, "--spark-connect", spark_connect.url, "--postgres",
                           pg_base(), timeout=2300)


def _freshness(request, out: Path) -> Benchmark:
    spark_connect, broker = request.getfixturevalue("spark_connect"), request.getfixturevalue("broker")
    return start_benchmark("freshness.py", "--out", str(out), "--bootstrap", broker.bootstrap, "--spark-connect",
                           spark_connect.url, "--postgres", pg_base(), "--duration", "5", timeout=1400)


def _scheduler_soak(request, out: Path) -> Benchmark:
    # its tiny fault leaves the shared servers alone: a publish task's worker SIGKILLed; deep storage on its own S3
    # store (--s3: the one its S3 restart fault restarts), through the session's Connect server's S3A
    spark_connect, broker = request.getfixturevalue("spark_connect"), request.getfixturevalue("broker")
    return start_benchmark("fault_soak.py", "--scheduler", "--tiny", "--s3", "--out", str(out), "--bootstrap",
                           broker.bootstrap, "--spark-connect-url", spark_connect.url, "--postgres", pg_base(),
                           timeout=1400)


def _fleet(request, out: Path) -> Benchmark:
    spark_connect, broker = request.getfixturevalue("spark_connect"), request.getfixturevalue("broker")
    return start_benchmark("fleet.py", "--out", str(out), "--bootstrap", broker.bootstrap, "--spark-connect",
                           spark_connect.url, "--postgres", pg_base(), timeout=1400)


def _history_retention(request, out: Path) -> Benchmark:
    # databases of its own on the session's PostgreSQL server; its Airflow's runs on the session's broker and
    # Spark Connect server
    spark_connect, broker = request.getfixturevalue("spark_connect"), request.getfixturevalue("broker")
    return start_benchmark("history_retention.py", "--postgres", pg_base(), "--bootstrap", broker.bootstrap,
                           "--spark-connect", spark_connect.url, "--out", str(out), timeout=1400)


BACKGROUND = {"test_microbatch_fixed_cost": _fixed_cost, "test_freshness": _freshness,
              "test_fault_soak_under_the_scheduler": _scheduler_soak, "test_fleet": _fleet,
              "test_history_retention": _history_retention}


@pytest.fixture(scope="module", autouse=True)
def background(request, tmp_path_factory) -> dict[str, Benchmark]:
    """{test name: its benchmark, started}: those of BACKGROUND whose tests are selected."""
    selected = {item.name for item in request.session.items}
    started: dict[str, Benchmark] = {}
    try:
        for name, start in BACKGROUND.items():
            if name in selected:
                started[name] = start(request, tmp_path_factory.mktemp(name))
        yield started
    finally:
        for benchmark in started.values():
            benchmark.stop()  # (ended already, unless its test failed first)


def test_plan_partitions(broker):
    out = run_benchmark("plan_partitions.py", "--bootstrap", broker.bootstrap, "--postgres", pg_base(), timeout=300)
    steps = {f"{store} {case}": rf"^{store}, case {case}: plan step \(best / median of 1\)\s+{NUMBER} s / {NUMBER} s"
             for store in ("SQLite", "PostgreSQL") for case in ("first", "committed", "pipelined")}
    got = figures(out, {
        **steps,
        "partitions": rf"^partitions\s+{NUMBER}$",
        "step CPU": rf"^  CPU of the step \(median\)\s+{NUMBER} s in this process",
        "naive time": rf"^offsets one request per partition\s+{NUMBER} s",
        "ratio": rf"^ratio naive / batched\s+{NUMBER}x$",
    })
    # the breakdown: each part the step timed, and what it spent outside them (either may print as 0.000)
    parts = figures(out, {part: rf"^  {re.escape(part)}\s+{NUMBER} s\b" for part in (
        "kafka: discover partitions", "kafka: offsets (and topic ids)", "kafka: earliest offsets", "kafka: topic ids",
        "store: committed offsets", "pure: start offsets", "pure: plan (groups, splits)", "store: plan persisted",
        "deep storage: group inputs staged", "rest (outside the timed calls)")})
    assert got["partitions"] == [50]  # --tiny's size, so the run above was the tiny one
    assert all(v >= 0 for values in parts.values() for v in values), parts
    assert_positive(got)


def test_ingest_job_throughput(broker):
    # every side, the sketches one too (`make bench` runs `--sketches` apart): one JVM and one topic for the JSON
    # sides; the warm-up's outputs agree and every stored sketch reads back (the script's own checks). Then, in the
    # same process and JVM (`make bench` runs `--value-format avro` apart: a JVM's start less here), the same events
    # as Avro (avro_stream), the job's side only: the others read the same records as for JSON.
    out = run_benchmark("ingest_job_throughput.py", "--bootstrap", broker.bootstrap, "--sketches", "--value-format",
                        "json", "avro", "--sides", "raw", "job", "spark-kafka", "jvm-reader", "sketches", timeout=900)
    json_part, avro_part = re.split(r"^value format: avro ", out, maxsplit=1, flags=re.MULTILINE)
    assert re.search(r"^value format: json ", json_part, re.MULTILINE), out[-4000:]
    sides = {f"{side} median": rf"^  {side}\s+{NUMBER} rec/s \| CPU\s+{NUMBER} us/record \+ broker\s+{NUMBER}"
             for side in ("raw", "job", "spark-kafka", "jvm-reader", "sketches")}
    ratios = {name: rf"^  {re.escape(name)}\s+{NUMBER}\s+\(per round: {NUMBER}\)"
              for name in ("job / raw consume", "job / Spark's Kafka source (anchor)", "jvm-reader / job",
                           "sketches / job")}
    got = figures(json_part, {**sides, **ratios,
                              "outputs agree": rf"outputs agree \(job, spark-kafka, jvm-reader, sketches\): {NUMBER} "
                                               rf"rows kept by the filter -> {NUMBER} rolled-up rows",
                              "CPU bound": rf"^  job CPU bound: 2 cores / {NUMBER} us of CPU per record .* = "
                                           rf"{NUMBER} rec/s",
                              "sketches CPU ratio": rf"^  sketches / job CPU per record\s+{NUMBER}\s+\({NUMBER} / "
                                                    rf"{NUMBER} us; per round: {NUMBER}\)\s+target <= 1.5$"})
    assert_positive(got, *ratios, "outputs agree", "CPU bound", "sketches CPU ratio")
    for side in sides:  # a rate and the job's CPU per record; the broker's share of a tiny run may print as 0.00
        rate, cpu, broker_cpu = got[side]
        assert rate > 0 and cpu > 0 and broker_cpu >= 0, (side, got[side])
    kept, rolled_up = got["outputs agree"]
    assert rolled_up <= kept  # rollup only merges rows
    # the Avro part: its own figures, after its own line
    assert_positive(figures(avro_part, {
        "job median": rf"^  job\s+{NUMBER} rec/s \| CPU\s+{NUMBER} us/record",
        "CPU bound": rf"^  job CPU bound: 2 cores / {NUMBER} us of CPU per record .* = {NUMBER} rec/s"}))
    assert not re.search(r"^  (raw|spark-kafka|jvm-reader|sketches)\s+\S+ rec/s \|", avro_part, re.MULTILINE), \
        avro_part  # the job's side only


def test_connect_restart(broker):
    # the warm mode only: the cold one is the same server start and job without the warm-up, a JVM's start more
    out = run_benchmark("connect_restart.py", "--modes", "warm", "--s3", "--bootstrap", broker.bootstrap, timeout=900)
    got = figures(out, {"warm": rf"^warm: server up in {NUMBER} s, warm-up {NUMBER} s; first job {NUMBER} s "
                                rf"\(session {NUMBER} s, Spark {NUMBER} s, {NUMBER} rows\); no next jobs"})
    assert got["warm"][-1] == 50  # --tiny's records, each read once
    assert_positive(got)


def test_row_parser_formats():
    out = run_benchmark("row_parser_formats.py", timeout=300)
    assert_positive(figures(out, {**{f"{f} median": rf"^  {f}\s+{NUMBER} rec/s\s+{NUMBER} us/record$"
                                     for f in ("json", "avro", "protobuf")},
                                  "ratio": rf"^  avro / json {NUMBER}   target >= 1.0$",
                                  "protobuf ratio": rf"^  protobuf / json {NUMBER}$"}))
def test_dag_parse():
    # its own Airflow homes, under the real dag-processor: 3 specs in each layout, each parsed twice
    out = run_benchmark("dag_parse.py", timeout=900)
    for layout, files in (("per-spec", 3), ("one-file", 1)):
        for parse in ("first parse", "parse again"):
            got = figures(out, {"times": rf"^{layout}, 3 specs, {parse}: loop {NUMBER} s; CPU: dag-processor "
                                         rf"{NUMBER} s, its parse processes {NUMBER} s; command {NUMBER} s$",
                                "counts": rf"^{layout}, 3 specs, {parse}: .*\n  files {NUMBER}, DAGs {NUMBER}, "
                                          rf"import errors {NUMBER}; per file: sum {NUMBER} s, slowest {NUMBER} s$"})
            loop, manager_cpu, _, command = got["times"]  # (a parse process's CPU may read 0.00 at this size)
            assert loop > 0 and manager_cpu > 0 and command >= loop, (layout, parse, got)
            assert got["counts"][:3] == [files, 3, 0] and got["counts"][3] > 0, (layout, parse, got)


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
    assert got["compacted"][0] == 1  # the one hour
    assert_positive(got, "published", "compacted", "iceberg")  # times this coarse print above 0 (tiny queries may not)


def test_sql_isolation():
    # its own api-server (Airflow's simple auth manager, SQLite): nothing to share
    out = run_benchmark("sql_isolation.py", timeout=900)
    line = (rf"\s+{NUMBER} s\s+/api/v2/version p50\s+{NUMBER} ms, p99\s+{NUMBER} ms, max\s+{NUMBER} ms "
            rf"\({NUMBER} probes\)\s+api-server RSS peak {NUMBER} MB \(\+?{NUMBER} MB\), workers' peak {NUMBER} MB$")
    got = figures(out, {
        "first": rf"^api-server up; the first query \(the SQL fork server's start\) answered 200 in {NUMBER} s; "
                 rf"api-server RSS {NUMBER} MB$",
        "one": rf"^a one-row query over REST: median {NUMBER} ms over {NUMBER} \(a worker forked per query\)$",
        "baseline": rf"^baseline \(no query\)\s+no query{line}",
        "repeat": rf"^repeat 2 MB x 60\s+400 the result is larger than 64 MB.*?{line}",
        # (on a machine busy enough, past the time limit: Druid's timeout)
        "theta": rf"^theta 300,000, 3 s limit\s+(?:200 1 rows|504 the query ran past its time limit).*?{line}",
        "in list": rf"^IN list 3,000 values, 2 s limit\s+(?:200 1 rows|504 the query ran past its time limit)"
                   rf".*?{line}",
        "max rows": rf"^max rows 1,000\s+200 1000 rows{line}",
        "leaves": rf"^theta 300,000, client leaves\s+left after 1 s{line}",
        "after leaving": rf"^  after the client left: the api-server's processes used {NUMBER} s of CPU, idle again "
                         rf"after {NUMBER} s$",
        "left": rf"^SQL workers left at the end: {NUMBER}$",
    })
    assert got["left"] == [0] and got["after leaving"][0] >= 0 and got["after leaving"][1] > 0, got
    for name in ("baseline", "repeat", "theta", "in list", "max rows", "leaves"):
        wall, p50, p99, most, probes, peak, _, _ = got[name]
        assert wall > 0 and 0 < p50 <= p99 <= most and probes >= 1 and peak > 0, (name, got[name])
    assert got["repeat"][-1] > 0, got  # its worker was seen


def test_sketch_query():
    # SQLite and DuckDB in-process: nothing to share
    out = run_benchmark("sketch_query.py", timeout=300)
    got = figures(out, {
        "built": rf"^built and published in {NUMBER} s: views_rollup {NUMBER} rows with a theta sketch in "
                 rf"{NUMBER} hourly segments; views_raw {NUMBER} rows$",
        **{name: rf"^  {name}\s+.{{40}}\s+{NUMBER}\s+{NUMBER}$"
           for name in ("sketch day", "sketch by channel", "exact day", "exact by channel", "raw sketch day")},
        "estimate": rf"^distinct users, the day: sketches {NUMBER}, exact {NUMBER}, error {NUMBER}%",
        "ratio": rf"^ratio sketches / COUNT\(DISTINCT\) over raw rows, the day: wall {NUMBER}x, CPU {NUMBER}x$",
    })
    assert got["built"][1:3] == [40, 2]  # --tiny's size
    assert all(n > 0 for n in got["built"][1:]) and all(r > 0 for r in got["ratio"]), got
    sketch, exact, error = got["estimate"]
    assert exact > 0 and abs(sketch - exact) / exact * 100 == pytest.approx(error, abs=0.06)  # the error it prints



@pytest.mark.timeout(2400)
def test_microbatch_fixed_cost(background, broker, spark_connect):  # (the servers `background` gave it)
    # the session's broker, Spark Connect server and PostgreSQL (in `make bench` it starts its own, to measure the
    # server's cold start and CPU: a tiny run measures nothing); no large runs: they are the small runs' code on
    # more records, and two more DAG runs. Connect and Airflow alone only, in both parts (--skip-submit: a
    # spark-submit run is the same code as theirs, and a JVM's start; test_scheduler runs one under a scheduler);
    # under the scheduler each after a warm-up run, the scheduler preloading the tasks' libraries (the default).
    out = background["test_microbatch_fixed_cost"].output()
    runs = {f"{label} run": rf"^  {label}\s+run 0 \(cold\)\s*: +{NUMBER} s wall, +{NUMBER} CPU-s"
            for label in ("Spark Connect", "Airflow alone")}
    triggered = {f"{label} triggered": rf"^  {label}\s+trigger to success {NUMBER} s \(min {NUMBER}, max {NUMBER}\)"
                 for label in ("Spark Connect", "Airflow alone")}
    warmed = {f"{label} warm-up": rf"^  {label}\s+warm-up: +{NUMBER} s trigger to success .* not counted "
              for label in ("Spark Connect", "Airflow alone")}
    got = figures(out, {**runs, **triggered, **warmed,
                  "breakdown": rf"^  whole run \(wall\)\s+{NUMBER} s$",
                  "warm-up": rf"^  server warm-up: {NUMBER} group jobs of {NUMBER} records in {NUMBER} s "
                             rf"\(not counted\), a job's run_job {NUMBER} s first",
                  "probe": rf"^  as the task does, create {NUMBER} s, settings {NUMBER} s, artifacts {NUMBER} s",
                  "spark floor": rf"^  Spark's own floor for a query of a job's shape .*: {NUMBER} s ",
                  "of which spark": rf"^  of which Spark's own: {NUMBER} queries of a job's shape, "
                                    rf"{NUMBER} x {NUMBER} s",
                  "scheduler floor ratio": rf"^  ratio connect / Airflow alone \(medians\): queued to success {NUMBER} "
                                           rf"\({NUMBER} s against {NUMBER} s\), trigger to success {NUMBER} ",
                  "scheduler target": rf"^Under the scheduler .*: {NUMBER} s against {NUMBER} s, {NUMBER}x: ",
                  "floor ratio": rf"^  ratio connect / Airflow alone \(warm medians\): wall {NUMBER} ",
                  "against floor": rf"^  whole run\s+{NUMBER} s\s+{NUMBER} s\s+[-+]?{NUMBER} s$",
                  "target": rf"^Target .*: {NUMBER} s against {NUMBER} s, {NUMBER}x: "})
    assert_positive(got, *runs, *triggered, *warmed, "breakdown", "warm-up", "spark floor", "of which spark",
                    "floor ratio", "target",
                    "scheduler floor ratio", "scheduler target")
    assert not re.search(r"^  spark-submit ", out, re.MULTILINE), out  # --skip-submit was heard by both parts
    assert "the scheduler preloads the tasks libraries" in out, out  # its task processes inherit them
    for name in triggered:
        median, low, high = got[name]
        assert low <= median <= high, (name, got[name])


@pytest.mark.timeout(1500)
def test_freshness(background, broker, spark_connect):  # (the servers `background` gave it)
    # the session's broker, Spark Connect server and PostgreSQL; its own airflow standalone over a continuous DAG,
    # then the Structured Streaming anchor in a spark-submit of its own. Producing for 5 s instead of --tiny's 15 s
    # (at its 20 events/s) still runs every part of both sides; only the waiting for the producer is shorter.
    out = background["test_freshness"].output()
    line = (rf"{NUMBER}/s  p50 +{NUMBER} s  p95 +{NUMBER} s  p99 +{NUMBER} s  max +{NUMBER} s  events {NUMBER} of "
            rf"{NUMBER} \(duplicates {NUMBER}\)  lag (?:growing|steady)")
    got = figures(out, {"project": rf"^  this project +{line}", "anchor": rf"^  Structured Streaming 1s +{line}"})
    assert re.search(r"^  this project +highest rate held \(p99 <= 30 s.*\): (20 events/s|none of those tried)$", out,
                     re.MULTILINE), out
    # where the seconds went, from Airflow's task instances and the run records: at least the run that read them
    runs = re.search(r"^      where the seconds went: (\d+) runs with records \(of (\d+)\), records per run median "
                     r"([\d,]+)", out, re.MULTILINE)
    assert runs and 1 <= int(runs[1]) <= int(runs[2]), out
    for phase in ("plan", "jobs", "publish", "plan to visible"):
        assert re.search(rf"^        {phase} +{NUMBER} s ", out, re.MULTILINE), out
    for side in ("project", "anchor"):
        rate, p50, p95, p99, worst, seen, produced, duplicates = got[side]
        # every acknowledged event seen exactly once (the script exits 1 otherwise), each after it was produced
        assert rate == 20 and seen == produced == 100 and duplicates == 0, out
        assert 0 < p50 <= p95 <= p99 <= worst, out


def test_fault_soak_under_the_scheduler(background, broker, spark_connect):  # (the servers `background` gave it)
    # a @continuous datasource under Airflow's own components, each started again when it exits: the worker of a
    # publish task SIGKILLed (the heartbeat timeout Airflow's home ships fails the try, the retry publishes). The
    # fault fired, data was published again after it, and every record is visible once. (The scheduler killed,
    # PostgreSQL crashed, ...: `make bench`'s run; each would add a minute to the suite.)
    got = figures(out := background["test_fault_soak_under_the_scheduler"].output(),
                  {"kill_worker_publish": rf"^  kill_worker_publish +{NUMBER}/{NUMBER} +{NUMBER} s +{NUMBER} +{NUMBER}$"})
    fired, faults, stall, lost, duplicated = got["kill_worker_publish"]
    assert fired == faults == 1 and stall > 0 and lost == duplicated == 0, out
    records = figures(out, {"records": rf"^records: produced {NUMBER}, visible {NUMBER}, lost {NUMBER}, duplicated "
                                       rf"{NUMBER}, unexpected {NUMBER}$"})["records"]
    produced, visible, lost, duplicated, unexpected = records
    assert produced > 0 and visible == produced and lost == duplicated == unexpected == 0, out
    assert re.search(r"^stalls over 60 s: (none|kill_worker_publish)$", out, re.MULTILINE), out  # printed, not a bound


FLEET_COMPONENTS = {"local": ["scheduler", "dag-processor", "triggerer", "api-server"],
                    "celery": ["scheduler", "dag-processor", "triggerer", "api-server", "celery-worker-1",
                               "celery-worker-2"]}


def test_fleet(background, broker, spark_connect):  # (the servers `background` gave it)
    # two datasources (one @continuous, one PT1M) on each executor's Airflow, each case for 5 s: every part runs
    # once (the first parse, each component's CPU and RSS, both databases' tables, producer and poller), measuring
    # nothing. The session's Spark Connect server is not the benchmark's: its CPU is not seen (no spark row).
    out = background["test_fleet"].output()
    for executor, components in FLEET_COMPONENTS.items():
        parse = figures(out, {"parse": rf"^  {executor}, N=2: healthy and 2 DAGs parsed {NUMBER} s after the start "
                                       rf"\(not counted\); first parse: loop {NUMBER} s, files {NUMBER}, per file sum "
                                       rf"{NUMBER} s, slowest {NUMBER} s"})["parse"]
        assert parse[2] == 2 and parse[3] >= parse[4] > 0, out  # a DAG file per spec, each parsed
        for case in ("idle", "mix", "busy"):
            block = out.split(f"\n  {executor}, N=2, {case}: ", 1)[1].split("\n\n", 1)[0]
            cpu = figures(block, {name: rf"^    {name} +{NUMBER} +{NUMBER} +{NUMBER} +{NUMBER}$"
                                  for name in components})
            assert all(v >= 0 for values in cpu.values() for v in values) and cpu["scheduler"][3] > 0, block
            assert not re.search(r"^    spark ", block, re.MULTILINE), block
            # what each case produced: nothing idle; 20/s x 5 s of the @continuous one in mix, 2/s x 5 s otherwise
            produced = {group: int(n.replace(",", "")) for group, n in re.findall(
                r"^    freshness (@continuous|PT1M) +\(1 datasources\): .* visible [\d,]+ of ([\d,]+) events$",
                block, re.MULTILINE)}
            assert produced == {"idle": {}, "mix": {"@continuous": 100, "PT1M": 10},
                                "busy": {"@continuous": 10, "PT1M": 10}}[case], block
            figures(block, {"Airflow's database": rf"^    Airflow's database: {NUMBER} rows/day, {NUMBER} MiB/day",
                            "store": rf"^    the store: {NUMBER} rows/day, {NUMBER} MiB/day",
                            "verdict": rf"^    (?:kept up|DID NOT KEEP UP); the machine's CPU \({NUMBER} of 2 cores\)"})
    rows = re.findall(r"^  (local|celery) +2  (idle|mix|busy) ", out, re.MULTILINE)
    assert sorted(rows) == sorted((e, c) for e in FLEET_COMPONENTS for c in ("idle", "mix", "busy")), out


@pytest.mark.timeout(1500)
def test_history_retention(background):
    out = background["test_history_retention"].output()
    got = figures(out, {
        "generated": rf"^generated {NUMBER} days of @continuous history at {NUMBER} runs a day \({NUMBER} runs\) in "
                     rf"{NUMBER} s$",
        "runs": rf"^  ingest_runs\s+{NUMBER} rows\s+{NUMBER} MB\s+{NUMBER} rows/day\s+{NUMBER} MB/day$",
        "reports": rf"^  ingest_task_reports\s+{NUMBER} rows\s+{NUMBER} MB\s+{NUMBER} rows/day\s+{NUMBER} MB/day$",
        "clean": rf"^ingest db clean \(30 days, the last 100 runs kept\): {NUMBER} s, {NUMBER} runs, {NUMBER} task "
                 rf"groups, {NUMBER} task reports, {NUMBER} audit rows deleted \({NUMBER} runs/s\)$",
        # Airflow's side: real runs, one dag_run row each, and task instances; their log files
        "dag_run": rf"^  dag_run\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}$",
        "task_instance": rf"^  task_instance\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}$",
        "logs": rf"^  task log files\s+{NUMBER}\s+{NUMBER}$",
        "continuous": rf"^@continuous: {NUMBER} runs of hist_continuous, a run every {NUMBER} s \(measured\), "
                      rf"{NUMBER} runs a day$",
        "scheduled": rf"^PT1M: {NUMBER} runs of hist_scheduled, a run every {NUMBER} s \(measured\), {NUMBER} runs a "
                     rf"day$",
        "copied": rf"^generated {NUMBER} days of Airflow history of the @continuous datasource at {NUMBER} runs a day "
                  rf"\({NUMBER} runs, copies of its real runs\) in {NUMBER} s$",
        "archived": rf"^airflow db clean \(before 35 days, archived\): {NUMBER} s, {NUMBER} dag runs and {NUMBER} "
                    rf"rows in all deleted \({NUMBER} rows/s\), archived {NUMBER} rows \({NUMBER} MB\)$",
        "skipped": rf"^airflow db clean \(before 30 days, --skip-archive\): {NUMBER} s, {NUMBER} dag runs and "
                   rf"{NUMBER} rows in all deleted \({NUMBER} rows/s\), archived {NUMBER} rows \({NUMBER} MB\)$",
        "airflow runs": rf"^Airflow's dag runs: {NUMBER} before the cleans, {NUMBER} after$",
        "growth": rf"^growth a day, one @continuous datasource at {NUMBER} runs a day \(measured\): the store "
                  rf"{NUMBER} MB, Airflow's database {NUMBER} MB, task log files {NUMBER} MB$",
    })
    assert got["generated"][:3] == [40, 200, 8000]  # --tiny's size
    assert got["runs"][0] == 8000 and got["runs"][2] == 200 and got["reports"][0] == 16000
    # 10 days past the 30 kept: 2,000 runs, two groups and two reports each, an audit row a day
    assert got["clean"][1:5] == [2000, 4000, 4000, 10]
    assert got["dag_run"][0] == 1 and got["dag_run"][2] == 1  # a dag_run row per run, of either datasource
    assert got["task_instance"][0] >= 5 and got["task_instance"][2] >= 4  # plan, job, publish, report (and the skipped)
    assert got["continuous"][0] >= 2 and got["scheduled"][0] >= 2  # --tiny's 2 real runs each, or more
    assert got["copied"][:3] == [40, 20, 800]  # copied at 20 a day
    # each datasource's 800 copies, a run every 1.2 h: those older than 35 days (99 each), then than 30 (100 each);
    # the archive holds what the first deleted (not the rows deleted with them by a foreign key's cascade), the
    # second archives nothing
    assert got["archived"][1] == 198 and 0 < got["archived"][4] <= got["archived"][2]
    assert got["skipped"][1] == 200 and got["skipped"][4] == 0
    assert got["airflow runs"][0] - got["airflow runs"][1] == 398
    assert_positive(got, "generated", "clean", "growth", "logs")
