"""The ingest job over Spark Connect (`ingest_core.spark.connect`) against a real local Connect server: the same
plan gives the same segments and report as the job in a SparkSession of its own; a deadline interrupts its job
and not the other jobs of the session; the jobs of a datasource share a session (and its Python workers); a
server that dies mid-job fails the job's attempt, the job runs again at once once the server is back, and the plan
publishes every record once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psutil
import pyarrow.parquet as pq
import pytest
from helpers import WATCHDOG_S, spec_from

from ingest_core.dev.embedded_spark import EmbeddedSparkConnect
from ingest_core.handover import deep_storage
from ingest_core.handover.report import GroupReport
from ingest_core.handover.job_input import GroupInput, JobInput
from ingest_core.spark.connect import run_job
from ingest_core.store.metadata import MetadataStore
from ingest_core.store.publisher import GroupResult, Publisher
from ingest_core.store.reader import DatasourceReader
from ingest_core.supervisor.planning import Supervisor

pytestmark = pytest.mark.kafka

ROOT = Path(__file__).resolve().parents[2]

T0 = datetime(2026, 3, 2, 10, 0, tzinfo=timezone.utc)
SCHEMA = {
    "timestampSpec": {"column": "ts", "format": "iso"},
    "dimensionsSpec": {"dimensions": ["a", "b"]},
    "metricsSpec": [{"type": "count", "name": "cnt"}, {"type": "longSum", "name": "v_sum", "fieldName": "v"}],
    "granularitySpec": {"segmentGranularity": "HOUR", "queryGranularity": "MINUTE", "rollup": True},
}


@pytest.fixture
def store(tmp_path) -> MetadataStore:
    with MetadataStore(f"sqlite:///{tmp_path / 'md.db'}") as s:
        s.upgrade()
        yield s


def produce(broker, topic: str, n: int, partitions: int, seed: int = 0) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i in range(n):
        event = {"ts": (T0 + timedelta(seconds=7 * i + seed)).isoformat().replace("+00:00", "Z"),
                 "a": f"a{i % 5}", "b": f"b{i % 3}", "v": i}
        p.produce(topic, json.dumps(event).encode(), partition=i % partitions)
    assert p.flush(30) == 0


def stage(tmp_path, spec, plan) -> tuple[str, str]:
    """The spec and each task group's input, staged as the plan step does; (spec URI, the inputs' folder)."""
    folder = (tmp_path / "staged").as_uri()
    spec_uri = deep_storage.join(folder, "spec.json")
    deep_storage.write_json(spec_uri, spec.to_raw())
    for group in plan.groups:
        deep_storage.write_json(deep_storage.join(folder, f"group={group.group_id}.json"),
                                GroupInput.of_plan(plan, group.group_id, spec_uri).to_json())
    return spec_uri, folder


def job_args(spec_uri: str, inputs: str, group: int, output: str) -> JobInput:
    return JobInput(deep_storage.join(inputs, f"group={group}.json"), group, 0, output)


DEADLINE_TEST = "test_a_deadline_interrupts_the_job_and_not_the_other_jobs_of_its_session"
SERVER_DIES_TEST = "test_a_server_that_dies_mid_job_fails_the_attempt_and_the_job_runs_again_at_once_exactly_once"


@pytest.fixture(scope="module", autouse=True)
def own_server(request, broker, tmp_path_factory):
    """A Spark Connect server of this module's own (the server-death test kills it) and, on it, the deadline
    scenario (`connect_deadlines.py`, in a process of its own: a Connect client switches pyspark's mode for its
    whole process, and this one runs classic sessions meanwhile), both started with the module in a thread: they
    mostly wait (the server's start; jobs on a broker that never answers, until their deadlines) while the other
    tests run on the session's server. Their two tests come last: {"server": the server, "deadlines": the
    scenario's outcome} once both are done."""
    selected = {item.name for item in request.session.items} & {DEADLINE_TEST, SERVER_DIES_TEST}
    if not selected:
        yield None
        return
    tmp = tmp_path_factory.mktemp("own-server")
    server = EmbeddedSparkConnect(tmp / "server", driver_memory="1g", warm_up=False)  # the tests' time: no warm-up
    deadline_args = staged_deadline_jobs(broker, tmp / "deadlines") if DEADLINE_TEST in selected else None
    try:
        with ThreadPoolExecutor(1) as pool:  # its exit waits for the thread, which its own deadlines end
            yield pool.submit(start_and_run_deadlines, server, deadline_args, (tmp / "deadlines").as_uri())
    finally:
        server.stop()


def staged_deadline_jobs(broker, tmp_path) -> list[str]:
    """The deadline scenario's jobs' arguments (but their outputs): a plan of 200 records, run with a spec whose
    broker does not answer, so a split waits for it far longer than any deadline (metadata: 30 s; stall
    timeout: 600 s) and only its deadline ends a job. Two jobs of one datasource share a session."""
    from ingest_core.dev.embedded import free_port

    tmp_path.mkdir()
    topic = broker.create_topic(partitions=1)
    produce(broker, topic, 200, 1)
    with MetadataStore(f"sqlite:///{tmp_path / 'md.db'}") as store:
        store.upgrade()
        spec = spec_from(broker.bootstrap, topic, SCHEMA, datasource="slow")
        plan = Supervisor(spec, store).plan("manual__slow").plan
    silent = spec_from(f"127.0.0.1:{free_port()}", topic, SCHEMA, datasource="slow")  # a session of its own
    _, inputs = stage(tmp_path, silent, plan)
    return ["--input", deep_storage.join(inputs, "group=0.json"), "--group", "0", "--stall-timeout", "600"]


def start_and_run_deadlines(server: EmbeddedSparkConnect, deadline_args: list[str] | None, output: str) -> dict:
    server.start()
    outcome: dict = {"server": server}
    if deadline_args is not None:
        env = {k: v for k, v in os.environ.items() if k != "SPARK_CONNECT_MODE_ENABLED"}  # this process's mode
        done = subprocess.run([sys.executable, str(ROOT / "tests" / "connect_deadlines.py"), server.url, output,
                               *deadline_args], capture_output=True, text=True, env=env, timeout=2 * WATCHDOG_S)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        outcome["deadlines"] = json.loads(done.stdout.strip().splitlines()[-1])
    return outcome


def segment_rows(report: dict) -> list[dict]:
    rows = []
    for seg in report["segments"]:
        fs, path = deep_storage.filesystem(seg["location"])
        with fs.open_input_file(path) as f:
            rows.extend(pq.read_table(f).to_pylist())
    return sorted(rows, key=lambda r: (r["__time"], r["a"], r["b"]))


def comparable(report: dict) -> dict:
    """A report without what differs between two runs of the same plan: timings, locations, the replica."""
    out = {k: v for k, v in report.items() if k not in ("seconds", "segments", "replica", "splits", "marks")}
    out["segments"] = [{k: v for k, v in s.items() if k not in ("location", "bytes")} for s in report["segments"]]
    out["splits"] = [{k: v for k, v in s.items() if k not in ("seconds", "startedAt")}
                     for s in report.get("splits", [])]
    assert set(report.get("marks", {})) <= {"started", "writeStarted", "writeEnded", "ended"}
    return out


def test_connect_mode_gives_the_same_segments_and_report_as_a_session_of_its_own(spark_connect, spark, broker,
                                                                                   store, tmp_path):
    from ingest_core.spark.job import GroupJob, run_group

    topic = broker.create_topic(partitions=2)
    produce(broker, topic, 300, 2)
    # with schema discovery and sketch metrics: their passes (mapInArrow) run on the Connect server's Python
    # workers too
    discovering = {**SCHEMA, "dimensionsSpec": {"useSchemaDiscovery": True, "dimensions": ["a"]},
                   "metricsSpec": SCHEMA["metricsSpec"] + [
                       {"type": "thetaSketch", "name": "v_theta", "fieldName": "v"},
                       {"type": "quantilesDoublesSketch", "name": "v_quantiles", "fieldName": "v"}]}
    spec = spec_from(broker.bootstrap, topic, discovering, io={"taskCount": 2})
    plan = Supervisor(spec, store).plan("manual__eq").plan
    spec_uri, plan_uri = stage(tmp_path, spec, plan)
    for group in plan.groups:
        own = (tmp_path / f"own-{group.group_id}").as_uri()
        remote = (tmp_path / f"connect-{group.group_id}").as_uri()
        expected = run_group(spark, GroupJob.of_plan(spec, plan, group.group_id, 0, own)).to_json()
        summary = run_job(spark_connect.url, job_args(spec_uri, plan_uri, group.group_id, remote))
        got = deep_storage.read_json(summary["report"])
        assert got["state"] == "SUCCESS" and summary["rows"] == expected["rowStats"]["processed"] == 150
        assert comparable(got) == comparable(expected)
        assert segment_rows(got) == segment_rows(expected)
        assert got["segments"][0]["types"]["b"] == "STRING" and got["segments"][0]["dimensions"] == ["a", "b"]
        assert got["segments"][0]["types"]["v_theta"] == "COMPLEX<sketch>"


def test_the_read_plan_names_the_split_reader_holds_no_shuffle_and_shows_no_secret(spark_connect, spark, tmp_path):
    """The splits are read by a function each task runs (`mapInArrow` over a range of one row per split): the
    secrets it carries never show in Spark's plans (what the UI's SQL pages show), over Spark Connect or in a
    session of its own, and no shuffle stands between a split's row and its reader."""
    import contextlib
    import io

    from ingest_core.core.offsets import OffsetRange, TopicPartition
    from ingest_core.spark.connect import connect_mode, open_session
    from ingest_core.spark.job import read_splits
    from ingest_core.spark.kafka_source import ReadJob

    secret = "l1teral-Pa55word!"
    splits = (OffsetRange(TopicPartition("t", 0), 0, 10), OffsetRange(TopicPartition("t", 1), 3, 9))
    job = ReadJob(spec=spec_from("127.0.0.1:9", "t", SCHEMA), created_at=T0, splits=splits,
                  output_uri=tmp_path.as_uri())

    def plans(session) -> str:
        rows = read_splits(session, job, {"bootstrap.servers": "127.0.0.1:9", "sasl.password": secret},
                           {"type": "json", "password": secret}, {"secretKey": secret})
        shown = io.StringIO()
        with contextlib.redirect_stdout(shown):
            rows.explain(True)
        return shown.getvalue()

    with connect_mode():
        remote = open_session(spark_connect.url)
        try:
            texts = [plans(remote)]
        finally:
            remote.stop()
    texts.append(plans(spark))
    for text in texts:
        physical = text.split("== Physical Plan ==")[1]
        assert "SplitsReader" in physical and "Range (0, 2, step=1, splits=2)" in physical, physical
        assert "Exchange" not in physical and secret not in text
    # a small group's one task (`read_tasks`): Spark sees one partition, and rolls it up without a shuffle
    from ingest_core.spark.job import rollup

    def rolled_plan(tasks: int) -> str:
        rows = read_splits(spark, job, {"bootstrap.servers": "127.0.0.1:9"}, tasks=tasks)
        return rollup(rows, job.spec)[0]._jdf.queryExecution().executedPlan().toString()

    assert "splits=1)" in rolled_plan(1) and "Exchange" not in rolled_plan(1), rolled_plan(1)
    assert "Exchange hashpartitioning" in rolled_plan(2), rolled_plan(2)


def python_daemons(server) -> int:
    """The Spark Connect server's Python daemons (pyspark's, and ours for the workers that read: the embedded
    server's `spark.python.daemon.module`): Spark starts them per session and worker module (SPARK-54055) and
    keeps them until it stops. A worker forked from a daemon has its command line; it is not counted (Spark
    closes an idle one after a minute, so their number depends on the clock)."""
    def title(pid: int) -> str:
        try:
            return " ".join(psutil.Process(pid).cmdline())
        except psutil.Error:
            return ""

    def is_daemon(pid: int) -> bool:
        return any(d in title(pid) for d in ("pyspark.daemon", "spark_jobs.python_daemon"))

    def parent(p: psutil.Process) -> int:
        try:
            return p.ppid()
        except psutil.Error:
            return 0

    procs = psutil.Process(server.proc.pid).children(recursive=True)
    return sum(1 for p in procs if is_daemon(p.pid) and not is_daemon(parent(p)))


def test_the_jobs_of_a_datasource_share_one_session_and_its_python_workers(spark_connect, broker, store, tmp_path):
    if getattr(spark_connect, "proc", None) is None:
        pytest.skip("counts the processes of the tests' own Spark Connect server")
    topic = broker.create_topic(partitions=2)
    produce(broker, topic, 120, 2)
    spec = spec_from(broker.bootstrap, topic, SCHEMA, datasource="shared_session")
    plan = Supervisor(spec, store).plan("manual__shared").plan
    spec_uri, plan_uri = stage(tmp_path, spec, plan)

    def job(n: int) -> dict:
        summary = run_job(spark_connect.url, job_args(spec_uri, plan_uri, 0, (tmp_path / f"o{n}").as_uri()))
        assert summary["rows"] == 120
        return summary

    job(0)
    daemons = python_daemons(spark_connect)
    for n in (1, 2, 3):  # a session per job would start (and keep) a daemon per worker module each time
        job(n)
    assert python_daemons(spark_connect) == daemons
    # the first jobs of another datasource, at the same moment (a run's groups under a scheduler), all succeed:
    # they add the code and register the data source in its new session at once
    other = spec_from(broker.bootstrap, topic, SCHEMA, datasource="shared_session_2")
    spec_uri2, plan_uri2 = stage(tmp_path / "other", other, Supervisor(other, store).plan("manual__shared2").plan)

    def first_job(n: int) -> int:
        args = job_args(spec_uri2, plan_uri2, 0, (tmp_path / f"p{n}").as_uri())
        return run_job(spark_connect.url, args)["rows"]

    with ThreadPoolExecutor(3) as pool:
        assert list(pool.map(first_job, (0, 1, 2))) == [120, 120, 120]
    # the session's settings and the code shipped with it stay; a job only detaches from it
    from pyspark.sql import SparkSession

    from ingest_core.spark.connect import (
        PYTHON_CHECKED,
        code_archive,
        connect_mode,
        session_url,
    )
    with connect_mode():
        spark = SparkSession.builder.remote(session_url(spark_connect.url, "shared_session", code_archive())).create()
        try:
            assert spark.conf.get(PYTHON_CHECKED) == "%d.%d" % sys.version_info[:2]
        finally:
            spark.release_session_on_close = False
            spark.stop()


def test_an_unreachable_server_is_a_clear_error(tmp_path, store, broker, monkeypatch):
    from ingest_core.core.errors import SparkConnectUnavailableError
    from ingest_core.dev.embedded import free_port
    from ingest_core.spark.connect import CONNECT_TIMEOUT_VAR

    monkeypatch.setenv(CONNECT_TIMEOUT_VAR, "5")  # a refused connection waits out the session deadline too
    topic = broker.create_topic(partitions=1)
    spec = spec_from(broker.bootstrap, topic, SCHEMA)
    plan = Supervisor(spec, store).plan("manual__gone").plan
    spec_uri, plan_uri = stage(tmp_path, spec, plan)
    with pytest.raises(SparkConnectUnavailableError, match="did not accept a session within 5s"):
        run_job(f"sc://127.0.0.1:{free_port()}", job_args(spec_uri, plan_uri, 0, (tmp_path / "o").as_uri()))


def test_a_session_the_server_closed_gives_way_to_the_datasource_s_next_one(spark_connect, broker, store, tmp_path):
    """A shared session the server closed (idle past `defaultSessionTimeout`; here released, which the server
    remembers the same way) cannot be opened again: the datasource's next job opens its next derived session,
    and the job after that shares that one."""
    from pyspark.sql import SparkSession

    from ingest_core.spark.connect import (
        PYTHON_CHECKED,
        code_archive,
        connect_mode,
        session_url,
    )
    topic = broker.create_topic(partitions=2)
    produce(broker, topic, 60, 2)
    spec = spec_from(broker.bootstrap, topic, SCHEMA, datasource="closed_session")
    spec_uri, plan_uri = stage(tmp_path, spec, Supervisor(spec, store).plan("manual__closed").plan)

    def job(n: int) -> int:
        return run_job(spark_connect.url, job_args(spec_uri, plan_uri, 0, (tmp_path / f"o{n}").as_uri()))["rows"]

    def session(generation: int):
        url = session_url(spark_connect.url, "closed_session", code_archive(), generation)
        return SparkSession.builder.remote(url).create()

    assert job(0) == 60
    with connect_mode():
        first = session(0)
        assert first.conf.get(PYTHON_CHECKED) == "%d.%d" % sys.version_info[:2]  # the job's session
        first.stop()  # releases it: the server closes it for good
        probe = session(0)
        try:
            with pytest.raises(Exception, match="SESSION_CLOSED"):
                probe.conf.get(PYTHON_CHECKED)
        finally:
            probe.release_session_on_close = False
            probe.stop()
    assert job(1) == 60
    assert job(2) == 60
    with connect_mode():
        second = session(1)
        try:
            assert second.conf.get(PYTHON_CHECKED) == "%d.%d" % sys.version_info[:2]
        finally:
            second.release_session_on_close = False
            second.stop()


def test_a_deadline_interrupts_the_job_and_not_the_other_jobs_of_its_session(own_server):
    # two jobs of a datasource on a broker that never answers, one with 8 s, the other with 30 s
    outcome = own_server.result(timeout=3 * WATCHDOG_S)["deadlines"]  # its own deadlines end it sooner
    assert "interrupted after 8s" in outcome["first"], outcome
    assert outcome["later running when the first ended"], outcome  # its own deadline was still to come
    assert "interrupted after 30s" in outcome["later"], outcome


def test_a_server_that_dies_mid_job_fails_the_attempt_and_the_job_runs_again_at_once_exactly_once(
        own_server, broker, store, tmp_path, monkeypatch):
    """The server SIGKILLed mid-job and started again only once the job's attempt has failed (pyspark's retries
    exhausted, its FAILED report written): the same `run_job` runs the group again at once, as a new attempt on a
    new session, rather than failing its task for Airflow to retry after the task's retryDelay (a minute by
    default); the plan publishes every record once."""
    server = own_server.result(timeout=3 * WATCHDOG_S)["server"]  # its own: the test kills it
    if server.proc is None:
        server.start()
    monkeypatch.setenv("INGEST_SPARK_CONNECT_TIMEOUT", str(3 * WATCHDOG_S))  # the new session waits for the restart
    topic = broker.create_topic(partitions=1)
    produce(broker, topic, 400, 1)
    spec = spec_from(broker.bootstrap, topic, {**SCHEMA, "granularitySpec": {"segmentGranularity": "HOUR",
                                                                               "rollup": False}},
                     tuning={"maxRecordsPerPoll": 10})
    plan = Supervisor(spec, store).plan("manual__crash").plan
    spec_uri, plan_uri = stage(tmp_path, spec, plan)
    out = tmp_path / "out"
    outcome: dict = {}

    def job() -> None:
        try:
            outcome["summary"] = run_job(server.url, job_args(spec_uri, plan_uri, 0, out.as_uri()))
        except BaseException as exc:  # noqa: BLE001 - the test inspects it
            outcome["failure"] = exc

    worker = threading.Thread(target=job)
    worker.start()
    deadline = time.monotonic() + 240
    while not any(out.glob("attempt=*/progress/*.json")) and worker.is_alive():
        assert time.monotonic() < deadline, "the job never started reading"
        time.sleep(0.2)
    server.kill()  # mid-job: the split has reported progress and is still reading
    deadline = time.monotonic() + 180
    while not any(out.glob("attempt=*/report.json")) and worker.is_alive():  # the attempt gave up on the server
        assert time.monotonic() < deadline, "the client hung after the server died"
        time.sleep(0.2)
    server.start()
    worker.join(3 * WATCHDOG_S)
    assert not worker.is_alive(), "the job did not end after its server came back"
    assert "failure" not in outcome, f"the job failed: {outcome.get('failure')!r}"
    reports = {p.parent.name: GroupReport.loads(p.read_text(), str(p)) for p in out.glob("attempt=*/report.json")}
    assert sorted(r.state.value for r in reports.values()) == ["FAILED", "SUCCESS"], reports
    summary = outcome["summary"]
    Publisher(store).publish(spec.datasource, "manual__crash",
                             [GroupResult.from_report(GroupReport.loads(deep_storage.read_text(summary["report"]),
                                                                        summary["report"]))])
    rows = DatasourceReader(store, spec.datasource).to_arrow()
    assert rows.num_rows == 400 and sorted(rows.column("v_sum").to_pylist()) == list(range(400))
