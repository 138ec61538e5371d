"""Benchmark: the DAG folder's parse by Airflow's real dag-processor, for N datasource specs (target: 200 specs
in at most 10 s in all, issue 48).

Two layouts of the same specs, each in a fresh Airflow home, parsed by Airflow's `airflow dag-processor`,
stopped once every DAG was parsed:
- per-spec: the product's DAG folder: a generated DAG file per spec (provider/dag_files.py), kept in step by
  the `dags-folder` bundle SpecDagBundle (provider/spec_bundle.py); each file is its own process;
- one file: the layout before issue 48, one DAG file building every DAG (`dag_factory.load_dags`), as
  dags/ingest_datasources.py did, under Airflow's default bundle.
Each layout is parsed twice: first with every DAG new to Airflow's database (written), then again with every
DAG known and unchanged (what each later parse costs). Figures, from Airflow itself: the parse loop (from its
search for files, in its log, to the last DAG's `dag.last_parsed_time`), each file's parse duration
(Airflow's `dag.last_parse_duration`: the sum over files and the slowest), the DAGs and import errors it stored;
and the CPU of the dag-processor's own process (it stores each file's result in Airflow's database, one file at
a time) apart from its parse processes'.

    python benchmarks/dag_parse.py                    # 10, 50 and 200 specs, both layouts
    python benchmarks/dag_parse.py --specs 200 --layout per-spec
    python benchmarks/dag_parse.py --tiny             # 3 specs, both layouts: that it runs (the tests)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import resource
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import psutil
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ingest_core.dev.demo import airflow_env  # noqa: E402

AIRFLOW = str(Path(sys.executable).parent / "airflow")
EXAMPLE = yaml.safe_load((ROOT / "dags" / "datasources" / "wikipedia.yaml").read_text())
TARGET_S, TARGET_SPECS = 10.0, 200
DEADLINE_S = 1800  # a bound on one dag-processor run, not a figure
LAYOUTS = ("per-spec", "one-file")
ONE_FILE = '''"""The DAG folder before issue 48: every datasource's airflow DAG from this one file."""
from pathlib import Path

from ingest_core.provider.dag_factory import load_dags

globals().update(load_dags(Path(__file__).resolve().parent))
'''
_STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)Z?")


@dataclass
class Parse:
    loop_s: float
    command_s: float
    manager_cpu_s: float
    files_cpu_s: float
    files: int
    file_sum_s: float
    file_max_s: float
    dags: int
    import_errors: int


def write_specs(dags: Path, n: int, layout: str) -> None:
    (dags / "datasources").mkdir(parents=True)
    for i in range(n):
        raw = json.loads(json.dumps(EXAMPLE))
        raw["spec"]["dataSchema"]["dataSource"] = f"ds_{i:03d}"
        raw["spec"]["ioConfig"]["topic"] = f"topic_{i:03d}"
        (dags / "datasources" / f"ds_{i:03d}.yaml").write_text(yaml.safe_dump(raw))
    if layout == "per-spec":
        for path in (ROOT / "dags").glob("*.py"):
            shutil.copy(path, dags / path.name)
    else:
        (dags / "ingest_datasources.py").write_text(ONE_FILE)


def migrated(work: Path) -> Path:
    """A migrated Airflow database, copied into each home (a migration costs ~20 s)."""
    env = airflow_env(work / "template", "localhost:9", dags_folder=work / "none")
    done = subprocess.run([AIRFLOW, "db", "migrate"], env=env, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        sys.exit(f"airflow db migrate exited {done.returncode}: {done.stderr[-2000:]}")
    return work / "template" / "airflow" / "airflow.db"


def run_processor(home: Path, env: dict[str, str], n: int) -> Parse:
    """`airflow dag-processor` in `home` until each of the `n` DAGs was parsed since it started, then stopped.
    (Not `--num-runs 1`: Airflow 3.3 counts only the files that finished a parse, so with the first file done it
    may exit while the others are still parsing: `max_runs_reached`, airflow/dag_processing/manager.py.)"""
    log = home / "dag-processor.log"
    db_path = home / "airflow" / "airflow.db"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started_at = datetime.now(timezone.utc).replace(tzinfo=None)
    started = time.perf_counter()
    with log.open("wb") as out:
        proc = psutil.Popen([AIRFLOW, "dag-processor"], env=env, stdout=out, stderr=subprocess.STDOUT)
        cpu = proc.cpu_times()
        deadline = time.monotonic() + DEADLINE_S
        try:
            while len(_parsed_since(db_path, started_at)) < n:
                if proc.poll() is not None or time.monotonic() > deadline:
                    sys.exit(f"{home.name}: the dag-processor exited or missed its deadline:\n"
                             f"{log.read_text(errors='replace')[-3000:]}")
                with contextlib.suppress(psutil.Error):  # the manager's own CPU (the rest: its parse processes')
                    cpu = proc.cpu_times()
                time.sleep(0.1)
            with contextlib.suppress(psutil.Error):
                cpu = proc.cpu_times()
            command_s = time.perf_counter() - started
        finally:
            proc.terminate()  # (with 200 files in flight it may take a while to stop: then killed)
            try:
                proc.wait(30)
            except psutil.TimeoutExpired:
                proc.kill()
                proc.wait(30)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the dag-processor and every process it reaped
    total_cpu_s = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    text = log.read_text(errors="replace")
    parsed = _parsed_since(db_path, started_at)
    with sqlite3.connect(db_path) as db:
        per_file = dict(db.execute("select fileloc, max(last_parse_duration) from dag group by fileloc"))
        errors = db.execute("select count(*) from import_error").fetchone()[0]
    return Parse(loop_s=(max(parsed.values()) - _search_started(text)).total_seconds(), command_s=command_s,
                 manager_cpu_s=cpu.user + cpu.system,
                 files_cpu_s=max(0.0, total_cpu_s - cpu.user - cpu.system), files=len(per_file),
                 file_sum_s=sum(per_file.values()), file_max_s=max(per_file.values(), default=0),
                 dags=len(parsed), import_errors=errors)


def _parsed_since(db_path: Path, since: datetime) -> dict[str, datetime]:
    """{dag_id: when Airflow last parsed it} of the DAGs parsed since `since` (UTC, naive: as Airflow's
    SQLite database holds it)."""
    try:
        with sqlite3.connect(db_path) as db:
            rows = db.execute("select dag_id, last_parsed_time from dag where last_parsed_time is not null")
            parsed = {dag_id: datetime.fromisoformat(at) for dag_id, at in rows}
    except sqlite3.Error:  # (a table the migration made, locked a moment by a writer)
        return {}
    return {dag_id: at for dag_id, at in parsed.items() if at >= since}


def parse_twice(work: Path, template_db: Path, n: int, layout: str, conf: dict[str, str]) -> tuple[Parse, Parse]:
    """The first parse (every DAG new to Airflow: written) and a second (every DAG known, unchanged)."""
    home = work / f"{layout}-{n}"
    write_specs(home / "dags", n, layout)
    env = airflow_env(home, "localhost:9", dags_folder=home / "dags", **conf)
    if layout == "one-file":
        env.pop("AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST")  # Airflow's default LocalDagBundle
    (home / "airflow").mkdir(parents=True, exist_ok=True)
    shutil.copy(template_db, home / "airflow" / "airflow.db")
    return run_processor(home, env, n), run_processor(home, env, n)


def _search_started(text: str) -> datetime:
    """When the dag-processor first searched the DAG folder for files (its log; UTC, naive)."""
    for line in text.splitlines():
        stamp = _STAMP.match(line)
        if stamp and "Searching for files" in line:
            return datetime.fromisoformat(stamp.group(1))
    sys.exit("the dag-processor's log lacks its search for files:\n" + text[-3000:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--specs", type=int, nargs="+", default=[10, 50, 200])
    parser.add_argument("--layout", choices=LAYOUTS, nargs="+", default=list(LAYOUTS))
    parser.add_argument("--tiny", action="store_true", help="3 specs, both layouts: that it runs")
    parser.add_argument("--airflow-conf", nargs="*", default=[], metavar="SECTION.KEY=VALUE",
                        help="Airflow settings for both layouts, e.g. dag_processor.parsing_processes=8")
    parser.add_argument("--keep", action="store_true", help="keep the Airflow homes (their logs), printed")
    args = parser.parse_args()
    sizes = [3] if args.tiny else args.specs
    conf = {}
    for setting in args.airflow_conf:
        key, _, value = setting.partition("=")
        section, _, name = key.partition(".")
        conf[f"AIRFLOW__{section.upper()}__{name.upper()}"] = value
    with contextlib.ExitStack() as stack:
        work = Path(tempfile.mkdtemp(prefix="dag-parse-"))
        if not args.keep:
            stack.callback(shutil.rmtree, work, True)
        if args.keep:
            print(f"homes under {work}")
        template_db = migrated(work)
        print(f"cores {os.cpu_count()}; load average {os.getloadavg()[0]:.1f}; Airflow settings: "
              + (", ".join(args.airflow_conf) or "defaults (parsing_processes 2, SQLite)"))
        results = {}
        for n in sizes:
            for layout in args.layout:
                first, again = results[layout, n] = parse_twice(work, template_db, n, layout, conf)
                for name, r in (("first parse", first), ("parse again", again)):
                    print(f"{layout}, {n} specs, {name}: loop {r.loop_s:.2f} s; CPU: dag-processor "
                          f"{r.manager_cpu_s:.2f} s, its parse processes {r.files_cpu_s:.2f} s; command "
                          f"{r.command_s:.2f} s")
                    print(f"  files {r.files}, DAGs {r.dags}, import errors {r.import_errors}; per file: sum "
                          f"{r.file_sum_s:.2f} s, slowest {r.file_max_s:.2f} s")
        if ("per-spec", TARGET_SPECS) in results:
            first, again = results["per-spec", TARGET_SPECS]
            for name, r in (("first parse", first), ("parse again", again)):
                verdict = "met" if r.loop_s <= TARGET_S else "missed"
                print(f"target: {TARGET_SPECS} specs, {name}, <= {TARGET_S:.0f} s: {verdict} ({r.loop_s:.2f} s)")

if __name__ == "__main__":
    main()
