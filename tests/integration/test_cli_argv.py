"""The `ingest` command line under generated argv (Hypothesis): the commands that take a datasource, with offset
specs, datasource names, counts and options as an operator (or a script's empty variable) may type them, bytes that
are not UTF-8 included (decoded as Python decodes a real argv). Every answer is exit 0, or exit 1 or 2 with one
line on stderr (`health`: exit 1 is its answer, unhealthy); never a traceback; and a command that fails changes
nothing in the metadata store. Against the real broker and PostgreSQL; the CLI runs in this process (as
tests/system/test_dag.py's `ingest()` does), so an example costs milliseconds, not a Python start."""

from __future__ import annotations

import contextlib
import io
import json
import os

import pytest
import sqlalchemy as sa
import yaml
from helpers import spec_from
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingest_core.service import cli
from ingest_core.store.publisher import GroupResult, Publisher
from ingest_core.store.schema import meta
from ingest_core.supervisor.planning import Supervisor

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]

NAME = "argv"
# not `terminate`: every later example would meet a terminated datasource (tests/integration/test_offset_safety.py
# has its refusals)
ACTIONS = ("set-offsets", "reset", "suspend", "resume", "skip")
COMMANDS = (*ACTIONS, "status", "health", "segments", "dead-letters")
SCHEMA = {"timestampSpec": {"column": "ts", "format": "millis"}, "dimensionsSpec": {"dimensions": ["page"]},
          "granularitySpec": {"segmentGranularity": "HOUR", "queryGranularity": "NONE", "rollup": False}}
# what a number may be typed as: ASCII digits, and what int() or str.isdigit() also take (², ٣, 1_0, " 3")
NUMBERS = ["0", "1", "7", "29", "30", "31", "100", "-1", "--5", "-0", "+5", "²", "٣", "١٢", "1_0", " 3", "3 ",
           "1e3", "0x1f", "00", str(2**31), str(2**63), str(2**70), "9" * 40, "", "nan", "latest", "earliest", "Latest"]


def argv_decoded(raw: bytes) -> str:
    """`raw` as Python's argv holds it (undecodable bytes as surrogate escapes); argv never holds NUL."""
    return os.fsdecode(raw.replace(b"\0", b""))


# each command's own options (flag, or flag and the kind of value it takes); any other is a usage error
OPTIONS = {"set-offsets": ["--force", "--yes", ("--confirm-duplicates", "n"), ("--confirm-skip", "n"),
                           ("--actor", "t")],
           "reset": ["--yes", "--to-latest", "--backfill", ("--confirm-duplicates", "n"), ("--confirm-skip", "n")],
           "suspend": [("--actor", "t")], "resume": [("--actor", "t")], "skip": ["--yes"],
           "status": ["--json"], "health": [], "segments": ["--all", "--json"],
           "dead-letters": ["--json", ("--run", "t"), ("--limit", "n")]}
FOREIGN = ["--all", "--to-latest", "--json", ("--limit", "n"), ("--run", "t"), ("--nope", "t"), "-y"]


def strategies(topic: str):
    numbers = st.one_of(st.sampled_from(NUMBERS), st.integers(-3, 70).map(str))
    text = st.one_of(st.text(max_size=12).map(lambda s: s.replace("\0", "")), st.binary(max_size=12).map(argv_decoded))
    values = {"n": st.one_of(numbers, numbers, text), "t": st.one_of(text, numbers)}
    topics = st.one_of(st.just(topic), st.just(topic), st.sampled_from(["", "nosuch", "a b", "t:0", f"{topic}:",
                                                                        "x" * 300]), text)
    partitions = st.one_of(st.sampled_from(["0", "1"]), numbers)
    valid = st.builds(lambda t, p, v: f"{t}:{p}={v}", st.just(topic), st.sampled_from(["0", "1"]),
                      st.one_of(st.sampled_from(["earliest", "latest"]), st.integers(0, 70).map(str)))
    offset_spec = st.one_of(
        valid, valid, valid,
        st.builds(lambda t, p, v: f"{t}:{p}={v}", topics, partitions, numbers),
        st.builds(lambda t, v: f"{t}={v}", topics, numbers),
        st.builds(lambda t, p: f"{t}:{p}", topics, numbers),
        text)
    names = st.one_of(st.just(NAME), st.just(NAME), st.just(NAME), st.sampled_from(["", "ARGV", "argv ", "x" * 300]),
                      text)

    def option(choice) -> st.SearchStrategy:
        return st.just([choice]) if isinstance(choice, str) else values[choice[1]].map(lambda v: [choice[0], v])

    @st.composite
    def argv(draw) -> list[str]:
        command = draw(st.sampled_from(COMMANDS))
        out = [command, draw(names)]
        if command == "set-offsets":
            out += draw(st.lists(offset_spec, min_size=draw(st.sampled_from([0, 1, 1, 1])), max_size=3))
        if "--yes" in OPTIONS[command] and draw(st.booleans()):
            out.append("--yes")
        own = OPTIONS[command]
        for _ in range(draw(st.integers(0, 3))):
            pool = own if own and draw(st.integers(0, 5)) else FOREIGN  # now and then one it does not take
            out += draw(option(draw(st.sampled_from(pool))))
        return out + (["--no-airflow"] if command in ACTIONS else [])

    return argv()


def snapshot(store) -> dict[str, list[str]]:
    """Every row of every table of the metadata store."""
    with store.engine.connect() as conn:
        return {t.name: sorted(json.dumps(dict(r), default=str, sort_keys=True)
                               for r in conn.execute(sa.select(t)).mappings()) for t in meta.sorted_tables}


def ingest(*argv: str) -> tuple[int, str]:
    """`ingest ARGV` in this process: its exit code (argparse's SystemExit included) and its stderr."""
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        try:
            code = cli.main(list(argv))
        except SystemExit as exc:
            code = exc.code
    return code, err.getvalue()


def test_generated_argv_gets_exit_0_or_one_line_and_a_failed_command_changes_nothing(broker, pg_url, pg_store,
                                                                                      tmp_path, monkeypatch):
    topic = broker.create_topic(partitions=2)
    for p in (0, 1):
        broker.produce(topic, [json.dumps({"ts": 1_790_000_000_000 + i, "page": "p"}).encode() for i in range(30)],
                       partition=p)
    spec = spec_from(broker.bootstrap, topic, SCHEMA, datasource=NAME)
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / f"{NAME}.yaml").write_text(yaml.safe_dump(spec.to_raw()))
    supervisor = Supervisor(spec, pg_store)
    supervisor.register()
    plan = supervisor.plan("r1").plan
    Publisher(pg_store).publish(NAME, "r1", [GroupResult(g.group_id, []) for g in plan.groups])
    monkeypatch.setenv("INGEST_METADATA_URL", pg_url)
    monkeypatch.setenv("AIRFLOW__CORE__DAGS_FOLDER", str(dags))
    monkeypatch.setenv("INGEST_ACTOR", "hypothesis")
    monkeypatch.setattr("sys.stdin", io.StringIO(""))  # no terminal: nothing is typed at a prompt

    @settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
    @given(strategies(topic))
    def check(argv: list[str]) -> None:
        before = snapshot(pg_store)
        code, err = ingest(*argv)
        assert "Traceback" not in err, (argv, err)
        assert code in (0, 1, 2), (argv, code, err)
        if code:
            verdict = argv[0] == "health" and code == 1 and not err  # `health`'s answer: unhealthy, on stdout
            assert verdict or len(err.strip().splitlines()) == 1, (argv, code, err)
            assert snapshot(pg_store) == before, (argv, code, err)

    check()
