"""Benchmark: the DAG folder's parse by Airflow's real dag-processor, for N datasource specs (target: 200 specs
in at most 10 s in all, issue 48).

Two layouts of the same specs, each in a fresh Airflow home, parsed once by `airflow dag-processor --num-runs 1`
(every DAG file parsed once, then it exits):
- per-spec: the product's DAG folder: a generated DAG file per spec (provider/dag_files.py), kept in step by
  the `dags-folder` bundle SpecDagBundle (provider/spec_bundle.py); each file is its own process;
- one file: the layout before issue 48, one DAG file building every DAG (`dag_factory.load_dags`), as
  dags/ingest_datasources.py did, under Airflow's default bundle.
Each layout is parsed twice: first with every DAG new to Airflow's database (written), then again with every
DAG known and unchanged (what each later parse costs). Figures, from Airflow itself: the parse loop (the
dag-processor's log, from its search for files to "all files have been processed"), each file's parse duration
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
from datetime import datetime
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
    """One `airflow dag-processor --num-runs 1` in `home`: each DAG file parsed once."""
    log = home / "dag-processor.log"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    with log.open("wb") as out:
        proc = psutil.Popen([AIRFLOW, "dag-processor", "--num-runs", "1"], env=env, stdout=out,
                            stderr=subprocess.STDOUT)
        cpu = proc.cpu_times()
        deadline = time.monotonic() + DEADLINE_S
        while proc.poll() is None:  # the manager's own CPU (the rest of the total: its parse processes')
            with contextlib.suppress(psutil.Error):
                cpu = proc.cpu_times()
            if time.monotonic() > deadline:
                proc.kill()
            time.sleep(0.1)
    command_s = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the dag-processor and every process it reaped
    total_cpu_s = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    text = log.read_text(errors="replace")
    if proc.returncode != 0:
        sys.exit(f"airflow dag-processor exited {proc.returncode}:\n{text[-3000:]}")
    with sqlite3.connect(home / "airflow" / "airflow.db") as db:
        per_file = dict(db.execute("select fileloc, max(last_parse_duration) from dag group by fileloc"))
        dags = db.execute("select count(*) from dag where not is_stale").fetchone()[0]
        errors = db.execute("select count(*) from import_error").fetchone()[0]
        error_text = [e for (e,) in db.execute("select stacktrace from import_error limit 3")]
    if dags != n:
        sys.exit(f"{home.name}: {dags} DAGs stored, not {n}; import errors: {error_text}\n{text[-3000:]}")
    return Parse(loop_s=_loop_seconds(text), command_s=command_s, manager_cpu_s=cpu.user + cpu.system,
                 files_cpu_s=max(0.0, total_cpu_s - cpu.user - cpu.system), files=len(per_file),
                 file_sum_s=sum(per_file.values()), file_max_s=max(per_file.values(), default=0), dags=dags,
                 import_errors=errors)


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


def _loop_seconds(text: str) -> float:
    """From the dag-processor's first search for files to its "all files have been processed" line."""
    start = end = None
    for line in text.splitlines():
        stamp = _STAMP.match(line)
        if not stamp:
            continue
        if start is None and "Searching for files" in line:
            start = datetime.fromisoformat(stamp.group(1))
        if "all files have been processed" in line:
            end = datetime.fromisoformat(stamp.group(1))
    if start is None or end is None:
        sys.exit("the dag-processor's log lacks its search or its end line:\n" + text[-3000:])
    return (end - start).total_seconds()


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
