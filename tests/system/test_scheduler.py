"""A real Airflow scheduler (`airflow standalone`) driving the DAGs: catch-up, `dags trigger`, `dags clear`,
`backfill create`, a task worker killed mid-job. The jobs run on a real Spark Connect server (spark-submit where a
test kills one), the real broker, PostgreSQL for the ingestion metadata."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from pathlib import Path

import airflow_db
import psutil
import pytest
import sqlalchemy as sa
import yaml
from confluent_kafka import Producer
from conftest import postgres_database
from helpers import http_json
from test_dag import ingest, produce_events
from test_metrics import StatsdListener, parse_influx

from ingest_core.dev.demo import airflow_env, spark_connection
from ingest_core.dev.embedded import free_port
from ingest_core.provider.preload import write_local_settings
from ingest_core.core.states import RunStatus
from ingest_core.store.engines import make_engine
from ingest_core.store.metadata import MetadataStore
from ingest_core.store.reader import DatasourceReader

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
INTERVAL = timedelta(minutes=10)
# A DAG of a data team, scheduled on a datasource's Asset: it runs after each publish, with its extra.
DOWNSTREAM_DAG = '''
from airflow.sdk import DAG, task
from ingest_core.provider.dag_factory import asset_for

with DAG("on_caught_up", schedule=[asset_for("caught_up")], is_paused_upon_creation=False):
    @task
    def consume(**context):
        events = context["triggering_asset_events"][asset_for("caught_up")]
        extras = [e.extra for e in events]
        assert all(x["runId"] and x["rows"] >= 0 and x["endOffsets"] for x in extras), extras
        print("published:", extras)
    consume()
'''


def floor_interval(t: datetime, interval: timedelta = INTERVAL) -> datetime:
    return t - timedelta(seconds=t.timestamp() % interval.total_seconds())


class Standalone:
    """`airflow standalone` (LocalExecutor) with Airflow's own database on PostgreSQL: on SQLite its concurrent
    writers (scheduler, workers, CLI) fail with "database is locked". Subclasses start other Airflow processes
    (`processes()`) in the same environment, with `**env` added to it."""

    EXTRA_DAGS = {"on_caught_up.py": DOWNSTREAM_DAG}

    def __init__(self, root: Path, bootstrap: str, metadata_url: str, airflow_db_url: str,
                 spark_connect_url: str | None = None, **env: str):
        port = free_port()
        self.root = root
        self.dags = root / "dags"
        (self.dags / "specs").mkdir(parents=True)
        (self.dags / "ingest_datasources.py").write_text((ROOT / "dags" / "ingest_datasources.py").read_text())
        for name, text in self.EXTRA_DAGS.items():
            (self.dags / name).write_text(text)
        self.metadata_url = metadata_url
        self.topics: dict[str, str] = {}
        self.base = f"http://localhost:{port}"
        self.env = airflow_env(
            root, bootstrap, dags_folder=self.dags, metadata_url=metadata_url, spark_connect_url=spark_connect_url,
            AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=airflow_db_url,
            AIRFLOW__CORE__PARALLELISM="4", AIRFLOW__API__PORT=str(port),
            AIRFLOW__CORE__EXECUTION_API_SERVER_URL=f"{self.base}/execution/",
            AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC="1", AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL="3",
            AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL="3",
            # a loaded 2-core machine answers the workers' execution API calls slowly, not never
            AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT="60",
            **env)  # airflow_env ships the heartbeat timeout (provider/recovery.py): a dead worker's task fails in 35 s
        # the scheduler (and a Celery worker) loads the tasks' libraries before it forks their processes, as
        # docs/spark-connect.md recommends
        write_local_settings(Path(self.env["AIRFLOW_HOME"]))
        airflow_db.migrate(self.env)
        MetadataStore(metadata_url).upgrade()
        self.db = sa.create_engine(airflow_db_url)
        self.procs: dict[str, subprocess.Popen] = {}
        try:
            for name, (args, own_env) in self.processes().items():
                with open(root / f"{name}.log", "wb") as log:
                    self.procs[name] = subprocess.Popen([str(BIN / "airflow"), *args], env={**self.env, **own_env},
                                                        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            self.wait_until_ready()
        except BaseException:
            self.stop()
            raise

    def processes(self) -> dict[str, tuple[list[str], dict[str, str]]]:
        """name -> (`airflow` arguments, environment of its own); each logs to `root/<name>.log`."""
        return {"standalone": (["standalone"], {})}

    def wait_until_ready(self, timeout: float = 180) -> None:
        """Until the api-server reports the scheduler and the dag-processor healthy."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.base}/api/v2/monitor/health", timeout=5) as r:
                    health = json.load(r)
                if all(health.get(k, {}).get("status") == "healthy" for k in ("scheduler", "dag_processor")):
                    return
            except OSError:
                pass
            exited = [name for name, proc in self.procs.items() if proc.poll() is not None]
            assert not exited, f"airflow {exited} exited at start; see the logs in {self.root}"
            time.sleep(2)
        raise AssertionError(f"Airflow did not become healthy in {timeout}s; see the logs in {self.root}")

    def airflow(self, *args: str) -> str:
        done = subprocess.run([str(BIN / "airflow"), *args], env=self.env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"airflow {' '.join(args)}: {done.stdout[-3000:]}{done.stderr[-3000:]}"
        return done.stdout

    def query(self, sql: str, **params) -> list:
        """Rows of Airflow's own database, where the scheduler keeps its state (what `airflow dags list-runs`,
        `dags list` and `tasks state` print, without a CLI process of seconds per look)."""
        with self.db.connect() as conn:
            return list(conn.execute(sa.text(sql), params))

    def runs(self, dag_id: str) -> dict[str, dict]:
        """{run id: the run's state and dates (ISO, UTC)}, as `airflow dags list-runs` shows them."""
        rows = self.query("SELECT run_id, state, run_after, logical_date, start_date, end_date FROM dag_run "
                          "WHERE dag_id = :d", d=dag_id)
        return {r.run_id: {k: v.astimezone(timezone.utc).isoformat() if isinstance(v, datetime) else v
                           for k, v in r._mapping.items()} for r in rows}

    def wait_for(self, dag_id: str, predicate, timeout: float = 420) -> dict[str, dict]:
        deadline = time.monotonic() + timeout
        runs: dict[str, dict] = {}
        while time.monotonic() < deadline:
            runs = self.runs(dag_id)
            if predicate(runs):
                return runs
            failed = [r for r in runs.values() if r["state"] == "failed"]
            assert not failed, f"runs failed: {failed}"
            time.sleep(1)
        raise AssertionError(f"timed out waiting on {dag_id}: {runs}")

    def token(self) -> str:
        """A JWT from the simple auth manager, with the password `airflow standalone` generated for admin."""
        passwords = json.loads(next((Path(self.env["AIRFLOW_HOME"])).glob("simple_auth_manager_passwords*")).read_text())
        body = json.dumps({"username": "admin", "password": passwords["admin"]}).encode()
        request = urllib.request.Request(f"{self.base}/auth/token", data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as r:
            return json.load(r)["access_token"]

    def http(self, method: str, path: str, token: str | None = None, body: dict | bytes | None = None):
        """(status, parsed JSON or text) of a request to the api-server (`body`: JSON, or bytes sent as they are)."""
        return http_json(self.base, method, path, token, body)

    def diagnosis(self, dag_id: str) -> str:
        """What a failed wait shows: the DAG's runs and task instances, the health of Airflow's processes, the
        end of their logs."""
        token = self.token()
        parts = [f"health: {self.http('GET', '/api/v2/monitor/health')}",
                 f"runs: {self.http('GET', f'/api/v2/dags/{dag_id}/dagRuns', token)}",
                 f"task instances: {self.http('GET', f'/api/v2/dags/{dag_id}/dagRuns/~/taskInstances', token)}"]
        parts += [f"{name}.log: ...{(self.root / f'{name}.log').read_text(errors='replace')[-3000:]}"
                  for name in self.procs]
        return "\n".join(parts)

    def task_state(self, dag_id: str, run_id: str, task_id: str) -> str:
        rows = self.query("SELECT state FROM task_instance WHERE dag_id = :d AND run_id = :r AND task_id = :t "
                          "AND map_index = -1", d=dag_id, r=run_id, t=task_id)
        return str(rows[0].state if rows else None)

    def descendants(self) -> list[psutil.Process]:
        """Every process under the Airflow processes (scheduler, LocalExecutor workers, task runners, Spark)."""
        return [c for proc in self.procs.values() for c in psutil.Process(proc.pid).children(recursive=True)]

    def paused_and_quiet(self, dag_id: str, timeout: float = 600) -> None:
        """Pause the DAG, with none of its runs queued or running: nothing can then change its datasource (the
        scheduler creates no run of a paused DAG). A run in flight when it is paused would never end (the
        scheduler does not examine a paused DAG's runs), so it is unpaused again until that run is done."""
        deadline = time.monotonic() + timeout
        while True:
            self.airflow("dags", "pause", dag_id, "-y")
            active = {k for k, r in self.runs(dag_id).items() if r["state"] in ("queued", "running")}
            if not active:
                return
            assert time.monotonic() < deadline, f"{dag_id} kept runs in flight: {active}"
            self.airflow("dags", "unpause", dag_id, "-y")
            self.wait_for(dag_id, lambda rs: all(rs[k]["state"] not in ("queued", "running") for k in active),
                          timeout=max(1.0, deadline - time.monotonic()))

    def add_spec(self, name: str, topic: str, task_count: int = 1, **microbatch) -> None:
        self.write_spec(name, topic, task_count, **microbatch)
        deadline = time.monotonic() + 120
        while not self.query("SELECT dag_id FROM dag WHERE dag_id = :d", d=name):
            assert time.monotonic() < deadline, f"DAG {name} was not parsed"
            time.sleep(1)

    def write_spec(self, name: str, topic: str, task_count: int = 1, **microbatch) -> None:
        raw = yaml.safe_load((ROOT / "dags" / "datasources" / "wikipedia.yaml").read_text())
        raw["spec"]["dataSchema"]["dataSource"] = name
        raw["spec"]["ioConfig"].update(topic=topic, taskCount=task_count)
        raw["microbatch"].update({"schedule": "PT10M", **microbatch})
        (self.dags / "specs" / f"{name}.yaml").write_text(yaml.safe_dump(raw))

    def stop(self) -> None:
        for proc in reversed(list(self.procs.values())):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
        self.db.dispose()


@pytest.fixture(scope="module")
def statsd() -> StatsdListener:
    """A StatsD server (a UDP socket) that the scheduler's `[metrics]` points at (tests/system/test_metrics.py)."""
    listener = StatsdListener()
    try:
        yield listener
    finally:
        listener.close()


@pytest.fixture(scope="module")
def standalone(tmp_path_factory, broker, spark_connect, statsd):
    # the DAGs' jobs run on the session's Spark Connect server (spark_default); a spec naming the
    # `spark_submit` connection runs one spark-submit per group instead
    with postgres_database("ingest_sched") as url, postgres_database("airflow_sched") as airflow_db_url:
        s = Standalone(tmp_path_factory.mktemp("standalone"), broker.bootstrap, url, airflow_db_url,
                       spark_connect_url=spark_connect.url,
                       AIRFLOW_CONN_SPARK_SUBMIT=json.dumps(spark_connection(None)),
                       AIRFLOW__METRICS__STATSD_ON="True", AIRFLOW__METRICS__STATSD_HOST="127.0.0.1",
                       AIRFLOW__METRICS__STATSD_PORT=str(statsd.port),
                       AIRFLOW__METRICS__STATSD_INFLUXDB_ENABLED="True")
        try:
            yield s
        finally:
            s.stop()


BACKFILL_TEST = "test_backfill_create_ingests_each_past_slice_once"
GATE_TEST = "test_the_data_gate_defers_to_the_triggerer_and_releases_when_data_arrives"
KILLED_WORKER_TEST = "test_a_killed_task_worker_is_failed_by_its_missing_heartbeat_and_retried_exactly_once"
CLEAN_TEST = "test_airflow_db_clean_beside_ingest_db_clean_keeps_what_the_runs_need"


@pytest.fixture(scope="module", autouse=True)
def background(request, standalone, broker, tmp_path_factory) -> dict[str, Future]:
    """{test name: its scenario, started}: the scenarios of BACKGROUND_SCENARIOS whose tests are selected start
    with the module, each in a thread of its own. They mostly wait (for the scheduler's runs, a spark-submit,
    Airflow's heartbeat timeout, a retry), each on a datasource of its own, and the other tests' runs fill that
    time on the same scheduler; a scenario checks what it must see on its way, its test the outcome."""
    selected = [name for name in BACKGROUND_SCENARIOS if any(item.name == name for item in request.session.items)]
    # the pool's exit waits for the scenarios, which their own deadlines bound
    with ThreadPoolExecutor(max(1, len(selected))) as pool:
        yield {name: pool.submit(BACKGROUND_SCENARIOS[name], standalone, broker, tmp_path_factory.mktemp("bg"))
               for name in selected}


def edits_by_run(store: MetadataStore, datasource: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for run in store.runs.recent(datasource, limit=100):
        out[run.run_id] = run.plan.records
    return out


def total_edits(store: MetadataStore, datasource: str) -> int:
    table = DatasourceReader(store, datasource).to_arrow()
    return sum(v for v in table.column("edits").to_pylist() if v) if table.num_rows else 0


def produce_history(broker, topic: str, start: datetime, now: datetime, n: int,
                    interval: timedelta = INTERVAL) -> dict[datetime, int]:
    """n events spread evenly from `start` to `now`, each with its Kafka timestamp at its event time; returns
    how many fall in each interval."""
    p = Producer({"bootstrap.servers": broker.bootstrap})
    counts: dict[datetime, int] = {}
    span = (now - start).total_seconds()
    for i in range(n):
        t = start + timedelta(seconds=span * i / n)
        slice_start = floor_interval(t, interval)
        counts[slice_start] = counts.get(slice_start, 0) + 1
        event = {"time": t.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z", "channel": "#en", "page": f"p{i % 7}",
                 "user": f"u{i % 11}", "namespace": "Main", "isRobot": 0, "added": 3, "deleted": 1, "delta": 2}
        p.produce(topic, json.dumps(event).encode(), partition=i % 2, timestamp=int(t.timestamp() * 1000))
    assert p.flush(30) == 0
    return counts


def test_catch_up_trigger_clear_and_backfill(standalone, broker):
    store = MetadataStore(standalone.metadata_url)
    topic = broker.create_topic(partitions=2)
    now = datetime.now(timezone.utc)
    start = floor_interval(now) - 3 * INTERVAL
    counts = produce_history(broker, topic, start, now, 300)
    slices = [start + i * INTERVAL for i in range(3)]

    # catch-up after downtime: one run per missed interval, each ingesting its own slice, in order
    standalone.add_spec("caught_up", topic, catchup=True, startDate=start.isoformat())
    standalone.topics["caught_up"] = topic
    standalone.wait_for("caught_up", lambda runs: sum(r["state"] == "success" for r in runs.values()) >= 3)
    runs = sorted(store.runs.recent("caught_up", limit=100), key=lambda r: r.plan.end_time)[:3]
    assert [r.plan.end_time for r in runs] == [s + INTERVAL for s in slices]
    assert [r.plan.records for r in runs] == [counts[s] for s in slices]
    assert all(r.status is RunStatus.PUBLISHED for r in runs)

    # `airflow dags trigger`: up to the latest offsets now
    before = set(standalone.runs("caught_up"))
    standalone.airflow("dags", "trigger", "caught_up")
    standalone.wait_for("caught_up", lambda rs: any(k not in before and r["state"] == "success" for k, r in rs.items()))
    assert total_edits(store, "caught_up") == 300

    # `airflow dags clear` of a published run re-executes its persisted plan: nothing is added
    first = runs[0].run_id
    segments = {s.id for s in DatasourceReader(store, "caught_up").segments()}
    reports = store.reports.of("caught_up", first)
    ended = standalone.runs("caught_up")[first]["end_date"]
    standalone.airflow("dags", "clear", "caught_up", "--run-id", first, "-y")
    standalone.wait_for("caught_up", lambda rs: rs[first]["state"] == "success" and rs[first]["end_date"] != ended)
    assert total_edits(store, "caught_up") == 300
    assert {s.id for s in DatasourceReader(store, "caught_up").segments()} == segments
    assert store.runs.get("caught_up", first).status is RunStatus.PUBLISHED
    assert store.reports.of("caught_up", first) == reports

    # each publish updated the datasource's Asset: the DAG scheduled on it ran, and saw the publish's extra
    downstream = standalone.wait_for("on_caught_up", lambda rs: any(r["state"] == "success" for r in rs.values()))
    assert downstream


def backfill_the_slices_before_the_first_run(standalone, broker, tmp_path: Path) -> dict:
    """A datasource whose first scheduled run found its topic empty (IDLE) gets history afterwards; a backfill of
    the intervals before that run ingests each slice once, its runs publishing in order. Its test checks the
    runs: {"past": the backfilled slices' starts, "counts": records produced per daily slice}."""
    # daily: a scheduled run at the next boundary could take the history before the backfill does, or read what
    # the backfill leaves before the test counts it; midnight is rarely near (an hour's boundary and a
    # 10-minute one often are), and when it is the scenario waits for its run first
    day = timedelta(days=1)
    # an engine of the scenario's own: a store it opened would count as left open by whichever test is running
    store = MetadataStore(standalone.metadata_url, engine=make_engine(standalone.metadata_url))
    try:
        now = datetime.now(timezone.utc)
        start = floor_interval(now, day) - 3 * day
        slices = [start + i * day for i in range(3)]
        topic2 = broker.create_topic(partitions=2)
        standalone.add_spec("backfilled", topic2, schedule="P1D", startDate=(start - day).isoformat())
        standalone.wait_for("backfilled", lambda rs: any(r["state"] == "success" for r in rs.values()))
        # (its runs, not the datasource's state: at midnight the next scheduled run may be RUNNING)
        idle = store.runs.recent("backfilled")
        assert [r.plan.records for r in idle] == [0] * len(idle)
        scheduled_start = min(r.plan.end_time for r in idle) - day
        past = [s for s in slices if s + day <= scheduled_start]  # intervals without a run yet
        assert past, "no past interval left to backfill"
    finally:
        store.dispose()
    # A scheduled run at the next interval boundary would plan before the backfill's runs and take the
    # history too (exactly once still, but not slice by slice): if a boundary is near, let its run go first.
    boundary = floor_interval(datetime.now(timezone.utc), day) + day
    if (boundary - datetime.now(timezone.utc)).total_seconds() < 240:
        standalone.wait_for("backfilled", lambda rs: any(
            r["run_after"] == boundary.isoformat() and r["state"] == "success" for r in rs.values()), timeout=600)
    counts2 = produce_history(broker, topic2, start, now, 120, day)
    # one run at a time, oldest first: each run plans its own slice (with more at once, a later interval may
    # plan first and take the earlier slice too: still exactly once, but not slice by slice)
    standalone.airflow("backfill", "create", "--dag-id", "backfilled", "--from-date", past[0].isoformat(),
                       "--to-date", (past[-1] + timedelta(minutes=1)).isoformat(), "--max-active-runs", "1")
    standalone.wait_for("backfilled", lambda rs: sum(k.startswith("backfill__") and r["state"] == "success"
                                                     for k, r in rs.items()) >= len(past))
    return {"past": past, "counts": counts2}


def test_backfill_create_ingests_each_past_slice_once(standalone, background):
    outcome = background[BACKFILL_TEST].result(timeout=1500)  # its own deadlines end it sooner
    past, counts2, day = outcome["past"], outcome["counts"], timedelta(days=1)
    store = MetadataStore(standalone.metadata_url)
    bruns = sorted((r for r in store.runs.recent("backfilled", limit=100) if r.run_id.startswith("backfill__")),
                   key=lambda r: r.plan.end_time)
    assert [r.plan.end_time for r in bruns] == [s + day for s in past]
    assert [r.plan.records for r in bruns] == [counts2[s] for s in past]
    assert all(r.status is RunStatus.PUBLISHED for r in bruns)
    assert total_edits(store, "backfilled") == sum(counts2[s] for s in past)


def gate_a_run_until_data_arrives(standalone, broker, tmp_path: Path) -> str:
    """The scheduler starts the run of the latest interval [a, b) at once; its topic is empty, so its data gate
    defers to the triggerer (the plan task's deferral, holding no worker slot) until 60 records of [a, b) arrive:
    the run's id, once it succeeded."""
    topic = broker.create_topic(partitions=2)
    standalone.add_spec("gated", topic, dataGate={"minRecords": 50, "maxWait": "PT30M", "pokeInterval": "PT1S"})
    runs = standalone.wait_for("gated", lambda rs: len(rs) >= 1)
    run_id, run = min(runs.items(), key=lambda kv: kv[1]["run_after"])  # run_after: the interval's end
    deadline = time.monotonic() + 240
    while (state := standalone.task_state("gated", run_id, "plan")) != "deferred":  # its data gate waits
        assert time.monotonic() < deadline and state not in ("failed", "success", "skipped"), state
        time.sleep(2)
    end = datetime.fromisoformat(run["run_after"])
    produce_history(broker, topic, end - INTERVAL, end - timedelta(seconds=1), 60)  # inside [a, b)
    standalone.wait_for("gated", lambda rs: rs[run_id]["state"] == "success")
    return run_id


def test_the_data_gate_defers_to_the_triggerer_and_releases_when_data_arrives(standalone, background):
    run_id = background[GATE_TEST].result(timeout=1500)  # its own deadlines end it sooner
    store = MetadataStore(standalone.metadata_url)
    assert store.runs.get("gated", run_id).plan.records == 60
    assert total_edits(store, "gated") == 60


def test_the_scheduled_runs_task_runner_sends_druids_lag_as_ingest_status_reports_it(standalone, statsd, broker):
    """The plugin's metrics listener fires in the task runner a scheduler's executor starts (not only in `airflow
    dags test`): the scheduled run of the latest interval reads what its interval holds, and its report task sends
    the lag that `ingest status` then reports."""
    topic = broker.create_topic(partitions=2)
    produce_events(broker.bootstrap, topic, 40, seed=3)
    # yearly: its first run (the latest interval's) is the only one; a 10-minute schedule's next run could come
    # due while the test reads the first run's figures
    standalone.add_spec("metered", topic, schedule="@yearly")
    runs = standalone.wait_for("metered", lambda rs: any(r["state"] in ("success", "failed") for r in rs.values()))
    assert [r["state"] for r in runs.values()] == ["success"]
    status = json.loads(ingest(standalone, "status", "metered", "--json").stdout)["payload"]
    sent = {}
    for line in list(statsd.lines):
        name, tags, value, _ = parse_influx(line)
        if tags.get("dataSource") == "metered" and name.startswith("airflow.ingest/kafka/"):
            sent[(name, tags.get("partition"))] = value
    assert sent == {("airflow.ingest/kafka/lag", None): status["aggregateLag"],
                    ("airflow.ingest/kafka/maxLag", None): max(status["minimumLag"].values()),
                    ("airflow.ingest/kafka/avgLag", None): status["aggregateLag"] / 2,
                    **{("airflow.ingest/kafka/partitionLag", p): v for p, v in status["minimumLag"].items()}}
    assert set(status["minimumLag"]) == {"0", "1"}  # 40 (the interval ended before them; 0 if it was New Year)


def test_the_plugins_rest_api_and_pages_need_airflows_authentication(standalone, broker):
    store = MetadataStore(standalone.metadata_url)
    api = "/ingest/api/v1/supervisor"
    for method, path in (("GET", api), ("GET", f"{api}/caught_up/status"), ("POST", f"{api}/caught_up/suspend"),
                         ("POST", f"{api}/caught_up/reset"), ("GET", "/ingest/ui/datasources")):
        status, _ = standalone.http(method, path)
        assert status in (401, 403), (method, path, status)
    assert store.datasources.get("caught_up")["state"] != "SUSPENDED"
    assert store.offsets.committed("caught_up")

    token = standalone.token()
    status, names = standalone.http("GET", api, token)
    assert status == 200 and "caught_up" in names
    # caught_up runs every 10 minutes: a run starting or ending between the two reads would move its state
    standalone.paused_and_quiet("caught_up")
    try:
        status, report = standalone.http("GET", f"{api}/caught_up/status", token)
        payload = report["payload"]
        committed = {str(tp.partition): k.offset for tp, k in store.offsets.committed("caught_up").items()}
        assert status == 200 and payload["currentOffsets"] == committed and payload["aggregateLag"] == 0
        assert standalone.http("GET", f"{api}/caught_up/health", token) == (
            200, {"healthy": True, "state": payload["state"], "detailedState": payload["detailedState"]})
    finally:
        standalone.airflow("dags", "unpause", "caught_up", "-y")
    assert standalone.http("GET", f"{api}/nope/status", token)[0] == 404
    # an unknown datasource: 404 with the CLI's did-you-mean, on every route, reads and actions alike
    for method, path in (("GET", "status"), ("GET", "health"), ("POST", "suspend"), ("POST", "reset"),
                         ("POST", "resetOffsets")):
        body = {"type": "kafka", "partitions": {"type": "end", "stream": "t", "partitionOffsetMap": {"0": 1}}}
        status, answer = standalone.http(method, f"{api}/caught_upp/{path}", token,
                                         body if path == "resetOffsets" else None)
        assert status == 404 and answer["detail"].startswith(
            "unknown datasource 'caught_upp': did you mean 'caught_up'?"), (path, status, answer)

    status, body = standalone.http("POST", f"{api}/caught_up/suspend", token)
    assert status == 200 and body["state"] == "SUSPENDED"
    assert store.datasources.get("caught_up")["suspended"]
    dags = json.loads(next(ln for ln in reversed(standalone.airflow("dags", "list", "-o", "json").splitlines())
                           if ln.startswith("[")))
    assert next(d["is_paused"] for d in dags if d["dag_id"] == "caught_up") in (True, "True")
    assert standalone.http("POST", f"{api}/caught_up/resume", token)[1]["state"] == "RUNNING"
    (suspend, resume) = [a for a in store.audit_log.records("caught_up") if a.action in ("suspend", "resume")]
    assert suspend.actor == resume.actor == "admin"
    body = {"type": "kafka", "partitions": {"type": "end", "stream": standalone.topics["caught_up"],
                                            "partitionOffsetMap": committed}}
    status, result = standalone.http("POST", f"{api}/caught_up/resetOffsets", token, body)
    assert status == 200 and result["after"] == {standalone.topics["caught_up"]: committed}
    assert standalone.http("POST", f"{api}/caught_up/resetOffsets", token, {"partitions": 3})[0] == 400
    status, answer = standalone.http("POST", f"{api}/caught_up/resetOffsets", token, b"{not json")  # was a 500
    assert status == 400 and answer["detail"].startswith("the body is not a JSON object")
    rest_offset_moves_are_checked(standalone, broker, store, token, committed)
    assert standalone.http("POST", f"{api}/caught_up/explode", token)[0] == 422

    status, page = standalone.http("GET", "/ingest/ui/datasources", token)
    assert status == 200 and "caught_up" in page and "Aggregate lag" in page
    status, page = standalone.http("GET", "/ingest/ui/datasources/caught_up", token)
    assert status == 200 and "Recent runs" in page and "scheduled__" in page


def rest_offset_moves_are_checked(standalone, broker, store, token, committed: dict[str, int]) -> None:
    """resetOffsets and reset go through the CLI's service checks: refusals are 400 (409 for unconfirmed
    duplicates, with their number), `force` and `confirmDuplicates` are the explicit ways past them."""
    api, topic = "/ingest/api/v1/supervisor/caught_up", standalone.topics["caught_up"]

    def offsets(partition_offsets: dict, stream: str = topic, **extra):
        return standalone.http("POST", f"{api}/resetOffsets", token, {
            "type": "kafka", "partitions": {"type": "end", "stream": stream, "partitionOffsetMap": partition_offsets},
            **extra})

    status, body = offsets({"0": -1})
    assert status == 400 and "never negative" in body["detail"]
    other = broker.create_topic()
    status, body = offsets({"0": 0}, other)
    assert status == 400 and f"topic {other!r} is not one datasource 'caught_up' reads" in body["detail"]
    beyond = {"0": committed["0"] + 5}
    status, body = offsets(beyond)
    assert status == 400 and "lies beyond it" in body["detail"] and '"force": true' in body["detail"]
    status, body = standalone.http("POST", f"{api}/reset", token)  # from earliest: everything again
    assert status == 409 and body["detail"]["duplicates"] == sum(committed.values())
    status, body = offsets({"0": committed["0"] - 1})  # one published record again
    assert status == 409 and body["detail"]["duplicates"] == 1 and "--confirm-duplicates 1" in body["detail"][
        "message"]
    assert offsets({"0": committed["0"] - 1}, confirmDuplicates=2)[0] == 409  # another number: refused too
    assert {str(tp.partition): k.offset for tp, k in store.offsets.committed("caught_up").items()} == committed
    # the moves that pass (force, confirmDuplicates): rest_offset_moves_pass, while no run can plan


def rest_offset_moves_pass_when_forced_or_confirmed(standalone, store) -> None:
    """Called with the datasource paused and quiet: a run planned between these moves would read from them."""
    api, topic, token = "/ingest/api/v1/supervisor/caught_up", standalone.topics["caught_up"], standalone.token()
    committed = {str(tp.partition): k.offset for tp, k in store.offsets.committed("caught_up").items()}

    def offsets(partition_offsets: dict, **extra):
        return standalone.http("POST", f"{api}/resetOffsets", token, {
            "type": "kafka", "partitions": {"type": "end", "stream": topic, "partitionOffsetMap": partition_offsets},
            **extra})

    beyond = {"0": committed["0"] + 5}
    status, body = offsets(beyond, force=True)  # past the log end: set to the log end, where the caught-up one is
    assert status == 200 and body["clamped"] == [
        {"topic": topic, "partition": 0, "requested": beyond["0"], "offset": committed["0"]}], body
    assert body["after"] == {topic: {"0": committed["0"]}}
    status, body = offsets({"0": committed["0"] - 1}, confirmDuplicates=1)
    assert status == 200 and body["duplicateRecords"] == 1 and body["rereadRanges"] == [
        {"topic": topic, "partition": 0, "start": committed["0"] - 1, "end": committed["0"]}]
    status, body = offsets({"0": committed["0"]})  # forward again: it skips the record it released
    assert status == 409 and body["detail"]["skipped"] == 1 and '"confirmSkip": 1' in body["detail"]["message"]
    assert offsets({"0": committed["0"]}, confirmSkip=1)[0] == 200
    assert {str(tp.partition): k.offset for tp, k in store.offsets.committed("caught_up").items()} == committed
    (clamped, confirmed, forward) = store.audit_log.records("caught_up", action="set_offsets")[-3:]
    assert clamped.details["clamped"] and confirmed.details["duplicateRecords"] == 1 and forward.actor == "admin"


def test_a_headless_chromium_screenshot_shows_the_datasources_page_with_real_data(standalone, tmp_path):
    from browser import open_page

    store = MetadataStore(standalone.metadata_url)

    def shown() -> tuple[str, str, list[str]]:  # state, rows and charted runs, as the pages show them, from the store
        return (store.datasources.get("caught_up")["state"],
                f"{sum(s.num_rows for s in store.segment_records.of('caught_up')):,}",
                [r.run_id for r in store.runs.recent("caught_up", limit=10)])

    # caught_up runs every 10 minutes: a run starting between the page and the store's read moves its state
    # (RUNNING while it plans, IDLE when it published nothing). Compare against a datasource that cannot move.
    standalone.paused_and_quiet("caught_up")
    try:
        expected = shown()
        token = standalone.token()
        page = open_page(f"{standalone.base}/ingest/ui/datasources", {"_token": token}, wait_for_text="caught_up")
        # the same page as the Airflow UI shows it: a "Datasources" entry of Airflow's own navigation
        ui = open_page(f"{standalone.base}/plugin/datasources", {"_token": token}, wait_for_text="caught_up",
                       settle_s=2)
        # the Ingest tab of the caught_up DAG in the Airflow UI: the datasource page in its frame
        tab = open_page(f"{standalone.base}/dags/caught_up/plugin/ingest", {"_token": token},
                        wait_for_text="Recent runs", height=1100)
        assert shown() == expected  # nothing moved while the pages were read
    finally:
        standalone.airflow("dags", "unpause", "caught_up", "-y")
    rows = {line.split("\t")[0]: line.split("\t") for line in page.text.splitlines() if "\t" in line}
    caught_up = rows["caught_up"]
    assert (caught_up[1], caught_up[6]) == expected[:2] and caught_up[3] == "yes"
    assert page.png.startswith(b"\x89PNG") and len(page.png) > 10_000
    (tmp_path / "datasources.png").write_bytes(page.png)
    assert "Browse" in ui.text and "Datasources" in ui.text and "caught_up" in ui.text  # nav, and the page inside
    (tmp_path / "airflow-ui-datasources.png").write_bytes(ui.png)

    # the charts, with the real runs' figures (the same 10 runs as the Recent runs table), oldest first
    runs = sorted(store.runs.recent("caught_up", limit=10), key=lambda r: r.seq)
    # real history: the catch-up runs' records (among its last 100 runs: a slow suite adds an empty run every 10 min)
    assert sum(r.plan.records for r in store.runs.recent("caught_up", limit=100)) >= 300, runs
    # each run's figures as its publish recorded them (compaction and kill never change them)
    published = {r.run_id: r.published for r in runs if r.published is not None}

    def label(title: str, figures) -> str:
        return f"{title}, {len(runs)} runs, oldest first: {', '.join(figures)};"

    lag = label("Lag at planning", ("none" if r.plan.is_backfill else "≥" * any(r.plan.caps.values())
                                    + f"{r.plan.records:,}" for r in runs))
    charts = [lag, label("Records per run", (f"{r.plan.records:,}" for r in runs)),
              label("Rows published per run", (f"{published[r.run_id].rows if r.run_id in published else 0:,}"
                                               for r in runs)),
              label("Segments per run", (f"{published[r.run_id].segments if r.run_id in published else 0}"
                                         for r in runs))]
    assert sum(p.rows for p in published.values()) > 0

    assert any(x.startswith(lag) for x in page.chart_labels), page.chart_labels  # each row's sparkline
    assert any(x.startswith(lag) for x in ui.chart_labels), ui.chart_labels
    for chart in charts:
        assert any(x.startswith(chart) for x in tab.chart_labels), (chart, tab.chart_labels)
    assert any(x.startswith(f"Duration per run, {len(runs)} runs") for x in tab.chart_labels), tab.chart_labels
    assert "Lag at planning: records from each run" in tab.text  # what the lag means, under the charts
    (tmp_path / "airflow-ui-ingest-tab.png").write_bytes(tab.png)
    print("screenshots:", tmp_path)


def test_reset_to_latest_with_backfill_runs_the_backfill_in_airflow(standalone, broker):
    store = MetadataStore(standalone.metadata_url)
    topic = standalone.topics["caught_up"]
    # paused with nothing in flight, so no scheduled run takes the records before the reset skips them (a
    # record stamped in the future no longer holds a scheduled run back: it reads to the latest offsets)
    standalone.paused_and_quiet("caught_up")
    try:
        rest_offset_moves_pass_when_forced_or_confirmed(standalone, store)
        now = datetime.now(timezone.utc)
        produce_history(broker, topic, now - timedelta(seconds=60), now - timedelta(seconds=30), 40)
        before = total_edits(store, "caught_up")
        done = subprocess.run([str(BIN / "ingest"), "reset", "caught_up", "--to-latest", "--backfill", "--yes",
                               "--actor", "erin"], env=standalone.env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
    finally:
        standalone.airflow("dags", "unpause", "caught_up", "-y")  # the run the reset triggered waits for it
    (backfill,) = [r for r in store.runs.recent("caught_up", limit=100) if r.plan.is_backfill]
    assert backfill.plan.records == 40
    # the DAG run the reset triggered executes the backfill's persisted plan
    standalone.wait_for("caught_up", lambda rs: rs.get(backfill.run_id, {}).get("state") == "success")
    assert store.runs.get("caught_up", backfill.run_id).status is RunStatus.PUBLISHED
    assert total_edits(store, "caught_up") == before + 40


def kill_a_task_worker(standalone, broker, tmp_path: Path) -> dict:
    """The worker running a spark_job of `worker_lost` SIGKILLed with everything under it, then its run waited for
    until it succeeds: the task instance, as the API showed it before the kill."""
    topic = broker.create_topic(partitions=2)
    end = floor_interval(datetime.now(timezone.utc))
    produce_history(broker, topic, end - 2 * INTERVAL, end - timedelta(seconds=1), 400)
    # The job's Python driver starts through a gate: while it is closed the driver waits, with spark-submit's JVM
    # up above it. The test kills the worker then, whenever the scheduler got there (a Spark job that had come and
    # gone before the test looked made CI fail twice). The retry finds the gate open.
    gate = tmp_path / "gate"
    gate.mkdir()
    (gate / "closed").touch()
    driver = tmp_path / "gated-python"
    driver.write_text(f"""#!/bin/sh
if [ -e '{gate}/closed' ]; then
    touch "{gate}/waiting.$$"
    while [ -e '{gate}/closed' ]; do sleep 0.1; done
fi
exec '{sys.executable}' "$@"
""")
    driver.chmod(0o755)
    standalone.add_spec("worker_lost", topic, retries=2, retryDelay="PT5S",
                        spark={"connId": "spark_submit", "conf": {"spark.pyspark.driver.python": str(driver)}})
    deadline = time.monotonic() + 420
    while not (waiting := list(gate.glob("waiting.*"))):
        assert time.monotonic() < deadline, f"no spark_job of worker_lost ran: {standalone.diagnosis('worker_lost')}"
        time.sleep(0.5)
    try:
        gated = psutil.Process(int(waiting[0].suffix.lstrip(".")))
        # the worker's title is "airflow worker -- LocalExecutor: <ti id>" (setproctitle, padded to the length of
        # the command line it replaced); its task runner's is "airflow worker -- <ti id>"
        worker = next(p for p in gated.parents() if _title(p).startswith("airflow worker -- LocalExecutor: "))
        ti_id = _title(worker).split()[-1]
        victims = [worker, *_children(worker)]
        assert any("org.apache.spark.deploy.SparkSubmit" in _title(p) for p in victims), [_title(p) for p in victims]
        status, body = standalone.http("GET", "/api/v2/dags/worker_lost/dagRuns/~/taskInstances?task_id=spark_job"
                                              "&state=running", standalone.token())
        assert status == 200, body
        ti = next((t for t in body["task_instances"] if t["id"] == ti_id), None)
        assert ti is not None, (_title(worker), body)
        for p in victims:
            try:
                p.send_signal(signal.SIGKILL)
            except psutil.NoSuchProcess:  # the gate's `sleep`s come and go
                pass
    finally:
        (gate / "closed").unlink()
    standalone.wait_for("worker_lost", lambda rs: rs[ti["dag_run_id"]]["state"] == "success", timeout=900)
    return ti


RETENTION_DAYS = 30  # docs/metadata-store.md's retention, for both cleans
RUN_KEYS = (("dag_id", "run_id"), ("source_dag_id", "source_run_id"), ("datasource", "run_id"))


def age_runs(engine: sa.Engine, owner: str, run_ids: list[str], days: int) -> int:
    """Every date of the runs' rows moved `days` back, in each table that names a run (Airflow's by dag_id and
    run_id, asset events by their source run, the store's by datasource and run_id): those runs as they would be
    `days` later. Returns the rows moved."""
    moved = 0
    with engine.begin() as conn:
        columns: dict[str, dict[str, str]] = {}
        for table, column, kind in conn.execute(sa.text(
                "SELECT table_name, column_name, data_type FROM information_schema.columns "
                "WHERE table_schema = current_schema()")):
            columns.setdefault(table, {})[column] = kind
        for table, cols in columns.items():
            key = next(((d, r) for d, r in RUN_KEYS if d in cols and r in cols), None)
            dates = [c for c, kind in cols.items() if kind.startswith("timestamp")]
            if key is None or not dates:
                continue
            update = sa.text(
                f'UPDATE "{table}" SET ' + ", ".join(f'"{c}" = "{c}" - make_interval(days => :days)' for c in dates)
                + f' WHERE "{key[0]}" = :owner AND "{key[1]}" IN :runs').bindparams(sa.bindparam("runs", expanding=True))
            moved += conn.execute(update, {"days": days, "owner": owner, "runs": run_ids}).rowcount
    return moved


def clean_both_histories_beside_a_run_in_flight(standalone, broker, tmp_path: Path) -> dict:
    """A @continuous datasource behind a data gate publishes three runs of 20 records; its fourth waits in its
    gate. The two oldest are then aged 40 days (in Airflow's tables and in the store) and both cleans run at the
    documented retention, Airflow's `airflow db clean` first, then `ingest db clean --keep-runs 1` (every run
    older than 30 days may go). Then the run in flight plans and publishes the next 20 records."""
    name, topic = "retained", broker.create_topic(partitions=2)
    standalone.add_spec(name, topic, schedule="@continuous", maxActiveRuns=1,
                        dataGate={"minRecords": 1, "maxWait": "PT30M", "pokeInterval": "PT1S"})
    done: list[str] = []
    for k in range(1, 4):
        produce_events(broker.bootstrap, topic, 20, seed=480 + k)
        runs = standalone.wait_for(name, lambda rs, k=k: sum(r["state"] == "success" for r in rs.values()) >= k)
        done = sorted((r for r in runs if runs[r]["state"] == "success"), key=lambda r: runs[r]["start_date"])
    in_flight = None
    deadline = time.monotonic() + 240
    while in_flight is None:  # the fourth run, waiting in its gate
        assert time.monotonic() < deadline, standalone.runs(name)
        running = [r for r, v in standalone.runs(name).items() if v["state"] == "running"]
        if running and standalone.task_state(name, running[0], "plan") == "deferred":
            in_flight = running[0]
        time.sleep(1)
    old, kept = done[:2], done[2]
    store_engine = make_engine(standalone.metadata_url)
    aged = {"airflow": age_runs(standalone.db, name, old, 40), "store": age_runs(store_engine, name, old, 40)}
    before = datetime.now(timezone.utc) - timedelta(days=RETENTION_DAYS)
    airflow_clean = standalone.airflow("db", "clean", "--clean-before-timestamp", before.isoformat(),
                                       "--skip-archive", "--error-on-cleanup-failure", "--yes")
    ingest_clean = subprocess.run([sys.executable, "-m", "ingest_core.service.cli", "db", "clean", name,
                                   "--days", str(RETENTION_DAYS), "--keep-runs", "1", "--yes", "--json"],
                                  env=standalone.env, capture_output=True, text=True, timeout=300)
    assert ingest_clean.returncode == 0, ingest_clean.stdout + ingest_clean.stderr
    # what is left of each run in Airflow's tables, right after the cleans
    left = {run: {t: standalone.query(f"SELECT count(*) FROM {t} WHERE dag_id = :d AND run_id = :r", d=name,
                                      r=run)[0][0] for t in ("dag_run", "task_instance", "xcom", "log")}
            for run in [*old, kept, in_flight]}
    store_runs = {r.run_id for r in MetadataStore(standalone.metadata_url).runs.recent(name, limit=100)}
    store_engine.dispose()
    produce_events(broker.bootstrap, topic, 20, seed=484)
    standalone.wait_for(name, lambda rs: rs[in_flight]["state"] == "success")
    return {"old": old, "kept": kept, "in_flight": in_flight, "aged": aged, "left": left, "store_runs": store_runs,
            "airflow_clean": airflow_clean, "ingest_clean": json.loads(ingest_clean.stdout)[name]}


BACKGROUND_SCENARIOS = {BACKFILL_TEST: backfill_the_slices_before_the_first_run,
                        GATE_TEST: gate_a_run_until_data_arrives,
                        KILLED_WORKER_TEST: kill_a_task_worker,
                        CLEAN_TEST: clean_both_histories_beside_a_run_in_flight}


@pytest.mark.timeout(1500)  # waits for its scenario, which may have started with the module
def test_airflow_db_clean_beside_ingest_db_clean_keeps_what_the_runs_need(standalone, background):
    """docs/metadata-store.md's retention for both databases: the old runs' rows are gone from both, and nothing a
    run needs is: the run in flight at the clean (its gate's trigger, its task instances, then its plan's XCom
    that its jobs, publish and report read) published after it, every record stays visible once (the segment
    records are never cleaned), and `ingest status` still reads the datasource."""
    got = background[CLEAN_TEST].result(timeout=1500)  # its own deadlines end it sooner
    name, old, kept, in_flight = "retained", got["old"], got["kept"], got["in_flight"]
    assert got["aged"]["airflow"] > 0 and got["aged"]["store"] > 0
    for run in old:  # gone from Airflow's tables and from the store
        assert got["left"][run] == {"dag_run": 0, "task_instance": 0, "xcom": 0, "log": 0}, (run, got["left"])
        assert run not in got["store_runs"]
    assert got["ingest_clean"]["runs"] == 2, got["ingest_clean"]
    for run in (kept, in_flight):  # kept in Airflow's tables
        assert got["left"][run]["dag_run"] == 1 and got["left"][run]["task_instance"] > 0, (run, got["left"])
    assert got["store_runs"] == {kept}  # and in the store (the run in its gate has planned nothing yet)
    assert got["left"][kept]["xcom"] > 0  # the plan's and the publish's results
    store = MetadataStore(standalone.metadata_url)
    assert store.runs.get(name, in_flight).status is RunStatus.PUBLISHED
    assert store.runs.get(name, in_flight).plan.records == 20
    assert total_edits(store, name) == 80  # the aged runs' segments too: none lost, none twice
    status = subprocess.run([sys.executable, "-m", "ingest_core.service.cli", "status", name, "--json"],
                            env=standalone.env, capture_output=True, text=True, timeout=300)
    assert status.returncode == 0, status.stdout + status.stderr
    payload = json.loads(status.stdout)["payload"]
    recent = {r["runId"] for r in payload["recentRuns"]}
    assert {kept, in_flight} <= recent and not recent & set(old), recent
    assert payload["lostRecords"] == 0 and payload["healthy"], payload


def test_a_killed_task_worker_is_failed_by_its_missing_heartbeat_and_retried_exactly_once(standalone, background):
    """The worker running a spark_job dies with everything under it (SIGKILL of the LocalExecutor worker, which
    takes its task runner and spark-submit with it): nothing reports the task's end. Airflow's heartbeat
    timeout fails that try, the retry runs the Spark job again, and every record is ingested once."""
    import urllib.parse

    ti = background[KILLED_WORKER_TEST].result(timeout=1500)  # its own deadlines end it sooner
    run_id, token = ti["dag_run_id"], standalone.token()
    path = (f"/api/v2/dags/worker_lost/dagRuns/{urllib.parse.quote(run_id, safe='')}/taskInstances/spark_job/"
            f"{ti['map_index']}")
    status, after = standalone.http("GET", path, token)
    assert status == 200 and after["state"] == "success" and after["try_number"] > ti["try_number"], after
    status, events = standalone.http("GET", "/api/v2/eventLogs?dag_id=worker_lost&event=heartbeat%20timeout", token)
    assert status == 200 and events["total_entries"] >= 1, events  # failed by the heartbeat timeout, not a report
    # every record exactly once
    store = MetadataStore(standalone.metadata_url)
    assert store.runs.get("worker_lost", run_id).status is RunStatus.PUBLISHED
    assert sum(r.plan.records for r in store.runs.recent("worker_lost", limit=100)) == 400
    assert total_edits(store, "worker_lost") == 400


def _title(p: psutil.Process) -> str:
    try:
        return " ".join(p.cmdline()).strip()
    except psutil.Error:
        return ""


def _children(p: psutil.Process) -> list[psutil.Process]:
    try:
        return p.children(recursive=True)
    except psutil.Error:
        return []
