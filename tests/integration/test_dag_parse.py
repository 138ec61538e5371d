"""One bad spec hides nothing else, through Airflow's real DAG processing: `airflow dags reserialize`
parses the DAG folder as the dag processor does and stores DAGs and import errors in Airflow's database, where
the scheduler and the UI read them. No broker or Spark: parsing a DAG file connects to nothing."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
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


def test_each_bad_spec_is_an_import_error_naming_its_field_and_every_good_dag_stays(tmp_path):
    dags = tmp_path / "dags"
    (dags / "specs" / "team").mkdir(parents=True)
    for name in ("ingest_datasources.py", "ingest_spec_errors.py"):
        shutil.copy(ROOT / "dags" / name, dags / name)
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
    # Airflow) and a spec past the size limit: each refused in milliseconds, an error of its own file
    laughs = ['l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]'] + [
        f"l{i}: &l{i} [" + ",".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, 9)]
    bomb = yaml.safe_dump(variant("bomb")).replace("taskDuration: PT10M", "taskDuration: *l8")
    assert "*l8" in bomb
    (specs / "bomb.yaml").write_text("x-laughs:\n  " + "\n  ".join(laughs) + "\n" + bomb)
    (specs / "huge.yaml").write_text(yaml.safe_dump(variant("huge")) + "# " + "x" * (1 << 20) + "\n")
    typo = variant("typo")
    typo["spec"]["ioConfig"]["taskCout"] = 2  # Druid ignores a field it does not know: a warning, the DAG loads
    (specs / "typo.json").write_text(json.dumps(typo, indent="\t"))  # tabs: JSON, not YAML
    # .airflowignore'd: neither a DAG nor an error
    (specs / "drafts").mkdir()
    (specs / "drafts" / "draft.yaml").write_text("not: [a spec\n")
    (specs / "drafts" / "ready.yaml").write_text(yaml.safe_dump(variant("ignored_too")))
    (dags / ".airflowignore").write_text("specs/drafts/\n")

    airflow = Airflow(tmp_path, dags)
    airflow("dags", "reserialize")

    # the scheduler's and the UI's view (`airflow dags list`'s too): neither hidden (stale) nor flagged by the
    # errors of other specs
    assert airflow.stored_dags() == {"good_one": (False, False), "good_two": (False, False), "typo": (False, False)}
    with sqlite3.connect(tmp_path / "airflow" / "airflow.db") as db:
        summaries = dict(db.execute("select dag_id, timetable_summary from dag"))
    assert summaries["good_one"] == "@continuous" and summaries["good_two"] == "*/10 * * * *", summaries
    errors = airflow.json("dags", "list-import-errors")  # once through the CLI, after this from its database
    assert [{k: e[k] for k in ("filepath", "error")} for e in errors] == airflow.import_errors()
    assert [e["filepath"] for e in errors] == ["ingest_spec_errors.py"]
    text = errors[0]["error"]
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
    }
    blocks = {Path(block.split(":")[0]).name: block for block in text.split("\n/") if ".yaml:" in block
              or ".json:" in block}
    for name, says in expected.items():
        assert name in blocks and says in blocks[name], (name, text)
    assert "9 datasource specs do not load" in text
    assert "draft" not in text and "ignored_too" not in text and "typo.json" not in text

    # once every spec loads again, Airflow clears the error on the next parse
    for name in expected:
        (specs / name).unlink()
    airflow("dags", "reserialize")
    assert airflow.import_errors() == []
    assert airflow.stored_dags() == {"good_one": (False, False), "good_two": (False, False), "typo": (False, False)}

    # INGEST_STRICT_SPECS=true: an unknown field is the spec's error, as `ingest validate --strict` says
    airflow.env["INGEST_STRICT_SPECS"] = "true"
    airflow("dags", "reserialize")
    (error,) = airflow.import_errors()
    assert "typo.json" in error["error"] and "spec.ioConfig.taskCout: unknown field (did you mean 'taskCount'?)" \
        in error["error"], error
