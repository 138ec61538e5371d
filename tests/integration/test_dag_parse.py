"""One bad spec hides nothing else, under Airflow's real dag-processor (`airflow dag-processor`, its own
processes, timeouts and bookkeeping): each spec's generated DAG file (provider/dag_files.py) is parsed in a
process of its own, and DAGs and import errors land in Airflow's database, where the scheduler and the UI read
them. `airflow dags reserialize` is no stand-in for it: it parses every file in one process, with no per-file
process or timeout, so a hanging file would hang it all. No broker or Spark: parsing connects to nothing."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import airflow_db
import yaml

from ingest_core.dev.demo import airflow_env

ROOT = Path(__file__).resolve().parents[2]
AIRFLOW = str(Path(sys.executable).parent / "airflow")
EXAMPLE = yaml.safe_load((ROOT / "dags" / "datasources" / "wikipedia.yaml").read_text())


def variant(name: str, **microbatch) -> dict:
    raw = json.loads(json.dumps(EXAMPLE))
    raw["spec"]["dataSchema"]["dataSource"] = name
    raw["microbatch"].update(microbatch)
    return raw


class Airflow:
    def __init__(self, root: Path, dags: Path):
        self.root = root
        self.env = airflow_env(root, "localhost:9", dags_folder=dags)
        airflow_db.migrate(self.env)

    def __call__(self, *args: str) -> str:
        done = subprocess.run([AIRFLOW, *args], env=self.env, capture_output=True, text=True, timeout=600)
        # list-import-errors exits 1 when it lists any
        assert done.returncode == 0 or args[:2] == ("dags", "list-import-errors"), \
            f"airflow {' '.join(args)}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        return done.stdout

    def json(self, *args: str) -> list[dict]:
        out = self(*args, "-o", "json")
        return json.loads(next(line for line in reversed(out.splitlines()) if line.startswith("[")))

    def import_errors(self) -> list[dict]:
        """What `airflow dags list-import-errors -o json` prints ({filepath, error} each), read where it reads it:
        Airflow's database (a CLI process costs seconds of imports)."""
        with sqlite3.connect(self.root / "airflow" / "airflow.db") as db:
            rows = db.execute("select filename, stacktrace from import_error order by id")
            return [{"filepath": filename or "", "error": stacktrace or ""} for filename, stacktrace in rows]

    def stored_dags(self) -> dict[str, tuple[bool, bool]]:
        """{dag_id: (is_stale, has_import_errors)} as the scheduler and the UI see them."""
        with sqlite3.connect(self.root / "airflow" / "airflow.db") as db:
            rows = db.execute("select dag_id, is_stale, has_import_errors from dag")
            return {dag_id: (bool(stale), bool(errors)) for dag_id, stale, errors in rows}


PROCESSOR_DEADLINE_S = 300  # a wait's bound, not a figure: the parse takes seconds


def product_dag_files(dags: Path) -> None:
    for path in (ROOT / "dags").glob("*.py"):
        shutil.copy(path, dags / path.name)


def until(what: str, check, log: Path):
    """Poll Airflow's database until `check()` is truthy (the dag-processor runs on its own)."""
    deadline = time.monotonic() + PROCESSOR_DEADLINE_S
    while time.monotonic() < deadline:
        if got := check():
            return got
        time.sleep(0.5)
    raise AssertionError(f"{what}: not within {PROCESSOR_DEADLINE_S} s; dag-processor log:\n"
                         + log.read_text(errors="replace")[-4000:])


def parsed_times(airflow: Airflow) -> dict[str, str]:
    with sqlite3.connect(airflow.root / "airflow" / "airflow.db") as db:
        return dict(db.execute("select dag_id, last_parsed_time from dag"))


def test_each_spec_parses_alone_under_the_dag_processor_and_a_bad_one_is_its_own_error(tmp_path):
    dags = tmp_path / "dags"
    (dags / "specs" / "team").mkdir(parents=True)
    product_dag_files(dags)
    specs = dags / "specs"
    # back to back: Airflow's continuous timetable (one run at a time)
    (specs / "good_one.yaml").write_text(yaml.safe_dump(variant("good_one", schedule="@continuous")))
    (specs / "team" / "good_two.json").write_text(json.dumps(variant("good_two", schedule="*/10 * * * *")))
    bad_filter = variant("bad_filter")
    bad_filter["spec"]["dataSchema"]["transformSpec"] = {
        "filter": {"type": "bound", "dimension": "added", "lower": "abc", "ordering": "numeric"}}
    (specs / "bad_filter.yaml").write_text(yaml.safe_dump(bad_filter))
    (specs / "bad_cron.yaml").write_text(yaml.safe_dump(variant("bad_cron", schedule="61 * * * *")))
    (specs / "binary.yaml").write_bytes(bytes(range(256)) * 16)
    (specs / "syntax.yaml").write_text("type: kafka\nspec: {dataSchema: [\n")
    (specs / "deep.json").write_bytes(b"[" * 100_000 + b"]" * 100_000)
    bad_props = variant("bad_props")
    bad_props["spec"]["ioConfig"]["consumerProperties"]["ssl.truststore.location"] = "/etc/kafka/truststore.jks"
    (specs / "bad_props.yaml").write_text(yaml.safe_dump(bad_props))
    (specs / "twin.yaml").write_text(yaml.safe_dump(variant("good_one")))  # a second spec for one datasource
    # a 2 KB "billion laughs" (issue 48: it made the one DAG file time out, and every datasource's DAG left
    # Airflow), a spec past the size limit and a 50 MB one: each refused in milliseconds, an error of its own file
    laughs = ['l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]'] + [
        f"l{i}: &l{i} [" + ",".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, 9)]
    bomb = yaml.safe_dump(variant("bomb")).replace("taskDuration: PT10M", "taskDuration: *l8")
    assert "*l8" in bomb
    (specs / "bomb.yaml").write_text("x-laughs:\n  " + "\n  ".join(laughs) + "\n" + bomb)
    (specs / "huge.yaml").write_text(yaml.safe_dump(variant("huge")) + "# " + "x" * (1 << 20) + "\n")
    with (specs / "fifty_mb.yaml").open("w") as f:
        f.write(yaml.safe_dump(variant("fifty_mb")))
        for _ in range(50):
            f.write("# " + "x" * ((1 << 20) - 3) + "\n")
    # a spec whose parse would never end: its protobuf descriptor a named pipe no one writes (a hung mount behaves
    # so). Refused before it is opened; were it not, Airflow's import timeout (10 s here) would end its own file's
    # parse only, as it would any other spec's that hangs
    os.mkfifo(specs / "descriptor.desc")
    pipe = variant("pipe")
    pipe["spec"]["ioConfig"]["inputFormat"] = {"type": "protobuf", "protoBytesDecoder": {
        "type": "file", "descriptor": "descriptor.desc", "protoMessageType": "Metrics"}}
    (specs / "pipe.yaml").write_text(yaml.safe_dump(pipe))
    typo = variant("typo")
    typo["spec"]["ioConfig"]["taskCout"] = 2  # Druid ignores a field it does not know: a warning, the DAG loads
    (specs / "typo.json").write_text(json.dumps(typo, indent="\t"))  # tabs: JSON, not YAML
    # .airflowignore'd: neither a DAG nor an error
    (specs / "drafts").mkdir()
    (specs / "drafts" / "draft.yaml").write_text("not: [a spec\n")
    (specs / "drafts" / "ready.yaml").write_text(yaml.safe_dump(variant("ignored_too")))
    (dags / ".airflowignore").write_text("specs/drafts/\n")
    expected = {
        "bad_filter.yaml": "spec.dataSchema.transformSpec",
        "bad_cron.yaml": "microbatch.schedule: '61 * * * *' is not a valid cron expression",
        "binary.yaml": "not a text file (byte 128 is not UTF-8)",
        "syntax.yaml": "not valid YAML/JSON",
        "deep.json": "nested too deeply",
        "bad_props.yaml": "spec.ioConfig.consumerProperties.ssl.truststore.location: a Java-client setting "
                          "librdkafka does not know: use ssl.ca.location",
        "twin.yaml": "spec.dataSchema.dataSource: 'good_one' is already defined by another spec",
        "bomb.yaml": "YAML aliases (*name) expand to more than 100,000 values",
        "huge.yaml": "a spec may hold at most 1,048,576 bytes",
        "fifty_mb.yaml": "a spec may hold at most 1,048,576 bytes",
        "pipe.yaml": "descriptor 'descriptor.desc' is not a regular file",
    }
    good = {"good_one": (False, False), "good_two": (False, False), "typo": (False, False)}

    # min_file_process_interval 600: no file is parsed again on Airflow's timer while this runs, so a
    # file parsed twice was parsed for a change
    airflow = Airflow(tmp_path, dags)
    airflow.env.update(AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL="600",
                       AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT="10", AIRFLOW__DAG_PROCESSOR__PRINT_STATS_INTERVAL="5")
    log = tmp_path / "dag-processor.log"
    with log.open("wb") as out:
        processor = subprocess.Popen([AIRFLOW, "dag-processor"], env=airflow.env, stdout=out,
                                     stderr=subprocess.STDOUT)
    try:
        def each_file_parsed():
            errors = airflow.import_errors()
            return errors if len(errors) == len(expected) and set(airflow.stored_dags()) >= set(good) else None

        errors = until("each spec's file parsed once", each_file_parsed, log)
        # the scheduler's and the UI's view: neither hidden (stale) nor flagged by the errors of other specs
        assert airflow.stored_dags() == good
        with sqlite3.connect(tmp_path / "airflow" / "airflow.db") as db:
            summaries = dict(db.execute("select dag_id, timetable_summary from dag"))
        assert summaries["good_one"] == "@continuous" and summaries["good_two"] == "*/10 * * * *", summaries
        # each bad spec is the error of its own generated file, which names the spec and the field
        by_file = {e["filepath"]: e["error"] for e in errors}
        for name, says in expected.items():
            text = by_file.get(f".ingest/specs__{name}.py", "")
            assert says in text, (name, by_file)
            assert f"specs/{name}" in text, (name, text)
        assert not any("draft" in f or "ready" in f or "typo" in f for f in by_file), by_file

        # an edited spec: its file is parsed again, and no other
        before = parsed_times(airflow)
        (specs / "team" / "good_two.json").write_text(json.dumps(variant("good_two", schedule="*/5 * * * *")))

        def edited():
            with sqlite3.connect(tmp_path / "airflow" / "airflow.db") as db:
                return dict(db.execute("select dag_id, timetable_summary from dag"))["good_two"] == "*/5 * * * *"

        until("the edited spec's DAG", edited, log)
        after = parsed_times(airflow)
        assert after["good_two"] != before["good_two"]
        assert {k: after[k] for k in ("good_one", "typo")} == {k: before[k] for k in ("good_one", "typo")}

        # a new spec is a new DAG; once the bad specs are gone, so are their errors
        (specs / "team" / "fresh.yaml").write_text(yaml.safe_dump(variant("fresh")))
        for name in expected:
            (specs / name).unlink()
        until("the new spec's DAG, and no import error left",
              lambda: "fresh" in airflow.stored_dags() and not airflow.import_errors(), log)
        assert airflow.stored_dags() == {**good, "fresh": (False, False)}
    finally:
        processor.terminate()
        processor.wait(timeout=60)

    # INGEST_STRICT_SPECS=true: an unknown field is the spec's error, as `ingest validate --strict` says
    airflow.env["INGEST_STRICT_SPECS"] = "true"
    airflow("dags", "reserialize")
    (error,) = airflow.json("dags", "list-import-errors")  # through the CLI once
    assert error["filepath"] == ".ingest/specs__typo.json.py"
    assert "specs/typo.json" in error["error"] and \
        "spec.ioConfig.taskCout: unknown field (did you mean 'taskCount'?)" in error["error"], error
