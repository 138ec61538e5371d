"""End to end with real Airflow (`airflow dags test`), the real broker and PostgreSQL, and Spark in both modes:
over the session's Spark Connect server (most tests: seconds per run) and through spark-submit."""

from __future__ import annotations

import contextlib
import functools
import io
import json
import logging
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import airflow_db
import pytest
import yaml
from conftest import postgres_database
from helpers import group_offsets

from ingest_core.dev.demo import airflow_env, spark_connection
from ingest_core.dev.demo import produce as produce_wiki
from ingest_core.handover.deep_storage import attempt_folders, group_uri
from ingest_core.core.states import RunStatus
from ingest_core.store.metadata import MetadataStore
from ingest_core.store.reader import DatasourceReader
from ingest_core.query.engine import run_sql

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]

ROOT = Path(__file__).resolve().parents[2]
AIRFLOW = str(Path(sys.executable).parent / "airflow")


class AirflowHome:
    """An Airflow home with its own SQLite database and a DAG folder; runs `airflow` commands in it. Its
    `spark_default` connection is the Spark Connect server at `spark_connect_url`, else spark-submit."""

    def __init__(self, root: Path, dags_folder: Path, bootstrap: str, metadata_url: str,
                 spark_connect_url: str | None = None):
        self.root, self.dags_folder, self.metadata_url = root, dags_folder, metadata_url
        self.env = airflow_env(root, bootstrap, dags_folder=dags_folder, metadata_url=metadata_url,
                               spark_connect_url=spark_connect_url)
        airflow_db.migrate(self.env)
        MetadataStore(metadata_url).upgrade()

    def airflow(self, *args: str, check: bool = True, env: dict | None = None) -> subprocess.CompletedProcess:
        done = subprocess.run([AIRFLOW, *args], env=env or self.env, capture_output=True, text=True, timeout=900)
        if check and done.returncode != 0:
            raise AssertionError(f"airflow {' '.join(args)} exited {done.returncode}:\n{done.stdout[-4000:]}\n"
                                 f"{done.stderr[-4000:]}")
        return done

    def dags_test(self, dag_id: str, logical_date: str, **kwargs) -> subprocess.CompletedProcess:
        return self.airflow("dags", "test", dag_id, logical_date, **kwargs)

    def db(self) -> contextlib.closing[sqlite3.Connection]:
        """Airflow's own database of this home, read where its CLI reads it (no CLI process per look)."""
        return contextlib.closing(sqlite3.connect(self.root / "airflow" / "airflow.db"))

    def later(self, *args: str, check: bool = True, env: dict | None = None):
        """The `airflow` command, for a scenario of `run_at_once` to yield: it gets back its CompletedProcess."""
        return functools.partial(self.airflow, *args, check=check, env=env)


def ingest(home: AirflowHome, *args: str) -> subprocess.CompletedProcess:
    """`ingest ARGS` in the Airflow home's environment, run in this process (a Python process's start is a second
    and more of imports): its exit code and what it printed. Only for commands that leave Airflow alone; the ones
    that pause a DAG run `airflow`, in a process of their own: `ingest_process`."""
    from ingest_core.service.cli import main

    out, err = io.StringIO(), io.StringIO()
    # the log lines its own process would print to stderr (here the root logger has pytest's handlers already)
    logged = logging.StreamHandler(err)
    logged.setLevel(logging.INFO if {"-v", "--verbose"} & set(args) else logging.WARNING)
    logging.getLogger().addHandler(logged)
    try:
        with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            for key, value in home.env.items():
                if os.environ.get(key) != value:
                    patch.setenv(key, value)
            code = main(list(args))
    finally:
        logging.getLogger().removeHandler(logged)
    return subprocess.CompletedProcess(["ingest", *args], code, out.getvalue(), err.getvalue())


def ingest_process(home: AirflowHome, *args: str) -> subprocess.CompletedProcess:
    """`ingest ARGS` as its own process in the Airflow home's environment, which must succeed; for a scenario of
    `run_at_once` to yield (`functools.partial`), as it runs `airflow` for seconds."""
    done = subprocess.run([sys.executable, "-m", "ingest_core.service.cli", *args], env=home.env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


AT_ONCE = 3  # commands at a time: enough to keep two cores busy; more only slows each one


def run_at_once(*scenarios) -> None:
    """Drive scenarios that share nothing but the session's servers, each a generator that yields the `airflow`
    commands it waits for (`AirflowHome.later`) and is sent back their CompletedProcess: commands of different
    scenarios run at the same time, each scenario's steps in order, and its checks here, in the test's thread. An
    `airflow dags test` is mostly one Python process: on two cores, a few at once take much less than one after
    another. Each scenario has its own Airflow home (a SQLite database each) and datasource."""
    from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

    with ThreadPoolExecutor(AT_ONCE) as pool:
        running: dict = {}

        def step(scenario, result=None) -> None:
            try:
                command = scenario.send(result)
            except StopIteration:
                return
            running[pool.submit(command)] = scenario

        for scenario in scenarios:
            step(scenario)
        while running:
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                step(running.pop(future), future.result())


def edits(store: MetadataStore, datasource: str) -> int:
    table = DatasourceReader(store, datasource).to_arrow()
    return sum(v for v in table.column("edits").to_pylist() if v) if table.num_rows else 0


@pytest.fixture(scope="module")
def metadata_url():
    with postgres_database("ingest_dag") as url:
        yield url


@pytest.fixture(scope="module")
def example(tmp_path_factory, broker, metadata_url, spark_connect) -> AirflowHome:
    """The repository's own dags/ folder: the example wikipedia spec as checked in."""
    if "wikipedia" not in broker.admin.list_topics(timeout=10).topics:
        broker.create_topic(partitions=4, name="wikipedia")
    return AirflowHome(tmp_path_factory.mktemp("airflow-example"), ROOT / "dags", broker.bootstrap, metadata_url,
                       spark_connect.url)


def the_example_spec_ingests_exactly_the_produced_records_over_several_runs(example, broker):
    store = MetadataStore(example.metadata_url)
    rng = random.Random(3)
    # the spec reads from the earliest offsets: records a former session left in the topic (on a broker of
    # INGEST_TEST_KAFKA's) are ingested too
    total = sum(hi - lo for lo, hi in broker_watermarks(broker, "wikipedia").values())
    for i, n in enumerate([300, 200]):  # the second run continues from the first's committed offsets
        produce_wiki(broker.bootstrap, n, rng)
        total += n
        yield example.later("dags", "test", "wikipedia", f"2026-01-0{i + 1}T00:00:00+00:00")
        assert edits(store, "wikipedia") == total
        assert run_task_states(example, "wikipedia", f"2026-01-0{i + 1}") == NORMAL_RUN
    # SQL (DuckDB) reads the same visible segments as the reader
    (row,) = run_sql(store, "SELECT sum(edits) AS edits, count(DISTINCT channel) > 0 AS channels, "
                            "typeof(max(__time)) AS t FROM wikipedia").table.to_pylist()
    assert row == {"edits": total, "channels": True, "t": "TIMESTAMP WITH TIME ZONE"}
    runs = store.runs.recent("wikipedia")
    assert [r.status for r in runs] == [RunStatus.PUBLISHED] * 2
    assert sum(r.plan.records for r in runs) == total
    committed = store.offsets.committed("wikipedia")
    latest = {p: hi for p, (lo, hi) in broker_watermarks(broker, "wikipedia").items()}
    assert {tp.partition: k.offset for tp, k in committed.items()} == latest
    # the report task mirrored them to a consumer group: Kafka's own tooling shows the datasource's lag
    assert group_offsets(broker, "ingest.wikipedia", "wikipedia", len(latest)) == latest
    # the run of an idle topic publishes nothing and reads IDLE
    yield example.later("dags", "test", "wikipedia", "2026-01-03T00:00:00+00:00")
    assert edits(store, "wikipedia") == total
    assert store.runs.recent("wikipedia", limit=1)[0].plan.is_empty
    assert store.datasources.get("wikipedia")["state"] == "IDLE"
    assert run_task_states(example, "wikipedia", "2026-01-03") == {**NORMAL_RUN, "spark_job": {"skipped"}}  # no job
    # every publish updated the datasource's Asset, with what it published in the event's extra
    events = asset_events(example, "wikipedia")
    runs = sorted(store.runs.recent("wikipedia"), key=lambda r: r.published_at)
    assert [e["runId"] for e in events] == [r.run_id for r in runs]
    for event, run in zip(events, runs):
        segments = store.segment_records.of("wikipedia", run_id=run.run_id)
        assert event["rows"] == sum(s.num_rows for s in segments) and event["segments"] == len(segments)
    assert events[-2]["rows"] > 0 and events[-1]["rows"] == 0  # the idle run published nothing
    assert events[-1]["endOffsets"] == {"wikipedia": {str(p): o for p, o in latest.items()}}


def asset_events(home: AirflowHome, name: str) -> list[dict]:
    """The extras of the Asset's events, oldest first, from the Airflow home's own database."""
    with home.db() as db:
        rows = db.execute("SELECT e.extra FROM asset_event e JOIN asset a ON a.id = e.asset_id WHERE a.name = ? "
                          "ORDER BY e.id", (name,)).fetchall()
    return [json.loads(extra) for (extra,) in rows]


def run_task_states(home: AirflowHome, dag_id: str, day: str) -> dict[str, set[str]]:
    """{task id: the states of its instances} of the DAG's run of logical date `day` (YYYY-MM-DD)."""
    with home.db() as db:
        rows = db.execute("SELECT ti.task_id, ti.state FROM task_instance ti JOIN dag_run r ON r.dag_id = ti.dag_id "
                          "AND r.run_id = ti.run_id WHERE ti.dag_id = ? AND r.logical_date LIKE ?",
                          (dag_id, day + "%")).fetchall()
    out: dict[str, set[str]] = {}
    for task_id, state in rows:
        out.setdefault(task_id, set()).add(state)
    return out


# a run that continues from no run that may still fail: no replan task, no no-op job (four task processes)
NORMAL_RUN = {"plan": {"success"}, "spark_job": {"success"}, "replan": {"skipped"}, "replanned_job": {"skipped"},
              "publish": {"success"}, "report": {"success"}}


def task_tries(home: AirflowHome, dag_id: str, task_id: str) -> list[tuple[int, str]]:
    """(try number, state) of each of the task's instances, from the Airflow home's own database."""
    with home.db() as db:
        return db.execute("SELECT try_number, state FROM task_instance WHERE dag_id = ? AND task_id = ? "
                          "ORDER BY map_index", (dag_id, task_id)).fetchall()


def broker_watermarks(broker, topic: str) -> dict[int, tuple[int, int]]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "wm"})
    try:
        parts = broker.admin.list_topics(topic, timeout=10).topics[topic].partitions
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in parts}
    finally:
        c.close()


def dags_folder(root: Path) -> Path:
    """A DAG folder under `root`: the product's DAG files plus specs the test writes."""
    folder = root / "dags"
    (folder / "specs").mkdir(parents=True)
    for path in (ROOT / "dags").glob("*.py"):
        shutil.copy(path, folder / path.name)
    return folder


@pytest.fixture
def own_dags(tmp_path) -> Path:
    """A DAG folder of the test's own."""
    return dags_folder(tmp_path)


def write_example_variant(folder: Path, name: str, topic: str, microbatch: dict | None = None,
                          compaction: dict | None = None, **io) -> None:
    raw = yaml.safe_load((ROOT / "dags" / "datasources" / "wikipedia.yaml").read_text())
    raw["spec"]["dataSchema"]["dataSource"] = name
    raw["spec"]["ioConfig"].update(topic=topic, **io)
    raw["microbatch"].update(microbatch or {})
    if compaction is not None:
        raw["compaction"] = compaction
    (folder / "specs" / f"{name}.yaml").write_text(yaml.safe_dump(raw))


def dags_test_killed_in_its_job(home, dag_id: str, date: str, tmp_path, log_name: str) -> None:
    """`airflow dags test` SIGKILLed with its whole process group while its Spark job runs: the job's JVM waits
    for a debugger that never comes, so it is surely still running when the kill comes."""
    import os
    import signal

    import psutil

    suspended = {**home.env, "SPARK_SUBMIT_OPTS": os.environ.get("SPARK_SUBMIT_OPTS", "")
                 + " -agentlib:jdwp=transport=dt_socket,server=y,suspend=y,address=127.0.0.1:0"}
    with open(tmp_path / log_name, "w") as out:
        run = subprocess.Popen([AIRFLOW, "dags", "test", dag_id, date], env=suspended,
                               stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        job = wait_for_process(lambda cmd: "ingest_job.py" in cmd and str(tmp_path) in cmd, timeout_s=600)
        assert os.getpgid(job.pid) == run.pid  # the kill below reaches the Spark job too
        os.killpg(run.pid, signal.SIGKILL)
        run.wait(60)
        psutil.wait_procs([job], timeout=60)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)


@pytest.mark.timeout(2700)  # ten scenarios' runs, a few at a time, on a loaded 2-core machine
def test_independent_datasources_through_the_dag_at_once(tmp_path, example, broker, metadata_url, spark_connect,
                                                         capsys):
    """The scenarios below, each a test of its own before, through `run_at_once` (their jobs over Spark Connect,
    but where a JVM per job is what is tested). The ones whose runs take longest start first."""
    run_at_once(a_run_killed_mid_job_expires_and_the_next_run_heals_the_line(tmp_path / "crashy", broker,
                                                                              metadata_url, spark_connect),
                a_run_pipelined_behind_a_killed_run_plans_again_and_publishes(tmp_path / "pipelined", broker,
                                                                              metadata_url, spark_connect),
                the_example_spec_ingests_exactly_the_produced_records_over_several_runs(example, broker),
                the_compaction_dag_rewrites_segments_with_the_same_rows_and_iceberg_follows(
                    tmp_path / "compaction", broker, metadata_url, spark_connect),
                suspend_resume_and_terminate_drive_the_dag(tmp_path / "operated", broker, metadata_url,
                                                           spark_connect),
                two_replicas_publish_once(tmp_path / "replicated", broker, metadata_url),
                the_data_gate_releases_when_data_arrives(tmp_path / "gated", broker, metadata_url, spark_connect),
                a_failed_run_says_which_records_and_why_and_skip_moves_past_exactly_them(
                    tmp_path / "strict", broker, metadata_url, spark_connect),
                druids_transform_tutorial_spec_as_druid_writes_it_gives_its_printed_rows_through_the_dag(
                    tmp_path / "transform", broker, metadata_url, spark_connect, capsys),
                a_broken_spec_is_an_import_error_that_hides_nothing_and_a_missing_spark_connection_a_clear_error(
                    tmp_path / "no-spark", broker, metadata_url))


def two_replicas_publish_once(tmp_path, broker, metadata_url):
    """In spark-submit mode: a JVM per replica."""
    own_dags = dags_folder(tmp_path)
    topic = broker.create_topic(partitions=2)
    write_example_variant(own_dags, "replicated", topic, {"iceberg": {}}, taskCount=1, replicas=2)
    home = AirflowHome(tmp_path, own_dags, broker.bootstrap, metadata_url)
    produce_events(broker.bootstrap, topic, 250, seed=5)
    yield home.later("dags", "test", "replicated", "2026-01-01T00:00:00+00:00")
    store = MetadataStore(metadata_url)
    assert edits(store, "replicated") == 250  # one replica's segments, not both
    # the report task synced the Iceberg table: the published replica's files, read without this project's reader
    from pyiceberg.catalog.sql import SqlCatalog

    table = SqlCatalog("ingest", uri=metadata_url).load_table(("ingest", "replicated"))
    assert sum(table.scan(selected_fields=("edits",)).to_arrow().column("edits").to_pylist()) == 250
    assert table.current_snapshot().summary["ingest.commit-version"] == str(
        store.datasources.get("replicated")["commit_version"])
    reports = store.reports.of("replicated")
    assert sorted(r.replica for r in reports) == [0, 1]
    assert store.reports.row_stats("replicated", reports[0].run_id)["processed"] == 250  # one replica's, not both
    segments = DatasourceReader(store, "replicated").segments()
    assert {s.location.split("/replica=")[1].split("/")[0] for s in segments} == {"0"}
    # the report removed the replica nothing was published from
    deep, run_id = home.env["INGEST_DEEP_STORAGE"], reports[0].run_id
    assert [len(attempt_folders(group_uri(deep, "replicated", run_id, 0, r))) for r in (0, 1)] == [1, 0]


def a_broken_spec_is_an_import_error_that_hides_nothing_and_a_missing_spark_connection_a_clear_error(
        tmp_path, broker, metadata_url):
    """Two scenarios, one `airflow dags test`: before it runs the DAG it writes what it parsed of the DAG folder
    (the DAGs and the import errors) to Airflow's database, as `airflow dags reserialize` does; then the DAG runs
    without its Spark connection."""
    own_dags = dags_folder(tmp_path)
    write_example_variant(own_dags, "no_spark", broker.create_topic())
    (own_dags / "specs" / "bad.yaml").write_text(
        "type: kafka\nspec:\n  dataSchema: {dataSource: bad, timestampSpec: {column: t}}\n"
        "  ioConfig: {topic: x, taskCout: 2, inputFormat: {type: json}, consumerProperties: {bootstrap.servers: 'a:1'}}\n")
    home = AirflowHome(tmp_path, own_dags, broker.bootstrap, metadata_url)
    home.env["INGEST_STRICT_SPECS"] = "true"  # an unknown field is an error only when strict (Druid ignores it)
    env = {k: v for k, v in home.env.items() if k != "AIRFLOW_CONN_SPARK_DEFAULT"}
    done = yield home.later("dags", "test", "no_spark", "2026-01-01T00:00:00+00:00", check=False, env=env)
    assert done.returncode != 0
    assert "the Spark connection 'spark_default' does not exist" in done.stdout + done.stderr
    # what `airflow dags list-import-errors` and `airflow dags list` print, read where they read it (Airflow's
    # database), without two more CLI processes of seconds each
    with home.db() as db:
        errors = db.execute("SELECT stacktrace FROM import_error").fetchall()
        dags = db.execute("SELECT DISTINCT dag_id FROM serialized_dag").fetchall()
    assert len(errors) == 1 and "bad.yaml" in errors[0][0]
    assert "spec.ioConfig.taskCout: unknown field (did you mean 'taskCount'?)" in errors[0][0]
    assert dags == [("no_spark",)]


def the_compaction_dag_rewrites_segments_with_the_same_rows_and_iceberg_follows(tmp_path, broker, metadata_url,
                                                                                spark_connect):
    """`<dataSource>.compaction` under `airflow dags test`, Spark over Connect: the segments of two runs are
    rewritten into one per interval, rolled up again; every metric sum is the same, the Iceberg table holds the
    new files instead of the old, and kill deletes the old ones."""
    import pyarrow.compute as pc
    from pyiceberg.catalog.sql import SqlCatalog

    own_dags = dags_folder(tmp_path)
    topic = broker.create_topic(partitions=2)
    write_example_variant(own_dags, "compacted", topic, {"iceberg": {}},
                          {"skipOffsetFromLatest": "PT0S", "kill": {"bufferPeriod": "PT0S"},
                           "tuningConfig": {"partitionsSpec": {"type": "dynamic", "maxRowsPerSegment": 100000}}},
                          taskCount=2)
    home = AirflowHome(tmp_path, own_dags, broker.bootstrap, metadata_url, spark_connect.url)
    store = MetadataStore(metadata_url)
    for i in range(2):
        produce_events(broker.bootstrap, topic, 200, seed=i)
        yield home.later("dags", "test", "compacted", f"2026-01-0{i + 1}T00:00:00+00:00")
    reader = DatasourceReader(store, "compacted")

    def sums() -> dict:
        """Per interval: rows' metric sums (the rows themselves may merge: the same minute and dimensions)."""
        out = {}
        for s in reader.segments():
            table = reader.to_arrow(interval=(s.interval_start, s.interval_end))
            out[s.interval_start] = {m: pc.sum(table.column(m)).as_py() for m in ("edits", "added", "deleted")}
        return out

    before, segments_before = sums(), reader.segments()
    intervals = {(s.interval_start, s.interval_end) for s in segments_before}
    assert sum(v["edits"] for v in before.values()) == 400 and len(segments_before) > len(intervals)

    def segment_health() -> dict:
        return json.loads(ingest(home, "status", "compacted", "--json", "--dags-folder", str(own_dags)).stdout
                          )["payload"]["segments"]

    health = segment_health()
    assert health["segments"] == len(segments_before) and health["intervals"] == len(intervals)
    assert health["compaction"]["intervalsToCompact"] == len(intervals)
    yield home.later("dags", "test", "compacted.compaction", "2026-01-03T00:00:00+00:00")
    health = segment_health()
    assert health["segments"] == len(intervals) and health["compaction"]["intervalsToCompact"] == 0
    after = reader.segments()
    assert sums() == before and len(after) == len(intervals)
    assert {(s.interval_start, s.interval_end) for s in after} == intervals
    # kill (bufferPeriod PT0S here) deleted the replaced segments' files and records at once
    assert [s.id for s in store.segment_records.of("compacted", used_only=False)] == [s.id for s in after]
    assert not any(Path(s.location.removeprefix("file://")).exists() for s in segments_before)
    # one audit record per interval compacted (the events may straddle an hour: 1 or 2 intervals)
    audits = [a for a in store.audit_log.records("compacted") if a.action == "compact"]
    assert len(audits) == len(intervals) and sum(a.details["rowsAfter"] for a in audits) == sum(
        s.num_rows for s in after)
    table = SqlCatalog("ingest", uri=metadata_url).load_table(("ingest", "compacted"))
    files = {t.file.file_path for t in table.scan().plan_files()}
    assert files == {s.location for s in after}
    assert sum(table.scan(selected_fields=("edits",)).to_arrow().column("edits").to_pylist()) == 400
    # a second compaction run finds nothing left to do
    yield home.later("dags", "test", "compacted.compaction", "2026-01-04T00:00:00+00:00")
    assert [s.id for s in reader.segments()] == [s.id for s in after]


def produce_events(bootstrap: str, topic: str, n: int, seed: int) -> None:
    from confluent_kafka import Producer

    from ingest_core.dev.demo import wiki_events

    p = Producer({"bootstrap.servers": bootstrap})
    for event in wiki_events(n, random.Random(seed)):
        p.produce(topic, json.dumps(event).encode())
    assert p.flush(30) == 0


def the_data_gate_releases_when_data_arrives(tmp_path, broker, metadata_url, spark_connect):
    own_dags = dags_folder(tmp_path)
    topic = broker.create_topic(partitions=2)
    write_example_variant(own_dags, "gated", topic, taskCount=1,
                          microbatch={"dataGate": {"minRecords": 100, "maxWait": "PT30M", "pokeInterval": "PT1S"}})
    home = AirflowHome(tmp_path, own_dags, broker.bootstrap, metadata_url, spark_connect.url)
    store = MetadataStore(metadata_url)

    # 40 records do not open a gate of 100; 80 more, produced while it waits, do (long before maxWait)
    produce_events(broker.bootstrap, topic, 40, seed=1)
    code, lines = yield functools.partial(dags_test_fed_while_gated, home, "gated", broker.bootstrap, topic)
    assert code == 0, "".join(lines[-80:])
    assert any("data gate open: 120 new records" in line for line in lines), "".join(lines[-80:])
    assert edits(store, "gated") == 120
    assert store.datasources.get("gated")["state"] == "RUNNING"


DOWNSTREAM_OF_THE_GATE = ("spark_job", "replan", "replanned_job", "publish", "report")  # of the plan task


def test_an_idle_gate_ends_the_run_skipped_and_the_next_run_publishes_the_record_once(tmp_path, broker,
                                                                                      metadata_url, spark_connect):
    """Nothing new by maxWait: the gate ends the run and every other task is skipped (no process, no plan, no run
    record), the datasource reads IDLE with no lag; the record that arrives next is published by the next run,
    once."""
    own_dags = dags_folder(tmp_path)
    topic = broker.create_topic(partitions=2)
    write_example_variant(own_dags, "idle_gated", topic, taskCount=1,
                          microbatch={"dataGate": {"minRecords": 1, "maxWait": "PT2S", "pokeInterval": "PT1S"}})
    home = AirflowHome(tmp_path, own_dags, broker.bootstrap, metadata_url, spark_connect.url)
    with MetadataStore(metadata_url) as store:
        idle_run_then_one_record(home, broker, topic, store)


def idle_run_then_one_record(home: AirflowHome, broker, topic: str, store: MetadataStore) -> None:

    def task_states(logical_date: str) -> dict[str, str]:
        with home.db() as db:
            return dict(db.execute(
                "SELECT ti.task_id, ti.state FROM task_instance ti JOIN dag_run r ON r.dag_id = ti.dag_id AND "
                "r.run_id = ti.run_id WHERE ti.dag_id = 'idle_gated' AND r.logical_date LIKE ?",
                (logical_date[:10] + "%",)))

    from test_metrics import StatsdListener, parse_influx

    statsd = StatsdListener()  # the gate that ended the run sends the datasource's metrics (there is no report)
    try:
        done = home.airflow("dags", "test", "idle_gated", "2026-01-01T00:00:00+00:00", env={
            **home.env, "AIRFLOW__METRICS__STATSD_ON": "True", "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
            "AIRFLOW__METRICS__STATSD_PORT": str(statsd.port), "AIRFLOW__METRICS__STATSD_PREFIX": "airflow",
            "AIRFLOW__METRICS__STATSD_INFLUXDB_ENABLED": "True"})
    finally:
        statsd.close()
    lags = [parse_influx(line) for line in statsd.lines if line.startswith("airflow.ingest/kafka/lag")]
    log = done.stdout + done.stderr
    assert [(tags["dataSource"], value) for _, tags, value, _ in lags] == [("idle_gated", 0.0)], log[-3000:]
    assert "maxWait PT2S passed with nothing new" in log, log[-4000:]
    assert task_states("2026-01-01") == {"plan": "success", **dict.fromkeys(DOWNSTREAM_OF_THE_GATE, "skipped")}
    assert "plan of run" not in log and "run report:" not in log  # no plan or report step ran
    assert store.runs.recent("idle_gated") == []
    status = ingest(home, "status", "idle_gated", "--json")
    assert status.returncode == 0, status.stdout + status.stderr
    payload = json.loads(status.stdout)["payload"]
    assert (payload["state"], payload["detailedState"], payload["healthy"], payload["aggregateLag"]) == (
        "IDLE", "IDLE", True, 0)

    produce_events(broker.bootstrap, topic, 1, seed=7)
    home.dags_test("idle_gated", "2026-01-02T00:00:00+00:00")
    assert task_states("2026-01-02")["publish"] == "success"
    assert edits(store, "idle_gated") == 1
    assert sum(k.offset for k in store.offsets.committed("idle_gated").values()) == 1
    assert store.datasources.get("idle_gated")["state"] == "RUNNING"


def dags_test_fed_while_gated(home: AirflowHome, dag_id: str, bootstrap: str, topic: str) -> tuple[int, list[str]]:
    """`airflow dags test` of a gated DAG; once its gate says it defers, 80 more records are produced: (its exit
    code, its output lines)."""
    proc = subprocess.Popen([AIRFLOW, "dags", "test", dag_id, "2026-01-01T00:00:00+00:00"], env=home.env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    deferred = threading.Event()

    def read() -> None:
        for line in proc.stdout:
            lines.append(line)
            if "deferring for up to" in line:
                deferred.set()
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert deferred.wait(300), "".join(lines[-50:])
        produce_events(bootstrap, topic, 80, seed=2)
        code = proc.wait(600)
    finally:
        proc.kill()
    reader.join(10)
    return code, lines


def suspend_resume_and_terminate_drive_the_dag(tmp_path, broker, metadata_url, spark_connect):
    """`ingest suspend`, `resume` and `terminate` pause and unpause the DAG in Airflow's database (each runs
    `airflow dags pause`: yielded, so that other scenarios' commands start meanwhile) and drive the runs. (The
    first `dags test` writes the DAG to Airflow's database, as `airflow dags reserialize` would.)"""
    own_dags = dags_folder(tmp_path)
    topic = broker.create_topic(partitions=2)
    write_example_variant(own_dags, "operated", topic, taskCount=1)
    home = AirflowHome(tmp_path, own_dags, broker.bootstrap, metadata_url, spark_connect.url)
    store = MetadataStore(metadata_url)
    produce_events(broker.bootstrap, topic, 50, seed=3)
    yield home.later("dags", "test", "operated", "2026-01-01T00:00:00+00:00")
    assert edits(store, "operated") == 50

    def paused() -> bool:
        """As Airflow's database holds it (what `airflow dags list` prints, without a CLI process per look)."""
        with home.db() as db:
            (is_paused,) = db.execute("SELECT is_paused FROM dag WHERE dag_id = 'operated'").fetchone()
        return bool(is_paused)

    assert not paused()
    yield functools.partial(ingest_process, home, "suspend", "operated", "--actor", "carol")
    assert paused() and store.datasources.get("operated")["state"] == "SUSPENDED"
    # a run that starts anyway (here `dags test`, which ignores the pause) plans and ingests nothing
    produce_events(broker.bootstrap, topic, 30, seed=4)
    done = yield home.later("dags", "test", "operated", "2026-01-02T00:00:00+00:00")
    assert "datasource operated is suspended" in done.stdout + done.stderr
    assert len(store.runs.recent("operated")) == 1 and edits(store, "operated") == 50

    yield functools.partial(ingest_process, home, "resume", "operated", "--actor", "carol")
    assert not paused() and store.datasources.get("operated")["state"] == "RUNNING"
    yield home.later("dags", "test", "operated", "2026-01-03T00:00:00+00:00")
    assert edits(store, "operated") == 80

    yield functools.partial(ingest_process, home, "terminate", "operated", "--yes", "--actor", "carol")
    assert paused() and store.datasources.get("operated")["terminated"]
    # nothing consumes for it any more: its consumer group goes too (no lag alert forever); the offsets stay
    assert group_offsets(broker, "ingest.operated", topic, 2) == {0: -1001, 1: -1001}
    status = ingest(home, "status", "operated", "--json")
    assert status.returncode == 0, status.stdout + status.stderr
    status = json.loads(status.stdout)["payload"]
    assert (status["state"], status["terminated"], status["aggregateLag"]) == ("TERMINATED", True, 0)
    assert [(a.action, a.actor) for a in store.audit_log.records("operated")] == [
        ("suspend", "carol"), ("resume", "carol"), ("terminate", "carol")]


def a_run_killed_mid_job_expires_and_the_next_run_heals_the_line(tmp_path, broker, metadata_url, spark_connect):
    """SIGKILL a run's whole process group while its Spark job (spark-submit) runs: its run stays RUNNING. Past
    its deadline the next run's plan expires it and starts from the committed offsets: every record once, lag 0,
    nothing done by hand. A re-executed spark_job of either run does nothing. (The next run's job runs over Spark
    Connect: the healing is the plan's, whatever runs the job, and a warm server saves a JVM's start.)"""
    from datetime import timedelta

    from ingest_core.store.schema import runs, utcnow

    own_dags = dags_folder(tmp_path)
    topic = broker.create_topic(partitions=2)
    write_example_variant(own_dags, "crashy", topic, taskCount=1, completionTimeout="PT10M")
    home = AirflowHome(tmp_path, own_dags, broker.bootstrap, metadata_url)
    store = MetadataStore(metadata_url)
    produce_events(broker.bootstrap, topic, 120, seed=7)

    yield functools.partial(dags_test_killed_in_its_job, home, "crashy", "2026-01-01T00:00:00+00:00", tmp_path,
                            "killed-run.log")
    (dead,) = store.runs.recent("crashy")
    assert dead.status is RunStatus.RUNNING and dead.deadline_at == dead.running_since + timedelta(minutes=10)
    with store.session() as conn:  # completionTimeout passes: moved through the store, not waited for
        conn.execute(runs.update().where((runs.c.datasource == "crashy") & (runs.c.run_id == dead.run_id))
                     .values(deadline_at=utcnow() - timedelta(seconds=1)))

    over_connect = {**home.env, "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps(spark_connection(spark_connect.url))}
    yield home.later("dags", "test", "crashy", "2026-01-02T00:00:00+00:00", env=over_connect)
    assert edits(store, "crashy") == 120  # every record once
    healed, dead = store.runs.recent("crashy")
    assert healed.status is RunStatus.PUBLISHED
    assert {p.start_source.value for p in healed.plan.partitions} == {"earliest"}  # not from the dead run's ends
    assert dead.status is RunStatus.EXPIRED and dead.error.startswith("expired: ")
    (audit,) = store.audit_log.records("crashy", action="run_expired")
    assert audit.details["runId"] == dead.run_id and audit.details["detectedBy"] == f"the plan step of run {healed.run_id}"
    status = json.loads(ingest(home, "status", "crashy", "--json").stdout)["payload"]
    assert status["aggregateLag"] == 0
    assert any(e["exceptionClass"] == "RunExpired" and dead.run_id in e["message"] for e in status["recentErrors"])
    (expired,) = [e for e in status["recentErrors"] if e["exceptionClass"] == "RunExpired"]
    assert sorted((r["partition"], r["start"], r["end"]) for r in expired["partitions"]) == sorted(
        (p.tp.partition, p.start, p.end) for p in dead.plan.partitions)  # which records it never ingested

    # clearing one spark_job task re-executes it: for an expired or a published run, it does nothing
    for run, why in ((dead, "is not executed again: expired: "), (healed, "is already published")):
        done = yield home.later("tasks", "test", "crashy", "spark_job", run.run_id, "--map-index", "0")
        assert f"run {run.run_id} {why}" in done.stdout + done.stderr
    assert store.runs.get("crashy", dead.run_id).status is RunStatus.EXPIRED and edits(store, "crashy") == 120


def a_run_pipelined_behind_a_killed_run_plans_again_and_publishes(tmp_path, broker, metadata_url, spark_connect):
    """Run A's job hangs and A's process group is SIGKILLed; run B, planned from A's ends while A looked alive,
    does not wait ~completionTimeout and fail (which made one kill cost two runs): once A expires, B's replan
    task plans it again from the committed offsets, its replanned_job task runs that plan's job, and its publish
    (which never starts a Spark job) publishes every record once.
    (B's jobs run over Spark Connect: the re-planning is the plan's and the publish's, whatever runs the job, and
    a warm server saves two JVMs' start.)"""
    from ingest_core.supervisor.planning import RUN_REPLANNED

    own_dags = dags_folder(tmp_path)
    topic = broker.create_topic(partitions=2)
    # A's deadline is far off: B must plan while A looks alive, however long the other scenarios keep B waiting
    # for a slot on a loaded machine (nothing waits it out: B's plan step moves it, dags_test_behind_a_dead_run)
    write_example_variant(own_dags, "pipelined", topic, taskCount=1, completionTimeout="PT2H",
                          microbatch={"maxActiveRuns": 2})
    home = AirflowHome(tmp_path, own_dags, broker.bootstrap, metadata_url)
    store = MetadataStore(metadata_url)
    produce_events(broker.bootstrap, topic, 120, seed=11)
    yield functools.partial(dags_test_killed_in_its_job, home, "pipelined", "2026-01-01T00:00:00+00:00", tmp_path,
                            "run-a.log")
    (a,) = store.runs.recent("pipelined")
    assert a.status is RunStatus.RUNNING  # dead, but nobody knows yet
    produce_events(broker.bootstrap, topic, 60, seed=12)

    over_connect = {**home.env, "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps(spark_connection(spark_connect.url))}
    code, b = yield functools.partial(dags_test_behind_a_dead_run, home, store, "pipelined", a.run_id, over_connect,
                                      tmp_path / "run-b.log")
    assert code == 0, (tmp_path / "run-b.log").read_text()[-4000:]
    assert b.run_id != a.run_id and {p.after_run for p in b.plan.partitions} == {a.run_id}
    assert edits(store, "pipelined") == 180  # every record once: A's range too
    b, a = store.runs.recent("pipelined")
    assert b.status is RunStatus.PUBLISHED and b.plan.revision == 1
    assert {p.start_source.value for p in b.plan.partitions} == {"earliest"} and a.expired
    (audit,) = store.audit_log.records("pipelined", action=RUN_REPLANNED)
    assert audit.details["runId"] == b.run_id and audit.details["predecessors"] == [a.run_id]
    with home.db() as db:  # the re-plan and its job are tasks of their own, visible in Airflow
        states = dict(db.execute("SELECT task_id || ':' || map_index, state FROM task_instance WHERE dag_id = ? AND "
                                 "run_id = ?", ("pipelined", b.run_id)).fetchall())
    assert {k: v for k, v in states.items() if k.startswith(("replan", "publish"))} == {
        "replan:-1": "success", "replanned_job:0": "success", "publish:-1": "success"}



def dags_test_behind_a_dead_run(home: AirflowHome, store: MetadataStore, dag_id: str, dead_run: str, env: dict,
                                log: Path):  # -> (exit code, the run as its plan step persisted it)
    """`airflow dags test` of a run B planned behind `dead_run` (dead, still RUNNING in the store): once B's plan
    step persisted its plan, the dead run's completionTimeout passes, moved through the store, not waited for."""
    import os
    import signal
    import time
    from datetime import timedelta

    from ingest_core.store.schema import runs, utcnow

    with open(log, "w") as out:
        run_b = subprocess.Popen([AIRFLOW, "dags", "test", dag_id, "2026-01-02T00:00:00+00:00"], env=env,
                                 stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.monotonic() + 600
            while len(store.runs.recent(dag_id)) < 2 and time.monotonic() < deadline and run_b.poll() is None:
                time.sleep(0.5)  # B's plan step persists its plan
            planned = store.runs.recent(dag_id)[0]
            with store.session() as conn:
                conn.execute(runs.update().where((runs.c.datasource == dag_id) & (runs.c.run_id == dead_run))
                             .values(deadline_at=utcnow() - timedelta(seconds=1)))
            return run_b.wait(900), planned
        finally:
            if run_b.poll() is None:
                os.killpg(run_b.pid, signal.SIGKILL)


def a_failed_run_says_which_records_and_why_and_skip_moves_past_exactly_them(tmp_path, broker, metadata_url,
                                                                            spark_connect):
    """maxParseExceptions stops a run's job in Airflow: the run fails, is not published, and `ingest status`,
    `ingest health` and the REST API's JSON say which records and why; `ingest skip` moves past exactly them."""
    from confluent_kafka import Producer

    own_dags = dags_folder(tmp_path)
    topic = broker.create_topic(partitions=1)
    write_example_variant(own_dags, "strict", topic, taskCount=1)
    raw = yaml.safe_load((own_dags / "specs" / "strict.yaml").read_text())
    raw["spec"]["tuningConfig"]["maxParseExceptions"] = 0
    (own_dags / "specs" / "strict.yaml").write_text(yaml.safe_dump(raw))
    home = AirflowHome(tmp_path, own_dags, broker.bootstrap, metadata_url, spark_connect.url)
    store = MetadataStore(metadata_url)
    produce_events(broker.bootstrap, topic, 5, seed=3)
    p = Producer({"bootstrap.servers": broker.bootstrap})
    p.produce(topic, b"{this is not json")  # offset 5
    assert p.flush(30) == 0
    produce_events(broker.bootstrap, topic, 4, seed=4)

    yield home.later("dags", "test", "strict", "2026-01-01T00:00:00+00:00", check=False)
    (run,) = store.runs.recent("strict")
    assert run.status is RunStatus.FAILED and edits(store, "strict") == 0 and store.offsets.committed("strict") == {}
    # the same records would stop a retry the same way: the task failed once, not after the spec's 2 retries
    assert task_tries(home, "strict", "spark_job") == [(1, "failed")]

    cli = functools.partial(ingest, home)
    status = json.loads(cli("status", "strict", "--json").stdout)["payload"]
    (failed,) = [e for e in status["recentErrors"] if e.get("taskGroup") is not None]
    assert failed["exceptionClass"] == "ParseExceptionLimitError" and failed["runId"] == run.run_id
    assert failed["code"] == "INGEST_PARSE_EXCEPTION_LIMIT"  # the executor's, through the report
    assert failed["partitions"] == [{"topic": topic, "partition": 0, "start": 0, "end": 10}]
    assert (failed["maxParseExceptions"], failed["parseExceptions"]) == (0, 1)
    assert failed["lastParseException"]["offset"] == 5
    assert "last failure: [INGEST_PARSE_EXCEPTION_LIMIT] ParseExceptionLimitError" in cli("health", "strict").stdout

    skipped = cli("skip", "strict", "--yes", "--no-airflow")
    assert skipped.returncode == 0, skipped.stderr
    assert f"would skip partition {topic}-0 offsets [0, 10) (10 records) of run {run.run_id}" in skipped.stdout
    assert {tp.partition: k.offset for tp, k in store.offsets.committed("strict").items()} == {0: 10}
    assert json.loads(cli("status", "strict", "--json").stdout)["payload"]["skippedRecords"] == {"0": 10}


def wait_for_process(matches, timeout_s: float):  # -> psutil.Process
    """The first process whose command line `matches`."""
    import time

    import psutil

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for p in psutil.process_iter(["cmdline"]):
            if matches(" ".join(p.info["cmdline"] or [])):
                return p
        time.sleep(0.2)
    raise AssertionError(f"no such process within {timeout_s}s")


def druids_transform_tutorial_spec_as_druid_writes_it_gives_its_printed_rows_through_the_dag(
        tmp_path, broker, metadata_url, spark_connect, capsys):
    """A transform that reads and replaces its own input field, end to end: Druid's transform tutorial as a Kafka supervisor spec, a JSON file
    indented with tabs as Druid's console saves it, through the real DAG (`airflow dags test`, Spark Connect);
    `ingest query` gives the rows the tutorial prints (a transform reading and replacing its own input field)."""
    from druid_docs import TRANSFORM_ROWS, TRANSFORM_SCHEMA, records, rows

    from ingest_core.service.cli import main

    own_dags = dags_folder(tmp_path)
    topic = broker.create_topic(partitions=1)
    broker.produce(topic, records("transform-data.json"))
    spec = {"type": "kafka", "spec": {
        "dataSchema": TRANSFORM_SCHEMA,
        "ioConfig": {"topic": topic, "useEarliestOffset": True, "inputFormat": {"type": "json"},
                     "consumerProperties": {"bootstrap.servers": broker.bootstrap}},
        "tuningConfig": {"type": "kafka"}}}
    (own_dags / "specs" / "transform-tutorial.json").write_text(json.dumps(spec, indent="\t"))
    home = AirflowHome(tmp_path, own_dags, broker.bootstrap, metadata_url, spark_connect.url)
    yield home.later("dags", "test", "transform-tutorial", "2026-01-01T00:00:00+00:00")
    capsys.readouterr()
    assert main(["--metadata-url", metadata_url, "query", "--json", 'select * from "transform-tutorial"']) == 0
    assert rows(json.loads(capsys.readouterr().out)) == rows(TRANSFORM_ROWS)
