"""Specs as text and files: YAML or JSON (a key given twice refused), `load_spec` and the spec files of a folder."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

from ingest_core.core.errors import SpecError, SpecProblem, shown
from ingest_core.core.ignore_file import ignore_syntax_from_env, unignored_files
from ingest_core.core.spec.datasource import DatasourceSpec, parse_spec


MAX_SPEC_BYTES = 1 << 20  # a Druid spec is kilobytes; YAML reads about 0.6 MB/s, and every DAG parse reads them all
MAX_SPEC_NODES = 100_000  # values once YAML's aliases are expanded: a spec holds hundreds


class _SpecLoader(yaml.SafeLoader):
    """YAML as a spec is read: merge keys (`<<: *defaults`) as plain YAML reads them, a key written twice in one
    mapping refused (a silent overwrite hides typos), and aliases expanded within a bound (`_expanded_size`)."""


def _construct_mapping(loader: _SpecLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    written: set = set()
    for key_node, _ in node.value:  # the keys written here; a merged key may be overridden, as YAML allows
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=deep)
        try:
            if key in written:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {shown(key)}",
                                                        key_node.start_mark)
            written.add(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(None, None, f"a key must be a name, got {shown(key)}",
                                                    key_node.start_mark) from None
    loader.flatten_mapping(node)  # merged pairs first, then the written ones: the written value wins
    return {loader.construct_object(k, deep=deep): loader.construct_object(v, deep=deep) for k, v in node.value}


_SpecLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


class _AliasBomb(ValueError):
    pass


def _expanded_size(root: yaml.Node, limit: int) -> int:
    """How many values the document holds with every alias expanded, counted without expanding (each node once,
    shared nodes by their size). Past `limit`, or an alias inside its own anchor, raises `_AliasBomb`: PyYAML
    shares an aliased value, but every reader after it (the spec binding, an error echoing it) walks it whole."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:  # iterative: depth is bounded elsewhere (RecursionError), not here
        node, children_done = stack.pop()
        key = id(node)
        if key in sizes:
            continue
        children = ([n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode)
                    else node.value if isinstance(node, yaml.SequenceNode) else [])
        if not children_done:
            if key in open_nodes:
                raise _AliasBomb("an alias (*name) refers to a value that contains it: YAML's aliases cannot nest "
                                 "themselves")
            open_nodes.add(key)
            stack.append((node, True))
            stack.extend((child, False) for child in children if id(child) not in sizes)
            continue
        open_nodes.discard(key)
        sizes[key] = 1 + sum(sizes[id(child)] for child in children)
        if sizes[key] > limit:
            raise _AliasBomb(f"YAML aliases (*name) expand to more than {limit:,} values (a spec holds hundreds): "
                             "write the values out, or reuse fewer of them")
    return sizes[id(root)]


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object, refusing a key given twice (a silent overwrite hides typos; Druid keeps the last)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


class _DuplicateKey(ValueError):
    pass


def read_spec_document(text: str, source: str = "<spec>", *, is_json: bool | None = None) -> Any:
    """The document in `text`, as JSON or YAML, before any spec field is read (None: an empty document).
    `is_json`: read `text` as JSON (a `.json` file: JSON allows what YAML refuses, such as tab indentation),
    else as YAML, which reads JSON too; None: JSON when `source` (a file or URI) ends in `.json`, as a staged spec
    does (JSON parses in a tenth of YAML's time, and every task reads its spec). Either refuses a key given twice
    in one object; a text over MAX_SPEC_BYTES and YAML over MAX_SPEC_NODES values are refused before reading on."""
    if is_json is None:
        is_json = source.lower().endswith(".json")
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_SPEC_BYTES:
        raise SpecError(source, [SpecProblem("", f"{size:,} bytes: a spec may hold at most {MAX_SPEC_BYTES:,} "
                                             "bytes (MAX_SPEC_BYTES); a Druid spec is a few kilobytes, so look for "
                                             "a pasted file or generated values")])
    try:
        if is_json:
            return json.loads(text, object_pairs_hook=_unique_keys)
        loader = _SpecLoader(text)
        try:
            node = loader.get_single_node()
            if node is None:
                return None
            _expanded_size(node, MAX_SPEC_NODES)
            return loader.construct_document(node)
        finally:
            loader.dispose()
    except _AliasBomb as exc:
        raise SpecError(source, [SpecProblem("", str(exc))]) from None
    except _DuplicateKey as exc:
        raise SpecError(source, [SpecProblem("", f"duplicate key {shown(exc.args[0])} in one object: remove one "
                                             "(Druid would silently keep the last)")]) from None
    except json.JSONDecodeError as exc:
        if not exc.doc.strip():
            return None
        raise SpecError(source, [SpecProblem("", f"not valid JSON: {exc.msg} at line {exc.lineno} column "
                                             f"{exc.colno}")]) from None
    except yaml.YAMLError as exc:
        raise SpecError(source, [SpecProblem("", f"not valid YAML/JSON: {exc}")]) from None
    except RecursionError:
        raise SpecError(source, [SpecProblem("", _TOO_DEEP)]) from None
    except ValueError:  # the one left, from either reader: an integer past Python's limit for reading digits
        raise SpecError(source, [SpecProblem("", f"a number of more than {sys.get_int_max_str_digits():,} digits: "
                                             "a spec's numbers are counts, sizes and durations")]) from None


def parse_spec_text(text: str, source: str = "<spec>", *, strict: bool = False, is_json: bool | None = None
                    ) -> DatasourceSpec:
    """The spec in `text` (`read_spec_document`), every field checked (`parse_spec`)."""
    raw = read_spec_document(text, source, is_json=is_json)
    if raw is None:
        raise SpecError(source, [SpecProblem("", "the file is empty: a spec needs at least type: kafka and spec "
                                             "(see dags/datasources/wikipedia.yaml)")])
    try:
        return parse_spec(raw, source, strict=strict)
    except RecursionError:
        raise SpecError(source, [SpecProblem("", _TOO_DEEP)]) from None


_TOO_DEEP = ("nested too deeply to read (a spec is a dozen levels deep at most): look for unbalanced or "
             "runaway brackets")


def read_spec_file(path: str | Path) -> tuple[Path, str]:
    """The text of spec file `path`; any file that is not one (binary, not UTF-8, unreadable) is a SpecError
    naming the file and what to do, never another exception."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise SpecError(str(p), [SpecProblem("", f"cannot read file: {exc.strerror or exc}")]) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(str(p), [SpecProblem("", _NOT_TEXT.format(
            what=f"byte {exc.start} is not UTF-8", name=p.name))]) from None
    if "\x00" in text:
        raise SpecError(str(p), [SpecProblem("", _NOT_TEXT.format(
            what=f"byte {text.index(chr(0))} is a NUL", name=p.name))]) from None
    return p, text.removeprefix("\ufeff")


def load_spec(path: str | Path, *, strict: bool = False) -> DatasourceSpec:
    """The spec in file `path` (a `.json` file read as JSON, others as YAML); any file that is not one (binary,
    not UTF-8, empty, unreadable, too large) is a SpecError naming the file and what to do, never another exception.
    `strict`: unknown fields are errors everywhere (`parse_spec`)."""
    p, text = read_spec_file(path)
    return parse_spec_text(text, str(p), strict=strict)


_NOT_TEXT = ("not a text file ({what}): a spec is YAML or JSON saved as UTF-8; if {name} is not a spec, move "
             "it out of the DAG folder or list it in .airflowignore")

SPEC_SUFFIXES = (".yaml", ".yml", ".json")


def find_spec_files(folder: str | Path, ignore_syntax: str | None = None) -> list[Path]:
    """Every .yaml/.yml/.json file under `folder` that its `.airflowignore` files do not exclude, sorted.
    `ignore_syntax` is Airflow's `[core] dag_ignore_file_syntax` (glob or regexp; default: the environment's)."""
    syntax = ignore_syntax or ignore_syntax_from_env()
    return sorted(p for p in unignored_files(folder, syntax) if p.suffix in SPEC_SUFFIXES and p.is_file())
