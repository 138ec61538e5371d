"""Specs as text and files: YAML or JSON (a key given twice refused), `load_spec` and the spec files of a folder."""

from __future__ import annotations

import json
import yaml
from pathlib import Path
from typing import Any

from ingest_core.core.errors import SpecError, SpecProblem
from ingest_core.core.ignore_file import ignore_syntax_from_env, unignored_files
from ingest_core.core.spec.datasource import DatasourceSpec, parse_spec


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML loader that rejects duplicate keys (a silent overwrite hides typos)."""


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    mapping: dict = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in mapping:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark)
        mapping[key] = loader.construct_object(value_node, deep=deep)
    return mapping


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


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


def parse_spec_text(text: str, source: str = "<spec>", *, strict: bool = False, is_json: bool | None = None
                    ) -> DatasourceSpec:
    """`is_json`: read `text` as JSON (a `.json` file: JSON allows what YAML refuses, such as tab indentation),
    else as YAML, which reads JSON too; None: JSON when `source` (a file or URI) ends in `.json`, as a staged spec
    does (JSON parses in a tenth of YAML's time, and every task reads its spec). Either refuses a key given twice
    in one object."""
    if is_json is None:
        is_json = source.lower().endswith(".json")
    try:
        if is_json:
            raw = json.loads(text, object_pairs_hook=_unique_keys)
        else:
            raw = yaml.load(text, Loader=_UniqueKeyLoader)
    except _DuplicateKey as exc:
        raise SpecError(source, [SpecProblem("", f"duplicate key {exc.args[0]!r} in one object: remove one (Druid "
                                             "would silently keep the last)")]) from None
    except json.JSONDecodeError as exc:
        if not exc.doc.strip():
            raw = None
        else:
            raise SpecError(source, [SpecProblem("", f"not valid JSON: {exc.msg} at line {exc.lineno} column "
                                                 f"{exc.colno}")]) from None
    except yaml.YAMLError as exc:
        raise SpecError(source, [SpecProblem("", f"not valid YAML/JSON: {exc}")]) from None
    except RecursionError:
        raise SpecError(source, [SpecProblem("", _TOO_DEEP)]) from None
    if raw is None:
        raise SpecError(source, [SpecProblem("", "the file is empty: a spec needs at least type: kafka and spec "
                                             "(see dags/datasources/wikipedia.yaml)")])
    try:
        return parse_spec(raw, source, strict=strict)
    except RecursionError:
        raise SpecError(source, [SpecProblem("", _TOO_DEEP)]) from None


_TOO_DEEP = ("nested too deeply to read (a spec is a dozen levels deep at most): look for unbalanced or "
             "runaway brackets")


def load_spec(path: str | Path, *, strict: bool = False) -> DatasourceSpec:
    """The spec in file `path` (a `.json` file read as JSON, others as YAML); any file that is not one (binary,
    not UTF-8, empty, unreadable) is a SpecError naming the file and what to do, never another exception.
    `strict`: unknown fields are errors everywhere (`parse_spec`)."""
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
    return parse_spec_text(text.removeprefix("\ufeff"), str(p), strict=strict)


_NOT_TEXT = ("not a text file ({what}): a spec is YAML or JSON saved as UTF-8; if {name} is not a spec, move "
             "it out of the DAG folder or list it in .airflowignore")

SPEC_SUFFIXES = (".yaml", ".yml", ".json")


def find_spec_files(folder: str | Path, ignore_syntax: str | None = None) -> list[Path]:
    """Every .yaml/.yml/.json file under `folder` that its `.airflowignore` files do not exclude, sorted.
    `ignore_syntax` is Airflow's `[core] dag_ignore_file_syntax` (glob or regexp; default: the environment's)."""
    syntax = ignore_syntax or ignore_syntax_from_env()
    return sorted(p for p in unignored_files(folder, syntax) if p.suffix in SPEC_SUFFIXES and p.is_file())
