"""The documentation site builds without a warning (`mkdocs build --strict`: broken links and anchors, pages left
out of the navigation), the README stays a newcomer's page whose links resolve, and the commands the pages give
(`make` targets, `ingest` command lines) are ones that exist and parse."""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys

import pytest
import yaml
from doc_pages import README, ROOT, blocks, pages
from protobuf_fixtures import METRICS_PROTO, compile_proto

from ingest_core.kafka.properties import load_checked_spec
from ingest_core.service.cli import build_parser


def test_the_site_builds_without_warnings(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml"),
         "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    warnings = [line for line in result.stderr.splitlines() if not line.startswith("INFO")]
    assert result.returncode == 0 and not warnings, result.stderr
    assert (tmp_path / "site" / "index.html").exists()


def test_the_readme_is_short_and_its_links_resolve():
    text = README.read_text()
    assert len(text.splitlines()) <= 250, "the README is a newcomer's page: the reference goes into docs/"
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    assert any(link.startswith("docs/") for link in links)
    for link in links:
        if re.match(r"[a-z]+://", link):
            continue
        path = link.split("#")[0]
        assert (ROOT / path).exists(), f"README.md links to {link}, which does not exist"


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, each space a hyphen."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_benchmarks_md_opens_with_a_row_per_benchmark_and_its_section_links_resolve():
    """BENCHMARKS.md opens with the current figures, a row per script under benchmarks/ (a new script without one
    fails here), then the dated history; every section link in it leads to one of its headings."""
    text = (ROOT / "BENCHMARKS.md").read_text()
    headings = re.findall(r"^#{2,} (.+)$", text, flags=re.M)
    assert headings[:2] == ["Current figures", "History (newest first)"], headings[:2]
    rows = [line for line in text.split("\n## History (newest first)\n")[0].splitlines() if line.startswith("| `")]
    for script in sorted((ROOT / "benchmarks").glob("*.py")):
        named = [row for row in rows if row.startswith(f"| `{script.name}")]
        assert named, f"BENCHMARKS.md's table of current figures has no row for benchmarks/{script.name}"
        assert all("](#" in row for row in named), f"a row for {script.name} links to no dated section"
    anchors = {github_anchor(heading) for heading in headings}
    for link in re.findall(r"\]\(#([^)\s]+)\)", text):
        assert link in anchors, f"BENCHMARKS.md links to #{link}, which is no heading of it"


def test_the_make_targets_the_pages_give_exist():
    targets = set(re.findall(r"^([a-z][\w-]*):", (ROOT / "Makefile").read_text(), flags=re.M))
    commands = [(page, line) for page, block in blocks("bash") for line in block.splitlines()
                if line.startswith("make ")]
    assert any(page == README and line.startswith("make demo") for page, line in commands)
    assert any(page == README and line.startswith("make test") for page, line in commands)
    for page, line in commands:
        assert line.split()[1] in targets, f"{page.name}: {line}"


# the placeholders of the command synopses, and a value of the right shape for each
PLACEHOLDERS = {"SPEC_OR_FOLDER": "dags/", "SPEC": "spec.yaml", "DATASOURCE": "wikipedia", "ID": "r1",
                "T": "2026-01-01T00:00:00Z", "N": "3", "S": "5", "TOPIC": "wikipedia", "PARTITION": "0",
                "OFFSET": "42"}


def ingest_argv(line: str) -> list[str] | None:
    """The arguments of an `ingest` command line of a page (`ingest ...`, `.venv/bin/ingest ...`, after variable
    assignments), every optional part taken, the first of alternatives, placeholders filled; None for another
    command."""
    command = re.match(r"^(?:[A-Z_]+=\S+\s+)*(?:\S*/)?ingest\s+(.*)$", line.split("  #")[0].split(" > ")[0].strip())
    if command is None:
        return None
    synopsis = re.sub(r"\[([^\]]*)\]", lambda m: m.group(1).split(" | ")[0], command.group(1))
    argv = []
    for word in shlex.split(synopsis):
        word = word.removesuffix("...").split("|")[0]
        if not word.startswith(("-", "SELECT")):
            word = re.sub(r"\b[A-Z][A-Z_]*\b", lambda m: PLACEHOLDERS.get(m.group(0), m.group(0)), word)
        argv.append(word)
    return argv


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def test_every_ingest_command_line_of_the_pages_parses():
    parser = build_parser()
    for sub in (parser, *subcommands(parser).values()):
        sub.allow_abbrev = False  # a page must spell an option as it is, not a prefix argparse would accept
    lines = [(page, line) for page, block in blocks("bash") for line in block.splitlines()]
    parsed = 0
    for page, line in lines:
        argv = ingest_argv(line)
        if argv is None:
            continue
        try:
            args = parser.parse_args(argv)
        except SystemExit:
            pytest.fail(f"{page.name}: `{line.strip()}` does not parse as {argv}")
        assert args.command == argv[0]
        parsed += 1
    assert parsed >= 20


def test_every_ingest_command_and_option_is_documented():
    text = "\n".join(page.read_text() for page in pages())
    for name, sub in subcommands(build_parser()).items():
        assert re.search(rf"\bingest {re.escape(name)}\b", text), f"`ingest {name}` is not in the docs"
        for action in sub._actions:
            options = [o for o in action.option_strings if o not in ("-h", "--help")]
            assert not options or any(re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", text) for o in options), \
                f"`ingest {name} {' / '.join(options)}` is not in the docs"


# where a spec fragment of a page goes in a Kafka supervisor spec, by its one top-level key (a Protobuf decoder goes
# into a protobuf inputFormat)
FRAGMENT_PLACES = {"compaction": (), "dimensionsSpec": ("spec", "dataSchema"), "inputFormat": ("spec", "ioConfig"),
                   "protoBytesDecoder": ("spec", "ioConfig")}


def spec_fragments(descriptor_url: str) -> list[tuple[str, dict]]:
    """The YAML documents and JSON members of the pages whose one key is a spec section; the descriptor file the
    Protobuf page names is `descriptor_url`."""
    found = [(page.name, doc) for page, block in blocks("yaml") for doc in yaml.safe_load_all(block)]
    for page, block in blocks("json"):
        text = block.replace("file:///tmp/metrics.desc", descriptor_url)
        found.append((page.name, json.loads(text if text.lstrip().startswith("{") else "{" + text + "}")))
    return [(name, doc) for name, doc in found
            if isinstance(doc, dict) and len(doc) == 1 and next(iter(doc)) in FRAGMENT_PLACES]


def test_the_spec_fragments_of_the_pages_load(tmp_path):
    """Each fragment, put where it goes in the example spec, passes `ingest validate --strict` (Druid's example
    message compiled as the descriptor file the Protobuf page names)."""
    descriptor, _ = compile_proto(tmp_path / "proto", "metrics", METRICS_PROTO)
    fragments = spec_fragments(descriptor.as_uri())
    assert {key for _, doc in fragments for key in doc} == set(FRAGMENT_PLACES)
    for i, (page, fragment) in enumerate(fragments):
        raw = yaml.safe_load((ROOT / "dags" / "datasources" / "wikipedia.yaml").read_text())
        ((key, value),) = fragment.items()
        place = raw
        for name in FRAGMENT_PLACES[key]:
            place = place[name]
        if key == "protoBytesDecoder":
            key, value = "inputFormat", {"type": "protobuf", key: value}
        place[key] = value
        path = tmp_path / f"fragment-{i}.yaml"
        path.write_text(yaml.safe_dump(raw))
        try:
            load_checked_spec(path, strict=True)
        except Exception as e:
            pytest.fail(f"{page}: the fragment {json.dumps(fragment)[:200]} does not load: {e}")


def test_the_function_reference_of_the_expressions_page_is_the_registrys():
    """docs/expressions.md's function tables are printed from the registry (`python -m
    ingest_core.dev.expression_docs` rewrites them): a function added, renamed or given an example shows there."""
    from ingest_core.dev import expression_docs

    page = (ROOT / "docs" / "expressions.md").read_text()
    assert expression_docs.current(page) is not None, "docs/expressions.md has no generated function reference"
    assert expression_docs.current(page) == expression_docs.render(), \
        "docs/expressions.md's function reference differs from the registry: run " \
        "python -m ingest_core.dev.expression_docs"


def test_the_metadata_store_page_lists_every_schema_revision():
    """docs/metadata-store.md's table has one row per revision the package ships, in order."""
    from ingest_core.store.migrations import history

    text = (ROOT / "docs" / "metadata-store.md").read_text()
    assert tuple(re.findall(r"^\| (\d{4}) \|", text, flags=re.M)) == history.shipped()
