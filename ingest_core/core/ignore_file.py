""".airflowignore, as Airflow reads it, so spec discovery skips what Airflow's DAG discovery skips.

Airflow's rules (airflow._shared.module_loading.file_discovery, Airflow 3.3), redone here because core must
not import Airflow; tests/unit/test_ignore_file.py checks both agree on the same folder:
  - every folder may hold an `.airflowignore`; its patterns apply to that folder and everything below it;
  - `[core] dag_ignore_file_syntax = glob` (the default): gitignore patterns (`!` negates, a trailing `/`
    matches folders only, a pattern with a `/` is relative to the ignore file's folder);
  - `regexp`: each line is an unanchored regular expression searched in the path relative to the DAG folder;
  - `#` starts a comment; invalid patterns are skipped.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from pathspec.patterns import GitWildMatchPattern

IGNORE_FILE = ".airflowignore"
SYNTAXES = ("glob", "regexp")
SYNTAX_ENV = "AIRFLOW__CORE__DAG_IGNORE_FILE_SYNTAX"


@dataclass(frozen=True)
class _Rule:
    syntax: str
    regexp: re.Pattern | None = None  # regexp syntax
    glob: GitWildMatchPattern | None = None  # glob syntax
    relative_to: Path | None = None  # glob: anchored at the ignore file's folder; else matched on the name
    dir_only: bool = False


def _compile(pattern: str, syntax: str, base: Path, ignore_file: Path) -> _Rule | None:
    if syntax == "regexp":
        try:
            return _Rule(syntax, regexp=re.compile(pattern), relative_to=base)
        except re.error:
            return None
    if pattern.strip() == "/":
        return None
    anchored = pattern.startswith("/") or "/" in pattern.rstrip("/")
    raw = pattern.lstrip("!")
    return _Rule(syntax, glob=GitWildMatchPattern(pattern), relative_to=ignore_file.parent if anchored else None,
                 dir_only=raw.rstrip() != raw.rstrip().rstrip("/"))


def _ignored(path: Path, rules: list[_Rule]) -> bool:
    matched = False
    for rule in rules:
        if rule.regexp is not None:
            if rule.regexp.search(str(path.relative_to(rule.relative_to))):
                return True
            continue
        is_dir = path.is_dir()
        if rule.dir_only and not is_dir:
            continue
        rel = path.relative_to(rule.relative_to).as_posix() if rule.relative_to else path.name
        if rule.glob.include is not None and rule.glob.match_file(rel + ("/" if is_dir else "")) is not None:
            matched = rule.glob.include  # later patterns override earlier ones (negation)
    return matched


def ignore_syntax_from_env() -> str:
    return os.environ.get(SYNTAX_ENV, "glob").strip().lower() or "glob"


def unignored_files(folder: str | Path, syntax: str = "glob") -> Iterator[Path]:
    """Every file under `folder` that its `.airflowignore` files do not exclude (symlinked folders followed)."""
    if syntax not in SYNTAXES:
        raise ValueError(f"unsupported [core] dag_ignore_file_syntax {syntax!r}: use glob or regexp")
    base = Path(folder)
    rules_by_dir: dict[Path, list[_Rule]] = {}
    for root, dirs, files in os.walk(base, followlinks=True):
        rules = list(rules_by_dir.get(Path(root).resolve(), []))
        ignore_file = Path(root) / IGNORE_FILE
        if ignore_file.is_file():
            for line in ignore_file.read_text(errors="replace").split("\n"):
                pattern = re.sub(r"\s*#.*", "", line)
                rule = _compile(pattern, syntax, base, ignore_file) if pattern else None
                if rule is not None:
                    rules.append(rule)
        kept = []
        for d in sorted(d for d in dirs if not _ignored(Path(root) / d, rules)):
            resolved = (Path(root) / d).resolve()
            if resolved not in rules_by_dir:  # else a symlink loop (Airflow refuses it): walked once only
                rules_by_dir[resolved] = list(rules)
                kept.append(d)
        dirs[:] = kept
        for name in files:
            if name != IGNORE_FILE and not _ignored(Path(root) / name, rules):
                yield Path(root) / name
