"""Benchmark: hostile SQL against a real `airflow api-server`, and how Airflow's own API answers meanwhile.

One api-server (Airflow's simple auth manager, everyone an admin; SQLite for Airflow and the ingestion metadata),
with the SQL API's limits at their defaults (`query.engine.SqlLimits`: 1GB of DuckDB memory, 64MB of result, 100,000
rows, 2 threads). Each case sends one query over REST while this script asks `GET /api/v2/version` again and again
(every --probe-every s, each answer timed) and samples the memory (RSS) of the api-server's own process and of
the SQL workers (`service.sql_worker`, forked by `service.sql_forkserver`), until the query has answered (or, for
the client that leaves, until no worker is left). The baseline is the same probing with no query running, in the
same run. The cases are issue 44's:
  - repeat: SELECT repeat('x', 20000000) FROM range(60)   (60 rows of 20 MB: 1.2 GB of result)
  - theta: APPROX_COUNT_DISTINCT_DS_THETA over range(30,000,000) with a 3 s time limit (Python's work in DuckDB)
  - IN list: a 2 MB IN (...300,000 values...) with a 2 s time limit (the parse)
  - max rows: 100,000 rows of four columns, the documented maximum result
  - client leaves: the theta sketch over range(12,000,000) (within a worker's memory) with no time limit, its
    client gone after 1 s; then the CPU the api-server's processes use until they are idle again

    python benchmarks/sql_isolation.py            # the sizes above
    python benchmarks/sql_isolation.py --tiny     # small sizes, a few probes: that it runs (the tests)
"""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ingest_core.dev.demo import airflow_env  # noqa: E402
from ingest_core.dev.embedded import free_port, stop_group  # noqa: E402
from ingest_core.dev.process_tree import cpu_seconds, sql_worker_pids  # noqa: E402
from ingest_core.store.metadata import MetadataStore  # noqa: E402

BIN = Path(sys.executable).parent
SQL = "/ingest/api/v1/sql"
MB = 2**20
IDLE_WAIT_S = 300.0  # how long a server that keeps working after its client left is watched


@dataclass(frozen=True)
class Case:
    name: str
    query: str
    timeout_ms: int | None = None
    leave_after_s: float | None = None  # the client goes away this long after sending


def cases(tiny: bool) -> list[Case]:
    size, values, rows, text, leave = (300_000, 3_000, 1_000, 2_000_000, 300_000) if tiny else (
        30_000_000, 300_000, 100_000, 20_000_000, 12_000_000)
    in_list = "SELECT count(*) AS n FROM range(10) WHERE range IN (" + ", ".join(
        str(i * 7919) for i in range(values)) + ")"
    theta = "SELECT APPROX_COUNT_DISTINCT_DS_THETA(range) AS n FROM range({})"
    return [Case(f"repeat {text // 10**6} MB x 60", f"SELECT repeat('x', {text}) AS s FROM range(60)"),
            Case(f"theta {size:,}, 3 s limit", theta.format(size), 3000),
            Case(f"IN list {values:,} values, 2 s limit", in_list, 2000),
            Case(f"max rows {rows:,}", f"SELECT range AS i, 'row ' || range AS s, range / 7 AS d, TIMESTAMP "
                                      f"'2026-01-01 00:00:00' + to_seconds(range) AS t FROM range({rows})"),
            Case(f"theta {leave:,}, client leaves", theta.format(leave), None, 1.0)]


class ApiServer:
    """`airflow api-server` in a folder of its own; stopped (its process group) by `stop`."""

    def __init__(self, root: Path):
        port = free_port()
        self.base = f"http://localhost:{port}"
        (root / "dags").mkdir()
        metadata_url = f"sqlite:///{root / 'ingest.db'}"
        env = airflow_env(root, "localhost:9", dags_folder=root / "dags", metadata_url=metadata_url,
                          AIRFLOW__API__PORT=str(port), AIRFLOW__API__WORKERS="1",
                          AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS="True",
                          INGEST_SQL_TEMP_DIRECTORY=str(root / "spill"))
        done = subprocess.run([str(BIN / "airflow"), "db", "migrate"], env=env, capture_output=True, text=True,
                              timeout=600)
        if done.returncode:
            raise SystemExit(f"airflow db migrate failed: {done.stderr[-2000:]}")
        MetadataStore(metadata_url).upgrade()
        self.log = root / "api-server.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen([str(BIN / "airflow"), "api-server", "--port", str(port)], env=env,
                                         stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 180
        while True:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the api-server did not start: see {self.log}")
            try:
                with urllib.request.urlopen(f"{self.base}/api/v2/monitor/health", timeout=5):
                    break
            except OSError:
                time.sleep(1)
        with urllib.request.urlopen(f"{self.base}/auth/token", timeout=30) as r:
            self.token = json.loads(r.read())["access_token"]

    def sql(self, case: Case) -> tuple[int, str]:
        """(status, Druid's errorMessage or the number of rows) of the case's query."""
        body = {"query": case.query, **({"context": {"timeout": case.timeout_ms}} if case.timeout_ms else {})}
        request = urllib.request.Request(f"{self.base}{SQL}", method="POST", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json",
                                                  "Authorization": f"Bearer {self.token}"})
        try:
            with urllib.request.urlopen(request, timeout=600) as r:
                return r.status, f"{len(json.loads(r.read()))} rows"
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read()).get("errorMessage", "")

    def leave(self, case: Case) -> tuple[int, str]:
        """The query sent, and its client gone after `case.leave_after_s`."""
        conn = http.client.HTTPConnection("localhost", int(self.base.rsplit(":", 1)[1]), timeout=60)
        conn.request("POST", SQL, json.dumps({"query": case.query}), headers={
            "Content-Type": "application/json", "Authorization": f"Bearer {self.token}"})
        time.sleep(case.leave_after_s or 0)
        conn.sock.shutdown(socket.SHUT_RDWR)
        conn.close()
        return 0, f"left after {case.leave_after_s:g} s"

    def version_ms(self) -> float:
        started = time.perf_counter()
        with urllib.request.urlopen(f"{self.base}/api/v2/version", timeout=300) as r:
            r.read()
        return (time.perf_counter() - started) * 1000

    def workers(self) -> list[psutil.Process]:
        found = []
        for pid in sql_worker_pids(self.proc.pid):
            try:
                found.append(psutil.Process(pid))
            except psutil.NoSuchProcess:
                pass
        return found

    def stop(self) -> None:
        stop_group(self.proc, 60)


@dataclass
class Measured:
    answer: str
    wall_s: float
    latencies_ms: list[float]
    server_peak_mb: float
    server_growth_mb: float
    workers_peak_mb: float
    after_leaving: tuple[float, float] | None = None  # CPU seconds the server's processes used once the client
    # left, and the seconds until they were idle again

    def line(self, name: str) -> str:
        ms = sorted(self.latencies_ms)
        p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
        return (f"{name:38} {self.answer[:60]:60} {self.wall_s:8.2f} s   /api/v2/version p50 "
                f"{statistics.median(ms):7.1f} ms, p99 {p99:7.1f} ms, max {ms[-1]:7.1f} ms ({len(ms)} probes)   "
                f"api-server RSS peak {self.server_peak_mb:.0f} MB ({self.server_growth_mb:+.0f} MB), workers' peak "
                f"{self.workers_peak_mb:.0f} MB" + ("" if self.after_leaving is None else
                "\n  after the client left: the api-server's processes used {:.2f} s of CPU, idle again after {:.2f} s"
                .format(*self.after_leaving)))


def rss(proc: psutil.Process) -> int:
    try:
        return proc.memory_info().rss
    except psutil.NoSuchProcess:
        return 0


def measure(server: ApiServer, case: Case | None, probe_every: float, baseline_s: float) -> Measured:
    """The case's query (None: the baseline, `baseline_s` of no query) while /api/v2/version is probed and
    memory sampled."""
    me = psutil.Process(server.proc.pid)
    before = rss(me)
    peak, workers_peak, answer, latencies = before, 0, {}, []
    started = time.monotonic()
    runner = threading.Thread(target=lambda: answer.update(r=(
        server.leave(case) if case.leave_after_s else server.sql(case))))

    def sample() -> None:
        nonlocal peak, workers_peak
        while not done.wait(0.02):
            peak = max(peak, rss(me))
            workers_peak = max(workers_peak, sum(rss(w) for w in server.workers()))

    done = threading.Event()
    sampler = threading.Thread(target=sample)
    sampler.start()
    if case:
        runner.start()

    left: list[float] = []  # when the client left: the time, the server's CPU seconds

    def running() -> bool:
        if case is None:
            return time.monotonic() - started < baseline_s
        if runner.is_alive() or case.leave_after_s is None:
            return runner.is_alive()
        if not left:
            left.extend((time.monotonic(), cpu_seconds(server.proc.pid)))
        # the client has left: until no worker is left and the server's processes are idle (< 5% of a core)
        return bool(server.workers()) or busy(server.proc.pid) and time.monotonic() - left[0] < IDLE_WAIT_S

    while running():
        latencies.append(server.version_ms())
        time.sleep(probe_every)
    wall = time.monotonic() - started
    done.set()
    sampler.join()
    if case:
        runner.join()
    status, text = answer.get("r", (0, "no query"))
    return Measured(f"{status} {text}" if status else text, wall, latencies, peak / MB, (peak - before) / MB,
                    workers_peak / MB, (cpu_seconds(server.proc.pid) - left[1], time.monotonic() - left[0])
                    if left else None)


def busy(pid: int, window_s: float = 0.5) -> bool:
    before = cpu_seconds(pid)
    time.sleep(window_s)
    return (cpu_seconds(pid) - before) / window_s >= 0.05


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tiny", action="store_true", help="small sizes: that it runs (the tests)")
    parser.add_argument("--probe-every", type=float, default=0.05, help="seconds between /api/v2/version probes")
    parser.add_argument("--baseline", type=float, default=10.0, help="seconds of probing with no query")
    args = parser.parse_args(argv)
    baseline_s = 2.0 if args.tiny else args.baseline
    with tempfile.TemporaryDirectory(prefix="sql-isolation-") as tmp:
        server = ApiServer(Path(tmp))
        try:
            warm = time.monotonic()
            status, _ = server.sql(Case("warm-up", "SELECT 1 AS one"))
            print(f"api-server up; the first query (the SQL fork server's start) answered {status} in "
                  f"{time.monotonic() - warm:.2f} s; api-server RSS {rss(psutil.Process(server.proc.pid)) / MB:.0f} MB")
            one = []
            for _ in range(3 if args.tiny else 20):
                started = time.perf_counter()
                server.sql(Case("one", "SELECT 1 AS one"))
                one.append(time.perf_counter() - started)
            print(f"a one-row query over REST: median {statistics.median(one) * 1000:.0f} ms over {len(one)} (a "
                  "worker forked per query)")
            print(measure(server, None, args.probe_every, baseline_s).line("baseline (no query)"))
            for case in cases(args.tiny):
                print(measure(server, case, args.probe_every, baseline_s).line(case.name), flush=True)
            left = server.workers()
            print(f"SQL workers left at the end: {len(left)}")
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
